//! Plain `http://` forwarding and the policy decisions on it.

use iterion_core::NetworkMode;
use iterion_netproxy::{BlockReason, BlockedRequest};

use crate::support::*;

#[tokio::test]
async fn allowed_request_is_forwarded_in_origin_form_without_hop_by_hop_headers() {
    let up = http_upstream().await;
    // `127.0.0.1` must be allowed explicitly: allowed.test resolves to loopback.
    let p = start_proxy(NetworkMode::Allowlist, &["allowed.test", "127.0.0.1"]).await;
    let port = up.port();
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://Allowed.Test.:{port}/hello?x=1 HTTP/1.1\r\nHost: allowed.test:{port}\r\n{}\
             Connection: close, x-drop\r\nx-drop: 1\r\nx-keep: 1\r\nKeep-Alive: timeout=1\r\nTE: trailers\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.body.starts_with("GET /hello?x=1\n"), "{}", resp.body);
    assert!(resp.body.contains("x-keep: 1"), "{}", resp.body);
    for gone in [
        "x-drop",
        "proxy-authorization",
        "keep-alive",
        "te:",
        "connection",
    ] {
        assert!(
            !resp.body.contains(gone),
            "{gone} reached upstream: {}",
            resp.body
        );
    }
    assert_eq!(resp.header("x-upstream"), Some("yes"));
    assert_eq!(resp.header("x-upstream-hop"), None);
    assert_eq!(resp.header("keep-alive"), None);
    assert!(p.blocked().is_empty());
}

#[tokio::test]
async fn denied_host_gets_403_with_reason_header_and_one_callback() {
    let p = start_proxy(NetworkMode::Allowlist, &["allowed.test", "127.0.0.1"]).await;
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://denied.test:8080/ HTTP/1.1\r\nHost: denied.test:8080\r\n{}\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("blocked-by-allowlist; rule=none")
    );
    assert!(resp.body.contains("denied.test:8080"), "{}", resp.body);
    assert_eq!(
        p.blocked(),
        vec![BlockedRequest {
            host: "denied.test".into(),
            port: 8080,
            reason: BlockReason::Allowlist,
            rule: None,
            exec: None,
            secret: None,
            authority: None,
        }]
    );
}

#[tokio::test]
async fn denylist_negated_rule_names_itself() {
    let p = start_proxy(NetworkMode::Denylist, &["!**.example.test"]).await;
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://evil.example.test/ HTTP/1.1\r\nHost: evil.example.test\r\n{}\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("blocked-by-denylist; rule=!**.example.test")
    );
    assert_eq!(p.blocked().len(), 1);
    assert_eq!(p.blocked()[0].port, 80);
    assert_eq!(p.blocked()[0].reason, BlockReason::Denylist);
}

#[tokio::test]
async fn missing_host_is_400_and_no_callback() {
    let p = start_proxy(NetworkMode::Allowlist, &["**"]).await;
    let resp = exchange(
        p.addr(),
        &format!(
            "GET /relative HTTP/1.1\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 400);
    let resp = exchange(
        p.addr(),
        &format!(
            "GET /relative HTTP/1.1\r\nHost: bad!host\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 400);
    let resp = exchange(
        p.addr(),
        &format!(
            "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 400);
    assert!(p.blocked().is_empty());
}
