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

mod decide;
mod plain;
mod strict;

use std::collections::BTreeMap;

use iterion_runtime::HostDrivers;
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv};

pub(super) use self::decide::decide_here;
pub use self::strict::{CheckStatus, StrictOptions, strict_report};
use super::launch::LaunchFlags;
use crate::cli::{DoctorArgs, ReapArgs, TrustFlag};
use crate::drivers;
use crate::exit::{Exit, UserInputError};

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
