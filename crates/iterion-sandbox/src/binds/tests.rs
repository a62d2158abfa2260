use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::*;

/// A temp dir with its real path (tempdirs may sit behind a symlinked TMPDIR).
fn tmp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tmp");
    let real = dir.path().canonicalize().expect("real");
    (dir, real)
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn declared(src: &str, settings: &HostBindSettings) -> Result<String, GuardViolation> {
    judge_bind(src, BindRole::Declared, settings, &BindScope::default())
}

#[test]
fn a_symlink_is_judged_by_where_it_leads() {
    let (_d, root) = tmp();
    symlink("/etc", root.join("l")).expect("symlink");
    symlink("/", root.join("slash")).expect("symlink");
    let settings = HostBindSettings::default();
    // The report's attack: `ln -s /etc l; source=$PWD/l/shadow`.
    let err = declared(&s(&root.join("l/shadow")), &settings).expect_err("refused");
    assert!(err.reason.contains("/etc"), "{err}");
    assert!(err.reason.contains("resolves to /etc/shadow"), "{err}");
    let err = declared(&s(&root.join("l")), &settings).expect_err("refused");
    assert!(err.reason.contains("resolves to /etc"), "{err}");
    let err = declared(&s(&root.join("slash")), &settings).expect_err("refused");
    assert!(err.reason.contains("root directory"), "{err}");
    // `..` is applied by the kernel, not by string games.
    std::fs::create_dir(root.join("d")).expect("mkdir");
    assert!(declared(&format!("{}/d/../slash", s(&root)), &settings).is_err());
    // The same symlink as a workspace: `/etc` contains /etc itself.
    let err = judge_bind(
        &s(&root.join("l")),
        BindRole::Workspace,
        &settings,
        &BindScope::default(),
    )
    .expect_err("refused");
    assert!(err.reason.contains("/etc"), "{err}");
}

#[test]
fn sockets_devices_and_fifos_are_refused_wherever_they_are() {
    let (_d, root) = tmp();
    let sock = root.join("engine.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind socket");
    let settings = HostBindSettings::default();
    let err = declared(&s(&sock), &settings).expect_err("socket");
    assert!(err.reason.contains("socket"), "{err}");
    symlink(&sock, root.join("innocent")).expect("symlink");
    assert!(declared(&s(&root.join("innocent")), &settings).is_err());
    let err = declared("/dev/null", &settings).expect_err("device");
    assert!(err.reason.contains("/dev"), "{err}");
    symlink("/dev/null", root.join("null")).expect("symlink");
    let err = declared(&s(&root.join("null")), &settings).expect_err("device via symlink");
    assert!(err.reason.contains("/dev"), "{err}");
    let fifo = root.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let err = declared(&s(&fifo), &settings).expect_err("fifo");
    assert!(err.reason.contains("fifo"), "{err}");
    // Even a managed bind may not be one.
    let managed = judge_bind(
        &s(&sock),
        BindRole::Managed,
        &settings,
        &BindScope::default(),
    );
    assert!(managed.is_err());
}

#[test]
fn the_engine_socket_named_by_docker_host_and_its_directory_are_refused() {
    let (_d, root) = tmp();
    let dir = root.join("engine");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("d.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind socket");
    let host = format!("unix://{}", s(&sock));
    let settings = HostBindSettings::capture(|k| (k == "DOCKER_HOST").then(|| host.clone()));
    assert!(settings.engine_paths.contains(&s(&sock)), "{settings:?}");
    let err = declared(&s(&dir), &settings).expect_err("the socket's dir");
    assert!(err.reason.contains("contains"), "{err}");
    assert!(declared(&s(&sock), &settings).is_err());
    // A data root an engine reports is refused, and so is what lies in it.
    let data = root.join("data-root");
    std::fs::create_dir_all(data.join("volumes/v1")).expect("mkdir");
    let settings = HostBindSettings::default().with_engine_paths([s(&data)]);
    let err = declared(&s(&data.join("volumes/v1")), &settings).expect_err("in the data root");
    assert!(err.reason.contains("inside"), "{err}");
    let err = judge_bind(
        &s(&data.join("volumes/v1")),
        BindRole::Workspace,
        &settings,
        &BindScope::default(),
    )
    .expect_err("a workspace inside the engine's data root");
    assert!(err.reason.contains("inside"), "{err}");
}

#[test]
fn home_credential_dirs_and_their_ancestors_are_refused() {
    let (_d, root) = tmp();
    let home = root.join("home/u");
    std::fs::create_dir_all(home.join("proj")).expect("mkdir");
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    let settings = HostBindSettings {
        homes: vec![s(&home)],
        ..HostBindSettings::default()
    };
    let ws = |p: &Path| judge_bind(&s(p), BindRole::Workspace, &settings, &BindScope::default());
    assert_eq!(ws(&home.join("proj")), Ok(s(&home.join("proj"))));
    assert!(ws(&home).is_err(), "the home holds .ssh");
    assert!(ws(&root.join("home")).is_err());
    assert!(declared(&s(&home.join(".ssh")), &settings).is_err());
    assert!(declared(&s(&home), &settings).is_err());
    assert_eq!(
        declared(&s(&home.join("proj")), &settings),
        Ok(s(&home.join("proj")))
    );
    // A credential dir is refused by name wherever it is.
    std::fs::create_dir_all(root.join("elsewhere/.aws")).expect("mkdir");
    assert!(declared(&s(&root.join("elsewhere/.aws")), &settings).is_err());
}

#[test]
fn passwd_homes_are_read() {
    let text = "root:x:0:0:root:/root:/bin/bash\n# comment\nu:x:1000:1000::/home/u:/bin/sh\nbad\nd:x:1:1::relative:/bin/sh\n";
    assert_eq!(passwd_homes(text), vec!["/root", "/home/u"]);
    assert_eq!(
        unix_socket_path("unix:///run/x.sock").as_deref(),
        Some("/run/x.sock")
    );
    assert_eq!(unix_socket_path("/a//b.sock").as_deref(), Some("/a/b.sock"));
    assert_eq!(unix_socket_path("tcp://1.2.3.4:2375"), None);
}

#[test]
fn a_missing_source_is_refused_and_relative_sources_too() {
    let (_d, root) = tmp();
    let settings = HostBindSettings::default();
    let err = declared(&s(&root.join("nope")), &settings).expect_err("missing");
    assert!(err.reason.contains("does not exist"), "{err}");
    assert!(declared("relative/dir", &settings).is_err());
}

#[test]
fn untrusted_runs_bind_nothing_outside_the_workspace() {
    let (_d, root) = tmp();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("data")).expect("mkdir");
    std::fs::create_dir_all(root.join("outside")).expect("mkdir");
    symlink(root.join("outside"), ws.join("escape")).expect("symlink");
    let ws_real = s(&ws);
    let settings = HostBindSettings::default();
    let untrusted = BindScope {
        workspace: Some(&ws_real),
        untrusted: true,
    };
    let trusted = BindScope {
        workspace: Some(&ws_real),
        untrusted: false,
    };
    let j =
        |p: &Path, scope: &BindScope<'_>| judge_bind(&s(p), BindRole::Declared, &settings, scope);
    assert!(j(&ws.join("data"), &untrusted).is_ok());
    let err = j(&root.join("outside"), &untrusted).expect_err("outside");
    assert!(err.reason.contains("untrusted"), "{err}");
    // A symlink inside the workspace leading out of it is outside.
    assert!(j(&ws.join("escape"), &untrusted).is_err());
    assert!(j(&root.join("outside"), &trusted).is_ok());
}

#[test]
fn managed_binds_must_stay_under_the_state_dir() {
    let (_d, root) = tmp();
    let state = root.join("state");
    std::fs::create_dir_all(state.join("run/files")).expect("mkdir");
    std::fs::create_dir_all(root.join("other")).expect("mkdir");
    symlink(root.join("other"), state.join("run/swapped")).expect("symlink");
    let settings = HostBindSettings::default().with_managed_roots([s(&state)]);
    let m = |p: &Path| judge_bind(&s(p), BindRole::Managed, &settings, &BindScope::default());
    assert!(m(&state.join("run/files")).is_ok());
    assert!(m(&root.join("other")).is_err());
    assert!(
        m(&state.join("run/swapped")).is_err(),
        "a symlink out of the state dir"
    );
}

fn bind(source: &Path, target: &str, origin: MountOrigin) -> Mount {
    Mount {
        kind: MountKind::Bind,
        source: Some(s(source)),
        target: target.to_owned(),
        readonly: false,
        size: None,
        origin,
    }
}

#[test]
fn the_store_inside_a_bind_is_masked_and_its_parents_pinned() {
    let (_d, root) = tmp();
    let ws = root.join("ws");
    let store = ws.join(".iterion");
    let deep = ws.join("a/b/.store");
    let mask = root.join("mask");
    for d in [&store, &deep, &mask] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let settings = HostBindSettings::default().with_private([s(&store), s(&deep)]);
    let ws_real = s(&ws);
    let scope = BindScope {
        workspace: Some(&ws_real),
        untrusted: false,
    };
    let mut plan = LaunchPlan {
        mounts: vec![bind(&ws, "/work", MountOrigin::Workspace)],
        ..LaunchPlan::default()
    };
    resolve_plan_binds(&RealHost, &mut plan, &settings, &scope, Some(&s(&mask))).expect("resolved");
    let targets: Vec<(&str, bool, MountOrigin)> = plan
        .mounts
        .iter()
        .map(|m| (m.target.as_str(), m.readonly, m.origin))
        .collect();
    assert!(
        targets.contains(&("/work/.iterion", true, MountOrigin::Mask)),
        "{targets:?}"
    );
    assert!(
        targets.contains(&("/work/a", false, MountOrigin::Workspace)),
        "{targets:?}"
    );
    assert!(
        targets.contains(&("/work/a/b", false, MountOrigin::Workspace)),
        "{targets:?}"
    );
    assert!(
        targets.contains(&("/work/a/b/.store", true, MountOrigin::Mask)),
        "{targets:?}"
    );
    let m = plan
        .mounts
        .iter()
        .find(|m| m.target == "/work/.iterion")
        .expect("mask");
    assert_eq!(m.source.as_deref(), Some(s(&mask).as_str()));
    // No mask available: refused, never left visible.
    let mut plan = LaunchPlan {
        mounts: vec![bind(&ws, "/work", MountOrigin::Workspace)],
        ..LaunchPlan::default()
    };
    assert!(resolve_plan_binds(&RealHost, &mut plan, &settings, &scope, None).is_err());
    // A declared bind into the store, or the workspace being the store: refused.
    let mut plan = LaunchPlan {
        mounts: vec![bind(&store, "/s", MountOrigin::Workflow)],
        ..LaunchPlan::default()
    };
    assert!(resolve_plan_binds(&RealHost, &mut plan, &settings, &scope, Some(&s(&mask))).is_err());
    let settings = HostBindSettings::default().with_private([s(&ws)]);
    let mut plan = LaunchPlan {
        mounts: vec![bind(&ws, "/work", MountOrigin::Workspace)],
        ..LaunchPlan::default()
    };
    assert!(resolve_plan_binds(&RealHost, &mut plan, &settings, &scope, Some(&s(&mask))).is_err());
}

#[test]
fn sources_are_rewritten_to_real_paths_and_a_later_swap_is_caught() {
    let (_d, root) = tmp();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("data")).expect("mkdir");
    symlink(ws.join("data"), root.join("link")).expect("symlink");
    let settings = HostBindSettings::default();
    let mut plan = LaunchPlan {
        mounts: vec![
            bind(&ws, "/work", MountOrigin::Workspace),
            bind(&root.join("link"), "/data", MountOrigin::Workflow),
        ],
        ..LaunchPlan::default()
    };
    resolve_plan_binds(&RealHost, &mut plan, &settings, &BindScope::default(), None)
        .expect("resolved");
    assert_eq!(
        plan.mounts[1].source.as_deref(),
        Some(s(&ws.join("data")).as_str())
    );
    recheck_plan_binds(&plan, &settings).expect("unchanged");
    // The swap the re-check exists for: the judged directory becomes a
    // symlink to /etc between the judgement and the create.
    std::fs::rename(ws.join("data"), root.join("moved")).expect("mv");
    symlink("/etc", ws.join("data")).expect("symlink");
    let err = recheck_plan_binds(&plan, &settings).expect_err("swap caught");
    assert!(err.reason.contains("/etc"), "{err}");
    // A swap to somewhere harmless is caught too (the verdict was on another path).
    std::fs::remove_file(ws.join("data")).expect("rm");
    symlink(root.join("moved"), ws.join("data")).expect("symlink");
    let err = recheck_plan_binds(&plan, &settings).expect_err("swap caught");
    assert!(err.reason.contains("changed"), "{err}");
}

#[test]
fn the_runner_binary_is_a_regular_file_judged_like_a_declared_bind() {
    let (_d, root) = tmp();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let bin = root.join("iterion");
    std::fs::write(&bin, b"\x7fELF").expect("binary");
    let ws_real = s(&ws);
    let untrusted = BindScope {
        workspace: Some(&ws_real),
        untrusted: true,
    };
    let settings = HostBindSettings::default();
    assert_eq!(BindRole::of(MountOrigin::RunnerBinary), BindRole::Runtime);
    let r = |p: &Path| judge_bind(&s(p), BindRole::Runtime, &settings, &untrusted);
    // iterion's own file: outside the workspace even for an untrusted run.
    assert_eq!(r(&bin).expect("runner binary"), s(&bin));
    let err = r(&ws).expect_err("a directory");
    assert!(err.reason.contains("not a regular file"), "{err}");
    // Through a symlink into a sealed area it is what it leads to.
    symlink("/etc/passwd", root.join("iterion-link")).expect("symlink");
    assert!(r(&root.join("iterion-link")).is_err());
}

#[test]
fn private_areas_within_the_workspace_are_named_relative_to_it() {
    let got = private_areas_within(
        "/w/proj",
        [
            "/w/proj/.iterion",
            "/tmp/iterion",
            "/w/proj",
            "/w/projx/y",
            "/w/proj/a/b/",
        ],
    );
    assert_eq!(got, vec![".iterion".to_owned(), "a/b".to_owned()]);
}

/// `worktree: auto`: a run's worktree under `<store>/worktrees` is its
/// workspace; the store around it, the worktrees root itself and a declared
/// bind into another run's worktree stay refused.
#[test]
fn a_worktree_under_the_store_is_a_workspace_and_nothing_else_is() {
    let (_d, root) = tmp();
    let store = root.join("proj/.iterion");
    let wt = store.join("worktrees/r1");
    std::fs::create_dir_all(&wt).expect("mkdir");
    let settings = HostBindSettings::default()
        .with_worktree_roots([format!("{}/worktrees", s(&store))])
        .with_private([s(&store)]);
    let ws = |p: &Path| judge_bind(&s(p), BindRole::Workspace, &settings, &BindScope::default());
    assert_eq!(ws(&wt), Ok(s(&wt)));
    assert!(ws(&store).is_err(), "the store itself");
    assert!(
        ws(&store.join("worktrees")).is_err(),
        "every run's worktrees"
    );
    assert!(declared(&s(&wt), &settings).is_err(), "a declared bind");
}
