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

use iterion_core::EventDraft;
use iterion_core::agent::AgentRunner;
use iterion_core::store::{Claim, Failure, NewRun, RunRecord, Transition};
use iterion_core::{EventKind, FailureCode, RunId, RunStatus, RunStore, StoreError, Trust};
use iterion_dsl::ir;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use iterion_sandbox::classify::SetupContext;

use crate::admission;
use crate::boot::{Admitted, BootContext, Booted, SandboxBooter};
use crate::bounds::{BoundsError, RunBounds, Watchdog};
use crate::events::{Emitter, EventTap, spawn_writer};
use crate::exec::{RunCx, Stop};
use crate::human::HumanPrompter;
use crate::interrupt::Interrupt;
use crate::owner;
use crate::progress::{PROGRESS_VERSION, ProgressStep, ResumePoint, RunLaunch, RunProgress};
use iterion_sandbox::admission::AdmissionVerdict;
use iterion_sandbox::precedence::SandboxFlags;

pub use crate::settings::EngineSettings;

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
    /// The CLI's sandbox knobs.
    pub flags: SandboxFlags,
    /// SHA-256 (hex) of the workflow source (a resume of a changed source
    /// is refused unless forced).
    pub source_sha256: Option<String>,
    /// The caller's launch settings, kept for `iterion resume`.
    pub launch_settings: serde_json::Map<String, serde_json::Value>,
    /// `iterion run --timeout`: the whole run's bound.
    pub timeout: Option<std::time::Duration>,
    /// `iterion run --attach NAME=PATH`: stored in the run store at launch
    /// (checked against the workflow's declarations first).
    pub attachments: Vec<crate::attachments::LaunchAttachment>,
    /// The `worktree: auto` worktree made for the run
    /// ([`crate::worktree::setup`]; `workspace` is its path).
    pub worktree: Option<crate::worktree::RunWorktree>,
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
    agents: Option<Arc<dyn AgentRunner>>,
    human: Option<Arc<dyn HumanPrompter>>,
    interrupt: Option<Interrupt>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store.describe())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `store`, booting through `booter`.
    pub fn new(store: Arc<dyn RunStore>, booter: Arc<dyn SandboxBooter>) -> Self {
        Self {
            store,
            booter,
            settings: EngineSettings::default(),
            tap: None,
            agents: None,
            human: None,
            interrupt: None,
        }
    }

    /// A stop of the run's token for which `interrupt` holds a reason ends
    /// the run interrupted (`failed_resumable`, `INTERRUPTED`), not
    /// cancelled: a cloud runner that lost its lease or drains.
    pub fn with_interrupt(mut self, interrupt: Interrupt) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// Ask human nodes through `prompter` (a terminal); without one a
    /// human node pauses the run (`paused_waiting_human`).
    pub fn with_human(mut self, prompter: Arc<dyn HumanPrompter>) -> Self {
        self.human = Some(prompter);
        self
    }

    /// Run agent, judge and `mode: llm` router nodes through `runner`
    /// (without one they are refused at admission, by name).
    pub fn with_agents(mut self, runner: Arc<dyn AgentRunner>) -> Self {
        self.agents = Some(runner);
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

    pub(crate) fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    pub(crate) fn booter(&self) -> &Arc<dyn SandboxBooter> {
        &self.booter
    }

    pub(crate) fn has_agents(&self) -> bool {
        self.agents.is_some()
    }

    /// The run's single event writer (and the live tap).
    pub(crate) fn writer(&self, run: &RunId) -> (crate::Emitter, tokio::task::JoinHandle<()>) {
        spawn_writer(
            Arc::clone(&self.store),
            run.clone(),
            self.tap.clone(),
            crate::events::RunLogBounds {
                bytes: self.settings.run_log_cap,
                rows: self.settings.run_log_rows,
            },
        )
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
        self.run_recorded(options, record, started, cancel).await
    }

    /// Execute a run `iterion submit` recorded `queued` (cloud mode): this
    /// process claims it (becomes its owner, compare-and-set on the
    /// revision it read) instead of creating it, then it runs exactly as
    /// [`run`](Self::run) does. A run that is no longer `queued` is a
    /// [`StoreError::StaleTransition`].
    pub async fn run_submitted(
        &self,
        options: RunOptions,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RuntimeError> {
        let started = Instant::now();
        let owner = owner::current_owner().map_err(|source| RuntimeError::Owner { source })?;
        let claim = |source| RuntimeError::Store {
            operation: "claim run",
            source,
        };
        let current = self
            .store
            .load_run(&options.run_id)
            .await
            .map_err(claim)?
            .ok_or_else(|| claim(StoreError::RunNotFound(options.run_id.clone())))?;
        let record = self
            .store
            .claim_run(
                &options.run_id,
                Claim {
                    expected_revision: Some(current.revision),
                    owner,
                },
            )
            .await
            .map_err(claim)?;
        self.run_recorded(options, record, started, cancel).await
    }

    async fn run_recorded(
        &self,
        options: RunOptions,
        record: RunRecord,
        started: Instant,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RuntimeError> {
        let (events, writer) = self.writer(&options.run_id);
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
            worktree: options.worktree.as_ref(),
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
        let checked = admission::check_workflow(&options.workflow, self.agents.is_some())
            .and_then(|()| admission::resolve_vars(&options.workflow, &options.vars))
            .map_err(|e| (e.code(), e.to_string()));
        // The launch's attachments go into the store with the run (checked
        // again: what the CLI checked may have changed since).
        let checked = match checked {
            Ok(vars) => crate::attachments::store_launch(
                self.store.as_ref(),
                &options.run_id,
                &options.workflow,
                &options.attachments,
            )
            .await
            .map(|_| vars)
            .map_err(|e| (e.code(), e.to_string())),
            Err(e) => Err(e),
        };
        let checked = match bounds {
            Err(e) => Err((e.code(), e.to_string())),
            Ok(b) => checked.map(|vars| (vars, b)),
        };
        let (admitted, vars, bounds) = match checked {
            Err((code, reason)) => (
                Admitted::new(match code {
                    // Upstream's own failure code for parallel writers.
                    "workspace_safety" => AdmissionVerdict::Deny {
                        code: code.into(),
                        reason,
                        failure: FailureCode::WorkspaceSafety,
                    },
                    _ => AdmissionVerdict::deny(code, reason),
                }),
                BTreeMap::new(),
                None,
            ),
            Ok((vars, b)) => (self.booter.admit(ctx).await, vars, Some(b)),
        };
        let admission = admitted.verdict.record(OffsetDateTime::now_utc());
        events.emit(EventKind::RunAdmission {
            decision: admission.decision,
            phase: admission.phase.clone(),
            code: admission.code.clone(),
            reason: admission.reason.clone(),
        });
        // The verdict is on the record before a refusal returns, so the run
        // explains itself (seed "Collections touched").
        let record = match self
            .store
            .record_admission(&options.run_id, admission, Some(record.revision))
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
        let bounds = match (&admitted.verdict, bounds) {
            (AdmissionVerdict::Admit { .. }, Some(bounds)) => bounds,
            (
                AdmissionVerdict::Deny {
                    failure, reason, ..
                },
                _,
            ) => {
                let failure = Failure::new(*failure, reason.clone());
                return self.finish(ctx, &record, Some(failure), started).await;
            }
            (AdmissionVerdict::Admit { reason }, None) => {
                let failure = Failure::new(FailureCode::LaunchFailed, reason.clone());
                return self.finish(ctx, &record, Some(failure), started).await;
            }
        };
        if cancel.is_cancelled() {
            let failure = self.stopped(&bounds, watchdog, events);
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
            trust: options.trust,
        });
        // A declared variable with neither a default nor a launch value
        // does not stop the run (upstream starts it: `resolveVars` leaves
        // it out, and its `{{vars.X}}` / `{{input.X}}` stay literal); the
        // run log says so, so it is never silent.
        for name in vars_without_value(&options.workflow, &options.vars) {
            events.system_log(
                None,
                format!(
                    "variable {name} has no default and no value (pass --var {name}=VALUE): \
                     {{{{vars.{name}}}}} and {{{{input.{name}}}}} stay literal"
                ),
            );
        }
        if let Some(wt) = &options.worktree {
            events.emit(EventKind::WorktreeCreated {
                path: wt.path.clone(),
                repo_root: wt.repo_root.clone(),
                base_commit: wt.base_commit.clone(),
                branch: wt.original_branch.clone(),
                dirty: wt.dirty,
            });
        }
        let launch = RunLaunch {
            vars: vars.clone(),
            workspace: options.workspace.display().to_string(),
            file: std::path::absolute(&options.file)
                .map_or_else(|_| options.file.clone(), |p| p.display().to_string()),
            source_sha256: options.source_sha256.clone(),
            settings: options.launch_settings.clone(),
            timeout_ms: options
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            worktree: options.worktree.clone().map(Box::new),
        };
        // Recorded before the boot, so a run whose sandbox never started
        // resumes too.
        events.emit(EventKind::RunCheckpoint {
            version: PROGRESS_VERSION,
            step: serde_json::to_value(ProgressStep::Launched { launch })
                .unwrap_or(serde_json::Value::Null),
        });
        let walk = Walk {
            workflow: &options.workflow,
            vars,
            start: Start::Fresh,
            bounds,
            watchdog,
        };
        self.boot_and_walk(ctx, &record, started, cancel, walk, admitted)
            .await
    }

    /// Boot, walk the graph, tear down, record the end: what a fresh run
    /// and a resumed one share.
    pub(crate) async fn boot_and_walk(
        &self,
        ctx: &BootContext<'_>,
        record: &RunRecord,
        started: Instant,
        cancel: &CancellationToken,
        walk: Walk<'_>,
        admitted: Admitted,
    ) -> Result<RunOutcome, RuntimeError> {
        let events = ctx.events;
        let Walk {
            workflow,
            vars,
            start,
            bounds,
            watchdog,
        } = walk;
        // ---- boot
        let booted = match self.booter.boot(ctx, admitted).await {
            Ok(b) => b,
            Err(e) => {
                let interrupted = self.interrupted().is_some();
                // What the booter asked of the agent runner (the run's MCP
                // listener) goes with the failed boot.
                if let Some(agents) = &self.agents {
                    agents.run_finished(ctx.run_id).await;
                }
                let setup = SetupContext {
                    cancelled: cancel.is_cancelled() && !interrupted,
                    interrupted,
                };
                let failure = match e.classify(setup).code {
                    // A boot stopped by the run's deadline failed on it; one
                    // stopped by the platform was interrupted.
                    FailureCode::Cancelled | FailureCode::Interrupted => {
                        self.stopped(&bounds, watchdog, events)
                    }
                    code => Failure::new(code, e.to_string()),
                };
                return self.finish(ctx, record, Some(failure), started).await;
            }
        };
        // From here every event and log line is masked for the run's
        // secrets (the node logs mask across lines; this catches the rest).
        events.set_redactor(booted.secrets().redactor.clone());
        if let Booted::Host { reason, .. } = &booted {
            events.system_log(None, format!("running on the host, unsandboxed: {reason}"));
        }
        // Attachments come from the store on every boot, a resumed one's
        // too; a required one that cannot be provided fails the run here,
        // before any node reads it.
        let attachments = match crate::attachments::provide(
            self.store.as_ref(),
            ctx.run_id,
            workflow,
            &booted,
            events,
        )
        .await
        {
            Ok(view) => view,
            Err(failure) => {
                if let Some(agents) = &self.agents {
                    agents.run_finished(ctx.run_id).await;
                }
                if let Err(e) = self.booter.teardown(booted, ctx).await {
                    events.system_log(None, format!("teardown failed ({}): {e}", e.code()));
                }
                return self.finish(ctx, record, Some(failure), started).await;
            }
        };

        // ---- nodes (parallel branches share the bounds)
        let bounds = std::sync::Mutex::new(bounds);
        let mut cx = RunCx::new(
            &self.settings,
            workflow,
            &booted,
            events,
            ctx.run_id,
            vars,
            self.agents.as_deref(),
            &bounds,
            watchdog,
        );
        cx.human = self.human.clone();
        cx.attachments = attachments;
        let stop = match start {
            Start::Fresh => cx.run_graph(cancel).await,
            Start::Resume {
                progress,
                point,
                answers,
            } => {
                cx.restore(*progress);
                cx.resume_graph(point, answers, cancel).await
            }
        };
        drop(cx);
        // What the agent runner kept for the run (MCP servers) goes before
        // the sandbox does.
        if let Some(agents) = &self.agents {
            agents.run_finished(ctx.run_id).await;
        }
        let bounds = bounds
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bounds = &bounds;

        // ---- teardown: always after a boot; never changes the status.
        if let Err(e) = self.booter.teardown(booted, ctx).await {
            tracing::warn!(run = %ctx.run_id, code = e.code(), error = %e, "teardown failed");
            events.system_log(None, format!("teardown failed ({}): {e}", e.code()));
        }
        let end = match stop {
            Ok(()) => Ending::Finished,
            Err(Stop::Cancelled) => Ending::Failed(self.stopped(bounds, watchdog, events)),
            Err(Stop::Failed(f)) => Ending::Failed(f),
            Err(Stop::Paused { node }) => Ending::Paused(node),
        };
        self.finish_as(ctx, record, end, started).await
    }

    pub(crate) async fn finish(
        &self,
        ctx: &BootContext<'_>,
        record: &RunRecord,
        failure: Option<Failure>,
        started: Instant,
    ) -> Result<RunOutcome, RuntimeError> {
        let end = failure.map_or(Ending::Finished, Ending::Failed);
        self.finish_as(ctx, record, end, started).await
    }

    /// Emit the terminal (or pause) event, drain the writer, then CAS the
    /// status: the stream is complete by the time a poller sees it.
    async fn finish_as(
        &self,
        ctx: &BootContext<'_>,
        record: &RunRecord,
        end: Ending,
        started: Instant,
    ) -> Result<RunOutcome, RuntimeError> {
        let events = ctx.events;
        if let Some(wt) = ctx.worktree {
            crate::worktree::end_of_run(wt, &end_status(&end), events).await;
        }
        let (to, failure) = match end {
            Ending::Finished => (RunStatus::Finished, None),
            Ending::Paused(node) => {
                events.emit_draft(
                    EventDraft::from(EventKind::RunPaused {
                        reason: "waiting_human".into(),
                    })
                    .for_node(node),
                );
                (RunStatus::PausedWaitingHuman, None)
            }
            Ending::Failed(f) => (f.code.status(), Some(f)),
        };
        match &failure {
            None if to != RunStatus::Finished => {}
            None => events.emit(EventKind::RunFinished {
                duration_ms: millis(started),
            }),
            Some(f) if f.code == FailureCode::Cancelled => events.emit(EventKind::RunCancelled {
                reason: f.message.clone(),
            }),
            Some(f) => events.emit(EventKind::RunFailed {
                failure_code: f.code,
                disposition: f.disposition,
                status: to,
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
}

impl Engine {
    /// Why the platform interrupted the run, if it did.
    fn interrupted(&self) -> Option<String> {
        self.interrupt.as_ref().and_then(Interrupt::reason)
    }

    /// The failure of a run stopped on its token: the bound that fired (with
    /// its event), the platform's interruption (`run_interrupted`), or a
    /// cancellation.
    fn stopped(&self, bounds: &RunBounds, watchdog: &Watchdog, events: &Emitter) -> Failure {
        let (failure, event) = bounds.stop_failure(watchdog);
        if failure.code == FailureCode::Cancelled
            && let Some(reason) = self.interrupted()
        {
            events.emit(EventKind::RunInterrupted {
                reason: reason.clone(),
            });
            return Failure::new(FailureCode::Interrupted, reason);
        }
        if let Some(e) = event {
            events.emit(e);
        }
        failure
    }
}

/// The status a run ends with (what its worktree's end reads).
fn end_status(end: &Ending) -> RunStatus {
    match end {
        Ending::Finished => RunStatus::Finished,
        Ending::Paused(_) => RunStatus::PausedWaitingHuman,
        Ending::Failed(f) => f.code.status(),
    }
}

/// How a walk ended, for the record.
enum Ending {
    Finished,
    Failed(Failure),
    Paused(iterion_core::NodeId),
}

/// What a boot walks: the workflow, the run's variables, and whether it
/// starts afresh or continues stored progress.
pub(crate) struct Walk<'w> {
    pub workflow: &'w ir::Workflow,
    pub vars: BTreeMap<String, serde_json::Value>,
    pub start: Start,
    /// The bounds admitted for this walk, and the watchdog armed on them
    /// (whose token is the walk's `cancel`).
    pub bounds: RunBounds,
    pub watchdog: &'w Watchdog,
}

/// Where a walk starts.
pub(crate) enum Start {
    /// From the entry.
    Fresh,
    /// From stored progress.
    Resume {
        progress: Box<RunProgress>,
        point: Option<ResumePoint>,
        answers: Option<serde_json::Value>,
    },
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The declared variables with no default that the launch gave no value.
pub fn vars_without_value(
    workflow: &iterion_dsl::ir::Workflow,
    given: &BTreeMap<String, String>,
) -> Vec<String> {
    workflow
        .vars
        .iter()
        .filter(|(name, decl)| decl.default.is_none() && !given.contains_key(*name))
        .map(|(name, _)| name.clone())
        .collect()
}
