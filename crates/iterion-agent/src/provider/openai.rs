//! The OpenAI chat-completions wire format (`POST {base}/chat/completions`),
//! which OpenAI-compatible gateways (vLLM, Ollama, LiteLLM, OpenRouter)
//! serve: request body, whole response and streamed chunks (`data:` JSON
//! chunks, then `data: [DONE]`; usage arrives in a last chunk when asked
//! with `stream_options.include_usage`). Native structured output is a
//! `json_schema` response format.

use serde_json::{Value, json};

use super::chat::{Block, ChatRequest, ChatResponse, Decoded, Message, Role, StopReason, Usage};
use super::sse;

/// The JSON body of a request.
pub fn request_body(req: &ChatRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        match m.role {
            Role::Assistant => {
                let text = m.text();
                let calls: Vec<Value> = m
                    .tool_uses()
                    .into_iter()
                    .map(|(id, name, input)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}})
                    })
                    .collect();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
            Role::User => {
                // Tool results are messages of their own, before any text.
                let mut text = String::new();
                for b in &m.content {
                    match b {
                        Block::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            let content = if *is_error {
                                format!("Error: {content}")
                            } else {
                                content.clone()
                            };
                            messages.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                        }
                        Block::Text { text: t } => text.push_str(t),
                        Block::ToolUse { .. } => {}
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
        }
    }
    let mut body = json!({"model": req.model, "messages": messages});
    if req.max_tokens_explicit {
        body["max_tokens"] = json!(req.max_tokens);
    }
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(
            req.tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
                .collect(),
        );
    }
    if let Some(s) = &req.structured {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": s.name, "schema": s.schema},
        });
        // The repair turn keeps the tools defined for the conversation's
        // sake but must not call them.
        if !req.tools.is_empty() {
            body["tool_choice"] = json!("none");
        }
    }
    if req.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn finish_reason(s: &str) -> StopReason {
    match s {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        // OpenRouter and LiteLLM report the call's cost here.
        cost_usd: u.get("cost").and_then(Value::as_f64),
    }
}

fn tool_input(name: &str, args: &str) -> Result<Value, Decoded> {
    if args.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(args).map_err(|e| {
        Decoded::Garbage(format!(
            "tool call {name} arguments are not JSON ({e}): {}",
            crate::error::bounded(args, 200)
        ))
    })
}

/// A whole (non-streamed) response.
pub fn parse_response(v: &Value) -> Result<ChatResponse, Decoded> {
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_owned();
        return Err(Decoded::Status(500, msg));
    }
    let choice = v.pointer("/choices/0").ok_or_else(|| {
        Decoded::Garbage(format!(
            "no choices in {}",
            crate::error::bounded(&v.to_string(), 200)
        ))
    })?;
    let msg = choice.get("message").ok_or("choice without a message")?;
    let mut content = Vec::new();
    if let Some(text) = msg
        .get("content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        content.push(Block::Text {
            text: text.to_owned(),
        });
    }
    for call in msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .ok_or("tool call without id")?;
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .ok_or("tool call without name")?;
        let args = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or_default();
        content.push(Block::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            input: tool_input(name, args)?,
        });
    }
    Ok(ChatResponse {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop: finish_reason(
            choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or("stop"),
        ),
        usage: v.get("usage").map(usage).unwrap_or_default(),
    })
}

/// Rebuilds a response from streamed chunks.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    chunks: usize,
    done: bool,
    text: String,
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Usage,
}

impl StreamAccumulator {
    /// Apply one event.
    pub fn apply(&mut self, ev: &sse::Event) -> Result<(), Decoded> {
        let data = ev.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Decoded::Garbage(format!(
                "chunk is not JSON ({e}): {}",
                crate::error::bounded(data, 200)
            ))
        })?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned();
            return Err(Decoded::Status(500, msg));
        }
        self.chunks += 1;
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.usage = usage(u);
        }
        for choice in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(f.to_owned());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                self.text.push_str(t);
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|i| *i < 1024)
                    .ok_or("tool call delta without a usable index")?;
                if self.calls.len() <= index {
                    self.calls.resize_with(index + 1, Default::default);
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    slot.0 = id.to_owned();
                }
                if let Some(n) = call.pointer("/function/name").and_then(Value::as_str) {
                    slot.1.push_str(n);
                }
                if let Some(a) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    slot.2.push_str(a);
                }
            }
        }
        Ok(())
    }

    /// The response, once the stream ended.
    pub fn finish(self) -> Result<ChatResponse, Decoded> {
        if self.chunks == 0 {
            return Err(Decoded::Garbage("stream ended without a chunk".to_owned()));
        }
        if !self.done && self.finish.is_none() {
            return Err(Decoded::Garbage(
                "stream ended before a finish_reason".to_owned(),
            ));
        }
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        for (id, name, args) in self.calls {
            if name.is_empty() {
                return Err(Decoded::Garbage(
                    "streamed tool call without a name".to_owned(),
                ));
            }
            content.push(Block::ToolUse {
                input: tool_input(&name, &args)?,
                id,
                name,
            });
        }
        Ok(ChatResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop: finish_reason(self.finish.as_deref().unwrap_or("stop")),
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_maps_tool_results_to_tool_messages() {
        let req = ChatRequest {
            model: "gpt-x".into(),
            system: Some("sys".into()),
            messages: crate::provider::tests::sample_conversation(true),
            tools: vec![],
            max_tokens: 10,
            max_tokens_explicit: false,
            structured: None,
            stream: false,
        };
        let b = request_body(&req);
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"command\":\"true\"}"
        );
        assert_eq!(b["messages"][3]["role"], "tool");
        assert_eq!(b["messages"][3]["content"], "Error: ok");
        assert!(b.get("max_tokens").is_none());
    }

    #[test]
    fn stream_rebuilds_tool_calls_and_usage() {
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"cost":0.001}}"#,
            "[DONE]",
        ];
        let mut acc = StreamAccumulator::default();
        for c in chunks {
            acc.apply(&sse::Event {
                event: String::new(),
                data: c.into(),
            })
            .expect("apply");
        }
        let r = acc.finish().expect("finish");
        assert_eq!(r.message.text(), "Hi");
        assert_eq!(r.message.tool_uses()[0].2["command"], "ls");
        assert_eq!(r.stop, StopReason::ToolUse);
        assert_eq!(r.usage.cost_usd, Some(0.001));
    }

    #[test]
    fn whole_response_garbage() {
        assert!(parse_response(&json!({"nope": 1})).is_err());
        let bad_args = json!({"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"bash","arguments":"{oops"}}]},"finish_reason":"tool_calls"}]});
        assert!(matches!(
            parse_response(&bad_args),
            Err(Decoded::Garbage(_))
        ));
    }
}
