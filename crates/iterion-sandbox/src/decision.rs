//! The sandbox decision: one pure function, [`decide`], from everything a
//! run's sandbox depends on ([`DecisionRequest`]) to everything about it
//! that can be known before any IO ([`SandboxDecision`]): which mode won
//! and which knob spoke, the host kind, the driver, the admission verdict,
//! what boot does (start a sandbox, run on the host, or refuse with its
//! code), the fused spec, the finalized mount plan with its secret files
//! and promised variables, who the sandbox runs as and its host-root
//! guard, the egress verdict, the read-back plan, the capability gaps, and
//! the events to emit, in order.
//!
//! Its callers never decide again. The runtime's booter *executes* a
//! decision (creates the run's host directories, writes the secret files,
//! starts the proxy, prepares and starts the driver); the engine's
//! admission *reads* [`SandboxDecision::admission`]; `iterion sandbox
//! doctor --strict` and the `ITERION_SANDBOX_PREFLIGHT` pre-flight *render*
//! it. So a run and its doctor cannot disagree: they are handed the same
//! decision for the same request.
//!
//! Pure means: the request is data — the flags, the parsed environment
//! (with `argv[0]`), the workflow's block and secret shapes, a snapshot of
//! the repository and of the host, the drivers' offers from the one probe,
//! and where the booter will create the run's private directories. The one
//! exception is the bind judge's question "what is this path really?",
//! asked through [`HostPaths`] (the caller hands [`crate::binds::RealHost`];
//! the run's own directories, which do not exist yet, are answered from
//! the request as what the booter will create). No clock, no process
//! environment, no engine is read here.
//!
//! The steps, in the order the seed gives them (steps 3–15), each calling
//! its one home: [`crate::precedence`] (mode, host_state, default image),
//! [`crate::host`] (host kind, driver selection), [`crate::admission`]
//! (untrusted workspaces), [`crate::spec`] (devcontainer fusion),
//! [`crate::verdict`] (degrade vs refuse, egress), [`crate::mounts`]
//! (planning, finalize for the driver), [`crate::devbox`],
//! [`crate::binds`] (real-path judge, masks), [`crate::identity`], and
//! [`crate::classify`] for every refusal's code.

use std::collections::BTreeMap;
use std::path::Path;

use iterion_core::{
    ByteSize, Capabilities, DriverName, EventKind, FailureCode, HostState, LaunchPlan, Mount,
    NetworkSpec, Spec, Trust,
};

use crate::admission::{AdmissionVerdict, admit};
use crate::binds::{HostBindSettings, HostPaths};
use crate::classify::{Cause, Refused, SetupContext, Stage, classify};
use crate::devcontainer::{Devcontainer, read_repo_devcontainer};
use crate::env::SandboxEnv;
use crate::error::PolicyError;
use crate::host::{DriverOffer, DriverUnavailable, HostKind, detect_host, select_driver};
use crate::identity::IdentityDecision;
use crate::mounts::HostSnapshot;
use crate::precedence::{
    HostStateSource, PrecedenceInputs, ResolvedMode, SandboxFlags, resolve_default_image,
    resolve_host_state, resolve_mode,
};
use crate::spec::BuiltSpec;
use crate::verdict::EgressVerdict;

/// The admission code of a declared read-back path the selected driver can
/// neither bind nor drain (ADR-143 R2: refused at admission, with its own
/// error).
pub const READBACK_UNSERVABLE: &str = "SANDBOX_READBACK_UNSERVABLE";

/// One `as: file` secret as the host resolved it: where it goes, never
/// its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSecretShape {
    /// The secret's name (a plain file name).
    pub name: String,
    /// Absolute container path of the file.
    pub container_path: String,
    /// A variable naming the container path, when declared (`env:`).
    pub path_env: Option<String>,
}

/// What of the compiled workflow the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct WorkflowFacts<'a> {
    /// The workflow-level `sandbox:` block.
    pub sandbox: Option<&'a Spec>,
    /// The `as: file` secrets as resolved on the host, or why the run's
    /// secrets could not be (a required one is missing, a bad name).
    pub file_secrets: Result<&'a [FileSecretShape], &'a str>,
    /// The names of the secrets bound to egress hosts (`egress:`), env and
    /// file alike (issue 17).
    pub bound_secrets: &'a [String],
}

/// The repository a run works in, as found on the host.
#[derive(Debug, Clone)]
pub struct RepoSnapshot {
    /// The workspace, absolute, as the run names it.
    pub workspace: String,
    /// Its real path (symlinks resolved), when it resolves.
    pub workspace_real: Option<String>,
    /// Owner uid and gid of the workspace directory.
    pub owner: Option<(u32, u32)>,
    /// Its permission bits.
    pub mode_bits: Option<u32>,
    /// The repository's devcontainer (`auto` reads it), or why it cannot
    /// be used.
    pub devcontainer: Result<Option<(String, Devcontainer)>, PolicyError>,
    /// `devbox.json` of the repository, when it is a regular file.
    pub devbox_json: Option<String>,
    /// The repository's shared git directory when the workspace is a
    /// `worktree: auto` worktree of it and that directory exists (facts
    /// §6.5: bound at its own path so the worktree's `gitdir:` resolves).
    pub worktree_git_dir: Option<String>,
    /// Its `config` and `hooks` that exist: bound read-only over it.
    pub worktree_git_guards: Vec<String>,
}

impl RepoSnapshot {
    /// Look at the repository at `workspace` (the impure half).
    pub fn capture(workspace: &Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(workspace).ok();
        let devbox = workspace.join("devbox.json");
        Self {
            workspace: workspace.to_string_lossy().into_owned(),
            workspace_real: workspace
                .canonicalize()
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            owner: meta.as_ref().map(|m| (m.uid(), m.gid())),
            mode_bits: meta.as_ref().map(|m| m.mode() & 0o7777),
            devcontainer: read_repo_devcontainer(workspace)
                .map(|dc| dc.map(|(p, d)| (p.to_string_lossy().into_owned(), d))),
            devbox_json: devbox
                .is_file()
                .then(|| devbox.to_string_lossy().into_owned()),
            worktree_git_dir: None,
            worktree_git_guards: Vec::new(),
        }
    }

    /// The run's worktree shares `git_dir` with its repository (its own
    /// part of it is `admin_dir`, `<git_dir>/worktrees/<name>`): note it
    /// when it is a directory (upstream binds nothing otherwise), with what
    /// of it the host's git executes or follows, kept read-only: the
    /// repository's `config` and `hooks`, and the worktree's `commondir`
    /// and `gitdir` pointers (rewritten, they would lead the host's git to
    /// a config the box wrote).
    pub fn with_worktree_git_dir(
        mut self,
        git_dir: Option<&Path>,
        admin_dir: Option<&Path>,
    ) -> Self {
        self.worktree_git_dir = git_dir
            .filter(|d| d.is_dir())
            .map(|d| d.to_string_lossy().into_owned());
        self.worktree_git_guards = match git_dir.filter(|d| d.is_dir()) {
            None => Vec::new(),
            Some(d) => ["config", "hooks"]
                .iter()
                .map(|name| d.join(name))
                .chain(
                    admin_dir
                        .into_iter()
                        .flat_map(|a| [a.join("commondir"), a.join("gitdir")]),
                )
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
        };
        self
    }
}

/// Where the booter will create the run's private host directories:
/// fresh, under iterion's managed roots, before the sandbox starts. The
/// decision plans binds of them and judges them as what they will be; the
/// driver judges their real paths again before create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPaths {
    /// The run-files directory (`<state>/sandboxes/<run>/artifact-files`).
    pub run_files: String,
    /// The empty read-only directory masks bind
    /// (`<state>/sandboxes/<run>/mask`).
    pub mask: String,
    /// The record a copy-based workspace keeps of what it copied in
    /// (`<state>/sandboxes/<run>/workspace-manifest`).
    pub workspace_manifest: String,
    /// The run's attachments directory (`<state>/sandboxes/<run>/attachments`)
    /// when the workflow declares attachments: bound read-only at
    /// `/run/iterion/attachments` where the driver binds, judged as a
    /// managed bind like the run-files dir.
    pub attachments: Option<String>,
    /// The file-secret directory (`<memory fs>/iterion-<uid>/<run>`), or why
    /// this host has no memory filesystem to hold one.
    pub secrets_dir: Result<String, String>,
}

/// Everything a run's sandbox depends on.
#[derive(Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// The run (names the `sandbox_env_denied` payload).
    pub run_id: &'a str,
    /// `--trust`.
    pub trust: Trust,
    /// The CLI's knobs and tier 4.
    pub flags: &'a SandboxFlags,
    /// The parsed environment, with `argv[0]`.
    pub env: &'a SandboxEnv,
    /// `doctor --strict --target`: decide for this host kind rather than
    /// the detected one (a cross-host report; a run never sets it).
    pub target: Option<HostKind>,
    /// The compiled workflow's block and secrets.
    pub workflow: WorkflowFacts<'a>,
    /// The repository.
    pub repo: &'a RepoSnapshot,
    /// Host facts for mount planning (home, uid/gid, git identity, which
    /// host_state candidates exist).
    pub host: &'a HostSnapshot,
    /// What each driver offers, from the one probe.
    pub offers: &'a [DriverOffer],
    /// Where the run's private directories will be.
    pub paths: &'a RunPaths,
    /// What binds are judged with (host facts, iterion's private areas and
    /// managed roots); the selected engine's own paths are added here.
    pub binds: &'a HostBindSettings,
    /// The host filesystem, as the bind judge asks it.
    pub fs: &'a dyn HostPaths,
    /// Host variables `${localEnv:…}` may read (only allowlisted names are
    /// ever read, see [`iterion_core::hostvars::local_env_allowed`]).
    pub local_env: &'a BTreeMap<String, String>,
    /// Binds iterion itself provides where the driver keeps host binds
    /// (the claw runner binary, read-only).
    pub runtime_mounts: &'a [Mount],
}

impl std::fmt::Debug for DecisionRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionRequest")
            .field("run_id", &self.run_id)
            .field("trust", &self.trust)
            .field("flags", &self.flags)
            .field("target", &self.target)
            .field("workspace", &self.repo.workspace)
            .field(
                "offers",
                &self.offers.iter().map(|o| o.driver).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

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
    fn new(refused: Refused, reason: impl Into<String>) -> Self {
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

/// Decide the sandbox of one run. See the module doc.
pub fn decide(req: &DecisionRequest<'_>) -> SandboxDecision {
    let detected_host = detect_host(&req.env.snapshot);
    let host = req.target.unwrap_or(detected_host);
    let inputs = PrecedenceInputs {
        flags: req.flags,
        env: req.env,
        workflow: req.workflow.sandbox,
    };
    let mode = resolve_mode(&inputs);
    let (host_state, host_state_source) = resolve_host_state(&inputs);
    let (default_image, _) = resolve_default_image(&inputs);
    let selection = select_driver(host, mode.mode, req.offers);
    // Facts §3.5: the one question the run's boot will ask.
    let sandboxed = mode.mode.is_active() && selection.is_ok();
    let mut d = steps::Decider {
        req,
        decision: SandboxDecision {
            host,
            detected_host,
            mode,
            source: mode.source.to_string(),
            host_state,
            host_state_source,
            default_image,
            selection,
            spec: None,
            driver: None,
            binds: None,
            identity: None,
            admission: admit(req.trust, &mode, sandboxed),
            verdict: Verdict::Denied,
            events: Vec::new(),
        },
    };
    let verdict = d.verdict();
    d.decision.verdict = if d.decision.admission.admitted() {
        verdict
    } else {
        Verdict::Denied
    };
    d.decision
}

mod steps;

#[cfg(test)]
mod tests;
