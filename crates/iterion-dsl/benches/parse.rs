//! Parse+compile throughput on a generated ~8 MB workflow, printed side by
//! side with two baselines measured in the same process: a plain line scan
//! (counting lines and `->`) and `serde_json` parsing a JSON document of the
//! same size describing the same graph. Plain std timing; ratios matter,
//! absolute numbers depend on the machine.

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
}
