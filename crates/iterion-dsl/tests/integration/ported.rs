//! Upstream's DSL test suite, ported as fixtures of our own
//! (`tests/fixtures/ported/*.iter`): each file keeps one upstream test's
//! intent and expected verdict, written in our words. The header says what
//! it ports (`## ported:`), the codes it must raise or `clean` (no error;
//! `## expect:`), and codes it must not raise (`## expect-not:`).

use std::path::Path;

use iterion_dsl::{Severity, compile_source};

use crate::fixtures::fixtures_in;

fn header(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("## {key}:")))
        .flat_map(|v| v.split(',').map(|c| c.trim().to_owned()))
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn ported_upstream_cases_agree() {
    let all = fixtures_in("ported");
    assert!(all.len() >= 40, "{} ported cases", all.len());
    let mut failures = Vec::new();
    for (name, text) in &all {
        let c = compile_source(text, Path::new(name));
        let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
        let expect = header(text, "expect");
        assert!(!expect.is_empty(), "{name} has no `## expect:` line");
        for want in &expect {
            if want == "clean" {
                let errors: Vec<_> = c
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == Severity::Error)
                    .map(|d| format!("{}:{} {} {}", d.line, d.column, d.code, d.message))
                    .collect();
                if !errors.is_empty() {
                    failures.push(format!("{name}: expected clean, got {errors:?}"));
                }
            } else if !codes.contains(&want.as_str()) {
                failures.push(format!("{name}: expected {want}, got {codes:?}"));
            }
        }
        for unwanted in header(text, "expect-not") {
            if codes.contains(&unwanted.as_str()) {
                failures.push(format!("{name}: must not raise {unwanted}, got {codes:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
