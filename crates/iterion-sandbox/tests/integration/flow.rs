use std::collections::BTreeMap;

use iterion_core::driver::{EngineInfo, HostFootprint};
use iterion_core::{Capabilities, DriverName, Mode, Spec, Trust};
use iterion_sandbox::admission::AdmissionVerdict;
use iterion_sandbox::binds::{HostBindSettings, RealHost};
use iterion_sandbox::decision::{
    DecisionRequest, RepoSnapshot, RunPaths, SandboxDecision, Verdict, WorkflowFacts, decide,
};
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv};
use iterion_sandbox::guards::check_launch_plan;
use iterion_sandbox::host::DriverOffer;
use iterion_sandbox::mounts::HostSnapshot;
use iterion_sandbox::precedence::{PRODUCT_GLOBAL_DEFAULT, SandboxFlags};

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

fn offer(driver: DriverName, capabilities: Capabilities) -> DriverOffer {
    DriverOffer {
        driver,
        readiness: Ok(EngineInfo {
            driver,
            endpoint: "unix:///run/test.sock".into(),
            version: "1".into(),
            api_version: "1.41".into(),
            local: capabilities.host_bind_mounts,
        }),
        capabilities,
        footprint: HostFootprint::default(),
    }
}

/// A run in the real temporary `repo`, with its private dirs under `state`.
fn decide_in(
    repo: &std::path::Path,
    state: &std::path::Path,
    block: Option<&Spec>,
    offers: &[DriverOffer],
    trust: Trust,
) -> SandboxDecision {
    let flags = SandboxFlags {
        global_default: Some(PRODUCT_GLOBAL_DEFAULT),
        ..SandboxFlags::default()
    };
    let env = SandboxEnv::parse(&EnvSnapshot::default()).unwrap_or_default();
    let snapshot = RepoSnapshot::capture(repo);
    let host = HostSnapshot {
        uid: 1000,
        gid: 1000,
        ..HostSnapshot::default()
    };
    let state = state.to_string_lossy().into_owned();
    let paths = RunPaths {
        run_files: format!("{state}/sandboxes/r1/artifact-files"),
        mask: format!("{state}/sandboxes/r1/mask"),
        workspace_manifest: format!("{state}/sandboxes/r1/workspace-manifest"),
        attachments: None,
        secrets_dir: Err("no memory filesystem in this test".into()),
    };
    let binds = HostBindSettings::default()
        .with_private([state.clone()])
        .with_managed_roots([state]);
    decide(&DecisionRequest {
        run_id: "r1",
        trust,
        flags: &flags,
        env: &env,
        target: None,
        workflow: WorkflowFacts {
            sandbox: block,
            file_secrets: Ok(&[]),
            bound_secrets: &[],
        },
        repo: &snapshot,
        host: &host,
        offers,
        paths: &paths,
        binds: &binds,
        fs: &RealHost,
        local_env: &BTreeMap::new(),
        runtime_mounts: &[],
        runner_missing: None,
    })
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
    let state = dir.path().join("state");
    let block = Spec {
        mode: Mode::Auto,
        read_back: vec!["/out".parse().expect("path")],
        ..Spec::default()
    };

    let d = decide_in(
        &repo,
        &state,
        Some(&block),
        &[offer(DriverName::Docker, docker_caps())],
        Trust::Untrusted,
    );
    assert_eq!(d.mode.mode, Mode::Auto);
    assert!(d.admission.admitted(), "{:?}", d.admission);
    assert!(d.source.ends_with("devcontainer.json)"), "{}", d.source);
    let names: Vec<&str> = d.events.iter().map(|e| e.name()).collect();
    assert_eq!(
        names,
        [
            "sandbox_env_denied",
            "sandbox_network_defaulted",
            "sandbox_driver_selected",
            "sandbox_host_state_mounted",
            "sandbox_user_remap",
        ]
    );
    let Verdict::Sandbox(docker) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    check_launch_plan(&docker.launch).expect("docker plan passes the guards");
    assert!(!docker.launch.env.contains_key("PATH"), "repo PATH denied");
    // The workspace bind got its real path from the real filesystem.
    let real = repo.canonicalize().expect("real");
    assert!(
        docker
            .launch
            .mounts
            .iter()
            .any(|m| m.source.as_deref() == Some(&*real.to_string_lossy()))
    );

    // A bindless driver that drains: driver-owned storage, the promise kept.
    let bindless = Capabilities {
        host_bind_mounts: false,
        build: false,
        ..docker_caps()
    };
    let d = decide_in(
        &repo,
        &state,
        Some(&block),
        &[offer(DriverName::Docker, bindless)],
        Trust::Trusted,
    );
    let Verdict::Sandbox(k8s) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    check_launch_plan(&k8s.launch).expect("bindless plan passes the guards");
    assert!(k8s.launch.mounts.iter().all(|m| !m.is_host_bind()));
    assert_eq!(
        k8s.launch
            .env
            .get("ITERION_ARTIFACT_FILES_DIR")
            .map(String::as_str),
        Some("/iterion/artifact-files")
    );
    assert!(
        k8s.launch
            .read_back
            .iter()
            .any(|d| d.container_path == "/out")
    );
}

#[test]
fn runtime_less_host_degrades_auto_and_refuses_untrusted() {
    let dir = tempfile::tempdir().expect("tmp");
    let down = [DriverOffer::unavailable(
        DriverName::Docker,
        "no such engine answered",
    )];
    let d = decide_in(
        dir.path(),
        &dir.path().join("state"),
        None,
        &down,
        Trust::Trusted,
    );
    assert_eq!(d.verdict_kind(), "degraded");
    assert!(d.events.iter().any(|e| e.name() == "sandbox_skipped"));
    let d = decide_in(
        dir.path(),
        &dir.path().join("state"),
        None,
        &down,
        Trust::Untrusted,
    );
    assert_eq!(d.verdict, Verdict::Denied);
    let AdmissionVerdict::Deny { reason, .. } = &d.admission else {
        panic!("denied")
    };
    assert!(reason.contains("global default"), "{reason}");
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
    let snap = HostSnapshot::capture(&env, &[&extra], &|_| None);
    assert!(snap.exists(&home.join(".claude").to_string_lossy()));
    assert!(snap.exists(&extra));
    assert!(!snap.exists(&home.join(".codex").to_string_lossy()));
}
