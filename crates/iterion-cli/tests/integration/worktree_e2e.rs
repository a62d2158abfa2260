//! `worktree: auto` end to end (issue 14 item 4) through the real `iterion
//! run` / `iterion resume`, on dockerd and Podman: the run works in a fresh
//! worktree of the operator's repository, git inside the sandbox commits
//! through the bound `.git` (facts §6.5), and the end puts the commits on
//! `iterion/run/<run-id>` and squashes them into the checked-out branch
//! (`--merge-strategy`, `--merge-into`, `--auto-merge`, `--branch-name`
//! as upstream). A failed run keeps its worktree and a resume continues in
//! it. On a bindless engine the worktree is copied in and back but git has
//! no repository in the box (the documented limitation), and nothing the
//! run wrote is lost. Bad input: not a repository, no git, bad names — exit
//! 2 with a code, nothing created; a dirty checkout or a detached HEAD run
//! as upstream runs them, the merge refused or skipped and the commits kept.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{Engine, Sandbox, of_type, one, runs, slim};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The commit a sandboxed node makes, and its id as the node's output;
/// `guard` says whether it could plant a hook or a config command for the
/// host's git (it must not).
const COMMIT_SCRIPT: &str = "set -e\n\
     echo made > made.txt\n\
     git add made.txt\n\
     git -c user.name=run -c user.email=run@example.invalid commit -q -m 'run: made'\n\
     gd=$(git rev-parse --path-format=absolute --git-common-dir)\n\
     g=refused\n\
     if (echo 'touch /tmp/pwned' > \"$gd/hooks/post-commit\") 2>/dev/null; then g=hook; fi\n\
     if git config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null; then g=config; fi\n\
     printf '{\"said\":\"%s\",\"guard\":\"%s\"}' \"$(git rev-parse HEAD)\" \"$g\"\n";

fn workflow(check: &str) -> String {
    format!(
        r#"schema out:
  said: string

schema made:
  said: string
  guard: string

tool work:
  command: `sh script.sh`
  output: made

tool check:
  command: `{check}`
  output: out

workflow wt:
  worktree: auto
  sandbox:
    image: "{image}"
    host_state: none
  entry: work
  work -> check
  check -> done
"#,
        image = slim()
    )
}

/// The sandbox's workspace as a git repository on `main` whose one commit
/// holds the workflow and its script (a worktree starts from `HEAD`).
fn repo(sb: &Sandbox, script: &str, check: &str) -> PathBuf {
    let ws = sb.workspace();
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["config", "user.name", "Op"]);
    git(&ws, &["config", "user.email", "op@example.invalid"]);
    git(&ws, &["config", "commit.gpgsign", "false"]);
    sb.write("script.sh", script);
    let file = sb.write("w.iter", &workflow(check));
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    file
}

const OK: &str = "printf '{\"said\":\"ok\"}'";

fn worktree_path(sb: &Sandbox, run_id: &str) -> PathBuf {
    sb.store().join("worktrees").join(run_id)
}

fn branch_tip(ws: &Path, branch: &str) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(ws)
        .args(["rev-parse", "--verify", "--quiet", branch])
        .output()
        .expect("git");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn said(events: &[Value], node: &str) -> String {
    of_type(events, "node_finished")
        .into_iter()
        .rev()
        .find(|e| e["node_id"] == node)
        .and_then(|e| e["data"]["output"]["said"].as_str())
        .unwrap_or_else(|| panic!("no output of {node}: {events:?}"))
        .to_owned()
}

fn finished(sb: &Sandbox, file: &Path, extra: &[&str]) -> (String, Vec<Value>) {
    let r = sb.run(file, extra);
    let id = r.run_id();
    let events = sb.events(&id);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{:?}: {}\n{events:#?}",
        sb.engine,
        r.stderr
    );
    (id, events)
}

#[test]
fn dockerd_commits_in_the_sandbox_land_on_the_run_branch_and_squash_into_main() {
    promotes(Engine::Docker);
}

#[test]
fn podman_commits_in_the_sandbox_land_on_the_run_branch_and_squash_into_main() {
    promotes(Engine::Podman);
}

fn promotes(engine: Engine) {
    let sb = Sandbox::new(engine);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    let base = git(&ws, &["rev-parse", "main"]);
    let (id, events) = finished(&sb, &file, &[]);
    let created = one(&events, "worktree_created");
    let path = worktree_path(&sb, &id);
    assert_eq!(
        created["data"]["path"],
        path.canonicalize()
            .unwrap_or(path.clone())
            .display()
            .to_string(),
        "{engine:?}"
    );
    assert_eq!(created["data"]["branch"], "main");
    assert_eq!(created["data"]["base_commit"], base);
    // The `.git` bind: git in the box committed into the shared repository,
    // and could write neither its hooks nor its config.
    let commit = said(&events, "work");
    let work = of_type(&events, "node_finished")
        .into_iter()
        .find(|e| e["node_id"] == "work")
        .expect("work finished");
    assert_eq!(work["data"]["output"]["guard"], "refused", "{engine:?}");
    let fsmonitor = Command::new("git")
        .arg("-C")
        .arg(&ws)
        .args(["config", "--get", "core.fsmonitor"])
        .output()
        .expect("git");
    assert!(!fsmonitor.status.success(), "the box wrote the config");
    assert!(!ws.join(".git/hooks/post-commit").exists());
    let branch = format!("iterion/run/{id}");
    assert_eq!(branch_tip(&ws, &branch).as_deref(), Some(commit.as_str()));
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["final_commit"], commit.as_str(), "{fin}");
    assert_eq!(fin["final_branch"], branch.as_str());
    assert_eq!(fin["merge_status"], "merged");
    assert_eq!(fin["merged_into"], "main");
    assert_eq!(fin["removed"], true);
    // Squash (the default): one fresh commit on main with the run's message.
    let main = git(&ws, &["rev-parse", "main"]);
    assert_eq!(fin["merged_commit"], main.as_str());
    assert_eq!(git(&ws, &["rev-parse", "main~1"]), base);
    assert_eq!(git(&ws, &["log", "-1", "--format=%s", "main"]), "run: made");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).expect("merged"),
        "made\n"
    );
    assert!(!path.exists(), "the worktree is removed after promotion");
    assert!(of_type(&events, "worktree_kept").is_empty());
}

#[test]
fn dockerd_merge_strategy_fast_forwards_a_named_branch() {
    let sb = Sandbox::new(Engine::Docker);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    let (_, events) = finished(
        &sb,
        &file,
        &["--merge-strategy", "merge", "--branch-name", "feat/auto"],
    );
    let commit = said(&events, "work");
    assert_eq!(
        branch_tip(&ws, "feat/auto").as_deref(),
        Some(commit.as_str())
    );
    assert_eq!(git(&ws, &["rev-parse", "main"]), commit, "fast-forwarded");
    assert_eq!(
        one(&events, "worktree_finalized")["data"]["merge_status"],
        "merged"
    );
}

#[test]
fn podman_auto_merge_off_and_merge_into_none_leave_main_alone() {
    let sb = Sandbox::new(Engine::Podman);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    let base = git(&ws, &["rev-parse", "main"]);
    for (flags, status) in [
        (&["--auto-merge=false"][..], "pending"),
        (&["--merge-into", "none"][..], "skipped"),
    ] {
        let (id, events) = finished(&sb, &file, flags);
        let fin = &one(&events, "worktree_finalized")["data"];
        assert_eq!(fin["merge_status"], status, "{flags:?}: {fin}");
        assert_eq!(
            branch_tip(&ws, &format!("iterion/run/{id}")),
            Some(said(&events, "work"))
        );
        assert_eq!(git(&ws, &["rev-parse", "main"]), base, "{flags:?}");
    }
}

#[test]
fn dockerd_a_failed_run_keeps_its_worktree_and_resume_continues_in_it() {
    failed_then_resumed(Engine::Docker);
}

#[test]
fn podman_a_failed_run_keeps_its_worktree_and_resume_continues_in_it() {
    failed_then_resumed(Engine::Podman);
}

fn failed_then_resumed(engine: Engine) {
    let sb = Sandbox::new(engine);
    // `check` fails until the operator puts go.txt into the run's worktree.
    let file = repo(
        &sb,
        COMMIT_SCRIPT,
        "test -e go.txt || exit 3; printf '{\"said\":\"ok\"}'",
    );
    let ws = sb.workspace();
    let base = git(&ws, &["rev-parse", "main"]);
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
    let id = r.run_id();
    let events = sb.events(&id);
    let kept = &one(&events, "worktree_kept")["data"];
    assert_eq!(kept["reason"], "failed", "{kept}");
    assert!(of_type(&events, "worktree_finalized").is_empty());
    let path = worktree_path(&sb, &id);
    let commit = said(&events, "work");
    // Kept for inspection: the run's commit is its HEAD; no branch, main as
    // it was.
    assert_eq!(git(&path, &["rev-parse", "HEAD"]), commit);
    assert_eq!(branch_tip(&ws, &format!("iterion/run/{id}")), None);
    assert_eq!(git(&ws, &["rev-parse", "main"]), base);

    std::fs::write(path.join("go.txt"), "go\n").expect("operator's fix");
    let r = sb.resume(&id, &[]);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{engine:?}: {}",
        r.stderr
    );
    let events = sb.events(&id);
    // `work` did not run again: one commit, promoted from the same worktree.
    assert_eq!(
        of_type(&events, "node_finished")
            .iter()
            .filter(|e| e["node_id"] == "work")
            .count(),
        1
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["final_commit"], commit.as_str(), "{fin}");
    assert_eq!(fin["merge_status"], "merged");
    assert_eq!(
        branch_tip(&ws, &format!("iterion/run/{id}")).as_deref(),
        Some(commit.as_str())
    );
    // go.txt is work no commit holds: the worktree stays, nothing lost.
    assert_eq!(fin["removed"], false);
    let kept: Vec<&Value> = of_type(&events, "worktree_kept");
    assert_eq!(
        kept.last().map(|k| k["data"]["reason"].clone()),
        Some(Value::from("uncommitted_changes"))
    );
    assert!(path.join("go.txt").exists());
}

#[test]
fn dockerd_bindless_copies_the_worktree_in_and_back_without_git_in_the_box() {
    bindless(Engine::Docker);
}

#[test]
fn podman_bindless_copies_the_worktree_in_and_back_without_git_in_the_box() {
    bindless(Engine::Podman);
}

/// The documented limitation of copy-based engines: the `.git` bind is
/// dropped (and named in `sandbox_host_binds_dropped`), so git has no
/// repository in the box; the run's files come back into the worktree,
/// which is kept because they are no commit's.
fn bindless(engine: Engine) {
    let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    let script = "echo made > made.txt\n\
                  if git rev-parse --git-dir >/dev/null 2>&1; then g=yes; else g=no; fi\n\
                  printf '{\"said\":\"%s\",\"guard\":\"n/a\"}' \"$g\"\n";
    let file = repo(&sb, script, OK);
    let ws = sb.workspace();
    let (id, events) = finished(&sb, &file, &[]);
    assert_eq!(said(&events, "work"), "no", "{engine:?}");
    let git_dir = ws.canonicalize().expect("ws").join(".git");
    let dropped = &one(&events, "sandbox_host_binds_dropped")["data"]["dropped"];
    assert!(
        dropped.as_array().is_some_and(|d| d
            .iter()
            .any(|b| b["source"] == git_dir.display().to_string())),
        "{dropped}"
    );
    let path = worktree_path(&sb, &id);
    assert_eq!(
        std::fs::read_to_string(path.join("made.txt")).expect("exported back"),
        "made\n"
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["final_commit"], Value::Null, "{fin}");
    assert_eq!(fin["removed"], false);
    assert_eq!(
        one(&events, "worktree_kept")["data"]["reason"],
        "uncommitted_changes"
    );
    assert!(!ws.join("made.txt").exists(), "the checkout is untouched");
}

#[test]
fn dockerd_a_dirty_checkout_runs_from_head_and_refuses_the_merge() {
    let sb = Sandbox::new(Engine::Docker);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    std::fs::write(ws.join("script.sh"), "# operator's WIP\n").expect("wip");
    let base = git(&ws, &["rev-parse", "main"]);
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("uncommitted changes"), "{}", r.stderr);
    let id = r.run_id();
    let events = sb.events(&id);
    assert_eq!(one(&events, "worktree_created")["data"]["dirty"], true);
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["merge_status"], "failed", "{fin}");
    assert!(
        fin["reason"]
            .as_str()
            .is_some_and(|r| r.contains("uncommitted")),
        "{fin}"
    );
    assert_eq!(
        branch_tip(&ws, &format!("iterion/run/{id}")),
        Some(said(&events, "work"))
    );
    assert_eq!(git(&ws, &["rev-parse", "main"]), base);
    assert_eq!(
        std::fs::read_to_string(ws.join("script.sh")).expect("wip"),
        "# operator's WIP\n",
        "the WIP is untouched"
    );
}

#[test]
fn podman_a_detached_head_keeps_the_commits_on_a_branch_and_skips_the_merge() {
    let sb = Sandbox::new(Engine::Podman);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    git(&ws, &["checkout", "-q", "--detach"]);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let (id, events) = finished(&sb, &file, &[]);
    assert_eq!(
        one(&events, "worktree_created")["data"]["branch"],
        Value::Null
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["merge_status"], "skipped", "{fin}");
    assert!(
        fin["reason"]
            .as_str()
            .is_some_and(|r| r.contains("detached"))
    );
    assert_eq!(
        branch_tip(&ws, &format!("iterion/run/{id}")),
        Some(said(&events, "work"))
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
}

/// Exit 2 with the code in the message, no run recorded, no worktree made.
fn refused(sb: &Sandbox, out: &std::process::Output, code: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(code), "{code}: {stderr}");
    assert!(runs(sb).is_empty(), "no run recorded");
    assert!(!sb.store().join("worktrees").exists(), "no worktree made");
}

#[test]
fn a_workspace_that_is_not_a_repository_is_refused() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("w.iter", &workflow(OK));
    let out = sb.iterion(&["run", &file.to_string_lossy(), "--json"]);
    refused(&sb, &out, "WORKTREE_NOT_A_REPO");
}

#[test]
fn a_host_without_git_is_refused() {
    let sb = Sandbox::new(Engine::Docker);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let empty = sb.dir.path().join("no-git-here");
    std::fs::create_dir(&empty).expect("mkdir");
    let out = sb
        .command(&["run", &file.to_string_lossy(), "--json"])
        .env("PATH", &empty)
        .output()
        .expect("spawn");
    refused(&sb, &out, "WORKTREE_GIT_MISSING");
}

#[test]
fn a_repository_without_a_commit_is_refused() {
    let sb = Sandbox::new(Engine::Docker);
    git(&sb.workspace(), &["init", "-q"]);
    let file = sb.write("w.iter", &workflow(OK));
    let out = sb.iterion(&["run", &file.to_string_lossy(), "--json"]);
    refused(&sb, &out, "WORKTREE_NO_COMMIT");
}

#[test]
fn bad_branch_names_and_strategies_are_refused_by_the_flags() {
    let sb = Sandbox::new(Engine::Docker);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let f = file.to_string_lossy();
    for args in [
        vec!["run", &f, "--branch-name", "-x"],
        vec!["run", &f, "--branch-name", "a..b"],
        vec!["run", &f, "--merge-into", "bad name"],
        vec!["run", &f, "--merge-strategy", "rebase"],
        vec!["run", &f, "--auto-merge=maybe"],
    ] {
        let out = sb.iterion(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(runs(&sb).is_empty());
    assert!(!sb.store().join("worktrees").exists());
}

/// The default layout: the store is `.iterion` inside the checkout, so the
/// worktree lies inside the repository's own working tree and inside
/// iterion's private area; it is still the run's workspace (the rest of
/// the store stays out of the sandbox), and the untracked store does not
/// count as uncommitted work of the checkout.
#[test]
fn dockerd_a_store_inside_the_checkout_holds_the_worktree() {
    let sb = Sandbox::new(Engine::Docker);
    let store = sb.workspace().join(".iterion");
    let sb = sb.with_env("ITERION_STORE", &store.to_string_lossy());
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    let r = sb.run(&file, &[]);
    let id = r.run_id();
    let events = sb.events_in(&store, &id);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{}\n{events:#?}",
        r.stderr
    );
    let created = &one(&events, "worktree_created")["data"];
    assert!(
        created["path"]
            .as_str()
            .is_some_and(|p| p.ends_with(&format!("/ws/.iterion/worktrees/{id}"))),
        "{created}"
    );
    assert_eq!(created["dirty"], false);
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["merge_status"], "merged", "{fin}");
    assert_eq!(git(&ws, &["log", "-1", "--format=%s", "main"]), "run: made");
    assert!(!store.join("worktrees").join(&id).exists());
}

/// A branch git cannot create (a branch `wt` exists, so `wt/x` cannot):
/// `worktree_branch_failed` with the commit to recover, the worktree kept so
/// the commit stays reachable, the run still finished.
#[test]
fn podman_a_branch_git_refuses_is_reported_and_the_commits_kept() {
    let sb = Sandbox::new(Engine::Podman);
    let file = repo(&sb, COMMIT_SCRIPT, OK);
    let ws = sb.workspace();
    git(&ws, &["branch", "wt"]);
    let base = git(&ws, &["rev-parse", "main"]);
    let (id, events) = finished(&sb, &file, &["--branch-name", "wt/x"]);
    let commit = said(&events, "work");
    let failed = &one(&events, "worktree_branch_failed")["data"];
    assert_eq!(failed["sha"], commit.as_str(), "{failed}");
    assert_eq!(failed["reason"], "git_branch_failed");
    assert_eq!(failed["branch"], "wt/x");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains(&commit)),
        "{failed}"
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["final_branch"], Value::Null, "{fin}");
    assert_eq!(fin["removed"], false);
    assert_eq!(
        git(&worktree_path(&sb, &id), &["rev-parse", "HEAD"]),
        commit
    );
    assert_eq!(git(&ws, &["rev-parse", "main"]), base);
}

// ---- issue 31 item 1: the host runs nothing the box wrote ---------------
//
// Each attack is performed by the sandboxed tool itself, through the real
// `.git` bind, on dockerd and Podman; a hook or program it plants would
// `touch` a file in a host directory the box cannot see (`pwned/`), so
// any file there is the host having run it.

/// Every hook the promotion's `merge`, `commit` and ref updates could run.
const HOOKS: &str = "pre-commit prepare-commit-msg commit-msg post-commit pre-merge-commit \
                     post-merge post-checkout post-index-change reference-transaction";

/// The host directory a planted program would touch.
fn pwned(sb: &Sandbox) -> PathBuf {
    let dir = sb.dir.path().join("pwned");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn nothing_ran(sb: &Sandbox) {
    let ran: Vec<String> = std::fs::read_dir(pwned(sb))
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        ran,
        Vec::<String>::new(),
        "{:?}: the host ran these",
        sb.engine
    );
}

/// The run's commit, then `attack` (shell, `$gd` the shared git dir,
/// `$MARK` the host's `pwned/`), whose outcome is the node's `guard`.
fn attack_script(sb: &Sandbox, attack: &str) -> String {
    format!(
        "set -e\n\
         MARK='{mark}'\n\
         HOOKS='{HOOKS}'\n\
         echo made > made.txt\n\
         git add made.txt\n\
         git -c core.hooksPath=/dev/null -c user.name=run -c user.email=run@example.invalid \
           commit -q -m 'run: made'\n\
         gd=$(git rev-parse --path-format=absolute --git-common-dir)\n\
         g=refused\n\
         {attack}\n\
         printf '{{\"said\":\"%s\",\"guard\":\"%s\"}}' \"$(git rev-parse HEAD)\" \"$g\"\n",
        mark = pwned(sb).display(),
    )
}

/// A repository `git init --template=` made: no `.git/hooks` at all.
fn hookless_repo(sb: &Sandbox, script: &str) -> PathBuf {
    let ws = sb.workspace();
    git(&ws, &["init", "-q", "--template=", "-b", "main"]);
    assert!(!ws.join(".git/hooks").exists());
    git(&ws, &["config", "user.name", "Op"]);
    git(&ws, &["config", "user.email", "op@example.invalid"]);
    git(&ws, &["config", "commit.gpgsign", "false"]);
    sb.write("script.sh", script);
    let file = sb.write("w.iter", &workflow(OK));
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    file
}

#[test]
fn dockerd_hooks_the_box_plants_in_a_hookless_repository_never_run_on_the_host() {
    hookless(Engine::Docker);
}

#[test]
fn podman_hooks_the_box_plants_in_a_hookless_repository_never_run_on_the_host() {
    hookless(Engine::Podman);
}

/// Attack (a): with no `.git/hooks`, nothing was bound read-only there;
/// the box creates the directory and every hook. Now the run's empty
/// read-only directory is bound over it (the box's writes fail), and the
/// host's git would not run a hook anyway.
fn hookless(engine: Engine) {
    let sb = Sandbox::new(engine);
    let script = attack_script(
        &sb,
        "for h in $HOOKS; do\n\
           if (mkdir -p \"$gd/hooks\" && printf '#!/bin/sh\\ntouch %s/%s\\n' \"$MARK\" \"$h\" \
               > \"$gd/hooks/$h\" && chmod +x \"$gd/hooks/$h\") 2>/dev/null; then g=planted; fi\n\
         done",
    );
    let file = hookless_repo(&sb, &script);
    let ws = sb.workspace();
    let (_, events) = finished(&sb, &file, &[]);
    let work = node_output(&events, "work");
    assert_eq!(work["guard"], "refused", "{engine:?}: {work}");
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["merge_status"], "merged", "{engine:?}: {fin}");
    assert_eq!(git(&ws, &["log", "-1", "--format=%s", "main"]), "run: made");
    let planted: Vec<_> = std::fs::read_dir(ws.join(".git/hooks"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(planted.is_empty(), "{engine:?}: {planted:?}");
    nothing_ran(&sb);
}

#[test]
fn dockerd_hooks_the_run_commits_under_core_hooks_path_never_run_on_the_host() {
    hooks_path(Engine::Docker, "squash");
    hooks_path(Engine::Docker, "merge");
}

#[test]
fn podman_hooks_the_run_commits_under_core_hooks_path_never_run_on_the_host() {
    hooks_path(Engine::Podman, "squash");
    hooks_path(Engine::Podman, "merge");
}

/// Attack (b), the husky pattern: the operator's repository says
/// `core.hooksPath=.githooks`; the run commits new hooks there, and the
/// promotion checks them out into the operator's checkout right before
/// its commit (squash) or as its merge (fast-forward).
fn hooks_path(engine: Engine, strategy: &str) {
    let sb = Sandbox::new(engine);
    let script = attack_script(
        &sb,
        "mkdir -p .githooks\n\
         for h in $HOOKS; do\n\
           printf '#!/bin/sh\\ntouch %s/%s\\n' \"$MARK\" \"$h\" > .githooks/$h\n\
           chmod +x .githooks/$h\n\
         done\n\
         git -c core.hooksPath=/dev/null add .githooks\n\
         git -c core.hooksPath=/dev/null -c user.name=run -c user.email=run@example.invalid \
           commit -q -m 'run: hooks'\n\
         g=committed",
    );
    let file = repo(&sb, &script, OK);
    let ws = sb.workspace();
    git(&ws, &["config", "core.hooksPath", ".githooks"]);
    let (_, events) = finished(&sb, &file, &["--merge-strategy", strategy]);
    assert_eq!(node_output(&events, "work")["guard"], "committed");
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(
        fin["merge_status"], "merged",
        "{engine:?} {strategy}: {fin}"
    );
    assert!(
        ws.join(".githooks/pre-commit").is_file(),
        "{engine:?} {strategy}: the hooks reached the operator's checkout"
    );
    nothing_ran(&sb);
}

#[test]
fn dockerd_config_the_box_plants_runs_nothing_on_the_host() {
    planted_config(Engine::Docker);
}

#[test]
fn podman_config_the_box_plants_runs_nothing_on_the_host() {
    planted_config(Engine::Podman);
}

/// The operator's repository has `extensions.worktreeConfig` (sparse
/// checkouts set it): git then reads `.git/config.worktree` for the main
/// checkout, a file the box can write. It plants every code-running key
/// it can name there, an include of a file it also wrote, hooks in a
/// directory of its own, and the attributes that select its filters.
fn planted_config(engine: Engine) {
    let sb = Sandbox::new(engine);
    let script = attack_script(
        &sb,
        "mkdir -p \"$gd/box-hooks\" \"$gd/info\"\n\
         for h in $HOOKS gpg; do\n\
           printf '#!/bin/sh\\ntouch %s/%s\\n' \"$MARK\" \"$h\" > \"$gd/box-hooks/$h\"\n\
           chmod +x \"$gd/box-hooks/$h\"\n\
         done\n\
         cat > \"$gd/box.cfg\" <<EOF\n\
         [core]\n\
         \tfsmonitor = \"touch $MARK/included-fsmonitor; false\"\n\
         [filter \"inc\"]\n\
         \tclean = touch $MARK/included-clean; cat\n\
         \tsmudge = touch $MARK/included-smudge; cat\n\
         EOF\n\
         cat > \"$gd/config.worktree\" <<EOF\n\
         [core]\n\
         \tfsmonitor = \"touch $MARK/fsmonitor; false\"\n\
         \thooksPath = $gd/box-hooks\n\
         [include]\n\
         \tpath = $gd/box.cfg\n\
         [filter \"evil\"]\n\
         \tclean = touch $MARK/clean; cat\n\
         \tsmudge = touch $MARK/smudge; cat\n\
         \tprocess = touch $MARK/process\n\
         \trequired = true\n\
         [commit]\n\
         \tgpgSign = true\n\
         [gpg]\n\
         \tprogram = $gd/box-hooks/gpg\n\
         [log]\n\
         \tshowSignature = true\n\
         [credential]\n\
         \thelper = \"!touch $MARK/credential\"\n\
         EOF\n\
         printf 'made.txt filter=evil\\n*.iter filter=inc\\n' > \"$gd/info/attributes\"\n\
         g=planted",
    );
    let file = repo(&sb, &script, OK);
    let ws = sb.workspace();
    git(&ws, &["config", "extensions.worktreeConfig", "true"]);
    let (_, events) = finished(&sb, &file, &[]);
    assert_eq!(node_output(&events, "work")["guard"], "planted");
    assert!(
        ws.join(".git/config.worktree").is_file(),
        "the attack landed"
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["merge_status"], "merged", "{engine:?}: {fin}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).expect("merged"),
        "made\n"
    );
    nothing_ran(&sb);
}

#[test]
fn dockerd_a_commondir_the_box_plants_refuses_the_promotion() {
    planted_commondir(Engine::Docker);
}

#[test]
fn podman_a_commondir_the_box_plants_refuses_the_promotion() {
    planted_commondir(Engine::Podman);
}

/// The box makes a repository of its own inside the shared `.git`, with
/// hooks, and points `.git/commondir` at it: git finding the operator's
/// repository would read that one's config, hooks and refs. The host
/// refuses to run git there; the run's commit stays in the kept worktree,
/// `main` is untouched.
fn planted_commondir(engine: Engine) {
    let sb = Sandbox::new(engine);
    let script = attack_script(
        &sb,
        "git clone -q --bare \"$gd\" \"$gd/evil\"\n\
         git -C \"$gd/evil\" config core.bare false\n\
         for h in $HOOKS; do\n\
           printf '#!/bin/sh\\ntouch %s/%s\\n' \"$MARK\" \"$h\" > \"$gd/evil/hooks/$h\"\n\
           chmod +x \"$gd/evil/hooks/$h\"\n\
         done\n\
         echo evil > \"$gd/commondir\"\n\
         g=planted",
    );
    let file = repo(&sb, &script, OK);
    let ws = sb.workspace();
    let base = std::fs::read_to_string(ws.join(".git/refs/heads/main")).expect("main");
    let (id, events) = finished(&sb, &file, &[]);
    assert_eq!(node_output(&events, "work")["guard"], "planted");
    let failed = &one(&events, "worktree_branch_failed")["data"];
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("commondir")),
        "{engine:?}: {failed}"
    );
    let fin = &one(&events, "worktree_finalized")["data"];
    assert_eq!(fin["removed"], false, "{fin}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/refs/heads/main")).expect("main"),
        base
    );
    let commit = said(&events, "work");
    let kept = worktree_path(&sb, &id);
    let head = Command::new("git")
        .arg("-C")
        .arg(&kept)
        .args(["rev-parse", "HEAD"])
        .env("GIT_DIR", ws.join(".git/worktrees").join(&id))
        .env("GIT_COMMON_DIR", ws.join(".git"))
        .output()
        .expect("git");
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), commit);
    nothing_ran(&sb);
}

fn node_output<'a>(events: &'a [Value], node: &str) -> &'a Value {
    &of_type(events, "node_finished")
        .into_iter()
        .rev()
        .find(|e| e["node_id"] == node)
        .unwrap_or_else(|| panic!("no output of {node}: {events:?}"))["data"]["output"]
}
