//! `iterion studio` in a real browser (Debian's Chromium through
//! chromedriver and the WebDriver protocol) over a store holding real
//! runs, made by real `iterion run` invocations on the test dockerd: a
//! finished run that kept a file, a run that failed with a code, a run
//! whose output, log and file name carry markup, and a run that is still
//! going while the page watches. Screenshots of every page are kept under
//! the target dir (their paths are printed). A missing browser fails the
//! test; nothing skips.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{Engine, Sandbox, busybox, leftovers};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running `iterion studio`; killed when dropped.
struct StudioProc {
    child: Child,
    addr: SocketAddr,
    url: String,
}

impl StudioProc {
    /// `iterion studio --addr ADDR` over the sandbox's store, once it
    /// printed its URL.
    fn start(sb: &Sandbox, addr: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = sb.command(&["studio", "--addr", addr]);
        cmd.env_remove("ITERION_STUDIO_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn iterion studio");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line).expect("the studio's first line");
        // Keep reading, so the studio never writes into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        let port: u16 = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let url = format!("http://{addr}/");
        Self { child, addr, url }
    }
}

impl Drop for StudioProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET (no chunked bodies: the API's documents carry a
/// length).
fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect to the studio");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, head, buf[split + 4..].to_vec())
}

/// The process group of chromedriver and the browser it starts, ended by
/// its own id when dropped (only what this test started).
struct Browser {
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Self {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: run scripts/setup.sh (Debian's chromium and chromium-driver)"
            );
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("addr").port()
        };
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::Builder::new()
            .prefix("iterion-studio-chromium-")
            .tempdir()
            .expect("profile dir");
        // The machine notes' flags: without them Chromium's own
        // connections (QUIC, updates, sync) fail here and stall it.
        let caps = json!({
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    format!("--user-data-dir={}", profile.path().display()),
                    "--window-size=1400,1800",
                ]
            }
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session with chromium");
        Self {
            client: Some(client),
            driver,
            _profile: profile,
        }
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("open")
    }

    async fn goto(&self, url: &str) {
        self.c().goto(url).await.expect("navigate");
    }

    async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.c().execute(script, args).await.expect("script")
    }

    async fn text(&self, css: &str) -> String {
        self.c()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .expect("text")
    }

    /// Poll `script` (returning a bool) until it is true, or fail.
    async fn wait_for(&self, what: &str, script: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if self.js(script, vec![]).await == Value::Bool(true) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait until the page's live stream is connected.
    async fn wait_live(&self, what: &str) {
        self.wait_for(
            what,
            "return document.getElementById('live-state').dataset.state === 'live';",
            20,
        )
        .await;
    }

    /// Fetch `url` from inside the page (same cookies, same origin).
    async fn fetch(&self, url: &str) -> Value {
        self.c()
            .execute_async(
                "const [url, done] = arguments; fetch(url).then(r => r.arrayBuffer().then(b => done({status: r.status, cd: r.headers.get('content-disposition'), ctype: r.headers.get('content-type'), bytes: Array.from(new Uint8Array(b))}))).catch(e => done({error: String(e)}));",
                vec![json!(url)],
            )
            .await
            .expect("fetch in the page")
    }

    /// Save a screenshot as `name` under the target dir; prints the path.
    async fn shot(&self, name: &str) -> PathBuf {
        let png = self.c().screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("studio-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(name);
        std::fs::write(&path, png).expect("write screenshot");
        println!("studio screenshot: {}", path.display());
        eprintln!("studio screenshot: {}", path.display());
        path
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver leads its own process group (the browser is in it).
        if let Some(pid) = rustix::process::Pid::from_raw(self.driver.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.driver.wait();
    }
}

fn busybox_block() -> String {
    format!(
        "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
        busybox()
    )
}

fn run_ok(sb: &Sandbox, file: &str, text: &str, expect: &str) -> String {
    let path = sb.write(file, text);
    let r = sb.run(&path, &[]);
    assert_eq!(r.status(), expect, "{file}: {}", r.stderr);
    let id = r.run_id();
    assert!(
        leftovers(sb.engine, &id).is_empty(),
        "{file} left resources behind"
    );
    id
}

fn cli(sb: &Sandbox, args: &[&str]) -> Vec<u8> {
    let out = sb.iterion(args);
    assert!(
        out.status.success(),
        "iterion {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `/api/runs`, and `events`/`files` of each of `ids`, are byte for byte
/// what the CLI prints; returns the runs document.
fn assert_api_is_cli(studio: &StudioProc, sb: &Sandbox, ids: &[&str]) -> Vec<u8> {
    let (status, head, runs) = http_get(studio.addr, "/api/runs", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        runs,
        cli(sb, &["runs", "--json"]),
        "/api/runs = iterion runs --json"
    );
    for id in ids {
        let (_, _, events) = http_get(studio.addr, &format!("/api/runs/{id}/events"), &[]);
        assert_eq!(events, cli(sb, &["events", id, "--json"]), "events of {id}");
        let (_, _, files) = http_get(studio.addr, &format!("/api/runs/{id}/files"), &[]);
        assert_eq!(files, cli(sb, &["files", id, "--json"]), "files of {id}");
    }
    runs
}

#[tokio::test(flavor = "multi_thread")]
async fn studio_shows_real_runs_in_a_real_browser() {
    let sb = Sandbox::new(Engine::Docker);
    let block = busybox_block();
    let kept = run_ok(
        &sb,
        "keeps.iter",
        &format!(
            "schema out:\n  files: int\n\ntool write:\n  command: `mkdir -p \"$ITERION_ARTIFACT_FILES_DIR/reports\" && printf 'all good\\n' > \"$ITERION_ARTIFACT_FILES_DIR/reports/summary.txt\" && echo '{{\"files\": 1}}'`\n  output: out\n\nworkflow keeps_files:\n  entry: write\n{block}  write -> done\n"
        ),
        "finished",
    );
    let failed = run_ok(
        &sb,
        "breaks.iter",
        &format!(
            "tool check:\n  command: \"echo 'about to fail' >&2; exit 3\"\n\nworkflow breaks:\n  entry: check\n{block}  check -> done\n"
        ),
        "failed",
    );
    let hostile = run_ok(
        &sb,
        "hostile.iter",
        &format!(
            "schema note_out:\n  note: string\n\ntool hostile:\n  command: `mkdir -p \"$ITERION_ARTIFACT_FILES_DIR\" && printf 'pwned\\n' > \"$ITERION_ARTIFACT_FILES_DIR/<img src=x onerror=alert(1)>.txt\" && echo '<img src=x onerror=alert(2)>' >&2 && printf '{{\"note\": \"</script><img src=x onerror=alert(3)><script>alert(4)</script>\"}}'`\n  output: note_out\n\nworkflow hostile:\n  entry: hostile\n{block}  hostile -> done\n"
        ),
        "finished",
    );
    let studio = StudioProc::start(&sb, "127.0.0.1:0", &[]);

    // ---- the API has exactly the CLI's documents ----------------------
    let runs = assert_api_is_cli(&studio, &sb, &[&kept, &failed, &hostile]);
    let runs: Value = serde_json::from_slice(&runs).expect("runs json");
    let code = runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["id"] == failed.as_str())
        .expect("the failed run")["failure_code"]
        .clone();
    assert_eq!(code, "NODE_FAILED");

    let b = Browser::start().await;

    // ---- the runs page -------------------------------------------------
    b.goto(&studio.url).await;
    b.wait_for(
        "three rows",
        "return document.querySelectorAll('#runs-body tr').length === 3;",
        20,
    )
    .await;
    b.wait_live("the live stream").await;
    let table = b.text("#runs-body").await;
    for id in [&kept, &failed, &hostile] {
        assert!(table.contains(id.as_str()), "{id} listed: {table}");
    }
    assert!(table.contains("NODE_FAILED"), "{table}");
    assert!(table.contains("inline"), "the mode column: {table}");
    let runs_png = b.shot("runs.png").await;

    // ---- a finished run: decision, graph, timeline, files ---------------
    b.goto(&format!("{}runs/{kept}", studio.url)).await;
    assert_eq!(b.text("#verdict").await, "Sandboxed");
    let decision = b.text("#decision").await;
    assert!(decision.contains("docker"), "{decision}");
    assert!(decision.contains(&busybox()), "{decision}");
    assert!(decision.contains("inline (decided by"), "{decision}");
    assert_eq!(
        b.js("return document.querySelector('svg.graph g.node[data-node=\"write\"]').getAttribute('class');", vec![]).await,
        "node state-finished"
    );
    let kinds = b
        .js("return Array.from(document.querySelectorAll('#timeline li')).map(l => l.dataset.kind);", vec![])
        .await;
    for k in [
        "run_started",
        "sandbox_started",
        "node_started",
        "node_finished",
        "sandbox_runfiles_drained",
        "run_finished",
    ] {
        assert!(
            kinds.as_array().expect("kinds").contains(&json!(k)),
            "{k} in {kinds}"
        );
    }
    let files = b.text("#files").await;
    assert!(files.contains("reports/summary.txt"), "{files}");
    assert!(files.contains("drain: complete"), "{files}");
    let href = b
        .js("return Array.from(document.querySelectorAll('#files a.download')).map(a => a.getAttribute('href')).find(h => h.endsWith('summary.txt'));", vec![])
        .await;
    let got = b.fetch(href.as_str().expect("a download link")).await;
    assert_eq!(got["status"], 200, "{got}");
    let bytes: Vec<u8> = serde_json::from_value(got["bytes"].clone()).expect("bytes");
    assert_eq!(bytes, b"all good\n");
    assert_eq!(
        bytes,
        cli(&sb, &["files", &kept, "--get", "reports/summary.txt"]),
        "the same bytes as iterion files --get"
    );
    assert_eq!(
        got["cd"],
        "attachment; filename=\"summary.txt\"; filename*=UTF-8''summary.txt"
    );
    assert_eq!(got["ctype"], "application/octet-stream");
    let finished_png = b.shot("run-finished.png").await;

    // ---- a failed run: the code, the disposition, the red node --------
    b.goto(&format!("{}runs/{failed}", studio.url)).await;
    assert_eq!(b.text("#failure-code").await, "NODE_FAILED");
    assert_eq!(b.text("#failure-disposition").await, "reexecutable");
    assert!(!b.text("#run-hint").await.is_empty(), "a hint");
    assert_eq!(
        b.js("return document.querySelector('svg.graph g.node[data-node=\"check\"]').getAttribute('class');", vec![]).await,
        "node state-failed"
    );
    let logs = b.text("#logs").await;
    assert!(logs.contains("about to fail"), "{logs}");
    let failed_png = b.shot("run-failed.png").await;

    // ---- hostile markup is text, and no element is injected ------------
    b.goto(&format!("{}runs/{hostile}", studio.url)).await;
    // Show every entry with its data, so all of it is in the DOM's text.
    b.js(
        "document.querySelectorAll('details').forEach(d => d.open = true); return true;",
        vec![],
    )
    .await;
    let dom = b
        .js(
            "return {imgs: document.querySelectorAll('img').length, onerror: document.querySelectorAll('[onerror]').length, scripts: Array.from(document.scripts).map(s => s.getAttribute('src')), text: document.body.textContent};",
            vec![],
        )
        .await;
    assert_eq!(dom["imgs"], 0, "no img element was injected");
    assert_eq!(dom["onerror"], 0, "no handler attribute was injected");
    assert_eq!(
        dom["scripts"],
        json!(["/assets/studio.js"]),
        "only the studio's script"
    );
    let text = dom["text"].as_str().expect("text");
    assert!(
        text.contains("<img src=x onerror=alert(1)>.txt"),
        "the file name, as text"
    );
    assert!(
        text.contains("<img src=x onerror=alert(2)>"),
        "the log line, as text"
    );
    assert!(
        text.contains("</script><img src=x onerror=alert(3)><script>alert(4)</script>"),
        "the output, as text"
    );
    let href = b
        .js(
            "return document.querySelector('#files a.download').getAttribute('href');",
            vec![],
        )
        .await;
    let got = b.fetch(href.as_str().expect("link")).await;
    assert_eq!(got["status"], 200, "{got}");
    let bytes: Vec<u8> = serde_json::from_value(got["bytes"].clone()).expect("bytes");
    assert_eq!(bytes, b"pwned\n");
    assert!(
        got["cd"]
            .as_str()
            .expect("disposition")
            .starts_with("attachment; filename=\"_img_src_x_onerror_alert_1__.txt\""),
        "{got}"
    );
    let hostile_png = b.shot("run-hostile.png").await;
    // No dialog opened at any point (an alert would fail every command).
    assert_eq!(b.js("return 1 + 1;", vec![]).await, 2);
    b.close().await;
    for p in [runs_png, finished_png, failed_png, hostile_png] {
        assert!(
            std::fs::metadata(&p).expect("screenshot").len() > 10_000,
            "{}",
            p.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_grows_in_the_browser_without_a_reload() {
    let sb = Sandbox::new(Engine::Docker);
    let block = busybox_block();
    let file = sb.write(
        "slow.iter",
        &format!(
            "tool first:\n  command: \"echo one\"\n\ntool nap:\n  command: \"sleep 8; echo two\"\n\ntool last:\n  command: \"echo three\"\n\nworkflow slow:\n  entry: first\n{block}  first -> nap\n  nap -> last\n  last -> done\n"
        ),
    );
    let studio = StudioProc::start(&sb, "127.0.0.1:0", &[]);
    let b = Browser::start().await;
    b.goto(&studio.url).await;
    b.wait_live("the live stream").await;
    b.js("window.__studioMarker = 42; return true;", vec![])
        .await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let run_id = format!("studio-live-{}-{nanos}", std::process::id());
    let path = file.to_string_lossy().into_owned();
    let mut run = sb
        .command(&["run", &path, "--run-id", &run_id, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion run");
    // The runs page shows the new run without a reload.
    b.wait_for(
        "the new run on the runs page",
        &format!("return document.getElementById('runs-body').textContent.includes('{run_id}') && window.__studioMarker === 42;"),
        60,
    )
    .await;
    b.goto(&format!("{}runs/{run_id}", studio.url)).await;
    assert_eq!(
        b.js("return document.body.dataset.live;", vec![]).await,
        "1",
        "the page was loaded while the run was going"
    );
    b.js("window.__studioMarker = 43; return true;", vec![])
        .await;
    let before = b
        .js(
            "return document.querySelectorAll('#timeline li').length;",
            vec![],
        )
        .await
        .as_u64()
        .expect("count");
    b.wait_for(
        "the nap node running",
        "const g = document.querySelector('svg.graph g.node[data-node=\"nap\"]'); return g !== null && g.classList.contains('state-running');",
        60,
    )
    .await;
    let live_png = b.shot("run-live.png").await;
    b.wait_for(
        "run_finished in the timeline",
        "return Array.from(document.querySelectorAll('#timeline li')).some(l => l.dataset.kind === 'run_finished');",
        90,
    )
    .await;
    let after = b
        .js(
            "return document.querySelectorAll('#timeline li').length;",
            vec![],
        )
        .await
        .as_u64()
        .expect("count");
    assert!(after > before, "the timeline grew: {before} -> {after}");
    assert_eq!(
        b.js("return window.__studioMarker;", vec![]).await,
        43,
        "no reload happened"
    );
    b.wait_for(
        "the header says finished",
        "return document.getElementById('run-status').textContent === 'finished';",
        20,
    )
    .await;
    assert_eq!(
        b.js("return document.querySelector('svg.graph g.node[data-node=\"last\"]').getAttribute('class');", vec![]).await,
        "node state-finished"
    );
    assert_eq!(
        b.js("return document.querySelector('svg.graph g.node[data-terminal=\"done\"]').getAttribute('class');", vec![]).await,
        "node state-finished",
        "the run reached done"
    );
    // The decision card filled in as the sandbox came up.
    assert_eq!(b.text("#verdict").await, "Sandboxed");
    assert!(b.text("#decision").await.contains(&busybox()));
    let ended_png = b.shot("run-live-ended.png").await;
    b.close().await;
    let status = run.wait().expect("wait for the run");
    assert!(status.success(), "the run finished");
    assert!(leftovers(sb.engine, &run_id).is_empty());
    for p in [live_png, ended_png] {
        assert!(std::fs::metadata(&p).expect("screenshot").len() > 10_000);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn off_loopback_the_token_is_required() {
    let sb = Sandbox::new(Engine::Docker);
    let out = sb
        .command(&["studio", "--addr", "0.0.0.0:0"])
        .env_remove("ITERION_STUDIO_TOKEN")
        .output()
        .expect("spawn");
    assert_eq!(
        out.status.code(),
        Some(2),
        "no token off loopback is bad input"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ITERION_STUDIO_TOKEN") && err.contains("STUDIO_TOKEN_REQUIRED"),
        "{err}"
    );
    let weak = sb
        .command(&["studio", "--addr", "0.0.0.0:0"])
        .env("ITERION_STUDIO_TOKEN", "short")
        .output()
        .expect("spawn");
    assert_eq!(weak.status.code(), Some(2), "a weak token is bad input");

    let token = "a-long-studio-token-for-the-test";
    let studio = StudioProc::start(&sb, "0.0.0.0:0", &[("ITERION_STUDIO_TOKEN", token)]);
    for path in ["/", "/api/runs", "/api/live/runs", "/assets/studio.js"] {
        let (status, head, body) = http_get(studio.addr, path, &[]);
        assert_eq!(status, 401, "{path}: {head}");
        assert!(
            !String::from_utf8_lossy(&body).contains("\"runs\""),
            "{path}"
        );
    }
    let bearer = format!("Bearer {token}");
    let (status, _, body) = http_get(studio.addr, "/api/runs", &[("Authorization", &bearer)]);
    assert_eq!(status, 200);
    assert_eq!(body, cli(&sb, &["runs", "--json"]));
    // The browser's way in: the login link sets the cookie, the live
    // stream rides on it.
    let b = Browser::start().await;
    b.goto(&format!("{}login?token={token}", studio.url)).await;
    let here = b.c().current_url().await.expect("url");
    assert_eq!(here.path(), "/", "the token leaves the address bar");
    assert!(here.query().is_none(), "{here}");
    b.wait_live("the live stream with the cookie").await;
    assert!(b.text("main").await.contains("No runs yet"));
    b.shot("runs-token.png").await;
    b.close().await;
}

#[test]
fn studio_serves_a_postgres_store_as_the_cli_reads_it() {
    let pg = crate::support::PgSchema::new("studio");
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &pg.url());
    let block = busybox_block();
    let id = run_ok(
        &sb,
        "pg.iter",
        &format!(
            "tool hello:\n  command: `mkdir -p \"$ITERION_ARTIFACT_FILES_DIR\" && echo hi > \"$ITERION_ARTIFACT_FILES_DIR/hi.txt\"`\n\nworkflow pg_hello:\n  entry: hello\n{block}  hello -> done\n"
        ),
        "finished",
    );
    let studio = StudioProc::start(&sb, "127.0.0.1:0", &[]);
    assert_api_is_cli(&studio, &sb, &[&id]);
    let (status, _, bytes) = http_get(studio.addr, &format!("/api/runs/{id}/files/hi.txt"), &[]);
    assert_eq!(status, 200);
    assert_eq!(bytes, b"hi\n");
    let (status, _, page) = http_get(studio.addr, &format!("/runs/{id}"), &[]);
    assert_eq!(status, 200);
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("postgres"), "the header names the store");
    assert!(page.contains(r#"data-node="hello""#), "the graph is drawn");
}
