//! Upstream servers, a proxy launcher that records denials, and a raw
//! HTTP/1.1 client precise enough to see every header the proxy sends.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use iterion_core::{NetworkMode, NetworkSpec};
use iterion_netproxy::{
    BlockedRequest, EgressProxy, Policy, ProxyHandle, ProxyOptions, ProxyToken, StaticResolver,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;

pub const LOOPBACK: &str = "127.0.0.1";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The resolver every test uses: names never touch real DNS.
pub fn resolver() -> StaticResolver {
    StaticResolver::new()
        .with("allowed.test", &[ip(LOOPBACK)])
        .with("localhost", &[ip(LOOPBACK)])
        .with("metadata.test", &[ip("169.254.169.254")])
        .with("loop.test", &[ip("127.0.0.1")])
        .with("mixed.test", &[ip("127.0.0.1"), ip("169.254.169.254")])
        .with("denied.test", &[ip(LOOPBACK)])
        .with("evil.example.test", &[ip(LOOPBACK)])
        .with("xn--bcher-kva.test", &[ip(LOOPBACK)])
}

pub struct TestProxy {
    pub handle: ProxyHandle,
    pub token: ProxyToken,
    pub blocked: Arc<Mutex<Vec<BlockedRequest>>>,
}

impl TestProxy {
    pub fn addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    pub fn bearer(&self) -> String {
        format!("Proxy-Authorization: Bearer {}\r\n", self.token.expose())
    }

    pub fn blocked(&self) -> Vec<BlockedRequest> {
        self.blocked.lock().unwrap().clone()
    }
}

pub fn policy(mode: NetworkMode, rules: &[&str]) -> Policy {
    Policy::compile(&NetworkSpec {
        mode: Some(mode),
        rules: rules.iter().map(|s| s.parse().expect("rule")).collect(),
        ..NetworkSpec::default()
    })
    .unwrap()
}

pub async fn start_proxy(mode: NetworkMode, rules: &[&str]) -> TestProxy {
    start_proxy_with(policy(mode, rules), false).await
}

pub async fn start_proxy_with(policy: Policy, panicking_callback: bool) -> TestProxy {
    start_proxy_opts(policy, panicking_callback, |_| {}).await
}

pub async fn start_proxy_opts(
    policy: Policy,
    panicking_callback: bool,
    tweak: impl FnOnce(&mut ProxyOptions),
) -> TestProxy {
    let token = ProxyToken::generate();
    let blocked = Arc::new(Mutex::new(Vec::new()));
    let sink = blocked.clone();
    let mut opts = ProxyOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(policy),
        token.clone(),
    );
    opts.resolver = Arc::new(resolver());
    opts.on_blocked = Arc::new(move |b| {
        sink.lock().unwrap().push(b);
        if panicking_callback {
            panic!("callback bug");
        }
    });
    tweak(&mut opts);
    let handle = EgressProxy::start(opts).await.unwrap();
    TestProxy {
        handle,
        token,
        blocked,
    }
}

/// A plain HTTP upstream that echoes the request line and headers in its
/// body, and answers with hop-by-hop headers the proxy must strip.
pub async fn http_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let mut body = format!("{} {}\n", req.method(), req.uri());
                    for (k, v) in req.headers() {
                        body.push_str(&format!("{}: {}\n", k, v.to_str().unwrap_or("?")));
                    }
                    let resp = Response::builder()
                        .header("connection", "x-upstream-hop")
                        .header("x-upstream-hop", "1")
                        .header("keep-alive", "timeout=5")
                        .header("x-upstream", "yes")
                        .body(Full::new(Bytes::from(body)))
                        .unwrap();
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

pub struct TlsUpstream {
    pub addr: SocketAddr,
    pub cert_pem: String,
    pub cert_der: rustls::pki_types::CertificateDer<'static>,
}

pub const TLS_BODY: &str = "hello over tls";

/// A TLS upstream for `localhost` (rcgen self-signed) answering one HTTP
/// response per connection.
pub async fn tls_upstream() -> TlsUpstream {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_der = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        ck.signing_key.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TLS_BODY}",
                    TLS_BODY.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    TlsUpstream {
        addr,
        cert_pem: ck.cert.pem(),
        cert_der,
    }
}

#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Read one response head byte by byte (so nothing after it is consumed).
pub async fn read_head(stream: &mut TcpStream) -> RawResponse {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.unwrap();
        assert_eq!(
            n,
            1,
            "connection closed mid-head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let text = String::from_utf8(head).unwrap();
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    RawResponse {
        status,
        headers,
        body: String::new(),
    }
}

/// Send one request head (plus `Connection: close`) and read the whole response.
pub async fn exchange(proxy: SocketAddr, request_head: &str) -> RawResponse {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request_head.as_bytes()).await.unwrap();
    let mut resp = read_head(&mut stream).await;
    let mut rest = Vec::new();
    if let Some(len) = resp.header("content-length") {
        rest = vec![0u8; len.parse().unwrap()];
        stream.read_exact(&mut rest).await.unwrap();
    } else if resp.status != 200 || !request_head.starts_with("CONNECT") {
        let _ = stream.read_to_end(&mut rest).await;
    }
    resp.body = String::from_utf8_lossy(&rest).into_owned();
    resp
}

/// Open a CONNECT tunnel; returns the stream positioned after the head.
pub async fn connect(proxy: SocketAddr, authority: &str, auth: &str) -> (RawResponse, TcpStream) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let resp = read_head(&mut stream).await;
    (resp, stream)
}
