//! Secret masking throughput (issue 19 #13), against a plain line split of
//! the same text and against the exact-match `str::replace` loop it
//! replaced, in this one process.
//!
//! Run: `cargo bench -p iterion-runtime --bench redact` (release). Prints
//! MB/s per masker at two input sizes (the ratio between sizes shows it is
//! linear in the output), and the worst case for the line window: a long
//! (4 KiB) secret and output dribbled one character per line.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use iterion_runtime::redact::Redactor;

fn secrets() -> Vec<String> {
    (0..5)
        .map(|i| format!("ghp_{i}S3cr3tV4lue-{}", "x".repeat(30 + i)))
        .collect()
}

/// Log-like text: 80-column lines, a secret (raw or base64) every ~500.
fn log_text(bytes: usize, secrets: &[String]) -> String {
    use base64::Engine as _;
    let mut s = String::with_capacity(bytes + 200);
    let mut n = 0usize;
    while s.len() < bytes {
        n += 1;
        if n.is_multiple_of(500) {
            let v = &secrets[n % secrets.len()];
            if n.is_multiple_of(1000) {
                s.push_str(&base64::engine::general_purpose::STANDARD.encode(v));
            } else {
                s.push_str(v);
            }
        }
        s.push_str("compiling crate number ");
        s.push_str(&n.to_string());
        s.push_str(" of the workspace with features default,std,alloc ok\n");
    }
    s
}

fn time(mut f: impl FnMut()) -> Duration {
    f();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed());
    }
    best
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1_048_576.0 / d.as_secs_f64()
}

fn stream(red: &Redactor, text: &str) -> usize {
    let mut lines = red.lines::<()>();
    let mut out = 0usize;
    for l in text.split('\n') {
        out += lines.push(l.as_bytes(), ()).len();
    }
    out + lines.finish().len()
}

fn main() {
    let secrets = secrets();
    let red = Redactor::new(&secrets);
    for size in [4 << 20, 32 << 20] {
        let text = log_text(size, &secrets);
        let split = time(|| {
            black_box(black_box(&text).split('\n').count());
        });
        let exact = time(|| {
            let mut n = 0;
            for l in black_box(&text).split('\n') {
                let mut line = l.to_owned();
                for v in &secrets {
                    if line.contains(v.as_str()) {
                        line = line.replace(v.as_str(), "[REDACTED]");
                    }
                }
                n += line.len();
            }
            black_box(n);
        });
        let masked = time(|| {
            black_box(stream(&red, black_box(&text)));
        });
        println!(
            "{:>3} MiB log: line split {:7.1} MB/s | exact replace (old) {:7.1} MB/s | encodings+lines (new) {:7.1} MB/s  (new/old {:.2}x, new/split {:.2}x)",
            size >> 20,
            mbps(text.len(), split),
            mbps(text.len(), exact),
            mbps(text.len(), masked),
            exact.as_secs_f64() / masked.as_secs_f64(),
            split.as_secs_f64() / masked.as_secs_f64(),
        );
    }
    // Worst case for the line window: a 4 KiB secret held back across
    // one-character lines. Linear means the same MB/s at 1 and 8 MiB.
    let big = Redactor::new(["k".repeat(4096)]);
    for size in [1 << 20, 8 << 20] {
        let dribble: String = "a\n".repeat(size / 2);
        let d = time(|| {
            black_box(stream(&big, black_box(&dribble)));
        });
        println!(
            "{:>3} MiB of 1-char lines, 4 KiB secret: {:7.1} MB/s",
            size >> 20,
            mbps(dribble.len(), d)
        );
    }
}
