//! `iterion sandbox manifests FILE [-o yaml|json]`: the Kubernetes objects
//! a run of FILE would create (a `v1` List, as `kubectl --dry-run=client`
//! prints several objects), nothing applied and no cluster contacted.
//!
//! The plan is the sandbox decision a run of FILE here gets on a cloud
//! host whose Kubernetes driver offers what these settings give it
//! (`iterion_sandbox::decision`, through the same `SandboxHost::decide` a
//! run calls), then the driver's own render with every Secret value
//! redacted. What it cannot know before a run: the run id (a fresh one is
//! drawn), the proxy's port and token, and an inspecting run's CA (inside
//! the redacted Secret).

use std::collections::BTreeMap;
use std::io::Write;

use iterion_core::driver::{EngineInfo, HostFootprint};
use iterion_core::plan::EgressAttachment;
use iterion_core::{DriverName, RunInfo};
use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{REDACTED, RenderOptions, render_for_display};
use iterion_runtime::HostDrivers;
use iterion_sandbox::decision::Verdict;
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv};
use iterion_sandbox::guards::{KubeCheck, check_kubernetes_spec};
use iterion_sandbox::host::{DriverOffer, HostKind};
use iterion_sandbox::verdict::EgressVerdict;

use super::launch::LaunchFlags;
use crate::cli::{ManifestFormat, ManifestsArgs};
use crate::exit::{Exit, UserInputError};

/// Print the objects; every refusal (no sandbox, a spec a pod cannot
/// express, a bad operator variable) is a [`UserInputError`] (exit 2).
pub async fn run(args: ManifestsArgs) -> anyhow::Result<Exit> {
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    let refused = |what: String| UserInputError::new(what);
    let env =
        SandboxEnv::parse(&EnvSnapshot::from_process()).map_err(|e| refused(e.to_string()))?;
    let settings =
        K8sSettings::from_env(&process_env).map_err(|e| refused(format!("{e} ({})", e.code())))?;
    let (_, workflow) = crate::workflow::load_workflow(&args.file)?;
    // The driver as these settings make it, not contacted.
    let caps = iterion_driver_k8s::capabilities(&settings);
    let offer = DriverOffer {
        driver: DriverName::Kubernetes,
        readiness: Ok(EngineInfo {
            driver: DriverName::Kubernetes,
            endpoint: "(not contacted)".to_owned(),
            version: String::new(),
            api_version: String::new(),
            local: false,
        }),
        capabilities: caps,
        footprint: HostFootprint::default(),
    };
    let host = super::launch::sandbox_host(env, HostDrivers::offered(vec![offer]), Some(&workflow));
    let decided = super::sandbox::decide_here(
        &host,
        Some(&workflow),
        &LaunchFlags::default().sandbox_flags(),
        false,
        Some(HostKind::Cloud),
    )?;
    let d = decided.decision;
    let plan = match d.verdict {
        Verdict::Sandbox(plan) => plan,
        Verdict::Host { .. } if !d.mode.mode.is_active() => {
            return Err(refused(format!(
                "{} runs without a sandbox (mode {:?} from {}): a run creates no Kubernetes object",
                args.file.display(),
                d.mode.mode.as_str(),
                d.mode.source
            ))
            .into());
        }
        other => {
            let mut why = match &other {
                Verdict::Refused(r) => r.reason.clone(),
                _ => d.admission.reason().to_owned(),
            };
            // Why the driver cannot confine it: the NetworkPolicy admits
            // only the runner's address.
            let egress_refused = d
                .driver
                .as_ref()
                .is_some_and(|s| matches!(s.egress, EgressVerdict::Refused { .. }));
            if egress_refused && settings.pod_ip.is_none() {
                why.push_str(&format!(
                    " ({} is not set: the NetworkPolicy confining the pod needs the runner's address)",
                    iterion_driver_k8s::settings::POD_IP_ENV
                ));
            }
            return Err(refused(why).into());
        }
    };
    let mut spec = d
        .spec
        .and_then(Result::ok)
        .map(|b| b.spec)
        .unwrap_or_default();
    spec.host_state = Some(d.host_state);
    check_kubernetes_spec(&spec, KubeCheck::Engine)
        .map_err(|e| refused(format!("kubernetes refuses this spec: {e}")))?;
    let placeholders = plan.secret_placeholders;
    let mut plan = plan.launch;
    if let Some(enforce) = plan_egress(&d.driver) {
        plan.egress = Some(EgressAttachment {
            proxy_port: 0,
            token: REDACTED.to_owned(),
            enforce,
        });
        // Issue 17: an inspecting run's CA is minted at start; its place
        // in the Secret and the pod is what is shown.
        if placeholders {
            plan.egress_ca = Some(REDACTED.to_owned());
        }
    }
    if plan.user.as_deref().is_none_or(|u| u.trim().is_empty()) {
        plan.user = Some(iterion_sandbox::guards::DEFAULT_KUBE_USER.to_owned());
    }
    let workspace = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let run_id = iterion_core::RunId::generate();
    let namespace = match &settings.namespace {
        Some(ns) => ns.clone(),
        None => iterion_driver_k8s::discovery::load_config(&process_env)
            .await
            .map(|c| c.config.default_namespace)
            .unwrap_or_else(|_| "default".to_owned()),
    };
    let info = RunInfo {
        run_id,
        run_name: Some(workflow.name.clone()),
        host_workspace: workspace.clone(),
        max_duration: None,
    };
    let scope = crate::stores::scope_from_env();
    let objects = render_for_display(
        &plan,
        &info,
        &RenderOptions {
            namespace: &namespace,
            settings: &settings,
            store_scope: Some(scope.as_str()),
            owner: None,
            redact: true,
        },
    )
    .map_err(|e| refused(format!("{e} ({})", e.code())))?;
    // Whether the pod resolves names, and why (issue 31 item 7); the pod's
    // `iterion.io/dns` annotation says the same.
    let dns = iterion_driver_k8s::manifest::PodDns::of(&plan);
    let _ = writeln!(std::io::stderr(), "dns: {}: {}", dns.as_str(), dns.reason());
    let list = objects.to_list()?;
    let text = match args.output {
        ManifestFormat::Json => format!("{}\n", serde_json::to_string_pretty(&list)?),
        ManifestFormat::Yaml => serde_saphyr::to_string(&list)?,
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(Exit::Success)
}

/// Whether the run's proxy is enforced (`Some(true)`), advisory
/// (`Some(false)`), or absent.
fn plan_egress(driver: &Option<iterion_sandbox::decision::SelectedDriver>) -> Option<bool> {
    match driver.as_ref().map(|s| &s.egress) {
        Some(EgressVerdict::Enforced) => Some(true),
        Some(EgressVerdict::Advisory { .. }) => Some(false),
        _ => None,
    }
}
