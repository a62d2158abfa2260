//! Which backend an agent, judge or LLM-router node runs on — the one
//! resolver the engine calls (upstream `resolveBackendName` +
//! `pkg/backend/detect`): the node's `backend:` (with `${VAR:-default}`
//! expansion), then the workflow's `default_backend`, then
//! `ITERION_DEFAULT_BACKEND`, then the first backend whose credentials are
//! detected in `ITERION_BACKEND_PREFERENCE` order, finally `claw`.
//!
//! Everything derived from the backend (the runner mount, the CLI in the
//! image, the events) must be derived from the [`ResolvedBackend`] this
//! returns, never from the node's declared field (upstream #724/#760).
//! Detection reads a [`HostFacts`] value the caller probed once; the
//! resolver itself does no IO and reads no process environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::env::EnvSnapshot;
use crate::error::AgentError;

/// An agent backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendName {
    /// The Rust agent loop of this crate (in the box through the runner).
    Claw,
    /// The Claude Code CLI in stream-json mode.
    ClaudeCode,
    /// The codex CLI (never inside a sandbox).
    Codex,
}

impl BackendName {
    /// The name as written in workflows and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claw => "claw",
            Self::ClaudeCode => "claude_code",
            Self::Codex => "codex",
        }
    }

    /// Parse a backend name as written.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "claw" => Some(Self::Claw),
            "claude_code" => Some(Self::ClaudeCode),
            "codex" => Some(Self::Codex),
            _ => None,
        }
    }
}

impl std::fmt::Display for BackendName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which knob decided the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendSource {
    /// The node's `backend:`.
    Node,
    /// The workflow's `default_backend:`.
    Workflow,
    /// `ITERION_DEFAULT_BACKEND`.
    EnvDefault,
    /// Credentials detected on the host.
    Detected,
    /// Nothing spoke: `claw`.
    Fallback,
}

/// The effective backend of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedBackend {
    /// The backend.
    pub name: BackendName,
    /// Who decided.
    pub source: BackendSource,
}

impl ResolvedBackend {
    /// The node needs `iterion __claw-runner` in the sandbox (facts §6.5).
    pub fn needs_claw_runner(&self) -> bool {
        self.name == BackendName::Claw
    }

    /// The node needs the `claude` CLI (in the image, or on the host).
    pub fn needs_claude_cli(&self) -> bool {
        self.name == BackendName::ClaudeCode
    }
}

/// What the declarations say, before the environment speaks.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackendInputs<'a> {
    /// The node's `backend:` as written (may hold `${VAR:-default}`).
    pub node: Option<&'a str>,
    /// The workflow's `default_backend:`.
    pub workflow_default: Option<&'a str>,
}

/// Host facts detection needs, probed once by the caller
/// ([`HostFacts::probe`]) so resolution stays pure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// A `claude` binary is on the host.
    pub claude_cli: bool,
    /// A Claude Code login (`.credentials.json`) is on the host.
    pub claude_login: bool,
    /// A `codex` binary is on the host.
    pub codex_cli: bool,
    /// A codex login (`auth.json`) is on the host.
    pub codex_login: bool,
}

impl HostFacts {
    /// Look for the CLIs on `PATH` (and `~/.claude/local`) and for their
    /// login files under `CLAUDE_CONFIG_DIR`/`CODEX_HOME` or `$HOME`, all
    /// from the snapshot (no passwd lookup).
    pub fn probe(env: &EnvSnapshot) -> Self {
        let home = env.get("HOME").map(PathBuf::from);
        let claude_dir = env
            .get("CLAUDE_CONFIG_DIR")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".claude")));
        let codex_dir = env
            .get("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".codex")));
        let local_claude = home.as_ref().map(|h| h.join(".claude/local/claude"));
        Self {
            claude_cli: find_on_path(env, "claude").is_some()
                || local_claude.is_some_and(|p| is_executable(&p)),
            claude_login: claude_dir.is_some_and(|d| {
                d.join(".credentials.json").is_file() || d.join("credentials.json").is_file()
            }),
            codex_cli: find_on_path(env, "codex").is_some(),
            codex_login: codex_dir.is_some_and(|d| d.join("auth.json").is_file()),
        }
    }
}

/// The first executable named `name` on the snapshot's `PATH`.
pub fn find_on_path(env: &EnvSnapshot, name: &str) -> Option<PathBuf> {
    env.get("PATH")?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Upstream's default auto order: codex is never picked automatically.
const DEFAULT_PREFERENCE: &[BackendName] = &[BackendName::ClaudeCode, BackendName::Claw];

/// Resolve the effective backend of one node.
pub fn resolve_backend(
    inputs: BackendInputs<'_>,
    env: &EnvSnapshot,
    facts: &HostFacts,
) -> Result<ResolvedBackend, AgentError> {
    let explicit =
        |written: Option<&str>, label: &str| -> Result<Option<BackendName>, AgentError> {
            let Some(written) = written else {
                return Ok(None);
            };
            let expanded = env.expand(written);
            let value = expanded.value.trim();
            if value.is_empty() || value == "auto" {
                return Ok(None);
            }
            BackendName::parse(value)
                .map(Some)
                .ok_or_else(|| AgentError::UnknownBackend {
                    written: written.to_owned(),
                    source_label: label.to_owned(),
                })
        };
    if let Some(name) = explicit(inputs.node, "the node's backend:")? {
        return Ok(ResolvedBackend {
            name,
            source: BackendSource::Node,
        });
    }
    if let Some(name) = explicit(inputs.workflow_default, "the workflow's default_backend:")? {
        return Ok(ResolvedBackend {
            name,
            source: BackendSource::Workflow,
        });
    }
    if let Some(name) = explicit(
        env.get("ITERION_DEFAULT_BACKEND"),
        "ITERION_DEFAULT_BACKEND",
    )? {
        return Ok(ResolvedBackend {
            name,
            source: BackendSource::EnvDefault,
        });
    }
    if let Some(name) = detect(env, facts) {
        return Ok(ResolvedBackend {
            name,
            source: BackendSource::Detected,
        });
    }
    Ok(ResolvedBackend {
        name: BackendName::Claw,
        source: BackendSource::Fallback,
    })
}

/// The first available backend in preference order.
fn detect(env: &EnvSnapshot, facts: &HostFacts) -> Option<BackendName> {
    // An unknown name in the preference list is skipped, as upstream does.
    let preference: Vec<BackendName> = match env.get("ITERION_BACKEND_PREFERENCE") {
        Some(csv) => csv.split(',').filter_map(BackendName::parse).collect(),
        None => DEFAULT_PREFERENCE.to_vec(),
    };
    preference.into_iter().find(|b| available(*b, env, facts))
}

/// Upstream `pkg/backend/detect`: a CLI backend is auto-eligible only with
/// both its binary and an OAuth login (with an API key alone claw does
/// the same work in-process); claw with any provider credential.
fn available(backend: BackendName, env: &EnvSnapshot, facts: &HostFacts) -> bool {
    match backend {
        BackendName::ClaudeCode => facts.claude_cli && facts.claude_login,
        BackendName::Codex => facts.codex_cli && facts.codex_login,
        BackendName::Claw => {
            let anthropic_base = env
                .get("ANTHROPIC_BASE_URL")
                .unwrap_or_default()
                .to_ascii_lowercase();
            // The z.ai façade is not Anthropic; upstream keeps the two apart.
            let zai = anthropic_base.contains("z.ai") || anthropic_base.contains("bigmodel");
            (env.has("ANTHROPIC_API_KEY") && !zai)
                || env.has("OPENAI_API_KEY")
                || (env.has("AZURE_OPENAI_API_KEY") && env.has("AZURE_OPENAI_ENDPOINT"))
                || env.has("AWS_REGION")
                || env.has("AWS_DEFAULT_REGION")
                || env.has("GOOGLE_CLOUD_PROJECT")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        pairs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    const NO_HOST: HostFacts = HostFacts {
        claude_cli: false,
        claude_login: false,
        codex_cli: false,
        codex_login: false,
    };
    const CLAUDE_HOST: HostFacts = HostFacts {
        claude_cli: true,
        claude_login: true,
        codex_cli: true,
        codex_login: true,
    };

    #[test]
    fn precedence_table() {
        use BackendName::*;
        use BackendSource::*;
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            &'a [(&'a str, &'a str)],
            HostFacts,
            BackendName,
            BackendSource,
        );
        let cases: &[Case<'_>] = &[
            (
                Some("claude_code"),
                Some("codex"),
                &[("ITERION_DEFAULT_BACKEND", "claw")],
                NO_HOST,
                ClaudeCode,
                Node,
            ),
            (
                Some("${RESCUE:-claude_code}"),
                None,
                &[],
                NO_HOST,
                ClaudeCode,
                Node,
            ),
            (
                Some("${RESCUE:-claude_code}"),
                None,
                &[("RESCUE", "codex")],
                NO_HOST,
                Codex,
                Node,
            ),
            (Some("auto"), Some("codex"), &[], NO_HOST, Codex, Workflow),
            (
                Some(""),
                None,
                &[("ITERION_DEFAULT_BACKEND", "claude_code")],
                NO_HOST,
                ClaudeCode,
                EnvDefault,
            ),
            (None, None, &[], CLAUDE_HOST, ClaudeCode, Detected),
            (
                None,
                None,
                &[("ANTHROPIC_API_KEY", "k")],
                NO_HOST,
                Claw,
                Detected,
            ),
            (
                None,
                None,
                &[
                    ("ITERION_BACKEND_PREFERENCE", "claw,claude_code"),
                    ("OPENAI_API_KEY", "k"),
                ],
                CLAUDE_HOST,
                Claw,
                Detected,
            ),
            // codex is never auto-picked by the default order.
            (
                None,
                None,
                &[],
                HostFacts {
                    claude_login: false,
                    ..CLAUDE_HOST
                },
                Claw,
                Fallback,
            ),
            (None, None, &[], NO_HOST, Claw, Fallback),
            // z.ai behind ANTHROPIC_BASE_URL is not Anthropic credentials.
            (
                None,
                None,
                &[
                    ("ANTHROPIC_API_KEY", "k"),
                    ("ANTHROPIC_BASE_URL", "https://api.z.ai/api/anthropic"),
                ],
                NO_HOST,
                Claw,
                Fallback,
            ),
        ];
        for (node, wf, vars, facts, want, source) in cases {
            let got = resolve_backend(
                BackendInputs {
                    node: *node,
                    workflow_default: *wf,
                },
                &env(vars),
                facts,
            )
            .expect("resolves");
            assert_eq!(
                (got.name, got.source),
                (*want, *source),
                "{node:?} {wf:?} {vars:?}"
            );
        }
    }

    #[test]
    fn unknown_backend_names_the_expression_never_the_value() {
        let e = env(&[("SECRET", "sk-live-123456")]);
        let err = resolve_backend(
            BackendInputs {
                node: Some("${SECRET}"),
                workflow_default: None,
            },
            &e,
            &NO_HOST,
        )
        .expect_err("unknown");
        assert_eq!(err.code(), "AGENT_UNKNOWN_BACKEND");
        let msg = err.to_string();
        assert!(msg.contains("${SECRET}"), "{msg}");
        assert!(!msg.contains("sk-live-123456"), "{msg}");

        let err = resolve_backend(
            BackendInputs::default(),
            &env(&[("ITERION_DEFAULT_BACKEND", "gpt")]),
            &NO_HOST,
        )
        .expect_err("unknown");
        assert!(err.to_string().contains("ITERION_DEFAULT_BACKEND"));
    }

    #[test]
    fn derived_needs_follow_the_effective_backend() {
        let r = resolve_backend(BackendInputs::default(), &env(&[]), &NO_HOST).expect("ok");
        assert!(r.needs_claw_runner());
        assert!(!r.needs_claude_cli());
    }

    #[test]
    fn probe_finds_cli_and_login_from_snapshot_only() {
        let dir = tempfile::tempdir().expect("tmp");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        let cli = bin.join("claude");
        std::fs::write(&cli, "#!/bin/sh\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let cfg = dir.path().join("cfg");
        std::fs::create_dir_all(&cfg).expect("mkdir");
        std::fs::write(cfg.join(".credentials.json"), "{}").expect("write");
        let e = env(&[
            ("PATH", bin.to_str().expect("utf8")),
            ("CLAUDE_CONFIG_DIR", cfg.to_str().expect("utf8")),
        ]);
        let facts = HostFacts::probe(&e);
        assert!(facts.claude_cli && facts.claude_login);
        assert!(!facts.codex_cli);
    }
}
