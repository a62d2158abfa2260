//! The host side of the runner: exec `iterion __claw-runner` in the
//! sandbox with stdin held open and the provider credentials on the exec's
//! env, send the `task`, serve the runner's launcher-side `tool_call`s,
//! forward its `event`s (agent events only, redacted), and return its
//! `result`. Cancellation kills the runner; a protocol violation, an
//! oversize line or an exit without a result is a typed error — never a
//! hang.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use iterion_core::{ExecRequest, ExecSession, OutputStream, SandboxRun};
use tokio_util::sync::CancellationToken;

use super::binary::{RUNNER_CONTAINER_PATH, RUNNER_SUBCOMMAND};
use super::protocol::{
    Direction, Line, LineSplitter, PROTOCOL_VERSION, RunnerResult, RunnerTask, ToolResultData,
    WireMessage, decode, encode, too_long,
};
use crate::credentials::Redactor;
use crate::dispatch::LauncherTools;
use crate::error::{AgentError, bounded};
use crate::events::{AgentEventSink, is_agent_event, redact_event};
use crate::task::{AgentOutcome, AgentTask};
use crate::tools::{Placement, ToolEntry};

/// Bytes of runner stderr kept for an error report.
const STDERR_TAIL: usize = 8 * 1024;

/// Where the runner binary comes from in this sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerBinary {
    /// Already at [`RUNNER_CONTAINER_PATH`]: bound read-only by the driver
    /// (see [`super::runner_mount`]) or baked into the image.
    InSandbox,
    /// Copy this host binary in through [`SandboxRun::import`] when the
    /// sandbox does not have it yet (a bindless engine).
    Import(PathBuf),
}

/// What the host side needs besides the session.
pub(crate) struct Launch<'a> {
    pub task: &'a AgentTask,
    pub tools: Vec<ToolEntry>,
    pub launcher: Option<&'a dyn LauncherTools>,
    pub sink: &'a dyn AgentEventSink,
    pub redactor: Redactor,
    pub cancel: CancellationToken,
}

/// Make sure the runner is executable inside the sandbox.
pub(crate) async fn ensure_runner(
    run: &dyn SandboxRun,
    binary: &RunnerBinary,
) -> Result<(), AgentError> {
    let RunnerBinary::Import(host_path) = binary else {
        return Ok(());
    };
    if runs_in_sandbox(run).await? {
        return Ok(());
    }
    let archive = binary_archive(host_path).await?;
    run.import("/", archive)
        .await
        .map_err(|source| AgentError::Sandbox {
            operation: "copy the runner binary in".to_owned(),
            source,
        })?;
    if !runs_in_sandbox(run).await? {
        return Err(AgentError::RunnerBinaryUnavailable {
            reason: format!(
                "{} was copied to {RUNNER_CONTAINER_PATH} but does not run there (not a static binary?)",
                host_path.display()
            ),
        });
    }
    Ok(())
}

async fn runs_in_sandbox(run: &dyn SandboxRun) -> Result<bool, AgentError> {
    let probe = ExecRequest::new([RUNNER_CONTAINER_PATH, "--version"]);
    let mut s = run
        .exec(probe)
        .await
        .map_err(|source| AgentError::Sandbox {
            operation: "probe the runner binary".to_owned(),
            source,
        })?;
    Ok(s.wait().await.is_ok_and(|code| code == 0))
}

/// A tar stream holding the binary at `usr/local/bin/iterion`, read from
/// disk chunk by chunk (the binary is large; it is never held in memory).
async fn binary_archive(path: &Path) -> Result<iterion_core::ByteStream, AgentError> {
    use futures_util::StreamExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(AgentError::io(format!(
            "open runner binary {}",
            path.display()
        )))?;
    let size = file
        .metadata()
        .await
        .map_err(AgentError::io(format!(
            "stat runner binary {}",
            path.display()
        )))?
        .len();
    let mut head = Vec::new();
    for dir in ["usr/", "usr/local/", "usr/local/bin/"] {
        head.extend_from_slice(header(dir, 0, tar::EntryType::Directory)?.as_bytes());
    }
    head.extend_from_slice(
        header(&RUNNER_CONTAINER_PATH[1..], size, tar::EntryType::Regular)?.as_bytes(),
    );
    // Data is padded to 512-byte blocks; two zero blocks end the archive.
    let pad = usize::try_from((512 - size % 512) % 512).unwrap_or(0);
    let mut tail = vec![0u8; pad];
    tail.extend_from_slice(&[0u8; 1024]);
    let body = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    let stream = futures_util::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(body)
        .chain(futures_util::stream::once(
            async move { Ok(Bytes::from(tail)) },
        ));
    Ok(Box::pin(stream))
}

fn header(path: &str, size: u64, kind: tar::EntryType) -> Result<tar::Header, AgentError> {
    let mut h = tar::Header::new_gnu();
    h.set_path(path)
        .map_err(AgentError::io(format!("tar header for {path}")))?;
    h.set_size(size);
    h.set_mode(0o755);
    h.set_entry_type(kind);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    Ok(h)
}

/// Start the runner in the sandbox with `env` on the exec only.
pub(crate) async fn start_in_sandbox(
    run: &dyn SandboxRun,
    env: BTreeMap<String, String>,
) -> Result<Box<dyn ExecSession>, AgentError> {
    let argv = vec![
        RUNNER_CONTAINER_PATH.to_owned(),
        RUNNER_SUBCOMMAND.to_owned(),
    ];
    exec_attached(run, argv, env, "exec the claw runner").await
}

/// Exec `argv` with stdin attached and held open (an agent speaking a
/// stdio protocol), `env` on this exec only.
pub(crate) async fn exec_attached(
    run: &dyn SandboxRun,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    operation: &str,
) -> Result<Box<dyn ExecSession>, AgentError> {
    let req = ExecRequest {
        argv,
        env,
        attach_stdin: true,
        keep_stdin_open: true,
        ..ExecRequest::default()
    };
    run.exec(req).await.map_err(|source| AgentError::Sandbox {
        operation: operation.to_owned(),
        source,
    })
}

/// Drive one runner session to its result.
pub(crate) async fn drive(
    session: &mut dyn ExecSession,
    launch: Launch<'_>,
) -> Result<AgentOutcome, AgentError> {
    let result = drive_inner(session, &launch).await;
    if result.is_err() {
        // Whatever went wrong, nothing of this node keeps running.
        let _ = session.kill().await;
    }
    result
}

async fn drive_inner(
    session: &mut dyn ExecSession,
    launch: &Launch<'_>,
) -> Result<AgentOutcome, AgentError> {
    let task = WireMessage::Task {
        data: Box::new(RunnerTask {
            protocol: PROTOCOL_VERSION,
            task: launch.task.clone(),
            tools: launch.tools.clone(),
        }),
    };
    send(session, &task).await?;
    let mut splitter = LineSplitter::default();
    let mut stderr_tail: Vec<u8> = Vec::new();
    let mut result: Option<RunnerResult> = None;
    loop {
        let chunk = tokio::select! {
            c = session.next_chunk() => c,
            () = launch.cancel.cancelled() => {
                // Best effort: ask first, then the caller's kill ends it.
                let _ = send(session, &WireMessage::Cancel).await;
                return Err(AgentError::Cancelled);
            }
        };
        let Some(chunk) = chunk else { break };
        let chunk = chunk.map_err(|source| AgentError::Sandbox {
            operation: "read the runner's output".to_owned(),
            source,
        })?;
        let Some(stdout) = stdout_of(&chunk, &mut stderr_tail) else {
            continue;
        };
        for line in splitter.feed(stdout) {
            let line = match line {
                Line::Complete(l) => l,
                Line::TooLong { size } => return Err(too_long(size, Direction::RunnerToHost)),
            };
            match decode(&line)? {
                WireMessage::Event { data } => {
                    if !is_agent_event(&data) {
                        return Err(AgentError::RunnerProtocol {
                            detail: format!(
                                "the runner sent a {} event, which only the host may record",
                                data.name()
                            ),
                        });
                    }
                    launch.sink.emit(redact_event(&launch.redactor, data));
                }
                WireMessage::ToolCall { id, data } => {
                    let (content, is_error) =
                        match serve_tool(launch, &id, &data.name, &data.input).await {
                            Ok(out) => (out, false),
                            Err(err) => (err, true),
                        };
                    let reply = WireMessage::ToolResult {
                        id,
                        data: ToolResultData {
                            content,
                            is_error,
                            truncated: false,
                        },
                    };
                    send(session, &reply).await?;
                }
                WireMessage::Result { data } => {
                    if let RunnerResult::Tool(_) = *data {
                        return Err(AgentError::RunnerProtocol {
                            detail: "the runner answered a task with a builtin result".to_owned(),
                        });
                    }
                    result = Some(*data);
                }
                other => {
                    return Err(AgentError::RunnerProtocol {
                        detail: format!(
                            "unexpected message from the runner: {}",
                            bounded(&format!("{other:?}"), 120)
                        ),
                    });
                }
            }
        }
        if result.is_some() {
            break;
        }
    }
    let _ = session.close_stdin().await;
    match result {
        Some(RunnerResult::Tool(_)) => Err(AgentError::RunnerProtocol {
            detail: "the runner answered a task with a builtin result".to_owned(),
        }),
        Some(RunnerResult::Ok(outcome)) => {
            finish_after_result(session).await;
            Ok(outcome)
        }
        Some(RunnerResult::Err(e)) => {
            finish_after_result(session).await;
            Err(e)
        }
        None => {
            let exit_code = session.wait().await.unwrap_or(-1);
            if splitter.pending() > 0 {
                return Err(AgentError::RunnerProtocol {
                    detail: format!(
                        "the runner's output ended inside a line ({} bytes)",
                        splitter.pending()
                    ),
                });
            }
            Err(AgentError::RunnerExited {
                exit_code,
                stderr_tail: launch
                    .redactor
                    .redact(String::from_utf8_lossy(&stderr_tail).trim()),
            })
        }
    }
}

/// Run one built-in through a started runner session (a tool node's
/// command in the box): send `builtin`, read its one `result`.
pub(crate) async fn run_builtin_session(
    session: &mut dyn ExecSession,
    name: &str,
    input: &serde_json::Value,
    cancel: &CancellationToken,
) -> Result<ToolResultData, AgentError> {
    let result = builtin_inner(session, name, input, cancel).await;
    match &result {
        Ok(_) => finish_after_result(session).await,
        Err(_) => {
            let _ = session.kill().await;
        }
    }
    result
}

async fn builtin_inner(
    session: &mut dyn ExecSession,
    name: &str,
    input: &serde_json::Value,
    cancel: &CancellationToken,
) -> Result<ToolResultData, AgentError> {
    let msg = WireMessage::Builtin {
        data: super::protocol::BuiltinTask {
            protocol: PROTOCOL_VERSION,
            name: name.to_owned(),
            input: input.clone(),
        },
    };
    send(session, &msg).await?;
    let mut splitter = LineSplitter::default();
    let mut stderr_tail: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            c = session.next_chunk() => c,
            () = cancel.cancelled() => return Err(AgentError::Cancelled),
        };
        let Some(chunk) = chunk else { break };
        let chunk = chunk.map_err(|source| AgentError::Sandbox {
            operation: "read the runner's output".to_owned(),
            source,
        })?;
        let Some(stdout) = stdout_of(&chunk, &mut stderr_tail) else {
            continue;
        };
        // The runner sends one line, its result: the first complete line
        // decides.
        if let Some(line) = splitter.feed(stdout).into_iter().next() {
            let line = match line {
                Line::Complete(l) => l,
                Line::TooLong { size } => return Err(too_long(size, Direction::RunnerToHost)),
            };
            let _ = session.close_stdin().await;
            return match decode(&line)? {
                WireMessage::Result { data } => match *data {
                    RunnerResult::Tool(t) => Ok(t),
                    RunnerResult::Err(e) => Err(e),
                    RunnerResult::Ok(_) => Err(AgentError::RunnerProtocol {
                        detail: "the runner answered a builtin with an agent outcome".to_owned(),
                    }),
                },
                other => Err(AgentError::RunnerProtocol {
                    detail: format!(
                        "unexpected message from the runner: {}",
                        bounded(&format!("{other:?}"), 120)
                    ),
                }),
            };
        }
    }
    let exit_code = session.wait().await.unwrap_or(-1);
    Err(AgentError::RunnerExited {
        exit_code,
        stderr_tail: String::from_utf8_lossy(&stderr_tail).trim().to_owned(),
    })
}

/// A chunk's stdout, or `None` after keeping its stderr in the bounded
/// `tail` (for an error report).
fn stdout_of<'c>(chunk: &'c iterion_core::OutputChunk, tail: &mut Vec<u8>) -> Option<&'c [u8]> {
    if chunk.stream == OutputStream::Stdout {
        return Some(&chunk.data);
    }
    tail.extend_from_slice(&chunk.data);
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
    None
}

/// After its last message a process has [`EXIT_GRACE`] to exit; then it
/// is killed (the node's outcome is already known).
pub(crate) async fn finish_after_result(session: &mut dyn ExecSession) {
    if tokio::time::timeout(EXIT_GRACE, session.wait())
        .await
        .is_err()
    {
        let _ = session.kill().await;
    }
}

/// How long a process may linger after its final message.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

async fn send(session: &mut dyn ExecSession, msg: &WireMessage) -> Result<(), AgentError> {
    let line = encode(msg, Direction::HostToRunner)?;
    session
        .write_stdin(Bytes::from(line))
        .await
        .map_err(|source| AgentError::Sandbox {
            operation: "write to the runner".to_owned(),
            source,
        })
}

/// A runner may only ask for the node's launcher-side tools, and the
/// host re-checks the node's policy: what comes out of the box is never
/// trusted to have checked it.
async fn serve_tool(
    launch: &Launch<'_>,
    call_id: &str,
    name: &str,
    input: &serde_json::Value,
) -> Result<String, String> {
    // The policy first: a denied tool is never among the node's tools, and
    // a runner asking for one anyway is a denial on the record.
    launch
        .task
        .policy()
        .admit_call(name, call_id, "host", launch.sink)?;
    let allowed = launch
        .tools
        .iter()
        .any(|t| t.name == name && t.placement() == Placement::Launcher);
    if !allowed {
        return Err(format!("{name} is not a launcher-side tool of this node"));
    }
    let Some(launcher) = launch.launcher else {
        return Err(format!("no launcher serves {name}"));
    };
    tokio::select! {
        r = launcher.call(name, input) => r,
        () = launch.cancel.cancelled() => Err("cancelled".to_owned()),
    }
}
