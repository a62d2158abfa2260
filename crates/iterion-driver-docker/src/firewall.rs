//! Host firewall rules that complete egress confinement on dockerd and
//! Podman, in nftables: one `inet` and one `netdev` table per run, named
//! `iterion-<run id>`, each written in one atomic transaction and removed
//! with one `delete table`.
//!
//! Why rules at all: an `--internal` network drops *forwarded* traffic, but
//! packets from the container to any address of the host itself go through
//! the host's input path, which neither engine closes: every host address
//! answers, and on both engines the gateway answers on every port (host
//! services on 0.0.0.0, Podman's aardvark-dns). Found by
//! `iterion-cli/tests/integration/egress_e2e.rs`.
//!
//! Why these rules (issue 19, item 2 and 9):
//! * `inet` input: from the run's bridge only TCP to the gateway's proxy
//!   port is accepted and everything else dropped — IPv4 *and* IPv6, so the
//!   bridge's `fe80::` address no longer answers a container that builds
//!   IPv6 by hand; and the proxy port accepts nothing from any other
//!   interface (the host answers on any local address from any interface,
//!   so another run's open-network sandbox could otherwise flood it).
//! * `inet` forward: nothing is routed into or out of the run's bridge,
//!   whatever the engine's own rules say.
//! * `netdev` ingress on the bridge: only IPv4 and ARP frames reach the
//!   host from the bridge at all (no IPv6, no raw ethertypes); with the
//!   bridge's own IPv6 turned off, it has no link-local address either.
//!   Why `netdev` and not the `bridge` family: matching "frames of this
//!   bridge" there needs `meta ibrname` (`CONFIG_NFT_BRIDGE_META`), which
//!   stock kernels (this project's test host included) do not build, and
//!   ebtables' `--logical-in` is the same expression. An ingress hook on the
//!   bridge device sees every frame the bridge passes up to the host, and
//!   one container per run network means no frame is bridged to a peer.
//!
//! Why nftables rather than iptables: one transaction installs a run's
//! whole rule set (never a moment where the bridge is half closed), one
//! `delete table` removes it (the reaper needs only the run id), and ip6
//! and ethertype filtering need no second and third tool. Local engines only
//! (the rules are on this host); `scripts/setup.sh` installs `nft`.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

use iterion_core::DriverError;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const NFT_CANDIDATES: [&str; 2] = ["/usr/sbin/nft", "/sbin/nft"];

/// The nft binary, when present.
pub(crate) fn nft() -> Option<&'static str> {
    NFT_CANDIDATES.into_iter().find(|p| Path::new(p).exists())
}

/// Docker names an unnamed bridge network's interface `br-<id[..12]>`.
pub(crate) fn docker_bridge(network_id: &str) -> String {
    let short: String = network_id.chars().take(12).collect();
    format!("br-{short}")
}

/// The per-run table name; `None` for a run id nft could misread (run ids
/// are `[a-z0-9_-]`, so this only refuses a forged label).
pub(crate) fn table_name(run_id: &str) -> Option<String> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 200
        && run_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    ok.then(|| format!("iterion-{run_id}"))
}

/// A Linux interface name safe to quote into a rule and a `/proc/sys` path.
fn interface_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn refused(what: String) -> DriverError {
    DriverError::Engine {
        operation: "confine network",
        source: what.into(),
    }
}

/// Run `nft -f -` with `script` as one transaction.
async fn apply(script: &str, operation: &'static str) -> Result<(), DriverError> {
    let bin = nft().ok_or_else(|| DriverError::Unsupported {
        driver: iterion_core::DriverName::Docker,
        feature: "egress enforcement (nft missing)",
    })?;
    let mut child = Command::new(bin)
        .args(["-f", "-"])
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| DriverError::Io {
            operation: format!("run {bin}"),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|source| DriverError::Io {
                operation: format!("write to {bin}"),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|source| DriverError::Io {
            operation: format!("run {bin}"),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(DriverError::Engine {
        operation,
        source: String::from_utf8_lossy(&out.stderr)
            .trim()
            .to_owned()
            .into(),
    })
}

/// One table, replacing any of its name in the same transaction (`add` then
/// `delete` makes the replace idempotent on nft 1.0.6, which has no
/// `destroy`): `chains` are `(name, hook line, rules)`.
fn table_script(family: &str, table: &str, chains: &[(&str, String, Vec<String>)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "add table {family} {table}");
    let _ = writeln!(s, "delete table {family} {table}");
    let _ = writeln!(s, "table {family} {table} {{");
    for (name, hook, rules) in chains {
        let _ = writeln!(s, "  chain {name} {{");
        let _ = writeln!(s, "    {hook}");
        for rule in rules {
            let _ = writeln!(s, "    {rule}");
        }
        let _ = writeln!(s, "  }}");
    }
    let _ = writeln!(s, "}}");
    s
}

/// The `inet` table of a run: see the module docs. `ports` are the TCP
/// ports of the gateway the sandbox may reach: the proxy's, then the
/// run's own listeners (seed step 18), nothing else.
pub(crate) fn inet_rules(table: &str, bridge: &str, gateway: Ipv4Addr, ports: &[u16]) -> String {
    let hook = |h: &str| format!("type filter hook {h} priority filter - 10; policy accept;");
    let mut input = Vec::new();
    for port in ports {
        input.push(format!(
            "iifname \"{bridge}\" ip daddr {gateway} tcp dport {port} accept"
        ));
    }
    input.push(format!("iifname \"{bridge}\" drop"));
    for port in ports {
        input.push(format!("ip daddr {gateway} tcp dport {port} drop"));
    }
    table_script(
        "inet",
        table,
        &[
            ("input", hook("input"), input),
            (
                "forward",
                hook("forward"),
                vec![
                    format!("iifname \"{bridge}\" drop"),
                    format!("oifname \"{bridge}\" drop"),
                ],
            ),
        ],
    )
}

/// The `netdev` table of a run: see the module docs.
pub(crate) fn netdev_rules(table: &str, bridge: &str) -> String {
    table_script(
        "netdev",
        table,
        &[(
            "ingress",
            format!("type filter hook ingress device \"{bridge}\" priority -500; policy accept;"),
            vec!["ether type != { ip, arp } drop".to_owned()],
        )],
    )
}

/// Before the container exists: on `bridge`, accept only TCP to
/// `gateway:proxy_port`, and let nothing else reach the proxy port. Matches
/// by interface name, so it holds for a bridge Podman creates only when the
/// container starts.
pub(crate) async fn confine(
    bridge: &str,
    gateway: Ipv4Addr,
    proxy_port: u16,
    listener_ports: &[u16],
    run_id: &str,
) -> Result<(), DriverError> {
    let table = table_name(run_id).ok_or_else(|| refused(format!("run id {run_id:?}")))?;
    if !interface_ok(bridge) {
        return Err(refused(format!("interface name {bridge:?}")));
    }
    apply(
        &inet_rules(
            &table,
            bridge,
            gateway,
            &[&[proxy_port], listener_ports].concat(),
        ),
        "confine network",
    )
    .await
}

/// Once the bridge exists (after the container started, before anything
/// runs in it): only IPv4 and ARP frames pass from the bridge to the host,
/// and the bridge's own IPv6 is off (no link-local address).
pub(crate) async fn seal_bridge(bridge: &str, run_id: &str) -> Result<(), DriverError> {
    let table = table_name(run_id).ok_or_else(|| refused(format!("run id {run_id:?}")))?;
    if !interface_ok(bridge) {
        return Err(refused(format!("interface name {bridge:?}")));
    }
    apply(&netdev_rules(&table, bridge), "seal bridge").await?;
    // The filter above already drops IPv6 frames; this also removes the
    // address itself. A host without IPv6 has no such file: nothing to do.
    let knob = format!("/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6");
    match tokio::fs::write(&knob, b"1").await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(DriverError::Io {
            operation: format!("write {knob}"),
            source,
        }),
    }
}

/// Remove both tables of `run_id` (idempotent: absent tables are fine).
pub(crate) async fn release(run_id: &str) -> Result<(), DriverError> {
    let Some(table) = table_name(run_id) else {
        return Ok(());
    };
    let script = format!(
        "add table inet {table}\ndelete table inet {table}\nadd table netdev {table}\ndelete table netdev {table}\n"
    );
    apply(&script, "release network").await
}

/// What a run's rules do, for `doctor`.
pub const RULES_SUMMARY: &str = "per-run nftables tables: from the run's bridge only TCP to the proxy port on its gateway reaches the host, IPv6 included nothing else; only IPv4 and ARP frames leave the bridge; nothing is routed in or out; the proxy port answers no other interface";

/// What this host offers the egress confinement of a docker/podman
/// sandbox: asked once per process, reported by `doctor`, and behind the
/// driver's `egress_enforcement` capability (a host that cannot apply the
/// rules cannot confine, and says so instead of failing at the first run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressHostSupport {
    /// `Ok` when `nft` is here and the kernel accepts a run's two tables;
    /// otherwise why not.
    pub rules: Result<(), String>,
    /// Whether the kernel has IPv6 at all (without it there is nothing to
    /// turn off, in the container or on the bridge).
    pub ipv6: bool,
}

/// The host's answer, computed once per process.
pub async fn egress_host_support() -> EgressHostSupport {
    static SUPPORT: tokio::sync::OnceCell<EgressHostSupport> = tokio::sync::OnceCell::const_new();
    SUPPORT
        .get_or_init(|| async {
            EgressHostSupport {
                rules: host_supports_rules().await,
                ipv6: ipv6_in_kernel(),
            }
        })
        .await
        .clone()
}

/// `/proc/sys/net/ipv6` exists exactly when the kernel runs IPv6.
pub(crate) fn ipv6_in_kernel() -> bool {
    Path::new("/proc/sys/net/ipv6").is_dir()
}

/// Whether this host can apply a run's rules: `nft` present and the kernel
/// accepting both tables (checked with `nft -c`, which sends the
/// transaction to the kernel and aborts it).
async fn host_supports_rules() -> Result<(), String> {
    let Some(bin) = nft() else {
        return Err("nft not found (install nftables)".to_owned());
    };
    let table = "iterion-doctor-check";
    let mut script = inet_rules(table, "iterion-chk0", Ipv4Addr::new(192, 0, 2, 1), &[9]);
    script.push_str(&netdev_rules(table, "lo"));
    let child = Command::new(bin)
        .args(["-c", "-f", "-"])
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = child.map_err(|e| format!("{bin}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| format!("{bin}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("{bin}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_rules() {
        assert_eq!(docker_bridge("0123456789abcdef"), "br-0123456789ab");
        assert_eq!(
            table_name("r20260101120000-ab_c").as_deref(),
            Some("iterion-r20260101120000-ab_c")
        );
        for bad in ["", "R1", "a b", "x;y", "a\"b", "../x"] {
            assert_eq!(table_name(bad), None, "{bad:?}");
        }
        assert!(interface_ok("br-0123456789ab") && interface_ok("podman3"));
        for bad in ["", ".", "..", "a/b", "a\"b", "sixteen-chars-xx"] {
            assert!(!interface_ok(bad), "{bad:?}");
        }
        let inet = inet_rules("iterion-r1", "br-1", Ipv4Addr::new(10, 0, 0, 1), &[3128]);
        assert!(inet.contains(
            "iifname \"br-1\" ip daddr 10.0.0.1 tcp dport 3128 accept\n    iifname \"br-1\" drop\n"
        ));
        assert!(inet.contains("    ip daddr 10.0.0.1 tcp dport 3128 drop\n"));
        // A run's listener is admitted like the proxy, and only it.
        let inet = inet_rules(
            "iterion-r1",
            "br-1",
            Ipv4Addr::new(10, 0, 0, 1),
            &[3128, 40001],
        );
        assert!(inet.contains(
            "tcp dport 3128 accept\n    iifname \"br-1\" ip daddr 10.0.0.1 tcp dport 40001 accept\n    iifname \"br-1\" drop\n"
        ));
        assert!(inet.contains("    ip daddr 10.0.0.1 tcp dport 40001 drop\n"));
        assert!(inet.contains("oifname \"br-1\" drop"));
        let netdev = netdev_rules("iterion-r1", "br-1");
        assert!(netdev.contains("device \"br-1\""));
        assert!(netdev.contains("ether type != { ip, arp } drop"));
    }
}
