//! Issue 19 items 1, 3 and 4 (and issue 14 item 1), performed as the
//! reporter did against the real dockerd and the real Podman: host binds
//! the old word list missed, the run store within reach of the sandbox,
//! host-root setuid and device files left on a host bind. Every attack
//! must fail on both engines; the benign twin of each must keep working;
//! `doctor --strict` must give the run's own verdict.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{Engine, RunResult, Sandbox, busybox, container_exists, of_type};

fn workflow(mounts: &[String], extra: &str) -> String {
    let list = mounts
        .iter()
        .map(|m| format!("{m:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"tool probe:
  command: `cat /x/shadow /x/etc/shadow 2>/dev/null | head -c 64; echo '{{}}'`

workflow attack:
  sandbox:
    image: "{image}"
    host_state: none
    mounts: [{list}]
{extra}  entry: probe
  probe -> done
"#,
        image = busybox()
    )
}

/// The refusal a run recorded (`run_failed.error`).
fn run_error(sb: &Sandbox, r: &RunResult) -> String {
    let events = sb.events(&r.run_id());
    of_type(&events, "run_failed")
        .first()
        .map(|e| e["data"]["error"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no run_failed: {events:#?}"))
}

/// The `host binds` row of `doctor --strict FILE --json` (extra flags
/// appended), run in the workspace.
fn doctor_row(sb: &Sandbox, file: &Path, extra: &[&str]) -> Value {
    doctor_in(sb, &sb.workspace(), file, extra)
}

/// Run `file` and assert it is refused before any container exists, with
/// the doctor giving the very same verdict.
fn assert_refused(sb: &Sandbox, file: &Path, flags: &[&str], why: &str) -> String {
    let r = sb.run(file, flags);
    assert_eq!(r.code, Some(1), "{:?} {why}: {}", sb.engine, r.stderr);
    assert_eq!(
        r.failure_code(),
        Some("SANDBOX_SPEC_REFUSED"),
        "{:?} {why}: {}",
        sb.engine,
        r.stderr
    );
    let error = run_error(sb, &r);
    assert!(
        !container_exists(sb.engine, &r.run_id()),
        "{:?} {why}: a container was created",
        sb.engine
    );
    let row = doctor_row(sb, file, flags);
    assert_eq!(row["status"], "fail", "{:?} {why}: {row}", sb.engine);
    assert_eq!(
        row["detail"].as_str(),
        Some(error.as_str()),
        "{:?} {why}: doctor and run disagree",
        sb.engine
    );
    error
}

/// Item 1: the engine socket at the path `DOCKER_HOST` names (not a
/// standard one) and the directory holding it, `/`, `/etc` read-write,
/// and a symlink that resolves into `/etc` — each refused on both engines,
/// with the doctor agreeing.
#[test]
fn binds_the_word_list_missed_are_refused() {
    for engine in Engine::ALL {
        let probe = Sandbox::new(engine);
        // DOCKER_HOST at a non-standard path: a symlink to the test socket.
        let engine_dir = probe.dir.path().join("engine");
        std::fs::create_dir_all(&engine_dir).expect("engine dir");
        let real_socket = engine.host().trim_start_matches("unix://").to_owned();
        let socket = engine_dir.join("d.sock");
        std::os::unix::fs::symlink(&real_socket, &socket).expect("socket link");
        let host = format!("unix://{}", socket.display());
        let mut sb = Sandbox::new(engine);
        sb.env.push(("DOCKER_HOST".to_owned(), host));
        let ws = sb.workspace();
        std::os::unix::fs::symlink("/etc", ws.join("l")).expect("symlink");
        let cases: Vec<(String, &str, &str)> = vec![
            (
                format!("type=bind,source={},target=/x", engine_dir.display()),
                "the directory of the DOCKER_HOST socket",
                "contains the sensitive host path",
            ),
            (
                format!("type=bind,source={},target=/x/s", socket.display()),
                "the DOCKER_HOST socket",
                "sensitive host path",
            ),
            (
                format!("type=bind,source={real_socket},target=/x/s"),
                "the engine socket",
                "",
            ),
            (
                "type=bind,source=/,target=/x".to_owned(),
                "the host root",
                "root directory",
            ),
            (
                "type=bind,source=/etc,target=/x".to_owned(),
                "/etc read-write",
                "/etc",
            ),
            (
                format!(
                    "type=bind,source={}/l/shadow,target=/x/shadow",
                    ws.display()
                ),
                "a symlink into /etc",
                "resolves to /etc/shadow",
            ),
            (
                format!("type=bind,source={}/l,target=/x", ws.display()),
                "a symlink to /etc",
                "resolves to /etc",
            ),
        ];
        for (i, (mount, why, needle)) in cases.iter().enumerate() {
            let file = sb.write(
                &format!("a{i}.iter"),
                &workflow(std::slice::from_ref(mount), ""),
            );
            let error = assert_refused(&sb, &file, &[], why);
            assert!(error.contains(needle), "{engine:?} {why}: {error}");
            // Deny wins whatever the trust.
            if i % 3 == 0 {
                assert_refused(&sb, &file, &["--trust", "untrusted"], why);
            }
        }
    }
}

/// Item 1 under `sandbox: auto`: a repository's `.devcontainer` `mounts`
/// go through the same judge (the checkout may be a hostile PR).
#[test]
fn devcontainer_mounts_are_judged_like_workflow_mounts() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let ws = sb.workspace();
        std::os::unix::fs::symlink("/", ws.join("up")).expect("symlink");
        sb.write(
            ".devcontainer/devcontainer.json",
            &format!(
                r#"{{"image": "{}", "mounts": [{{"type": "bind", "source": "{}/up", "target": "/host"}}]}}"#,
                busybox(),
                ws.display()
            ),
        );
        let file = sb.write(
            "auto.iter",
            "tool probe:\n  command: `ls /host/etc >/dev/null 2>&1 && echo '{\"root\": true}' || echo '{}'`\n\nworkflow auto_attack:\n  sandbox: auto\n  entry: probe\n  probe -> done\n",
        );
        let error = assert_refused(&sb, &file, &[], "a devcontainer mount of /");
        assert!(error.contains("root directory"), "{engine:?}: {error}");
    }
}

/// Item 1, `--trust untrusted`: no bind outside the workspace, not even a
/// harmless one (nor one reached through a symlink in the workspace);
/// binds inside it keep working, and the trusted run keeps its outside bind.
#[test]
fn untrusted_runs_bind_only_inside_the_workspace() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let outside = sb.dir.path().join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("shadow"), "outside-data").expect("data");
        let inside = sb.workspace().join("data");
        std::fs::create_dir_all(&inside).expect("inside");
        std::fs::write(inside.join("shadow"), "inside-data").expect("data");
        std::os::unix::fs::symlink(&outside, sb.workspace().join("escape")).expect("symlink");
        let mount = |p: &Path| format!("type=bind,source={},target=/x,readonly", p.display());
        let out_file = sb.write("out.iter", &workflow(&[mount(&outside)], ""));
        let error = assert_refused(&sb, &out_file, &["--trust", "untrusted"], "outside");
        assert!(error.contains("untrusted"), "{engine:?}: {error}");
        let esc_file = sb.write(
            "esc.iter",
            &workflow(&[mount(&sb.workspace().join("escape"))], ""),
        );
        assert_refused(&sb, &esc_file, &["--trust", "untrusted"], "escape symlink");
        for (file, flags, want) in [
            (
                sb.write("in.iter", &workflow(&[mount(&inside)], "")),
                vec!["--trust", "untrusted"],
                "inside-data",
            ),
            (out_file.clone(), vec![], "outside-data"),
        ] {
            let r = sb.run(&file, &flags);
            assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
            let events = sb.events(&r.run_id());
            let out = of_type(&events, "node_finished")[0]["data"]["output"].to_string();
            assert!(out.contains(want), "{engine:?}: {out}");
            let row = doctor_row(&sb, &file, &flags);
            assert_eq!(row["status"], "pass", "{engine:?}: {row}");
        }
    }
}

/// A workspace dir under `/root` (created by the test, removed after).
struct RootWorkspace {
    dir: tempfile::TempDir,
}

impl RootWorkspace {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("iterion-hostguard-")
            .tempdir_in("/root")
            .expect("a temp dir under /root (the tests run as root)");
        Self { dir }
    }
}

fn run_in(sb: &Sandbox, cwd: &Path, file: &Path, extra: &[&str]) -> RunResult {
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["run", file.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = sb
        .command(&args)
        .current_dir(cwd)
        .output()
        .expect("spawn iterion");
    crate::support::parse_run_output(&out)
}

/// The `host binds` row of `doctor --strict FILE --json` run in `cwd`.
fn doctor_in(sb: &Sandbox, cwd: &Path, file: &Path, extra: &[&str]) -> Value {
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["sandbox", "doctor", "--strict", file.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = sb
        .command(&args)
        .current_dir(cwd)
        .output()
        .expect("spawn doctor");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    doc["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "host binds"))
        .cloned()
        .unwrap_or_else(|| panic!("no host binds row: {doc:#}"))
}

/// Issue 14 item 1: the workspace is judged as a workspace. A project
/// under `/root` runs (it used to be refused as "sensitive host path
/// /root"); a workspace that is `/` or `/root` (which holds `/root/.ssh`)
/// is still refused; the doctor agrees each time.
#[test]
fn the_workspace_may_live_under_root_but_never_be_root_or_slash() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let home_ws = RootWorkspace::new();
        let wf = workflow(&[], "");
        let file = home_ws.dir.path().join("w.iter");
        std::fs::write(&file, &wf).expect("workflow");
        let r = run_in(&sb, home_ws.dir.path(), &file, &[]);
        assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
        let row = doctor_in(&sb, home_ws.dir.path(), &file, &[]);
        assert_eq!(row["status"], "pass", "{engine:?}: {row}");
        for cwd in [PathBuf::from("/"), PathBuf::from("/root")] {
            let r = run_in(&sb, &cwd, &file, &[]);
            assert_eq!(
                r.failure_code(),
                Some("SANDBOX_SPEC_REFUSED"),
                "{engine:?} {cwd:?}: {}",
                r.stderr
            );
            let error = run_error(&sb, &r);
            let row = doctor_in(&sb, &cwd, &file, &[]);
            assert_eq!(row["status"], "fail", "{engine:?} {cwd:?}: {row}");
            assert_eq!(
                row["detail"].as_str(),
                Some(error.as_str()),
                "{engine:?} {cwd:?}"
            );
        }
    }
}

// ---- item 3: the run store is out of the sandbox's reach ----------------------

const REPORT_WORKFLOW: &str = r#"tool report:
  command: `printf 'the genuine report' > "$ITERION_ARTIFACT_FILES_DIR/report.txt"; echo '{}'`

workflow reporter:
  sandbox:
    image: "IMAGE"
    host_state: none
  entry: report
  report -> done
"#;

/// The reporter's attacks from inside a node, on the store at `STORE`
/// (relative to the workspace): rewrite another run's stored report, wipe
/// the store, move it (or its parent) aside and plant a forged one.
const ATTACK_WORKFLOW: &str = r#"schema seen:
  entries: int
  wrote: string
  wiped: string
  moved: string

tool attack:
  command: `S="$PROJECT_DIR/STORE"; n=$(ls -A "$S" | wc -l); for f in $(find "$S" -name report.txt 2>/dev/null); do printf forged > "$f"; done; echo forged > "$S/planted" 2>/dev/null && w=yes || w=no; rm -rf "$S"/* 2>/dev/null; [ -e "$S/planted" ] && x=no || x=tried; m=no; d="$S"; while [ "$d" != "$PROJECT_DIR" ]; do mv "$d" "$PROJECT_DIR/moved-$(basename "$d")" 2>/dev/null && m="$d"; d=$(dirname "$d"); done; mkdir -p "$S" 2>/dev/null; printf '{"entries": %s, "wrote": "%s", "wiped": "%s", "moved": "%s"}' "$n" "$w" "$x" "$m"`
  output: seen

workflow attacker:
  sandbox:
    image: "IMAGE"
    host_state: none
  entry: attack
  attack -> done
"#;

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Run with the store at `store` (None: the default `.iterion` of the cwd).
fn run_with_store(
    sb: &Sandbox,
    store: Option<&Path>,
    file: &Path,
    args: &[&str],
) -> std::process::Output {
    let file = file.to_string_lossy().into_owned();
    let mut cmd = sb.command(&[]);
    cmd.arg("run").arg(&file).arg("--json").args(args);
    match store {
        Some(s) => cmd.env("ITERION_STORE", s),
        None => cmd.env_remove("ITERION_STORE"),
    };
    cmd.output().expect("spawn iterion")
}

fn iterion_with_store(sb: &Sandbox, store: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut cmd = sb.command(args);
    match store {
        Some(s) => cmd.env("ITERION_STORE", s),
        None => cmd.env_remove("ITERION_STORE"),
    };
    cmd.output().expect("spawn iterion")
}

/// Item 3 on both engines, for the default store (`.iterion` in the
/// workspace) and for a store nested deeper in it: a node of another run
/// sees an empty read-only directory where the store is, cannot rewrite a
/// stored report, wipe the store, or move it (or its parent) aside; the
/// first run's report is served intact; the store is 0700 with a 0600
/// database. A file rewritten behind the store's back is refused by
/// `files --get` (typed, exit 1, no output).
#[test]
fn the_run_store_is_out_of_the_sandboxs_reach() {
    for engine in Engine::ALL {
        for nested in [false, true] {
            let sb = Sandbox::new(engine);
            let ws = sb.workspace();
            let (store_rel, store) = if nested {
                ("a/b/store", Some(ws.join("a/b/store")))
            } else {
                (".iterion", None)
            };
            let store_dir = ws.join(store_rel);
            let report = sb.write("report.iter", &REPORT_WORKFLOW.replace("IMAGE", &busybox()));
            let attack = sb.write(
                "attack.iter",
                &ATTACK_WORKFLOW
                    .replace("IMAGE", &busybox())
                    .replace("STORE", store_rel),
            );
            let first = crate::support::parse_run_output(&run_with_store(
                &sb,
                store.as_deref(),
                &report,
                &[],
            ));
            assert_eq!(first.status(), "finished", "{engine:?}: {}", first.stderr);
            let second = crate::support::parse_run_output(&run_with_store(
                &sb,
                store.as_deref(),
                &attack,
                &[],
            ));
            assert_eq!(second.status(), "finished", "{engine:?}: {}", second.stderr);
            let events = iterion_with_store(
                &sb,
                store.as_deref(),
                &["events", &second.run_id(), "--json"],
            );
            let events: Vec<Value> = String::from_utf8_lossy(&events.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let seen = &of_type(&events, "node_finished")[0]["data"]["output"];
            assert_eq!(
                seen,
                &serde_json::json!({"entries": 0, "wrote": "no", "wiped": "tried", "moved": "no"}),
                "{engine:?} nested={nested}: the sandbox reached the store"
            );
            // The store is whole: both runs listed, the report intact.
            let runs = iterion_with_store(&sb, store.as_deref(), &["runs", "--json"]);
            let listed = String::from_utf8_lossy(&runs.stdout).into_owned();
            assert!(
                listed.contains(&first.run_id()) && listed.contains(&second.run_id()),
                "{listed}"
            );
            let got = iterion_with_store(
                &sb,
                store.as_deref(),
                &["files", &first.run_id(), "--get", "report.txt"],
            );
            assert!(
                got.status.success(),
                "{}",
                String::from_utf8_lossy(&got.stderr)
            );
            assert_eq!(
                got.stdout, b"the genuine report",
                "{engine:?} nested={nested}"
            );
            // No rename succeeded ("moved": "no" above; busybox `mv` may
            // leave an empty copy behind when the rename is refused), and
            // the store is still where iterion looks for it.
            assert!(store_dir.join("iterion.db").is_file(), "{engine:?}");
            // Private on the host.
            assert_eq!(mode_of(&store_dir), 0o700, "{engine:?}");
            assert_eq!(mode_of(&store_dir.join("iterion.db")), 0o600, "{engine:?}");
            let stored = store_dir.join(format!("runs/{}/files/report.txt", first.run_id()));
            assert_eq!(mode_of(&stored), 0o600, "{engine:?}");
            // A forgery that reaches the bytes anyway is refused by --get.
            std::fs::write(&stored, "a forged report").expect("forge");
            let out_file = sb.dir.path().join("out.txt");
            let got = iterion_with_store(
                &sb,
                store.as_deref(),
                &[
                    "files",
                    &first.run_id(),
                    "--get",
                    "report.txt",
                    "-o",
                    &out_file.to_string_lossy(),
                ],
            );
            assert_eq!(got.status.code(), Some(1), "{engine:?}");
            assert!(
                String::from_utf8_lossy(&got.stderr).contains("STORE_FILE_TAMPERED"),
                "{}",
                String::from_utf8_lossy(&got.stderr)
            );
            assert!(!out_file.exists(), "{engine:?}: a forged file was written");
            let got = iterion_with_store(
                &sb,
                store.as_deref(),
                &["files", &first.run_id(), "--get", "report.txt"],
            );
            assert_eq!(got.status.code(), Some(1));
            assert!(got.stdout.is_empty(), "{engine:?}: forged bytes on stdout");
        }
    }
}

// ---- item 4: no host-root artefacts on host binds ------------------------------

/// The reporter's attack in the workspace and in the run-files dir (setuid
/// and setgid copies of a binary, a block and a char device, a chown to
/// root), then the benign twin (a tool writes a file in each), then a pause
/// during which the test looks at the run-files dir on the host.
const ARTEFACT_WORKFLOW: &str = r#"tool attack:
  command: `for d in "$PROJECT_DIR" "$ITERION_ARTIFACT_FILES_DIR"; do cp /bin/busybox "$d/suid" && chmod 4755 "$d/suid"; cp /bin/busybox "$d/sgid" && chmod 2755 "$d/sgid"; chown 0:0 "$d/suid"; mknod "$d/blk" b 8 0; mknod "$d/chr" c 1 3; done 2>/dev/null; echo '{}'`

tool benign:
  command: `printf 'edited by the tool' > "$PROJECT_DIR/out.txt"; printf 'a report' > "$ITERION_ARTIFACT_FILES_DIR/report.txt"; echo '{}'`

tool hold:
  command: `touch "$ITERION_ARTIFACT_FILES_DIR/holding"; sleep 8; echo '{}'`

workflow artefacts:
  sandbox:
    image: "IMAGE"
    host_state: none
  entry: attack
  attack -> benign
  benign -> hold
  hold -> done
"#;

/// A sandbox whose iterion keeps its per-run host dirs under the test's
/// own temp dir, where the test can look at them during the run.
fn private_tmp_sandbox(engine: Engine) -> Sandbox {
    let mut sb = Sandbox::new(engine);
    let tmp = sb.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    sb.env
        .push(("TMPDIR".to_owned(), tmp.display().to_string()));
    sb
}

/// Run `file` and, once a node marks the run-files dir `holding`, `look`
/// at that dir on the host (during the run); the run's result and what
/// `look` saw (a failing assertion when it never held).
fn run_watching_run_files<T>(
    sb: &Sandbox,
    file: &Path,
    look: impl Fn(&Path) -> T,
) -> (RunResult, T) {
    let child = sb
        .command(&["run", &file.to_string_lossy(), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn iterion");
    let sandboxes = sb.dir.path().join("tmp/iterion/sandboxes");
    let mut seen = None;
    for _ in 0..600 {
        let holding = std::fs::read_dir(&sandboxes)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("artifact-files"))
            .find(|d| d.join("holding").exists());
        if let Some(dir) = holding {
            seen = Some(look(&dir));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("wait");
    let r = crate::support::parse_run_output(&out);
    let seen = seen.unwrap_or_else(|| panic!("the run-files dir never held: {}", r.stderr));
    (r, seen)
}

/// What a host-side look at `dir` found wrong: a setuid/setgid file owned
/// by root (user or group), or a device node.
fn host_root_artefacts(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = entry.metadata().expect("stat");
        let kind = meta.file_type();
        let name = entry.path().display().to_string();
        if kind.is_block_device() || kind.is_char_device() {
            bad.push(format!("{name}: device node"));
        }
        if meta.mode() & 0o4000 != 0 && meta.uid() == 0 {
            bad.push(format!("{name}: setuid root"));
        }
        if meta.mode() & 0o2000 != 0 && meta.gid() == 0 {
            bad.push(format!("{name}: setgid root"));
        }
        if meta.uid() == 0 && name.ends_with("suid") {
            bad.push(format!("{name}: chowned to root"));
        }
    }
    bad
}

fn owner_of(p: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.uid(), m.gid()))
}

/// Item 4 on both engines, iterion running as root in a checkout owned by
/// a user (uid 4242, `sudo iterion run`): the sandbox runs as that user —
/// the attack leaves at most files owned by 4242 (setuid to the checkout's
/// owner, never to root) and no device node, in the workspace or in the
/// run-files dir *during* the run; the benign files are the user's and are
/// drained. `doctor` reports the posture. (Root's own checkout:
/// `root_in_its_own_checkout_leaves_no_setuid_or_device_file`.)
#[test]
fn no_host_root_setuid_or_device_files_on_host_binds() {
    for engine in Engine::ALL {
        {
            let owner = (4242u32, 4242u32);
            let sb = private_tmp_sandbox(engine);
            let ws = sb.workspace();
            let file = sb.write(
                "artefacts.iter",
                &ARTEFACT_WORKFLOW.replace("IMAGE", &busybox()),
            );
            std::os::unix::fs::chown(&ws, Some(owner.0), Some(owner.1)).expect("chown ws");
            let expected = owner;
            // During the run: the run-files dir on the host, once the pause
            // began. The run's host dir is private to iterion's user while
            // the sandbox (another uid) still writes its run files.
            let (r, seen_during) = run_watching_run_files(&sb, &file, |dir| {
                (
                    host_root_artefacts(dir),
                    owner_of(&dir.join("suid")),
                    dir.parent().map(mode_of),
                )
            });
            assert_eq!(r.status(), "finished", "{engine:?} {owner:?}: {}", r.stderr);
            let (bad, suid_owner, run_dir_mode) = seen_during;
            assert_eq!(run_dir_mode, Some(0o700), "{engine:?} {owner:?}");
            assert!(
                bad.is_empty(),
                "{engine:?} {owner:?}: run-files dir during the run: {bad:?}"
            );
            // The attack ran: its copy exists, owned by the sandbox's identity.
            assert_eq!(suid_owner, Some(expected), "{engine:?} {owner:?}");
            let bad = host_root_artefacts(&ws);
            assert!(bad.is_empty(), "{engine:?} {owner:?}: workspace: {bad:?}");
            let events = sb.events(&r.run_id());
            let remap = of_type(&events, "sandbox_user_remap");
            assert_eq!(remap.len(), 1, "{engine:?}: {events:#?}");
            assert_eq!(remap[0]["data"]["uid"], expected.0, "{engine:?}");
            // The benign twin: the run file is drained; in a user's checkout
            // the tool's file is the user's (they can edit and delete it).
            let files = sb.files(&r.run_id());
            assert!(
                files["files"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f["path"] == "report.txt")),
                "{engine:?} {owner:?}: {files}"
            );
            assert_eq!(owner_of(&ws.join("out.txt")), Some(expected), "{engine:?}");
            assert_eq!(owner_of(&ws.join("suid")), Some(expected), "{engine:?}");
            assert!(!ws.join("blk").exists() && !ws.join("chr").exists());
            // Doctor reports the posture it would apply here.
            let doc = sb.iterion(&["sandbox", "doctor", "--json"]);
            let doc: Value = serde_json::from_slice(&doc.stdout).expect("doctor json");
            let posture = &doc["host_identity"];
            assert_eq!(posture["uid_mapping"], "identity", "{doc:#}");
            assert_eq!(
                posture["sandbox_user"],
                format!("{}:{}", expected.0, expected.1),
                "{engine:?} {owner:?}: {doc:#}"
            );
            assert_eq!(posture["workspace_writable"], true, "{doc:#}");
            assert_eq!(posture["guard"], "non_root_user", "{doc:#}");
        }
    }
}

/// Item 4: a workflow naming root is refused while it keeps a writable
/// host bind into a checkout that is not root's (here a user's, iterion
/// running as root); the same name with `ITERION_SANDBOX_DOCKER_BINDS=none`
/// (no host bind) runs as root, and so does it in root's own checkout,
/// under the seccomp guard.
#[test]
fn a_sandbox_naming_root_is_refused_with_a_writable_host_bind() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        sb.own_workspace(4242, 4242);
        for user in ["0", "root", "0:0"] {
            let file = sb.write(
                "root.iter",
                &format!(
                    "tool t:\n  command: `id -u; echo '{{}}'`\n\nworkflow w:\n  sandbox:\n    image: \"{}\"\n    host_state: none\n    user: \"{user}\"\n  entry: t\n  t -> done\n",
                    busybox()
                ),
            );
            let r = sb.run(&file, &[]);
            assert_eq!(
                r.failure_code(),
                Some("SANDBOX_SPEC_REFUSED"),
                "{engine:?} {user}: {}",
                r.stderr
            );
            assert!(!container_exists(engine, &r.run_id()), "{engine:?}");
            let bindless = Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
            let file = bindless.write("root.iter", &std::fs::read_to_string(&file).expect("wf"));
            let r = bindless.run(&file, &[]);
            assert_eq!(
                r.status(),
                "finished",
                "{engine:?} {user} bindless: {}",
                r.stderr
            );
            let roots = Sandbox::new(engine);
            let file = roots.write("root.iter", &std::fs::read_to_string(&file).expect("wf"));
            let r = roots.run(&file, &[]);
            assert_eq!(
                r.status(),
                "finished",
                "{engine:?} {user} in root's checkout: {}",
                r.stderr
            );
            let events = roots.events(&r.run_id());
            let started = &of_type(&events, "sandbox_started")[0]["data"];
            assert_eq!(
                started["limits"]["host_root_guard"], "root_seccomp",
                "{engine:?} {user}: {started}"
            );
        }
    }
}

/// Root's own checkout, attacked by root (the test process is root, its
/// tempdir root-owned): every way to leave a setuid/setgid file or a
/// device node — `chmod 4755`, `u+s`, `g+s`, `install -m 4755`, perl's
/// `sysopen(O_CREAT, 04755)`, `mknod` of a regular file with the bit, `cp
/// -p` and a `tar -p` extraction of the image's setuid `passwd`, `mknod b
/// 8 0` — fails inside, in the workspace and in the run-files dir; a
/// setuid file already in the checkout loses its bit when the sandbox
/// writes it (`FSETID` dropped). The benign twin: the same node writes,
/// chmods 0755, mkdirs and deletes; its run file is drained; the host
/// edits and deletes what it wrote. `sandbox_started` and `doctor` name
/// the guard.
const ROOT_GUARD_WORKFLOW: &str = r#"schema tried:
  results: string

tool attack:
  command: `res=""; try() { "$@" >/dev/null 2>&1; res="$res $?"; }; for d in "$PROJECT_DIR" "$ITERION_ARTIFACT_FILES_DIR"; do cp /bin/ls "$d/a"; try chmod 4755 "$d/a"; try chmod u+s "$d/a"; try chmod g+s "$d/a"; try install -m 4755 /bin/ls "$d/b"; try perl -MFcntl -e 'sysopen(my $f, $ARGV[0], O_CREAT|O_WRONLY, 04755) or exit 1' "$d/c"; try perl -e 'exit 0'; try mknod -m 4755 "$d/d" p; try cp -p /usr/bin/passwd "$d/e"; mkdir -p "$d/t"; try sh -c "tar -C / -cf - usr/bin/passwd | tar -C '$d/t' -xpf -"; try mknod "$d/blk" b 8 0; try mknod "$d/chr" c 1 3; done; printf '%s' "$res" > "$ITERION_ARTIFACT_FILES_DIR/results.txt"; printf '{"results":"%s"}' "$res"`
  output: tried

tool benign:
  command: `set -e; printf 'edited by the tool' > "$PROJECT_DIR/out.txt"; chmod 0755 "$PROJECT_DIR/out.txt"; mkdir -p "$PROJECT_DIR/made/deeper"; printf x > "$PROJECT_DIR/gone.txt"; rm "$PROJECT_DIR/gone.txt"; printf more >> "$PROJECT_DIR/old-suid"; printf 'a report' > "$ITERION_ARTIFACT_FILES_DIR/report.txt"; echo '{}'`

tool hold:
  command: `touch "$ITERION_ARTIFACT_FILES_DIR/holding"; sleep 6; echo '{}'`

workflow guard:
  sandbox:
    image: "IMAGE"
    host_state: none
  entry: attack
  attack -> benign
  benign -> hold
  hold -> done
"#;

/// Every setuid/setgid file and device node under `dir`, at any depth.
fn setid_or_device(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut bad = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return bad;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let kind = meta.file_type();
        let name = entry.path().display().to_string();
        if kind.is_block_device() || kind.is_char_device() {
            bad.push(format!("{name}: device node"));
        }
        if !kind.is_dir() && meta.mode() & 0o6000 != 0 {
            bad.push(format!("{name}: mode {:o}", meta.mode()));
        }
        if kind.is_dir() {
            bad.extend(setid_or_device(&entry.path()));
        }
    }
    bad
}

#[test]
fn root_in_its_own_checkout_leaves_no_setuid_or_device_file() {
    use std::os::unix::fs::PermissionsExt;
    for engine in Engine::ALL {
        let sb = private_tmp_sandbox(engine);
        let ws = sb.workspace();
        assert_eq!(owner_of(&ws), Some((0, 0)), "the test runs as root");
        // A setuid file the host already had in its checkout.
        let old = ws.join("old-suid");
        std::fs::write(&old, b"#!/bin/sh\n").expect("old");
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let file = sb.write(
            "guard.iter",
            &ROOT_GUARD_WORKFLOW.replace("IMAGE", &crate::support::slim()),
        );
        let (r, seen_during) = run_watching_run_files(&sb, &file, |dir| {
            (setid_or_device(dir), dir.join("a").exists())
        });
        assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
        let (bad, attacked) = seen_during;
        assert!(
            attacked,
            "{engine:?}: the attack did not run in the run-files dir"
        );
        assert!(
            bad.is_empty(),
            "{engine:?}: run-files dir during the run: {bad:?}"
        );
        let events = sb.events(&r.run_id());
        // Each attempt failed inside: 11 per directory, none exited 0.
        let results = of_type(&events, "node_finished")[0]["data"]["output"]["results"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let codes: Vec<&str> = results.split_whitespace().collect();
        assert_eq!(codes.len(), 22, "{engine:?}: {results:?}");
        for (i, code) in codes.iter().enumerate() {
            if i % 11 == 5 {
                // The control: perl runs at all (its refusal is the filter's).
                assert_eq!(*code, "0", "{engine:?}: {results:?}");
                continue;
            }
            assert_ne!(*code, "0", "{engine:?}: attempt {i} succeeded: {results:?}");
            assert_ne!(
                *code, "127",
                "{engine:?}: attempt {i} found no tool: {results:?}"
            );
        }
        // On the host: nothing setuid/setgid or device in the checkout but
        // what the host put there, and that lost its bit when written.
        let bad = setid_or_device(&ws);
        assert!(bad.is_empty(), "{engine:?}: workspace: {bad:?}");
        assert_eq!(
            std::fs::read_to_string(&old).expect("old"),
            "#!/bin/sh\nmore",
            "{engine:?}: the sandbox wrote the old setuid file"
        );
        // The benign twin, and the host's own edits afterwards.
        assert_eq!(owner_of(&ws.join("out.txt")), Some((0, 0)), "{engine:?}");
        assert_eq!(mode_of(&ws.join("out.txt")), 0o755, "{engine:?}");
        assert!(ws.join("made/deeper").is_dir(), "{engine:?}");
        assert!(!ws.join("gone.txt").exists(), "{engine:?}");
        std::fs::write(ws.join("out.txt"), b"edited by the host").expect("host edits");
        std::fs::remove_dir_all(ws.join("made")).expect("host deletes");
        std::fs::remove_file(ws.join("out.txt")).expect("host deletes");
        let files = sb.files(&r.run_id());
        assert!(
            files["files"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["path"] == "report.txt")),
            "{engine:?}: {files}"
        );
        let started = &of_type(&events, "sandbox_started")[0]["data"];
        assert_eq!(
            started["limits"]["host_root_guard"], "root_seccomp",
            "{engine:?}: {started}"
        );
        assert!(
            of_type(&events, "sandbox_user_remap").is_empty(),
            "{engine:?}"
        );
        // Doctor reports the guard a run here gets.
        let doc = sb.iterion(&["sandbox", "doctor", "--json"]);
        let doc: Value = serde_json::from_slice(&doc.stdout).expect("doctor json");
        let posture = &doc["host_identity"];
        assert_eq!(posture["guard"], "root_seccomp", "{engine:?}: {doc:#}");
        assert!(
            posture["protection"].as_str().is_some_and(
                |p| p.starts_with("root, setuid/setgid and device creation blocked by seccomp")
            ),
            "{engine:?}: {doc:#}"
        );
        assert_eq!(posture["workspace_writable"], true, "{engine:?}: {doc:#}");
    }
}

/// Issue 31 item 9: the seccomp guard is verified before the first command
/// by iterion's own static binary, bound read-only into the sandbox
/// (`iterion __guard-probe`), so an image without `chmod` (what the old
/// in-image probe needed; it refused such an image as unverifiable) runs
/// guarded on both engines — and is verified: a setuid install still fails
/// in it, and `sandbox_started` names the guard.
#[test]
fn the_guard_is_verified_in_an_image_without_chmod() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        sb.write(
            "Dockerfile",
            &format!("FROM {}\nRUN rm /usr/bin/chmod\n", crate::support::slim()),
        );
        let file = sb.write(
            "nochmod.iter",
            r#"schema seen:
  chmod: string
  setuid: string

tool t:
  command: `touch "$PROJECT_DIR/ran"; if command -v chmod >/dev/null 2>&1; then c=yes; else c=no; fi; if install -m 4755 /bin/ls "$PROJECT_DIR/b" 2>/dev/null; then u=set; else u=refused; fi; printf '{"chmod":"%s","setuid":"%s"}' "$c" "$u"`
  output: seen

workflow w:
  sandbox:
    build:
      dockerfile: "Dockerfile"
    host_state: none
  entry: t
  t -> done
"#,
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let seen = &of_type(&events, "node_finished")[0]["data"]["output"];
        assert_eq!(
            seen["chmod"], "no",
            "{engine:?}: the image has chmod: {seen}"
        );
        assert_eq!(seen["setuid"], "refused", "{engine:?}: {seen}");
        assert!(sb.workspace().join("ran").exists(), "{engine:?}");
        let b = sb.workspace().join("b");
        assert!(
            !b.exists() || mode_of(&b) & 0o6000 == 0,
            "{engine:?}: setuid bit on the host"
        );
        let started = &of_type(&events, "sandbox_started")[0]["data"];
        assert_eq!(
            started["limits"]["host_root_guard"], "root_seccomp",
            "{engine:?}: {started}"
        );
        assert!(!container_exists(engine, &r.run_id()), "{engine:?}");
    }
}

/// Item 4: a user name is resolved in the image the sandbox runs — a name
/// that is root there is refused, another runs as its own uid and group.
#[test]
fn user_names_are_resolved_in_the_image() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        sb.write(
            "Dockerfile",
            &format!(
                "FROM {}\nRUN mkdir -p /etc && echo 'admin:x:0:0::/:/bin/sh' > /etc/passwd && echo 'dev:x:4343:4344::/:/bin/sh' >> /etc/passwd && echo 'dev:x:4344:' > /etc/group\n",
                busybox()
            ),
        );
        sb.own_workspace(4242, 4242);
        let wf = |user: &str| {
            format!(
                "schema ids:\n  ids: string\n\ntool t:\n  command: `printf '{{\"ids\": \"%s\"}}' \"$(id -u):$(id -g):$(id -G)\"`\n  output: ids\n\nworkflow w:\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n    host_state: none\n    user: \"{user}\"\n  entry: t\n  t -> done\n"
            )
        };
        let admin = sb.write("admin.iter", &wf("admin"));
        let r = sb.run(&admin, &[]);
        assert_eq!(
            r.failure_code(),
            Some("SANDBOX_SPEC_REFUSED"),
            "{engine:?}: {}",
            r.stderr
        );
        assert!(run_error(&sb, &r).contains("is 0:0 in image"), "{engine:?}");
        assert!(!container_exists(engine, &r.run_id()));
        let dev = sb.write("dev.iter", &wf("dev"));
        let r = sb.run(&dev, &[]);
        assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let out = &of_type(&events, "node_finished")[0]["data"]["output"];
        assert_eq!(
            out["ids"], "4343:4344:4344",
            "{engine:?}: no supplementary group from the image"
        );
    }
}

/// A run cancelled (SIGINT) while its sandbox is still starting — here in
/// a slow post_create, after the container exists and its identity was
/// checked — leaves no container behind: the start is let finish and its
/// sandbox removed.
#[test]
fn a_run_cancelled_while_its_sandbox_starts_leaves_nothing() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let name = format!("slowstart_{}_{}", engine.driver(), std::process::id());
        let file = sb.write(
            "slow.iter",
            &format!(
                "tool t:\n  command: `echo '{{}}'`\n\nworkflow {name}:\n  sandbox:\n    image: \"{}\"\n    host_state: none\n    post_create: \"sleep 6\"\n  entry: t\n  t -> done\n",
                busybox()
            ),
        );
        let child = sb
            .command(&["run", &file.to_string_lossy(), "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn iterion");
        let containers = || {
            let out = std::process::Command::new("docker")
                .args(["-H", &engine.host(), "ps", "-aq", "--filter"])
                .arg(format!("label=iterion.io/run-name={name}"))
                .output()
                .expect("docker ps");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let mut seen = false;
        for _ in 0..300 {
            if !containers().is_empty() {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(seen, "{engine:?}: the container never appeared");
        let st = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
        let out = child.wait_with_output().expect("wait");
        assert_eq!(
            out.status.code(),
            Some(1),
            "{engine:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            containers(),
            "",
            "{engine:?}: the container was left behind"
        );
    }
}
