//! What the sandbox decision answers: [`SandboxDecision`] and its parts —
//! the selected driver ([`SelectedDriver`]), the judged binds
//! ([`BindReport`]), the identity ([`IdentityOutcome`]), and what boot does
//! ([`Verdict`]: a [`SandboxPlan`] to start, the host, a [`Refusal`] with
//! its code, or a denial). The types [`super::decide`] fills in and its
//! steps build, so the steps never reach back into the orchestrator for
//! them; owns no step of the decision.

use iterion_core::{
    ByteSize, Capabilities, DriverName, EventKind, FailureCode, HostState, LaunchPlan, NetworkSpec,
};

use crate::admission::AdmissionVerdict;
use crate::classify::{Cause, Refused, SetupContext, Stage, classify};
use crate::host::{DriverUnavailable, HostKind};
use crate::identity::IdentityDecision;
use crate::precedence::{HostStateSource, ResolvedMode};
use crate::spec::BuiltSpec;
use crate::verdict::EgressVerdict;

/// The admission code of a declared read-back path the selected driver can
/// neither bind nor drain (ADR-143 R2: refused at admission, with its own
/// error).
pub const READBACK_UNSERVABLE: &str = "SANDBOX_READBACK_UNSERVABLE";

/// The admission code of a run that would start a sandbox its agents need
/// the runner in, when no statically linked `iterion` can be found to put
/// there (issue 32 item 2: refused before any container starts, never a
/// protocol error from inside one).
pub const RUNNER_UNAVAILABLE: &str = "SANDBOX_RUNNER_UNAVAILABLE";

/// The selected driver and what it makes of the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectedDriver {
    /// Which.
    pub driver: DriverName,
    /// What it can do.
    pub capabilities: Capabilities,
    /// Enforce, advise or refuse for the spec's `network:` block.
    pub egress: EgressVerdict,
    /// Whether the policy needs the egress proxy at all.
    pub needs_proxy: bool,
    /// What the spec asks that the driver lacks (`build`, `mounts`, `user`,
    /// `post_create`, `read_back`, `egress enforcement`).
    pub gaps: Vec<&'static str>,
}

/// The host binds of the finalized plan, as the real-path judge passed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindReport {
    /// The workspace's real path.
    pub workspace: String,
    /// How many binds the workflow or the devcontainer declared.
    pub declared: usize,
    /// iterion's private areas masked from the sandbox.
    pub masked: Vec<String>,
}

/// Who the sandbox runs as, and whether that user can write the workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityOutcome {
    /// The identity decision ([`crate::identity::decide_identity`]).
    pub decision: IdentityDecision,
    /// Whether the user it picked can write the workspace.
    pub workspace_writable: bool,
}

/// A run the decision refuses at boot: admitted, then failed with this
/// code (facts §9.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Which refusal.
    pub refused: Refused,
    /// Its failure code ([`crate::classify`]).
    pub code: FailureCode,
    /// Why, for the operator.
    pub reason: String,
}

impl Refusal {
    pub(super) fn new(refused: Refused, reason: impl Into<String>) -> Self {
        Self {
            refused,
            code: classify(
                Cause::Refused(refused),
                Stage::Setup,
                SetupContext::default(),
            )
            .code,
            reason: reason.into(),
        }
    }
}

/// What boot starts: the plan minus what only exists once IO has run (the
/// proxy's port and token, a built image's tag).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPlan {
    /// The driver.
    pub driver: DriverName,
    /// Its capabilities.
    pub capabilities: Capabilities,
    /// The finalized launch plan: kept mounts with real sources (masks
    /// included), secret files, promised variables, the read-back set, the
    /// identity and its guard.
    pub launch: LaunchPlan,
    /// The spec's `network:` block (the proxy compiles its policy).
    pub network: Option<NetworkSpec>,
    /// Open, enforced or advisory (a refused egress is a [`Refusal`]).
    pub egress: EgressVerdict,
    /// The read-back cap of the run-files dir, when a kept host bind
    /// serves it (the booter bounds it with a tmpfs of that size).
    pub run_files_cap: Option<ByteSize>,
    /// The bound secrets go in as placeholders: the proxy inspects their
    /// hosts with the run's CA, which the booter installs in the sandbox
    /// ([`crate::secret_egress`]). `false`: none is bound, or they go in
    /// plain (the decision's events say so).
    pub secret_placeholders: bool,
    /// How the agents' provider keys go in (issue 17 item 5): which keys
    /// and hosts is the agent crate's reading, executed by the booter.
    pub provider_keys: crate::secret_egress::ProviderKeysVerdict,
}

/// What boot does.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Start a sandbox.
    Sandbox(Box<SandboxPlan>),
    /// Run on the host through the noop driver: an explicit opt-out or
    /// nothing asked (silent), or a degraded `auto` (its `sandbox_skipped`
    /// is among the events).
    Host {
        /// Why, for the run log.
        reason: String,
        /// `auto` with no driver.
        degraded: bool,
    },
    /// Admitted, then refused at boot.
    Refused(Refusal),
    /// Refused at admission ([`SandboxDecision::admission`] says why):
    /// nothing boots.
    Denied,
}

/// The decision for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxDecision {
    /// The host kind decided for (the `--target` of a cross-host doctor).
    pub host: HostKind,
    /// The host kind detected here.
    pub detected_host: HostKind,
    /// The winning mode and the tier that spoke.
    pub mode: ResolvedMode,
    /// The source label (with the `auto` suffix once the spec is built).
    pub source: String,
    /// The resolved host_state.
    pub host_state: HostState,
    /// Which knob spoke for it.
    pub host_state_source: HostStateSource,
    /// The default image `auto` falls back to.
    pub default_image: String,
    /// The driver the host's order gives this mode (noop when inactive).
    pub selection: Result<DriverName, DriverUnavailable>,
    /// The fused spec of an active mode, or why it could not be built.
    pub spec: Option<Result<BuiltSpec, String>>,
    /// The selected real driver, once the spec is built.
    pub driver: Option<SelectedDriver>,
    /// The host binds, once judged (or why they were refused).
    pub binds: Option<Result<BindReport, String>>,
    /// The identity, once decided (or why it was refused).
    pub identity: Option<Result<IdentityOutcome, String>>,
    /// Whether the run may start.
    pub admission: AdmissionVerdict,
    /// What boot does.
    pub verdict: Verdict,
    /// The events boot emits before its own IO, in order.
    pub events: Vec<EventKind>,
}

impl SandboxDecision {
    /// The verdict's short name (`sandbox`, `host`, `degraded`, `refused`,
    /// `denied`), as `doctor --strict --json` writes it.
    pub fn verdict_kind(&self) -> &'static str {
        match &self.verdict {
            Verdict::Sandbox(_) => "sandbox",
            Verdict::Host {
                degraded: false, ..
            } => "host",
            Verdict::Host { degraded: true, .. } => "degraded",
            Verdict::Refused(_) => "refused",
            Verdict::Denied => "denied",
        }
    }

    /// The code the run ends with because of this decision: the refusal's
    /// failure code, or the admission code of a denial.
    pub fn code(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Refused(r) => Some(r.code.as_str()),
            Verdict::Denied => self.admission.code(),
            _ => None,
        }
    }

    /// Why the run is refused or denied, when it is.
    pub fn refusal_reason(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Refused(r) => Some(&r.reason),
            Verdict::Denied => Some(self.admission.reason()),
            _ => None,
        }
    }
}
