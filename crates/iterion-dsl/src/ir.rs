//! The compiled form of a workflow: what the runtime executes.
//!
//! This is the contract between the compiler and `iterion-runtime`. It is
//! plain data; every name is already resolved and checked by the compiler.

use std::collections::BTreeMap;

use iterion_core::agent::McpServerSpec;
use iterion_core::{NodeId, Spec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A position in a source file (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column (in characters), from 1.
    pub column: u32,
}

/// One compiled workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// Workflow name.
    pub name: String,
    /// Entry node.
    pub entry: NodeId,
    /// Nodes by id.
    pub nodes: BTreeMap<NodeId, Node>,
    /// Edges in source order (evaluation order for a node's outgoing edges).
    pub edges: Vec<Edge>,
    /// Variables (top-level `vars:` merged with the workflow's own).
    pub vars: BTreeMap<String, VarDecl>,
    /// Schemas by name.
    pub schemas: BTreeMap<String, Schema>,
    /// The workflow-level `sandbox:` block, when written.
    pub sandbox: Option<SandboxDecl>,
    /// `worktree:` (`auto` / `none`), when written.
    pub worktree: Option<String>,
    /// `budget:` entries.
    pub budget: BTreeMap<String, Value>,
    /// Secrets the workflow asks for.
    pub secrets: Vec<SecretDecl>,
    /// `prompt NAME:` bodies by name, as written (`{{…}}` rendered at run
    /// time). A node's `system:`/`user:` names one of these, or is an
    /// inline prompt when it names none.
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    /// Every other workflow-level property as written (`default_backend`,
    /// `interaction`, …), for the engine and the agent seam.
    #[serde(default)]
    pub properties: BTreeMap<String, Value>,
    /// The declared `mcp_server` blocks by name (host-side `${VAR}`
    /// references not yet expanded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServerSpec>,
    /// The declared `attachments:` (top level and the workflow's own) by
    /// name: what `iterion run --attach NAME=PATH` may provide.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attachments: BTreeMap<String, AttachmentDecl>,
    /// The `presets:` by name: variable values `iterion run --preset NAME`
    /// applies before `--var` (each value already of its variable's type).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub presets: BTreeMap<String, BTreeMap<String, Value>>,
    /// Where the workflow is declared.
    pub pos: Pos,
}

/// One declared attachment (`NAME: file|image` with optional
/// `description:`, `accept_mime:`, `required:`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AttachmentDecl {
    /// `file` or `image` as written (`file` when omitted).
    pub kind: String,
    /// `description:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `accept_mime:` patterns (`type/subtype`, `*` allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept_mime: Vec<String>,
    /// `required: true`: a launch without it is refused, and losing it
    /// fails the run (`run_attachment_lost`).
    #[serde(default)]
    pub required: bool,
}

impl Workflow {
    /// Outgoing edges of a node, in source order.
    pub fn edges_from<'a>(&'a self, node: &'a NodeId) -> impl Iterator<Item = &'a Edge> + 'a {
        self.edges.iter().filter(move |e| &e.from == node)
    }
}

/// A workflow-level or node-level `sandbox:` declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxDecl {
    /// The typed spec (host-side variables not yet expanded).
    pub spec: Spec,
    /// Whether `mode:` was written (a block without it is `inline`).
    pub mode_written: bool,
    /// Short form (`sandbox: auto`) vs block.
    pub short_form: bool,
    /// Where.
    pub pos: Pos,
}

/// Node kinds of the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// LLM agent.
    Agent,
    /// LLM judge.
    Judge,
    /// Router (fan-out / condition / llm).
    Router,
    /// Human input.
    Human,
    /// Shell tool.
    Tool,
    /// Expression evaluation.
    Compute,
    /// Event emission (`emit`).
    Emit,
    /// Event wait (`wait`).
    Wait,
    /// Sync point for async questions (`await_answers`).
    AwaitAnswers,
    /// Child workflow (`subbot`).
    Subbot,
    /// Named terminal failure (`fail NAME:`).
    Fail,
    /// Legacy convergence node (`join NAME:` with `strategy:`/`require:`).
    Join,
}

impl NodeKind {
    /// The keyword.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Judge => "judge",
            Self::Router => "router",
            Self::Human => "human",
            Self::Tool => "tool",
            Self::Compute => "compute",
            Self::Emit => "emit",
            Self::Wait => "wait",
            Self::AwaitAnswers => "await_answers",
            Self::Subbot => "subbot",
            Self::Fail => "fail",
            Self::Join => "join",
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Id (its declared name).
    pub id: NodeId,
    /// Kind.
    pub kind: NodeKind,
    /// The executable part of a tool node.
    pub tool: Option<ToolSpec>,
    /// Router mode (`fan_out_all`, `condition`, `round_robin`, `llm`…), when a router.
    pub router_mode: Option<String>,
    /// Input schema name.
    pub input: Option<String>,
    /// Output schema name.
    pub output: Option<String>,
    /// Node-level sandbox block (parsed, never honoured at run time).
    pub sandbox: Option<SandboxDecl>,
    /// Every other property as written (for kinds this engine does not
    /// execute yet, and for tooling).
    pub properties: BTreeMap<String, Value>,
    /// The MCP servers an agent or judge may use, in order: the
    /// workflow's `mcp: servers:` (unless the node's `mcp: inherit: false`)
    /// plus the node's own `servers:`, minus both `disable:` lists
    /// (upstream `resolveNodeActiveServers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// Where.
    pub pos: Pos,
}

/// A tool node's command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolSpec {
    /// `command:` run through `bash -c` (or `sh -c`).
    Command(String),
    /// `script:` + `language:`.
    Script {
        /// Script text.
        script: String,
        /// Interpreter (`sh`, `bash`, `python3`, `node`…).
        language: String,
    },
}

/// Where an edge goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A node.
    Node(NodeId),
    /// Successful end.
    Done,
    /// Failed end.
    Fail,
}

/// An edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    /// Source node.
    pub from: NodeId,
    /// Target.
    pub to: Target,
    /// Condition, when conditional.
    pub condition: Option<Condition>,
    /// Loop bound, when the edge closes a cycle (`as name(N)`).
    pub loop_bound: Option<LoopBound>,
    /// `with` mappings: target input field → template expression.
    pub with: BTreeMap<String, String>,
    /// `else`: taken only when no sibling `when` edge matched.
    #[serde(default)]
    pub is_else: bool,
    /// `as foreach NAME(ITEM in "collection")`.
    #[serde(default)]
    pub foreach: Option<ForEach>,
    /// Where.
    pub pos: Pos,
}

/// An edge condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// `when field` / `when not field` on a bool output field.
    Field {
        /// Field of the source's output.
        field: String,
        /// `when not`.
        negated: bool,
    },
    /// `when "expression"`.
    Expr(String),
}

/// `as name(N)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopBound {
    /// Loop name.
    pub name: String,
    /// Maximum iterations (for `unbounded`, its fuel, or `u32::MAX`).
    pub max: u32,
    /// `as name(unbounded [N])`.
    #[serde(default)]
    pub unbounded: bool,
}

/// `as foreach NAME(ITEM in "collection")`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForEach {
    /// Loop name.
    pub name: String,
    /// Element binding.
    pub item: String,
    /// Collection expression.
    pub collection: String,
}

/// A schema.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Schema {
    /// Fields in order.
    pub fields: Vec<Field>,
}

/// A schema field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Name.
    pub name: String,
    /// Type.
    pub ty: FieldType,
    /// Allowed values (`enum`), when restricted.
    pub enum_values: Vec<String>,
}

/// Field and variable types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// `string`.
    String,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `float`.
    Float,
    /// `json`.
    Json,
    /// `string[]`.
    StringArray,
}

impl FieldType {
    /// The word a workflow writes for it (`string`, `string[]`…), as
    /// diagnostics and answer errors name it.
    pub fn word(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Bool => "bool",
            Self::Int => "int",
            Self::Float => "float",
            Self::Json => "json",
            Self::StringArray => "string[]",
        }
    }
}

/// A variable declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarDecl {
    /// Type.
    pub ty: FieldType,
    /// Default value, when given.
    pub default: Option<Value>,
}

/// A secret the workflow needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretDecl {
    /// Name.
    pub name: String,
    /// How it reaches the sandbox.
    pub delivery: SecretDelivery,
    /// `value:` as written: a host-side `${VAR}` reference (or a text
    /// embedding some), expanded from the host environment at run time.
    /// `None` reads the host variable named like the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `mount_path:` of an `as: file` secret (default
    /// `/run/iterion/secrets/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
    /// `env:` — for `as: env` the variable the value is exported as
    /// (default: the secret's name); for `as: file` a variable holding the
    /// file's container path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// `optional: true`: a missing value is skipped, not refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// `egress:` — the hosts the secret is for (network-rule patterns,
    /// `iterion_core::net`'s grammar, none negated). A bound secret reaches
    /// the sandbox as a per-run placeholder; the egress proxy puts the value
    /// back only on requests to these hosts (issue 17).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<iterion_core::net::NetRule>,
}

/// Secret delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretDelivery {
    /// As an environment variable.
    Env,
    /// As a per-run secret file mount (`as: file`).
    File,
}
