//! `iterion cancel RUN_ID`: a queued or running run ends `cancelled` and its
//! sandbox is removed, local or cloud.
//!
//! A submitted run (it has a submission in the store) is cloud mode's:
//! `iterion_queue::cancel` asks the runner holding it on the run's NATS
//! subject, or cancels it in the store when nobody holds it. A local run
//! (`iterion run` on this host) is cancelled by its owner process, exactly
//! as a Ctrl-C would: the recorded owner is opened as a pidfd, its `/proc`
//! start time is checked against the record *through* that pidfd's pid
//! (a recycled pid is never signalled: once opened, the pidfd cannot come
//! to name another process), and SIGTERM is sent on the pidfd; the owner
//! then stops the exec, tears the sandbox down and records `cancelled`. A
//! run whose owner is provably gone is cancelled in the store and one
//! reaper pass removes what it left; a run owned on another host is
//! refused (that host must cancel it).

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iterion_core::store::{RunOwner, RunRecord};
use iterion_core::{RunStatus, RunStore};
use iterion_queue::cancel::{CancelError, cancel_in_store};
use iterion_runtime::reap::{LeaseState, owner_lease};
use iterion_sandbox::env::EnvSnapshot;

use super::cloud;
use crate::cli::CancelArgs;
use crate::exit::{Exit, UserInputError};
use crate::{drivers, stores};

/// How long a signalled owner has to tear its run down.
const TEARDOWN_WAIT: Duration = Duration::from_secs(120);

const REASON: &str = "cancelled by iterion cancel";

/// Entry point of the verb.
pub async fn run(args: CancelArgs) -> anyhow::Result<Exit> {
    let store = stores::open_from_env().await?;
    let id = args.run_id;
    let record = store
        .load_run(&id)
        .await
        .map_err(stores::store_error)?
        .ok_or_else(|| UserInputError::new(format!("no run {id} in this store (ITERION_STORE)")))?;
    let submitted = store
        .load_submission(&id)
        .await
        .map_err(stores::store_error)?
        .is_some();
    let status = if submitted {
        let settings = cloud::settings("cancel").map_err(|e| {
            UserInputError::new(format!(
                "run {id} was submitted to the queue: cancelling it is cloud mode ({e})"
            ))
        })?;
        let queue = cloud::queue(&settings, iterion_queue::topology::Role::Client).await?;
        match iterion_queue::cancel::cancel(&queue, store.as_ref(), &id).await {
            Ok(s) => s,
            Err(CancelError::Queue(q)) => return Err(cloud::queue_error(q)),
            Err(e) => return Err(anyhow::anyhow!("{e} [{}]", e.code())),
        }
    } else {
        cancel_local(&store, record).await?
    };
    if args.json {
        let doc = serde_json::json!({ "run_id": id, "status": status });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    let _ = writeln!(std::io::stderr(), "run {id} {status}");
    Ok(if status == RunStatus::Cancelled {
        Exit::Success
    } else {
        Exit::Failure
    })
}

/// SIGTERM the owner through a pidfd, after checking through that pidfd's
/// pid that it is still the recorded process.
fn signal_owner(owner: &RunOwner) -> anyhow::Result<()> {
    use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
    let raw = i32::try_from(owner.pid).ok().and_then(Pid::from_raw);
    let pid =
        raw.ok_or_else(|| anyhow::anyhow!("recorded owner pid {} is not a pid", owner.pid))?;
    let fd = pidfd_open(pid, PidfdFlags::empty())
        .map_err(|e| anyhow::anyhow!("cannot open the owner process {}: {e}", owner.pid))?;
    // The pidfd now pins that process; if the pid was recycled before we
    // opened it, the start time says so and nothing is sent.
    match iterion_runtime::owner::proc_start_time(owner.pid) {
        Ok(Some(start)) if start == owner.start_time => {}
        _ => anyhow::bail!(
            "process {} is no longer the run's owner (its start time changed)",
            owner.pid
        ),
    }
    pidfd_send_signal(&fd, Signal::TERM)
        .map_err(|e| anyhow::anyhow!("cannot signal the owner process {}: {e}", owner.pid))
}

async fn cancel_local(store: &Arc<dyn RunStore>, first: RunRecord) -> anyhow::Result<RunStatus> {
    let id = first.id.clone();
    let mut signalled = false;
    let mut deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let record = store
            .load_run(&id)
            .await
            .map_err(stores::store_error)?
            .ok_or_else(|| UserInputError::new(format!("run {id} is gone from the store")))?;
        let status = record.status;
        if status.is_terminal() && status != RunStatus::FailedResumable {
            if status == RunStatus::Cancelled || signalled {
                return Ok(status);
            }
            anyhow::bail!("run {id} is already {status}; nothing to cancel");
        }
        let live = matches!(status, RunStatus::Queued | RunStatus::Running);
        match record
            .owner
            .as_ref()
            .filter(|_| live)
            .map(|o| (o, owner_lease(o)))
        {
            Some((owner, LeaseState::Held)) => {
                if !signalled {
                    signal_owner(owner)?;
                    signalled = true;
                    deadline = Instant::now() + TEARDOWN_WAIT;
                }
            }
            Some((owner, LeaseState::CheckFailed)) => {
                return Err(UserInputError::new(format!(
                    "run {id} is owned by process {} on host {}: cancel it there",
                    owner.pid, owner.host
                ))
                .into());
            }
            // Nobody runs it: cancel in the store, then reap what it left.
            Some((_, LeaseState::NotHeld)) | None => {
                if cancel_in_store(store.as_ref(), &id, status, record.revision, REASON)
                    .await
                    .map_err(stores::store_error)?
                {
                    let found = drivers::probe(&EnvSnapshot::from_process()).await;
                    iterion_runtime::reap::reap_once(found.handles(), store.as_ref(), false).await;
                    return Ok(RunStatus::Cancelled);
                }
            }
        }
        if Instant::now() >= deadline {
            anyhow::bail!("run {id} did not stop within {TEARDOWN_WAIT:?}; it is still {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
