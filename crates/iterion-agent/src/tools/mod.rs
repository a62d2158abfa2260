//! Agent tools: the placement table (the one home of "where does this tool
//! run": facts §5.6, seed step 20, upstream `SandboxPlacementOf`), the
//! registry a node's `tools:` list is resolved against, the names tools
//! carry (qualified for policies, events and the runner channel; wire
//! names for the model), the tool policy ([`policy`]) and the built-in
//! implementations ([`builtin`]).
//!
//! | Tool | Class | Placement |
//! |---|---|---|
//! | `bash`, `read_file`, `write_file`, `file_edit`, `glob`, `grep`, `web_fetch`, `list_files`, `tree`, `search_codebase`, `git_diff`, `git_status`, `patch`, `run_command`, `sleep`, `structured_output`, `send_user_message`, `config`, `todo_write`, `notebook_edit` | built-in | sandbox (in the runner, in the container) |
//! | `ask_user` | human input | launcher (host) |
//! | `mcp.<server>.<tool>` (alias `mcp__<server>__<tool>`) | MCP | launcher (host) |
//! | `iterion.<tool>` | engine | launcher (host) |
//! | upstream claw names this engine does not serve ([`unavailable`]) | — | accepted by `validate`, the node refused at admission (`AGENT_TOOL_UNAVAILABLE`) |
//! | anything else | — | refused |
//!
//! A qualified name (`mcp.github.create_issue`) is what a workflow, a
//! policy and an event name; providers accept only `[A-Za-z0-9_-]{1,64}`,
//! so the model sees the wire name (`mcp__github__create_issue`) and the
//! registry maps it back. Two tools whose qualified or wire names meet are
//! refused at registration, never shadowed.

pub mod board;
pub mod builtin;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod policy;
pub mod privacy;
mod spec;

pub use builtin::Builtin;
pub use policy::{PolicyDenial, ToolPolicy};
pub use spec::ToolSpec;

use crate::error::AgentError;

/// Where a tool call executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Inside the sandbox: in the runner's process, in the container (or on
    /// the host for an unsandboxed run: the same code, minus the channel).
    Sandbox,
    /// Back on the launcher (host), over a `tool_call` message.
    Launcher,
    /// Nowhere: the engine cannot promise where it would run.
    Refused,
}

impl Placement {
    /// The value of the `placement` field of tool events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "container",
            Self::Launcher => "host",
            Self::Refused => "refused",
        }
    }
}

/// What kind of tool a name denotes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolClass {
    /// One of the built-ins.
    Builtin {
        /// Which.
        builtin: Builtin,
    },
    /// The engine's human-input tool.
    AskUser,
    /// `privacy_filter` / `privacy_unfilter`: text in, text out, with the
    /// run's vault in the run store (host side).
    Privacy,
    /// A tool of an MCP server the launcher runs.
    Mcp {
        /// Server name.
        server: String,
        /// Tool name on that server.
        tool: String,
    },
    /// A tool the engine serves (namespace `iterion.`).
    Engine,
}

impl ToolClass {
    /// The placement of this class.
    pub fn placement(&self) -> Placement {
        match self {
            Self::Builtin { .. } => Placement::Sandbox,
            Self::AskUser | Self::Privacy | Self::Mcp { .. } | Self::Engine => Placement::Launcher,
        }
    }
}

/// Classify a tool name; `None` is an unclassified name.
pub fn classify(name: &str) -> Option<ToolClass> {
    if let Some(builtin) = Builtin::parse(name) {
        return Some(ToolClass::Builtin { builtin });
    }
    if name == "ask_user" {
        return Some(ToolClass::AskUser);
    }
    if privacy::is_privacy_tool(name) {
        return Some(ToolClass::Privacy);
    }
    let mcp = name
        .strip_prefix("mcp.")
        // Servers are DSL identifiers (no dot); a tool name may hold dots.
        .and_then(|rest| rest.split_once('.'))
        .or_else(|| {
            name.strip_prefix("mcp__")
                .and_then(|rest| rest.split_once("__"))
        });
    if let Some((server, tool)) = mcp {
        if !server.is_empty() && !tool.is_empty() {
            return Some(ToolClass::Mcp {
                server: server.to_owned(),
                tool: tool.to_owned(),
            });
        }
        return None;
    }
    if name.strip_prefix("iterion.").is_some_and(|t| !t.is_empty()) {
        return Some(ToolClass::Engine);
    }
    None
}

/// The MCP server an `mcp.<server>.<tool>` (or `mcp__server__tool`)
/// name belongs to, for the tool events.
pub fn mcp_server_of(name: &str) -> Option<String> {
    match classify(name) {
        Some(ToolClass::Mcp { server, .. }) => Some(server),
        _ => None,
    }
}

/// The placement table: the single home of where a tool name runs.
pub fn placement_of(name: &str) -> Placement {
    classify(name).map_or(Placement::Refused, |c| c.placement())
}

/// The canonical (qualified) form of a classified name: the
/// `mcp__server__tool` alias becomes `mcp.server.tool`.
pub fn qualify(name: &str) -> String {
    match classify(name) {
        Some(ToolClass::Mcp { server, tool }) => format!("mcp.{server}.{tool}"),
        _ => name.to_owned(),
    }
}

/// Upstream claw's orchestration tools (`task_*`, `worker_*`, `team_*`,
/// `cron_*`, ...): its vendored claw's own in-process machinery, which a
/// run here has no counterpart for (upstream
/// `pkg/backend/tool/claw_builtins.go` `RegisterClawAll`).
const ORCHESTRATION: &[&str] = &[
    "task_create",
    "task_get",
    "task_list",
    "task_output",
    "task_stop",
    "task_update",
    "run_task_packet",
    "worker_create",
    "worker_get",
    "worker_observe",
    "worker_resolve_trust",
    "worker_await_ready",
    "worker_send_prompt",
    "worker_restart",
    "worker_terminate",
    "worker_observe_completion",
    "team_create",
    "team_get",
    "team_list",
    "team_delete",
    "cron_create",
    "cron_get",
    "cron_list",
    "cron_delete",
    "agent",
    "repl",
    "lsp",
    "remote_trigger",
    "mcp_auth",
];

/// Upstream claw tools not built in this release, and why.
const NOT_BUILT: &[(&str, &str)] = &[
    (
        "read_image",
        "its result is an image content block, and this engine's tool results are text",
    ),
    ("enter_plan_mode", "plan mode is not built in this release"),
    ("exit_plan_mode", "plan mode is not built in this release"),
    (
        "tool_search",
        "not built in this release; a node is offered exactly its `tools:`",
    ),
    (
        "list_mcp_resources",
        "MCP resources are not served in this release (MCP tools are: `mcp.<server>.<tool>`)",
    ),
    (
        "read_mcp_resource",
        "MCP resources are not served in this release (MCP tools are: `mcp.<server>.<tool>`)",
    ),
    ("skill", "skills are not loaded in this release"),
];

/// Why a name upstream's claw registers is not available here, `None`
/// for any other name. Such a name passes `iterion validate` (upstream
/// accepts it) and refuses the node at admission, before any container
/// starts and before any model call.
pub fn unavailable(name: &str) -> Option<String> {
    if ORCHESTRATION.contains(&name) {
        return Some(
            "it is upstream claw's own orchestration (tasks, workers, teams, cron, sub-agents, REPL, LSP), which this engine does not run; use workflow nodes instead"
                .to_owned(),
        );
    }
    NOT_BUILT
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| (*why).to_owned())
}

/// Why a workflow's `tools:` name is unknown to the registry (the DSL's
/// C322 hook), `None` when the placement table classes it or upstream's
/// claw registers it ([`unavailable`]: refused at admission instead). An
/// MCP name is known by its shape: which tools a server has is learnt
/// when it starts.
pub fn unknown_tool_reason(name: &str) -> Option<String> {
    (placement_of(name) == Placement::Refused && unavailable(name).is_none()).then(|| {
        let builtins: Vec<&str> = Builtin::ALL.iter().map(|b| b.name()).collect();
        format!(
            "not a built-in ({}), ask_user, {}, {}, mcp.<server>.<tool> or iterion.<tool>",
            builtins.join(", "),
            privacy::FILTER,
            privacy::UNFILTER,
        )
    })
}

/// Whether the tool never modifies the workspace (upstream
/// `readOnlyTools`); any name that is not a read-only built-in may.
pub fn is_read_only(name: &str) -> bool {
    Builtin::parse(name).is_some_and(Builtin::read_only)
}

/// Longest tool name providers accept.
pub const WIRE_NAME_MAX: usize = 64;

/// The name the model sees for a qualified name: `.` becomes `__` between
/// namespace, server and tool, any other character outside
/// `[A-Za-z0-9_-]` becomes `_`. `None` when the result is empty or longer
/// than [`WIRE_NAME_MAX`].
pub fn wire_name(qualified: &str) -> Option<String> {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let wire = match classify(qualified) {
        Some(ToolClass::Mcp { server, tool }) => format!("mcp__{}__{}", safe(&server), safe(&tool)),
        Some(ToolClass::Engine) => {
            format!(
                "iterion__{}",
                safe(qualified.trim_start_matches("iterion."))
            )
        }
        _ => safe(qualified),
    };
    (!wire.is_empty() && wire.len() <= WIRE_NAME_MAX).then_some(wire)
}

/// A tool available to a node: its names, spec and class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEntry {
    /// The qualified name (`read_file`, `mcp.github.create_issue`): what
    /// policies, events and `tool_call` messages name.
    pub name: String,
    /// What the model sees; `spec.name` is the wire name.
    pub spec: ToolSpec,
    /// What it is (decides placement).
    pub class: ToolClass,
}

impl ToolEntry {
    /// Where calls of this tool execute.
    pub fn placement(&self) -> Placement {
        self.class.placement()
    }
}

/// Every tool a node may be given, by qualified name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    entries: BTreeMap<String, ToolEntry>,
    /// Wire name → qualified name.
    wire: BTreeMap<String, String>,
}

impl ToolRegistry {
    /// The built-ins.
    pub fn builtins() -> Self {
        let mut reg = Self::default();
        for b in Builtin::ALL {
            let entry = ToolEntry {
                name: b.name().to_owned(),
                spec: b.spec(),
                class: ToolClass::Builtin { builtin: *b },
            };
            reg.wire.insert(b.name().to_owned(), b.name().to_owned());
            reg.entries.insert(b.name().to_owned(), entry);
        }
        reg
    }

    /// Add a launcher-side tool (ask_user, an MCP tool, an engine tool)
    /// the launcher can serve, `spec.name` being its qualified name. A
    /// name the placement table does not class as launcher-side is
    /// refused; so is one whose qualified or wire name is taken.
    pub fn register_launcher_tool(&mut self, spec: ToolSpec) -> Result<(), AgentError> {
        let refused = |reason: &str| AgentError::ToolRefused {
            tool: spec.name.clone(),
            reason: reason.to_owned(),
        };
        let class = classify(&spec.name)
            .filter(|c| c.placement() == Placement::Launcher)
            .ok_or_else(|| {
                refused(
                    "not a launcher-side tool name (ask_user, mcp.<server>.<tool>, iterion.<tool>)",
                )
            })?;
        let name = qualify(&spec.name);
        let wire = wire_name(&name).ok_or_else(|| {
            refused("its name does not fit a provider's tool name (at most 64 characters)")
        })?;
        let taken = self
            .entries
            .get(&name)
            .map(|e| e.name.clone())
            .or_else(|| self.wire.get(&wire).cloned());
        if let Some(existing) = taken {
            return Err(AgentError::ToolCollision {
                tool: name,
                existing,
                wire,
            });
        }
        let spec = ToolSpec {
            name: wire.clone(),
            ..spec
        };
        self.wire.insert(wire, name.clone());
        self.entries
            .insert(name.clone(), ToolEntry { name, spec, class });
        Ok(())
    }

    /// The entry the model calls by `wire` name.
    pub fn by_wire(&self, wire: &str) -> Option<&ToolEntry> {
        self.wire.get(wire).and_then(|q| self.entries.get(q))
    }

    /// Resolve a node's `tools:` list, in order. An unclassified name, or a
    /// classified one nobody serves here, refuses the node before any model
    /// call.
    pub fn select(&self, names: &[String]) -> Result<Vec<ToolEntry>, AgentError> {
        let mut out: Vec<ToolEntry> = Vec::with_capacity(names.len());
        for name in names {
            let name = &qualify(name);
            if out.iter().any(|e| &e.name == name) {
                continue;
            }
            if let Some(reason) = unavailable(name) {
                return Err(AgentError::ToolUnavailable {
                    tool: name.clone(),
                    reason,
                });
            }
            if placement_of(name) == Placement::Refused {
                return Err(AgentError::ToolRefused {
                    tool: name.clone(),
                    reason:
                        "unclassified tool name: the placement table cannot say where it would run"
                            .to_owned(),
                });
            }
            let entry = self
                .entries
                .get(name)
                .ok_or_else(|| AgentError::ToolRefused {
                    tool: name.clone(),
                    reason: "no launcher-side handler serves it in this run".to_owned(),
                })?;
            out.push(entry.clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_table() {
        let cases = [
            ("bash", Placement::Sandbox),
            ("read_file", Placement::Sandbox),
            ("write_file", Placement::Sandbox),
            ("file_edit", Placement::Sandbox),
            ("glob", Placement::Sandbox),
            ("grep", Placement::Sandbox),
            ("web_fetch", Placement::Sandbox),
            ("ask_user", Placement::Launcher),
            ("mcp.github.create_issue", Placement::Launcher),
            ("mcp__github__create_issue", Placement::Launcher),
            ("iterion.board_add", Placement::Launcher),
            ("mcp.", Placement::Refused),
            ("mcp.server", Placement::Refused),
            ("mcp____x", Placement::Refused),
            ("iterion.", Placement::Refused),
            ("Bash", Placement::Refused),
            ("rm_rf", Placement::Refused),
            ("", Placement::Refused),
        ];
        for (name, want) in cases {
            assert_eq!(placement_of(name), want, "{name}");
        }
    }

    #[test]
    fn select_refuses_unclassified_and_unserved() {
        let reg = ToolRegistry::builtins();
        let ok = reg
            .select(&["bash".into(), "grep".into(), "bash".into()])
            .expect("builtins");
        assert_eq!(ok.len(), 2);
        let err = reg
            .select(&["bash".into(), "nuke".into()])
            .expect_err("refused");
        assert_eq!(err.code(), "AGENT_TOOL_REFUSED");
        let err = reg.select(&["ask_user".into()]).expect_err("unserved");
        assert!(err.to_string().contains("no launcher-side handler"));
    }

    /// Upstream claw's registry (`pkg/backend/tool/claw_builtins.go`
    /// `RegisterClawAll`): its simple tools are built-ins here; its
    /// orchestration names pass validate and refuse the node with a typed
    /// error naming the tool; names it never registers stay unknown.
    #[test]
    fn upstream_claw_names() {
        let reg = ToolRegistry::builtins();
        for t in [
            "sleep",
            "structured_output",
            "send_user_message",
            "config",
            "todo_write",
            "notebook_edit",
        ] {
            assert_eq!(placement_of(t), Placement::Sandbox, "{t}");
            assert!(unknown_tool_reason(t).is_none(), "{t}");
            reg.select(&[t.to_owned()]).expect(t);
        }
        for t in [
            "task_create",
            "worker_get",
            "team_list",
            "cron_delete",
            "agent",
            "repl",
            "lsp",
            "remote_trigger",
            "mcp_auth",
            "run_task_packet",
            "read_image",
            "tool_search",
            "skill",
        ] {
            assert!(unknown_tool_reason(t).is_none(), "{t} passes validate");
            let err = reg
                .select(&["bash".into(), t.to_owned()])
                .expect_err("refused");
            assert_eq!(err.code(), "AGENT_TOOL_UNAVAILABLE", "{t}");
            let text = err.to_string();
            assert!(
                text.contains(t) && text.contains("not available in this engine"),
                "{text}"
            );
        }
        for t in [
            "web_search",
            "screenshot",
            "computer_use",
            "git_log",
            "Bash",
        ] {
            assert!(unknown_tool_reason(t).is_some(), "{t}");
        }
    }

    #[test]
    fn every_read_only_name_is_a_builtin() {
        for t in iterion_core::agent::READ_ONLY_TOOLS {
            assert!(Builtin::parse(t).is_some_and(Builtin::read_only), "{t}");
        }
    }

    #[test]
    fn read_only_set_is_upstreams() {
        for t in [
            "git_diff",
            "git_status",
            "read_file",
            "list_files",
            "search_codebase",
            "tree",
        ] {
            assert!(is_read_only(t), "{t}");
            assert_eq!(placement_of(t), Placement::Sandbox, "{t}");
        }
        for t in [
            "write_file",
            "patch",
            "run_command",
            "bash",
            "file_edit",
            "mcp.fs.read_file",
            "edit_file",
        ] {
            assert!(!is_read_only(t), "{t}");
        }
    }

    #[test]
    fn wire_names_are_provider_safe_and_map_back() {
        let mut reg = ToolRegistry::builtins();
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: "d".into(),
            input_schema: serde_json::json!({"type": "object"}),
        };
        reg.register_launcher_tool(spec("mcp.everything.get-sum"))
            .expect("mcp");
        reg.register_launcher_tool(spec("mcp.fs.dir.list"))
            .expect("dotted tool");
        assert_eq!(
            wire_name("mcp.everything.get-sum").as_deref(),
            Some("mcp__everything__get-sum")
        );
        let e = reg.by_wire("mcp__fs__dir_list").expect("mapped back");
        assert_eq!(e.name, "mcp.fs.dir.list");
        assert_eq!(e.spec.name, "mcp__fs__dir_list");
        // The alias selects the same entry under its qualified name.
        let sel = reg
            .select(&["mcp__everything__get-sum".into(), "read_file".into()])
            .expect("select");
        assert_eq!(sel[0].name, "mcp.everything.get-sum");
        assert_eq!(
            reg.by_wire("read_file").map(|e| e.name.as_str()),
            Some("read_file")
        );
        // Two names meeting on the wire, or twice the same: refused.
        let err = reg
            .register_launcher_tool(spec("mcp.fs.dir_list"))
            .expect_err("wire collision");
        assert_eq!(err.code(), "AGENT_TOOL_COLLISION");
        assert!(err.to_string().contains("mcp.fs.dir.list"), "{err}");
        let err = reg
            .register_launcher_tool(spec("mcp__everything__get-sum"))
            .expect_err("same tool twice");
        assert_eq!(err.code(), "AGENT_TOOL_COLLISION");
        let long = format!("mcp.s.{}", "x".repeat(80));
        assert_eq!(
            reg.register_launcher_tool(spec(&long))
                .expect_err("too long")
                .code(),
            "AGENT_TOOL_REFUSED"
        );
    }

    #[test]
    fn launcher_tools_must_be_launcher_names() {
        let mut reg = ToolRegistry::builtins();
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: "d".into(),
            input_schema: serde_json::json!({"type": "object"}),
        };
        reg.register_launcher_tool(spec("mcp.gh.issue"))
            .expect("mcp");
        assert!(reg.register_launcher_tool(spec("bash")).is_err());
        assert!(reg.register_launcher_tool(spec("whatever")).is_err());
        let sel = reg.select(&["mcp.gh.issue".into()]).expect("served");
        assert_eq!(sel[0].placement(), Placement::Launcher);
    }
}
