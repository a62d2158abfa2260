//! `iterion sandbox doctor` without `--strict`: what this host offers an
//! `auto` run in this directory (facts §11.1), rendered from the one probe
//! and the decision such a run gets, plus the host's containment and
//! egress protections.

use iterion_core::{Capabilities, EventKind, Mode};
use iterion_runtime::HostDrivers;
use iterion_sandbox::decision::IdentityOutcome;
use iterion_sandbox::env::SandboxEnv;
use iterion_sandbox::host::HostKind;
use iterion_sandbox::precedence::SandboxFlags;
use serde::Serialize;

use crate::cli::DoctorArgs;
use crate::drivers;
use crate::exit::Exit;

#[derive(Debug, Serialize)]
struct PlainReport {
    host: &'static str,
    os: &'static str,
    arch: &'static str,
    container_runtime: Vec<String>,
    sandbox_default: String,
    selected_driver: String,
    available_drivers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    egress: Option<EgressReport>,
    capabilities: Option<Capabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    containment: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_identity: Option<IdentityPosture>,
    runner: RunnerReport,
}

/// The `iterion` a sandboxed agent would run inside the container (issue
/// 32 item 2): the lookup's answer, or every file it examined and the fix.
#[derive(Debug, Serialize)]
struct RunnerReport {
    /// The static binary found.
    binary: Option<String>,
    /// Where it came from (`ITERION_BIN`, the running iterion, installed).
    source: Option<&'static str>,
    /// Why none serves: a sandboxed run with agents is refused at
    /// admission with `SANDBOX_RUNNER_UNAVAILABLE`.
    problem: Option<String>,
}

impl RunnerReport {
    fn here() -> Self {
        use iterion_agent::runner::{RunnerLookup, find_runner};
        let lookup = find_runner(
            &iterion_agent::EnvSnapshot::from_process(),
            std::env::current_exe().ok().as_deref(),
        );
        match &lookup {
            RunnerLookup::Found { path, source } => Self {
                binary: Some(path.display().to_string()),
                source: Some(source.as_str()),
                problem: None,
            },
            _ => Self {
                binary: None,
                source: None,
                problem: lookup.problem(),
            },
        }
    }
}

/// Who a sandbox would run as here and why, and what protects the host's
/// files from it (issue 19 item 4): the identity of the decision an `auto`
/// run in this directory gets, with the selected engine's uid mapping.
#[derive(Debug, Serialize)]
pub(super) struct IdentityPosture {
    /// `identity`, `userns-remap` or `rootless`.
    uid_mapping: &'static str,
    /// `uid:gid` the sandbox runs as, or null for the image's own user.
    pub sandbox_user: Option<String>,
    /// Why.
    pub reason: String,
    /// What keeps host-root files off the binds.
    pub protection: &'static str,
    /// The guard the run gets (`unneeded`, `non_root_user`,
    /// `root_seccomp`), as `sandbox_started.limits.host_root_guard` says.
    guard: &'static str,
    /// Whether that user can write this directory (the workspace).
    pub workspace_writable: bool,
}

impl IdentityPosture {
    /// The decision's identity, shown; `binds`: whether the driver binds
    /// host paths at all.
    pub(super) fn of(
        outcome: &IdentityOutcome,
        mapping: iterion_core::driver::UidMapping,
        binds: bool,
    ) -> Self {
        let d = &outcome.decision;
        let reason = d
            .events
            .iter()
            .find_map(|e| match e {
                EventKind::SandboxUserRemap { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_else(|| d.reason.to_owned());
        Self {
            uid_mapping: mapping.as_str(),
            sandbox_user: d.user.clone(),
            reason,
            protection: iterion_sandbox::identity::protection(d.guard, binds),
            guard: d.guard.as_str(),
            workspace_writable: outcome.workspace_writable,
        }
    }
}

/// Whether the selected driver can confine a sandbox to the egress proxy,
/// and what a non-open `network:` block does when it cannot (SPEC §4: a
/// driver that cannot enforce says so, never fails open silently).
#[derive(Debug, Serialize)]
struct EgressReport {
    enforced: bool,
    detail: &'static str,
    protections: drivers::EgressProtections,
}

impl EgressReport {
    fn of(caps: &Capabilities, protections: drivers::EgressProtections) -> Self {
        Self {
            protections,
            enforced: caps.egress_enforcement,
            detail: match caps.egress_enforcement {
                true => {
                    "a non-open network: block confines the sandbox to a network whose only reachable address is the egress proxy"
                }
                false => {
                    "cannot confine egress: inline runs with a non-open network: block are refused (SANDBOX_SPEC_REFUSED); auto runs get an advisory proxy and a sandbox_egress_unenforced event"
                }
            },
        }
    }
}

pub(super) async fn doctor(
    args: &DoctorArgs,
    env: SandboxEnv,
    drivers: HostDrivers,
) -> anyhow::Result<Exit> {
    let sandbox_default = env
        .snapshot
        .sandbox_default
        .clone()
        .unwrap_or_else(|| "<unset>".to_owned());
    let host = super::super::launch::sandbox_host(env, drivers.clone(), None);
    // The host's answer for an `auto` run here, whatever the environment's
    // default says (facts §11.1: the driver selection of the factory).
    let flags = SandboxFlags {
        sandbox: Some(Mode::Auto),
        ..super::LaunchFlags::default().sandbox_flags()
    };
    let decided = super::decide::decide_here(&host, None, &flags, false, None)?;
    let d = &decided.decision;
    let available = drivers.ready_names();
    let offer = d
        .selection
        .as_ref()
        .ok()
        .and_then(|n| drivers.offers().iter().find(|o| o.driver == *n));
    let (selected, driver_error) = match &d.selection {
        Ok(name) => (name.as_str().to_owned(), None),
        Err(e) => ("noop".to_owned(), Some(e.to_string())),
    };
    let caps = offer.map(|o| o.capabilities);
    let host_identity = match (&d.identity, offer) {
        (Some(Ok(outcome)), Some(o)) => Some(IdentityPosture::of(
            outcome,
            o.footprint.uid_mapping,
            o.capabilities.host_bind_mounts,
        )),
        _ => None,
    };
    let note = (selected == "noop").then(|| {
        let mut n = "no container driver: auto runs degrade to the host with sandbox_skipped; inline runs are refused and park with SANDBOX_DRIVER_UNAVAILABLE".to_owned();
        if d.host == HostKind::Cloud {
            n.push_str("; on a cloud host, check the in-cluster kubectl/service-account");
        }
        n
    });
    let report = PlainReport {
        host: d.host.as_str(),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        container_runtime: drivers::runtimes_on_path(),
        sandbox_default,
        selected_driver: selected,
        available_drivers: available,
        egress: match &caps {
            Some(c) => Some(EgressReport::of(c, drivers::egress_protections().await)),
            None => None,
        },
        capabilities: caps,
        driver_error,
        note,
        containment: {
            let mut c = drivers::containment();
            if let Some(obj) = c.as_object_mut() {
                obj.insert(
                    "writable_layer_enforced".to_owned(),
                    drivers::writable_layer_report().await,
                );
            }
            c
        },
        host_identity,
        runner: RunnerReport::here(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report)?;
    }
    Ok(Exit::Success)
}

fn print_human(report: &PlainReport) -> anyhow::Result<()> {
    println!("host:              {}", report.host);
    println!("os/arch:           {}/{}", report.os, report.arch);
    println!(
        "container_runtime: {}",
        if report.container_runtime.is_empty() {
            "<none>".to_owned()
        } else {
            report.container_runtime.join(", ")
        }
    );
    println!("sandbox_default:   {}", report.sandbox_default);
    println!("selected_driver:   {}", report.selected_driver);
    println!("available_drivers: {}", report.available_drivers.join(", "));
    if let Some(e) = &report.egress {
        let state = if e.enforced {
            "enforced"
        } else {
            "NOT enforced"
        };
        println!("egress:            {state} ({})", e.detail);
        let p = &e.protections;
        let state = |applied: bool| if applied { "applied" } else { "NOT APPLIED" };
        println!(
            "  firewall:        {} ({})",
            state(p.firewall.applied),
            p.firewall.detail
        );
        println!(
            "  ipv6:            {} ({})",
            state(p.ipv6.applied),
            p.ipv6.detail
        );
        println!("  proxy bind:      {}", p.proxy_bind);
        println!(
            "  proxy cap:       {} concurrent connections per run",
            p.proxy_max_connections
        );
    }
    if let Some(c) = &report.capabilities {
        println!("capabilities:      {}", serde_json::to_string(c)?);
    }
    println!("containment:       {}", report.containment);
    if let Some(p) = &report.host_identity {
        println!(
            "host_identity:     runs as {} ({}); {}; uid mapping {}; workspace {}",
            p.sandbox_user.as_deref().unwrap_or("the image's user"),
            p.reason,
            p.protection,
            p.uid_mapping,
            if p.workspace_writable {
                "writable"
            } else {
                "read-only to the sandbox"
            }
        );
    }
    match (&report.runner.binary, &report.runner.problem) {
        (Some(bin), _) => println!(
            "runner:            {bin} (statically linked; {})",
            report.runner.source.unwrap_or_default()
        ),
        (None, Some(problem)) => println!(
            "runner:            NONE: sandboxed agent runs are refused (SANDBOX_RUNNER_UNAVAILABLE): {}",
            iterion_core::display::printable(problem)
        ),
        (None, None) => {}
    }
    if let Some(e) = &report.driver_error {
        println!("driver_error:      {e}");
    }
    if let Some(n) = &report.note {
        println!("note:              {n}");
    }
    Ok(())
}
