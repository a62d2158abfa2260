//! Host firewall rule that completes egress confinement on dockerd.
//!
//! Why: Docker 20.10's `--internal` networks drop *forwarded* traffic, but
//! packets from the container to any address of the host itself (its
//! primary IP, docker0's IP, …) go through the host's INPUT chain, which
//! Docker leaves open — so a confined container could still reach every
//! host service listening on 0.0.0.0 (verified by
//! `tests/integration/engine.rs::dockerd_egress_is_confined`). One rule per
//! run closes it: on the run's bridge, drop every packet not addressed to
//! the network's gateway (where the egress proxy listens). Podman's
//! netavark already confines internal networks (same test, podman), so this
//! runs for dockerd only, and only on a local engine.

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

/// Drop everything arriving from `bridge` that is not addressed to `gateway`.
pub(crate) async fn confine(bridge: &str, gateway: &str, run_id: &str) -> Result<(), DriverError> {
    let comment = format!("iterion:{run_id}");
    let out = run(&[
        "-w",
        "5",
        "-I",
        "INPUT",
        "1",
        "-i",
        bridge,
        "!",
        "-d",
        gateway,
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "DROP",
    ])
    .await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(DriverError::Engine {
            operation: "confine network",
            source: String::from_utf8_lossy(&out.stderr)
                .trim()
                .to_owned()
                .into(),
        })
    }
}

/// Remove every INPUT rule bound to `bridge` (idempotent).
pub(crate) async fn release(bridge: &str) -> Result<(), DriverError> {
    let listing = run(&["-w", "5", "-S", "INPUT"]).await?;
    let text = String::from_utf8_lossy(&listing.stdout).into_owned();
    let needle = format!("-i {bridge} ");
    for line in text
        .lines()
        .filter(|l| l.starts_with("-A INPUT") && l.contains(&needle))
    {
        // `-S` prints the rule as it was added; replay it with -D. The
        // comment is quoted by iptables; split keeps it one argument.
        let args = split_rule(line.trim_start_matches("-A INPUT").trim());
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
