//! [`K8sSettings`]: the driver's operator knobs, read from an environment
//! snapshot. Parsing and validation only; no IO.
//!
//! Rules (facts §4, upstream notes "Kubernetes"): bounds are Go durations
//! (`ITERION_SANDBOX_K8S_POD_READY_TIMEOUT` default 10m and at least 1s,
//! `ITERION_SANDBOX_K8S_APPLY_TIMEOUT` 2m, `ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT`
//! 15m, `ITERION_SANDBOX_POST_CREATE_TIMEOUT` 30m; empty, invalid or zero ⇒
//! the default). Resources are Kubernetes quantities validated here, at
//! boot, never by the API server mid-run: a bad quantity is an error, not a
//! default, because a pod without the limit the operator asked for is not
//! the sandbox they configured. `ITERION_POD_IP` is the runner's address:
//! the proxy is advertised there and the NetworkPolicy allows only it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use iterion_core::duration::parse_go_duration;

use crate::error::K8sError;
use crate::quantity::{Cpu, Memory};

/// Namespace override (else the kubeconfig context's, or the service
/// account's in a pod).
pub const NAMESPACE_ENV: &str = "ITERION_SANDBOX_K8S_NAMESPACE";
/// Bound of the wait for the pod to be Ready.
pub const POD_READY_TIMEOUT_ENV: &str = "ITERION_SANDBOX_K8S_POD_READY_TIMEOUT";
/// Bound of every create/delete/list call.
pub const APPLY_TIMEOUT_ENV: &str = "ITERION_SANDBOX_K8S_APPLY_TIMEOUT";
/// Bound of `post_create`: every driver's, in `iterion_core::driver`.
pub use iterion_core::driver::{DEFAULT_POST_CREATE_TIMEOUT, POST_CREATE_TIMEOUT_ENV};
/// Bound of the workspace copy into the pod: every copy-based driver's,
/// in `iterion_core::driver`.
pub use iterion_core::driver::{DEFAULT_WORKSPACE_COPY_TIMEOUT, WORKSPACE_COPY_TIMEOUT_ENV};
/// Bound of the discovery probe and of doctor's checks.
pub const DOCTOR_TIMEOUT_ENV: &str = "ITERION_SANDBOX_DOCTOR_TIMEOUT";
/// CPU request of the sandbox pod.
pub const REQUESTS_CPU_ENV: &str = "ITERION_SANDBOX_K8S_REQUESTS_CPU";
/// Memory request of the sandbox pod.
pub const REQUESTS_MEMORY_ENV: &str = "ITERION_SANDBOX_K8S_REQUESTS_MEMORY";
/// CPU limit of the sandbox pod.
pub const LIMITS_CPU_ENV: &str = "ITERION_SANDBOX_K8S_LIMITS_CPU";
/// Memory limit of the sandbox pod.
pub const LIMITS_MEMORY_ENV: &str = "ITERION_SANDBOX_K8S_LIMITS_MEMORY";
/// The runner pod's IP (downward API `status.podIP`).
pub const POD_IP_ENV: &str = "ITERION_POD_IP";
/// The runner pod's name (downward API `metadata.name`).
pub const RUNNER_POD_NAME_ENV: &str = "ITERION_RUNNER_POD_NAME";
/// The runner pod's uid (downward API `metadata.uid`).
pub const RUNNER_POD_UID_ENV: &str = "ITERION_RUNNER_POD_UID";

/// Default ready bound (upstream #696/#707: cold pulls of large images).
pub const DEFAULT_POD_READY_TIMEOUT: Duration = Duration::from_secs(600);
/// Default API call bound.
pub const DEFAULT_APPLY_TIMEOUT: Duration = Duration::from_secs(120);
/// Default probe bound.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default CPU request when the variable is unset.
pub const DEFAULT_REQUESTS_CPU: &str = "250m";
/// Default memory request when the variable is unset.
pub const DEFAULT_REQUESTS_MEMORY: &str = "512Mi";
/// Default CPU limit when the variable is unset (a pod without limits is
/// not a sandbox: one agent could take the node).
pub const DEFAULT_LIMITS_CPU: &str = "2";
/// Default memory limit when the variable is unset.
pub const DEFAULT_LIMITS_MEMORY: &str = "4Gi";

/// Requests and limits of the sandbox container, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// CPU request.
    pub requests_cpu: Cpu,
    /// Memory request.
    pub requests_memory: Memory,
    /// CPU limit (≥ the request).
    pub limits_cpu: Cpu,
    /// Memory limit (≥ the request).
    pub limits_memory: Memory,
}

impl Default for Resources {
    fn default() -> Self {
        // The defaults are constants that parse; the unit tests prove it.
        Self {
            requests_cpu: Cpu::parse(DEFAULT_REQUESTS_CPU).unwrap_or(Cpu::from_millis(250)),
            requests_memory: Memory::parse(DEFAULT_REQUESTS_MEMORY)
                .unwrap_or(Memory::from_bytes(512 << 20)),
            limits_cpu: Cpu::parse(DEFAULT_LIMITS_CPU).unwrap_or(Cpu::from_millis(2000)),
            limits_memory: Memory::parse(DEFAULT_LIMITS_MEMORY)
                .unwrap_or(Memory::from_bytes(4 << 30)),
        }
    }
}

/// The runner pod every per-run object is owned by (garbage collected with
/// it when the runner pod goes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerPod {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
}

/// Settings of the Kubernetes driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sSettings {
    /// Namespace override.
    pub namespace: Option<String>,
    /// Ready bound.
    pub pod_ready_timeout: Duration,
    /// Bound of each API call.
    pub apply_timeout: Duration,
    /// Workspace copy bound.
    pub workspace_copy_timeout: Duration,
    /// post_create bound.
    pub post_create_timeout: Duration,
    /// Discovery/doctor probe bound.
    pub probe_timeout: Duration,
    /// Container resources.
    pub resources: Resources,
    /// The runner's IP: proxy address and NetworkPolicy peer.
    pub pod_ip: Option<IpAddr>,
    /// Owner of every per-run object.
    pub runner: Option<RunnerPod>,
}

impl Default for K8sSettings {
    fn default() -> Self {
        Self {
            namespace: None,
            pod_ready_timeout: DEFAULT_POD_READY_TIMEOUT,
            apply_timeout: DEFAULT_APPLY_TIMEOUT,
            workspace_copy_timeout: DEFAULT_WORKSPACE_COPY_TIMEOUT,
            post_create_timeout: DEFAULT_POST_CREATE_TIMEOUT,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            resources: Resources::default(),
            pod_ip: None,
            runner: None,
        }
    }
}

fn invalid(variable: &'static str, value: &str, reason: impl Into<String>) -> K8sError {
    K8sError::Setting {
        variable,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// A set, non-blank variable.
fn get<'a>(env: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// A bound: a Go duration; empty, invalid or zero falls back to the default
/// (facts §4), never below `min`.
fn bound(env: &BTreeMap<String, String>, name: &str, default: Duration, min: Duration) -> Duration {
    get(env, name)
        .and_then(parse_go_duration)
        .filter(|d| !d.is_zero())
        .map_or(default, |d| d.max(min))
}

impl K8sSettings {
    /// Read and validate the settings.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, K8sError> {
        let namespace = match get(env, NAMESPACE_ENV) {
            None => None,
            Some(ns) if is_dns_label(ns) => Some(ns.to_owned()),
            Some(ns) => {
                return Err(invalid(
                    NAMESPACE_ENV,
                    ns,
                    "a namespace is a DNS label: [a-z0-9-], at most 63, starting and ending alphanumeric",
                ));
            }
        };
        let pod_ip = match get(env, POD_IP_ENV) {
            None => None,
            Some(raw) => Some(raw.parse::<IpAddr>().map_err(|_| {
                invalid(
                    POD_IP_ENV,
                    raw,
                    "not an IP address (inject status.podIP through the downward API)",
                )
            })?),
        };
        let runner = match (get(env, RUNNER_POD_NAME_ENV), get(env, RUNNER_POD_UID_ENV)) {
            (None, None) => None,
            (Some(name), Some(uid)) => Some(RunnerPod {
                name: name.to_owned(),
                uid: uid.to_owned(),
            }),
            (Some(name), None) => {
                return Err(invalid(
                    RUNNER_POD_UID_ENV,
                    "",
                    format!(
                        "{RUNNER_POD_NAME_ENV}={name} is set but the uid is not (both or neither)"
                    ),
                ));
            }
            (None, Some(uid)) => {
                return Err(invalid(
                    RUNNER_POD_NAME_ENV,
                    "",
                    format!(
                        "{RUNNER_POD_UID_ENV}={uid} is set but the name is not (both or neither)"
                    ),
                ));
            }
        };
        Ok(Self {
            namespace,
            pod_ready_timeout: bound(
                env,
                POD_READY_TIMEOUT_ENV,
                DEFAULT_POD_READY_TIMEOUT,
                Duration::from_secs(1),
            ),
            apply_timeout: bound(
                env,
                APPLY_TIMEOUT_ENV,
                DEFAULT_APPLY_TIMEOUT,
                Duration::from_millis(1),
            ),
            workspace_copy_timeout: bound(
                env,
                WORKSPACE_COPY_TIMEOUT_ENV,
                DEFAULT_WORKSPACE_COPY_TIMEOUT,
                Duration::from_millis(1),
            ),
            post_create_timeout: iterion_core::driver::post_create_timeout(env),
            probe_timeout: bound(
                env,
                DOCTOR_TIMEOUT_ENV,
                DEFAULT_PROBE_TIMEOUT,
                Duration::from_millis(1),
            ),
            resources: resources_from_env(env)?,
            pod_ip,
            runner,
        })
    }
}

fn resources_from_env(env: &BTreeMap<String, String>) -> Result<Resources, K8sError> {
    let cpu = |name: &'static str, default: &str| -> Result<Cpu, K8sError> {
        let raw = get(env, name).unwrap_or(default);
        Cpu::parse(raw).map_err(|reason| invalid(name, raw, reason))
    };
    let memory = |name: &'static str, default: &str| -> Result<Memory, K8sError> {
        let raw = get(env, name).unwrap_or(default);
        Memory::parse(raw).map_err(|reason| invalid(name, raw, reason))
    };
    let r = Resources {
        requests_cpu: cpu(REQUESTS_CPU_ENV, DEFAULT_REQUESTS_CPU)?,
        requests_memory: memory(REQUESTS_MEMORY_ENV, DEFAULT_REQUESTS_MEMORY)?,
        limits_cpu: cpu(LIMITS_CPU_ENV, DEFAULT_LIMITS_CPU)?,
        limits_memory: memory(LIMITS_MEMORY_ENV, DEFAULT_LIMITS_MEMORY)?,
    };
    // A limit below its request is refused by the API server at pod
    // creation; saying so at boot names the variables to fix.
    if r.limits_cpu < r.requests_cpu {
        return Err(invalid(
            LIMITS_CPU_ENV,
            r.limits_cpu.as_str(),
            format!(
                "the limit is below the request {} ({REQUESTS_CPU_ENV}, default {DEFAULT_REQUESTS_CPU})",
                r.requests_cpu.as_str()
            ),
        ));
    }
    if r.limits_memory < r.requests_memory {
        return Err(invalid(
            LIMITS_MEMORY_ENV,
            r.limits_memory.as_str(),
            format!(
                "the limit is below the request {} ({REQUESTS_MEMORY_ENV}, default {DEFAULT_REQUESTS_MEMORY})",
                r.requests_memory.as_str()
            ),
        ));
    }
    Ok(r)
}

/// RFC 1123 label: what a namespace name must be.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
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
    fn defaults_parse_and_are_consistent() {
        let s = K8sSettings::from_env(&BTreeMap::new()).expect("defaults");
        assert_eq!(s, K8sSettings::default());
        assert_eq!(s.resources.requests_cpu.as_str(), DEFAULT_REQUESTS_CPU);
        assert_eq!(s.resources.limits_memory.as_str(), DEFAULT_LIMITS_MEMORY);
        assert!(Cpu::parse(DEFAULT_LIMITS_CPU).is_ok());
        assert!(Memory::parse(DEFAULT_REQUESTS_MEMORY).is_ok());
    }

    #[test]
    fn bounds_fall_back_and_keep_a_floor() {
        for raw in ["", "junk", "0", "-1s", "10"] {
            let s = K8sSettings::from_env(&env(&[(POD_READY_TIMEOUT_ENV, raw)])).expect("ok");
            assert_eq!(s.pod_ready_timeout, DEFAULT_POD_READY_TIMEOUT, "{raw:?}");
        }
        let s = K8sSettings::from_env(&env(&[(POD_READY_TIMEOUT_ENV, "10ms")])).expect("ok");
        assert_eq!(s.pod_ready_timeout, Duration::from_secs(1), "at least 1s");
        let s = K8sSettings::from_env(&env(&[(APPLY_TIMEOUT_ENV, "90s")])).expect("ok");
        assert_eq!(s.apply_timeout, Duration::from_secs(90));
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[(REQUESTS_CPU_ENV, "0")], REQUESTS_CPU_ENV),
            (&[(REQUESTS_CPU_ENV, "1Gi")], REQUESTS_CPU_ENV),
            (&[(LIMITS_MEMORY_ENV, "500m")], LIMITS_MEMORY_ENV),
            (&[(LIMITS_MEMORY_ENV, "lots")], LIMITS_MEMORY_ENV),
            (&[(LIMITS_CPU_ENV, "100m")], LIMITS_CPU_ENV),
            (
                &[(REQUESTS_MEMORY_ENV, "8Gi"), (LIMITS_MEMORY_ENV, "1Gi")],
                LIMITS_MEMORY_ENV,
            ),
            (&[(POD_IP_ENV, "runner")], POD_IP_ENV),
            (&[(NAMESPACE_ENV, "Not_A_Namespace")], NAMESPACE_ENV),
            (&[(RUNNER_POD_NAME_ENV, "runner-0")], RUNNER_POD_UID_ENV),
            (&[(RUNNER_POD_UID_ENV, "u")], RUNNER_POD_NAME_ENV),
        ];
        for (pairs, variable) in cases {
            match K8sSettings::from_env(&env(pairs)) {
                Err(K8sError::Setting { variable: v, .. }) => assert_eq!(v, *variable, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn good_values_are_kept() {
        let s = K8sSettings::from_env(&env(&[
            (NAMESPACE_ENV, "sandboxes"),
            (POD_IP_ENV, "10.1.2.3"),
            (RUNNER_POD_NAME_ENV, "runner-0"),
            (RUNNER_POD_UID_ENV, "0b6c"),
            (REQUESTS_CPU_ENV, "1"),
            (LIMITS_CPU_ENV, "1500m"),
            (REQUESTS_MEMORY_ENV, "1G"),
            (LIMITS_MEMORY_ENV, "1Gi"),
        ]))
        .expect("ok");
        assert_eq!(s.namespace.as_deref(), Some("sandboxes"));
        assert_eq!(s.pod_ip, Some("10.1.2.3".parse().expect("ip")));
        assert_eq!(s.runner.as_ref().map(|r| r.uid.as_str()), Some("0b6c"));
        assert_eq!(s.resources.limits_cpu.as_str(), "1500m");
        assert_eq!(s.resources.requests_memory.as_str(), "1G");
    }
}
