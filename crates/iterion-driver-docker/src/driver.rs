//! [`DockerDriver`]: discovery, prepare (guards, inspect, bounded pull),
//! build, start, and the managed-resource listing used by the reaper.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount as EngineMount, MountTmpfsOptions,
    MountType, NetworkCreateRequest, NetworkingConfig, VolumeCreateRequest,
};
use bollard::query_parameters::{
    BuildImageOptions, CreateContainerOptions, CreateImageOptions, ListNetworksOptions,
    ListVolumesOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use bollard::{ClientVersion, Docker};
use futures_util::StreamExt;
use iterion_core::driver::{EngineInfo, ManagedResource, NullObserver, Progress, ResourceKind};
use iterion_core::plan::{EgressAttachment, MountKind};
use iterion_core::{
    Capabilities, Driver, DriverError, DriverName, DriverObserver, EgressBinding, LaunchPlan,
    OutputStream, Prepared, RunInfo, SandboxRun,
};

use crate::build::{ChannelWriter, build_tag, check_context, write_context};
use crate::firewall;
use crate::run::{DockerRun, RunResources};
use crate::settings::{BindsMode, DockerSettings, PULL_TIMEOUT_ENV};

/// Label every resource the driver creates carries.
pub const MANAGED_LABEL: &str = "iterion.io/managed";
/// Label naming the run.
pub const RUN_ID_LABEL: &str = "iterion.io/run-id";
/// Label carrying the friendly run name.
pub const RUN_NAME_LABEL: &str = "iterion.io/run-name";
/// Label naming the process that created the resource
/// (`<pid>:<start time>@<host>`, the same lease a local run records), so
/// the reaper of a run using ANOTHER store keeps it while that process
/// lives instead of judging it "run absent" (two projects' `.iterion`
/// stores on one engine, or concurrent tests with private stores).
pub const OWNER_LABEL: &str = "iterion.io/owner";

/// This process as an owner label value; `None` when `/proc` cannot say
/// (then no label: the reaper falls back to the store alone).
fn own_owner_label() -> Option<String> {
    static OWNER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
            let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
            start.parse::<u64>().ok()?;
            Some(format!("{}:{start}@{}", std::process::id(), host.trim()))
        })
        .clone()
}

/// Parse an [`OWNER_LABEL`] value.
pub(crate) fn parse_owner(value: &str) -> Option<iterion_core::store::RunOwner> {
    let (lease, host) = value.split_once('@')?;
    let (pid, start) = lease.split_once(':')?;
    Some(iterion_core::store::RunOwner {
        host: host.to_owned(),
        pid: pid.parse().ok()?,
        start_time: start.parse().ok()?,
    })
}

fn owner_of(labels: Option<&HashMap<String, String>>) -> Option<iterion_core::store::RunOwner> {
    labels?.get(OWNER_LABEL).and_then(|v| parse_owner(v))
}

/// Label naming the run store that owns the run (a stable digest, never
/// the store's address: a PostgreSQL URL carries a password).
pub const STORE_LABEL: &str = "iterion.io/store";

/// Both engines here answer 1.41 and refuse newer clients
/// (reference/test-environment.md, "Engine API version").
const API_VERSION: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 41,
};
/// Per-request bound of the HTTP client (long streams are bounded by the
/// caller; this only catches a dead engine).
const CLIENT_TIMEOUT_SECS: u64 = 3600;
/// PID 1 when the engine supplies an init: a long sleep (not `infinity`,
/// which not every `sleep` knows).
const SLEEP_FOREVER: [&str; 2] = ["sleep", "2147483647"];
/// PID 1 when the engine has no init binary (podman without catatonit): a
/// shell whose `wait` calls `waitpid(-1)` and so reaps every orphan.
const SHELL_REAPER: &str = "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done";

/// Where an engine is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A unix socket path (local engine: host binds possible).
    Unix(String),
    /// `tcp://host:port` (remote engine: bindless).
    Tcp(String),
}

impl Endpoint {
    /// Parse a `DOCKER_HOST`-style address.
    pub fn parse(raw: &str) -> Result<Self, DriverError> {
        let raw = raw.trim();
        if let Some(path) = raw.strip_prefix("unix://") {
            return Ok(Self::Unix(path.to_owned()));
        }
        if raw.starts_with('/') {
            return Ok(Self::Unix(raw.to_owned()));
        }
        if let Some(rest) = raw
            .strip_prefix("tcp://")
            .or_else(|| raw.strip_prefix("http://"))
        {
            return Ok(Self::Tcp(rest.to_owned()));
        }
        Err(DriverError::Unavailable {
            reason: format!(
                "engine endpoint {raw:?} is not supported (unix:// or tcp:// only; ssh:// needs a tunnel)"
            ),
        })
    }

    /// Whether host paths can be bound (the engine shares our filesystem).
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Unix(_))
    }

    fn url(&self) -> String {
        match self {
            Self::Unix(p) => format!("unix://{p}"),
            Self::Tcp(a) => format!("tcp://{a}"),
        }
    }
}

/// The docker/podman driver. Cheap to clone; safe for concurrent runs.
#[derive(Clone)]
pub struct DockerDriver {
    pub(crate) docker: Docker,
    name: DriverName,
    endpoint: Endpoint,
    version: String,
    settings: DockerSettings,
    init_missing: Arc<AtomicBool>,
    /// The engine refused a writable-layer size once: not asked again.
    disk_unsupported: Arc<AtomicBool>,
    build_supported: bool,
    egress_supported: bool,
    pub(crate) reporter: Arc<dyn DriverObserver>,
    store_scope: Option<String>,
    /// Asked once, when first needed: Podman's /info takes seconds, so
    /// connecting (every `iterion` verb) does not ask it.
    footprint: Arc<tokio::sync::OnceCell<iterion_core::driver::HostFootprint>>,
}

impl std::fmt::Debug for DockerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerDriver")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("version", &self.version)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) fn engine_err(
    operation: &'static str,
) -> impl FnOnce(bollard::errors::Error) -> DriverError {
    move |e| DriverError::Engine {
        operation,
        source: Box::new(e),
    }
}

/// HTTP status of an engine answer, when it is one.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The engine did not answer at all: its socket refused the connection or
/// vanished (a killed or restarted daemon), as opposed to an API error. A
/// hyper client error means no HTTP response came back (connect refused,
/// or `SendRequest` on a pooled connection the dead daemon closed).
pub(crate) fn engine_unreachable(e: &bollard::errors::Error) -> bool {
    use std::io::ErrorKind;
    // Out of descriptors is this process's state, not the engine's: the
    // sandbox is still there (issue 19 item 9: a flood of proxy connections
    // once made every exec read as SANDBOX_LOST).
    let exhausted = match e {
        // Transparent: its `source` is the io::Error's own, not the io::Error.
        bollard::errors::Error::IOError { err } => descriptors_exhausted(err),
        other => descriptors_exhausted(other),
    };
    if exhausted {
        return false;
    }
    match e {
        bollard::errors::Error::HyperLegacyError { .. } => true,
        bollard::errors::Error::IOError { err } => matches!(
            err.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::NotFound
                | ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Whether `EMFILE` or `ENFILE` is anywhere in the error's source chain.
pub(crate) fn descriptors_exhausted(e: &(dyn std::error::Error + 'static)) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(ENFILE | EMFILE)) {
                return true;
            }
            // A wrapping io::Error's `source` skips the error it wraps.
            if let Some(inner) = io.get_ref() {
                cur = Some(inner);
                continue;
            }
        }
        cur = err.source();
    }
    false
}

pub(crate) fn message_of(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn label_filter(extra: Option<String>) -> HashMap<String, Vec<String>> {
    let mut labels = vec![format!("{MANAGED_LABEL}=true")];
    labels.extend(extra);
    HashMap::from([("label".to_owned(), labels)])
}

impl DockerDriver {
    /// Connect to one endpoint and ask the engine who it is (bounded by
    /// `settings.probe_timeout`).
    pub async fn connect(endpoint: &str, settings: DockerSettings) -> Result<Self, DriverError> {
        let endpoint = Endpoint::parse(endpoint)?;
        let docker = match &endpoint {
            Endpoint::Unix(path) => {
                Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, &API_VERSION)
            }
            Endpoint::Tcp(addr) => {
                Docker::connect_with_http(addr, CLIENT_TIMEOUT_SECS, &API_VERSION)
            }
        }
        .map_err(|e| DriverError::Unavailable {
            reason: format!("{}: {e}", endpoint.url()),
        })?;
        let pinged = ping_engine(&endpoint, settings.probe_timeout).await?;
        let name = if pinged.podman {
            DriverName::Podman
        } else {
            DriverName::Docker
        };
        // Both engines need the host rules (see firewall.rs), so a local
        // engine and a host that accepts them.
        let egress_supported = settings.egress_enforce
            && endpoint.is_local()
            && firewall::egress_host_support().await.rules.is_ok();
        Ok(Self {
            docker,
            name,
            endpoint,
            version: pinged.version,
            settings,
            init_missing: Arc::new(AtomicBool::new(false)),
            disk_unsupported: Arc::new(AtomicBool::new(false)),
            // Podman 4.3's compat /build works offline for FROM scratch
            // (tests/integration: podman_builds_from_scratch_offline).
            build_supported: true,
            egress_supported,
            reporter: Arc::new(NullObserver),
            store_scope: None,
            footprint: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// Find an engine from an environment snapshot: `DOCKER_HOST` alone when
    /// set; otherwise the standard Docker sockets, then rootful and rootless
    /// Podman. Each probe is bounded by the probe timeout.
    pub async fn discover(env: &BTreeMap<String, String>) -> Result<Self, DriverError> {
        let settings = DockerSettings::from_env(env).map_err(|e| DriverError::Unavailable {
            reason: e.to_string(),
        })?;
        let candidates = discovery_candidates(env);
        let mut tried = Vec::new();
        for candidate in candidates {
            match Self::connect(&candidate, settings.clone()).await {
                Ok(driver) => return Ok(driver),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(DriverError::Unavailable {
            reason: format!("no docker or podman engine answered ({})", tried.join("; ")),
        })
    }

    /// Every distinct engine that answers (at most one `docker` and one
    /// `podman`), for `doctor` and the driver factory: `DOCKER_HOST` first,
    /// then `CONTAINER_HOST` (Podman's variable), then the standard
    /// sockets. Probes are bounded and run one after another.
    pub async fn discover_all(env: &BTreeMap<String, String>) -> Result<Vec<Self>, DriverError> {
        let settings = DockerSettings::from_env(env).map_err(|e| DriverError::Unavailable {
            reason: e.to_string(),
        })?;
        let mut candidates = Vec::new();
        for var in ["DOCKER_HOST", "CONTAINER_HOST"] {
            if let Some(v) = env.get(var).filter(|v| !v.trim().is_empty()) {
                candidates.push(v.clone());
            }
        }
        let mut without_host = env.clone();
        without_host.remove("DOCKER_HOST");
        candidates.extend(discovery_candidates(&without_host));
        let mut found: Vec<Self> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for candidate in candidates {
            if !seen.insert(candidate.clone()) {
                continue;
            }
            if let Ok(driver) = Self::connect(&candidate, settings.clone()).await
                && !found.iter().any(|d| d.name == driver.name)
            {
                found.push(driver);
            }
        }
        Ok(found)
    }

    /// Scope the driver to one run store: every resource it creates carries
    /// `iterion.io/store=<scope>`, and [`Driver::list_managed`] lists only
    /// resources of that scope. Several stores share one engine (the default
    /// store is `.iterion` under each project), and a store that never knew
    /// a run cannot confirm it absent (facts §5.5: any doubt keeps) — without
    /// the scope, a run in one project reaped another project's live sandbox.
    pub fn with_store_scope(mut self, scope: impl Into<String>) -> Self {
        self.store_scope = Some(scope.into());
        self
    }

    fn in_scope(&self, labels: Option<&HashMap<String, String>>) -> bool {
        match &self.store_scope {
            None => true,
            Some(scope) => labels.and_then(|l| l.get(STORE_LABEL)) == Some(scope),
        }
    }

    /// Report cleanup problems (never surfaced as run failures) here.
    pub fn with_reporter(mut self, reporter: Arc<dyn DriverObserver>) -> Self {
        self.reporter = reporter;
        self
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Settings in use.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    /// Whether this engine can bound a sandbox's writable layer (doctor):
    /// `Ok(detail)` or `Err(reason)`.
    pub async fn writable_layer_support(&self) -> Result<String, String> {
        crate::rawlist::writable_layer_support(&self.endpoint).await
    }

    /// The raw engine client (benchmarks and tests compare against it).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Whether host binds are impossible or forbidden (ADR-143 bindless).
    pub fn bindless(&self) -> bool {
        !self.endpoint.is_local() || self.settings.binds == BindsMode::None
    }

    /// Inspect the image; pull it only when missing, bounded by
    /// `ITERION_SANDBOX_PULL_TIMEOUT`.
    pub async fn ensure_image(
        &self,
        image: &str,
        observer: &dyn DriverObserver,
    ) -> Result<(), DriverError> {
        use iterion_core::Driver;
        if self.image_present(image).await? {
            return Ok(());
        }
        observer.log(OutputStream::System, &format!("pulling image {image}"));
        self.pull(image, observer).await?;
        if !self.image_present(image).await? {
            return Err(DriverError::ImageUnavailable {
                image: image.to_owned(),
                reason: "the pull finished but the image is still missing".to_owned(),
            });
        }
        Ok(())
    }

    async fn pull(&self, image: &str, observer: &dyn DriverObserver) -> Result<(), DriverError> {
        let options = CreateImageOptions {
            from_image: Some(image.to_owned()),
            ..CreateImageOptions::default()
        };
        let mut stream = self.docker.create_image(Some(options), None, None);
        let work = async {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(info) => observer.progress(Progress::Pull {
                        image: image.to_owned(),
                        status: info.status.unwrap_or_default(),
                        current: info
                            .progress_detail
                            .as_ref()
                            .and_then(|p| p.current)
                            .and_then(|v| u64::try_from(v).ok()),
                        total: info
                            .progress_detail
                            .as_ref()
                            .and_then(|p| p.total)
                            .and_then(|v| u64::try_from(v).ok()),
                    }),
                    Err(e) => {
                        return Err(DriverError::ImageUnavailable {
                            image: image.to_owned(),
                            reason: format!(
                                "not present locally and the pull failed: {}",
                                message_of(&e)
                            ),
                        });
                    }
                }
            }
            Ok(())
        };
        tokio::time::timeout(self.settings.pull_timeout, work)
            .await
            .map_err(|_| DriverError::PhaseTimeout {
                phase: "pull",
                timeout: self.settings.pull_timeout,
                variable: PULL_TIMEOUT_ENV,
            })?
    }

    fn run_labels(&self, info: &RunInfo) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            (MANAGED_LABEL.to_owned(), "true".to_owned()),
            (RUN_ID_LABEL.to_owned(), info.run_id.as_str().to_owned()),
        ]);
        if let Some(scope) = &self.store_scope {
            labels.insert(STORE_LABEL.to_owned(), scope.clone());
        }
        if let Some(name) = &info.run_name {
            labels.insert(RUN_NAME_LABEL.to_owned(), name.clone());
        }
        if let Some(owner) = own_owner_label() {
            labels.insert(OWNER_LABEL.to_owned(), owner);
        }
        labels
    }

    /// Create, start and post-create; on error everything created so far
    /// has already been recorded in `res` for the caller to clean up.
    async fn start_inner(
        &self,
        plan: &LaunchPlan,
        info: &RunInfo,
        observer: &dyn DriverObserver,
        res: &mut RunResources,
    ) -> Result<Option<crate::identity::Identity>, DriverError> {
        let image = plan.image.clone().ok_or_else(|| DriverError::SpecRefused {
            reason: "the plan names no image".to_owned(),
        })?;
        let labels = self.run_labels(info);
        // The host-root guard the policy decided (issue 19 item 4): a
        // pinned non-root identity, or root under the seccomp profile.
        let resolved = crate::identity::resolve(self, &image, plan, &labels).await?;
        if let Some(id) = resolved.runs_as {
            crate::identity::hand_over_host(plan, id)?;
        }
        let identity = resolved.pinned;
        let non_root_user = resolved.runs_as.is_some();
        let guard = plan.limits.host_root_guard;
        let seccomp = crate::security::seccomp_option(guard, self.name)?;
        let mut security_opt = vec!["no-new-privileges".to_owned()];
        security_opt.extend(seccomp.as_ref().map(|s| s.value.clone()));
        let run = info.run_id.as_str();

        let mut env = plan.env.clone();
        let mut network_mode = None;
        let mut networking = None;
        let mut extra_hosts = Vec::new();
        let mut sysctls = None;
        if let Some(EgressAttachment {
            proxy_port,
            token,
            enforce,
        }) = &plan.egress
        {
            if *enforce && !self.egress_supported {
                // Never fail open: refusing beats an unconfined sandbox.
                return Err(DriverError::Unsupported {
                    driver: self.name,
                    feature: "egress enforcement",
                });
            }
            let proxy_host = if *enforce {
                // Usually created by `egress_binding` (the proxy listens on
                // its gateway); created here for a caller that skipped it.
                let (net, id) = self.run_network(run, &labels).await?;
                res.network = Some(net.clone());
                let gateway = self.network_gateway(&net).await?;
                let bridge = match self.name {
                    DriverName::Podman => {
                        crate::rawlist::podman_interface(&self.endpoint, &net).await?
                    }
                    _ => firewall::docker_bridge(&id),
                };
                res.bridge = Some(bridge.clone());
                res.firewall_run = Some(run.to_owned());
                firewall::confine(&bridge, gateway, *proxy_port, &plan.gateway_ports, run).await?;
                if firewall::ipv6_in_kernel() {
                    sysctls = Some(crate::security::ipv6_off_sysctls());
                }
                network_mode = Some(net.clone());
                networking = Some(NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(net, EndpointSettings::default())])),
                });
                // On an internal network `host-gateway` (docker0) is
                // unreachable; the alias must point at the one reachable
                // address, the network's gateway, where the proxy listens.
                extra_hosts.push(format!("host.docker.internal:{gateway}"));
                gateway.to_string()
            } else {
                extra_hosts.push(self.host_gateway_alias().await?);
                "host.docker.internal".to_owned()
            };
            let url = format!("http://t:{token}@{proxy_host}:{proxy_port}");
            res.proxy_host = Some(proxy_host.clone());
            // Upserted over the plan's env (facts §5.3, k8s: proxy env wins).
            for key in iterion_core::plan::PROXY_ENV_VARS {
                env.insert(key.to_owned(), url.clone());
            }
            for key in ["NO_PROXY", "no_proxy"] {
                env.insert(key.to_owned(), "localhost,127.0.0.1".to_owned());
            }
        } else if plan.host_gateway_alias {
            extra_hosts.push(self.host_gateway_alias().await?);
        }

        let mut mounts = Vec::new();
        for (n, m) in plan.mounts.iter().enumerate() {
            let (typ, source) = match m.kind {
                MountKind::Bind => (MountType::BIND, m.source.clone()),
                MountKind::Volume => match &m.source {
                    Some(s) => (MountType::VOLUME, Some(s.clone())),
                    None => {
                        let name = format!("iterion-{run}-{n}");
                        self.docker
                            .create_volume(VolumeCreateRequest {
                                name: Some(name.clone()),
                                labels: Some(labels.clone()),
                                ..VolumeCreateRequest::default()
                            })
                            .await
                            .map_err(engine_err("create volume"))?;
                        res.volumes.push(name.clone());
                        (MountType::VOLUME, Some(name))
                    }
                },
                MountKind::Tmpfs => (MountType::TMPFS, None),
                MountKind::Pvc | MountKind::ConfigMap | MountKind::Secret => {
                    return Err(DriverError::Unsupported {
                        driver: self.name,
                        feature: "cluster mounts (pvc, configmap, secret)",
                    });
                }
            };
            mounts.push(EngineMount {
                target: Some(m.target.clone()),
                source,
                typ: Some(typ),
                read_only: Some(m.readonly),
                tmpfs_options: match (m.kind, m.size) {
                    (MountKind::Tmpfs, Some(size)) => Some(MountTmpfsOptions {
                        size_bytes: i64::try_from(size.0).ok(),
                        ..MountTmpfsOptions::default()
                    }),
                    _ => None,
                },
                ..EngineMount::default()
            });
        }

        // A layer size is asked only of an engine not known to refuse it.
        let mut disk = plan.limits.writable_layer;
        if disk.is_some() && self.disk_unsupported.load(Ordering::Relaxed) {
            res.unenforced.push(iterion_core::driver::UnenforcedLimit {
                limit: "writable_layer".to_owned(),
                reason: "this engine's storage driver refused a writable-layer size earlier"
                    .to_owned(),
            });
            disk = None;
        }
        // `plan.limits` are the effective ones (see `prepare`). A byte count
        // past i64 saturates: never dropped to "no limit".
        let bytes =
            |b: Option<iterion_core::ByteSize>| b.map(|b| i64::try_from(b.0).unwrap_or(i64::MAX));
        let host_config = |init: bool, disk: Option<iterion_core::ByteSize>| HostConfig {
            mounts: Some(mounts.clone()),
            init: Some(init),
            security_opt: Some(security_opt.clone()),
            // -1: unlimited, only when the operator asked for it.
            pids_limit: Some(plan.limits.pids.unwrap_or(-1)),
            storage_opt: disk.map(|d| HashMap::from([("size".to_owned(), d.0.to_string())])),
            memory: bytes(plan.limits.memory),
            memory_swap: bytes(plan.limits.memory_swap),
            nano_cpus: plan.limits.nano_cpus,
            privileged: Some(false),
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: Some(crate::security::capabilities(guard, non_root_user)),
            sysctls: sysctls.clone(),
            extra_hosts: (!extra_hosts.is_empty()).then(|| extra_hosts.clone()),
            network_mode: network_mode.clone(),
            ..HostConfig::default()
        };
        let body = |init: bool, disk: Option<iterion_core::ByteSize>| ContainerCreateBody {
            image: Some(image.clone()),
            user: identity.map(|i| i.user()).or_else(|| plan.user.clone()),
            working_dir: Some(plan.workdir.clone()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels.clone()),
            entrypoint: Some(if init {
                SLEEP_FOREVER.iter().map(|s| (*s).to_owned()).collect()
            } else {
                vec!["sh".to_owned(), "-c".to_owned(), SHELL_REAPER.to_owned()]
            }),
            cmd: Some(Vec::new()),
            host_config: Some(host_config(init, disk)),
            networking_config: networking.clone(),
            ..ContainerCreateBody::default()
        };
        // Immediately before create: a source swapped since the judgement
        // cannot win (issue 19 item 1).
        crate::footprint::recheck_binds(plan, &self.host_footprint().await)?;
        let name = container_name(run);
        res.container = Some(name.clone());
        let use_init = !self.init_missing.load(Ordering::Relaxed);
        let mut first = self
            .create_container(&name, body(use_init, disk), observer)
            .await;
        if disk.is_some()
            && let Err(e) = &first
            && storage_opt_refused(e)
        {
            // The storage driver cannot bound the layer (overlay on ext4 on
            // both engines here): run without, and say so for every run.
            let reason = e.to_string();
            self.disk_unsupported.store(true, Ordering::Relaxed);
            observer.log(
                OutputStream::System,
                &format!("writable layer unbounded: {reason}"),
            );
            res.unenforced.push(iterion_core::driver::UnenforcedLimit {
                limit: "writable_layer".to_owned(),
                reason,
            });
            disk = None;
            first = self
                .create_container(&name, body(use_init, disk), observer)
                .await;
        }
        // An engine that refuses the guard's profile refuses the run: it
        // never runs without it.
        if seccomp.is_some()
            && let Err(e) = &first
            && e.to_string().contains("seccomp")
        {
            return Err(DriverError::GuardUnavailable {
                reason: format!("the engine refused the seccomp profile: {e}"),
            });
        }
        let first = match first {
            Ok(()) => self
                .docker
                .start_container(&name, None)
                .await
                .map_err(engine_err("start container")),
            Err(e) => Err(e),
        };
        if let Err(e) = first {
            let text = e.to_string();
            // Podman without catatonit refuses `init: true` ("container-init
            // binary not found"); PID 1 becomes the reaping shell instead,
            // never a bare sleep.
            if use_init && (text.contains("container-init") || text.contains("catatonit")) {
                self.init_missing.store(true, Ordering::Relaxed);
                observer.log(
                    OutputStream::System,
                    "engine has no init binary; using a reaping shell as PID 1",
                );
                self.remove_container_quiet(&name).await;
                self.create_container(&name, body(false, disk), observer)
                    .await?;
                self.docker
                    .start_container(&name, None)
                    .await
                    .map_err(engine_err("start container"))?;
            } else {
                return Err(e);
            }
        }
        // The bridge exists now (Podman creates it at the first start);
        // nothing has run in the container but its sleeping PID 1.
        if let (Some(bridge), Some(run)) = (&res.bridge, &res.firewall_run) {
            firewall::seal_bridge(bridge, run).await?;
        }
        observer.log(
            OutputStream::System,
            &format!("started sandbox container {name} from {image}"),
        );
        Ok(identity)
    }

    async fn create_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
        observer: &dyn DriverObserver,
    ) -> Result<(), DriverError> {
        let options = || CreateContainerOptions {
            name: Some(name.to_owned()),
            ..CreateContainerOptions::default()
        };
        match self
            .docker
            .create_container(Some(options()), body.clone())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(409) || message_of(&e).contains("already in use") => {
                observer.log(
                    OutputStream::System,
                    &format!("removing stale container {name} and retrying once"),
                );
                self.remove_container_quiet(name).await;
                self.docker
                    .create_container(Some(options()), body)
                    .await
                    .map(|_| ())
                    .map_err(engine_err("create container"))
            }
            Err(e) if status_of(&e) == Some(404) => Err(DriverError::ImageUnavailable {
                image: body.image.unwrap_or_default(),
                reason: message_of(&e),
            }),
            Err(e) => Err(engine_err("create container")(e)),
        }
    }

    async fn remove_container_quiet(&self, name: &str) {
        let _ = self
            .docker
            .remove_container(
                name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                }),
            )
            .await;
    }

    /// The per-run internal network `iterion-<run>` (name, id): found again
    /// when `egress_binding` created it, created otherwise. A network of that
    /// name this run did not label is refused, never joined.
    async fn run_network(
        &self,
        run: &str,
        labels: &HashMap<String, String>,
    ) -> Result<(String, String), DriverError> {
        let net = format!("iterion-{run}");
        match self.docker.inspect_network(&net, None).await {
            Ok(found) => {
                let ours = found
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(RUN_ID_LABEL))
                    .is_some_and(|r| r == run);
                if !ours || found.internal != Some(true) {
                    return Err(DriverError::SpecRefused {
                        reason: format!(
                            "network {net} exists and is not this run's internal network"
                        ),
                    });
                }
                return Ok((net, found.id.unwrap_or_default()));
            }
            Err(e) if status_of(&e) == Some(404) => {}
            Err(e) => return Err(engine_err("inspect network")(e)),
        }
        let created = self
            .docker
            .create_network(NetworkCreateRequest {
                name: net.clone(),
                internal: Some(true),
                labels: Some(labels.clone()),
                ..NetworkCreateRequest::default()
            })
            .await
            .map_err(engine_err("create network"))?;
        Ok((net, created.id))
    }

    /// The `host.docker.internal` entry. Podman 4.3 does not know the
    /// `host-gateway` keyword (it writes it verbatim into /etc/hosts), so
    /// there the alias points at its default network's gateway.
    async fn host_gateway_alias(&self) -> Result<String, DriverError> {
        match self.name {
            DriverName::Podman => Ok(format!(
                "host.docker.internal:{}",
                self.network_gateway("podman").await?
            )),
            _ => Ok("host.docker.internal:host-gateway".to_owned()),
        }
    }

    async fn network_gateway(&self, net: &str) -> Result<std::net::Ipv4Addr, DriverError> {
        let inspect = self
            .docker
            .inspect_network(net, None)
            .await
            .map_err(engine_err("inspect network"))?;
        inspect
            .ipam
            .and_then(|i| i.config)
            .into_iter()
            .flatten()
            .filter_map(|c| c.gateway)
            .find_map(|g| g.parse::<std::net::Ipv4Addr>().ok())
            .ok_or_else(|| DriverError::Engine {
                operation: "inspect network",
                source: format!("network {net} has no IPv4 gateway").into(),
            })
    }
}

/// Whether `e` is an engine refusing `--storage-opt size` (dockerd 20.10
/// and Podman 4.3 both say "--storage-opt is supported only for overlay
/// over xfs with 'pquota' mount option").
fn storage_opt_refused(e: &DriverError) -> bool {
    e.to_string().contains("storage-opt")
}

/// `GET /_ping`, bounded by the probe timeout.
async fn ping_engine(
    endpoint: &Endpoint,
    bound: std::time::Duration,
) -> Result<crate::rawlist::Pinged, DriverError> {
    tokio::time::timeout(bound, crate::rawlist::ping(endpoint))
        .await
        .map_err(|_| DriverError::Unavailable {
            reason: format!("{}: no answer within {bound:?}", endpoint.url()),
        })?
        .map_err(|e| DriverError::Unavailable {
            reason: format!("{}: {e}", endpoint.url()),
        })
}

/// `iterion-<run id>` truncated to 64 characters (facts §5.3).
pub(crate) fn container_name(run: &str) -> String {
    let mut name = format!("iterion-{run}");
    name.truncate(64);
    name
}

fn discovery_candidates(env: &BTreeMap<String, String>) -> Vec<String> {
    if let Some(host) = env.get("DOCKER_HOST").filter(|h| !h.trim().is_empty()) {
        return vec![host.clone()];
    }
    let mut out = vec![
        "unix:///var/run/docker.sock".to_owned(),
        "unix:///run/docker.sock".to_owned(),
    ];
    if let Some(home) = env.get("HOME") {
        out.push(format!("unix://{home}/.docker/run/docker.sock"));
    }
    out.push("unix:///run/podman/podman.sock".to_owned());
    if let Some(xdg) = env.get("XDG_RUNTIME_DIR") {
        out.push(format!("unix://{xdg}/podman/podman.sock"));
        out.push(format!("unix://{xdg}/docker.sock"));
    }
    out
}

#[async_trait]
impl Driver for DockerDriver {
    fn name(&self) -> DriverName {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            image: true,
            build: self.build_supported,
            mounts: true,
            host_bind_mounts: !self.bindless(),
            network_policy: false,
            egress_enforcement: self.egress_supported,
            post_create: true,
            remote_user: true,
            read_back_drain: true,
            archive_in: true,
            // Bindless: the workspace is a per-run volume, copied in at
            // start and exported back at teardown (issue 14 item 2).
            workspace_export: self.bindless(),
            // Issue 17: the runtime installs the run's CA through the
            // archive API (export the image's roots, import the bundle).
            tls_inspection: true,
        }
    }

    async fn prepare(
        &self,
        plan: &LaunchPlan,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        iterion_sandbox::guards::check_launch_plan(plan).map_err(|v| DriverError::SpecRefused {
            reason: v.to_string(),
        })?;
        crate::footprint::recheck_binds(plan, &self.host_footprint().await)?;
        if self.bindless()
            && let Some(m) = plan.mounts.iter().find(|m| m.is_host_bind())
        {
            return Err(DriverError::SpecRefused {
                reason: format!(
                    "host bind {} is impossible on this engine (bindless mode); the policy must drop it",
                    m.target
                ),
            });
        }
        // The prepared plan carries the effective limits (the product
        // defaults after the operator's variables), so `sandbox_started`
        // shows what the container really gets.
        // The host-root guard is the policy's decision, not a limit the
        // operator sets: it rides through.
        let mut effective = plan.clone();
        effective.limits = iterion_core::plan::Limits {
            host_root_guard: plan.limits.host_root_guard,
            ..self.settings.limits.clone()
        };
        let plan = &effective;
        if plan.build.is_some() {
            if !self.build_supported {
                return Err(DriverError::Unsupported {
                    driver: self.name,
                    feature: "build",
                });
            }
            return Ok(Prepared {
                driver: self.name,
                plan: plan.clone(),
            });
        }
        let image = plan
            .image
            .as_deref()
            .ok_or_else(|| DriverError::SpecRefused {
                reason: "the plan names neither an image nor a build".to_owned(),
            })?;
        self.ensure_image(image, observer).await?;
        Ok(Prepared {
            driver: self.name,
            plan: plan.clone(),
        })
    }

    async fn build(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        if prepared.driver != self.name {
            return Err(DriverError::ForeignPrepared {
                expected: self.name,
                actual: prepared.driver,
            });
        }
        let Some(build) = prepared.plan.build.clone() else {
            return Ok(prepared);
        };
        let workspace = info.host_workspace.clone();
        let checked = tokio::task::spawn_blocking(move || check_context(&build, &workspace))
            .await
            .map_err(|e| DriverError::Io {
                operation: "check build context".to_owned(),
                source: std::io::Error::other(e),
            })??;
        let dockerfile_name = checked.dockerfile_name.clone();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
        let writer = tokio::task::spawn_blocking(move || {
            let result = write_context(&checked, ChannelWriter::new(tx.clone()));
            if let Err(e) = &result {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
            result
        });
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let tag = build_tag(info.run_id.as_str());
        let args = prepared
            .plan
            .build
            .as_ref()
            .map(|b| b.args.clone())
            .unwrap_or_default();
        let options = BuildImageOptions {
            dockerfile: dockerfile_name,
            t: Some(tag.clone()),
            rm: true,
            forcerm: true,
            buildargs: (!args.is_empty()).then(|| args.into_iter().collect()),
            ..BuildImageOptions::default()
        };
        observer.log(OutputStream::System, &format!("building image {tag}"));
        let mut tail = String::new();
        let mut stream =
            self.docker
                .build_image(options, None, Some(bollard::body_try_stream(body)));
        let mut failure = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(step) => {
                    if let Some(text) = step.stream.or(step.status) {
                        for line in text.lines().filter(|l| !l.trim().is_empty()) {
                            observer.progress(Progress::Build {
                                line: line.to_owned(),
                            });
                            push_tail(&mut tail, line);
                        }
                    }
                    if let Some(detail) = step.error_detail {
                        let msg = detail.message.unwrap_or_default();
                        push_tail(&mut tail, &msg);
                        failure = Some(msg);
                    }
                }
                Err(e) => {
                    push_tail(&mut tail, &message_of(&e));
                    failure = Some(message_of(&e));
                    break;
                }
            }
        }
        let written = writer.await;
        if failure.is_some() {
            return Err(DriverError::BuildFailed { stderr_tail: tail });
        }
        // A context that could not be read is that error, not a build failure.
        match written {
            Ok(Err(e)) => return Err(e),
            Err(e) => {
                return Err(DriverError::Io {
                    operation: "tar build context".to_owned(),
                    source: std::io::Error::other(e),
                });
            }
            Ok(Ok(())) => {}
        }
        if failure.is_some() || !self.image_present(&tag).await? {
            return Err(DriverError::BuildFailed { stderr_tail: tail });
        }
        let mut plan = prepared.plan;
        plan.image = Some(tag);
        plan.build = None;
        Ok(Prepared {
            driver: self.name,
            plan,
        })
    }

    async fn egress_binding(
        &self,
        info: &RunInfo,
        enforce: bool,
    ) -> Result<EgressBinding, DriverError> {
        // Podman gives a network's gateway to its bridge only at the first
        // container start, after the proxy binds; dockerd at creation.
        let not_yet_configured = self.name == DriverName::Podman;
        if enforce {
            if !self.egress_supported {
                return Err(DriverError::Unsupported {
                    driver: self.name,
                    feature: "egress enforcement",
                });
            }
            let labels = self.run_labels(info);
            let (net, _) = self.run_network(info.run_id.as_str(), &labels).await?;
            let gateway = self.network_gateway(&net).await?;
            return Ok(EgressBinding {
                address: gateway.into(),
                not_yet_configured,
                network: Some(net),
            });
        }
        // Advisory: the container is on the engine's default network and
        // reaches the host at that network's gateway (`host.docker.internal`).
        // A remote engine's containers cannot reach this host at all.
        if !self.endpoint.is_local() {
            return Ok(EgressBinding::loopback());
        }
        let default_network = match self.name {
            DriverName::Podman => "podman",
            _ => "bridge",
        };
        Ok(EgressBinding {
            address: self.network_gateway(default_network).await?.into(),
            not_yet_configured,
            network: None,
        })
    }

    async fn start(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError> {
        if prepared.driver != self.name {
            return Err(DriverError::ForeignPrepared {
                expected: self.name,
                actual: prepared.driver,
            });
        }
        let plan = prepared.plan;
        let mut res = RunResources::default();
        let started = self.start_inner(&plan, info, observer, &mut res).await;
        let run = DockerRun::new(self.clone(), res, plan.workdir.clone());
        let settled = match started {
            Ok(pinned) => crate::identity::settle(&run, &plan, pinned).await,
            Err(e) => Err(e),
        };
        let owner = match settled {
            Ok(owner) => owner,
            Err(e) => {
                let _ = run.cleanup().await;
                return Err(e);
            }
        };
        // A copy-based workspace is there before the first command the
        // workflow runs (`post_create` included).
        if let Some(copy) = &plan.workspace_copy {
            observer.log(
                OutputStream::System,
                &format!("copying the workspace {} into the sandbox", copy.host),
            );
            let owner = owner.map(|id| (id.uid, id.gid));
            match iterion_readback::workspace::copy_into(
                &run,
                copy,
                owner,
                self.settings.workspace_copy_timeout,
            )
            .await
            {
                Ok(stats) => observer.log(
                    OutputStream::System,
                    &format!(
                        "copied {} file(s), {} bytes ({} directories and links; {} sockets, fifos or devices left out)",
                        stats.files, stats.bytes, stats.others, stats.skipped
                    ),
                ),
                Err(e) => {
                    let _ = run.cleanup().await;
                    return Err(e);
                }
            }
        }
        if let Some(snippet) = plan.post_create.as_deref()
            && let Err(e) = iterion_core::driver::post_create(
                &run,
                snippet,
                observer,
                plan.egress.iter().map(|e| e.token.clone()).collect(),
                iterion_core::driver::PostCreateBound {
                    timeout: self.settings.post_create_timeout,
                    expiry: tokio::time::sleep(self.settings.post_create_timeout),
                },
            )
            .await
        {
            let _ = run.cleanup().await;
            return Err(e);
        }
        Ok(Box::new(run))
    }

    async fn ping(&self) -> Result<EngineInfo, DriverError> {
        let pinged = ping_engine(&self.endpoint, self.settings.probe_timeout).await?;
        Ok(EngineInfo {
            driver: self.name,
            endpoint: self.endpoint.url(),
            version: pinged.version,
            api_version: format!(
                "{}.{}",
                API_VERSION.major_version, API_VERSION.minor_version
            ),
            local: !self.bindless(),
        })
    }

    async fn host_footprint(&self) -> iterion_core::driver::HostFootprint {
        self.footprint
            .get_or_init(|| crate::footprint::probe(&self.docker, &self.endpoint))
            .await
            .clone()
    }

    async fn image_present(&self, image: &str) -> Result<bool, DriverError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(engine_err("inspect image")(e)),
        }
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        let mut out = Vec::new();
        for c in crate::rawlist::managed_containers(&self.endpoint).await? {
            if !self.in_scope(c.labels.as_ref()) {
                continue;
            }
            let run_id = c.labels.as_ref().and_then(|l| l.get(RUN_ID_LABEL)).cloned();
            let owner = owner_of(c.labels.as_ref());
            out.push(ManagedResource {
                kind: ResourceKind::Container,
                id: c.id,
                name: c
                    .names
                    .into_iter()
                    .next()
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                run_id: run_id.unwrap_or_default(),
                owner,
            });
        }
        let networks = self
            .docker
            .list_networks(Some(ListNetworksOptions {
                filters: Some(label_filter(None)),
            }))
            .await
            .map_err(engine_err("list networks"))?;
        for n in networks {
            if !self.in_scope(n.labels.as_ref()) {
                continue;
            }
            out.push(ManagedResource {
                kind: ResourceKind::Network,
                id: n.id.unwrap_or_default(),
                run_id: n
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(RUN_ID_LABEL))
                    .cloned()
                    .unwrap_or_default(),
                owner: owner_of(n.labels.as_ref()),
                name: n.name.unwrap_or_default(),
            });
        }
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(label_filter(None)),
            }))
            .await
            .map_err(engine_err("list volumes"))?;
        for v in volumes.volumes.into_iter().flatten() {
            if !self.in_scope(Some(&v.labels)) {
                continue;
            }
            out.push(ManagedResource {
                kind: ResourceKind::Volume,
                id: v.name.clone(),
                run_id: v.labels.get(RUN_ID_LABEL).cloned().unwrap_or_default(),
                owner: owner_of(Some(&v.labels)),
                name: v.name,
            });
        }
        Ok(out)
    }

    async fn remove_managed(&self, resource: &ManagedResource) -> Result<(), DriverError> {
        let target = if resource.id.is_empty() {
            resource.name.as_str()
        } else {
            resource.id.as_str()
        };
        let result = match resource.kind {
            ResourceKind::Container => self
                .docker
                .remove_container(
                    target,
                    Some(RemoveContainerOptions {
                        force: true,
                        v: true,
                        link: false,
                    }),
                )
                .await
                .map_err(|e| (e, "remove container")),
            ResourceKind::Network => {
                if self.endpoint.is_local() && firewall::nft().is_some() {
                    // The rules are named by the run; a network without the
                    // label is still named `iterion-<run>`.
                    let run = match resource.run_id.as_str() {
                        "" => resource.name.strip_prefix("iterion-").unwrap_or_default(),
                        r => r,
                    };
                    firewall::release(run).await?;
                }
                self.docker
                    .remove_network(target)
                    .await
                    .map_err(|e| (e, "remove network"))
            }
            ResourceKind::Volume => self
                .docker
                .remove_volume(target, Some(RemoveVolumeOptions { force: true }))
                .await
                .map_err(|e| (e, "remove volume")),
            // Never listed by an engine driver: the runtime's reaper owns them.
            ResourceKind::HostDir => {
                return Err(DriverError::Unsupported {
                    driver: self.name,
                    feature: "removing host directories",
                });
            }
            // A Kubernetes object: this driver never lists one.
            ResourceKind::Secret => {
                return Err(DriverError::Unsupported {
                    driver: self.name,
                    feature: "removing a Kubernetes Secret",
                });
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err((e, _)) if status_of(&e) == Some(404) => Ok(()),
            // Another reaper pass of the same store (a run's background pass
            // and `iterion sandbox reap`) got there first: the goal is met.
            Err((e, _))
                if status_of(&e) == Some(409) && message_of(&e).contains("already in progress") =>
            {
                Ok(())
            }
            Err((e, op)) => Err(engine_err(op)(e)),
        }
    }
}

fn push_tail(tail: &mut String, line: &str) {
    const CAP: usize = 4096;
    tail.push_str(line);
    tail.push('\n');
    if tail.len() > CAP {
        let mut cut = tail.len() - CAP;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_label_round_trips() {
        let own = own_owner_label().expect("linux /proc");
        let owner = parse_owner(&own).expect("parse");
        assert_eq!(owner.pid, std::process::id());
        assert!(!owner.host.is_empty());
        assert_eq!(
            parse_owner("12:345@box-1"),
            Some(iterion_core::store::RunOwner {
                host: "box-1".into(),
                pid: 12,
                start_time: 345
            })
        );
        for bad in ["", "12@h", "x:1@h", "1:y@h", "1:2"] {
            assert_eq!(parse_owner(bad), None, "{bad}");
        }
    }

    #[test]
    fn endpoints() {
        assert!(
            Endpoint::parse("unix:///run/x.sock")
                .expect("ok")
                .is_local()
        );
        assert!(
            !Endpoint::parse("tcp://1.2.3.4:2375")
                .expect("ok")
                .is_local()
        );
        assert!(Endpoint::parse("ssh://me@host").is_err());
    }

    #[test]
    fn docker_host_wins_discovery() {
        let env = BTreeMap::from([("DOCKER_HOST".to_owned(), "tcp://x:1".to_owned())]);
        assert_eq!(discovery_candidates(&env), vec!["tcp://x:1".to_owned()]);
        let env = BTreeMap::from([("XDG_RUNTIME_DIR".to_owned(), "/run/user/1".to_owned())]);
        assert!(
            discovery_candidates(&env)
                .contains(&"unix:///run/user/1/podman/podman.sock".to_owned())
        );
    }

    #[test]
    fn descriptor_exhaustion_is_not_a_dead_engine() {
        let io = |errno| bollard::errors::Error::IOError {
            err: std::io::Error::from_raw_os_error(errno),
        };
        // EMFILE, ENFILE: the process, not the engine.
        assert!(!engine_unreachable(&io(24)));
        assert!(!engine_unreachable(&io(23)));
        // ECONNREFUSED, ENOENT: the engine is gone.
        assert!(engine_unreachable(&io(111)));
        assert!(engine_unreachable(&io(2)));
        // Wrapped one level down, as a client error carries it.
        let wrapped = std::io::Error::other(std::io::Error::from_raw_os_error(24));
        assert!(descriptors_exhausted(&wrapped));
    }

    #[test]
    fn names_truncate() {
        assert_eq!(container_name(&"a".repeat(63)).len(), 64);
    }
}
