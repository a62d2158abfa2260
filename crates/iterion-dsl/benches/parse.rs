//! Parse+compile throughput on a generated ~8 MB workflow, printed side by
//! side with two baselines measured in the same process: a plain line scan
//! (counting lines and `->`) and `serde_json` parsing a JSON document of the
//! same size describing the same graph. Then, with the same baseline: a
//! 5,000-node workflow, the largest upstream bundle when the upstream
//! mirror is on this machine (`ITERION_UPSTREAM_REPO`, a git dir), and
//! `validate` (compile + human + JSON rendering) of 1 MiB hostile inputs
//! (NULs, deep nesting, deep brackets, long lines, many errors), each
//! against the issue's 1 s budget. Peak memory of those is asserted by
//! `tests/integration/hostile.rs` (counting allocator), not here. Plain std
//! timing; ratios matter, absolute numbers depend on the machine.

#[path = "../tests/integration/hostile_inputs.rs"]
mod hostile_inputs;

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn workflow(target: usize) -> String {
    let mut s = String::from("schema v:\n  ok: bool\n\n");
    let mut n = 0usize;
    while s.len() < target {
        s.push_str(&format!(
            "## node {n}\ntool t{n}:\n  command: `echo {n} && printf '%s' '{{\"ok\": true}}'`\n  output: v\n\n"
        ));
        n += 1;
    }
    s.push_str("workflow big:\n  entry: t0\n  sandbox:\n    image: \"alpine:3.20\"\n");
    for i in 0..n {
        let next = if i + 1 < n {
            format!("t{}", i + 1)
        } else {
            "done".into()
        };
        s.push_str(&format!(
            "  t{i} -> {next} when ok with {{ i: \"{i}\" }}\n  t{i} -> fail when not ok\n"
        ));
    }
    s
}

fn json_of_size(target: usize) -> String {
    let mut s = String::from("{\"nodes\":[");
    let mut n = 0usize;
    while s.len() < target {
        if n > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            "{{\"id\":\"t{n}\",\"kind\":\"tool\",\"command\":\"echo {n} && printf '%s' ok\",\"output\":\"v\",\"edges\":[{{\"to\":\"t{}\",\"when\":\"ok\",\"with\":{{\"i\":\"{n}\"}}}},{{\"to\":\"fail\",\"when\":\"not ok\"}}]}}",
            n + 1
        ));
        n += 1;
    }
    s.push_str("]}");
    s
}

fn time<F: FnMut()>(mut f: F) -> Duration {
    // warm-up, then best of 5
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64().max(1e-9)
}

fn main() {
    let text = workflow(8 * 1024 * 1024);
    let json = json_of_size(text.len());

    let dsl = time(|| {
        let c = iterion_dsl::compile_source(black_box(&text), Path::new("bench.iter"));
        assert!(!c.has_errors());
        black_box(c);
    });
    let scan = time(|| {
        let mut lines = 0usize;
        let mut arrows = 0usize;
        for l in black_box(&text).lines() {
            lines += 1;
            arrows += usize::from(l.contains("->"));
        }
        black_box((lines, arrows));
    });
    let sj = time(|| {
        let v: serde_json::Value = serde_json::from_str(black_box(&json)).unwrap_or_default();
        black_box(v);
    });

    let d = mbps(text.len(), dsl);
    let s = mbps(text.len(), scan);
    let j = mbps(json.len(), sj);
    println!(
        "input: .iter {:.1} MiB, json {:.1} MiB",
        text.len() as f64 / 1048576.0,
        json.len() as f64 / 1048576.0
    );
    println!("iterion-dsl parse+compile : {d:>9.1} MiB/s ({dsl:?})");
    println!("baseline line scan        : {s:>9.1} MiB/s ({scan:?})");
    println!("baseline serde_json Value : {j:>9.1} MiB/s ({sj:?})");
    println!("ratio dsl / serde_json    : {:.2}", d / j);
    println!("ratio dsl / line scan     : {:.3}", d / s);

    // the same graph with field conditions, then with expressions (each
    // parsed at compile time): the ratio is the cost of the C040 parse
    let mut field_time = Duration::ZERO;
    for (label, cond) in [
        ("when ok", "ok"),
        ("when \"…\"", "\"ok && length(vars.x) == 0\""),
    ] {
        let nodes = nodes_workflow(5_000, cond);
        let t = compile_vs_json(
            &format!("5,000-node workflow, {label:<9}"),
            "5k.iter",
            &nodes,
        );
        if field_time.is_zero() {
            field_time = t;
        } else {
            println!(
                "  expression edges / field edges: {:.2}",
                t.as_secs_f64() / field_time.as_secs_f64().max(1e-9)
            );
        }
    }

    match upstream_bundle() {
        Some((name, text)) => {
            compile_vs_json(&format!("largest upstream bundle {name}"), &name, &text);
        }
        None => {
            println!("largest upstream bundle: no upstream mirror here (ITERION_UPSTREAM_REPO)")
        }
    }

    for (name, text) in hostile_inputs::all(1024 * 1024) {
        let t = time(|| {
            let c = iterion_dsl::compile_source(black_box(&text), Path::new("hostile.iter"));
            let mut human = iterion_dsl::render_human(&text, &c.diagnostics);
            if let Some(more) = iterion_dsl::render_omitted(c.omitted) {
                human.push_str(&more);
            }
            let json = iterion_dsl::diag::json_file("hostile.iter", &c.diagnostics, c.omitted);
            black_box((human, json));
        });
        println!(
            "validate 1 MiB {name:<14}: {t:?} ({:.1}% of the 1 s budget)",
            t.as_secs_f64() * 100.0
        );
    }
}

/// Time compiling `text` and print it beside serde_json on a document of
/// the same size.
fn compile_vs_json(label: &str, file: &str, text: &str) -> Duration {
    let t = time(|| {
        black_box(iterion_dsl::compile_source(
            black_box(text),
            Path::new(file),
        ));
    });
    let sj = json_time(text.len());
    println!(
        "{label} ({:.0} KiB): {t:?}, {:.1} MiB/s, ratio vs serde_json same size {:.2}",
        text.len() as f64 / 1024.0,
        mbps(text.len(), t),
        mbps(text.len(), t) / mbps(text.len(), sj)
    );
    t
}

fn json_time(size: usize) -> Duration {
    let json = json_of_size(size);
    time(|| {
        let v: serde_json::Value = serde_json::from_str(black_box(&json)).unwrap_or_default();
        black_box(v);
    })
}

/// A workflow of exactly `n` tool nodes chained by conditional edges.
fn nodes_workflow(n: usize, cond: &str) -> String {
    let mut s = String::from("schema v:\n  ok: bool\n\n");
    for i in 0..n {
        s.push_str(&format!(
            "tool t{i}:\n  command: `echo {i}`\n  output: v\n\n"
        ));
    }
    s.push_str("workflow big:\n  entry: t0\n  vars:\n    x: string = \"\"\n");
    for i in 0..n {
        let next = if i + 1 < n {
            format!("t{}", i + 1)
        } else {
            "done".into()
        };
        s.push_str(&format!("  t{i} -> {next} when {cond}\n  t{i} -> fail\n"));
    }
    s
}

/// The largest `.iter`/`.bot` of the upstream mirror, read with git.
fn upstream_bundle() -> Option<(String, String)> {
    let repo = std::env::var("ITERION_UPSTREAM_REPO")
        .unwrap_or_else(|_| "/work/.mirror/SocialGouv+iterion/repo".into());
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let listing = git(&["ls-tree", "-r", "-l", "HEAD"])?;
    let (path, _) = listing
        .lines()
        .filter_map(|l| {
            let (meta, path) = l.split_once('\t')?;
            let size: usize = meta.split_whitespace().nth(3)?.parse().ok()?;
            (path.ends_with(".iter") || path.ends_with(".bot")).then(|| (path.to_owned(), size))
        })
        .max_by_key(|(_, size)| *size)?;
    let text = git(&["show", &format!("HEAD:{path}")])?;
    Some((path, text))
}
