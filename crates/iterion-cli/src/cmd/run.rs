//! `iterion run FILE`: compile, pre-flight (opt-in), then hand the run to
//! the engine with the policy booter over the drivers this host offers;
//! render its events live and exit by its terminal status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use iterion_core::{HostState, Mode, RunId, RunStatus, Trust};
use iterion_runtime::{
    BootFlags, DriverCatalog, Engine, PolicyBooter, RunOptions, RunOutcome, SandboxFlags,
};
use iterion_sandbox::env::{EnvSnapshot, preflight_enabled};
use iterion_sandbox::precedence::{PrecedenceInputs, resolve_host_state, resolve_mode};
use tokio_util::sync::CancellationToken;

use crate::cli::{HostStateFlag, RunArgs, SandboxFlag, TrustFlag};
use crate::exit::{Exit, UserInputError};
use crate::{drivers, render, stores, workflow};

/// Entry point of the verb.
pub async fn run(args: RunArgs) -> anyhow::Result<Exit> {
    let (loaded, workflow) = workflow::load_workflow(&args.file)?;
    let vars = parse_vars(&args.vars)?;
    let env = EnvSnapshot::from_process();
    let launch = LaunchFlags {
        sandbox: args.sandbox,
        host_state: args.sandbox_host_state,
        default_image: args.sandbox_default_image.clone(),
    };
    let flags = launch.sandbox_flags();
    check_env(&env, &flags)?;
    if preflight_enabled(env.preflight.as_deref()) {
        preflight(&args, &env).await?;
    }
    let store = stores::open_from_env().await?;
    let workspace = std::env::current_dir()?.canonicalize()?;
    let options = RunOptions {
        file: args.file.display().to_string(),
        workflow,
        vars,
        trust: match args.trust {
            TrustFlag::Trusted => Trust::Trusted,
            TrustFlag::Untrusted => Trust::Untrusted,
        },
        run_id: RunId::generate(),
        workspace,
        flags: BootFlags::new(flags),
        source_sha256: Some(source_sha256(&loaded.source)),
        launch_settings: launch.to_settings(),
    };
    let session = Session {
        store,
        env,
        json: args.json,
        interactive: !args.no_interactive,
    };
    session
        .execute(|engine, cancel| async move { engine.run(options, cancel).await })
        .await
}

/// The sandbox flags a run was launched with, kept in its launch record
/// so `iterion resume` boots it the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LaunchFlags {
    pub sandbox: Option<SandboxFlag>,
    pub host_state: Option<HostStateFlag>,
    pub default_image: Option<String>,
}

impl LaunchFlags {
    pub(super) fn sandbox_flags(&self) -> SandboxFlags {
        SandboxFlags {
            sandbox: self.sandbox.map(|s| match s {
                SandboxFlag::Auto => Mode::Auto,
                SandboxFlag::None => Mode::None,
            }),
            host_state: self.host_state.map(|h| match h {
                HostStateFlag::Auto => HostState::Auto,
                HostStateFlag::None => HostState::None,
            }),
            default_image: self.default_image.clone(),
            // The product entry point installs tier 4 (seed step 1).
            global_default: Some(Mode::Auto),
        }
    }

    fn to_settings(&self) -> serde_json::Map<String, serde_json::Value> {
        let word = |auto: Option<bool>| auto.map(|a| if a { "auto" } else { "none" });
        let mut m = serde_json::Map::new();
        m.insert(
            "sandbox".into(),
            serde_json::json!(word(self.sandbox.map(|s| s == SandboxFlag::Auto))),
        );
        m.insert(
            "sandbox_host_state".into(),
            serde_json::json!(word(self.host_state.map(|h| h == HostStateFlag::Auto))),
        );
        m.insert(
            "sandbox_default_image".into(),
            serde_json::json!(self.default_image),
        );
        m
    }

    /// Read back what [`Self::to_settings`] wrote (unknown words: unset).
    pub(super) fn from_settings(m: &serde_json::Map<String, serde_json::Value>) -> Self {
        let word = |k: &str| m.get(k).and_then(serde_json::Value::as_str);
        Self {
            sandbox: match word("sandbox") {
                Some("auto") => Some(SandboxFlag::Auto),
                Some("none") => Some(SandboxFlag::None),
                _ => None,
            },
            host_state: match word("sandbox_host_state") {
                Some("auto") => Some(HostStateFlag::Auto),
                Some("none") => Some(HostStateFlag::None),
                _ => None,
            },
            default_image: word("sandbox_default_image").map(str::to_owned),
        }
    }
}

/// SHA-256 (hex) of a workflow source: what a resume compares.
pub(super) fn source_sha256(source: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(source.as_bytes()))
}

/// What `run` and `resume` share: the store, the drivers, the booter, the
/// live view, the signal handler, and how an outcome is printed and exits.
pub(super) struct Session {
    pub store: std::sync::Arc<dyn iterion_core::RunStore>,
    pub env: EnvSnapshot,
    pub json: bool,
    /// Human nodes may ask on the terminal (not `--no-interactive`).
    pub interactive: bool,
}

impl Session {
    pub(super) async fn execute<F, Fut>(self, go: F) -> anyhow::Result<Exit>
    where
        F: FnOnce(Engine, CancellationToken) -> Fut,
        Fut: std::future::Future<Output = Result<RunOutcome, iterion_runtime::RuntimeError>>,
    {
        let Session {
            store,
            env,
            json,
            interactive,
        } = self;
        let discovered = drivers::discover(&env).await;
        // Orphans of earlier runs (a SIGKILLed iterion) are collected at the
        // start of every run: bounded, in the background, never blocking it.
        let reap_store = store.clone();
        let reap_drivers = discovered.drivers.clone();
        let reaper = tokio::spawn(async move {
            let pass = iterion_runtime::reap::reap_once(&reap_drivers, reap_store.as_ref(), false);
            let _ = tokio::time::timeout(Duration::from_secs(30), pass).await;
        });

        let local_env: BTreeMap<String, String> = std::env::vars().collect();
        let booter = PolicyBooter::new(
            env,
            local_env,
            DriverCatalog {
                drivers: discovered.drivers,
                failure: discovered.failure,
            },
            store.clone(),
            std::env::temp_dir().join("iterion"),
        );
        let (tap, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut engine = Engine::new(store, Arc::new(booter)).with_event_tap(tap);
        if interactive && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            engine = engine.with_human(Arc::new(crate::prompt::TerminalPrompter));
        }
        let renderer = tokio::spawn(render::render_events(rx));

        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupt: cancelling the run (the sandbox is still cleaned up)");
                on_signal.cancel();
            }
        });
        // The engine (and its event tap) goes with the run, so the
        // renderer ends when the run does.
        let outcome = go(engine, cancel).await;
        let _ = renderer.await;
        let _ = tokio::time::timeout(Duration::from_secs(5), reaper).await;
        let outcome = outcome?;
        let code = outcome.failure.as_ref().map(|f| f.code.as_str());
        if json {
            let doc = serde_json::json!({
                "run_id": outcome.run_id,
                "status": outcome.status,
                "failure_code": code,
            });
            println!("{doc}");
        }
        match &outcome.failure {
            None if outcome.status == RunStatus::PausedWaitingHuman => eprintln!(
                "run {} {}: answer with `iterion resume --run-id {} --answer FIELD=VALUE`",
                outcome.run_id, outcome.status, outcome.run_id
            ),
            None => eprintln!("run {} {}", outcome.run_id, outcome.status),
            Some(f) => eprintln!(
                "run {} {} ({}): {}",
                outcome.run_id, outcome.status, f.code, f.message
            ),
        }
        // A pause is a normal stop an operator resumes (upstream exits 0).
        Ok(match outcome.status {
            RunStatus::Finished | RunStatus::PausedWaitingHuman => Exit::Success,
            _ => Exit::Failure,
        })
    }
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
