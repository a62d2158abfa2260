//! What a model is told about a tool ([`ToolSpec`]): its name, its
//! description and the JSON Schema of its input. The one shape every tool
//! source describes itself in — the built-ins, the privacy tools, the
//! board, MCP servers — and the registry (`tools/mod.rs`) and the providers
//! read; owns no tool, no name rule and no placement.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
