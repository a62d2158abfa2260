//! A snapshot of the environment variables the policy reads. Pure
//! functions take this struct; only [`EnvSnapshot::from_process`] reads the
//! real process environment.

use std::collections::BTreeMap;

/// The variables the sandbox policy reads (upstream names, SPEC §2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    /// `ITERION_SANDBOX_OVERRIDE` (tier 1, runner-side).
    pub sandbox_override: Option<String>,
    /// `ITERION_SANDBOX_DEFAULT` (tier 3).
    pub sandbox_default: Option<String>,
    /// `ITERION_SANDBOX_HOST_STATE`.
    pub host_state: Option<String>,
    /// `ITERION_SANDBOX_DEFAULT_IMAGE`.
    pub default_image: Option<String>,
    /// `ITERION_SANDBOX_READBACK_CAP`.
    pub readback_cap: Option<String>,
    /// `ITERION_SANDBOX_PREFLIGHT`.
    pub preflight: Option<String>,
    /// `ITERION_MODE`.
    pub iterion_mode: Option<String>,
    /// `ITERION_SANDBOX_HOST` (`local`/`cloud`): the sandbox host kind when
    /// it is not the deployment mode's (a cloud-mode runner on a VM with
    /// Docker or Podman sets `local`).
    pub sandbox_host: Option<String>,
    /// `KUBERNETES_SERVICE_HOST`.
    pub kubernetes_service_host: Option<String>,
    /// `ITERION_DESKTOP`.
    pub desktop: Option<String>,
    /// `ITERION_HOME`.
    pub iterion_home: Option<String>,
    /// `HOME`.
    pub home: Option<String>,
    /// `GOCACHE`.
    pub gocache: Option<String>,
    /// `GOMODCACHE`.
    pub gomodcache: Option<String>,
}

impl EnvSnapshot {
    /// Names read by [`EnvSnapshot::from_lookup`].
    pub const NAMES: [&'static str; 14] = [
        "ITERION_SANDBOX_OVERRIDE",
        "ITERION_SANDBOX_DEFAULT",
        "ITERION_SANDBOX_HOST_STATE",
        "ITERION_SANDBOX_DEFAULT_IMAGE",
        "ITERION_SANDBOX_READBACK_CAP",
        "ITERION_SANDBOX_PREFLIGHT",
        "ITERION_MODE",
        "ITERION_SANDBOX_HOST",
        "KUBERNETES_SERVICE_HOST",
        "ITERION_DESKTOP",
        "ITERION_HOME",
        "HOME",
        "GOCACHE",
        "GOMODCACHE",
    ];

    /// Build from any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            sandbox_override: get("ITERION_SANDBOX_OVERRIDE"),
            sandbox_default: get("ITERION_SANDBOX_DEFAULT"),
            host_state: get("ITERION_SANDBOX_HOST_STATE"),
            default_image: get("ITERION_SANDBOX_DEFAULT_IMAGE"),
            readback_cap: get("ITERION_SANDBOX_READBACK_CAP"),
            preflight: get("ITERION_SANDBOX_PREFLIGHT"),
            iterion_mode: get("ITERION_MODE"),
            sandbox_host: get("ITERION_SANDBOX_HOST"),
            kubernetes_service_host: get("KUBERNETES_SERVICE_HOST"),
            desktop: get("ITERION_DESKTOP"),
            iterion_home: get("ITERION_HOME"),
            home: get("HOME"),
            gocache: get("GOCACHE"),
            gomodcache: get("GOMODCACHE"),
        }
    }

    /// Build from a map of pairs.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self::from_lookup(|k| map.get(k).cloned())
    }

    /// Snapshot the real process environment (the one impure entry point).
    pub fn from_process() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// `ITERION_SANDBOX_PREFLIGHT` ∈ {1, true, yes, on} (case-insensitive)
/// enables the strict pre-flight of `iterion run` (facts §11.3).
pub fn preflight_enabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_words() {
        for on in ["1", "true", "YES", " on "] {
            assert!(preflight_enabled(Some(on)), "{on}");
        }
        for off in ["", "0", "false", "no", "off", "enabled"] {
            assert!(!preflight_enabled(Some(off)), "{off}");
        }
        assert!(!preflight_enabled(None));
    }
}
