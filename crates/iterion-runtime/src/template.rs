//! `{{…}}` substitution in tool commands, scripts, prompts and `with`
//! mappings (facts §2.6).
//!
//! In a command, `{{vars.x}}`, `{{input.x}}` and `{{outputs.node.field}}`
//! are replaced by the value POSIX-single-quoted, so a value can never
//! become shell syntax; `{{!…}}` inserts it raw (the author's explicit
//! choice). In a script body a value is a JSON literal (a string a script
//! language can parse), `{{!…}}` raw. In a `with` mapping,
//! `{{output.field}}` also names the source node's output, and an
//! expression that is exactly one reference keeps the value's JSON type.
//!
//! A reference to something that is not there (a node that has not run
//! yet, a field its output lacks, an input field no edge gave) never fails
//! the node; it reads as upstream reads it (`pkg/runtime/engine.go`
//! `resolveRef`, `pkg/backend/model/executor.go` `resolveTemplate`,
//! `executor_tool.go` `resolveTemplateWith`): a single-reference `with`
//! value is `null`; a prompt keeps the placeholder literally and renders
//! `null` as `""`; a command keeps the placeholder literally (no value
//! reaches the shell: the author's own text does); a script gets `null`.
//! Only a namespace no reference can name, or an unclosed `{{`, is an
//! error (admission refuses both before the run starts).
//!
//! `{{artifacts.NAME}}` reads the latest output a node published as
//! `NAME` (`publish:`), `{{loop.NAME.iteration|max|previous_output}}` the
//! state of a loop as upstream. Both ride in [`Scope::outputs`] under keys
//! no node id can take ([`ARTIFACTS_KEY`], [`LOOPS_KEY`]), so every caller
//! that already hands over the outputs it sees hands these over too.

use std::collections::BTreeMap;

use iterion_core::NodeId;
use serde_json::{Map, Value};

/// Why a template did not render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without `}}`.
    #[error("unclosed '{{{{' at byte {at} of {template:?}")]
    Unclosed {
        /// The template.
        template: String,
        /// Byte offset.
        at: usize,
    },
    /// A namespace other than vars/input/outputs/output.
    #[error(
        "unknown reference {{{{{reference}}}}}: expected vars.NAME, input.NAME, outputs.NODE.FIELD, output.FIELD, artifacts.NAME, attachments.NAME or loop.NAME.FIELD"
    )]
    UnknownNamespace {
        /// The reference.
        reference: String,
    },
    /// The reference names nothing.
    #[error("{{{{{reference}}}}} does not resolve: {reason}")]
    Unresolved {
        /// The reference.
        reference: String,
        /// Why.
        reason: &'static str,
    },
}

impl TemplateError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "TEMPLATE_ERROR"
    }
}

/// The `outputs` entry holding published artifacts (name → output). A
/// NUL byte: never part of a node id, which is an identifier.
pub const ARTIFACTS_KEY: &str = "\u{0}artifacts";

/// The `outputs` entry holding the run's provided attachments (name →
/// `{path, file, size, sha256, mime}`; `{{attachments.x}}` is its path).
pub const ATTACHMENTS_KEY: &str = "\u{0}attachments";

/// The `outputs` entry holding loop state (name → `{iteration, max,
/// previous_output}`).
pub const LOOPS_KEY: &str = "\u{0}loop";

/// What references resolve against.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// Run variables (declared defaults overlaid by `--var`).
    pub vars: &'a BTreeMap<String, Value>,
    /// The node's input (built by the incoming edge's `with`).
    pub input: &'a Map<String, Value>,
    /// Outputs of every node that ran so far (last execution wins), plus
    /// the artifacts and loop entries ([`ARTIFACTS_KEY`], [`LOOPS_KEY`]).
    pub outputs: &'a BTreeMap<NodeId, Value>,
    /// The source node's output (only inside `with`).
    pub output: Option<&'a Value>,
}

/// POSIX single-quoting: `'…'` with every `'` written as `'\''`. Inside
/// single quotes no character is special, so this is total.
pub fn shell_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Text form of a value: strings as-is, everything else as compact JSON.
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

enum Piece<'t> {
    Text(&'t str),
    Ref {
        reference: &'t str,
        raw: bool,
        /// The placeholder as written, `{{` to `}}`.
        text: &'t str,
    },
}

fn split(template: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(TemplateError::Unclosed {
                template: template.to_owned(),
                at: offset + start,
            });
        };
        let inner = after[..end].trim();
        let (raw, reference) = match inner.strip_prefix('!') {
            Some(r) => (true, r.trim()),
            None => (false, inner),
        };
        let consumed = start + 2 + end + 2;
        pieces.push(Piece::Ref {
            reference,
            raw,
            text: &rest[start..consumed],
        });
        offset += consumed;
        rest = &rest[consumed..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

fn lookup<'s>(reference: &str, scope: &Scope<'s>) -> Result<&'s Value, TemplateError> {
    let unresolved = |reason| TemplateError::Unresolved {
        reference: reference.to_owned(),
        reason,
    };
    let mut parts = reference.split('.');
    let ns = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let (root, path): (Option<&'s Value>, &[&str]) = match (ns, rest.as_slice()) {
        ("vars", [name, tail @ ..]) => (
            Some(
                scope
                    .vars
                    .get(*name)
                    .ok_or_else(|| unresolved("no such variable"))?,
            ),
            tail,
        ),
        ("input", [name, tail @ ..]) => (
            Some(
                scope
                    .input
                    .get(*name)
                    .ok_or_else(|| unresolved("the node's input has no such field"))?,
            ),
            tail,
        ),
        ("outputs", [node, tail @ ..]) => (
            Some(
                scope
                    .outputs
                    .get(&NodeId::new(*node))
                    .ok_or_else(|| unresolved("that node has not produced an output"))?,
            ),
            tail,
        ),
        ("artifacts", [name, tail @ ..]) => (
            Some(
                scope
                    .outputs
                    .get(&NodeId::new(ARTIFACTS_KEY))
                    .and_then(|a| a.get(*name))
                    .ok_or_else(|| unresolved("no node has published that artifact yet"))?,
            ),
            tail,
        ),
        ("attachments", [name, tail @ ..]) => (
            Some(
                scope
                    .outputs
                    .get(&NodeId::new(ATTACHMENTS_KEY))
                    .and_then(|a| a.get(*name))
                    .ok_or_else(|| {
                        unresolved("no attachment of that name was provided to the run")
                    })?,
            ),
            // `{{attachments.x}}` is its path (upstream's default).
            if tail.is_empty() { &["path"][..] } else { tail },
        ),
        ("loop", [name, tail @ ..]) => (
            Some(
                scope
                    .outputs
                    .get(&NodeId::new(LOOPS_KEY))
                    .and_then(|l| l.get(*name))
                    .ok_or_else(|| unresolved("no such loop"))?,
            ),
            tail,
        ),
        ("output", tail) => (
            Some(
                scope
                    .output
                    .ok_or_else(|| unresolved("`output` only exists in `with`"))?,
            ),
            tail,
        ),
        _ => {
            return Err(TemplateError::UnknownNamespace {
                reference: reference.to_owned(),
            });
        }
    };
    let mut value = root.ok_or_else(|| unresolved("empty"))?;
    for key in path {
        value = value.get(*key).ok_or_else(|| unresolved("no such field"))?;
    }
    Ok(value)
}

/// What a reference reads when it resolves: its value, `None` when it
/// names something that is not there (yet), an error only for a namespace
/// no reference can name.
fn lookup_opt<'s>(reference: &str, scope: &Scope<'s>) -> Result<Option<&'s Value>, TemplateError> {
    match lookup(reference, scope) {
        Ok(v) => Ok(Some(v)),
        Err(TemplateError::Unresolved { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `loop.NAME.previous_output…` before the loop's first pass renders `""`
/// in a prompt (upstream `resolveTemplateRef`), not the placeholder.
fn is_previous_output(reference: &str) -> bool {
    let mut parts = reference.split('.');
    parts.next() == Some("loop") && parts.nth(1) == Some("previous_output")
}

/// Render a tool command: references shell-quoted unless `{{!…}}`; a
/// reference to nothing, or to `null`, keeps its placeholder literally
/// (upstream `resolveCommandTemplate`: a missing wiring stays visible).
pub fn render_command(template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    for piece in split(template)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Ref {
                reference,
                raw,
                text,
            } => match lookup_opt(reference, scope)? {
                None | Some(Value::Null) => out.push_str(text),
                Some(value) if raw => out.push_str(&value_text(value)),
                Some(value) => out.push_str(&shell_quote(&value_text(value))),
            },
        }
    }
    Ok(out)
}

/// Render a tool `script:` body: each value as a JSON literal (`"a b"`,
/// `3`, `{"k":1}`), which JavaScript, Python and Ruby all parse; `{{!…}}`
/// inserts a string unquoted; a reference to nothing is `null`, so the
/// script still parses and can handle it (upstream `resolveScriptTemplate`).
pub fn render_script(template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    for piece in split(template)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Ref { reference, raw, .. } => {
                let value = lookup_opt(reference, scope)?.unwrap_or(&Value::Null);
                if raw {
                    out.push_str(&value_text(value));
                } else {
                    out.push_str(&value.to_string());
                }
            }
        }
    }
    Ok(out)
}

/// Render a `with` expression: exactly one reference keeps its JSON type,
/// and is `null` when it names nothing (a node that has not run yet;
/// upstream `resolveMapping`); anything else is string interpolation (no
/// quoting: not a shell) where a missing reference keeps its placeholder
/// and `null` is `""`, as in a prompt.
pub fn render_value(template: &str, scope: &Scope<'_>) -> Result<Value, TemplateError> {
    let pieces = split(template)?;
    if let [Piece::Ref { reference, .. }] = pieces.as_slice() {
        return Ok(lookup_opt(reference, scope)?
            .cloned()
            .unwrap_or(Value::Null));
    }
    render_pieces(pieces, scope).map(Value::String)
}

/// Render a prompt body: every reference interpolated as its text form
/// (no quoting: a prompt is not a shell; `{{!…}}` means the same); `null`
/// is `""`, and a reference to nothing keeps its placeholder literally
/// (upstream `resolveTemplate`: `{{input.task}}` with no such input stays
/// in the prompt, never an error).
pub fn render_text(template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
    render_pieces(split(template)?, scope)
}

fn render_pieces(pieces: Vec<Piece<'_>>, scope: &Scope<'_>) -> Result<String, TemplateError> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Ref {
                reference, text, ..
            } => match lookup_opt(reference, scope)? {
                Some(Value::Null) => {}
                Some(value) => out.push_str(&value_text(value)),
                None if is_previous_output(reference) => {}
                None => out.push_str(text),
            },
        }
    }
    Ok(out)
}

/// Check a template's syntax and namespaces without resolving values
/// (admission runs this on every command and `with`).
pub fn check_syntax(template: &str) -> Result<(), TemplateError> {
    for piece in split(template)? {
        if let Piece::Ref { reference, .. } = piece {
            let ns = reference.split('.').next().unwrap_or_default();
            let parts = reference.split('.').count();
            let ok = match ns {
                "vars" | "input" | "outputs" | "artifacts" | "attachments" => parts >= 2,
                "loop" => parts >= 3,
                "output" => true,
                _ => false,
            };
            if !ok {
                return Err(TemplateError::UnknownNamespace {
                    reference: reference.to_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn with_scope<R>(f: impl FnOnce(&Scope<'_>) -> R) -> R {
        let vars = BTreeMap::from([
            ("name".to_owned(), json!("it's $(rm -rf /)")),
            ("n".to_owned(), json!(3)),
        ]);
        let input = json!({"msg": "a b"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let outputs = BTreeMap::from([(
            NodeId::new("probe"),
            json!({"ok": true, "deep": {"x": "y"}}),
        )]);
        let output = json!({"ok": false});
        f(&Scope {
            vars: &vars,
            input: &input,
            outputs: &outputs,
            output: Some(&output),
        })
    }

    #[test]
    fn command_quotes_unless_raw() {
        with_scope(|s| {
            assert_eq!(
                render_command("echo {{vars.name}} {{ input.msg }} {{!vars.n}}", s)
                    .expect("render"),
                r#"echo 'it'\''s $(rm -rf /)' 'a b' 3"#
            );
            assert_eq!(
                render_command("{{outputs.probe.deep.x}}", s).expect("render"),
                "'y'"
            );
        });
    }

    /// Upstream `executor_tool.go` `resolveCommandTemplate` /
    /// `resolveScriptTemplate`: a missing or null reference keeps its
    /// placeholder in a command, is `null` in a script; only an unknown
    /// namespace or an unclosed `{{` is an error.
    #[test]
    fn missing_refs_stay_literal_in_commands_and_null_in_scripts() {
        with_scope(|s| {
            assert_eq!(
                render_command("echo {{vars.nope}} {{ outputs.later.x }} {{input.msg}}", s)
                    .expect("render"),
                "echo {{vars.nope}} {{ outputs.later.x }} 'a b'"
            );
            assert_eq!(
                render_script(
                    "x = {{input.nope}}; y = {{input.msg}}; z = {{!input.msg}}; n = {{vars.n}}",
                    s
                )
                .expect("script"),
                r#"x = null; y = "a b"; z = a b; n = 3"#
            );
            assert!(matches!(
                render_command("{{env.HOME}}", s),
                Err(TemplateError::UnknownNamespace { .. })
            ));
            assert!(matches!(
                render_command("echo {{vars.name", s),
                Err(TemplateError::Unclosed { .. })
            ));
        });
        assert!(check_syntax("{{vars}}").is_err());
        assert!(check_syntax("a {{ outputs.n.f }} {{!vars.x}}").is_ok());
    }

    /// Upstream `executor.go` `resolveTemplate`: an absent reference stays
    /// literally in the prompt, a null one renders `""`.
    #[test]
    fn prompts_interpolate_without_quoting() {
        with_scope(|s| {
            assert_eq!(
                render_text("Hi {{vars.name}}, n={{ vars.n }} {{!input.msg}}", s).expect("text"),
                "Hi it's $(rm -rf /), n=3 a b"
            );
            assert_eq!(
                render_text(
                    "task: {{input.task}} / {{outputs.fixer.pushback}} / {{outputs.probe.none}}",
                    s
                )
                .expect("text"),
                "task: {{input.task}} / {{outputs.fixer.pushback}} / {{outputs.probe.none}}"
            );
            assert_eq!(
                render_text(
                    "[{{input.gone}}]",
                    &Scope {
                        input: &json!({"gone": null})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                        ..*s
                    }
                )
                .expect("text"),
                "[]"
            );
        });
    }

    /// Upstream `engine.go` `resolveMapping`/`resolveRef`: a `with` value
    /// that is exactly one reference to a node that has not run is null.
    #[test]
    fn with_keeps_types_for_a_single_reference() {
        with_scope(|s| {
            assert_eq!(render_value("{{output.ok}}", s).expect("v"), json!(false));
            assert_eq!(render_value("{{vars.n}}", s).expect("v"), json!(3));
            assert_eq!(render_value("n={{vars.n}}", s).expect("v"), json!("n=3"));
            assert_eq!(render_value("literal", s).expect("v"), json!("literal"));
            assert_eq!(
                render_value("{{outputs.fixer.pushback}}", s).expect("v"),
                Value::Null
            );
            assert_eq!(
                render_value("{{outputs.probe.missing}}", s).expect("v"),
                Value::Null
            );
            assert_eq!(
                render_value("was: {{outputs.fixer.pushback}}", s).expect("v"),
                json!("was: {{outputs.fixer.pushback}}")
            );
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The escaped value reaches the program byte for byte, whatever it
        /// holds (quotes, `$()`, backticks, newlines, globs).
        #[test]
        fn quoted_value_round_trips_through_sh(value in "[^\u{0}]{0,40}") {
            let cmd = format!("printf %s {}", shell_quote(&value));
            let out = std::process::Command::new("sh").arg("-c").arg(&cmd).output().expect("sh");
            prop_assert!(out.status.success());
            prop_assert_eq!(String::from_utf8_lossy(&out.stdout).into_owned(), value);
        }

        #[test]
        fn rendering_never_panics(t in ".{0,60}") {
            let _ = with_scope(|s| render_command(&t, s));
            let _ = check_syntax(&t);
        }
    }
}
