//! Driver settings read from an environment snapshot: where the engine is,
//! how long a pull may take, the containment limits every sandbox gets
//! (memory with no extra swap, processes, CPUs: the product defaults of
//! [`Limits::default`] unless the operator changes them) and whether host
//! binds are allowed. Parsing only; no IO.

use std::collections::BTreeMap;
use std::time::Duration;

use iterion_core::duration::parse_go_duration;
use iterion_core::parse_size;
use iterion_core::plan::Limits;

/// Variable bounding an image pull (facts §4: Go duration, default `10m`;
/// empty, invalid or ≤ 0 ⇒ default).
pub const PULL_TIMEOUT_ENV: &str = "ITERION_SANDBOX_PULL_TIMEOUT";
/// Memory limit of a sandbox (`N`, `NMiB`, `NGiB`…, or `unlimited`);
/// default [`iterion_core::plan::DEFAULT_MEMORY_LIMIT`], swap never added.
pub const MEMORY_ENV: &str = "ITERION_SANDBOX_MEMORY";
/// CPU limit of a sandbox (decimal CPUs, e.g. `1.5`); default none.
pub const CPUS_ENV: &str = "ITERION_SANDBOX_CPUS";
/// Process limit of a sandbox (a count, or `unlimited`); default
/// [`iterion_core::plan::DEFAULT_PIDS_LIMIT`].
pub const PIDS_ENV: &str = "ITERION_SANDBOX_PIDS";
/// Size of a sandbox's writable layer (`N`…`NGiB`, or `unlimited`); default
/// [`iterion_core::plan::DEFAULT_DISK_LIMIT`]. Enforced where the engine's
/// storage driver supports a size (overlay2 on xfs with `pquota`, btrfs,
/// zfs); elsewhere each run says it ran without (`sandbox_limit_unenforced`).
pub const DISK_ENV: &str = "ITERION_SANDBOX_DISK";
/// The word that lifts a limit entirely (an explicit operator choice,
/// shown as such by `doctor` and `sandbox_started`).
pub const UNLIMITED: &str = "unlimited";
/// Fewest processes a sandbox may be limited to: below this even the init,
/// the shell and one command cannot run.
pub const MIN_PIDS: i64 = 16;
/// Smallest memory limit the engines accept (Docker refuses under 6 MiB).
pub const MIN_MEMORY: u64 = 6 << 20;
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
/// Bound of one discovery probe. Podman 4.3 computes host facts for every
/// `/version` (2–6 s on a loaded two-core host, measured while the test
/// suite ran: 3 s made discovery report "no engine answered" for a healthy
/// engine); a dead socket answers at once, so only a hung engine waits
/// this long.
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
    /// The limits every sandbox of this driver gets (the plan's are the
    /// product defaults; these are those defaults after the operator's
    /// variables).
    pub limits: Limits,
    /// Bind policy.
    pub binds: BindsMode,
    /// Bound of one engine probe (discovery, ping).
    pub probe_timeout: Duration,
    /// Bound of the post-create commands
    /// (`iterion_core::driver::POST_CREATE_TIMEOUT_ENV`).
    pub post_create_timeout: Duration,
    /// Bound of a bindless run's workspace copy
    /// (`iterion_core::driver::WORKSPACE_COPY_TIMEOUT_ENV`).
    pub workspace_copy_timeout: Duration,
    /// Whether to confine egress when the engine allows it (`false` only
    /// through [`EGRESS_ENFORCE_ENV`]`=off`).
    pub egress_enforce: bool,
}

impl Default for DockerSettings {
    fn default() -> Self {
        Self {
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            limits: Limits::default(),
            binds: BindsMode::Auto,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            post_create_timeout: iterion_core::driver::DEFAULT_POST_CREATE_TIMEOUT,
            workspace_copy_timeout: iterion_core::driver::DEFAULT_WORKSPACE_COPY_TIMEOUT,
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
        settings.post_create_timeout = iterion_core::driver::post_create_timeout(env);
        settings.workspace_copy_timeout = iterion_core::driver::workspace_copy_timeout(env);
        if let Some(raw) = env.get(MEMORY_ENV).filter(|v| !v.trim().is_empty()) {
            let memory = match is_unlimited(raw) {
                true => None,
                false => Some(
                    parse_size(raw)
                        .ok()
                        .filter(|m| m.0 >= MIN_MEMORY)
                        .ok_or_else(|| SettingsError {
                            variable: MEMORY_ENV,
                            value: raw.clone(),
                            reason: "expected N, NKiB, NMiB or NGiB (at least 6MiB), or unlimited",
                        })?,
                ),
            };
            settings.limits = settings.limits.with_memory(memory);
        }
        if let Some(raw) = env.get(CPUS_ENV).filter(|v| !v.trim().is_empty()) {
            settings.limits.nano_cpus = Some(parse_cpus(raw).ok_or_else(|| SettingsError {
                variable: CPUS_ENV,
                value: raw.clone(),
                reason: "expected a positive decimal number of CPUs",
            })?);
        }
        if let Some(raw) = env.get(DISK_ENV).filter(|v| !v.trim().is_empty()) {
            settings.limits.writable_layer = match is_unlimited(raw) {
                true => None,
                false => Some(
                    parse_size(raw)
                        .ok()
                        .filter(|m| m.0 >= MIN_MEMORY)
                        .ok_or_else(|| SettingsError {
                            variable: DISK_ENV,
                            value: raw.clone(),
                            reason: "expected N, NKiB, NMiB or NGiB (at least 6MiB), or unlimited",
                        })?,
                ),
            };
        }
        if let Some(raw) = env.get(PIDS_ENV).filter(|v| !v.trim().is_empty()) {
            settings.limits.pids = match is_unlimited(raw) {
                true => None,
                false => Some(
                    raw.trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|n| *n >= MIN_PIDS)
                        .ok_or_else(|| SettingsError {
                            variable: PIDS_ENV,
                            value: raw.clone(),
                            reason: "expected a process count of at least 16, or unlimited",
                        })?,
                ),
            };
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

fn is_unlimited(raw: &str) -> bool {
    raw.trim().eq_ignore_ascii_case(UNLIMITED)
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

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::ByteSize;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn post_create_timeout_is_read_from_its_variable() {
        let var = iterion_core::driver::POST_CREATE_TIMEOUT_ENV;
        let s = DockerSettings::from_env(&env(&[])).expect("ok");
        assert_eq!(s.post_create_timeout, Duration::from_secs(1800));
        let s = DockerSettings::from_env(&env(&[(var, "45s")])).expect("ok");
        assert_eq!(s.post_create_timeout, Duration::from_secs(45));
        let s = DockerSettings::from_env(&env(&[(var, "soon")])).expect("ok");
        assert_eq!(s.post_create_timeout, Duration::from_secs(1800));
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
    fn default_limits_bound_memory_swap_and_pids() {
        let s = DockerSettings::from_env(&env(&[])).expect("ok");
        assert_eq!(
            s.limits.memory,
            Some(iterion_core::plan::DEFAULT_MEMORY_LIMIT)
        );
        assert_eq!(s.limits.memory_swap, s.limits.memory, "no extra swap");
        assert_eq!(s.limits.pids, Some(iterion_core::plan::DEFAULT_PIDS_LIMIT));
        assert_eq!(s.limits.nano_cpus, None);
        assert_eq!(
            s.limits.writable_layer,
            Some(iterion_core::plan::DEFAULT_DISK_LIMIT)
        );
        let s = DockerSettings::from_env(&env(&[(DISK_ENV, "64MiB")])).expect("ok");
        assert_eq!(s.limits.writable_layer, Some(ByteSize(64 << 20)));
        let s = DockerSettings::from_env(&env(&[(DISK_ENV, "unlimited")])).expect("ok");
        assert_eq!(s.limits.writable_layer, None);
        assert!(DockerSettings::from_env(&env(&[(DISK_ENV, "big")])).is_err());
    }

    #[test]
    fn only_an_explicit_word_lifts_a_limit() {
        let s =
            DockerSettings::from_env(&env(&[(MEMORY_ENV, "Unlimited"), (PIDS_ENV, "unlimited")]))
                .expect("ok");
        assert_eq!(s.limits.memory, None);
        assert_eq!(s.limits.memory_swap, None);
        assert_eq!(s.limits.pids, None);
        let s = DockerSettings::from_env(&env(&[(MEMORY_ENV, " "), (PIDS_ENV, "")])).expect("ok");
        assert_eq!(s.limits, Limits::default(), "blank keeps the defaults");
        let s = DockerSettings::from_env(&env(&[(PIDS_ENV, "64")])).expect("ok");
        assert_eq!(s.limits.pids, Some(64));
        for bad in ["0", "-1", "15", "many", "none"] {
            let e = DockerSettings::from_env(&env(&[(PIDS_ENV, bad)])).expect_err(bad);
            assert_eq!(e.variable, PIDS_ENV);
        }
        for bad in ["0", "none", "off", "-1"] {
            let e = DockerSettings::from_env(&env(&[(MEMORY_ENV, bad)])).expect_err(bad);
            assert_eq!(e.variable, MEMORY_ENV);
        }
    }

    #[test]
    fn limits_and_binds() {
        let s = DockerSettings::from_env(&env(&[
            (MEMORY_ENV, "512MiB"),
            (CPUS_ENV, "1.5"),
            (BINDS_ENV, "none"),
        ]))
        .expect("ok");
        assert_eq!(s.limits.memory, Some(ByteSize(512 << 20)));
        assert_eq!(s.limits.memory_swap, Some(ByteSize(512 << 20)));
        assert_eq!(s.limits.nano_cpus, Some(1_500_000_000));
        assert_eq!(s.binds, BindsMode::None);
        assert!(DockerSettings::from_env(&env(&[(CPUS_ENV, "lots")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(CPUS_ENV, "0")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(MEMORY_ENV, "1T")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(MEMORY_ENV, "1MiB")])).is_err());
        assert!(DockerSettings::from_env(&env(&[(BINDS_ENV, "some")])).is_err());
        assert!(DockerSettings::default().egress_enforce);
        let s = DockerSettings::from_env(&env(&[(EGRESS_ENFORCE_ENV, "off")])).expect("ok");
        assert!(!s.egress_enforce);
        assert!(DockerSettings::from_env(&env(&[(EGRESS_ENFORCE_ENV, "no")])).is_err());
    }
}
