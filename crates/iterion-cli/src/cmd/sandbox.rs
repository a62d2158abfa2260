//! `iterion sandbox doctor` (plain and `--strict`) and `iterion sandbox reap`.
//!
//! The doctor decides nothing itself: precedence, host kind, driver
//! selection, spec construction and every guard come from
//! `iterion_sandbox`, so `doctor --strict`, the pre-flight of `iterion
//! run` and a real run read the same answers (facts §11).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iterion_core::{Capabilities, Driver, DriverName, HostState, Mode, Spec};
use iterion_sandbox::env::EnvSnapshot;
use iterion_sandbox::guards::{KubeCheck, check_kubernetes_spec, check_spec};
use iterion_sandbox::host::{HostKind, detect_host, select_driver};
use iterion_sandbox::precedence::{
    PrecedenceInputs, resolve_default_image, resolve_host_state, resolve_mode,
};
use iterion_sandbox::spec::{SpecInputs, build_spec, source_label};
use iterion_sandbox::verdict::{EgressVerdict, egress_verdict};
use serde::Serialize;

use crate::cli::{DoctorArgs, HostStateFlag, ReapArgs, SandboxFlag, TargetFlag, TrustFlag};
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
    /// `--sandbox`.
    pub sandbox: Option<SandboxFlag>,
    /// `--sandbox-default-image`.
    pub default_image: Option<String>,
    /// `--sandbox-host-state`.
    pub host_state: Option<HostStateFlag>,
    /// `--trust untrusted`.
    pub untrusted: bool,
}

/// The strict report (SPEC §2 JSON shape).
#[derive(Debug, Clone, Serialize)]
pub struct StrictReport {
    /// Host kind checked for.
    pub host: &'static str,
    /// Winning mode (`""` for inherit).
    pub mode: String,
    /// Which knob spoke (label only).
    pub source: String,
    /// Resolved host_state.
    pub host_state: String,
    /// Which knob spoke for host_state.
    pub host_state_source: String,
    /// Selected driver (`noop` for an inactive mode), or null.
    pub driver: Option<String>,
    /// Image the run would use (`build` for a build recipe), or null.
    pub image: Option<String>,
    /// Runtimes on PATH.
    pub runtimes: Vec<String>,
    /// Drivers that constructed.
    pub available_drivers: Vec<String>,
    /// Capabilities of the selected driver.
    pub capabilities: Option<Capabilities>,
    /// The battery.
    pub checks: Vec<Check>,
}

impl StrictReport {
    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == CheckStatus::Fail)
    }
}

/// `iterion sandbox doctor`.
pub async fn doctor(args: DoctorArgs) -> anyhow::Result<Exit> {
    let env = EnvSnapshot::from_process();
    if !args.strict {
        return plain_doctor(&args, &env).await;
    }
    let opts = StrictOptions {
        file: args.file.clone(),
        target: args.target,
        sandbox: args.sandbox,
        default_image: args.sandbox_default_image.clone(),
        host_state: args.sandbox_host_state,
        untrusted: args.trust == Some(TrustFlag::Untrusted),
    };
    let report = strict_report(&opts, &env).await?;
    let text = render_strict(&report);
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
}

/// Who a sandbox would run as here and why, and what protects the host's
/// files from it (issue 19 item 4): the decision a run in this directory
/// gets from `iterion_sandbox::identity`, with the selected engine's uid
/// mapping.
#[derive(Debug, Serialize)]
struct IdentityPosture {
    /// `identity`, `userns-remap` or `rootless`.
    uid_mapping: &'static str,
    /// `uid:gid` the sandbox runs as, or null for the image's own user.
    sandbox_user: Option<String>,
    /// Why.
    reason: String,
    /// What keeps host-root files off the binds.
    protection: &'static str,
    /// The guard the run gets (`unneeded`, `non_root_user`,
    /// `root_seccomp`), as `sandbox_started.limits.host_root_guard` says.
    guard: &'static str,
    /// Whether that user can write this directory (the workspace).
    workspace_writable: bool,
}

impl IdentityPosture {
    /// The decision for a run in `workspace` with `spec_user`, on `driver`.
    async fn of(
        driver: &Arc<dyn Driver>,
        spec_user: Option<&str>,
        host_state_auto: bool,
        workspace: &Path,
    ) -> Result<Self, iterion_sandbox::guards::GuardViolation> {
        use iterion_sandbox::identity::{IdentityInputs, decide_identity};
        use std::os::unix::fs::MetadataExt;
        let mapping = driver.host_footprint().await.uid_mapping;
        let binds = driver.capabilities().host_bind_mounts;
        let me = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let ws = std::fs::metadata(workspace).ok();
        let decision = decide_identity(&IdentityInputs {
            spec_user,
            invoker: me,
            workspace_owner: ws.as_ref().map(|m| (m.uid(), m.gid())),
            mapping,
            // The workspace bind is writable wherever binds exist.
            writable_host_binds: binds,
            host_state_auto,
        })?;
        let reason = decision
            .events
            .iter()
            .find_map(|e| match e {
                iterion_core::EventKind::SandboxUserRemap { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_else(|| decision.reason.to_owned());
        let protection = iterion_sandbox::identity::protection(decision.guard, binds);
        let uid = decision
            .user
            .as_deref()
            .and_then(|u| u.split(':').next())
            .and_then(|u| u.parse::<u32>().ok());
        let workspace_writable = match (ws, uid) {
            (Some(m), Some(uid)) => m.uid() == uid || m.mode() & 0o002 != 0,
            (Some(_), None) => true,
            (None, _) => false,
        };
        Ok(Self {
            uid_mapping: mapping.as_str(),
            sandbox_user: decision.user,
            reason,
            protection,
            guard: decision.guard.as_str(),
            workspace_writable,
        })
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

async fn plain_doctor(args: &DoctorArgs, env: &EnvSnapshot) -> anyhow::Result<Exit> {
    let argv0 = std::env::args().next();
    let host = detect_host(env, argv0.as_deref());
    let all = drivers::available_drivers(env).await;
    let probes = drivers::probe_drivers(host, &all).await;
    let mut available: Vec<String> = probes
        .iter()
        .filter(|p| p.unavailable.is_none())
        .map(|p| p.driver.as_str().to_owned())
        .collect();
    available.sort();
    let (selected, driver_error, caps) = match select_driver(host, Mode::Auto, &probes) {
        Ok(name) => (
            name.as_str().to_owned(),
            None,
            driver_named(&all, name).map(|d| d.capabilities()),
        ),
        Err(e) => ("noop".to_owned(), Some(e.to_string()), None),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let host_identity = match select_driver(host, Mode::Auto, &probes)
        .ok()
        .and_then(|n| driver_named(&all, n))
    {
        Some(d) => IdentityPosture::of(d, None, false, &cwd).await.ok(),
        None => None,
    };
    let note = (selected == "noop").then(|| {
        let mut n = "no container driver: auto runs degrade to the host with sandbox_skipped; inline runs are refused and park with SANDBOX_DRIVER_UNAVAILABLE".to_owned();
        if host == HostKind::Cloud {
            n.push_str("; on a cloud host, check the in-cluster kubectl/service-account");
        }
        n
    });
    let report = PlainReport {
        host: host.as_str(),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        container_runtime: drivers::runtimes_on_path(),
        sandbox_default: env
            .sandbox_default
            .clone()
            .unwrap_or_else(|| "<unset>".to_owned()),
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
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
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
        if let Some(e) = &report.driver_error {
            println!("driver_error:      {e}");
        }
        if let Some(n) = &report.note {
            println!("note:              {n}");
        }
    }
    Ok(Exit::Success)
}

fn driver_named(all: &[Arc<dyn Driver>], name: DriverName) -> Option<&Arc<dyn Driver>> {
    all.iter().find(|d| d.name() == name)
}

/// Resolve the exact spec a run would use and run the battery of facts
/// §11.2. A bad file or flag is a [`UserInputError`] (exit 2).
pub async fn strict_report(
    opts: &StrictOptions,
    env: &EnvSnapshot,
) -> anyhow::Result<StrictReport> {
    let workflow = match &opts.file {
        Some(path) => read_workflow_sandbox(path)?,
        None => None,
    };
    let inputs = PrecedenceInputs {
        cli_sandbox: opts.sandbox.map(|s| match s {
            SandboxFlag::Auto => Mode::Auto,
            SandboxFlag::None => Mode::None,
        }),
        cli_host_state: opts.host_state.map(|h| match h {
            HostStateFlag::Auto => HostState::Auto,
            HostStateFlag::None => HostState::None,
        }),
        cli_default_image: opts.default_image.clone(),
        env: env.clone(),
        workflow: workflow.as_ref(),
        // The `iterion` binary is a product entry point: it installs tier 4.
        global_default: Some(iterion_sandbox::precedence::PRODUCT_GLOBAL_DEFAULT),
    };
    let resolved = resolve_mode(&inputs).map_err(|e| UserInputError::new(e.to_string()))?;
    let (host_state, host_state_source) =
        resolve_host_state(&inputs).map_err(|e| UserInputError::new(e.to_string()))?;
    let (default_image, _) = resolve_default_image(&inputs);
    let argv0 = std::env::args().next();
    let detected = detect_host(env, argv0.as_deref());
    let host = match opts.target {
        None | Some(TargetFlag::Auto) => detected,
        Some(TargetFlag::Local) => HostKind::Local,
        Some(TargetFlag::Cloud) => HostKind::Cloud,
    };
    let cross_host = host != detected;
    let all = drivers::available_drivers(env).await;
    let probes = drivers::probe_drivers(host, &all).await;
    let mut available: Vec<String> = probes
        .iter()
        .filter(|p| p.unavailable.is_none())
        .map(|p| p.driver.as_str().to_owned())
        .collect();
    available.sort();
    let selection = select_driver(host, resolved.mode, &probes);
    let selected = selection.as_ref().ok().and_then(|n| driver_named(&all, *n));
    let mut checks = Vec::new();
    let active = resolved.mode.is_active();

    // driver available
    checks.push(match (&selection, active) {
        (_, false) => check(
            "driver available",
            CheckStatus::Pass,
            format!(
                "mode {:?}: no sandbox, no driver needed",
                resolved.mode.as_str()
            ),
        ),
        (Ok(d), true) => check("driver available", CheckStatus::Pass, format!("{d}")),
        (Err(e), true) if cross_host => check(
            "driver available",
            CheckStatus::Warn,
            format!("{e} (cross-host --target)"),
        ),
        (Err(e), true) => check(
            "driver available",
            CheckStatus::Fail,
            format!(
                "{e}; {}",
                if resolved.mode == Mode::Auto {
                    "auto runs would degrade to the host"
                } else {
                    "inline runs would be refused (SANDBOX_DRIVER_UNAVAILABLE)"
                }
            ),
        ),
    });

    // spec valid (+ construction, devcontainer fusion)
    let repo_root = std::env::current_dir().ok();
    let workspace = repo_root
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut spec: Option<Spec> = None;
    let mut label = resolved.source.to_string();
    if active {
        let dc = match (resolved.mode, &repo_root) {
            (Mode::Auto, Some(root)) => iterion_sandbox::devcontainer::read_repo_devcontainer(root),
            _ => Ok(None),
        };
        match dc {
            Err(e) => checks.push(check("spec valid", CheckStatus::Fail, e.to_string())),
            Ok(dc) => {
                let path = dc.as_ref().map(|(p, _)| p.to_string_lossy().into_owned());
                let built = build_spec(&SpecInputs {
                    mode: resolved.mode,
                    workflow: workflow.as_ref(),
                    devcontainer: match (&path, &dc) {
                        (Some(p), Some((_, d))) => Some((p.as_str(), d)),
                        _ => None,
                    },
                    default_image: &default_image,
                    operator_env: BTreeMap::new(),
                    run_id: "doctor",
                    local_env: local_env_snapshot(),
                    workspace: &workspace,
                });
                match built {
                    Ok(b) => {
                        label = source_label(&label, &b.origin);
                        checks.push(check("spec valid", CheckStatus::Pass, "ok"));
                        spec = Some(b.spec);
                    }
                    Err(e) => checks.push(check("spec valid", CheckStatus::Fail, e.to_string())),
                }
            }
        }
    } else {
        checks.push(check("spec valid", CheckStatus::Skip, "no active sandbox"));
    }
    let spec_for_checks = spec.clone().or_else(|| workflow.clone());

    // docker daemon
    let docker =
        driver_named(&all, DriverName::Docker).or_else(|| driver_named(&all, DriverName::Podman));
    checks.push(match (host, docker) {
        (HostKind::Cloud, _) => check("docker daemon", CheckStatus::Skip, "cloud target"),
        (_, None) => check(
            "docker daemon",
            CheckStatus::Unavailable,
            "no docker/podman driver in this build",
        ),
        (_, Some(d)) => match d.ping().await {
            Ok(info) => check(
                "docker daemon",
                CheckStatus::Pass,
                format!("{} {} at {}", info.driver, info.version, info.endpoint),
            ),
            Err(e) => check(
                "docker daemon",
                if active {
                    CheckStatus::Fail
                } else {
                    CheckStatus::Warn
                },
                e.to_string(),
            ),
        },
    });

    // spec safety
    checks.push(match &spec_for_checks {
        None => check("spec safety", CheckStatus::Skip, "no sandbox spec"),
        Some(s) => match check_spec(s) {
            Ok(()) => check(
                "spec safety",
                CheckStatus::Pass,
                "mounts, image, user, workdir and env pass the guards",
            ),
            Err(e) => check("spec safety", CheckStatus::Fail, e.to_string()),
        },
    });

    // host binds: the run's own verdicts (issue 19 item 1)
    checks.push(match &spec_for_checks {
        None => check("host binds", CheckStatus::Skip, "no sandbox spec"),
        Some(s) => host_binds_check(s, &workspace, opts.untrusted, selected).await,
    });

    // host identity: who the run would run as (issue 19 item 4)
    checks.push(match (&spec, selected) {
        (None, _) => check("host identity", CheckStatus::Skip, "no active sandbox"),
        (Some(_), None) => check(
            "host identity",
            CheckStatus::Unavailable,
            "no driver selected",
        ),
        (Some(s), Some(d)) => {
            let ws = PathBuf::from(&workspace);
            match IdentityPosture::of(d, s.user.as_deref(), host_state == HostState::Auto, &ws)
                .await
            {
                Err(e) => check("host identity", CheckStatus::Fail, e.to_string()),
                Ok(p) => {
                    let detail = format!(
                        "runs as {} ({}); {}",
                        p.sandbox_user.as_deref().unwrap_or("the image's user"),
                        p.reason,
                        p.protection
                    );
                    if p.workspace_writable {
                        check("host identity", CheckStatus::Pass, detail)
                    } else {
                        check(
                            "host identity",
                            CheckStatus::Warn,
                            format!("{detail}; the workspace is read-only to that user"),
                        )
                    }
                }
            }
        }
    });

    // image resolvable
    let image = spec_for_checks.as_ref().and_then(|s| {
        s.image
            .clone()
            .or_else(|| s.build.as_ref().map(|_| "build".to_owned()))
    });
    checks.push(match (&spec, selected) {
        (None, _) if active => check("image resolvable", CheckStatus::Skip, "spec invalid"),
        (None, _) => check("image resolvable", CheckStatus::Skip, "no active sandbox"),
        (Some(s), _) if s.image.is_none() => {
            check("image resolvable", CheckStatus::Skip, "built from build:")
        }
        (Some(_), None) => check(
            "image resolvable",
            CheckStatus::Unavailable,
            "no driver to ask",
        ),
        (Some(s), Some(d)) => {
            let img = s.image.clone().unwrap_or_default();
            match d.image_present(&img).await {
                Ok(true) => check(
                    "image resolvable",
                    CheckStatus::Pass,
                    format!("{img} present locally"),
                ),
                Ok(false) => check(
                    "image resolvable",
                    CheckStatus::Fail,
                    format!("{img} not found (no pull is attempted)"),
                ),
                Err(e) => check("image resolvable", CheckStatus::Warn, e.to_string()),
            }
        }
    });

    // k8s spec compatible + k8s context
    if host == HostKind::Cloud {
        checks.push(match &spec {
            None => check(
                "k8s spec compatible",
                CheckStatus::Skip,
                "no active sandbox",
            ),
            Some(s) => {
                let mut s = s.clone();
                s.host_state = Some(host_state);
                match check_kubernetes_spec(&s, KubeCheck::Doctor) {
                    Ok(user) => check(
                        "k8s spec compatible",
                        CheckStatus::Pass,
                        format!("runs as {user}"),
                    ),
                    Err(e) => check("k8s spec compatible", CheckStatus::Fail, e.to_string()),
                }
            }
        });
        checks.push(match driver_named(&all, DriverName::Kubernetes) {
            None => check(
                "k8s context",
                CheckStatus::Unavailable,
                "no kubernetes driver in this build",
            ),
            Some(d) => match d.ping().await {
                Ok(info) => check("k8s context", CheckStatus::Pass, info.endpoint),
                Err(e) if env.kubernetes_service_host.is_some() => {
                    check("k8s context", CheckStatus::Fail, e.to_string())
                }
                Err(e) => check("k8s context", CheckStatus::Warn, e.to_string()),
            },
        });
    } else {
        checks.push(check(
            "k8s spec compatible",
            CheckStatus::Skip,
            "not a cloud target",
        ));
        checks.push(check(
            "k8s context",
            CheckStatus::Skip,
            "not a cloud target",
        ));
    }

    // network allowlist syntax
    checks.push(
        match spec_for_checks.as_ref().and_then(|s| s.network.as_ref()) {
            None => check(
                "network allowlist syntax",
                CheckStatus::Pass,
                "no network: block (open, no proxy)",
            ),
            // The rules were parsed with the workflow (a bad one is C313 and
            // never reaches here); what remains is the proxy's own compile.
            Some(net) => match iterion_netproxy::Policy::compile(net) {
                Ok(_) => check(
                    "network allowlist syntax",
                    CheckStatus::Pass,
                    format!("{} rule(s) compile", net.rules.len()),
                ),
                Err(e) => check("network allowlist syntax", CheckStatus::Fail, e.to_string()),
            },
        },
    );

    // driver capabilities
    checks.push(match (&spec, selected) {
        (None, _) => check(
            "driver capabilities",
            CheckStatus::Skip,
            "no active sandbox",
        ),
        (Some(_), None) => check(
            "driver capabilities",
            CheckStatus::Unavailable,
            "no driver selected",
        ),
        (Some(s), Some(d)) => {
            let c = d.capabilities();
            let mut missing = Vec::new();
            if s.build.is_some() && !c.build {
                missing.push("build");
            }
            if !s.mounts.is_empty() && !c.mounts {
                missing.push("mounts");
            }
            if s.user.is_some() && !c.remote_user {
                missing.push("user");
            }
            if s.post_create.is_some() && !c.post_create {
                missing.push("post_create");
            }
            if !s.read_back.is_empty() && !c.can_serve_read_back() {
                missing.push("read_back");
            }
            // The booter's own verdict (iterion_sandbox::verdict::egress_verdict).
            let needs_proxy = iterion_netproxy::Policy::from_spec(s.network.as_ref())
                .is_ok_and(|p| p.needs_proxy());
            let egress = egress_verdict(s.mode, needs_proxy, d.name(), c.egress_enforcement);
            if matches!(egress, EgressVerdict::Refused { .. }) {
                missing.push("egress enforcement");
            }
            if missing.is_empty() && matches!(egress, EgressVerdict::Advisory { .. }) {
                check(
                    "driver capabilities",
                    CheckStatus::Warn,
                    format!(
                        "{} cannot confine egress: the run gets an advisory proxy and a sandbox_egress_unenforced event",
                        d.name()
                    ),
                )
            } else if missing.is_empty() {
                check(
                    "driver capabilities",
                    CheckStatus::Pass,
                    format!("{} supports the spec", d.name()),
                )
            } else {
                check(
                    "driver capabilities",
                    CheckStatus::Fail,
                    format!("{} lacks {}", d.name(), missing.join(", ")),
                )
            }
        }
    });

    // egress confinement: each protection a confined run needs, and why a
    // host that cannot apply one fails (inline) or warns (auto).
    checks.push(egress_confinement_check(spec.as_ref(), selected).await);

    Ok(StrictReport {
        host: host.as_str(),
        mode: resolved.mode.as_str().to_owned(),
        source: label,
        host_state: host_state.as_str().to_owned(),
        host_state_source: host_state_source.as_str().to_owned(),
        driver: selection.as_ref().ok().map(|d| d.as_str().to_owned()),
        image,
        runtimes: drivers::runtimes_on_path(),
        available_drivers: available,
        capabilities: selected.map(|d| d.capabilities()),
        checks,
    })
}

/// The workspace and every declared bind judged exactly as a run judges
/// them (`iterion_sandbox::binds`, with the same settings), including
/// whether the run store would be masked.
async fn host_binds_check(
    spec: &Spec,
    workspace: &str,
    untrusted: bool,
    selected: Option<&Arc<dyn Driver>>,
) -> Check {
    use iterion_core::{LaunchPlan, Mount, MountKind, MountOrigin};
    use iterion_sandbox::binds::{BindScope, resolve_plan_binds, run_settings};
    // The selected engine's paths, as the run's booter asks them.
    let engine_paths = match selected {
        Some(d) => d.host_footprint().await.paths,
        None => Vec::new(),
    };
    let settings = run_settings(
        |k| std::env::var(k).ok(),
        engine_paths,
        crate::stores::store_dir().as_deref(),
        &iterion_runtime::sandbox_boot::private_state_dirs(
            &iterion_runtime::sandbox_boot::default_state_dir(),
            &std::env::vars().collect(),
        ),
    );
    let mut plan = LaunchPlan::default();
    plan.mounts.push(Mount {
        kind: MountKind::Bind,
        source: Some(workspace.to_owned()),
        target: workspace.to_owned(),
        readonly: false,
        size: None,
        origin: MountOrigin::Workspace,
    });
    for raw in &spec.mounts {
        match iterion_sandbox::guards::parse_docker_mount(raw) {
            Ok(m) if m.kind == MountKind::Bind => plan.mounts.push(m),
            Ok(_) => {}
            Err(e) => return check("host binds", CheckStatus::Fail, e.to_string()),
        }
    }
    let declared = plan.mounts.len() - 1;
    let real_ws = std::fs::canonicalize(workspace)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| workspace.to_owned());
    let scope = BindScope {
        workspace: Some(&real_ws),
        untrusted,
    };
    // A placeholder mask: the doctor only reports that one would be laid.
    match resolve_plan_binds(&mut plan, &settings, &scope, Some("/")) {
        Err(e) => check("host binds", CheckStatus::Fail, e.to_string()),
        Ok(()) => {
            let masked: Vec<&str> = plan
                .mounts
                .iter()
                .filter(|m| m.origin == MountOrigin::Mask)
                .map(|m| m.target.as_str())
                .collect();
            let mut detail = format!(
                "workspace {real_ws} and {declared} declared bind(s) pass the real-path judge{}",
                if untrusted {
                    " (untrusted: workspace only)"
                } else {
                    ""
                }
            );
            if !masked.is_empty() {
                detail.push_str(&format!("; masked from the sandbox: {}", masked.join(", ")));
            }
            check("host binds", CheckStatus::Pass, detail)
        }
    }
}

/// The strict row for issue 19's egress protections, from the booter's own
/// verdict (`egress_verdict`) and the host's probe.
async fn egress_confinement_check(
    spec: Option<&Spec>,
    selected: Option<&Arc<dyn Driver>>,
) -> Check {
    const NAME: &str = "egress confinement";
    let Some(s) = spec else {
        return check(NAME, CheckStatus::Skip, "no active sandbox");
    };
    let needs_proxy =
        iterion_netproxy::Policy::from_spec(s.network.as_ref()).is_ok_and(|p| p.needs_proxy());
    if !needs_proxy {
        return check(
            NAME,
            CheckStatus::Skip,
            "open network: no proxy, nothing to confine",
        );
    }
    let Some(d) = selected else {
        return check(NAME, CheckStatus::Unavailable, "no driver selected");
    };
    let caps = d.capabilities();
    let p = drivers::egress_protections().await;
    let protections = format!(
        "{}; IPv6: {}; capabilities: {} only; proxy on {}, at most {} connections",
        p.firewall.detail,
        p.ipv6.detail,
        iterion_driver_docker::SANDBOX_CAPABILITIES.join(", "),
        p.proxy_bind,
        p.proxy_max_connections
    );
    let why = if p.firewall.applied {
        "enforcement is off (ITERION_SANDBOX_EGRESS_ENFORCE=off) or the engine is remote".to_owned()
    } else {
        p.firewall.detail.clone()
    };
    match egress_verdict(s.mode, true, d.name(), caps.egress_enforcement) {
        EgressVerdict::Enforced => check(NAME, CheckStatus::Pass, protections),
        EgressVerdict::Refused { reason } => {
            check(NAME, CheckStatus::Fail, format!("{reason}: {why}"))
        }
        EgressVerdict::Advisory { .. } => check(
            NAME,
            CheckStatus::Warn,
            format!("advisory proxy only (sandbox_egress_unenforced): {why}"),
        ),
        EgressVerdict::Open => check(NAME, CheckStatus::Skip, "open network"),
    }
}

/// The host variables `${localEnv:…}` may read, and nothing else.
fn local_env_snapshot() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| iterion_core::hostvars::local_env_allowed(k))
        .collect()
}

fn render_strict(r: &StrictReport) -> String {
    let mut out = String::new();
    out.push_str(&format!("host:       {}\n", r.host));
    out.push_str(&format!("mode:       {:?} ({})\n", r.mode, r.source));
    out.push_str(&format!(
        "host_state: {} ({})\n",
        r.host_state, r.host_state_source
    ));
    out.push_str(&format!(
        "driver:     {}\n",
        r.driver.as_deref().unwrap_or("<none>")
    ));
    out.push_str(&format!(
        "image:      {}\n",
        r.image.as_deref().unwrap_or("<none>")
    ));
    for c in &r.checks {
        let tag = match c.status {
            CheckStatus::Pass => "PASS",
            CheckStatus::Warn => "WARN",
            CheckStatus::Fail => "FAIL",
            CheckStatus::Skip => "SKIP",
            CheckStatus::Unavailable => "N/A ",
        };
        out.push_str(&format!("[{tag}] {}: {}\n", c.name, c.detail));
    }
    out
}

/// The workflow-level `sandbox:` block of a `.iter` file, compiled by the
/// DSL; an unreadable or invalid file is a [`UserInputError`] (exit 2).
fn read_workflow_sandbox(path: &Path) -> anyhow::Result<Option<Spec>> {
    let (_, workflow) = crate::workflow::load_workflow(path)?;
    Ok(workflow.sandbox.map(|decl| decl.spec))
}

/// `iterion sandbox reap`: one pass of the orphan reaper over every
/// driver available here and the per-run host directories, with the one
/// fail-safe predicate.
pub async fn reap(args: ReapArgs) -> anyhow::Result<Exit> {
    let env = EnvSnapshot::from_process();
    let store = crate::stores::open_from_env().await?;
    let found = drivers::available_drivers(&env).await;
    let mut decisions =
        iterion_runtime::reap::reap_once(&found, store.as_ref(), args.dry_run).await;
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
