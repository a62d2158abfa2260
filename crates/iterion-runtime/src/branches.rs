//! Parallel branches: a `fan_out_all` router (or the routes an llm router
//! chose) forks one branch per edge, runs at most `max_parallel_branches`
//! of them at once, and joins them at their convergence node with its
//! `await:` strategy (upstream `execFanOut` / `processConvergence`); an
//! `as foreach` edge runs its body once per item of a collection, one
//! item after the other, and joins them the same way.
//!
//! Every branch is a frame of the resumable progress and walks with the
//! walker (`walk.rs`); this module only forks, bounds and joins.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use iterion_core::event::FailedBranch;
use iterion_core::store::Failure;
use iterion_core::{EventKind, FailureCode, NodeId};
use iterion_dsl::ir::{self, Edge, Target};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::exec::{RunCx, Stop};
use crate::graph::AwaitMode;
use crate::progress::{FrameId, FrameStatus, ProgressStep};
use crate::routing::{self, RouteError, Taken};
use crate::template::{self, Scope};
use crate::walk::{FrameEnd, failed, node_targets, route_failure};

/// One branch to fork.
struct Fork<'w> {
    edge: &'w Edge,
    /// The child frame (`None` for an edge straight to `done`/`fail`).
    frame: Option<FrameId>,
}

impl<'a> RunCx<'a> {
    /// A `fan_out_all` router (or an llm router's chosen subset): one
    /// branch per edge, at most `max_parallel_branches` at once, joined
    /// at their convergence node with its `await:` strategy (upstream
    /// `execFanOut` / `processConvergence`). `Some` when the frame ended
    /// (every branch reached `done`).
    pub(crate) async fn fan_out(
        &self,
        frame: &FrameId,
        router: &'a ir::Node,
        edges: &[&'a Edge],
        input: &Map<String, Value>,
        output: &Value,
        cancel: &CancellationToken,
    ) -> Result<Option<FrameEnd>, Stop> {
        if edges.is_empty() {
            return Err(route_failure(RouteError::NoOutgoingEdge {
                node: router.id.to_string(),
            }));
        }
        let starts = node_targets(edges);
        let join = self.graph.convergence(&router.id, &starts);
        let strategy = join
            .as_ref()
            .map_or(AwaitMode::WaitAll, |j| self.graph.await_mode(j));
        let limit = self
            .graph
            .max_parallel_branches()
            .unwrap_or(edges.len())
            .clamp(1, edges.len());
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let mut inputs = Vec::with_capacity(edges.len());
        for edge in edges {
            inputs.push(
                routing::edge_input(self.workflow, edge, &scope, output).map_err(route_failure)?,
            );
        }
        // Ids are allocated and the children started under one lock, so
        // two fan-outs of the same router in parallel branches never
        // collide.
        let bases: Vec<String> = edges
            .iter()
            .map(|e| format!("branch_{}_{}", router.id, routing::target_name(&e.to)))
            .collect();
        let mut ids: Vec<FrameId> = Vec::new();
        self.record_with(|p| {
            ids = p.fresh_frame_ids(&bases);
            let mut steps = vec![ProgressStep::Forked {
                frame: frame.clone(),
                fork: router.id.clone(),
                children: Vec::new(),
            }];
            let mut children = Vec::new();
            for ((edge, input), id) in edges.iter().zip(&inputs).zip(&ids) {
                if let Target::Node(at) = &edge.to {
                    children.push(id.clone());
                    steps.push(ProgressStep::FrameStarted {
                        frame: id.clone(),
                        parent: Some(frame.clone()),
                        at: at.clone(),
                        input: input.clone(),
                        stop_at: join.clone(),
                    });
                }
            }
            if let Some(ProgressStep::Forked { children: c, .. }) = steps.first_mut() {
                *c = children;
            }
            steps
        })?;
        let forks: Vec<Fork<'a>> = edges
            .iter()
            .zip(ids)
            .map(|(edge, id)| Fork {
                edge,
                frame: matches!(edge.to, Target::Node(_)).then_some(id),
            })
            .collect();
        let slots = tokio::sync::Semaphore::new(limit);
        let siblings = cancel.child_token();
        let mut running = FuturesUnordered::new();
        for (i, fork) in forks.iter().enumerate() {
            let slots = &slots;
            let siblings = &siblings;
            running.push(async move {
                let result = self.run_branch(frame, router, fork, slots, siblings).await;
                (i, result)
            });
        }
        let mut results: Vec<Option<Result<FrameEnd, Stop>>> = vec![None; forks.len()];
        while let Some((i, result)) = running.next().await {
            // Under wait_all one failure dooms the join: stop the others
            // instead of paying for work that will be discarded.
            if matches!(result, Err(Stop::Failed(_))) && strategy == AwaitMode::WaitAll {
                siblings.cancel();
            }
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(result);
            }
        }
        drop(running);
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        self.join(frame, &forks, results, join, strategy)
    }

    /// One branch: wait for a slot, then walk it.
    async fn run_branch(
        &self,
        parent: &FrameId,
        router: &ir::Node,
        fork: &Fork<'a>,
        slots: &tokio::sync::Semaphore,
        siblings: &CancellationToken,
    ) -> Result<FrameEnd, Stop> {
        let Some(child) = &fork.frame else {
            // An edge straight to a terminal: no node runs.
            return match fork.edge.to {
                Target::Fail => Err(failed(
                    FailureCode::WorkflowFailed,
                    format!("router {} routed a branch to fail", router.id),
                )),
                _ => Ok(FrameEnd::Done),
            };
        };
        let permit = tokio::select! {
            p = slots.acquire() => p.ok(),
            () = siblings.cancelled() => None,
        };
        let Some(_permit) = permit else {
            // Never started: record it so the progress has no live frame.
            let _ = self.record(ProgressStep::Ended {
                frame: child.clone(),
                status: FrameStatus::Cancelled,
            });
            return Err(Stop::Cancelled);
        };
        // Started once it holds a slot, so overlapping started/finished
        // pairs in the event stream show the real concurrency.
        self.emit_node(
            parent,
            &router.id,
            EventKind::BranchStarted {
                branch_id: child.to_string(),
                from: router.id.to_string(),
                to: routing::target_name(&fork.edge.to).into(),
                index: None,
            },
        );
        let result = self.walk(child, siblings).await;
        self.emit_branch_finished(parent, router, child, &result);
        result
    }

    pub(crate) fn emit_branch_finished(
        &self,
        parent: &FrameId,
        router: &ir::Node,
        child: &FrameId,
        result: &Result<FrameEnd, Stop>,
    ) {
        let (outcome, join_node, error) = match result {
            Ok(FrameEnd::Reached(j)) => ("joined", Some(j.to_string()), None),
            Ok(FrameEnd::Done) => ("done", None, None),
            // A branch never pauses (its human node fails instead).
            Err(Stop::Cancelled | Stop::Paused { .. }) => {
                ("cancelled", None, Some("cancelled".to_owned()))
            }
            Err(Stop::Failed(f)) => ("failed", None, Some(f.message.clone())),
        };
        self.emit_node(
            parent,
            &router.id,
            EventKind::BranchFinished {
                branch_id: child.to_string(),
                outcome: outcome.into(),
                join_node,
                error,
            },
        );
    }

    /// Apply the join's strategy to the branches' ends.
    fn join(
        &self,
        frame: &FrameId,
        forks: &[Fork<'a>],
        results: Vec<Option<Result<FrameEnd, Stop>>>,
        join: Option<NodeId>,
        strategy: AwaitMode,
    ) -> Result<Option<FrameEnd>, Stop> {
        let mut merged: Vec<FrameId> = Vec::new();
        let mut reached: Vec<FrameId> = Vec::new();
        let mut failures: Vec<(String, Failure)> = Vec::new();
        let mut failed_branches: Vec<FailedBranch> = Vec::new();
        let mut all_done = true;
        for (fork, result) in forks.iter().zip(results) {
            let name = fork.frame.as_ref().map_or_else(
                || routing::target_name(&fork.edge.to).to_owned(),
                |f| f.to_string(),
            );
            match result {
                Some(Ok(FrameEnd::Reached(_))) => {
                    all_done = false;
                    if let Some(f) = &fork.frame {
                        reached.push(f.clone());
                        merged.push(f.clone());
                    }
                }
                Some(Ok(FrameEnd::Done)) => {
                    if let Some(f) = &fork.frame {
                        merged.push(f.clone());
                    }
                }
                Some(Err(Stop::Failed(f))) => {
                    all_done = false;
                    failed_branches.push(FailedBranch {
                        branch_id: name.clone(),
                        error: f.message.clone(),
                    });
                    failures.push((name, f));
                }
                Some(Err(Stop::Cancelled | Stop::Paused { .. })) | None => {
                    all_done = false;
                    failed_branches.push(FailedBranch {
                        branch_id: name,
                        error: "cancelled".into(),
                    });
                }
            }
        }
        let first_failure = |failures: Vec<(String, Failure)>| match failures.into_iter().next() {
            Some((branch, f)) => Stop::Failed(Failure::new(
                f.code,
                format!(
                    "branch {branch} failed ({} join{}): {}",
                    strategy.as_str(),
                    join.as_ref()
                        .map_or_else(String::new, |j| format!(" at {j}")),
                    f.message
                ),
            )),
            // Only cancels: a sibling's failure would be listed.
            None => Stop::Cancelled,
        };
        if strategy == AwaitMode::WaitAll && !failed_branches.is_empty() {
            return Err(first_failure(failures));
        }
        let Some(join) = join else {
            if all_done || (!merged.is_empty() && reached.is_empty()) {
                self.emit_join_ready(frame, None, strategy, forks.len(), failed_branches, true);
                self.record(ProgressStep::Joined {
                    frame: frame.clone(),
                    at: None,
                    input: Map::new(),
                    merged,
                })?;
                return Ok(Some(FrameEnd::Done));
            }
            return Err(first_failure(failures));
        };
        let input = self.join_input(&reached, &join, &failed_branches);
        self.emit_join_ready(
            frame,
            Some(&join),
            strategy,
            forks.len(),
            failed_branches,
            false,
        );
        self.record(ProgressStep::Joined {
            frame: frame.clone(),
            at: Some(join),
            input,
            merged,
        })?;
        Ok(None)
    }

    /// The join node's input: what each branch that reached it handed
    /// over (its edge's `with`, rendered in the branch), in branch order;
    /// failed branches listed under `_failed_branches` (best_effort).
    fn join_input(
        &self,
        reached: &[FrameId],
        join: &NodeId,
        failed_branches: &[FailedBranch],
    ) -> Map<String, Value> {
        let mut input = Map::new();
        self.with_progress(|p| {
            for f in reached {
                if let Some(fp) = p.frame(f)
                    && fp.at.as_ref() == Some(join)
                {
                    input.extend(fp.input.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        });
        if !failed_branches.is_empty() {
            input.insert(
                "_failed_branches".into(),
                serde_json::to_value(failed_branches).unwrap_or(Value::Null),
            );
        }
        input
    }

    fn emit_join_ready(
        &self,
        frame: &FrameId,
        join: Option<&NodeId>,
        strategy: AwaitMode,
        branches: usize,
        failed_branches: Vec<FailedBranch>,
        terminal: bool,
    ) {
        let kind = EventKind::JoinReady {
            strategy: strategy.as_str().into(),
            branches: branches as u64,
            failed_branches,
            terminal_join: terminal,
        };
        match join {
            Some(j) => self.emit_node(frame, j, kind),
            None => self
                .events
                .emit_draft(iterion_core::EventDraft::from(kind).in_branch(frame.branch_id())),
        }
    }

    /// An `as foreach NAME(ITEM in "collection")` edge: its target runs
    /// once per item of the collection (a JSON array; `input.x` is the
    /// source's output, as in `with`), one item after the other, each item
    /// a branch whose input is the edge's `with` plus `ITEM` and
    /// `_index`; the items join at the node where the body converges
    /// (its `await:` strategy, as a fan-out), which receives `NAME`: the
    /// output each item ended with, in item order.
    pub(crate) async fn foreach(
        &self,
        frame: &FrameId,
        source: &'a ir::Node,
        taken: Taken<'a>,
        input: &Map<String, Value>,
        output: &Value,
        cancel: &CancellationToken,
    ) -> Result<Option<FrameEnd>, Stop> {
        let edge = taken.edge;
        let (Some(each), Target::Node(body)) = (&edge.foreach, &edge.to) else {
            return Err(failed(
                FailureCode::NodeFailed,
                format!(
                    "edge {} -> {} is not a foreach over a node",
                    edge.from,
                    routing::target_name(&edge.to)
                ),
            ));
        };
        let visible = self.visible(frame);
        let base = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let effective = routing::edge_scope_input(&base, output);
        let scope = Scope {
            input: &effective,
            output: Some(output),
            ..base
        };
        let expr = foreach_expr(&each.collection);
        let items = match template::render_value(&expr, &scope) {
            Ok(Value::Array(items)) => items,
            Ok(other) => {
                return Err(failed(
                    FailureCode::NodeFailed,
                    format!(
                        "foreach {}: {:?} is not an array (it is {})",
                        each.name,
                        each.collection,
                        kind_of(&other)
                    ),
                ));
            }
            Err(e) => {
                return Err(failed(
                    FailureCode::NodeFailed,
                    format!("foreach {}: {e}", each.name),
                ));
            }
        };
        let Some(join) = self.graph.convergence(&source.id, &[body]) else {
            return Err(failed(
                FailureCode::NodeFailed,
                format!("foreach {} has no node its items join at", each.name),
            ));
        };
        let strategy = self.graph.await_mode(&join);
        self.emit_node(
            frame,
            &source.id,
            EventKind::EdgeSelected {
                from: source.id.to_string(),
                to: body.to_string(),
                condition: edge.condition.as_ref().map(routing::condition_text),
                loop_name: None,
                iteration: None,
                round_robin_index: None,
                foreach: Some(each.name.clone()),
                items: Some(items.len() as u64),
            },
        );
        let bases: Vec<String> = (0..items.len())
            .map(|i| format!("foreach_{}_{i}", each.name))
            .collect();
        let mut ids: Vec<FrameId> = Vec::new();
        self.record_with(|p| {
            ids = p.fresh_frame_ids(&bases);
            vec![ProgressStep::Forked {
                frame: frame.clone(),
                fork: source.id.clone(),
                children: ids.clone(),
            }]
        })?;
        let mut reached: Vec<FrameId> = Vec::new();
        let mut results: Vec<Value> = Vec::new();
        let mut failed_branches: Vec<FailedBranch> = Vec::new();
        for (index, (item, child)) in items.into_iter().zip(&ids).enumerate() {
            if cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let mut item_input = taken.input.clone();
            item_input.insert(each.item.clone(), item);
            item_input.insert("_index".into(), Value::from(index as u64));
            self.record(ProgressStep::FrameStarted {
                frame: child.clone(),
                parent: Some(frame.clone()),
                at: body.clone(),
                input: item_input,
                stop_at: Some(join.clone()),
            })?;
            self.emit_node(
                frame,
                &source.id,
                EventKind::BranchStarted {
                    branch_id: child.to_string(),
                    from: source.id.to_string(),
                    to: body.to_string(),
                    index: Some(index as u64),
                },
            );
            let result = self.walk(child, cancel).await;
            self.emit_branch_finished(frame, source, child, &result);
            match result {
                Ok(_) => {
                    results.push(self.with_progress(|p| {
                        p.frame(child)
                            .and_then(|f| f.history.last().and_then(|n| f.outputs.get(n)))
                            .cloned()
                            .unwrap_or(Value::Null)
                    }));
                    reached.push(child.clone());
                }
                Err(Stop::Cancelled | Stop::Paused { .. }) => return Err(Stop::Cancelled),
                Err(Stop::Failed(f)) if strategy == AwaitMode::WaitAll => {
                    return Err(Stop::Failed(Failure::new(
                        f.code,
                        format!(
                            "item {index} of foreach {} failed (wait_all join at {join}): {}",
                            each.name, f.message
                        ),
                    )));
                }
                Err(Stop::Failed(f)) => failed_branches.push(FailedBranch {
                    branch_id: child.to_string(),
                    error: f.message,
                }),
            }
        }
        let mut join_input = self.join_input(&reached, &join, &failed_branches);
        join_input.insert(each.name.clone(), Value::Array(results));
        self.emit_join_ready(
            frame,
            Some(&join),
            strategy,
            ids.len(),
            failed_branches,
            false,
        );
        self.record(ProgressStep::Joined {
            frame: frame.clone(),
            at: Some(join),
            input: join_input,
            merged: reached,
        })?;
        Ok(None)
    }
}

/// A foreach collection as a template: `"{{outputs.x.items}}"` as is, a
/// bare reference (`outputs.split.files`) wrapped.
pub(crate) fn foreach_expr(collection: &str) -> String {
    if collection.contains("{{") {
        collection.to_owned()
    } else {
        format!("{{{{{}}}}}", collection.trim())
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
