//! Issue 20 item 4 through the real binary: a tool node whose `command:`
//! is a built-in's name runs that built-in with the node's input — a file
//! built-in inside the container (the in-box runner) on dockerd and
//! Podman, on the host when unsandboxed — and `privacy_filter` /
//! `privacy_unfilter` round-trip a text through the run's vault in the
//! run store, keeping the clear values out of the events.

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, leftovers, node_output, of_type};

const ORIGINAL: &str = "Reach alice@example.com or +33612345678, IBAN FR1420041010050500013M02606.";

fn sandboxed(engine: Option<Engine>) -> Sandbox {
    Sandbox::new(engine.unwrap_or(Engine::Docker)).with_env(
        "ITERION_BIN",
        &iterion_testkit::agent::static_iterion()
            .display()
            .to_string(),
    )
}

/// `None`: the host (`--sandbox none`).
fn sandbox_block(engine: Option<Engine>) -> String {
    match engine {
        None => String::new(),
        Some(_) => format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
            busybox()
        ),
    }
}

/// upstream `privacy_pipeline.iter`, fed by a seed node and checked by a
/// shell node that writes the restored text into the workspace.
fn privacy_pipeline(engine: Option<Engine>) -> String {
    format!(
        r#"
schema seed_out:
  text: string

schema redacted_out:
  redacted: string

schema restore_out:
  text: string

tool seed:
  command: "cat seed.json"
  output: seed_out

tool redact:
  command: "privacy_filter"
  output: redacted_out

tool restore:
  command: "privacy_unfilter"
  output: restore_out

tool check:
  command: "printf '%s' {{{{input.text}}}} > restored.txt; printf '%s' {{{{input.redacted}}}} > redacted.txt"

workflow privacy_pipeline:
{sandbox}  entry: seed
  seed -> redact with {{ text: "{{{{outputs.seed.text}}}}" }}
  redact -> restore with {{ text: "{{{{outputs.redact.redacted}}}}" }}
  restore -> check with {{ text: "{{{{outputs.restore.text}}}}", redacted: "{{{{outputs.redact.redacted}}}}" }}
  check -> done
"#,
        sandbox = sandbox_block(engine)
    )
}

fn privacy_round_trip(engine: Option<Engine>) {
    let sb = sandboxed(engine);
    let file = sb.write("privacy.iter", &privacy_pipeline(engine));
    sb.write(
        "seed.json",
        &serde_json::json!({ "text": ORIGINAL }).to_string(),
    );
    let extra: &[&str] = if engine.is_none() {
        &["--sandbox", "none"]
    } else {
        &[]
    };
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, extra);
    let restored = std::fs::read_to_string(sb.workspace().join("restored.txt")).unwrap();
    assert_eq!(restored, ORIGINAL, "{engine:?}");
    let redacted = std::fs::read_to_string(sb.workspace().join("redacted.txt")).unwrap();
    for clear in [
        "alice@example.com",
        "+33612345678",
        "FR1420041010050500013M02606",
    ] {
        assert!(!redacted.contains(clear), "{clear} in {redacted}");
    }
    assert!(redacted.contains("PII_"), "{redacted}");
    // The restored text is not in the record; the vault is a run file.
    let out = node_output(&events, "restore");
    assert_eq!(out["text"], "<redacted by privacy tool>", "{out}");
    let tools: Vec<&Value> = of_type(&events, "tool_called");
    assert_eq!(tools.len(), 2, "{tools:?}");
    for t in &tools {
        assert_eq!(t["data"]["placement"], "host", "{t}");
    }
    let redact_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["node_id"] == "redact" || e["node_id"] == "restore")
        .collect();
    let text = serde_json::to_string(&redact_events).unwrap();
    assert!(!text.contains("alice@example.com"), "{text}");
    let files = sb.files(&run_id);
    assert!(
        files.to_string().contains(".iterion/privacy/vault.json"),
        "{files}"
    );
    if let Some(engine) = engine {
        assert!(leftovers(engine, &run_id).is_empty());
    }
}

#[test]
fn host_privacy_pipeline_restores_the_text() {
    privacy_round_trip(None);
}

#[test]
fn dockerd_privacy_pipeline_restores_the_text() {
    privacy_round_trip(Some(Engine::Docker));
}

#[test]
fn podman_privacy_pipeline_restores_the_text() {
    privacy_round_trip(Some(Engine::Podman));
}

/// `read_file` as a tool node's command reads inside the container: the
/// file exists only in the container's `/tmp`.
fn read_file_in_the_box(engine: Engine) {
    let sb = sandboxed(Some(engine));
    let marker = format!("iterion-box-only-{}", std::process::id());
    let text = format!(
        r#"
tool plant:
  command: "echo planted-in-the-box > /tmp/{marker}.txt"

tool rd:
  command: "read_file"

tool listing:
  command: "list_files"

workflow box_read:
{sandbox}  entry: plant
  plant -> rd with {{ path: "/tmp/{marker}.txt" }}
  rd -> listing with {{ path: "." }}
  listing -> done
"#,
        sandbox = sandbox_block(Some(engine))
    );
    std::fs::write(sb.workspace().join("visible.txt"), "x").unwrap();
    let file = sb.write("box.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    assert!(!std::path::Path::new(&format!("/tmp/{marker}.txt")).exists());
    let out = node_output(&events, "rd");
    assert!(
        out["result"]
            .as_str()
            .unwrap()
            .contains("planted-in-the-box"),
        "{out}"
    );
    let listing = node_output(&events, "listing");
    assert!(listing.to_string().contains("visible.txt"), "{listing}");
    let called = of_type(&events, "tool_called");
    assert_eq!(called.len(), 2);
    for c in called {
        assert_eq!(c["data"]["placement"], "container", "{c}");
    }
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_read_file_tool_node_runs_in_the_box() {
    read_file_in_the_box(Engine::Docker);
}

#[test]
fn podman_read_file_tool_node_runs_in_the_box() {
    read_file_in_the_box(Engine::Podman);
}

/// The workflow's `tool_policy:` applies to a tool node's built-in: a
/// denied one fails the node (`AGENT_TOOL_DENIED`) with `tool_denied`,
/// and never runs.
#[test]
fn a_denied_builtin_tool_node_fails_with_an_event() {
    let sb = Sandbox::new(Engine::Docker);
    let text = r#"
tool w:
  command: "write_file"

workflow denied:
  tool_policy: ["!write_file"]
  entry: w
  w -> done
"#;
    let file = sb.write("deny.iter", text);
    std::fs::write(sb.workspace().join("keep.txt"), "kept").unwrap();
    let res = sb.run(&file, &["--sandbox", "none"]);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    assert_eq!(res.code, Some(1), "{}", res.stderr);
    let denied = of_type(&events, "tool_denied");
    assert_eq!(denied.len(), 1, "{events:?}");
    assert_eq!(denied[0]["data"]["tool"], "write_file");
    assert_eq!(denied[0]["data"]["rule"], "!write_file");
    let failed = of_type(&events, "node_failed");
    assert!(
        failed[0]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("AGENT_TOOL_DENIED"),
        "{failed:?}"
    );
    assert!(of_type(&events, "tool_started").is_empty());
}
