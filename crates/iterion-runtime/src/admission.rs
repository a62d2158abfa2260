//! What this engine can execute, checked before anything starts.
//!
//! A workflow naming a node kind this engine does not run (agents, judges,
//! llm routers, humans, compute), a `when "…"` it cannot evaluate, a
//! malformed template or a `--var` that does not fit its declaration is
//! refused at admission with a typed error naming the culprits — never
//! discovered halfway through a run with a container already up.

use std::collections::BTreeMap;

use iterion_core::NodeId;
use iterion_dsl::ir::{self, NodeKind, ToolSpec};
use serde_json::Value;

use crate::routing::coerce_var;
use crate::template::check_syntax;

/// Why a workflow is refused at admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// Node kinds this engine does not execute.
    #[error("this engine executes tool and fail nodes only; refused: {}", list_nodes(.nodes))]
    UnsupportedNodes {
        /// Node and kind, sorted by node.
        nodes: Vec<(NodeId, String)>,
    },
    /// A `when "…"` expression outside the supported forms.
    #[error(
        "edge {from} -> {to}: condition {expr:?} is not a valid expression (the compiler reports it as C040)"
    )]
    UnsupportedCondition {
        /// Source node.
        from: NodeId,
        /// Target.
        to: String,
        /// The expression.
        expr: String,
    },
    /// A malformed template in a command, script or `with`.
    #[error("{location}: {message}")]
    BadTemplate {
        /// Where (`node x command`, `edge a -> b with f`).
        location: String,
        /// The template error.
        message: String,
    },
    /// `--var` names an undeclared variable.
    #[error("unknown variable {name:?} (declared: {declared:?})")]
    UnknownVar {
        /// Name.
        name: String,
        /// Declared names.
        declared: Vec<String>,
    },
    /// `--var` value does not fit the declared type.
    #[error("variable {name:?} expects {expected}, got {value:?}")]
    BadVar {
        /// Name.
        name: String,
        /// Declared type.
        expected: String,
        /// Given text.
        value: String,
    },
    /// `as foreach …` edges.
    #[error("edge {from} -> {to}: foreach loops are not executed by this engine")]
    UnsupportedForEach {
        /// Source node.
        from: NodeId,
        /// Target.
        to: String,
    },
    /// The entry or an edge names a node that does not exist.
    #[error("workflow references unknown node {node}")]
    UnknownNode {
        /// Node.
        node: NodeId,
    },
}

fn list_nodes(nodes: &[(NodeId, String)]) -> String {
    nodes
        .iter()
        .map(|(n, k)| format!("{n} ({k})"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl AdmissionError {
    /// Stable code, persisted as the admission code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsupportedNodes { .. } => "unsupported_node_kind",
            Self::UnsupportedCondition { .. } => "unsupported_condition",
            Self::BadTemplate { .. } => "bad_template",
            Self::UnknownVar { .. } => "unknown_variable",
            Self::BadVar { .. } => "bad_variable",
            Self::UnsupportedForEach { .. } => "unsupported_foreach",
            Self::UnknownNode { .. } => "unknown_node",
        }
    }
}

/// Check that every node and edge is executable here.
pub fn check_workflow(workflow: &ir::Workflow) -> Result<(), AdmissionError> {
    let unsupported: Vec<(NodeId, String)> = workflow
        .nodes
        .values()
        .filter(|n| match n.kind {
            NodeKind::Tool => n.tool.is_none(),
            // A named terminal failure needs nothing executed.
            NodeKind::Fail => false,
            _ => true,
        })
        .map(|n| {
            let kind = match (n.kind, n.router_mode.as_deref()) {
                (NodeKind::Router, Some(mode)) => format!("router, mode {mode}"),
                (NodeKind::Tool, _) => "tool without command".to_owned(),
                (k, _) => k.as_str().to_owned(),
            };
            (n.id.clone(), kind)
        })
        .collect();
    if !unsupported.is_empty() {
        return Err(AdmissionError::UnsupportedNodes { nodes: unsupported });
    }
    if !workflow.nodes.contains_key(&workflow.entry) {
        return Err(AdmissionError::UnknownNode {
            node: workflow.entry.clone(),
        });
    }
    for node in workflow.nodes.values() {
        let (what, text) = match &node.tool {
            Some(ToolSpec::Command(c)) => ("command", c),
            Some(ToolSpec::Script { script, .. }) => ("script", script),
            None => continue,
        };
        check_syntax(text).map_err(|e| AdmissionError::BadTemplate {
            location: format!("node {} {what}", node.id),
            message: e.to_string(),
        })?;
    }
    for edge in &workflow.edges {
        let to = crate::routing::target_name(&edge.to).to_owned();
        for n in std::iter::once(&edge.from).chain(match &edge.to {
            ir::Target::Node(n) => Some(n),
            _ => None,
        }) {
            if !workflow.nodes.contains_key(n) {
                return Err(AdmissionError::UnknownNode { node: n.clone() });
            }
        }
        if edge.foreach.is_some() {
            return Err(AdmissionError::UnsupportedForEach {
                from: edge.from.clone(),
                to,
            });
        }
        if let Some(ir::Condition::Expr(expr)) = &edge.condition
            && iterion_dsl::expr::Expr::parse(expr).is_err()
        {
            return Err(AdmissionError::UnsupportedCondition {
                from: edge.from.clone(),
                to,
                expr: expr.clone(),
            });
        }
        for (field, expr) in &edge.with {
            check_syntax(expr).map_err(|e| AdmissionError::BadTemplate {
                location: format!("edge {} -> {to} with {field}", edge.from),
                message: e.to_string(),
            })?;
        }
    }
    Ok(())
}

/// Declared defaults overlaid by `--var`, each coerced to its type.
pub fn resolve_vars(
    workflow: &ir::Workflow,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Value>, AdmissionError> {
    let mut vars: BTreeMap<String, Value> = workflow
        .vars
        .iter()
        .filter_map(|(k, d)| d.default.clone().map(|v| (k.clone(), v)))
        .collect();
    for (name, text) in given {
        let Some(decl) = workflow.vars.get(name) else {
            return Err(AdmissionError::UnknownVar {
                name: name.clone(),
                declared: workflow.vars.keys().cloned().collect(),
            });
        };
        let value = coerce_var(text, decl.ty).ok_or_else(|| AdmissionError::BadVar {
            name: name.clone(),
            expected: format!("{:?}", decl.ty).to_lowercase(),
            value: text.clone(),
        })?;
        vars.insert(name.clone(), value);
    }
    Ok(vars)
}
