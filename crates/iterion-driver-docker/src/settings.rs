//! Driver settings read from an environment snapshot: where the engine is,
//! how long a pull may take, default memory/CPU limits and whether host
//! binds are allowed. Parsing only; no IO.

use std::collections::BTreeMap;
use std::time::Duration;

use iterion_core::{ByteSize, parse_size};

/// Variable bounding an image pull (facts §4: Go duration, default `10m`;
/// empty, invalid or ≤ 0 ⇒ default).
pub const PULL_TIMEOUT_ENV: &str = "ITERION_SANDBOX_PULL_TIMEOUT";
/// Default memory limit of a sandbox (`N`, `NMiB`, `NGiB`…).
pub const MEMORY_ENV: &str = "ITERION_SANDBOX_MEMORY";
/// Default CPU limit of a sandbox (decimal CPUs, e.g. `1.5`).
pub const CPUS_ENV: &str = "ITERION_SANDBOX_CPUS";
/// `none` forces bindless mode on a local engine (tests, rootless setups).
pub const BINDS_ENV: &str = "ITERION_SANDBOX_DOCKER_BINDS";
/// `off` makes the driver report that it cannot confine a sandbox to the
/// egress proxy (`capabilities.egress_enforcement = false`), as on a host
/// without nftables or a remote engine. For tests and operators who want
/// the degraded path visible: inline runs with a non-open `network:` block
/// are then refused (`SANDBOX_SPEC_REFUSED`) and auto runs get an advisory
/// proxy plus a `sandbox_egress_unenforced` event — never a silent open.
pub const EGRESS_ENFORCE_ENV: &str = "ITERION_SANDBOX_EGRESS_ENFORCE";
/// Default pull bound.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound of one discovery probe. Podman 4.3 answers `/version` in 2–3.5 s
/// on a loaded 2-core host (measured while the test suite ran): 3 s made
/// discovery report "no engine answered" for a healthy engine.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether host paths may be bound into the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindsMode {
    /// Binds when the engine is local (unix socket), bindless otherwise.
    #[default]
    Auto,
    /// Never bind host paths (ADR-143 bindless mode).
    None,
}

/// Settings of the docker/podman driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSettings {
    /// Bound of an image pull.
    pub pull_timeout: Duration,
    /// Memory limit applied when the plan sets none.
    pub memory: Option<ByteSize>,
    /// CPU limit (nano-CPUs) applied when the plan sets none.
    pub nano_cpus: Option<i64>,
    /// Bind policy.
    pub binds: BindsMode,
    /// Bound of one engine probe (discovery, ping).
    pub probe_timeout: Duration,
    /// Whether to confine egress when the engine allows it (`false` only
    /// through [`EGRESS_ENFORCE_ENV`]`=off`).
    pub egress_enforce: bool,
}

impl Default for DockerSettings {
    fn default() -> Self {
        Self {
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            memory: None,
            nano_cpus: None,
            binds: BindsMode::Auto,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            egress_enforce: true,
        }
    }
}

/// A setting that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is invalid: {reason}")]
pub struct SettingsError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// Why.
    pub reason: &'static str,
}

impl SettingsError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_SETTINGS_INVALID"
    }
}

impl DockerSettings {
    /// Read the settings from an environment snapshot. A bad pull timeout
    /// falls back to the default (facts §4); a bad memory/CPU/binds value is
    /// an error because silently dropping a limit would fail open.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, SettingsError> {
        let mut settings = Self::default();
        if let Some(raw) = env.get(PULL_TIMEOUT_ENV)
            && let Some(d) = parse_go_duration(raw)
            && !d.is_zero()
        {
            settings.pull_timeout = d;
        }
        if let Some(raw) = env.get(MEMORY_ENV).filter(|v| !v.trim().is_empty()) {
            let size = parse_size(raw).map_err(|_| SettingsError {
                variable: MEMORY_ENV,
                value: raw.clone(),
                reason: "expected N, NKiB, NMiB or NGiB",
            })?;
            settings.memory = Some(size);
        }
        if let Some(raw) = env.get(CPUS_ENV).filter(|v| !v.trim().is_empty()) {
            settings.nano_cpus = Some(parse_cpus(raw).ok_or_else(|| SettingsError {
                variable: CPUS_ENV,
                value: raw.clone(),
                reason: "expected a positive decimal number of CPUs",
            })?);
        }
        if let Some(raw) = env.get(BINDS_ENV) {
            settings.binds = match raw.trim().to_ascii_lowercase().as_str() {
                "" | "auto" => BindsMode::Auto,
                "none" => BindsMode::None,
                _ => {
                    return Err(SettingsError {
                        variable: BINDS_ENV,
                        value: raw.clone(),
                        reason: "expected auto or none",
                    });
                }
            };
        }
        if let Some(raw) = env.get(EGRESS_ENFORCE_ENV) {
            settings.egress_enforce = match raw.trim().to_ascii_lowercase().as_str() {
                "" | "auto" | "on" => true,
                "off" => false,
                _ => {
                    return Err(SettingsError {
                        variable: EGRESS_ENFORCE_ENV,
                        value: raw.clone(),
                        reason: "expected auto or off",
                    });
                }
            };
        }
        Ok(settings)
    }
}

/// Parse decimal CPUs (`2`, `0.5`) into nano-CPUs.
pub fn parse_cpus(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    let (int, frac) = raw.split_once('.').unwrap_or((raw, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 9 {
        return None;
    }
    let int: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut frac_nanos: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        frac_nanos *= 10;
    }
    let n = int.checked_mul(1_000_000_000)?.checked_add(frac_nanos)?;
    (n > 0).then_some(n)
}

/// Parse a Go-style duration (`90s`, `10m`, `1h30m`, `1.5h`, `250ms`).
/// Returns `None` for anything Go's `time.ParseDuration` would refuse or a
/// negative value.
pub fn parse_go_duration(raw: &str) -> Option<Duration> {
    let s = raw.trim();
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * factor;
    }
    if !total.is_finite() || total > 1e12 {
        return None;
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "10", "-5s", "5x", "m", "1..2s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn pull_timeout_falls_back() {
        for raw in ["", "garbage", "0", "-1s"] {
            let s = DockerSettings::from_env(&env(&[(PULL_TIMEOUT_ENV, raw)])).expect("ok");
            assert_eq!(s.pull_timeout, DEFAULT_PULL_TIMEOUT, "{raw}");
        }
        let s = DockerSettings::from_env(&env(&[(PULL_TIMEOUT_ENV, "90s")])).expect("ok");
        assert_eq!(s.pull_timeout, Duration::from_secs(90));
    }

    #[test]
    fn limits_and_binds() {
        let s = DockerSettings::from_env(&env(&[
            (MEMORY_ENV, "512MiB"),
            (CPUS_ENV, "1.5"),
            (BINDS_ENV, "none"),
        ]))
        .expect("ok");
        assert_eq!(s.memory, Some(ByteSize(512 << 20)));
        assert_eq!(s.nano_cpus, Some(1_500_000_000));
        assert_eq!(s.binds, BindsMode::None);
        assert!(DockerSettings::from_env(&env(&[(CPUS_ENV, "lots")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(CPUS_ENV, "0")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(MEMORY_ENV, "1T")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(BINDS_ENV, "some")])).is_err());
        assert!(DockerSettings::default().egress_enforce);
        let s = DockerSettings::from_env(&env(&[(EGRESS_ENFORCE_ENV, "off")])).expect("ok");
        assert!(!s.egress_enforce);
        assert!(DockerSettings::from_env(&env(&[(EGRESS_ENFORCE_ENV, "no")])).is_err());
    }
}
