use super::*;
use iterion_core::Mode;

const WS: &str = "/home/dev/work/repo";

fn host() -> HostSnapshot {
    let existing = [
        "/home/dev/.iterion",
        "/home/dev/.claude",
        "/home/dev/.gitconfig",
        "/home/dev/.cache/go-build",
        "/home/dev/go/pkg/mod",
        "/home/dev/.local/share/pnpm",
        "/store/runs/r1/scratch",
        "/store/runs/r1/attachments",
        "/store/runs/r1/artifact-files",
        "/store/bundle",
        "/home/dev/work/main/.git",
    ];
    HostSnapshot {
        home: Some("/home/dev".into()),
        uid: 1001,
        gid: 1001,
        git: GitIdentity {
            name: Some("Dev".into()),
            email: Some("dev@example.test".into()),
        },
        existing: existing.iter().map(|s| (*s).to_owned()).collect(),
        ..HostSnapshot::default()
    }
}

fn spec() -> Spec {
    Spec {
        mode: Mode::Inline,
        image: Some("iterion-sandbox-slim:local".into()),
        mounts: vec![
            "type=volume,source=cache,target=/cache".into(),
            "type=bind,source=/data/in,target=/in,readonly".into(),
        ],
        ..Spec::default()
    }
}

fn inputs<'a>(spec: &'a Spec, host_state: HostState) -> PlanInputs<'a> {
    PlanInputs {
        spec,
        host_state: Some(host_state),
        host_state_source: "default",
        workspace: WS,
        worktree_git_dir: Some("/home/dev/work/main/.git"),
        worktree_git_guards: &[],
        worktree_git_masks: &[],
        mask_dir: None,
        scratch_dir: Some("/store/runs/r1/scratch"),
        attachments_dir: Some("/store/runs/r1/attachments"),
        run_files_dir: Some("/store/runs/r1/artifact-files"),
        bundle_dir: Some("/store/bundle"),
        readback_cap: None,
        untrusted: false,
    }
}

fn caps_docker_local() -> Capabilities {
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

fn capability_table() -> Vec<(&'static str, DriverName, Capabilities)> {
    let local = caps_docker_local();
    vec![
        ("docker local", DriverName::Docker, local),
        (
            "docker remote (bindless)",
            DriverName::Docker,
            Capabilities {
                host_bind_mounts: false,
                workspace_export: true,
                ..local
            },
        ),
        (
            "docker bind, no drain",
            DriverName::Docker,
            Capabilities {
                read_back_drain: false,
                ..local
            },
        ),
        (
            "podman",
            DriverName::Podman,
            Capabilities {
                build: false,
                ..local
            },
        ),
        ("noop", DriverName::Noop, Capabilities::default()),
        (
            "kubernetes with drain",
            DriverName::Kubernetes,
            Capabilities {
                build: false,
                host_bind_mounts: false,
                secret_file_copy: true,
                network_policy: true,
                workspace_export: true,
                ..local
            },
        ),
        (
            "kubernetes without drain",
            DriverName::Kubernetes,
            Capabilities {
                build: false,
                host_bind_mounts: false,
                secret_file_copy: true,
                read_back_drain: false,
                network_policy: true,
                workspace_export: true,
                ..local
            },
        ),
    ]
}

#[test]
fn docker_plan_host_state_auto() {
    let s = spec();
    let planned = plan_launch(&inputs(&s, HostState::Auto), &host()).expect("plan");
    insta::assert_yaml_snapshot!("plan_host_state_auto", planned.plan);
    insta::assert_json_snapshot!(
        "plan_host_state_auto_events",
        serde_json::to_value(&planned.events).expect("ser")
    );
    assert_eq!(
        planned.plan.user, None,
        "who runs is decided after finalize (identity)"
    );
    assert_eq!(
        planned.plan.workdir, WS,
        "default container path = host path"
    );
}

#[test]
fn docker_plan_host_state_none() {
    let mut s = spec();
    s.workspace_folder = Some("/workspace".into());
    s.user = Some("1000".into());
    let planned = plan_launch(&inputs(&s, HostState::None), &host()).expect("plan");
    insta::assert_yaml_snapshot!("plan_host_state_none", planned.plan);
    let p = &planned.plan;
    for var in [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ] {
        assert!(p.env.contains_key(var), "{var}");
    }
    assert!(
        !p.mounts
            .iter()
            .any(|m| matches!(m.origin, MountOrigin::Scratch | MountOrigin::HostState))
    );
    assert!(!p.env.contains_key("HOME"));
    assert_eq!(planned.events.len(), 1, "no remap under host_state none");
}

#[test]
fn host_state_skip_rules() {
    let mut h = host();
    // A candidate inside the workspace, one containing it, one missing.
    h.iterion_home = Some(format!("{WS}/.iterion"));
    h.existing.insert(format!("{WS}/.iterion"));
    h.gomodcache = Some("/home/dev/work".into());
    h.existing.insert("/home/dev/work".into());
    let s = spec();
    let planned = plan_launch(&inputs(&s, HostState::Auto), &h).expect("plan");
    let targets: Vec<&str> = planned
        .plan
        .mounts
        .iter()
        .filter(|m| m.origin == MountOrigin::HostState && m.kind == MountKind::Bind)
        .map(|m| m.target.as_str())
        .collect();
    assert!(
        !targets.contains(&"/home/dev/work/repo/.iterion"),
        "nested in workspace"
    );
    assert!(!targets.contains(&"/home/dev/work"), "contains workspace");
    assert!(!targets.contains(&"/home/dev/.codex"), "missing on host");
    assert!(targets.contains(&"/home/dev/.claude"));
    // Unresolvable home: skipped silently.
    let mut h = host();
    h.home = None;
    let planned = plan_launch(&inputs(&s, HostState::Auto), &h).expect("plan");
    assert!(
        !planned
            .plan
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::HostState)
    );
}

#[test]
fn the_spec_user_is_kept_as_written() {
    let mut s = spec();
    s.user = Some("1000:1000".into());
    let planned = plan_launch(&inputs(&s, HostState::Auto), &host()).expect("plan");
    assert_eq!(planned.plan.user.as_deref(), Some("1000:1000"));
    assert!(
        !planned
            .events
            .iter()
            .any(|e| e.name().starts_with("sandbox_u")),
        "identity events are the identity decision's"
    );
}

#[test]
fn read_back_caps() {
    let mut s = spec();
    s.mounts.push("type=tmpfs,target=/out,size=8MiB".into());
    s.read_back = ["/out", "/var/report"].map(rb).to_vec();
    let mut i = inputs(&s, HostState::Auto);
    i.readback_cap = Some(ByteSize(1 << 30));
    let planned = plan_launch(&i, &host()).expect("plan");
    let caps: Vec<(String, u64)> = planned
        .plan
        .read_back
        .iter()
        .map(|d| (d.container_path.clone(), d.cap.0))
        .collect();
    assert_eq!(
        caps,
        vec![
            (RUN_FILES_CONTAINER_DIR.to_owned(), 1 << 30),
            ("/out".to_owned(), 8 << 20),
            ("/var/report".to_owned(), 1 << 30),
        ]
    );
    i.readback_cap = None;
    let planned = plan_launch(&i, &host()).expect("plan");
    assert_eq!(
        planned.plan.read_back[0].cap,
        ByteSize::DEFAULT_READBACK_CAP
    );
    // `/proc/self` or `/out/` cannot even be a declared path: see
    // iterion_core::path (the guards and the DSL call that parser).
    assert!("/proc/self".parse::<iterion_core::ReadBackPath>().is_err());
}

#[test]
fn a_read_back_path_inside_another_is_drained_once() {
    let mut s = spec();
    s.read_back = [
        "/out/sub",
        "/out",
        &format!("{RUN_FILES_CONTAINER_DIR}/reports"),
        "/outer",
    ]
    .map(rb)
    .to_vec();
    let planned = plan_launch(&inputs(&s, HostState::Auto), &host()).expect("plan");
    let paths: Vec<&str> = planned
        .plan
        .read_back
        .iter()
        .map(|d| d.container_path.as_str())
        .collect();
    assert_eq!(paths, [RUN_FILES_CONTAINER_DIR, "/out", "/outer"]);
}

#[test]
fn hostile_workflow_mounts_and_build_refused() {
    let mut s = spec();
    s.mounts = vec!["type=bind,source=/home/dev/.ssh,target=/k".into()];
    assert!(matches!(
        plan_launch(&inputs(&s, HostState::Auto), &host()),
        Err(PolicyError::Guard(_))
    ));
    let mut s = spec();
    s.image = None;
    s.build = Some(iterion_core::BuildSpec {
        context: Some("../..".into()),
        ..Default::default()
    });
    assert!(plan_launch(&inputs(&s, HostState::Auto), &host()).is_err());
    s.build = Some(iterion_core::BuildSpec {
        dockerfile: Some("docker/Dockerfile".into()),
        ..Default::default()
    });
    let planned = plan_launch(&inputs(&s, HostState::Auto), &host()).expect("plan");
    let b = planned.plan.build.expect("build");
    assert_eq!(b.dockerfile, format!("{WS}/docker/Dockerfile"));
    assert_eq!(b.context, format!("{WS}/docker"));
}

#[test]
fn finalize_kubernetes_with_drain() {
    let s = spec();
    let planned = plan_launch(&inputs(&s, HostState::None), &host()).expect("plan");
    let caps = capability_table()[5].2;
    let f =
        finalize_mounts_for_driver(planned.plan, DriverName::Kubernetes, &caps).expect("finalize");
    insta::assert_yaml_snapshot!("finalized_kubernetes_drain", f.plan.mounts);
    insta::assert_json_snapshot!(
        "finalized_kubernetes_drain_event",
        serde_json::to_value(&f.dropped).expect("ser")
    );
    assert_eq!(
        f.plan.env.get(RUN_FILES_ENV).map(String::as_str),
        Some(RUN_FILES_CONTAINER_DIR),
        "R6"
    );
}

#[test]
fn finalize_noop_and_undrained() {
    let s = spec();
    for (name, driver, caps) in capability_table() {
        if caps.can_serve_read_back() && caps.mounts {
            continue;
        }
        let planned = plan_launch(&inputs(&s, HostState::None), &host()).expect("plan");
        let f = finalize_mounts_for_driver(planned.plan, driver, &caps).expect("finalize");
        assert!(f.plan.read_back.is_empty(), "{name}: R5 no declaration");
        assert!(
            !f.plan.env.contains_key(RUN_FILES_ENV),
            "{name}: R5 no variable"
        );
        assert!(
            !f.plan
                .mounts
                .iter()
                .any(|m| m.origin == MountOrigin::RunFiles),
            "{name}: R5 no storage"
        );
        let ev = f.dropped.expect("event");
        let v = serde_json::to_value(&ev).expect("ser");
        assert_eq!(v["data"]["withdrawn_env"][0], RUN_FILES_ENV, "{name}");
    }
    // A declared read_back path a driver cannot serve: typed refusal (R2).
    let mut s = spec();
    s.read_back = vec![rb("/out")];
    for (name, driver, caps) in capability_table() {
        let planned = plan_launch(&inputs(&s, HostState::None), &host()).expect("plan");
        let r = finalize_mounts_for_driver(planned.plan, driver, &caps);
        let servable = caps.mounts && caps.read_back_drain;
        assert_eq!(r.is_ok(), servable, "{name}: {r:?}");
        if let Err(e) = r {
            assert_eq!(e.code(), "SANDBOX_READBACK_UNSERVABLE");
        }
    }
}

#[test]
fn pvc_at_the_target_keeps_the_promise() {
    let mut s = spec();
    s.mounts = vec![format!(
        "type=pvc,source=files,target={RUN_FILES_CONTAINER_DIR}"
    )];
    let planned = plan_launch(&inputs(&s, HostState::None), &host()).expect("plan");
    let caps = capability_table()[6].2; // kubernetes without drain
    let f =
        finalize_mounts_for_driver(planned.plan, DriverName::Kubernetes, &caps).expect("finalize");
    assert_eq!(
        f.plan.env.get(RUN_FILES_ENV).map(String::as_str),
        Some(RUN_FILES_CONTAINER_DIR)
    );
}

/// Direction (a): every promised path the plan names is served by a kept
/// mount; every declared read-back path too. Direction (b): kept run-files
/// storage is always named by the variable.
fn assert_no_unserved_promise(name: &str, plan: &LaunchPlan, finalized: bool) {
    for var in PROMISE_VARS {
        if let Some(value) = plan.env.get(*var) {
            assert!(
                plan.mounts.iter().any(|m| m.serves(value)),
                "{name}: {var}={value} names a path no kept mount serves"
            );
        }
    }
    for decl in plan.read_back.iter().filter(|_| finalized) {
        assert!(
            plan.mounts.iter().any(|m| m.serves(&decl.container_path)),
            "{name}: read_back {} is declared but unserved",
            decl.container_path
        );
    }
    // Converse: kept run-files storage is always named, at its own path.
    let storage = plan
        .mounts
        .iter()
        .any(|m| m.origin == MountOrigin::RunFiles && m.serves(RUN_FILES_CONTAINER_DIR))
        || plan
            .read_back
            .iter()
            .any(|d| d.origin == MountOrigin::RunFiles);
    if storage {
        assert_eq!(
            plan.env.get(RUN_FILES_ENV).map(String::as_str),
            Some(RUN_FILES_CONTAINER_DIR),
            "{name}: run-files storage is kept but {RUN_FILES_ENV} does not name it"
        );
    }
    for m in &plan.mounts {
        if m.origin == MountOrigin::RunFiles || m.origin == MountOrigin::ReadBack {
            assert!(
                m.kind != MountKind::Bind || m.source.is_some(),
                "{name}: storage without source"
            );
        }
    }
}

/// The canary of ADR-143 (facts §10 R13, seed rule 6), over the real
/// planning + finalize code for every driver capability set, both
/// directions. It must fail if a variable names a path no kept mount serves.
#[test]
fn no_promise_survives_the_mount_that_served_it() {
    let bot_own = {
        let mut s = spec();
        // The bot names the variable itself, pointing under one of its own binds.
        s.env.insert(RUN_FILES_ENV.into(), "/in/files".into());
        s
    };
    let with_read_back = {
        let mut s = spec();
        s.read_back = vec![rb("/out")];
        s
    };
    for (name, driver, caps) in capability_table() {
        for s in [spec(), bot_own.clone(), with_read_back.clone()] {
            for hs in [HostState::Auto, HostState::None] {
                for run_files in [true, false] {
                    let mut i = inputs(&s, hs);
                    if !run_files {
                        i.run_files_dir = None;
                    }
                    let planned = plan_launch(&i, &host()).expect("plan");
                    assert_no_unserved_promise(&format!("{name} (planned)"), &planned.plan, false);
                    match finalize_mounts_for_driver(planned.plan, driver, &caps) {
                        Ok(f) => {
                            assert_no_unserved_promise(name, &f.plan, true);
                            if !caps.host_bind_mounts {
                                assert!(
                                    !f.plan.mounts.iter().any(Mount::is_host_bind),
                                    "{name}: a host bind survived"
                                );
                            }
                            if run_files && caps.mounts && caps.can_serve_read_back() {
                                assert_eq!(
                                    f.plan.env.get(RUN_FILES_ENV).map(String::as_str),
                                    Some(RUN_FILES_CONTAINER_DIR),
                                    "{name}: a binding or draining driver names run-files"
                                );
                            }
                        }
                        Err(PolicyError::ReadBackUnservable { .. }) => {
                            assert!(
                                !(s.read_back.is_empty() || caps.mounts && caps.read_back_drain),
                                "{name}"
                            );
                        }
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
            }
        }
    }
}

#[test]
fn canary_catches_a_lying_plan() {
    // The checker itself must fail on a variable naming an unserved path.
    let mut plan = LaunchPlan::default();
    plan.env
        .insert(RUN_FILES_ENV.into(), RUN_FILES_CONTAINER_DIR.into());
    let r = std::panic::catch_unwind(|| assert_no_unserved_promise("lying", &plan, true));
    assert!(r.is_err());
}

/// Issue 14 item 2: the workspace becomes a copy (a per-run volume, and
/// `workspace_copy` naming its source) only on a driver without binds that
/// both copies in and exports back; a bind run never copies; a driver that
/// could copy in but not export gets no copy at all (its work would vanish).
#[test]
fn the_workspace_is_copied_only_where_it_comes_back() {
    let base = Capabilities {
        image: true,
        mounts: true,
        archive_in: true,
        read_back_drain: true,
        ..Capabilities::default()
    };
    let plan = || {
        let mut p = LaunchPlan::default();
        p.mounts.push(Mount {
            kind: MountKind::Bind,
            source: Some("/home/dev/repo".into()),
            target: "/home/dev/repo".into(),
            readonly: false,
            size: None,
            origin: MountOrigin::Workspace,
        });
        p
    };
    let finalize = |caps: Capabilities| {
        finalize_mounts_for_driver(plan(), DriverName::Docker, &caps).expect("finalize")
    };
    let bind = finalize(Capabilities {
        host_bind_mounts: true,
        workspace_export: false,
        ..base
    });
    assert!(bind.plan.workspace_copy.is_none());
    assert_eq!(bind.plan.mounts[0].kind, MountKind::Bind);
    let copied = finalize(Capabilities {
        workspace_export: true,
        ..base
    });
    let copy = copied.plan.workspace_copy.as_ref().expect("copy-based");
    assert_eq!(copy.host, "/home/dev/repo");
    assert_eq!(copied.plan.mounts[0].kind, MountKind::Volume);
    assert_eq!(copied.plan.mounts[0].source, None);
    let one_way = finalize(base);
    assert!(one_way.plan.workspace_copy.is_none());
    assert!(one_way.plan.mounts.is_empty());
    assert!(one_way.dropped.is_some(), "the dropped workspace is said");
}

/// Issue 12: a file secret survives on a bindless driver only where the
/// driver copies it (Kubernetes: the per-run Secret); a bindless Docker
/// engine still drops it, and the decision then refuses the run.
#[test]
fn file_secrets_survive_only_where_the_driver_copies_them() {
    let plan = || LaunchPlan {
        mounts: vec![Mount {
            kind: MountKind::Bind,
            source: Some("/dev/shm/iterion-secrets/r1/token".into()),
            target: "/run/iterion/secrets/token".into(),
            readonly: true,
            size: None,
            origin: MountOrigin::SecretFile,
        }],
        ..LaunchPlan::default()
    };
    for (name, driver, caps) in capability_table() {
        let f = finalize_mounts_for_driver(plan(), driver, &caps).expect("finalize");
        let kept = f
            .plan
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::SecretFile && m.kind == MountKind::Bind);
        let want = caps.mounts && (caps.host_bind_mounts || caps.secret_file_copy);
        assert_eq!(kept, want, "{name}");
        assert_eq!(f.dropped.is_some(), !want, "the drop is said: {name}");
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn caps() -> impl Strategy<Value = Capabilities> {
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(mounts, bind, drain, archive)| Capabilities {
                image: true,
                mounts,
                host_bind_mounts: bind,
                read_back_drain: drain,
                archive_in: archive,
                workspace_export: archive && !bind,
                ..Capabilities::default()
            },
        )
    }

    fn mount_spec() -> impl Strategy<Value = String> {
        prop_oneof![
            "/(iterion|in|out|data)(/artifact-files)?"
                .prop_map(|t| format!("type=bind,source=/data{t},target={t}")),
            "/(iterion|out|x)(/artifact-files)?"
                .prop_map(|t| format!("type=volume,source=v,target={t}")),
            "/(iterion|out|x)(/artifact-files)?"
                .prop_map(|t| format!("type=pvc,source=p,target={t}")),
            "/(iterion|out|x)".prop_map(|t| format!("type=tmpfs,target={t}")),
        ]
    }

    proptest! {
        /// A variable naming a path is emitted iff a kept mount serves it.
        #[test]
        fn promise_iff_served(
            caps in caps(),
            mounts in prop::collection::vec(mount_spec(), 0..4),
            bot_value in prop::option::of("/(iterion/artifact-files|in/x|out|nowhere)"),
            read_back in prop::collection::vec("/(out|x|iterion/artifact-files/sub)", 0..2),
            run_files in any::<bool>(),
            auto in any::<bool>(),
        ) {
            let mut s = spec();
            s.mounts = mounts;
            s.read_back = read_back.iter().map(|p| rb(p)).collect();
            if let Some(v) = bot_value {
                s.env.insert(RUN_FILES_ENV.into(), v);
            }
            let hs = if auto { HostState::Auto } else { HostState::None };
            let mut i = inputs(&s, hs);
            if !run_files {
                i.run_files_dir = None;
            }
            let planned = plan_launch(&i, &host()).expect("plan");
            if let Ok(f) = finalize_mounts_for_driver(planned.plan, DriverName::Docker, &caps) {
                if let Some(v) = f.plan.env.get(RUN_FILES_ENV) {
                    prop_assert!(f.plan.mounts.iter().any(|m| m.serves(v)));
                }
                for d in &f.plan.read_back {
                    prop_assert!(f.plan.mounts.iter().any(|m| m.serves(&d.container_path)));
                }
                if !caps.host_bind_mounts {
                    prop_assert!(!f.plan.mounts.iter().any(Mount::is_host_bind));
                }
                if f.plan.mounts.iter().any(|m| m.origin == MountOrigin::RunFiles) {
                    prop_assert!(f.plan.env.contains_key(RUN_FILES_ENV));
                }
            }
        }
    }
}

fn rb(path: &str) -> iterion_core::ReadBackPath {
    path.parse().expect("read-back path")
}
