//! Issue 19's egress attacks, replayed end to end against dockerd and
//! Podman with the `iterion` binary, each next to the benign case that must
//! keep working:
//!
//! * item 2, IPv6: from inside a confined sandbox, hand-built IPv6 frames
//!   over `AF_PACKET` (the dockerd attack), an ICMPv6 ping socket to
//!   `ff02::1` and ordinary IPv6 sockets (the Podman attack) reach no host
//!   service; a device node cannot be made; and from the sandbox's network
//!   namespace with every capability (the host's own root, so the cap drop
//!   does not decide) the bridge answers no IPv6 at all. The same raw probe
//!   gets a SYN-ACK from a bridge this test makes without the rules, so the
//!   probe itself is proven able to succeed.
//! * item 9: 1,100 connections from the run itself get 503 past the cap and
//!   the run finishes (never `SANDBOX_LOST`); another run's open-network
//!   sandbox and the host itself cannot reach the proxy; the proxy listens
//!   on the run's gateway only.
//! * items 10 and 11: `CONNECT <decimal>` is judged as the IP it denotes;
//!   a plain request's Host is the authority the policy judged.
//!
//! The attacker's tools are one static binary (`tests/helpers/netprobe.rs`)
//! copied into the workspace. Only loopback and the test's own bridge and
//! namespace are touched.

// Test code: a failed expectation is the assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::egress_e2e::{
    PRELUDE, ProbeRun, Upstream, assert_cleaned, field, host_ip, inline, node_output,
    probe_workflow, run_probe,
};
use crate::support::{Engine, Sandbox, of_type};

/// The probe binary, compiled once per test process: static, so it runs in
/// any image (reference/test-environment.md, "Static helper binaries").
fn netprobe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/netprobe.rs");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("netprobe");
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
            let built = Command::new(rustc)
                .args([
                    "--edition",
                    "2024",
                    "-C",
                    "target-feature=+crt-static",
                    "-C",
                    "opt-level=1",
                    "-C",
                    "debuginfo=0",
                    "-C",
                    "strip=symbols",
                    "-o",
                ])
                .arg(&out)
                .arg(&src)
                .output()
                .expect("run rustc");
            assert!(
                built.status.success(),
                "netprobe did not compile: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            out
        })
        .clone()
}

/// A listener on every host address, IPv6 included (`[::]`, dual stack),
/// recording who connected; and a UDP socket recording what arrived.
struct HostServices {
    tcp_port: u16,
    udp_port: u16,
    peers: Arc<Mutex<Vec<SocketAddr>>>,
    datagrams: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
}

impl HostServices {
    fn start() -> Self {
        let tcp = TcpListener::bind("[::]:0").expect("bind [::]");
        let udp = UdpSocket::bind("[::]:0").expect("bind udp [::]");
        udp.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("udp timeout");
        tcp.set_nonblocking(true).expect("nonblocking");
        let (tcp_port, udp_port) = (
            tcp.local_addr().expect("addr").port(),
            udp.local_addr().expect("addr").port(),
        );
        let peers = Arc::new(Mutex::new(Vec::new()));
        let datagrams = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (peers, stop) = (peers.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match tcp.accept() {
                        Ok((mut s, peer)) => {
                            peers.lock().expect("peers").push(peer);
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            });
        }
        {
            let (datagrams, stop) = (datagrams.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::SeqCst) {
                    if let Ok((_, from)) = udp.recv_from(&mut buf) {
                        datagrams.lock().expect("datagrams").push(from);
                    }
                }
            });
        }
        Self {
            tcp_port,
            udp_port,
            peers,
            datagrams,
            stop,
        }
    }

    fn reached(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        (
            self.peers.lock().expect("peers").clone(),
            self.datagrams.lock().expect("datagrams").clone(),
        )
    }
}

impl Drop for HostServices {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The `docker` CLI against `engine`.
fn docker(engine: Engine, args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(["-H", &engine.host()])
        .args(args)
        .output()
        .expect("docker");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Script lines that hand over to the host and wait for it: the sandbox
/// stays up while the host side probes it.
const HANDOVER: &str = r#"touch "$PWD/ready"
for _ in $(seq 1200); do [ -e "$PWD/done" ] && break; sleep 0.1; done
"#;

/// Run `workflow` in the background (with at most `nofile` descriptors for
/// the `iterion` process, soft and hard, when given); once the node wrote
/// `ready`, hand the live sandbox's container to `host_side`, then let the
/// run finish.
fn with_live_sandbox(
    sb: &Sandbox,
    name: &str,
    workflow: &str,
    nofile: Option<u32>,
    host_side: impl FnOnce(&str),
) -> crate::support::RunResult {
    let file = sb.write("attack.iter", workflow);
    let child = sb
        .command(&["run", file.to_str().expect("utf8"), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn run");
    if let Some(n) = nofile {
        // Long before its proxy starts (the engine is asked first).
        let st = Command::new("prlimit")
            .args([
                "--pid",
                &child.id().to_string(),
                &format!("--nofile={n}:{n}"),
            ])
            .status()
            .expect("prlimit");
        assert!(st.success(), "prlimit failed");
    }
    let ready = sb.workspace().join("ready");
    let mut up = false;
    for _ in 0..1200 {
        if ready.exists() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let container = docker(
        sb.engine,
        &[
            "ps",
            "-q",
            "--filter",
            &format!("label=iterion.io/run-name={name}"),
        ],
    );
    if up && !container.is_empty() {
        host_side(&container);
    }
    std::fs::write(sb.workspace().join("done"), b"").expect("done marker");
    let out = child.wait_with_output().expect("wait run");
    let res = crate::support::parse_run_output(&out);
    assert!(
        up && !container.is_empty(),
        "{:?}: the sandbox never became ready: {}",
        sb.engine,
        res.stderr
    );
    res
}

/// A workspace holding the probe binary, and a one-node workflow (named
/// after `tag`, the engine and this process) running `script` confined to
/// an allowlist of `host`.
fn confined_with_probe(
    engine: Engine,
    tag: &str,
    host: IpAddr,
    script: &str,
) -> (Sandbox, String, String) {
    let name = format!("{tag}_{}_{}", engine.driver(), std::process::id());
    let block = format!("    network:\n      mode: allowlist\n      rules: [\"{host}\"]\n");
    let workflow = probe_workflow(&name, &inline(&block), script);
    let sb = Sandbox::new(engine);
    std::fs::copy(netprobe(), sb.workspace().join("netprobe")).expect("copy netprobe");
    // A user's checkout: the sandbox runs as that user (issue 19 item 4)
    // and writes its hand-over markers there.
    sb.own_workspace(SANDBOX_USER, SANDBOX_USER);
    (sb, name, workflow)
}

/// `nsenter` into the container's network and mount namespaces as the
/// host's root (every capability), running the probe copied to /tmp.
fn probe_from_netns(engine: Engine, container: &str, args: &[&str]) -> String {
    let pid = docker(engine, &["inspect", "-f", "{{.State.Pid}}", container]);
    assert!(pid.parse::<u32>().is_ok_and(|p| p > 0), "pid {pid:?}");
    let out = Command::new("nsenter")
        .args(["-t", &pid, "-n", "-m", "/tmp/netprobe"])
        .args(args)
        .output()
        .expect("nsenter");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The owner of the attack's checkout, hence the sandbox's user.
const SANDBOX_USER: u32 = 4242;

fn ipv6_and_raw_frames(engine: Engine) {
    let host = host_ip();
    let services = HostServices::start();
    let upstream = Upstream::start("benign-ok");
    let (p6, u6, p) = (services.tcp_port, services.udp_port, upstream.port);
    let script = format!(
        r#"{PRELUDE}
cp ./netprobe /tmp/netprobe
IF=$(ls /sys/class/net | grep -v '^lo$' | head -1)
GW="${{HP%%:*}}"
rec ids "$(id -u):$(id -g)"
rec cap_bnd "$(awk '/^CapBnd/{{print $2}}' /proc/self/status)"
rec v6_off "$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>&1)"
rec v6_addrs "$(cat /proc/net/if_inet6 2>/dev/null | wc -l)"
rec raw "$(./netprobe syn6 "$IF" {p6})"
rec ping6 "$(./netprobe ping6 "$IF")"
LL=$(./netprobe gw-ll "$IF" "$GW")
rec tcp6 "$(./netprobe tcp6 "$LL" "$IF" {p6})"
rec udp6 "$(./netprobe udp6 "$LL" "$IF" {u6})"
rec mknod "$(mknod /tmp/blk b 8 0 2>&1; echo " rc=$?")"
rec allowed_http "$(curl -sS -m 10 http://{host}:{p}/plain 2>&1; echo " rc=$?")"
rec allowed_connect "$(curl -sS -m 10 -p http://{host}:{p}/tunnel 2>&1; echo " rc=$?")"
{HANDOVER}
emit
"#
    );
    let (sb, name, workflow) = confined_with_probe(engine, "ipv6", host, &script);
    let mut from_netns = String::new();
    let res = with_live_sandbox(&sb, &name, &workflow, None, |container| {
        // The host's root in the sandbox's network namespace: NET_RAW and
        // IPv6 are its to use, so only the host's bridge rules stand.
        from_netns = probe_from_netns(engine, container, &["syn6", "eth0", &p6.to_string()]);
    });
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "{engine:?}: {}",
        res.stderr
    );
    let out = node_output(&sb.events(&run_id));
    eprintln!("{engine:?} ipv6 probe results: {out:#} / from the netns: {from_netns}");

    let cap_bnd = u64::from_str_radix(field(&out, "cap_bnd"), 16).expect("CapBnd hex");
    // Run as the checkout's owner (never host root on a writable host
    // bind): no capability at all, not even in the bounding set; a root
    // sandbox's set is `users_e2e`'s to check.
    assert_eq!(field(&out, "ids"), format!("{SANDBOX_USER}:{SANDBOX_USER}"));
    assert_eq!(cap_bnd, 0, "{engine:?}: {cap_bnd:#x}");
    assert_eq!(field(&out, "v6_off"), "1", "{engine:?}");
    assert_eq!(field(&out, "v6_addrs"), "0", "{engine:?}");
    let raw = field(&out, "raw");
    assert!(
        raw.starts_with("error: socket(AF_PACKET)") && raw.contains("not permitted"),
        "{engine:?} raw: {raw}"
    );
    for key in ["ping6", "tcp6", "udp6"] {
        let v = field(&out, key);
        assert!(
            v.starts_with("error") || v == "none",
            "{engine:?} {key}: {v}"
        );
    }
    let mknod = field(&out, "mknod");
    assert!(!mknod.ends_with(" rc=0"), "{engine:?} mknod: {mknod}");
    assert!(
        from_netns.starts_with("none"),
        "{engine:?}: the bridge answered hand-built IPv6: {from_netns}"
    );
    assert_eq!(
        services.reached(),
        (Vec::new(), Vec::new()),
        "{engine:?}: a host service on [::] was reached"
    );
    // The benign case: the proxy still carries plain HTTP and CONNECT.
    for key in ["allowed_http", "allowed_connect"] {
        assert_eq!(field(&out, key), "benign-ok rc=0", "{engine:?} {key}");
    }
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_ipv6_and_raw_frames_reach_nothing() {
    ipv6_and_raw_frames(Engine::Docker);
}

#[test]
fn podman_ipv6_and_raw_frames_reach_nothing() {
    ipv6_and_raw_frames(Engine::Podman);
}

/// A bridge and a namespace of this test's own, with no rules: the raw
/// probe gets its SYN-ACK here, so its `none` against a sandbox is the
/// rules' doing, not a broken probe.
struct ControlLink {
    bridge: String,
    netns: String,
}

impl ControlLink {
    fn new() -> Self {
        let tag = std::process::id() % 100_000;
        let link = Self {
            bridge: format!("itcb{tag}"),
            netns: format!("itcn{tag}"),
        };
        let (br, ns) = (link.bridge.as_str(), link.netns.as_str());
        let peer = format!("{br}p");
        let host_end = format!("{br}h");
        for cmd in [
            vec!["ip", "link", "add", br, "type", "bridge"],
            vec!["ip", "link", "set", br, "up"],
            vec!["ip", "netns", "add", ns],
            vec![
                "ip", "link", "add", &host_end, "type", "veth", "peer", "name", &peer,
            ],
            vec!["ip", "link", "set", &peer, "netns", ns],
            vec!["ip", "link", "set", &host_end, "master", br, "up"],
            vec!["ip", "-n", ns, "link", "set", &peer, "name", "eth0"],
            vec!["ip", "-n", ns, "link", "set", "eth0", "up"],
        ] {
            let st = Command::new(cmd[0]).args(&cmd[1..]).status().expect("ip");
            assert!(st.success(), "{cmd:?}");
        }
        link
    }

    fn probe(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .arg(netprobe())
            .args(args)
            .output()
            .expect("ip netns exec");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for ControlLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

#[test]
fn the_raw_ipv6_probe_reaches_an_unprotected_bridge() {
    let services = HostServices::start();
    let link = ControlLink::new();
    // The bridge's link-local address needs a moment (DAD).
    let mut got = String::new();
    for _ in 0..10 {
        got = link.probe(&["syn6", "eth0", &services.tcp_port.to_string()]);
        if got.starts_with("synack") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(got.starts_with("synack from fe80:"), "{got}");
}

fn exhaustion_and_neighbours(engine: Engine) {
    let host = host_ip();
    let upstream = Upstream::start("after-flood-ok");
    let p = upstream.port;
    let script = format!(
        r#"{PRELUDE}
GW="${{HP%%:*}}"; PP="${{HP##*:}}"
rec flood "$(./netprobe flood "$GW" "$PP" 1100)"
rec after "$(curl -sS -m 10 -p http://{host}:{p}/after 2>&1; echo " rc=$?")"
{HANDOVER}
emit
"#
    );
    let (sb, name, workflow) = confined_with_probe(engine, "flood", host, &script);
    let mut neighbour = String::new();
    let mut from_host = None;
    let mut proxy_addr = None;
    // The reporter's limit: 1,024 descriptors for the whole process, which
    // 1,100 proxy connections exhausted (every exec then read as a lost
    // sandbox).
    let res = with_live_sandbox(&sb, &name, &workflow, Some(1024), |container| {
        let env = docker(
            engine,
            &[
                "inspect",
                "-f",
                "{{range .Config.Env}}{{println .}}{{end}}",
                container,
            ],
        );
        let hp = env
            .lines()
            .find_map(|l| l.strip_prefix("HTTPS_PROXY="))
            .and_then(|u| u.rsplit('@').next())
            .expect("proxy env")
            .to_owned();
        let addr: SocketAddr = hp.parse().expect("proxy host:port");
        proxy_addr = Some(addr);
        // Another sandbox with open networking, on the engine's default
        // network: it can route to the run's gateway, the rules stop it.
        neighbour = docker(
            engine,
            &[
                "run",
                "--rm",
                &crate::support::busybox(),
                "sh",
                "-c",
                &format!(
                    "printf 'CONNECT x:443 HTTP/1.1\\r\\n\\r\\n' | timeout 5 nc {} {}; echo rc=$?",
                    addr.ip(),
                    addr.port()
                ),
            ],
        );
        // The host itself (loopback is another interface) and the host's
        // primary address (the proxy does not listen there).
        from_host = Some((
            TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok(),
            TcpStream::connect_timeout(&SocketAddr::new(host, addr.port()), Duration::from_secs(3))
                .is_ok(),
        ));
    });
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status(), res.failure_code()),
        (Some(0), "finished", None),
        "{engine:?}: {}",
        res.stderr
    );
    let out = node_output(&sb.events(&run_id));
    eprintln!("{engine:?} flood results: {out:#}; neighbour: {neighbour}");
    let flood = field(&out, "flood");
    assert!(
        flood.contains(" next=HTTP/1.1 503 Service Unavailable"),
        "{engine:?}: {flood}"
    );
    assert_eq!(field(&out, "after"), "after-flood-ok rc=0", "{engine:?}");
    assert!(
        neighbour.contains("rc=")
            && !neighbour.contains("HTTP/1.1")
            && !neighbour.ends_with("rc=0"),
        "{engine:?}: another sandbox reached the proxy: {neighbour}"
    );
    assert_eq!(
        from_host,
        Some((false, false)),
        "{engine:?}: the proxy ({proxy_addr:?}) answered outside its bridge"
    );
    let log = sb.iterion(&["logs", &run_id]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("egress proxy: the run holds its maximum of 256 concurrent connections"),
        "{engine:?}: no limit line in the run log"
    );
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_proxy_survives_a_flood_and_ignores_neighbours() {
    exhaustion_and_neighbours(Engine::Docker);
}

#[test]
fn podman_proxy_survives_a_flood_and_ignores_neighbours() {
    exhaustion_and_neighbours(Engine::Podman);
}

/// The decimal form of an IPv4 address.
fn decimal(ip: Ipv4Addr) -> u32 {
    u32::from(ip)
}

fn numeric_and_host_header(engine: Engine) {
    let host = host_ip();
    let IpAddr::V4(host4) = host else {
        panic!("IPv4 host address expected: {host}")
    };
    let upstream = Upstream::start("numeric-ok");
    let p = upstream.port;
    let (dec_host, dec_other) = (decimal(host4), decimal(Ipv4Addr::new(192, 0, 2, 1)));
    let script = format!(
        r#"{PRELUDE}
GW="${{HP%%:*}}"; PP="${{HP##*:}}"
AUTH=$(printf '%s' "$CRED" | base64 -w0)
connect_get() {{
  exec 3<>"/dev/tcp/$GW/$PP"
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n' "$1" "$1" "$AUTH" >&3
  local status; IFS= read -r -t 10 status <&3; status="${{status%$'\r'}}"
  if [[ "$status" == *" 200 "* ]]; then
    while IFS= read -r -t 10 line <&3 && [ "${{line%$'\r'}}" != "" ]; do :; done
    printf 'GET /tunnelled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
    status="$status|$(timeout 10 cat <&3 | tail -c 20)"
  fi
  exec 3<&-
  printf '%s' "$status"
}}
rec decimal_listed "$(connect_get {dec_host}:{p})"
rec decimal_unlisted "$(connect_get {dec_other}:80)"
rec host_header "$(curl -sS -m 10 -H 'Host: evil.example.test' http://{host}:{p}/hh 2>&1; echo " rc=$?")"
emit
"#
    );
    // `*` allows any one-label NAME: it used to let `3221225985` through.
    let block = format!("    network:\n      mode: allowlist\n      rules: [\"*\", \"{host}\"]\n");
    let sb = Sandbox::new(engine);
    let ProbeRun {
        run_id,
        events,
        out,
    } = run_probe(&sb, "numeric_e2e", &inline(&block), &script);
    eprintln!("{engine:?} numeric results: {out:#}");
    // Listed by its IP rule: the decimal form is that IP, and reaches it.
    let listed = field(&out, "decimal_listed");
    assert!(
        listed.starts_with("HTTP/1.1 200") && listed.ends_with("numeric-ok"),
        "{engine:?}: {listed}"
    );
    // Not listed: `*` does not match an address, whatever its spelling.
    let unlisted = field(&out, "decimal_unlisted");
    assert!(
        unlisted.starts_with("HTTP/1.1 403"),
        "{engine:?}: {unlisted}"
    );
    let blocked = of_type(&events, "network_blocked");
    assert_eq!(blocked.len(), 1, "{engine:?}: {blocked:#?}");
    assert_eq!(blocked[0]["data"]["host"], "192.0.2.1");
    assert_eq!(blocked[0]["data"]["reason"], "blocked-by-allowlist");
    // Plain HTTP: the upstream saw the authority the policy judged.
    assert_eq!(field(&out, "host_header"), "numeric-ok rc=0", "{engine:?}");
    let heads = upstream.heads();
    let hh: Vec<&String> = heads.iter().filter(|h| h.starts_with("GET /hh ")).collect();
    assert_eq!(hh.len(), 1, "{engine:?}: {heads:?}");
    let lower = hh[0].to_ascii_lowercase();
    assert!(
        lower.contains(&format!("\r\nhost: {host}:{p}\r\n")) && !lower.contains("evil"),
        "{engine:?}: {}",
        hh[0]
    );
    assert_cleaned(engine, &run_id);
}

#[test]
fn docker_numeric_hosts_and_host_headers_are_judged() {
    numeric_and_host_header(Engine::Docker);
}

#[test]
fn podman_numeric_hosts_and_host_headers_are_judged() {
    numeric_and_host_header(Engine::Podman);
}

/// `iterion sandbox doctor` reports each protection of this issue: plain
/// (human and JSON) says what a confined sandbox gets here; `--strict` names
/// them for a run that needs them, fails an inline run that cannot get
/// them and warns an auto one, and skips a run with open networking.
fn doctor_reports_each_protection(engine: Engine) {
    let sb = Sandbox::new(engine);
    let out = sb.iterion(&["sandbox", "doctor", "--json"]);
    assert!(out.status.success(), "{engine:?}: doctor failed");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    let p = &doc["egress"]["protections"];
    assert_eq!(p["firewall"]["applied"], true, "{engine:?}: {doc:#}");
    assert!(
        p["firewall"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("nftables") && d.contains("IPv4 and ARP")),
        "{p:#}"
    );
    assert_eq!(p["ipv6"]["applied"], true, "{p:#}");
    assert!(
        p["proxy_bind"]
            .as_str()
            .is_some_and(|b| b.contains("gateway"))
    );
    assert_eq!(p["proxy_max_connections"], 256);
    let caps: Vec<&str> = doc["containment"]["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .map(|c| c.as_str().expect("name"))
        .collect();
    assert_eq!(caps, iterion_driver_docker::SANDBOX_CAPABILITIES);
    assert!(
        !caps.contains(&"NET_RAW") && !caps.contains(&"MKNOD"),
        "{caps:?}"
    );
    let human = sb.iterion(&["sandbox", "doctor"]);
    let human = String::from_utf8_lossy(&human.stdout);
    for line in [
        "  firewall:        applied (",
        "  ipv6:            applied (",
        "  proxy cap:       256 concurrent connections per run",
    ] {
        assert!(human.contains(line), "{engine:?}: no {line:?} in\n{human}");
    }

    let confined = "    network:\n      mode: allowlist\n      rules: [\"allowed.example.test\"]\n";
    let inline_file = sb.write(
        "confined.iter",
        &probe_workflow("doctor_inline", &inline(confined), "true"),
    );
    let auto_file = sb.write(
        "auto.iter",
        &probe_workflow(
            "doctor_auto",
            &format!("    mode: auto\n    host_state: none\n{confined}"),
            "true",
        ),
    );
    let open_file = sb.write(
        "open.iter",
        &probe_workflow("doctor_open", &inline(""), "true"),
    );
    let strict = |sb: &Sandbox, file: &Path| -> (Option<i32>, serde_json::Value) {
        let out = sb.iterion(&[
            "sandbox",
            "doctor",
            "--strict",
            file.to_str().expect("utf8"),
            "--sandbox-default-image",
            &crate::support::slim(),
            "--json",
        ]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let check = doc["checks"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["name"] == "egress confinement")
                    .cloned()
            })
            .unwrap_or_else(|| panic!("{engine:?}: no egress confinement check: {doc:#}"));
        (out.status.code(), check)
    };
    let (code, check) = strict(&sb, &inline_file);
    assert_eq!(
        (code, &check["status"]),
        (Some(0), &"pass".into()),
        "{check}"
    );
    let detail = check["detail"].as_str().unwrap_or_default();
    for part in [
        "nftables",
        "IPv6",
        "NET_BIND_SERVICE only",
        "256 connections",
    ] {
        assert!(
            detail.contains(part),
            "{engine:?}: {part:?} not in {detail}"
        );
    }
    assert_eq!(strict(&sb, &open_file).1["status"], "skip");
    // Auto on a host that can confine: the same protections, a pass.
    assert_eq!(strict(&sb, &auto_file).1["status"], "pass");

    // A host that cannot confine (forced here): a failed check for the
    // inline run that needs it, a warning for the auto run that degrades.
    let off = Sandbox::new(engine).with_env("ITERION_SANDBOX_EGRESS_ENFORCE", "off");
    let inline_off = off.write(
        "confined.iter",
        &probe_workflow("doctor_inline", &inline(confined), "true"),
    );
    let auto_off = off.write(
        "auto.iter",
        &probe_workflow(
            "doctor_auto",
            &format!("    mode: auto\n    host_state: none\n{confined}"),
            "true",
        ),
    );
    let (code, check) = strict(&off, &inline_off);
    assert_eq!(
        (code, &check["status"]),
        (Some(1), &"fail".into()),
        "{check}"
    );
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("ITERION_SANDBOX_EGRESS_ENFORCE=off")),
        "{check}"
    );
    assert_eq!(strict(&off, &auto_off).1["status"], "warn");
}

#[test]
fn docker_doctor_reports_each_protection() {
    doctor_reports_each_protection(Engine::Docker);
}

#[test]
fn podman_doctor_reports_each_protection() {
    doctor_reports_each_protection(Engine::Podman);
}
