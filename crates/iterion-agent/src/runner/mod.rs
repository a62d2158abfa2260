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

pub mod inbox;
pub mod launcher;
pub mod protocol;

use std::path::{Path, PathBuf};

use iterion_core::{EventKind, Mount, MountKind, MountOrigin};

use crate::env::EnvSnapshot;

pub use launcher::RunnerBinary;

/// Where the runner binary lives inside the sandbox.
pub const RUNNER_CONTAINER_PATH: &str = "/usr/local/bin/iterion";
/// The hidden subcommand.
pub const RUNNER_SUBCOMMAND: &str = "__claw-runner";

/// The read-only bind of the host's runner binary (facts §6.5), for the
/// mount plan of a run with claw nodes on a driver that keeps binds.
pub fn runner_mount(host_binary: &Path) -> Mount {
    Mount {
        kind: MountKind::Bind,
        source: Some(host_binary.display().to_string()),
        target: RUNNER_CONTAINER_PATH.to_owned(),
        readonly: true,
        size: None,
        origin: MountOrigin::RunnerBinary,
    }
}

/// Find a host `iterion` binary that can run inside any image (facts
/// §6.5 lookup order: `ITERION_BIN`, the running executable, then
/// `/usr/local/bin/iterion`, `/usr/bin/iterion`, `~/.local/bin/iterion`),
/// keeping only statically linked executables: a dynamically linked one
/// would not start in an image with another libc (or none).
pub fn locate_runner_binary(env: &EnvSnapshot, current_exe: Option<&Path>) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = env.get("ITERION_BIN") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(p) = current_exe {
        candidates.push(p.to_path_buf());
    }
    candidates.push(PathBuf::from("/usr/local/bin/iterion"));
    candidates.push(PathBuf::from("/usr/bin/iterion"));
    if let Some(home) = env.get("HOME") {
        candidates.push(Path::new(home).join(".local/bin/iterion"));
    }
    candidates.into_iter().find(|p| is_static_executable(p))
}

/// Whether `path` is an executable ELF file without a program interpreter
/// (static or static-pie).
pub fn is_static_executable(path: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = vec![0u8; 64 * 1024];
    let Ok(n) = f.read(&mut head) else {
        return false;
    };
    elf_has_no_interpreter(&head[..n])
}

/// ELF64 little-endian: no `PT_INTERP` among the program headers that fit
/// in `head`.
fn elf_has_no_interpreter(head: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        head.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        head.get(o..o + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    (0..usize::from(phnum)).all(|i| {
        let at = phoff + i * usize::from(phentsize);
        u32_at(at).is_some_and(|t| t != PT_INTERP)
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_binaries_are_not_runner_candidates() {
        // The test binary itself is dynamically linked (PT_INTERP present).
        let me = std::env::current_exe().expect("exe");
        assert!(!is_static_executable(&me));
        assert!(!is_static_executable(Path::new("/nonexistent")));
        assert!(!elf_has_no_interpreter(b"#!/bin/sh\n"));
    }

    #[test]
    fn static_busybox_is_a_candidate_when_present() {
        // Debian's busybox-static (installed by scripts/setup.sh).
        let bb = Path::new("/bin/busybox");
        assert!(bb.exists(), "scripts/setup.sh installs busybox-static");
        assert!(is_static_executable(bb));
    }

    #[test]
    fn mount_is_read_only_bind_at_the_runner_path() {
        let m = runner_mount(Path::new("/opt/iterion"));
        assert!(m.readonly);
        assert_eq!(m.target, RUNNER_CONTAINER_PATH);
        assert_eq!(m.origin, MountOrigin::RunnerBinary);
    }
}
