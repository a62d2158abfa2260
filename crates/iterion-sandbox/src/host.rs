//! Host kind detection and the driver preference order (facts §5.2).
//!
//! The factory here only *reports* what the host can do: for an active
//! mode, falling through to noop is a [`DriverUnavailable`] value, never a
//! decision (the degrade-vs-refuse call lives in [`crate::verdict`]).

use std::fmt;

use iterion_core::{DriverName, Mode};

use crate::env::EnvSnapshot;

/// Where iterion runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// A developer machine or CI host.
    Local,
    /// The desktop app.
    Desktop,
    /// A cluster (runner pod).
    Cloud,
}

impl HostKind {
    /// Lower-case name (events, doctor).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Desktop => "desktop",
            Self::Cloud => "cloud",
        }
    }
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ITERION_SANDBOX_HOST`'s words (`local`, `cloud`); empty or unset is no
/// override.
pub fn sandbox_host_override(env: &EnvSnapshot) -> Result<Option<HostKind>, String> {
    match env.sandbox_host.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("local") => Ok(Some(HostKind::Local)),
        Some(v) if v.eq_ignore_ascii_case("cloud") => Ok(Some(HostKind::Cloud)),
        Some(v) => Err(format!(
            "ITERION_SANDBOX_HOST: {v:?} is not a sandbox host kind (local, cloud)"
        )),
    }
}

/// `ITERION_SANDBOX_HOST` (local/cloud) wins: cloud mode (`ITERION_MODE`,
/// the queue and store) does not always run its sandboxes on Kubernetes —
/// a runner on a VM with a container engine says `local`. An unreadable
/// value is refused up front by the verbs (`sandbox_host_override`); here
/// it is no override. Then `ITERION_MODE` (cloud/local); else
/// `KUBERNETES_SERVICE_HOST` ⇒ cloud; else `ITERION_DESKTOP` or an
/// argv\[0\] naming `iterion-desktop` ⇒ desktop; else local.
pub fn detect_host(env: &EnvSnapshot, argv0: Option<&str>) -> HostKind {
    if let Ok(Some(kind)) = sandbox_host_override(env) {
        return kind;
    }
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

/// One constructor attempt: the driver and why it could not run, if it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverProbe {
    /// Which driver.
    pub driver: DriverName,
    /// `None` when it constructed; else the reason.
    pub unavailable: Option<String>,
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

/// Pick the first driver of the host's order that constructed. An inactive
/// mode gets noop; an active mode never falls through to noop.
pub fn select_driver(
    host: HostKind,
    mode: Mode,
    probes: &[DriverProbe],
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
        match probes.iter().find(|p| p.driver == driver) {
            Some(DriverProbe {
                unavailable: None, ..
            }) => return Ok(driver),
            Some(DriverProbe {
                unavailable: Some(r),
                ..
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
        assert_eq!(detect_host(&env(&[]), None), HostKind::Local);
        assert_eq!(
            detect_host(&env(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]), None),
            HostKind::Cloud
        );
        assert_eq!(
            detect_host(
                &env(&[
                    ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                    ("ITERION_MODE", "LOCAL")
                ]),
                None
            ),
            HostKind::Local
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_MODE", "cloud")]), None),
            HostKind::Cloud
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_DESKTOP", "1")]), None),
            HostKind::Desktop
        );
        assert_eq!(
            detect_host(&env(&[]), Some("/opt/iterion-desktop")),
            HostKind::Desktop
        );
        assert_eq!(
            detect_host(&env(&[("KUBERNETES_SERVICE_HOST", "")]), None),
            HostKind::Local
        );
        // A cloud-mode runner on a VM with a container engine.
        assert_eq!(
            detect_host(
                &env(&[("ITERION_MODE", "cloud"), ("ITERION_SANDBOX_HOST", "local")]),
                None
            ),
            HostKind::Local
        );
        assert_eq!(
            detect_host(&env(&[("ITERION_SANDBOX_HOST", " Cloud ")]), None),
            HostKind::Cloud
        );
        // Unreadable: refused by the verbs, no override here (cloud stays
        // cloud: never a Docker engine by accident).
        let bad = env(&[
            ("ITERION_MODE", "cloud"),
            ("ITERION_SANDBOX_HOST", "docker"),
        ]);
        assert!(sandbox_host_override(&bad).is_err());
        assert_eq!(detect_host(&bad, None), HostKind::Cloud);
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
        let probes = [
            DriverProbe {
                driver: DriverName::Docker,
                unavailable: Some("no socket".into()),
            },
            DriverProbe {
                driver: DriverName::Podman,
                unavailable: None,
            },
            DriverProbe {
                driver: DriverName::Noop,
                unavailable: None,
            },
        ];
        assert_eq!(
            select_driver(HostKind::Local, Mode::Auto, &probes),
            Ok(DriverName::Podman)
        );
        let only_noop = [DriverProbe {
            driver: DriverName::Noop,
            unavailable: None,
        }];
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
