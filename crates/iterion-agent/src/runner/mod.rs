//! The in-box claw runner (seed step 20, facts §5.6/§6.5): under an active
//! sandbox a claw node runs as `iterion __claw-runner` *inside* the
//! container, so its built-in tools touch the container, not the host; it
//! talks to the host over one stdio stream ([`protocol`]).
//!
//! - [`inbox`]: the runner process (the body of the hidden subcommand);
//! - [`launcher`]: the host side that execs it through
//!   [`iterion_core::SandboxRun`] and serves launcher-side tools;
//! - [`runner_mount`] / [`locate_runner_binary`]: how the same static
//!   `iterion` binary gets to `/usr/local/bin/iterion` (a read-only bind
//!   where the driver keeps binds, a copy through `SandboxRun::import` on
//!   a bindless engine — [`launcher::RunnerBinary`]).

mod binary;
pub mod inbox;
pub mod launcher;
pub mod protocol;

use iterion_core::EventKind;

pub use binary::{
    BinaryDefect, RUNNER_CONTAINER_PATH, RUNNER_FIX, RUNNER_SUBCOMMAND, RunnerLookup, RunnerSource,
    find_runner, inspect_runner, is_static_executable, locate_runner_binary, runner_mount,
};
pub use launcher::RunnerBinary;

/// The `sandbox_claw_routed_via_runner` event the engine records once when
/// a sandbox starts for a workflow whose effective backends include claw.
pub fn routed_via_runner_event() -> EventKind {
    EventKind::SandboxClawRoutedViaRunner {
        reason: "claw nodes run as iterion __claw-runner inside the sandbox; built-in tools execute in the container"
            .to_owned(),
        limitations_v1: vec![
            "launcher-side tools (ask_user, mcp.*, iterion.*) run on the host through tool_call messages".to_owned(),
            "tool results over 4 MiB are truncated with a marker".to_owned(),
        ],
    }
}
