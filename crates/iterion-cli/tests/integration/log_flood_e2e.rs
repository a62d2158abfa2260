//! Output amplification (issue 31 #6): a tool printing 8 MiB of one-byte
//! lines (`yes | head -n 5000000`), looped four times, used to store one
//! log row per line (4.2 M rows per visit) and take `iterion run` to
//! 2.5 GB of memory, `iterion logs` and the studio's log API with it. Each
//! test performs that flood and asserts the peak RSS of the real process
//! (its `VmHWM`, sampled from `/proc/<pid>/status` until it exits) stays
//! under 200 MiB: `iterion run` on the host and sandboxed on dockerd and
//! Podman, `iterion logs` and `GET /api/runs/ID/logs` reading the flood
//! back from SQLite and from PostgreSQL; and that the stored log is rows
//! of coalesced lines, every line of them still there up to the node cap.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::{Engine, PgSchema, RunResult, Sandbox, busybox, parse_run_output};

/// The bound the issue sets for every process that handles the flood.
const PEAK_LIMIT_KIB: u64 = 200 * 1024;
/// Lines the tool prints per visit ("y\n" each: 10 MB, over the 8 MiB
/// node cap).
const LINES: u64 = 5_000_000;
/// Lines of one visit that reach the log: the node cap, 8 MiB of "y\n".
const KEPT: u64 = 8 * 1024 * 1024 / 2;

fn workflow(sandbox: Option<&str>) -> String {
    let block = sandbox
        .map(|image| format!("  sandbox:\n    image: \"{image}\"\n    host_state: none\n"))
        .unwrap_or_default();
    format!(
        r#"schema lap_out:
  n: int
  finished: bool

tool lap:
  command: `yes | head -n {LINES} >&2; c=$(cat count 2>/dev/null || echo 0); c=$((c+1)); echo $c > count; if [ $c -ge 4 ]; then f=true; else f=false; fi; printf '{{"n": %s, "finished": %s}}' $c $f`
  output: lap_out

workflow flood:
{block}  entry: lap
  lap -> lap when not finished as laps(10)
  lap -> done when finished
"#
    )
}

/// Samples a process's `VmHWM` until it is gone; `peak()` is the highest
/// value seen (the kernel's high-water mark only grows, so the last
/// sample before exit is the process's peak but for its last 10 ms).
struct Peak {
    kib: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Peak {
    fn watch(pid: u32) -> Self {
        let kib = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&kib);
        let thread = std::thread::spawn(move || {
            let path = format!("/proc/{pid}/status");
            // A zombie has no memory map: its status has no VmHWM line.
            while let Some(v) = std::fs::read_to_string(&path).ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            }) {
                seen.fetch_max(v, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self { kib, thread }
    }

    fn peak(self) -> u64 {
        let _ = self.thread.join();
        self.kib.load(Ordering::Relaxed)
    }
}

/// `iterion run FILE --json EXTRA…` with its peak RSS.
fn run_flood(sb: &Sandbox, sandbox: Option<&str>, extra: &[&str]) -> (RunResult, u64) {
    let file = sb.write("flood.iter", &workflow(sandbox));
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["run", file.as_str(), "--json"];
    args.extend_from_slice(extra);
    let child = sb
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion run");
    let peak = Peak::watch(child.id());
    let out = child.wait_with_output().expect("iterion run");
    (parse_run_output(&out), peak.peak())
}

/// `iterion logs RUN`, read as it prints: (lines, lines that are the
/// flood's `y`, peak RSS).
fn logs_flood(sb: &Sandbox, run_id: &str) -> (u64, u64, u64) {
    let mut child = sb
        .command(&["logs", run_id])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn iterion logs");
    let peak = Peak::watch(child.id());
    let out = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
    let (mut lines, mut ys) = (0, 0);
    for line in out.split(b'\n') {
        let line = line.expect("read iterion logs");
        lines += 1;
        if line.ends_with(b"[lap] y") {
            ys += 1;
        }
    }
    assert!(child.wait().expect("wait").success(), "iterion logs failed");
    (lines, ys, peak.peak())
}

/// `iterion studio` on a free loopback port.
fn studio(sb: &Sandbox) -> (Child, SocketAddr) {
    let mut cmd = sb.command(&["studio", "--addr", "127.0.0.1:0"]);
    cmd.env_remove("ITERION_STUDIO_TOKEN");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn iterion studio");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the studio's first line");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let port: u16 = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .and_then(|u| u.trim_end_matches('/').rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// `GET /api/runs/RUN/logs` (HTTP/1.0: the body ends with the
/// connection): (rows, the flood's lines inside them).
fn api_logs(addr: SocketAddr, run_id: &str) -> (u64, u64) {
    let mut s = TcpStream::connect(addr).expect("connect to the studio");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        s,
        "GET /api/runs/{run_id}/logs HTTP/1.0\r\nHost: {addr}\r\n\r\n"
    )
    .expect("write");
    let mut r = BufReader::with_capacity(1 << 20, s);
    let mut head = String::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).expect("head");
        if l == "\r\n" || l.is_empty() {
            break;
        }
        head.push_str(&l);
    }
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    let (mut rows, mut ys) = (0, 0);
    let mut body = Vec::new();
    for line in r.by_ref().split(b'\n') {
        body = line.expect("read the API");
        if body.is_empty() {
            continue;
        }
        let row: serde_json::Value = serde_json::from_slice(&body).expect("a JSON row");
        rows += 1;
        if row["stream"] == "stderr" {
            ys += row["line"]
                .as_str()
                .expect("line")
                .split('\n')
                .filter(|l| *l == "y")
                .count() as u64;
        }
    }
    drop(body);
    (rows, ys)
}

/// The run finished, its peak stayed under the bound, and the store holds
/// coalesced rows, not a row per line.
fn assert_flood_run(what: &str, r: &RunResult, peak: u64) {
    assert_eq!(r.status(), "finished", "{what}: {}", r.stderr);
    assert!(
        peak > 0 && peak < PEAK_LIMIT_KIB,
        "{what}: iterion run peaked at {peak} KiB (bound {PEAK_LIMIT_KIB} KiB)"
    );
    eprintln!("{what}: iterion run peak RSS {peak} KiB");
}

/// `iterion logs` and the studio's log API read the flood back bounded,
/// every kept line present once.
fn assert_flood_readers(what: &str, sb: &Sandbox, run_id: &str) {
    let (lines, ys, peak) = logs_flood(sb, run_id);
    assert_eq!(ys, 4 * KEPT, "{what}: iterion logs shows every kept line");
    assert!(lines >= ys, "{what}");
    assert!(
        peak < PEAK_LIMIT_KIB,
        "{what}: iterion logs peaked at {peak} KiB"
    );
    eprintln!("{what}: iterion logs peak RSS {peak} KiB over {lines} lines");
    let (mut child, addr) = studio(sb);
    let peak = Peak::watch(child.id());
    let (rows, api_ys) = api_logs(addr, run_id);
    let _ = child.kill();
    let _ = child.wait();
    let peak = peak.peak();
    assert_eq!(api_ys, 4 * KEPT, "{what}: the API serves every kept line");
    // Rows, not lines: 4 visits × (2048 single rows + 8 MiB in ≤ 64 KiB
    // rows + their truncation line) and a few system rows.
    assert!(
        rows < 4 * 2300 + 50,
        "{what}: {rows} rows for {api_ys} lines"
    );
    assert!(
        peak < PEAK_LIMIT_KIB,
        "{what}: the studio peaked at {peak} KiB"
    );
    eprintln!("{what}: studio peak RSS {peak} KiB serving {rows} rows");
}

#[test]
fn a_flood_of_one_byte_lines_stays_bounded_on_the_host_with_sqlite() {
    let sb = Sandbox::new(Engine::Docker);
    let (r, peak) = run_flood(&sb, None, &["--sandbox", "none"]);
    assert_flood_run("host/sqlite", &r, peak);
    assert_flood_readers("host/sqlite", &sb, &r.run_id());
}

#[test]
fn a_flood_of_one_byte_lines_stays_bounded_with_postgres() {
    let pg = PgSchema::new("flood");
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &pg.url());
    let (r, peak) = run_flood(&sb, None, &["--sandbox", "none"]);
    assert_flood_run("host/postgres", &r, peak);
    assert_flood_readers("host/postgres", &sb, &r.run_id());
}

#[test]
fn a_flood_of_one_byte_lines_stays_bounded_in_a_sandbox_on_both_engines() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let (r, peak) = run_flood(&sb, Some(&busybox()), &[]);
        assert_flood_run(&format!("{engine:?}"), &r, peak);
    }
}
