//! Agents inside real containers on dockerd and Podman, confined by the
//! real egress proxy exactly as a run is: the container sits on a per-run
//! internal network whose one reachable address is the proxy; the
//! scripted provider listens on the host's loopback under a test name the
//! proxy resolves (`provider.test` → 127.0.0.1, allowed by rule).
//!
//! Proves that claw's built-in tools run in the container (its hostname,
//! a file in its workspace), that the key reaches the provider and nothing
//! else leaves, that a provider missing from the allowlist fails the node,
//! and that the claude CLI runs in the box.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use iterion_agent::runner::{RunnerBinary, runner_mount};
use iterion_agent::{AgentError, AgentPlacement, BackendName, EnvSnapshot, run_agent};
use iterion_core::plan::EgressAttachment;
use iterion_core::{Driver, EventKind, Mount, MountKind, MountOrigin, NetworkMode, NetworkSpec};
use iterion_driver_docker::{BindsMode, DockerDriver, DockerSettings};
use iterion_netproxy::{
    BlockedRequest, EgressProxy, Policy, ProxyHandle, ProxyOptions, ProxyToken, StaticResolver,
};
use iterion_testkit::agent::{claude_cli, static_iterion};
use iterion_testkit::driver::{Started, base_plan, start};
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::json;

use crate::agent::support::*;

pub const BUSYBOX: &str = "iterion-test/busybox:local";
pub const SLIM: &str = "iterion-sandbox-slim:local";
const PROVIDER_HOST: &str = "provider.test";

#[derive(Debug, Clone, Copy)]
pub enum Engine {
    Docker,
    Podman,
}

pub async fn driver(engine: Engine, binds: BindsMode) -> Arc<DockerDriver> {
    let var = match engine {
        Engine::Docker => "ITERION_TEST_DOCKER_HOST",
        Engine::Podman => "ITERION_TEST_PODMAN_HOST",
    };
    let endpoint = std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{var} is not set: run scripts/test.sh (it starts the real engines)")
        });
    let settings = DockerSettings {
        binds,
        probe_timeout: std::time::Duration::from_secs(60),
        ..DockerSettings::default()
    };
    Arc::new(
        DockerDriver::connect(&endpoint, settings)
            .await
            .unwrap_or_else(|e| {
                panic!("{var} = {endpoint} does not answer ({e}): run scripts/test.sh")
            }),
    )
}

/// The proxy a run would get, allowing the scripted provider only (or
/// nothing, with `allow: false`), and the hosts it blocked.
pub async fn proxy(allow: bool) -> (ProxyHandle, ProxyToken, Arc<Mutex<Vec<BlockedRequest>>>) {
    let rules = if allow {
        vec![PROVIDER_HOST, "127.0.0.1"]
    } else {
        vec!["api.anthropic.com"]
    };
    let rules = rules.iter().map(|r| r.parse().expect("rule")).collect();
    let policy = Policy::compile(&NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        preset: None,
        rules,
        inherit: None,
    })
    .expect("policy");
    let token = ProxyToken::generate();
    let blocked = Arc::new(Mutex::new(Vec::new()));
    let mut opts = ProxyOptions::new(
        SocketAddr::from(([0, 0, 0, 0], 0)),
        Arc::new(policy),
        token.clone(),
    );
    opts.resolver =
        Arc::new(StaticResolver::new().with(PROVIDER_HOST, &[IpAddr::V4(Ipv4Addr::LOCALHOST)]));
    let b = blocked.clone();
    opts.on_blocked = Arc::new(move |r| b.lock().unwrap().push(r));
    (
        EgressProxy::start(opts).await.expect("proxy"),
        token,
        blocked,
    )
}

pub async fn boxed(
    d: &DockerDriver,
    image: &str,
    tag: &str,
    extra: Vec<Mount>,
    proxy: &ProxyHandle,
    token: &ProxyToken,
    enforce: bool,
) -> Started {
    let mut plan = base_plan(image);
    plan.mounts.extend(extra);
    plan.egress = Some(EgressAttachment {
        proxy_port: proxy.local_addr().port(),
        token: token.expose().to_owned(),
        enforce,
    });
    start(d, tag, plan).await
}

/// The sandbox of `s`, the runner already at its path.
fn mounted<'a>(s: &'a Started, image: Option<&str>) -> AgentPlacement<'a> {
    AgentPlacement::Sandbox {
        run: &*s.run,
        runner: RunnerBinary::InSandbox,
        image: image.map(ToOwned::to_owned),
        exec_env: Default::default(),
        placeholders: Default::default(),
    }
}

/// The provider's URL as the box sees it (a name only the proxy resolves).
pub fn provider_env(p: &ScriptedProvider) -> EnvSnapshot {
    EnvSnapshot::new()
        .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .with(
            "ANTHROPIC_BASE_URL",
            format!("http://{PROVIDER_HOST}:{}", p.addr().port()),
        )
        // Present on the host, never needed by this node: must not leave.
        .with("OPENAI_API_KEY", OPENAI_KEY)
        .with("AWS_SECRET_ACCESS_KEY", "aws-secret-never-forwarded")
}

async fn claw_in_box(engine: Engine, binds: BindsMode, image: &str, enforce: bool) {
    let d = driver(engine, binds).await;
    let p = ScriptedProvider::start(vec![
        Turn::tool(
            "bash",
            json!({"command": "echo host=$(hostname); echo in-box > proof.txt; \
                (cat /proc/$PPID/environ >/dev/null 2>&1 && echo environ-readable) || echo environ-denied; \
                env | grep -c _API_KEY || true"}),
        ),
        Turn::tool("write_file", json!({"path": "second.txt", "content": "written by write_file"})),
        Turn::text("{\"verdict\": \"pass\"}"),
    ])
    .await;
    let (px, token, blocked) = proxy(true).await;
    let (extra, runner) = match binds {
        BindsMode::None => (vec![], RunnerBinary::Import(static_iterion())),
        _ => (
            vec![runner_mount(&static_iterion())],
            RunnerBinary::InSandbox,
        ),
    };
    let s = boxed(&d, image, "claw", extra, &px, &token, enforce).await;
    if !enforce {
        // An advisory proxy is addressed by name: the static runner must
        // resolve it from /etc/hosts, without glibc's NSS.
        let proxy_env = Started::stdout(&s.sh("echo $HTTPS_PROXY").await);
        assert!(proxy_env.contains("@host.docker.internal:"), "{proxy_env}");
    }
    let env = provider_env(&p);
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "prove where you run");
    t.tools = vec!["bash".into(), "write_file".into()];
    t.output_schema = Some(json!({"type": "object", "required": ["verdict"]}));
    let placement = AgentPlacement::Sandbox {
        run: &*s.run,
        runner,
        image: Some(image.to_owned()),
        exec_env: Default::default(),
        placeholders: Default::default(),
    };
    let out = run_agent(&t, BackendName::Claw, placement, &ctx(&env, &events))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{engine:?} {image}: {e} (blocked: {:?})",
                blocked.lock().unwrap()
            )
        });
    assert_eq!(out.output["verdict"], "pass");

    let hostname = Started::stdout(&s.sh("hostname").await);
    let result = p.model_calls()[1].tool_results()[0].clone();
    assert!(
        result.contains(&format!("host={hostname}")),
        "bash did not run in the container: {result}"
    );
    assert!(
        result.contains("environ-denied"),
        "a tool read the runner's environ: {result}"
    );
    assert!(
        result.trim_end().ends_with('0'),
        "a tool saw an API key variable: {result}"
    );
    assert_eq!(
        Started::stdout(&s.sh("cat proof.txt second.txt").await),
        "in-box\nwritten by write_file"
    );
    // The key travelled on the exec only: PID 1 (create-time env) never had it.
    let pid1 = Started::stdout(&s.sh("tr '\\0' '\\n' < /proc/1/environ").await);
    assert!(
        !pid1.contains(ANTHROPIC_KEY),
        "key in the container's create-time env"
    );

    for c in p.requests() {
        assert_eq!(c.header("x-api-key"), Some(ANTHROPIC_KEY));
        for secret in [OPENAI_KEY, "aws-secret-never-forwarded"] {
            assert!(
                !c.raw.contains(secret) && !c.headers.iter().any(|(_, v)| v.contains(secret)),
                "{secret} reached the provider"
            );
        }
    }
    let recorded = format!("{:?}", events.all());
    assert!(!recorded.contains(ANTHROPIC_KEY));
    assert!(events.all().iter().any(|e| matches!(e,
        EventKind::ToolCalled { tool, placement, .. } if tool == "bash" && placement == "container")));
    assert!(blocked.lock().unwrap().is_empty());
    s.run.cleanup().await.expect("cleanup");
    px.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_claw_runs_in_the_box_busybox_bind() {
    claw_in_box(Engine::Docker, BindsMode::default(), BUSYBOX, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_claw_runs_in_the_box_bindless_copy() {
    claw_in_box(Engine::Docker, BindsMode::None, BUSYBOX, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_claw_runs_in_the_box_slim_bind() {
    claw_in_box(Engine::Podman, BindsMode::default(), SLIM, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_claw_runs_in_the_box_busybox_bind() {
    claw_in_box(Engine::Podman, BindsMode::default(), BUSYBOX, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_claw_reaches_an_advisory_proxy_by_name() {
    claw_in_box(Engine::Docker, BindsMode::default(), BUSYBOX, false).await;
}

/// A provider the allowlist does not name: the proxy refuses it (the
/// engine turns `on_blocked` into `network_blocked`), the node fails typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_provider_missing_from_the_allowlist_fails_typed() {
    let d = driver(Engine::Docker, BindsMode::default()).await;
    let p = ScriptedProvider::start(vec![Turn::text("unreachable")]).await;
    let (px, token, blocked) = proxy(false).await;
    let s = boxed(
        &d,
        BUSYBOX,
        "blocked",
        vec![runner_mount(&static_iterion())],
        &px,
        &token,
        true,
    )
    .await;
    let env = provider_env(&p);
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "hi");
    t.retry.max_attempts = 1;
    let err = run_agent(
        &t,
        BackendName::Claw,
        mounted(&s, None),
        &ctx(&env, &events),
    )
    .await
    .expect_err("blocked");
    assert!(
        matches!(err, AgentError::ProviderStatus { status: 403, .. }),
        "{err}"
    );
    assert!(p.requests().is_empty());
    let b = blocked.lock().unwrap().clone();
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].host, PROVIDER_HOST);
    s.run.cleanup().await.expect("cleanup");
    px.shutdown().await;
}

async fn claude_in_box(engine: Engine) {
    let d = driver(engine, BindsMode::default()).await;
    let p = ScriptedProvider::start(vec![
        Turn::tool("Bash", json!({"command": "echo host=$(hostname); echo by-claude > claude-proof.txt", "description": "prove"})),
        Turn::Answer(json!({"summary": "done", "ok": true})),
        Turn::text("finished"),
    ])
    .await;
    let (px, token, blocked) = proxy(true).await;
    let cli = Mount {
        kind: MountKind::Bind,
        source: Some(claude_cli().display().to_string()),
        target: "/usr/local/bin/claude".to_owned(),
        readonly: true,
        size: None,
        origin: MountOrigin::Workflow,
    };
    let s = boxed(&d, SLIM, "claude", vec![cli], &px, &token, true).await;
    let env = provider_env(&p);
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "prove where you run, then report");
    t.tools = vec!["Bash".into()];
    t.output_schema = Some(json!({"type": "object", "required": ["summary", "ok"]}));
    let out = run_agent(
        &t,
        BackendName::ClaudeCode,
        mounted(&s, Some(SLIM)),
        &ctx(&env, &events),
    )
    .await
    .unwrap_or_else(|e| panic!("{engine:?}: {e} (blocked: {:?})", blocked.lock().unwrap()));
    assert_eq!(out.output, json!({"summary": "done", "ok": true}));
    let hostname = Started::stdout(&s.sh("hostname").await);
    let results: Vec<String> = p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains(&format!("host={hostname}"))),
        "{results:?}"
    );
    assert_eq!(
        Started::stdout(&s.sh("cat claude-proof.txt").await),
        "by-claude"
    );
    for c in p.requests() {
        assert_eq!(c.header("x-api-key"), Some(ANTHROPIC_KEY));
        assert!(!c.raw.contains(OPENAI_KEY));
    }
    assert!(events.all().iter().any(|e| matches!(e,
        EventKind::ToolCalled { tool, placement, .. } if tool == "Bash" && placement == "container")));
    s.run.cleanup().await.expect("cleanup");
    px.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_claude_cli_runs_in_the_box() {
    claude_in_box(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_claude_cli_runs_in_the_box() {
    claude_in_box(Engine::Podman).await;
}

/// An image without the CLI: typed, naming the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_claude_cli_missing_from_the_image_is_typed() {
    let d = driver(Engine::Docker, BindsMode::default()).await;
    let s = start(&*d, "nocli", base_plan(BUSYBOX)).await;
    let env = EnvSnapshot::new().with("ANTHROPIC_API_KEY", ANTHROPIC_KEY);
    let events = Events::default();
    let err = run_agent(
        &task(Wire::Anthropic, "x"),
        BackendName::ClaudeCode,
        mounted(&s, Some(BUSYBOX)),
        &ctx(&env, &events),
    )
    .await
    .expect_err("missing");
    assert_eq!(err.code(), "AGENT_CLI_MISSING", "{err}");
    assert!(err.to_string().contains(BUSYBOX), "{err}");
    s.run.cleanup().await.expect("cleanup");
}

/// codex cannot nest its sandbox: refused inside one, nothing exec'd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_codex_in_a_sandbox_is_refused() {
    let d = driver(Engine::Docker, BindsMode::default()).await;
    let s = start(&*d, "codex", base_plan(BUSYBOX)).await;
    let env = EnvSnapshot::new();
    let events = Events::default();
    let err = run_agent(
        &task(Wire::Anthropic, "x"),
        BackendName::Codex,
        mounted(&s, None),
        &ctx(&env, &events),
    )
    .await
    .expect_err("codex");
    assert_eq!(err.code(), "AGENT_CODEX_REFUSED");
    assert!(err.to_string().contains("cannot nest"), "{err}");
    s.run.cleanup().await.expect("cleanup");
}

#[allow(dead_code)]
fn _driver_is_a_driver(d: Arc<DockerDriver>) -> Arc<dyn Driver> {
    d
}
