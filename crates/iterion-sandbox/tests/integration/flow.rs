use std::collections::BTreeMap;

use iterion_core::store::AdmissionDecision;
use iterion_core::{Capabilities, DriverName, Mode, Spec, Trust};
use iterion_sandbox::admission::admit;
use iterion_sandbox::devcontainer::read_repo_devcontainer;
use iterion_sandbox::env::EnvSnapshot;
use iterion_sandbox::guards::check_launch_plan;
use iterion_sandbox::host::{DriverProbe, HostKind, select_driver};
use iterion_sandbox::mounts::{HostSnapshot, PlanInputs, finalize_mounts_for_driver, plan_launch};
use iterion_sandbox::precedence::{
    PrecedenceInputs, resolve_default_image, resolve_host_state, resolve_mode,
};
use iterion_sandbox::spec::{SpecInputs, build_spec, source_label};
use iterion_sandbox::verdict::{Availability, SandboxVerdict, sandbox_verdict};

fn docker_caps() -> Capabilities {
    Capabilities {
        image: true,
        build: true,
        mounts: true,
        host_bind_mounts: true,
        egress_enforcement: true,
        post_create: true,
        remote_user: true,
        read_back_drain: true,
        archive_in: true,
        ..Capabilities::default()
    }
}

#[test]
fn auto_run_from_a_repo_devcontainer_to_a_guarded_plan() {
    let dir = tempfile::tempdir().expect("tmp");
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join(".devcontainer")).expect("mkdir");
    std::fs::write(
        repo.join(".devcontainer/devcontainer.json"),
        r#"{
          // the repo's own container
          "image": "iterion-sandbox-slim:local",
          "containerEnv": { "PATH": "/evil", "RUST_LOG": "debug", },
          "mounts": ["type=volume,source=cargo,target=/cargo"],
        }"#,
    )
    .expect("write");
    let run_files = dir.path().join("store/runs/r1/artifact-files");
    std::fs::create_dir_all(&run_files).expect("mkdir");

    let block = Spec {
        mode: Mode::Auto,
        read_back: vec!["/out".parse().expect("path")],
        ..Spec::default()
    };
    let inputs = PrecedenceInputs {
        env: EnvSnapshot::default(),
        workflow: Some(&block),
        global_default: Some(Mode::Auto),
        ..PrecedenceInputs::default()
    };
    let resolved = resolve_mode(&inputs).expect("mode");
    assert_eq!(resolved.mode, Mode::Auto);
    let (host_state, hs_source) = resolve_host_state(&inputs).expect("host_state");
    let (default_image, _) = resolve_default_image(&inputs);

    let probes = [DriverProbe {
        driver: DriverName::Docker,
        unavailable: None,
    }];
    let driver = select_driver(HostKind::Local, resolved.mode, &probes).expect("driver");
    let verdict = sandbox_verdict(
        resolved.mode,
        resolved.source.as_str(),
        &Availability::Ready(driver),
        0,
    );
    assert_eq!(verdict, SandboxVerdict::Sandbox(DriverName::Docker));
    let admission = admit(
        Trust::Untrusted,
        &resolved,
        true,
        time::OffsetDateTime::UNIX_EPOCH,
    );
    assert_eq!(admission.admission.decision, AdmissionDecision::Admitted);

    let (path, dc) = read_repo_devcontainer(&repo).expect("read").expect("found");
    let path = path.to_string_lossy().into_owned();
    let built = build_spec(&SpecInputs {
        mode: resolved.mode,
        workflow: Some(&block),
        devcontainer: Some((&path, &dc)),
        default_image: &default_image,
        operator_env: BTreeMap::new(),
        run_id: "r1",
        local_env: BTreeMap::new(),
        workspace: &repo.to_string_lossy(),
    })
    .expect("spec");
    let names: Vec<&str> = built.events.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["sandbox_env_denied", "sandbox_network_defaulted"]);
    assert!(source_label(resolved.source.as_str(), &built.origin).ends_with("devcontainer.json)"));

    let ws = repo.to_string_lossy().into_owned();
    let rf = run_files.to_string_lossy().into_owned();
    let host = HostSnapshot {
        home: None,
        uid: 1000,
        gid: 1000,
        existing: [rf.clone()].into_iter().collect(),
        ..HostSnapshot::default()
    };
    let planned = plan_launch(
        &PlanInputs {
            spec: &built.spec,
            host_state: Some(host_state),
            host_state_source: hs_source.as_str(),
            workspace: &ws,
            worktree_git_dir: None,
            scratch_dir: None,
            attachments_dir: None,
            run_files_dir: Some(&rf),
            bundle_dir: None,
            readback_cap: None,
            untrusted: false,
        },
        &host,
    )
    .expect("plan");

    let docker =
        finalize_mounts_for_driver(planned.plan.clone(), DriverName::Docker, &docker_caps())
            .expect("finalize docker");
    assert!(docker.dropped.is_none(), "docker local keeps every bind");
    check_launch_plan(&docker.plan).expect("docker plan passes the guards");
    assert!(!docker.plan.env.contains_key("PATH"), "repo PATH denied");

    let k8s_caps = Capabilities {
        host_bind_mounts: false,
        build: false,
        ..docker_caps()
    };
    let k8s = finalize_mounts_for_driver(planned.plan, DriverName::Kubernetes, &k8s_caps)
        .expect("finalize kubernetes");
    check_launch_plan(&k8s.plan).expect("kubernetes plan passes the guards");
    assert!(k8s.plan.mounts.iter().all(|m| !m.is_host_bind()));
    assert_eq!(
        k8s.plan
            .env
            .get("ITERION_ARTIFACT_FILES_DIR")
            .map(String::as_str),
        Some("/iterion/artifact-files")
    );
    assert!(
        k8s.plan
            .read_back
            .iter()
            .any(|d| d.container_path == "/out")
    );
}

#[test]
fn runtime_less_host_degrades_auto_and_refuses_untrusted() {
    let inputs = PrecedenceInputs {
        global_default: Some(Mode::Auto),
        ..PrecedenceInputs::default()
    };
    let resolved = resolve_mode(&inputs).expect("mode");
    let err = select_driver(HostKind::Local, resolved.mode, &[]).expect_err("no driver");
    let verdict = sandbox_verdict(
        resolved.mode,
        resolved.source.as_str(),
        &Availability::Blocked {
            reason: err.to_string(),
        },
        1,
    );
    assert!(matches!(verdict, SandboxVerdict::Degraded { .. }));
    let admission = admit(
        Trust::Untrusted,
        &resolved,
        false,
        time::OffsetDateTime::UNIX_EPOCH,
    );
    assert_eq!(admission.admission.decision, AdmissionDecision::Denied);
    assert!(admission.admission.reason.contains("global default"));
}

#[test]
fn capture_sees_real_candidates() {
    let dir = tempfile::tempdir().expect("tmp");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".claude")).expect("mkdir");
    let extra = dir.path().join("attachments");
    std::fs::create_dir_all(&extra).expect("mkdir");
    let env = EnvSnapshot {
        home: Some(home.to_string_lossy().into_owned()),
        ..EnvSnapshot::default()
    };
    let extra = extra.to_string_lossy().into_owned();
    let snap = HostSnapshot::capture(&env, &[&extra]);
    assert!(snap.exists(&home.join(".claude").to_string_lossy()));
    assert!(snap.exists(&extra));
    assert!(!snap.exists(&home.join(".codex").to_string_lossy()));
}
