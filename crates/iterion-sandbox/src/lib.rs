//! The sandbox policy of iterion, as pure functions: which mode wins and
//! which knob spoke, which driver a host gets, how a spec is built and
//! fused with a devcontainer, which mounts a driver keeps and which
//! promised variables survive, whether a bind source is safe, whether an
//! absent runtime degrades or refuses, and whether an orphan is reapable.
//! Plus the `noop` driver (host passthrough for runs that are not sandboxed).
//!
//! Each decision lives in exactly one function here (shared/ARCHITECTURE.md,
//! "One place per decision"); the runtime and the drivers call them. The
//! only functions that touch the host are named so
//! ([`env::EnvSnapshot::from_process`], [`mounts::HostSnapshot::capture`],
//! [`devcontainer::read_repo_devcontainer`],
//! [`guards::check_build_context_symlinks`], [`reaper::this_process_owner`],
//! and the real-path bind judge: [`binds::HostBindSettings::capture`],
//! [`binds::judge_bind`], [`binds::resolve_plan_binds`],
//! [`binds::recheck_plan_binds`]).
//!
//! How the runtime chains them, in order:
//! 1. [`precedence::resolve_mode`] / [`precedence::resolve_host_state`] /
//!    [`precedence::resolve_default_image`] on flags + an
//!    [`env::EnvSnapshot`] + the workflow block;
//! 2. [`host::detect_host`] and [`host::select_driver`] over driver probes
//!    (a value, never a decision);
//! 3. [`admission::admit`] before any workspace setup (untrusted runs);
//! 4. [`verdict::sandbox_verdict`]: sandbox, silent, degraded or refused;
//! 5. [`devcontainer::read_repo_devcontainer`] + [`spec::build_spec`]
//!    (events returned as data);
//! 6. [`mounts::HostSnapshot::capture`] + [`mounts::plan_launch`], then
//!    [`mounts::finalize_mounts_for_driver`] with the selected driver's
//!    capabilities, then [`binds::resolve_plan_binds`] (every bind judged by
//!    its real path, the run store masked) and [`identity::decide_identity`]
//!    (who the sandbox runs as and its host-root guard, with
//!    [`seccomp::guard_profile`] for root in its own checkout);
//! 7. the driver calls [`guards::check_launch_plan`] and
//!    [`binds::recheck_plan_binds`] in `prepare` (and the re-check again
//!    immediately before create), and verifies the identity with
//!    [`identity::check_credentials`] (or the seccomp guard with
//!    [`identity::check_root_guard`]) before the first exec;
//! 8. on a setup error, [`classify::classify`].

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
pub mod noop;
pub mod precedence;
pub mod reaper;
pub mod seccomp;
pub mod spec;
pub mod verdict;

pub use error::PolicyError;
