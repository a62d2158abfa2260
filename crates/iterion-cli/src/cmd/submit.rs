//! `iterion submit FILE`: compile (an invalid workflow is exit 2 and
//! nothing is queued), check what can be checked without a runner (the
//! agents' admission), record the run `queued` with its source, variables
//! and launch settings, publish it; prints `{"run_id","status"}`.

use std::io::Write as _;

use iterion_core::store::{NewRun, Submission};
use iterion_core::{RunId, Trust};

use super::cloud;
use super::launch::LaunchFlags;
use super::run::{AgentWiring, parse_vars};
use crate::cli::{SubmitArgs, TrustFlag};
use crate::exit::{Exit, UserInputError};
use crate::workflow;

/// Entry point of the verb.
pub async fn run(args: SubmitArgs) -> anyhow::Result<Exit> {
    let settings = cloud::settings("submit")?;
    let (loaded, workflow) = workflow::load_workflow(&args.file)?;
    let vars = parse_vars(&args.vars)?;
    // A workflow whose agents this machine already knows cannot run is
    // refused here too; the runner admits it again with its own env.
    AgentWiring::admit(&workflow)?;
    iterion_runtime::admission::resolve_vars(&workflow, &vars)
        .map_err(|e| UserInputError::new(format!("{e} ({})", e.code())))?;
    let launch = LaunchFlags {
        sandbox: args.sandbox,
        host_state: args.sandbox_host_state,
        default_image: args.sandbox_default_image.clone(),
    };
    let store = cloud::store().await?;
    let queue = cloud::queue(&settings, iterion_queue::topology::Role::Client).await?;
    let id = args.run_id.clone().unwrap_or_else(RunId::generate);
    let submission = Submission {
        version: Submission::VERSION,
        source: loaded.source,
        vars,
        settings: launch.to_settings(),
        timeout_ms: args
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        submitted_at: time::OffsetDateTime::now_utc(),
    };
    let run = NewRun {
        id: id.clone(),
        workflow: workflow.name.clone(),
        file: args.file.display().to_string(),
        trust: match args.trust {
            TrustFlag::Trusted => Trust::Trusted,
            TrustFlag::Untrusted => Trust::Untrusted,
        },
        owner: None,
    };
    let submitted = iterion_queue::submit::submit(&queue, store.as_ref(), run, submission)
        .await
        .map_err(|e| match e {
            iterion_queue::submit::SubmitError::Conflict { .. } => {
                anyhow::Error::from(UserInputError::new(format!("{e} [{}]", e.code())))
            }
            iterion_queue::submit::SubmitError::Queue(q) => cloud::queue_error(q),
        })?;
    let status = submitted.record.status;
    if args.json {
        let doc = serde_json::json!({ "run_id": id, "status": status });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    let note = if submitted.existing {
        " (already submitted)"
    } else {
        ""
    };
    let _ = writeln!(std::io::stderr(), "run {id} {status}{note}");
    Ok(Exit::Success)
}
