//! The seam between the engine and the sandbox policy: [`SandboxBooter`].
//!
//! The engine does not decide which sandbox a run gets; a booter does
//! (seed steps 3–19: admission verdict, precedence, driver selection,
//! degrade-vs-refuse, mounts, proxy, prepare/start). The engine calls it at
//! three points — `admit` before anything starts, `boot` after the run is
//! `running` (with what `admit` returned, so the run is decided once),
//! `teardown` always — and executes nodes in whatever [`SandboxRun`] it
//! hands back. [`HostBooter`] is the trivial booter: every run on the host
//! through the noop driver.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use iterion_core::plan::PROXY_ENV_VARS;
use iterion_core::{DriverError, NodeId, RunId, SandboxRun, Trust};
use iterion_driver_noop::NoopDriver;
use iterion_dsl::ir;
use iterion_netproxy::CredentialBook;
use iterion_sandbox::admission::AdmissionVerdict;
use iterion_sandbox::classify::{Cause, Classified, Refused, SetupContext, Stage, classify};
use iterion_sandbox::decision::SandboxDecision;
use iterion_sandbox::precedence::SandboxFlags;
use tokio_util::sync::CancellationToken;

use crate::events::Emitter;
use crate::sandbox_boot::handoff::{Decided, Kept};
use crate::secrets::Redactor;

/// What a booter sees of the run.
#[derive(Debug)]
pub struct BootContext<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// The compiled workflow.
    pub workflow: &'a ir::Workflow,
    /// Path of the `.iter` file.
    pub file: &'a str,
    /// Trust of the workspace.
    pub trust: Trust,
    /// Absolute host workspace.
    pub workspace: &'a Path,
    /// The CLI's sandbox knobs of the run.
    pub flags: &'a SandboxFlags,
    /// The run's `worktree: auto` worktree (its path is `workspace`).
    pub worktree: Option<&'a crate::worktree::RunWorktree>,
    /// The run's event writer (sandbox_* events, driver log lines).
    pub events: &'a Emitter,
    /// Fires when the run is cancelled; a slow boot should stop on it.
    pub cancel: &'a CancellationToken,
}

/// What admission hands boot: the verdict the engine persists and, for the
/// policy booter, the run's sandbox decision — decided once, at admission,
/// and executed by boot.
#[derive(Debug)]
pub struct Admitted {
    /// Whether the run may start.
    pub verdict: AdmissionVerdict,
    decided: Option<Box<Decided>>,
}

impl Admitted {
    /// A verdict with no sandbox decision (a booter without a policy, the
    /// engine's own refusals).
    pub fn new(verdict: AdmissionVerdict) -> Self {
        Self {
            verdict,
            decided: None,
        }
    }

    pub(crate) fn decided(decided: Decided) -> Self {
        Self {
            verdict: decided.decision.admission.clone(),
            decided: Some(Box::new(decided)),
        }
    }

    pub(crate) fn into_decided(self) -> Option<Box<Decided>> {
        self.decided
    }

    /// The sandbox decision admission was read from, when a policy made one.
    pub fn decision(&self) -> Option<&SandboxDecision> {
        self.decided.as_deref().map(|d| &d.decision)
    }
}

impl From<AdmissionVerdict> for Admitted {
    fn from(verdict: AdmissionVerdict) -> Self {
        Self::new(verdict)
    }
}

/// What a booter keeps alive until teardown: nothing, the private scratch
/// directory of a host run (removed when dropped), or what a sandbox of the
/// policy booter holds (its proxy, host directories and secret files).
#[derive(Debug, Default)]
pub struct Keep(Kind);

#[derive(Debug, Default)]
enum Kind {
    #[default]
    Nothing,
    Scratch(#[allow(dead_code)] tempfile::TempDir),
    Sandbox(Box<Kept>),
}

impl Keep {
    /// Nothing to keep.
    pub fn nothing() -> Self {
        Self(Kind::Nothing)
    }

    pub(crate) fn scratch(dir: tempfile::TempDir) -> Self {
        Self(Kind::Scratch(dir))
    }

    pub(crate) fn sandbox(kept: Kept) -> Self {
        Self(Kind::Sandbox(Box::new(kept)))
    }

    /// The launched plan, for a sandbox.
    pub(crate) fn plan(&self) -> Option<&iterion_core::LaunchPlan> {
        match &self.0 {
            Kind::Sandbox(k) => Some(&k.plan),
            Kind::Nothing | Kind::Scratch(_) => None,
        }
    }

    pub(crate) fn into_sandbox(self) -> Option<Box<Kept>> {
        match self.0 {
            Kind::Sandbox(k) => Some(k),
            Kind::Nothing | Kind::Scratch(_) => None,
        }
    }
}

/// What every exec of a run carries of its secrets: `as: env` values for
/// the exec's own env (never the container's create-time env), the
/// redactor applied to the node log, and the egress proxy's per-exec
/// credentials.
#[derive(Clone, Default)]
pub struct ExecSecrets {
    /// Variable → value.
    pub env: BTreeMap<String, String>,
    /// Masks every secret value (env and file) in log lines.
    pub redactor: Redactor,
    /// The run's egress proxy, when it has one the execs can name
    /// themselves to.
    pub egress: Option<ExecEgress>,
    /// Provider credential variable → the run's placeholder (issue 17
    /// item 5): what a sandboxed agent carries instead of the value.
    pub provider_placeholders: BTreeMap<String, String>,
}

impl std::fmt::Debug for ExecSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSecrets")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("redactor", &self.redactor)
            .field("egress", &self.egress)
            .field(
                "provider_placeholders",
                &self.provider_placeholders.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The run's egress proxy as each exec reaches it: every exec gets a
/// fresh credential of the proxy's [`CredentialBook`] in its own
/// `*_PROXY` variables (over the create-time run token), so a denial is
/// attributed to the node whose process asked, even when parallel
/// branches exec at the same time.
#[derive(Clone)]
pub struct ExecEgress {
    /// The proxy's book of per-exec credentials.
    pub credentials: CredentialBook,
    /// Where the container reaches the proxy ([`SandboxRun::egress_host`]).
    pub host: String,
    /// The proxy's port.
    pub port: u16,
}

impl std::fmt::Debug for ExecEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecEgress")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl ExecEgress {
    /// The proxy variables of one exec of `node` (a fresh credential;
    /// secret — env only, never argv or events).
    pub fn env_for(&self, node: &NodeId) -> BTreeMap<String, String> {
        let url = self
            .credentials
            .issue(node.as_str())
            .endpoint_url(&self.host, self.port);
        PROXY_ENV_VARS
            .iter()
            .map(|k| ((*k).to_owned(), url.clone()))
            .collect()
    }
}

/// Where nodes will run.
pub enum Booted {
    /// In a sandbox.
    Sandbox {
        /// The live sandbox.
        run: Arc<dyn SandboxRun>,
        /// A writable directory inside it for script files.
        scratch_dir: String,
        /// Whatever the booter must keep alive until teardown (proxy,
        /// listeners); handed back to [`SandboxBooter::teardown`].
        keep: Keep,
        /// The run's `as: env` secrets and their redactor.
        secrets: ExecSecrets,
    },
    /// On the host, unsandboxed (the noop driver).
    Host {
        /// Why the run is not sandboxed (opted out, degraded auto…).
        reason: String,
        /// The host passthrough run.
        run: Arc<dyn SandboxRun>,
        /// A private host directory for script files.
        scratch_dir: String,
        /// Kept until teardown (the scratch directory's guard).
        keep: Keep,
        /// The run's `as: env` secrets and their redactor.
        secrets: ExecSecrets,
    },
}

impl std::fmt::Debug for Booted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sandbox {
                run, scratch_dir, ..
            } => f
                .debug_struct("Sandbox")
                .field("driver", &run.driver())
                .field("container", &run.container())
                .field("scratch_dir", scratch_dir)
                .finish_non_exhaustive(),
            Self::Host {
                reason,
                scratch_dir,
                ..
            } => f
                .debug_struct("Host")
                .field("reason", reason)
                .field("scratch_dir", scratch_dir)
                .finish_non_exhaustive(),
        }
    }
}

impl Booted {
    /// The handle nodes exec into.
    pub fn run(&self) -> &Arc<dyn SandboxRun> {
        match self {
            Self::Sandbox { run, .. } | Self::Host { run, .. } => run,
        }
    }

    /// The run's exec secrets.
    pub fn secrets(&self) -> &ExecSecrets {
        match self {
            Self::Sandbox { secrets, .. } | Self::Host { secrets, .. } => secrets,
        }
    }

    /// The same, carrying `exec` secrets.
    pub fn with_secrets(mut self, exec: ExecSecrets) -> Self {
        match &mut self {
            Self::Sandbox { secrets, .. } | Self::Host { secrets, .. } => *secrets = exec,
        }
        self
    }

    /// Where script files go.
    pub fn scratch_dir(&self) -> &str {
        match self {
            Self::Sandbox { scratch_dir, .. } | Self::Host { scratch_dir, .. } => scratch_dir,
        }
    }
}

/// Why boot failed. Each maps to one failure code through the one
/// classifier ([`iterion_sandbox::classify`], facts §9.2).
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The sandbox decision refused the run (inline with no driver, a
    /// refused spec, …).
    #[error("{reason}")]
    Refused {
        /// Which refusal.
        refused: Refused,
        /// Why.
        reason: String,
    },
    /// A driver step failed.
    #[error("sandbox boot failed: {source}")]
    Driver {
        /// Cause.
        #[source]
        source: DriverError,
    },
    /// Boot stopped because the run was cancelled.
    #[error("boot cancelled")]
    Cancelled,
    /// A host-side step failed (the run's private directories).
    #[error("{operation}: {source}")]
    Io {
        /// What was being done.
        operation: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The run's file secrets could not be written.
    #[error("file secrets: {source}")]
    Secrets {
        /// Cause.
        #[source]
        source: crate::secrets::SecretError,
    },
    /// `boot` was called without this booter's admission (an engine
    /// defect: it boots only what `admit` admitted).
    #[error("boot without this booter's admission decision")]
    NotAdmitted,
    /// The run's egress proxy could not be started.
    #[error("egress proxy: {source}")]
    Proxy {
        /// Cause.
        #[source]
        source: iterion_netproxy::NetproxyError,
    },
}

impl BootError {
    /// What the failure was, for the one classifier.
    pub fn cause(&self) -> Cause<'_> {
        match self {
            Self::Refused { refused, .. } => Cause::Refused(*refused),
            Self::Driver { source } => Cause::Driver(source),
            Self::Cancelled => Cause::Cancelled,
            Self::Io { .. } | Self::Secrets { .. } | Self::Proxy { .. } | Self::NotAdmitted => {
                Cause::HostSetup
            }
        }
    }

    /// The run's status, failure code and disposition (facts §9.2), with
    /// whether the run was cancelled meanwhile.
    pub fn classify(&self, setup: SetupContext) -> Classified {
        classify(self.cause(), Stage::Setup, setup)
    }

    /// Stable code: the driver's own for a driver error, else the failure
    /// code the failure is classified with.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Driver { source } => source.code(),
            other => other.classify(SetupContext::default()).code.as_str(),
        }
    }
}

/// Decides and builds where a run executes.
#[async_trait]
pub trait SandboxBooter: Send + Sync {
    /// The admission gate (seed step 3), before workspace setup and any
    /// container. The engine persists the verdict before a refusal returns,
    /// and hands what this returns to [`SandboxBooter::boot`].
    async fn admit(&self, ctx: &BootContext<'_>) -> Admitted {
        let _ = ctx;
        AdmissionVerdict::Admit {
            reason: "no admission policy".into(),
        }
        .into()
    }

    /// Start the sandbox admission decided on (or settle on the host).
    async fn boot(&self, ctx: &BootContext<'_>, admitted: Admitted) -> Result<Booted, BootError>;

    /// Drain and clean up, best effort. Called exactly once after a
    /// successful boot, whatever the run's outcome; an error here is
    /// reported and never changes the run's status.
    async fn teardown(&self, booted: Booted, ctx: &BootContext<'_>) -> Result<(), BootError>;
}

/// Runs everything on the host through the noop driver (tests, and the
/// run of a workflow that opted out).
#[derive(Debug, Clone)]
pub struct HostBooter {
    reason: String,
}

impl HostBooter {
    /// A host booter that reports `reason` as why the run is unsandboxed.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

impl Default for HostBooter {
    fn default() -> Self {
        Self::new("host booter: sandboxing not wired")
    }
}

#[async_trait]
impl SandboxBooter for HostBooter {
    async fn boot(&self, ctx: &BootContext<'_>, _admitted: Admitted) -> Result<Booted, BootError> {
        host_booted(ctx, self.reason.clone())
    }

    async fn teardown(&self, booted: Booted, _ctx: &BootContext<'_>) -> Result<(), BootError> {
        let result = booted.run().cleanup().await;
        // Dropping `keep` removes the scratch dir.
        drop(booted);
        result.map_err(|source| BootError::Driver { source })
    }
}

/// Settle a run on the host through the noop driver, with a private
/// scratch directory (an opt-out, a degraded `auto`, or a test).
pub fn host_booted(ctx: &BootContext<'_>, reason: String) -> Result<Booted, BootError> {
    // A private (0700, unpredictable name) directory: script files never
    // land in the user's workspace nor at a guessable /tmp path.
    let scratch = tempfile::Builder::new()
        .prefix(&format!("iterion-{}-", ctx.run_id))
        .tempdir()
        .map_err(|source| BootError::Io {
            operation: "create host scratch dir".into(),
            source,
        })?;
    let scratch_dir = scratch.path().to_string_lossy().into_owned();
    let workspace: PathBuf = ctx.workspace.to_path_buf();
    Ok(Booted::Host {
        reason,
        run: Arc::new(NoopDriver::host_run(workspace)),
        scratch_dir,
        keep: Keep::scratch(scratch),
        secrets: ExecSecrets::default(),
    })
}
