//! What this engine can execute, checked before anything starts.
//!
//! A workflow naming a node kind this engine does not run (agents, judges,
//! llm routers without an agent runner, humans answered by an llm), a `when "…"` or `compute` expression it cannot evaluate, a
//! malformed template, a `--var` that does not fit its declaration, or a
//! fan-out whose parallel branches would race on the workspace is refused
//! at admission with a typed error naming the culprits — never discovered
//! halfway through a run with a container already up.

use std::collections::BTreeMap;

use iterion_core::NodeId;
use iterion_dsl::ir::{self, NodeKind, ToolSpec};
use serde_json::Value;

use crate::graph::GraphInfo;
use crate::routing::coerce_var;
use crate::template::check_syntax;

/// Why a workflow is refused at admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// Node kinds this engine does not execute.
    #[error(
        "this engine executes tool, compute, human, router (fan_out_all, round_robin, condition), join and fail nodes only; refused: {}",
        list_nodes(.nodes)
    )]
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
    /// Agent, judge or `mode: llm` router nodes, and no agent runner in
    /// this engine.
    #[error(
        "agent, judge and llm router nodes need an agent backend, and none is wired into this engine yet; refused: {}",
        list_nodes(.nodes)
    )]
    NoAgentRunner {
        /// Node and kind, sorted by node.
        nodes: Vec<(NodeId, String)>,
    },
    /// A compute node whose expressions cannot be evaluated.
    #[error("compute node {node} {message}")]
    BadExpression {
        /// The node.
        node: NodeId,
        /// What is wrong.
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
    /// An `as foreach …` edge this engine cannot run.
    #[error("edge {from} -> {to}: foreach {name} {reason}")]
    BadForeach {
        /// Source node.
        from: NodeId,
        /// Target.
        to: String,
        /// Loop name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The entry or an edge names a node that does not exist.
    #[error("workflow references unknown node {node}")]
    UnknownNode {
        /// Node.
        node: NodeId,
    },
    /// More than one branch of a parallel fan-out may write the workspace
    /// (upstream's workspace safety; `parallel_safe: true` on a tool or
    /// `readonly: true` on an agent vouches for a node, and
    /// `budget: max_parallel_branches: 1` serialises the branches).
    #[error(
        "router {router} runs branches {} in parallel and more than one may write the workspace; \
         mark tools that cannot collide `parallel_safe: true`, agents `readonly: true`, \
         or set `budget: max_parallel_branches: 1`",
        list_ids(.branches)
    )]
    WorkspaceSafety {
        /// The fan-out router.
        router: NodeId,
        /// The branches (by first node) that may write.
        branches: Vec<NodeId>,
    },
}

fn list_ids(ids: &[NodeId]) -> String {
    ids.iter()
        .map(NodeId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
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
            Self::UnsupportedNodes { .. } | Self::NoAgentRunner { .. } => "unsupported_node_kind",
            Self::UnsupportedCondition { .. } => "unsupported_condition",
            Self::BadTemplate { .. } => "bad_template",
            Self::UnknownVar { .. } => "unknown_variable",
            Self::BadVar { .. } => "bad_variable",
            Self::BadForeach { .. } => "bad_foreach",
            Self::UnknownNode { .. } => "unknown_node",
            Self::WorkspaceSafety { .. } => "workspace_safety",
            Self::BadExpression { .. } => "bad_expression",
        }
    }
}

/// Check that every node and edge is executable here; agent, judge and
/// `mode: llm` router nodes need an agent runner (`agents`).
pub fn check_workflow(workflow: &ir::Workflow, agents: bool) -> Result<(), AdmissionError> {
    if !agents {
        let nodes: Vec<(NodeId, String)> =
            crate::agents::agent_nodes(workflow).into_iter().collect();
        if !nodes.is_empty() {
            return Err(AdmissionError::NoAgentRunner { nodes });
        }
    }
    let unsupported: Vec<(NodeId, String)> = workflow
        .nodes
        .values()
        .filter(|n| !crate::agents::is_agent_node(n))
        .filter(|n| match n.kind {
            NodeKind::Tool => n.tool.is_none(),
            // A named terminal failure needs nothing executed; a legacy
            // `join` node only waits; compute runs in the engine.
            NodeKind::Fail | NodeKind::Join | NodeKind::Compute => false,
            // A person answers (terminal or resume); `interaction: llm`
            // and `llm_or_human` answer through the agent runner (checked
            // above with the agent nodes).
            NodeKind::Human => false,
            NodeKind::Router => !matches!(
                n.router_mode.as_deref(),
                None | Some("fan_out_all" | "round_robin" | "condition")
            ),
            _ => true,
        })
        .map(|n| {
            let kind = match (n.kind, n.router_mode.as_deref()) {
                (NodeKind::Router, Some(mode)) => format!("router, mode {mode}"),
                (NodeKind::Tool, _) => "tool without command".to_owned(),
                (NodeKind::Human, _) => "human, llm interaction".to_owned(),
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
        if node.kind == NodeKind::Compute {
            crate::compute::check_expressions(node).map_err(|message| {
                AdmissionError::BadExpression {
                    node: node.id.clone(),
                    message,
                }
            })?;
        }
        for (what, text) in crate::agents::prompt_templates(workflow, node) {
            check_syntax(text).map_err(|e| AdmissionError::BadTemplate {
                location: format!("node {} {what} prompt", node.id),
                message: e.to_string(),
            })?;
        }
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
        if let Some(each) = &edge.foreach {
            check_foreach(workflow, edge, each, &to)?;
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
    check_workspace_safety(workflow)
}

/// A foreach runs its target once per item and joins the items where the
/// body converges: both must exist, and the collection must be a
/// template the engine can read.
fn check_foreach(
    workflow: &ir::Workflow,
    edge: &ir::Edge,
    each: &ir::ForEach,
    to: &str,
) -> Result<(), AdmissionError> {
    let bad = |reason: String| AdmissionError::BadForeach {
        from: edge.from.clone(),
        to: to.to_owned(),
        name: each.name.clone(),
        reason,
    };
    let ir::Target::Node(body) = &edge.to else {
        return Err(bad("must target a node".into()));
    };
    check_syntax(&crate::branches::foreach_expr(&each.collection))
        .map_err(|e| bad(format!("collection {:?}: {e}", each.collection)))?;
    if GraphInfo::new(workflow)
        .convergence(&edge.from, &[body])
        .is_none()
    {
        return Err(bad(
            "has no node its items join at: declare `await: wait_all` (or `best_effort`) on the node that gathers them"
                .into(),
        ));
    }
    Ok(())
}

/// Upstream checks this when the fan-out runs; it depends only on the
/// graph, so it is refused here, before a container starts.
fn check_workspace_safety(workflow: &ir::Workflow) -> Result<(), AdmissionError> {
    let graph = GraphInfo::new(workflow);
    if graph.max_parallel_branches() == Some(1) {
        return Ok(());
    }
    for router in workflow.nodes.values().filter(|n| {
        n.kind == NodeKind::Router && matches!(n.router_mode.as_deref(), None | Some("fan_out_all"))
    }) {
        let edges: Vec<&ir::Edge> = workflow.edges_from(&router.id).collect();
        let starts = crate::walk::node_targets(&edges);
        let join = graph.convergence(&router.id, &starts);
        let branches = graph.mutating_branches(&starts, join.as_ref());
        if branches.len() > 1 {
            return Err(AdmissionError::WorkspaceSafety {
                router: router.id.clone(),
                branches,
            });
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
