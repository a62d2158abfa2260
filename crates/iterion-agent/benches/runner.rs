//! The in-box runner's cost, side by side with the same claw loop on the
//! host, in one process against the same scripted provider:
//!
//! - per tool call: a `bash true` round trip inside one agent turn
//!   (`tool_started` → `tool_called`, timed where the host receives the
//!   events: both cross the same channel, so the channel's latency cancels);
//! - per turn: one model call plus one tool call (consecutive
//!   `llm_step_finished`), and the same minus the provider's own service
//!   time (what the loop, the channel and the sandbox add);
//! - per node: from `run_agent` to the first `llm_request` (runner exec,
//!   task, client setup).
//!
//! The box is a busybox container on dockerd with the static runner bound
//! in and egress forced through the real proxy, as a run gets it. Target:
//! ≤ 5 ms per in-box tool call (p50). Needs `scripts/test.sh`'s engines
//! and a static runner (`ITERION_RUNNER_BIN`, or it is built).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_agent::backend::HostFacts;
use iterion_agent::runner::{RunnerBinary, runner_mount};
use iterion_agent::{
    AgentContext, AgentEventSink, AgentPlacement, AgentTask, BackendName, EnvSnapshot,
    RetrySettings, run_agent,
};
use iterion_core::plan::EgressAttachment;
use iterion_core::{EventKind, NetworkMode, NetworkSpec};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_netproxy::{EgressProxy, Policy, ProxyOptions, ProxyToken, StaticResolver};
use iterion_testkit::agent::static_iterion;
use iterion_testkit::driver::{base_plan, start};
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOOL_CALLS: usize = 40;
const RUNS: usize = 3;

#[derive(Default)]
struct Timeline(Mutex<Vec<(Instant, EventKind)>>);

impl AgentEventSink for Timeline {
    fn emit(&self, event: EventKind) {
        self.0.lock().unwrap().push((Instant::now(), event));
    }
}

#[derive(Default)]
struct Samples {
    tool: Vec<Duration>,
    turn: Vec<Duration>,
    turn_minus_provider: Vec<Duration>,
    node_start: Vec<Duration>,
}

fn script() -> Vec<Turn> {
    let mut t: Vec<Turn> = (0..TOOL_CALLS)
        .map(|_| Turn::tool("bash", json!({"command": "true"})))
        .collect();
    t.push(Turn::text("done"));
    t
}

fn task() -> AgentTask {
    let mut t = AgentTask::new("bench", "run true many times");
    t.model = Some("anthropic/claude-sonnet-4-6".into());
    t.tools = vec!["bash".into()];
    t.tool_max_steps = Some(u32::try_from(TOOL_CALLS).unwrap() + 1);
    t.retry = RetrySettings {
        max_attempts: 1,
        backoff_base_ms: 1,
    };
    t
}

fn analyse(started: Instant, timeline: &Timeline, provider: &ScriptedProvider, into: &mut Samples) {
    let events = timeline.0.lock().unwrap();
    let at = |name: &str| -> Vec<Instant> {
        events
            .iter()
            .filter(|(_, e)| e.name() == name)
            .map(|(t, _)| *t)
            .collect()
    };
    let starts = at("tool_started");
    let ends = at("tool_called");
    assert_eq!(starts.len(), TOOL_CALLS, "every tool call ran");
    into.tool
        .extend(starts.iter().zip(&ends).map(|(s, e)| *e - *s));
    let steps = at("llm_step_finished");
    let service = provider.service_times();
    for (i, w) in steps.windows(2).enumerate() {
        let turn = w[1] - w[0];
        into.turn.push(turn);
        into.turn_minus_provider
            .push(turn.saturating_sub(service[i + 1]));
    }
    into.node_start.push(at("llm_request")[0] - started);
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let endpoint = std::env::var("ITERION_TEST_DOCKER_HOST")
        .expect("ITERION_TEST_DOCKER_HOST: run scripts/bench.sh");
    let d = DockerDriver::connect(&endpoint, DockerSettings::default())
        .await
        .expect("dockerd");
    let policy = Policy::compile(&NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        preset: None,
        rules: vec!["provider.test".into(), "127.0.0.1".into()],
        inherit: None,
    })
    .unwrap();
    let token = ProxyToken::generate();
    let mut opts = ProxyOptions::new(
        SocketAddr::from(([0, 0, 0, 0], 0)),
        Arc::new(policy),
        token.clone(),
    );
    opts.resolver =
        Arc::new(StaticResolver::new().with("provider.test", &[IpAddr::V4(Ipv4Addr::LOCALHOST)]));
    let px = EgressProxy::start(opts).await.unwrap();
    let mut plan = base_plan("iterion-test/busybox:local");
    plan.mounts.push(runner_mount(&static_iterion()));
    plan.egress = Some(EgressAttachment {
        proxy_port: px.local_addr().port(),
        token: token.expose().to_owned(),
        enforce: true,
    });
    let s = start(&d, "bench", plan).await;
    let ws = tempfile::tempdir().unwrap();

    let (mut host, mut boxed) = (Samples::default(), Samples::default());
    for _ in 0..RUNS {
        for in_box in [false, true] {
            let p = ScriptedProvider::start(script()).await;
            let base = if in_box {
                format!("http://provider.test:{}", p.addr().port())
            } else {
                p.url()
            };
            let env = EnvSnapshot::new()
                .with("ANTHROPIC_API_KEY", "sk-ant-api03-bench")
                .with("ANTHROPIC_BASE_URL", base)
                .with("PATH", "/usr/bin:/bin");
            let timeline = Timeline::default();
            let ctx = AgentContext {
                env: &env,
                facts: HostFacts::default(),
                sink: &timeline,
                launcher: None,
                cancel: CancellationToken::new(),
            };
            let placement = if in_box {
                AgentPlacement::Sandbox {
                    run: &*s.run,
                    runner: RunnerBinary::InSandbox,
                    image: None,
                }
            } else {
                AgentPlacement::Host {
                    workspace: ws.path().to_path_buf(),
                }
            };
            let started = Instant::now();
            run_agent(&task(), BackendName::Claw, placement, &ctx)
                .await
                .expect("bench run");
            analyse(
                started,
                &timeline,
                &p,
                if in_box { &mut boxed } else { &mut host },
            );
        }
    }
    s.run.cleanup().await.expect("cleanup");
    px.shutdown().await;

    println!(
        "claw loop: in-box runner (dockerd, busybox, enforced proxy) vs the same loop on the host"
    );
    println!("{RUNS} runs x {TOOL_CALLS} `bash true` calls each\n");
    println!("{:<42} {:>12} {:>12} {:>8}", "", "host", "in-box", "ratio");
    let row = |label: &str, h: &mut Vec<Duration>, b: &mut Vec<Duration>, p: f64| {
        let (hv, bv) = (pct(h, p), pct(b, p));
        println!(
            "{label:<42} {} {} {:>7.2}x",
            ms(hv),
            ms(bv),
            bv.as_secs_f64() / hv.as_secs_f64().max(1e-9)
        );
    };
    row(
        "tool call (bash true), p50",
        &mut host.tool,
        &mut boxed.tool,
        0.5,
    );
    row(
        "tool call (bash true), p90",
        &mut host.tool,
        &mut boxed.tool,
        0.9,
    );
    row(
        "turn (model call + tool call), p50",
        &mut host.turn,
        &mut boxed.turn,
        0.5,
    );
    row(
        "turn minus provider service time, p50",
        &mut host.turn_minus_provider,
        &mut boxed.turn_minus_provider,
        0.5,
    );
    row(
        "node start (to first llm_request), p50",
        &mut host.node_start,
        &mut boxed.node_start,
        0.5,
    );
    let added = pct(&mut boxed.tool, 0.5).saturating_sub(pct(&mut host.tool, 0.5));
    println!(
        "\nin-box tool call p50 {} (target <= 5 ms); added over the host loop {}",
        ms(pct(&mut boxed.tool, 0.5)),
        ms(added)
    );
}
