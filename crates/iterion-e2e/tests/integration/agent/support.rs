//! Shared fixtures: an event recorder, env snapshots pointing at the
//! scripted provider, fast retry settings.

use std::sync::Mutex;

use iterion_agent::backend::HostFacts;
use iterion_agent::{
    AgentContext, AgentError, AgentEventSink, AgentOutcome, AgentPlacement, AgentTask, BackendName,
    EnvSnapshot, RetrySettings, run_agent,
};
use iterion_core::EventKind;
use iterion_testkit::provider::ScriptedProvider;
use tokio_util::sync::CancellationToken;

pub const ANTHROPIC_KEY: &str = "sk-ant-api03-test-key-0001";
pub const OPENAI_KEY: &str = "sk-openai-test-key-0002";

#[derive(Default)]
pub struct Events(pub Mutex<Vec<EventKind>>);

impl AgentEventSink for Events {
    fn emit(&self, event: EventKind) {
        self.0.lock().unwrap().push(event);
    }
}

impl Events {
    pub fn names(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().iter().map(EventKind::name).collect()
    }

    pub fn all(&self) -> Vec<EventKind> {
        self.0.lock().unwrap().clone()
    }

    pub fn count(&self, name: &str) -> usize {
        self.names().iter().filter(|n| **n == name).count()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    pub fn model(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic/claude-sonnet-4-6",
            Self::OpenAi => "openai/gpt-4o-mini",
        }
    }
}

/// A host env snapshot that points the wire's provider at `p`.
pub fn env_for(p: &ScriptedProvider, wire: Wire) -> EnvSnapshot {
    let env = EnvSnapshot::new().with("PATH", std::env::var("PATH").unwrap_or_default());
    match wire {
        Wire::Anthropic => env
            .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .with("ANTHROPIC_BASE_URL", p.url()),
        Wire::OpenAi => env
            .with("OPENAI_API_KEY", OPENAI_KEY)
            .with("OPENAI_BASE_URL", format!("{}/v1", p.url())),
    }
}

pub fn task(wire: Wire, prompt: &str) -> AgentTask {
    let mut t = AgentTask::new("agent_node", prompt);
    t.model = Some(wire.model().to_owned());
    t.retry = RetrySettings {
        max_attempts: 3,
        backoff_base_ms: 5,
    };
    t
}

pub fn ctx<'a>(env: &'a EnvSnapshot, events: &'a Events) -> AgentContext<'a> {
    AgentContext {
        env,
        facts: HostFacts::default(),
        sink: events,
        launcher: None,
        cli_mcp: None,
        cancel: CancellationToken::new(),
    }
}

/// One claw node run on the host against a scripted provider.
pub struct HostRun {
    /// Its workspace (kept alive for inspection).
    pub ws: tempfile::TempDir,
    /// Its events.
    pub events: Events,
    /// Its end.
    pub result: Result<AgentOutcome, AgentError>,
}

/// Run `t` as a claw node on the host, its provider at `p`.
pub async fn claw_on_host(p: &ScriptedProvider, wire: Wire, t: &AgentTask) -> HostRun {
    let ws = tempfile::tempdir().unwrap();
    let env = env_for(p, wire);
    let events = Events::default();
    let placement = AgentPlacement::Host {
        workspace: ws.path().to_path_buf(),
    };
    let result = run_agent(t, BackendName::Claw, placement, &ctx(&env, &events)).await;
    HostRun { ws, events, result }
}
