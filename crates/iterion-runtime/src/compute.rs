//! `compute` nodes: named expressions evaluated by the engine, no exec
//! and no model (upstream `execCompute`). Each `expr:` field is an
//! expression of `iterion_dsl::expr` — the language of `when "…"`, parsed by
//! the same parser the compiler ran (C040) — reading the node's input
//! (`input.x` and bare names), `vars`, `outputs`, `artifacts` and `loop`;
//! the results form the node's output, checked against its schema.

use iterion_core::FailureCode;
use iterion_dsl::expr::Expr;
use iterion_dsl::ir;
use serde_json::{Map, Value};

use crate::exec::{NodeError, RunCx};
use crate::progress::FrameId;
use crate::routing::{self, ExprScope};
use crate::template::Scope;

/// Why a compute node's expressions cannot run (admission refuses these).
pub fn check_expressions(node: &ir::Node) -> Result<(), String> {
    let Some(Value::Object(exprs)) = node.properties.get("expr") else {
        return Err("has no `expr:` block".into());
    };
    if exprs.is_empty() {
        return Err("has an empty `expr:` block".into());
    }
    for (field, text) in exprs {
        let Some(text) = text.as_str() else {
            return Err(format!("field {field}: the expression is not a string"));
        };
        Expr::parse(text).map_err(|e| format!("field {field}: {e}"))?;
    }
    Ok(())
}

impl RunCx<'_> {
    /// Evaluate a compute node over its input; its checked output.
    pub(crate) fn run_compute(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        input: &Map<String, Value>,
    ) -> Result<Value, NodeError> {
        let fail = |message: String| NodeError::failed(FailureCode::NodeFailed, message);
        let Some(Value::Object(exprs)) = node.properties.get("expr") else {
            return Err(fail("compute node has no `expr:` block".into()));
        };
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let input_value = Value::Object(input.clone());
        let reader = ExprScope {
            input: &input_value,
            scope: &scope,
        };
        let mut output = Map::new();
        for (field, text) in exprs {
            let text = text.as_str().unwrap_or_default();
            let value = Expr::parse(text)
                .and_then(|e| e.eval(&reader))
                .map_err(|e| fail(format!("field {field} ({text:?}): {e} ({})", e.code())))?;
            output.insert(field.clone(), value);
        }
        let schema = node
            .output
            .as_ref()
            .and_then(|n| self.workflow.schemas.get(n));
        routing::check_output(output, schema).map_err(|e| {
            fail(format!(
                "output does not match schema {}: {e}",
                node.output.as_deref().unwrap_or("-")
            ))
        })
    }
}
