//! Attachments (issue 14 item 5) through the real `iterion run --attach`
//! on dockerd and Podman, bind and bindless (`ITERION_SANDBOX_DOCKER_BINDS=none`),
//! and on the host: the node reads the attached file at
//! `{{attachments.NAME}}` (inside the sandbox
//! `/run/iterion/attachments/NAME/FILE`, read-only on a bind, copied in
//! with `sandbox_attachments_copied` without one; on the host the run's
//! private copy); a resume re-provides it from the store in a fresh
//! sandbox; a required attachment whose stored bytes are gone is
//! `run_attachment_lost` and `ATTACHMENT_LOST`; the PostgreSQL store serves
//! the same; every bad input exits 2 with its code and records no run.
//! `--preset` applies a `presets:` entry under `--var`.

use std::path::Path;

use serde_json::Value;

use crate::support::{
    Engine, PgSchema, Sandbox, busybox, node_output, of_type, one, run_to_finish, runs,
};

const BODY: &str = "the spec's words";

fn workflow(sandboxed: bool, gated: bool) -> String {
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
            busybox()
        )
    } else {
        String::new()
    };
    let (entry, edges, human) = if gated {
        (
            "gate",
            "  gate -> work\n  work -> done\n",
            "schema ok:\n  go: bool\n\nhuman gate:\n  output: ok\n  instructions: \"go?\"\n\n",
        )
    } else {
        ("work", "  work -> done\n", "")
    };
    let src = r#"attachments:
  spec: file
    description: "what the node reads"
    required: true
  logo: image

schema out:
  said: string
  path: string
  mode: string
  writable: string
  size: string
  uid: string

HUMAN
tool work:
  command: `p={{attachments.spec}}; if (echo x >> "$p") 2>/dev/null; then w=yes; else w=no; fi; printf '{"said":"%s","path":"%s","mode":"%s","writable":"%s","size":"%s","uid":"%s"}' "$(head -c 16 "$p")" "$p" "$(stat -c %a "$p")" "$w" {{attachments.spec.size}} "$(id -u)"`
  output: out

workflow attach:
  entry: ENTRY
SANDBOX
EDGES"#;
    src.replace("HUMAN\n", human)
        .replace("ENTRY", entry)
        .replace("SANDBOX\n", &sandbox)
        .replace("EDGES", edges)
}

fn with_spec(sb: &Sandbox) -> String {
    let spec = sb.dir.path().join("spec.txt");
    std::fs::write(&spec, BODY).expect("spec");
    format!("spec={}", spec.display())
}

fn bindless(engine: Engine) -> Sandbox {
    Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none")
}

/// What every provided run shows: the bytes, the size, no loss.
fn read_back(events: &[Value]) -> &Value {
    let out = node_output(events, "work");
    assert_eq!(out["said"], &BODY[..16], "{out}");
    assert_eq!(out["size"], BODY.len().to_string());
    assert!(of_type(events, "run_attachment_lost").is_empty());
    out
}

#[test]
fn dockerd_bound_attachment_is_read_only_at_its_container_path() {
    bound(Engine::Docker);
}

#[test]
fn podman_bound_attachment_is_read_only_at_its_container_path() {
    bound(Engine::Podman);
}

fn bound(engine: Engine) {
    let sb = Sandbox::new(engine);
    let file = sb.write("w.iter", &workflow(true, false));
    let spec = with_spec(&sb);
    let (_, _, events) = run_to_finish(&sb, &file, &["--attach", &spec]);
    let out = read_back(&events);
    assert_eq!(out["path"], "/run/iterion/attachments/spec/spec.txt");
    assert_eq!(out["writable"], "no", "{engine:?}: the bind is read-only");
    assert!(of_type(&events, "sandbox_attachments_copied").is_empty());
    // The user's file is the user's: the run read a copy.
    assert_eq!(
        std::fs::read_to_string(sb.dir.path().join("spec.txt")).expect("spec"),
        BODY
    );
}

#[test]
fn dockerd_bindless_attachment_is_copied_in() {
    copied(Engine::Docker);
}

#[test]
fn podman_bindless_attachment_is_copied_in() {
    copied(Engine::Podman);
}

fn copied(engine: Engine) {
    let sb = bindless(engine);
    let file = sb.write("w.iter", &workflow(true, false));
    let spec = with_spec(&sb);
    let (_, _, events) = run_to_finish(&sb, &file, &["--attach", &spec]);
    let out = read_back(&events);
    assert_eq!(out["path"], "/run/iterion/attachments/spec/spec.txt");
    assert_eq!(out["mode"], "444", "{engine:?}: copied read-only by mode");
    let copied = one(&events, "sandbox_attachments_copied");
    assert_eq!(copied["data"]["driver"], engine.driver());
    assert_eq!(copied["data"]["count"], 1);
    assert_eq!(copied["data"]["bytes"], BODY.len());
    // The bind was planned, judged and dropped: the copy serves it.
    let dropped = one(&events, "sandbox_host_binds_dropped");
    assert!(
        dropped["data"]["dropped"]
            .as_array()
            .is_some_and(|d| d.iter().any(|b| b["target"] == "/run/iterion/attachments")),
        "{dropped}"
    );
}

/// A sandbox that runs as a non-root user reads the attachment too, bound
/// (and cannot write it) or copied (root-owned, `0444`).
#[test]
fn a_non_root_sandbox_user_reads_it_bound_or_copied() {
    for sb in [Sandbox::new(Engine::Docker), bindless(Engine::Podman)] {
        let wf = workflow(true, false).replace(
            "    host_state: none\n",
            "    host_state: none\n    user: \"1000:1000\"\n",
        );
        let file = sb.write("w.iter", &wf);
        let spec = with_spec(&sb);
        let (_, _, events) = run_to_finish(&sb, &file, &["--attach", &spec]);
        let out = read_back(&events);
        assert_eq!(out["uid"], "1000", "{:?}: {out}", sb.engine);
        if sb.env.is_empty() {
            // The bind is read-only whatever the process may do.
            assert_eq!(out["writable"], "no", "{:?}: {out}", sb.engine);
        } else {
            // A copy is read-only by mode only: a process that keeps
            // CAP_DAC_OVERRIDE (Podman leaves it to a non-root user here)
            // can write its own copy; the store keeps the original.
            assert_eq!(out["mode"], "444", "{:?}: {out}", sb.engine);
        }
    }
}

#[test]
fn host_run_reads_its_private_copy() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("w.iter", &workflow(false, false));
    let spec = with_spec(&sb);
    let (_, _, events) = run_to_finish(&sb, &file, &["--attach", &spec, "--sandbox", "none"]);
    let out = read_back(&events);
    let path = out["path"].as_str().expect("path");
    assert!(path.ends_with("/attachments/spec/spec.txt"), "{path}");
    assert!(
        !path.starts_with(&sb.dir.path().display().to_string()),
        "{path}"
    );
    assert!(
        !Path::new(path).exists(),
        "the private copy goes with the run"
    );
}

#[test]
fn dockerd_resume_provides_the_attachment_again() {
    resumed(Sandbox::new(Engine::Docker));
}

#[test]
fn podman_bindless_resume_provides_the_attachment_again() {
    resumed(bindless(Engine::Podman));
}

fn resumed(sb: Sandbox) {
    let file = sb.write("w.iter", &workflow(true, true));
    let spec = with_spec(&sb);
    let r = sb.run(&file, &["--attach", &spec, "--no-interactive"]);
    assert_eq!(r.status(), "paused_waiting_human", "{}", r.stderr);
    // The user's file is gone: the store holds the run's copy.
    std::fs::remove_file(sb.dir.path().join("spec.txt")).expect("rm");
    let run_id = r.run_id();
    let resumed = sb.resume(&run_id, &["--answer", "go=true"]);
    assert_eq!(
        (resumed.code, resumed.status()),
        (Some(0), "finished"),
        "{:?}: {}",
        sb.engine,
        resumed.stderr
    );
    read_back(&sb.events(&run_id));
}

#[test]
fn dockerd_lost_required_attachment_fails_the_run() {
    lost(Engine::Docker);
}

#[test]
fn podman_lost_required_attachment_fails_the_run() {
    lost(Engine::Podman);
}

fn lost(engine: Engine) {
    let sb = Sandbox::new(engine);
    let file = sb.write("w.iter", &workflow(true, true));
    let spec = with_spec(&sb);
    let r = sb.run(&file, &["--attach", &spec, "--no-interactive"]);
    assert_eq!(r.status(), "paused_waiting_human", "{}", r.stderr);
    let run_id = r.run_id();
    let stored = sb
        .store()
        .join("runs")
        .join(&run_id)
        .join("attachments")
        .join("spec");
    std::fs::remove_file(&stored).expect("the stored bytes");
    let resumed = sb.resume(&run_id, &["--answer", "go=true"]);
    assert_eq!(
        (resumed.code, resumed.status(), resumed.failure_code()),
        (Some(1), "failed", Some("ATTACHMENT_LOST")),
        "{engine:?}: {}",
        resumed.stderr
    );
    let events = sb.events(&run_id);
    let lost = one(&events, "run_attachment_lost");
    assert_eq!(lost["data"]["name"], "spec");
    assert_eq!(lost["data"]["required"], true);
    assert!(
        of_type(&events, "node_started")
            .iter()
            .all(|e| e["node_id"] != "work"),
        "no node ran without its attachment"
    );
}

#[test]
fn dockerd_postgres_store_serves_the_attachment() {
    let pg = PgSchema::new("attach");
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &pg.url());
    let file = sb.write("w.iter", &workflow(true, false));
    let spec = with_spec(&sb);
    let (_, _, events) = run_to_finish(&sb, &file, &["--attach", &spec]);
    assert_eq!(read_back(&events)["writable"], "no");
}

/// Each bad input: exit 2 naming its code, no run recorded.
#[test]
fn bad_attachments_exit_2_before_any_run() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("w.iter", &workflow(true, false));
    let spec = with_spec(&sb);
    let dir = sb.dir.path();
    std::os::unix::fs::symlink(dir.join("spec.txt"), dir.join("link.txt")).expect("link");
    std::fs::File::create(dir.join("huge.bin"))
        .and_then(|f| f.set_len(64 * 1024 * 1024 + 1))
        .expect("sparse");
    let at = |name: &str| format!("spec={}", dir.join(name).display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![], "ATTACHMENT_REQUIRED"),
        (vec![at("missing.txt")], "ATTACHMENT_NOT_FOUND"),
        (vec![at("link.txt")], "ATTACHMENT_IS_A_SYMLINK"),
        (
            vec![format!("spec={}", dir.display())],
            "ATTACHMENT_NOT_A_FILE",
        ),
        (vec!["spec=/dev/null".to_owned()], "ATTACHMENT_NOT_A_FILE"),
        (vec![at("huge.bin")], "ATTACHMENT_TOO_LARGE"),
        (vec![spec.clone(), spec.clone()], "ATTACHMENT_DUPLICATE"),
        (
            vec![
                spec.clone(),
                format!("nope={}", dir.join("spec.txt").display()),
            ],
            "ATTACHMENT_UNDECLARED",
        ),
        (vec!["spec".to_owned()], "ATTACHMENT_BAD_ARGUMENT"),
    ];
    for (attach, code) in cases {
        let mut args = Vec::new();
        for a in &attach {
            args.push("--attach");
            args.push(a.as_str());
        }
        let r = sb.run(&file, &args);
        assert_eq!(r.code, Some(2), "{attach:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(code),
            "{attach:?}: want {code}: {}",
            r.stderr
        );
    }
    assert!(runs(&sb).is_empty(), "a refused launch records no run");
}

#[test]
fn a_preset_applies_under_var_and_an_unknown_one_exits_2() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write(
        "p.iter",
        r#"vars:
  who: string = "world"
  n: int = 1

presets:
  loud:
    who: "WORLD"
    n: 3

schema out:
  said: string

tool hi:
  command: `printf '{"said":"%s %s"}' {{vars.who}} {{vars.n}}`
  output: out

workflow p:
  entry: hi
  hi -> done
"#,
    );
    let (_, _, events) = run_to_finish(&sb, &file, &["--sandbox", "none", "--preset", "loud"]);
    assert_eq!(node_output(&events, "hi")["said"], "WORLD 3");
    let (_, _, events) = run_to_finish(
        &sb,
        &file,
        &["--sandbox", "none", "--preset", "loud", "--var", "who=me"],
    );
    assert_eq!(node_output(&events, "hi")["said"], "me 3");
    let r = sb.run(&file, &["--sandbox", "none", "--preset", "quiet"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("available: loud"), "{}", r.stderr);
}
