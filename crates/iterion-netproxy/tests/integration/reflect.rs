//! Issue 31 items 3 and 4 on loopback, performing the attacks: a provider
//! key's placeholder sent by the box in the target, the query and other
//! headers of a request to its provider — which echoes the request back
//! like an unknown-path 404 — never comes back as the real key (chunked
//! and `Content-Length`, HTTP/1.1 and HTTP/2, a value split across
//! chunks); a request for host B inside a tunnel to A is refused `421`;
//! a provider key is bound to its host AND port.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use iterion_netproxy::{BlockReason, SecretBinding};

use crate::inspect::{
    PH_A, Rig, VALUE_A, ca_der, request, rig, rig_with, test_ca, tls_through, tls_through_alpn,
    upstream,
};

/// A provider key: long, the placeholder as long as the value.
const PH_KEY: &str = "sk-ant-api03-PHplaceholderPHplaceholderPHplace";
const VALUE_KEY: &str = "sk-ant-api03-REALkeyREALkeyREALkeyREALkeyREALk";

fn provider_key(port: u16) -> SecretBinding {
    SecretBinding::new(
        "ANTHROPIC_API_KEY",
        vec!["provider.test".parse().unwrap()],
        PH_KEY,
        VALUE_KEY,
    )
    .unwrap()
    .head_only()
    .on_port(port)
}

/// The hostile request: the placeholder everywhere the box can put it.
fn hostile(authority: &str, path: &str) -> Request<Full<Bytes>> {
    let body = format!("{{\"messages\":[\"{PH_KEY}\"]}}");
    Request::get(format!("{path}/{PH_KEY}?key={PH_KEY}"))
        .header("host", authority)
        .header("x-api-key", PH_KEY)
        .header("authorization", format!("Bearer {PH_KEY}"))
        .header("x-debug", PH_KEY)
        .header("content-length", body.len())
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn no_key_in(what: &str, headers: &http::HeaderMap, body: &str) {
    for (k, v) in headers {
        let v = String::from_utf8_lossy(v.as_bytes());
        assert!(!v.contains(VALUE_KEY), "{what}: header {k} carries the key");
    }
    assert!(
        !body.contains(VALUE_KEY),
        "{what}: the body carries the key"
    );
}

async fn provider_rig() -> (Rig, u16, crate::inspect::Seen) {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["provider.test"], None).await;
    let rig = rig_with(&ca, vec![provider_key(up.port())]).await;
    // The rig's test CA must outlive the upstream's handshakes only; the
    // upstream keeps its certificate.
    (rig, up.port(), seen)
}

#[tokio::test]
async fn an_echoing_provider_never_returns_the_real_key_over_http1() {
    let (rig, port, seen) = provider_rig().await;
    let authority = format!("provider.test:{port}");
    for path in ["/echo", "/echo-length"] {
        let tls = tls_through(&rig, "provider.test", port, &ca_der(&rig)).await;
        let (status, headers, body) = request(tls, hostile(&authority, path)).await;
        assert_eq!(status, 404, "{path}: {body}");
        no_key_in(path, &headers, &body);
        // What came back is the echo, the key as its placeholder.
        assert_eq!(
            headers.get("x-echo-key").and_then(|v| v.to_str().ok()),
            Some(PH_KEY),
            "{path}"
        );
        assert!(
            body.contains(&format!("x-api-key: {PH_KEY}"))
                && body.contains(&format!("authorization: Bearer {PH_KEY}")),
            "{path}: {body}"
        );
    }
    let got = seen.all();
    // The provider got the key in its two carrier headers, and only there.
    assert!(got.contains(&format!("x-api-key: {VALUE_KEY}")), "{got}");
    assert!(
        got.contains(&format!("authorization: Bearer {VALUE_KEY}")),
        "{got}"
    );
    assert!(
        got.contains(&format!("/echo/{PH_KEY}?key={PH_KEY}")),
        "the target keeps the placeholder: {got}"
    );
    assert!(got.contains(&format!("x-debug: {PH_KEY}")), "{got}");
    assert!(
        got.contains(&format!("[\"{PH_KEY}\"]")),
        "the body keeps it: {got}"
    );
    assert_eq!(
        got.matches(VALUE_KEY).count(),
        4,
        "two headers, two requests: {got}"
    );
    // Asked for the identity body, whole.
    assert!(got.contains("accept-encoding: identity"), "{got}");
    assert!(rig.proxy.blocked().is_empty(), "{:?}", rig.proxy.blocked());
}

#[tokio::test]
async fn an_echoing_provider_never_returns_the_real_key_over_http2() {
    let (rig, port, _) = provider_rig().await;
    let tls = tls_through_alpn(&rig, "provider.test", port, &ca_der(&rig), &[b"h2"]).await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for path in ["/echo", "/echo-length"] {
        let req = Request::get(format!(
            "https://provider.test:{port}{path}/{PH_KEY}?key={PH_KEY}"
        ))
        .header("x-api-key", PH_KEY)
        .header("x-debug", PH_KEY)
        .body(Full::new(Bytes::new()))
        .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        no_key_in(path, &headers, &body);
        assert!(body.contains(&format!("x-api-key: {PH_KEY}")), "{body}");
    }
}

/// A declared `egress:` secret's value goes everywhere on the way out, so
/// an echo carries it back: the response scan takes it out again, the
/// value split across the upstream's 7-byte chunks.
#[tokio::test]
async fn a_declared_secret_echoed_back_comes_out_as_its_placeholder() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["bound.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "bound.test", up.port(), &ca_der(&rig)).await;
    let req = Request::get(format!("/echo?token={PH_A}"))
        .header("host", format!("bound.test:{}", up.port()))
        .header("x-api-key", PH_A)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, headers, body) = request(tls, req).await;
    assert_eq!(status, 404);
    assert!(seen.all().contains(&format!("/echo?token={VALUE_A}")));
    for (k, v) in &headers {
        assert!(
            !String::from_utf8_lossy(v.as_bytes()).contains(VALUE_A),
            "{k}"
        );
    }
    assert!(!body.contains(VALUE_A), "{body}");
    assert!(body.contains(&format!("/echo?token={PH_A}")), "{body}");
}

/// A value and its placeholder of different lengths: the body is
/// re-framed, its `Content-Length` dropped, never a wrong one.
#[tokio::test]
async fn a_length_changing_value_is_reframed_in_the_response() {
    let ca = test_ca();
    let (up, _, _) = upstream(&ca, &["second.test"], None).await;
    let rig = rig(&ca).await;
    let tls = tls_through(&rig, "second.test", up.port(), &ca_der(&rig)).await;
    let req = Request::get(format!("/echo-length?t={}", crate::inspect::PH_B))
        .header("host", format!("second.test:{}", up.port()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, headers, body) = request(tls, req).await;
    assert_eq!(status, 404);
    assert!(!headers.contains_key("content-length"), "{headers:?}");
    assert!(
        body.contains(&format!("/echo-length?t={}", crate::inspect::PH_B)),
        "{body}"
    );
    assert!(!body.contains(crate::inspect::VALUE_B), "{body}");
}

#[tokio::test]
async fn a_compressed_response_is_refused_never_passed_unread() {
    let (rig, port, _) = provider_rig().await;
    let tls = tls_through(&rig, "provider.test", port, &ca_der(&rig)).await;
    let (status, headers, body) =
        request(tls, hostile(&format!("provider.test:{port}"), "/gzip")).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        headers
            .get("x-iterion-egress")
            .and_then(|v| v.to_str().ok()),
        Some("blocked-encoded-response")
    );
    no_key_in("gzip", &headers, &body);
    let blocked = rig.proxy.blocked();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].reason, BlockReason::EncodedResponse);
    assert_eq!(blocked[0].reason.event_reason(), "encoded_response");
}

/// Issue 31 item 4 over HTTP/1.1: `Host: B` (or an absolute-form target
/// for B, or a second `Host`) inside a tunnel to A is refused `421`,
/// nothing reaches A, and the event names both.
#[tokio::test]
async fn host_fronting_over_http1_is_misdirected() {
    let (rig, port, seen) = provider_rig().await;
    let cases: Vec<(&str, Request<Full<Bytes>>)> = vec![
        ("other.test", hostile("other.test", "/v1")),
        (
            "provider.test",
            hostile("provider.test", "/v1"), // port 443 implied: not this tunnel's
        ),
        (
            "other.test:1",
            Request::get("https://other.test:1/v1")
                .header("host", "other.test:1")
                .header("x-api-key", PH_KEY)
                .body(Full::new(Bytes::new()))
                .unwrap(),
        ),
    ];
    for (asked, req) in cases {
        let tls = tls_through(&rig, "provider.test", port, &ca_der(&rig)).await;
        let (status, headers, body) = request(tls, req).await;
        assert_eq!(status, 421, "{asked}: {body}");
        assert_eq!(
            headers
                .get("x-iterion-egress")
                .and_then(|v| v.to_str().ok()),
            Some(format!("blocked-authority-mismatch; authority={asked}").as_str())
        );
    }
    // Two Host headers, the second another host: raw, as hyper's client
    // would not send it.
    let mut tls = tls_through(&rig, "provider.test", port, &ca_der(&rig)).await;
    let raw = format!(
        "GET /v1 HTTP/1.1\r\nHost: provider.test:{port}\r\nHost: other.test\r\nx-api-key: {PH_KEY}\r\nConnection: close\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut tls, raw.as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut out).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 421"), "{text}");
    assert!(
        seen.all().is_empty(),
        "nothing reached the upstream: {}",
        seen.all()
    );
    let blocked = rig.proxy.blocked();
    assert_eq!(blocked.len(), 4, "{blocked:?}");
    for b in &blocked {
        assert_eq!(b.reason, BlockReason::AuthorityMismatch);
        assert_eq!(b.reason.event_reason(), "authority_mismatch");
        assert_eq!((b.host.as_str(), b.port), ("provider.test", port));
    }
    assert_eq!(blocked[0].authority.as_deref(), Some("other.test"));
    assert_eq!(blocked[3].authority.as_deref(), Some("other.test"));
}

/// Issue 31 item 4 over HTTP/2: `:authority: B` inside a tunnel to A.
#[tokio::test]
async fn host_fronting_over_http2_is_misdirected() {
    let (rig, port, seen) = provider_rig().await;
    let tls = tls_through_alpn(&rig, "provider.test", port, &ca_der(&rig), &[b"h2"]).await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::get(format!("https://other.test:{port}/v1"))
        .header("x-api-key", PH_KEY)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 421);
    // The same connection still serves its own host.
    let req = Request::get(format!("https://provider.test:{port}/v1"))
        .header("x-api-key", PH_KEY)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let got = seen.all();
    assert!(!got.contains("other.test"), "{got}");
    assert_eq!(got.matches("GET /v1").count(), 1, "{got}");
    let blocked = rig.proxy.blocked();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].reason, BlockReason::AuthorityMismatch);
    assert_eq!(
        blocked[0].authority.as_deref(),
        Some(format!("other.test:{port}").as_str())
    );
}

/// A provider key is bound to its port: on another port of its host the
/// connection is not inspected (a blind tunnel, the upstream's own
/// certificate), so the key is never put back there.
#[tokio::test]
async fn a_provider_key_is_bound_to_its_port() {
    let ca = test_ca();
    let (up, seen, _) = upstream(&ca, &["provider.test"], None).await;
    let (other, other_seen, other_cert) = upstream(&ca, &["provider.test"], None).await;
    let rig = rig_with(&ca, vec![provider_key(up.port())]).await;
    let root = tokio_rustls::rustls::pki_types::CertificateDer::from(rcgen_root_of(&ca));
    let tls = tls_through(&rig, "provider.test", other.port(), &root).await;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(peer, other_cert, "not inspected: the upstream's own leaf");
    let (status, _, _) = request(
        tls,
        hostile(&format!("provider.test:{}", other.port()), "/v1"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        !other_seen.all().contains(VALUE_KEY),
        "{}",
        other_seen.all()
    );
    assert!(seen.all().is_empty());
}

fn rcgen_root_of(ca: &crate::inspect::TestCa) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    tokio_rustls::rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}
