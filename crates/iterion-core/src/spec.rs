//! The desired sandbox state of a run, as declared by a workflow's
//! `sandbox:` block or derived from a repo devcontainer.
//!
//! A [`Spec`] is still "as written": mount strings are raw docker `--mount`
//! CSV and host-side variables (`${localEnv:…}`) may be unexpanded. The
//! policy crate turns it into a [`crate::LaunchPlan`] for one driver.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mode::{HostState, Mode};

/// The sandbox block of a workflow (or the spec fused from a devcontainer).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Spec {
    /// Sandbox mode. A block written without `mode:` is [`Mode::Inline`].
    pub mode: Mode,
    /// Image reference; exclusive with `build`.
    pub image: Option<String>,
    /// Build recipe; exclusive with `image`.
    pub build: Option<BuildSpec>,
    /// `uid`, `uid:gid` or a user name.
    pub user: Option<String>,
    /// Absolute container path of the workspace.
    pub workspace_folder: Option<String>,
    /// Host-state binding; `None` means "not said here" (precedence decides).
    pub host_state: Option<HostState>,
    /// Shell snippet run once after start via `sh -c`.
    pub post_create: Option<String>,
    /// Container environment.
    pub env: BTreeMap<String, String>,
    /// Raw docker `--mount` CSV strings, as written.
    pub mounts: Vec<String>,
    /// Egress policy; `None` means no `network:` block (open, no proxy).
    pub network: Option<NetworkSpec>,
    /// Declared container paths the run reads back at teardown (ADR-143),
    /// in addition to the run-files directory the runtime always declares.
    pub read_back: Vec<String>,
}

impl Spec {
    /// A spec that only names a mode (the short form `sandbox: auto`).
    pub fn with_mode(mode: Mode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Whether the block names a container recipe (`image:` or `build:`).
    pub fn names_container(&self) -> bool {
        self.image.as_deref().is_some_and(|i| !i.trim().is_empty()) || self.build.is_some()
    }
}

/// `build:` sub-block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BuildSpec {
    /// Dockerfile path relative to the workspace (default `Dockerfile`).
    pub dockerfile: Option<String>,
    /// Build context relative to the workspace (default: the dockerfile's dir).
    pub context: Option<String>,
    /// Build arguments.
    pub args: BTreeMap<String, String>,
}

/// `network:` sub-block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// `None` when the block has no `mode:` (inert: resolves to open, C312).
    pub mode: Option<NetworkMode>,
    /// Preset name (`iterion-default` is the one shipped).
    pub preset: Option<String>,
    /// Rules in order (preset rules are evaluated first, then these).
    pub rules: Vec<String>,
    /// Node-scope merge strategy.
    pub inherit: Option<NetworkInherit>,
}

/// Egress policy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Unmatched hosts are denied.
    Allowlist,
    /// Unmatched hosts are allowed.
    Denylist,
    /// No proxy at all.
    Open,
}

impl NetworkMode {
    /// The spelling used in workflows.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::Denylist => "denylist",
            NetworkMode::Open => "open",
        }
    }

    /// Parse a workflow word.
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "allowlist" => Some(Self::Allowlist),
            "denylist" => Some(Self::Denylist),
            "open" => Some(Self::Open),
            _ => None,
        }
    }
}

/// How a node-level network block combines with its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkInherit {
    /// Parent rules then node rules (the default).
    Merge,
    /// The node block replaces the parent's.
    Replace,
    /// Same as merge.
    Append,
}

impl NetworkInherit {
    /// Parse a workflow word.
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "merge" => Some(Self::Merge),
            "replace" => Some(Self::Replace),
            "append" => Some(Self::Append),
            _ => None,
        }
    }
}
