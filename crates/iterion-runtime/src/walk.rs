//! The graph walk: the main path and every parallel branch, node by node.
//!
//! A frame (the main path, one branch of a fan-out, one item of a
//! foreach) executes its node, records the output, and follows the edge
//! its output selects (`routing`), counting its loops. Routers decide by
//! themselves: `fan_out_all` forks one branch per outgoing edge, runs them
//! with bounded concurrency and joins them at their convergence node
//! (`graph`); `round_robin` cycles through its edges; `condition` passes
//! its input through and lets the edges' conditions pick. Every change is
//! a [`ProgressStep`] (so the progress can be resumed), every decision an
//! event (`edge_selected`, `branch_started`, `branch_finished`,
//! `join_ready`), upstream's names.
//!
//! It does not run a node's command (`tool.rs`), fork or join branches
//! (`branches.rs`), talk to an agent backend (`agents.rs`), or decide a
//! run's terminal status (the engine does).

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use iterion_core::store::Failure;
use iterion_core::{EventKind, FailureCode, NodeId};
use iterion_dsl::ir::{self, Edge, NodeKind, Target};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::exec::{NodeError, RunCx, Stop};
use crate::progress::{FrameId, FrameStatus, ProgressStep, ResumePoint};
use crate::routing::{self, RouteError, Router, Taken};
use crate::template::Scope;
use iterion_core::agent::AgentRole;

/// How a frame's walk ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameEnd {
    /// Reached `done`.
    Done,
    /// A branch reached its join node.
    Reached(NodeId),
}

type WalkFuture<'s> = Pin<Box<dyn Future<Output = Result<FrameEnd, Stop>> + Send + 's>>;

/// What a resumed frame starts with.
#[derive(Debug, Default)]
pub(crate) struct Resumed {
    /// The output its first node recorded before the run stopped.
    pub output: Option<Value>,
    /// The answers of the human node it paused at.
    pub answers: Option<Value>,
}

/// Where a frame stands before its next node.
struct Position {
    at: Option<NodeId>,
    input: Map<String, Value>,
    stop_at: Option<NodeId>,
}

impl<'a> RunCx<'a> {
    /// Walk the workflow from its entry to `done` (or the first failure).
    pub(crate) async fn run_graph(&self, cancel: &CancellationToken) -> Result<(), Stop> {
        let main = FrameId::main();
        // The entry node's input is the run's variables as given (upstream
        // `buildNodeInputRS`: declared defaults, then `--preset`, then
        // `--var`, unexpanded), so `{{input.x}}` resolves there.
        let input: Map<String, Value> = self.entry_input.clone();
        self.record(ProgressStep::FrameStarted {
            frame: main.clone(),
            parent: None,
            at: self.workflow.entry.clone(),
            input,
            stop_at: None,
        })?;
        self.walk(&main, cancel).await.map(|_| ())
    }

    /// Continue stored progress from `point` (`None`: nothing ran, start
    /// at the entry): the main path is reopened there and routes from the
    /// output its node already recorded, or runs it (a paused human node
    /// with its `answers`).
    pub(crate) async fn resume_graph(
        &self,
        point: Option<ResumePoint>,
        answers: Option<Value>,
        cancel: &CancellationToken,
    ) -> Result<(), Stop> {
        let Some(point) = point else {
            return self.run_graph(cancel).await;
        };
        let main = FrameId::main();
        self.record(ProgressStep::Reopened {
            frame: main.clone(),
            at: point.at.clone(),
        })?;
        let resumed = Resumed {
            output: point.output,
            answers,
        };
        self.walk_from(&main, resumed, cancel).await.map(|_| ())
    }

    /// Walk one frame until it ends; its end is recorded.
    pub(crate) fn walk<'s>(
        &'s self,
        frame: &'s FrameId,
        cancel: &'s CancellationToken,
    ) -> WalkFuture<'s> {
        self.walk_from(frame, Resumed::default(), cancel)
    }

    fn walk_from<'s>(
        &'s self,
        frame: &'s FrameId,
        resumed: Resumed,
        cancel: &'s CancellationToken,
    ) -> WalkFuture<'s> {
        Box::pin(async move {
            let result = self.walk_frame(frame, resumed, cancel).await;
            let status = match &result {
                Ok(FrameEnd::Reached(join)) => Some(FrameStatus::Reached { join: join.clone() }),
                Ok(FrameEnd::Done) => None,
                Err(Stop::Cancelled) => Some(FrameStatus::Cancelled),
                Err(Stop::Paused { .. }) => Some(FrameStatus::Paused),
                Err(Stop::Failed(f)) => Some(FrameStatus::Failed {
                    code: f.code,
                    message: f.message.clone(),
                }),
            };
            if let Some(status) = status
                && let Err(e) = self.record(ProgressStep::Ended {
                    frame: frame.clone(),
                    status,
                })
            {
                tracing::warn!(frame = %frame, error = %e, "could not record the end of a frame");
            }
            result
        })
    }

    fn position(&self, frame: &FrameId) -> Result<Position, Stop> {
        self.with_progress(|p| {
            p.frame(frame).map(|f| Position {
                at: f.at.clone(),
                input: f.input.clone(),
                stop_at: f.stop_at.clone(),
            })
        })
        .ok_or_else(|| {
            Stop::from(crate::progress::ProgressError::UnknownFrame {
                frame: frame.clone(),
            })
        })
    }

    async fn walk_frame(
        &self,
        frame: &FrameId,
        mut resumed: Resumed,
        cancel: &CancellationToken,
    ) -> Result<FrameEnd, Stop> {
        loop {
            if cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let pos = self.position(frame)?;
            let Some(at) = pos.at else {
                return Ok(FrameEnd::Done);
            };
            if pos.stop_at.as_ref() == Some(&at) {
                return Ok(FrameEnd::Reached(at));
            }
            let Some(node) = self.workflow.nodes.get(&at) else {
                return Err(failed(
                    FailureCode::NodeFailed,
                    format!("unknown node {at}"),
                ));
            };
            let input = pos.input;
            // A resume routes from the output a node recorded before the
            // run stopped: it never runs again.
            let output = match resumed.output.take() {
                Some(output) => output,
                None => {
                    self.execute(frame, node, &input, resumed.answers.take(), cancel)
                        .await?
                }
            };
            if let Some(end) = self.route(frame, node, &input, &output, cancel).await? {
                return Ok(end);
            }
        }
    }

    /// Run one node to its output (`node_started` … `node_finished`, the
    /// output recorded).
    async fn execute(
        &self,
        frame: &FrameId,
        node: &'a ir::Node,
        input: &Map<String, Value>,
        answers: Option<Value>,
        cancel: &CancellationToken,
    ) -> Result<Value, Stop> {
        // Answers arriving on resume finish the human node that started
        // (and asked) before the pause.
        if answers.is_none() {
            // `max_iterations` counts node executions (a `fail` node is the
            // end, not one): the one past it never starts. A human node
            // finished by resume answers started before the pause.
            if node.kind != NodeKind::Fail {
                self.admit_node()?;
            }
            self.emit_node(
                frame,
                &node.id,
                EventKind::NodeStarted {
                    kind: node.kind.as_str().into(),
                },
            );
        }
        let started = Instant::now();
        let (exit_code, output) = match (node.kind, node.router_mode.as_deref()) {
            (NodeKind::Fail, _) => {
                let message = node
                    .properties
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(String::new, |m| format!(": {m}"));
                return Err(failed(
                    FailureCode::WorkflowFailed,
                    format!("reached fail node {}{message}", node.id),
                ));
            }
            // Routers and a legacy `join` pass their input through; what
            // they decide is in `route`.
            (NodeKind::Router, None | Some("fan_out_all" | "round_robin" | "condition"))
            | (NodeKind::Join, _) => {
                if node.kind == NodeKind::Join {
                    self.check_join_requires(frame, node)?;
                }
                (None, Value::Object(input.clone()))
            }
            (NodeKind::Tool, _) => {
                let visible = self.visible(frame);
                let scope = Scope {
                    vars: &self.vars,
                    input,
                    outputs: &visible,
                    output: None,
                };
                match self.run_tool(frame, node, &scope, cancel).await {
                    Ok((code, output)) => (Some(code), output),
                    Err(e) => return Err(self.node_failed(frame, node, e)),
                }
            }
            (NodeKind::Compute, _) => match self.run_compute(frame, node, input) {
                Ok(output) => (None, output),
                Err(e) => return Err(self.node_failed(frame, node, e)),
            },
            (NodeKind::Human, _) => (None, self.human(frame, node, input, answers, cancel).await?),
            (NodeKind::Agent | NodeKind::Judge, _) => {
                let role = match node.kind {
                    NodeKind::Judge => AgentRole::Judge,
                    _ => AgentRole::Agent,
                };
                // Resume answers of a node that paused on `ask_user`.
                let resumed = answers.as_ref().map(crate::ask_user::resumed_answer);
                (
                    None,
                    self.agent_output(frame, node, input, role, resumed, cancel)
                        .await?,
                )
            }
            (NodeKind::Router, Some("llm")) => {
                let (multi, candidates) = llm_candidates(self.workflow, node);
                let role = AgentRole::Router { multi, candidates };
                (
                    None,
                    self.agent_output(frame, node, input, role, None, cancel)
                        .await?,
                )
            }
            (kind, mode) => {
                // Admission refuses these before anything starts; fail
                // closed should one slip through.
                let what = match mode {
                    Some(m) => format!("router mode {m}"),
                    None => kind.as_str().to_owned(),
                };
                let e = NodeError::failed(
                    FailureCode::NodeFailed,
                    format!("{what} nodes are not executed by this engine"),
                );
                return Err(self.node_failed(frame, node, e));
            }
        };
        self.finished(frame, node, exit_code, started, &output)?;
        Ok(output)
    }

    /// Follow what a node's output selects; `Some` when the frame ended.
    async fn route(
        &self,
        frame: &FrameId,
        node: &'a ir::Node,
        input: &Map<String, Value>,
        output: &Value,
        cancel: &CancellationToken,
    ) -> Result<Option<FrameEnd>, Stop> {
        match (node.kind, node.router_mode.as_deref()) {
            (NodeKind::Router, None | Some("fan_out_all")) => {
                let visible = self.visible(frame);
                let scope = Scope {
                    vars: &self.vars,
                    input,
                    outputs: &visible,
                    output: None,
                };
                let edges = routing::fan_out_edges(self.workflow, &node.id, &scope, output);
                self.fan_out(frame, node, &edges, input, output, cancel)
                    .await
            }
            (NodeKind::Router, Some("round_robin")) => self.round_robin(frame, node, input, output),
            (NodeKind::Router, Some("llm")) => {
                let edges: Vec<&Edge> = self.workflow.edges_from(&node.id).collect();
                let (multi, _) = llm_candidates(self.workflow, node);
                self.llm_route(frame, node, &edges, input, output, multi, cancel)
                    .await
            }
            // A judge's verdict, a condition router's input, any node's
            // output: the edges' `when` conditions read it.
            _ => self.advance(frame, node, input, output, cancel).await,
        }
    }

    /// An agent-seam node's output, or the stop its failure means.
    async fn agent_output(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        input: &Map<String, Value>,
        role: AgentRole,
        resumed: Option<String>,
        cancel: &CancellationToken,
    ) -> Result<Value, Stop> {
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        match self
            .run_agent(frame, node, &scope, role, resumed, cancel)
            .await
        {
            Ok(output) => Ok(output),
            Err(e) => Err(self.node_failed(frame, node, e)),
        }
    }

    /// Follow a `mode: llm` router's choice (upstream `execLLMRouter`):
    /// one route is taken like an edge; several run as parallel branches
    /// joined like a fan-out, after the same workspace-safety check.
    #[allow(clippy::too_many_arguments)]
    async fn llm_route(
        &self,
        frame: &FrameId,
        router: &'a ir::Node,
        edges: &[&'a Edge],
        input: &Map<String, Value>,
        output: &Value,
        multi: bool,
        cancel: &CancellationToken,
    ) -> Result<Option<FrameEnd>, Stop> {
        let chosen: Vec<&str> = if multi {
            output
                .get("selected_routes")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        } else {
            output
                .get("selected_route")
                .and_then(Value::as_str)
                .into_iter()
                .collect()
        };
        let picked: Vec<&'a Edge> = edges
            .iter()
            .copied()
            .filter(|e| chosen.contains(&routing::target_name(&e.to)))
            .collect();
        if picked.is_empty() {
            let e = NodeError::failed(
                FailureCode::NodeFailed,
                format!("llm router chose no route among its edges ({chosen:?})"),
            );
            return Err(self.node_failed(frame, router, e));
        }
        if !multi {
            let (_, round_robin) = self.counters(frame);
            return self.take_picked(frame, picked[0], None, round_robin, input, output);
        }
        let starts = node_targets(&picked);
        let join = self.graph.convergence(&router.id, &starts);
        let writers = self.graph.mutating_branches(&starts, join.as_ref());
        if writers.len() > 1 && self.graph.max_parallel_branches() != Some(1) {
            let e = NodeError::failed(
                FailureCode::NodeFailed,
                format!(
                    "workspace safety: the chosen branches {} may all write the workspace",
                    writers
                        .iter()
                        .map(NodeId::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            return Err(self.node_failed(frame, router, e));
        }
        self.fan_out(frame, router, &picked, input, output, cancel)
            .await
    }

    /// `node_finished` plus its progress step.
    fn finished(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        exit_code: Option<i64>,
        started: Instant,
        output: &Value,
    ) -> Result<(), Stop> {
        self.emit_node(
            frame,
            &node.id,
            EventKind::NodeFinished {
                exit_code,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                output: self.output_for_event(node, output),
            },
        );
        self.record(ProgressStep::NodeFinished {
            frame: frame.clone(),
            node: node.id.clone(),
            output: output.clone(),
            publish: node
                .properties
                .get("publish")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })?;
        Ok(())
    }

    /// `node_failed` for `e`, and the stop it means.
    pub(crate) fn node_failed(&self, frame: &FrameId, node: &ir::Node, e: NodeError) -> Stop {
        match e {
            // The run's stop (its deadline, a signal), classified once by
            // the engine; the node names the bound that fired, if one did.
            NodeError::Cancelled => {
                self.emit_node(
                    frame,
                    &node.id,
                    EventKind::NodeFailed {
                        exit_code: None,
                        error: self.cancel_reason(),
                        stderr_tail: String::new(),
                    },
                );
                Stop::Cancelled
            }
            // The agent asked a human nobody can answer now: the run
            // pauses as at a human node; resume runs the node again.
            NodeError::AskedHuman { question } => {
                let times = self.with_progress(|p| p.visits(frame, &node.id));
                self.emit_node(
                    frame,
                    &node.id,
                    EventKind::HumanInputRequested {
                        interaction_id: crate::human::interaction_id(&node.id, times),
                        questions: serde_json::json!({ "question": question, "tool": "ask_user" }),
                        fields: vec![crate::human::DEFAULT_ANSWER_FIELD.to_owned()],
                    },
                );
                Stop::Paused {
                    node: node.id.clone(),
                }
            }
            // The node's own `timeout:` fails the run with TIMEOUT.
            NodeError::Bound(bound) => {
                self.emit_node(
                    frame,
                    &node.id,
                    EventKind::NodeFailed {
                        exit_code: None,
                        error: bound.failure().message,
                        stderr_tail: String::new(),
                    },
                );
                self.bound_hit(&bound)
            }
            NodeError::Failed {
                code,
                exit_code,
                error,
                stderr_tail,
            } => {
                self.emit_node(
                    frame,
                    &node.id,
                    EventKind::NodeFailed {
                        exit_code,
                        error: error.clone(),
                        stderr_tail,
                    },
                );
                Stop::Failed(Failure::new(code, format!("node {}: {error}", node.id)))
            }
        }
    }

    /// A legacy `join` node's `require: [a, b]`: each named node must have
    /// produced an output by now.
    fn check_join_requires(&self, frame: &FrameId, node: &ir::Node) -> Result<(), Stop> {
        let Some(required) = node.properties.get("require").and_then(Value::as_array) else {
            return Ok(());
        };
        let visible = self.visible(frame);
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|r| !visible.contains_key(&NodeId::new(*r)))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let e = NodeError::failed(
            FailureCode::NodeFailed,
            format!(
                "join requires outputs of {} that never arrived",
                missing.join(", ")
            ),
        );
        Err(self.node_failed(frame, node, e))
    }

    fn counters(
        &self,
        frame: &FrameId,
    ) -> (
        std::collections::BTreeMap<String, u32>,
        std::collections::BTreeMap<NodeId, u32>,
    ) {
        self.with_progress(|p| {
            p.frame(frame)
                .map(|f| (f.loops.clone(), f.round_robin.clone()))
                .unwrap_or_default()
        })
    }

    /// Follow the edge `output` selects; `Some` when the frame ended.
    async fn advance(
        &self,
        frame: &FrameId,
        node: &'a ir::Node,
        input: &Map<String, Value>,
        output: &Value,
        cancel: &CancellationToken,
    ) -> Result<Option<FrameEnd>, Stop> {
        let (loops, round_robin) = self.counters(frame);
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let mut router = Router::with_counters(loops);
        let taken = router
            .route(self.workflow, &node.id, &scope, output)
            .map_err(route_failure)?;
        for name in self.graph.loop_resets(taken.edge) {
            router.reset(name);
        }
        if taken.edge.foreach.is_some() {
            return self
                .foreach(frame, node, taken, input, output, cancel)
                .await;
        }
        self.take(frame, taken, None, router, round_robin, output)
    }

    /// Record the taken edge and move the frame along it.
    fn take(
        &self,
        frame: &FrameId,
        taken: Taken<'a>,
        round_robin_index: Option<u32>,
        router: Router,
        round_robin: std::collections::BTreeMap<NodeId, u32>,
        output: &Value,
    ) -> Result<Option<FrameEnd>, Stop> {
        let edge = taken.edge;
        self.emit_node(
            frame,
            &edge.from,
            EventKind::EdgeSelected {
                from: edge.from.to_string(),
                to: routing::target_name(&edge.to).into(),
                condition: edge.condition.as_ref().map(routing::condition_text),
                loop_name: edge.loop_bound.as_ref().map(|l| l.name.clone()),
                iteration: taken.iteration,
                round_robin_index,
                foreach: None,
                items: None,
            },
        );
        let to = match &edge.to {
            Target::Fail => {
                return Err(failed(
                    FailureCode::WorkflowFailed,
                    format!("node {} routed to fail", edge.from),
                ));
            }
            Target::Done => None,
            Target::Node(n) => Some(n.clone()),
        };
        let done = to.is_none();
        self.record(ProgressStep::Advanced {
            frame: frame.clone(),
            to,
            input: taken.input,
            loops: router.counters().clone(),
            round_robin,
            looped: edge
                .loop_bound
                .as_ref()
                .map(|b| (b.name.clone(), output.clone())),
        })?;
        Ok(done.then_some(FrameEnd::Done))
    }

    /// A `round_robin` router: the next of its unconditional edges.
    fn round_robin(
        &self,
        frame: &FrameId,
        node: &'a ir::Node,
        input: &Map<String, Value>,
        output: &Value,
    ) -> Result<Option<FrameEnd>, Stop> {
        let (_, mut round_robin) = self.counters(frame);
        let position = round_robin.get(&node.id).copied().unwrap_or(0);
        let (edge, index) =
            routing::round_robin(self.workflow, &node.id, position).ok_or_else(|| {
                route_failure(RouteError::NoOutgoingEdge {
                    node: node.id.to_string(),
                })
            })?;
        round_robin.insert(node.id.clone(), position.saturating_add(1));
        self.take_picked(frame, edge, Some(index), round_robin, input, output)
    }

    /// Take an edge a router picked by itself (round robin, llm): its
    /// `with` rendered against the router's output, its loop counted.
    fn take_picked(
        &self,
        frame: &FrameId,
        edge: &'a Edge,
        round_robin_index: Option<u32>,
        round_robin: std::collections::BTreeMap<NodeId, u32>,
        input: &Map<String, Value>,
        output: &Value,
    ) -> Result<Option<FrameEnd>, Stop> {
        let (loops, _) = self.counters(frame);
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let next_input =
            routing::edge_input(self.workflow, edge, &scope, output).map_err(route_failure)?;
        let mut router = Router::with_counters(loops);
        let iteration = router.count(edge).map_err(route_failure)?;
        for name in self.graph.loop_resets(edge) {
            router.reset(name);
        }
        let taken = Taken {
            edge,
            iteration,
            input: next_input,
        };
        self.take(frame, taken, round_robin_index, router, round_robin, output)
    }
}

/// A `mode: llm` router's `multi` flag and its candidate routes (the
/// targets of its edges, each once, in edge order).
fn llm_candidates(workflow: &ir::Workflow, node: &ir::Node) -> (bool, Vec<String>) {
    let mut candidates: Vec<String> = Vec::new();
    for e in workflow.edges_from(&node.id) {
        let t = routing::target_name(&e.to).to_owned();
        if !candidates.contains(&t) {
            candidates.push(t);
        }
    }
    let multi = node.properties.get("multi").and_then(Value::as_bool) == Some(true);
    (multi, candidates)
}

/// The nodes a set of edges leads to (edges to `done`/`fail` lead to none).
pub(crate) fn node_targets<'w>(edges: &[&'w Edge]) -> Vec<&'w NodeId> {
    edges
        .iter()
        .filter_map(|e| match &e.to {
            Target::Node(n) => Some(n),
            _ => None,
        })
        .collect()
}

pub(crate) fn failed(code: FailureCode, message: String) -> Stop {
    Stop::Failed(Failure::new(code, message))
}

/// The run failure a routing error means.
pub(crate) fn route_failure(e: RouteError) -> Stop {
    let code = match &e {
        RouteError::NoOutgoingEdge { .. } => FailureCode::NoOutgoingEdge,
        RouteError::LoopLimitExceeded { .. } => FailureCode::LoopLimitExceeded,
        RouteError::With { .. } => FailureCode::NodeFailed,
    };
    failed(code, e.to_string())
}
