//! The binaries agent tests run for real: `iterion` as the README builds
//! it (static: the claw runner inside containers) and the Claude Code CLI installed by
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

/// The `iterion` binary the README builds: `cargo build -p iterion-cli`,
/// which the repository's `.cargo/config.toml` links statically, so the
/// same file is the CLI, the claw runner inside any image (busybox
/// included) and the guard probe. Built once per test process exactly as a
/// user builds it (no extra flags, no second target) and located through
/// cargo's own report of the artifact, so the profile, the target triple
/// and the target dir are the ones cargo used. (RUSTFLAGS set in the
/// environment replaces the repository's flags and gives a dynamic binary:
/// runs then refuse at admission, saying so.)
pub fn static_iterion() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = workspace_root();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let out = std::process::Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "--locked",
                "-p",
                "iterion-cli",
                "--bin",
                "iterion",
                "--message-format=json-render-diagnostics",
            ])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run cargo to build iterion");
        assert!(
            out.status.success(),
            "building iterion failed (see cargo's output above)"
        );
        let bin = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "iterion")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported no executable for the iterion binary");
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
