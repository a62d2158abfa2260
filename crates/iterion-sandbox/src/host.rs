//! Host kind detection, the driver preference order (facts §5.2), and
//! what a host offers: one [`DriverOffer`] per driver this binary knows,
//! from the one probe the entry point makes (the CLI's `drivers::probe`),
//! read alike by a run and by `doctor`.
//!
//! The factory here only *reports* what the host can do: for an active
//! mode, falling through to noop is a [`DriverUnavailable`] value, never a
//! decision (the degrade-vs-refuse call lives in [`crate::verdict`]).

use iterion_core::driver::{EngineInfo, HostFootprint};
use iterion_core::{Capabilities, DriverName, Mode};

use crate::env::{EnvSnapshot, sandbox_host_override};
// The host kind is an operator's word too (`ITERION_SANDBOX_HOST`): its
// type lives with the one parse of those words, and is reached here.
pub use crate::env::HostKind;

/// `ITERION_SANDBOX_HOST` (local/cloud) wins: cloud mode (`ITERION_MODE`,
/// the queue and store) does not always run its sandboxes on Kubernetes —
/// a runner on a VM with a container engine says `local`. An unreadable
/// value is refused up front by the verbs (`sandbox_host_override`); here
/// it is no override. Then `ITERION_MODE` (cloud/local); else
/// `KUBERNETES_SERVICE_HOST` ⇒ cloud; else `ITERION_DESKTOP` or an
/// argv\[0\] naming `iterion-desktop` ⇒ desktop; else local.
pub fn detect_host(env: &EnvSnapshot) -> HostKind {
    if let Ok(Some(kind)) = sandbox_host_override(env) {
        return kind;
    }
    let argv0 = env.argv0.as_deref();
    match env
        .iterion_mode
        .as_deref()
        .map(|m| m.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("cloud") => return HostKind::Cloud,
        Some("local") => return HostKind::Local,
        _ => {}
    }
    if env
        .kubernetes_service_host
        .as_deref()
        .is_some_and(|v| !v.is_empty())
    {
        return HostKind::Cloud;
    }
    if env.desktop.as_deref().is_some_and(|v| !v.is_empty())
        || argv0.is_some_and(|a| a.contains("iterion-desktop"))
    {
        return HostKind::Desktop;
    }
    HostKind::Local
}

/// The host's preference order, noop last.
pub fn driver_order(host: HostKind) -> &'static [DriverName] {
    match host {
        HostKind::Local | HostKind::Desktop => {
            &[DriverName::Docker, DriverName::Podman, DriverName::Noop]
        }
        HostKind::Cloud => &[DriverName::Kubernetes, DriverName::Noop],
    }
}

/// What one driver offers on this host, as the one probe found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverOffer {
    /// Which driver.
    pub driver: DriverName,
    /// Ready (what its engine said of itself), or why it cannot run here.
    pub readiness: Result<EngineInfo, String>,
    /// What it can do (default when not ready).
    pub capabilities: Capabilities,
    /// The host paths its engine owns and how it maps users.
    pub footprint: HostFootprint,
}

impl DriverOffer {
    /// A driver that cannot run here, and why.
    pub fn unavailable(driver: DriverName, reason: impl Into<String>) -> Self {
        Self {
            driver,
            readiness: Err(reason.into()),
            capabilities: Capabilities::default(),
            footprint: HostFootprint::default(),
        }
    }

    /// Whether it can run a sandbox.
    pub fn is_ready(&self) -> bool {
        self.readiness.is_ok()
    }
}

/// No real driver for an active mode: a capability report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sandbox driver available on this {host} host ({})", .tried.iter().map(|(d, r)| format!("{d}: {r}")).collect::<Vec<_>>().join("; "))]
pub struct DriverUnavailable {
    /// The host kind.
    pub host: HostKind,
    /// What was tried, in order, and why each failed.
    pub tried: Vec<(DriverName, String)>,
}

impl DriverUnavailable {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_DRIVER_UNAVAILABLE"
    }
}

/// Pick the first driver of the host's order that is ready. An inactive
/// mode gets noop; an active mode never falls through to noop.
pub fn select_driver(
    host: HostKind,
    mode: Mode,
    offers: &[DriverOffer],
) -> Result<DriverName, DriverUnavailable> {
    if !mode.is_active() {
        return Ok(DriverName::Noop);
    }
    let mut tried = Vec::new();
    for driver in driver_order(host)
        .iter()
        .copied()
        .filter(|d| *d != DriverName::Noop)
    {
        match offers.iter().find(|o| o.driver == driver) {
            Some(DriverOffer {
                readiness: Ok(_), ..
            }) => return Ok(driver),
            Some(DriverOffer {
                readiness: Err(r), ..
            }) => tried.push((driver, r.clone())),
            None => tried.push((driver, "not built into this binary".to_owned())),
        }
    }
    Err(DriverUnavailable { host, tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn host_detection_order() {
        assert_eq!(detect_host(&env(&[])), HostKind::Local);
        assert_eq!(
            detect_host(&env(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")])),
            HostKind::Cloud
        );
        assert_eq!(
            detect_host(&env(&[
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("ITERION_MODE", "LOCAL")
            ])),
            HostKind::Local
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_MODE", "cloud")])),
            HostKind::Cloud
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_DESKTOP", "1")])),
            HostKind::Desktop
        );
        assert_eq!(
            detect_host(&env(&[]).with_argv0("/opt/iterion-desktop")),
            HostKind::Desktop
        );
        assert_eq!(
            detect_host(&env(&[("KUBERNETES_SERVICE_HOST", "")])),
            HostKind::Local
        );
        // A cloud-mode runner on a VM with a container engine.
        assert_eq!(
            detect_host(&env(&[
                ("ITERION_MODE", "cloud"),
                ("ITERION_SANDBOX_HOST", "local")
            ])),
            HostKind::Local
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_SANDBOX_HOST", " Cloud ")])),
            HostKind::Cloud
        );
        // Unreadable: refused by the verbs, no override here (cloud stays
        // cloud: never a Docker engine by accident).
        let bad = env(&[
            ("ITERION_MODE", "cloud"),
            ("ITERION_SANDBOX_HOST", "docker"),
        ]);
        assert!(sandbox_host_override(&bad).is_err());
        assert_eq!(detect_host(&bad), HostKind::Cloud);
    }

    #[test]
    fn orders() {
        assert_eq!(
            driver_order(HostKind::Local),
            [DriverName::Docker, DriverName::Podman, DriverName::Noop]
        );
        assert_eq!(
            driver_order(HostKind::Desktop),
            driver_order(HostKind::Local)
        );
        assert_eq!(
            driver_order(HostKind::Cloud),
            [DriverName::Kubernetes, DriverName::Noop]
        );
    }

    #[test]
    fn active_mode_never_falls_to_noop() {
        let ready = |driver| DriverOffer {
            readiness: Ok(EngineInfo {
                driver,
                endpoint: "unix:///x".into(),
                version: "1".into(),
                api_version: "1.41".into(),
                local: true,
            }),
            ..DriverOffer::unavailable(driver, "")
        };
        let probes = [
            DriverOffer::unavailable(DriverName::Docker, "no socket"),
            ready(DriverName::Podman),
            ready(DriverName::Noop),
        ];
        assert_eq!(
            select_driver(HostKind::Local, Mode::Auto, &probes),
            Ok(DriverName::Podman)
        );
        let only_noop = [ready(DriverName::Noop)];
        let err =
            select_driver(HostKind::Local, Mode::Inline, &only_noop).expect_err("unavailable");
        assert_eq!(err.tried.len(), 2);
        assert_eq!(err.code(), "SANDBOX_DRIVER_UNAVAILABLE");
        assert!(
            select_driver(HostKind::Cloud, Mode::Auto, &probes).is_err(),
            "docker is not a cloud driver"
        );
        assert_eq!(
            select_driver(HostKind::Local, Mode::None, &[]),
            Ok(DriverName::Noop)
        );
        assert_eq!(
            select_driver(HostKind::Local, Mode::Inherit, &[]),
            Ok(DriverName::Noop)
        );
    }
}
