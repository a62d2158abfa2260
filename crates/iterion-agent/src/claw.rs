//! The claw agent loop: prompt → model → tools → model … → output, with
//! upstream's semantics (`pkg/backend/model/claw_backend.go`):
//!
//! - schema without tools: native structured output (a forced tool on
//!   Anthropic, a `json_schema` response format on OpenAI);
//! - schema with tools: the tool loop with a "JSON only" instruction in the
//!   prompt; a final answer that does not parse or match gets one
//!   tool-free structured turn over the same conversation;
//! - at most one repair turn: an output that still does not match is
//!   [`AgentError::SchemaMismatch`];
//! - at most `tool_max_steps` model calls in the tool loop: a model still
//!   calling tools on its last one is [`AgentError::ToolMaxStepsExceeded`];
//! - transient provider failures (429, 5xx, transport) retried with
//!   exponential backoff and `llm_retry` events, then
//!   [`AgentError::RetriesExhausted`];
//! - the run's token/cost budget checked after every call
//!   (`budget_warning` at 80 %, `budget_exceeded` and a failure at 100 %).
//!
//! The loop does not know where it runs: tools go through a
//! [`ToolDispatch`], which is the in-process executor on the host and in
//! the runner, with launcher-side tools forwarded over the runner channel
//! from inside the container.

use std::time::Instant;

use async_trait::async_trait;
use iterion_core::EventKind;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backend::BackendName;
use crate::error::{AgentError, bounded};
use crate::events::AgentEventSink;
use crate::model::{ModelSpec, estimate_cost_usd};
use crate::provider::{
    Block, ChatRequest, ChatResponse, Message, ProviderClient, Role, STRUCTURED_OUTPUT_TOOL,
    StructuredOutput, Usage,
};
use crate::schema::{OutputSchema, extract_json};
use crate::task::{AgentOutcome, AgentTask, DEFAULT_MAX_TOKENS, SessionSpec};
use crate::tools::builtin::meta;
use crate::tools::{Builtin, Placement, ToolClass, ToolEntry, qualify};

/// Largest tool result handed to the model; longer ones are cut with
/// [`TRUNCATION_MARKER`] (the runner channel's cap, applied everywhere so
/// a result does not depend on where the tool ran).
pub const TOOL_RESULT_CAP: usize = 1024 * 1024;
/// Appended to a cut tool result.
pub const TRUNCATION_MARKER: &str = "\n[iterion: tool result truncated]";

/// Executes the tool calls of one node.
#[async_trait]
pub trait ToolDispatch: Send + Sync {
    /// Run one call. `Err` is an error result the model sees.
    async fn call(&self, entry: &ToolEntry, input: &Value) -> Result<String, String>;
}

/// Everything one claw run needs.
pub struct ClawLoop<'a> {
    /// The node's task.
    pub task: &'a AgentTask,
    /// Parsed model.
    pub model: ModelSpec,
    /// Provider client.
    pub client: ProviderClient,
    /// The node's tools, resolved against the placement table.
    pub tools: Vec<ToolEntry>,
    /// Tool executor.
    pub dispatch: &'a dyn ToolDispatch,
    /// Event sink (already redacting).
    pub sink: &'a dyn AgentEventSink,
    /// Cancels the node.
    pub cancel: CancellationToken,
    /// Whether this process is inside the sandbox (names where built-ins
    /// ran in tool events: `container` or `host`).
    pub in_sandbox: bool,
}

struct State {
    messages: Vec<Message>,
    usage: Usage,
    steps: u32,
    warned_tokens: bool,
    warned_cost: bool,
    /// Plan mode (`enter_plan_mode` .. `exit_plan_mode`): tools that may
    /// modify anything are refused while it is on.
    plan_mode: bool,
}

impl ClawLoop<'_> {
    /// Run the node to its output.
    pub async fn run(&self) -> Result<AgentOutcome, AgentError> {
        let schema = self
            .task
            .output_schema
            .as_ref()
            .map(OutputSchema::compile)
            .transpose()?;
        let mut state = State {
            messages: match &self.task.session {
                SessionSpec::Inherit { messages, .. } => messages.clone(),
                SessionSpec::Fresh => Vec::new(),
            },
            usage: Usage::default(),
            steps: 0,
            warned_tokens: false,
            warned_cost: false,
            plan_mode: false,
        };
        let mut prompt = self.task.user_prompt.clone();
        if let (Some(s), false) = (&schema, self.tools.is_empty()) {
            prompt.push_str(&format!(
                "\n\nOUTPUT FORMAT: after completing all tool operations, your final message MUST be a raw JSON object matching this schema:\n{}\nNo markdown fences, no extra text: ONLY the JSON object.",
                serde_json::to_string_pretty(s.raw()).unwrap_or_default()
            ));
        }
        state.messages.push(Message::user_text(prompt));

        let (output, text, formatting) = match (&schema, self.tools.is_empty()) {
            (Some(schema), true) => self.structured(&mut state, schema).await?,
            (schema, _) => self.tool_loop(&mut state, schema.as_ref()).await?,
        };
        Ok(AgentOutcome {
            backend: BackendName::Claw,
            output,
            text,
            usage: state.usage,
            steps: state.steps,
            formatting_pass_used: formatting,
            session_id: None,
            messages: state.messages,
        })
    }

    /// Tool-free structured output: one call, then one repair turn.
    async fn structured(
        &self,
        state: &mut State,
        schema: &OutputSchema,
    ) -> Result<(Value, String, bool), AgentError> {
        let mut errors = Vec::new();
        for attempt in 0..2 {
            let resp = self.call(state, &[], Some(schema)).await?;
            let text = resp.message.text();
            state.messages.push(resp.message.clone());
            match candidate(&resp) {
                Some(v) => {
                    errors = schema.errors(&v);
                    if errors.is_empty() {
                        return Ok((v, text, attempt > 0));
                    }
                }
                None => errors = vec!["the answer is not a JSON object".to_owned()],
            }
            if attempt == 0 {
                state.messages.push(repair_message(&resp.message, &errors));
            }
        }
        Err(AgentError::SchemaMismatch { errors })
    }

    /// The tool loop, then (with a schema) the JSON check and at most one
    /// tool-free structured turn.
    async fn tool_loop(
        &self,
        state: &mut State,
        schema: Option<&OutputSchema>,
    ) -> Result<(Value, String, bool), AgentError> {
        let max = self.task.max_steps();
        let mut turn = 0;
        let final_text = loop {
            turn += 1;
            let resp = self.call(state, &self.tools, None).await?;
            let uses: Vec<(String, String, Value)> = resp
                .message
                .tool_uses()
                .into_iter()
                .map(|(i, n, v)| (i.to_owned(), n.to_owned(), v.clone()))
                .collect();
            let text = resp.message.text();
            state.messages.push(resp.message);
            if uses.is_empty() {
                break text;
            }
            if turn >= max {
                return Err(AgentError::ToolMaxStepsExceeded { max });
            }
            let mut results = Vec::with_capacity(uses.len());
            for (id, name, input) in uses {
                results.push(
                    self.run_tool(&id, &name, &input, &mut state.plan_mode)
                        .await?,
                );
            }
            state.messages.push(Message {
                role: Role::User,
                content: results,
            });
        };
        let Some(schema) = schema else {
            return Ok((json!({ "text": final_text }), final_text, false));
        };
        let errors = match extract_json(&final_text) {
            Some(v) => {
                let errors = schema.errors(&v);
                if errors.is_empty() {
                    return Ok((v, final_text, false));
                }
                errors
            }
            None => vec!["the final answer is not a JSON object".to_owned()],
        };
        // The repair turn: same conversation, tools withheld, schema forced.
        state.messages.push(Message::user_text(format!(
            "Your final answer does not match the required output schema ({}). Respond now with only the JSON object matching the schema.",
            errors.join("; ")
        )));
        let resp = self.call(state, &self.tools, Some(schema)).await?;
        let text = resp.message.text();
        state.messages.push(resp.message.clone());
        let Some(v) = candidate(&resp) else {
            return Err(AgentError::SchemaMismatch {
                errors: vec!["the repair answer is not a JSON object".to_owned()],
            });
        };
        let errors = schema.errors(&v);
        if errors.is_empty() {
            Ok((v, text, true))
        } else {
            Err(AgentError::SchemaMismatch { errors })
        }
    }

    async fn run_tool(
        &self,
        id: &str,
        wire: &str,
        input: &Value,
        plan_mode: &mut bool,
    ) -> Result<Block, AgentError> {
        let input_size = input.to_string().len() as u64;
        // The model calls wire names; everything else names the qualified one.
        let entry = self.tools.iter().find(|e| e.spec.name == wire);
        let qualified = entry.map_or_else(|| qualify(wire), |e| e.name.clone());
        let name = qualified.as_str();
        let here = if self.in_sandbox { "container" } else { "host" };
        // Refused before it runs anywhere, offered or not.
        if let Err(reason) = self.task.policy().admit_call(name, id, here, self.sink) {
            return Ok(Block::ToolResult {
                tool_use_id: id.to_owned(),
                content: reason,
                is_error: true,
            });
        }
        let placement = match entry.map_or(Placement::Refused, ToolEntry::placement) {
            Placement::Sandbox => here,
            p => p.as_str(),
        };
        self.sink.emit(EventKind::ToolStarted {
            tool: name.to_owned(),
            tool_use_id: id.to_owned(),
            input_size,
            placement: placement.to_owned(),
            server: crate::tools::mcp_server_of(name),
        });
        let started = Instant::now();
        let result = match entry {
            // The model may only call what the node offered it.
            None => Err(format!("tool {name:?} is not available to this agent")),
            Some(_) if *plan_mode && !meta::plan_mode_admits(name) => {
                Err(meta::plan_mode_refusal(name))
            }
            // The loop's own tools: served here, with what only it holds.
            Some(ToolEntry {
                class: ToolClass::Builtin { builtin },
                ..
            }) if matches!(
                builtin,
                Builtin::ToolSearch | Builtin::EnterPlanMode | Builtin::ExitPlanMode
            ) =>
            {
                match builtin {
                    Builtin::ToolSearch => {
                        let offered: Vec<_> = self.tools.iter().map(|t| t.spec.clone()).collect();
                        meta::tool_search(input, &offered)
                    }
                    Builtin::EnterPlanMode => Ok(meta::enter_plan_mode(plan_mode)),
                    _ => Ok(meta::exit_plan_mode(plan_mode)),
                }
            }
            Some(entry) => {
                // Cancellation first: a call cut short by it (a question
                // the run pauses on) must not become a result the model
                // is sent.
                tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => return Err(AgentError::Cancelled),
                    r = self.dispatch.call(entry, input) => r,
                }
            }
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (content, is_error) = match result {
            Ok(out) => {
                self.sink.emit(EventKind::ToolCalled {
                    tool: name.to_owned(),
                    tool_use_id: id.to_owned(),
                    input_size,
                    output_size: out.len() as u64,
                    duration_ms,
                    placement: placement.to_owned(),
                    server: crate::tools::mcp_server_of(name),
                });
                (out, false)
            }
            Err(err) => {
                self.sink.emit(EventKind::ToolError {
                    tool: name.to_owned(),
                    tool_use_id: id.to_owned(),
                    input_size,
                    duration_ms,
                    error: bounded(&err, 500),
                    placement: placement.to_owned(),
                    server: crate::tools::mcp_server_of(name),
                });
                (err, true)
            }
        };
        Ok(Block::ToolResult {
            tool_use_id: id.to_owned(),
            content: truncate_tool_result(content, TOOL_RESULT_CAP),
            is_error,
        })
    }

    /// One model call with retries, events and the budget check.
    async fn call(
        &self,
        state: &mut State,
        tools: &[ToolEntry],
        schema: Option<&OutputSchema>,
    ) -> Result<ChatResponse, AgentError> {
        self.check_budget(state, false)?;
        let req = ChatRequest {
            model: self.model.model.clone(),
            system: self.task.system_prompt.clone(),
            messages: state.messages.clone(),
            tools: tools.iter().map(|t| t.spec.clone()).collect(),
            max_tokens: self.task.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            max_tokens_explicit: self.task.max_tokens.is_some(),
            structured: schema.map(|s| StructuredOutput {
                name: STRUCTURED_OUTPUT_TOOL.to_owned(),
                schema: s.raw().clone(),
            }),
            stream: self.task.stream,
        };
        self.sink.emit(EventKind::LlmRequest {
            backend: BackendName::Claw.as_str().to_owned(),
            model: self.model.qualified(),
            message_count: u32::try_from(req.messages.len()).unwrap_or(u32::MAX),
            tool_count: u32::try_from(req.tools.len()).unwrap_or(u32::MAX),
        });
        let retry = self.task.retry;
        let mut attempt = 1;
        let resp = loop {
            // Checked first: the first poll of a request may already send
            // it, and a cancelled node makes no further model call.
            let result = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(AgentError::Cancelled),
                r = self.client.chat(&req) => r,
            };
            match result {
                Ok(resp) => break resp,
                Err(e) if e.is_transient() && attempt < retry.max_attempts.max(1) => {
                    let delay = retry.delay(attempt - 1);
                    self.sink.emit(EventKind::LlmRetry {
                        attempt,
                        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        error: e.to_string(),
                        status_code: status_of(&e),
                    });
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.cancel.cancelled() => return Err(AgentError::Cancelled),
                    }
                    attempt += 1;
                }
                Err(e) if e.is_transient() => {
                    return Err(AgentError::RetriesExhausted {
                        provider: self.client.provider().as_str().to_owned(),
                        attempts: attempt,
                        status: status_of(&e),
                        last_error: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
        };
        state.steps += 1;
        let cost = resp.usage.cost_usd.or_else(|| {
            estimate_cost_usd(
                &self.model.model,
                resp.usage.input_tokens,
                resp.usage.output_tokens,
            )
        });
        state.usage.input_tokens += resp.usage.input_tokens;
        state.usage.output_tokens += resp.usage.output_tokens;
        if let Some(c) = cost {
            state.usage.cost_usd = Some(state.usage.cost_usd.unwrap_or(0.0) + c);
        }
        self.sink.emit(EventKind::LlmStepFinished {
            step: state.steps,
            input_tokens: resp.usage.input_tokens,
            output_tokens: resp.usage.output_tokens,
            finish_reason: resp.stop.as_str().to_owned(),
            tool_calls: u32::try_from(resp.message.tool_uses().len()).unwrap_or(u32::MAX),
            cost_usd: cost,
        });
        self.check_budget(state, true)?;
        Ok(resp)
    }

    /// Upstream thresholds: warn once per dimension at 80 %, stop at 100 %.
    fn check_budget(&self, state: &mut State, after_call: bool) -> Result<(), AgentError> {
        let Some(b) = self.task.budget else {
            return Ok(());
        };
        #[allow(clippy::cast_precision_loss)]
        let tokens = (b.used_tokens + state.usage.input_tokens + state.usage.output_tokens) as f64;
        let cost = b.used_cost_usd + state.usage.cost_usd.unwrap_or(0.0);
        #[allow(clippy::cast_precision_loss)]
        let dims = [
            ("tokens", tokens, b.max_tokens.map(|m| m as f64)),
            ("cost_usd", cost, b.max_cost_usd),
        ];
        for (dimension, used, limit) in dims {
            let Some(limit) = limit.filter(|l| *l > 0.0) else {
                continue;
            };
            if used >= limit {
                self.sink.emit(EventKind::BudgetExceeded {
                    dimension: dimension.to_owned(),
                    used,
                    limit,
                });
                return Err(AgentError::BudgetExceeded {
                    dimension: dimension.to_owned(),
                    used,
                    limit,
                });
            }
            let warned = if dimension == "tokens" {
                &mut state.warned_tokens
            } else {
                &mut state.warned_cost
            };
            if after_call && used >= 0.8 * limit && !*warned {
                *warned = true;
                self.sink.emit(EventKind::BudgetWarning {
                    dimension: dimension.to_owned(),
                    used,
                    limit,
                });
            }
        }
        Ok(())
    }
}

/// The parsed model and its provider client, with the credential checks
/// (missing key named by its variable, subscription token refused).
pub(crate) fn prepare_client(
    task: &AgentTask,
    creds: &crate::credentials::ProviderCredentials,
    env: &crate::env::EnvSnapshot,
    resolver: crate::http::ResolverMode,
) -> Result<(ModelSpec, ProviderClient), AgentError> {
    let model = ModelSpec::parse(task.model.as_deref().unwrap_or_default())?;
    let vars = creds.for_provider(model.provider)?;
    let http = crate::http::HttpSettings::from_env(env, resolver).client()?;
    let client = ProviderClient::new(&model, &vars, http, creds.redactor())?;
    Ok((model, client))
}

/// `CLAW_BASH_TIMEOUT` (a Go-style duration such as `15m`, or seconds);
/// `0` leaves cancellation as the only bound; unset or unparsable is the
/// 30 s default.
pub(crate) fn bash_timeout(env: &crate::env::EnvSnapshot) -> Option<std::time::Duration> {
    use crate::tools::builtin::DEFAULT_BASH_TIMEOUT;
    let Some(raw) = env.get("CLAW_BASH_TIMEOUT").map(str::trim) else {
        return Some(DEFAULT_BASH_TIMEOUT);
    };
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (num, unit) = raw.split_at(split);
    let Ok(n) = num.parse::<u64>() else {
        return Some(DEFAULT_BASH_TIMEOUT);
    };
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "ms" => return (n > 0).then(|| std::time::Duration::from_millis(n)),
        _ => return Some(DEFAULT_BASH_TIMEOUT),
    };
    (secs > 0).then(|| std::time::Duration::from_secs(secs))
}

fn status_of(e: &AgentError) -> Option<u16> {
    match e {
        AgentError::ProviderStatus { status, .. } => Some(*status),
        _ => None,
    }
}

/// The structured candidate of an answer: the forced tool's input, or JSON
/// in the text.
fn candidate(resp: &ChatResponse) -> Option<Value> {
    resp.message
        .tool_uses()
        .into_iter()
        .find(|(_, n, _)| *n == STRUCTURED_OUTPUT_TOOL)
        .map(|(_, _, v)| v.clone())
        .or_else(|| extract_json(&resp.message.text()))
}

/// The repair turn after a structured answer: a tool_use must be answered
/// by a tool_result (Anthropic insists), text by text.
fn repair_message(answer: &Message, errors: &[String]) -> Message {
    let why = format!(
        "The output does not match the required schema: {}. Produce it again, matching the schema exactly.",
        errors.join("; ")
    );
    let uses = answer.tool_uses();
    if uses.is_empty() {
        return Message::user_text(why);
    }
    Message {
        role: Role::User,
        content: uses
            .into_iter()
            .map(|(id, _, _)| Block::ToolResult {
                tool_use_id: id.to_owned(),
                content: why.clone(),
                is_error: true,
            })
            .collect(),
    }
}

/// Cut a tool result to `cap` bytes on a character boundary, with the marker.
pub fn truncate_tool_result(mut s: String, cap: usize) -> String {
    if s.len() <= cap {
        return s;
    }
    let mut end = cap.saturating_sub(TRUNCATION_MARKER.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(TRUNCATION_MARKER);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_timeout_table() {
        use std::time::Duration;
        let env = |v: &str| crate::env::EnvSnapshot::new().with("CLAW_BASH_TIMEOUT", v);
        assert_eq!(
            bash_timeout(&crate::env::EnvSnapshot::new()),
            Some(Duration::from_secs(30))
        );
        assert_eq!(bash_timeout(&env("15m")), Some(Duration::from_secs(900)));
        assert_eq!(bash_timeout(&env("45")), Some(Duration::from_secs(45)));
        assert_eq!(bash_timeout(&env("0")), None);
        assert_eq!(bash_timeout(&env("soon")), Some(Duration::from_secs(30)));
    }

    #[test]
    fn truncation_keeps_cap_and_marks() {
        let s = "é".repeat(100);
        let t = truncate_tool_result(s, 64);
        assert!(t.len() <= 64);
        assert!(t.ends_with(TRUNCATION_MARKER));
        assert_eq!(truncate_tool_result("short".into(), 64), "short");
    }

    #[test]
    fn repair_answers_tool_uses_with_results() {
        let answer = Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: "t9".into(),
                name: STRUCTURED_OUTPUT_TOOL.into(),
                input: json!({}),
            }],
        };
        let m = repair_message(&answer, &["at /: bad".into()]);
        assert!(
            matches!(&m.content[0], Block::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "t9")
        );
        let m = repair_message(&Message::user_text("x"), &["e".into()]);
        assert!(matches!(&m.content[0], Block::Text { .. }));
    }
}
