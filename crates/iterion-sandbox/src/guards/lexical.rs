//! The lexical primitives every guard builds on, and the bind judge too:
//! the refusal value ([`GuardViolation`]), the string-only path
//! normalisation ([`normalize_lexical`]) and the injection check on a
//! token ([`check_token`]). They name nothing else in the crate, so
//! `binds` (the real-path judge, which `guards` calls for a spelling)
//! reaches them here without the two files naming each other.

/// A guard refused a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} refused: {reason}")]
pub struct GuardViolation {
    /// Which field (`mount`, `image`, `user`, `workdir`, `env`…).
    pub field: String,
    /// The offending value (never a secret: env values are not echoed).
    pub value: String,
    /// Why.
    pub reason: String,
}

impl GuardViolation {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_SPEC_REFUSED"
    }

    pub(crate) fn new(field: &str, value: &str, reason: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Lexically normalise a path: collapse `//`, drop `.`, resolve `..`
/// against the preceding component (never above `/` for absolute paths),
/// drop trailing slashes. Never touches the filesystem.
pub fn normalize_lexical(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// Refuse a value with a control character (CR, LF, NUL and every other C0
/// byte or DEL) or a leading `-` (flag injection into engine argv).
pub fn check_token(field: &str, value: &str) -> Result<(), GuardViolation> {
    if value.chars().any(|c| c.is_control()) {
        return Err(GuardViolation::new(
            field,
            &value.escape_debug().to_string(),
            "contains a control character",
        ));
    }
    if value.trim_start().starts_with('-') {
        return Err(GuardViolation::new(
            field,
            value,
            "starts with '-' (flag injection)",
        ));
    }
    Ok(())
}
