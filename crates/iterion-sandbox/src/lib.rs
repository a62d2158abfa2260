//! The sandbox policy of iterion, as pure functions: which mode wins and
//! which knob spoke, which driver a host gets, how a spec is built and
//! fused with a devcontainer, which mounts a driver keeps and which
//! promised variables survive, whether a bind source is safe, who the
//! sandbox runs as, whether an absent runtime degrades or refuses, how a
//! failure is classified, and whether an orphan is reapable. No driver
//! lives here (the host passthrough is `iterion-driver-noop`).
//!
//! Each decision lives in exactly one function here (CONTRIBUTING.md, "one
//! home"). A run's sandbox is **one** decision, [`decision::decide`]: a
//! pure function from a [`decision::DecisionRequest`] to a
//! [`decision::SandboxDecision`] that the runtime's booter executes, its
//! admission reads, and `iterion sandbox doctor` renders. It chains the
//! homes below, in the seed's order:
//! 1. [`env::SandboxEnv::parse`] (once, by the entry point), then
//!    [`precedence::resolve_mode`] / [`precedence::resolve_host_state`] /
//!    [`precedence::resolve_default_image`];
//! 2. [`host::detect_host`] and [`host::select_driver`] over the drivers'
//!    [`host::DriverOffer`]s (a value, never a decision);
//! 3. [`admission::admit`] (untrusted runs) — the one
//!    [`admission::AdmissionVerdict`];
//! 4. [`spec::build_spec`] (the repository's devcontainer fused for `auto`);
//! 5. [`verdict::sandbox_verdict`]: sandbox, silent, degraded or refused,
//!    and [`verdict::egress_verdict`];
//! 6. [`mounts::plan_launch`], [`devbox::provision`], then
//!    [`mounts::finalize_mounts_for_driver`] with the selected driver's
//!    capabilities (a read-back path it cannot serve is denied at
//!    admission), then [`binds::resolve_plan_binds`] (every bind judged by
//!    its real path through [`binds::HostPaths`], the run store masked) and
//!    [`identity::decide_identity`] (who the sandbox runs as and its
//!    host-root guard, with [`seccomp::guard_profile`] for root in its own
//!    checkout);
//! 7. [`secret_egress::secret_egress_verdict`]: placeholders, plain or
//!    refused for the secrets bound to egress hosts;
//! 8. every refusal's code through [`classify::classify`].
//!
//! The driver then calls [`guards::check_launch_plan`] and
//! [`binds::recheck_plan_binds`] in `prepare` (and the re-check again
//! immediately before create), and verifies the identity with
//! [`identity::check_credentials`] (or the seccomp guard with
//! [`identity::check_root_guard`]) before the first exec; the engine
//! classifies any setup or exec failure with [`classify::classify`].
//!
//! The only functions that touch the host are named so
//! ([`env::EnvSnapshot::from_process`], [`mounts::HostSnapshot::capture`],
//! [`decision::RepoSnapshot::capture`],
//! [`devcontainer::read_repo_devcontainer`],
//! [`guards::check_build_context_symlinks`], [`reaper::this_process_owner`],
//! and the real-path bind judge: [`binds::HostBindSettings::capture`],
//! [`binds::RealHost`], [`binds::judge_bind`],
//! [`binds::recheck_plan_binds`]).

pub mod admission;
pub mod binds;
pub mod classify;
pub mod decision;
pub mod devbox;
pub mod devcontainer;
pub mod env;
pub mod error;
pub mod guards;
pub mod host;
pub mod identity;
pub mod mounts;
pub mod precedence;
pub mod reaper;
pub mod seccomp;
pub mod secret_egress;
pub mod spec;
pub mod verdict;

pub use error::PolicyError;
