//! Egress proxy benchmark, everything side by side in one process on
//! loopback (STYLE: ratios against a baseline measured in the same run):
//!
//! 1. latency of a plain HTTP GET, one fresh TCP connection per request
//!    (keep-alive-free on both legs), direct vs through the proxy;
//! 2. round-trip latency of a small request/response over one established
//!    connection (keep-alive), direct vs through a CONNECT tunnel;
//! 3. throughput of a 1 GiB download, direct vs through a CONNECT tunnel;
//! 4. RSS (`/proc/self/status` VmRSS) before / with / after 200 concurrent
//!    idle tunnels.
//!
//! Run: `cargo bench -p iterion-netproxy --bench proxy`.

// A bench binary: a failed unwrap is a failed bench.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use iterion_core::{NetworkMode, NetworkSpec};
use iterion_netproxy::{
    EgressProxy, Policy, ProxyHandle, ProxyOptions, ProxyToken, StaticResolver,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUESTS: usize = 1_000;
const GIB: u64 = 1 << 30;
const TUNNELS: usize = 200;

fn main() {
    // One runtime with one worker per core of the 2-core test machines
    // (a second runtime for the proxy measured worse: more threads than cores).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let http = http_upstream().await;
    let echo = echo_upstream().await;
    let source = source_upstream().await;
    let (proxy, token) = start_proxy().await;
    let auth = format!("Proxy-Authorization: Bearer {}\r\n", token.expose());

    // Warm-up both paths.
    for _ in 0..50 {
        http_get(http, None, &auth).await;
        http_get(http, Some(proxy.local_addr()), &auth).await;
    }

    println!(
        "== 1. plain HTTP GET, fresh connection per request ({REQUESTS} requests, interleaved)"
    );
    let mut direct = Vec::with_capacity(REQUESTS);
    let mut proxied = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let t = Instant::now();
        http_get(http, None, &auth).await;
        direct.push(t.elapsed());
        let t = Instant::now();
        http_get(http, Some(proxy.local_addr()), &auth).await;
        proxied.push(t.elapsed());
    }
    report_latency(&mut direct, &mut proxied);

    println!("== 2. round trip over one kept-alive connection ({REQUESTS} round trips, 64 B)");
    let mut d_conn = TcpStream::connect(echo).await.unwrap();
    d_conn.set_nodelay(true).unwrap();
    let mut t_conn = open_tunnel(proxy.local_addr(), echo, &auth).await;
    t_conn.set_nodelay(true).unwrap();
    let mut direct = Vec::with_capacity(REQUESTS);
    let mut proxied = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        direct.push(ping(&mut d_conn).await);
        proxied.push(ping(&mut t_conn).await);
    }
    drop((d_conn, t_conn));
    report_latency(&mut direct, &mut proxied);

    println!("== 3. 1 GiB download, 5 alternating runs each");
    let mut d = Vec::new();
    let mut p = Vec::new();
    let (mut d_cpu, mut p_cpu) = (0.0, 0.0);
    for _ in 0..5 {
        let c = cpu_secs();
        d.push(download(TcpStream::connect(source).await.unwrap()).await);
        d_cpu += cpu_secs() - c;
        let c = cpu_secs();
        p.push(download(open_tunnel(proxy.local_addr(), source, &auth).await).await);
        p_cpu += cpu_secs() - c;
    }
    d.sort();
    p.sort();
    let mbps = |t: Duration| GIB as f64 / (1 << 20) as f64 / t.as_secs_f64();
    println!(
        "direct  median {:>6.0} MiB/s best {:>6.0} MiB/s\nproxied median {:>6.0} MiB/s best {:>6.0} MiB/s\n\
         ratio proxied/direct throughput: median {:.3}, best {:.3} (target >= 0.9)",
        mbps(d[2]),
        mbps(d[0]),
        mbps(p[2]),
        mbps(p[0]),
        d[2].as_secs_f64() / p[2].as_secs_f64(),
        d[0].as_secs_f64() / p[0].as_secs_f64()
    );
    println!(
        "process CPU per GiB (source + client, + proxy when proxied): direct {:.2} s, proxied {:.2} s \
         => the proxy's own cost is about {:.2} CPU-s/GiB",
        d_cpu / 5.0,
        p_cpu / 5.0,
        (p_cpu - d_cpu) / 5.0
    );
    if std::env::var_os("ITERION_BENCH_THROUGHPUT_ONLY").is_some() {
        return;
    }

    println!("== 4. RSS with {TUNNELS} concurrent idle connections: direct baseline, then tunnels");
    // Baseline: the same echo upstream with direct connections, so the
    // upstream's and client's own per-connection memory is accounted for.
    let base0 = rss_kib();
    let mut direct = Vec::with_capacity(TUNNELS);
    for _ in 0..TUNNELS {
        let mut s = TcpStream::connect(echo).await.unwrap();
        ping(&mut s).await;
        direct.push(s);
    }
    let base1 = rss_kib();
    drop(direct);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib();
    let mut tunnels = Vec::with_capacity(TUNNELS);
    for _ in 0..TUNNELS {
        tunnels.push(open_tunnel(proxy.local_addr(), echo, &auth).await);
    }
    while proxy.active_tunnels() < TUNNELS {
        tokio::task::yield_now().await;
    }
    let with = rss_kib();
    // One round trip through each, so every tunnel has set up its splice pipes.
    for t in &mut tunnels {
        ping(t).await;
    }
    let used = rss_kib();
    drop(tunnels);
    while proxy.active_tunnels() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = rss_kib();
    // A second batch reuses what the allocator kept: no growth means no leak.
    let mut again = Vec::with_capacity(TUNNELS);
    for _ in 0..TUNNELS {
        let mut t = open_tunnel(proxy.local_addr(), echo, &auth).await;
        ping(&mut t).await;
        again.push(t);
    }
    let second = rss_kib();
    drop(again);
    while proxy.active_tunnels() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / TUNNELS as f64;
    println!(
        "direct baseline: {base0} -> {base1} KiB ({:.1} KiB/conn incl. client + upstream)",
        per(base1, base0)
    );
    println!(
        "tunnels: before {before} KiB, {TUNNELS} idle {with} KiB ({:.1} KiB/tunnel), \
         after one round trip each {used} KiB ({:.1} KiB/tunnel), after close {after} KiB, \
         second batch of {TUNNELS} {second} KiB",
        per(with, before),
        per(used, before),
    );
    println!(
        "proxy's own cost ~{:.1} KiB per idle tunnel, {:.1} KiB after use (tunnel minus direct baseline)",
        per(with, before) - per(base1, base0),
        per(used, before) - per(base1, base0)
    );
    proxy.shutdown().await;
}

fn report_latency(direct: &mut [Duration], proxied: &mut [Duration]) {
    direct.sort();
    proxied.sort();
    let pct = |v: &[Duration], p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    let (d50, d99) = (pct(direct, 0.50), pct(direct, 0.99));
    let (p50, p99) = (pct(proxied, 0.50), pct(proxied, 0.99));
    println!("direct  p50 {d50:>10.1?}  p99 {d99:>10.1?}");
    println!("proxied p50 {p50:>10.1?}  p99 {p99:>10.1?}");
    println!(
        "added   p50 {:>10.1?}  p99 {:>10.1?}  (target p50 <= 1 ms); ratio p50 {:.2}x",
        p50.saturating_sub(d50),
        p99.saturating_sub(d99),
        p50.as_secs_f64() / d50.as_secs_f64()
    );
}

async fn start_proxy() -> (ProxyHandle, ProxyToken) {
    let policy = Policy::compile(&NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        rules: ["bench.test", "127.0.0.1"]
            .iter()
            .map(|r| r.parse().expect("rule"))
            .collect(),
        ..NetworkSpec::default()
    })
    .unwrap();
    let token = ProxyToken::generate();
    let mut opts = ProxyOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(policy),
        token.clone(),
    );
    opts.resolver =
        Arc::new(StaticResolver::new().with("bench.test", &["127.0.0.1".parse().unwrap()]));
    (EgressProxy::start(opts).await.unwrap(), token)
}

async fn http_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|_req: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Echoes whatever it reads (round trips and idle tunnels).
async fn echo_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Writes 1 GiB then closes.
async fn source_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let chunk = vec![0x5au8; 256 * 1024];
                let mut left = GIB;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

async fn http_get(upstream: SocketAddr, proxy: Option<SocketAddr>, auth: &str) {
    let port = upstream.port();
    let (mut s, req) = match proxy {
        None => (
            TcpStream::connect(upstream).await.unwrap(),
            format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
        ),
        Some(p) => (
            TcpStream::connect(p).await.unwrap(),
            format!(
                "GET http://bench.test:{port}/ HTTP/1.1\r\nHost: bench.test:{port}\r\n{auth}Connection: close\r\n\r\n"
            ),
        ),
    };
    s.set_nodelay(true).unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::with_capacity(256);
    s.read_to_end(&mut out).await.unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

async fn open_tunnel(proxy: SocketAddr, target: SocketAddr, auth: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let authority = format!("bench.test:{}", target.port());
    s.write_all(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1);
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

async fn ping(s: &mut TcpStream) -> Duration {
    let msg = [7u8; 64];
    let mut back = [0u8; 64];
    let t = Instant::now();
    s.write_all(&msg).await.unwrap();
    s.read_exact(&mut back).await.unwrap();
    t.elapsed()
}

async fn download(mut s: TcpStream) -> Duration {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    let t = Instant::now();
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let took = t.elapsed();
    assert_eq!(total, GIB);
    took
}

/// User + system CPU seconds of this process (`/proc/self/stat`, 100 Hz ticks).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split(' ').collect();
    // Fields 14 and 15 of stat(5); index 11 and 12 after the `comm` field.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
