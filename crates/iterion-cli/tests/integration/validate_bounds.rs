//! `iterion validate` on hostile files (issue 15): the real binary, a
//! megabyte of NULs and a megabyte of distinct errors. Stdout holds one JSON
//! document with at most the per-file bound of diagnostics and the count of
//! the rest; stderr holds only the summary line (nothing is rendered that
//! `--json` does not print); the human form ends with the "more" line.

use serde_json::Value;

use crate::support::{Engine, Sandbox};

fn many_errors(bytes: usize) -> String {
    let mut s = String::new();
    let mut i = 0usize;
    while s.len() < bytes {
        s.push_str(&format!("@@ {i} ]]\nagent a{i}:\n  bogus{i}: 1\n"));
        i += 1;
    }
    s
}

#[test]
fn hostile_files_print_bounded_reports() {
    let sb = Sandbox::new(Engine::Docker);
    let nul = sb.write("nul.iter", &"\0".repeat(1024 * 1024));
    let many = sb.write("many.iter", &many_errors(1024 * 1024));
    let out = sb.iterion(&[
        "validate",
        nul.to_str().expect("utf8"),
        many.to_str().expect("utf8"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(stderr.contains("nul.iter: invalid"), "{stderr}");
    assert!(out.stdout.len() < 256 * 1024, "{} bytes", out.stdout.len());
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    let files = doc["files"].as_array().expect("files");
    let nul_diags = files[0]["diagnostics"].as_array().expect("diags");
    assert_eq!(nul_diags.len(), 2, "{:?}", nul_diags);
    assert!(
        nul_diags.iter().any(|d| d["code"] == "E001"
            && d["message"]
                .as_str()
                .is_some_and(|m| m.contains("1048575 more like it"))),
        "{nul_diags:?}"
    );
    let many_diags = files[1]["diagnostics"].as_array().expect("diags");
    assert_eq!(many_diags.len(), iterion_dsl::diag::MAX_PER_FILE);
    let omitted = files[1]["omitted"]["errors"].as_u64().expect("omitted");
    assert!(omitted > 10_000, "{omitted}");

    let out = sb.iterion(&["validate", many.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.len() < 256 * 1024, "{} bytes", human.len());
    assert!(
        human.contains(&format!("{omitted} more diagnostic(s) not shown")),
        "{}",
        &human[human.len().saturating_sub(400)..]
    );
}
