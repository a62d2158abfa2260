//! The runner side: `iterion __claw-runner` inside the container. It reads
//! one `task`, runs the claw loop with the built-ins executing here (so a
//! `bash` call runs in the container), forwards launcher-side tool calls
//! to the host as `tool_call` messages, streams `event`s, and ends with
//! one `result`. A protocol error (malformed line, oversize line, a second
//! `task`, a wrong protocol version) ends the node with a typed error in
//! that `result` — the host never waits on a runner that gave up.
//!
//! The provider credentials arrive on this process's env (the exec's env).
//! The process makes itself non-dumpable first, so a tool's child cannot
//! read them from `/proc/<pid>/environ`, and `bash` children get an env
//! without them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iterion_core::EventKind;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::protocol::{
    BuiltinTask, Direction, Line, LineSplitter, PROTOCOL_VERSION, RunnerResult, RunnerTask,
    ToolCallData, ToolResultData, WireMessage, decode, encode, too_long,
};
use crate::claw::{ClawLoop, bash_timeout};
use crate::credentials::ProviderCredentials;
use crate::dispatch::{LauncherTools, LocalDispatch};
use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::events::{AgentEventSink, redact_event};
use crate::http::{HttpSettings, ResolverMode};
use crate::tools::builtin::{ToolArea, ToolContext};
use crate::tools::{ToolSpec, placement_of};

/// Exit codes of the runner process.
pub mod exit {
    /// The node produced its output.
    pub const OK: i32 = 0;
    /// The node failed (typed error in the result).
    pub const FAILED: i32 = 1;
    /// The channel broke (typed error in the result when it could be sent).
    pub const PROTOCOL: i32 = 2;
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<ToolResultData>>>>;

/// Serve the process's stdio: the body of `iterion __claw-runner`.
pub async fn serve_stdio() -> i32 {
    let workdir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        EnvSnapshot::from_process(),
        workdir,
    )
    .await
}

/// Serve one node over `input`/`output` (stdin/stdout of the runner).
pub async fn serve<R, W>(mut input: R, output: W, env: EnvSnapshot, workdir: PathBuf) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);

    let (out_tx, out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_lines(output, out_rx));
    let send_result = |result: RunnerResult| {
        let msg = WireMessage::Result {
            data: Box::new(result),
        };
        match encode(&msg, Direction::RunnerToHost) {
            Ok(line) => {
                let _ = out_tx.send(line);
            }
            Err(e) => {
                // An outcome too large for one line becomes that error.
                if let Ok(line) = encode(
                    &WireMessage::Result {
                        data: Box::new(RunnerResult::Err(e)),
                    },
                    Direction::RunnerToHost,
                ) {
                    let _ = out_tx.send(line);
                }
            }
        }
    };

    // The first line must be the task.
    let mut splitter = LineSplitter::default();
    let first = match read_first_line(&mut input, &mut splitter).await {
        Ok(line) => line,
        Err(e) => {
            send_result(RunnerResult::Err(e));
            return finish(out_tx, writer, exit::PROTOCOL).await;
        }
    };
    let task = match decode(&first) {
        Ok(WireMessage::Task { data }) if data.protocol == PROTOCOL_VERSION => data,
        Ok(WireMessage::Builtin { data }) if data.protocol == PROTOCOL_VERSION => {
            let result = run_builtin(&data, &env, workdir).await;
            send_result(RunnerResult::Tool(fit_line(result)));
            return finish(out_tx, writer, exit::OK).await;
        }
        Ok(WireMessage::Builtin { data }) => {
            send_result(RunnerResult::Err(AgentError::RunnerProtocol {
                detail: format!(
                    "protocol version {} from the host, this runner speaks {PROTOCOL_VERSION}",
                    data.protocol
                ),
            }));
            return finish(out_tx, writer, exit::PROTOCOL).await;
        }
        Ok(WireMessage::Task { data }) => {
            send_result(RunnerResult::Err(AgentError::RunnerProtocol {
                detail: format!(
                    "protocol version {} from the host, this runner speaks {PROTOCOL_VERSION}",
                    data.protocol
                ),
            }));
            return finish(out_tx, writer, exit::PROTOCOL).await;
        }
        Ok(_) => {
            send_result(RunnerResult::Err(AgentError::RunnerProtocol {
                detail: "the first message must be a task".to_owned(),
            }));
            return finish(out_tx, writer, exit::PROTOCOL).await;
        }
        Err(e) => {
            send_result(RunnerResult::Err(e));
            return finish(out_tx, writer, exit::PROTOCOL).await;
        }
    };

    let cancel = CancellationToken::new();
    let pending: Pending = Arc::default();
    let fatal: Arc<Mutex<Option<AgentError>>> = Arc::default();
    let reader = tokio::spawn(read_loop(
        input,
        splitter,
        pending.clone(),
        fatal.clone(),
        cancel.clone(),
    ));

    let result = run_task(&task, &env, workdir, &out_tx, &pending, &cancel).await;
    reader.abort();
    let protocol_error = fatal.lock().ok().and_then(|mut f| f.take());
    let (result, code) = match (result, protocol_error) {
        (_, Some(e)) => (RunnerResult::Err(e), exit::PROTOCOL),
        (Ok(outcome), None) => (RunnerResult::Ok(outcome), exit::OK),
        (Err(e), None) => (RunnerResult::Err(e), exit::FAILED),
    };
    send_result(result);
    finish(out_tx, writer, code).await
}

async fn finish(
    out_tx: mpsc::UnboundedSender<Vec<u8>>,
    writer: tokio::task::JoinHandle<()>,
    code: i32,
) -> i32 {
    drop(out_tx);
    let _ = writer.await;
    code
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = rx.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

async fn read_first_line<R: AsyncRead + Unpin>(
    input: &mut R,
    splitter: &mut LineSplitter,
) -> Result<Vec<u8>, AgentError> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = input
            .read(&mut buf)
            .await
            .map_err(|e| AgentError::RunnerProtocol {
                detail: format!("read task: {e}"),
            })?;
        if n == 0 {
            return Err(AgentError::RunnerProtocol {
                detail: "stdin closed before a task arrived".to_owned(),
            });
        }
        let mut lines = splitter.feed(&buf[..n]).into_iter();
        match lines.next() {
            None => {}
            Some(Line::TooLong { size }) => return Err(too_long(size, Direction::HostToRunner)),
            Some(Line::Complete(line)) => {
                if lines.next().is_some() {
                    return Err(AgentError::RunnerProtocol {
                        detail: "a message arrived before the task was acknowledged".to_owned(),
                    });
                }
                return Ok(line);
            }
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut input: R,
    mut splitter: LineSplitter,
    pending: Pending,
    fatal: Arc<Mutex<Option<AgentError>>>,
    cancel: CancellationToken,
) {
    let fail = |e: AgentError| {
        if let Ok(mut f) = fatal.lock() {
            f.get_or_insert(e);
        }
        cancel.cancel();
        // Dropping the senders unblocks every waiting tool call.
        if let Ok(mut p) = pending.lock() {
            p.clear();
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf).await {
            Ok(0) | Err(_) => {
                // The host is gone: nobody will read a result.
                cancel.cancel();
                if let Ok(mut p) = pending.lock() {
                    p.clear();
                }
                return;
            }
            Ok(n) => n,
        };
        for line in splitter.feed(&buf[..n]) {
            let line = match line {
                Line::Complete(l) => l,
                Line::TooLong { size } => return fail(too_long(size, Direction::HostToRunner)),
            };
            match decode(&line) {
                Ok(WireMessage::ToolResult { id, data }) => {
                    let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(w) = waiter {
                        let _ = w.send(data);
                    }
                }
                Ok(WireMessage::Cancel) => cancel.cancel(),
                Ok(other) => {
                    return fail(AgentError::RunnerProtocol {
                        detail: format!("unexpected message from the host: {other:?}")
                            .chars()
                            .take(160)
                            .collect(),
                    });
                }
                Err(e) => return fail(e),
            }
        }
    }
}

async fn run_task(
    msg: &RunnerTask,
    env: &EnvSnapshot,
    workdir: PathBuf,
    out: &mpsc::UnboundedSender<Vec<u8>>,
    pending: &Pending,
    cancel: &CancellationToken,
) -> Result<crate::task::AgentOutcome, AgentError> {
    // The host placed every tool; a runner re-checks, deny wins.
    for entry in &msg.tools {
        if placement_of(&entry.name) != entry.placement() {
            return Err(AgentError::ToolRefused {
                tool: entry.name.clone(),
                reason: "its class disagrees with the placement table".to_owned(),
            });
        }
    }
    let creds = ProviderCredentials::collect(env);
    let redactor = creds.redactor();
    let (model, client) =
        crate::claw::prepare_client(&msg.task, &creds, env, ResolverMode::HostsFile)?;
    let ctx = box_tool_context(env, workdir, cancel.clone())?;
    let channel = Channel {
        out: out.clone(),
        pending: pending.clone(),
        next: std::sync::atomic::AtomicU64::new(1),
        cancel: cancel.clone(),
    };
    let dispatch = LocalDispatch {
        ctx,
        launcher: Some(&channel),
    };
    let sink = WireSink {
        out: out.clone(),
        redactor,
    };
    ClawLoop {
        task: &msg.task,
        model,
        client,
        tools: msg.tools.clone(),
        dispatch: &dispatch,
        sink: &sink,
        cancel: cancel.clone(),
        in_sandbox: true,
    }
    .run()
    .await
}

/// What a built-in sees inside the box.
fn box_tool_context(
    env: &EnvSnapshot,
    workdir: PathBuf,
    cancel: CancellationToken,
) -> Result<ToolContext, AgentError> {
    Ok(ToolContext {
        workdir,
        area: ToolArea::Container,
        http: HttpSettings::from_env(env, ResolverMode::HostsFile).client()?,
        bash_timeout: bash_timeout(env),
        scrub_env: crate::agent::scrub_list(),
        cancel,
    })
}

/// A tool node's built-in, run here (in the container). Only built-ins
/// the placement table puts in the sandbox are run; anything else is the
/// host's.
async fn run_builtin(msg: &BuiltinTask, env: &EnvSnapshot, workdir: PathBuf) -> ToolResultData {
    let answer = match crate::tools::Builtin::parse(&msg.name) {
        Some(b) if placement_of(&msg.name) == crate::tools::Placement::Sandbox => {
            match box_tool_context(env, workdir, CancellationToken::new()) {
                Ok(ctx) => crate::tools::builtin::execute(b, &msg.input, &ctx).await,
                Err(e) => Err(e.to_string()),
            }
        }
        _ => Err(format!("{} is not a built-in of the box", msg.name)),
    };
    let (content, is_error) = match answer {
        Ok(c) => (c, false),
        Err(e) => (e, true),
    };
    ToolResultData {
        content,
        is_error,
        truncated: false,
    }
}

/// A built-in's answer cut (with the marker) so its `result` line fits
/// the channel's cap.
fn fit_line(mut data: ToolResultData) -> ToolResultData {
    let mut budget = super::protocol::MAX_LINE_BYTES.saturating_sub(4096);
    loop {
        let msg = WireMessage::Result {
            data: Box::new(RunnerResult::Tool(data.clone())),
        };
        if encode(&msg, Direction::RunnerToHost).is_ok() || budget < 4096 {
            return data;
        }
        data.content = crate::claw::truncate_tool_result(data.content, budget);
        data.truncated = true;
        budget /= 2;
    }
}

/// Launcher-side tools, reached over the channel.
struct Channel {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    next: std::sync::atomic::AtomicU64,
    cancel: CancellationToken,
}

#[async_trait]
impl LauncherTools for Channel {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    async fn call(&self, name: &str, input: &Value) -> Result<String, String> {
        let id = format!(
            "call-{}",
            self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let msg = WireMessage::ToolCall {
            id: id.clone(),
            data: ToolCallData {
                name: name.to_owned(),
                input: input.clone(),
            },
        };
        let line = encode(&msg, Direction::RunnerToHost).map_err(|e| e.to_string())?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id.clone(), tx);
        }
        if self.out.send(line).is_err() {
            return Err("the channel to the host is closed".to_owned());
        }
        tokio::select! {
            reply = rx => match reply {
                Ok(r) if r.is_error => Err(r.content),
                Ok(r) => Ok(r.content),
                Err(_) => Err("the channel to the host closed before the tool answered".to_owned()),
            },
            () = self.cancel.cancelled() => Err("cancelled".to_owned()),
        }
    }
}

/// Events, as `event` lines (redacted here: the line leaves the box).
struct WireSink {
    out: mpsc::UnboundedSender<Vec<u8>>,
    redactor: crate::credentials::Redactor,
}

impl AgentEventSink for WireSink {
    fn emit(&self, event: EventKind) {
        let msg = WireMessage::Event {
            data: redact_event(&self.redactor, event),
        };
        if let Ok(line) = encode(&msg, Direction::RunnerToHost) {
            let _ = self.out.send(line);
        }
    }
}
