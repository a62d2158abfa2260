//! CONNECT tunnels: TLS end to end, denials, resolved-address vetting.

use std::sync::Arc;

use iterion_core::NetworkMode;
use iterion_netproxy::{BlockReason, BlockedRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::support::*;

async fn tls_get(stream: TcpStream, cert: &rustls::pki_types::CertificateDer<'static>) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, stream).await.unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn allowed_tls_through_the_tunnel() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    let (resp, stream) = connect(
        p.addr(),
        &format!("localhost:{}", tls.addr.port()),
        &p.bearer(),
    )
    .await;
    assert_eq!(resp.status, 200);
    let body = tls_get(stream, &tls.cert_der).await;
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.ends_with(TLS_BODY), "{body}");
    // The tunnel winds down once both sides closed.
    while p.handle.active_tunnels() != 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(p.blocked().is_empty());
}

#[tokio::test]
async fn bytes_sent_right_after_the_connect_head_are_not_lost() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    // Head and ClientHello in one write: hyper buffers the TLS bytes.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.cert_der.clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        Arc::new(config),
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let authority = format!("localhost:{}", tls.addr.port());
    let mut stream = TcpStream::connect(p.addr()).await.unwrap();
    let mut first = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{}\r\n",
        p.bearer()
    )
    .into_bytes();
    first.extend_from_slice(&hello);
    stream.write_all(&first).await.unwrap();
    let resp = read_head(&mut stream).await;
    assert_eq!(resp.status, 200);
    // The upstream answers with a ServerHello (TLS handshake record, 0x16).
    let mut b = [0u8; 1];
    stream.read_exact(&mut b).await.unwrap();
    assert_eq!(b[0], 0x16);
}

#[tokio::test]
async fn denied_connect_is_403_once_with_the_rule() {
    let p = start_proxy(
        NetworkMode::Allowlist,
        &["**.example.test", "!evil.example.test", "127.0.0.1"],
    )
    .await;
    let (resp, _) = connect(p.addr(), "Evil.Example.Test.:443", &p.bearer()).await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("blocked-by-allowlist; rule=!evil.example.test")
    );
    assert_eq!(
        p.blocked(),
        vec![BlockedRequest {
            host: "evil.example.test".into(),
            port: 443,
            reason: BlockReason::Allowlist,
            rule: Some("!evil.example.test".into()),
            exec: None,
            secret: None,
            authority: None,
        }]
    );
}

#[tokio::test]
async fn allowed_names_resolving_to_metadata_or_loopback_are_refused() {
    let tls = tls_upstream().await;
    // The names are allowed, but no IP rule allows what they resolve to.
    let p = start_proxy(
        NetworkMode::Allowlist,
        &["metadata.test", "loop.test", "mixed.test", "**"],
    )
    .await;
    let port = tls.addr.port();
    for host in [
        "metadata.test",
        "loop.test",
        "mixed.test",
        "127.0.0.1",
        "169.254.169.254",
        "[::1]",
    ] {
        let (resp, _) = connect(p.addr(), &format!("{host}:{port}"), &p.bearer()).await;
        assert_eq!(resp.status, 403, "{host}");
        assert_eq!(
            resp.header("x-iterion-egress"),
            Some("blocked-resolved-address; rule=none"),
            "{host}"
        );
    }
    let blocked = p.blocked();
    assert_eq!(blocked.len(), 6);
    assert!(
        blocked
            .iter()
            .all(|b| b.reason == BlockReason::ResolvedAddress)
    );
    assert_eq!(blocked[0].host, "metadata.test");
    assert_eq!(blocked[5].host, "::1");

    // A negated CIDR names itself; an explicit IP rule lets loopback through.
    let p = start_proxy(NetworkMode::Denylist, &["!169.254.0.0/16", "127.0.0.1"]).await;
    let (resp, _) = connect(p.addr(), &format!("metadata.test:{port}"), &p.bearer()).await;
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("blocked-resolved-address; rule=!169.254.0.0/16")
    );
    let (resp, _) = connect(p.addr(), &format!("loop.test:{port}"), &p.bearer()).await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn a_panicking_callback_does_not_take_the_proxy_down() {
    let tls = tls_upstream().await;
    let policy = policy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]);
    let p = start_proxy_with(policy, true).await;
    for _ in 0..3 {
        let (resp, _) = connect(p.addr(), "denied.test:443", &p.bearer()).await;
        assert_eq!(resp.status, 403);
    }
    assert_eq!(p.blocked().len(), 3);
    let (resp, stream) = connect(
        p.addr(),
        &format!("localhost:{}", tls.addr.port()),
        &p.bearer(),
    )
    .await;
    assert_eq!(resp.status, 200);
    assert!(tls_get(stream, &tls.cert_der).await.ends_with(TLS_BODY));
}

#[tokio::test]
async fn unreachable_allowed_target_is_502_not_403() {
    // Bind then drop to get a closed loopback port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    let (resp, _) = connect(p.addr(), &format!("localhost:{port}"), &p.bearer()).await;
    assert_eq!(resp.status, 502);
    let (resp, _) = connect(p.addr(), "unknown-name.test:443", &p.bearer()).await;
    assert_eq!(resp.status, 403);
    assert!(p.blocked().len() == 1);
}

#[tokio::test]
async fn idn_rule_matches_the_punycode_authority_clients_send() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["BÜCHER.test.", "127.0.0.1"]).await;
    let (resp, _) = connect(
        p.addr(),
        &format!("xn--bcher-kva.test:{}", tls.addr.port()),
        &p.bearer(),
    )
    .await;
    assert_eq!(resp.status, 200);
    assert!(p.blocked().is_empty());
}
