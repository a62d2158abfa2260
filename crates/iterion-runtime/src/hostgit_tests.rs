//! Real `git` in temporary repositories: each way a sandbox could make the
//! host's git run a program, performed, and shown to run nothing through
//! [`HostGit`] — each next to a control where plain `git` does run it, so
//! an attack that stopped working would not pass unnoticed.

use std::os::unix::fs::PermissionsExt as _;

use super::*;

/// Plain git, as the operator (or a box) would run it.
fn plain(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("LC_ALL", "C")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(Stdio::null())
        .output()
        .expect("git runs")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = plain(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Repo {
    tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Repo {
    /// A repository on `main` with one commit; `template` false is
    /// `git init --template=` (no hooks directory at all).
    fn new(template: bool) -> Self {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("repo");
        std::fs::create_dir(&root).expect("mkdir");
        let mut init = vec!["init", "-q", "-b", "main"];
        if !template {
            init.push("--template=");
        }
        ok(&root, &init);
        ok(&root, &["config", "user.name", "Op"]);
        ok(&root, &["config", "user.email", "op@example.invalid"]);
        ok(&root, &["config", "commit.gpgsign", "false"]);
        std::fs::write(root.join("a.txt"), "a\n").expect("write");
        ok(&root, &["add", "a.txt"]);
        ok(&root, &["commit", "-q", "-m", "base"]);
        Self { tmp, root }
    }

    fn git_dir(&self) -> PathBuf {
        self.root.join(".git")
    }

    fn host(&self) -> HostGit {
        HostGit::pinned(PinnedRepo {
            git_dir: self.git_dir(),
            common_dir: self.git_dir(),
            work_tree: self.root.clone(),
        })
    }

    /// Where a planted program would leave its mark.
    fn marker(&self, name: &str) -> PathBuf {
        self.tmp.path().join(format!("ran-{name}"))
    }

    /// A program that leaves `marker(name)` and exits 0.
    fn program(&self, name: &str) -> String {
        format!("touch '{}'", self.marker(name).display())
    }

    /// An executable hook script at `path`.
    fn hook(&self, path: &Path, name: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, format!("#!/bin/sh\n{}\n", self.program(name))).expect("hook");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = std::fs::read_dir(self.tmp.path())
            .expect("ls")
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("ran-"))
                    .map(str::to_owned)
            })
            .collect();
        ran.sort();
        ran
    }

    fn clear(&self) {
        for name in self.ran() {
            std::fs::remove_file(self.marker(&name)).expect("rm");
        }
    }

    /// A branch `side` one commit ahead of `main` touching `file`.
    fn side(&self, file: &str, text: &str) {
        ok(&self.root, &["checkout", "-q", "-b", "side"]);
        std::fs::write(self.root.join(file), text).expect("write");
        ok(&self.root, &["add", file]);
        ok(&self.root, &["commit", "-q", "--no-verify", "-m", "side"]);
        ok(&self.root, &["checkout", "-q", "main"]);
    }
}

const HOOKS: &[&str] = &[
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-merge-commit",
    "post-merge",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
];

/// The promotion's own sequence: squash `side` into `main` and commit.
fn squash_and_commit(git: &HostGit) -> Result<(), HostGitError> {
    git.run(&["merge", "--squash", "side"])?;
    git.run(&["commit", "--no-edit", "-m", "squashed"])?;
    Ok(())
}

#[test]
fn hooks_created_where_the_repository_had_none_never_run() {
    let r = Repo::new(false);
    assert!(!r.git_dir().join("hooks").exists(), "git init --template=");
    r.side("b.txt", "b\n");
    // What a box with `.git` read-write does when `hooks` is absent.
    for h in HOOKS {
        r.hook(&r.git_dir().join("hooks").join(h), h);
    }
    squash_and_commit(&r.host()).expect("promotion");
    assert_eq!(r.ran(), Vec::<String>::new());
    assert_eq!(ok(&r.root, &["log", "-1", "--format=%s"]), "squashed");
    // Control: the same promotion with plain git runs them.
    ok(&r.root, &["reset", "-q", "--hard", "HEAD~1"]);
    ok(&r.root, &["merge", "--squash", "side"]);
    ok(&r.root, &["commit", "-q", "-m", "squashed"]);
    assert!(r.ran().contains(&"pre-commit".to_owned()), "{:?}", r.ran());
}

#[test]
fn a_committed_hook_under_core_hooks_path_never_runs() {
    let r = Repo::new(true);
    ok(&r.root, &["config", "core.hooksPath", ".githooks"]);
    // The box commits `.githooks/*` on its branch; the squash checks them
    // out into the operator's checkout right before the commit.
    ok(&r.root, &["checkout", "-q", "-b", "side"]);
    for h in ["pre-commit", "commit-msg", "post-commit", "post-merge"] {
        r.hook(&r.root.join(".githooks").join(h), h);
    }
    ok(&r.root, &["add", ".githooks"]);
    ok(&r.root, &["commit", "-q", "--no-verify", "-m", "hooks"]);
    ok(&r.root, &["checkout", "-q", "main"]);
    r.clear();
    squash_and_commit(&r.host()).expect("promotion");
    assert!(r.root.join(".githooks/pre-commit").is_file(), "checked out");
    assert_eq!(r.ran(), Vec::<String>::new());
    // Fast-forward too.
    ok(&r.root, &["reset", "-q", "--hard", "HEAD~1"]);
    r.host()
        .run(&["merge", "--ff-only", "--no-edit", "side"])
        .expect("ff");
    assert_eq!(r.ran(), Vec::<String>::new());
    // Control.
    ok(&r.root, &["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(r.ran().contains(&"pre-commit".to_owned()), "{:?}", r.ran());
}

/// `.git/commondir` planted in the shared git directory: git finding the
/// repository the usual way would read the config and hooks of a
/// directory the box made; pinned, it does not.
#[test]
fn a_planted_commondir_is_never_followed() {
    let r = Repo::new(true);
    let evil = r.git_dir().join("evil");
    ok(
        r.tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            &r.root.display().to_string(),
            &evil.display().to_string(),
        ],
    );
    ok(
        &evil,
        &[
            "config",
            "core.hooksPath",
            &evil.join("hooks").display().to_string(),
        ],
    );
    ok(&evil, &["config", "core.bare", "false"]);
    r.hook(&evil.join("hooks/pre-commit"), "evil-pre-commit");
    r.hook(&evil.join("hooks/reference-transaction"), "evil-ref");
    std::fs::write(r.git_dir().join("commondir"), "evil\n").expect("plant");
    // Control: git finding the repository itself follows the pointer and
    // runs the planted directory's hooks.
    assert!(ok(&r.root, &["rev-parse", "--git-common-dir"]).ends_with("evil"));
    ok(&r.root, &["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(
        r.ran().contains(&"evil-pre-commit".to_owned()),
        "{:?}",
        r.ran()
    );
    r.clear();
    // Pinned, git would still take its refs from the planted directory
    // (its ref store reads `commondir` whatever GIT_COMMON_DIR says): the
    // command is refused before anything runs.
    let e = r
        .host()
        .run(&["commit", "--allow-empty", "-m", "c"])
        .expect_err("refused");
    assert_eq!(e.code(), "HOST_GIT_POINTER", "{e}");
    assert_eq!(r.ran(), Vec::<String>::new());
    std::fs::remove_file(r.git_dir().join("commondir")).expect("rm");
    r.host()
        .run(&["commit", "--allow-empty", "-m", "c"])
        .expect("runs once the pointer is gone");
    assert_eq!(r.ran(), Vec::<String>::new());
}

/// `extensions.worktreeConfig` on (the operator's config): the box writes
/// `.git/config.worktree`, read after the repository's config, with every
/// code-running key it can name, an include of a file it also wrote, and
/// the attributes that select its drivers.
#[test]
fn config_planted_in_config_worktree_and_its_includes_runs_nothing() {
    let r = Repo::new(true);
    ok(&r.root, &["config", "extensions.worktreeConfig", "true"]);
    // The branch to promote: a conflicting `m.txt` (merge driver), a
    // filtered `f.txt` (clean/smudge), both chosen by attributes.
    std::fs::write(r.root.join("m.txt"), "base\n").expect("write");
    ok(&r.root, &["add", "m.txt"]);
    ok(&r.root, &["commit", "-q", "-m", "m"]);
    ok(&r.root, &["checkout", "-q", "-b", "side"]);
    std::fs::write(r.root.join("m.txt"), "side\n").expect("write");
    std::fs::write(r.root.join("f.txt"), "filtered\n").expect("write");
    ok(&r.root, &["add", "m.txt", "f.txt"]);
    ok(&r.root, &["commit", "-q", "-m", "side"]);
    ok(&r.root, &["checkout", "-q", "main"]);
    std::fs::write(r.root.join("m.txt"), "main\n").expect("write");
    ok(&r.root, &["commit", "-q", "-am", "main moved"]);

    let hooks = r.tmp.path().join("box-hooks");
    r.hook(&hooks.join("pre-commit"), "hookspath-pre-commit");
    r.hook(&hooks.join("post-merge"), "hookspath-post-merge");
    let gpg = r.tmp.path().join("gpg.sh");
    r.hook(&gpg, "gpg-program");
    let included = r.tmp.path().join("included.cfg");
    std::fs::write(
        &included,
        format!(
            "[core]\n\tfsmonitor = \"{f}; false\"\n\
             [filter \"inc\"]\n\tclean = {c}; cat\n\tsmudge = {s}; cat\n\trequired = true\n",
            f = r.program("included-fsmonitor"),
            c = r.program("included-clean"),
            s = r.program("included-smudge"),
        ),
    )
    .expect("include");
    std::fs::write(
        r.git_dir().join("config.worktree"),
        format!(
            "[core]\n\thooksPath = {hooks}\n\
             \tpager = {pager}\n\teditor = {editor}\n\tsshCommand = {ssh}\n\
             [include]\n\tpath = {included}\n\
             [filter \"evil\"]\n\tclean = \"{clean}; cat\"\n\tsmudge = \"{smudge}; cat\"\n\
             \tprocess = {process}\n\trequired = true\n\
             [merge \"evil\"]\n\tdriver = \"{driver}; cp %B %A\"\n\
             [diff \"evil\"]\n\ttextconv = {textconv}\n\
             [commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {gpg}\n\
             [log]\n\tshowSignature = true\n\
             [credential]\n\thelper = \"!{helper}\"\n\
             [gc]\n\tauto = 1\n\tautoDetach = false\n",
            hooks = hooks.display(),
            pager = r.program("pager"),
            editor = r.program("editor"),
            ssh = r.program("ssh"),
            included = included.display(),
            clean = r.program("clean"),
            smudge = r.program("smudge"),
            process = r.program("process"),
            driver = r.program("merge-driver"),
            textconv = r.program("textconv"),
            gpg = gpg.display(),
            helper = r.program("credential"),
        ),
    )
    .expect("config.worktree");
    std::fs::create_dir_all(r.git_dir().join("info")).expect("info");
    std::fs::write(
        r.git_dir().join("info/attributes"),
        "m.txt merge=evil diff=evil\nf.txt filter=evil\na.txt filter=inc\n",
    )
    .expect("attributes");
    r.clear();

    let git = r.host();
    git.read(&["status", "--porcelain"]).expect("status");
    git.read(&["log", "--format=%h %s", "-3"]).expect("log");
    // The conflicting squash is refused (no driver resolves it) and
    // rolled back, as the promotion does.
    let merged = git.run(&["merge", "--squash", "side"]);
    assert!(
        matches!(&merged, Err(HostGitError::Failed { detail, .. }) if detail.contains("CONFLICT")),
        "{merged:?}"
    );
    git.run(&["reset", "--merge"]).expect("reset");
    assert_eq!(r.ran(), Vec::<String>::new());
    // Without the conflict, the squash and its commit go through.
    ok(&r.root, &["reset", "-q", "--hard", "HEAD~1"]);
    r.clear();
    squash_and_commit(&git).expect("promotion");
    assert_eq!(
        std::fs::read_to_string(r.root.join("f.txt")).expect("checked out"),
        "filtered\n",
        "the stored bytes"
    );
    assert_eq!(r.ran(), Vec::<String>::new());
    // The identity of the squash commit is still the operator's.
    assert_eq!(git.read(&["log", "-1", "--format=%an"]).expect("log"), "Op");
    assert_eq!(r.ran(), Vec::<String>::new());
    // Control: plain git runs the box's programs from that file and from
    // the file it includes.
    std::fs::write(r.root.join("f.txt"), "changed\n").expect("write");
    let _ = plain(&r.root, &["status", "--porcelain"]);
    let ran = r.ran();
    assert!(ran.contains(&"included-fsmonitor".to_owned()), "{ran:?}");
}

/// A partial clone's missing object makes git fetch it from the promisor
/// remote — with the remote's `uploadpack` program, which a config the
/// box wrote can name. No host command here may start a transport.
#[test]
fn no_transport_starts_even_for_a_missing_object() {
    let r = Repo::new(true);
    ok(&r.root, &["config", "uploadpack.allowFilter", "true"]);
    r.side("big.txt", "a blob the clone does not have\n");
    let clone = r.tmp.path().join("clone");
    ok(
        r.tmp.path(),
        &[
            "clone",
            "-q",
            "--filter=blob:none",
            "--no-checkout",
            &format!("file://{}", r.root.display()),
            &clone.display().to_string(),
        ],
    );
    ok(&clone, &["config", "user.name", "Op"]);
    ok(&clone, &["config", "user.email", "op@example.invalid"]);
    ok(
        &clone,
        &[
            "config",
            "remote.origin.uploadpack",
            &format!("{}; git-upload-pack", r.program("upload-pack")),
        ],
    );
    ok(&clone, &["config", "protocol.file.allow", "always"]);
    let git = HostGit::pinned(PinnedRepo {
        git_dir: clone.join(".git"),
        common_dir: clone.join(".git"),
        work_tree: clone.clone(),
    });
    let side = git.read(&["rev-parse", "origin/side"]).expect("ref");
    let fetched = git.run(&["reset", "--hard", &side]);
    assert!(fetched.is_err(), "the blob is missing and was not fetched");
    assert_eq!(r.ran(), Vec::<String>::new());
    // Control: plain git fetches it, running the named program.
    ok(&clone, &["reset", "-q", "--hard", &side]);
    assert_eq!(r.ran(), vec!["upload-pack".to_owned()]);
}

/// An include of something endless would hang git: the deadline stops it
/// and the whole process group goes.
#[test]
fn an_endless_include_is_stopped_at_the_deadline() {
    let r = Repo::new(true);
    let fifo = r.tmp.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    ok(
        &r.root,
        &["config", "include.path", &fifo.display().to_string()],
    );
    let git = r.host().with_deadline(Duration::from_millis(300));
    let e = git.read(&["rev-parse", "HEAD"]).expect_err("stopped");
    assert!(
        matches!(&e, HostGitError::Deadline { operation, .. } if operation.starts_with("config")),
        "{e:?}"
    );
    assert_eq!(e.code(), "HOST_GIT_DEADLINE");
}

#[test]
fn only_the_listed_subcommands_run() {
    let r = Repo::new(true);
    for sub in ["fetch", "push", "submodule", "-c", "", "gc", "difftool"] {
        let e = r.host().run(&[sub]).expect_err(sub);
        assert_eq!(e.code(), "HOST_GIT_REFUSED", "{sub}: {e}");
    }
    assert_eq!(
        r.host()
            .read(&["rev-parse", "--abbrev-ref", "HEAD"])
            .expect("runs"),
        "main"
    );
}

#[test]
fn the_code_running_families_are_neutralised_and_nothing_else() {
    let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let lfs = v(&[
        ("filter.lfs.clean", ""),
        ("filter.lfs.smudge", ""),
        ("filter.lfs.process", ""),
        ("filter.lfs.required", "false"),
    ]);
    for (key, want) in [
        ("filter.lfs.process", lfs.clone()),
        ("filter.lfs.required", lfs),
        (
            "filter.a=b c.clean",
            v(&[
                ("filter.a=b c.clean", ""),
                ("filter.a=b c.smudge", ""),
                ("filter.a=b c.process", ""),
                ("filter.a=b c.required", "false"),
            ]),
        ),
        ("merge.x.driver", v(&[("merge.x.driver", "")])),
        ("merge.x.name", Vec::new()),
        ("diff.x.textconv", v(&[("diff.x.textconv", "")])),
        ("diff.x.command", v(&[("diff.x.command", "")])),
        ("diff.x.binary", Vec::new()),
        (
            "credential.https://h.example.helper",
            v(&[("credential.https://h.example.helper", "")]),
        ),
        ("user.name", Vec::new()),
        ("core.autocrlf", Vec::new()),
        ("filter", Vec::new()),
    ] {
        assert_eq!(neutralise(key), want, "{key}");
    }
}

/// One home (CONTRIBUTING.md): no source file of the workspace builds a
/// `git` command but this module. The agent's `git_diff`/`git_status`
/// built-ins are the exception: they run inside the sandbox (placement
/// `container`), never on a sandboxed run's host. Tests and benches may
/// run git to set up what they check.
#[test]
fn no_other_source_builds_a_git_command() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/");
    let allowed = [
        "iterion-runtime/src/hostgit.rs",
        "iterion-agent/src/tools/builtin/git.rs",
    ];
    let mut found = Vec::new();
    let mut stack = vec![crates.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("ls").flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "tests" | "benches" | "target") {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name.ends_with("tests.rs") || name == "tests.rs" {
                continue;
            }
            let rel = path
                .strip_prefix(crates)
                .expect("under crates/")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("read");
            // Code after a `#[cfg(test)]` module line is a test.
            let code = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
            let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
            if compact.contains("Command::new(\"git\"") && !allowed.contains(&rel.as_str()) {
                found.push(rel);
            }
        }
    }
    assert_eq!(found, Vec::<String>::new(), "git built outside hostgit.rs");
}
