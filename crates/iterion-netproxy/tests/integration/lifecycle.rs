//! Start/shutdown: listeners close, tunnels close, shutdown is idempotent.

use iterion_core::NetworkMode;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::support::*;

#[tokio::test]
async fn shutdown_closes_the_listener_and_live_tunnels_and_is_idempotent() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    let addr = p.addr();
    let (resp, mut tunnel) =
        connect(addr, &format!("localhost:{}", tls.addr.port()), &p.bearer()).await;
    assert_eq!(resp.status, 200);
    while p.handle.active_tunnels() != 1 {
        tokio::task::yield_now().await;
    }
    // An idle keep-alive connection that has not sent anything yet.
    let mut idle = TcpStream::connect(addr).await.unwrap();

    p.handle.shutdown().await;
    p.handle.shutdown().await;

    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener still open"
    );
    let mut buf = [0u8; 16];
    // The tunnel's client side sees EOF (or a reset), never hangs.
    assert!(matches!(tunnel.read(&mut buf).await, Ok(0) | Err(_)));
    assert!(matches!(idle.read(&mut buf).await, Ok(0) | Err(_)));
    assert_eq!(p.handle.active_tunnels(), 0);
}

#[tokio::test]
async fn open_policy_needs_no_proxy() {
    assert!(!iterion_netproxy::Policy::open().needs_proxy());
    assert!(!policy(NetworkMode::Open, &["example.com"]).needs_proxy());
    assert!(policy(NetworkMode::Denylist, &[]).needs_proxy());
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_is_disconnected() {
    use tokio::io::AsyncWriteExt;
    let p = start_proxy_opts(policy(NetworkMode::Allowlist, &["**"]), false, |o| {
        o.header_read_timeout = std::time::Duration::from_millis(100);
    })
    .await;
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    s.write_all(b"CONNECT slow.test:443 HTTP/1.1\r\nHost: slo")
        .await
        .unwrap();
    let mut out = Vec::new();
    // Returns once hyper gives up on the head (it may answer 408 first).
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    assert!(out.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(p.blocked().is_empty());
}
