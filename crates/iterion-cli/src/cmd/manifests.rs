//! `iterion sandbox manifests FILE [-o yaml|json]`: the Kubernetes objects
//! a run of FILE would create (a `v1` List, as `kubectl --dry-run=client`
//! prints several objects), nothing applied and no cluster contacted.
//!
//! The plan goes through the same steps as a run's (precedence, spec
//! construction, the kubernetes compatibility guard, `plan_launch`,
//! `finalize_mounts_for_driver` with the driver's capabilities, the proxy
//! for a non-open network policy), then the driver's own render with every
//! Secret value redacted. What it cannot know before a run: the run id
//! (a fresh one is drawn), the proxy's port and token (inside the redacted
//! Secret), and file secrets (resolved only when a run starts).

use std::collections::BTreeMap;
use std::io::Write;

use iterion_core::plan::EgressAttachment;
use iterion_core::{DriverName, HostState, RunId, RunInfo};
use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{REDACTED, RenderOptions, render_for_display};
use iterion_netproxy::Policy;
use iterion_sandbox::env::EnvSnapshot;
use iterion_sandbox::guards::{KubeCheck, check_kubernetes_spec};
use iterion_sandbox::mounts::{HostSnapshot, PlanInputs, finalize_mounts_for_driver, plan_launch};
use iterion_sandbox::precedence::{
    PrecedenceInputs, resolve_default_image, resolve_host_state, resolve_mode,
};
use iterion_sandbox::spec::{SpecInputs, build_spec};

use crate::cli::{ManifestFormat, ManifestsArgs};
use crate::exit::{Exit, UserInputError};

/// Print the objects; every refusal (no sandbox, a spec a pod cannot
/// express, a bad operator variable) is a [`UserInputError`] (exit 2).
pub async fn run(args: ManifestsArgs) -> anyhow::Result<Exit> {
    let env = EnvSnapshot::from_process();
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    let refused = |what: String| UserInputError::new(what);
    let settings =
        K8sSettings::from_env(&process_env).map_err(|e| refused(format!("{e} ({})", e.code())))?;
    let (_, workflow) = crate::workflow::load_workflow(&args.file)?;
    let declared = workflow.sandbox.as_ref().map(|d| d.spec.clone());
    let inputs = PrecedenceInputs {
        cli_sandbox: None,
        cli_host_state: None,
        cli_default_image: None,
        env: env.clone(),
        workflow: declared.as_ref(),
        global_default: Some(iterion_sandbox::precedence::PRODUCT_GLOBAL_DEFAULT),
    };
    let resolved = resolve_mode(&inputs).map_err(|e| refused(e.to_string()))?;
    if !resolved.mode.is_active() {
        return Err(refused(format!(
            "{} runs without a sandbox (mode {:?} from {}): a run creates no Kubernetes object",
            args.file.display(),
            resolved.mode.as_str(),
            resolved.source
        ))
        .into());
    }
    let (host_state, host_state_source) =
        resolve_host_state(&inputs).map_err(|e| refused(e.to_string()))?;
    let (default_image, _) = resolve_default_image(&inputs);
    let run_id = RunId::generate();
    let workspace = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let built = build_spec(&SpecInputs {
        mode: resolved.mode,
        workflow: declared.as_ref(),
        // A pod never reads the repo's devcontainer.json (no host files).
        devcontainer: None,
        default_image: &default_image,
        operator_env: BTreeMap::new(),
        run_id: run_id.as_str(),
        local_env: BTreeMap::new(),
        workspace: &workspace,
    })
    .map_err(|e| refused(e.to_string()))?;
    let mut spec = built.spec;
    spec.host_state = Some(host_state);
    check_kubernetes_spec(&spec, KubeCheck::Engine)
        .map_err(|e| refused(format!("kubernetes refuses this spec: {e}")))?;
    // Where a run's files would live; on a pod it becomes an emptyDir.
    let run_files = format!("/iterion-store/runs/{run_id}/artifact-files");
    let snapshot = HostSnapshot::capture(&env, &[run_files.as_str()]);
    let planned = plan_launch(
        &PlanInputs {
            spec: &spec,
            host_state: Some(HostState::None),
            host_state_source: host_state_source.as_str(),
            workspace: &workspace,
            worktree_git_dir: None,
            scratch_dir: None,
            attachments_dir: None,
            run_files_dir: Some(&run_files),
            bundle_dir: None,
            readback_cap: env.readback_cap.as_deref(),
            // No host_state and no host path on a pod: nothing to confine.
            untrusted: false,
        },
        &snapshot,
    )
    .map_err(|e| refused(e.to_string()))?;
    let caps = iterion_driver_k8s::capabilities(&settings);
    let mut plan = finalize_mounts_for_driver(planned.plan, DriverName::Kubernetes, &caps)
        .map_err(|e| refused(e.to_string()))?
        .plan;
    let policy = Policy::from_spec(spec.network.as_ref()).map_err(|e| refused(e.to_string()))?;
    if policy.needs_proxy() {
        plan.egress = Some(EgressAttachment {
            proxy_port: 0,
            token: REDACTED.to_owned(),
            enforce: caps.egress_enforcement,
        });
    }
    if plan.user.as_deref().is_none_or(|u| u.trim().is_empty()) {
        plan.user = Some(iterion_sandbox::guards::DEFAULT_KUBE_USER.to_owned());
    }
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
    let list = objects.to_list()?;
    let text = match args.output {
        ManifestFormat::Json => format!("{}\n", serde_json::to_string_pretty(&list)?),
        ManifestFormat::Yaml => serde_saphyr::to_string(&list)?,
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(Exit::Success)
}
