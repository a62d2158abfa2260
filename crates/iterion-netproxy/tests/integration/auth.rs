//! Token authentication: 407 without the run's token, Bearer and Basic accepted.

use base64::Engine as _;
use iterion_core::NetworkMode;

use crate::support::*;

#[tokio::test]
async fn missing_or_wrong_token_is_407_with_basic_challenge() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    let authority = format!("localhost:{}", tls.addr.port());
    let other = iterion_netproxy::ProxyToken::generate();
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    for auth in [
        String::new(),
        format!("Proxy-Authorization: Bearer {}\r\n", other.expose()),
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            b64(format!("t:{}", other.expose()))
        ),
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            b64(format!("{}:", p.token.expose()))
        ),
        format!("Authorization: Bearer {}\r\n", p.token.expose()),
    ] {
        let (resp, _) = connect(p.addr(), &authority, &auth).await;
        assert_eq!(resp.status, 407, "{auth:?}");
        assert_eq!(
            resp.header("proxy-authenticate"),
            Some("Basic realm=\"iterion\"")
        );
    }
    // Unauthenticated requests never reach the policy: no denial recorded.
    let (resp, _) = connect(p.addr(), "denied.test:443", "").await;
    assert_eq!(resp.status, 407);
    assert!(p.blocked().is_empty());
}

#[tokio::test]
async fn basic_with_token_as_password_opens_the_tunnel() {
    let tls = tls_upstream().await;
    let p = start_proxy(NetworkMode::Allowlist, &["localhost", "127.0.0.1"]).await;
    let authority = format!("localhost:{}", tls.addr.port());
    let cred = base64::engine::general_purpose::STANDARD.encode(format!("t:{}", p.token.expose()));
    let (resp, _) = connect(
        p.addr(),
        &authority,
        &format!("Proxy-Authorization: Basic {cred}\r\n"),
    )
    .await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn a_denial_names_the_exec_whose_credential_asked() {
    let book = iterion_netproxy::CredentialBook::new();
    let shared = book.clone();
    let p = start_proxy_opts(
        policy(NetworkMode::Allowlist, &["localhost"]),
        false,
        move |o| {
            o.credentials = shared;
        },
    )
    .await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // Two execs at once, each with its own credential: each denial is
    // attributed to the exec that asked, never to the other.
    let a = book.issue("node_a");
    let b = book.issue("node_b");
    for (cred, label) in [(&b, "node_b"), (&a, "node_a"), (&b, "node_b")] {
        let url = cred.endpoint_url("ignored", 1);
        let userinfo = url
            .strip_prefix("http://")
            .and_then(|u| u.split_once('@'))
            .map(|(u, _)| u.to_owned())
            .unwrap();
        let (resp, _) = connect(
            p.addr(),
            "denied.test:443",
            &format!("Proxy-Authorization: Basic {}\r\n", b64(&userinfo)),
        )
        .await;
        assert_eq!(resp.status, 403);
        assert_eq!(p.blocked().last().unwrap().exec.as_deref(), Some(label));
    }
    // The run token speaks for the sandbox, not for an exec.
    let (resp, _) = connect(p.addr(), "denied.test:443", &p.bearer()).await;
    assert_eq!(resp.status, 403);
    assert_eq!(p.blocked().last().unwrap().exec, None);
    assert_eq!(p.blocked().len(), 4);
}
