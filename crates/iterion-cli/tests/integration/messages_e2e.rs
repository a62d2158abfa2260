//! Issue 32 item 4 through the real binary: the README's commands on
//! broken input print iterion's own messages with real line breaks, as
//! `iterion validate` does — an invalid workflow for `iterion run`, a bad
//! `ITERION_STORE` schema, `iterion events` of an unknown run — while text
//! a file supplied stays escaped (a forged line cannot appear). `sandbox
//! doctor`'s human view reads as rows, and `--log-level debug` shows the
//! sandbox decision's steps, the driver calls with their durations and
//! the egress proxy's verdicts.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support::{Engine, Sandbox, slim};

/// The workflow a new user gets wrong first: an entry that names no node.
const BAD: &str =
    "tool hello:\n  command: \"echo hi\"\n\nworkflow bad:\n  entry: helo\n  hello -> done\n";

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_laid_out(text: &str, what: &str) {
    assert!(
        !text.contains("\\n"),
        "{what}: a literal \\n instead of a line break:\n{text}"
    );
}

#[test]
fn run_prints_an_invalid_workflow_as_validate_does() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("bad.iter", BAD);
    let file = file.display().to_string();
    let validate = sb.iterion(&["validate", &file]);
    let shown = String::from_utf8_lossy(&validate.stdout).into_owned();
    let run = sb.iterion(&["run", &file]);
    let err = stderr_of(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_laid_out(&err, "iterion run bad.iter");
    // The same diagnostic lines validate prints, each on its own line.
    let diag: Vec<&str> = shown.lines().take_while(|l| !l.trim().is_empty()).collect();
    assert!(diag.len() >= 4, "validate's diagnostic: {shown}");
    for line in &diag {
        assert!(
            err.lines().any(|l| l == *line),
            "run lacks the line {line:?} of validate:\n{err}"
        );
    }
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.lines().any(|l| l.starts_with("error[")), "{err}");
    assert!(
        err.lines().any(|l| l.trim_start().starts_with("--> ")),
        "{err}"
    );
}

#[test]
fn what_a_file_supplied_stays_escaped() {
    let sb = Sandbox::new(Engine::Docker);
    // An ANSI sequence in the source line under the caret, and a message
    // quoting the file.
    let file = sb.write("bad.iter", &BAD.replace("helo", "helo # \u{1b}[2J"));
    let run = sb.iterion(&["run", &file.display().to_string()]);
    let err = stderr_of(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_laid_out(&err, "iterion run bad.iter");
    assert!(
        !err.contains('\u{1b}'),
        "an escape reached the terminal: {err:?}"
    );
}

#[test]
fn store_errors_put_their_hint_on_its_own_line() {
    let sb = Sandbox::new(Engine::Docker);
    let out = sb.iterion(&["events", "nope"]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_laid_out(&err, "iterion events nope");
    assert!(
        err.lines().any(|l| l.trim_start().starts_with("hint: ")),
        "{err}"
    );

    let out = sb
        .command(&["runs"])
        .env(
            "ITERION_STORE",
            "postgres://u:p@127.0.0.1:1/db?schema=Bad-Name",
        )
        .output()
        .expect("spawn");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_laid_out(&err, "a bad ITERION_STORE schema");
    assert!(err.contains("STORE_URL_INVALID_SCHEMA"), "{err}");
    assert!(err.lines().any(|l| l.starts_with("  hint: ")), "{err}");
    assert!(!err.contains("u:p@"), "never the URL's password: {err}");
}

#[test]
fn the_doctor_reads_as_rows() {
    let sb = Sandbox::new(Engine::Docker);
    let out = sb.iterion(&["sandbox", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        !text.contains('{'),
        "no JSON blob in the human view:\n{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    for section in ["capabilities:", "containment:"] {
        let at = lines
            .iter()
            .position(|l| *l == section)
            .unwrap_or_else(|| panic!("{section} on its own line:\n{text}"));
        let row = lines.get(at + 1).copied().unwrap_or_default();
        assert!(
            row.starts_with("  ") && row.split_whitespace().count() >= 2,
            "{row}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("egress_enforcement")
                && l.trim_end().ends_with("yes")),
        "{text}"
    );
    // --json keeps the objects.
    let out = sb.iterion(&["sandbox", "doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(doc["capabilities"].is_object() && doc["containment"].is_object());
}

#[test]
fn debug_log_shows_the_decision_the_driver_calls_and_the_proxy_verdicts() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write(
        "probe.iter",
        &format!(
            "tool probe:\n  command: \"curl -sS -m 5 http://denied.example.test/ >/dev/null 2>&1; echo '{{}}'\"\n\n\
             workflow probe:\n  entry: probe\n  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"allowed.example.test\"]\n  probe -> done\n",
            slim()
        ),
    );
    let out = sb.iterion(&["run", &file.display().to_string(), "--log-level", "debug"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    for step in [
        "sandbox decision: mode",
        "sandbox decision: driver selected",
        "sandbox decision: admission",
        "sandbox decision: verdict",
    ] {
        assert!(err.contains(step), "{step}:\n{err}");
    }
    for call in [
        "\"ping\"",
        "\"prepare\"",
        "\"start\"",
        "\"exec\"",
        "\"teardown\"",
    ] {
        assert!(
            err.lines().any(|l| l.contains("driver call")
                && l.contains(call)
                && l.contains("elapsed_ms=")),
            "driver call {call} with its duration:\n{err}"
        );
    }
    assert!(
        err.lines().any(|l| l.contains("egress proxy verdict")
            && l.contains("denied.example.test")
            && l.contains("allowed=false")),
        "the proxy's verdict:\n{err}"
    );
}
