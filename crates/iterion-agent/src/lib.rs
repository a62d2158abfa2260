//! iterion-agent: everything that runs an agent, judge or LLM-router node
//! on a backend, and nothing about the run around it.
//!
//! It owns: the backend resolver ([`backend::resolve_backend`], node →
//! workflow default → `ITERION_DEFAULT_BACKEND` → detected credentials →
//! `claw`), provider credentials ([`credentials`]: collected from an
//! explicit environment snapshot, forwarded on an exec's env only), the
//! claw loop ([`claw`]) with its provider clients ([`provider`]: Anthropic
//! Messages and OpenAI chat completions, streaming or not), the tool
//! placement table and built-in tools ([`tools`]), the in-box runner and
//! its stdio protocol ([`runner`]), and the `claude_code` adapter
//! ([`claude_code`]).
//!
//! It does not own the run: the engine renders prompts, decides the
//! sandbox, persists events and routes edges. The engine hands
//! [`run_agent`] a rendered [`AgentTask`] and a [`Placement`], and gets a
//! typed [`AgentOutcome`] or [`AgentError`] plus a stream of
//! [`iterion_core::EventKind`] values. It talks to a sandbox only through
//! [`iterion_core::SandboxRun`].

pub mod agent;
pub mod backend;
pub mod claude_code;
pub mod claw;
pub mod credentials;
pub mod dispatch;
pub mod env;
pub mod error;
pub mod events;
pub mod http;
pub mod interaction;
pub mod mcp;
pub mod model;
pub mod process;
pub mod provider;
pub mod runner;
pub mod schema;
pub mod seam;
pub mod task;
pub mod tool_node;
pub mod tools;

pub use agent::{AgentContext, AgentPlacement, drive_runner_session, preflight, run_agent};
pub use backend::{
    BackendInputs, BackendName, BackendSource, HostFacts, ResolvedBackend, resolve_backend,
};
pub use credentials::{ProviderCredentials, Redactor};
pub use dispatch::LauncherTools;
pub use env::EnvSnapshot;
pub use error::AgentError;
pub use events::{AgentEventSink, NullSink};
pub use seam::AgentBackends;
pub use task::{AgentOutcome, AgentTask, BudgetSpec, RetrySettings, SessionSpec};
