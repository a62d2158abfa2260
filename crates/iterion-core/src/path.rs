//! Container paths a sandbox block names, parsed once: [`ContainerPath`]
//! (a workdir, a mount target) and [`ReadBackPath`] (a declared read-back
//! path, ADR-143). The DSL (C044/C320), the sandbox guards and the mount
//! planner all call these parsers; none re-decides what a path may be.
//!
//! `/a/./b` as a read-back path: refused, not rewritten. SPEC §4 says a
//! declared path is "absolute, normalized", ADR-143 R1 says it is declared
//! data, never inferred; the DSL refused it while the guards normalised it
//! to `/a/b`. Refusing is the one answer kept: a lexical `..` is not what
//! the container resolves when a component is a symlink, and one spelling
//! per path keeps the drained files' keys stable.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Whether `path` equals `root` or lies under it, component-wise
/// (`/a/bc` is not under `/a/b`). Trailing slashes are ignored.
pub fn path_is_under(path: &str, root: &str) -> bool {
    let path = path.trim_end_matches('/');
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return path.starts_with('/') || path.is_empty();
    }
    path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Container pseudo-filesystems a declared path may never name.
const PSEUDO_ROOTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// A container path that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} path `{path}`: {kind}", path = path.escape_debug())]
pub struct ContainerPathError {
    /// `container` or `read_back`.
    pub field: &'static str,
    /// The path as written.
    pub path: String,
    /// Why.
    pub kind: ContainerPathErrorKind,
}

impl ContainerPathError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        "CONTAINER_PATH_INVALID"
    }
}

/// Why a container path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContainerPathErrorKind {
    /// Not starting with `/`.
    #[error("not an absolute container path")]
    NotAbsolute,
    /// NUL, CR, LF or any other control character (argv/line injection).
    #[error("contains a control character")]
    Control,
    /// `.`, `..`, `//` or a trailing `/`.
    #[error("not normalized (no `.`, `..`, `//` or trailing `/`)")]
    NotNormalized,
    /// `/` itself.
    #[error("the container root cannot be read back")]
    Root,
    /// Under `/proc`, `/sys` or `/dev`.
    #[error("under /proc, /sys or /dev")]
    Pseudo,
}

/// An absolute container path without control characters (a workdir, a
/// mount target). It is not normalised: the engine resolves it inside the
/// container, where only the container's own symlinks can move it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContainerPath(String);

impl ContainerPath {
    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn check(field: &'static str, s: &str) -> Result<(), ContainerPathError> {
        let err = |kind| ContainerPathError {
            field,
            path: s.to_owned(),
            kind,
        };
        if s.chars().any(char::is_control) {
            return Err(err(ContainerPathErrorKind::Control));
        }
        if !s.starts_with('/') {
            return Err(err(ContainerPathErrorKind::NotAbsolute));
        }
        Ok(())
    }
}

impl FromStr for ContainerPath {
    type Err = ContainerPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::check("container", s)?;
        Ok(Self(s.to_owned()))
    }
}

/// A declared read-back path (ADR-143, SPEC §4): a [`ContainerPath`] that
/// is normalised as written, not `/`, and not under `/proc`, `/sys`, `/dev`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ReadBackPath(String);

impl ReadBackPath {
    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ReadBackPath {
    type Err = ContainerPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |kind| ContainerPathError {
            field: "read_back",
            path: s.to_owned(),
            kind,
        };
        ContainerPath::check("read_back", s)?;
        if s == "/" {
            return Err(err(ContainerPathErrorKind::Root));
        }
        if s.ends_with('/') || s[1..].split('/').any(|c| matches!(c, "" | "." | "..")) {
            return Err(err(ContainerPathErrorKind::NotNormalized));
        }
        if PSEUDO_ROOTS.iter().any(|root| path_is_under(s, root)) {
            return Err(err(ContainerPathErrorKind::Pseudo));
        }
        Ok(Self(s.to_owned()))
    }
}

macro_rules! path_newtype {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}
path_newtype!(ContainerPath);
path_newtype!(ReadBackPath);
serde_via_parser!(ContainerPath, ReadBackPath);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_under_is_component_wise() {
        assert!(path_is_under("/a/b", "/a/b"));
        assert!(path_is_under("/a/b/c", "/a/b/"));
        assert!(!path_is_under("/a/bc", "/a/b"));
        assert!(!path_is_under("/a", "/a/b"));
    }

    #[test]
    fn read_back_paths() {
        let kind = |p: &str| p.parse::<ReadBackPath>().err().map(|e| e.kind);
        use ContainerPathErrorKind::*;
        for (path, want) in [
            ("/workspace/out", None),
            ("/iterion/artifact-files", None),
            ("/device", None),
            ("/a/.b/..c", None),
            ("out", Some(NotAbsolute)),
            ("", Some(NotAbsolute)),
            ("/a/./b", Some(NotNormalized)),
            ("/a/../b", Some(NotNormalized)),
            ("/a//b", Some(NotNormalized)),
            ("/a/", Some(NotNormalized)),
            ("//a", Some(NotNormalized)),
            ("/.", Some(NotNormalized)),
            ("/", Some(Root)),
            ("/proc/self", Some(Pseudo)),
            ("/dev", Some(Pseudo)),
            ("/sys/fs", Some(Pseudo)),
            ("/a\0b", Some(Control)),
            ("/a\nb", Some(Control)),
        ] {
            assert_eq!(kind(path), want, "{path:?}");
        }
        assert_eq!(
            "/a/./b".parse::<ReadBackPath>().unwrap_err().to_string(),
            "invalid read_back path `/a/./b`: not normalized (no `.`, `..`, `//` or trailing `/`)"
        );
        let p: ReadBackPath = serde_json::from_str("\"/out\"").unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"/out\"");
        assert!(serde_json::from_str::<ReadBackPath>("\"/a/./b\"").is_err());
    }

    #[test]
    fn container_paths() {
        assert!("/w/../x".parse::<ContainerPath>().is_ok());
        assert!("w".parse::<ContainerPath>().is_err());
        assert!("-v".parse::<ContainerPath>().is_err());
        assert!("/w\r".parse::<ContainerPath>().is_err());
    }
}
