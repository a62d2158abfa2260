//! Fixtures shared by the layers: plans built by the real policy
//! functions, run infos, settings.

use std::collections::BTreeMap;
use std::time::Duration;

use iterion_core::plan::EgressAttachment;
use iterion_core::{
    Capabilities, DriverName, HostState, LaunchPlan, Mode, Mount, MountKind, MountOrigin, RunId,
    RunInfo, Spec,
};
use iterion_driver_k8s::K8sSettings;
use iterion_sandbox::mounts::{HostSnapshot, PlanInputs, finalize_mounts_for_driver, plan_launch};

/// The capabilities the driver reports with `ITERION_POD_IP` set.
pub fn kube_caps() -> Capabilities {
    Capabilities {
        image: true,
        mounts: true,
        network_policy: true,
        egress_enforcement: true,
        post_create: true,
        remote_user: true,
        read_back_drain: true,
        archive_in: true,
        workspace_export: true,
        tls_inspection: true,
        secret_file_copy: true,
        ..Capabilities::default()
    }
}

/// A plan as the runtime builds it for this driver: `plan_launch` on the
/// spec, then `finalize_mounts_for_driver` with the driver's capabilities.
pub fn policy_plan(spec: &Spec, workspace: &str) -> LaunchPlan {
    policy_plan_with(spec, workspace, Vec::new())
}

/// [`policy_plan`] with `extra` mounts added before finalizing, as the
/// sandbox decision adds each file secret's read-only bind.
pub fn policy_plan_with(spec: &Spec, workspace: &str, extra: Vec<Mount>) -> LaunchPlan {
    let run_files = "/store/runs/r1/artifact-files";
    let host = HostSnapshot {
        home: Some("/home/dev".into()),
        uid: 1000,
        gid: 1000,
        existing: [run_files.to_owned()].into_iter().collect(),
        ..HostSnapshot::default()
    };
    let planned = plan_launch(
        &PlanInputs {
            spec,
            host_state: Some(HostState::None),
            host_state_source: "workflow",
            workspace,
            worktree_git_dir: None,
            worktree_git_guards: &[],
            worktree_git_masks: &[],
            mask_dir: None,
            scratch_dir: None,
            attachments_dir: None,
            run_files_dir: Some(run_files),
            bundle_dir: None,
            readback_cap: None,
            untrusted: false,
        },
        &host,
    )
    .expect("plan");
    let mut plan = planned.plan;
    plan.mounts.extend(extra);
    finalize_mounts_for_driver(plan, DriverName::Kubernetes, &kube_caps())
        .expect("finalize")
        .plan
}

pub fn spec(image: &str) -> Spec {
    Spec {
        mode: Mode::Inline,
        image: Some(image.to_owned()),
        host_state: Some(HostState::None),
        ..Spec::default()
    }
}

pub fn info(run: &str) -> RunInfo {
    RunInfo {
        run_id: RunId::parse(run).expect("run id"),
        run_name: Some("golden-run".into()),
        host_workspace: "/work/repo".into(),
        max_duration: None,
    }
}

pub fn egress() -> EgressAttachment {
    EgressAttachment {
        proxy_port: 41234,
        token: "0123456789abcdef-not-a-real-token".into(),
        enforce: true,
    }
}

pub fn settings_with_runner() -> K8sSettings {
    let env: BTreeMap<String, String> = [
        ("ITERION_POD_IP", "10.244.1.7"),
        ("ITERION_RUNNER_POD_NAME", "iterion-runner-7d9f8-abcde"),
        (
            "ITERION_RUNNER_POD_UID",
            "5f0c1c2e-8c59-4c57-9b1a-2b7f3f0d9a11",
        ),
        ("ITERION_SANDBOX_K8S_REQUESTS_CPU", "500m"),
        ("ITERION_SANDBOX_K8S_LIMITS_MEMORY", "2Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    K8sSettings::from_env(&env).expect("settings")
}

pub const BUDGET: Duration = Duration::from_secs(3600);

/// A run's egress CA as the booter hands it to the driver (a public
/// certificate; this one is a fixture, not a working CA).
pub const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBfixtureNotARealCertificateButShapedLikeOne0123456789abcdef\n-----END CERTIFICATE-----\n";

/// The read-only bind the sandbox decision plans for the file secret
/// `name` (`iterion_sandbox::decision`: one per `as: file` secret).
pub fn secret_file_mount(name: &str) -> Mount {
    Mount {
        kind: MountKind::Bind,
        source: Some(format!("/dev/shm/iterion-secrets/r1/{name}")),
        target: format!("/run/iterion/secrets/{name}"),
        readonly: true,
        size: None,
        origin: MountOrigin::SecretFile,
    }
}
