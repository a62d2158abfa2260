//! What `{{vars.X}}` and the entry node's `{{input.X}}` read (upstream
//! `pkg/runtime/engine.go`: `resolveVars` and `buildNodeInputRS`).
//!
//! A run's variables are the declared defaults overlaid by the launch's
//! values (`--preset`, then `--var`; admission coerced them). For
//! `{{vars.X}}`, a string value has `${PROJECT_DIR}` expanded to the
//! workspace as the run's commands see it (the container workspace in a
//! sandbox) and `${NAME}`, `${NAME:-default}` and `$NAME` expanded from the
//! engine's environment, as upstream. The entry node's input keeps the
//! values raw (upstream hands it the unexpanded defaults).
//!
//! One difference, deliberate: a name that looks like a credential
//! (`…KEY…`, `…TOKEN…`, `…SECRET…`, `…PASSWORD…`, `…CREDENTIAL…`,
//! `…AUTH…`, `…COOKIE…`, `…PRIVATE…`) expands to its default or `""`, never
//! to the operator's value: a workflow's variable must not carry a host
//! secret into a command or a prompt (secrets reach a run through
//! `secrets:`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Whether an environment name may be read into a variable.
pub fn env_name_readable(name: &str) -> bool {
    const CREDENTIAL_WORDS: &[&str] = &[
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
        "PRIVATE",
    ];
    let upper = name.to_ascii_uppercase();
    !CREDENTIAL_WORDS.iter().any(|w| upper.contains(w))
}

/// The variables `{{vars.X}}` reads: every string value expanded.
pub fn expand_vars(
    vars: &BTreeMap<String, Value>,
    project_dir: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, Value> {
    vars.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => Value::String(expand(s, project_dir, env)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// The entry node's input: the variables as given, unexpanded.
pub fn entry_input(vars: &BTreeMap<String, Value>) -> Map<String, Value> {
    vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn lookup(name: &str, project_dir: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if name == "PROJECT_DIR" {
        return Some(project_dir.to_owned());
    }
    if !env_name_readable(name) {
        tracing::warn!(
            name,
            "a variable default names a credential-like environment variable: not expanded"
        );
        return None;
    }
    env(name)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expand `${NAME}`, `${NAME:-default}` (the default itself expanded) and
/// `$NAME` in one string; an unset name is `""`; anything else (`$5`, a
/// lone `$`, an unclosed `${`) stays as written.
pub fn expand(s: &str, project_dir: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(body) = after.strip_prefix('{') {
            // Find the matching `}` (a default may hold `${…}` itself).
            let mut depth = 1usize;
            let mut end = None;
            let mut chars = body.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                match c {
                    '$' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                        depth += 1;
                        chars.next();
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let Some(end) = end else {
                out.push_str(&rest[at..]);
                return out;
            };
            let inner = &body[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            if name.starts_with(is_name_start) && name.chars().all(is_name_char) {
                match lookup(name, project_dir, env).filter(|v| !v.is_empty()) {
                    Some(v) => out.push_str(&v),
                    None => {
                        if let Some(d) = default {
                            out.push_str(&expand(d, project_dir, env));
                        }
                    }
                }
            } else {
                out.push_str(&rest[at..at + 2 + end + 1]);
            }
            rest = &body[end + 1..];
        } else if after.starts_with(is_name_start) {
            let len = after.find(|c| !is_name_char(c)).unwrap_or(after.len());
            if let Some(v) = lookup(&after[..len], project_dir, env) {
                out.push_str(&v);
            }
            rest = &after[len..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/me".into()),
            "CLAUDE_MODEL" => Some("anthropic/x".into()),
            "ANTHROPIC_API_KEY" => Some("sk-secret".into()),
            "GITHUB_TOKEN" => Some("ghp_secret".into()),
            _ => None,
        }
    }

    /// Upstream `engine.go` `resolveVars`: string defaults go through
    /// `os.Expand` with `PROJECT_DIR` as the (container) workspace.
    #[test]
    fn project_dir_and_env_expand_for_vars() {
        let vars = BTreeMap::from([
            ("ws".to_owned(), json!("${PROJECT_DIR}")),
            ("scan".to_owned(), json!("${PROJECT_DIR}/.iterion/scan")),
            ("cache".to_owned(), json!("$HOME/.cache")),
            ("model".to_owned(), json!("${CLAUDE_MODEL}")),
            ("unset".to_owned(), json!("[${NOPE}]")),
            ("dflt".to_owned(), json!("${NOPE:-${HOME}/x}")),
            ("n".to_owned(), json!(3)),
            ("price".to_owned(), json!("$5 and $ and ${ and ${a b}")),
        ]);
        let out = expand_vars(&vars, "/workspace", &env);
        assert_eq!(out["ws"], json!("/workspace"));
        assert_eq!(out["scan"], json!("/workspace/.iterion/scan"));
        assert_eq!(out["cache"], json!("/home/me/.cache"));
        assert_eq!(out["model"], json!("anthropic/x"));
        assert_eq!(out["unset"], json!("[]"));
        assert_eq!(out["dflt"], json!("/home/me/x"));
        assert_eq!(out["n"], json!(3));
        assert_eq!(out["price"], json!("$5 and $ and ${ and ${a b}"));
        // The entry input keeps them raw.
        assert_eq!(entry_input(&vars)["ws"], json!("${PROJECT_DIR}"));
    }

    #[test]
    fn credentials_never_expand() {
        let vars = BTreeMap::from([
            ("k".to_owned(), json!("${ANTHROPIC_API_KEY}")),
            ("t".to_owned(), json!("$GITHUB_TOKEN")),
            ("d".to_owned(), json!("${GITHUB_TOKEN:-none}")),
        ]);
        let out = expand_vars(&vars, "/w", &env);
        assert_eq!(out["k"], json!(""));
        assert_eq!(out["t"], json!(""));
        assert_eq!(out["d"], json!("none"));
    }
}
