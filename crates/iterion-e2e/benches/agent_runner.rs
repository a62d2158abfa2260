//! The in-box runner's cost, side by side with the same claw loop on the
//! host, in one process against the same scripted provider, timed on the
//! provider's clock (the host's; no event batching in between):
//!
//! - per tool call: from the provider answering "call `bash true`" to the
//!   arrival of the next request — the answer's way back, the loop, the
//!   tool run and the next request's way out. In the box that is the
//!   proxy hop twice, the runner, and `bash true` forked in the container;
//! - per turn excluding the provider: the same gap on the tool-free final
//!   turn's side is the loop alone (reported with the tool call for scale);
//! - per node: from `run_agent` to the first model request (runner exec,
//!   task message, client setup), and the whole node.
//!
//! The box is a busybox container on dockerd with the static runner bound
//! in and egress forced through the real proxy, as a run gets it. Target:
//! ≤ 5 ms per in-box tool call (p50). Needs `scripts/test.sh`'s engines
//! and the static `iterion` as the README builds it (built once if needed).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iterion_agent::backend::HostFacts;
use iterion_agent::runner::{RunnerBinary, runner_mount};
use iterion_agent::{
    AgentContext, AgentPlacement, AgentTask, BackendName, EnvSnapshot, NullSink, RetrySettings,
    run_agent,
};
use iterion_core::plan::EgressAttachment;
use iterion_core::{NetworkMode, NetworkSpec};
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
struct Samples {
    tool_round: Vec<Duration>,
    node_start: Vec<Duration>,
    node: Vec<Duration>,
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

fn analyse(started: Instant, ended: Instant, provider: &ScriptedProvider, into: &mut Samples) {
    let calls = provider.model_calls();
    assert_eq!(calls.len(), TOOL_CALLS + 1, "every tool call ran");
    into.tool_round.extend(provider.client_gaps());
    into.node_start.push(calls[0].received_at - started);
    into.node.push(ended - started);
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
        rules: ["provider.test", "127.0.0.1"]
            .iter()
            .map(|r| r.parse().expect("rule"))
            .collect(),
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
            let ctx = AgentContext {
                env: &env,
                facts: HostFacts::default(),
                sink: &NullSink,
                launcher: None,
                cli_mcp: None,
                cancel: CancellationToken::new(),
            };
            let placement = if in_box {
                AgentPlacement::Sandbox {
                    run: &*s.run,
                    runner: RunnerBinary::InSandbox,
                    image: None,
                    exec_env: Default::default(),
                    placeholders: Default::default(),
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
            let ended = Instant::now();
            analyse(
                started,
                ended,
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
    println!("{RUNS} runs x {TOOL_CALLS} `bash true` calls each, timed on the provider's clock\n");
    println!("{:<44} {:>12} {:>12} {:>8}", "", "host", "in-box", "ratio");
    let row = |label: &str, h: &mut Vec<Duration>, b: &mut Vec<Duration>, p: f64| {
        let (hv, bv) = (pct(h, p), pct(b, p));
        println!(
            "{label:<44} {} {} {:>7.2}x",
            ms(hv),
            ms(bv),
            bv.as_secs_f64() / hv.as_secs_f64().max(1e-9)
        );
        (hv, bv)
    };
    let (h50, b50) = row(
        "tool call round trip (bash true), p50",
        &mut host.tool_round,
        &mut boxed.tool_round,
        0.5,
    );
    row(
        "tool call round trip (bash true), p90",
        &mut host.tool_round,
        &mut boxed.tool_round,
        0.9,
    );
    row(
        "node start (run_agent to 1st request), p50",
        &mut host.node_start,
        &mut boxed.node_start,
        0.5,
    );
    row(
        "whole node (41 model calls), p50",
        &mut host.node,
        &mut boxed.node,
        0.5,
    );
    println!(
        "\nin-box tool call p50 {} (target <= 5 ms); over the same loop on the host: {}",
        ms(b50),
        ms(b50.saturating_sub(h50))
    );
}
