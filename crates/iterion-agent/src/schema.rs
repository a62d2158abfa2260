//! The node's output schema: compiled once per node with the `jsonschema`
//! crate, checked against every candidate output, and the lenient JSON
//! extraction a text answer goes through first (models wrap JSON in code
//! fences or a sentence).

use serde_json::Value;

use crate::error::{AgentError, bounded};

/// Errors reported per failed validation (the model reads them).
const MAX_ERRORS: usize = 8;

/// A compiled output schema.
pub struct OutputSchema {
    raw: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// Compile; a schema that is not an object schema is refused (both wire
    /// formats need an object at the top).
    pub fn compile(raw: &Value) -> Result<Self, AgentError> {
        if raw.get("type").and_then(Value::as_str) != Some("object") {
            return Err(AgentError::InvalidSchema {
                detail: "the output schema must be a JSON Schema with \"type\": \"object\""
                    .to_owned(),
            });
        }
        let validator = jsonschema::validator_for(raw).map_err(|e| AgentError::InvalidSchema {
            detail: bounded(&e.to_string(), 300),
        })?;
        Ok(Self {
            raw: raw.clone(),
            validator,
        })
    }

    /// The schema as given.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The validation errors of `instance` (empty when it matches).
    pub fn errors(&self, instance: &Value) -> Vec<String> {
        self.validator
            .iter_errors(instance)
            .take(MAX_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {}", bounded(&e.to_string(), 200))
            })
            .collect()
    }
}

/// Find a JSON value in a model's text: the whole text, a fenced block, or
/// the outermost `{…}`.
pub fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str(t) {
        return Some(v);
    }
    if let Some(start) = t.find("```") {
        let after = &t[start + 3..];
        let body = after.split_once('\n').map_or(after, |(_, rest)| rest);
        if let Some(end) = body.find("```")
            && let Ok(v) = serde_json::from_str(body[..end].trim())
        {
            return Some(v);
        }
    }
    let (start, end) = (t.find('{')?, t.rfind('}')?);
    (start < end)
        .then(|| serde_json::from_str(&t[start..=end]).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> OutputSchema {
        OutputSchema::compile(&json!({
            "type": "object",
            "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}, "score": {"type": "integer"}},
            "required": ["verdict"]
        }))
        .expect("compile")
    }

    #[test]
    fn validation_table() {
        let s = schema();
        assert!(s.errors(&json!({"verdict": "pass", "score": 3})).is_empty());
        assert!(!s.errors(&json!({"verdict": "maybe"})).is_empty());
        assert!(!s.errors(&json!({"score": 3})).is_empty());
        assert!(!s.errors(&json!("text")).is_empty());
    }

    #[test]
    fn bad_schemas_are_typed() {
        for raw in [
            json!({"type": "string"}),
            json!({"type": "object", "properties": {"a": {"type": 12}}}),
        ] {
            assert_eq!(
                OutputSchema::compile(&raw).expect_err("bad").code(),
                "AGENT_INVALID_SCHEMA"
            );
        }
    }

    #[test]
    fn extraction_table() {
        let cases = [
            ("{\"a\":1}", Some(json!({"a": 1}))),
            (
                "Here:\n```json\n{\"a\":1}\n```\nDone",
                Some(json!({"a": 1})),
            ),
            (
                "The answer is {\"a\": {\"b\": 2}} ok",
                Some(json!({"a": {"b": 2}})),
            ),
            ("no json here", None),
            ("} {", None),
        ];
        for (text, want) in cases {
            assert_eq!(extract_json(text), want, "{text}");
        }
    }
}
