//! Identifier newtypes, and the owner of a local run ([`RunOwner`]: the
//! process a driver writes on what it creates and the store on the run).
//! Ids are validated on construction so that anything holding a [`RunId`]
//! can use it in a container name, a label value, a file name or a SQL key
//! without re-checking it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidId {
    /// Which kind of id was being parsed.
    pub what: &'static str,
    /// The rejected value.
    pub value: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

impl InvalidId {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        "INVALID_ID"
    }
}

/// Identifier of one workflow run: `[a-z0-9][a-z0-9_-]{0,62}`.
///
/// The charset is the intersection of what a Docker container name, a
/// Kubernetes label value, a file name and an Engine API filter accept, so a
/// run id never needs escaping downstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// Maximum length (a Kubernetes label value is at most 63 bytes).
    pub const MAX_LEN: usize = 63;

    /// Parse and validate a run id.
    pub fn parse(value: impl Into<String>) -> Result<Self, InvalidId> {
        let value = value.into();
        let err = |reason| InvalidId {
            what: "run id",
            value: value.clone(),
            reason,
        };
        if value.is_empty() {
            return Err(err("empty"));
        }
        if value.len() > Self::MAX_LEN {
            return Err(err("longer than 63 characters"));
        }
        let mut chars = value.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !first_ok {
            return Err(err("must start with a lower-case letter or a digit"));
        }
        if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') {
            return Err(err("only a-z, 0-9, '-' and '_' are allowed"));
        }
        Ok(Self(value))
    }

    /// A fresh, time-ordered run id: `r` + UTC timestamp + 8 random hex digits.
    pub fn generate() -> Self {
        let now = time::OffsetDateTime::now_utc();
        let random: [u8; 4] = rand::random();
        Self(format!(
            "r{:04}{:02}{:02}{:02}{:02}{:02}-{}",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            hex::encode(random)
        ))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RunId {
    type Error = InvalidId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Identifier of a node of a workflow (an `.iter` identifier).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(String);

impl NodeId {
    /// Wrap a node name. The DSL has already checked it is an identifier.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The process that owns a local run (the reaper's liveness signal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOwner {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Process start time (clock ticks since boot, from `/proc/PID/stat`),
    /// so a recycled pid is not mistaken for the owner.
    pub start_time: u64,
}

impl RunOwner {
    /// `<pid>:<start time>@<host>`: how drivers write the owner on the
    /// resources they create (a label on docker, an annotation on
    /// Kubernetes, where `:` and `@` are not label characters).
    pub fn encode(&self) -> String {
        format!("{}:{}@{}", self.pid, self.start_time, self.host)
    }

    /// Parse [`RunOwner::encode`]'s form; `None` for anything else.
    pub fn decode(value: &str) -> Option<Self> {
        let (lease, host) = value.split_once('@')?;
        let (pid, start) = lease.split_once(':')?;
        Some(Self {
            host: host.to_owned(),
            pid: pid.parse().ok()?,
            start_time: start.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid() {
        let id = RunId::generate();
        assert_eq!(RunId::parse(id.as_str()).as_ref(), Ok(&id));
    }

    #[test]
    fn rejects_hostile_ids() {
        for bad in ["", "-x", "A", "a/b", "a..b", "a b", &"a".repeat(64), "a\0"] {
            assert!(RunId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
