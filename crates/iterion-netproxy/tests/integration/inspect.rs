//! TLS inspection and secret egress rewriting (issue 17) on loopback: a
//! test CA signs the upstreams' certificates (trusted by the proxy through
//! an `ITERION_EGRESS_UPSTREAM_CA`-style bundle), the client trusts only
//! the run's `EgressCa`, and the upstream records every byte it receives.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use iterion_core::NetworkMode;
use iterion_netproxy::{
    Bindings, BlockReason, EgressCa, Inspection, SecretBinding, upstream_roots,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use crate::support::{TestProxy, connect, exchange, policy, start_proxy_opts};

pub(crate) const PH_A: &str = "sk-ant-iterionPHaaaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const VALUE_A: &str = "sk-ant-REAL-value-of-secret-A-0123456789";
pub(crate) const PH_B: &str = "tok-iterionPHbbbbbbbbbbbbbbbbbbbbbbbb";
pub(crate) const VALUE_B: &str = "real-b";

/// A CA for the test upstreams.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub(crate) pem: String,
}

pub(crate) fn test_ca() -> TestCa {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    TestCa {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// What an upstream received, request by request.
#[derive(Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    pub(crate) fn all(&self) -> String {
        self.0.lock().unwrap().join("\n---\n")
    }
}

/// A TLS upstream (certificate for `names`, signed by `ca`) recording each
/// request's target, headers and body; `/stream` answers two chunks, the
/// second only once `release` fires. Like a provider's unknown-path 404,
/// `/echo…` answers what it received (target, headers, body) — in 7-byte
/// chunks (`/echo`, chunked) or whole (`/echo-length`, `Content-Length`) —
/// with the `x-api-key` it got in a header and a `Location`;
/// `/gzip` answers `Content-Encoding: gzip`.
pub(crate) async fn upstream(
    ca: &TestCa,
    names: &[&str],
    release: Option<tokio::sync::oneshot::Receiver<()>>,
) -> (SocketAddr, Seen, CertificateDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let der = cert.der().clone();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = seen.clone();
    let release = Arc::new(Mutex::new(release));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let record = record.clone();
            let release = release.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let record = record.clone();
                    let release = release.clone();
                    async move {
                        let mut text = format!("{} {}\n", req.method(), req.uri());
                        for (k, v) in req.headers() {
                            text.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
                        }
                        let stream = req.uri().path() == "/stream";
                        let close = req.uri().path() == "/close";
                        let path = req.uri().path().to_owned();
                        let key = req.headers().get("x-api-key").cloned();
                        let body = req.into_body().collect().await.map(|c| c.to_bytes());
                        text.push_str(&String::from_utf8_lossy(&body.unwrap_or_default()));
                        record.0.lock().unwrap().push(text.clone());
                        if path.starts_with("/echo") || path.starts_with("/gzip") {
                            return Ok(echo(&path, text, key));
                        }
                        if stream {
                            let gate = release.lock().unwrap().take();
                            let (tx, rx) =
                                tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
                            tokio::spawn(async move {
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: one\n\n")))).await;
                                if let Some(gate) = gate {
                                    let _ = gate.await;
                                }
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: two\n\n")))).await;
                            });
                            let body = StreamBody::new(tokio_stream_from(rx)).boxed();
                            return Ok::<_, Infallible>(Response::new(body));
                        }
                        let mut resp = Response::new(
                            Full::new(Bytes::from("upstream ok"))
                                .map_err(|n| match n {})
                                .boxed(),
                        );
                        if close {
                            resp.headers_mut()
                                .insert("connection", http::HeaderValue::from_static("close"));
                        }
                        Ok(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, seen, der)
}

/// The echoing answers of [`upstream`].
fn echo(
    path: &str,
    text: String,
    key: Option<http::HeaderValue>,
) -> Response<http_body_util::combinators::BoxBody<Bytes, Infallible>> {
    let mut resp = if path.starts_with("/echo-length") {
        Response::new(Full::new(Bytes::from(text)).boxed())
    } else {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            for chunk in text.as_bytes().chunks(7) {
                if tx
                    .send(Ok(Frame::data(Bytes::copy_from_slice(chunk))))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        Response::new(StreamBody::new(tokio_stream_from(rx)).boxed())
    };
    *resp.status_mut() = http::StatusCode::NOT_FOUND;
    if let Some(k) = key {
        let location = format!("/login?key={}", k.to_str().unwrap_or(""));
        resp.headers_mut().insert("x-echo-key", k);
        resp.headers_mut()
            .insert("location", http::HeaderValue::from_str(&location).unwrap());
    }
    if path.starts_with("/gzip") {
        resp.headers_mut()
            .insert("content-encoding", http::HeaderValue::from_static("gzip"));
    }
    resp
}

/// An mpsc receiver as a `Stream`.
fn tokio_stream_from<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

pub(crate) struct Rig {
    pub(crate) proxy: TestProxy,
    ca: Arc<EgressCa>,
    _bundle: tempfile::NamedTempFile,
}

pub(crate) async fn rig(test_ca: &TestCa) -> Rig {
    rig_with(test_ca, Vec::new()).await
}

/// The rig with `extra` bindings besides A and B.
pub(crate) async fn rig_with(test_ca: &TestCa, extra: Vec<SecretBinding>) -> Rig {
    let mut bundle = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut bundle, test_ca.pem.as_bytes()).unwrap();
    let roots = upstream_roots(Some(bundle.path())).unwrap();
    let ca = Arc::new(EgressCa::generate().unwrap());
    let mut all = vec![
        SecretBinding::new("A", vec!["bound.test".parse().unwrap()], PH_A, VALUE_A).unwrap(),
        SecretBinding::new("B", vec!["second.test".parse().unwrap()], PH_B, VALUE_B).unwrap(),
    ];
    all.extend(extra);
    let bindings = Bindings::new(all);
    let inspection = Arc::new(Inspection::new(ca.clone(), bindings, roots).unwrap());
    let proxy = start_proxy_opts(
        policy(
            NetworkMode::Allowlist,
            &[
                "bound.test",
                "second.test",
                "blind.test",
                "invalid.test",
                "plain.test",
                "provider.test",
                "127.0.0.1",
            ],
        ),
        false,
        move |o| {
            o.inspection = Some(inspection);
            o.resolver = Arc::new(
                iterion_netproxy::StaticResolver::new()
                    .with("bound.test", &[crate::support::ip("127.0.0.1")])
                    .with("second.test", &[crate::support::ip("127.0.0.1")])
                    .with("blind.test", &[crate::support::ip("127.0.0.1")])
                    .with("invalid.test", &[crate::support::ip("127.0.0.1")])
                    .with("plain.test", &[crate::support::ip("127.0.0.1")])
                    .with("provider.test", &[crate::support::ip("127.0.0.1")]),
            );
        },
    )
    .await;
    Rig {
        proxy,
        ca,
        _bundle: bundle,
    }
}

pub(crate) type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// CONNECT `host:port`, then TLS trusting only `root`.
pub(crate) async fn tls_through(
    rig: &Rig,
    host: &str,
    port: u16,
    root: &CertificateDer<'static>,
) -> Tls {
    tls_through_alpn(rig, host, port, root, &[]).await
}

pub(crate) async fn tls_through_alpn(
    rig: &Rig,
    host: &str,
    port: u16,
    root: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> Tls {
    let (resp, stream) = connect(
        rig.proxy.addr(),
        &format!("{host}:{port}"),
        &rig.proxy.bearer(),
    )
    .await;
    assert_eq!(resp.status, 200, "CONNECT {host}: {:?}", resp.headers);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_owned()).unwrap(), stream)
        .await
        .expect("TLS through the proxy")
}

/// One HTTP/1.1 request over `tls`; status, headers and body.
pub(crate) async fn request(tls: Tls, req: Request<Full<Bytes>>) -> (u16, http::HeaderMap, String) {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

pub(crate) fn post(host: &str, path: &str, key: &str, body: String) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", host)
        .header("x-api-key", key)
        .header("authorization", format!("Bearer {key}"))
        .header("content-length", body.len())
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

pub(crate) fn ca_der(rig: &Rig) -> CertificateDer<'static> {
    rig.ca.cert_der().clone()
}

#[tokio::test]
async fn the_value_reaches_only_its_bound_host_in_headers_url_and_body() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "bound.test", up.port(), &ca_der(&rig)).await;
    let (status, _, body) = request(
        tls,
        post(
            &format!("bound.test:{}", up.port()),
            &format!("/v1/messages?key={PH_A}"),
            PH_A,
            format!("{{\"key\":\"{PH_A}\",\"again\":\"{PH_A}\"}}"),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "upstream ok");
    let got = seen.all();
    assert!(
        got.contains(&format!("/v1/messages?key={VALUE_A}")),
        "{got}"
    );
    assert!(got.contains(&format!("x-api-key: {VALUE_A}")), "{got}");
    assert!(
        got.contains(&format!("authorization: Bearer {VALUE_A}")),
        "{got}"
    );
    assert!(
        got.contains(&format!(
            "{{\"key\":\"{VALUE_A}\",\"again\":\"{VALUE_A}\"}}"
        )),
        "{got}"
    );
    assert!(
        !got.contains(PH_A),
        "the placeholder never reaches the bound host: {got}"
    );
    assert!(rig.proxy.blocked().is_empty());
}

#[tokio::test]
async fn a_length_changing_value_is_recounted() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["second.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "second.test", up.port(), &ca_der(&rig)).await;
    let (status, _, _) = request(
        tls,
        post(
            &format!("second.test:{}", up.port()),
            "/",
            PH_B,
            format!("k={PH_B}&x=1"),
        ),
    )
    .await;
    assert_eq!(status, 200);
    let got = seen.all();
    assert!(got.contains(&format!("k={VALUE_B}&x=1")), "{got}");
    assert!(
        got.contains(&format!(
            "content-length: {}",
            format!("k={VALUE_B}&x=1").len()
        )),
        "{got}"
    );
}

#[tokio::test]
async fn a_placeholder_for_another_host_is_refused_and_never_sent() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["second.test"], None).await;
    let rig = rig(&ca).await;
    // In a header.
    let tls = tls_through(&rig, "second.test", up.port(), &ca_der(&rig)).await;
    let (status, headers, _) = request(
        tls,
        post(
            &format!("second.test:{}", up.port()),
            "/",
            PH_A,
            String::new(),
        ),
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        headers
            .get("x-iterion-egress")
            .and_then(|v| v.to_str().ok()),
        Some("blocked-secret-exfiltration; secret=A")
    );
    // In the body only (a same-length placeholder streams).
    let tls = tls_through(&rig, "second.test", up.port(), &ca_der(&rig)).await;
    let req = Request::post("/")
        .header("host", format!("second.test:{}", up.port()))
        .header("content-length", PH_A.len() + 6)
        .body(Full::new(Bytes::from(format!("k={PH_A}&x=1"))))
        .unwrap();
    let (status, headers, body) = request(tls, req).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        headers["x-iterion-egress"]
            .to_str()
            .unwrap()
            .contains("secret=A")
    );
    assert!(!seen.all().contains(PH_A), "the other host never sees it");
    assert!(!seen.all().contains(VALUE_A));
    let blocked = rig.proxy.blocked();
    assert_eq!(blocked.len(), 2, "{blocked:?}");
    for b in blocked {
        assert_eq!(b.reason, BlockReason::SecretExfiltration);
        assert_eq!(b.secret.as_deref(), Some("A"));
        assert_eq!(b.host, "second.test");
        assert_eq!(b.reason.event_reason(), "secret_exfiltration");
    }
}

#[tokio::test]
async fn an_unbound_host_is_tunnelled_blind() {
    let ca = test_ca();
    let (up, _, upstream_cert) = upstream(&ca, &["blind.test"], None).await;
    let rig = rig(&ca).await;
    // Trusting only the test CA (not the run's), the client sees the
    // upstream's own certificate end to end.
    let mut roots = Vec::new();
    roots.extend(
        rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes()).map(Result::unwrap),
    );
    let tls = tls_through(&rig, "blind.test", up.port(), &roots[0]).await;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(peer, upstream_cert);
    let (status, _, body) = request(
        tls,
        post(
            &format!("blind.test:{}", up.port()),
            "/",
            PH_A,
            String::new(),
        ),
    )
    .await;
    // Not inspected: the placeholder goes through untouched (it is worth
    // nothing there).
    assert_eq!((status, body.as_str()), (200, "upstream ok"));
}

#[tokio::test]
async fn an_upstream_with_an_invalid_certificate_gets_502_and_no_plaintext() {
    let ca = test_ca();
    let untrusted = test_ca();
    let (up, seen, _) = upstream(&untrusted, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let (resp, mut stream) = connect(
        rig.proxy.addr(),
        &format!("bound.test:{}", up.port()),
        &rig.proxy.bearer(),
    )
    .await;
    assert_eq!(resp.status, 502);
    assert!(
        resp.header("x-iterion-egress")
            .is_some_and(|h| h.starts_with("upstream-tls-invalid; reason=")),
        "{:?}",
        resp.headers
    );
    let _ = stream.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(seen.all().is_empty(), "nothing reached the upstream");
    let blocked = rig.proxy.blocked();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].reason, BlockReason::UpstreamTls);
}

#[tokio::test]
async fn plain_http_never_carries_a_placeholder() {
    let ca = test_ca();
    let rig = rig(&ca).await;
    let up = crate::support::http_upstream().await;
    let resp = exchange(
        rig.proxy.addr(),
        &format!(
            "GET http://plain.test:{}/?k={PH_A} HTTP/1.1\r\nHost: plain.test\r\n{}\r\n",
            up.port(),
            rig.proxy.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("blocked-secret-exfiltration; secret=A")
    );
}

#[tokio::test]
async fn a_streaming_response_passes_through_unbuffered() {
    let ca = test_ca();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (up, _, _) = upstream(&ca, &["bound.test"], Some(rx)).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "bound.test", up.port(), &ca_der(&rig)).await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender
        .send_request(post(
            &format!("bound.test:{}", up.port()),
            "/stream",
            PH_A,
            String::new(),
        ))
        .await
        .unwrap();
    let mut body = resp.into_body();
    // The first event arrives while the upstream still holds the second.
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "data: one\n\n");
    tx.send(()).unwrap();
    let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(second, "data: two\n\n");
}

#[tokio::test]
async fn an_enormous_header_is_refused() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let mut tls = tls_through(&rig, "bound.test", up.port(), &ca_der(&rig)).await;
    let big = "a".repeat(200 * 1024);
    let head = format!("GET / HTTP/1.1\r\nHost: bound.test\r\nx-big: {big}\r\n\r\n");
    let _ = tls.write_all(head.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_run_ca_fails_closed() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    // A pinned client: it trusts only the upstream's CA.
    let (resp, stream) = connect(
        rig.proxy.addr(),
        &format!("bound.test:{}", up.port()),
        &rig.proxy.bearer(),
    )
    .await;
    assert_eq!(resp.status, 200);
    let root = rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let r = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("bound.test").unwrap(), stream)
        .await;
    assert!(r.is_err(), "the handshake fails closed");
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn a_kept_alive_client_outlives_an_upstream_close() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "bound.test", up.port(), &ca_der(&rig)).await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    for path in ["/close", "/after"] {
        sender.ready().await.unwrap();
        let resp = sender
            .send_request(post(
                &format!("bound.test:{}", up.port()),
                path,
                PH_A,
                String::new(),
            ))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let _ = resp.into_body().collect().await.unwrap();
    }
    let got = seen.all();
    assert!(
        got.contains("POST /close") && got.contains("POST /after"),
        "{got}"
    );
    assert!(!got.contains(PH_A));
}

#[tokio::test]
async fn an_http2_client_is_inspected_too() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through_alpn(&rig, "bound.test", up.port(), &ca_der(&rig), &[b"h2"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::post(format!("https://bound.test:{}/v1/h2", up.port()))
        .header("x-api-key", PH_A)
        .body(Full::new(Bytes::from(format!("k={PH_A}"))))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "upstream ok");
    let got = seen.all();
    assert!(got.contains("POST /v1/h2"), "{got}");
    assert!(got.contains(&format!("x-api-key: {VALUE_A}")), "{got}");
    assert!(got.contains(&format!("k={VALUE_A}")), "{got}");
    assert!(
        got.contains(&format!("host: bound.test:{}", up.port())),
        "{got}"
    );
}

#[test]
fn a_bad_upstream_ca_bundle_is_an_error_never_ignored() {
    let missing = upstream_roots(Some(std::path::Path::new("/nonexistent/ca.pem"))).unwrap_err();
    assert_eq!(missing.code(), "EGRESS_UPSTREAM_CA_INVALID");
    assert!(
        missing
            .to_string()
            .contains("ITERION_EGRESS_UPSTREAM_CA=/nonexistent/ca.pem")
    );
    let mut empty = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut empty, b"no certificate here\n").unwrap();
    let none = upstream_roots(Some(empty.path())).unwrap_err();
    assert!(none.to_string().contains("no PEM certificate"), "{none}");
}
