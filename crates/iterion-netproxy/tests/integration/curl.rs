//! The real `curl` binary through the proxy, with the credentials in the
//! proxy URL exactly as a container's `HTTPS_PROXY` carries them.

use std::process::Command;

use iterion_core::NetworkMode;

use crate::support::*;

/// Runs curl with a clean environment (no ambient proxy or NO_PROXY).
async fn curl(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .arg("-sS")
            .arg("--noproxy")
            .arg("")
            .arg("--max-time")
            .arg("20")
            .args(&args)
            .output()
            .expect("the curl binary is required (apt-get install curl; run scripts/test.sh)");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn curl_plain_http_and_https_through_the_proxy() {
    let up = http_upstream().await;
    let tls = tls_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &tls.cert_pem).unwrap();
    let p = start_proxy(
        NetworkMode::Allowlist,
        &["allowed.test", "localhost", "127.0.0.1"],
    )
    .await;
    let proxy_url = p.token.endpoint_url("127.0.0.1", p.addr().port());

    let (code, out, err) = curl(vec![
        "-x".into(),
        proxy_url.clone(),
        format!("http://allowed.test:{}/via-curl", up.port()),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("GET /via-curl\n"), "{out}");
    assert!(!out.to_lowercase().contains("proxy-authorization"), "{out}");

    let (code, out, err) = curl(vec![
        "-x".into(),
        proxy_url.clone(),
        "--cacert".into(),
        ca.display().to_string(),
        format!("https://localhost:{}/", tls.addr.port()),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, TLS_BODY);

    // Denied: curl reports the CONNECT status.
    let (code, out, _) = curl(vec![
        "-x".into(),
        proxy_url,
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_connect}".into(),
        "https://denied.test/".into(),
    ])
    .await;
    assert_ne!(code, 0);
    assert_eq!(out, "403");
    assert_eq!(p.blocked().len(), 1);

    // No credentials: 407.
    let (code, out, _) = curl(vec![
        "-x".into(),
        format!("http://127.0.0.1:{}", p.addr().port()),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_connect}".into(),
        format!("https://localhost:{}/", tls.addr.port()),
    ])
    .await;
    assert_ne!(code, 0);
    assert_eq!(out, "407");
}
