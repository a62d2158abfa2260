//! The decision over the precedence matrix and its refusals, on a table
//! filesystem (no host is read).

use std::collections::BTreeMap;

use iterion_core::driver::{EngineInfo, HostFootprint};
use iterion_core::{
    Capabilities, DriverName, EventKind, FailureCode, Mode, MountOrigin, NetworkMode, NetworkSpec,
    Spec, Trust,
};

use super::*;
use crate::admission::AdmissionVerdict;
use crate::binds::{HostBindSettings, HostPaths, PathKind, ResolveError, ResolvedPath};
use crate::env::{EnvSnapshot, SandboxEnv};
use crate::error::PolicyError;
use crate::host::{DriverOffer, HostKind};
use crate::mounts::HostSnapshot;
use crate::precedence::{ModeSource, PRODUCT_GLOBAL_DEFAULT, SandboxFlags};
use crate::verdict::EgressVerdict;

const WS: &str = "/work/repo";
const STATE: &str = "/state/iterion";
const SHM: &str = "/shm/iterion-1000";

/// A filesystem of directories named in a table (real = as named).
struct Table(Vec<&'static str>);

impl HostPaths for Table {
    fn resolve(&self, path: &str) -> Result<ResolvedPath, ResolveError> {
        if self.0.contains(&path) {
            Ok(ResolvedPath {
                real: path.to_owned(),
                kind: PathKind::Dir,
            })
        } else {
            Err(ResolveError::NotFound)
        }
    }
}

fn docker_caps(binds: bool) -> Capabilities {
    Capabilities {
        image: true,
        build: true,
        mounts: true,
        host_bind_mounts: binds,
        egress_enforcement: true,
        post_create: true,
        remote_user: true,
        read_back_drain: true,
        archive_in: true,
        ..Capabilities::default()
    }
}

fn ready(driver: DriverName, caps: Capabilities) -> DriverOffer {
    DriverOffer {
        driver,
        readiness: Ok(EngineInfo {
            driver,
            endpoint: "unix:///run/test.sock".into(),
            version: "20.10".into(),
            api_version: "1.41".into(),
            local: caps.host_bind_mounts,
        }),
        capabilities: caps,
        footprint: HostFootprint::default(),
    }
}

fn offers(engine_up: bool) -> Vec<DriverOffer> {
    if engine_up {
        vec![
            ready(DriverName::Docker, docker_caps(true)),
            DriverOffer::unavailable(DriverName::Podman, "no such engine answered"),
            DriverOffer::unavailable(DriverName::Kubernetes, "not a cloud host"),
        ]
    } else {
        vec![
            DriverOffer::unavailable(DriverName::Docker, "no such engine answered"),
            DriverOffer::unavailable(DriverName::Podman, "no such engine answered"),
            DriverOffer::unavailable(DriverName::Kubernetes, "not a cloud host"),
        ]
    }
}

/// Everything a request borrows, owned by the test.
struct Fixture {
    flags: SandboxFlags,
    env: SandboxEnv,
    block: Option<Spec>,
    secrets: Vec<FileSecretShape>,
    bound: Vec<String>,
    repo: RepoSnapshot,
    host: HostSnapshot,
    offers: Vec<DriverOffer>,
    paths: RunPaths,
    binds: HostBindSettings,
    fs: Table,
    trust: Trust,
    local_env: BTreeMap<String, String>,
    runner_missing: Option<String>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            flags: SandboxFlags {
                global_default: Some(PRODUCT_GLOBAL_DEFAULT),
                ..SandboxFlags::default()
            },
            env: SandboxEnv::default(),
            block: None,
            secrets: Vec::new(),
            bound: Vec::new(),
            repo: RepoSnapshot {
                workspace: WS.into(),
                workspace_real: Some(WS.into()),
                owner: Some((1000, 1000)),
                mode_bits: Some(0o755),
                devcontainer: Ok(None),
                devbox_json: None,
                worktree_git_dir: None,
                worktree_git_guards: Vec::new(),
                worktree_git_masks: Vec::new(),
            },
            host: HostSnapshot {
                uid: 1000,
                gid: 1000,
                ..HostSnapshot::default()
            },
            offers: offers(true),
            paths: RunPaths {
                run_files: format!("{STATE}/sandboxes/r1/artifact-files"),
                mask: format!("{STATE}/sandboxes/r1/mask"),
                workspace_manifest: format!("{STATE}/sandboxes/r1/workspace-manifest"),
                attachments: None,
                secrets_dir: Ok(format!("{SHM}/r1")),
            },
            binds: HostBindSettings::default()
                .with_private([STATE.to_owned()])
                .with_managed_roots([STATE.to_owned(), SHM.to_owned()]),
            fs: Table(vec![WS]),
            trust: Trust::Trusted,
            local_env: BTreeMap::new(),
            runner_missing: None,
        }
    }

    fn env(mut self, pairs: &[(&str, &str)]) -> Self {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let snapshot = EnvSnapshot::from_lookup(|k| {
            pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        });
        self.env = SandboxEnv::parse(&snapshot).expect("valid words");
        self
    }

    fn decide(&self) -> SandboxDecision {
        decide(&DecisionRequest {
            run_id: "r1",
            trust: self.trust,
            flags: &self.flags,
            env: &self.env,
            target: None,
            workflow: WorkflowFacts {
                sandbox: self.block.as_ref(),
                file_secrets: Ok(&self.secrets),
                bound_secrets: &self.bound,
            },
            repo: &self.repo,
            host: &self.host,
            offers: &self.offers,
            paths: &self.paths,
            binds: &self.binds,
            fs: &self.fs,
            local_env: &self.local_env,
            runtime_mounts: &[],
            runner_missing: self.runner_missing.as_deref(),
        })
    }
}

fn kinds(events: &[EventKind]) -> Vec<&'static str> {
    events.iter().map(EventKind::name).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier1 {
    Unset,
    FlagNone,
    FlagAuto,
    OverrideAuto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Absent,
    Image,
    AutoNoImage,
}

/// docs/sandbox.md's "Which sandbox a run gets" × block × ITERION_SANDBOX_DEFAULT
/// × engine reachable × trust, against an independent statement of the
/// rules: the verdict, its code and the driver.
#[test]
fn the_precedence_matrix_gives_one_verdict() {
    let tiers = [
        Tier1::Unset,
        Tier1::FlagNone,
        Tier1::FlagAuto,
        Tier1::OverrideAuto,
    ];
    let blocks = [Block::Absent, Block::Image, Block::AutoNoImage];
    let defaults = [None, Some("none"), Some("auto")];
    let mut n = 0;
    for tier in tiers {
        for block in blocks {
            for default in defaults {
                for up in [true, false] {
                    for trust in [Trust::Trusted, Trust::Untrusted] {
                        let mut f = Fixture::new();
                        let mut env = vec![];
                        if tier == Tier1::OverrideAuto {
                            env.push(("ITERION_SANDBOX_OVERRIDE", "auto"));
                        }
                        if let Some(d) = default {
                            env.push(("ITERION_SANDBOX_DEFAULT", d));
                        }
                        f = f.env(&env);
                        f.flags.sandbox = match tier {
                            Tier1::FlagNone => Some(Mode::None),
                            Tier1::FlagAuto => Some(Mode::Auto),
                            _ => None,
                        };
                        f.block = match block {
                            Block::Absent => None,
                            Block::Image => Some(Spec {
                                mode: Mode::Inline,
                                image: Some("img:1".into()),
                                ..Spec::default()
                            }),
                            Block::AutoNoImage => Some(Spec::with_mode(Mode::Auto)),
                        };
                        f.offers = offers(up);
                        f.trust = trust;
                        let d = f.decide();
                        // The oracle: tier 1 none wins; tier-1 auto yields to a
                        // block naming an image; then block, env, global auto.
                        let mode = match (tier, block, default) {
                            (Tier1::FlagNone, _, _) => Mode::None,
                            (Tier1::FlagAuto | Tier1::OverrideAuto, Block::Image, _) => {
                                Mode::Inline
                            }
                            (Tier1::FlagAuto | Tier1::OverrideAuto, _, _) => Mode::Auto,
                            (Tier1::Unset, Block::Image, _) => Mode::Inline,
                            (Tier1::Unset, Block::AutoNoImage, _) => Mode::Auto,
                            (Tier1::Unset, Block::Absent, Some("none")) => Mode::None,
                            (Tier1::Unset, Block::Absent, _) => Mode::Auto,
                        };
                        let sandboxed = mode.is_active() && up;
                        let want = if trust == Trust::Untrusted && !sandboxed {
                            ("denied", Some("untrusted_without_sandbox"))
                        } else if !mode.is_active() {
                            ("host", None)
                        } else if !up && mode == Mode::Auto {
                            ("degraded", None)
                        } else if !up {
                            ("refused", Some("SANDBOX_DRIVER_UNAVAILABLE"))
                        } else {
                            ("sandbox", None)
                        };
                        let case =
                            format!("{tier:?} {block:?} default={default:?} up={up} {trust:?}");
                        assert_eq!(d.mode.mode, mode, "{case}");
                        assert_eq!((d.verdict_kind(), d.code()), want, "{case}: {d:#?}");
                        match want.0 {
                            "sandbox" => {
                                assert_eq!(d.selection, Ok(DriverName::Docker), "{case}");
                                let last = kinds(&d.events);
                                assert!(last.contains(&"sandbox_driver_selected"), "{case}");
                            }
                            "host" => assert_eq!(d.selection, Ok(DriverName::Noop), "{case}"),
                            "degraded" | "refused" => {
                                assert!(d.selection.is_err(), "{case}");
                                let skipped = d
                                    .events
                                    .iter()
                                    .filter(|e| e.name() == "sandbox_skipped")
                                    .count();
                                assert_eq!(skipped, 1, "{case}");
                            }
                            _ => {}
                        }
                        // The admission record agrees with the verdict.
                        assert_eq!(d.admission.admitted(), want.0 != "denied", "{case}");
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 4 * 3 * 3 * 2 * 2);
}

#[test]
fn a_sandboxed_run_gets_a_finalized_guarded_plan_and_its_events_in_order() {
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        network: Some(NetworkSpec {
            mode: Some(NetworkMode::Allowlist),
            ..NetworkSpec::default()
        }),
        read_back: vec!["/out".parse().expect("path")],
        ..Spec::default()
    });
    f.secrets = vec![FileSecretShape {
        name: "token".into(),
        container_path: "/run/secrets/token".into(),
        path_env: Some("TOKEN_FILE".into()),
    }];
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    assert_eq!(plan.driver, DriverName::Docker);
    assert_eq!(plan.egress, EgressVerdict::Enforced);
    let launch = &plan.launch;
    // The planned run-files dir and secret file, judged as the booter will
    // make them; the promise is named because a kept bind serves it.
    let secret = launch
        .mounts
        .iter()
        .find(|m| m.origin == MountOrigin::SecretFile)
        .expect("secret bind");
    assert_eq!(secret.source.as_deref(), Some(&*format!("{SHM}/r1/token")));
    assert!(secret.readonly);
    assert_eq!(
        launch.env.get("TOKEN_FILE").map(String::as_str),
        Some("/run/secrets/token")
    );
    assert!(
        launch
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::RunFiles
                && m.source.as_deref() == Some(&*f.paths.run_files))
    );
    assert!(launch.env.contains_key(iterion_core::plan::RUN_FILES_ENV));
    let declared: Vec<&str> = launch
        .read_back
        .iter()
        .map(|r| r.container_path.as_str())
        .collect();
    assert_eq!(
        declared,
        [iterion_core::plan::RUN_FILES_CONTAINER_DIR, "/out"]
    );
    assert_eq!(
        plan.run_files_cap,
        Some(iterion_core::ByteSize::DEFAULT_READBACK_CAP)
    );
    // A non-root invoker: the sandbox runs as the invoking user.
    assert_eq!(launch.user.as_deref(), Some("1000:1000"));
    assert!(launch.host_gateway_alias);
    assert_eq!(
        kinds(&d.events),
        [
            "sandbox_driver_selected",
            "sandbox_host_state_mounted",
            "sandbox_user_remap"
        ]
    );
    let Some(Ok(binds)) = &d.binds else {
        panic!("binds judged")
    };
    assert_eq!(binds.workspace, WS);
    let Some(Ok(identity)) = &d.identity else {
        panic!("identity decided")
    };
    assert!(identity.workspace_writable);
    assert_eq!(d.source, ModeSource::Workflow.as_str());
}

/// Issue 14 item 5: a run that declares attachments gets its managed
/// attachments dir bound read-only at `/run/iterion/attachments`, judged
/// like the other binds of iterion's own (under the managed roots); a
/// driver without host binds drops it (the runtime copies them in), and a
/// dir outside the managed roots is refused, never bound.
#[test]
fn the_attachments_dir_is_a_judged_read_only_bind_or_dropped() {
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        ..Spec::default()
    });
    let dir = format!("{STATE}/sandboxes/r1/attachments");
    f.paths.attachments = Some(dir.clone());
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    let bind = plan
        .launch
        .mounts
        .iter()
        .find(|m| m.origin == MountOrigin::Attachments)
        .expect("attachments bind");
    assert_eq!(bind.source.as_deref(), Some(dir.as_str()));
    assert_eq!(bind.target, iterion_core::plan::ATTACHMENTS_CONTAINER_DIR);
    assert!(bind.readonly);

    // Without attachments declared, no bind.
    let mut none = Fixture::new();
    none.block = f.block.clone();
    let d = none.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected")
    };
    assert!(
        plan.launch
            .mounts
            .iter()
            .all(|m| m.origin != MountOrigin::Attachments)
    );

    // A bindless engine: dropped, and said so.
    f.offers = vec![ready(DriverName::Docker, docker_caps(false))];
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    assert!(
        plan.launch
            .mounts
            .iter()
            .all(|m| m.origin != MountOrigin::Attachments)
    );
    assert!(kinds(&d.events).contains(&"sandbox_host_binds_dropped"));

    // Outside the managed roots: the bind judge refuses the run.
    let mut outside = Fixture::new();
    outside.block = f.block.clone();
    outside.paths.attachments = Some("/elsewhere/attachments".into());
    let d = outside.decide();
    assert!(
        matches!(&d.verdict, Verdict::Refused(_)),
        "a managed bind outside the managed roots: {d:#?}"
    );
}

/// Issue 14 item 8(b): a read-back path the driver can neither bind nor
/// drain is refused at admission with its own code, before anything is
/// created (ADR-143 R2).
#[test]
fn a_sandbox_without_a_static_runner_is_refused_at_admission() {
    const WHY: &str = "no statically linked iterion to run inside the container: /usr/bin/iterion (installed) is dynamically linked; build it";
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        ..Spec::default()
    });
    f.offers = vec![ready(DriverName::Docker, docker_caps(false))];
    assert!(matches!(f.decide().verdict, Verdict::Sandbox(_)));
    f.runner_missing = Some(WHY.to_owned());
    let d = f.decide();
    assert_eq!(d.verdict, Verdict::Denied);
    assert_eq!(d.code(), Some(RUNNER_UNAVAILABLE));
    assert_eq!(d.refusal_reason(), Some(WHY));
    assert!(matches!(
        &d.admission,
        AdmissionVerdict::Deny {
            failure: FailureCode::LaunchFailed,
            ..
        }
    ));
    // A run on the host needs no runner in a box: admitted.
    f.block = None;
    f.flags.sandbox = Some(Mode::None);
    let d = f.decide();
    assert!(d.admission.admitted(), "{:?}", d.admission);
    assert_eq!(d.verdict_kind(), "host");
}

#[test]
fn an_unservable_read_back_path_is_refused_at_admission() {
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        read_back: vec!["/out".parse().expect("path")],
        ..Spec::default()
    });
    let mut caps = docker_caps(false);
    caps.read_back_drain = false;
    f.offers = vec![ready(DriverName::Docker, caps)];
    let d = f.decide();
    assert_eq!(d.verdict, Verdict::Denied);
    assert_eq!(d.verdict_kind(), "denied");
    assert_eq!(d.code(), Some(READBACK_UNSERVABLE));
    let AdmissionVerdict::Deny {
        code,
        reason,
        failure,
    } = &d.admission
    else {
        panic!("denied at admission")
    };
    assert_eq!(code, READBACK_UNSERVABLE);
    assert_eq!(*failure, FailureCode::LaunchFailed);
    assert!(reason.contains("/out"), "{reason}");
    assert_eq!(
        d.driver.as_ref().map(|s| s.gaps.clone()),
        Some(vec!["read_back"])
    );
    // The run-files promise alone is silently not laid (R5): admitted.
    f.block.as_mut().expect("block").read_back.clear();
    let d = f.decide();
    assert_eq!(d.verdict_kind(), "sandbox", "{d:#?}");
}

#[test]
fn file_secrets_without_a_delivery_channel_are_refused_at_boot() {
    let secret = FileSecretShape {
        name: "token".into(),
        container_path: "/run/secrets/token".into(),
        path_env: None,
    };
    // An explicit opt-out: the noop driver has no mount to deliver them.
    let mut f = Fixture::new();
    f.flags.sandbox = Some(Mode::None);
    f.secrets = vec![secret.clone()];
    let d = f.decide();
    assert_eq!(d.verdict_kind(), "refused");
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
    // A driver without host binds drops the bind.
    let mut f = Fixture::new();
    f.offers = vec![ready(DriverName::Docker, docker_caps(false))];
    f.secrets = vec![secret.clone()];
    let d = f.decide();
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
    assert!(
        d.refusal_reason()
            .is_some_and(|r| r.contains("no host bind mounts")),
        "{d:#?}"
    );
    // No memory filesystem to hold them.
    let mut f = Fixture::new();
    f.secrets = vec![secret];
    f.paths.secrets_dir = Err("no tmpfs".into());
    assert_eq!(f.decide().refusal_reason(), Some("no tmpfs"));
    // A secret the host cannot supply names itself.
    let f = Fixture::new();
    let d = decide(&DecisionRequest {
        workflow: WorkflowFacts {
            sandbox: None,
            file_secrets: Err("secret \"GH\" is required but GH is not set on the host"),
            bound_secrets: &[],
        },
        ..request(&f)
    });
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
}

fn request(f: &Fixture) -> DecisionRequest<'_> {
    DecisionRequest {
        run_id: "r1",
        trust: f.trust,
        flags: &f.flags,
        env: &f.env,
        target: None,
        workflow: WorkflowFacts {
            sandbox: f.block.as_ref(),
            file_secrets: Ok(&f.secrets),
            bound_secrets: &f.bound,
        },
        repo: &f.repo,
        host: &f.host,
        offers: &f.offers,
        paths: &f.paths,
        binds: &f.binds,
        fs: &f.fs,
        local_env: &f.local_env,
        runtime_mounts: &[],
        runner_missing: None,
    }
}

#[test]
fn binds_identity_and_egress_refuse_with_the_reason_doctor_shows() {
    // A workspace that does not resolve is refused by the bind judge.
    let mut f = Fixture::new();
    f.fs = Table(vec![]);
    let d = f.decide();
    let Some(Err(why)) = &d.binds else {
        panic!("binds refused: {d:#?}")
    };
    assert_eq!(d.refusal_reason(), Some(why.as_str()));
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
    assert!(d.identity.is_none(), "not reached");
    // A declared bind the judge refuses by its spelling is a bind refusal
    // too, though it is caught while the spec is validated.
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        mounts: vec!["type=bind,source=/etc,target=/x".into()],
        ..Spec::default()
    });
    let d = f.decide();
    let Some(Err(why)) = &d.binds else {
        panic!("binds refused: {d:#?}")
    };
    assert_eq!(d.refusal_reason(), Some(why.as_str()));
    assert!(why.contains("/etc"), "{why}");
    // Root in someone else's checkout may not run as root.
    let mut f = Fixture::new();
    f.host.uid = 0;
    f.host.gid = 0;
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        user: Some("root".into()),
        ..Spec::default()
    });
    let d = f.decide();
    let Some(Err(why)) = &d.identity else {
        panic!("identity refused: {d:#?}")
    };
    assert_eq!(d.refusal_reason(), Some(why.as_str()));
    // Inline egress a driver cannot confine: refused; auto: advised.
    let mut f = Fixture::new();
    let mut caps = docker_caps(true);
    caps.egress_enforcement = false;
    f.offers = vec![ready(DriverName::Docker, caps)];
    let net = NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        ..NetworkSpec::default()
    };
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        network: Some(net.clone()),
        ..Spec::default()
    });
    let d = f.decide();
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
    assert_eq!(
        d.driver.as_ref().map(|s| s.gaps.clone()),
        Some(vec!["egress enforcement"])
    );
    f.block = Some(Spec {
        mode: Mode::Auto,
        image: Some("img:1".into()),
        network: Some(net),
        ..Spec::default()
    });
    let d = f.decide();
    assert_eq!(d.verdict_kind(), "sandbox");
    assert!(kinds(&d.events).contains(&"sandbox_egress_unenforced"));
}

/// argv\[0\] is read by the one host detection, and the event says the
/// host the decision used.
#[test]
fn the_host_kind_comes_from_the_snapshot_with_argv0() {
    let mut f = Fixture::new();
    f.env = SandboxEnv::parse(&EnvSnapshot::default().with_argv0("/opt/iterion-desktop"))
        .expect("parse");
    let d = f.decide();
    assert_eq!(d.host, HostKind::Desktop);
    assert!(d.events.iter().any(|e| matches!(
        e,
        EventKind::SandboxDriverSelected { host, .. } if host == "desktop"
    )));
}

/// A devcontainer that cannot be used refuses an `auto` run before driver
/// selection, even on a runtime-less host (as the booter always did), and
/// never an inline one (which does not read it).
#[test]
fn a_broken_devcontainer_refuses_auto_only() {
    let mut f = Fixture::new();
    f.repo.devcontainer = Err(PolicyError::Devcontainer {
        path: "/work/repo/.devcontainer.json".into(),
        reason: "not JSON".into(),
    });
    f.offers = offers(false);
    let d = f.decide();
    assert_eq!(d.verdict_kind(), "refused");
    assert!(matches!(d.spec, Some(Err(_))));
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        ..Spec::default()
    });
    f.offers = offers(true);
    assert_eq!(f.decide().verdict_kind(), "sandbox");
}

/// Issue 17: a bound secret goes in as a placeholder only on a driver that
/// installs the run's CA behind an egress proxy; else inline refuses and
/// auto delivers it plain with `sandbox_secret_egress_unavailable`.
#[test]
fn bound_secrets_are_placeholders_only_where_the_proxy_can_serve_them() {
    let network = NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        rules: vec!["api.example.com".parse().expect("rule")],
        ..NetworkSpec::default()
    };
    let fixture = |mode: Mode, tls: bool, network: Option<NetworkSpec>| {
        let mut f = Fixture::new();
        f.block = Some(Spec {
            mode,
            image: Some("img:1".into()),
            network,
            ..Spec::default()
        });
        f.bound = vec!["API_KEY".into()];
        let mut caps = docker_caps(true);
        caps.tls_inspection = tls;
        f.offers[0] = ready(DriverName::Docker, caps);
        f
    };
    let d = fixture(Mode::Inline, true, Some(network.clone())).decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    assert!(plan.secret_placeholders);
    assert!(!kinds(&d.events).contains(&"sandbox_secret_egress_unavailable"));
    // No CA install on the driver: inline refuses, naming the secret.
    let d = fixture(Mode::Inline, false, Some(network.clone())).decide();
    assert_eq!(d.code(), Some("SANDBOX_SPEC_REFUSED"));
    assert!(d.refusal_reason().is_some_and(|r| r.contains("API_KEY")));
    // Auto on the same driver, or with an open network: plain, and said.
    for (tls, net) in [(false, Some(network)), (true, None)] {
        let d = fixture(Mode::Auto, tls, net).decide();
        let Verdict::Sandbox(plan) = &d.verdict else {
            panic!("sandbox expected: {d:#?}")
        };
        assert!(!plan.secret_placeholders);
        assert!(kinds(&d.events).contains(&"sandbox_secret_egress_unavailable"));
    }
    // A host run (no engine) holds it plain too, and says so.
    let mut f = fixture(Mode::Auto, true, None);
    f.offers = offers(false);
    let d = f.decide();
    assert_eq!(d.verdict_kind(), "degraded");
    assert!(kinds(&d.events).contains(&"sandbox_secret_egress_unavailable"));
}

/// A repository without `.git/hooks` (`git init --template=`): the guard
/// cannot bind what is absent, so the run's empty read-only directory is
/// bound there instead and the box cannot create a hook the host's git
/// would run (issue 31 item 1).
#[test]
fn an_absent_hooks_dir_of_a_worktrees_repository_is_masked_read_only() {
    const GIT: &str = "/root/proj/.git";
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        ..Spec::default()
    });
    f.repo.worktree_git_dir = Some(GIT.into());
    f.repo.worktree_git_guards = vec![format!("{GIT}/config")];
    f.repo.worktree_git_masks = vec![format!("{GIT}/hooks")];
    let config = format!("{GIT}/config");
    f.fs = Table(vec![WS, GIT, Box::leak(config.clone().into_boxed_str())]);
    f.host.existing.insert(GIT.into());
    f.host.existing.insert(config);
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    let hooks = format!("{GIT}/hooks");
    let mask = plan
        .launch
        .mounts
        .iter()
        .find(|m| m.target == hooks)
        .expect("a bind over the absent hooks");
    assert_eq!(mask.origin, MountOrigin::Mask);
    assert!(mask.readonly, "{mask:?}");
    assert_eq!(
        mask.source.as_deref(),
        Some(f.paths.mask.as_str()),
        "the run's empty directory"
    );
    let git_at = plan
        .launch
        .mounts
        .iter()
        .position(|m| m.origin == MountOrigin::WorktreeGit)
        .expect("the .git bind");
    let mask_at = plan
        .launch
        .mounts
        .iter()
        .position(|m| m.target == hooks)
        .expect("the mask");
    assert!(git_at < mask_at, "laid over the .git bind, not under it");
}

/// `worktree: auto` (facts §6.5): the repository's shared `.git` is bound
/// read-write at its own path, judged as a workspace (so a repository under
/// a home is fine); a bindless engine drops it with the rest and says so.
#[test]
fn a_worktrees_git_dir_is_bound_at_its_own_path_or_dropped_bindless() {
    const GIT: &str = "/root/proj/.git";
    let mut f = Fixture::new();
    f.block = Some(Spec {
        mode: Mode::Inline,
        image: Some("img:1".into()),
        ..Spec::default()
    });
    f.repo.worktree_git_dir = Some(GIT.into());
    f.repo.worktree_git_guards = vec![format!("{GIT}/hooks")];
    let hooks = format!("{GIT}/hooks");
    f.fs = Table(vec![WS, GIT, Box::leak(hooks.clone().into_boxed_str())]);
    f.host.existing.insert(GIT.into());
    f.host.existing.insert(hooks.clone());
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    let git = plan
        .launch
        .mounts
        .iter()
        .find(|m| m.origin == MountOrigin::WorktreeGit)
        .expect("the .git bind");
    assert_eq!(git.source.as_deref(), Some(GIT));
    assert_eq!(git.target, GIT);
    assert!(!git.readonly, "commits write objects and refs");
    let guard = plan
        .launch
        .mounts
        .iter()
        .find(|m| m.origin == MountOrigin::WorktreeGitGuard)
        .expect("the hooks guard");
    assert_eq!(guard.source.as_deref(), Some(hooks.as_str()));
    assert_eq!(guard.target, hooks);
    assert!(guard.readonly, "no hook planted from the box");

    f.offers = vec![
        ready(DriverName::Docker, docker_caps(false)),
        DriverOffer::unavailable(DriverName::Podman, "no such engine answered"),
        DriverOffer::unavailable(DriverName::Kubernetes, "not a cloud host"),
    ];
    let d = f.decide();
    let Verdict::Sandbox(plan) = &d.verdict else {
        panic!("sandbox expected: {d:#?}")
    };
    assert!(
        !plan
            .launch
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::WorktreeGit)
    );
    let dropped = d.events.iter().find_map(|e| match e {
        EventKind::SandboxHostBindsDropped { dropped, .. } => Some(dropped),
        _ => None,
    });
    assert!(
        dropped.is_some_and(|d| d.iter().any(|b| b.source == GIT)),
        "{:?}",
        d.events
    );
}
