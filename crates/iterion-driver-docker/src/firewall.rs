//! Host firewall rules that complete egress confinement on dockerd and Podman.
//!
//! Why: an `--internal` network drops *forwarded* traffic, but packets from
//! the container to any address of the host itself go through the host's
//! INPUT chain, which neither engine closes: on dockerd every host address
//! (its primary IP, docker0's IP, …) answers; on both engines the network's
//! gateway answers on EVERY port — any host service listening on 0.0.0.0,
//! and on Podman aardvark-dns, which resolves external names for the
//! container (a DNS exfiltration channel). Found by
//! `iterion-cli/tests/integration/egress_e2e.rs`. Two rules per run close
//! it: on the run's bridge, accept TCP to the gateway's proxy port, drop
//! everything else. Local engines only (the rules are on this host).

use std::path::Path;

use iterion_core::DriverError;
use tokio::process::Command;

const IPTABLES_CANDIDATES: [&str; 2] = ["/usr/sbin/iptables", "/sbin/iptables"];

/// The iptables binary, when present.
pub(crate) fn iptables() -> Option<&'static str> {
    IPTABLES_CANDIDATES
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Docker names an unnamed bridge network's interface `br-<id[..12]>`.
pub(crate) fn docker_bridge(network_id: &str) -> String {
    let short: String = network_id.chars().take(12).collect();
    format!("br-{short}")
}

async fn run(args: &[&str]) -> Result<std::process::Output, DriverError> {
    let bin = iptables().ok_or_else(|| DriverError::Unsupported {
        driver: iterion_core::DriverName::Docker,
        feature: "egress enforcement (iptables missing)",
    })?;
    Command::new(bin)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .await
        .map_err(|source| DriverError::Io {
            operation: format!("run {bin}"),
            source,
        })
}

/// On `bridge`, accept only TCP to `gateway:proxy_port`; drop the rest.
/// The DROP goes in first and the ACCEPT above it, so there is never a
/// moment where the bridge is open.
pub(crate) async fn confine(
    bridge: &str,
    gateway: &str,
    proxy_port: u16,
    run_id: &str,
) -> Result<(), DriverError> {
    let comment = format!("iterion:{run_id}");
    let port = proxy_port.to_string();
    let drop_rest = [
        "-w",
        "5",
        "-I",
        "INPUT",
        "1",
        "-i",
        bridge,
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "DROP",
    ];
    let accept_proxy = [
        "-w",
        "5",
        "-I",
        "INPUT",
        "1",
        "-i",
        bridge,
        "-d",
        gateway,
        "-p",
        "tcp",
        "--dport",
        &port,
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "ACCEPT",
    ];
    for args in [&drop_rest[..], &accept_proxy[..]] {
        let out = run(args).await?;
        if !out.status.success() {
            return Err(DriverError::Engine {
                operation: "confine network",
                source: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .to_owned()
                    .into(),
            });
        }
    }
    Ok(())
}

/// Remove every INPUT rule bound to `bridge` or commented with `run_id`
/// (idempotent). The comment form serves the reaper on Podman, whose
/// interface name is gone with the network.
pub(crate) async fn release(bridge: Option<&str>, run_id: Option<&str>) -> Result<(), DriverError> {
    let listing = run(&["-w", "5", "-S", "INPUT"]).await?;
    let text = String::from_utf8_lossy(&listing.stdout).into_owned();
    let comment = run_id.map(|r| format!("iterion:{r}"));
    for line in text.lines().filter(|l| l.starts_with("-A INPUT")) {
        // `-S` prints the rule as it was added; replay it with -D. The
        // comment is quoted by iptables; split keeps it one argument.
        let args = split_rule(line.trim_start_matches("-A INPUT").trim());
        let on_bridge = bridge.is_some_and(|b| args.windows(2).any(|w| w[0] == "-i" && w[1] == b));
        let commented = comment
            .as_deref()
            .is_some_and(|c| args.windows(2).any(|w| w[0] == "--comment" && w[1] == c));
        if !on_bridge && !commented {
            continue;
        }
        let mut full = vec![
            "-w".to_owned(),
            "5".to_owned(),
            "-D".to_owned(),
            "INPUT".to_owned(),
        ];
        full.extend(args);
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let out = run(&refs).await?;
        if !out.status.success() {
            return Err(DriverError::Engine {
                operation: "release network",
                source: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .to_owned()
                    .into(),
            });
        }
    }
    Ok(())
}

/// Split an `iptables -S` line into arguments, honouring double quotes.
fn split_rule(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            _ => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_quoted_comment() {
        assert_eq!(
            split_rule(r#"-i br-1 ! -d 10.0.0.1/32 -m comment --comment "iterion:r1" -j DROP"#),
            vec![
                "-i",
                "br-1",
                "!",
                "-d",
                "10.0.0.1/32",
                "-m",
                "comment",
                "--comment",
                "iterion:r1",
                "-j",
                "DROP"
            ]
        );
        assert_eq!(docker_bridge("0123456789abcdef"), "br-0123456789ab");
    }
}
