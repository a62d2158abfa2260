//! [`KubeDriver`]: discovery, prepare (guards and a dry render, no pull:
//! the kubelet pulls), start (Secrets → NetworkPolicy → Pod, the Ready
//! wait, the workspace copy, post_create), and the listing/removal of
//! labelled objects the reaper needs.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use iterion_core::driver::{
    EgressBinding, EngineInfo, ManagedResource, NullObserver, ResourceKind,
};
use iterion_core::store::RunOwner;
use iterion_core::{
    Capabilities, Driver, DriverError, DriverName, DriverObserver, LaunchPlan, MountKind,
    MountOrigin, OutputStream, Prepared, RunInfo, SandboxRun,
};
use iterion_sandbox::guards::DEFAULT_KUBE_USER;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Resource;

use crate::api::wait_ready;
use crate::discovery::{ConfigSource, load_config};
use crate::error::{DRIVER, K8sError};
use crate::manifest::{
    MANAGED_LABEL, OWNER_ANNOTATION, RUN_ID_LABEL, RenderOptions, RunObjects, STORE_LABEL,
    SecretFileValues, pod_name, pod_user, render,
};
use crate::run::{Cluster, KubeRun};
use crate::settings::{K8sSettings, POD_IP_ENV};

/// Largest secret file the driver reads (a Secret holds at most 1 MiB).
const MAX_SECRET_FILE: u64 = 1024 * 1024;

/// The Kubernetes driver. Cheap to clone; safe for concurrent runs.
#[derive(Clone)]
pub struct KubeDriver {
    cluster: Cluster,
    endpoint: String,
    source: Option<ConfigSource>,
    store_scope: Option<String>,
}

impl std::fmt::Debug for KubeDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeDriver")
            .field("endpoint", &self.endpoint)
            .field("namespace", &self.cluster.namespace)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl KubeDriver {
    /// A driver over an existing client (tests: a client pointed at a
    /// scripted API server). Makes no call.
    pub fn with_client(
        client: kube::Client,
        endpoint: impl Into<String>,
        namespace: impl Into<String>,
        settings: K8sSettings,
    ) -> Self {
        Self {
            cluster: Cluster {
                client,
                namespace: namespace.into(),
                settings,
                reporter: Arc::new(NullObserver),
            },
            endpoint: endpoint.into(),
            source: None,
            store_scope: None,
        }
    }

    /// Load the configuration the environment points at (see
    /// [`crate::discovery`]), read the settings, and probe the API server
    /// (bounded by `ITERION_SANDBOX_DOCTOR_TIMEOUT`, default 5s). Any
    /// failure is [`DriverError::Unavailable`] with the reason.
    pub async fn discover(env: &BTreeMap<String, String>) -> Result<Self, DriverError> {
        let settings = K8sSettings::from_env(env)?;
        let loaded = load_config(env).await?;
        let namespace = settings
            .namespace
            .clone()
            .unwrap_or_else(|| loaded.config.default_namespace.clone());
        let endpoint = loaded.config.cluster_url.to_string();
        let client = kube::Client::try_from(loaded.config).map_err(|e| K8sError::Unreachable {
            endpoint: endpoint.clone(),
            reason: format!("cannot build a client: {e}"),
        })?;
        let driver = Self {
            source: Some(loaded.source),
            ..Self::with_client(client, endpoint, namespace, settings)
        };
        driver.ping().await?;
        Ok(driver)
    }

    /// Scope the driver to one run store (see the docker driver's twin):
    /// its objects carry `iterion.io/store=<scope>` and only objects of
    /// that scope are listed for the reaper.
    pub fn with_store_scope(mut self, scope: impl Into<String>) -> Self {
        self.store_scope = Some(scope.into());
        self
    }

    /// Report cleanup problems (never surfaced as run failures) here.
    pub fn with_reporter(mut self, reporter: Arc<dyn DriverObserver>) -> Self {
        self.cluster.reporter = reporter;
        self
    }

    /// The namespace every object lives in.
    pub fn namespace(&self) -> &str {
        &self.cluster.namespace
    }

    /// Where the configuration came from (`None` for [`Self::with_client`]).
    pub fn source(&self) -> Option<&ConfigSource> {
        self.source.as_ref()
    }

    /// Settings in use.
    pub fn settings(&self) -> &K8sSettings {
        &self.cluster.settings
    }

    /// The kube-rs client (doctor's RBAC review, tests).
    pub fn client(&self) -> &kube::Client {
        &self.cluster.client
    }

    /// The objects a run of `plan` would create, with every Secret value
    /// replaced by `<redacted>` (the dry render of [`Driver::prepare`]).
    pub fn render_redacted(
        &self,
        plan: &LaunchPlan,
        info: &RunInfo,
    ) -> Result<RunObjects, K8sError> {
        let owner = iterion_sandbox::reaper::this_process_owner().map(|o| o.encode());
        crate::manifest::render_for_display(
            plan,
            info,
            &RenderOptions {
                namespace: &self.cluster.namespace,
                settings: &self.cluster.settings,
                store_scope: self.store_scope.as_deref(),
                owner: owner.as_deref(),
                redact: true,
            },
        )
    }

    async fn read_secret_files(plan: &LaunchPlan) -> Result<SecretFileValues, K8sError> {
        let mut out = SecretFileValues::new();
        for m in plan
            .mounts
            .iter()
            .filter(|m| m.origin == MountOrigin::SecretFile && m.kind == MountKind::Bind)
        {
            let source = m.source.clone().unwrap_or_default();
            let io = |e: std::io::Error| K8sError::Io {
                operation: format!("read the secret file for {}", m.target),
                source: e,
            };
            let meta = tokio::fs::metadata(&source).await.map_err(io)?;
            if meta.len() > MAX_SECRET_FILE {
                return Err(K8sError::Unsupported {
                    what: format!("a secret file of {} bytes at {}", meta.len(), m.target),
                    reason: "a Kubernetes Secret holds at most 1 MiB",
                });
            }
            out.insert(
                m.target.clone(),
                tokio::fs::read(&source).await.map_err(io)?,
            );
        }
        Ok(out)
    }

    /// Create the run's objects in order; on error the caller deletes by label.
    async fn create_objects(&self, objects: &RunObjects) -> Result<(), K8sError> {
        let secrets = self.cluster.secrets();
        let calls = self.cluster.calls(&secrets, "secrets");
        for s in &objects.secrets {
            calls.create(s).await?;
        }
        if let Some(np) = &objects.network_policy {
            let policies = self.cluster.policies();
            self.cluster
                .calls(&policies, "networkpolicies")
                .create(np)
                .await?;
        }
        let pods = self.cluster.pods();
        self.cluster.calls(&pods, "pods").create(&objects.pod).await
    }

    async fn start_inner(
        &self,
        plan: &LaunchPlan,
        info: &RunInfo,
        observer: &dyn DriverObserver,
        run: &KubeRun,
    ) -> Result<(), DriverError> {
        let settings = &self.cluster.settings;
        let files = Self::read_secret_files(plan).await?;
        let owner = iterion_sandbox::reaper::this_process_owner().map(|o| o.encode());
        let opts = RenderOptions {
            namespace: &self.cluster.namespace,
            settings,
            store_scope: self.store_scope.as_deref(),
            owner: owner.as_deref(),
            redact: false,
        };
        let objects = render(plan, info, &opts, &files)?;
        let image = plan.image.clone().unwrap_or_default();
        observer.log(
            OutputStream::System,
            &format!(
                "creating pod {}/{} from {image}",
                self.cluster.namespace,
                run.container()
            ),
        );
        self.create_objects(&objects).await?;
        wait_ready(
            &self.cluster.pods(),
            &self.cluster.namespace,
            run.container(),
            &image,
            settings.pod_ready_timeout,
            settings.apply_timeout,
        )
        .await?;
        if let Some(copy) = &plan.workspace_copy {
            observer.log(
                OutputStream::System,
                &format!("copying the workspace {} into the pod", copy.host),
            );
            // The pod's user owns what `tar -x` writes (a non-root tar
            // keeps no archive owner), so no owner is named.
            let stats = iterion_readback::workspace::copy_into(
                run,
                copy,
                None,
                settings.workspace_copy_timeout,
            )
            .await?;
            observer.log(
                OutputStream::System,
                &format!("copied {} file(s), {} bytes", stats.files, stats.bytes),
            );
        }
        if let Some(snippet) = plan.post_create.as_deref() {
            let secrets = plan.egress.iter().map(|e| e.token.clone()).collect();
            let bound = iterion_core::driver::PostCreateBound {
                timeout: settings.post_create_timeout,
                expiry: tokio::time::sleep(settings.post_create_timeout),
            };
            iterion_core::driver::post_create(run, snippet, observer, secrets, bound).await?;
        }
        Ok(())
    }

    fn in_scope(&self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
        match &self.store_scope {
            None => true,
            Some(scope) => meta.labels.as_ref().and_then(|l| l.get(STORE_LABEL)) == Some(scope),
        }
    }

    fn managed<K: Resource<DynamicType = ()>>(
        &self,
        kind: ResourceKind,
        item: &K,
    ) -> ManagedResource {
        let meta = item.meta();
        ManagedResource {
            kind,
            id: meta.uid.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            run_id: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(RUN_ID_LABEL))
                .cloned()
                .unwrap_or_default(),
            owner: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(OWNER_ANNOTATION))
                .and_then(|v| RunOwner::decode(v)),
        }
    }
}

/// What this driver can honour under `settings`; also what `iterion
/// sandbox manifests` finalizes a plan with, so it prints what a run
/// would create.
pub fn capabilities(settings: &K8sSettings) -> Capabilities {
    Capabilities {
        image: true,
        build: false,
        mounts: true,
        host_bind_mounts: false,
        network_policy: true,
        // The NetworkPolicy needs the runner's address; without it a
        // proxied run is refused, never started unconfined.
        egress_enforcement: settings.pod_ip.is_some(),
        post_create: true,
        remote_user: true,
        read_back_drain: true,
        archive_in: true,
        // A pod has no host filesystem: the workspace is copied in over
        // exec and exported back at teardown (facts §5.3 [I]).
        workspace_export: true,
        // The CA travels in the per-run Secret, projected read-only into
        // a writable emptyDir where the runtime adds the bundle (issue 17).
        tls_inspection: true,
        // File secrets are keys of the per-run Secret, projected read-only.
        secret_file_copy: true,
    }
}

#[async_trait]
impl Driver for KubeDriver {
    fn name(&self) -> DriverName {
        DRIVER
    }

    fn capabilities(&self) -> Capabilities {
        capabilities(&self.cluster.settings)
    }

    async fn egress_binding(
        &self,
        info: &RunInfo,
        enforce: bool,
    ) -> Result<EgressBinding, DriverError> {
        let _ = (info, enforce);
        // The pod reaches the runner at its pod IP, never at the runner's
        // loopback; without the address no proxy can be advertised nor
        // any NetworkPolicy written, so the run is refused (fail closed).
        let address = self.cluster.settings.pod_ip.ok_or_else(|| K8sError::Setting {
            variable: POD_IP_ENV,
            value: String::new(),
            reason: "unset, but this run's egress goes through the proxy (inject status.podIP through the downward API)".to_owned(),
        })?;
        Ok(EgressBinding {
            address,
            not_yet_configured: false,
            network: None,
        })
    }

    async fn prepare(
        &self,
        plan: &LaunchPlan,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        iterion_sandbox::guards::check_launch_plan(plan).map_err(|v| DriverError::SpecRefused {
            reason: v.to_string(),
        })?;
        if plan.build.is_some() {
            return Err(DriverError::Unsupported {
                driver: DRIVER,
                feature: "build (pin a pre-built image)",
            });
        }
        let mut plan = plan.clone();
        // Facts §5.3 (seeds win): the engine path defaults a missing user.
        if plan.user.as_deref().is_none_or(|u| u.trim().is_empty()) {
            plan.user = Some(DEFAULT_KUBE_USER.to_owned());
        }
        // A dry render catches every plan the pod cannot express (a host
        // bind, a named volume, a proxy without ITERION_POD_IP) before
        // anything exists. The kubelet pulls the image; nothing to do here.
        let probe = RunInfo {
            run_id: iterion_core::RunId::parse("prepare").map_err(|e| {
                DriverError::SpecRefused {
                    reason: e.to_string(),
                }
            })?,
            run_name: None,
            host_workspace: String::new(),
            max_duration: None,
        };
        self.render_redacted(&plan, &probe)?;
        observer.log(
            OutputStream::System,
            &format!(
                "kubernetes: namespace {}, image {} (pulled by the kubelet)",
                self.cluster.namespace,
                plan.image.as_deref().unwrap_or_default()
            ),
        );
        Ok(Prepared {
            driver: DRIVER,
            plan,
        })
    }

    async fn start(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError> {
        if prepared.driver != DRIVER {
            return Err(DriverError::ForeignPrepared {
                expected: DRIVER,
                actual: prepared.driver,
            });
        }
        let plan = prepared.plan;
        let (uid, _) = pod_user(&plan)?;
        let run = KubeRun::new(
            self.cluster.clone(),
            pod_name(info.run_id.as_str()),
            info.run_id.as_str().to_owned(),
            plan.workdir.clone(),
            uid,
        );
        if let Err(e) = self.start_inner(&plan, info, observer, &run).await {
            // On error nothing is left behind (the Driver contract).
            if let Err(c) = run.cleanup().await {
                observer.log(
                    OutputStream::System,
                    &format!("cleanup after a failed start: {c} ({})", c.code()),
                );
            }
            return Err(e);
        }
        observer.log(
            OutputStream::System,
            &format!(
                "started sandbox pod {}/{}",
                self.cluster.namespace,
                run.container()
            ),
        );
        Ok(Box::new(run))
    }

    async fn ping(&self) -> Result<EngineInfo, DriverError> {
        let probe = self.cluster.settings.probe_timeout;
        let version = tokio::time::timeout(probe, self.cluster.client.apiserver_version())
            .await
            .map_err(|_| K8sError::Unreachable {
                endpoint: self.endpoint.clone(),
                reason: format!("no answer within {probe:?}"),
            })?
            .map_err(|e| K8sError::Unreachable {
                endpoint: self.endpoint.clone(),
                reason: e.to_string(),
            })?;
        Ok(EngineInfo {
            driver: DRIVER,
            endpoint: self.endpoint.clone(),
            version: version.git_version,
            api_version: format!("{}.{}", version.major, version.minor),
            local: false,
        })
    }

    async fn image_present(&self, image: &str) -> Result<bool, DriverError> {
        // The node a pod lands on, and its image cache, are unknown before
        // scheduling; say so rather than guess.
        let _ = image;
        Err(DriverError::Unsupported {
            driver: DRIVER,
            feature: "image lookup before scheduling (the kubelet pulls)",
        })
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        let selector = format!("{MANAGED_LABEL}=true");
        let mut out = Vec::new();
        let pods = self.cluster.pods();
        for p in self.cluster.calls(&pods, "pods").list(&selector).await? {
            if self.in_scope(&p.metadata) {
                out.push(self.managed::<Pod>(ResourceKind::Container, &p));
            }
        }
        let policies = self.cluster.policies();
        for np in self
            .cluster
            .calls(&policies, "networkpolicies")
            .list(&selector)
            .await?
        {
            if self.in_scope(&np.metadata) {
                out.push(self.managed::<NetworkPolicy>(ResourceKind::Network, &np));
            }
        }
        let secrets = self.cluster.secrets();
        for s in self
            .cluster
            .calls(&secrets, "secrets")
            .list(&selector)
            .await?
        {
            if self.in_scope(&s.metadata) {
                out.push(self.managed::<Secret>(ResourceKind::Secret, &s));
            }
        }
        Ok(out)
    }

    async fn remove_managed(&self, resource: &ManagedResource) -> Result<(), DriverError> {
        let name = resource.name.as_str();
        match resource.kind {
            ResourceKind::Container => {
                let pods = self.cluster.pods();
                let calls = self.cluster.calls(&pods, "pods");
                calls.delete(name).await?;
                // Gone before its NetworkPolicy goes (the same pass lists
                // the policy after the pod).
                calls
                    .wait_gone(name, self.cluster.settings.apply_timeout)
                    .await?;
            }
            ResourceKind::Network => {
                let policies = self.cluster.policies();
                self.cluster
                    .calls(&policies, "networkpolicies")
                    .delete(name)
                    .await?;
            }
            ResourceKind::Secret => {
                let secrets = self.cluster.secrets();
                self.cluster.calls(&secrets, "secrets").delete(name).await?;
            }
            ResourceKind::Volume => {
                return Err(DriverError::Unsupported {
                    driver: DRIVER,
                    feature: "engine volumes",
                });
            }
            // Never listed by a driver: the runtime's reaper owns them.
            ResourceKind::HostDir => {
                return Err(DriverError::Unsupported {
                    driver: DRIVER,
                    feature: "removing host directories",
                });
            }
        }
        Ok(())
    }
}
