//! `iterion sandbox doctor --strict` and the `ITERION_SANDBOX_PREFLIGHT`
//! pre-flight: the battery of facts §11.2 rendered from the decision a run
//! of the workflow here would get ([`strict_report`]), its rows ([`Check`])
//! and its knobs ([`StrictOptions`]). Each row reads one
//! step of the decision (driver selection, the fused spec, the host binds,
//! the identity, the egress verdict, the capability gaps, the verdict);
//! the rows only the doctor has (the engine's version, the image present
//! without a pull, the Kubernetes checks, the host's egress protections)
//! ask the driver or the host and decide nothing.

use std::path::PathBuf;

use iterion_core::{DriverName, Mode, Spec};
use iterion_runtime::HostDrivers;
use iterion_sandbox::decision::{SandboxDecision, Verdict};
use iterion_sandbox::env::SandboxEnv;
use iterion_sandbox::guards::{KubeCheck, check_kubernetes_spec, check_spec};
use iterion_sandbox::host::HostKind;
use iterion_sandbox::verdict::EgressVerdict;
use serde::Serialize;

use super::decide::decide_here;
use super::plain::IdentityPosture;
use crate::cli::TargetFlag;
use crate::cmd::launch::LaunchFlags;
use crate::drivers;

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

/// The decision's verdict, as the JSON report writes it.
#[derive(Debug, Clone, Serialize)]
pub struct VerdictReport {
    /// `sandbox`, `host`, `degraded`, `refused` or `denied`.
    pub kind: &'static str,
    /// The failure code a refused run ends with, or the admission code of
    /// a denied one.
    pub code: Option<String>,
    /// Why it is refused or denied, or why it runs on the host.
    pub reason: Option<String>,
}

/// The strict report (SPEC §2 JSON shape, plus the decision's verdict).
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
    /// Drivers that are ready.
    pub available_drivers: Vec<String>,
    /// Capabilities of the selected driver.
    pub capabilities: Option<iterion_core::Capabilities>,
    /// What the run would do: the decision's verdict.
    pub verdict: VerdictReport,
    /// The battery.
    pub checks: Vec<Check>,
}

impl StrictReport {
    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == CheckStatus::Fail)
    }
}

/// Decide the run the options describe, exactly as a run decides it, and
/// render the battery of facts §11.2. A bad file or flag is a
/// [`crate::exit::UserInputError`] (exit 2).
pub async fn strict_report(
    opts: &StrictOptions,
    env: &SandboxEnv,
    drivers: &HostDrivers,
) -> anyhow::Result<StrictReport> {
    let workflow = match &opts.file {
        Some(path) => Some(crate::workflow::load_workflow(path)?.1),
        None => None,
    };
    let host = super::super::launch::sandbox_host(env.clone(), drivers.clone(), workflow.as_ref());
    let target = match opts.target {
        None | Some(TargetFlag::Auto) => None,
        Some(TargetFlag::Local) => Some(HostKind::Local),
        Some(TargetFlag::Cloud) => Some(HostKind::Cloud),
    };
    let flags = opts.launch.sandbox_flags();
    let decided = decide_here(&host, workflow.as_ref(), &flags, opts.untrusted, target)?;
    let d = &decided.decision;
    let block = workflow
        .as_ref()
        .and_then(|w| w.sandbox.as_ref().map(|s| s.spec.clone()));
    let spec = d
        .spec
        .as_ref()
        .and_then(|s| s.as_ref().ok())
        .map(|b| &b.spec);
    let spec_for_checks = spec.or(block.as_ref());
    let selected = d
        .selection
        .as_ref()
        .ok()
        .and_then(|name| drivers.get(*name));
    let available = drivers.ready_names();

    let mut checks = vec![driver_available(d), spec_valid(d)];
    checks.push(docker_daemon(d, drivers));
    checks.push(match spec_for_checks {
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
    checks.push(host_binds(d, opts.untrusted));
    checks.push(host_identity(d, drivers));
    let image = spec_for_checks.and_then(|s| {
        s.image
            .clone()
            .or_else(|| s.build.as_ref().map(|_| "build".to_owned()))
    });
    checks.push(match (spec, selected) {
        (None, _) if d.mode.mode.is_active() => {
            check("image resolvable", CheckStatus::Skip, "spec invalid")
        }
        (None, _) => check("image resolvable", CheckStatus::Skip, "no active sandbox"),
        (Some(s), _) if s.image.is_none() => {
            check("image resolvable", CheckStatus::Skip, "built from build:")
        }
        (Some(_), None) => check(
            "image resolvable",
            CheckStatus::Unavailable,
            "no driver to ask",
        ),
        (Some(s), Some(driver)) => {
            let img = s.image.clone().unwrap_or_default();
            match driver.image_present(&img).await {
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
    checks.extend(kubernetes(d, spec, env, drivers));
    checks.extend(kubernetes_access(d, drivers).await);
    checks.push(network_syntax(spec_for_checks));
    checks.push(driver_capabilities(d, spec));
    checks.push(egress_confinement(d, spec).await);
    let agents = workflow
        .as_ref()
        .is_some_and(|w| w.nodes.values().any(iterion_runtime::agents::is_agent_node));
    checks.push(secret_egress(d, agents));
    checks.push(runner_binary(d, workflow.as_ref()));
    checks.push(verdict_row(d));

    Ok(StrictReport {
        host: d.host.as_str(),
        mode: d.mode.mode.as_str().to_owned(),
        source: d.source.clone(),
        host_state: d.host_state.as_str().to_owned(),
        host_state_source: d.host_state_source.as_str().to_owned(),
        driver: d.selection.as_ref().ok().map(|n| n.as_str().to_owned()),
        image,
        runtimes: drivers::runtimes_on_path(),
        available_drivers: available,
        capabilities: d.selection.as_ref().ok().and_then(|n| {
            drivers
                .offers()
                .iter()
                .find(|o| o.driver == *n && o.is_ready())
                .map(|o| o.capabilities)
        }),
        verdict: VerdictReport {
            kind: d.verdict_kind(),
            code: d.code().map(str::to_owned),
            reason: match &d.verdict {
                Verdict::Host { reason, .. } => Some(reason.clone()),
                _ => d.refusal_reason().map(str::to_owned),
            },
        },
        checks,
    })
}

fn cross_host(d: &SandboxDecision) -> bool {
    d.host != d.detected_host
}

fn driver_available(d: &SandboxDecision) -> Check {
    const NAME: &str = "driver available";
    match (&d.selection, d.mode.mode.is_active()) {
        (_, false) => check(
            NAME,
            CheckStatus::Pass,
            format!(
                "mode {:?}: no sandbox, no driver needed",
                d.mode.mode.as_str()
            ),
        ),
        (Ok(name), true) => check(NAME, CheckStatus::Pass, format!("{name}")),
        (Err(e), true) if cross_host(d) => check(
            NAME,
            CheckStatus::Warn,
            format!("{e} (cross-host --target)"),
        ),
        (Err(e), true) => check(
            NAME,
            CheckStatus::Fail,
            format!(
                "{e}; {}",
                if d.mode.mode == Mode::Auto {
                    "auto runs would degrade to the host"
                } else {
                    "inline runs would be refused (SANDBOX_DRIVER_UNAVAILABLE)"
                }
            ),
        ),
    }
}

fn spec_valid(d: &SandboxDecision) -> Check {
    const NAME: &str = "spec valid";
    match &d.spec {
        _ if !d.mode.mode.is_active() => check(NAME, CheckStatus::Skip, "no active sandbox"),
        Some(Ok(_)) => check(NAME, CheckStatus::Pass, "ok"),
        Some(Err(e)) => check(NAME, CheckStatus::Fail, e.clone()),
        None => check(
            NAME,
            CheckStatus::Skip,
            format!(
                "not built: {}",
                d.refusal_reason()
                    .unwrap_or("an earlier step ended the decision")
            ),
        ),
    }
}

/// The first Docker or Podman engine of the one probe.
fn docker_daemon(d: &SandboxDecision, drivers: &HostDrivers) -> Check {
    const NAME: &str = "docker daemon";
    if d.host == HostKind::Cloud {
        return check(NAME, CheckStatus::Skip, "cloud target");
    }
    let engines: Vec<_> = drivers
        .offers()
        .iter()
        .filter(|o| matches!(o.driver, DriverName::Docker | DriverName::Podman))
        .collect();
    if let Some(info) = engines.iter().find_map(|o| o.readiness.as_ref().ok()) {
        return check(
            NAME,
            CheckStatus::Pass,
            format!("{} {} at {}", info.driver, info.version, info.endpoint),
        );
    }
    let why = engines
        .iter()
        .find_map(|o| o.readiness.as_ref().err())
        .cloned()
        .unwrap_or_else(|| "no docker/podman driver in this build".to_owned());
    check(NAME, CheckStatus::Unavailable, why)
}

/// Why a step of the decision was not reached.
fn not_reached(d: &SandboxDecision) -> Check {
    let why = match (&d.verdict, &d.selection) {
        _ if !d.mode.mode.is_active() => "no active sandbox".to_owned(),
        (_, Err(_)) => "no driver selected".to_owned(),
        _ => format!(
            "not reached: {}",
            d.refusal_reason()
                .unwrap_or("an earlier step ended the decision")
        ),
    };
    check("", CheckStatus::Skip, why)
}

/// The workspace and every bind of the finalized plan, judged by their
/// real paths, and the private areas masked.
fn host_binds(d: &SandboxDecision, untrusted: bool) -> Check {
    const NAME: &str = "host binds";
    match &d.binds {
        Some(Err(e)) => check(NAME, CheckStatus::Fail, e.clone()),
        Some(Ok(report)) => {
            let mut detail = format!(
                "workspace {} and {} declared bind(s) pass the real-path judge{}",
                report.workspace,
                report.declared,
                if untrusted {
                    " (untrusted: workspace only)"
                } else {
                    ""
                }
            );
            if !report.masked.is_empty() {
                detail.push_str(&format!(
                    "; masked from the sandbox: {}",
                    report.masked.join(", ")
                ));
            }
            check(NAME, CheckStatus::Pass, detail)
        }
        None => Check {
            name: NAME,
            ..not_reached(d)
        },
    }
}

/// Who the run would run as (issue 19 item 4).
fn host_identity(d: &SandboxDecision, drivers: &HostDrivers) -> Check {
    const NAME: &str = "host identity";
    let offer = d
        .driver
        .as_ref()
        .and_then(|s| drivers.offers().iter().find(|o| o.driver == s.driver));
    match (&d.identity, offer) {
        (Some(Err(e)), _) => check(NAME, CheckStatus::Fail, e.clone()),
        (Some(Ok(outcome)), Some(o)) => {
            let p = IdentityPosture::of(
                outcome,
                o.footprint.uid_mapping,
                o.capabilities.host_bind_mounts,
            );
            let detail = format!(
                "runs as {} ({}); {}",
                p.sandbox_user.as_deref().unwrap_or("the image's user"),
                p.reason,
                p.protection
            );
            if p.workspace_writable {
                check(NAME, CheckStatus::Pass, detail)
            } else {
                check(
                    NAME,
                    CheckStatus::Warn,
                    format!("{detail}; the workspace is read-only to that user"),
                )
            }
        }
        _ if d.mode.mode.is_active() && d.selection.is_err() => {
            check(NAME, CheckStatus::Unavailable, "no driver selected")
        }
        _ => Check {
            name: NAME,
            ..not_reached(d)
        },
    }
}

fn kubernetes(
    d: &SandboxDecision,
    spec: Option<&Spec>,
    env: &SandboxEnv,
    drivers: &HostDrivers,
) -> Vec<Check> {
    if d.host != HostKind::Cloud {
        return vec![
            check(
                "k8s spec compatible",
                CheckStatus::Skip,
                "not a cloud target",
            ),
            check("k8s context", CheckStatus::Skip, "not a cloud target"),
        ];
    }
    let compatible = match spec {
        None => check(
            "k8s spec compatible",
            CheckStatus::Skip,
            "no active sandbox",
        ),
        Some(s) => {
            let mut s = s.clone();
            s.host_state = Some(d.host_state);
            match check_kubernetes_spec(&s, KubeCheck::Doctor) {
                Ok(user) => check(
                    "k8s spec compatible",
                    CheckStatus::Pass,
                    format!("runs as {user}"),
                ),
                Err(e) => check("k8s spec compatible", CheckStatus::Fail, e.to_string()),
            }
        }
    };
    let in_cluster = env
        .snapshot
        .kubernetes_service_host
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    let context = match drivers
        .offers()
        .iter()
        .find(|o| o.driver == DriverName::Kubernetes)
        .map(|o| &o.readiness)
    {
        None => check(
            "k8s context",
            CheckStatus::Unavailable,
            "no kubernetes driver in this build",
        ),
        Some(Ok(info)) => check("k8s context", CheckStatus::Pass, info.endpoint.clone()),
        Some(Err(e)) if in_cluster => check("k8s context", CheckStatus::Fail, e.clone()),
        Some(Err(e)) => check("k8s context", CheckStatus::Warn, e.clone()),
    };
    vec![compatible, context]
}

/// The namespace, where the configuration came from, and the RBAC the
/// Kubernetes driver needs there, asked of the cluster (issue 12 item 5);
/// only on a cloud host whose cluster answered the probe (the context row
/// already says why not). The driver is discovered again: the probe's
/// handle is a `dyn Driver`, and the review is this driver's alone.
#[cfg(feature = "driver-k8s")]
async fn kubernetes_access(d: &SandboxDecision, drivers: &HostDrivers) -> Vec<Check> {
    let ready = drivers
        .offers()
        .iter()
        .any(|o| o.driver == DriverName::Kubernetes && o.readiness.is_ok());
    if d.host != HostKind::Cloud || !ready {
        return Vec::new();
    }
    let process_env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let driver = match iterion_driver_k8s::KubeDriver::discover(&process_env).await {
        Ok(driver) => driver,
        Err(e) => return vec![check("k8s namespace", CheckStatus::Fail, e.to_string())],
    };
    let source = driver
        .source()
        .map(|s| format!(" ({})", s.describe()))
        .unwrap_or_default();
    let namespace = check(
        "k8s namespace",
        CheckStatus::Pass,
        format!("{}{source}", driver.namespace()),
    );
    let rows = driver.review_access().await;
    let summary = iterion_driver_k8s::access::summarize(driver.namespace(), &rows);
    let status = if summary.ok {
        CheckStatus::Pass
    } else if summary.unknown {
        CheckStatus::Warn
    } else {
        CheckStatus::Fail
    };
    vec![namespace, check("k8s rbac", status, summary.detail)]
}

#[cfg(not(feature = "driver-k8s"))]
async fn kubernetes_access(d: &SandboxDecision, drivers: &HostDrivers) -> Vec<Check> {
    let _ = (d, drivers);
    Vec::new()
}

fn network_syntax(spec: Option<&Spec>) -> Check {
    const NAME: &str = "network allowlist syntax";
    match spec.and_then(|s| s.network.as_ref()) {
        None => check(
            NAME,
            CheckStatus::Pass,
            "no network: block (open, no proxy)",
        ),
        // The rules were parsed with the workflow (a bad one is C313 and
        // never reaches here); what remains is the proxy's own compile.
        Some(net) => match iterion_netproxy::Policy::compile(net) {
            Ok(_) => check(
                NAME,
                CheckStatus::Pass,
                format!("{} rule(s) compile", net.rules.len()),
            ),
            Err(e) => check(NAME, CheckStatus::Fail, e.to_string()),
        },
    }
}

/// The decision's capability gaps and egress verdict for the selected driver.
fn driver_capabilities(d: &SandboxDecision, spec: Option<&Spec>) -> Check {
    const NAME: &str = "driver capabilities";
    match (spec, &d.driver) {
        (None, _) => check(NAME, CheckStatus::Skip, "no active sandbox"),
        (Some(_), None) => check(NAME, CheckStatus::Unavailable, "no driver selected"),
        (Some(_), Some(s)) if !s.gaps.is_empty() => check(
            NAME,
            CheckStatus::Fail,
            format!("{} lacks {}", s.driver, s.gaps.join(", ")),
        ),
        (Some(_), Some(s)) if matches!(s.egress, EgressVerdict::Advisory { .. }) => check(
            NAME,
            CheckStatus::Warn,
            format!(
                "{} cannot confine egress: the run gets an advisory proxy and a sandbox_egress_unenforced event",
                s.driver
            ),
        ),
        (Some(_), Some(s)) => check(
            NAME,
            CheckStatus::Pass,
            format!("{} supports the spec", s.driver),
        ),
    }
}

/// Issue 19's egress protections: the decision's egress verdict, and what
/// this host can apply.
async fn egress_confinement(d: &SandboxDecision, spec: Option<&Spec>) -> Check {
    const NAME: &str = "egress confinement";
    if spec.is_none() {
        return check(NAME, CheckStatus::Skip, "no active sandbox");
    }
    let Some(s) = &d.driver else {
        let needs =
            spec.is_some_and(|s| iterion_core::NetworkSpec::needs_proxy(s.network.as_ref()));
        return match needs {
            false => check(
                NAME,
                CheckStatus::Skip,
                "open network: no proxy, nothing to confine",
            ),
            true => check(NAME, CheckStatus::Unavailable, "no driver selected"),
        };
    };
    if !s.needs_proxy {
        return check(
            NAME,
            CheckStatus::Skip,
            "open network: no proxy, nothing to confine",
        );
    }
    let p = drivers::egress_protections().await;
    let protections = format!(
        "{}; IPv6: {}; capabilities: {} only; proxy on {}, at most {} connections",
        p.firewall.detail,
        p.ipv6.detail,
        drivers::sandbox_capabilities().join(", "),
        p.proxy_bind,
        p.proxy_max_connections
    );
    let why = if p.firewall.applied {
        "enforcement is off (ITERION_SANDBOX_EGRESS_ENFORCE=off) or the engine is remote".to_owned()
    } else {
        p.firewall.detail.clone()
    };
    match &s.egress {
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

/// Issue 17: how the run's bound secrets and its agents' provider keys
/// would go in — as placeholders the proxy swaps back on their hosts, or
/// plain (and why). What keys exist is the agent crate's reading at boot;
/// this renders the decision's verdicts only.
fn secret_egress(d: &SandboxDecision, agents: bool) -> Check {
    use iterion_sandbox::secret_egress::ProviderKeysVerdict;
    const NAME: &str = "secret egress";
    let Verdict::Sandbox(plan) = &d.verdict else {
        return check(
            NAME,
            CheckStatus::Skip,
            "no sandbox: secrets stay on the host",
        );
    };
    let secrets = if plan.secret_placeholders {
        "bound secrets go in as placeholders"
    } else {
        "no bound secret goes in as a placeholder"
    };
    match &plan.provider_keys {
        _ if !agents => check(NAME, CheckStatus::Pass, format!("{secrets}; no agent node")),
        ProviderKeysVerdict::Placeholders => check(
            NAME,
            CheckStatus::Pass,
            format!(
                "{secrets}; agents' provider keys go in as placeholders bound to their provider's HTTPS host (the run's CA is installed)"
            ),
        ),
        ProviderKeysVerdict::Plain { reason } => check(
            NAME,
            CheckStatus::Warn,
            format!("{secrets}; agents' provider keys go in plain: {reason}"),
        ),
    }
}

/// The static `iterion` the run's sandboxed agents would run inside the
/// container: the decision's refusal when none serves (issue 32 item 2).
fn runner_binary(d: &SandboxDecision, workflow: Option<&iterion_dsl::ir::Workflow>) -> Check {
    const NAME: &str = "runner binary";
    if d.code() == Some(iterion_sandbox::decision::RUNNER_UNAVAILABLE) {
        return check(
            NAME,
            CheckStatus::Fail,
            d.refusal_reason().unwrap_or_default().to_owned(),
        );
    }
    let runner = workflow.map(super::super::launch::RunnerWiring::of);
    match (runner, &d.verdict) {
        (Some(r), Verdict::Sandbox(_)) if r.needed => match r.binary {
            Some(bin) => check(
                NAME,
                CheckStatus::Pass,
                format!("{} (statically linked)", bin.display()),
            ),
            None => check(NAME, CheckStatus::Fail, r.missing.unwrap_or_default()),
        },
        _ => check(NAME, CheckStatus::Skip, "no agent runs in a sandbox"),
    }
}

/// The verdict a run would get: what `iterion run` does with this decision.
fn verdict_row(d: &SandboxDecision) -> Check {
    const NAME: &str = "verdict";
    match &d.verdict {
        Verdict::Sandbox(plan) => check(
            NAME,
            CheckStatus::Pass,
            format!("the run gets a sandbox on {}", plan.driver),
        ),
        Verdict::Host {
            reason,
            degraded: false,
        } => check(NAME, CheckStatus::Pass, format!("on the host: {reason}")),
        Verdict::Host {
            reason,
            degraded: true,
        } => check(NAME, CheckStatus::Warn, reason.clone()),
        Verdict::Refused(r)
            if cross_host(d) && r.refused == iterion_sandbox::classify::Refused::NoDriver =>
        {
            check(
                NAME,
                CheckStatus::Warn,
                format!("refused ({}): {} (cross-host --target)", r.code, r.reason),
            )
        }
        Verdict::Refused(r) => check(
            NAME,
            CheckStatus::Fail,
            format!("refused ({}): {}", r.code, r.reason),
        ),
        Verdict::Denied => check(
            NAME,
            CheckStatus::Fail,
            format!(
                "denied at admission ({}): {}",
                d.admission.code().unwrap_or_default(),
                d.admission.reason()
            ),
        ),
    }
}

/// The human text of the report.
pub(super) fn render(r: &StrictReport) -> String {
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
