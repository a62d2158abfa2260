//! `iterion sandbox doctor` (plain and `--strict`) and `iterion sandbox reap`.
//!
//! The doctor decides nothing itself. Both reports render the sandbox
//! decision (`iterion_sandbox::decision`) that `iterion_runtime`'s
//! `SandboxHost::decide` makes for a run here — the very call a run's
//! admission makes, on the same one probe of drivers — so `doctor
//! --strict`, the pre-flight of `iterion run` and a real run cannot
//! disagree (facts §11). What only the doctor asks (is the image present,
//! can this host apply the egress rules) is asked of the driver or the
//! host and shown beside it, never fed back into a verdict.

mod plain;
mod strict;

use std::collections::BTreeMap;
use std::path::PathBuf;

use iterion_core::RunId;
use iterion_runtime::{HostDrivers, RunRequest, SandboxHost};
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv};
use iterion_sandbox::host::HostKind;
use serde::Serialize;

pub use self::strict::strict_report;
use super::launch::LaunchFlags;
use crate::cli::{DoctorArgs, ReapArgs, TargetFlag, TrustFlag};
use crate::drivers;
use crate::exit::{Exit, UserInputError};

/// Outcome of one strict check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Fine.
    Pass,
    /// Worth knowing; never changes the exit code.
    Warn,
    /// Exit 1.
    Fail,
    /// Not relevant for this target/spec.
    Skip,
    /// Needs a driver this binary/host does not have (never fails the exit code).
    Unavailable,
}

/// One row of the battery.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable check name.
    pub name: &'static str,
    /// Outcome.
    pub status: CheckStatus,
    /// Why.
    pub detail: String,
}

fn check(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// Flags of the strict battery (shared by `doctor --strict` and the run pre-flight).
#[derive(Debug, Clone, Default)]
pub struct StrictOptions {
    /// The workflow whose block to resolve.
    pub file: Option<PathBuf>,
    /// `--target`.
    pub target: Option<TargetFlag>,
    /// `--sandbox`, `--sandbox-host-state`, `--sandbox-default-image`.
    pub launch: LaunchFlags,
    /// `--trust untrusted`.
    pub untrusted: bool,
}

/// The sandbox a run of `workflow` (none: a workflow with no block and no
/// secrets) would get in this directory, decided as the run decides it.
pub(super) fn decide_here(
    host: &SandboxHost,
    workflow: Option<&iterion_dsl::ir::Workflow>,
    flags: &iterion_sandbox::precedence::SandboxFlags,
    untrusted: bool,
    target: Option<HostKind>,
) -> anyhow::Result<iterion_runtime::Decided> {
    // The run's own workspace: the current directory, resolved (cmd/run.rs).
    let cwd = std::env::current_dir()?;
    let workspace = cwd.canonicalize().unwrap_or(cwd);
    let run_id = RunId::generate();
    Ok(host.decide(&RunRequest {
        run_id: &run_id,
        sandbox: workflow.and_then(|w| w.sandbox.as_ref().map(|d| &d.spec)),
        secrets: workflow.map(|w| w.secrets.as_slice()).unwrap_or_default(),
        trust: if untrusted {
            iterion_core::Trust::Untrusted
        } else {
            iterion_core::Trust::Trusted
        },
        workspace: &workspace,
        flags,
        target,
        attachments: workflow.is_some_and(|w| !w.attachments.is_empty()),
        // The strict doctor judges the checkout itself; a run's worktree
        // does not exist before the run.
        worktree_git_dir: None,
        worktree_admin_dir: None,
    }))
}

/// `iterion sandbox doctor`.
pub async fn doctor(args: DoctorArgs) -> anyhow::Result<Exit> {
    let env = SandboxEnv::parse(&EnvSnapshot::from_process())
        .map_err(|e| UserInputError::new(e.to_string()))?;
    let drivers = drivers::probe(&env.snapshot).await;
    if !args.strict {
        return plain::doctor(&args, env, drivers).await;
    }
    let opts = StrictOptions {
        file: args.file.clone(),
        target: args.target,
        launch: LaunchFlags::of(
            args.sandbox,
            args.sandbox_host_state,
            &args.sandbox_default_image,
        ),
        untrusted: args.trust == Some(TrustFlag::Untrusted),
    };
    let report = strict_report(&opts, &env, &drivers).await?;
    let text = strict::render(&report);
    if args.json {
        eprint!("{text}");
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{text}");
    }
    Ok(if report.failed() {
        Exit::Failure
    } else {
        Exit::Success
    })
}

/// `iterion sandbox reap`: one pass of the orphan reaper over every
/// driver available here and the per-run host directories, with the one
/// fail-safe predicate.
pub async fn reap(args: ReapArgs) -> anyhow::Result<Exit> {
    let env = EnvSnapshot::from_process();
    let store = crate::stores::open_from_env().await?;
    let probed: HostDrivers = drivers::probe(&env).await;
    let found = probed.handles();
    let mut decisions = iterion_runtime::reap::reap_once(found, store.as_ref(), args.dry_run).await;
    // Then the per-run host directories (state, file secrets), with the
    // same predicate: after the engines, so a run the pass above marked
    // interrupted is already terminal here.
    let local_env: BTreeMap<String, String> = std::env::vars().collect();
    let roots = iterion_runtime::sandbox_boot::host_state_roots(
        &iterion_runtime::sandbox_boot::default_state_dir(),
        &local_env,
    );
    decisions
        .extend(iterion_runtime::reap::reap_host_dirs(&roots, store.as_ref(), args.dry_run).await);
    let failed = decisions.iter().any(|d| d.error.is_some());
    if args.json {
        let doc = serde_json::json!({
            "dry_run": args.dry_run,
            "drivers": found.iter().map(|d| d.name().as_str()).collect::<Vec<_>>(),
            "decisions": decisions.iter().map(|d| d.to_json()).collect::<Vec<_>>(),
        });
        println!("{doc}");
    } else {
        if decisions.is_empty() {
            eprintln!("no managed sandbox resources on {} driver(s)", found.len());
        }
        for d in &decisions {
            let j = d.to_json();
            // Names and run ids come from engine labels anyone with engine
            // access can set: escaped like every run-supplied string.
            let line = format!(
                "{} {} {} (run {:?}): {} — {}{}",
                j["driver"].as_str().unwrap_or(""),
                j["kind"].as_str().unwrap_or(""),
                j["name"].as_str().unwrap_or(""),
                j["run_id"].as_str().unwrap_or(""),
                j["action"].as_str().unwrap_or(""),
                j["reason"].as_str().unwrap_or(""),
                match (&d.error, args.dry_run, d.removed) {
                    (Some(e), _, _) => format!(" (error: {e})"),
                    (None, true, _) => " (dry run)".to_owned(),
                    (None, false, true) => " (removed)".to_owned(),
                    _ => String::new(),
                }
            );
            eprintln!("{}", iterion_core::display::printable(&line));
        }
    }
    Ok(if failed { Exit::Failure } else { Exit::Success })
}
