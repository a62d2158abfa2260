//! The desired sandbox state of a run, as declared by a workflow's
//! `sandbox:` block or derived from a repo devcontainer.
//!
//! A [`Spec`] is still "as written": mount strings are raw docker `--mount`
//! CSV and host-side variables (`${localEnv:…}`) may be unexpanded. The
//! policy crate turns it into a [`crate::LaunchPlan`] for one driver.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::mode::{HostState, Mode};
use crate::net::{NetPreset, NetRule};
use crate::path::ReadBackPath;

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
    pub read_back: Vec<ReadBackPath>,
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
    /// The preset whose rules come first.
    pub preset: Option<NetPreset>,
    /// Rules in order (preset rules are evaluated first, then these).
    pub rules: Vec<NetRule>,
    /// Node-scope merge strategy.
    pub inherit: Option<NetworkInherit>,
}

impl NetworkSpec {
    /// The mode the block resolves to: a block without `mode:` is open
    /// (facts §7.1 [I], compile warning C312).
    pub fn effective_mode(&self) -> NetworkMode {
        self.mode.unwrap_or(NetworkMode::Open)
    }

    /// Whether enforcing `network` (no block: open) needs the egress proxy:
    /// anything but open does (facts §7.1).
    pub fn needs_proxy(network: Option<&NetworkSpec>) -> bool {
        network.is_some_and(|n| n.effective_mode() != NetworkMode::Open)
    }
}

/// Egress policy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
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
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word of a `network:` block that is not one of its words (`mode:`,
/// `inherit:`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid network {field} `{word}`")]
pub struct InvalidNetworkWord {
    /// `mode` or `inherit`.
    pub field: &'static str,
    /// The word as written.
    pub word: String,
    /// The words that exist (`a, b or c`).
    pub expected: &'static str,
}

impl InvalidNetworkWord {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        "NETWORK_WORD_INVALID"
    }
}

/// Exact words, as upstream's property registry (`mode: Allowlist` is
/// C044): the same rule as the sandbox mode words.
impl FromStr for NetworkMode {
    type Err = InvalidNetworkWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allowlist" => Ok(Self::Allowlist),
            "denylist" => Ok(Self::Denylist),
            "open" => Ok(Self::Open),
            _ => Err(InvalidNetworkWord {
                field: "mode",
                word: s.to_owned(),
                expected: "allowlist, denylist or open",
            }),
        }
    }
}

/// How a node-level network block combines with its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum NetworkInherit {
    /// Parent rules then node rules (the default).
    Merge,
    /// The node block replaces the parent's.
    Replace,
    /// Same as merge.
    Append,
}

impl NetworkInherit {
    /// The spelling used in workflows.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkInherit::Merge => "merge",
            NetworkInherit::Replace => "replace",
            NetworkInherit::Append => "append",
        }
    }
}

impl fmt::Display for NetworkInherit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

serde_via_parser!(NetworkMode, NetworkInherit);

/// Exact words, like [`NetworkMode`].
impl FromStr for NetworkInherit {
    type Err = InvalidNetworkWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "merge" => Ok(Self::Merge),
            "replace" => Ok(Self::Replace),
            "append" => Ok(Self::Append),
            _ => Err(InvalidNetworkWord {
                field: "inherit",
                word: s.to_owned(),
                expected: "merge, replace or append",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_words_are_exact_and_serde_agrees() {
        assert_eq!("denylist".parse(), Ok(NetworkMode::Denylist));
        for bad in ["Allowlist", " open", "deny", ""] {
            assert!(bad.parse::<NetworkMode>().is_err(), "{bad:?}");
            let json = serde_json::to_string(bad).unwrap();
            assert!(
                serde_json::from_str::<NetworkMode>(&json).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!("append".parse(), Ok(NetworkInherit::Append));
        assert!("MERGE".parse::<NetworkInherit>().is_err());
        let spec: NetworkSpec = serde_json::from_str(
            r#"{"mode":"allowlist","preset":"iterion-default","rules":["a.com","!10.0.0.0/8"],"inherit":"replace"}"#,
        )
        .unwrap();
        assert_eq!(spec.rules.len(), 2);
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({"mode":"allowlist","preset":"iterion-default","rules":["a.com","!10.0.0.0/8"],"inherit":"replace"})
        );
        assert!(
            serde_json::from_str::<NetworkSpec>(
                r#"{"mode":null,"preset":null,"rules":["a*b"],"inherit":null}"#
            )
            .is_err()
        );
    }
}
