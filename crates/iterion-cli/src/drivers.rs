//! Driver construction for the CLI: the one place the `iterion` binary
//! builds its sandbox drivers, so `doctor`, `reap` and `run` see the same
//! set. Policy (which one a run gets) stays in `iterion_sandbox::host`.

use std::sync::Arc;

use iterion_core::{Driver, DriverName};
use iterion_sandbox::env::EnvSnapshot;
use iterion_sandbox::host::{DriverProbe, HostKind, driver_order};

/// Every real driver that constructs on this host, in no particular order.
///
/// TODO(lead): plug the docker/podman driver in here once
/// `iterion-driver-docker` lands on main (construct against
/// `DOCKER_HOST` / the podman socket and keep those that `ping`). Until
/// then this returns none, and `doctor --strict` reports every
/// driver-backed check as `unavailable`.
pub async fn available_drivers(env: &EnvSnapshot) -> Vec<Arc<dyn Driver>> {
    let _ = env;
    Vec::new()
}

/// Probe each driver of the host's order: available when constructed and
/// its engine answers a ping.
pub async fn probe_drivers(host: HostKind, drivers: &[Arc<dyn Driver>]) -> Vec<DriverProbe> {
    let mut probes = Vec::new();
    for name in driver_order(host)
        .iter()
        .copied()
        .filter(|d| *d != DriverName::Noop)
    {
        let unavailable = match drivers.iter().find(|d| d.name() == name) {
            None => Some("driver not built into this binary yet".to_owned()),
            Some(d) => d.ping().await.err().map(|e| e.to_string()),
        };
        probes.push(DriverProbe {
            driver: name,
            unavailable,
        });
    }
    probes
}

/// Container runtimes found on `PATH` (informational; drivers speak the API).
pub fn runtimes_on_path() -> Vec<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut found = Vec::new();
    for bin in ["docker", "podman", "kubectl"] {
        if std::env::split_paths(&path).any(|dir| dir.join(bin).is_file()) {
            found.push(bin.to_owned());
        }
    }
    found
}
