//! `iterion run FILE`: compile, pre-flight (opt-in), then hand the run to
//! the engine with the policy booter over the drivers this host offers;
//! render its events live and exit by its terminal status. Also the
//! [`Session`] `iterion resume` shares with it, so a resumed run is driven,
//! bounded, signalled and printed exactly as a fresh one.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use iterion_core::{RunId, RunStatus, RunStore, Trust};
use iterion_runtime::{Engine, HostDrivers, PolicyBooter, RunOptions, RunOutcome, RuntimeError};
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv, preflight_enabled};
use tokio_util::sync::CancellationToken;

use super::launch::{LaunchFlags, RunnerWiring, sandbox_host};
use crate::cli::{RunArgs, TrustFlag};
use crate::exit::{Exit, UserInputError};
use crate::{drivers, render, stores, workflow};

/// Entry point of the verb.
pub async fn run(args: RunArgs) -> anyhow::Result<Exit> {
    // Before anything reads the store's location (the store, the scope the
    // sandbox is labelled with, the reaper).
    if let Some(dir) = &args.store_dir {
        stores::select_dir(dir.clone());
    }
    let (loaded, workflow) = workflow::load_workflow(&args.file)?;
    let vars =
        super::launch_inputs::run_vars(&workflow, args.preset.as_deref(), parse_vars(&args.vars)?)?;
    let attachments = super::launch_inputs::attachments(&workflow, &args.attach)?;
    let env = check_env(EnvSnapshot::from_process())?;
    let launch = LaunchFlags::of(
        args.sandbox,
        args.sandbox_host_state,
        &args.sandbox_default_image,
    );
    let flags = launch.sandbox_flags();
    // The one probe of this run's drivers: the pre-flight renders the
    // decision made on it, and the run decides on it again.
    let drivers = drivers::probe(&env.snapshot).await;
    if preflight_enabled(env.snapshot.preflight.as_deref()) {
        preflight(&args, &env, &drivers).await?;
    }
    let cancel = cancel_on_signals()?;
    let agents = AgentWiring::admit(&workflow)?;
    refuse_without_runner(&args, &workflow, &env, &drivers, &agents)?;

    let store = stores::open_from_env().await?;
    let run_id = match args.run_id.clone() {
        Some(id) => {
            // A taken id would make this run write over another's record,
            // sandbox name and files: refused before anything is created.
            if store
                .load_run(&id)
                .await
                .map_err(stores::store_error)?
                .is_some()
            {
                return Err(UserInputError::new(format!(
                    "--run-id {id}: the store already holds a run with this id"
                ))
                .into());
            }
            id
        }
        None => RunId::generate(),
    };
    tracing::info!(run = %run_id, file = %args.file.display(), "run starting");
    let workspace = std::env::current_dir()?.canonicalize()?;
    // `worktree: auto`: the run works in a fresh worktree of this
    // repository; a checkout that cannot have one is refused before the
    // run exists.
    let worktree = match workflow.worktree.as_deref() {
        Some("auto") => Some(make_worktree(&args, &workspace, &run_id)?),
        _ => None,
    };
    let workspace = worktree
        .as_ref()
        .map_or(workspace, |w| std::path::PathBuf::from(&w.path));
    let options = RunOptions {
        file: args.file.display().to_string(),
        workflow,
        vars,
        trust: match args.trust {
            TrustFlag::Trusted => Trust::Trusted,
            TrustFlag::Untrusted => Trust::Untrusted,
        },
        run_id,
        workspace,
        flags,
        timeout: args.timeout,
        source_sha256: Some(source_sha256(&loaded.source)),
        launch_settings: {
            let mut settings = launch.to_settings();
            if let Some(preset) = &args.preset {
                settings.insert("preset".into(), serde_json::json!(preset));
            }
            settings
        },
        attachments,
        worktree,
    };
    let made = options.worktree.clone();
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
    let result = session
        .execute(|engine, cancel| async move { engine.run(options, cancel).await })
        .await;
    // A run the store could not record never used its worktree: it goes,
    // unless something is in it.
    if result.is_err()
        && let Some(wt) = &made
    {
        iterion_runtime::worktree::discard_unused(wt);
    }
    result
}

/// Create the run's worktree under the directory store (upstream's
/// `<store>/worktrees/<run-id>`), or under iterion's state dir when the
/// store is PostgreSQL.
fn make_worktree(
    args: &RunArgs,
    workspace: &std::path::Path,
    run_id: &RunId,
) -> anyhow::Result<iterion_runtime::worktree::RunWorktree> {
    use iterion_runtime::worktree::{MergeStrategy, PromoteOptions, WorktreeRequest, setup};
    let root = stores::store_dir().unwrap_or_else(iterion_runtime::sandbox_boot::default_state_dir);
    let promote = PromoteOptions {
        branch_name: args.branch_name.clone(),
        merge_into: args.merge_into.clone().unwrap_or_default(),
        strategy: match args.merge_strategy {
            Some(crate::cli::MergeStrategyFlag::Merge) => MergeStrategy::Merge,
            Some(crate::cli::MergeStrategyFlag::Squash) | None => MergeStrategy::Squash,
        },
        auto_merge: args.auto_merge,
    };
    let wt = setup(&WorktreeRequest {
        workspace,
        root: &root,
        run_id: run_id.as_str(),
        promote,
    })
    .map_err(|e| {
        let message = format!("{e} [{}]", e.code());
        if e.is_user_input() {
            UserInputError::new(message).into()
        } else {
            anyhow::anyhow!(message)
        }
    })?;
    if wt.dirty {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {} has uncommitted changes; the run's worktree starts from HEAD without them",
            iterion_core::display::printable(&wt.repo_root)
        );
    }
    Ok(wt)
}

/// SHA-256 (hex) of a workflow source: what a resume compares.
pub(super) fn source_sha256(source: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(source.as_bytes()))
}

/// Agent nodes: credentials and backend defaults come from this process's
/// environment; a static `iterion` (this one, or ITERION_BIN) is bound
/// read-only into the sandbox for claw's in-box runner when the workflow
/// has agent nodes; the workflow's budget spans its agent nodes.
pub(super) struct AgentWiring {
    backends: iterion_agent::AgentBackends,
    mounts: Vec<iterion_core::plan::Mount>,
    runner_missing: Option<String>,
}

impl AgentWiring {
    /// What can be checked without a container is checked now, so a
    /// missing key refuses the run before anything is created.
    pub(super) fn admit(workflow: &iterion_dsl::ir::Workflow) -> anyhow::Result<Self> {
        let runner = RunnerWiring::of(workflow);
        // The operator named a runner that cannot serve: bad input, before
        // anything is created (issue 32 item 2).
        if let Some(why) = runner.bad_iterion_bin {
            return Err(UserInputError::new(format!(
                "{why} [{}]",
                iterion_sandbox::decision::RUNNER_UNAVAILABLE
            ))
            .into());
        }
        let agent_env = iterion_agent::EnvSnapshot::from_process();
        let backends = iterion_agent::AgentBackends::new(agent_env, runner.binary)
            .with_budget(&workflow.budget);
        admit_agents(&backends, workflow)?;
        Ok(Self {
            backends,
            mounts: runner.mounts,
            runner_missing: runner.missing,
        })
    }
}

/// A run whose sandbox would need the runner no static `iterion` can serve
/// is bad input (exit 2), refused before the store or any container is
/// touched: the sandbox decision says whether this run would start a
/// sandbox (it denies it with `SANDBOX_RUNNER_UNAVAILABLE`), and only
/// that answer is read here.
fn refuse_without_runner(
    args: &RunArgs,
    workflow: &iterion_dsl::ir::Workflow,
    env: &SandboxEnv,
    drivers: &HostDrivers,
    agents: &AgentWiring,
) -> anyhow::Result<()> {
    if agents.runner_missing.is_none() {
        return Ok(());
    }
    let launch = LaunchFlags::of(
        args.sandbox,
        args.sandbox_host_state,
        &args.sandbox_default_image,
    );
    let host = sandbox_host(env.clone(), drivers.clone(), Some(workflow));
    let decided = super::sandbox::decide_here(
        &host,
        Some(workflow),
        &launch.sandbox_flags(),
        args.trust == TrustFlag::Untrusted,
        None,
    )?;
    let d = &decided.decision;
    if d.code() == Some(iterion_sandbox::decision::RUNNER_UNAVAILABLE) {
        return Err(UserInputError::new(format!(
            "{}: {} [{}]",
            args.file.display(),
            d.refusal_reason().unwrap_or_default(),
            iterion_sandbox::decision::RUNNER_UNAVAILABLE
        ))
        .into());
    }
    Ok(())
}

/// What `run` and `resume` share: the drivers, the reaper, the booter, the
/// live view, and how an outcome is printed and exits.
pub(super) struct Session {
    pub store: Arc<dyn RunStore>,
    pub env: SandboxEnv,
    /// The one probe of this process's drivers.
    pub drivers: HostDrivers,
    pub agents: AgentWiring,
    pub json: bool,
    /// Human nodes may ask on the terminal (not `--no-interactive`).
    pub interactive: bool,
    /// Cancelled by SIGINT, SIGTERM or SIGHUP ([`cancel_on_signals`]).
    pub cancel: CancellationToken,
    /// Set when `iterion runner` executes a claimed run: its reaper runs on
    /// the runner's ticker, nothing is rendered, and the runner's
    /// interruptions end the run INTERRUPTED.
    pub runner: Option<iterion_runtime::Interrupt>,
}

impl Session {
    pub(super) async fn execute<F, Fut>(self, go: F) -> anyhow::Result<Exit>
    where
        F: FnOnce(Engine, CancellationToken) -> Fut,
        Fut: std::future::Future<Output = Result<RunOutcome, RuntimeError>>,
    {
        let json = self.json;
        let outcome = self.drive(go).await?;
        Ok(report(&outcome, json))
    }

    /// Build the drivers, reaper, booter, engine and live view, and drive
    /// one run through `go` to its outcome.
    pub(super) async fn drive<F, Fut>(self, go: F) -> anyhow::Result<RunOutcome>
    where
        F: FnOnce(Engine, CancellationToken) -> Fut,
        Fut: std::future::Future<Output = Result<RunOutcome, RuntimeError>>,
    {
        let Session {
            store,
            env,
            drivers,
            agents,
            json: _,
            interactive,
            cancel,
            runner,
        } = self;
        // Orphans of earlier runs (a SIGKILLed iterion) are collected at the
        // start of every run and every ITERION_SANDBOX_REAP_INTERVAL while
        // it lasts (a long run on a cluster outlives many): bounded, in the
        // background, never blocking it.
        let local_env: BTreeMap<String, String> = std::env::vars().collect();
        let state_dir = iterion_runtime::sandbox_boot::default_state_dir();
        let reap_targets = iterion_runtime::reap::ReapTargets {
            drivers: drivers.handles().to_vec(),
            store: store.clone(),
            host_roots: iterion_runtime::sandbox_boot::host_state_roots(&state_dir, &local_env),
        };
        // MCP server processes are recorded where this reaper looks.
        let ledger = Arc::new(iterion_runtime::procs::HostProcesses::new(
            iterion_runtime::procs::root(&state_dir),
        ));
        // Off under ITERION_SANDBOX_OVERRIDE=none (seed): the runner is then
        // itself the boundary and judges no one's sandboxes.
        let reaping =
            iterion_sandbox::reaper::reaper_enabled(env.snapshot.sandbox_override.as_deref())
                && runner.is_none();
        // Read only where this reaper runs (a cloud runner has its own
        // period): a typo is bad input before the run exists.
        let reap_every = if reaping {
            iterion_runtime::reap::reap_interval(&local_env)
                .map_err(|e| UserInputError::new(format!("{e} ({})", e.code())))?
        } else {
            None
        };
        let reap_stop = CancellationToken::new();
        let reaper = tokio::spawn({
            let stop = reap_stop.clone();
            async move {
                if reaping {
                    iterion_runtime::reap::reap_on_a_ticker(reap_targets, reap_every, stop).await;
                }
            }
        });

        // One agent runner: the engine's, and the booter's per-run MCP
        // listener (seed step 18) serving its servers to a CLI in the box.
        let backends = Arc::new(
            agents
                .backends
                .with_store(store.clone())
                .with_process_ledger(ledger),
        );
        let host = sandbox_host(env, drivers, None)
            .with_mounts(agents.mounts)
            .with_runner_missing(agents.runner_missing);
        let booter = PolicyBooter::new(host, store.clone())
            .with_listeners(backends.clone())
            .with_provider_secrets(backends.clone());
        let (tap, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut engine = Engine::new(store.clone(), Arc::new(booter))
            .with_agents(backends)
            .with_event_tap(tap);
        if interactive && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            engine = engine.with_human(Arc::new(crate::prompt::TerminalPrompter));
        }
        let renderer = match &runner {
            Some(interrupt) => {
                engine = engine.with_interrupt(interrupt.clone());
                tokio::spawn(async move {
                    let mut rx = rx;
                    while rx.recv().await.is_some() {}
                })
            }
            None => tokio::spawn(render::render_events(rx)),
        };

        // The engine (and its event tap) goes with the run, so the
        // renderer ends when the run does.
        let outcome = go(engine, cancel).await;
        let _ = renderer.await;
        // The ticker stops with the run; a boot scan still under way gets
        // the same grace as before.
        reap_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), reaper).await;
        Ok(outcome?)
    }
}

/// Print an outcome (`--json` and the summary line) and pick the exit.
fn report(outcome: &RunOutcome, json: bool) -> Exit {
    let code = outcome.failure.as_ref().map(|f| f.code.as_str());
    if json {
        let doc = serde_json::json!({
            "run_id": outcome.run_id,
            "status": outcome.status,
            "failure_code": code,
        });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    // Not `eprintln!`: after a SIGHUP the terminal may be gone, and a
    // failed write must not turn a cleaned-up run into a panic (exit 101).
    let summary = match &outcome.failure {
        None if outcome.status == RunStatus::PausedWaitingHuman => format!(
            "run {} {}: answer with `iterion resume --run-id {} --answer FIELD=VALUE`",
            outcome.run_id, outcome.status, outcome.run_id
        ),
        None => format!("run {} {}", outcome.run_id, outcome.status),
        Some(f) => format!(
            "run {} {} ({}): {}",
            outcome.run_id, outcome.status, f.code, f.message
        ),
    };
    let _ = writeln!(
        std::io::stderr(),
        "{}",
        iterion_core::display::printable(&summary)
    );
    // A pause is a normal stop an operator resumes (upstream exits 0).
    match outcome.status {
        RunStatus::Finished | RunStatus::PausedWaitingHuman => Exit::Success,
        _ => Exit::Failure,
    }
}

/// A token cancelled on the first SIGINT, SIGTERM or SIGHUP: the engine
/// then stops the running exec, tears the sandbox down and records
/// `cancelled`. Installed before anything is created (issue 19 #7: a TERMed
/// run left its container, network, rules and secret files). Later signals
/// are absorbed, so a second TERM cannot cut the teardown short (only
/// SIGKILL can, and the reaper collects what that leaves).
pub(super) fn cancel_on_signals() -> anyhow::Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let cancel = CancellationToken::new();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let token = cancel.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        // Cancel first: the message is best effort (a hung-up terminal).
        token.cancel();
        let _ = writeln!(
            std::io::stderr(),
            "{name}: cancelling the run (the sandbox is still cleaned up)"
        );
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        }
    });
    Ok(cancel)
}

/// Every agent, judge and `mode: llm` router node passes the agent
/// crate's admission (backend, provider, credentials, tools); a refusal is
/// bad input naming the node and what is missing.
fn admit_agents(
    agents: &iterion_agent::AgentBackends,
    workflow: &iterion_dsl::ir::Workflow,
) -> anyhow::Result<()> {
    let default_backend = workflow
        .properties
        .get("default_backend")
        .and_then(serde_json::Value::as_str);
    for node in workflow
        .nodes
        .values()
        .filter(|n| iterion_runtime::agents::is_agent_node(n))
    {
        // Admission judges the node's tools under the policy it will run with.
        let mut properties = node.properties.clone();
        if let Some(policy) = iterion_runtime::agents::effective_tool_policy(workflow, node) {
            properties.insert("tool_policy".to_owned(), serde_json::json!(policy));
        }
        if let Err(e) = agents.admit(&node.id, &properties, default_backend, &node.mcp_servers) {
            return Err(
                UserInputError::new(format!("node {}: {e} ({})", node.id, e.code())).into(),
            );
        }
    }
    // A human node a model answers makes one structured claw call.
    for node in workflow
        .nodes
        .values()
        .filter(|n| iterion_runtime::agents::is_llm_human(workflow, n))
    {
        let properties = iterion_runtime::agents::llm_human_properties(node);
        if let Err(e) = agents.admit(&node.id, &properties, None, &[]) {
            return Err(
                UserInputError::new(format!("node {}: {e} ({})", node.id, e.code())).into(),
            );
        }
    }
    Ok(())
}

/// `--var K=V` pairs; a malformed one is bad input.
pub(super) fn parse_vars(raw: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for pair in raw {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(UserInputError::new(format!("--var {pair:?}: expected K=V")).into());
        };
        if k.is_empty() {
            return Err(UserInputError::new(format!("--var {pair:?}: empty name")).into());
        }
        vars.insert(k.to_owned(), v.to_owned());
    }
    Ok(vars)
}

/// An operator setting the run cannot read is bad input (exit 2), caught
/// before anything is created: the sandbox words are parsed once, here
/// (the decision then reads them typed).
pub(super) fn check_env(env: EnvSnapshot) -> anyhow::Result<SandboxEnv> {
    let parsed = SandboxEnv::parse(&env).map_err(|e| UserInputError::new(e.to_string()))?;
    // A limit the driver cannot read would make discovery find no engine,
    // and `auto` would then run on the host: bad input, never a degrade.
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    crate::drivers::check_settings(&process_env).map_err(UserInputError::new)?;
    Ok(parsed)
}

/// `ITERION_SANDBOX_PREFLIGHT`: the strict doctor on the exact decision;
/// a failed check is bad input (exit 2), warnings are only printed.
async fn preflight(args: &RunArgs, env: &SandboxEnv, drivers: &HostDrivers) -> anyhow::Result<()> {
    let opts = super::sandbox::StrictOptions {
        file: Some(args.file.clone()),
        target: None,
        launch: LaunchFlags::of(
            args.sandbox,
            args.sandbox_host_state,
            &args.sandbox_default_image,
        ),
        untrusted: args.trust == TrustFlag::Untrusted,
    };
    let report = super::sandbox::strict_report(&opts, env, drivers).await?;
    if report.failed() {
        let failed: Vec<String> = report
            .checks
            .iter()
            .filter(|c| c.status == super::sandbox::CheckStatus::Fail)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        return Err(UserInputError::new(format!(
            "sandbox pre-flight failed (ITERION_SANDBOX_PREFLIGHT): {}",
            failed.join("; ")
        ))
        .into());
    }
    Ok(())
}
