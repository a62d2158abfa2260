//! The runner's wire: newline-delimited JSON messages `{"type", "id"?,
//! "data"?}` over the exec's stdin (host → runner) and stdout (runner →
//! host), upstream's envelope shape (`pkg/backend/delegate/envelope.go`).
//!
//! | `type` | Direction | `data` |
//! |---|---|---|
//! | `task` | host → runner, first and once | [`RunnerTask`]: protocol version, the [`AgentTask`], the node's resolved tools |
//! | `tool_call` | runner → host, with an `id` | [`ToolCallData`]: a launcher-side tool's name and input |
//! | `tool_result` | host → runner, same `id` | [`ToolResultData`]: output or error, `truncated` |
//! | `event` | runner → host | an [`EventKind`] (agent events only) |
//! | `builtin` | host → runner, first and once instead of `task` | [`BuiltinTask`]: one built-in and its input (a tool node's command) |
//! | `cancel` | host → runner | — : stop the loop, answer with a `Cancelled` result |
//! | `result` | runner → host, last | [`RunnerResult`]: the outcome or the typed error |
//!
//! Every line is at most [`MAX_LINE_BYTES`] (4 MiB, upstream's cap) in
//! both directions: a `tool_result` that would exceed it is cut with
//! [`crate::claw::TRUNCATION_MARKER`] (upstream #877), any other message
//! that would exceed it is refused before it is written, and a received
//! line over the cap is discarded up to its newline and reported as
//! [`AgentError::RunnerLineTooLong`] — the channel itself stays in sync
//! (upstream #837: one long line killed it).

use iterion_core::EventKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{AgentError, bounded};
use crate::task::{AgentOutcome, AgentTask};
use crate::tools::ToolEntry;

/// Protocol version carried by `task`; a runner refuses another one.
pub const PROTOCOL_VERSION: u32 = 1;
/// Cap of one line, newline excluded.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WireMessage {
    /// The node to run.
    Task {
        /// Payload.
        data: Box<RunnerTask>,
    },
    /// A launcher-side tool call.
    ToolCall {
        /// Correlation id.
        id: String,
        /// Payload.
        data: ToolCallData,
    },
    /// The answer to a `tool_call`.
    ToolResult {
        /// Correlation id.
        id: String,
        /// Payload.
        data: ToolResultData,
    },
    /// An agent event.
    Event {
        /// Payload.
        data: EventKind,
    },
    /// One built-in to run on its own (a tool node's command), first and
    /// once instead of a `task`; answered by a `result` holding a
    /// [`RunnerResult::Tool`].
    Builtin {
        /// Payload.
        data: BuiltinTask,
    },
    /// Stop now.
    Cancel,
    /// The node's end.
    Result {
        /// Payload.
        data: Box<RunnerResult>,
    },
}

/// `task` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerTask {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol: u32,
    /// The node.
    pub task: AgentTask,
    /// The node's tools, resolved and placed by the host.
    pub tools: Vec<ToolEntry>,
}

/// `builtin` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltinTask {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol: u32,
    /// The built-in's name.
    pub name: String,
    /// Its input object.
    pub input: Value,
}

/// `tool_call` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallData {
    /// Tool name.
    pub name: String,
    /// Input object.
    pub input: Value,
}

/// `tool_result` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultData {
    /// The tool's output (or error text when `is_error`).
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// Whether `content` was cut to fit the line cap.
    #[serde(default)]
    pub truncated: bool,
}

/// `result` payload.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerResult {
    /// The node's outcome.
    Ok(AgentOutcome),
    /// Its typed failure.
    Err(AgentError),
    /// The answer of a `builtin`.
    Tool(ToolResultData),
}

impl Clone for RunnerResult {
    fn clone(&self) -> Self {
        match self {
            Self::Ok(o) => Self::Ok(o.clone()),
            Self::Tool(t) => Self::Tool(t.clone()),
            // Errors on the wire are data-only; a host-only variant never
            // gets here (it does not serialize).
            Self::Err(e) => Self::Err(
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or(AgentError::RunnerProtocol {
                        detail: e.to_string(),
                    }),
            ),
        }
    }
}

impl PartialEq for RunnerResult {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Ok(a), Self::Ok(b)) => a == b,
            (Self::Err(a), Self::Err(b)) => a.code() == b.code() && a.to_string() == b.to_string(),
            (Self::Tool(a), Self::Tool(b)) => a == b,
            _ => false,
        }
    }
}

/// Which way a line travels (for error reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// host → runner (stdin).
    HostToRunner,
    /// runner → host (stdout).
    RunnerToHost,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Self::HostToRunner => "host_to_runner",
            Self::RunnerToHost => "runner_to_host",
        }
    }
}

/// Serialize one message as a line (newline included), refusing one over
/// the cap. A `tool_result` is cut to fit instead.
pub fn encode(msg: &WireMessage, direction: Direction) -> Result<Vec<u8>, AgentError> {
    let mut line = to_line(msg)?;
    if line.len() > MAX_LINE_BYTES + 1 {
        let WireMessage::ToolResult { id, data } = msg else {
            return Err(AgentError::RunnerLineTooLong {
                size: line.len() - 1,
                limit: MAX_LINE_BYTES,
                direction: direction.as_str().to_owned(),
            });
        };
        // JSON escaping can grow the text up to 6×; cut by the overshoot
        // measured on the encoded line, then re-check.
        let mut content = data.content.clone();
        let mut budget = MAX_LINE_BYTES
            .saturating_sub(line.len() - content.len())
            .saturating_sub(1024);
        loop {
            content = crate::claw::truncate_tool_result(content, budget);
            line = to_line(&WireMessage::ToolResult {
                id: id.clone(),
                data: ToolResultData {
                    content: content.clone(),
                    is_error: data.is_error,
                    truncated: true,
                },
            })?;
            if line.len() <= MAX_LINE_BYTES + 1 || budget < 4096 {
                break;
            }
            budget /= 2;
        }
    }
    Ok(line)
}

fn to_line(msg: &WireMessage) -> Result<Vec<u8>, AgentError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| AgentError::RunnerProtocol {
        detail: format!("cannot encode a {} message: {e}", kind(msg)),
    })?;
    line.push(b'\n');
    Ok(line)
}

fn kind(msg: &WireMessage) -> &'static str {
    match msg {
        WireMessage::Task { .. } => "task",
        WireMessage::ToolCall { .. } => "tool_call",
        WireMessage::ToolResult { .. } => "tool_result",
        WireMessage::Event { .. } => "event",
        WireMessage::Builtin { .. } => "builtin",
        WireMessage::Cancel => "cancel",
        WireMessage::Result { .. } => "result",
    }
}

/// Parse one received line.
pub fn decode(line: &[u8]) -> Result<WireMessage, AgentError> {
    serde_json::from_slice(line).map_err(|e| AgentError::RunnerProtocol {
        detail: format!(
            "malformed line ({e}): {}",
            bounded(&String::from_utf8_lossy(line), 120)
        ),
    })
}

/// What the splitter produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line (without its newline).
    Complete(Vec<u8>),
    /// A line over the cap, discarded through its newline.
    TooLong {
        /// Bytes it had.
        size: usize,
    },
}

/// Splits a byte stream into capped lines, resynchronizing after an
/// oversize one.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// Bytes of the current oversize line discarded so far.
    discarding: Option<usize>,
}

impl LineSplitter {
    /// Feed a chunk; return the lines it completed.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<Line> {
        let mut out = Vec::new();
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|b| *b == b'\n');
            if let Some(seen) = self.discarding.as_mut() {
                match nl {
                    Some(i) => {
                        out.push(Line::TooLong { size: *seen + i });
                        self.discarding = None;
                        chunk = &chunk[i + 1..];
                    }
                    None => {
                        *seen += chunk.len();
                        chunk = &[];
                    }
                }
                continue;
            }
            match nl {
                Some(i) if self.buf.len() + i <= MAX_LINE_BYTES => {
                    self.buf.extend_from_slice(&chunk[..i]);
                    out.push(Line::Complete(std::mem::take(&mut self.buf)));
                    chunk = &chunk[i + 1..];
                }
                Some(i) => {
                    out.push(Line::TooLong {
                        size: self.buf.len() + i,
                    });
                    self.buf.clear();
                    chunk = &chunk[i + 1..];
                }
                None if self.buf.len() + chunk.len() > MAX_LINE_BYTES => {
                    self.discarding = Some(self.buf.len() + chunk.len());
                    self.buf.clear();
                    chunk = &[];
                }
                None => {
                    self.buf.extend_from_slice(chunk);
                    chunk = &[];
                }
            }
        }
        out
    }

    /// Bytes of an unterminated line at end of stream (a partial line is
    /// a protocol error, not a message).
    pub fn pending(&self) -> usize {
        self.buf.len() + self.discarding.unwrap_or(0)
    }
}

/// The error for an oversize received line.
pub fn too_long(size: usize, direction: Direction) -> AgentError {
    AgentError::RunnerLineTooLong {
        size,
        limit: MAX_LINE_BYTES,
        direction: direction.as_str().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitter_resyncs_after_oversize_line() {
        let mut s = LineSplitter::default();
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 10));
        input.extend_from_slice(b"\n{\"b\":2}\npart");
        // Feed in uneven chunks.
        let mut got = Vec::new();
        for c in input.chunks(1_000_003) {
            got.extend(s.feed(c));
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Line::Complete(b"{\"a\":1}".to_vec()));
        assert_eq!(
            got[1],
            Line::TooLong {
                size: MAX_LINE_BYTES + 10
            }
        );
        assert_eq!(got[2], Line::Complete(b"{\"b\":2}".to_vec()));
        assert_eq!(s.pending(), 4);
    }

    #[test]
    fn exactly_cap_passes() {
        let mut s = LineSplitter::default();
        let mut input = vec![b'y'; MAX_LINE_BYTES];
        input.push(b'\n');
        let got = s.feed(&input);
        assert!(matches!(&got[0], Line::Complete(l) if l.len() == MAX_LINE_BYTES));
    }

    #[test]
    fn oversize_tool_result_is_truncated_with_marker() {
        let msg = WireMessage::ToolResult {
            id: "c1".into(),
            data: ToolResultData {
                // Quotes double in JSON: the escaping overshoot path.
                content: "\"".repeat(MAX_LINE_BYTES),
                is_error: false,
                truncated: false,
            },
        };
        let line = encode(&msg, Direction::HostToRunner).expect("encode");
        assert!(line.len() <= MAX_LINE_BYTES + 1);
        let WireMessage::ToolResult { data, .. } = decode(&line[..line.len() - 1]).expect("decode")
        else {
            panic!("kind")
        };
        assert!(data.truncated);
        assert!(data.content.ends_with(crate::claw::TRUNCATION_MARKER));
    }

    #[test]
    fn oversize_other_messages_are_refused() {
        let msg = WireMessage::ToolCall {
            id: "c".into(),
            data: ToolCallData {
                name: "mcp.x.y".into(),
                input: Value::String("z".repeat(MAX_LINE_BYTES)),
            },
        };
        let err = encode(&msg, Direction::RunnerToHost).expect_err("too long");
        assert_eq!(err.code(), "AGENT_RUNNER_LINE_TOO_LONG");
    }

    #[test]
    fn malformed_and_unknown_lines_are_typed() {
        for line in [
            &b"not json"[..],
            b"{\"type\":\"nope\"}",
            b"{\"type\":\"tool_call\",\"id\":\"1\"}",
        ] {
            assert_eq!(
                decode(line).expect_err("bad").code(),
                "AGENT_RUNNER_PROTOCOL"
            );
        }
        assert_eq!(
            decode(b"{\"type\":\"cancel\"}").expect("ok"),
            WireMessage::Cancel
        );
    }
}
