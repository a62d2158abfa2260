//! `iterion resume --run-id ID`: continue a paused, failed or interrupted
//! run from its stored progress (`iterion_runtime::resume`), in a fresh
//! sandbox booted with the flags the run was launched with; same output
//! and exit codes as `run`.

use std::collections::BTreeMap;

use iterion_core::RunId;
use iterion_runtime::human::AnswerInput;
use iterion_runtime::resume;
use iterion_sandbox::env::EnvSnapshot;

use super::launch::LaunchFlags;
use super::run::{AgentWiring, Session, cancel_on_signals, check_env, source_sha256};
use crate::cli::ResumeArgs;
use crate::exit::{Exit, UserInputError};
use crate::{stores, workflow};

/// Entry point of the verb.
pub async fn run(args: ResumeArgs) -> anyhow::Result<Exit> {
    // Before anything reads the store's location, as `run` does.
    if let Some(dir) = &args.store_dir {
        stores::select_dir(dir.clone());
    }
    let run_id = RunId::parse(&args.run_id)
        .map_err(|e| UserInputError::new(format!("--run-id {:?}: {e}", args.run_id)))?;
    let answers = answers(&args)?;
    let store = stores::open_from_env().await?;
    let resumable = resume::load(store.as_ref(), &run_id)
        .await
        .map_err(resume_error)?;
    // A worktree run continues in its own worktree, which must still be
    // there (a removed one would run the rest in a directory that is gone).
    if let Some(wt) = &resumable.launch.worktree {
        wt.check_present().map_err(|e| {
            UserInputError::new(format!(
                "run {run_id} worked in {}, which is no longer its worktree: {e} [{}]",
                wt.path,
                e.code()
            ))
        })?;
    }
    let file = std::path::PathBuf::from(&resumable.launch.file);
    let (loaded, workflow) = workflow::load_workflow(&file)?;
    let launch = LaunchFlags::from_settings(&resumable.launch.settings);
    let flags = launch.sandbox_flags();
    let env = check_env(EnvSnapshot::from_process())?;
    let cancel = cancel_on_signals()?;
    // The agents of the workflow as compiled now (it may have changed
    // under --force), with this process's credentials.
    let agents = AgentWiring::admit(&workflow)?;
    let plan = resumable
        .plan(
            workflow,
            &source_sha256(&loaded.source),
            args.force,
            &answers,
        )
        .map_err(resume_error)?;
    if plan.forced {
        eprintln!(
            "warning: {} changed since run {run_id} started; resuming anyway (--force)",
            file.display()
        );
    }
    tracing::info!(run = %run_id, file = %file.display(), "run resuming");
    let drivers = crate::drivers::probe(&env.snapshot).await;
    let session = Session {
        store,
        env,
        drivers,
        agents,
        json: args.json,
        interactive: !args.no_interactive,
        cancel,
        runner: None,
    };
    session
        .execute(|engine, cancel| async move { engine.resume(plan, flags, cancel).await })
        .await
}

/// `--answers-file` (a JSON object) under `--answer K=V` (the flags win,
/// as upstream).
fn answers(args: &ResumeArgs) -> anyhow::Result<BTreeMap<String, AnswerInput>> {
    let mut out = BTreeMap::new();
    if let Some(path) = &args.answers_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UserInputError::new(format!(
                "cannot read --answers-file {}: {e}",
                path.display()
            ))
        })?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            UserInputError::new(format!("--answers-file {}: not JSON: {e}", path.display()))
        })?;
        let serde_json::Value::Object(map) = value else {
            return Err(UserInputError::new(format!(
                "--answers-file {}: expected a JSON object of answers",
                path.display()
            ))
            .into());
        };
        for (k, v) in map {
            out.insert(k, AnswerInput::Json(v));
        }
    }
    for pair in &args.answers {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(UserInputError::new(format!("--answer {pair:?}: expected K=V")).into());
        };
        if k.is_empty() {
            return Err(UserInputError::new(format!("--answer {pair:?}: empty name")).into());
        }
        out.insert(k.to_owned(), AnswerInput::Text(v.to_owned()));
    }
    Ok(out)
}

/// A refusal names its code; the caller's input is at fault (exit 2)
/// unless the store failed.
fn resume_error(e: resume::ResumeError) -> anyhow::Error {
    let message = format!("{e} [{}]", e.code());
    if e.is_user_input() {
        UserInputError::new(message).into()
    } else {
        anyhow::Error::new(e)
    }
}
