//! Issue 19, items 9–11, against the real proxy on loopback: numeric hosts
//! are IP literals, a plain request reaches its upstream with the Host the
//! policy judged, a 407 closes the connection, the per-run connection cap
//! answers 503 (tunnels count), and the listener binds exactly the address
//! it is given, configured or not.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_core::NetworkMode;
use iterion_netproxy::{BlockReason, EgressProxy, LimitNotice, ProxyOptions, ProxyToken};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

#[tokio::test]
async fn numeric_hosts_are_judged_and_dialled_as_ip_literals() {
    let up = http_upstream().await;
    let port = up.port();
    // `*` is "any single-label name": it used to match `2130706433`.
    let p = start_proxy(NetworkMode::Allowlist, &["*"]).await;
    for host in [
        "2130706433",
        "0x7f000001",
        "017700000001",
        "127.1",
        "0x7f.1",
    ] {
        let (resp, _) = connect(p.addr(), &format!("{host}:{port}"), &p.bearer()).await;
        assert_eq!(resp.status, 403, "{host}");
        assert_eq!(
            resp.header("x-iterion-egress"),
            Some("blocked-by-allowlist; rule=none"),
            "{host}"
        );
    }
    let blocked = p.blocked();
    assert_eq!(blocked.len(), 5);
    for b in &blocked {
        assert_eq!((b.host.as_str(), b.port), ("127.0.0.1", port));
        assert_eq!(b.reason, BlockReason::Allowlist);
    }
    // Numeric but no address: a 400, never a name for the resolver.
    for host in ["1.2.3.4.5", "4294967296", "example.123"] {
        let (resp, _) = connect(p.addr(), &format!("{host}:{port}"), &p.bearer()).await;
        assert_eq!(resp.status, 400, "{host}");
    }
    assert_eq!(p.blocked().len(), 5, "a 400 is no policy decision");

    // Allowed by its IP rule, the decimal form reaches 127.0.0.1 itself.
    let p = start_proxy(NetworkMode::Allowlist, &["127.0.0.1"]).await;
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://2130706433:{port}/n HTTP/1.1\r\nHost: 2130706433:{port}\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.body.starts_with("GET /n\n"), "{}", resp.body);
}

#[tokio::test]
async fn absolute_form_is_forwarded_with_the_judged_authority_as_host() {
    let up = http_upstream().await;
    let port = up.port();
    let p = start_proxy(NetworkMode::Allowlist, &["allowed.test", "127.0.0.1"]).await;
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://allowed.test:{port}/h HTTP/1.1\r\nHost: evil.example.test\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let hosts: Vec<&str> = resp
        .body
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
        .collect();
    assert_eq!(
        hosts,
        vec![format!("host: allowed.test:{port}")],
        "{}",
        resp.body
    );
    assert!(!resp.body.contains("evil"), "{}", resp.body);

    // Userinfo in the request-target never becomes part of Host.
    let resp = exchange(
        p.addr(),
        &format!(
            "GET http://u:pw@allowed.test:{port}/h HTTP/1.1\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(
        resp.body.contains(&format!("host: allowed.test:{port}\n")) && !resp.body.contains("pw"),
        "{}",
        resp.body
    );

    // Two Host headers, or a Host with userinfo in origin-form: 400.
    for head in [
        format!(
            "GET /x HTTP/1.1\r\nHost: allowed.test:{port}\r\nHost: evil.example.test\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
        format!(
            "GET http://allowed.test:{port}/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
        format!(
            "GET /x HTTP/1.1\r\nHost: evil.example.test@allowed.test:{port}\r\n{}Connection: close\r\n\r\n",
            p.bearer()
        ),
    ] {
        let resp = exchange(p.addr(), &head).await;
        assert_eq!(resp.status, 400, "{head}");
    }
    assert!(p.blocked().is_empty());
}

#[tokio::test]
async fn a_407_closes_the_connection() {
    let p = start_proxy(NetworkMode::Allowlist, &["**"]).await;
    let mut stream = TcpStream::connect(p.addr()).await.unwrap();
    // Asks for keep-alive; gets the challenge and then the end of the stream.
    stream
        .write_all(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let resp = read_head(&mut stream).await;
    assert_eq!(resp.status, 407);
    assert_eq!(resp.header("connection"), Some("close"));
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "the proxy kept the unauthenticated connection open"
    );
    let body_len: usize = resp.header("content-length").unwrap().parse().unwrap();
    assert_eq!(rest.len(), body_len, "nothing follows the 407's body");
}

/// Start a proxy with a small cap, recording its limit notices.
async fn capped(cap: usize) -> (TestProxy, Arc<Mutex<Vec<LimitNotice>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let p = start_proxy_opts(
        policy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]),
        false,
        |o| {
            o.max_connections = cap;
            o.on_limit = Arc::new(move |n| sink.lock().unwrap().push(n));
        },
    )
    .await;
    (p, notices)
}

/// An over-cap answer, read whole.
async fn refused(p: &TestProxy) -> RawResponse {
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    let _ = s
        .write_all(format!("CONNECT localhost:1 HTTP/1.1\r\n{}\r\n", p.bearer()).as_bytes())
        .await;
    let mut resp = read_head(&mut s).await;
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body).await;
    resp.body = String::from_utf8_lossy(&body).into_owned();
    resp
}

#[tokio::test]
async fn connections_past_the_cap_get_503_and_a_notice() {
    let (p, notices) = capped(4).await;
    // Four idle connections hold the four permits (no request yet).
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(p.addr()).await.unwrap());
    }
    let resp = refused(&p).await;
    assert_eq!(resp.status, 503, "{resp:?}");
    assert_eq!(
        resp.header("x-iterion-egress"),
        Some("connection-limit; limit=4")
    );
    assert!(resp.body.contains("maximum of concurrent connections"));
    assert_eq!(
        notices.lock().unwrap().clone(),
        vec![LimitNotice::Connections {
            limit: 4,
            refused: 1
        }]
    );
    // A second refusal inside the notice interval is counted, not reported.
    assert_eq!(refused(&p).await.status, 503);
    assert_eq!(notices.lock().unwrap().len(), 1);
    // Closing one frees its permit: the next client is served (once the
    // proxy has seen the close).
    drop(idle.pop());
    let mut served = None;
    for _ in 0..500 {
        let (resp, _) = connect(p.addr(), "denied.test:443", &p.bearer()).await;
        if resp.status != 503 {
            served = Some(resp.status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(served, Some(403), "a freed permit was never reused");
}

#[tokio::test]
async fn tunnels_hold_their_permit_until_they_end() {
    let tls = tls_upstream().await;
    let (p, _notices) = capped(2).await;
    let authority = format!("localhost:{}", tls.addr.port());
    let (a, ta) = connect(p.addr(), &authority, &p.bearer()).await;
    let (b, tb) = connect(p.addr(), &authority, &p.bearer()).await;
    assert_eq!((a.status, b.status), (200, 200));
    // Both CONNECTs became tunnels (hyper's connection is over): they still count.
    assert_eq!(refused(&p).await.status, 503);
    drop((ta, tb));
    let mut freed = false;
    for _ in 0..500 {
        let (resp, _) = connect(p.addr(), &authority, &p.bearer()).await;
        if resp.status == 200 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed, "ended tunnels never released their permits");
}

#[tokio::test]
async fn binds_exactly_the_given_address_configured_or_not() {
    // 192.0.2.0/24 (TEST-NET-1) is configured nowhere: a plain bind fails,
    // a free bind succeeds on exactly that address (a Podman gateway before
    // its bridge exists).
    let addr: std::net::SocketAddr = "192.0.2.77:0".parse().unwrap();
    let opts = |freebind| {
        let mut o = ProxyOptions::new(
            addr,
            Arc::new(policy(NetworkMode::Allowlist, &["**"])),
            ProxyToken::generate(),
        );
        o.freebind = freebind;
        o
    };
    let err = EgressProxy::start(opts(false)).await.unwrap_err();
    assert_eq!(err.code(), "EGRESS_PROXY_BIND");
    let handle = EgressProxy::start(opts(true)).await.unwrap();
    assert_eq!(handle.local_addr().ip(), addr.ip());
    assert_ne!(handle.local_addr().port(), 0);
    // Nothing listens on the port at any other address.
    let other = std::net::SocketAddr::new(ip(LOOPBACK), handle.local_addr().port());
    assert!(TcpStream::connect(other).await.is_err());
    handle.shutdown().await;
}
