//! `iterion runner [--concurrency N]`: a cloud-mode runner (the loop is
//! `iterion_queue::runner`). Each claimed run goes through the very
//! [`Session`] of `iterion run` — the same drivers, booter, sandbox path,
//! agent backends and engine — fresh from its submission, or resumed from
//! its checkpoint. SIGTERM or SIGINT drains: no new work, the runs under
//! way finish within `ITERION_RUNNER_DRAIN_GRACE` or are handed back, exit 0.
//!
//! Each run works in its own empty directory `<ITERION_RUNNER_WORKDIR>/<run
//! id>` (default `$TMPDIR/iterion-runner`), removed once the run settles
//! unless it paused for a human: a run taken over by another runner
//! starts from an empty workspace there too (no repository is cloned).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use iterion_core::store::Failure;
use iterion_core::{EventDraft, EventKind, FailureCode, RunStatus, RunStore};
use iterion_queue::policy::{QUEUE_PHASE, QueuedAsk, Refusal, RunnerPolicy};
use iterion_queue::runner::{ExecuteError, Job, RunExecutor, Runner, Start};
use iterion_runtime::reap::LeaseProbe;
use iterion_runtime::{RunOptions, RunOutcome, RuntimeError};
use iterion_sandbox::env::EnvSnapshot;
use tokio_util::sync::CancellationToken;

use super::cloud;
use super::launch::LaunchFlags;
use super::run::{AgentWiring, Session, check_env, source_sha256};
use crate::cli::RunnerArgs;
use crate::exit::{Exit, UserInputError};
use crate::{drivers, workflow};

/// Entry point of the verb.
pub async fn run(args: RunnerArgs) -> anyhow::Result<Exit> {
    let settings = cloud::settings("runner")?;
    // What queued runs may ask for is the operator's, read once.
    let policy = RunnerPolicy::from_env().map_err(cloud::queue_error)?;
    let concurrency = match args.concurrency {
        Some(n) => usize::from(n),
        None => concurrency_from_env()?,
    };
    // The runner's own sandbox settings are read once, before any run.
    check_env(EnvSnapshot::from_process())?;
    let workdir = workdir()?;
    let store = cloud::store().await?;
    let queue = cloud::queue(&settings, iterion_queue::topology::Role::Runner).await?;
    let shutdown = drain_on_signals()?;
    let executor = Arc::new(CliExecutor {
        store: store.clone(),
        workdir,
        policy,
    });
    let id = iterion_queue::runner::runner_id();
    let _ = writeln!(
        std::io::stderr(),
        "runner {id}: taking runs from stream {} ({} at a time; trust at most {}, host runs {})",
        settings.stream,
        concurrency,
        policy.max_trust,
        if policy.allow_host_runs {
            "allowed"
        } else {
            "refused"
        }
    );
    Runner::new(queue, store, executor, id, concurrency)
        .map_err(cloud::queue_error)?
        .run(shutdown)
        .await
        .map_err(cloud::queue_error)?;
    Ok(Exit::Success)
}

fn concurrency_from_env() -> anyhow::Result<usize> {
    match std::env::var("ITERION_RUNNER_CONCURRENCY") {
        Err(_) => Ok(1),
        Ok(v) if v.trim().is_empty() => Ok(1),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .ok_or_else(|| {
                UserInputError::new(format!(
                    "ITERION_RUNNER_CONCURRENCY: {v:?} is not a count from 1 to 256"
                ))
                .into()
            }),
    }
}

/// `ITERION_RUNNER_WORKDIR` (default `$TMPDIR/iterion-runner`), a private
/// directory.
fn workdir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let dir = std::env::var_os("ITERION_RUNNER_WORKDIR")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || std::env::temp_dir().join("iterion-runner"),
            PathBuf::from,
        );
    let dir = std::path::absolute(&dir)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            UserInputError::new(format!(
                "ITERION_RUNNER_WORKDIR: cannot create {}: {e}",
                dir.display()
            ))
        })?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Cancelled on the first SIGTERM or SIGINT (drain); later ones are
/// absorbed, so the drain is never cut short by a second signal.
fn drain_on_signals() -> anyhow::Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let t = token.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        t.cancel();
        let _ = writeln!(std::io::stderr(), "{name}: draining (no new runs)");
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
    });
    Ok(token)
}

/// Executes claimed runs with `iterion run`'s [`Session`].
struct CliExecutor {
    store: Arc<dyn RunStore>,
    workdir: PathBuf,
    /// `ITERION_RUNNER_MAX_TRUST`, `ITERION_RUNNER_ALLOW_HOST_RUNS`.
    policy: RunnerPolicy,
}

impl CliExecutor {
    /// A fresh run that can run nowhere (its source does not compile here,
    /// its agents are not admitted): recorded `failed` with LAUNCH_FAILED,
    /// which the table acks. A resume that is refused stays as it is and is
    /// dead-lettered with the reason.
    async fn refuse(&self, job: &Job, reason: String) -> Result<RunOutcome, ExecuteError> {
        if job.start == Start::Resume {
            return Err(ExecuteError::Refused { reason });
        }
        let failure = Failure::new(FailureCode::LaunchFailed, reason);
        let draft: EventDraft = EventKind::RunFailed {
            failure_code: failure.code,
            disposition: failure.disposition,
            status: RunStatus::Failed,
            error: failure.message.clone(),
        }
        .into();
        self.store.append_event(&job.record.id, draft, None).await?;
        let r = self
            .store
            .transition(
                &job.record.id,
                iterion_core::store::Transition {
                    from: RunStatus::Queued,
                    expected_revision: None,
                    to: RunStatus::Failed,
                    failure: Some(failure),
                },
            )
            .await?;
        Ok(RunOutcome {
            run_id: r.id,
            status: r.status,
            failure: r.failure,
        })
    }

    /// A queued run asking for what this runner does not allow (issue 31
    /// item 5): its `run_admission` is recorded `denied` with the
    /// refusal's code (on the record too), a fresh run is moved to
    /// `failed` (LAUNCH_FAILED), and the delivery is dead-lettered with the
    /// reason, so nothing of it stays in the queue. Nothing was started.
    async fn refuse_admission(&self, job: &Job, refusal: Refusal) -> ExecuteError {
        let id = &job.record.id;
        let admission = iterion_core::store::Admission {
            decision: iterion_core::store::AdmissionDecision::Denied,
            phase: QUEUE_PHASE.to_owned(),
            code: Some(refusal.code.to_owned()),
            reason: refusal.reason.clone(),
            checked_at: time::OffsetDateTime::now_utc(),
        };
        let draft: EventDraft = EventKind::RunAdmission {
            decision: admission.decision,
            phase: admission.phase.clone(),
            code: admission.code.clone(),
            reason: admission.reason.clone(),
        }
        .into();
        let recorded = async {
            self.store.append_event(id, draft, None).await?;
            self.store.record_admission(id, admission, None).await?;
            if job.start == Start::Fresh {
                self.refuse(job, refusal.to_string()).await?;
            }
            Ok::<(), ExecuteError>(())
        };
        match recorded.await {
            Ok(()) => ExecuteError::Refused {
                reason: format!("refused by the runner's policy: {refusal}"),
            },
            Err(e) => e,
        }
    }
}

/// What a queued run asks for, from its submission and its workflow.
fn queued_ask(flags: &LaunchFlags, workflow: &iterion_dsl::ir::Workflow) -> QueuedAsk {
    let sandbox = flags.sandbox_flags();
    QueuedAsk {
        sandbox_flag: sandbox.sandbox,
        workflow_sandbox: workflow
            .sandbox
            .as_ref()
            .map(|d| d.spec.mode)
            .filter(|m| *m != iterion_core::Mode::Inherit),
        host_state_flag: sandbox.host_state,
        workflow_host_state: workflow.sandbox.as_ref().and_then(|d| d.spec.host_state),
    }
}

/// An engine error: the store failing is infrastructure (retried).
fn engine_error(e: anyhow::Error) -> ExecuteError {
    match e.downcast::<RuntimeError>() {
        Ok(RuntimeError::Store { source, .. }) => ExecuteError::Store(source),
        Ok(other) => ExecuteError::Refused {
            reason: format!("{other} ({})", other.code()),
        },
        Err(e) => ExecuteError::Store(iterion_core::StoreError::Unavailable {
            reason: e.to_string(),
            source: None,
        }),
    }
}

#[async_trait::async_trait]
impl RunExecutor for CliExecutor {
    async fn execute(&self, job: Job) -> Result<RunOutcome, ExecuteError> {
        let id = job.record.id.clone();
        let file = PathBuf::from(&job.record.file);
        let loaded = workflow::compile_source(job.submission.source.clone(), &file);
        let (loaded, workflow) = match workflow::single_workflow(loaded, &file) {
            Ok(ok) => ok,
            Err(e) => return self.refuse(&job, e.to_string()).await,
        };
        let agents = match AgentWiring::admit(&workflow) {
            Ok(a) => a,
            Err(e) => return self.refuse(&job, e.to_string()).await,
        };
        let launch = LaunchFlags::from_settings(&job.submission.settings);
        if let Err(refusal) = self.policy.judge(&queued_ask(&launch, &workflow)) {
            return Err(self.refuse_admission(&job, refusal).await);
        }
        let mut flags = launch.sandbox_flags();
        // Tier 1: a run that asked for no host state gets none of the
        // runner's (unless the operator allows host runs).
        if let Some(pinned) = self.policy.pinned_host_state() {
            flags.host_state = Some(pinned);
        }
        // The runner's cap, not the submitter's word (a resume reads it
        // from the record, capped below the same way).
        let trust = self.policy.cap(job.record.trust);
        let workspace = self.workdir.join(id.as_str());
        if let Err(e) = std::fs::create_dir_all(&workspace) {
            return Err(ExecuteError::Store(iterion_core::StoreError::Io {
                operation: format!("create the run's workspace {}", workspace.display()),
                source: e,
            }));
        }
        let env = match check_env(EnvSnapshot::from_process()) {
            Ok(env) => env,
            Err(e) => return self.refuse(&job, e.to_string()).await,
        };
        let drivers = drivers::probe(&env.snapshot).await;
        let session = Session {
            store: self.store.clone(),
            env,
            drivers,
            agents,
            json: false,
            interactive: false,
            cancel: job.cancel.clone(),
            runner: Some(job.interrupt.clone()),
        };
        let sha = source_sha256(&loaded.source);
        let outcome = match job.start {
            Start::Fresh => {
                let options = RunOptions {
                    file: job.record.file.clone(),
                    workflow,
                    vars: job.submission.vars.clone(),
                    trust,
                    run_id: id.clone(),
                    workspace: workspace.clone(),
                    flags,
                    timeout: job
                        .submission
                        .timeout_ms
                        .map(std::time::Duration::from_millis),
                    source_sha256: Some(sha),
                    launch_settings: job.submission.settings.clone(),
                    attachments: Vec::new(),
                    // Cloud runs work in the runner's checkout: no
                    // operator branch to promote onto (docs/worktrees.md).
                    worktree: None,
                };
                session
                    .drive(
                        |engine, cancel| async move { engine.run_submitted(options, cancel).await },
                    )
                    .await
            }
            Start::Resume => {
                let plan = iterion_runtime::resume::load(self.store.as_ref(), &id)
                    .await
                    .and_then(|r| r.plan(workflow, &sha, false, &BTreeMap::new()));
                let mut plan = match plan {
                    Ok(p) => p,
                    Err(iterion_runtime::resume::ResumeError::Store(e)) => {
                        return Err(ExecuteError::Store(e));
                    }
                    Err(e) => {
                        return Err(ExecuteError::Refused {
                            reason: format!("cannot resume: {e} [{}]", e.code()),
                        });
                    }
                };
                plan.resumable.record.trust = trust;
                session
                    .drive(|engine, cancel| async move { engine.resume(plan, flags, cancel).await })
                    .await
            }
        };
        let outcome = outcome.map_err(engine_error)?;
        // The workspace goes with the attempt, unless a human resumes it here.
        if outcome.status != RunStatus::PausedWaitingHuman
            && let Err(e) = std::fs::remove_dir_all(&workspace)
        {
            tracing::warn!(run = %id, error = %e, "removing the run's workspace failed");
        }
        Ok(outcome)
    }

    async fn reap(&self, probe: &dyn LeaseProbe) {
        let found = drivers::probe(&EnvSnapshot::from_process()).await;
        iterion_runtime::reap::reap_once_with(
            found.handles(),
            self.store.as_ref(),
            false,
            Some(probe),
        )
        .await;
        let local_env: BTreeMap<String, String> = std::env::vars().collect();
        let roots = iterion_runtime::sandbox_boot::host_state_roots(
            &iterion_runtime::sandbox_boot::default_state_dir(),
            &local_env,
        );
        iterion_runtime::reap::reap_host_dirs_with(&roots, self.store.as_ref(), false, Some(probe))
            .await;
    }
}
