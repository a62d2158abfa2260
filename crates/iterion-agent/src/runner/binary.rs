//! The runner binary's place in a sandbox: where it lives there
//! ([`RUNNER_CONTAINER_PATH`]) and the hidden subcommand it runs
//! ([`RUNNER_SUBCOMMAND`]), the read-only bind that puts the host's copy
//! there ([`runner_mount`]), and which host binary can serve at all
//! ([`find_runner`]: a static executable, [`inspect_runner`]; when none
//! serves, the [`RunnerLookup`] names every file examined, why each fails
//! and the fix, which the sandbox decision turns into an admission
//! refusal).
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

/// Why a file cannot serve as the runner inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinaryDefect {
    /// Nothing at that path.
    Missing,
    /// Not a regular file (a directory, a device).
    NotAFile,
    /// No execute bit.
    NotExecutable,
    /// It could not be opened or read.
    Unreadable(String),
    /// Not a 64-bit little-endian ELF executable (a script, a text file).
    NotElf,
    /// Dynamically linked: it names a program interpreter, which an image
    /// with another libc (or none) does not have.
    Dynamic,
}

impl std::fmt::Display for BinaryDefect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => f.write_str("does not exist"),
            Self::NotAFile => f.write_str("is not a regular file"),
            Self::NotExecutable => f.write_str("is not executable"),
            Self::Unreadable(why) => write!(f, "cannot be read ({why})"),
            Self::NotElf => f.write_str("is not an ELF executable"),
            Self::Dynamic => f.write_str("is dynamically linked"),
        }
    }
}

/// Where a runner candidate came from (facts §6.5 lookup order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerSource {
    /// `ITERION_BIN`, the operator's explicit choice.
    IterionBin,
    /// The `iterion` running now.
    CurrentExe,
    /// One of the install locations (`/usr/local/bin`, `/usr/bin`,
    /// `~/.local/bin`).
    Installed,
}

impl RunnerSource {
    /// How a person reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IterionBin => "ITERION_BIN",
            Self::CurrentExe => "the running iterion",
            Self::Installed => "installed",
        }
    }
}

/// What the lookup found: the static runner, or every file it examined
/// and why none serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerLookup {
    /// This static executable serves.
    Found {
        /// The host binary.
        path: PathBuf,
        /// Where it came from.
        source: RunnerSource,
    },
    /// `ITERION_BIN` names a file that cannot serve: the operator asked
    /// for that one, so nothing else is taken in its place.
    IterionBinRejected {
        /// What `ITERION_BIN` names.
        path: PathBuf,
        /// Why it cannot serve.
        defect: BinaryDefect,
    },
    /// No candidate serves (a distribution package built dynamically).
    NoneStatic {
        /// Each candidate examined, with why it does not serve.
        examined: Vec<(PathBuf, RunnerSource, BinaryDefect)>,
    },
}

/// What to do about a lookup that found nothing, for the operator.
pub const RUNNER_FIX: &str = "build iterion from its repository (`cargo build --release` links it statically through .cargo/config.toml; a RUSTFLAGS set in the environment undoes that) or point ITERION_BIN at a statically linked iterion";

impl RunnerLookup {
    /// The static runner, when found.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Found { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Why no runner serves, naming the files examined and the fix; `None`
    /// when one was found.
    pub fn problem(&self) -> Option<String> {
        match self {
            Self::Found { .. } => None,
            Self::IterionBinRejected { path, defect } => Some(format!(
                "ITERION_BIN={} {defect}: a sandboxed agent needs a statically linked iterion to run inside the container; {RUNNER_FIX}",
                path.display()
            )),
            Self::NoneStatic { examined } => {
                let seen: Vec<String> = examined
                    .iter()
                    .filter(|(_, _, d)| *d != BinaryDefect::Missing)
                    .map(|(p, s, d)| format!("{} ({}) {d}", p.display(), s.as_str()))
                    .collect();
                Some(format!(
                    "no statically linked iterion to run inside the container: {}; {RUNNER_FIX}",
                    if seen.is_empty() {
                        "no candidate exists".to_owned()
                    } else {
                        seen.join(", ")
                    }
                ))
            }
        }
    }
}

/// Find a host `iterion` binary that can run inside any image (facts
/// §6.5 lookup order: `ITERION_BIN`, the running executable, then
/// `/usr/local/bin/iterion`, `/usr/bin/iterion`, `~/.local/bin/iterion`),
/// keeping only statically linked executables: a dynamically linked one
/// would not start in an image with another libc (or none). A set
/// `ITERION_BIN` is the only candidate: a bad one is the answer, never
/// silently replaced by another binary.
pub fn find_runner(env: &EnvSnapshot, current_exe: Option<&Path>) -> RunnerLookup {
    if let Some(p) = env.get("ITERION_BIN") {
        let path = PathBuf::from(p);
        return match inspect_runner(&path) {
            Ok(()) => RunnerLookup::Found {
                path,
                source: RunnerSource::IterionBin,
            },
            Err(defect) => RunnerLookup::IterionBinRejected { path, defect },
        };
    }
    let mut candidates: Vec<(PathBuf, RunnerSource)> = Vec::new();
    if let Some(p) = current_exe {
        candidates.push((p.to_path_buf(), RunnerSource::CurrentExe));
    }
    for p in ["/usr/local/bin/iterion", "/usr/bin/iterion"] {
        candidates.push((PathBuf::from(p), RunnerSource::Installed));
    }
    if let Some(home) = env.get("HOME") {
        candidates.push((
            Path::new(home).join(".local/bin/iterion"),
            RunnerSource::Installed,
        ));
    }
    let mut examined = Vec::new();
    for (path, source) in candidates {
        match inspect_runner(&path) {
            Ok(()) => return RunnerLookup::Found { path, source },
            Err(defect) => examined.push((path, source, defect)),
        }
    }
    RunnerLookup::NoneStatic { examined }
}

/// [`find_runner`]'s binary, when one serves.
pub fn locate_runner_binary(env: &EnvSnapshot, current_exe: Option<&Path>) -> Option<PathBuf> {
    match find_runner(env, current_exe) {
        RunnerLookup::Found { path, .. } => Some(path),
        _ => None,
    }
}

/// Whether `path` is an executable ELF file without a program interpreter
/// (static or static-pie).
pub fn is_static_executable(path: &Path) -> bool {
    inspect_runner(path).is_ok()
}

/// Why `path` cannot serve as the runner, if it cannot: it must be an
/// executable ELF file without a program interpreter (static or
/// static-pie).
pub fn inspect_runner(path: &Path) -> Result<(), BinaryDefect> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(BinaryDefect::Missing),
        Err(e) => return Err(BinaryDefect::Unreadable(e.to_string())),
    };
    if !meta.is_file() {
        return Err(BinaryDefect::NotAFile);
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(BinaryDefect::NotExecutable);
    }
    let mut f = std::fs::File::open(path).map_err(|e| BinaryDefect::Unreadable(e.to_string()))?;
    let mut head = vec![0u8; 64 * 1024];
    let n = f
        .read(&mut head)
        .map_err(|e| BinaryDefect::Unreadable(e.to_string()))?;
    elf_interpreter(&head[..n])
}

/// ELF64 little-endian: no `PT_INTERP` among the program headers that fit
/// in `head`.
fn elf_interpreter(head: &[u8]) -> Result<(), BinaryDefect> {
    const PT_INTERP: u32 = 3;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(BinaryDefect::NotElf);
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
        return Err(BinaryDefect::NotElf);
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return Err(BinaryDefect::NotElf);
    };
    let mut interp = false;
    for i in 0..usize::from(phnum) {
        let at = phoff + i * usize::from(phentsize);
        match u32_at(at) {
            // A header table past what was read cannot be judged: no.
            None => {
                return Err(BinaryDefect::Unreadable(
                    "program headers past the first 64 KiB".to_owned(),
                ));
            }
            Some(PT_INTERP) => interp = true,
            Some(_) => {}
        }
    }
    if interp {
        Err(BinaryDefect::Dynamic)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_binaries_are_not_runner_candidates() {
        // Debian's /bin/sh (dash) is dynamically linked (PT_INTERP present).
        assert!(!is_static_executable(Path::new("/bin/sh")));
        assert!(!is_static_executable(Path::new("/nonexistent")));
        assert_eq!(elf_interpreter(b"#!/bin/sh\n"), Err(BinaryDefect::NotElf));
    }

    /// A scratch directory of candidate files, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "iterion-runner-{tag}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default()
            ));
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Self(dir)
        }

        fn file(&self, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
            use std::os::unix::fs::PermissionsExt;
            let p = self.0.join(name);
            std::fs::write(&p, bytes).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
            p
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> EnvSnapshot {
        pairs
            .iter()
            .fold(EnvSnapshot::new(), |env, (k, v)| env.with(*k, *v))
    }

    #[test]
    fn each_defect_is_named() {
        let s = Scratch::new("defects");
        let dynamic = std::fs::read("/bin/sh").expect("read /bin/sh");
        let me = std::fs::read(std::env::current_exe().expect("exe")).expect("read self");
        let cases: Vec<(PathBuf, Result<(), BinaryDefect>)> = vec![
            (s.0.join("absent"), Err(BinaryDefect::Missing)),
            (s.0.clone(), Err(BinaryDefect::NotAFile)),
            (s.file("dyn", &dynamic, 0o755), Err(BinaryDefect::Dynamic)),
            (
                s.file("noexec", &me, 0o644),
                Err(BinaryDefect::NotExecutable),
            ),
            (
                s.file("script", b"#!/bin/sh\necho hi\n", 0o755),
                Err(BinaryDefect::NotElf),
            ),
            (s.file("empty", b"", 0o755), Err(BinaryDefect::NotElf)),
            (s.file("static", &me, 0o755), Ok(())),
        ];
        for (path, want) in cases {
            assert_eq!(inspect_runner(&path), want, "{}", path.display());
        }
    }

    #[test]
    fn a_bad_iterion_bin_is_the_answer_not_skipped() {
        let s = Scratch::new("explicit");
        let dynamic = s.file("iterion", &std::fs::read("/bin/sh").expect("sh"), 0o755);
        let me = std::env::current_exe().expect("exe");
        let env = env_of(&[("ITERION_BIN", &dynamic.display().to_string())]);
        // The running (static) binary would serve, yet the operator named
        // another: that one is judged, and refused.
        let found = find_runner(&env, Some(&me));
        assert_eq!(
            found,
            RunnerLookup::IterionBinRejected {
                path: dynamic.clone(),
                defect: BinaryDefect::Dynamic
            }
        );
        let problem = found.problem().expect("a problem");
        assert!(
            problem.contains(&dynamic.display().to_string()),
            "{problem}"
        );
        assert!(problem.contains("dynamically linked"), "{problem}");
        assert!(problem.contains("ITERION_BIN"), "{problem}");
        // A good ITERION_BIN serves.
        let env = env_of(&[("ITERION_BIN", &me.display().to_string())]);
        assert_eq!(
            find_runner(&env, None),
            RunnerLookup::Found {
                path: me,
                source: RunnerSource::IterionBin
            }
        );
    }

    #[test]
    fn a_dynamic_distribution_build_names_what_was_examined() {
        let s = Scratch::new("distro");
        let dynamic = s.file("iterion", &std::fs::read("/bin/sh").expect("sh"), 0o755);
        let home = s.0.join("home");
        let env = env_of(&[("HOME", &home.display().to_string())]);
        let found = find_runner(&env, Some(&dynamic));
        let RunnerLookup::NoneStatic { examined } = &found else {
            panic!("nothing static here: {found:?}")
        };
        assert_eq!(
            examined.first(),
            Some(&(
                dynamic.clone(),
                RunnerSource::CurrentExe,
                BinaryDefect::Dynamic
            ))
        );
        let problem = found.problem().expect("a problem");
        assert!(
            problem.contains(&format!(
                "{} (the running iterion) is dynamically linked",
                dynamic.display()
            )),
            "{problem}"
        );
        assert!(problem.contains("cargo build --release"), "{problem}");
        assert!(found.path().is_none());
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
