//! An explicit snapshot of environment variables. Every decision of this
//! crate that depends on the environment reads a snapshot handed in by the
//! caller, never the process environment, so a decision is reproducible in
//! a test and the engine controls exactly which variables reach an agent.
//!
//! Also the `${VAR}` / `${VAR:-default}` expansion upstream applies to a
//! node's `backend:` (`ir.ExpandEnvWithDefault`).

use std::collections::BTreeMap;

/// The variable names a `${VAR}` / `${VAR:-default}` expression reads, in
/// order (a default's own `${…}` included).
pub fn referenced_vars(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        rest = &rest[start + 2..];
        let end = rest.find(['}', ':']).unwrap_or(rest.len());
        let name = &rest[..end];
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
        rest = &rest[end..];
    }
    out
}

/// Environment variables, by name. `Debug` prints names only: a snapshot
/// holds credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvSnapshot(BTreeMap<String, String>);

impl std::fmt::Debug for EnvSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl EnvSnapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current process environment (the CLI and the runner call this
    /// once, at their edge; library code never does).
    pub fn from_process() -> Self {
        Self(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// Builder-style insert.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(name.into(), value.into());
        self
    }

    /// Insert or replace.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.insert(name.into(), value.into());
    }

    /// A variable's value; an empty value counts as unset (upstream treats
    /// `KEY=` as "no key", never as an empty credential).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Whether a variable is set to a non-empty value.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Every `(name, value)` pair.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Expand `${VAR}` and `${VAR:-default}` (also `$VAR`-free text) the way
    /// upstream expands a node's `backend:`. Returns the expansion and
    /// whether any variable contributed to it.
    pub fn expand(&self, s: &str) -> Expanded {
        let mut out = String::with_capacity(s.len());
        let mut from_env = false;
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                rest = "";
                break;
            };
            let inner = &after[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            match (self.get(name), default) {
                (Some(v), _) => {
                    from_env = true;
                    out.push_str(v);
                }
                (None, Some(d)) => out.push_str(d),
                (None, None) => {}
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Expanded {
            value: out,
            from_env,
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvSnapshot {
    fn from_iter<T: IntoIterator<Item = (K, V)>>(iter: T) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// Result of [`EnvSnapshot::expand`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The expanded text.
    pub value: String,
    /// Whether a variable's value is part of it.
    pub from_env: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_table() {
        let env = EnvSnapshot::new()
            .with("A", "claude_code")
            .with("EMPTY", "");
        let cases = [
            ("claw", "claw", false),
            ("${A}", "claude_code", true),
            ("${A:-claw}", "claude_code", true),
            ("${B:-claw}", "claw", false),
            ("${EMPTY:-claw}", "claw", false),
            ("${B}", "", false),
            ("x${A}y", "xclaude_codey", true),
            ("${unterminated", "${unterminated", false),
        ];
        for (input, want, from_env) in cases {
            let got = env.expand(input);
            assert_eq!(got.value, want, "{input}");
            assert_eq!(got.from_env, from_env, "{input}");
        }
    }

    #[test]
    fn debug_never_prints_values() {
        let env = EnvSnapshot::new().with("ANTHROPIC_API_KEY", "sk-secret");
        let dbg = format!("{env:?}");
        assert!(dbg.contains("ANTHROPIC_API_KEY"));
        assert!(!dbg.contains("sk-secret"));
    }
}
