//! [`DockerDriver`]: discovery, prepare (guards, inspect, bounded pull),
//! build, start and the trait's face of the managed-resource listing. It
//! is built on the shared [`Engine`] client; creating a run's container
//! is `create`, the leftovers are `managed`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use async_trait::async_trait;
use bollard::Docker;
use bollard::query_parameters::{BuildImageOptions, CreateImageOptions};
use futures_util::StreamExt;
use iterion_core::driver::{EngineInfo, ManagedResource, Progress};
use iterion_core::{
    Capabilities, Driver, DriverError, DriverName, DriverObserver, EgressBinding, LaunchPlan,
    OutputStream, Prepared, RunInfo, SandboxRun,
};

use crate::build::{ChannelWriter, build_tag, check_context, write_context};
use crate::endpoint::Endpoint;
use crate::engine::{Engine, discovery_candidates, engine_err, message_of, status_of};
use crate::firewall;
use crate::run::{DockerRun, RunResources};
use crate::settings::{BindsMode, DockerSettings, PULL_TIMEOUT_ENV};

/// The docker/podman driver. Cheap to clone; safe for concurrent runs.
#[derive(Clone)]
pub struct DockerDriver {
    pub(crate) engine: Engine,
    pub(crate) settings: DockerSettings,
    pub(crate) init_missing: Arc<AtomicBool>,
    /// The engine refused a writable-layer size once: not asked again.
    pub(crate) disk_unsupported: Arc<AtomicBool>,
    pub(crate) build_supported: bool,
    pub(crate) egress_supported: bool,
    pub(crate) store_scope: Option<String>,
}

impl std::fmt::Debug for DockerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerDriver")
            .field("name", &self.engine.name)
            .field("endpoint", &self.engine.endpoint)
            .field("version", &self.engine.version)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl DockerDriver {
    /// Connect to one endpoint and ask the engine who it is (bounded by
    /// `settings.probe_timeout`).
    pub async fn connect(endpoint: &str, settings: DockerSettings) -> Result<Self, DriverError> {
        let engine = Engine::connect(endpoint, settings.probe_timeout).await?;
        // Both engines need the host rules (see firewall.rs), so a local
        // engine and a host that accepts them.
        let egress_supported = settings.egress_enforce
            && engine.endpoint.is_local()
            && firewall::egress_host_support().await.rules.is_ok();
        Ok(Self {
            engine,
            settings,
            init_missing: Arc::new(AtomicBool::new(false)),
            disk_unsupported: Arc::new(AtomicBool::new(false)),
            // Podman 4.3's compat /build works offline for FROM scratch
            // (tests/integration: podman_builds_from_scratch_offline).
            build_supported: true,
            egress_supported,
            store_scope: None,
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
                && !found.iter().any(|d| d.engine.name == driver.engine.name)
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

    /// Report cleanup problems (never surfaced as run failures) here.
    pub fn with_reporter(mut self, reporter: Arc<dyn DriverObserver>) -> Self {
        self.engine.reporter = reporter;
        self
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.engine.endpoint
    }

    /// Settings in use.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    /// Whether this engine can bound a sandbox's writable layer (doctor):
    /// `Ok(detail)` or `Err(reason)`.
    pub async fn writable_layer_support(&self) -> Result<String, String> {
        crate::rawlist::writable_layer_support(&self.engine.endpoint).await
    }

    /// The raw engine client (benchmarks and tests compare against it).
    pub fn client(&self) -> &Docker {
        &self.engine.docker
    }

    /// Whether host binds are impossible or forbidden (ADR-143 bindless).
    pub fn bindless(&self) -> bool {
        !self.engine.endpoint.is_local() || self.settings.binds == BindsMode::None
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
        let mut stream = self.engine.docker.create_image(Some(options), None, None);
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
}

#[async_trait]
impl Driver for DockerDriver {
    fn name(&self) -> DriverName {
        self.engine.name
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
            // A bind delivers file secrets; bindless, none is delivered.
            secret_file_copy: false,
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
        crate::footprint::recheck_binds(plan, &self.engine.host_footprint().await)?;
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
                    driver: self.engine.name,
                    feature: "build",
                });
            }
            return Ok(Prepared {
                driver: self.engine.name,
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
            driver: self.engine.name,
            plan: plan.clone(),
        })
    }

    async fn build(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        if prepared.driver != self.engine.name {
            return Err(DriverError::ForeignPrepared {
                expected: self.engine.name,
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
            self.engine
                .docker
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
            driver: self.engine.name,
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
        let not_yet_configured = self.engine.name == DriverName::Podman;
        if enforce {
            if !self.egress_supported {
                return Err(DriverError::Unsupported {
                    driver: self.engine.name,
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
        if !self.engine.endpoint.is_local() {
            return Ok(EgressBinding::loopback());
        }
        let default_network = match self.engine.name {
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
        if prepared.driver != self.engine.name {
            return Err(DriverError::ForeignPrepared {
                expected: self.engine.name,
                actual: prepared.driver,
            });
        }
        let plan = prepared.plan;
        let mut res = RunResources::default();
        let started = self.start_inner(&plan, info, observer, &mut res).await;
        let run = DockerRun::new(self.engine.clone(), res, plan.workdir.clone());
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
        let pinged = self.engine.ping(self.settings.probe_timeout).await?;
        Ok(EngineInfo {
            driver: self.engine.name,
            endpoint: self.engine.endpoint.url(),
            version: pinged.version,
            api_version: Engine::api_version(),
            local: !self.bindless(),
        })
    }

    async fn host_footprint(&self) -> iterion_core::driver::HostFootprint {
        self.engine.host_footprint().await
    }

    async fn image_present(&self, image: &str) -> Result<bool, DriverError> {
        match self.engine.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(engine_err("inspect image")(e)),
        }
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        self.managed().await
    }

    async fn remove_managed(&self, resource: &ManagedResource) -> Result<(), DriverError> {
        self.remove(resource).await
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
