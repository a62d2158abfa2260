//! The finalized, typed plan a driver launches: every mount resolved, every
//! variable decided, the read-back set declared. Built by the policy crate
//! (`iterion-sandbox`), consumed by drivers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::size::ByteSize;
use crate::spec::BuildSpec;

/// Container path of the run-files directory (ADR-143).
pub const RUN_FILES_CONTAINER_DIR: &str = "/iterion/artifact-files";
/// Variable naming the run-files directory inside the container.
pub const RUN_FILES_ENV: &str = "ITERION_ARTIFACT_FILES_DIR";
/// Container path of the attachments directory.
pub const ATTACHMENTS_CONTAINER_DIR: &str = "/run/iterion/attachments";
/// Container path of the bundle directory.
pub const BUNDLE_CONTAINER_DIR: &str = "/run/iterion/bundle";
/// Container directory of per-run secret files.
pub const SECRETS_CONTAINER_DIR: &str = "/run/iterion/secrets";

/// Container directory of the run's egress trust (issue 17): the CA
/// certificate and the bundle with the image's own roots. One place on
/// every driver, so the variables pointing TLS stacks at them are the same.
pub const EGRESS_TRUST_DIR: &str = "/etc/iterion-egress";
/// The run's egress CA certificate alone (stacks that add to their roots).
pub const EGRESS_TRUST_CA: &str = "/etc/iterion-egress/ca.pem";
/// The image's roots plus the run's CA (stacks that replace their roots).
pub const EGRESS_TRUST_BUNDLE: &str = "/etc/iterion-egress/ca-bundle.pem";

/// Everything a driver needs to prepare and start one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LaunchPlan {
    /// Image reference (after a build, the built tag).
    pub image: Option<String>,
    /// Build recipe with paths already resolved to absolute host paths.
    pub build: Option<ResolvedBuild>,
    /// User to run as (`uid[:gid]` or a name).
    pub user: Option<String>,
    /// Container workspace path (also the default exec workdir).
    pub workdir: String,
    /// Container environment, sorted by key.
    pub env: BTreeMap<String, String>,
    /// Every mount the driver must create, in order.
    pub mounts: Vec<Mount>,
    /// Declared read-back paths (ADR-143 R1): data next to the mounts.
    pub read_back: Vec<ReadBackDecl>,
    /// `sh -c` snippet run once after start.
    pub post_create: Option<String>,
    /// Resource and containment limits.
    pub limits: Limits,
    /// Egress confinement; `None` = open networking.
    pub egress: Option<EgressAttachment>,
    /// Add `host.docker.internal` → host gateway.
    pub host_gateway_alias: bool,
    /// TCP ports of the run's own host listeners (seed step 18: the MCP
    /// listener) on the gateway a confined sandbox may reach besides the
    /// proxy's; the firewall admits them for this run only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway_ports: Vec<u16>,
    /// The workspace is copied in at start and exported back at teardown
    /// (a driver without host binds that declares
    /// [`crate::Capabilities::workspace_export`]); `None` on a bind-based
    /// run. Set by the policy's finalize step, completed by the booter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_copy: Option<WorkspaceCopy>,
    /// The PEM certificate (never the key) of the run's egress CA when the
    /// proxy inspects (issue 17), set by the booter before start. A driver
    /// that can place it at creation does (Kubernetes: the per-run Secret,
    /// projected read-only at [`EGRESS_TRUST_CA`]) and says so through
    /// [`crate::SandboxRun::egress_ca_placed`]; any other ignores it and
    /// the runtime installs it in the started sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ca: Option<String>,
}

/// A copy-based workspace (issue 14 item 2): what the driver copies into
/// the container's workspace volume before `post_create`, and what the
/// runtime writes back onto at teardown.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WorkspaceCopy {
    /// Absolute real path of the host workspace (judged like a workspace
    /// bind: never `/`, a home, a system area).
    pub host: String,
    /// Paths relative to `host` never copied in and never written or
    /// deleted by the export: iterion's own areas inside the workspace
    /// (the run store, the per-run state dirs), which a bind run masks.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Host file (in the run's private state dir) where the copy records
    /// what it copied, so the export can tell what the run changed or
    /// deleted from what changed on the host meanwhile. `None`: no record,
    /// and the export only adds and overwrites.
    #[serde(default)]
    pub manifest: Option<String>,
}

/// A build recipe resolved against the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResolvedBuild {
    /// Absolute host path of the Dockerfile.
    pub dockerfile: String,
    /// Absolute host path of the build context.
    pub context: String,
    /// Build args.
    pub args: BTreeMap<String, String>,
    /// The recipe as written (for events).
    pub declared: BuildSpec,
}

/// One mount of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Mount type.
    pub kind: MountKind,
    /// Host path (bind), volume name (volume), or cluster object name.
    pub source: Option<String>,
    /// Absolute container path.
    pub target: String,
    /// Read-only.
    pub readonly: bool,
    /// `size=` option (tmpfs size, read-back cap of the serving mount).
    pub size: Option<ByteSize>,
    /// Who asked for it (drives which variables a drop withdraws).
    pub origin: MountOrigin,
}

impl Mount {
    /// Whether this mount needs the host filesystem.
    pub fn is_host_bind(&self) -> bool {
        matches!(self.kind, MountKind::Bind)
    }

    /// Whether `container_path` equals or lies under this mount's target.
    pub fn serves(&self, container_path: &str) -> bool {
        path_is_under(container_path, &self.target)
    }
}

// A path question, answered where paths are parsed (`crate::path`);
// named here too, where mounts ask it.
pub use crate::path::path_is_under;

/// Mount types across drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountKind {
    /// Host directory or file.
    Bind,
    /// Engine-managed named volume.
    Volume,
    /// Memory-backed filesystem.
    Tmpfs,
    /// Kubernetes PersistentVolumeClaim.
    Pvc,
    /// Kubernetes ConfigMap.
    ConfigMap,
    /// Kubernetes Secret.
    Secret,
}

impl MountKind {
    /// Parse the `type=` word of a mount spec.
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "bind" => Some(Self::Bind),
            "volume" => Some(Self::Volume),
            "tmpfs" => Some(Self::Tmpfs),
            "pvc" => Some(Self::Pvc),
            "configmap" => Some(Self::ConfigMap),
            "secret" => Some(Self::Secret),
            _ => None,
        }
    }
}

/// Why a mount is in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountOrigin {
    /// The workspace itself.
    Workspace,
    /// The workflow's (or devcontainer's) `mounts:`.
    Workflow,
    /// A host_state candidate or its tmpfs HOME.
    HostState,
    /// The per-run scratch area.
    Scratch,
    /// The attachments directory.
    Attachments,
    /// The run-files directory (`ITERION_ARTIFACT_FILES_DIR`).
    RunFiles,
    /// A declared read-back path other than run-files.
    ReadBack,
    /// The bundle directory.
    Bundle,
    /// The worktree's repository `.git`.
    WorktreeGit,
    /// A read-only bind over what of that `.git` the host's git executes
    /// from (`config`, `hooks`): a sandbox that could write them would run
    /// its code on the host at the operator's next git command.
    WorktreeGitGuard,
    /// A per-run secret file.
    SecretFile,
    /// An empty read-only directory laid over an iterion area (the run
    /// store) that another bind would expose to the sandbox, or over the
    /// `hooks` a worktree's repository lacks (so the box cannot create
    /// one).
    Mask,
    /// The `iterion` binary the claw runner execs, read-only at
    /// `/usr/local/bin/iterion` (facts §6.5).
    RunnerBinary,
}

/// A declared read-back path (ADR-143).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadBackDecl {
    /// Absolute, normalized container path.
    pub container_path: String,
    /// Cap on the bytes kept for this path (summed over drain attempts).
    pub cap: ByteSize,
    /// Whether this is the run-files directory or a workflow-declared path.
    pub origin: MountOrigin,
}

/// Default memory limit of a sandbox (issue 19 #5): enough for a coding
/// agent's CLI plus a build, low enough that a runaway allocation is
/// stopped long before the host is. Operators lift it with
/// `ITERION_SANDBOX_MEMORY`.
pub const DEFAULT_MEMORY_LIMIT: ByteSize = ByteSize(2 << 30);
/// Default process limit of a sandbox (a fork bomb stops here);
/// `ITERION_SANDBOX_PIDS` changes it.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;
/// Default size of a sandbox's writable layer (what it writes outside its
/// binds and volumes), where the engine's storage driver can enforce one;
/// `ITERION_SANDBOX_DISK` changes it.
pub const DEFAULT_DISK_LIMIT: ByteSize = ByteSize(20 << 30);

/// Containment limits a runaway agent cannot talk its way out of. The
/// defaults are the product's; only the operator lifts them, explicitly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Maximum number of processes; `None` only when the operator asked
    /// for no limit.
    pub pids: Option<i64>,
    /// Memory limit in bytes (`ITERION_SANDBOX_MEMORY`); `None` only when
    /// the operator asked for no limit.
    pub memory: Option<ByteSize>,
    /// Memory plus swap. Always equal to `memory`: a sandbox gets no swap
    /// on top of its memory limit (swapping would only slow the bound).
    pub memory_swap: Option<ByteSize>,
    /// CPU limit in nano-CPUs (`ITERION_SANDBOX_CPUS`).
    pub nano_cpus: Option<i64>,
    /// Size of the writable layer (`ITERION_SANDBOX_DISK`); asked of the
    /// engine, which enforces it only on some storage drivers (a driver
    /// that cannot says so: [`crate::driver::SandboxRun::unenforced_limits`]).
    #[serde(default)]
    pub writable_layer: Option<ByteSize>,
    /// `no-new-privileges` (always on; a field so events can show it).
    pub no_new_privileges: bool,
    /// How the sandbox is kept from leaving host-root artefacts on its
    /// writable host binds (issue 19 item 4), as the policy decided it
    /// (`iterion_sandbox::identity`); the driver executes and verifies it.
    #[serde(default, skip_serializing_if = "HostRootGuard::is_unneeded")]
    pub host_root_guard: HostRootGuard,
}

/// How a sandbox whose writes could land on the host as host root is kept
/// from leaving setuid/setgid files, device nodes and file capabilities
/// there. Decided once by the policy; a driver that cannot execute it
/// refuses the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostRootGuard {
    /// Nothing the sandbox writes lands on the host as host root: no
    /// writable host bind, or an engine that maps container users away
    /// from host root.
    #[default]
    Unneeded,
    /// It runs as a pinned non-root `uid:gid` holding no capability,
    /// verified before the first command.
    NonRootUser,
    /// It runs as root (root's own root-owned checkout) with `MKNOD`,
    /// `SETFCAP` and `FSETID` dropped and a seccomp profile that refuses
    /// setuid/setgid modes with `EPERM`, verified before the first command.
    RootSeccomp,
}

impl HostRootGuard {
    /// Whether no guard is needed (the field is then left out of JSON).
    pub fn is_unneeded(&self) -> bool {
        *self == Self::Unneeded
    }

    /// Stable name (events, doctor).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unneeded => "unneeded",
            Self::NonRootUser => "non_root_user",
            Self::RootSeccomp => "root_seccomp",
        }
    }
}

impl Limits {
    /// These limits with `memory` as the memory bound and no extra swap.
    pub fn with_memory(mut self, memory: Option<ByteSize>) -> Self {
        self.memory = memory;
        self.memory_swap = memory;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            pids: Some(DEFAULT_PIDS_LIMIT),
            memory: Some(DEFAULT_MEMORY_LIMIT),
            memory_swap: Some(DEFAULT_MEMORY_LIMIT),
            nano_cpus: None,
            writable_layer: Some(DEFAULT_DISK_LIMIT),
            no_new_privileges: true,
            host_root_guard: HostRootGuard::Unneeded,
        }
    }
}

/// The variables that point a process at the egress proxy: the driver
/// sets them at create time (run token), the runtime again on each exec
/// (that exec's own credential).
pub const PROXY_ENV_VARS: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"];

/// How the sandbox reaches the egress proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressAttachment {
    /// Port the proxy listens on, on the host side.
    pub proxy_port: u16,
    /// Token the container presents (goes into `*_PROXY` env, never argv).
    pub token: String,
    /// Confine the container to a per-run internal network.
    pub enforce: bool,
}
