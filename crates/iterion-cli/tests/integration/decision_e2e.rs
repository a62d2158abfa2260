//! Issue 16 item 1, done when: `doctor --strict` and `iterion run` cannot
//! disagree because they share the decision. The precedence matrix — the
//! four tiers of docs/sandbox.md's "Which sandbox a run gets" (`--sandbox`,
//! `ITERION_SANDBOX_OVERRIDE`, the workflow block with or without an image,
//! `ITERION_SANDBOX_DEFAULT`, the built-in `auto`) × an engine reachable or
//! not × `--trust` — goes through `doctor --strict --json` and a real
//! `iterion run` of the same workflow in the same directory, and the mode,
//! source, driver, verdict and code the doctor reports are what the run
//! did (dockerd for the whole matrix, Podman for its reachable, trusted
//! half).
//!
//! Does not prove: the cloud host kind (no cluster here, see cloud_e2e).

use std::sync::Mutex;

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, container_exists, of_type};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier1 {
    Unset,
    FlagNone,
    FlagAuto,
    OverrideAuto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Absent,
    Image,
    AutoNoImage,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    engine: Engine,
    tier: Tier1,
    block: Block,
    default: Option<&'static str>,
    up: bool,
    untrusted: bool,
}

fn workflow(block: Block) -> String {
    let sandbox = match block {
        Block::Absent => String::new(),
        Block::Image => format!("  sandbox:\n    image: \"{}\"\n", busybox()),
        Block::AutoNoImage => "  sandbox: auto\n".to_owned(),
    };
    format!(
        "tool probe:\n  command: `echo '{{}}'`\n\nworkflow matrix:\n  entry: probe\n{sandbox}  probe -> done\n"
    )
}

/// What the doctor said.
#[derive(Debug)]
struct Said {
    mode: String,
    source: String,
    driver: Value,
    kind: String,
    code: Value,
    exit: Option<i32>,
    available: Value,
}

/// What the run did, as its record, events and log show it.
#[derive(Debug)]
struct Did {
    kind: &'static str,
    code: Value,
    driver: Value,
    /// `(mode, source)` where an event or the log names them.
    named: Option<(String, String)>,
    /// The tier label the admission reason names.
    admission_source: String,
    exit: Option<i32>,
    status: String,
    failure_code: Value,
}

fn sandbox_for(case: &Case) -> Sandbox {
    let mut sb = Sandbox::new(case.engine);
    if !case.up {
        // An engine nobody listens on (the standard sockets do not exist
        // here: the doctor's `available_drivers` is checked empty below).
        let missing = sb.dir.path().join("no-engine.sock");
        sb.env.push((
            "DOCKER_HOST".to_owned(),
            format!("unix://{}", missing.display()),
        ));
    }
    if case.tier == Tier1::OverrideAuto {
        sb.env
            .push(("ITERION_SANDBOX_OVERRIDE".to_owned(), "auto".to_owned()));
    }
    if let Some(d) = case.default {
        sb.env
            .push(("ITERION_SANDBOX_DEFAULT".to_owned(), d.to_owned()));
    }
    sb
}

fn flags(case: &Case) -> Vec<&'static str> {
    let mut f = Vec::new();
    match case.tier {
        Tier1::FlagNone => f.extend(["--sandbox", "none"]),
        Tier1::FlagAuto => f.extend(["--sandbox", "auto"]),
        Tier1::Unset | Tier1::OverrideAuto => {}
    }
    if case.untrusted {
        f.extend(["--trust", "untrusted"]);
    }
    f
}

fn doctor(sb: &Sandbox, file: &str, case: &Case) -> Said {
    let mut args = vec!["sandbox", "doctor", "--strict", file, "--json"];
    args.extend(flags(case));
    let out = sb.iterion(&args);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{case:?}: doctor json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Said {
        mode: doc["mode"].as_str().unwrap_or_default().to_owned(),
        source: doc["source"].as_str().unwrap_or_default().to_owned(),
        driver: doc["driver"].clone(),
        kind: doc["verdict"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        code: doc["verdict"]["code"].clone(),
        exit: out.status.code(),
        available: doc["available_drivers"].clone(),
    }
}

/// The tier label of an admission reason: `… (LABEL)` when admitted,
/// `…; decided by LABEL` when denied (the override says its own name).
fn admission_label(reason: &str) -> String {
    if let Some((_, label)) = reason.split_once("; decided by ") {
        return label.to_owned();
    }
    if reason.contains("ITERION_SANDBOX_OVERRIDE is set") {
        return "ITERION_SANDBOX_OVERRIDE".to_owned();
    }
    for lead in ["will run in a container (", "not required ("] {
        if let Some((_, rest)) = reason.split_once(lead) {
            return rest.strip_suffix(')').unwrap_or(rest).to_owned();
        }
    }
    panic!("an admission reason without its tier: {reason}")
}

fn run(sb: &Sandbox, file: &std::path::Path, case: &Case) -> Did {
    let r = sb.run(file, &flags(case));
    let run_id = r.run_id();
    let events = sb.events(&run_id);
    let admission = &of_type(&events, "run_admission")[0]["data"];
    let admission_source = admission_label(admission["reason"].as_str().unwrap_or_default());
    let started = of_type(&events, "sandbox_started");
    let skipped = of_type(&events, "sandbox_skipped");
    let named = |e: &Value| {
        Some((
            e["data"]["mode"].as_str().unwrap_or_default().to_owned(),
            e["data"]["source"].as_str().unwrap_or_default().to_owned(),
        ))
    };
    let (kind, code, driver, named) = if admission["decision"] == "denied" {
        ("denied", admission["code"].clone(), Value::Null, None)
    } else if let Some(s) = started.first() {
        (
            "sandbox",
            Value::Null,
            s["data"]["driver"].clone(),
            named(s),
        )
    } else if let Some(s) = skipped.first() {
        if s["data"]["refused"] == true {
            (
                "refused",
                s["data"]["error_code"].clone(),
                Value::Null,
                named(s),
            )
        } else {
            ("degraded", Value::Null, Value::Null, named(s))
        }
    } else if r.status() == "failed" {
        (
            "refused",
            Value::String(r.failure_code().unwrap_or_default().to_owned()),
            Value::Null,
            None,
        )
    } else {
        // On the host: the log says which mode and which tier.
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        let line = logs
            .lines()
            .find_map(|l| l.split_once("running on the host, unsandboxed: sandbox "))
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_else(|| panic!("{case:?}: no host line in {logs}"));
        let (mode, source) = line
            .split_once(" (")
            .unwrap_or_else(|| panic!("{case:?}: {line}"));
        let source = source.strip_suffix(')').unwrap_or(source);
        let mode = if mode == "unset" { "" } else { mode };
        (
            "host",
            Value::Null,
            Value::String("noop".into()),
            Some((mode.to_owned(), source.to_owned())),
        )
    };
    assert!(
        !container_exists(case.engine, &run_id),
        "{case:?}: a container was left"
    );
    Did {
        kind,
        code,
        driver,
        named,
        admission_source,
        exit: r.code,
        status: r.status().to_owned(),
        failure_code: r.doc["failure_code"].clone(),
    }
}

/// Doctor and run agree on one case; the verdict kind it reached.
fn agree(case: Case) -> String {
    let sb = sandbox_for(&case);
    let file = sb.write("matrix.iter", &workflow(case.block));
    let path = file.to_string_lossy().into_owned();
    let said = doctor(&sb, &path, &case);
    let did = run(&sb, &file, &case);
    let ctx = format!("{case:?}\n doctor: {said:?}\n run: {did:?}");
    if !case.up {
        assert_eq!(said.available, serde_json::json!([]), "{ctx}");
    }
    assert_eq!(said.kind, did.kind, "verdict: {ctx}");
    assert_eq!(said.code, did.code, "code: {ctx}");
    // The tier that spoke, as admission names it, is the doctor's source
    // (the doctor's adds the `auto` suffix once the spec is built).
    assert!(
        said.source.starts_with(&did.admission_source),
        "source: {ctx}"
    );
    if let Some((mode, source)) = &did.named {
        assert_eq!(&said.mode, mode, "mode: {ctx}");
        assert_eq!(&said.source, source, "source: {ctx}");
    }
    match did.kind {
        "sandbox" | "host" => assert_eq!(said.driver, did.driver, "driver: {ctx}"),
        // No driver ran: the doctor names none for an active mode.
        _ if said.mode == "auto" || said.mode == "inline" => {
            assert_eq!(said.driver, Value::Null, "driver: {ctx}");
        }
        _ => {}
    }
    // Exit codes: a refused or denied run fails, and so does its doctor.
    match did.kind {
        "denied" => {
            assert_eq!(did.failure_code, "LAUNCH_FAILED", "{ctx}");
            assert_eq!((did.exit, said.exit), (Some(1), Some(1)), "{ctx}");
        }
        "refused" => assert_eq!((did.exit, said.exit), (Some(1), Some(1)), "{ctx}"),
        _ => {
            assert_eq!(did.status, "finished", "{ctx}");
            assert_eq!(did.exit, Some(0), "{ctx}");
        }
    }
    did.kind.to_owned()
}

fn matrix(engine: Engine, ups: &[bool], trusts: &[bool]) -> Vec<Case> {
    let mut cases = Vec::new();
    for tier in [
        Tier1::Unset,
        Tier1::FlagNone,
        Tier1::FlagAuto,
        Tier1::OverrideAuto,
    ] {
        for block in [Block::Absent, Block::Image, Block::AutoNoImage] {
            for default in [None, Some("none"), Some("auto")] {
                for &up in ups {
                    for &untrusted in trusts {
                        cases.push(Case {
                            engine,
                            tier,
                            block,
                            default,
                            up,
                            untrusted,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// Run the cases on three threads (each case has its own workspace and
/// store); return how many reached each verdict.
fn run_all(cases: Vec<Case>) -> std::collections::BTreeMap<String, usize> {
    let queue = Mutex::new(cases);
    let seen = Mutex::new(std::collections::BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                loop {
                    let Some(case) = queue.lock().unwrap().pop() else {
                        return;
                    };
                    let kind = agree(case);
                    *seen.lock().unwrap().entry(kind).or_insert(0) += 1;
                }
            });
        }
    });
    seen.into_inner().unwrap()
}

#[test]
fn dockerd_doctor_and_run_share_the_decision_over_the_precedence_matrix() {
    let cases = matrix(Engine::Docker, &[true, false], &[false, true]);
    assert_eq!(cases.len(), 4 * 3 * 3 * 2 * 2);
    let seen = run_all(cases);
    // The matrix reaches every verdict the decision has.
    for kind in ["sandbox", "host", "degraded", "refused", "denied"] {
        assert!(seen.get(kind).is_some_and(|n| *n > 0), "{kind}: {seen:?}");
    }
}

#[test]
fn podman_doctor_and_run_share_the_decision_over_the_reachable_half() {
    let cases = matrix(Engine::Podman, &[true], &[false]);
    let seen = run_all(cases);
    for kind in ["sandbox", "host"] {
        assert!(seen.get(kind).is_some_and(|n| *n > 0), "{kind}: {seen:?}");
    }
}
