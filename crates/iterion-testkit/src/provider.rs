//! A scripted LLM provider on a loopback socket: it speaks the Anthropic
//! Messages wire format (`POST /v1/messages`, with `?beta=true` as the
//! claude CLI calls it; streamed as `message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, or
//! whole) and OpenAI chat completions (`POST …/chat/completions`, streamed
//! chunks then `[DONE]`, or whole), plays a script of [`Turn`]s — one per
//! model request — and records every request, headers included, so a test
//! can assert what the provider received (the key, and nothing else).
//!
//! No LLM is reachable from these machines; this is the model every agent
//! test talks to, over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// One scripted model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// Plain text, end of turn.
    Text(String),
    /// Call these tools `(name, input)`.
    ToolCalls(Vec<(String, Value)>),
    /// Answer with this object the way the request asked for structured
    /// output: the forced tool, the CLI's `StructuredOutput` tool, an
    /// OpenAI `json_schema` response format, or else as JSON text.
    Answer(Value),
    /// A 200 whose body is not the wire format.
    Garbage,
    /// An error status with a JSON error body.
    Status(u16, String),
}

impl Turn {
    /// Shorthand for one tool call.
    pub fn tool(name: &str, input: Value) -> Self {
        Self::ToolCalls(vec![(name.to_owned(), input)])
    }

    /// Shorthand for text.
    pub fn text(t: &str) -> Self {
        Self::Text(t.to_owned())
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query (`/v1/messages?beta=true`).
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Value::Null` if it was not JSON).
    pub body: Value,
    /// The raw body.
    pub raw: String,
    /// When the request head arrived.
    pub received_at: std::time::Instant,
    /// Time the provider spent answering (head received → response built).
    pub service: std::time::Duration,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether this is a model call (not a side request of a CLI).
    pub fn is_model_call(&self) -> bool {
        self.method == "POST"
            && (self.path.starts_with("/v1/messages?")
                || self.path == "/v1/messages"
                || self.path.ends_with("/chat/completions")
                || self.is_bedrock_invoke())
    }

    /// A Bedrock `InvokeModel` (`POST /model/<id>/invoke`): answered in
    /// the Anthropic Messages format, whole.
    pub fn is_bedrock_invoke(&self) -> bool {
        self.path.starts_with("/model/") && self.path.ends_with("/invoke")
    }

    /// The tool results this request carries (content texts).
    pub fn tool_results(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in self
            .body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if m.get("role").and_then(Value::as_str) == Some("tool") {
                out.push(
                    m.get("content")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
            for b in m
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                    let c = match b.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(parts)) => parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join(""),
                        _ => String::new(),
                    };
                    out.push(c);
                }
            }
        }
        out
    }
}

#[derive(Default)]
struct State {
    turns: VecDeque<Turn>,
    requests: Vec<RecordedRequest>,
    ids: u64,
    /// Once the script is played, answer every model call from the
    /// request itself (see [`auto_turn`]).
    auto: bool,
}

/// The running provider; stops when dropped.
pub struct ScriptedProvider {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Tokens every scripted answer reports.
pub const INPUT_TOKENS: u64 = 100;
pub const OUTPUT_TOKENS: u64 = 20;

impl ScriptedProvider {
    /// Listen on 127.0.0.1 (ephemeral port) with this script.
    pub async fn start(turns: Vec<Turn>) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), turns).await
    }

    /// Listen on `addr` with this script.
    pub async fn start_on(addr: SocketAddr, turns: Vec<Turn>) -> Self {
        Self::serve(addr, turns, None).await
    }

    /// Listen on `addr` as a model that needs no script: each model call
    /// is answered from the request alone (see [`auto_turn`]) — the first
    /// call of a conversation that offers a shell tool calls it once, every
    /// other call answers with the requested output schema filled in. This
    /// is how a whole corpus of workflows is run without writing a script
    /// per node.
    pub async fn start_auto_on(addr: SocketAddr) -> Self {
        let p = Self::serve(addr, Vec::new(), None).await;
        p.state.lock().unwrap().auto = true;
        p
    }

    /// Listen on `addr` over TLS with `config` (HTTP/1.1): a provider
    /// behind an `https://` base URL, as the public APIs are.
    pub async fn start_tls_on(
        addr: SocketAddr,
        turns: Vec<Turn>,
        config: Arc<tokio_rustls::rustls::ServerConfig>,
    ) -> Self {
        Self::serve(addr, turns, Some(tokio_rustls::TlsAcceptor::from(config))).await
    }

    async fn serve(
        addr: SocketAddr,
        turns: Vec<Turn>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind(addr)
            .await
            .expect("bind scripted provider");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State {
            turns: turns.into(),
            ..State::default()
        }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(st.clone(), req));
                    let http = http1::Builder::new();
                    let _ = match tls {
                        None => http.serve_connection(TokioIo::new(stream), svc).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(tls) => http.serve_connection(TokioIo::new(tls), svc).await,
                            Err(_) => return,
                        },
                    };
                });
            }
        });
        Self { addr, state, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Add turns at the end of the script.
    pub fn push(&self, turn: Turn) {
        self.state.lock().unwrap().turns.push_back(turn);
    }

    /// Turns not yet played.
    pub fn remaining(&self) -> usize {
        self.state.lock().unwrap().turns.len()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The model calls so far.
    pub fn model_calls(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_model_call)
            .collect()
    }

    /// The client's side of each round after the first: from the moment
    /// the provider answered one model call to the arrival of the next
    /// (parse, tools, next request, the network in between).
    pub fn client_gaps(&self) -> Vec<std::time::Duration> {
        self.model_calls()
            .windows(2)
            .map(|w| {
                w[1].received_at
                    .saturating_duration_since(w[0].received_at + w[0].service)
            })
            .collect()
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let received = std::time::Instant::now();
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let raw = req
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
    let mut recorded = RecordedRequest {
        method,
        path: path.clone(),
        headers,
        body: body.clone(),
        raw,
        received_at: received,
        service: std::time::Duration::ZERO,
    };
    let is_model = recorded.is_model_call();
    let (turn, id) = {
        let mut s = state.lock().unwrap();
        s.ids += 1;
        let id = s.ids;
        let turn = if is_model {
            s.turns
                .pop_front()
                .or_else(|| s.auto.then(|| auto_turn(&body)))
        } else {
            None
        };
        (turn, id)
    };
    // Like a real API's unknown-path 404 that quotes what it got: the
    // request line and every header (issue 31 item 3 performs the attack
    // on this echo).
    let echo = std::iter::once(format!("{} {}", recorded.method, recorded.path))
        .chain(recorded.headers.iter().map(|(k, v)| format!("{k}: {v}")))
        .collect::<Vec<_>>()
        .join("\n");
    let response = respond(turn, is_model, &path, &body, id, &echo);
    recorded.service = received.elapsed();
    state.lock().unwrap().requests.push(recorded);
    Ok(response)
}

fn respond(
    turn: Option<Turn>,
    is_model: bool,
    path: &str,
    body: &Value,
    id: u64,
    echo: &str,
) -> Response<Full<Bytes>> {
    let anthropic = path.starts_with("/v1/messages")
        || (path.starts_with("/model/") && path.ends_with("/invoke"));
    if !is_model {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"type": "error", "error": {"type": "not_found_error", "message": format!("not scripted: {echo}")}}),
        );
    }
    let Some(turn) = turn else {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"type": "error", "error": {"type": "api_error", "message": "scripted provider: script exhausted"}}),
        );
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    match turn {
        Turn::Status(code, msg) => json_response(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({"type": "error", "error": {"type": "scripted_error", "message": msg}}),
        ),
        Turn::Garbage => {
            let text = if stream {
                "event: message_start\ndata: {this is not json\n\n"
            } else {
                "<html>gateway says hi</html>"
            };
            Response::builder()
                .status(StatusCode::OK)
                .header(
                    "content-type",
                    if stream {
                        "text/event-stream"
                    } else {
                        "application/json"
                    },
                )
                .body(Full::new(Bytes::from(text)))
                .unwrap()
        }
        turn => {
            let blocks = blocks(&turn, body, id);
            match (anthropic, stream) {
                (true, false) => json_response(StatusCode::OK, anthropic_whole(body, &blocks, id)),
                (true, true) => sse_response(anthropic_stream(body, &blocks, id)),
                (false, false) => json_response(StatusCode::OK, openai_whole(&blocks, id)),
                (false, true) => sse_response(openai_stream(&blocks, id)),
            }
        }
    }
}

/// A neutral answer: text or tool uses.
enum Out {
    Text(String),
    Tool {
        id: String,
        name: String,
        input: Value,
    },
}

fn blocks(turn: &Turn, req: &Value, id: u64) -> Vec<Out> {
    match turn {
        Turn::Text(t) => vec![Out::Text(t.clone())],
        Turn::ToolCalls(calls) => calls
            .iter()
            .enumerate()
            .map(|(i, (name, input))| Out::Tool {
                id: format!("toolu_{id}_{i}"),
                name: name.clone(),
                input: input.clone(),
            })
            .collect(),
        Turn::Answer(v) => {
            let forced = req.pointer("/tool_choice/name").and_then(Value::as_str);
            let offers = |n: &str| {
                req.get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|ts| {
                        ts.iter()
                            .any(|t| t.get("name").and_then(Value::as_str) == Some(n))
                    })
            };
            let tool = forced
                .map(ToOwned::to_owned)
                .or_else(|| offers("StructuredOutput").then(|| "StructuredOutput".to_owned()));
            match tool {
                Some(name) => vec![Out::Tool {
                    id: format!("toolu_{id}_s"),
                    name,
                    input: v.clone(),
                }],
                None => vec![Out::Text(v.to_string())],
            }
        }
        Turn::Garbage | Turn::Status(..) => Vec::new(),
    }
}

/// The command the automatic model runs through the shell tool.
pub const AUTO_SHELL_COMMAND: &str = "echo scripted-shell-call";

/// The automatic model's answer to one request: call the offered shell
/// tool (`bash`, `Bash`, `shell`) once per conversation, unless the request
/// forces another tool or forbids tools; otherwise answer with the output
/// schema filled in ([`fill_schema`]), found as the forced tool's input
/// schema, the CLI's `StructuredOutput` tool, an OpenAI `json_schema`
/// response format, or a JSON schema quoted in the system prompt after
/// "matching this schema:"; with no schema at all, a short text.
pub fn auto_turn(req: &Value) -> Turn {
    let tools: Vec<&Value> = req
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| ts.iter().collect())
        .unwrap_or_default();
    let tool_name = |t: &Value| -> Option<String> {
        t.get("name")
            .or_else(|| t.pointer("/function/name"))
            .and_then(Value::as_str)
            .map(ToOwned::to_owned)
    };
    let tool_schema = |t: &Value| -> Option<Value> {
        t.get("input_schema")
            .or_else(|| t.pointer("/function/parameters"))
            .cloned()
    };
    let forced = req
        .pointer("/tool_choice/name")
        .or_else(|| req.pointer("/tool_choice/function/name"))
        .and_then(Value::as_str);
    let tools_forbidden = req.get("tool_choice").and_then(Value::as_str) == Some("none");
    // The CLI sends the result of its `StructuredOutput` call back and
    // waits for the turn to end.
    if assistant_called(req, "StructuredOutput") {
        return Turn::Text("done".to_owned());
    }
    let already_called = messages_carry_tool_results(req);
    if let Some(shell) = tools
        .iter()
        .filter_map(|t| tool_name(t))
        .find(|n| matches!(n.as_str(), "bash" | "Bash" | "shell"))
        .filter(|_| forced.is_none() && !tools_forbidden && !already_called)
    {
        let mut input = json!({"command": AUTO_SHELL_COMMAND});
        if shell == "Bash" {
            input["description"] = json!("scripted shell call");
        }
        return Turn::ToolCalls(vec![(shell, input)]);
    }
    let by_name = |n: &str| {
        tools
            .iter()
            .find(|t| tool_name(t).as_deref() == Some(n))
            .and_then(|t| tool_schema(t))
    };
    let schema = forced
        .and_then(by_name)
        .or_else(|| by_name("StructuredOutput"))
        .or_else(|| req.pointer("/response_format/json_schema/schema").cloned())
        .or_else(|| schema_in_prompt(req));
    match schema {
        Some(s) => Turn::Answer(fill_schema(&s)),
        None => Turn::Text("done".to_owned()),
    }
}

fn assistant_called(req: &Value, tool: &str) -> bool {
    req.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .flat_map(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .any(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool_use")
                && b.get("name").and_then(Value::as_str) == Some(tool)
        })
}

fn messages_carry_tool_results(req: &Value) -> bool {
    req.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|m| {
            m.get("role").and_then(Value::as_str) == Some("tool")
                || m.get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        })
}

/// A JSON schema quoted in the system prompt (string or text blocks, or an
/// OpenAI system message) after "matching this schema:".
fn schema_in_prompt(req: &Value) -> Option<Value> {
    let mut texts: Vec<String> = Vec::new();
    match req.get("system") {
        Some(Value::String(s)) => texts.push(s.clone()),
        Some(Value::Array(parts)) => texts.extend(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str).map(ToOwned::to_owned)),
        ),
        _ => {}
    }
    for m in req
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(s) = m.get("content").and_then(Value::as_str) {
            texts.push(s.to_owned());
        }
    }
    texts.iter().find_map(|t| {
        let at = t.find("matching this schema:")? + "matching this schema:".len();
        let rest = t[at..].trim_start();
        serde_json::Deserializer::from_str(rest)
            .into_iter::<Value>()
            .next()?
            .ok()
    })
}

/// A value that satisfies `schema` (the subset of JSON Schema the engine
/// emits): objects get every property, strings the first `enum` value or
/// a placeholder, numbers their minimum (or 1), booleans `true` — a judge's
/// `approved`, so review loops end — except `needs_human_input`, which is
/// `false` so an `llm_or_human` node answers itself; arrays one item.
pub fn fill_schema(schema: &Value) -> Value {
    fill(schema, "")
}

fn fill(schema: &Value, key: &str) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(first) = schema.get(k).and_then(Value::as_array).and_then(|a| {
            a.iter()
                .find(|s| s.get("type").and_then(Value::as_str) != Some("null"))
        }) {
            return fill(first, key);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "string".to_owned(),
    };
    match ty.as_str() {
        "object" => {
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    out.insert(k.clone(), fill(s, k));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let item = schema.get("items").cloned().unwrap_or(json!({}));
            json!([fill(&item, key)])
        }
        "boolean" => json!(key != "needs_human_input"),
        "integer" => schema.get("minimum").cloned().unwrap_or_else(|| json!(1)),
        "number" => schema.get("minimum").cloned().unwrap_or_else(|| json!(1.0)),
        "null" => Value::Null,
        _ => json!(format!("scripted {key}")),
    }
}

fn stop_of(blocks: &[Out]) -> (&'static str, &'static str) {
    if blocks.iter().any(|b| matches!(b, Out::Tool { .. })) {
        ("tool_use", "tool_calls")
    } else {
        ("end_turn", "stop")
    }
}

fn model_of(req: &Value) -> String {
    req.get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_owned()
}

fn anthropic_block(b: &Out) -> Value {
    match b {
        Out::Text(t) => json!({"type": "text", "text": t}),
        Out::Tool { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
    }
}

fn anthropic_whole(req: &Value, blocks: &[Out], id: u64) -> Value {
    json!({
        "id": format!("msg_{id}"),
        "type": "message",
        "role": "assistant",
        "model": model_of(req),
        "content": blocks.iter().map(anthropic_block).collect::<Vec<_>>(),
        "stop_reason": stop_of(blocks).0,
        "stop_sequence": null,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
    })
}

fn anthropic_stream(req: &Value, blocks: &[Out], id: u64) -> String {
    let mut out = String::new();
    let mut ev = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_{id}"), "type": "message", "role": "assistant",
            "model": model_of(req), "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}),
    );
    ev("ping", json!({"type": "ping"}));
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Out::Text(t) => {
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                let mid = t
                    .char_indices()
                    .nth(t.chars().count() / 2)
                    .map_or(t.len(), |(p, _)| p);
                for piece in [&t[..mid], &t[mid..]] {
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}}),
                    );
                }
            }
            Out::Tool { id, name, input } => {
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                );
                let js = input.to_string();
                let mid = js
                    .char_indices()
                    .nth(js.chars().count() / 2)
                    .map_or(js.len(), |(p, _)| p);
                for piece in [&js[..mid], &js[mid..]] {
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    );
                }
            }
        }
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_of(blocks).0, "stop_sequence": null}, "usage": {"output_tokens": OUTPUT_TOKENS}}),
    );
    ev("message_stop", json!({"type": "message_stop"}));
    out
}

fn openai_message(blocks: &[Out]) -> Value {
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            Out::Text(t) => Some(t.as_str()),
            Out::Tool { .. } => None,
        })
        .collect();
    let calls: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            Out::Tool { id, name, input } => Some(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}})),
            Out::Text(_) => None,
        })
        .collect();
    let mut m = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

fn openai_whole(blocks: &[Out], id: u64) -> Value {
    json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "choices": [{"index": 0, "message": openai_message(blocks), "finish_reason": stop_of(blocks).1}],
        "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS},
    })
}

fn openai_stream(blocks: &[Out], id: u64) -> String {
    let mut out = String::new();
    let mut chunk = |v: Value| out.push_str(&format!("data: {v}\n\n"));
    let base = |delta: Value, finish: Value| json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    chunk(base(json!({"role": "assistant"}), Value::Null));
    let mut tool_index = 0;
    for b in blocks {
        match b {
            Out::Text(t) => {
                let mid = t
                    .char_indices()
                    .nth(t.chars().count() / 2)
                    .map_or(t.len(), |(p, _)| p);
                for piece in [&t[..mid], &t[mid..]] {
                    chunk(base(json!({"content": piece}), Value::Null));
                }
            }
            Out::Tool { id, name, input } => {
                let js = input.to_string();
                let mid = js
                    .char_indices()
                    .nth(js.chars().count() / 2)
                    .map_or(js.len(), |(p, _)| p);
                chunk(base(
                    json!({"tool_calls": [{"index": tool_index, "id": id, "type": "function", "function": {"name": name, "arguments": &js[..mid]}}]}),
                    Value::Null,
                ));
                chunk(base(
                    json!({"tool_calls": [{"index": tool_index, "function": {"arguments": &js[mid..]}}]}),
                    Value::Null,
                ));
                tool_index += 1;
            }
        }
    }
    chunk(base(json!({}), json!(stop_of(blocks).1)));
    chunk(
        json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}),
    );
    out.push_str("data: [DONE]\n\n");
    out
}

fn json_response(status: StatusCode, v: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .unwrap()
}

fn sse_response(text: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Full::new(Bytes::from(text)))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_calls_the_shell_once_then_fills_the_schema_from_the_prompt() {
        let schema = json!({"type": "object", "properties": {
            "approved": {"type": "boolean"},
            "needs_human_input": {"type": "boolean"},
            "route": {"type": "string", "enum": ["b", "a"]},
            "n": {"type": "integer", "minimum": 3},
            "items": {"type": "array", "items": {"type": "string"}},
        }});
        let system =
            format!("Work.\n\nOUTPUT FORMAT: ... matching this schema:\n{schema}\nNo markdown.");
        let first = json!({"system": system, "tools": [{"name": "read_file"}, {"name": "bash"}],
            "messages": [{"role": "user", "content": "go"}]});
        assert_eq!(
            auto_turn(&first),
            Turn::tool("bash", json!({"command": AUTO_SHELL_COMMAND}))
        );
        let second = json!({"system": system, "tools": [{"name": "bash"}],
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]});
        assert_eq!(
            auto_turn(&second),
            Turn::Answer(
                json!({"approved": true, "needs_human_input": false, "route": "b", "n": 3, "items": ["scripted items"]})
            )
        );
    }

    #[test]
    fn auto_answers_a_forced_tool_or_an_openai_response_format() {
        let forced = json!({"tools": [{"name": "bash", "input_schema": {}},
            {"name": "structured_output", "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}}}],
            "tool_choice": {"type": "tool", "name": "structured_output"}, "messages": []});
        assert_eq!(auto_turn(&forced), Turn::Answer(json!({"x": 1.0})));
        let openai = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "o",
            "schema": {"type": "object", "properties": {"s": {"type": ["string", "null"]}}}}}, "messages": []});
        assert_eq!(auto_turn(&openai), Turn::Answer(json!({"s": "scripted s"})));
        assert_eq!(auto_turn(&json!({"messages": []})), Turn::text("done"));
    }
}
