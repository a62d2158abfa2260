//! The Anthropic Messages wire format (`POST /v1/messages`): request
//! body, whole response, and the streamed events (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`,
//! `error`). Native structured output is a forced tool call whose input
//! schema is the output schema (upstream `GenerateObjectDirect`).

use serde_json::{Value, json};

use super::chat::{Block, ChatRequest, ChatResponse, Decoded, Message, Role, StopReason, Usage};
use super::sse;

/// `anthropic-version` header value.
pub const API_VERSION: &str = "2023-06-01";

/// The JSON body of a request.
pub fn request_body(req: &ChatRequest) -> Value {
    let messages: Vec<Value> = req.messages.iter().map(message).collect();
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_tokens,
        "messages": messages,
    });
    if let Some(system) = &req.system {
        body["system"] = json!(system);
    }
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    if let Some(s) = &req.structured {
        tools.push(json!({
            "name": s.name,
            "description": "Return the final answer as structured output matching the required schema.",
            "input_schema": s.schema,
        }));
        body["tool_choice"] = json!({"type": "tool", "name": s.name});
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if req.stream {
        body["stream"] = json!(true);
    }
    body
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = m
        .content
        .iter()
        .map(|b| match b {
            Block::Text { text } => json!({"type": "text", "text": text}),
            Block::ToolUse { id, name, input } => json!({"type": "tool_use", "id": id, "name": name, "input": input}),
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}),
        })
        .collect();
    json!({"role": role, "content": content})
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Merge an Anthropic `usage` object into `usage` (fields absent keep
/// their value: a stream reports input and output in different events).
pub(crate) fn usage_into(u: &Value, usage: &mut Usage) {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(i) = n("input_tokens") {
        // Cached prompt tokens are prompt tokens too.
        usage.input_tokens = i
            + n("cache_read_input_tokens").unwrap_or(0)
            + n("cache_creation_input_tokens").unwrap_or(0);
    }
    if let Some(o) = n("output_tokens") {
        usage.output_tokens = o;
    }
}

fn block(v: &Value) -> Result<Option<Block>, Decoded> {
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .ok_or("content block without a type")?;
    Ok(match kind {
        "text" => Some(Block::Text {
            text: v
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        }),
        "tool_use" => Some(Block::ToolUse {
            id: v
                .get("id")
                .and_then(Value::as_str)
                .ok_or("tool_use without id")?
                .to_owned(),
            name: v
                .get("name")
                .and_then(Value::as_str)
                .ok_or("tool_use without name")?
                .to_owned(),
            input: v.get("input").cloned().unwrap_or_else(|| json!({})),
        }),
        // thinking, redacted_thinking, server tools: not part of the answer.
        _ => None,
    })
}

/// An Anthropic `usage` object (the claude CLI reports the same shape).
pub(crate) fn usage_of(u: &Value) -> Usage {
    let mut usage = Usage::default();
    usage_into(u, &mut usage);
    usage
}

/// A whole (non-streamed) response.
pub fn parse_response(v: &Value) -> Result<ChatResponse, Decoded> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(stream_error(v));
    }
    let content = v.get("content").and_then(Value::as_array).ok_or_else(|| {
        Decoded::Garbage(format!(
            "no content array in {}",
            crate::error::bounded(&v.to_string(), 200)
        ))
    })?;
    let mut blocks = Vec::new();
    for b in content {
        if let Some(b) = block(b)? {
            blocks.push(b);
        }
    }
    let mut usage = Usage::default();
    if let Some(u) = v.get("usage") {
        usage_into(u, &mut usage);
    }
    Ok(ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: blocks,
        },
        stop: stop_reason(
            v.get("stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("end_turn"),
        ),
        usage,
    })
}

fn stream_error(v: &Value) -> Decoded {
    let kind = v
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or(kind)
        .to_owned();
    let status = match kind {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "garbage" => return Decoded::Garbage(message),
        _ => 500,
    };
    Decoded::Status(status, message)
}

/// Rebuilds a response from streamed events.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    started: bool,
    stopped: bool,
    blocks: Vec<Option<PartialBlock>>,
    stop: Option<String>,
    usage: Usage,
}

#[derive(Debug)]
enum PartialBlock {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
        initial: Value,
    },
}

impl StreamAccumulator {
    /// Apply one event.
    pub fn apply(&mut self, ev: &sse::Event) -> Result<(), Decoded> {
        if ev.data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(&ev.data).map_err(|e| {
            Decoded::Garbage(format!(
                "event data is not JSON ({e}): {}",
                crate::error::bounded(&ev.data, 200)
            ))
        })?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(ev.event.as_str());
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(u) = v.pointer("/message/usage") {
                    usage_into(u, &mut self.usage);
                }
            }
            "content_block_start" => {
                let index = index_of(&v)?;
                let cb = v
                    .get("content_block")
                    .ok_or("content_block_start without a block")?;
                let partial = match block(cb)? {
                    Some(Block::Text { text }) => Some(PartialBlock::Text(text)),
                    Some(Block::ToolUse { id, name, input }) => Some(PartialBlock::Tool {
                        id,
                        name,
                        json: String::new(),
                        initial: input,
                    }),
                    _ => None,
                };
                if self.blocks.len() <= index {
                    self.blocks.resize_with(index + 1, || None);
                }
                self.blocks[index] = partial;
            }
            "content_block_delta" => {
                let index = index_of(&v)?;
                let delta = v
                    .get("delta")
                    .ok_or("content_block_delta without a delta")?;
                match (
                    self.blocks.get_mut(index).and_then(Option::as_mut),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(PartialBlock::Text(t)), Some("text_delta")) => {
                        t.push_str(
                            delta
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or_default(),
                        );
                    }
                    (Some(PartialBlock::Tool { json, .. }), Some("input_json_delta")) => {
                        json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or_default(),
                        );
                    }
                    (None, _) => {
                        return Err(Decoded::Garbage(format!("delta for unknown block {index}")));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(s) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(s.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    usage_into(u, &mut self.usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(stream_error(&v)),
            // ping, content_block_stop, unknown future events.
            _ => {}
        }
        Ok(())
    }

    /// The response, once the stream ended.
    pub fn finish(self) -> Result<ChatResponse, Decoded> {
        if !self.started {
            return Err(Decoded::Garbage(
                "stream ended without message_start".to_owned(),
            ));
        }
        if !self.stopped && self.stop.is_none() {
            return Err(Decoded::Garbage(
                "stream ended before message_stop".to_owned(),
            ));
        }
        let mut content = Vec::new();
        for b in self.blocks.into_iter().flatten() {
            content.push(match b {
                PartialBlock::Text(text) => Block::Text { text },
                PartialBlock::Tool {
                    id,
                    name,
                    json,
                    initial,
                } => {
                    let input = if json.trim().is_empty() {
                        initial
                    } else {
                        serde_json::from_str(&json).map_err(|e| {
                            Decoded::Garbage(format!(
                                "tool_use {name} input is not JSON ({e}): {}",
                                crate::error::bounded(&json, 200)
                            ))
                        })?
                    };
                    Block::ToolUse { id, name, input }
                }
            });
        }
        Ok(ChatResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop: stop_reason(self.stop.as_deref().unwrap_or("end_turn")),
            usage: self.usage,
        })
    }
}

fn index_of(v: &Value) -> Result<usize, Decoded> {
    v.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < 4096)
        .ok_or_else(|| Decoded::Garbage("event without a usable index".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::StructuredOutput;
    use crate::tools::ToolSpec;

    fn req() -> ChatRequest {
        ChatRequest {
            model: "claude-x".into(),
            system: Some("sys".into()),
            messages: crate::provider::tests::sample_conversation(false),
            tools: vec![ToolSpec {
                name: "bash".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 100,
            max_tokens_explicit: false,
            structured: None,
            stream: true,
        }
    }

    #[test]
    fn request_shape() {
        let b = request_body(&req());
        assert_eq!(b["system"], "sys");
        assert_eq!(b["stream"], true);
        assert_eq!(b["messages"][1]["content"][0]["type"], "tool_use");
        assert_eq!(b["messages"][2]["content"][0]["tool_use_id"], "t1");
        assert!(b.get("tool_choice").is_none());
        let mut r = req();
        r.tools.clear();
        r.structured = Some(StructuredOutput {
            name: "structured_output".into(),
            schema: json!({"type": "object"}),
        });
        let b = request_body(&r);
        assert_eq!(b["tool_choice"]["name"], "structured_output");
        assert_eq!(b["tools"][0]["name"], "structured_output");
    }

    #[test]
    fn stream_rebuilds_text_and_tool_use() {
        let events = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu1","name":"bash","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"and\":\"ls\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut acc = StreamAccumulator::default();
        for e in events {
            acc.apply(&sse::Event {
                event: String::new(),
                data: e.into(),
            })
            .expect("apply");
        }
        let r = acc.finish().expect("finish");
        assert_eq!(r.message.text(), "Hello");
        assert_eq!(r.message.tool_uses()[0].2["command"], "ls");
        assert_eq!(r.stop, StopReason::ToolUse);
        assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (10, 7));
    }

    #[test]
    fn stream_error_and_garbage() {
        let mut acc = StreamAccumulator::default();
        let e = acc
            .apply(&sse::Event {
                event: "error".into(),
                data: r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#
                    .into(),
            })
            .expect_err("error");
        assert!(matches!(e, Decoded::Status(529, _)));
        let e = acc
            .apply(&sse::Event {
                event: String::new(),
                data: "not json".into(),
            })
            .expect_err("garbage");
        assert!(matches!(e, Decoded::Garbage(_)));
        assert!(StreamAccumulator::default().finish().is_err());
    }
}
