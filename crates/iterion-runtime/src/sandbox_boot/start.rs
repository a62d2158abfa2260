//! Executing a decided sandbox (seed steps 11–16, the IO half): the run's
//! host directories where the decision planned them, the secret files, the
//! run-files bound, the egress proxy, then prepare, build and start. What
//! was decided is not decided again; what can only fail here (the disk,
//! the engine, a port) goes through the one classifier as a
//! [`BootError`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use iterion_core::driver::{ManagedResource, ResourceKind};
use iterion_core::plan::EgressAttachment;
use iterion_core::{
    ByteSize, Driver, DriverError, EventKind, LaunchPlan, Mode, MountOrigin, NodeId, RunInfo,
};
use iterion_netproxy::{
    BlockedRequest, EgressProxy, LimitNotice, Policy, ProxyOptions, ProxyToken,
};
use iterion_sandbox::classify::{Cause, Refused, SetupContext, Stage, classify};
use iterion_sandbox::decision::SandboxPlan;
use iterion_sandbox::verdict::EgressVerdict;

use super::dirs::{RemoveOnDrop, RunDirs};
use super::handoff::Kept;
use super::host::SandboxHost;
use crate::boot::{BootContext, BootError, Booted, ExecEgress, ExecSecrets, Keep};
use crate::events::{Emitter, RunObserver};
use crate::secrets::{
    FileSecret, ResolvedSecrets, SecretFiles, secrets_root, write_files as write_secret_files,
};

fn driver_error(err: DriverError, ctx: &BootContext<'_>) -> BootError {
    let code = classify(
        Cause::Driver(&err),
        Stage::Setup,
        SetupContext {
            cancelled: ctx.cancel.is_cancelled(),
            interrupted: false,
        },
    )
    .code;
    if code == iterion_core::FailureCode::Cancelled {
        return BootError::Cancelled;
    }
    BootError::Driver { source: err }
}

/// Start the sandbox `plan` describes.
#[allow(clippy::too_many_arguments)] // one per part of the decision it executes
pub(super) async fn start(
    host: &SandboxHost,
    listeners: Option<&Arc<dyn iterion_core::agent::GatewayListeners>>,
    ctx: &BootContext<'_>,
    plan: SandboxPlan,
    source: &str,
    mode: Mode,
    secrets: &ResolvedSecrets,
    provider_keys: &[crate::secret_egress::BoundSecret],
    mut exec: ExecSecrets,
) -> Result<Booted, BootError> {
    let events = ctx.events;
    let Some(driver) = host.drivers.get(plan.driver).cloned() else {
        // The probe found it ready; only a driver set that changed since
        // (a defect) gets here.
        return Err(BootError::Refused {
            refused: Refused::NoDriver,
            reason: format!("{} is not among the probed drivers", plan.driver),
        });
    };
    // Step 11: the run's host directories, where the decision planned them;
    // removed on every early return below, disarmed once the run holds
    // them until teardown.
    let dirs = RunDirs::plan(&host.state_dir, ctx.run_id);
    dirs.create(&host.state_dir)?;
    let mut host_dir_guard = RemoveOnDrop(Some(dirs.dir.clone()));
    // Step 14: file secrets in a private 0700 dir on a memory filesystem
    // (never a disk), removed on every early return.
    let secret_files = write_files(host, ctx, &secrets.files, &plan.launch)?;
    let mut launch = plan.launch;
    crate::workspace_copy::clear_stale_record(&launch)?;
    // The run-files dir a kept bind serves gets its bound: a tmpfs of its
    // read-back cap (issue 19 #5), or an event saying it has none.
    let run_files_bound = plan
        .run_files_cap
        .and_then(|cap| bound_run_files(&dirs, cap, events));
    let info = RunInfo {
        run_id: ctx.run_id.clone(),
        run_name: Some(ctx.workflow.name.clone()),
        host_workspace: ctx.workspace.to_string_lossy().into_owned(),
        max_duration: None,
    };
    // Step 15: the proxy precedes Prepare, and only for a non-open policy.
    let mut proxy = None;
    let mut credentials = None;
    let mut egress_network = None;
    let mut gateway_at = None;
    let mut trust_pem: Option<String> = None;
    let enforce = match plan.egress {
        EgressVerdict::Enforced => Some(true),
        EgressVerdict::Advisory { .. } => Some(false),
        EgressVerdict::Open | EgressVerdict::Refused { .. } => None,
    };
    if let Some(enforce) = enforce {
        // The rules were parsed with the workflow; what can fail here is a
        // shipped preset that does not compile (a defect, tested away).
        let policy = Policy::from_spec(plan.network.as_ref())
            .map_err(|source| BootError::Proxy { source })?;
        // The driver says where (issue 19 item 9: the run's gateway,
        // never every address of the host).
        let binding = driver
            .egress_binding(&info, enforce)
            .await
            .map_err(|e| driver_error(e, ctx))?;
        egress_network = binding.network.clone();
        gateway_at = Some((binding.address, binding.not_yet_configured));
        let token = ProxyToken::generate();
        let mut opts = ProxyOptions::new(
            std::net::SocketAddr::new(binding.address, 0),
            Arc::new(policy),
            token.clone(),
        );
        opts.freebind = binding.not_yet_configured;
        opts.on_blocked = Arc::new(network_blocked(events.clone()));
        opts.on_limit = Arc::new(proxy_limit(events.clone()));
        credentials = Some(opts.credentials.clone());
        // Issue 17: the run's CA and inspection, only when bound secrets
        // or the agents' provider keys go in as placeholders (the decision
        // said so).
        if plan.secret_placeholders || !provider_keys.is_empty() {
            match egress_inspection(host, secrets, provider_keys) {
                Ok(inspection) => {
                    trust_pem = Some(inspection.ca_pem().to_owned());
                    opts.inspection = Some(Arc::new(inspection));
                }
                Err(source) => {
                    release_egress_network(&driver, ctx, egress_network).await;
                    return Err(BootError::Proxy { source });
                }
            }
        }
        let handle = match EgressProxy::start(opts).await {
            Ok(h) => h,
            Err(source) => {
                release_egress_network(&driver, ctx, egress_network).await;
                return Err(BootError::Proxy { source });
            }
        };
        launch.egress = Some(EgressAttachment {
            proxy_port: handle.local_addr().port(),
            token: token.expose().to_owned(),
            enforce,
        });
        proxy = Some(handle);
    }
    // Step 18: the listeners, before the sandbox (its alias and its
    // firewall need their ports).
    let gateway = match start_listeners(listeners, ctx, &driver, &info, gateway_at).await {
        Ok(g) => g,
        Err(e) => {
            if let Some(p) = proxy {
                p.shutdown().await;
            }
            release_egress_network(&driver, ctx, egress_network).await;
            return Err(e);
        }
    };
    if let Some(g) = &gateway {
        launch.gateway_ports.extend(&g.ports);
    }
    // Issue 17: a driver that can place the CA at creation (a Kubernetes
    // pod: the per-run Secret) finds it in the plan; the others ignore it
    // and get it installed after start, below.
    launch.egress_ca = trust_pem.clone();
    let started = prepare_and_start(ctx, &driver, launch.clone(), source, mode, &info).await;
    match started {
        Ok(run) => {
            // Issue 17: the sandbox trusts the run's CA before any exec.
            if let Some(pem) = &trust_pem {
                if let Err(e) = crate::secret_egress::install_trust(run.as_ref(), pem).await {
                    let _ = run.cleanup().await;
                    if let Some(p) = proxy {
                        p.shutdown().await;
                    }
                    release_egress_network(&driver, ctx, egress_network).await;
                    return Err(BootError::Io {
                        operation: "install the run's egress CA".to_owned(),
                        source: std::io::Error::other(e.to_string()),
                    });
                }
                exec.env.extend(crate::secret_egress::trust_env());
            }
            host_dir_guard.0 = None;
            // The container has mounted them: the values leave the host.
            let mut secret_files = secret_files;
            if let Err(e) = secret_files.scrub() {
                events.system_log(
                    None,
                    format!(
                        "file secrets stay on the host memory filesystem until teardown: {e} ({})",
                        e.code()
                    ),
                );
            }
            if let (Some(credentials), Some(handle), Some(host)) =
                (credentials, proxy.as_ref(), run.egress_host())
            {
                exec.egress = Some(ExecEgress {
                    credentials,
                    host: host.to_owned(),
                    port: handle.local_addr().port(),
                });
            }
            Ok(Booted::Sandbox {
                run,
                scratch_dir: "/tmp".to_owned(),
                keep: Keep::sandbox(Kept {
                    plan: launch,
                    proxy,
                    host_dir: Some(dirs.dir),
                    secret_files: Some(secret_files),
                    run_files_bound,
                    gateway,
                }),
                secrets: exec,
            })
        }
        Err(e) => {
            if let Some(p) = proxy {
                p.shutdown().await;
            }
            // A failed start has removed what it adopted; a failed
            // prepare or build never adopted the network.
            release_egress_network(&driver, ctx, egress_network).await;
            Err(e)
        }
    }
}

/// The run's inspection (issue 17): a fresh in-memory CA, the bound
/// secrets' bindings, and the upstream roots (the system's plus
/// `ITERION_EGRESS_UPSTREAM_CA` of the launching environment).
fn egress_inspection(
    host: &SandboxHost,
    secrets: &ResolvedSecrets,
    provider_keys: &[crate::secret_egress::BoundSecret],
) -> Result<iterion_netproxy::Inspection, iterion_netproxy::NetproxyError> {
    let extra = host
        .local_env
        .get(iterion_netproxy::UPSTREAM_CA_ENV)
        .filter(|v| !v.trim().is_empty())
        .map(std::path::Path::new);
    let roots = iterion_netproxy::upstream_roots(extra)?;
    let ca = Arc::new(iterion_netproxy::EgressCa::generate()?);
    let bindings = iterion_netproxy::Bindings::new(
        secrets
            .bound
            .iter()
            .chain(provider_keys)
            .filter_map(crate::secret_egress::BoundSecret::binding)
            .collect(),
    );
    iterion_netproxy::Inspection::new(ca, bindings, roots)
}

/// Seed step 18: start what the run needs of the per-run listeners, on
/// the address the proxy got (`gateway_at`) or, without a proxy, where the
/// driver would put it.
async fn start_listeners(
    listeners: Option<&Arc<dyn iterion_core::agent::GatewayListeners>>,
    ctx: &BootContext<'_>,
    driver: &Arc<dyn Driver>,
    info: &RunInfo,
    gateway_at: Option<(std::net::IpAddr, bool)>,
) -> Result<Option<iterion_core::agent::GatewayHandle>, BootError> {
    let Some(listeners) = listeners else {
        return Ok(None);
    };
    let needs = crate::agents::listener_needs(ctx.workflow);
    if !needs.any() {
        return Ok(None);
    }
    let (address, freebind) = match gateway_at {
        Some(a) => a,
        None => {
            let b = driver
                .egress_binding(info, false)
                .await
                .map_err(|e| driver_error(e, ctx))?;
            (b.address, b.not_yet_configured)
        }
    };
    listeners
        .start(ctx.run_id, &needs, address, freebind)
        .await
        .map_err(|reason| BootError::Io {
            operation: "start the run's MCP listener".to_owned(),
            source: std::io::Error::other(reason),
        })
}

/// Mount the run-files dir's bound (`cap` is the decision's: a kept host
/// bind serves it).
fn bound_run_files(dirs: &RunDirs, cap: ByteSize, events: &Emitter) -> Option<ByteSize> {
    let size = crate::runfiles::size_for(cap);
    match crate::runfiles::bound(&dirs.run_files(), size) {
        Ok(()) => Some(size),
        Err(reason) => {
            events.emit(EventKind::SandboxLimitUnenforced {
                limit: "run_files".to_owned(),
                reason,
            });
            None
        }
    }
}

/// Write the file secrets where the decision bound them.
fn write_files(
    host: &SandboxHost,
    ctx: &BootContext<'_>,
    files: &[FileSecret],
    launch: &LaunchPlan,
) -> Result<SecretFiles, BootError> {
    if files.is_empty() {
        return Ok(SecretFiles::default());
    }
    let root = secrets_root(&host.local_env).map_err(|source| BootError::Secrets { source })?;
    let root = root.canonicalize().unwrap_or(root);
    let written = write_secret_files(files, &root, ctx.run_id)
        .map_err(|source| BootError::Secrets { source })?;
    // The plan names each file where the decision put it; a written set
    // elsewhere would start a sandbox binding nothing there.
    let planned = launch
        .mounts
        .iter()
        .filter(|m| m.origin == MountOrigin::SecretFile)
        .filter_map(|m| m.source.as_deref());
    let here: Vec<String> = written
        .mounts
        .iter()
        .filter_map(|m| m.source.clone())
        .collect();
    for source in planned {
        if !here.iter().any(|h| h == source) {
            return Err(BootError::Io {
                operation: format!("write the file secret bound from {source}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "it was written elsewhere",
                ),
            });
        }
    }
    if let Some(dir) = written.dir() {
        crate::owner::mark_owner(&dir).map_err(|source| BootError::Io {
            operation: format!("mark {}", dir.display()),
            source,
        })?;
    }
    Ok(written)
}

async fn prepare_and_start(
    ctx: &BootContext<'_>,
    driver: &Arc<dyn Driver>,
    plan: LaunchPlan,
    source: &str,
    mode: Mode,
    info: &RunInfo,
) -> Result<Arc<dyn iterion_core::SandboxRun>, BootError> {
    let observer = RunObserver::new(ctx.events.clone());
    let has_post_create = plan.post_create.is_some();
    // Step 16: validate and do the slow IO, optionally build, then start.
    let mut prepared = tokio::select! {
        r = driver.prepare(&plan, &observer) => r.map_err(|e| driver_error(e, ctx))?,
        () = ctx.cancel.cancelled() => return Err(BootError::Cancelled),
    };
    let name = driver.name();
    if let Some(build) = prepared.plan.build.clone() {
        ctx.events.emit(EventKind::SandboxBuildStarted {
            driver: name,
            dockerfile: build.dockerfile.clone(),
            context: build.context.clone(),
        });
        let started = Instant::now();
        prepared = match driver.build(prepared, info, &observer).await {
            Ok(p) => {
                ctx.events.emit(EventKind::SandboxBuildFinished {
                    driver: name,
                    target: p.plan.image.clone().unwrap_or_default(),
                    duration_ms: started.elapsed().as_millis() as u64,
                });
                p
            }
            Err(e) => {
                ctx.events.emit(EventKind::SandboxBuildFailed {
                    driver: name,
                    error: e.to_string(),
                });
                return Err(driver_error(e, ctx));
            }
        };
    }
    let image = prepared.plan.image.clone().unwrap_or_default();
    let mut limits = prepared.plan.limits.clone();
    let egress = match &prepared.plan.egress {
        None => "open".to_owned(),
        Some(e) if e.enforce => "proxy (enforced)".to_owned(),
        Some(_) => "proxy (advisory)".to_owned(),
    };
    let start = driver.start(prepared, info, &observer);
    tokio::pin!(start);
    let run = tokio::select! {
        r = &mut start => r.map_err(|e| driver_error(e, ctx))?,
        () = ctx.cancel.cancelled() => {
            abandon_start(driver, ctx, start).await;
            return Err(BootError::Cancelled);
        }
    };
    let run: Arc<dyn iterion_core::SandboxRun> = Arc::from(run);
    // What the sandbox runs without is said, and left out of what
    // `sandbox_started` claims it has (issue 19 #5: never silently).
    for gap in run.unenforced_limits() {
        if gap.limit == "writable_layer" {
            limits.writable_layer = None;
        }
        ctx.events.emit(EventKind::SandboxLimitUnenforced {
            limit: gap.limit,
            reason: gap.reason,
        });
    }
    let limits = serde_json::to_value(&limits).unwrap_or_default();
    ctx.events.emit(EventKind::SandboxStarted {
        driver: name,
        mode,
        source: source.to_owned(),
        image,
        has_post_create,
        container: run.container().to_owned(),
        limits,
        egress,
    });
    Ok(run)
}

/// How long a cancelled run lets a start in flight finish so its own
/// cleanup removes what it made (a start is create, start, the identity
/// check and post_create).
const ABANDONED_START_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// A run cancelled while its sandbox starts: dropping the start midway
/// left the container it had just created behind (the identity check
/// before the first exec widened that window). The start is let finish —
/// a failed one cleans up after itself, a finished one is cleaned here —
/// and past the grace whatever carries the run's label is removed.
async fn abandon_start<F>(driver: &Arc<dyn Driver>, ctx: &BootContext<'_>, start: Pin<&mut F>)
where
    F: std::future::Future<Output = Result<Box<dyn iterion_core::SandboxRun>, DriverError>>,
{
    match tokio::time::timeout(ABANDONED_START_GRACE, start).await {
        Ok(Ok(run)) => {
            if let Err(e) = run.cleanup().await {
                ctx.events.system_log(
                    None,
                    format!("removing the sandbox of a cancelled start failed: {e}"),
                );
            }
        }
        Ok(Err(_)) => {}
        Err(_) => {
            let mut resources: Vec<ManagedResource> = driver
                .list_managed()
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r.run_id == ctx.run_id.as_str())
                .collect();
            // The container first: its volumes and network are in use until
            // it is gone.
            resources.sort_by_key(|r| r.kind != ResourceKind::Container);
            for r in &resources {
                if let Err(e) = driver.remove_managed(r).await {
                    ctx.events
                        .system_log(None, format!("removing {} failed: {e}", r.name));
                }
            }
        }
    }
}

/// Remove the per-run network a driver created for the proxy's binding,
/// when the run ends before its sandbox could own it (best effort, said in
/// the run log; the reaper collects what is left).
async fn release_egress_network(
    driver: &Arc<dyn Driver>,
    ctx: &BootContext<'_>,
    network: Option<String>,
) {
    let Some(name) = network else {
        return;
    };
    let resource = ManagedResource {
        kind: ResourceKind::Network,
        id: String::new(),
        name: name.clone(),
        run_id: ctx.run_id.as_str().to_owned(),
        owner: None,
    };
    if let Err(e) = driver.remove_managed(&resource).await {
        ctx.events
            .system_log(None, format!("removing network {name} failed: {e}"));
    }
}

/// The proxy's limit notices, in the run log (issue 19 item 9: a refused
/// connection is said, never silent).
fn proxy_limit(events: Emitter) -> impl Fn(LimitNotice) + Send + Sync {
    move |notice: LimitNotice| {
        let line = match notice {
            LimitNotice::Connections { limit, refused } => format!(
                "egress proxy: the run holds its maximum of {limit} concurrent connections; \
                 {refused} new connection(s) answered 503"
            ),
            LimitNotice::Descriptors { failures } => format!(
                "egress proxy: this process is out of file descriptors; {failures} connection(s) \
                 could not be accepted"
            ),
        };
        events.system_log(None, line);
    }
}

/// A denial becomes `network_blocked`, naming the node whose exec's own
/// credential asked; a request under the run token (a process no exec of
/// the engine started with a credential) names none — never a guess.
fn network_blocked(events: Emitter) -> impl Fn(BlockedRequest) + Send + Sync {
    move |req: BlockedRequest| {
        let node = req.exec.as_deref().map(NodeId::new);
        let kind = EventKind::NetworkBlocked {
            host: req.host.clone(),
            port: req.port,
            reason: req.reason.event_reason().to_owned(),
            rule: req.rule.clone(),
            node_id: node.as_ref().map(|n| n.to_string()),
            secret: req.secret.clone(),
            authority: req.authority.clone(),
        };
        match node {
            Some(n) => events.emit_node(&n, kind),
            None => events.emit(kind),
        }
    }
}
