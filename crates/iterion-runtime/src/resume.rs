//! `iterion resume`: continue a paused, failed or interrupted run from its
//! stored progress, in a fresh sandbox, without running finished nodes
//! again (upstream `pkg/runtime/resume.go`).
//!
//! [`load`] reads what the store holds (the run, its `run_checkpoint`
//! events folded into a [`RunProgress`]) and refuses what cannot resume;
//! [`Resumable::plan`] checks the caller's workflow and answers against
//! it (a changed source unless forced, answers that do not fit the paused
//! human node); [`Engine::resume`](crate::Engine::resume) reopens the run
//! and walks on. Every refusal is typed and changes nothing.
//!
//! A fork under way when the run stopped restarts at its router (its
//! branches run again), as upstream; what finished before it does not.
//! The run's bounds (its recorded `--timeout`, the workflow's budget)
//! apply again from the resume, on a fresh clock, as upstream resets its
//! budget on resume.

use std::collections::BTreeMap;

use iterion_core::store::RunRecord;
use iterion_core::{FailureCode, NodeId, RunId, RunStatus, RunStore, StoreError};
use iterion_dsl::ir;
use serde_json::Value;

use crate::human::{AnswerError, AnswerInput, answer_schema, check_answers};
use crate::progress::{ProgressError, ResumePoint, ResumeStateError, RunLaunch, RunProgress};

/// Why a run cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// No such run in this store.
    #[error("no run {run} in this store")]
    UnknownRun {
        /// The id.
        run: RunId,
    },
    /// Its status does not resume.
    #[error(
        "run {run} is {status}; only paused, failed, interrupted (failed_resumable) and cancelled runs resume"
    )]
    NotResumable {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// It ended at a `fail` node: the workflow itself failed it.
    #[error("run {run} reached a fail node (WORKFLOW_FAILED); resuming would fail it again")]
    WorkflowFailed {
        /// The run.
        run: RunId,
    },
    /// Its progress already reached `done`.
    #[error("run {run}: {source}")]
    Completed {
        /// The run.
        run: RunId,
        /// Cause.
        #[source]
        source: ResumeStateError,
    },
    /// It was recorded without its launch (an older engine).
    #[error(
        "run {run} never started (refused at admission, or recorded by an older iterion): nothing to resume"
    )]
    NoLaunch {
        /// The run.
        run: RunId,
    },
    /// The workflow source changed since the run started.
    #[error(
        "the workflow source {file} changed since run {run} started (sha256 {expected:.12} then, {actual:.12} now); re-run it, or resume with --force"
    )]
    SourceChanged {
        /// The run.
        run: RunId,
        /// The file.
        file: String,
        /// Hash at launch.
        expected: String,
        /// Hash now.
        actual: String,
    },
    /// The node the run continues at is not in the workflow any more.
    #[error("run {run} continues at node {node}, which the workflow no longer has")]
    UnknownNode {
        /// The run.
        run: RunId,
        /// The node.
        node: NodeId,
    },
    /// Answers given to a run that is not waiting for any.
    #[error(
        "run {run} is {status}, not waiting for answers; resume it without --answer/--answers-file"
    )]
    AnswersNotExpected {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// The answers do not fit the paused node.
    #[error(transparent)]
    Answers(#[from] AnswerError),
    /// The stored progress cannot be read.
    #[error("run {run}: {source}")]
    Progress {
        /// The run.
        run: RunId,
        /// Cause.
        #[source]
        source: ProgressError,
    },
    /// The store failed.
    #[error("run store: {0}")]
    Store(#[from] StoreError),
}

impl ResumeError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownRun { .. } => "resume_unknown_run",
            Self::NotResumable { .. } => "resume_not_resumable",
            Self::WorkflowFailed { .. } => "resume_workflow_failed",
            Self::Completed { .. } => "resume_completed",
            Self::NoLaunch { .. } => "resume_no_launch",
            Self::SourceChanged { .. } => "resume_source_changed",
            Self::UnknownNode { .. } => "resume_unknown_node",
            Self::AnswersNotExpected { .. } => "resume_answers_not_expected",
            Self::Answers(e) => e.code(),
            Self::Progress { .. } => "resume_progress_unreadable",
            Self::Store(e) => e.code(),
        }
    }

    /// Whether the caller's input is at fault (exit 2), not the store.
    pub fn is_user_input(&self) -> bool {
        !matches!(self, Self::Store(_))
    }
}

/// A run that can be resumed, as the store holds it.
#[derive(Debug, Clone)]
pub struct Resumable {
    /// The run.
    pub record: RunRecord,
    /// Its folded progress.
    pub progress: RunProgress,
    /// How it was launched.
    pub launch: RunLaunch,
}

/// What [`Engine::resume`](crate::Engine::resume) executes.
#[derive(Debug, Clone)]
pub struct ResumePlan {
    /// The run.
    pub resumable: Resumable,
    /// The workflow as compiled now.
    pub workflow: ir::Workflow,
    /// Where it continues (`None`: from the entry).
    pub point: Option<ResumePoint>,
    /// The paused human node's answers, typed.
    pub answers: Option<Value>,
    /// The source changed and `--force` let it through.
    pub forced: bool,
}

/// Read run `id` and its progress; refuse what cannot resume.
pub async fn load(store: &dyn RunStore, id: &RunId) -> Result<Resumable, ResumeError> {
    let record = store
        .load_run(id)
        .await?
        .ok_or_else(|| ResumeError::UnknownRun { run: id.clone() })?;
    match record.status {
        RunStatus::PausedWaitingHuman
        | RunStatus::PausedOperator
        | RunStatus::FailedResumable
        | RunStatus::Cancelled => {}
        RunStatus::Failed => {
            if record
                .failure
                .as_ref()
                .is_some_and(|f| f.code == FailureCode::WorkflowFailed)
            {
                return Err(ResumeError::WorkflowFailed { run: id.clone() });
            }
        }
        status @ (RunStatus::Queued | RunStatus::Running | RunStatus::Finished) => {
            return Err(ResumeError::NotResumable {
                run: id.clone(),
                status,
            });
        }
    }
    let events = store.events_after(id, 0, 0).await?;
    let progress = RunProgress::from_events(&events).map_err(|source| ResumeError::Progress {
        run: id.clone(),
        source,
    })?;
    let launch = progress
        .launch
        .clone()
        .ok_or_else(|| ResumeError::NoLaunch { run: id.clone() })?;
    Ok(Resumable {
        record,
        progress,
        launch,
    })
}

impl Resumable {
    /// Check `workflow` (compiled now from the launch's file, whose
    /// source hashes to `source_sha256`) and the answers against the run.
    pub fn plan(
        self,
        workflow: ir::Workflow,
        source_sha256: &str,
        force: bool,
        answers: &BTreeMap<String, AnswerInput>,
    ) -> Result<ResumePlan, ResumeError> {
        let run = self.record.id.clone();
        let mut forced = false;
        if let Some(expected) = &self.launch.source_sha256
            && expected != source_sha256
        {
            if !force {
                return Err(ResumeError::SourceChanged {
                    run,
                    file: self.launch.file.clone(),
                    expected: expected.clone(),
                    actual: source_sha256.to_owned(),
                });
            }
            forced = true;
        }
        let point = self
            .progress
            .resume_point()
            .map_err(|source| ResumeError::Completed {
                run: run.clone(),
                source,
            })?;
        if let Some(p) = &point
            && !workflow.nodes.contains_key(&p.at)
        {
            return Err(ResumeError::UnknownNode {
                run,
                node: p.at.clone(),
            });
        }
        let waiting = self.record.status == RunStatus::PausedWaitingHuman;
        let answers = match point.as_ref().filter(|p| p.paused && waiting) {
            Some(p) => {
                let node = workflow
                    .nodes
                    .get(&p.at)
                    .ok_or_else(|| ResumeError::UnknownNode {
                        run: run.clone(),
                        node: p.at.clone(),
                    })?;
                // An agent paused on `ask_user` answers in `answer`; a
                // human node in its output schema's fields.
                let schema = match node.kind {
                    ir::NodeKind::Human => answer_schema(&workflow, node),
                    _ => None,
                };
                Some(check_answers(node, schema, answers)?)
            }
            None if !answers.is_empty() => {
                return Err(ResumeError::AnswersNotExpected {
                    run,
                    status: self.record.status,
                });
            }
            None => None,
        };
        Ok(ResumePlan {
            resumable: self,
            workflow,
            point,
            answers,
            forced,
        })
    }
}

impl crate::Engine {
    /// Continue the run `plan` describes: reopen it (`running`, owned by
    /// this process), record `run_resumed` (and the answers), then boot a
    /// fresh sandbox and walk on from the resume point, to a terminal
    /// status or the next pause, exactly as [`run`](Self::run) does.
    pub async fn resume(
        &self,
        plan: ResumePlan,
        flags: crate::SandboxFlags,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<crate::RunOutcome, crate::RuntimeError> {
        use crate::RuntimeError;
        use iterion_core::store::Reopen;
        use iterion_core::{EventDraft, EventKind};

        let started = std::time::Instant::now();
        let ResumePlan {
            resumable,
            workflow,
            point,
            answers,
            forced,
        } = plan;
        let owner =
            crate::owner::current_owner().map_err(|source| RuntimeError::Owner { source })?;
        let from = resumable.record.status;
        let record = self
            .store()
            .reopen_run(
                &resumable.record.id,
                Reopen {
                    from,
                    expected_revision: Some(resumable.record.revision),
                    owner: Some(owner),
                },
            )
            .await
            .map_err(|source| RuntimeError::Store {
                operation: "reopen run",
                source,
            })?;
        let (events, writer) = self.writer(&record.id);
        // The run's bounds apply again on a fresh clock: `--timeout`,
        // `max_duration` and `max_iterations` count from the resume, as
        // upstream resets its budget on resume (docs/resume.md) — a run
        // paused for a human may have waited days, and the nodes before the
        // resume point do not run again.
        let mut bounds =
            crate::bounds::RunBounds::from_workflow(&workflow, resumable.launch.timeout());
        let watchdog = match &mut bounds {
            Ok(b) => b.arm_run(&cancel),
            Err(_) => crate::bounds::Watchdog::unarmed(&cancel),
        };
        let cancel = watchdog.token().clone();
        let workspace = std::path::PathBuf::from(&resumable.launch.workspace);
        let ctx = crate::BootContext {
            run_id: &record.id,
            workflow: &workflow,
            file: &resumable.launch.file,
            trust: record.trust,
            workspace: &workspace,
            flags: &flags,
            worktree: resumable.launch.worktree.as_deref(),
            events: &events,
            cancel: &cancel,
        };
        events.emit(EventKind::RunResumed {
            resumed_from: from,
            restart_node: point.as_ref().map(|p| p.at.to_string()),
            forced,
        });
        if let (Some(answers), Some(p)) = (&answers, &point) {
            let times = resumable
                .progress
                .visits(&crate::progress::FrameId::main(), &p.at);
            events.emit_draft(
                EventDraft::from(EventKind::HumanAnswersRecorded {
                    interaction_id: crate::human::interaction_id(&p.at, times),
                    answers: answers.clone(),
                })
                .for_node(p.at.clone()),
            );
        }
        // The workflow may have changed (--force): what this engine can
        // execute, its bounds, and the policy's verdict are checked again.
        let checked = crate::admission::check_workflow(&workflow, self.has_agents())
            .map_err(|e| (e.code(), e.to_string()))
            .and_then(|()| bounds.map_err(|e| (e.code(), e.to_string())));
        let admitted = match &checked {
            Err((code, reason)) => {
                crate::Admitted::new(crate::AdmissionVerdict::deny(*code, reason.clone()))
            }
            Ok(_) => self.booter().admit(&ctx).await,
        };
        let result = match (&admitted.verdict, checked) {
            (crate::AdmissionVerdict::Admit { .. }, Ok(bounds)) => {
                let walk = crate::engine::Walk {
                    workflow: &workflow,
                    vars: resumable.launch.vars.clone(),
                    start: crate::engine::Start::Resume {
                        progress: Box::new(resumable.progress.clone()),
                        point,
                        answers,
                    },
                    bounds,
                    watchdog: &watchdog,
                };
                self.boot_and_walk(&ctx, &record, started, &cancel, walk, admitted)
                    .await
            }
            (
                crate::AdmissionVerdict::Deny {
                    reason, failure, ..
                },
                _,
            ) => {
                let failure = iterion_core::store::Failure::new(*failure, reason.clone());
                self.finish(&ctx, &record, Some(failure), started).await
            }
            (crate::AdmissionVerdict::Admit { .. }, Err((_, reason))) => {
                let failure = iterion_core::store::Failure::new(FailureCode::LaunchFailed, reason);
                self.finish(&ctx, &record, Some(failure), started).await
            }
        };
        events.flush().await;
        drop(events);
        if let Err(e) = writer.await {
            tracing::warn!(error = %e, "event writer task failed");
        }
        result
    }
}
