//! The run engine: one run from `queued` to exactly one terminal status.
//!
//! Order (seed steps 3, 19–21 and facts §9): create the run record with
//! its owner lease → admission (what this engine can execute, then the
//! booter's policy), persisted before a refusal returns → `running` →
//! boot → nodes, edge by edge → teardown (always after a boot; its errors
//! never change the status) → the terminal event → the terminal status by
//! compare-and-set. Every step emits its event through the run's single
//! writer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::store::{Admission, AdmissionDecision, Failure, NewRun, RunRecord, Transition};
use iterion_core::{
    ByteStream, DriverError, EventKind, ExecRequest, FailureCode, NodeId, RunId, RunStatus,
    RunStore, StoreError, Trust,
};
use iterion_dsl::ir::{self, Target, ToolSpec};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use iterion_sandbox::verdict::SetupContext;

use crate::admission;
use crate::boot::{AdmissionVerdict, BootContext, BootFlags, Booted, SandboxBooter};
use crate::bounds::{self, Bound, BoundsError, RunBounds, Watchdog};
use crate::events::{CurrentNode, Emitter, EventTap, NodeLog, spawn_writer};
use crate::owner;
use crate::redact::TailRedactor;
use crate::routing::{self, RouteError, Router};
use crate::template::{self, Scope};

/// Engine-wide knobs.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Bytes of one node execution's output that reach the run log.
    pub node_log_cap: u64,
    /// Longest run-log line; longer lines are split.
    pub max_log_line: usize,
    /// Bytes of stdout kept for output parsing (the rest is only logged).
    pub stdout_keep: usize,
    /// Bytes of stderr kept for `node_failed.stderr_tail`.
    pub stderr_tail: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            node_log_cap: 8 * 1024 * 1024,
            max_log_line: 64 * 1024,
            stdout_keep: 1024 * 1024,
            stderr_tail: 4 * 1024,
        }
    }
}

/// One run to execute.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Path of the `.iter` file (recorded, shown).
    pub file: String,
    /// The compiled workflow.
    pub workflow: ir::Workflow,
    /// `--var NAME=VALUE` pairs (coerced to their declared types).
    pub vars: BTreeMap<String, String>,
    /// Trust of the workspace.
    pub trust: Trust,
    /// The run's id.
    pub run_id: RunId,
    /// Absolute host workspace (the default exec workdir on the host).
    pub workspace: PathBuf,
    /// Flags for the booter.
    pub flags: BootFlags,
    /// `iterion run --timeout`: the whole run's bound.
    pub timeout: Option<std::time::Duration>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// Its terminal status (as the store holds it).
    pub status: RunStatus,
    /// Why it failed, when it did.
    pub failure: Option<Failure>,
}

/// Errors that prevent the engine from recording a run at all.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store refused or failed.
    #[error("run store {operation}: {source}")]
    Store {
        /// What the engine was doing.
        operation: &'static str,
        /// Cause.
        #[source]
        source: StoreError,
    },
    /// This process's owner record could not be read.
    #[error("cannot read this process's owner record: {source}")]
    Owner {
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl RuntimeError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Store { source, .. } => source.code(),
            Self::Owner { .. } => "RUN_OWNER_UNREADABLE",
        }
    }
}

/// The run engine.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn RunStore>,
    booter: Arc<dyn SandboxBooter>,
    settings: EngineSettings,
    tap: Option<EventTap>,
    current: CurrentNode,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store.describe())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why node execution stopped short of `done`.
#[derive(Debug)]
enum Stop {
    Cancelled,
    Failed(Failure),
}

/// Per-run state of the node loop.
struct RunState {
    run_id: RunId,
    vars: BTreeMap<String, Value>,
    outputs: BTreeMap<NodeId, Value>,
    shell: Option<&'static str>,
    scripts: u64,
}

impl Engine {
    /// An engine over `store`, booting through `booter`.
    pub fn new(store: Arc<dyn RunStore>, booter: Arc<dyn SandboxBooter>) -> Self {
        Self {
            store,
            booter,
            settings: EngineSettings::default(),
            tap: None,
            current: CurrentNode::default(),
        }
    }

    /// Publish which node's exec is running into `current` (the egress
    /// proxy names that node in `network_blocked`).
    pub fn with_current_node(mut self, current: CurrentNode) -> Self {
        self.current = current;
        self
    }

    /// Copy every persisted event to `tap` (live progress; never drives
    /// the run).
    pub fn with_event_tap(mut self, tap: EventTap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Replace the settings.
    pub fn with_settings(mut self, settings: EngineSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Execute one run to its terminal status. `Err` only when the run
    /// could not be recorded or moved at all; every other failure is in
    /// the outcome (and on the run record).
    pub async fn run(
        &self,
        options: RunOptions,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RuntimeError> {
        let started = Instant::now();
        let owner = owner::current_owner().map_err(|source| RuntimeError::Owner { source })?;
        let record = self
            .store
            .create_run(NewRun {
                id: options.run_id.clone(),
                workflow: options.workflow.name.clone(),
                file: options.file.clone(),
                trust: options.trust,
                owner: Some(owner),
            })
            .await
            .map_err(|source| RuntimeError::Store {
                operation: "create run",
                source,
            })?;
        let (events, writer) = spawn_writer(
            Arc::clone(&self.store),
            options.run_id.clone(),
            self.tap.clone(),
        );
        // Bounds (issue 19 #6): everything below runs under the run's
        // watchdog token; an unreadable bound is refused at admission.
        let mut bounds = RunBounds::from_workflow(&options.workflow, options.timeout);
        let watchdog = match &mut bounds {
            Ok(b) => b.arm_run(&cancel),
            Err(_) => Watchdog::unarmed(&cancel),
        };
        let cancel = watchdog.token().clone();
        let ctx = BootContext {
            run_id: &options.run_id,
            workflow: &options.workflow,
            file: &options.file,
            trust: options.trust,
            workspace: &options.workspace,
            flags: &options.flags,
            events: &events,
            cancel: &cancel,
        };
        let result = self
            .drive(&options, &ctx, record, started, bounds, &watchdog)
            .await;
        events.flush().await;
        drop(events);
        if let Err(e) = writer.await {
            tracing::warn!(error = %e, "event writer task failed");
        }
        result
    }

    async fn drive(
        &self,
        options: &RunOptions,
        ctx: &BootContext<'_>,
        record: RunRecord,
        started: Instant,
        bounds: Result<RunBounds, BoundsError>,
        watchdog: &Watchdog,
    ) -> Result<RunOutcome, RuntimeError> {
        let events = ctx.events;
        let cancel = ctx.cancel;
        // ---- admission (seed step 3): ours first, then the policy's.
        let checked = admission::check_workflow(&options.workflow)
            .and_then(|()| admission::resolve_vars(&options.workflow, &options.vars))
            .map_err(|e| (e.code(), e.to_string()));
        let checked = match bounds {
            Err(e) => Err((e.code(), e.to_string())),
            Ok(b) => checked.map(|vars| (vars, b)),
        };
        let (verdict, vars, mut bounds) = match checked {
            Err((code, reason)) => (
                AdmissionVerdict::Deny {
                    code: code.to_owned(),
                    reason,
                },
                BTreeMap::new(),
                None,
            ),
            Ok((vars, b)) => (self.booter.admit(ctx).await, vars, Some(b)),
        };
        let (decision, code, reason) = match &verdict {
            AdmissionVerdict::Admit { reason } => (AdmissionDecision::Admitted, None, reason),
            AdmissionVerdict::Deny { code, reason } => {
                (AdmissionDecision::Denied, Some(code.clone()), reason)
            }
        };
        events.emit(EventKind::RunAdmission {
            decision: match decision {
                AdmissionDecision::Admitted => "admitted",
                AdmissionDecision::Denied => "denied",
            }
            .into(),
            phase: "pre_model".into(),
            code: code.clone(),
            reason: reason.clone(),
        });
        // The verdict is on the record before a refusal returns, so the run
        // explains itself (seed "Collections touched").
        let record = match self
            .store
            .record_admission(
                &options.run_id,
                Admission {
                    decision,
                    phase: "pre_model".into(),
                    code,
                    reason: reason.clone(),
                    checked_at: OffsetDateTime::now_utc(),
                },
                Some(record.revision),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let failure = Failure::new(
                    FailureCode::StoreError,
                    format!("could not persist the admission decision: {e}"),
                );
                return self.finish(ctx, &record, Some(failure), started).await;
            }
        };
        // Bounds exist exactly when our own checks admitted the run.
        let (AdmissionVerdict::Admit { .. }, Some(bounds)) = (&verdict, bounds.as_mut()) else {
            let failure = Failure::new(FailureCode::LaunchFailed, reason.clone());
            return self.finish(ctx, &record, Some(failure), started).await;
        };
        if cancel.is_cancelled() {
            let failure = stopped(bounds, watchdog, events);
            return self.finish(ctx, &record, Some(failure), started).await;
        }

        // ---- running
        let record = self
            .store
            .transition(
                &options.run_id,
                Transition {
                    from: RunStatus::Queued,
                    expected_revision: Some(record.revision),
                    to: RunStatus::Running,
                    failure: None,
                },
            )
            .await
            .map_err(|source| RuntimeError::Store {
                operation: "start run",
                source,
            })?;
        events.emit(EventKind::RunStarted {
            workflow: options.workflow.name.clone(),
            file: options.file.clone(),
            trust: format!("{:?}", options.trust).to_lowercase(),
        });

        // ---- boot
        let booted = match self.booter.boot(ctx).await {
            Ok(b) => b,
            Err(e) => {
                let setup = SetupContext {
                    cancelled: cancel.is_cancelled(),
                    interrupted: false,
                };
                let failure = match e.failure_code(setup) {
                    // A boot stopped by the run's deadline failed on it.
                    FailureCode::Cancelled => stopped(bounds, watchdog, events),
                    code => Failure::new(code, e.to_string()),
                };
                return self.finish(ctx, &record, Some(failure), started).await;
            }
        };
        // From here every event and log line is masked for the run's
        // secrets (the node logs mask across lines; this catches the rest).
        events.set_redactor(booted.secrets().redactor.clone());
        if let Booted::Host { reason, .. } = &booted {
            events.system_log(None, format!("running on the host, unsandboxed: {reason}"));
        }

        // ---- nodes
        let mut state = RunState {
            run_id: options.run_id.clone(),
            vars,
            outputs: BTreeMap::new(),
            shell: None,
            scripts: 0,
        };
        let stop = self
            .execute(
                &options.workflow,
                &booted,
                &mut state,
                events,
                bounds,
                watchdog,
            )
            .await;

        // ---- teardown: always after a boot; never changes the status.
        if let Err(e) = self.booter.teardown(booted, ctx).await {
            tracing::warn!(run = %options.run_id, code = e.code(), error = %e, "teardown failed");
            events.system_log(None, format!("teardown failed ({}): {e}", e.code()));
        }
        let failure = match stop {
            Ok(()) => None,
            Err(Stop::Cancelled) => Some(stopped(bounds, watchdog, events)),
            Err(Stop::Failed(f)) => Some(f),
        };
        self.finish(ctx, &record, failure, started).await
    }

    /// Emit the terminal event, drain the writer, then CAS the status: the
    /// stream is complete by the time a poller sees a terminal status.
    async fn finish(
        &self,
        ctx: &BootContext<'_>,
        record: &RunRecord,
        failure: Option<Failure>,
        started: Instant,
    ) -> Result<RunOutcome, RuntimeError> {
        let events = ctx.events;
        let to = failure
            .as_ref()
            .map_or(RunStatus::Finished, |f| f.code.status());
        match &failure {
            None => events.emit(EventKind::RunFinished {
                duration_ms: millis(started),
            }),
            Some(f) if f.code == FailureCode::Cancelled => events.emit(EventKind::RunCancelled {
                reason: f.message.clone(),
            }),
            Some(f) => events.emit(EventKind::RunFailed {
                failure_code: f.code.as_str().into(),
                disposition: f.disposition.as_str().into(),
                status: to.as_str().into(),
                error: f.message.clone(),
            }),
        }
        events.flush().await;
        let transition = Transition {
            from: record.status,
            expected_revision: Some(record.revision),
            to,
            failure: failure.clone(),
        };
        match self.store.transition(ctx.run_id, transition).await {
            Ok(r) => Ok(RunOutcome {
                run_id: r.id,
                status: r.status,
                failure: r.failure,
            }),
            // Someone else moved the run (the reaper marked it interrupted):
            // report what the store holds rather than overwrite it.
            Err(StoreError::StaleTransition { .. } | StoreError::IllegalTransition { .. }) => {
                match self.store.load_run(ctx.run_id).await {
                    Ok(Some(r)) => Ok(RunOutcome {
                        run_id: r.id,
                        status: r.status,
                        failure: r.failure,
                    }),
                    Ok(None) => Err(RuntimeError::Store {
                        operation: "finish run",
                        source: StoreError::RunNotFound(ctx.run_id.clone()),
                    }),
                    Err(source) => Err(RuntimeError::Store {
                        operation: "finish run",
                        source,
                    }),
                }
            }
            Err(source) => Err(RuntimeError::Store {
                operation: "finish run",
                source,
            }),
        }
    }

    async fn execute(
        &self,
        workflow: &ir::Workflow,
        booted: &Booted,
        state: &mut RunState,
        events: &Emitter,
        bounds: &mut RunBounds,
        run: &Watchdog,
    ) -> Result<(), Stop> {
        let cancel = run.token();
        let mut router = Router::new();
        let mut current = workflow.entry.clone();
        let mut input = Map::new();
        loop {
            if cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let Some(node) = workflow.nodes.get(&current) else {
                return Err(Stop::Failed(Failure::new(
                    FailureCode::NodeFailed,
                    format!("unknown node {current}"),
                )));
            };
            // `max_iterations` counts executions: the one past it never starts.
            if node.kind != ir::NodeKind::Fail
                && let Err(bound) = bounds.admit_node()
            {
                return Err(Stop::Failed(bound_failure(&bound, bounds, events)));
            }
            events.emit_node(
                &node.id,
                EventKind::NodeStarted {
                    kind: node.kind.as_str().into(),
                },
            );
            if node.kind == ir::NodeKind::Fail {
                let message = node
                    .properties
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(String::new, |m| format!(": {m}"));
                return Err(Stop::Failed(Failure::new(
                    FailureCode::WorkflowFailed,
                    format!("reached fail node {}{message}", node.id),
                )));
            }
            let node_started = Instant::now();
            let node_watch = bounds.arm_node(&node.id, run);
            let output = match self
                .run_tool(
                    workflow,
                    node,
                    &input,
                    booted,
                    state,
                    events,
                    node_watch.token(),
                )
                .await
            {
                Ok((exit_code, output)) => {
                    events.emit_node(
                        &node.id,
                        EventKind::NodeFinished {
                            exit_code: Some(exit_code),
                            duration_ms: millis(node_started),
                            output: output.clone(),
                        },
                    );
                    output
                }
                Err(NodeError::Cancelled) => {
                    // The node's own `timeout:` fails the run with TIMEOUT;
                    // anything else (the run's deadline, a signal) is the
                    // run's stop, classified once in `drive`.
                    let timed_out = node_watch.fired();
                    events.emit_node(
                        &node.id,
                        EventKind::NodeFailed {
                            exit_code: None,
                            error: match timed_out.as_ref().or(run.fired().as_ref()) {
                                Some(b) => b.failure().message,
                                None => "cancelled".into(),
                            },
                            stderr_tail: String::new(),
                        },
                    );
                    return Err(match timed_out {
                        Some(b) => Stop::Failed(bound_failure(&b, bounds, events)),
                        None => Stop::Cancelled,
                    });
                }
                Err(NodeError::Failed {
                    code,
                    exit_code,
                    error,
                    stderr_tail,
                }) => {
                    events.emit_node(
                        &node.id,
                        EventKind::NodeFailed {
                            exit_code,
                            error: error.clone(),
                            stderr_tail,
                        },
                    );
                    return Err(Stop::Failed(Failure::new(
                        code,
                        format!("node {}: {error}", node.id),
                    )));
                }
            };
            state.outputs.insert(node.id.clone(), output.clone());
            let scope = Scope {
                vars: &state.vars,
                input: &input,
                outputs: &state.outputs,
                output: None,
            };
            let taken = match router.route(workflow, &node.id, &scope, &output) {
                Ok(t) => t,
                Err(e) => {
                    let code = match &e {
                        RouteError::NoOutgoingEdge { .. } => FailureCode::NoOutgoingEdge,
                        RouteError::LoopLimitExceeded { .. } => FailureCode::LoopLimitExceeded,
                        RouteError::With { .. } => FailureCode::NodeFailed,
                    };
                    return Err(Stop::Failed(Failure::new(code, e.to_string())));
                }
            };
            events.emit_node(
                &node.id,
                EventKind::EdgeTaken {
                    from: node.id.to_string(),
                    to: routing::target_name(&taken.edge.to).into(),
                    condition: taken.edge.condition.as_ref().map(routing::condition_text),
                    loop_name: taken.edge.loop_bound.as_ref().map(|l| l.name.clone()),
                    iteration: taken.iteration,
                },
            );
            match &taken.edge.to {
                Target::Done => return Ok(()),
                Target::Fail => {
                    return Err(Stop::Failed(Failure::new(
                        FailureCode::WorkflowFailed,
                        format!("node {} routed to fail", node.id),
                    )));
                }
                Target::Node(next) => {
                    current = next.clone();
                    input = taken.input;
                }
            }
        }
    }

    /// `bash` when the sandbox has it, else `sh` (probed once per run).
    async fn shell(
        &self,
        booted: &Booted,
        state: &mut RunState,
        cancel: &CancellationToken,
    ) -> Result<&'static str, NodeError> {
        if let Some(shell) = state.shell {
            return Ok(shell);
        }
        let mut session = booted
            .run()
            .exec(ExecRequest::new(["sh", "-c", "command -v bash"]))
            .await
            .map_err(NodeError::driver)?;
        let limits = OutputLimits {
            stdout: 4096,
            stderr_tail: 4096,
        };
        let mut ignore = |_: &iterion_core::OutputChunk| {};
        let probed = tokio::select! {
            r = collect_output(session.as_mut(), limits, &mut ignore) => Some(r),
            () = cancel.cancelled() => None,
        };
        let Some(probed) = probed else {
            let _ = session.kill().await;
            return Err(NodeError::Cancelled);
        };
        let shell = if probed.map_err(NodeError::driver)?.exit_code == 0 {
            "bash"
        } else {
            "sh"
        };
        state.shell = Some(shell);
        Ok(shell)
    }

    /// `mkdir -p` a directory in the sandbox (an archive import needs its
    /// target to exist).
    async fn ensure_dir(
        &self,
        booted: &Booted,
        dir: &str,
        cancel: &CancellationToken,
    ) -> Result<(), NodeError> {
        let mut session = booted
            .run()
            .exec(ExecRequest::new(["mkdir", "-p", "--", dir]))
            .await
            .map_err(NodeError::driver)?;
        let limits = OutputLimits {
            stdout: 4096,
            stderr_tail: 4096,
        };
        let mut ignore = |_: &iterion_core::OutputChunk| {};
        let made = tokio::select! {
            r = collect_output(session.as_mut(), limits, &mut ignore) => Some(r),
            () = cancel.cancelled() => None,
        };
        let Some(made) = made else {
            let _ = session.kill().await;
            return Err(NodeError::Cancelled);
        };
        let out = made.map_err(NodeError::driver)?;
        if out.exit_code != 0 {
            return Err(NodeError::Failed {
                code: FailureCode::NodeFailed,
                exit_code: Some(out.exit_code),
                error: format!("cannot create the script directory {dir}"),
                stderr_tail: String::from_utf8_lossy(&out.stderr_tail).into_owned(),
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_tool(
        &self,
        workflow: &ir::Workflow,
        node: &ir::Node,
        input: &Map<String, Value>,
        booted: &Booted,
        state: &mut RunState,
        events: &Emitter,
        cancel: &CancellationToken,
    ) -> Result<(i64, Value), NodeError> {
        let Some(tool) = &node.tool else {
            return Err(NodeError::failed(
                FailureCode::NodeFailed,
                "node has no command",
            ));
        };
        let scope = Scope {
            vars: &state.vars,
            input,
            outputs: &state.outputs,
            output: None,
        };
        let argv = match tool {
            ToolSpec::Command(command) => {
                let rendered = template::render_command(command, &scope)
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                let shell = self.shell(booted, state, cancel).await?;
                vec![shell.to_owned(), "-c".to_owned(), rendered]
            }
            ToolSpec::Script { script, language } => {
                let rendered = template::render_command(script, &scope)
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                if language.is_empty()
                    || !language
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
                {
                    return Err(NodeError::failed(
                        FailureCode::NodeFailed,
                        format!("script language {language:?} is not an interpreter name"),
                    ));
                }
                if state.scripts == 0 {
                    self.ensure_dir(booted, booted.scratch_dir(), cancel)
                        .await?;
                }
                state.scripts += 1;
                let name = format!("{}-{}.script", node.id, state.scripts);
                let archive = one_file_tar(&name, rendered.as_bytes())
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                let stream: ByteStream =
                    Box::pin(futures_util::stream::iter([Ok::<_, std::io::Error>(
                        Bytes::from(archive),
                    )]));
                booted
                    .run()
                    .import(booted.scratch_dir(), stream)
                    .await
                    .map_err(NodeError::driver)?;
                let path = format!("{}/{name}", booted.scratch_dir().trim_end_matches('/'));
                vec![language.clone(), path]
            }
        };
        let mut request = ExecRequest::new(argv);
        request
            .env
            .insert("ITERION_NODE_ID".into(), node.id.to_string());
        request
            .env
            .insert("ITERION_RUN_ID".into(), state.run_id.to_string());
        // Settle (seed step 19): `${PROJECT_DIR}` names the workspace as the
        // exec sees it — the container workspace in a sandbox, the host
        // workspace otherwise.
        request
            .env
            .insert("PROJECT_DIR".into(), booted.run().workdir().to_owned());
        // `as: env` secrets ride on the exec, not the container's
        // create-time env (visible in `docker inspect` for its lifetime).
        for (k, v) in &booted.secrets().env {
            request.env.insert(k.clone(), v.clone());
        }
        let mut session = booted
            .run()
            .exec(request)
            .await
            .map_err(NodeError::driver)?;
        let _running = self.current.enter(&node.id);
        let mut log = NodeLog::new(
            &node.id,
            events.clone(),
            self.settings.node_log_cap,
            self.settings.max_log_line,
        )
        .with_redactor(booted.secrets().redactor.clone());
        let limits = OutputLimits {
            stdout: self.settings.stdout_keep,
            stderr_tail: self.settings.stderr_tail,
        };
        // With secrets, the stderr tail is cut from the masked stream, never
        // from raw bytes (a raw tail starting inside a secret would show
        // the rest of it).
        let redactor = &booted.secrets().redactor;
        let mut masked_tail = (!redactor.is_empty()).then(|| {
            TailRedactor::new(
                redactor,
                self.settings.stderr_tail,
                self.settings.max_log_line,
            )
        });
        let collected = {
            let mut on_chunk = |c: &iterion_core::OutputChunk| {
                if let (Some(t), iterion_core::OutputStream::Stderr) = (&mut masked_tail, c.stream)
                {
                    t.push(&c.data);
                }
                log.push(c);
            };
            tokio::select! {
                r = collect_output(session.as_mut(), limits, &mut on_chunk) => Some(r),
                () = cancel.cancelled() => None,
            }
        };
        let Some(collected) = collected else {
            if let Err(e) = session.kill().await {
                tracing::warn!(node = %node.id, error = %e, "kill of a cancelled exec failed");
            }
            log.finish();
            return Err(NodeError::Cancelled);
        };
        log.finish();
        let out = collected.map_err(NodeError::driver)?;
        let stderr_tail = match masked_tail {
            Some(t) => t.finish(),
            None => String::from_utf8_lossy(&out.stderr_tail).into_owned(),
        };
        if out.exit_code != 0 {
            // A container killed under a running command ends the exec with
            // the kill's status (137), which reads like the command's own
            // failure. The sandbox is gone, not the node wrong: SANDBOX_LOST
            // (infrastructure, resumable), never NODE_FAILED.
            if sandbox_stopped(booted.run().as_ref(), out.exit_code).await {
                return Err(NodeError::Failed {
                    code: FailureCode::SandboxLost,
                    exit_code: Some(out.exit_code),
                    error: format!(
                        "the sandbox {} stopped under the command (exit {})",
                        booted.run().container(),
                        out.exit_code
                    ),
                    stderr_tail,
                });
            }
            let mut error = format!("command exited with {}", out.exit_code);
            if out.exit_code == bounds::KILLED
                && let Some(event) = bounds::memory_limit_hit(booted.run().as_ref()).await
            {
                events.emit_node(&node.id, event);
                error.push_str(": killed at the sandbox's memory limit (ITERION_SANDBOX_MEMORY)");
            }
            return Err(NodeError::Failed {
                code: FailureCode::NodeFailed,
                exit_code: Some(out.exit_code),
                error,
                stderr_tail,
            });
        }
        let schema = node.output.as_ref().and_then(|n| workflow.schemas.get(n));
        // Node output becomes event data (`node_finished.output`): a secret
        // value the command printed is masked before it is parsed.
        let stdout: std::borrow::Cow<'_, [u8]> = match redactor.is_empty() {
            true => std::borrow::Cow::Borrowed(&out.stdout),
            false => std::borrow::Cow::Owned(
                redactor
                    .redact(&String::from_utf8_lossy(&out.stdout))
                    .into_bytes(),
            ),
        };
        let output =
            routing::parse_output(&stdout, out.stdout_truncated(), schema).map_err(|e| {
                NodeError::Failed {
                    code: FailureCode::NodeFailed,
                    exit_code: Some(out.exit_code),
                    error: format!(
                        "output does not match schema {}: {e}",
                        node.output.as_deref().unwrap_or("-")
                    ),
                    stderr_tail,
                }
            })?;
        Ok((out.exit_code, output))
    }
}

#[derive(Debug)]
enum NodeError {
    Cancelled,
    Failed {
        code: FailureCode,
        exit_code: Option<i64>,
        error: String,
        stderr_tail: String,
    },
}

impl NodeError {
    fn failed(code: FailureCode, error: impl Into<String>) -> Self {
        Self::Failed {
            code,
            exit_code: None,
            error: error.into(),
            stderr_tail: String::new(),
        }
    }

    fn driver(e: DriverError) -> Self {
        let code = match e {
            DriverError::ContainerGone { .. } => FailureCode::SandboxLost,
            DriverError::Cancelled => return Self::Cancelled,
            _ => FailureCode::NodeFailed,
        };
        Self::failed(code, format!("{} ({})", e, e.code()))
    }
}

/// Whether the sandbox stopped under a command that exited `exit_code`.
/// A signal death (> 128) may be seen before the engine has recorded the
/// container's exit (the exec's stream closes first; Podman answers errors
/// while it removes one), so it is re-checked a few times, bounded; any other
/// status is checked once. Still alive or still unknown at the end: the
/// node's own failure (no guess).
async fn sandbox_stopped(run: &dyn iterion_core::SandboxRun, exit_code: i64) -> bool {
    let checks = if exit_code > 128 { 10 } else { 1 };
    for i in 0..checks {
        if matches!(run.is_alive().await, Ok(false)) {
            return true;
        }
        if i + 1 < checks {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    false
}

/// The failure of a run stopped on its token: the bound that fired (with
/// its event), or a cancellation.
fn stopped(bounds: &RunBounds, watchdog: &Watchdog, events: &Emitter) -> Failure {
    let (failure, event) = bounds.stop_failure(watchdog);
    if let Some(e) = event {
        events.emit(e);
    }
    failure
}

/// The failure of a bound that was hit, with its event.
fn bound_failure(bound: &Bound, bounds: &RunBounds, events: &Emitter) -> Failure {
    if let Some(e) = bound.event(bounds.elapsed()) {
        events.emit(e);
    }
    bound.failure()
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn one_file_tar(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut builder = tar::Builder::new(&mut out);
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o700);
        header.set_cksum();
        builder.append_data(&mut header, name, content)?;
        builder.finish()?;
    }
    Ok(out)
}
