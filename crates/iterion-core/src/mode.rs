//! Sandbox modes, `host_state`, the trust level of a run and what
//! admission decided of it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The four sandbox modes of the flow seed.
///
/// Only the two *active* modes ([`Mode::Auto`], [`Mode::Inline`]) ever reach
/// driver selection; every caller keys on [`Mode::is_active`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The empty string: the parent scope decides. At the top, "no sandbox"
    /// unless a lower precedence tier speaks.
    #[default]
    Inherit,
    /// Explicit opt-out; silent by design.
    None,
    /// Repo devcontainer or the default image; degrades when no driver exists.
    Auto,
    /// Spec from the workflow block; refuses when no driver exists.
    Inline,
}

impl Mode {
    /// Whether this mode asks for a container.
    pub fn is_active(self) -> bool {
        matches!(self, Mode::Auto | Mode::Inline)
    }

    /// The spelling used in workflows, flags and events (`""` for inherit).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Inherit => "",
            Mode::None => "none",
            Mode::Auto => "auto",
            Mode::Inline => "inline",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a sandbox mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid sandbox mode {0:?} (expected none, auto or inline)")]
pub struct InvalidMode(pub String);

/// The workflow words, exactly as upstream's compiler accepts them (`""`,
/// `none`, `auto`, `inline`): no case folding, no padding, and `inherit` is
/// not a word a user writes (it is the empty value), so `sandbox: AUTO` or
/// `sandbox: inherit` is C044 as upstream, never a silent mode.
impl FromStr for Mode {
    type Err = InvalidMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" => Ok(Mode::Inherit),
            "none" => Ok(Mode::None),
            "auto" => Ok(Mode::Auto),
            "inline" => Ok(Mode::Inline),
            _ => Err(InvalidMode(s.to_owned())),
        }
    }
}

/// Whether host state (credentials, caches, git identity) is bound into the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// Bind the host-state candidates under a uid-owned tmpfs HOME.
    Auto,
    /// Bind nothing (no scratch either); pass the git identity as env.
    None,
}

impl HostState {
    /// The spelling used in workflows, flags and events.
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Auto => "auto",
            HostState::None => "none",
        }
    }
}

impl fmt::Display for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a host_state value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host_state {0:?} (expected auto or none)")]
pub struct InvalidHostState(pub String);

/// Exact words, as upstream's compiler (`host_state: NONE` is C044).
impl FromStr for HostState {
    type Err = InvalidHostState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(HostState::Auto),
            "none" => Ok(HostState::None),
            _ => Err(InvalidHostState(s.to_owned())),
        }
    }
}

/// Trust level of a run's workspace (the fork lane is `untrusted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// The default: the operator's own workspace.
    #[default]
    Trusted,
    /// A workspace the operator does not vouch for (e.g. a fork's PR); it
    /// must run in a container or not at all.
    Untrusted,
}

impl Trust {
    /// The spelling used in flags, records and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Trusted => "trusted",
            Trust::Untrusted => "untrusted",
        }
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Trust {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trusted" => Ok(Trust::Trusted),
            "untrusted" => Ok(Trust::Untrusted),
            other => Err(format!(
                "invalid trust {other:?} (expected trusted or untrusted)"
            )),
        }
    }
}

/// Admission verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionDecision {
    /// The run may proceed.
    Admitted,
    /// The run is refused.
    Denied,
}

impl AdmissionDecision {
    /// The snake_case spelling (records and `run_admission` events).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admitted => "admitted",
            Self::Denied => "denied",
        }
    }
}

impl fmt::Display for AdmissionDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_auto_and_inline_are_active() {
        let active: Vec<_> = [Mode::Inherit, Mode::None, Mode::Auto, Mode::Inline]
            .into_iter()
            .filter(|m| m.is_active())
            .collect();
        assert_eq!(active, vec![Mode::Auto, Mode::Inline]);
    }

    #[test]
    fn parses_modes() {
        assert_eq!("auto".parse(), Ok(Mode::Auto));
        assert_eq!("".parse(), Ok(Mode::Inherit));
        for bad in ["AUTO", "Inline", " none", "inherit", "NONE"] {
            assert!(bad.parse::<Mode>().is_err(), "{bad}");
        }
        assert_eq!("none".parse(), Ok(HostState::None));
        assert!("NONE".parse::<HostState>().is_err());
        assert!("allowlist".parse::<Mode>().is_err());
    }
}
