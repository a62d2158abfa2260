//! Human nodes: the answers a person gives become the node's output.
//!
//! On a terminal the engine asks through a [`HumanPrompter`] (the CLI's
//! TTY prompter) and the run goes on; without one (`--no-interactive`, no
//! TTY, a runner) the run pauses: `human_input_requested`, status
//! `paused_waiting_human`, and `iterion resume --answer …` continues it
//! (`resume.rs`). Answers are checked against the node's output schema
//! here, one home for the TTY and for resume: unknown fields and values
//! of the wrong type are typed errors, never a half-filled output.
//! Running the node (asking, or pausing) is `node.rs`, in the run's
//! context; what is here is what that context, resume and the CLI's
//! prompter share, so none of them depends on a node's execution.
//!
//! It does not store anything or decide a run's status (the engine does).

use std::collections::BTreeMap;

use async_trait::async_trait;
use iterion_core::NodeId;
use iterion_dsl::ir::{self, FieldType, Schema};
use serde_json::{Map, Value};

use crate::routing::{check_output, coerce_var};

mod node;

/// One answer as given: a `--answer K=V` text (coerced to the field's
/// type) or a JSON value (`--answers-file`, checked as is).
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerInput {
    /// Text, as typed.
    Text(String),
    /// A JSON value.
    Json(Value),
}

/// What a human node asks.
#[derive(Debug, Clone, PartialEq)]
pub struct HumanRequest {
    /// The node.
    pub node: NodeId,
    /// Its `instructions:`, when written.
    pub instructions: Option<String>,
    /// What it shows: the node's input.
    pub questions: Value,
    /// The answer fields with their type names (the output schema's
    /// fields; `answer` (string) when the node declares none).
    pub fields: Vec<(String, &'static str)>,
}

/// Asks a person (the CLI's terminal prompter).
#[async_trait]
pub trait HumanPrompter: Send + Sync {
    /// The answers, field by field; `Err` when no answer can be had (the
    /// node fails with that reason).
    async fn ask(&self, request: &HumanRequest) -> Result<BTreeMap<String, AnswerInput>, String>;
}

/// Answers that do not fit the node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// No answer at all.
    #[error("human node {node} needs answers ({})", .expected.join(", "))]
    Missing {
        /// The node.
        node: NodeId,
        /// Its fields.
        expected: Vec<String>,
    },
    /// A field the node's output schema does not declare.
    #[error("human node {node} has no answer field {field:?} (its fields: {})", .expected.join(", "))]
    UnknownField {
        /// The node.
        node: NodeId,
        /// The field given.
        field: String,
        /// Its fields.
        expected: Vec<String>,
    },
    /// A value of the wrong type.
    #[error("answer {field} of human node {node}: {value:?} is not a {expected}")]
    WrongType {
        /// The node.
        node: NodeId,
        /// The field.
        field: String,
        /// Its type.
        expected: &'static str,
        /// What was given.
        value: String,
    },
    /// The answers as a whole miss a field or break an enum.
    #[error("answers of human node {node}: {message}")]
    Incomplete {
        /// The node.
        node: NodeId,
        /// Why.
        message: String,
    },
}

impl AnswerError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "answers_missing",
            Self::UnknownField { .. } => "answer_unknown_field",
            Self::WrongType { .. } => "answer_wrong_type",
            Self::Incomplete { .. } => "answers_incomplete",
        }
    }
}

/// The id of a human node's `times`-th (from 0) request in its frame.
pub fn interaction_id(node: &NodeId, times: usize) -> String {
    format!("{node}_{}", times + 1)
}

/// The field a human node without an output schema answers.
pub const DEFAULT_ANSWER_FIELD: &str = "answer";

/// The node's output schema, when it declares one.
pub fn answer_schema<'w>(workflow: &'w ir::Workflow, node: &ir::Node) -> Option<&'w Schema> {
    node.output.as_ref().and_then(|n| workflow.schemas.get(n))
}

/// The answer fields of a human node, with their type names.
pub fn answer_fields(schema: Option<&Schema>) -> Vec<(String, &'static str)> {
    match schema {
        Some(s) => s
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.ty.word()))
            .collect(),
        None => vec![(DEFAULT_ANSWER_FIELD.to_owned(), "string")],
    }
}

/// Check and type `raw` answers for `node`: the output it will have.
pub fn check_answers(
    node: &ir::Node,
    schema: Option<&Schema>,
    raw: &BTreeMap<String, AnswerInput>,
) -> Result<Value, AnswerError> {
    let names: Vec<String> = answer_fields(schema).into_iter().map(|(n, _)| n).collect();
    if raw.is_empty() {
        return Err(AnswerError::Missing {
            node: node.id.clone(),
            expected: names,
        });
    }
    let mut out = Map::new();
    for (field, given) in raw {
        let ty = match schema {
            Some(s) => match s.fields.iter().find(|f| &f.name == field) {
                Some(f) => f.ty,
                None => {
                    return Err(AnswerError::UnknownField {
                        node: node.id.clone(),
                        field: field.clone(),
                        expected: names,
                    });
                }
            },
            // No schema: any field, as given (upstream).
            None => {
                let value = match given {
                    AnswerInput::Text(t) => Value::String(t.clone()),
                    AnswerInput::Json(v) => v.clone(),
                };
                out.insert(field.clone(), value);
                continue;
            }
        };
        let value = match given {
            AnswerInput::Text(t) => coerce_var(t, ty),
            AnswerInput::Json(Value::String(t)) if ty != FieldType::String => coerce_var(t, ty),
            AnswerInput::Json(v) => coerce_var(&v.to_string(), ty)
                .filter(|_| ty != FieldType::String)
                .or_else(|| v.is_string().then(|| v.clone())),
        };
        let Some(value) = value else {
            return Err(AnswerError::WrongType {
                node: node.id.clone(),
                field: field.clone(),
                expected: ty.word(),
                value: match given {
                    AnswerInput::Text(t) => t.clone(),
                    AnswerInput::Json(v) => v.to_string(),
                },
            });
        };
        out.insert(field.clone(), value);
    }
    check_output(out, schema).map_err(|e| AnswerError::Incomplete {
        node: node.id.clone(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_dsl::ir::{Field, NodeKind, Pos};
    use serde_json::json;

    fn node() -> ir::Node {
        ir::Node {
            id: NodeId::new("review"),
            kind: NodeKind::Human,
            tool: None,
            router_mode: None,
            input: None,
            output: Some("verdict".into()),
            sandbox: None,
            properties: BTreeMap::new(),
            mcp_servers: Default::default(),
            pos: Pos::default(),
        }
    }

    fn schema() -> Schema {
        let f = |name: &str, ty, enum_values: &[&str]| Field {
            name: name.into(),
            ty,
            enum_values: enum_values.iter().map(|s| (*s).to_owned()).collect(),
        };
        Schema {
            fields: vec![
                f("approved", FieldType::Bool, &[]),
                f("score", FieldType::Int, &[]),
                f("note", FieldType::String, &["ok", "meh"]),
            ],
        }
    }

    fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, AnswerInput> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), AnswerInput::Text((*v).to_owned())))
            .collect()
    }

    #[test]
    fn answers_are_typed_by_the_schema() {
        let s = schema();
        let out = check_answers(
            &node(),
            Some(&s),
            &text(&[("approved", "true"), ("score", "7"), ("note", "ok")]),
        )
        .unwrap();
        assert_eq!(out, json!({"approved": true, "score": 7, "note": "ok"}));
        let mut raw = text(&[("note", "meh")]);
        raw.insert("approved".into(), AnswerInput::Json(json!(false)));
        raw.insert("score".into(), AnswerInput::Json(json!(3)));
        assert_eq!(
            check_answers(&node(), Some(&s), &raw).unwrap(),
            json!({"approved": false, "score": 3, "note": "meh"})
        );
    }

    #[test]
    fn bad_answers_are_typed_errors() {
        let s = schema();
        let n = node();
        assert_eq!(
            check_answers(&n, Some(&s), &BTreeMap::new())
                .unwrap_err()
                .code(),
            "answers_missing"
        );
        let unknown = check_answers(&n, Some(&s), &text(&[("aproved", "true")])).unwrap_err();
        assert_eq!(unknown.code(), "answer_unknown_field");
        assert!(
            unknown.to_string().contains("approved, score, note"),
            "{unknown}"
        );
        let wrong = check_answers(&n, Some(&s), &text(&[("score", "seven")])).unwrap_err();
        assert_eq!(wrong.code(), "answer_wrong_type");
        let mut raw = text(&[("approved", "true"), ("note", "ok")]);
        raw.insert("score".into(), AnswerInput::Json(json!("x")));
        assert_eq!(
            check_answers(&n, Some(&s), &raw).unwrap_err().code(),
            "answer_wrong_type"
        );
        let missing = check_answers(&n, Some(&s), &text(&[("approved", "true")])).unwrap_err();
        assert_eq!(missing.code(), "answers_incomplete");
        let not_enum = check_answers(
            &n,
            Some(&s),
            &text(&[("approved", "true"), ("score", "1"), ("note", "great")]),
        )
        .unwrap_err();
        assert_eq!(not_enum.code(), "answers_incomplete");
    }

    #[test]
    fn without_a_schema_any_field_is_text() {
        let out =
            check_answers(&node(), None, &text(&[("answer", "go"), ("why", "fine")])).unwrap();
        assert_eq!(out, json!({"answer": "go", "why": "fine"}));
        assert_eq!(answer_fields(None), [("answer".to_owned(), "string")]);
    }
}
