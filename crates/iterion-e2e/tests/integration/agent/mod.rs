//! Integration tests of iterion-agent against real components: the claw
//! loop over real sockets against the scripted provider (both wire
//! formats, streaming and not), the real `iterion __claw-runner` process,
//! the runner inside real containers on dockerd and Podman behind the real
//! egress proxy, and the real Claude Code CLI on the host and in a
//! container.
//!
//! Needs what `scripts/test.sh` starts (engines, images) and installs (the
//! claude CLI); a missing backend fails, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod claude_code;
mod claw_host;
mod in_box;
mod privacy;
mod runner_process;
mod support;
mod tools_in_box;
