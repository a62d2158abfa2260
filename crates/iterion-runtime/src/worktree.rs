//! `worktree: auto` (upstream `pkg/runtime/worktree.go`): a fresh git
//! worktree per run, used as the run's workspace, so the run's edits never
//! touch the operator's checkout (work in progress stays invisible to it)
//! and its commits land in the shared repository.
//!
//! [`setup`] creates the worktree, detached at the repository's `HEAD`,
//! under `<root>/worktrees/<run-id>` (the directory store's root, as
//! upstream) and records what the end needs ([`RunWorktree`], kept in the
//! run's launch record so `iterion resume` reuses the same worktree).
//! [`finalize`] runs after a finished run's teardown: the commits the run
//! made are put on a branch (`iterion/run/<run-id>` unless
//! `--branch-name`; a taken name gets a `-N` suffix, never overwritten),
//! then, with `--auto-merge` (the CLI default), squashed or fast-forwarded
//! into the branch the operator had checked out, or `--merge-into`'s — only
//! when that branch is still the checked-out one and its tree has no
//! uncommitted tracked change, as upstream. Every step is best effort and
//! never changes the run's status; what it did is one event.
//!
//! Beyond upstream, nothing is ever lost: a worktree holding uncommitted
//! work is kept (upstream removes it with `--force`), a worktree whose
//! commits could not be put on a branch is kept (the commits stay reachable
//! from its `HEAD`, where `git gc` looks), and removal itself is git's
//! plain `worktree remove`, which refuses a dirty tree.
//!
//! `git` is run through [`crate::hostgit`], the one home of host-side git
//! (issue 31 item 1): no hook, filter, driver, pager, editor, signer or
//! transport of the repository's or the box's choosing runs, every
//! command but the first look at the repository is pinned to the
//! directories recorded at setup (a `.git` file or `commondir` the box
//! rewrote is never followed), each in its own process group under a
//! deadline, with `--` before every name that came from outside.
//!
//! [`end_of_run`] is the engine's one call, at the end of every run that
//! has a worktree, before the terminal event: a finished run is finalized
//! (`worktree_finalized`, and `worktree_branch_failed` when its commits
//! could not be put on a branch), any other end keeps the worktree
//! (`worktree_kept`: a failed run's for inspection, a paused or interrupted
//! one's for `iterion resume`).
//!
//! This module does not decide the `.git` bind (the sandbox decision does,
//! from [`RunWorktree::git_dir`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use iterion_core::{EventKind, RunStatus};
use serde::{Deserialize, Serialize};

use crate::events::Emitter;
use crate::hostgit::{HostGit, HostGitError, PinnedRepo};

/// Default storage branch prefix (upstream naming).
pub const BRANCH_PREFIX: &str = "iterion/run/";

/// Where `--merge-into` lands the run's commits.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeInto {
    /// The branch checked out when the run started (`""`, `current`).
    #[default]
    Current,
    /// No merge: the storage branch alone (`none`).
    None,
    /// This branch (it must be the one checked out at the end).
    Branch(String),
}

impl std::str::FromStr for MergeInto {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" | "current" => Ok(Self::Current),
            "none" => Ok(Self::None),
            name => {
                validate_branch_name(name)?;
                Ok(Self::Branch(name.to_owned()))
            }
        }
    }
}

/// How the run's commits are applied to the merge target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeStrategy {
    /// One commit on the target holding every change (upstream default).
    #[default]
    Squash,
    /// Fast-forward only: the run's commits as they are.
    Merge,
}

/// The operator's `--branch-name`, `--merge-into`, `--merge-strategy`,
/// `--auto-merge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromoteOptions {
    /// The storage branch (default `iterion/run/<run-id>`).
    pub branch_name: Option<String>,
    /// The merge target.
    pub merge_into: MergeInto,
    /// Squash or fast-forward.
    pub strategy: MergeStrategy,
    /// Merge at the end of the run (`false`: the branch only, merge
    /// `pending`).
    pub auto_merge: bool,
}

impl Default for PromoteOptions {
    fn default() -> Self {
        Self {
            branch_name: None,
            merge_into: MergeInto::Current,
            strategy: MergeStrategy::Squash,
            auto_merge: true,
        }
    }
}

/// One run's worktree, as [`setup`] made it (kept in the launch record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWorktree {
    /// The worktree, absolute: the run's workspace.
    pub path: String,
    /// The repository's top level (the main checkout).
    pub repo_root: String,
    /// The repository's shared git directory, absolute: what a sandbox
    /// must see at the same path for the worktree's `gitdir:` to resolve
    /// (facts §6.5).
    pub git_dir: String,
    /// The worktree's own part of it (`<git_dir>/worktrees/<name>`).
    pub admin_dir: String,
    /// The operator's checkout's own git directory (`git_dir` itself for
    /// a main checkout; absent in records made before it was kept, which
    /// then mean `git_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_git_dir: Option<String>,
    /// What the worktree's `.git` file said when it was made: the host
    /// runs git in the worktree only while it still says exactly that (the
    /// box can rewrite it to point at a repository it wrote).
    pub dotgit: String,
    /// `HEAD` of the repository when the run started.
    pub base_commit: String,
    /// The branch checked out then (`None`: detached HEAD).
    pub original_branch: Option<String>,
    /// The repository had uncommitted tracked changes at start (they are
    /// not in the worktree).
    pub dirty: bool,
    /// The run's default storage branch name (`iterion/run/<run-id>`).
    pub default_branch: String,
    /// What the end does.
    pub promote: PromoteOptions,
}

/// Why a worktree could not be created (nothing was: every check comes
/// before `git worktree add`).
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// No `git` program to run.
    #[error("worktree: auto needs git, which cannot be run: {source}")]
    GitMissing {
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The workspace is not inside a git repository.
    #[error("worktree: auto needs a git repository, and {path} is not in one: {detail}")]
    NotARepo {
        /// The workspace.
        path: String,
        /// What git said.
        detail: String,
    },
    /// The repository has no commit to start the worktree from.
    #[error("worktree: auto needs a commit to start from, and {repo} has none yet (unborn HEAD)")]
    NoCommit {
        /// The repository.
        repo: String,
    },
    /// A branch name the operator gave cannot be a safe branch.
    #[error("{flag} {name:?}: {why}")]
    BadBranchName {
        /// The flag.
        flag: &'static str,
        /// The name.
        name: String,
        /// The rule it breaks.
        why: String,
    },
    /// The worktree's directory already exists.
    #[error("worktree {path} already exists; refusing to reuse another run's worktree")]
    Exists {
        /// The path.
        path: String,
    },
    /// A git command failed.
    #[error("git {operation} failed: {detail}")]
    Git {
        /// What was run.
        operation: String,
        /// What git said.
        detail: String,
    },
    /// A directory could not be made.
    #[error("worktree {operation}: {source}")]
    Io {
        /// What was being done.
        operation: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl WorktreeError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::GitMissing { .. } => "WORKTREE_GIT_MISSING",
            Self::NotARepo { .. } => "WORKTREE_NOT_A_REPO",
            Self::NoCommit { .. } => "WORKTREE_NO_COMMIT",
            Self::BadBranchName { .. } => "WORKTREE_BAD_BRANCH_NAME",
            Self::Exists { .. } => "WORKTREE_EXISTS",
            Self::Git { .. } => "WORKTREE_GIT_FAILED",
            Self::Io { .. } => "WORKTREE_IO",
        }
    }

    /// The operator's input (or host) is at fault rather than iterion.
    pub fn is_user_input(&self) -> bool {
        !matches!(self, Self::Io { .. })
    }
}

/// A branch name from a user-controlled surface (`--branch-name`,
/// `--merge-into`): upstream's allow-list, tighter than git's own
/// `check-ref-format` so every accepted name also passes it, and never
/// starting with `-` (no name can be read as a flag).
pub fn validate_branch_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a branch name must not be empty".into());
    }
    if name.len() > 255 {
        return Err("a branch name must be at most 255 bytes".into());
    }
    let mut bytes = name.bytes();
    if !bytes.next().is_some_and(|b| b.is_ascii_alphanumeric()) {
        return Err("a branch name must start with a letter or a digit".into());
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-')) {
        return Err("a branch name may hold only letters, digits, '.', '_', '/' and '-'".into());
    }
    for bad in ["..", "//", "/.", "@{"] {
        if name.contains(bad) {
            return Err(format!("a branch name must not contain {bad:?}"));
        }
    }
    if name.ends_with('/') || name.ends_with('.') || name.ends_with(".lock") {
        return Err("a branch name must not end with '/', '.' or '.lock'".into());
    }
    Ok(())
}

/// What [`setup`] needs.
#[derive(Debug, Clone)]
pub struct WorktreeRequest<'a> {
    /// Where the operator launched the run (inside the repository).
    pub workspace: &'a Path,
    /// The root the worktree goes under (`<root>/worktrees/<run-id>`).
    pub root: &'a Path,
    /// The run's id (the directory's name and the default branch's).
    pub run_id: &'a str,
    /// The end's options (`--branch-name` is validated here).
    pub promote: PromoteOptions,
}

/// Create the run's worktree: detached at the repository's `HEAD`, with
/// none of the checkout's uncommitted state (the point of isolation).
pub fn setup(req: &WorktreeRequest<'_>) -> Result<RunWorktree, WorktreeError> {
    if let Some(name) = &req.promote.branch_name {
        validate_branch_name(name).map_err(|why| WorktreeError::BadBranchName {
            flag: "--branch-name",
            name: name.clone(),
            why,
        })?;
    }
    let default_branch = format!("{BRANCH_PREFIX}{}", req.run_id);
    validate_branch_name(&default_branch).map_err(|why| WorktreeError::BadBranchName {
        flag: "--run-id",
        name: default_branch.clone(),
        why,
    })?;
    let ws = req.workspace;
    // The one look at the repository that finds it the usual way: its
    // directories, which every later command is pinned to.
    let found = HostGit::discover(ws)
        .read(&[
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
        ])
        .map_err(|e| match WorktreeError::from(e) {
            WorktreeError::Git { detail, .. } => WorktreeError::NotARepo {
                path: ws.display().to_string(),
                detail,
            },
            other => other,
        })?;
    let lines: Vec<&str> = found.lines().collect();
    let [top, own_git_dir, common] = lines[..] else {
        return Err(WorktreeError::NotARepo {
            path: ws.display().to_string(),
            detail: format!("unexpected answer from git rev-parse: {found:?}"),
        });
    };
    let repo_root = PathBuf::from(top);
    let git_dir = PathBuf::from(common);
    let repo = HostGit::pinned(PinnedRepo {
        git_dir: PathBuf::from(own_git_dir),
        common_dir: git_dir.clone(),
        work_tree: repo_root.clone(),
    });
    let base_commit = repo
        .read(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .map_err(|_| WorktreeError::NoCommit {
            repo: repo_root.display().to_string(),
        })?;
    let original_branch = current_branch(&repo);
    let dirty = !repo
        .read(&["status", "--porcelain", "--untracked-files=no"])?
        .is_empty();

    let parent = req.root.join("worktrees");
    std::fs::create_dir_all(&parent).map_err(|source| WorktreeError::Io {
        operation: format!("create {}", parent.display()),
        source,
    })?;
    let parent = parent.canonicalize().map_err(|source| WorktreeError::Io {
        operation: format!("resolve {}", parent.display()),
        source,
    })?;
    let path = parent.join(req.run_id);
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(WorktreeError::Exists {
            path: path.display().to_string(),
        });
    }
    repo.run(&[
        OsStr::new("worktree"),
        OsStr::new("add"),
        OsStr::new("--detach"),
        OsStr::new("--"),
        path.as_os_str(),
        OsStr::new(&base_commit),
    ])?;
    // The `.git` file git has just written: read once, to pin the rest.
    let admin_dir = HostGit::discover(&path).read(&["rev-parse", "--absolute-git-dir"])?;
    let dotgit = read_dotgit(&path).map_err(|source| WorktreeError::Io {
        operation: format!("read {}/.git", path.display()),
        source,
    })?;
    Ok(RunWorktree {
        path: path.display().to_string(),
        repo_root: repo_root.display().to_string(),
        git_dir: git_dir.display().to_string(),
        admin_dir,
        repo_git_dir: Some(own_git_dir.to_owned()),
        dotgit,
        base_commit,
        original_branch,
        dirty,
        default_branch,
        promote: req.promote.clone(),
    })
}

/// The worktree's `.git` pointer file, never through a symlink.
fn read_dotgit(worktree: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(worktree.join(".git"))?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    f.by_ref().take(4096).read_to_string(&mut text)?;
    Ok(text)
}

impl RunWorktree {
    /// git on the operator's checkout, pinned to the directories recorded
    /// at setup.
    fn repo_git(&self) -> HostGit {
        HostGit::pinned(PinnedRepo {
            git_dir: PathBuf::from(self.repo_git_dir.as_deref().unwrap_or(&self.git_dir)),
            common_dir: PathBuf::from(&self.git_dir),
            work_tree: PathBuf::from(&self.repo_root),
        })
    }

    /// git on the run's worktree, pinned the same way.
    fn worktree_git(&self) -> HostGit {
        HostGit::pinned(PinnedRepo {
            git_dir: PathBuf::from(&self.admin_dir),
            common_dir: PathBuf::from(&self.git_dir),
            work_tree: PathBuf::from(&self.path),
        })
    }

    /// The worktree's `.git` still points where it did when it was made:
    /// only then does the host run git in it.
    fn pointer_intact(&self) -> Result<(), String> {
        match read_dotgit(Path::new(&self.path)) {
            Ok(text) if text == self.dotgit => Ok(()),
            Ok(_) => Err("the worktree's .git pointer was changed during the run".into()),
            Err(e) => Err(format!("the worktree's .git pointer is unreadable: {e}")),
        }
    }

    /// The worktree is still there and still a worktree of its repository
    /// (`iterion resume` reuses it).
    pub fn check_present(&self) -> Result<(), WorktreeError> {
        self.pointer_intact()
            .map_err(|detail| WorktreeError::NotARepo {
                path: self.path.clone(),
                detail,
            })?;
        // Found the usual way on purpose: this checks what is on disk.
        let common = HostGit::discover(Path::new(&self.path))
            .read(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .map_err(|e| WorktreeError::NotARepo {
                path: self.path.clone(),
                detail: e.to_string(),
            })?;
        if Path::new(&common) != Path::new(&self.git_dir) {
            return Err(WorktreeError::NotARepo {
                path: self.path.clone(),
                detail: format!("it now belongs to {common}, not {}", self.git_dir),
            });
        }
        Ok(())
    }
}

/// Remove a worktree no run used (the run could not even be recorded):
/// only while its `HEAD` is still the base and it holds nothing, so a
/// worktree with anything in it is never lost. Returns whether it went.
pub fn discard_unused(wt: &RunWorktree) -> bool {
    if wt.pointer_intact().is_err() {
        return false;
    }
    let git = wt.worktree_git();
    let unused = git
        .read(&["rev-parse", "--verify", "HEAD^{commit}"])
        .is_ok_and(|h| h == wt.base_commit)
        && untracked_or_changed(&git).is_ok_and(|dirty| !dirty);
    unused && remove_worktree(wt).is_ok()
}

/// How the end's merge went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeStatus {
    /// The branch exists; the merge waits for the operator
    /// (`--auto-merge=false`).
    Pending,
    /// Merged into the target.
    Merged,
    /// No merge was asked for or possible (`--merge-into none`, a detached
    /// start, no commits).
    Skipped,
    /// The merge was tried and refused or failed; the branch is kept.
    Failed,
}

impl MergeStatus {
    /// The word events carry (upstream's `merge_status`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Merged => "merged",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
        }
    }
}

/// What [`finalize`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    /// The worktree's `HEAD` at the end, when it moved.
    pub final_commit: Option<String>,
    /// The branch now holding it.
    pub final_branch: Option<String>,
    /// `(reason token, words)` when no branch could be made.
    pub branch_failed: Option<(&'static str, String)>,
    /// The merge.
    pub merge_status: MergeStatus,
    /// The branch merged into.
    pub merged_into: Option<String>,
    /// Its tip after the merge.
    pub merged_commit: Option<String>,
    /// Why the merge was skipped or failed, or why the worktree is kept.
    pub reason: Option<String>,
    /// The worktree directory was removed.
    pub removed: bool,
    /// The worktree holds changes no commit has: kept.
    pub uncommitted: bool,
}

/// The end of a run that has a worktree: promote a finished run's commits,
/// keep any other's worktree; one event says which (never fatal).
pub(crate) async fn end_of_run(wt: &RunWorktree, status: &RunStatus, events: &Emitter) {
    if *status != RunStatus::Finished {
        events.emit(EventKind::WorktreeKept {
            path: wt.path.clone(),
            reason: status.as_str().to_owned(),
        });
        return;
    }
    let owned = wt.clone();
    let done = match tokio::task::spawn_blocking(move || finalize(&owned)).await {
        Ok(done) => done,
        Err(e) => {
            events.emit(EventKind::WorktreeKept {
                path: wt.path.clone(),
                reason: format!("finalize stopped: {e}"),
            });
            return;
        }
    };
    if let Some((reason, error)) = &done.branch_failed {
        events.emit(EventKind::WorktreeBranchFailed {
            sha: done.final_commit.clone().unwrap_or_default(),
            reason: (*reason).to_owned(),
            branch: wt
                .promote
                .branch_name
                .clone()
                .unwrap_or_else(|| wt.default_branch.clone()),
            error: error.clone(),
        });
    }
    events.emit(EventKind::WorktreeFinalized {
        final_commit: done.final_commit.clone(),
        final_branch: done.final_branch.clone(),
        merge_status: done.merge_status.as_str().to_owned(),
        merged_into: done.merged_into.clone(),
        merged_commit: done.merged_commit.clone(),
        reason: done.reason.clone(),
        removed: done.removed,
    });
    if !done.removed {
        events.emit(EventKind::WorktreeKept {
            path: wt.path.clone(),
            reason: if done.uncommitted {
                "uncommitted_changes".to_owned()
            } else {
                done.reason
                    .clone()
                    .unwrap_or_else(|| "not removed".to_owned())
            },
        });
    }
}

/// Promote a finished run's commits and remove its worktree when nothing
/// would be lost by it.
pub fn finalize(wt: &RunWorktree) -> Finalized {
    let repo = wt.repo_git();
    let mut out = Finalized {
        final_commit: None,
        final_branch: None,
        branch_failed: None,
        merge_status: MergeStatus::Skipped,
        merged_into: None,
        merged_commit: None,
        reason: None,
        removed: false,
        uncommitted: false,
    };
    // Git runs in the worktree only through the pointer it was made with.
    if let Err(why) = wt.pointer_intact() {
        out.reason = Some(why);
        out.uncommitted = true;
        return out;
    }
    let git = wt.worktree_git();
    let head = match git.read(&["rev-parse", "--verify", "HEAD^{commit}"]) {
        Ok(h) => h,
        Err(e) => {
            out.reason = Some(format!("cannot read the worktree's HEAD: {e}"));
            return out;
        }
    };
    // A failure to read the status counts as uncommitted work: the
    // worktree is then kept.
    out.uncommitted = untracked_or_changed(&git).unwrap_or(true);
    if head == wt.base_commit {
        out.reason = Some("no commits".into());
    } else {
        out.final_commit = Some(head.clone());
        promote(wt, &repo, &head, &mut out);
    }
    // The commits must be on a branch before the worktree (whose HEAD is
    // their only other root) goes.
    let commits_safe = out.final_commit.is_none() || out.final_branch.is_some();
    if commits_safe && !out.uncommitted {
        out.removed = remove_worktree(wt).is_ok();
    }
    out
}

/// The worktree holds a change no commit has, untracked files included
/// (whatever `status.showUntrackedFiles` says).
fn untracked_or_changed(git: &HostGit) -> Result<bool, HostGitError> {
    git.read(&["status", "--porcelain", "--untracked-files=normal"])
        .map(|s| !s.is_empty())
}

/// git's plain `worktree remove` (it refuses a dirty tree).
fn remove_worktree(wt: &RunWorktree) -> Result<(), HostGitError> {
    wt.repo_git()
        .run(&[
            OsStr::new("worktree"),
            OsStr::new("remove"),
            OsStr::new("--"),
            OsStr::new(&wt.path),
        ])
        .map(drop)
}

fn promote(wt: &RunWorktree, repo: &HostGit, head: &str, out: &mut Finalized) {
    let wanted = wt
        .promote
        .branch_name
        .clone()
        .unwrap_or_else(|| wt.default_branch.clone());
    if let Err(why) = validate_branch_name(&wanted) {
        out.branch_failed = Some((
            "invalid_name",
            format!("invalid branch name {wanted:?}: {why}"),
        ));
        out.merge_status = MergeStatus::Failed;
        out.reason = Some("no branch".into());
        return;
    }
    let branch = match create_branch_safely(repo, &wanted, head) {
        Ok(b) => b,
        Err(e) => {
            out.branch_failed = Some((
                "git_branch_failed",
                format!("{e} (recover with: git branch <name> {head})"),
            ));
            out.merge_status = MergeStatus::Failed;
            out.reason = Some("no branch".into());
            return;
        }
    };
    out.final_branch = Some(branch.clone());
    let target = match &wt.promote.merge_into {
        MergeInto::None => {
            out.reason = Some("--merge-into none".into());
            return;
        }
        MergeInto::Current => match &wt.original_branch {
            Some(b) => b.clone(),
            None => {
                out.reason = Some("detached HEAD at start: no branch to merge into".into());
                return;
            }
        },
        MergeInto::Branch(b) => b.clone(),
    };
    if !wt.promote.auto_merge {
        out.merge_status = MergeStatus::Pending;
        return;
    }
    let merged = guard_target(repo, &target, wt.original_branch.as_deref()).and_then(|()| match wt
        .promote
        .strategy
    {
        MergeStrategy::Merge => fast_forward(repo, &target, &branch, head),
        MergeStrategy::Squash => squash(repo, &branch, &squash_message(repo, wt, head)),
    });
    match merged {
        Ok(commit) => {
            out.merge_status = MergeStatus::Merged;
            out.merged_into = Some(target);
            out.merged_commit = Some(commit);
        }
        Err(why) => {
            out.merge_status = MergeStatus::Failed;
            out.reason = Some(why);
        }
    }
}

/// Create `name` at `sha`; a taken name retries `name-1` … `name-16`, so a
/// branch the operator owns is never moved.
fn create_branch_safely(repo: &HostGit, name: &str, sha: &str) -> Result<String, WorktreeError> {
    let mut last = None;
    for i in 0..=16 {
        let candidate = match i {
            0 => name.to_owned(),
            n => format!("{name}-{n}"),
        };
        match repo.run(&["branch", "--", &candidate, sha]) {
            Ok(_) => return Ok(candidate),
            Err(HostGitError::Failed { detail, .. }) if detail.contains("already exists") => {
                last = Some(detail);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(WorktreeError::Git {
        operation: format!("branch {name} (and -1 … -16)"),
        detail: last.unwrap_or_default(),
    })
}

/// The merge touches the operator's checkout: only the branch checked out
/// at start, still checked out, with no uncommitted tracked change (an
/// unreadable status counts as dirty).
fn guard_target(repo: &HostGit, target: &str, original: Option<&str>) -> Result<(), String> {
    let current = current_branch(repo);
    if let Some(orig) = original
        && current.as_deref() != Some(orig)
    {
        return Err(format!(
            "the checked-out branch changed from {orig:?} to {:?} since the run started",
            current.as_deref().unwrap_or("(detached)")
        ));
    }
    if current.as_deref() != Some(target) {
        return Err(format!(
            "only the checked-out branch ({:?}) can be merged into, not {target:?}",
            current.as_deref().unwrap_or("(detached)")
        ));
    }
    match repo.read(&["status", "--porcelain", "--untracked-files=no"]) {
        Ok(s) if s.is_empty() => Ok(()),
        Ok(_) => Err("the main working tree has uncommitted changes".into()),
        Err(e) => Err(format!("git status failed before the merge: {e}")),
    }
}

fn fast_forward(repo: &HostGit, target: &str, branch: &str, head: &str) -> Result<String, String> {
    let target_ref = format!("refs/heads/{target}");
    if repo
        .run(&["merge-base", "--is-ancestor", &target_ref, head])
        .is_err()
    {
        return Err(format!(
            "not a fast-forward: {target:?} has commits the run does not"
        ));
    }
    repo.run(&["merge", "--ff-only", "--no-edit", branch])
        .map_err(|e| e.to_string())?;
    Ok(head.to_owned())
}

fn squash(repo: &HostGit, branch: &str, message: &str) -> Result<String, String> {
    let before = repo
        .read(&["rev-parse", "HEAD"])
        .map_err(|e| e.to_string())?;
    if let Err(e) = repo.run(&["merge", "--squash", branch]) {
        let _ = repo.run(&["reset", "--merge"]);
        return Err(e.to_string());
    }
    match repo.run(&["commit", "--no-edit", "-m", message]) {
        Ok(_) => repo.read(&["rev-parse", "HEAD"]).map_err(|e| e.to_string()),
        // The run's changes were already there: the target stays put.
        Err(HostGitError::Failed { detail, .. }) if detail.contains("nothing to commit") => {
            Ok(before)
        }
        Err(e) => {
            let _ = repo.run(&["reset", "--merge"]);
            Err(e.to_string())
        }
    }
}

/// One commit: its whole message. Several: the first subject, then one
/// `- <short> <subject>` line per commit (upstream's shape).
fn squash_message(repo: &HostGit, wt: &RunWorktree, head: &str) -> String {
    let range = format!("{}..{head}", wt.base_commit);
    let log = repo
        .read(&["log", "--reverse", "--format=%h %s", &range])
        .unwrap_or_default();
    let commits: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    if commits.len() == 1
        && let Ok(full) = repo.read(&["log", "-1", "--format=%B", head])
        && !full.is_empty()
    {
        return format!("{full}\n");
    }
    let title = commits
        .first()
        .and_then(|l| l.split_once(' '))
        .map(|(_, s)| s.to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("iterion run {}", wt.default_branch));
    let mut msg = format!("{title}\n");
    if commits.len() > 1 {
        msg.push('\n');
        for c in commits {
            msg.push_str("- ");
            msg.push_str(c);
            msg.push('\n');
        }
    }
    msg
}

fn current_branch(repo: &HostGit) -> Option<String> {
    repo.read(&["symbolic-ref", "--quiet", "--short", "HEAD"])
        .ok()
        .filter(|b| !b.is_empty())
}

impl From<HostGitError> for WorktreeError {
    fn from(e: HostGitError) -> Self {
        match e {
            HostGitError::Spawn { kind, detail } => match kind {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                    Self::GitMissing {
                        source: std::io::Error::new(kind, detail),
                    }
                }
                _ => Self::Io {
                    operation: "run git".into(),
                    source: std::io::Error::new(kind, detail),
                },
            },
            HostGitError::Failed { operation, detail } => Self::Git { operation, detail },
            other @ (HostGitError::Refused { .. }
            | HostGitError::Config { .. }
            | HostGitError::Pointer { .. }
            | HostGitError::Deadline { .. }) => Self::Git {
                operation: other.code().to_owned(),
                detail: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
#[path = "worktree_tests.rs"]
mod tests;
