//! Issue 7 end to end: a workflow with a non-open `network:` block runs in
//! a container that can reach the world only through the run's
//! authenticated allowlist proxy, on dockerd and on Podman, with every
//! denial recorded as one `network_blocked` event naming the node.
//!
//! How the container reaches a test upstream (the one choice these tests
//! hinge on): the upstream listens on the HOST (0.0.0.0), and the probe
//! targets the host's primary non-loopback IPv4 address (the source address
//! of the default route). The container cannot dial that address itself
//! (confinement), but the proxy runs on the host and can; the policy allows
//! it with a literal IP rule — and only an IP rule does: the proxy vets the
//! host's own addresses like loopback (the denylist case checks a host
//! service is refused without one). Loopback would not do: inside the container
//! 127.0.0.1 is the container itself and `NO_PROXY` exempts it, and the
//! proxy refuses loopback for names anyway. That refusal is what the
//! metadata case exercises: `localhost` is allowed by a DNS rule, resolves
//! on the host to 127.0.0.1/::1, and must be refused as
//! `blocked-resolved-address` (curl is told `--noproxy ''` so NO_PROXY does
//! not keep the request inside the container).
//!
//! Every probe of one policy runs in ONE container (one tool node whose
//! bash script prints a JSON object of results), so each engine costs one
//! container start per policy.

// Test code: a failed expectation is the assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use tokio_rustls::rustls;

use crate::support::{self, Engine, Sandbox, nft_tables_of, of_type};

/// A host-side HTTP/1.1 server answering every request with `body`, and
/// remembering who connected. Stopped (and joined) on drop.
pub(crate) struct Upstream {
    pub(crate) port: u16,
    pub(crate) body: String,
    peers: Arc<Mutex<Vec<IpAddr>>>,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    pub(crate) fn start(body: &str) -> Self {
        Self::serve(body, None)
    }

    /// The same over TLS with `config` (an rcgen self-signed cert).
    fn start_tls(body: &str, config: Arc<rustls::ServerConfig>) -> Self {
        Self::serve(body, Some(config))
    }

    fn serve(body: &str, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("0.0.0.0:0").expect("bind upstream");
        let port = listener.local_addr().expect("addr").port();
        let peers = Arc::new(Mutex::new(Vec::new()));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peers, heads, stop, body) =
                (peers.clone(), heads.clone(), stop.clone(), body.to_owned());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(s) = conn else { continue };
                    if let Ok(peer) = s.peer_addr() {
                        peers.lock().expect("peers").push(peer.ip());
                    }
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let head = match &tls {
                        None => answer(s, &body),
                        Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                            Ok(c) => answer(rustls::StreamOwned::new(c, s), &body),
                            Err(_) => continue,
                        },
                    };
                    heads.lock().expect("heads").push(head);
                }
            })
        };
        Self {
            port,
            body: body.to_owned(),
            peers,
            heads,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn peers(&self) -> Vec<IpAddr> {
        self.peers.lock().expect("peers").clone()
    }

    /// The request heads received (request line + headers).
    pub(crate) fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}

/// Read one request head, answer `body`, return the head.
fn answer<S: Read + Write>(mut s: S, body: &str) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 << 10 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.flush();
    String::from_utf8_lossy(&buf).into_owned()
}

/// A rustls server config for `ip` (rcgen self-signed) and its PEM.
fn tls_for(ip: IpAddr) -> (Arc<rustls::ServerConfig>, String) {
    let ck = rcgen::generate_simple_self_signed(vec![ip.to_string()]).expect("rcgen");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        ck.signing_key.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .expect("tls config");
    (Arc::new(config), ck.cert.pem())
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(2),
        );
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The host's primary IPv4 address: the source address of the default
/// route (a UDP connect sends nothing).
pub(crate) fn host_ip() -> IpAddr {
    let sock = UdpSocket::bind("0.0.0.0:0").expect("udp bind");
    sock.connect("192.0.2.1:9")
        .or_else(|_| sock.connect("1.1.1.1:53"))
        .expect("this host has no IPv4 default route; the egress tests need one");
    let ip = sock.local_addr().expect("local addr").ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "host ip {ip}");
    ip
}

/// dockerd's default bridge gateway (docker0): another address of the
/// host, reached through the host's INPUT chain rather than forwarding.
pub(crate) fn docker0_ip() -> String {
    let out = Command::new("docker")
        .args([
            "-H",
            &Engine::Docker.host(),
            "network",
            "inspect",
            "bridge",
            "--format",
            "{{(index .IPAM.Config 0).Gateway}}",
        ])
        .output()
        .expect("docker network inspect");
    let ip = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        ip.parse::<IpAddr>().is_ok(),
        "dockerd's bridge has no gateway ({ip:?}): run scripts/test.sh"
    );
    ip
}

/// The inline `sandbox:` body on the slim image, plus `extra` lines.
pub(crate) fn inline(extra: &str) -> String {
    format!(
        "    image: \"{}\"\n    host_state: none\n{extra}",
        support::slim()
    )
}

/// A one-node workflow running `script` (bash) under the `sandbox:` block
/// `body`; the node's output is the JSON object the script prints.
pub(crate) fn probe_workflow(name: &str, body: &str, script: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(script);
    format!(
        "tool probe:\n  command: `echo {b64} | base64 -d > /tmp/probe.sh && bash /tmp/probe.sh`\n\n\
         workflow {name}:\n  entry: probe\n  sandbox:\n{body}  probe -> done\n"
    )
}

/// The bash prelude of every probe script: `rec NAME VALUE` files a result;
/// `emit` prints them all as one JSON object.
pub(crate) const PRELUDE: &str = r#"set -u
R=/tmp/probe-results; mkdir -p "$R"
rec() { printf '%s' "$2" > "$R/$1"; }
emit() { local args=(); for f in "$R"/*; do args+=(--arg "$(basename "$f")" "$(cat "$f")"); done; jq -cn "${args[@]}" '$ARGS.named'; }
PROXY="${HTTPS_PROXY:-}"
if [ -n "$PROXY" ]; then rec proxy_env set; else rec proxy_env unset; fi
if [ "${HTTP_PROXY:-}" = "$PROXY" ] && [ "${https_proxy:-}" = "$PROXY" ] && [ "${http_proxy:-}" = "$PROXY" ]; then rec proxy_vars_agree yes; else rec proxy_vars_agree no; fi
rec no_proxy "${NO_PROXY:-}|${no_proxy:-}"
# The proxy's host:port, credential left out (results land in events and
# logs); the secret itself (this exec's own, `http://<id>:<secret>@…`)
# travels reversed so the test can look for leaks of it. CRED (`<id>:<secret>`)
# is what a hand-written Proxy-Authorization sends.
HP="${PROXY##*@}"
rec proxy_hostport "$HP"
CRED="${PROXY#*//}"; CRED="${CRED%%@*}"; TOK="${CRED#*:}"
if [ -n "$PROXY" ]; then rec token_rev "$(printf '%s' "$TOK" | rev)"; fi
"#;

/// What a finished probe run left: its id, its events, the probe's output.
pub(crate) struct ProbeRun {
    pub(crate) run_id: String,
    pub(crate) events: Vec<Value>,
    pub(crate) out: Value,
}

/// Run the one-node probe `script` under the `sandbox:` block `body`,
/// expecting it to finish.
pub(crate) fn run_probe(sb: &Sandbox, name: &str, body: &str, script: &str) -> ProbeRun {
    let file = sb.write(&format!("{name}.iter"), &probe_workflow(name, body, script));
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "{:?} {name}: {}",
        sb.engine,
        res.stderr
    );
    let events = sb.events(&run_id);
    let out = node_output(&events);
    ProbeRun {
        run_id,
        events,
        out,
    }
}

pub(crate) fn node_output(events: &[Value]) -> Value {
    let finished = of_type(events, "node_finished");
    assert_eq!(finished.len(), 1, "one node ran: {events:#?}");
    finished[0]["data"]["output"].clone()
}

pub(crate) fn field<'a>(out: &'a Value, key: &str) -> &'a str {
    out[key]
        .as_str()
        .unwrap_or_else(|| panic!("probe output has no {key}: {out:#}"))
}

/// The per-run resources a confined run creates are gone afterwards.
pub(crate) fn assert_cleaned(engine: Engine, run_id: &str) {
    assert!(
        !support::container_exists(engine, run_id),
        "{engine:?}: container of {run_id} left behind"
    );
    let out = Command::new("docker")
        .args([
            "-H",
            &engine.host(),
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("name=iterion-{run_id}"),
        ])
        .output()
        .expect("docker network ls");
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "{engine:?}: network of {run_id} left behind"
    );
    let tables = nft_tables_of(run_id);
    assert!(
        tables.is_empty(),
        "{engine:?}: firewall tables of {run_id} left behind: {tables:?}"
    );
}

fn confined(engine: Engine) {
    let host = host_ip();
    let nonce = format!("upstream-ok-{}", std::process::id());
    let upstream = Upstream::start(&nonce);
    let trap = Upstream::start("trap");
    let (tls_config, pem) = tls_for(host);
    let tls_upstream = Upstream::start_tls(&format!("tls-{nonce}"), tls_config);
    let pem = base64::engine::general_purpose::STANDARD.encode(pem);
    let docker0 = docker0_ip();
    let (p, t, tp) = (upstream.port, trap.port, tls_upstream.port);
    let script = format!(
        r#"{PRELUDE}
rec allowed_http "$(curl -sS -m 10 http://{host}:{p}/allowed 2>&1; echo " rc=$?")"
rec allowed_connect "$(curl -sS -m 10 -p http://{host}:{p}/tunnel 2>&1; echo " rc=$?")"
echo {pem} | base64 -d > /tmp/upstream.pem
rec allowed_tls "$(curl -sS -m 10 --cacert /tmp/upstream.pem https://{host}:{tp}/tls 2>&1; echo " rc=$?")"
rec denied "$(curl -sS -i -m 10 http://denied.example.test/ 2>&1 | tr -d '\r')"
rec wrong_token "$(curl -sS -i -m 10 -x "http://t:wrong@$HP" http://{host}:{p}/ 2>&1 | tr -d '\r')"
rec no_token "$(curl -sS -i -m 10 -x "http://$HP" http://{host}:{p}/ 2>&1 | tr -d '\r')"
rec metadata "$(curl -sS -i -m 10 -k --noproxy '' https://localhost:{p}/ 2>&1 | tr -d '\r')"
# Bypass attempts, in parallel (each may hang until its timeout when dropped).
rec bypass_http "$(curl -sS -m 5 --noproxy '*' http://{host}:{p}/bypass 2>&1; echo " rc=$?")" &
rec bypass_tcp "$(timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{t} && echo connected' 2>&1; echo " rc=$?")" &
rec bypass_docker0 "$(timeout 5 bash -c 'exec 3<>/dev/tcp/{docker0}/{t} && echo connected' 2>&1; echo " rc=$?")" &
rec bypass_external "$(timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/443 && echo connected' 2>&1; echo " rc=$?")" &
# The gateway answers on the proxy port only: not on another host port,
# not as a DNS resolver (Podman's aardvark-dns would resolve for us).
GW="${{HP%%:*}}"
rec bypass_gateway "$(timeout 5 bash -c "exec 3<>/dev/tcp/$GW/{t} && echo connected" 2>&1; echo " rc=$?")" &
rec dns "$(timeout 8 getent hosts deb.debian.org; echo " rc=$?")" &
wait
emit
"#
    );
    let block =
        format!("    network:\n      mode: allowlist\n      rules: [\"{host}\", \"localhost\"]\n");
    let sb = Sandbox::new(engine);
    let ProbeRun {
        run_id,
        events,
        out,
    } = run_probe(&sb, "egress_e2e", &inline(&block), &script);
    eprintln!("{engine:?} probe results: {out:#}");
    let started = of_type(&events, "sandbox_started");
    assert_eq!(
        started[0]["data"]["egress"], "proxy (enforced)",
        "{engine:?}"
    );

    // The proxy environment.
    assert_eq!(field(&out, "proxy_env"), "set", "{engine:?}: {out:#}");
    assert_eq!(
        field(&out, "proxy_vars_agree"),
        "yes",
        "{engine:?}: {out:#}"
    );
    assert_eq!(
        field(&out, "no_proxy"),
        "localhost,127.0.0.1|localhost,127.0.0.1"
    );

    // Allowed: plain HTTP forwarding and a CONNECT tunnel both reach the upstream.
    for key in ["allowed_http", "allowed_connect"] {
        let v = field(&out, key);
        assert!(
            v.starts_with(&upstream.body) && v.ends_with(" rc=0"),
            "{engine:?} {key}: {v}"
        );
    }

    // HTTPS: a CONNECT tunnel to a TLS upstream, its certificate verified
    // end to end (no interception on the way).
    let v = field(&out, "allowed_tls");
    assert_eq!(v, format!("{} rc=0", tls_upstream.body), "{engine:?}");
    let tls_peers = tls_upstream.peers();
    assert!(
        tls_peers.len() == 1 && tls_peers[0] == host,
        "{engine:?}: {tls_peers:?}"
    );
    assert!(tls_upstream.heads()[0].starts_with("GET /tls HTTP/1.1"));

    // Denied: 403 with the reason header, and exactly one event naming the node.
    let denied = field(&out, "denied");
    assert!(denied.contains("HTTP/1.1 403"), "{engine:?}: {denied}");
    assert!(
        denied.contains("x-iterion-egress: blocked-by-allowlist; rule=none"),
        "{engine:?}: {denied}"
    );
    let blocked = of_type(&events, "network_blocked");
    let for_host = |h: &str| -> Vec<&Value> {
        blocked
            .iter()
            .copied()
            .filter(|e| e["data"]["host"] == h)
            .collect()
    };
    let d = for_host("denied.example.test");
    assert_eq!(d.len(), 1, "{engine:?}: {blocked:#?}");
    assert_eq!(d[0]["node_id"], "probe");
    assert_eq!(d[0]["data"]["node_id"], "probe");
    assert_eq!(d[0]["data"]["port"], 80);
    assert_eq!(d[0]["data"]["reason"], "blocked-by-allowlist");
    assert_eq!(d[0]["data"]["rule"], Value::Null);

    // Wrong or missing token: 407, and no event (auth precedes policy).
    for key in ["wrong_token", "no_token"] {
        let v = field(&out, key);
        assert!(
            v.contains("HTTP/1.1 407") && v.contains("proxy-authenticate: Basic"),
            "{engine:?} {key}: {v}"
        );
    }

    // Metadata / loopback: `localhost` is allowed by name, but the address
    // it resolves to on the host is refused.
    let meta = field(&out, "metadata");
    assert!(
        meta.contains("403") && meta.contains("blocked-resolved-address"),
        "{engine:?}: {meta}"
    );
    let m = for_host("localhost");
    assert_eq!(m.len(), 1, "{engine:?}: {blocked:#?}");
    assert_eq!(m[0]["node_id"], "probe");
    assert_eq!(m[0]["data"]["reason"], "blocked-resolved-address");
    assert_eq!(m[0]["data"]["port"], p);
    assert_eq!(blocked.len(), 2, "{engine:?}: {blocked:#?}");

    // Bypassing the proxy fails, and nothing reached the host directly.
    for key in [
        "bypass_http",
        "bypass_tcp",
        "bypass_docker0",
        "bypass_external",
        "bypass_gateway",
        "dns",
    ] {
        let v = field(&out, key);
        assert!(
            !v.ends_with(" rc=0") && !v.contains("connected") && !v.contains(&upstream.body),
            "{engine:?} {key} got through: {v}"
        );
    }
    assert_eq!(
        trap.peers(),
        Vec::<IpAddr>::new(),
        "{engine:?}: trap reached"
    );

    // The token is a secret: it never reaches the upstream, the events or
    // the run log (SPEC house rule; facts §7.3 strips Proxy-Authorization).
    let token: String = field(&out, "token_rev").chars().rev().collect();
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{engine:?}: token shape {}",
        token.len()
    );
    for head in upstream.heads() {
        let lower = head.to_ascii_lowercase();
        assert!(
            !lower.contains("proxy-authorization") && !head.contains(&token),
            "{engine:?}: the upstream saw the proxy credentials: {head}"
        );
    }
    let events_text = serde_json::to_string(&events).expect("events");
    assert!(!events_text.contains(&token), "{engine:?}: token in events");
    let log = sb.iterion(&["logs", &run_id]);
    assert!(log.status.success(), "logs failed");
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        !log.is_empty() && !log.contains(&token),
        "{engine:?}: token in the run log"
    );
    let peers = upstream.peers();
    assert_eq!(peers.len(), 2, "{engine:?}: {peers:?}");
    assert!(
        peers.iter().all(|ip| *ip == host),
        "{engine:?}: only the proxy (on the host, dialling {host}) may reach the upstream: {peers:?}"
    );
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_egress_is_confined_to_the_proxy() {
    confined(Engine::Docker);
}

#[test]
fn podman_egress_is_confined_to_the_proxy() {
    confined(Engine::Podman);
}

/// No `network:` block, and `mode: open`: no proxy, no token, normal
/// networking (the container reaches the host's upstream directly).
fn open(engine: Engine) {
    let host = host_ip();
    let upstream = Upstream::start("open-ok");
    let script = format!(
        r#"{PRELUDE}
rec direct "$(curl -sS -m 10 http://{host}:{p}/direct 2>&1; echo " rc=$?")"
rec proxy_any "$(env | grep -ci '_proxy=' )"
emit
"#,
        p = upstream.port
    );
    for (name, block) in [
        ("no_block", ""),
        ("mode_open", "    network:\n      mode: open\n"),
        // No `mode:`: inert, open (facts §2.3/§7.1, C312).
        (
            "mode_less",
            "    network:\n      rules: [\"only.example.test\"]\n",
        ),
    ] {
        let sb = Sandbox::new(engine);
        let ProbeRun {
            run_id,
            events,
            out,
        } = run_probe(&sb, name, &inline(block), &script);
        assert_eq!(field(&out, "proxy_env"), "unset", "{engine:?} {name}");
        assert_eq!(field(&out, "proxy_any"), "0", "{engine:?} {name}: {out:#}");
        assert_eq!(field(&out, "direct"), "open-ok rc=0", "{engine:?} {name}");
        let started = of_type(&events, "sandbox_started");
        assert_eq!(started[0]["data"]["egress"], "open", "{engine:?} {name}");
        assert!(of_type(&events, "network_blocked").is_empty());
        assert!(of_type(&events, "sandbox_egress_unenforced").is_empty());
        assert!(!support::container_exists(engine, &run_id));
    }
}

#[test]
fn docker_open_policy_has_no_proxy() {
    open(Engine::Docker);
}

#[test]
fn podman_open_policy_has_no_proxy() {
    open(Engine::Podman);
}

/// With enforcement unavailable (forced by `ITERION_SANDBOX_EGRESS_ENFORCE=off`),
/// doctor says so; inline is refused before anything starts; auto runs
/// with an advisory proxy and says so in `sandbox_egress_unenforced`.
fn unenforced(engine: Engine) {
    // Doctor, both ways.
    let sb = Sandbox::new(engine);
    let doctor = |sb: &Sandbox| -> Value {
        let out = sb.iterion(&["sandbox", "doctor", "--json"]);
        assert!(out.status.success(), "{engine:?}: doctor failed");
        serde_json::from_slice(&out.stdout).expect("doctor json")
    };
    let on = doctor(&sb);
    assert_eq!(on["selected_driver"], engine.driver());
    assert_eq!(on["capabilities"]["egress_enforcement"], true, "{on:#}");
    assert_eq!(on["egress"]["enforced"], true, "{on:#}");
    let sb = sb.with_env("ITERION_SANDBOX_EGRESS_ENFORCE", "off");
    let off = doctor(&sb);
    assert_eq!(off["capabilities"]["egress_enforcement"], false, "{off:#}");
    assert_eq!(off["egress"]["enforced"], false, "{off:#}");
    let detail = off["egress"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("SANDBOX_SPEC_REFUSED") && detail.contains("sandbox_egress_unenforced"),
        "{detail}"
    );

    let script = format!(
        r#"{PRELUDE}
rec denied "$(curl -sS -i -m 10 http://denied.example.test/ 2>&1 | tr -d '\r')"
emit
"#
    );
    let network = "    network:\n      mode: allowlist\n      rules: [\"allowed.example.test\"]\n";
    let file = sb.write(
        "adv.iter",
        &probe_workflow("advisory", &inline(network), &script),
    );
    // `--sandbox auto` yields to a block naming an image (facts §3.2), so
    // auto is the block's own `mode: auto` on the default image.
    let auto_body = format!("    mode: auto\n    host_state: none\n{network}");
    let auto_file = sb.write(
        "auto.iter",
        &probe_workflow("advisory", &auto_body, &script),
    );

    // The strict doctor reads the same verdict: fail for inline, warn for auto.
    let strict = |file: &std::path::Path| -> (Option<i32>, Value) {
        let out = sb.iterion(&[
            "sandbox",
            "doctor",
            "--strict",
            file.to_str().expect("utf8"),
            "--sandbox-default-image",
            &support::slim(),
            "--json",
        ]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let caps = doc["checks"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["name"] == "driver capabilities")
                    .cloned()
            })
            .unwrap_or_else(|| panic!("{engine:?}: {doc:#}"));
        (out.status.code(), caps)
    };
    let (code, caps) = strict(&file);
    assert_eq!(
        (code, &caps["status"]),
        (Some(1), &Value::from("fail")),
        "{caps}"
    );
    assert!(
        caps["detail"]
            .as_str()
            .unwrap_or("")
            .contains("egress enforcement")
    );
    let (_, caps) = strict(&auto_file);
    assert_eq!(caps["status"], "warn", "{engine:?}: {caps}");

    // Inline: refused, nothing started.
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(res.code, Some(1), "{engine:?}: {}", res.stderr);
    assert_eq!(
        res.failure_code(),
        Some("SANDBOX_SPEC_REFUSED"),
        "{engine:?}"
    );
    let events = sb.events(&run_id);
    assert!(of_type(&events, "sandbox_started").is_empty());
    assert!(!support::container_exists(engine, &run_id));

    // Auto: runs, says it is unenforced, the proxy still filters.
    let res = sb.run(&auto_file, &["--sandbox-default-image", &support::slim()]);
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "{engine:?}: {}",
        res.stderr
    );
    let events = sb.events(&run_id);
    let unenf = of_type(&events, "sandbox_egress_unenforced");
    assert_eq!(unenf.len(), 1, "{engine:?}: {events:#?}");
    assert_eq!(unenf[0]["data"]["driver"], engine.driver());
    let started = of_type(&events, "sandbox_started");
    assert_eq!(started[0]["data"]["egress"], "proxy (advisory)");
    let out = node_output(&events);
    assert_eq!(field(&out, "proxy_env"), "set");
    let denied = field(&out, "denied");
    assert!(
        denied.contains("HTTP/1.1 403")
            && denied.contains("x-iterion-egress: blocked-by-allowlist"),
        "{engine:?}: {denied}"
    );
    let blocked = of_type(&events, "network_blocked");
    assert_eq!(blocked.len(), 1, "{engine:?}: {blocked:#?}");
    assert_eq!(blocked[0]["node_id"], "probe");
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_unenforced_egress_is_refused_inline_and_reported_in_auto() {
    unenforced(Engine::Docker);
}

#[test]
fn podman_unenforced_egress_is_refused_inline_and_reported_in_auto() {
    unenforced(Engine::Podman);
}

/// A rule the policy compiler rejects is a C313 error at the rule.
#[test]
fn validate_reports_a_bad_rule_at_the_rule() {
    let sb = Sandbox::new(Engine::Docker);
    let text = "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"x\"\n    network:\n      mode: allowlist\n      rules: [\"ok.example.com\", \"a*b.com\"]\n  t -> done\n";
    let file = sb.write("bad.iter", text);
    let out = sb.iterion(&["validate", file.to_str().expect("utf8"), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("validate json");
    let text = doc.to_string();
    let diags: Vec<Value> = doc
        .pointer("/files/0/diagnostics")
        .or_else(|| doc.get("diagnostics"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| panic!("no diagnostics: {text}"));
    let c313: Vec<&Value> = diags.iter().filter(|d| d["code"] == "C313").collect();
    assert_eq!(c313.len(), 1, "{text}");
    assert_eq!(c313[0]["severity"], "error");
    assert_eq!(c313[0]["line"], 10, "{text}");
    let col = c313[0]["column"].as_u64().unwrap_or(0);
    let line = "      rules: [\"ok.example.com\", \"a*b.com\"]";
    let at = line.find("\"a*b.com\"").expect("rule") as u64 + 1;
    assert!(
        col == at || col == at + 1,
        "column {col}, rule at {at}: {text}"
    );

    // The same workflow is refused by `run` (bad input, exit 2) before any
    // sandbox, and by the strict doctor's allowlist-syntax check.
    let out = sb.iterion(&["run", file.to_str().expect("utf8"), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sb.iterion(&[
        "sandbox",
        "doctor",
        "--strict",
        file.to_str().expect("utf8"),
        "--json",
    ]);
    let strict = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_ne!(out.status.code(), Some(0), "{strict}");
    if let Ok(doc) = serde_json::from_str::<Value>(&strict) {
        let syntax: Vec<&Value> = doc["checks"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter(|c| c["name"] == "network allowlist syntax")
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(syntax.len(), 1, "{strict}");
        assert_eq!(syntax[0]["status"], "fail", "{strict}");
    }

    // A block without `mode:` is inert (open) and says so: C312, a warning.
    let inert = "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"x\"\n    network:\n      rules: [\"ok.example.com\"]\n  t -> done\n";
    let file = sb.write("inert.iter", inert);
    let out = sb.iterion(&["validate", file.to_str().expect("utf8"), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("C312") && text.contains("warning"), "{text}");
}

/// Each denial names the node whose command caused it, across nodes. In
/// denylist mode a plain rule ALLOWS (facts §2.3: last match wins, plain
/// allows, negated denies; only the unmatched default differs), so the
/// denylist is written with `!`.
fn attribution(engine: Engine) {
    let node = |name: &str, host: &str| {
        format!("tool {name}:\n  command: `curl -sS -m 10 -o /dev/null http://{host}/ || true`\n\n")
    };
    // Denylist allows the rest of the world, but not this host's own
    // services: its address is as sensitive as loopback.
    let host = host_ip();
    let upstream = Upstream::start("host-service");
    let host_port = format!("{host}:{}", upstream.port);
    let text = format!(
        "{}{}{}workflow two:\n  entry: first\n  sandbox:\n{}    network:\n      mode: denylist\n      rules: [\"!**.denied.test\"]\n  first -> second\n  second -> third\n  third -> done\n",
        node("first", "a.denied.test"),
        node("second", "b.c.denied.test"),
        node("third", &host_port),
        // A denial outside any node (post_create) names no node.
        inline("    post_create: \"curl -sS -m 10 -o /dev/null http://pc.denied.test/ || true\"\n")
    );
    let sb = Sandbox::new(engine);
    let file = sb.write("two.iter", &text);
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(res.code, Some(0), "{engine:?}: {}", res.stderr);
    let events = sb.events(&run_id);
    let blocked = of_type(&events, "network_blocked");
    let seen: Vec<(String, String, String, String)> = blocked
        .iter()
        .map(|e| {
            (
                e["node_id"].as_str().unwrap_or("-").to_owned(),
                e["data"]["node_id"].as_str().unwrap_or("-").to_owned(),
                e["data"]["host"].as_str().unwrap_or("-").to_owned(),
                format!("{} {}", e["data"]["reason"], e["data"]["rule"]),
            )
        })
        .collect();
    let want = |n: &str, h: &str| {
        (
            n.to_owned(),
            n.to_owned(),
            h.to_owned(),
            "\"blocked-by-denylist\" \"!**.denied.test\"".to_owned(),
        )
    };
    let mut outside = want("-", "pc.denied.test");
    outside.1 = "-".to_owned();
    assert_eq!(
        seen,
        vec![
            outside,
            want("first", "a.denied.test"),
            want("second", "b.c.denied.test"),
            (
                "third".to_owned(),
                "third".to_owned(),
                host.to_string(),
                "\"blocked-resolved-address\" null".to_owned()
            ),
        ],
        "{engine:?}"
    );
    assert!(
        upstream.peers().is_empty(),
        "{engine:?}: host service reached"
    );
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_denials_name_their_node() {
    attribution(Engine::Docker);
}

#[test]
fn podman_denials_name_their_node() {
    attribution(Engine::Podman);
}

/// Two stores, one engine: a reap from store B (what every `iterion run`
/// does at start) keeps the live confined sandbox of a run in store A —
/// container and internal network — because its creating process still
/// lives, and run A finishes. Before the owner label, B judged A's run
/// "absent" and killed it (found by these tests reaping each other).
fn other_store_keeps_live_sandbox(engine: Engine) {
    let name = format!("cross_store_{}_{}", engine.driver(), std::process::id());
    let script = format!("{PRELUDE}\nsleep 6\nrec done yes\nemit\n");
    let network = "    network:\n      mode: allowlist\n      rules: [\"allowed.example.test\"]\n";
    let a = Sandbox::new(engine);
    let file = a.write("a.iter", &probe_workflow(&name, &inline(network), &script));
    let file = file.to_string_lossy().into_owned();
    let child = a
        .command(&["run", &file, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn run A");
    let listed = |what: &str| -> String {
        let out = Command::new("docker")
            .args(["-H", &engine.host(), what, "ls", "-q", "--filter"])
            .arg(format!("label=iterion.io/run-name={name}"))
            .output()
            .expect("docker ls");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mut up = false;
    for _ in 0..100 {
        if !listed("container").is_empty() && !listed("network").is_empty() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let b = Sandbox::new(engine);
    let reap = b.iterion(&["sandbox", "reap", "--json"]);
    let reap_text = String::from_utf8_lossy(&reap.stdout).into_owned();
    let a_out = child.wait_with_output().expect("wait run A");
    assert!(
        up,
        "{engine:?}: run A never started: {}",
        String::from_utf8_lossy(&a_out.stderr)
    );
    assert!(
        reap.status.success(),
        "reap: {}",
        String::from_utf8_lossy(&reap.stderr)
    );
    assert_eq!(
        a_out.status.code(),
        Some(0),
        "{engine:?}: run A was disturbed by store B's reap: {}\nreap: {reap_text}",
        String::from_utf8_lossy(&a_out.stderr)
    );
    let decisions: Vec<Value> = reap_text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| match v {
            Value::Array(a) => a,
            Value::Object(ref o) if o.contains_key("decisions") => {
                v["decisions"].as_array().cloned().unwrap_or_default()
            }
            other => vec![other],
        })
        .collect();
    let doc: Value = serde_json::from_str(
        String::from_utf8_lossy(&a_out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or("null"),
    )
    .expect("run A json");
    let run_a = doc["run_id"].as_str().expect("run id").to_owned();
    let mine: Vec<&Value> = decisions
        .iter()
        .filter(|d| d["run_id"] == run_a.as_str())
        .collect();
    // Store B either does not list A's resources at all (they carry
    // another store's `iterion.io/store` digest) or lists them and keeps
    // them on A's live owner lease; it never reaps them.
    for d in mine {
        assert_eq!(d["action"], "keep", "{engine:?}: {d}");
        assert_eq!(d["reason"], "lease held", "{engine:?}: {d}");
    }
    assert_cleaned(engine, &run_a);
}

#[test]
fn docker_other_store_keeps_live_sandbox() {
    other_store_keeps_live_sandbox(Engine::Docker);
}

#[test]
fn podman_other_store_keeps_live_sandbox() {
    other_store_keeps_live_sandbox(Engine::Podman);
}

/// Start a confined run whose node sleeps; return it once its container
/// and network exist.
fn spawn_confined_sleeper(sb: &Sandbox, name: &str) -> std::process::Child {
    let network = "    network:\n      mode: allowlist\n      rules: [\"allowed.example.test\"]\n";
    let text = format!(
        "tool nap:\n  command: `sleep 60`\n\nworkflow {name}:\n  entry: nap\n  sandbox:\n{}  nap -> done\n",
        inline(network)
    );
    let file = sb.write("nap.iter", &text);
    let file = file.to_string_lossy().into_owned();
    let mut child = sb
        .command(&["run", &file, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn run");
    let listed = |what: &str| -> bool {
        let out = Command::new("docker")
            .args(["-H", &sb.engine.host(), what, "ls", "-q", "--filter"])
            .arg(format!("label=iterion.io/run-name={name}"))
            .output()
            .expect("docker ls");
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
    };
    for _ in 0..150 {
        if listed("container") && listed("network") {
            // The node is running once the container exists and the
            // store has the run; give the exec a moment to begin.
            std::thread::sleep(Duration::from_millis(300));
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{name}: the confined run never started");
}

fn run_id_of(sb: &Sandbox) -> String {
    let out = sb.iterion(&["runs", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = text.find("r20").unwrap_or_else(|| panic!("no run: {text}"));
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect()
}

/// Cancelling a confined run (SIGINT) removes its container, network and
/// firewall tables; a SIGKILLed one leaves them to `iterion sandbox reap`,
/// which removes them all (the tables are named by the run).
fn interrupted_runs_release_confinement(engine: Engine) {
    let pid = std::process::id();
    let sb = Sandbox::new(engine);
    let child = spawn_confined_sleeper(&sb, &format!("nap_int_{}_{pid}", engine.driver()));
    let run_id = run_id_of(&sb);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{engine:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_cleaned(engine, &run_id);

    let sb = Sandbox::new(engine);
    let mut child = spawn_confined_sleeper(&sb, &format!("nap_kill_{}_{pid}", engine.driver()));
    let run_id = run_id_of(&sb);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // SIGKILL left everything behind, both firewall tables included.
    let mut tables = nft_tables_of(&run_id);
    tables.sort();
    assert_eq!(
        tables,
        vec![
            format!("table inet iterion-{run_id}"),
            format!("table netdev iterion-{run_id}")
        ],
        "{engine:?}"
    );
    let reap = sb.iterion(&["sandbox", "reap", "--json"]);
    assert!(
        reap.status.success(),
        "{}",
        String::from_utf8_lossy(&reap.stderr)
    );
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_interrupted_runs_release_confinement() {
    interrupted_runs_release_confinement(Engine::Docker);
}

#[test]
fn podman_interrupted_runs_release_confinement() {
    interrupted_runs_release_confinement(Engine::Podman);
}
