//! What every node execution of one run shares: the booted sandbox, the
//! event writer, the run's variables, the graph facts, the resumable
//! progress, and the environment each exec carries.
//!
//! One [`RunCx`] per run, borrowed by every frame (the main path and each
//! parallel branch run as futures of the same task, so nothing here needs
//! to be `'static`). The walk itself is in `walk.rs`, tool nodes in
//! `tool.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use iterion_core::agent::AgentRunner;
use iterion_core::store::Failure;
use iterion_core::{DriverError, EventDraft, EventKind, FailureCode, NodeId, RunId};
use iterion_dsl::ir;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::boot::Booted;
use crate::bounds::{Bound, RunBounds, Watchdog};
use crate::events::Emitter;
use crate::graph::GraphInfo;
use crate::human::HumanPrompter;
use crate::progress::{FrameId, PROGRESS_VERSION, ProgressError, ProgressStep, RunProgress};
use crate::settings::EngineSettings;
use crate::template::{ATTACHMENTS_KEY, LOOPS_KEY};

/// Why node execution stopped short of `done`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    Cancelled,
    Failed(Failure),
    /// A human node waits for answers (main path only).
    Paused {
        node: NodeId,
    },
}

impl From<ProgressError> for Stop {
    fn from(e: ProgressError) -> Self {
        // A step the progress refuses is an engine defect; the run stops
        // rather than continue with state it could not record.
        Stop::Failed(Failure::new(FailureCode::NodeFailed, e.to_string()))
    }
}

/// How one node execution failed.
#[derive(Debug)]
pub(crate) enum NodeError {
    Cancelled,
    /// The node's own bound (its `timeout:`) stopped it.
    Bound(Bound),
    Failed {
        code: FailureCode,
        exit_code: Option<i64>,
        error: String,
        stderr_tail: String,
    },
    /// An agent's `ask_user` waits for a human: the run pauses here.
    AskedHuman {
        question: String,
    },
}

impl NodeError {
    pub(crate) fn failed(code: FailureCode, error: impl Into<String>) -> Self {
        Self::Failed {
            code,
            exit_code: None,
            error: error.into(),
            stderr_tail: String::new(),
        }
    }

    /// A driver error of a node's exec, through the one classifier.
    pub(crate) fn driver(e: DriverError) -> Self {
        use iterion_sandbox::classify::{Cause, SetupContext, Stage, classify};
        match classify(Cause::Driver(&e), Stage::Exec, SetupContext::default()).code {
            FailureCode::Cancelled => Self::Cancelled,
            code => Self::failed(code, format!("{} ({})", e, e.code())),
        }
    }
}

/// The per-run execution context.
pub(crate) struct RunCx<'a> {
    pub settings: &'a EngineSettings,
    pub workflow: &'a ir::Workflow,
    pub graph: GraphInfo<'a>,
    pub booted: &'a Booted,
    pub events: &'a Emitter,
    pub run_id: &'a RunId,
    /// What `{{vars.X}}` reads: the run's variables with `${PROJECT_DIR}`
    /// and `${NAME}` expanded (`crate::vars`).
    pub vars: BTreeMap<String, Value>,
    /// The entry node's input: the run's variables as given, unexpanded.
    pub entry_input: serde_json::Map<String, Value>,
    pub agents: Option<&'a dyn AgentRunner>,
    /// Asks human nodes (a terminal); `None` pauses at them.
    pub human: Option<std::sync::Arc<dyn HumanPrompter>>,
    /// The run's bounds (issue 19 #6): `max_iterations` is counted across
    /// parallel branches, so behind a lock.
    bounds: &'a std::sync::Mutex<RunBounds>,
    /// The run's deadline, whose token is the `cancel` of `run_graph`.
    watchdog: &'a Watchdog,
    pub(crate) shell: tokio::sync::OnceCell<&'static str>,
    pub(crate) scratch: tokio::sync::OnceCell<()>,
    pub(crate) scripts: AtomicU64,
    progress: std::sync::Mutex<RunProgress>,
    /// The run's provided attachments (`{{attachments.…}}`), when the
    /// workflow declares any.
    pub(crate) attachments: Option<Value>,
}

impl<'a> RunCx<'a> {
    #[allow(clippy::too_many_arguments)] // one borrow per shared part of the run
    pub(crate) fn new(
        settings: &'a EngineSettings,
        workflow: &'a ir::Workflow,
        booted: &'a Booted,
        events: &'a Emitter,
        run_id: &'a RunId,
        vars: BTreeMap<String, Value>,
        agents: Option<&'a dyn AgentRunner>,
        bounds: &'a std::sync::Mutex<RunBounds>,
        watchdog: &'a Watchdog,
    ) -> Self {
        Self {
            settings,
            workflow,
            graph: GraphInfo::new(workflow),
            booted,
            events,
            run_id,
            vars: crate::vars::expand_vars(&vars, booted.run().workdir(), &|name| {
                std::env::var(name).ok()
            }),
            entry_input: crate::vars::entry_input(&vars),
            agents,
            human: None,
            bounds,
            watchdog,
            shell: tokio::sync::OnceCell::new(),
            scratch: tokio::sync::OnceCell::new(),
            scripts: AtomicU64::new(0),
            progress: std::sync::Mutex::new(RunProgress::new()),
            attachments: None,
        }
    }

    /// Continue from stored progress (resume).
    pub(crate) fn restore(&mut self, progress: RunProgress) {
        self.progress = std::sync::Mutex::new(progress);
    }

    fn bounds(&self) -> std::sync::MutexGuard<'_, RunBounds> {
        self.bounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count one node execution against `max_iterations`: the one past it
    /// never starts.
    pub(crate) fn admit_node(&self) -> Result<(), Stop> {
        let admitted = self.bounds().admit_node();
        admitted.map_err(|bound| self.bound_hit(&bound))
    }

    /// `node`'s `timeout:` armed under `cancel` (a node without one gets a
    /// watchdog that only follows `cancel`).
    pub(crate) fn arm_node(&self, node: &NodeId, cancel: &CancellationToken) -> Watchdog {
        self.bounds().arm_node(node, cancel)
    }

    /// The stop of a bound that was hit, after its event.
    pub(crate) fn bound_hit(&self, bound: &Bound) -> Stop {
        let elapsed = self.bounds().elapsed();
        if let Some(e) = bound.event(elapsed) {
            self.events.emit(e);
        }
        Stop::Failed(bound.failure())
    }

    /// What a node stopped by the run's token failed of: the run's bound
    /// that fired, or a cancellation.
    pub(crate) fn cancel_reason(&self) -> String {
        match self.watchdog.fired() {
            Some(b) => b.failure().message,
            None => "cancelled".into(),
        }
    }

    /// Apply a step to the progress and persist it (`run_checkpoint`).
    pub(crate) fn record(&self, step: ProgressStep) -> Result<(), ProgressError> {
        self.record_with(|_| vec![step]).map(|_| ())
    }

    /// Apply the steps `make` derives from the current progress, and
    /// persist them, under one lock: what is persisted is what was
    /// applied, in that order, and ids `make` allocates cannot collide
    /// with a concurrent branch's.
    pub(crate) fn record_with(
        &self,
        make: impl FnOnce(&RunProgress) -> Vec<ProgressStep>,
    ) -> Result<Vec<ProgressStep>, ProgressError> {
        let mut p = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let steps = make(&p);
        let main = FrameId::main();
        for step in &steps {
            p.apply(step)?;
            let frame = match step {
                ProgressStep::Launched { .. } => &main,
                ProgressStep::Reopened { frame, .. }
                | ProgressStep::FrameStarted { frame, .. }
                | ProgressStep::NodeFinished { frame, .. }
                | ProgressStep::Advanced { frame, .. }
                | ProgressStep::Forked { frame, .. }
                | ProgressStep::Joined { frame, .. }
                | ProgressStep::Ended { frame, .. } => frame,
            };
            let data = serde_json::to_value(step).unwrap_or(Value::Null);
            self.events.emit_draft(
                EventDraft::from(EventKind::RunCheckpoint {
                    version: PROGRESS_VERSION,
                    step: data,
                })
                .in_branch(frame.branch_id()),
            );
        }
        Ok(steps)
    }

    /// Read the progress.
    pub(crate) fn with_progress<R>(&self, f: impl FnOnce(&RunProgress) -> R) -> R {
        let p = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&p)
    }

    /// What a node of `frame` reads besides vars and its input: the
    /// outputs and artifacts it sees, and every declared loop's state
    /// (`{{loop.NAME.iteration|max|previous_output}}`), the frame's own
    /// counters over its ancestors' (a branch inside a loop reads the
    /// loop it runs in, upstream).
    pub(crate) fn visible(&self, frame: &FrameId) -> BTreeMap<NodeId, Value> {
        self.with_progress(|p| {
            let mut out = p.visible_outputs(frame);
            let mut chain = Vec::new();
            let mut cur = p.frame(frame);
            while let Some(f) = cur {
                chain.push(f);
                cur = f.parent.as_ref().and_then(|id| p.frame(id));
            }
            let mut loops = serde_json::Map::new();
            for (name, max) in self.graph.loop_maxima() {
                let own = chain.iter().find(|f| f.loops.contains_key(name));
                let iteration = own.and_then(|f| f.loops.get(name)).copied().unwrap_or(0);
                let previous = own
                    .and_then(|f| f.loop_previous.get(name))
                    .cloned()
                    .unwrap_or(Value::Null);
                loops.insert(
                    name.to_owned(),
                    serde_json::json!({
                        "iteration": iteration,
                        "max": max,
                        "previous_output": previous,
                    }),
                );
            }
            if !loops.is_empty() {
                out.insert(NodeId::new(LOOPS_KEY), Value::Object(loops));
            }
            if let Some(a) = &self.attachments {
                out.insert(NodeId::new(ATTACHMENTS_KEY), a.clone());
            }
            out
        })
    }

    /// Emit an event about `node`, tagged with the frame's branch.
    pub(crate) fn emit_node(&self, frame: &FrameId, node: &NodeId, kind: EventKind) {
        self.events.emit_draft(
            EventDraft::from(kind)
                .for_node(node.clone())
                .in_branch(frame.branch_id()),
        );
    }

    /// The environment of every exec a node makes: who it is, where the
    /// workspace is, the run's `as: env` secrets (on the exec, never the
    /// container's create-time env, visible in `docker inspect`), and the
    /// exec's own egress proxy credential (so `network_blocked` names this
    /// node whatever else runs at the same time).
    pub(crate) fn exec_env(&self, node: &NodeId) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert("ITERION_NODE_ID".into(), node.to_string());
        env.insert("ITERION_RUN_ID".into(), self.run_id.to_string());
        // Settle (seed step 19): `${PROJECT_DIR}` names the workspace as the
        // exec sees it — the container workspace in a sandbox, the host
        // workspace otherwise.
        env.insert("PROJECT_DIR".into(), self.booted.run().workdir().to_owned());
        let secrets = self.booted.secrets();
        for (k, v) in &secrets.env {
            env.insert(k.clone(), v.clone());
        }
        if let Some(egress) = &secrets.egress {
            env.extend(egress.env_for(node));
        }
        env
    }
}
