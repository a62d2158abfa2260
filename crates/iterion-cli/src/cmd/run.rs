//! `iterion run FILE`: compile, pre-flight (opt-in), then hand the run to
//! the engine with the policy booter over the drivers this host offers;
//! render its events live and exit by its terminal status.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use iterion_core::{HostState, Mode, RunId, RunStatus, Trust};
use iterion_runtime::{BootFlags, DriverCatalog, Engine, PolicyBooter, RunOptions, SandboxFlags};
use iterion_sandbox::env::{EnvSnapshot, preflight_enabled};
use iterion_sandbox::precedence::{PrecedenceInputs, resolve_host_state, resolve_mode};
use tokio_util::sync::CancellationToken;

use crate::cli::{HostStateFlag, RunArgs, SandboxFlag, TrustFlag};
use crate::exit::{Exit, UserInputError};
use crate::{drivers, render, stores, workflow};

/// Entry point of the verb.
pub async fn run(args: RunArgs) -> anyhow::Result<Exit> {
    // Before anything reads the store's location (the store, the scope the
    // sandbox is labelled with, the reaper).
    if let Some(dir) = &args.store_dir {
        stores::select_dir(dir.clone());
    }
    let (_, workflow) = workflow::load_workflow(&args.file)?;
    let vars = parse_vars(&args.vars)?;
    let env = EnvSnapshot::from_process();
    let flags = SandboxFlags {
        sandbox: args.sandbox.map(|s| match s {
            SandboxFlag::Auto => Mode::Auto,
            SandboxFlag::None => Mode::None,
        }),
        host_state: args.sandbox_host_state.map(|h| match h {
            HostStateFlag::Auto => HostState::Auto,
            HostStateFlag::None => HostState::None,
        }),
        default_image: args.sandbox_default_image.clone(),
        // The product entry point installs tier 4 (seed step 1).
        global_default: Some(Mode::Auto),
    };
    check_env(&env, &flags)?;
    if preflight_enabled(env.preflight.as_deref()) {
        preflight(&args, &env).await?;
    }

    // Installed before anything is created: from here on a SIGINT, SIGTERM
    // or SIGHUP cancels the run and the teardown still runs (issue 19 #7:
    // a TERMed run left its container, network, rules and secret files).
    let cancel = CancellationToken::new();
    cancel_on_signals(cancel.clone())?;

    // Agent nodes: credentials and backend defaults come from this
    // process's environment; a static `iterion` (this one, or ITERION_BIN)
    // is bound read-only into the sandbox for claw's in-box runner. What
    // can be checked without a container is checked now, so a missing key
    // refuses the run before anything is created.
    let agent_env = iterion_agent::EnvSnapshot::from_process();
    let runner_binary = iterion_agent::runner::locate_runner_binary(
        &agent_env,
        std::env::current_exe().ok().as_deref(),
    );
    let agents = iterion_agent::AgentBackends::new(agent_env, runner_binary.clone())
        .with_budget(&workflow.budget);
    admit_agents(&agents, &workflow)?;

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
    let discovered = drivers::discover(&env).await;
    // Orphans of earlier runs (a SIGKILLed iterion) are collected at the
    // start of every run: bounded, in the background, never blocking it.
    let local_env: BTreeMap<String, String> = std::env::vars().collect();
    let state_dir = iterion_runtime::sandbox_boot::default_state_dir();
    let reap_store = store.clone();
    let reap_drivers = discovered.drivers.clone();
    let reap_roots = iterion_runtime::sandbox_boot::host_state_roots(&state_dir, &local_env);
    // Off under ITERION_SANDBOX_OVERRIDE=none (seed): the runner is then
    // itself the boundary and judges no one's sandboxes.
    let reaping = iterion_sandbox::reaper::reaper_enabled(env.sandbox_override.as_deref());
    let reaper = tokio::spawn(async move {
        if !reaping {
            return;
        }
        let pass = async {
            iterion_runtime::reap::reap_once(&reap_drivers, reap_store.as_ref(), false).await;
            iterion_runtime::reap::reap_host_dirs(&reap_roots, reap_store.as_ref(), false).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(30), pass).await;
    });

    let workspace = std::env::current_dir()?.canonicalize()?;
    let booter = PolicyBooter::new(
        env,
        local_env,
        DriverCatalog {
            drivers: discovered.drivers,
            failure: discovered.failure,
        },
        store.clone(),
        state_dir,
    )
    .with_store_dir(stores::store_dir());
    let booter = match &runner_binary {
        Some(bin) if !iterion_runtime::agents::agent_nodes(&workflow).is_empty() => {
            booter.with_mounts(vec![iterion_agent::runner::runner_mount(bin)])
        }
        _ => booter,
    };
    let (tap, rx) = tokio::sync::mpsc::unbounded_channel();
    let engine = Engine::new(store, Arc::new(booter))
        .with_agents(Arc::new(agents))
        .with_event_tap(tap);
    let renderer = tokio::spawn(render::render_events(rx));

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
        flags: BootFlags::new(flags),
        timeout: args.timeout,
    };
    let outcome = engine.run(options, cancel).await;
    drop(engine);
    let _ = renderer.await;
    let _ = tokio::time::timeout(Duration::from_secs(5), reaper).await;
    let outcome = outcome?;
    let code = outcome.failure.as_ref().map(|f| f.code.as_str());
    if args.json {
        let doc = serde_json::json!({
            "run_id": outcome.run_id,
            "status": outcome.status,
            "failure_code": code,
        });
        let _ = writeln!(std::io::stdout(), "{doc}");
    }
    // Not `eprintln!`: after a SIGHUP the terminal may be gone, and a failed
    // write must not turn a cleaned-up run into a panic (exit 101).
    let summary = match &outcome.failure {
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
    Ok(if outcome.status == RunStatus::Finished {
        Exit::Success
    } else {
        Exit::Failure
    })
}

/// Cancel `cancel` on the first SIGINT, SIGTERM or SIGHUP: the engine then
/// stops the running exec, tears the sandbox down and records `cancelled`.
/// Later signals are absorbed, so a second TERM cannot cut the teardown
/// short (only SIGKILL can, and the reaper collects what that leaves).
fn cancel_on_signals(cancel: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        // Cancel first: the message is best effort (a hung-up terminal).
        cancel.cancel();
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
    Ok(())
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
        if let Err(e) = agents.admit(&node.id, &node.properties, default_backend) {
            return Err(
                UserInputError::new(format!("node {}: {e} ({})", node.id, e.code())).into(),
            );
        }
    }
    Ok(())
}

/// `--var K=V` pairs; a malformed one is bad input.
fn parse_vars(raw: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
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
/// before anything is created.
fn check_env(env: &EnvSnapshot, flags: &SandboxFlags) -> anyhow::Result<()> {
    let inputs = PrecedenceInputs {
        cli_sandbox: flags.sandbox,
        cli_host_state: flags.host_state,
        env: env.clone(),
        ..PrecedenceInputs::default()
    };
    resolve_mode(&inputs).map_err(|e| UserInputError::new(e.to_string()))?;
    resolve_host_state(&inputs).map_err(|e| UserInputError::new(e.to_string()))?;
    // A limit the driver cannot read would make discovery find no engine,
    // and `auto` would then run on the host: bad input, never a degrade.
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    iterion_driver_docker::DockerSettings::from_env(&process_env)
        .map_err(|e| UserInputError::new(e.to_string()))?;
    if let Some(raw) = env.readback_cap.as_deref().filter(|s| !s.trim().is_empty()) {
        iterion_core::parse_size(raw)
            .map_err(|e| UserInputError::new(format!("ITERION_SANDBOX_READBACK_CAP: {e}")))?;
    }
    Ok(())
}

/// `ITERION_SANDBOX_PREFLIGHT`: the strict doctor on the exact spec; a
/// failed check is bad input (exit 2), warnings are only printed.
async fn preflight(args: &RunArgs, env: &EnvSnapshot) -> anyhow::Result<()> {
    let opts = super::sandbox::StrictOptions {
        file: Some(args.file.clone()),
        target: None,
        sandbox: args.sandbox,
        default_image: args.sandbox_default_image.clone(),
        host_state: args.sandbox_host_state,
        untrusted: args.trust == TrustFlag::Untrusted,
    };
    let report = super::sandbox::strict_report(&opts, env).await?;
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
