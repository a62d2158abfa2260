//! What the sandbox decision is asked: [`DecisionRequest`] and the facts
//! it carries — the compiled workflow's block and secret shapes
//! ([`WorkflowFacts`], [`FileSecretShape`]), the repository as found on
//! the host ([`RepoSnapshot`], with its one impure capture) and where the
//! run's private directories will be ([`RunPaths`]). Plain data that
//! [`super::decide`] and its steps read; owns no step of the decision and
//! none of its outcome.

use std::collections::BTreeMap;
use std::path::Path;

use iterion_core::{Mount, Spec, Trust};

use crate::binds::{HostBindSettings, HostPaths};
use crate::devcontainer::{Devcontainer, read_repo_devcontainer};
use crate::env::SandboxEnv;
use crate::error::PolicyError;
use crate::host::{DriverOffer, HostKind};
use crate::mounts::HostSnapshot;
use crate::precedence::SandboxFlags;

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
    /// Its `hooks` when the repository has none (`git init --template=`):
    /// an empty read-only directory is bound there, so the box cannot
    /// create one the host's git would run (issue 31 item 1).
    pub worktree_git_masks: Vec<String>,
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
            worktree_git_masks: Vec::new(),
        }
    }

    /// The run's worktree shares `git_dir` with its repository (its own
    /// part of it is `admin_dir`, `<git_dir>/worktrees/<name>`): note it
    /// when it is a directory (upstream binds nothing otherwise), with what
    /// of it the host's git executes or follows, kept read-only: the
    /// repository's `config` and `hooks`, and the worktree's `commondir`
    /// and `gitdir` pointers (rewritten, they would lead the host's git to
    /// a config the box wrote). A `hooks` directory the repository lacks
    /// is noted to be masked instead: absent, the guard would be skipped
    /// and the box could create it.
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
        self.worktree_git_masks = git_dir
            .filter(|d| d.is_dir())
            .map(|d| d.join("hooks"))
            .filter(|h| std::fs::symlink_metadata(h).is_err())
            .map(|h| h.to_string_lossy().into_owned())
            .into_iter()
            .collect();
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
    /// Why no statically linked `iterion` can run inside the container,
    /// when the workflow needs one there (claw agent nodes, in-box
    /// built-ins) and the lookup found none: the files examined and the
    /// fix. A run that would start a sandbox is then refused at admission
    /// ([`super::RUNNER_UNAVAILABLE`]) rather than failing inside it.
    pub runner_missing: Option<&'a str>,
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
