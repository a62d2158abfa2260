//! The runner binary's place in a sandbox: where it lives there
//! ([`RUNNER_CONTAINER_PATH`]) and the hidden subcommand it runs
//! ([`RUNNER_SUBCOMMAND`]), the read-only bind that puts the host's copy
//! there ([`runner_mount`]), and which host binary can serve at all
//! ([`locate_runner_binary`]: a static executable, [`is_static_executable`]).
//! Plain facts both the launcher and the mount plan read; how the binary is
//! started or copied in is the launcher's, and this module does not know it.

use std::path::{Path, PathBuf};

use iterion_core::{Mount, MountKind, MountOrigin};

use crate::env::EnvSnapshot;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_binaries_are_not_runner_candidates() {
        // Debian's /bin/sh (dash) is dynamically linked (PT_INTERP present).
        assert!(!is_static_executable(Path::new("/bin/sh")));
        assert!(!is_static_executable(Path::new("/nonexistent")));
        assert!(!elf_has_no_interpreter(b"#!/bin/sh\n"));
    }

    #[test]
    fn the_ordinary_build_is_static() {
        // The repository's .cargo/config.toml links every target of the
        // workspace with +crt-static, this test binary included: the same
        // build gives the `iterion` a user runs, which must start inside
        // any image (issue 32).
        let me = std::env::current_exe().expect("exe");
        assert!(
            is_static_executable(&me),
            "{} is dynamically linked: the build did not use .cargo/config.toml's +crt-static (RUSTFLAGS set in the environment replaces it)",
            me.display()
        );
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
