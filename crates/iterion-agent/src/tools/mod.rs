//! Agent tools: the placement table (the one home of "where does this tool
//! run": facts §5.6, seed step 20, upstream `SandboxPlacementOf`), the
//! registry a node's `tools:` list is resolved against, and the built-in
//! implementations ([`builtin`]).
//!
//! | Tool | Class | Placement |
//! |---|---|---|
//! | `bash`, `read_file`, `write_file`, `file_edit`, `glob`, `grep`, `web_fetch` | built-in | sandbox (in the runner, in the container) |
//! | `ask_user` | human input | launcher (host) |
//! | `mcp.<server>.<tool>`, `mcp__<server>__<tool>` | MCP | launcher (host) |
//! | `iterion.<tool>` | engine | launcher (host) |
//! | anything else | — | refused |
//!
//! The registry is keyed by name and classed by this table, so a later
//! issue adds upstream's wider built-in set, MCP servers' tools and a
//! per-node allow/deny policy by registering entries and filtering
//! [`ToolRegistry::select`], without a new placement rule anywhere else.

pub mod builtin;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use builtin::Builtin;

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
            Self::AskUser | Self::Mcp { .. } | Self::Engine => Placement::Launcher,
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
    let mcp = name
        .strip_prefix("mcp.")
        .and_then(|rest| rest.rsplit_once('.'))
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

/// The placement table: the single home of where a tool name runs.
pub fn placement_of(name: &str) -> Placement {
    classify(name).map_or(Placement::Refused, |c| c.placement())
}

/// What a model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model calls.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// A tool available to a node: its spec and its class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEntry {
    /// What the model sees.
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

/// Every tool a node may be given, by name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    entries: BTreeMap<String, ToolEntry>,
}

impl ToolRegistry {
    /// The built-ins.
    pub fn builtins() -> Self {
        let mut reg = Self::default();
        for b in Builtin::ALL {
            reg.entries.insert(
                b.name().to_owned(),
                ToolEntry {
                    spec: b.spec(),
                    class: ToolClass::Builtin { builtin: *b },
                },
            );
        }
        reg
    }

    /// Add a launcher-side tool (ask_user, an MCP tool, an engine tool)
    /// the launcher can serve. A name the placement table does not class
    /// as launcher-side is refused.
    pub fn register_launcher_tool(&mut self, spec: ToolSpec) -> Result<(), AgentError> {
        let class = classify(&spec.name)
            .filter(|c| c.placement() == Placement::Launcher)
            .ok_or_else(|| AgentError::ToolRefused {
                tool: spec.name.clone(),
                reason:
                    "not a launcher-side tool name (ask_user, mcp.<server>.<tool>, iterion.<tool>)"
                        .to_owned(),
            })?;
        self.entries
            .insert(spec.name.clone(), ToolEntry { spec, class });
        Ok(())
    }

    /// Resolve a node's `tools:` list, in order. An unclassified name, or a
    /// classified one nobody serves here, refuses the node before any model
    /// call.
    pub fn select(&self, names: &[String]) -> Result<Vec<ToolEntry>, AgentError> {
        let mut out: Vec<ToolEntry> = Vec::with_capacity(names.len());
        for name in names {
            if out.iter().any(|e| &e.spec.name == name) {
                continue;
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
