//! The binaries agent tests run for real: the static `iterion` (the claw
//! runner inside containers) and the Claude Code CLI installed by
//! `scripts/setup.sh`. A missing one fails the test with the command that
//! provides it; nothing is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The target triple of the static build (the only one rustc has here).
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";

/// A statically linked `iterion` (runs in any image, busybox included).
///
/// `ITERION_RUNNER_BIN` wins (scripts/test.sh builds it once and exports
/// it); otherwise it is built here, once per test process, exactly as
/// `scripts/build-static.sh` does: `--target` keeps build scripts and
/// proc-macros (host units) out of `+crt-static` and puts the artifact in
/// `target/<triple>/`, so the workspace's ordinary dev build is untouched.
pub fn static_iterion() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("ITERION_RUNNER_BIN")
            && !p.is_empty()
        {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "ITERION_RUNNER_BIN={} does not exist: run scripts/build-static.sh",
                p.display()
            );
            return p;
        }
        let root = workspace_root();
        let target_dir =
            std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = std::process::Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "--locked",
                "-p",
                "iterion-cli",
                "--bin",
                "iterion",
                "--target",
                STATIC_TARGET,
            ])
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env("CARGO_TARGET_DIR", &target_dir)
            .status()
            .expect("run cargo to build the static iterion");
        assert!(
            status.success(),
            "building the static iterion failed (see cargo's output above)"
        );
        let bin = target_dir.join(STATIC_TARGET).join("debug").join("iterion");
        assert!(bin.is_file(), "{} was not produced", bin.display());
        bin
    })
    .clone()
}

/// The real Claude Code CLI (native binary of `@anthropic-ai/claude-code`).
pub fn claude_cli() -> PathBuf {
    let p = std::env::var("ITERION_CLAUDE_CLI").map_or_else(
        |_| PathBuf::from("/var/cache/iterion-claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude"),
        PathBuf::from,
    );
    assert!(
        p.is_file(),
        "the claude CLI is not at {}: run scripts/setup.sh (it installs @anthropic-ai/claude-code)",
        p.display()
    );
    p
}
