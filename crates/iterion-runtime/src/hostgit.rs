//! The one way the host runs `git` during a run (issue 31 item 1): every
//! host-side git invocation of iterion — `worktree: auto`'s setup,
//! promotion and cleanup, and the git identity a `host_state: none`
//! sandbox is given — is built here and nowhere else (a test below fails
//! on any other `Command::new("git")` in the workspace's sources).
//!
//! # Why
//!
//! The repository those commands run in is partly written by a sandbox.
//! Under `worktree: auto` the box has the repository's shared `.git`
//! read-write (facts §6.5; only `config`, `hooks` and its worktree's two
//! pointers are bound read-only over it), the worktree itself, and, with
//! `host_state: auto`, the operator's `~/.gitconfig`; a plain run has the
//! whole checkout, `.git/config` included. The host's git runs as the
//! operator (often root), after the box is gone. So the rule here is:
//! **the host's git runs no program but git itself**, whatever the
//! repository, its attributes or any config file say, and it reads the
//! repository the run was set up with, not one a `.git` file or a
//! `commondir` now points at.
//!
//! # How, setting by setting
//!
//! What a sandbox can reach, and what holds it:
//!
//! - **Hooks** (`.git/hooks/*` created when the directory was absent,
//!   `core.hooksPath=.githooks` with a committed hook that the merge
//!   checks out, a hooks directory of a planted common dir): every hook
//!   of every command — `pre-commit`, `commit-msg`, `post-merge`,
//!   `post-checkout`, `reference-transaction`, `post-index-change`,
//!   `pre-auto-gc`… — is off through `core.hooksPath=/dev/null` (a command
//!   line value beats every config file), and `commit`/`merge` also get
//!   `--no-verify`.
//! - **A planted common dir**: the box can write `.git/commondir`, and
//!   git in the main checkout would then read the config, hooks and refs
//!   of a directory the box made. A repository the run knows is *pinned*
//!   ([`PinnedRepo`]): `GIT_DIR`, `GIT_COMMON_DIR` and `GIT_WORK_TREE` are
//!   set, so neither a `.git` file nor `core.worktree` is read. git's ref
//!   store still reads a `commondir` file whatever `GIT_COMMON_DIR` says,
//!   so before every command the git directory's `commondir` is checked:
//!   absent for a main checkout, naming the recorded common dir for a
//!   linked one; anything else refuses the command
//!   ([`HostGitError::Pointer`]).
//! - **`core.fsmonitor`** (a program run on every index refresh):
//!   `core.fsmonitor=false` (and the old `core.useBuiltinFSMonitor`).
//! - **Filter drivers** (`filter.<x>.clean/smudge/process`, chosen by a
//!   `.gitattributes` the box commits or by `.git/info/attributes` it
//!   writes; the command itself from any config scope — `config.worktree`
//!   with `extensions.worktreeConfig`, `~/.gitconfig` under
//!   `host_state: auto`, or a trusted scope with a box-chosen input such
//!   as `.lfsconfig`): every filter the configuration names is emptied and
//!   made optional, so checkouts and status read and write the stored
//!   bytes (Git LFS files arrive as their pointers).
//! - **Merge drivers** (`merge.<x>.driver`, chosen by attributes): emptied;
//!   a conflicting file then stays a conflict and the merge is refused,
//!   with the run's branch kept.
//! - **Textconv and external diff** (`diff.<x>.textconv`,
//!   `diff.<x>.command`, `diff.external`): no command here produces a diff
//!   (`merge --no-stat`, `log` with a format and `--no-ext-diff
//!   --no-textconv`); the per-driver keys are emptied anyway.
//! - **`include.path` / `includeIf`** (planted in `config.worktree`, or
//!   pointing into the working tree, which a merge rewrites): an include
//!   cannot be switched off from the command line, so the included keys
//!   are what gets neutralised: before every command, the effective key
//!   list is read (`git config --list --name-only`, which follows the same
//!   includes and itself runs nothing) and every key of the families above
//!   is overridden. An include of something endless (`/dev/zero`, a FIFO)
//!   would hang git: every command has a deadline and its process group
//!   is killed past it.
//! - **Signing** (`commit.gpgSign` with a `gpg.program` the box chose,
//!   `log.showSignature`, `merge.verifySignatures`): off by
//!   `commit.gpgSign=false`, `log.showSignature=false`,
//!   `merge.verifySignatures=false`, and `--no-gpg-sign`,
//!   `--no-verify-signatures`, `--no-show-signature`.
//! - **Transports** (`core.sshCommand`, `remote.<x>.uploadpack`,
//!   `url.<x>.insteadOf`, `credential.helper`, `protocol.<x>.allow`,
//!   `core.alternateRefsCommand`, `http.*`, a lazy fetch of a partial
//!   clone's missing object): no command here talks to a remote, and none
//!   can start to: `GIT_ALLOW_PROTOCOL` is set empty (every transport is
//!   refused, overriding any `protocol.*` key), `GIT_NO_LAZY_FETCH=1`,
//!   `credential.helper` is reset to none.
//! - **Pager and editor** (`core.pager`, `pager.<cmd>`, `core.editor`,
//!   `sequence.editor`): `--no-pager`, `GIT_PAGER=cat`, `GIT_EDITOR=:`
//!   (git's no-op editor), stdin closed and stdout a pipe, and every
//!   message is given with `-m`/`--no-edit`.
//! - **Auto maintenance** (`gc.auto`, `maintenance.auto`: a background
//!   `git gc` after a commit): `gc.auto=0`, `maintenance.auto=false`.
//! - **Submodules** (a `.gitmodules` and `.git/modules/<x>` the box wrote,
//!   each with its own config): never entered — `submodule.recurse=false`,
//!   `status --ignore-submodules=all`.
//! - **Replace refs** (`refs/replace/*`): `GIT_NO_REPLACE_OBJECTS=1`, so
//!   the host judges the real commits.
//!
//! What no sandbox can reach is not taken wholesale either: of the
//! operator's environment only [`KEPT_ENV`] passes (a stray
//! `GIT_SSH_COMMAND` or `GIT_CONFIG_PARAMETERS` of the operator's shell
//! does not ride along), and the system config is not read
//! (`GIT_CONFIG_NOSYSTEM=1`: nothing the promotion needs lives there). The
//! operator's global config (`~/.gitconfig`, or `GIT_CONFIG_GLOBAL`) is
//! read — it holds the identity of the squash commit, `core.autocrlf` and
//! the like — but it is one of the files the box may have written
//! (`host_state: auto` binds `~/.gitconfig` read-write), so everything
//! above applies to its keys as well. Aliases never run: only the
//! built-in subcommands of [`SUBCOMMANDS`] can be invoked, and a built-in
//! cannot be aliased.
//!
//! Settings that cannot run anything but can still bend the outcome are
//! fixed by the callers' explicit flags (`status --porcelain
//! --untracked-files=normal`, whatever `status.showUntrackedFiles` says),
//! not by trusting the config.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// How long one git command may take before its process group is killed.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// Bytes of stdout kept from one command (more is an error: nothing the
/// host asks git for is that large).
const STDOUT_CAP: usize = 32 << 20;

/// Bytes of stderr kept for an error message.
const STDERR_CAP: usize = 64 << 10;

/// The built-in subcommands the host runs, each with the flags it always
/// gets (placed right after the subcommand). Anything else is refused:
/// a new use of git on the host is added here, with its reasoning.
pub const SUBCOMMANDS: &[(&str, &[&str])] = &[
    ("rev-parse", &[]),
    ("symbolic-ref", &[]),
    ("merge-base", &[]),
    ("branch", &[]),
    ("worktree", &[]),
    ("reset", &[]),
    // `config --get`/`--list` runs nothing (includes are read, not run).
    ("config", &[]),
    ("status", &["--ignore-submodules=all"]),
    (
        "log",
        &["--no-show-signature", "--no-ext-diff", "--no-textconv"],
    ),
    (
        "commit",
        &["--no-verify", "--no-gpg-sign", "--no-post-rewrite"],
    ),
    (
        "merge",
        &[
            "--no-verify",
            "--no-stat",
            "--no-gpg-sign",
            "--no-verify-signatures",
        ],
    ),
];

/// Config values every command gets (the command-line scope beats every
/// file, whichever file the box wrote).
const FIXED: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.useBuiltinFSMonitor", "false"),
    ("core.pager", "cat"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("merge.verifySignatures", "false"),
    ("log.showSignature", "false"),
    ("gc.auto", "0"),
    ("gc.autoDetach", "false"),
    ("maintenance.auto", "false"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("protocol.allow", "never"),
    ("credential.helper", ""),
];

/// Variables of the operator's environment a host git keeps: where the
/// program and the operator's global config are, the commit identity and
/// time zone. Everything else is cleared.
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "EMAIL",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Why a host git command did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostGitError {
    /// `git` could not be started.
    #[error("git cannot be run: {detail}")]
    Spawn {
        /// The OS error's kind (`NotFound`: no git on `PATH`).
        kind: std::io::ErrorKind,
        /// The OS error.
        detail: String,
    },
    /// A subcommand this module does not run.
    #[error("git {subcommand} is not a command the host runs")]
    Refused {
        /// The subcommand asked for.
        subcommand: String,
    },
    /// The effective configuration could not be listed, so it could not
    /// be neutralised: nothing was run.
    #[error("git's configuration cannot be read, so git is not run: {detail}")]
    Config {
        /// What git said.
        detail: String,
    },
    /// git ran and failed.
    #[error("git {operation} failed: {detail}")]
    Failed {
        /// The subcommand (and its first argument).
        operation: String,
        /// What git said (bounded).
        detail: String,
    },
    /// The pinned git directory's `commondir` does not lead where the run
    /// recorded: nothing was run.
    #[error(
        "{path} points git somewhere else than the repository the run was set up with ({detail}); git is not run"
    )]
    Pointer {
        /// The `commondir` file.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    /// git ran past its deadline and was killed.
    #[error("git {operation} did not finish within {seconds}s and was stopped")]
    Deadline {
        /// The subcommand.
        operation: String,
        /// The deadline.
        seconds: u64,
    },
}

impl HostGitError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Spawn { .. } => "HOST_GIT_UNAVAILABLE",
            Self::Refused { .. } => "HOST_GIT_REFUSED",
            Self::Config { .. } => "HOST_GIT_CONFIG",
            Self::Pointer { .. } => "HOST_GIT_POINTER",
            Self::Failed { .. } => "HOST_GIT_FAILED",
            Self::Deadline { .. } => "HOST_GIT_DEADLINE",
        }
    }
}

/// A repository whose directories are known: git is told them and reads
/// no pointer to find them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedRepo {
    /// The checkout's own git directory (`GIT_DIR`).
    pub git_dir: PathBuf,
    /// The shared one (`GIT_COMMON_DIR`).
    pub common_dir: PathBuf,
    /// The working tree (`GIT_WORK_TREE`, and the directory git runs in).
    pub work_tree: PathBuf,
}

/// One host git, ready to run commands.
#[derive(Debug, Clone)]
pub struct HostGit {
    dir: PathBuf,
    pinned: Option<PinnedRepo>,
    deadline: Duration,
}

/// What a successful command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitOutput {
    /// stdout.
    pub stdout: Vec<u8>,
    /// stderr.
    pub stderr: Vec<u8>,
}

impl GitOutput {
    /// stdout as text, trimmed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_owned()
    }
}

impl HostGit {
    /// git in `dir`, finding its repository the usual way: only to learn a
    /// repository's directories ([`HostGit::pinned`] for anything else).
    pub fn discover(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            pinned: None,
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// git on a known repository.
    pub fn pinned(repo: PinnedRepo) -> Self {
        Self {
            dir: repo.work_tree.clone(),
            pinned: Some(repo),
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// Another deadline per command.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Run `git ARGS…` (the first argument is the subcommand) and require
    /// success.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<GitOutput, HostGitError> {
        let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        let sub = args.first().and_then(|s| s.to_str()).unwrap_or_default();
        let Some((_, flags)) = SUBCOMMANDS.iter().find(|(name, _)| *name == sub) else {
            return Err(HostGitError::Refused {
                subcommand: sub.to_owned(),
            });
        };
        if let Some(repo) = &self.pinned {
            check_commondir(repo)?;
        }
        let overrides = self.overrides()?;
        let mut argv: Vec<&OsStr> = vec![OsStr::new(sub)];
        argv.extend(flags.iter().map(OsStr::new));
        argv.extend(args.iter().skip(1).copied());
        self.exec(&argv, &overrides)
    }

    /// Run and return stdout, trimmed.
    pub fn read<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String, HostGitError> {
        self.run(args).map(|o| o.text())
    }

    /// Every override this command gets: the fixed ones, and one per key
    /// of a code-running family the effective configuration names.
    fn overrides(&self) -> Result<Vec<(String, String)>, HostGitError> {
        let fixed: Vec<(String, String)> = FIXED
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let listed = self
            .exec(
                &[
                    OsStr::new("config"),
                    OsStr::new("--null"),
                    OsStr::new("--list"),
                    OsStr::new("--name-only"),
                ],
                &fixed,
            )
            .map_err(|e| match e {
                kept @ (HostGitError::Spawn { .. } | HostGitError::Deadline { .. }) => kept,
                other => HostGitError::Config {
                    detail: other.to_string(),
                },
            })?;
        let mut out = fixed;
        for key in listed.stdout.split(|b| *b == 0).filter(|k| !k.is_empty()) {
            let key = String::from_utf8_lossy(key);
            out.extend(neutralise(&key));
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn exec(
        &self,
        argv: &[&OsStr],
        overrides: &[(String, String)],
    ) -> Result<GitOutput, HostGitError> {
        let mut cmd = Command::new("git");
        cmd.arg("--no-pager")
            .arg("-C")
            .arg(&self.dir)
            .args(argv)
            .env_clear();
        for var in KEPT_ENV {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        cmd.env("LC_ALL", "C")
            .env("LANG", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_ALLOW_PROTOCOL", "")
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_EDITOR", ":")
            .env("GIT_SEQUENCE_EDITOR", ":")
            .env("GIT_PAGER", "cat")
            .env("PAGER", "cat");
        if let Some(p) = &self.pinned {
            cmd.env("GIT_DIR", &p.git_dir)
                .env("GIT_COMMON_DIR", &p.common_dir)
                .env("GIT_WORK_TREE", &p.work_tree);
        }
        // The overrides travel as GIT_CONFIG_COUNT/KEY/VALUE (git ≥ 2.31,
        // which `--path-format` already needs): a key is passed as it is,
        // whatever its subsection holds (an `=` would break `-c`).
        cmd.env("GIT_CONFIG_COUNT", overrides.len().to_string());
        for (i, (k, v)) in overrides.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
                .env(format!("GIT_CONFIG_VALUE_{i}"), v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a SIGINT to iterion's group must not
            // cut a commit in half, and the deadline kills all of it.
            .process_group(0);
        let operation: String = argv
            .iter()
            .take(2)
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let (status, stdout, stderr) = self.wait(cmd, &operation)?;
        if status.success() {
            return Ok(GitOutput { stdout, stderr });
        }
        let detail = format!(
            "{} {}",
            String::from_utf8_lossy(&stderr).trim(),
            String::from_utf8_lossy(&stdout).trim()
        )
        .trim()
        .chars()
        .take(2000)
        .collect();
        Err(HostGitError::Failed { operation, detail })
    }

    /// Spawn, read both pipes, and wait at most the deadline.
    fn wait(
        &self,
        mut cmd: Command,
        operation: &str,
    ) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), HostGitError> {
        let mut child = cmd.spawn().map_err(|e| HostGitError::Spawn {
            kind: e.kind(),
            detail: e.to_string(),
        })?;
        let pid = rustix::process::Pid::from_child(&child);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let out = s.spawn(move || drain(stdout, STDOUT_CAP));
            let err = s.spawn(move || drain(stderr, STDERR_CAP));
            s.spawn(move || {
                let _ = tx.send(child.wait());
            });
            let waited = match rx.recv_timeout(self.deadline) {
                Ok(r) => Some(r),
                Err(_) => {
                    // The whole group: git and anything it started.
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                    let _ = rx.recv();
                    None
                }
            };
            let (out, over) = out.join().unwrap_or_default();
            let (err, _) = err.join().unwrap_or_default();
            match waited {
                None => Err(HostGitError::Deadline {
                    operation: operation.to_owned(),
                    seconds: self.deadline.as_secs(),
                }),
                Some(Err(e)) => Err(HostGitError::Spawn {
                    kind: e.kind(),
                    detail: e.to_string(),
                }),
                Some(Ok(_)) if over => Err(HostGitError::Failed {
                    operation: operation.to_owned(),
                    detail: format!("more than {STDOUT_CAP} bytes of output"),
                }),
                Some(Ok(status)) => Ok((status, out, err)),
            }
        })
    }
}

/// The git directory's `commondir` leads to the recorded common dir: no
/// such file for a main checkout (git never writes one there), the same
/// directory for a linked worktree's.
fn check_commondir(repo: &PinnedRepo) -> Result<(), HostGitError> {
    let file = repo.git_dir.join("commondir");
    let refuse = |detail: String| HostGitError::Pointer {
        path: file.display().to_string(),
        detail,
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let main = same(&repo.git_dir, &repo.common_dir);
    match std::fs::symlink_metadata(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && main => Ok(()),
        Err(e) => Err(refuse(format!("cannot be read: {e}"))),
        Ok(_) if main => Err(refuse(
            "a main checkout's git directory has none; this one was planted".into(),
        )),
        Ok(meta) if !meta.is_file() => Err(refuse("not a regular file".into())),
        Ok(_) => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| refuse(format!("cannot be read: {e}")))?;
            let target = repo.git_dir.join(text.trim_end_matches(['\n', '\r']));
            if same(&target, &repo.common_dir) {
                Ok(())
            } else {
                Err(refuse(format!(
                    "it names {}, not {}",
                    target.display(),
                    repo.common_dir.display()
                )))
            }
        }
    }
}

/// Read a pipe to its end, keeping at most `cap` bytes; `true` when more
/// came.
fn drain<R: std::io::Read>(pipe: Option<R>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut over = false;
    loop {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                over |= n > room;
            }
        }
    }
    (kept, over)
}

/// The overrides that take the program out of one configured key, when
/// it belongs to a family that names a program a command here could run.
/// `key` is as `git config --list --name-only` prints it: section and
/// variable in lower case, the subsection verbatim.
pub fn neutralise(key: &str) -> Vec<(String, String)> {
    let Some((section, rest)) = key.split_once('.') else {
        return Vec::new();
    };
    let Some((sub, var)) = rest.rsplit_once('.') else {
        return Vec::new();
    };
    let set = |var: &str, value: &str| (format!("{section}.{sub}.{var}"), value.to_owned());
    match (section, var) {
        // Emptied: no program; `required=false` so a missing filter is
        // not an error.
        ("filter", "clean" | "smudge" | "process" | "required") => vec![
            set("clean", ""),
            set("smudge", ""),
            set("process", ""),
            set("required", "false"),
        ],
        // An empty driver cannot be run: the file stays a conflict.
        ("merge", "driver") => vec![set("driver", "")],
        ("diff", "textconv" | "command") => vec![set(var, "")],
        // Reset to no helper (an empty value clears the list).
        ("credential", "helper") => vec![set("helper", "")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[path = "hostgit_tests.rs"]
mod tests;
