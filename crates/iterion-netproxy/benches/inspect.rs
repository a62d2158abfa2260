//! TLS inspection benchmark (issue 17), three paths side by side in one
//! process on loopback, each over one established HTTPS keep-alive
//! connection to the same TLS upstream:
//!
//! * direct: the client's TLS straight to the upstream;
//! * tunnel: a blind CONNECT tunnel (a host no binding names);
//! * inspect: a CONNECT to a bound host — TLS terminated with the run's
//!   CA, the placeholder in `x-api-key` put back, TLS again upstream.
//!
//! 1. per-request latency of a small GET, p50 and p99, interleaved, and
//!    what inspection adds over the tunnel and over direct;
//! 2. throughput of a 100 MB streamed response, each path, and the ratio
//!    inspect / tunnel (target ≥ 0.8).
//!
//! Run: `cargo bench -p iterion-netproxy --bench inspect`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use iterion_core::{NetworkMode, NetworkSpec};
use iterion_netproxy::{
    Bindings, EgressCa, EgressProxy, Inspection, Policy, ProxyOptions, ProxyToken, SecretBinding,
    StaticResolver,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUESTS: usize = 1_000;
const BIG: u64 = 100 * 1000 * 1000;
const CHUNK: usize = 64 * 1024;
const PH: &str = "sk-ant-benchPHxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
const VALUE: &str = "sk-ant-benchREALvaluexxxxxxxxxxxxxxxxxxxxx";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn run() {
    let (upstream, test_ca) = upstream().await;
    let ca = Arc::new(EgressCa::generate().unwrap());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(test_ca.clone()).unwrap();
    let bindings = Bindings::new(vec![
        SecretBinding::new("KEY", vec!["bound.test".parse().unwrap()], PH, VALUE).unwrap(),
    ]);
    let inspection = Arc::new(Inspection::new(ca.clone(), bindings, roots).unwrap());
    let policy = Policy::compile(&NetworkSpec {
        mode: Some(NetworkMode::Allowlist),
        rules: ["bound.test", "blind.test", "127.0.0.1"]
            .iter()
            .map(|s| s.parse().unwrap())
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
    let lo = "127.0.0.1".parse().unwrap();
    opts.resolver = Arc::new(
        StaticResolver::new()
            .with("bound.test", &[lo])
            .with("blind.test", &[lo]),
    );
    opts.inspection = Some(inspection);
    let proxy = EgressProxy::start(opts).await.unwrap();
    let auth = format!("Proxy-Authorization: Bearer {}\r\n", token.expose());
    let proxy_addr = proxy.local_addr();

    let direct_tcp = TcpStream::connect(upstream).await.unwrap();
    direct_tcp.set_nodelay(true).unwrap();
    let mut direct = client(direct_tcp, "blind.test", &test_ca).await;
    let tunnel_tcp = connect(
        proxy_addr,
        &format!("blind.test:{}", upstream.port()),
        &auth,
    )
    .await;
    let mut tunnel = client(tunnel_tcp, "blind.test", &test_ca).await;
    let inspect_tcp = connect(
        proxy_addr,
        &format!("bound.test:{}", upstream.port()),
        &auth,
    )
    .await;
    let mut inspect = client(inspect_tcp, "bound.test", ca.cert_der()).await;

    for _ in 0..50 {
        get(&mut direct, "/small").await;
        get(&mut tunnel, "/small").await;
        get(&mut inspect, "/small").await;
    }
    println!("== 1. small HTTPS GET over one kept-alive connection ({REQUESTS} each, interleaved)");
    let (mut d, mut t, mut i) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REQUESTS {
        d.push(timed(get(&mut direct, "/small")).await);
        t.push(timed(get(&mut tunnel, "/small")).await);
        i.push(timed(get(&mut inspect, "/small")).await);
    }
    let (dp50, dp99) = pct(&mut d);
    let (tp50, tp99) = pct(&mut t);
    let (ip50, ip99) = pct(&mut i);
    println!("   direct   p50 {dp50:>8.3} ms  p99 {dp99:>8.3} ms");
    println!("   tunnel   p50 {tp50:>8.3} ms  p99 {tp99:>8.3} ms");
    println!("   inspect  p50 {ip50:>8.3} ms  p99 {ip99:>8.3} ms");
    println!(
        "   inspection adds p50 {:+.3} ms / p99 {:+.3} ms over the tunnel ({:+.3} / {:+.3} ms over direct); ratio inspect/tunnel p50 {:.2}x",
        ip50 - tp50,
        ip99 - tp99,
        ip50 - dp50,
        ip99 - dp99,
        ip50 / tp50
    );

    println!("== 2. 100 MB streamed response");
    let dm = throughput(&mut direct).await;
    let tm = throughput(&mut tunnel).await;
    let im = throughput(&mut inspect).await;
    println!("   direct  {dm:>8.1} MB/s");
    println!("   tunnel  {tm:>8.1} MB/s  ({:.2}x direct)", tm / dm);
    println!(
        "   inspect {im:>8.1} MB/s  ({:.2}x tunnel, {:.2}x direct)",
        im / tm,
        im / dm
    );
    proxy.shutdown().await;
}

async fn timed(f: impl std::future::Future<Output = u64>) -> Duration {
    let t = Instant::now();
    let n = f.await;
    assert!(n > 0);
    t.elapsed()
}

fn pct(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 99 / 100]))
}

async fn throughput(s: &mut Sender) -> f64 {
    let t = Instant::now();
    let n = get(s, "/big").await;
    assert_eq!(n, BIG);
    BIG as f64 / 1e6 / t.elapsed().as_secs_f64()
}

/// GET `path` with the placeholder header; the body's length.
async fn get(s: &mut Sender, path: &str) -> u64 {
    s.ready().await.unwrap();
    let req = Request::get(path)
        .header("host", "bench")
        .header("x-api-key", PH)
        .body(Empty::new())
        .unwrap();
    let resp = s.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            n += d.len() as u64;
        }
    }
    n
}

async fn client(tcp: TcpStream, name: &str, root: &CertificateDer<'static>) -> Sender {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn connect(proxy: SocketAddr, authority: &str, auth: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// The TLS upstream: `/small` answers 64 bytes, `/big` streams 100 MB in
/// 64 KiB chunks. Its certificate (for both names) is signed by a test CA.
async fn upstream() -> (SocketAddr, CertificateDer<'static>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(vec!["bound.test".to_owned(), "blind.test".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            let acceptor = acceptor.clone();
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let chunk = chunk.clone();
                    async move {
                        assert_ne!(req.headers().get("x-api-key").map(|v| v.as_bytes()), None);
                        if req.uri().path() == "/big" {
                            let chunks = BIG / CHUNK as u64;
                            let rest = (BIG % CHUNK as u64) as usize;
                            let s = futures_util::stream::iter(
                                (0..chunks)
                                    .map(move |_| chunk.clone())
                                    .chain((rest > 0).then(|| Bytes::from(vec![b'x'; rest])))
                                    .map(|b| Ok::<_, Infallible>(Frame::data(b))),
                            );
                            let mut r = Response::new(StreamBody::new(s).boxed());
                            r.headers_mut()
                                .insert("content-length", BIG.to_string().parse().unwrap());
                            return Ok::<_, Infallible>(r);
                        }
                        let body = http_body_util::Full::new(Bytes::from(vec![b'y'; 64]))
                            .map_err(|n| match n {})
                            .boxed();
                        Ok(Response::new(body))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, ca_cert.der().clone())
}
