//! A scripted Kubernetes API server on loopback, clearly a fake: it knows
//! no object, it only plays a script. Each incoming request takes the next
//! [`Step`], is checked against it (method, path, the query parameters it
//! names, a check of the JSON body) and gets the step's answer, written the
//! way a real API server writes it (JSON `Status` bodies, chunked watch
//! streams of `{"type","object"}` lines, and exec as a WebSocket speaking
//! `v5.channel.k8s.io`: stdin on channel 0, stdout 1, stderr 2, the exit
//! `Status` on 3, CLOSE signals on 255). A request the script did not
//! expect is answered 500 and recorded as a failure; [`Server::finish`]
//! fails the test on any failure or unused step.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

pub type BodyCheck = Box<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// What a step answers.
pub enum Reply {
    /// A JSON body with a status code.
    Json(u16, Value),
    /// A watch: these events, then the stream ends (the server-side
    /// `timeoutSeconds` elapsed).
    Watch(Vec<Value>),
    /// A watch that sends these events and then stays open, silent.
    WatchHang(Vec<Value>),
    /// Never answer (a hung API server).
    Hang,
    /// An exec WebSocket.
    Exec(ExecScript),
}

/// The server side of one exec.
#[derive(Default)]
pub struct ExecScript {
    /// Stdin the client must send first (the launcher's env header).
    pub expect_stdin: Vec<u8>,
    /// Read stdin until the client's CLOSE signal (or socket close) and
    /// keep it for [`Seen::stdin`].
    pub read_stdin_to_eof: bool,
    /// Frames to send, in order: (channel, bytes).
    pub output: Vec<(u8, Vec<u8>)>,
    /// Wait for this before sending the status (a long-running process).
    pub hold: Option<Arc<Notify>>,
    /// Notify this once the status was sent.
    pub done: Option<Arc<Notify>>,
    /// The exit status; `None` closes the socket without one (a broken
    /// stream).
    pub status: Option<Value>,
}

/// One expected request and its answer.
pub struct Step {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub check: Option<BodyCheck>,
    pub reply: Reply,
}

impl Step {
    pub fn new(method: Method, path: impl Into<String>, reply: Reply) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            check: None,
            reply,
        }
    }

    pub fn query(mut self, k: &str, v: &str) -> Self {
        self.query.push((k.to_owned(), v.to_owned()));
        self
    }

    pub fn check(
        mut self,
        f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some(Box::new(f));
        self
    }
}

/// A request as it arrived.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<Value>,
    /// Stdin received on an exec: the expected prefix, then (when the
    /// script reads to EOF) everything up to the client's CLOSE signal.
    pub stdin: Vec<u8>,
}

impl Seen {
    pub fn commands(&self) -> Vec<String> {
        self.query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[derive(Default)]
struct State {
    steps: VecDeque<Step>,
    seen: Vec<Seen>,
    failures: Vec<String>,
}

/// The running fake.
#[derive(Clone)]
pub struct Server {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl Server {
    pub async fn start(steps: Vec<Step>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State {
            steps: steps.into(),
            ..State::default()
        }));
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Self { url, state }
    }

    /// A kube client pointed at this server, in namespace `ns`.
    pub fn client(&self, ns: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().expect("uri"));
        config.default_namespace = ns.to_owned();
        kube::Client::try_from(config).expect("client")
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("lock").seen.clone()
    }

    /// Fail on any unexpected request or unused step.
    pub fn finish(&self) {
        let st = self.state.lock().expect("lock");
        let left: Vec<String> = st
            .steps
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert!(
            st.failures.is_empty() && left.is_empty(),
            "scripted API server: failures {:#?}; unused steps {left:#?}; seen {:#?}",
            st.failures,
            st.seen
                .iter()
                .map(|s| format!("{} {}", s.method, s.path))
                .collect::<Vec<_>>()
        );
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("response")
}

fn decode_query(q: Option<&str>) -> Vec<(String, String)> {
    let Some(q) = q else { return Vec::new() };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(v) = u8::from_str_radix(
                std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                16,
            )
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(state: Arc<Mutex<State>>, mut req: Request<Incoming>) -> Response<Body> {
    let upgrade = req
        .headers()
        .contains_key("sec-websocket-key")
        .then(|| hyper::upgrade::on(&mut req));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = decode_query(req.uri().query());
    let ws_key = req
        .headers()
        .get("sec-websocket-key")
        .map(|v| v.as_bytes().to_vec());
    let body = req.into_body();
    let raw = if ws_key.is_some() {
        Vec::new()
    } else {
        body.collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default()
    };
    let body_json: Option<Value> = serde_json::from_slice(&raw).ok();
    let step = {
        let mut st = state.lock().expect("lock");
        st.seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body_json.clone(),
            stdin: Vec::new(),
        });
        st.steps.pop_front()
    };
    let seen_index = state.lock().expect("lock").seen.len() - 1;
    let fail = |why: String| {
        state.lock().expect("lock").failures.push(why.clone());
        full(
            500,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": why, "code": 500}),
        )
    };
    let Some(step) = step else {
        return fail(format!("unexpected request {method} {path}"));
    };
    if step.method != method || step.path != path {
        return fail(format!(
            "expected {} {}, got {method} {path}",
            step.method, step.path
        ));
    }
    for (k, v) in &step.query {
        if !query.iter().any(|(qk, qv)| qk == k && qv == v) {
            return fail(format!(
                "{method} {path}: query {k}={v} missing in {query:?}"
            ));
        }
    }
    if let Some(check) = &step.check {
        match &body_json {
            None => return fail(format!("{method} {path}: no JSON body")),
            Some(b) => {
                if let Err(why) = check(b) {
                    return fail(format!("{method} {path}: body check failed: {why}"));
                }
            }
        }
    }
    match step.reply {
        Reply::Json(code, body) => full(code, &body),
        Reply::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Reply::Watch(events) => watch_body(events, false),
        Reply::WatchHang(events) => watch_body(events, true),
        Reply::Exec(script) => {
            let (Some(key), Some(upgrade)) = (ws_key, upgrade) else {
                return fail(format!("{path}: exec without a WebSocket upgrade"));
            };
            exec_upgrade(state, seen_index, &key, upgrade, script)
        }
    }
}

fn watch_body(events: Vec<Value>, hang: bool) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(16);
    tokio::spawn(async move {
        for e in events {
            let line = format!("{e}\n");
            if tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                return;
            }
        }
        if hang {
            // Hold the stream open until the client goes away.
            tx.closed().await;
        }
    });
    let stream = tokio_stream_from(rx);
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("response")
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Answer 101 (v5.channel.k8s.io) and play the exec script on the
/// upgraded connection.
fn exec_upgrade(
    state: Arc<Mutex<State>>,
    seen_index: usize,
    key: &[u8],
    upgrade: hyper::upgrade::OnUpgrade,
    script: ExecScript,
) -> Response<Body> {
    tokio::spawn(async move {
        let result = match upgrade.await {
            Err(e) => Err(format!("upgrade failed: {e}")),
            Ok(upgraded) => {
                let mut ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                play_exec(&mut ws, script).await
            }
        };
        let mut st = state.lock().expect("lock");
        match result {
            Ok(stdin) => st.seen[seen_index].stdin = stdin,
            Err(why) => st.failures.push(format!("exec: {why}")),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header(
            "sec-websocket-accept",
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(key),
        )
        .header("sec-websocket-protocol", "v5.channel.k8s.io")
        .body(Full::new(Bytes::new()).boxed())
        .expect("response")
}

async fn play_exec<S>(ws: &mut WebSocketStream<S>, script: ExecScript) -> Result<Vec<u8>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut stdin = Vec::new();
    // The expected prefix (env header) first.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut closed = false;
    while stdin.len() < script.expect_stdin.len() {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| "timed out waiting for stdin".to_owned())?;
        match msg {
            Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                stdin.extend_from_slice(&b[1..])
            }
            Some(Ok(Message::Binary(b))) if b.as_ref() == [255, 0] => {
                closed = true;
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => break,
        }
    }
    if !stdin.starts_with(&script.expect_stdin) {
        return Err(format!(
            "stdin {:?} does not start with {:?}",
            String::from_utf8_lossy(&stdin),
            String::from_utf8_lossy(&script.expect_stdin)
        ));
    }
    if script.read_stdin_to_eof && !closed {
        loop {
            match tokio::time::timeout_at(deadline, ws.next()).await {
                Err(_) => return Err("timed out waiting for stdin EOF".to_owned()),
                Ok(Some(Ok(Message::Binary(b)))) if b.first() == Some(&0) => {
                    stdin.extend_from_slice(&b[1..])
                }
                Ok(Some(Ok(Message::Binary(b)))) if b.as_ref() == [255, 0] => break,
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(None) => break,
            }
        }
    }
    for (channel, data) in script.output {
        let mut frame = vec![channel];
        frame.extend_from_slice(&data);
        ws.send(Message::binary(frame))
            .await
            .map_err(|e| e.to_string())?;
    }
    if let Some(hold) = &script.hold {
        hold.notified().await;
    }
    if let Some(status) = &script.status {
        let mut frame = vec![3u8];
        frame.extend_from_slice(status.to_string().as_bytes());
        ws.send(Message::binary(frame))
            .await
            .map_err(|e| e.to_string())?;
    }
    let _ = ws.close(None).await;
    if let Some(done) = &script.done {
        done.notify_one();
    }
    Ok(stdin)
}
