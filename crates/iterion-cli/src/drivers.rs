//! Driver construction for the CLI: the one place the `iterion` binary
//! finds its sandbox drivers and makes the one probe every verb reads
//! ([`probe`]: `run`, `resume`, `doctor`, `reap` see the same set and the
//! same readiness). Policy (which one a run gets) stays in
//! `iterion_sandbox::host` and the decision. Each real driver is a cargo
//! feature (`crate::backends`): one left out of the build is offered as
//! "not built in", which the decision degrades or refuses on as it would
//! an engine that does not answer, and the doctor's Docker-specific
//! reports say so instead of probing.

use std::collections::BTreeMap;
use std::sync::Arc;

use iterion_core::{Driver, DriverName};
use iterion_runtime::HostDrivers;
use iterion_sandbox::env::EnvSnapshot;
use iterion_sandbox::host::{HostKind, detect_host};

use crate::backends::{Backend, NotBuiltIn};

/// The drivers that constructed on this host and, when none did, why.
struct Discovered {
    /// Every real driver whose engine answered, in discovery order.
    drivers: Vec<Arc<dyn Driver>>,
    /// Why discovery found nothing (shown as the degrade/refuse reason).
    failure: Option<String>,
}

/// The one probe: discover every real driver — on a cloud host the
/// Kubernetes cluster the environment points at; elsewhere each distinct
/// Docker or Podman engine that answers (`DOCKER_HOST`, `CONTAINER_HOST`,
/// then the standard sockets) — and ask each whether its engine answers,
/// what it can do and what of the host it owns; every driver this binary
/// knows gets an offer, with why it is not here when it is not.
pub async fn probe(env: &EnvSnapshot) -> HostDrivers {
    let discovered = discover(env).await;
    let cloud = detect_host(env) == HostKind::Cloud;
    let not_found = |name: DriverName| {
        match (name, cloud) {
        (DriverName::Kubernetes, _) if !Backend::DriverK8s.built_in() => not_built(Backend::DriverK8s),
        (DriverName::Kubernetes, false) => {
            "no Kubernetes cluster answered (KUBECONFIG, the in-cluster service account, ~/.kube/config)"
                .to_owned()
        }
        (DriverName::Docker | DriverName::Podman, true) => {
            "not looked for on a cloud host (the Kubernetes driver or nothing)".to_owned()
        }
        (DriverName::Docker | DriverName::Podman, false) if !Backend::DriverDocker.built_in() => {
            not_built(Backend::DriverDocker)
        }
        _ => discovered
            .failure
            .clone()
            .unwrap_or_else(|| "no such engine answered".to_owned()),
    }
    };
    let missing = [
        DriverName::Docker,
        DriverName::Podman,
        DriverName::Kubernetes,
    ]
    .into_iter()
    .map(|name| (name, not_found(name)))
    .collect();
    HostDrivers::probe(discovered.drivers, missing).await
}

/// The driver is wrapped with nothing here; the runtime tees its lines
/// into the run log through the observer it passes to each call.
async fn discover(env: &EnvSnapshot) -> Discovered {
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    // Scoped to this store: a run never reaps what another store's runs
    // created on the same engine (see `DockerDriver::with_store_scope`).
    let scope = crate::stores::scope_from_env();
    // Host kind cloud (facts §5.2): the Kubernetes driver or nothing,
    // never a Docker engine that happens to answer.
    if detect_host(env) == HostKind::Cloud {
        return discover_cloud(&process_env, scope).await;
    }
    discover_engines(&process_env, scope).await
}

/// Every Docker or Podman engine that answers.
#[cfg(feature = "driver-docker")]
async fn discover_engines(process_env: &BTreeMap<String, String>, scope: String) -> Discovered {
    match iterion_driver_docker::DockerDriver::discover_all(process_env).await {
        Ok(found) if !found.is_empty() => Discovered {
            drivers: found
                .into_iter()
                .map(|d| Arc::new(d.with_store_scope(scope.clone())) as Arc<dyn Driver>)
                .collect(),
            failure: None,
        },
        Ok(_) => Discovered {
            drivers: Vec::new(),
            failure: Some("no Docker or Podman engine answered".to_owned()),
        },
        Err(e) => Discovered {
            drivers: Vec::new(),
            failure: Some(e.to_string()),
        },
    }
}

#[cfg(not(feature = "driver-docker"))]
async fn discover_engines(process_env: &BTreeMap<String, String>, scope: String) -> Discovered {
    let _ = (process_env, scope);
    Discovered {
        drivers: Vec::new(),
        failure: Some(not_built(Backend::DriverDocker)),
    }
}

/// The Kubernetes driver of a cloud host: the cluster the environment
/// points at, probed (bounded by `ITERION_SANDBOX_DOCTOR_TIMEOUT`).
#[cfg(feature = "driver-k8s")]
async fn discover_cloud(process_env: &BTreeMap<String, String>, scope: String) -> Discovered {
    match iterion_driver_k8s::KubeDriver::discover(process_env).await {
        Ok(d) => Discovered {
            drivers: vec![Arc::new(d.with_store_scope(scope)) as Arc<dyn Driver>],
            failure: None,
        },
        Err(e) => Discovered {
            drivers: Vec::new(),
            failure: Some(e.to_string()),
        },
    }
}

#[cfg(not(feature = "driver-k8s"))]
async fn discover_cloud(process_env: &BTreeMap<String, String>, scope: String) -> Discovered {
    let _ = (process_env, scope);
    Discovered {
        drivers: Vec::new(),
        failure: Some(not_built(Backend::DriverK8s)),
    }
}

/// Why a driver is not offered by a binary built without it.
fn not_built(backend: Backend) -> String {
    NotBuiltIn { backend }.to_string()
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

/// The containment every docker/podman sandbox gets (issue 19 #5: visible
/// in `doctor` and in `sandbox_started`): never privileged, never the
/// engine socket, `no-new-privileges`, and the limits the driver applies —
/// memory with no extra swap, processes, CPUs, the writable layer and
/// the run-files dir — with where each came from, and every capability
/// dropped but a short list.
#[cfg(feature = "driver-docker")]
pub fn containment() -> serde_json::Value {
    use iterion_driver_docker::settings::{CPUS_ENV, DISK_ENV, MEMORY_ENV, PIDS_ENV};
    let process_env: BTreeMap<String, String> = std::env::vars().collect();
    let source = |var: &str| match process_env.get(var).filter(|v| !v.trim().is_empty()) {
        Some(_) => var.to_owned(),
        None => "default".to_owned(),
    };
    match iterion_driver_docker::DockerSettings::from_env(&process_env) {
        Ok(s) => serde_json::json!({
            "privileged": false,
            "engine_socket_mounted": false,
            "no_new_privileges": s.limits.no_new_privileges,
            "pids_limit": s.limits.pids,
            "pids_limit_source": source(PIDS_ENV),
            "memory": s.limits.memory.map(|m| m.to_string()),
            "memory_swap": s.limits.memory_swap.map(|m| m.to_string()),
            "memory_source": source(MEMORY_ENV),
            "nano_cpus": s.limits.nano_cpus,
            "nano_cpus_source": source(CPUS_ENV),
            "writable_layer": s.limits.writable_layer.map(|m| m.to_string()),
            "writable_layer_source": source(DISK_ENV),
            "run_files": run_files_bound(),
            "init_reaps_zombies": true,
            "capabilities": iterion_driver_docker::SANDBOX_CAPABILITIES,
            "capabilities_dropped": "every other one (NET_RAW, MKNOD, SETFCAP, SETPCAP, SYS_CHROOT and AUDIT_WRITE included)",
            // A sandbox run as a pinned non-root user (host_identity) keeps none.
            "capabilities_non_root": [],
        }),
        Err(e) => serde_json::json!({ "error": e.to_string(), "code": e.code() }),
    }
}

#[cfg(not(feature = "driver-docker"))]
pub fn containment() -> serde_json::Value {
    serde_json::json!({
        "built_in": false,
        "detail": not_built(Backend::DriverDocker),
        "run_files": run_files_bound(),
    })
}

/// The capabilities a docker/podman sandbox keeps.
#[cfg(feature = "driver-docker")]
pub fn sandbox_capabilities() -> &'static [&'static str] {
    &iterion_driver_docker::SANDBOX_CAPABILITIES
}

/// None: a binary without the Docker/Podman driver starts no such sandbox.
#[cfg(not(feature = "driver-docker"))]
pub fn sandbox_capabilities() -> &'static [&'static str] {
    &[]
}

/// Check the Docker/Podman driver's settings (limits) in the process
/// environment: a value it cannot read is bad input.
#[cfg(feature = "driver-docker")]
pub fn check_settings(process_env: &BTreeMap<String, String>) -> Result<(), String> {
    iterion_driver_docker::DockerSettings::from_env(process_env)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Nothing to read in a binary without the Docker/Podman driver.
#[cfg(not(feature = "driver-docker"))]
pub fn check_settings(process_env: &BTreeMap<String, String>) -> Result<(), String> {
    let _ = process_env;
    Ok(())
}

/// How a run's run-files dir is bounded on this host: a tmpfs of the
/// read-back cap when `iterion` may mount one (root), else unbounded (each
/// run then records `sandbox_limit_unenforced`).
fn run_files_bound() -> serde_json::Value {
    match iterion_runtime::runfiles::host_can_bound() {
        Ok(()) => serde_json::json!({
            "bounded": true,
            "detail": "a nosuid,nodev tmpfs per run of twice the read-back cap, at least 64MiB past it (ITERION_SANDBOX_READBACK_CAP, default 256MiB: 512MiB)",
        }),
        Err(reason) => serde_json::json!({"bounded": false, "detail": reason}),
    }
}

/// Per engine: whether its storage driver can bound a sandbox's writable
/// layer (`ITERION_SANDBOX_DISK`), from the engine's own report (none in
/// a binary without the Docker/Podman driver).
pub async fn writable_layer_report() -> serde_json::Value {
    #[cfg_attr(not(feature = "driver-docker"), allow(unused_mut))]
    let mut out = serde_json::Map::new();
    #[cfg(feature = "driver-docker")]
    if let Ok(found) =
        iterion_driver_docker::DockerDriver::discover_all(&std::env::vars().collect()).await
    {
        for d in found {
            use iterion_core::Driver;
            let verdict = match d.writable_layer_support().await {
                Ok(detail) => serde_json::json!({"enforced": true, "detail": detail}),
                Err(reason) => serde_json::json!({"enforced": false, "detail": reason}),
            };
            out.insert(d.name().as_str().to_owned(), verdict);
        }
    }
    serde_json::Value::Object(out)
}

/// The egress protections a confined docker/podman sandbox gets on this
/// host (issue 19), and whether the host can apply them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EgressProtections {
    /// The per-run firewall rules: `ok`, or why this host cannot apply them.
    pub firewall: ProtectionState,
    /// IPv6 confinement.
    pub ipv6: ProtectionState,
    /// Where the proxy listens.
    pub proxy_bind: &'static str,
    /// The per-run connection cap of the proxy.
    pub proxy_max_connections: usize,
}

/// One protection: applied here or not, and what it does (or why not).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProtectionState {
    /// Whether this host applies it.
    pub applied: bool,
    /// What it does, or why it cannot be applied.
    pub detail: String,
}

/// The host's egress protections (one probe per process, shared with the
/// driver's `egress_enforcement` capability).
#[cfg(feature = "driver-docker")]
pub async fn egress_protections() -> EgressProtections {
    let support = iterion_driver_docker::egress_host_support().await;
    let firewall = match &support.rules {
        Ok(()) => ProtectionState {
            applied: true,
            detail: iterion_driver_docker::RULES_SUMMARY.to_owned(),
        },
        Err(why) => ProtectionState {
            applied: false,
            detail: format!("cannot apply the per-run nftables rules: {why}"),
        },
    };
    let ipv6 = match (support.ipv6, &support.rules) {
        (false, _) => ProtectionState {
            applied: true,
            detail: "the kernel runs no IPv6: nothing to confine".to_owned(),
        },
        (true, Ok(())) => ProtectionState {
            applied: true,
            detail: "off inside a confined sandbox (sysctl) and on its bridge (no link-local address); IPv6 frames from the bridge dropped".to_owned(),
        },
        (true, Err(_)) => ProtectionState {
            applied: false,
            detail: "the host rules that drop IPv6 from a run's bridge cannot be applied here".to_owned(),
        },
    };
    EgressProtections {
        firewall,
        ipv6,
        proxy_bind: "the run's network gateway only (the default network's gateway for an advisory proxy; never every address)",
        proxy_max_connections: iterion_netproxy::DEFAULT_MAX_CONNECTIONS,
    }
}

/// Without the Docker/Podman driver no confined sandbox starts here, so
/// none of its protections applies.
#[cfg(not(feature = "driver-docker"))]
pub async fn egress_protections() -> EgressProtections {
    let off = || ProtectionState {
        applied: false,
        detail: not_built(Backend::DriverDocker),
    };
    EgressProtections {
        firewall: off(),
        ipv6: off(),
        proxy_bind: "the run's network gateway only (the default network's gateway for an advisory proxy; never every address)",
        proxy_max_connections: iterion_netproxy::DEFAULT_MAX_CONNECTIONS,
    }
}
