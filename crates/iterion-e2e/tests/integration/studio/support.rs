//! A studio over a real SQLite store on a real loopback socket, and a
//! plain HTTP/1.1 client that writes requests byte for byte (so a test
//! can send what no polite client would: a foreign `Host`, a body, a
//! forged cookie).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use iterion_core::failure::{FailureCode, RunStatus};
use iterion_core::store::{
    DrainRecord, DrainStatus, Failure, NewLogLine, NewRun, PutOutcome, RunFilePath, Transition,
};
use iterion_core::{ByteStream, EventDraft, NodeId, RunId, RunStore, Trust};
use iterion_studio::{Studio, StudioSettings};
use serde_json::{Value, json};

/// A served studio; dropping it stops the server.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The store's directory.
    pub dir: tempfile::TempDir,
    /// The store.
    pub store: Arc<dyn RunStore>,
    /// Its runtime (the server runs on it).
    pub rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A studio over a fresh store filled by `fill`, with `token` when given.
pub fn serve<F, Fut>(token: Option<&str>, fill: F) -> Served
where
    F: FnOnce(Arc<dyn RunStore>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn RunStore> = Arc::new(
        iterion_store_sqlite::SqliteStore::open(&dir.path().join("store")).expect("store"),
    );
    rt.block_on(fill(store.clone()));
    let settings =
        StudioSettings::new("127.0.0.1:0".parse().expect("addr"), token).expect("settings");
    let studio = rt
        .block_on(Studio::bind(store.clone(), settings))
        .expect("bind");
    let addr = studio.local_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(async move {
        studio
            .serve(async move {
                let _ = rx.await;
            })
            .await
            .expect("serve");
    });
    Served {
        addr,
        dir,
        store,
        rt,
        stop: Some(tx),
    }
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body, de-chunked.
    pub body: Vec<u8>,
}

impl Resp {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
}

/// Send `head` (and nothing else) and read the whole response.
pub fn raw(addr: SocketAddr, head: &str) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("write");
    let mut buf = Vec::new();
    // A server that closes on us mid-write still leaves its answer.
    let _ = s.read_to_end(&mut buf);
    parse(&buf)
}

/// `GET path` with `Host` set to the studio's address and extra headers.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    request(addr, "GET", path, headers)
}

/// `METHOD path` with `Host` set to the studio's address.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    raw(addr, &head)
}

fn parse(buf: &[u8]) -> Resp {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// Undo chunked transfer coding.
pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
    out
}

/// A live SSE connection, read incrementally.
pub struct Sse {
    stream: TcpStream,
    /// Everything read so far (raw, chunk framing included).
    pub seen: String,
}

impl Sse {
    /// Open `path` as an event stream.
    pub fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Self {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut head =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).expect("write");
        Self {
            stream: s,
            seen: String::new(),
        }
    }

    /// Read until `what` has been seen (or the stream closed, or 30 s):
    /// whether it was.
    pub fn until(&mut self, what: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 8192];
        while !self.seen.contains(what) && std::time::Instant::now() < deadline {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        self.seen.contains(what)
    }

    /// Whether the server closed the stream (reads to the end).
    pub fn closed(&mut self) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 8192];
        while std::time::Instant::now() < deadline {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// A run id.
pub fn id(s: &str) -> RunId {
    RunId::parse(s).expect("run id")
}

/// Create run `run` of `workflow` and move it to `running`.
pub async fn running(store: &dyn RunStore, run: &str, workflow: &str) -> RunId {
    let r = store
        .create_run(NewRun {
            id: id(run),
            workflow: workflow.into(),
            file: format!("{workflow}.iter"),
            trust: Trust::Untrusted,
            owner: None,
        })
        .await
        .expect("create");
    store
        .transition(
            &r.id,
            Transition {
                from: RunStatus::Queued,
                expected_revision: None,
                to: RunStatus::Running,
                failure: None,
            },
        )
        .await
        .expect("running");
    r.id
}

/// End a running run in `to`.
pub async fn end(store: &dyn RunStore, run: &RunId, to: RunStatus, failure: Option<FailureCode>) {
    store
        .transition(
            run,
            Transition {
                from: RunStatus::Running,
                expected_revision: None,
                to,
                failure: failure.map(|c| Failure::new(c, "it broke <b>badly</b>")),
            },
        )
        .await
        .expect("end");
}

/// Append one event.
pub async fn event(store: &dyn RunStore, run: &RunId, kind: &str, node: Option<&str>, data: Value) {
    store
        .append_event(
            run,
            EventDraft {
                kind: kind.into(),
                node_id: node.map(NodeId::new),
                data,
            },
            None,
        )
        .await
        .expect("append");
}

/// Store `content` as run file `path` and record a complete drain.
pub async fn file(store: &dyn RunStore, run: &RunId, path: &str, content: &'static [u8]) {
    let stream: ByteStream = Box::pin(futures_util::stream::iter(vec![Ok(Bytes::from_static(
        content,
    ))]));
    let p = RunFilePath::parse(path).expect("path");
    assert!(matches!(
        store.put_file(run, &p, stream, 1 << 20).await.expect("put"),
        PutOutcome::Stored(_)
    ));
    store
        .set_drain(
            run,
            DrainRecord {
                status: DrainStatus::Complete,
                reason: None,
                declined: vec![],
                stale: false,
                metered: vec![],
                updated_at: time::OffsetDateTime::now_utc(),
            },
        )
        .await
        .expect("drain");
}

/// A finished run `done-1` with a sandbox, a blocked request, hostile
/// markup in its output, log and a file name, and one stored file.
pub async fn finished_run(store: Arc<dyn RunStore>) {
    let s = store.as_ref();
    let run = running(s, "done-1", "review").await;
    event(
        s,
        &run,
        "sandbox_driver_selected",
        None,
        json!({"driver": "docker", "host": "local"}),
    )
    .await;
    event(s, &run, "sandbox_started", None, json!({"driver": "docker", "mode": "inline", "source": "workflow sandbox: block", "image": "busybox", "has_post_create": false, "container": "iterion-done-1", "limits": {"pids": 512}, "egress": "proxy"})).await;
    event(
        s,
        &run,
        "node_started",
        Some("probe"),
        json!({"kind": "tool"}),
    )
    .await;
    event(s, &run, "network_blocked", Some("probe"), json!({"host": "<img src=x onerror=alert(1)>.test", "port": 443, "reason": "blocked-by-allowlist", "rule": null, "node_id": "probe"})).await;
    event(s, &run, "node_finished", Some("probe"), json!({"duration_ms": 5, "exit_code": 0, "output": {"note": "</script><img src=x onerror=alert(2)>"}})).await;
    event(
        s,
        &run,
        "quantum_flux",
        None,
        json!({"why": "<svg onload=alert(3)>"}),
    )
    .await;
    s.append_logs(
        &run,
        vec![NewLogLine {
            stream: "stderr".into(),
            node_id: Some("probe".into()),
            line: "<img src=x onerror=alert(4)>".into(),
        }],
    )
    .await
    .expect("logs");
    file(
        s,
        &run,
        "out/<img src=x onerror=alert(5)>.txt",
        b"drained bytes\n",
    )
    .await;
    end(s, &run, RunStatus::Finished, None).await;
}
