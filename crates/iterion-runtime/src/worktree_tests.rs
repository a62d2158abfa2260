//! Real `git` in temporary repositories (upstream's worktree_test.go intent).

use std::process::Command;

use super::*;

fn sh_git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Repo {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    store: PathBuf,
}

fn repo() -> Repo {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("repo");
    std::fs::create_dir(&root).expect("mkdir");
    sh_git(&root, &["init", "-q", "-b", "main"]);
    sh_git(&root, &["config", "user.name", "T"]);
    sh_git(&root, &["config", "user.email", "t@example.invalid"]);
    sh_git(&root, &["config", "commit.gpgsign", "false"]);
    std::fs::write(root.join("a.txt"), "a\n").expect("write");
    sh_git(&root, &["add", "a.txt"]);
    sh_git(&root, &["commit", "-q", "-m", "base"]);
    let store = tmp.path().join("store");
    Repo {
        _tmp: tmp,
        root,
        store,
    }
}

fn setup_with(r: &Repo, promote: PromoteOptions) -> RunWorktree {
    setup(&WorktreeRequest {
        workspace: &r.root,
        root: &r.store,
        run_id: "r1",
        promote,
    })
    .expect("setup")
}

/// A commit in the worktree, as a run's node would make it.
fn commit_in(wt: &RunWorktree, file: &str, msg: &str) -> String {
    let p = Path::new(&wt.path);
    std::fs::write(p.join(file), format!("{msg}\n")).expect("write");
    sh_git(p, &["add", file]);
    sh_git(p, &["commit", "-q", "-m", msg]);
    sh_git(p, &["rev-parse", "HEAD"])
}

#[test]
fn setup_makes_a_detached_worktree_at_head_without_the_checkouts_wip() {
    let r = repo();
    std::fs::write(r.root.join("a.txt"), "wip\n").expect("wip");
    let wt = setup_with(&r, PromoteOptions::default());
    let base = sh_git(&r.root, &["rev-parse", "HEAD"]);
    assert_eq!(wt.base_commit, base);
    assert_eq!(wt.original_branch.as_deref(), Some("main"));
    assert!(wt.dirty, "tracked WIP is reported");
    assert_eq!(wt.default_branch, "iterion/run/r1");
    assert!(wt.path.ends_with("/worktrees/r1"), "{}", wt.path);
    assert_eq!(
        std::fs::read_to_string(Path::new(&wt.path).join("a.txt")).expect("read"),
        "a\n",
        "the worktree starts from HEAD, not from the WIP"
    );
    assert_eq!(
        Path::new(&wt.git_dir),
        r.root.canonicalize().expect("real").join(".git")
    );
    wt.check_present().expect("present");
    // A second setup for the same run id is refused, nothing touched.
    let again = setup(&WorktreeRequest {
        workspace: &r.root,
        root: &r.store,
        run_id: "r1",
        promote: PromoteOptions::default(),
    });
    assert!(
        matches!(again, Err(WorktreeError::Exists { .. })),
        "{again:?}"
    );
}

#[test]
fn bad_input_is_refused_before_anything_is_created() {
    let tmp = tempfile::tempdir().expect("tmp");
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).expect("mkdir");
    let store = tmp.path().join("store");
    let e = setup(&WorktreeRequest {
        workspace: &plain,
        root: &store,
        run_id: "r1",
        promote: PromoteOptions::default(),
    })
    .expect_err("not a repo");
    assert_eq!(e.code(), "WORKTREE_NOT_A_REPO", "{e}");
    assert!(!store.exists(), "nothing created");

    let unborn = tmp.path().join("unborn");
    std::fs::create_dir(&unborn).expect("mkdir");
    sh_git(&unborn, &["init", "-q"]);
    let e = setup(&WorktreeRequest {
        workspace: &unborn,
        root: &store,
        run_id: "r1",
        promote: PromoteOptions::default(),
    })
    .expect_err("no commit");
    assert_eq!(e.code(), "WORKTREE_NO_COMMIT", "{e}");

    let r = repo();
    let e = setup(&WorktreeRequest {
        workspace: &r.root,
        root: &r.store,
        run_id: "r1",
        promote: PromoteOptions {
            branch_name: Some("-delete".into()),
            ..PromoteOptions::default()
        },
    })
    .expect_err("bad name");
    assert_eq!(e.code(), "WORKTREE_BAD_BRANCH_NAME", "{e}");
    assert!(!r.store.exists(), "nothing created");
}

#[test]
fn no_commits_removes_the_worktree_and_makes_no_branch() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    let f = finalize(&wt);
    assert_eq!(f.final_commit, None);
    assert_eq!(f.final_branch, None);
    assert_eq!(f.merge_status, MergeStatus::Skipped);
    assert!(f.removed);
    assert!(!Path::new(&wt.path).exists());
    assert_eq!(sh_git(&r.root, &["branch", "--list", "iterion/*"]), "");
}

#[test]
fn squash_default_lands_one_commit_on_the_checked_out_branch() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    commit_in(&wt, "b.txt", "add b");
    let head = commit_in(&wt, "c.txt", "add c");
    let f = finalize(&wt);
    assert_eq!(f.final_commit.as_deref(), Some(head.as_str()));
    assert_eq!(f.final_branch.as_deref(), Some("iterion/run/r1"));
    assert_eq!(f.merge_status, MergeStatus::Merged, "{f:?}");
    assert_eq!(f.merged_into.as_deref(), Some("main"));
    let main = sh_git(&r.root, &["rev-parse", "main"]);
    assert_eq!(f.merged_commit.as_deref(), Some(main.as_str()));
    assert_ne!(main, head, "a fresh squash commit");
    let msg = sh_git(&r.root, &["log", "-1", "--format=%B", "main"]);
    assert!(msg.starts_with("add b\n"), "{msg}");
    assert!(msg.contains("add c"), "{msg}");
    assert!(r.root.join("c.txt").exists(), "the checkout has the change");
    assert_eq!(sh_git(&r.root, &["rev-parse", "iterion/run/r1"]), head);
    assert!(f.removed && !Path::new(&wt.path).exists());
}

#[test]
fn merge_strategy_fast_forwards_and_keeps_history() {
    let r = repo();
    let wt = setup_with(
        &r,
        PromoteOptions {
            strategy: MergeStrategy::Merge,
            ..PromoteOptions::default()
        },
    );
    let head = commit_in(&wt, "b.txt", "add b");
    let f = finalize(&wt);
    assert_eq!(f.merge_status, MergeStatus::Merged, "{f:?}");
    assert_eq!(sh_git(&r.root, &["rev-parse", "main"]), head);
    assert_eq!(f.merged_commit.as_deref(), Some(head.as_str()));
}

#[test]
fn a_dirty_checkout_refuses_the_merge_and_keeps_the_branch() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    let head = commit_in(&wt, "b.txt", "add b");
    std::fs::write(r.root.join("a.txt"), "wip\n").expect("wip");
    let f = finalize(&wt);
    assert_eq!(f.merge_status, MergeStatus::Failed);
    assert!(
        f.reason
            .as_deref()
            .is_some_and(|r| r.contains("uncommitted")),
        "{f:?}"
    );
    assert_eq!(sh_git(&r.root, &["rev-parse", "iterion/run/r1"]), head);
    assert_eq!(
        std::fs::read_to_string(r.root.join("a.txt")).expect("read"),
        "wip\n",
        "the operator's WIP is untouched"
    );
}

#[test]
fn a_diverged_target_refuses_the_fast_forward() {
    let r = repo();
    let wt = setup_with(
        &r,
        PromoteOptions {
            strategy: MergeStrategy::Merge,
            ..PromoteOptions::default()
        },
    );
    commit_in(&wt, "b.txt", "add b");
    std::fs::write(r.root.join("m.txt"), "m\n").expect("write");
    sh_git(&r.root, &["add", "m.txt"]);
    sh_git(&r.root, &["commit", "-q", "-m", "main moved"]);
    let main = sh_git(&r.root, &["rev-parse", "main"]);
    let f = finalize(&wt);
    assert_eq!(f.merge_status, MergeStatus::Failed);
    assert!(
        f.reason
            .as_deref()
            .is_some_and(|r| r.contains("fast-forward"))
    );
    assert_eq!(sh_git(&r.root, &["rev-parse", "main"]), main);
    assert!(f.final_branch.is_some());
}

#[test]
fn merge_into_none_and_auto_merge_off_leave_the_branch_only() {
    for (promote, status) in [
        (
            PromoteOptions {
                merge_into: MergeInto::None,
                ..PromoteOptions::default()
            },
            MergeStatus::Skipped,
        ),
        (
            PromoteOptions {
                auto_merge: false,
                ..PromoteOptions::default()
            },
            MergeStatus::Pending,
        ),
    ] {
        let r = repo();
        let base = sh_git(&r.root, &["rev-parse", "main"]);
        let wt = setup_with(&r, promote);
        let head = commit_in(&wt, "b.txt", "add b");
        let f = finalize(&wt);
        assert_eq!(f.merge_status, status, "{f:?}");
        assert_eq!(sh_git(&r.root, &["rev-parse", "main"]), base);
        assert_eq!(sh_git(&r.root, &["rev-parse", "iterion/run/r1"]), head);
    }
}

#[test]
fn branch_name_override_and_collision_never_move_an_existing_branch() {
    let r = repo();
    let base = sh_git(&r.root, &["rev-parse", "main"]);
    sh_git(&r.root, &["branch", "feat/x"]);
    let wt = setup_with(
        &r,
        PromoteOptions {
            branch_name: Some("feat/x".into()),
            merge_into: MergeInto::None,
            ..PromoteOptions::default()
        },
    );
    let head = commit_in(&wt, "b.txt", "add b");
    let f = finalize(&wt);
    assert_eq!(f.final_branch.as_deref(), Some("feat/x-1"));
    assert_eq!(sh_git(&r.root, &["rev-parse", "feat/x"]), base);
    assert_eq!(sh_git(&r.root, &["rev-parse", "feat/x-1"]), head);
}

#[test]
fn a_detached_start_skips_the_merge_but_keeps_the_commits_on_a_branch() {
    let r = repo();
    sh_git(&r.root, &["checkout", "-q", "--detach"]);
    let wt = setup_with(&r, PromoteOptions::default());
    assert_eq!(wt.original_branch, None);
    let head = commit_in(&wt, "b.txt", "add b");
    let f = finalize(&wt);
    assert_eq!(f.merge_status, MergeStatus::Skipped);
    assert!(f.reason.as_deref().is_some_and(|r| r.contains("detached")));
    assert_eq!(sh_git(&r.root, &["rev-parse", "iterion/run/r1"]), head);
}

#[test]
fn a_failed_branch_keeps_the_worktree_so_the_commits_stay_reachable() {
    let r = repo();
    let mut wt = setup_with(&r, PromoteOptions::default());
    // A name that could never be valid (validation is bypassed here, as a
    // corrupt launch record would).
    wt.promote.branch_name = Some("-x".into());
    let head = commit_in(&wt, "b.txt", "add b");
    let f = finalize(&wt);
    let (reason, words) = f.branch_failed.clone().expect("branch failed");
    assert_eq!(reason, "invalid_name");
    assert!(words.contains("-x"), "{words}");
    assert!(!f.removed);
    assert_eq!(sh_git(Path::new(&wt.path), &["rev-parse", "HEAD"]), head);
}

#[test]
fn uncommitted_work_in_the_worktree_is_never_removed() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    std::fs::write(Path::new(&wt.path).join("new.txt"), "x\n").expect("write");
    let f = finalize(&wt);
    assert!(f.uncommitted);
    assert!(!f.removed);
    assert!(Path::new(&wt.path).join("new.txt").exists());
}

#[test]
fn branch_names_follow_the_allow_list() {
    for ok in ["feat/x", "iterion/run/r1", "a", "v1.2_x-y"] {
        validate_branch_name(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        "", "-x", ".x", "_x", "a..b", "a//b", "a/", "a.", "a.lock", "a b", "a~1", "a:b", "a/.b",
        "a@{1",
    ] {
        assert!(validate_branch_name(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!("".parse::<MergeInto>(), Ok(MergeInto::Current));
    assert_eq!("current".parse::<MergeInto>(), Ok(MergeInto::Current));
    assert_eq!("none".parse::<MergeInto>(), Ok(MergeInto::None));
    assert_eq!(
        "dev".parse::<MergeInto>(),
        Ok(MergeInto::Branch("dev".into()))
    );
    assert!("-f".parse::<MergeInto>().is_err());
}

#[test]
fn a_single_commit_squash_keeps_its_whole_message() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    let p = Path::new(&wt.path);
    std::fs::write(p.join("b.txt"), "b\n").expect("write");
    sh_git(p, &["add", "b.txt"]);
    sh_git(p, &["commit", "-q", "-m", "feat: b", "-m", "body line"]);
    let f = finalize(&wt);
    assert_eq!(f.merge_status, MergeStatus::Merged, "{f:?}");
    let msg = sh_git(&r.root, &["log", "-1", "--format=%B", "main"]);
    assert_eq!(msg, "feat: b\n\nbody line");
}

#[test]
fn a_rewritten_git_pointer_stops_host_git_and_keeps_everything() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    assert!(wt.dotgit.starts_with("gitdir: "), "{}", wt.dotgit);
    assert!(
        wt.admin_dir.ends_with("/.git/worktrees/r1"),
        "{}",
        wt.admin_dir
    );
    commit_in(&wt, "b.txt", "add b");
    // What a sandbox could do through its workspace: point the worktree at
    // a repository whose config runs a program on `git status`.
    let evil = Path::new(&wt.path).join("evil");
    std::fs::create_dir(&evil).expect("mkdir");
    std::fs::write(
        Path::new(&wt.path).join(".git"),
        format!("gitdir: {}\n", evil.display()),
    )
    .expect("rewrite");
    let f = finalize(&wt);
    assert!(
        f.reason.as_deref().is_some_and(|r| r.contains("pointer")),
        "{f:?}"
    );
    assert!(!f.removed);
    assert_eq!(f.final_branch, None);
    assert!(wt.check_present().is_err());
}

#[test]
fn only_an_unused_worktree_is_discarded() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    std::fs::write(Path::new(&wt.path).join("new.txt"), "x\n").expect("write");
    assert!(!discard_unused(&wt), "untracked work stays");
    std::fs::remove_file(Path::new(&wt.path).join("new.txt")).expect("rm");
    commit_in(&wt, "b.txt", "add b");
    assert!(!discard_unused(&wt), "a commit stays");
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    assert!(discard_unused(&wt));
    assert!(!Path::new(&wt.path).exists());
}

/// A hook script leaving `marker` when it runs.
fn plant_hook(path: &Path, marker: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).expect("hook");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

const PROMOTION_HOOKS: &[&str] = &[
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-merge-commit",
    "post-merge",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
];

/// Issue 31 item 1 (a): a repository with no `.git/hooks` (`git init
/// --template=`); what a box with the shared `.git` read-write does when
/// nothing is bound over the absent directory: create it, fill it. The
/// promotion (squash and fast-forward) runs none of it.
#[test]
fn hooks_a_box_created_in_a_hookless_repository_never_run_at_promotion() {
    for strategy in [MergeStrategy::Squash, MergeStrategy::Merge] {
        let r = repo();
        std::fs::remove_dir_all(r.root.join(".git/hooks")).expect("hookless");
        let wt = setup_with(
            &r,
            PromoteOptions {
                strategy,
                ..PromoteOptions::default()
            },
        );
        commit_in(&wt, "b.txt", "add b");
        let ran = r._tmp.path().join("ran");
        for h in PROMOTION_HOOKS {
            plant_hook(&r.root.join(".git/hooks").join(h), &ran.join(h));
        }
        std::fs::create_dir(&ran).expect("mkdir");
        let f = finalize(&wt);
        assert_eq!(f.merge_status, MergeStatus::Merged, "{strategy:?}: {f:?}");
        assert!(f.removed, "{f:?}");
        let left: Vec<_> = std::fs::read_dir(&ran).expect("ls").flatten().collect();
        assert!(left.is_empty(), "{strategy:?}: hooks ran: {left:?}");
    }
}

/// Issue 31 item 1 (b): `core.hooksPath=.githooks` (the husky pattern);
/// the run commits new hooks there, the promotion checks them out into
/// the operator's checkout and commits: none of them runs.
#[test]
fn hooks_the_run_committed_under_core_hooks_path_never_run_at_promotion() {
    for strategy in [MergeStrategy::Squash, MergeStrategy::Merge] {
        let r = repo();
        sh_git(&r.root, &["config", "core.hooksPath", ".githooks"]);
        let wt = setup_with(
            &r,
            PromoteOptions {
                strategy,
                ..PromoteOptions::default()
            },
        );
        let p = Path::new(&wt.path);
        let ran = r._tmp.path().join("ran");
        std::fs::create_dir(&ran).expect("mkdir");
        for h in PROMOTION_HOOKS {
            plant_hook(&p.join(".githooks").join(h), &ran.join(h));
        }
        // The box's own git: its hooks are its business.
        sh_git(p, &["-c", "core.hooksPath=/dev/null", "add", ".githooks"]);
        sh_git(
            p,
            &[
                "-c",
                "core.hooksPath=/dev/null",
                "commit",
                "-q",
                "-m",
                "hooks",
            ],
        );
        let f = finalize(&wt);
        assert_eq!(f.merge_status, MergeStatus::Merged, "{strategy:?}: {f:?}");
        assert!(
            r.root.join(".githooks/pre-commit").is_file(),
            "the hooks reached the operator's checkout"
        );
        let left: Vec<_> = std::fs::read_dir(&ran).expect("ls").flatten().collect();
        assert!(left.is_empty(), "{strategy:?}: hooks ran: {left:?}");
    }
}

/// A `commondir` the box planted in the shared git directory would lead
/// the host's git to refs, config and hooks of a directory it made: the
/// promotion is refused before git runs, the commits stay reachable from
/// the kept worktree.
#[test]
fn a_planted_commondir_refuses_the_promotion_and_keeps_the_worktree() {
    let r = repo();
    let wt = setup_with(&r, PromoteOptions::default());
    let head = commit_in(&wt, "b.txt", "add b");
    let evil = r.root.join(".git/evil");
    sh_git(
        &r.root,
        &["clone", "-q", "--bare", ".", &evil.display().to_string()],
    );
    let ran = r._tmp.path().join("ran-evil");
    plant_hook(&evil.join("hooks/reference-transaction"), &ran);
    plant_hook(&evil.join("hooks/pre-commit"), &ran);
    std::fs::write(r.root.join(".git/commondir"), "evil\n").expect("plant");
    let base = std::fs::read_to_string(r.root.join(".git/refs/heads/main")).expect("main");
    let f = finalize(&wt);
    let (reason, words) = f.branch_failed.clone().expect("no branch");
    assert_eq!(reason, "git_branch_failed");
    assert!(words.contains("commondir"), "{words}");
    assert!(!f.removed, "{f:?}");
    assert!(!ran.exists(), "a planted hook ran");
    assert_eq!(
        std::fs::read_to_string(r.root.join(".git/refs/heads/main")).expect("main"),
        base
    );
    assert_eq!(sh_git(Path::new(&wt.path), &["rev-parse", "HEAD"]), head);
}
