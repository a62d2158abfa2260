//! Engine-specific checks beyond the shared suite.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_core::driver::{DriverObserver, NullObserver, Progress};
use iterion_core::plan::{EgressAttachment, ResolvedBuild};
use iterion_core::{Driver, DriverError, DriverName, ExecRequest, OutputStream, RunInfo};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_testkit::driver::{Started, base_plan, prepare, run_id, start};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::support::{BUSYBOX, Engine, driver};

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl DriverObserver for Recorder {
    fn log(&self, stream: OutputStream, line: &str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("{}: {line}", stream.as_str()));
    }
    fn progress(&self, progress: Progress) {
        self.0.lock().expect("lock").push(format!("{progress:?}"));
    }
}

impl Recorder {
    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("lock").clone()
    }
}

async fn names_itself(engine: Engine, expected: DriverName) {
    let d = driver(engine, DockerSettings::default()).await;
    assert_eq!(d.name(), expected);
    let info = d.ping().await.expect("ping");
    assert_eq!(info.api_version, "1.41");
    assert!(info.local);
    let env = BTreeMap::from([("DOCKER_HOST".to_owned(), engine.endpoint())]);
    let found = DockerDriver::discover(&env).await.expect("discover");
    assert_eq!(found.name(), expected);
}

#[tokio::test]
async fn dockerd_names_itself_docker() {
    names_itself(Engine::Docker, DriverName::Docker).await;
}

#[tokio::test]
async fn podman_names_itself_podman() {
    names_itself(Engine::Podman, DriverName::Podman).await;
}

#[tokio::test]
async fn unreachable_endpoint_is_unavailable() {
    let err = DockerDriver::connect("unix:///nonexistent/docker.sock", DockerSettings::default())
        .await
        .expect_err("no engine there");
    assert_eq!(err.code(), "SANDBOX_DRIVER_UNAVAILABLE");
}

#[tokio::test]
async fn bindless_capabilities() {
    let d = driver(
        Engine::Docker,
        DockerSettings {
            binds: iterion_driver_docker::BindsMode::None,
            ..DockerSettings::default()
        },
    )
    .await;
    let caps = d.capabilities();
    assert!(!caps.host_bind_mounts);
    assert!(caps.read_back_drain);
    let local = driver(Engine::Docker, DockerSettings::default()).await;
    assert!(local.capabilities().host_bind_mounts);
}

async fn missing_image_unavailable(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    // A registry on a closed loopback port: refused at once, never the network.
    let err = d
        .ensure_image("127.0.0.1:1/iterion/missing:nope", &NullObserver)
        .await
        .expect_err("cannot pull");
    assert!(
        matches!(err, DriverError::ImageUnavailable { .. }),
        "{err} ({})",
        err.code()
    );
}

#[tokio::test]
async fn dockerd_missing_image_is_unavailable() {
    missing_image_unavailable(Engine::Docker).await;
}

#[tokio::test]
async fn podman_missing_image_is_unavailable() {
    missing_image_unavailable(Engine::Podman).await;
}

#[tokio::test]
async fn stalled_pull_times_out_naming_the_variable() {
    // A "registry" that accepts and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let d = driver(
        Engine::Docker,
        DockerSettings {
            pull_timeout: std::time::Duration::from_secs(2),
            ..DockerSettings::default()
        },
    )
    .await;
    let err = d
        .ensure_image(&format!("127.0.0.1:{port}/iterion/stall:x"), &NullObserver)
        .await
        .expect_err("stalls");
    hold.abort();
    assert!(matches!(err, DriverError::PhaseTimeout { .. }), "{err}");
    assert!(
        err.to_string().contains("ITERION_SANDBOX_PULL_TIMEOUT"),
        "{err}"
    );
}

async fn post_create_streams_and_fails_cleanly(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    let mut plan = base_plan(BUSYBOX);
    plan.post_create = Some("echo one; echo two >&2; echo three".to_owned());
    let rec = Recorder::default();
    let info = info("pc");
    let run = d
        .start(prepare(&*d, &plan).await, &info, &rec)
        .await
        .expect("start");
    let lines = rec.lines();
    for want in ["stdout: one", "stderr: two", "stdout: three"] {
        assert!(
            lines.iter().any(|l| l == want),
            "{want} missing in {lines:?}"
        );
    }
    run.cleanup().await.expect("cleanup");

    plan.post_create = Some("echo boom >&2; exit 7".to_owned());
    let info = info_with("pcfail");
    let err = d
        .start(prepare(&*d, &plan).await, &info, &NullObserver)
        .await
        .err()
        .expect("post_create fails the start");
    match err {
        DriverError::PostCreateFailed {
            exit_code,
            output_tail,
        } => {
            assert_eq!(exit_code, 7);
            assert!(output_tail.contains("boom"));
        }
        other => panic!("{other}"),
    }
    let left = managed_of(&*d, &info).await;
    assert!(left.is_empty(), "failed start left {left:?}");
}

/// What the engine still holds for `info`'s run.
async fn managed_of(d: &dyn Driver, info: &RunInfo) -> Vec<iterion_core::driver::ManagedResource> {
    d.list_managed()
        .await
        .expect("list")
        .into_iter()
        .filter(|r| r.run_id == info.run_id.as_str())
        .collect()
}

/// A post_create past `post_create_timeout` fails the start with
/// `SANDBOX_SETUP_TIMEOUT` naming its variable, its output so far logged,
/// nothing left on the engine.
async fn post_create_past_its_bound_times_out(engine: Engine) {
    let settings = DockerSettings {
        post_create_timeout: Duration::from_secs(2),
        ..DockerSettings::default()
    };
    let d = driver(engine, settings).await;
    let mut plan = base_plan(BUSYBOX);
    plan.post_create = Some("echo started; sleep 300; echo slept-through".to_owned());
    let rec = Recorder::default();
    let info = info_with("pctimeout");
    let err = d
        .start(prepare(&*d, &plan).await, &info, &rec)
        .await
        .err()
        .expect("a post_create past its bound fails the start");
    assert_eq!(err.code(), "SANDBOX_SETUP_TIMEOUT", "{engine:?}: {err}");
    match &err {
        DriverError::PhaseTimeout {
            phase,
            timeout,
            variable,
        } => {
            assert_eq!(*phase, "post_create");
            assert_eq!(*timeout, Duration::from_secs(2));
            assert_eq!(*variable, "ITERION_SANDBOX_POST_CREATE_TIMEOUT");
        }
        other => panic!("{engine:?}: {other}"),
    }
    let lines = rec.lines();
    assert!(lines.iter().any(|l| l == "stdout: started"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("slept-through")));
    let left = managed_of(&*d, &info).await;
    assert!(left.is_empty(), "{engine:?}: timed-out start left {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_post_create_timeout() {
    post_create_past_its_bound_times_out(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_post_create_timeout() {
    post_create_past_its_bound_times_out(Engine::Podman).await;
}

fn info(tag: &str) -> RunInfo {
    info_with(tag)
}

fn info_with(tag: &str) -> RunInfo {
    RunInfo {
        run_id: run_id(tag),
        run_name: None,
        host_workspace: std::env::temp_dir().display().to_string(),
        max_duration: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_post_create() {
    post_create_streams_and_fails_cleanly(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_post_create() {
    post_create_streams_and_fails_cleanly(Engine::Podman).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_container_name_is_replaced() {
    let d = driver(Engine::Docker, DockerSettings::default()).await;
    let info = info("stale");
    let name = format!("iterion-{}", info.run_id);
    d.client()
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(BUSYBOX.to_owned()),
                cmd: Some(vec!["true".to_owned()]),
                labels: Some(
                    [("iterion.io/managed".to_owned(), "true".to_owned())]
                        .into_iter()
                        .collect(),
                ),
                ..Default::default()
            },
        )
        .await
        .expect("stale container");
    let run = d
        .start(
            prepare(&*d, &base_plan(BUSYBOX)).await,
            &info,
            &NullObserver,
        )
        .await
        .expect("start replaces the stale container");
    assert!(run.is_alive().await.expect("alive"));
    run.cleanup().await.expect("cleanup");
}

/// The host addresses a confined container must NOT reach.
fn other_host_addresses(gateway: &str) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|cidr| cidr.split('/').next())
        .filter(|ip| *ip != gateway && !ip.starts_with("127."))
        .map(str::to_owned)
        .collect()
}

async fn egress_is_confined(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    assert!(d.capabilities().egress_enforcement);
    // One listener on every host address: reachable only via the gateway.
    let listener = TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.write_all(b"hello-from-host\n").await;
        }
    });
    let token = "0123456789abcdef-secret-token";
    let mut plan = base_plan(BUSYBOX);
    // Prints the proxy URL: the observer must only ever see it redacted.
    plan.post_create = Some("env | grep -i _proxy".to_owned());
    plan.egress = Some(EgressAttachment {
        proxy_port: port,
        token: token.to_owned(),
        enforce: true,
    });
    let rec = Arc::new(Recorder::default());
    let s: Started = {
        let info = info("egress");
        let run = d
            .start(prepare(&*d, &plan).await, &info, &*rec)
            .await
            .expect("start confined");
        wrap(run, info)
    };
    let env = s.sh("env | grep -i _proxy | sort").await;
    let env = Started::stdout(&env);
    let proxy_line = env
        .lines()
        .find(|l| l.starts_with("HTTPS_PROXY="))
        .expect("HTTPS_PROXY set")
        .to_owned();
    let url = proxy_line.trim_start_matches("HTTPS_PROXY=");
    assert!(url.starts_with(&format!("http://t:{token}@")), "{url}");
    let gateway = url
        .rsplit('@')
        .next()
        .and_then(|hp| hp.rsplit_once(':'))
        .map(|(h, _)| h.to_owned())
        .expect("gateway");
    assert!(env.contains("NO_PROXY=localhost,127.0.0.1"));
    assert!(env.contains("http_proxy="));
    let probe = |ip: String| format!("nc -w 3 {ip} {port} </dev/null 2>/dev/null || true");
    let via_gateway = s.sh(&probe(gateway.clone())).await;
    assert_eq!(
        Started::stdout(&via_gateway),
        "hello-from-host",
        "gateway unreachable"
    );
    let others = other_host_addresses(&gateway);
    assert!(!others.is_empty());
    for ip in others {
        let direct = s.sh(&probe(ip.clone())).await;
        assert_eq!(
            Started::stdout(&direct),
            "",
            "direct connect to {ip} worked"
        );
    }
    let lines = rec.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("HTTPS_PROXY=http://t:[REDACTED]@")),
        "post_create output not streamed: {lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(token)),
        "token leaked into observer lines"
    );
    let net = format!("iterion-{}", s.info.run_id);
    s.run.cleanup().await.expect("cleanup");
    server.abort();
    assert!(
        d.client().inspect_network(&net, None).await.is_err(),
        "network {net} left behind"
    );
}

fn wrap(run: Box<dyn iterion_core::SandboxRun>, info: RunInfo) -> Started {
    Started::from_parts(run, info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_egress_is_confined() {
    egress_is_confined(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_egress_is_confined() {
    egress_is_confined(Engine::Podman).await;
}

fn scratch_context(dockerfile: &str) -> (tempfile::TempDir, ResolvedBuild) {
    let ws = tempfile::tempdir().expect("tmp");
    let ctx = ws.path().join("image");
    std::fs::create_dir(&ctx).expect("mkdir");
    std::fs::copy("/bin/busybox", ctx.join("busybox")).expect("copy busybox");
    std::fs::write(ctx.join("Dockerfile"), dockerfile).expect("write");
    let build = ResolvedBuild {
        dockerfile: ctx.join("Dockerfile").display().to_string(),
        context: ctx.display().to_string(),
        args: BTreeMap::new(),
        declared: Default::default(),
    };
    (ws, build)
}

async fn builds_from_scratch(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    let (ws, build) = scratch_context(
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
    );
    let mut plan = base_plan("unused");
    plan.image = None;
    plan.build = Some(build);
    let info = RunInfo {
        host_workspace: ws.path().display().to_string(),
        ..info("build")
    };
    let rec = Recorder::default();
    let prepared = prepare(&*d, &plan).await;
    let built = d.build(prepared, &info, &rec).await.expect("build");
    let tag = built.plan.image.clone().expect("tag");
    assert_eq!(
        tag,
        format!(
            "iterion-sandbox-build:{}",
            info.run_id.as_str().replace('_', "-")
        )
    );
    assert!(
        rec.lines().iter().any(|l| l.contains("Build")),
        "no build lines"
    );
    let run = d
        .start(built, &info, &NullObserver)
        .await
        .expect("start built");
    let mut session = run
        .exec(ExecRequest::new(["sh", "-c", "echo built"]))
        .await
        .expect("exec");
    let out =
        iterion_core::driver::collect_output(session.as_mut(), Default::default(), &mut |_| {})
            .await
            .expect("collect");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "built");
    run.cleanup().await.expect("cleanup");
    let _ = d
        .client()
        .remove_image(
            &tag,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;

    let (ws, build) = scratch_context("FROM scratch\nCOPY does-not-exist /x\n");
    let mut plan = base_plan("unused");
    plan.image = None;
    plan.build = Some(build);
    let info = RunInfo {
        host_workspace: ws.path().display().to_string(),
        ..info_with("buildfail")
    };
    let err = d
        .build(prepare(&*d, &plan).await, &info, &NullObserver)
        .await
        .expect_err("build fails");
    match err {
        DriverError::BuildFailed { stderr_tail } => {
            assert!(stderr_tail.len() <= 4096);
            assert!(stderr_tail.contains("does-not-exist"), "{stderr_tail}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_builds_from_scratch_offline() {
    builds_from_scratch(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_builds_from_scratch_offline() {
    builds_from_scratch(Engine::Podman).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindless_run_files_volume_is_per_run_and_removed() {
    let d = driver(
        Engine::Docker,
        DockerSettings {
            binds: iterion_driver_docker::BindsMode::None,
            ..DockerSettings::default()
        },
    )
    .await;
    let s = start(&*d, "vol", base_plan(BUSYBOX)).await;
    let vols: Vec<_> = d
        .list_managed()
        .await
        .expect("list")
        .into_iter()
        .filter(|r| {
            r.run_id == s.info.run_id.as_str()
                && r.kind == iterion_core::driver::ResourceKind::Volume
        })
        .collect();
    assert_eq!(vols.len(), 1, "{vols:?}");
    assert_eq!(vols[0].name, format!("iterion-{}-0", s.info.run_id));
    s.run.cleanup().await.expect("cleanup");
    assert!(d.client().inspect_volume(&vols[0].name).await.is_err());
}

async fn containment_defaults(engine: Engine) {
    let d = driver(
        engine,
        DockerSettings {
            limits: iterion_core::plan::Limits {
                nano_cpus: Some(500_000_000),
                ..iterion_core::plan::Limits::default()
            }
            .with_memory(Some(iterion_core::ByteSize(256 << 20))),
            ..DockerSettings::default()
        },
    )
    .await;
    let s = start(&*d, "contain", base_plan(BUSYBOX)).await;
    let inspect = d
        .client()
        .inspect_container(s.run.container(), None)
        .await
        .expect("inspect");
    let hc = inspect.host_config.expect("host config");
    assert_eq!(hc.privileged, Some(false));
    assert!(
        hc.security_opt
            .unwrap_or_default()
            .iter()
            .any(|o| o.starts_with("no-new-privileges")),
        "no-new-privileges missing"
    );
    assert_eq!(hc.pids_limit, Some(4096));
    assert_eq!(hc.memory, Some(256 << 20));
    // No swap on top of the memory limit (issue 19 #5).
    assert_eq!(hc.memory_swap, Some(256 << 20));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(
        labels.get("iterion.io/managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("iterion.io/run-id").map(String::as_str),
        Some(s.info.run_id.as_str())
    );
    assert!(labels.contains_key("iterion.io/run-name"));
    // No engine socket inside, and the process really has no_new_privs.
    let out = s
        .sh("grep NoNewPrivs /proc/self/status; ls /var/run/docker.sock /run/podman 2>&1 | grep -c 'No such'")
        .await;
    let text = Started::stdout(&out);
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    s.run.cleanup().await.expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_containment_defaults() {
    containment_defaults(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_containment_defaults() {
    containment_defaults(Engine::Podman).await;
}

async fn orphans_listed_and_removed(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    let listener = TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let mut plan = base_plan(BUSYBOX);
    plan.egress = Some(EgressAttachment {
        proxy_port: listener.local_addr().expect("addr").port(),
        token: "t0k".to_owned(),
        enforce: true,
    });
    let s = start(&*d, "orphan", plan).await;
    // Simulate a crashed owner: kill the container, never call cleanup.
    d.client()
        .kill_container(
            s.run.container(),
            Some(bollard::query_parameters::KillContainerOptions {
                signal: "SIGKILL".to_owned(),
            }),
        )
        .await
        .expect("kill");
    let mine = |all: Vec<iterion_core::driver::ManagedResource>| -> Vec<_> {
        all.into_iter()
            .filter(|r| r.run_id == s.info.run_id.as_str())
            .collect()
    };
    let found = mine(d.list_managed().await.expect("list"));
    let kinds: Vec<_> = found.iter().map(|r| r.kind).collect();
    use iterion_core::driver::ResourceKind as K;
    for k in [K::Container, K::Network, K::Volume] {
        assert!(kinds.contains(&k), "{k:?} not listed: {found:?}");
    }
    // Containers first: a network or volume in use cannot be removed.
    let mut ordered = found.clone();
    ordered.sort_by_key(|r| match r.kind {
        K::Container => 0,
        K::Network => 1,
        K::Volume | K::HostDir | K::Secret => 2,
    });
    for r in &ordered {
        d.remove_managed(r).await.expect("remove");
        d.remove_managed(r).await.expect("remove again is success");
    }
    assert!(mine(d.list_managed().await.expect("list")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_orphans_listed_and_removed() {
    orphans_listed_and_removed(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_orphans_listed_and_removed() {
    orphans_listed_and_removed(Engine::Podman).await;
}

#[tokio::test]
async fn foreign_prepared_is_refused() {
    let d = driver(Engine::Docker, DockerSettings::default()).await;
    let prepared = iterion_core::Prepared {
        driver: DriverName::Podman,
        plan: base_plan(BUSYBOX),
    };
    let err = d
        .start(prepared, &info("foreign"), &NullObserver)
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), "SANDBOX_FOREIGN_PREPARED");
}

#[tokio::test]
async fn prepare_runs_the_guards_and_refuses_binds_when_bindless() {
    let d = driver(Engine::Docker, DockerSettings::default()).await;
    let mut plan = base_plan(BUSYBOX);
    plan.mounts.push(iterion_core::Mount {
        kind: iterion_core::MountKind::Bind,
        source: Some("/var/run/docker.sock".to_owned()),
        target: "/var/run/docker.sock".to_owned(),
        readonly: false,
        size: None,
        origin: iterion_core::MountOrigin::Workflow,
    });
    let err = d
        .prepare(&plan, &NullObserver)
        .await
        .expect_err("engine socket refused");
    assert_eq!(err.code(), "SANDBOX_SPEC_REFUSED", "{err}");

    let ws = tempfile::tempdir().expect("tmp");
    let mut plan = base_plan(BUSYBOX);
    plan.mounts.push(iterion_core::Mount {
        kind: iterion_core::MountKind::Bind,
        source: Some(ws.path().display().to_string()),
        target: "/tmp/iterion-ws".to_owned(),
        readonly: false,
        size: None,
        origin: iterion_core::MountOrigin::Workspace,
    });
    d.prepare(&plan, &NullObserver)
        .await
        .expect("a workspace bind is fine locally");
    let bindless = driver(
        Engine::Docker,
        DockerSettings {
            binds: iterion_driver_docker::BindsMode::None,
            ..DockerSettings::default()
        },
    )
    .await;
    let err = bindless
        .prepare(&plan, &NullObserver)
        .await
        .expect_err("no host bind in bindless mode");
    assert_eq!(err.code(), "SANDBOX_SPEC_REFUSED", "{err}");
}

async fn host_gateway_alias_resolves(engine: Engine) {
    let d = driver(engine, DockerSettings::default()).await;
    let listener = TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.write_all(b"mcp-here\n").await;
        }
    });
    let mut plan = base_plan(BUSYBOX);
    plan.host_gateway_alias = true;
    let s = start(&*d, "alias", plan).await;
    let hosts = s.sh("grep host.docker.internal /etc/hosts").await;
    let line = Started::stdout(&hosts);
    let ip = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "alias is not an address: {line:?}"
    );
    let out = s
        .sh(&format!(
            "nc -w 3 host.docker.internal {port} </dev/null 2>/dev/null || true"
        ))
        .await;
    assert_eq!(Started::stdout(&out), "mcp-here");
    s.run.cleanup().await.expect("cleanup");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_host_gateway_alias_resolves() {
    host_gateway_alias_resolves(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_host_gateway_alias_resolves() {
    host_gateway_alias_resolves(Engine::Podman).await;
}

#[tokio::test]
async fn discover_all_finds_both_engines() {
    let env = BTreeMap::from([
        ("DOCKER_HOST".to_owned(), Engine::Docker.endpoint()),
        ("CONTAINER_HOST".to_owned(), Engine::Podman.endpoint()),
    ]);
    let found = DockerDriver::discover_all(&env).await.expect("discover");
    let names: Vec<_> = found.iter().map(|d| d.name()).collect();
    assert!(names.contains(&DriverName::Docker), "{names:?}");
    assert!(names.contains(&DriverName::Podman), "{names:?}");
}
