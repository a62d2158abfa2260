//! Agent, judge and `mode: llm` router nodes: the engine's side of the
//! agent seam ([`iterion_core::agent`]).
//!
//! The engine renders the node's `system:`/`user:` prompts (a declared
//! `prompt NAME:` body, or the inline text) with the template module,
//! derives the output schema as JSON Schema, reads the node's backend
//! fields, tools, session and limits, and calls the configured
//! [`AgentRunner`] with the run's sandbox and the node's exec env. The
//! answer is checked against the schema, secret values are masked, the
//! upstream bookkeeping fields (`_backend`, `_tokens`, `_session_id`) are
//! stamped on, and the streamed events are persisted about the node. A
//! judge is an agent whose structured verdict then routes its edges like
//! any output (`routing`); a router's choice is validated here.
//!
//! Which backend runs, how the conversation goes and where each tool runs
//! are the runner's (`iterion-agent`); the next node is the walker's.

use std::collections::BTreeMap;

use iterion_core::EventDraft;
use iterion_core::agent::{
    AgentContext, AgentError, AgentEvents, AgentRequest, AgentRole, BuiltinCall, SessionMode,
};
use iterion_core::{DriverError, FailureCode, NodeId};
use iterion_dsl::ir::{self, FieldType, NodeKind, Schema};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::boot::Booted;
use crate::events::Emitter;
use crate::exec::{NodeError, RunCx};
use crate::progress::FrameId;
use crate::routing;
use crate::secrets::Redactor;
use crate::template::{self, Scope};

/// Whether a node goes through the agent seam.
pub fn is_agent_node(node: &ir::Node) -> bool {
    matches!(node.kind, NodeKind::Agent | NodeKind::Judge)
        || (node.kind == NodeKind::Router && node.router_mode.as_deref() == Some("llm"))
}

/// A human node answered by a model: its `interaction:` (its own, else the
/// workflow's) is `llm` or `llm_or_human` (upstream `compile.go`: a human
/// node inherits the workflow's word, else `human`).
pub fn is_llm_human(workflow: &ir::Workflow, node: &ir::Node) -> bool {
    node.kind == NodeKind::Human
        && matches!(
            node.properties
                .get("interaction")
                .or_else(|| workflow.properties.get("interaction"))
                .and_then(Value::as_str),
            Some("llm" | "llm_or_human")
        )
}

/// The properties admission judges an `interaction: llm*` human node by:
/// the structured call it makes (claw, no tools, `model:` else
/// `interaction_model:`).
pub fn llm_human_properties(node: &ir::Node) -> BTreeMap<String, Value> {
    let mut p = BTreeMap::new();
    p.insert("backend".to_owned(), json!("claw"));
    if let Some(m) = llm_human_model(node) {
        p.insert("model".to_owned(), json!(m));
    }
    p
}

/// `model:`, else `interaction_model:` (upstream's IR documents that
/// fallback; its executor reads `model:` only and fails without it).
fn llm_human_model(node: &ir::Node) -> Option<String> {
    text_prop(node, "model")
        .filter(|m| !m.is_empty())
        .or_else(|| text_prop(node, "interaction_model"))
}

/// The field `llm_or_human` adds to the node's schema.
pub const NEEDS_HUMAN_INPUT: &str = "needs_human_input";

/// A node's effective `tool_policy:` patterns: its own when written (it
/// replaces the workflow's; upstream: nil inherits), else the workflow's;
/// `None` when neither is (open).
pub fn effective_tool_policy(workflow: &ir::Workflow, node: &ir::Node) -> Option<Vec<String>> {
    string_list(node.properties.get("tool_policy"))
        .or_else(|| string_list(workflow.properties.get("tool_policy")))
}

fn string_list(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    })
}

/// The JSON Schema of a DSL schema (upstream `SchemaToJSON`): an object,
/// every field required, nothing else allowed; `json` fields accept any
/// value; a `string[]` enum constrains its items.
pub fn json_schema(schema: &Schema) -> Value {
    let mut properties = Map::new();
    for f in &schema.fields {
        let mut prop = match f.ty {
            FieldType::String => json!({"type": "string"}),
            FieldType::Bool => json!({"type": "boolean"}),
            FieldType::Int => json!({"type": "integer"}),
            FieldType::Float => json!({"type": "number"}),
            FieldType::Json => json!({}),
            FieldType::StringArray => {
                let mut items = json!({"type": "string"});
                if !f.enum_values.is_empty() {
                    items["enum"] = json!(f.enum_values);
                }
                json!({"type": "array", "items": items})
            }
        };
        if !f.enum_values.is_empty() && !matches!(f.ty, FieldType::StringArray | FieldType::Json) {
            prop["enum"] = json!(f.enum_values);
        }
        properties.insert(f.name.clone(), prop);
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": schema.fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        "additionalProperties": false,
    })
}

/// The schema a `mode: llm` router answers with (upstream's auto-generated
/// routing schema).
fn router_schema(multi: bool, candidates: &[String]) -> (Value, Schema) {
    let (key, ty) = if multi {
        ("selected_routes", FieldType::StringArray)
    } else {
        ("selected_route", FieldType::String)
    };
    let schema = Schema {
        fields: vec![
            ir::Field {
                name: key.into(),
                ty,
                enum_values: candidates.to_vec(),
            },
            ir::Field {
                name: "reasoning".into(),
                ty: FieldType::String,
                enum_values: Vec::new(),
            },
        ],
    };
    (json_schema(&schema), schema)
}

/// A prompt property: the body of the declared prompt it names, else the
/// inline text it is.
fn prompt_text<'w>(workflow: &'w ir::Workflow, node: &'w ir::Node, key: &str) -> Option<&'w str> {
    let v = node.properties.get(key)?.as_str()?;
    Some(workflow.prompts.get(v).map_or(v, String::as_str))
}

fn text_prop(node: &ir::Node, key: &str) -> Option<String> {
    match node.properties.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn u32_prop(node: &ir::Node, key: &str) -> Option<u32> {
    node.properties
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// Every template an agent node renders, for admission's syntax check.
pub fn prompt_templates<'w>(
    workflow: &'w ir::Workflow,
    node: &'w ir::Node,
) -> Vec<(&'static str, &'w str)> {
    ["system", "user"]
        .into_iter()
        .filter_map(|k| prompt_text(workflow, node, k).map(|t| (k, t)))
        .collect()
}

/// Build the request of one agent call.
pub(crate) fn build_request(
    cx_run: &iterion_core::RunId,
    workflow: &ir::Workflow,
    node: &ir::Node,
    scope: &Scope<'_>,
    role: AgentRole,
) -> Result<(AgentRequest, Option<Schema>), NodeError> {
    let render = |key: &str| -> Result<Option<String>, NodeError> {
        prompt_text(workflow, node, key)
            .map(|t| template::render_text(t, scope))
            .transpose()
            .map_err(|e| {
                NodeError::failed(
                    FailureCode::NodeFailed,
                    format!("{key} prompt: {e} ({})", e.code()),
                )
            })
    };
    let system_prompt = render("system")?;
    let user_prompt = match render("user")? {
        Some(text) => text,
        None if scope.input.is_empty() => String::new(),
        // Upstream: without a user prompt the input is the message.
        None => Value::Object(scope.input.clone()).to_string(),
    };
    let (output_schema, schema) = match &role {
        AgentRole::Router { multi, candidates } => {
            let (json, schema) = router_schema(*multi, candidates);
            (Some(json), Some(schema))
        }
        _ => {
            let schema = node
                .output
                .as_ref()
                .and_then(|n| workflow.schemas.get(n))
                .cloned();
            (schema.as_ref().map(json_schema), schema)
        }
    };
    let session = match text_prop(node, "session") {
        None => SessionMode::Fresh,
        Some(word) => SessionMode::parse(&word).ok_or_else(|| {
            NodeError::failed(
                FailureCode::NodeFailed,
                format!("unknown session mode {word:?}"),
            )
        })?,
    };
    let session_id = match session {
        SessionMode::Inherit | SessionMode::InheritIfAvailable | SessionMode::Fork => scope
            .input
            .get("_session_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        SessionMode::Fresh | SessionMode::ArtifactsOnly => None,
    };
    let tools = string_list(node.properties.get("tools")).unwrap_or_default();
    let tool_policy = effective_tool_policy(workflow, node);
    let request = AgentRequest {
        run_id: cx_run.clone(),
        node: node.id.clone(),
        role,
        system_prompt,
        user_prompt,
        model: text_prop(node, "model"),
        backend: text_prop(node, "backend"),
        default_backend: workflow
            .properties
            .get("default_backend")
            .and_then(Value::as_str)
            .map(str::to_owned),
        provider: text_prop(node, "provider"),
        tools,
        tool_policy,
        output_schema,
        session,
        session_id,
        tool_max_steps: u32_prop(node, "tool_max_steps"),
        max_tokens: u32_prop(node, "max_tokens"),
        reasoning_effort: text_prop(node, "reasoning_effort"),
        input: scope.input.clone(),
        properties: node.properties.clone(),
        mcp_servers: node
            .mcp_servers
            .iter()
            .filter_map(|n| workflow.mcp_servers.get(n).cloned())
            .collect(),
    };
    let mut request = request;
    // Who answers `ask_user` (upstream `resume.go`): the effective
    // `interaction:` word, the interaction model and its rendered prompt,
    // for the agent runner.
    if matches!(node.kind, NodeKind::Agent | NodeKind::Judge) {
        for key in ["interaction", "interaction_model"] {
            if let Some(v) = node
                .properties
                .get(key)
                .or_else(|| workflow.properties.get(key))
            {
                request.properties.insert(key.to_owned(), v.clone());
            }
        }
        if let Some(p) = render("interaction_prompt")? {
            request
                .properties
                .insert("interaction_prompt".to_owned(), Value::String(p));
        }
    }
    Ok((request, schema))
}

/// Persists a node's agent events in order, masked, tagged with the node
/// and its branch.
struct NodeEvents {
    emitter: Emitter,
    node: NodeId,
    branch: Option<String>,
    redactor: Redactor,
}

impl AgentEvents for NodeEvents {
    fn emit(&self, event: EventDraft) {
        let mut draft = event.for_node(self.node.clone());
        self.redactor.redact_json(&mut draft.data);
        self.emitter
            .emit_draft(draft.in_branch(self.branch.as_deref()));
    }
}

/// The run log as the agent runner keeps it past one node (an MCP
/// server's stderr): masked by the emitter like every line.
struct RunLogOf(Emitter);

impl iterion_core::agent::RunLog for RunLogOf {
    fn line(&self, stream: &str, text: String) {
        self.0.logs(vec![iterion_core::store::NewLogLine {
            stream: stream.to_owned(),
            node_id: None,
            line: text,
        }]);
    }
}

fn agent_failure(e: AgentError) -> NodeError {
    match e {
        AgentError::Sandbox {
            source: DriverError::Cancelled,
        } => NodeError::Cancelled,
        AgentError::Sandbox { source } => NodeError::driver(source),
        other => NodeError::failed(
            FailureCode::NodeFailed,
            format!("{} ({})", other, other.code()),
        ),
    }
}

impl RunCx<'_> {
    /// Where a node's agent events go.
    fn node_events(&self, frame: &FrameId, node: &ir::Node) -> NodeEvents {
        NodeEvents {
            emitter: self.events.clone(),
            node: node.id.clone(),
            branch: frame.branch_id().map(str::to_owned),
            redactor: self.booted.secrets().redactor.clone(),
        }
    }

    /// The seam's context of a node's call.
    fn agent_context<'e>(&'e self, node: &ir::Node, events: &'e NodeEvents) -> AgentContext<'e> {
        AgentContext {
            ask: None,
            sandbox: self.booted.run().as_ref(),
            sandboxed: matches!(self.booted, Booted::Sandbox { .. }),
            exec_env: self.exec_env(&node.id),
            provider_placeholders: self.booted.secrets().provider_placeholders.clone(),
            events,
            run_log: std::sync::Arc::new(RunLogOf(self.events.clone())),
        }
    }

    /// Run an agent, judge or llm-router node through the seam; its
    /// checked output.
    pub(crate) async fn run_agent(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        scope: &Scope<'_>,
        role: AgentRole,
        resumed: Option<String>,
        cancel: &CancellationToken,
    ) -> Result<Value, NodeError> {
        let Some(runner) = self.agents else {
            // Admission refuses these without a runner; fail closed.
            return Err(NodeError::failed(
                FailureCode::NodeFailed,
                "no agent backend is configured in this engine",
            ));
        };
        let (request, schema) = build_request(self.run_id, self.workflow, node, scope, role)?;
        let secrets = self.booted.secrets();
        let events = self.node_events(frame, node);
        let mut cx = self.agent_context(node, &events);
        let ask = crate::ask_user::interactive(self.workflow, node).then(|| {
            std::sync::Arc::new(crate::ask_user::NodeAsk::new(
                node.id.clone(),
                self.human.clone(),
                frame.is_main(),
                resumed,
            ))
        });
        let paused = ask.as_ref().map(|a| a.paused()).unwrap_or_default();
        cx.ask = ask
            .clone()
            .map(|a| a as std::sync::Arc<dyn iterion_core::agent::AskHuman>);
        let outcome = tokio::select! {
            r = runner.run(request, cx) => r.map_err(agent_failure)?,
            () = cancel.cancelled() => return Err(NodeError::Cancelled),
            // The node stops; it runs again when the human has answered.
            () = paused.cancelled() => {
                let question = ask.and_then(|a| a.pending()).unwrap_or_default();
                return Err(NodeError::AskedHuman { question });
            }
        };
        let mut output = outcome.output;
        // Upstream's bookkeeping fields, readable by later nodes (`with`
        // `_session_id` into an `inherit` node) and by budgets.
        output.insert("_backend".into(), Value::String(outcome.backend));
        output.insert(
            "_tokens".into(),
            json!(outcome.usage.input_tokens + outcome.usage.output_tokens),
        );
        if let Some(cost) = outcome.usage.cost_usd {
            output.insert("_cost_usd".into(), json!(cost));
        }
        if let Some(sid) = outcome.session_id {
            output.insert("_session_id".into(), Value::String(sid));
        }
        let mut output = routing::check_output(output, schema.as_ref()).map_err(|e| {
            NodeError::failed(
                FailureCode::NodeFailed,
                format!(
                    "agent output does not match schema {}: {e}",
                    node.output.as_deref().unwrap_or("(router)")
                ),
            )
        })?;
        // Agent output becomes event data: mask what a secret value looks
        // like, as for a tool's stdout.
        secrets.redactor.redact_json(&mut output);
        Ok(output)
    }
}

impl RunCx<'_> {
    /// A human node with `interaction: llm` / `llm_or_human` (upstream
    /// `executeHumanLLM`, `pkg/backend/model/executor.go`): one structured
    /// call on claw with the node's `model:` (else `interaction_model:`)
    /// and rendered `system:`, the node's input as JSON for the user
    /// message (`instructions:` is not sent, as upstream), no tools, the
    /// node's `output:` schema — plus `needs_human_input: bool` when
    /// `ask_human` (`llm_or_human`). The checked output (without the flag)
    /// and the flag's value.
    pub(crate) async fn run_human_llm(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        input: &Map<String, Value>,
        ask_human: bool,
        cancel: &CancellationToken,
    ) -> Result<(Value, bool), NodeError> {
        let Some(runner) = self.agents else {
            return Err(NodeError::failed(
                FailureCode::NodeFailed,
                "no agent backend is configured in this engine",
            ));
        };
        let visible = self.visible(frame);
        let scope = Scope {
            vars: &self.vars,
            input,
            outputs: &visible,
            output: None,
        };
        let (mut request, schema) =
            build_request(self.run_id, self.workflow, node, &scope, AgentRole::Agent)?;
        request.user_prompt = Value::Object(input.clone()).to_string();
        request.backend = Some("claw".to_owned());
        request.default_backend = None;
        request.model = llm_human_model(node);
        request.tools = Vec::new();
        request.tool_policy = None;
        request.mcp_servers = Vec::new();
        request.session = SessionMode::Fresh;
        request.session_id = None;
        if ask_human {
            let mut js = request.output_schema.take().unwrap_or_else(
                || json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false}),
            );
            js["properties"][NEEDS_HUMAN_INPUT] = json!({"type": "boolean"});
            if let Some(req) = js["required"].as_array_mut() {
                req.push(json!(NEEDS_HUMAN_INPUT));
            }
            request.output_schema = Some(js);
        }
        let model = request.model.clone();
        let secrets = self.booted.secrets();
        let events = self.node_events(frame, node);
        let cx = self.agent_context(node, &events);
        let outcome = tokio::select! {
            r = runner.run(request, cx) => r.map_err(agent_failure)?,
            () = cancel.cancelled() => return Err(NodeError::Cancelled),
        };
        let mut output = outcome.output;
        let needs = if ask_human {
            match output.remove(NEEDS_HUMAN_INPUT) {
                Some(Value::Bool(b)) => b,
                other => {
                    return Err(NodeError::failed(
                        FailureCode::NodeFailed,
                        format!(
                            "llm_or_human answer: {NEEDS_HUMAN_INPUT} must be a bool, got {other:?}"
                        ),
                    ));
                }
            }
        } else {
            false
        };
        output.insert(
            "_tokens".into(),
            json!(outcome.usage.input_tokens + outcome.usage.output_tokens),
        );
        if let Some(m) = model {
            output.insert("_model".into(), Value::String(m));
        }
        let mut output = routing::check_output(output, schema.as_ref()).map_err(|e| {
            NodeError::failed(
                FailureCode::NodeFailed,
                format!(
                    "human llm answer does not match schema {}: {e}",
                    node.output.as_deref().unwrap_or("-")
                ),
            )
        })?;
        secrets.redactor.redact_json(&mut output);
        Ok((output, needs))
    }

    /// The built-in a tool node's command names, when the agent runner
    /// knows it (upstream resolves such a command in the tool registry).
    pub(crate) fn builtin_of<'n>(&self, node: &'n ir::Node) -> Option<&'n str> {
        let ir::ToolSpec::Command(command) = node.tool.as_ref()? else {
            return None;
        };
        let name = command.trim();
        self.agents
            .is_some_and(|a| a.is_builtin_tool(name))
            .then_some(name)
    }

    /// A node's output as `node_finished` records it (a built-in may
    /// keep clear values out of the record).
    pub(crate) fn output_for_event(&self, node: &ir::Node, output: &Value) -> Value {
        match (self.builtin_of(node), self.agents) {
            (Some(tool), Some(runner)) => runner.builtin_output_for_event(tool, output.clone()),
            _ => output.clone(),
        }
    }

    /// Run a tool node's built-in with the node's input, through the agent
    /// seam (where it runs is the runner's placement table): its output.
    pub(crate) async fn run_builtin(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        tool: &str,
        scope: &Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<Value, NodeError> {
        let Some(runner) = self.agents else {
            return Err(NodeError::failed(
                FailureCode::NodeFailed,
                "no agent runner serves built-in tools in this engine",
            ));
        };
        let secrets = self.booted.secrets();
        let events = self.node_events(frame, node);
        let cx = self.agent_context(node, &events);
        let call = BuiltinCall {
            run_id: self.run_id.clone(),
            node: node.id.clone(),
            tool: tool.to_owned(),
            input: scope.input.clone(),
            tool_policy: effective_tool_policy(self.workflow, node),
        };
        let output = tokio::select! {
            r = runner.call_builtin(call, cx) => r.map_err(agent_failure)?,
            () = cancel.cancelled() => return Err(NodeError::Cancelled),
        };
        let schema = node
            .output
            .as_ref()
            .and_then(|n| self.workflow.schemas.get(n));
        let mut output = routing::check_output(output, schema).map_err(|e| {
            NodeError::failed(
                FailureCode::NodeFailed,
                format!(
                    "{tool} output does not match schema {}: {e}",
                    node.output.as_deref().unwrap_or("-")
                ),
            )
        })?;
        secrets.redactor.redact_json(&mut output);
        Ok(output)
    }
}

/// What the per-run listeners must serve (seed step 18), from the
/// workflow alone: each agent and judge node's backend field and servers.
pub fn listener_needs(workflow: &ir::Workflow) -> iterion_core::agent::ListenerNeeds {
    iterion_core::agent::ListenerNeeds {
        default_backend: workflow
            .properties
            .get("default_backend")
            .and_then(Value::as_str)
            .map(str::to_owned),
        nodes: workflow
            .nodes
            .values()
            .filter(|n| matches!(n.kind, NodeKind::Agent | NodeKind::Judge))
            .map(|n| iterion_core::agent::ListenerNode {
                interactive: crate::ask_user::interactive(workflow, n),
                board: iterion_core::agent::board_capabilities(&n.properties),
                backend: text_prop(n, "backend"),
                mcp_servers: n
                    .mcp_servers
                    .iter()
                    .filter_map(|s| workflow.mcp_servers.get(s).cloned())
                    .collect(),
            })
            .collect(),
    }
}

/// Names and kinds of the nodes only an agent runner can execute.
pub fn agent_nodes(workflow: &ir::Workflow) -> BTreeMap<NodeId, String> {
    workflow
        .nodes
        .values()
        .filter(|n| is_agent_node(n) || is_llm_human(workflow, n))
        .map(|n| {
            let kind = match n.kind {
                NodeKind::Router => "router, mode llm".to_owned(),
                NodeKind::Human => "human, llm interaction".to_owned(),
                k => k.as_str().to_owned(),
            };
            (n.id.clone(), kind)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_dsl::ir::Field;

    #[test]
    fn schemas_become_json_schema() {
        let s = Schema {
            fields: vec![
                Field {
                    name: "approved".into(),
                    ty: FieldType::Bool,
                    enum_values: Vec::new(),
                },
                Field {
                    name: "level".into(),
                    ty: FieldType::String,
                    enum_values: vec!["low".into(), "high".into()],
                },
                Field {
                    name: "tags".into(),
                    ty: FieldType::StringArray,
                    enum_values: vec!["a".into()],
                },
                Field {
                    name: "detail".into(),
                    ty: FieldType::Json,
                    enum_values: Vec::new(),
                },
                Field {
                    name: "n".into(),
                    ty: FieldType::Int,
                    enum_values: Vec::new(),
                },
            ],
        };
        assert_eq!(
            json_schema(&s),
            json!({
                "type": "object",
                "properties": {
                    "approved": {"type": "boolean"},
                    "level": {"type": "string", "enum": ["low", "high"]},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a"]}},
                    "detail": {},
                    "n": {"type": "integer"},
                },
                "required": ["approved", "level", "tags", "detail", "n"],
                "additionalProperties": false,
            })
        );
        let (multi, _) = router_schema(true, &["x".into(), "y".into()]);
        assert_eq!(
            multi["properties"]["selected_routes"]["items"]["enum"],
            json!(["x", "y"])
        );
    }
}
