//! A generated ~5 MB file and pathological nesting complete in linear time
//! and memory (no timing assertion; recursion must not blow the stack).

use std::path::Path;

use iterion_dsl::compile_source;

fn big_workflow(target_bytes: usize) -> String {
    let mut s = String::from("schema v:\n  ok: bool\n\n");
    let mut n = 0usize;
    while s.len() < target_bytes {
        s.push_str(&format!(
            "## node {n}\ntool t{n}:\n  command: `echo {n} && printf '%s' \"{{\\\"ok\\\": true}}\"`\n  output: v\n  sandbox: auto\n\n"
        ));
        n += 1;
    }
    s.push_str("workflow big:\n  entry: t0\n  sandbox:\n    image: \"alpine:3.20\"\n    network:\n      mode: allowlist\n      rules: [\"a.com\", \"**.b.com\"]\n");
    for i in 0..n {
        let next = if i + 1 < n {
            format!("t{}", i + 1)
        } else {
            "done".to_string()
        };
        s.push_str(&format!(
            "  t{i} -> {next} when ok with {{ i: \"{i}\" }}\n  t{i} -> fail when not ok\n"
        ));
    }
    s
}

#[test]
fn five_megabytes_compile_clean() {
    let text = big_workflow(5 * 1024 * 1024);
    assert!(text.len() >= 5 * 1024 * 1024);
    let c = compile_source(&text, Path::new("big.iter"));
    assert!(
        !c.has_errors(),
        "{:?}",
        &c.diagnostics[..c.diagnostics.len().min(5)]
    );
    assert!(c.workflows[0].nodes.len() > 20_000);
}

#[test]
fn deep_nesting_is_refused_not_recursed() {
    let mut s = String::from("workflow w:\n");
    for depth in 1..5000 {
        s.push_str(&" ".repeat(depth * 2));
        s.push_str("k:\n");
    }
    let c = compile_source(&s, Path::new("deep.iter"));
    assert!(c.has_errors());
    assert!(c.diagnostics.len() < 10_000);
}

#[test]
fn deep_brackets_are_refused_not_recursed() {
    let s = format!(
        "tool a:\n  command: \"x\"\n  tools: {}{}\n\nworkflow w:\n  entry: a\n  a -> done\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let c = compile_source(&s, Path::new("deep.iter"));
    assert!(c.has_errors());
}

#[test]
fn garbage_megabytes_stay_sane() {
    let line = "@@ ]] }} -> : ,, \"\n";
    let text = line.repeat(200_000);
    let c = compile_source(&text, Path::new("junk.iter"));
    assert!(c.has_errors());
    // at most a few diagnostics per line
    assert!(c.diagnostics.len() <= 200_000 * 4);
}
