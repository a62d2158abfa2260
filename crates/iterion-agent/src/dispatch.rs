//! Where a tool call goes once the loop has one: built-ins execute in this
//! process (the runner inside the container, or the host process of an
//! unsandboxed run), launcher-side tools go to the [`LauncherTools`] the
//! engine supplies — directly on the host, through `tool_call` messages
//! from inside the box. The decision is the placement table's
//! ([`crate::tools::ToolClass::placement`]); this only follows it.

use async_trait::async_trait;
use serde_json::Value;

use crate::claw::ToolDispatch;
use crate::tools::builtin::{self, ToolContext};
use crate::tools::{Placement, ToolClass, ToolEntry, ToolSpec};

/// Launcher-side tools the engine serves for a node (`ask_user`, MCP
/// servers' tools, engine tools).
#[async_trait]
pub trait LauncherTools: Send + Sync {
    /// The tools served, each `name` the qualified one (a launcher-side
    /// name: `ask_user`, `mcp.<server>.<tool>`, `iterion.<tool>`).
    fn specs(&self) -> Vec<ToolSpec>;
    /// Run one call of the tool of qualified name `name`; `Err` is an
    /// error result the model sees.
    async fn call(&self, name: &str, input: &Value) -> Result<String, String>;
}

/// Executes built-ins here and forwards the rest.
pub(crate) struct LocalDispatch<'a> {
    pub ctx: ToolContext,
    pub launcher: Option<&'a dyn LauncherTools>,
}

#[async_trait]
impl ToolDispatch for LocalDispatch<'_> {
    async fn call(&self, entry: &ToolEntry, input: &Value) -> Result<String, String> {
        match (&entry.class, entry.placement()) {
            (ToolClass::Builtin { builtin }, Placement::Sandbox) => {
                builtin::execute(*builtin, input, &self.ctx).await
            }
            (_, Placement::Launcher) => match self.launcher {
                Some(l) => l.call(&entry.name, input).await,
                None => Err(format!("no launcher serves {}", entry.name)),
            },
            _ => Err(format!(
                "tool {} is refused by the placement table",
                entry.name
            )),
        }
    }
}
