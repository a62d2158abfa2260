//! Loading a workflow file for the verbs: compiled by `iterion-dsl` (which
//! parses egress rules with the grammar the proxy enforces, so a bad rule
//! is a compile-time C313, not a run-time surprise), with the agent crate's
//! tool registry hooked in so an unknown `tools:` name is one too (C322).

use std::path::Path;

use iterion_dsl::{Compiled, ir};

use crate::exit::UserInputError;

/// A compiled file and its source text (for rendering diagnostics).
pub struct Loaded {
    /// The file's text (lossy UTF-8).
    pub source: String,
    /// Workflows and diagnostics.
    pub compiled: Compiled,
}

/// Read and compile a file.
pub fn load(path: &Path) -> std::io::Result<Loaded> {
    let bytes = std::fs::read(path)?;
    Ok(compile_source(
        String::from_utf8_lossy(&bytes).into_owned(),
        path,
    ))
}

/// Compile a source named `path` (a runner compiles a submitted source).
pub fn compile_source(source: String, path: &Path) -> Loaded {
    let compiled = iterion_dsl::compile_checked(
        &source,
        path,
        &iterion_dsl::Checks {
            tool: &iterion_agent::tools::unknown_tool_reason,
            egress: &egress_binding_refusal,
        },
    );
    Loaded { source, compiled }
}

/// Why no request to a secret's `egress:` host could pass the workflow's
/// `network:` block (`C325`), as the egress policy decides it.
fn egress_binding_refusal(
    network: Option<&iterion_dsl::NetworkSpec>,
    rule: &iterion_core::net::NetRule,
) -> Option<String> {
    match iterion_netproxy::Policy::from_spec(network) {
        Ok(policy) => policy.binding_reachable(rule).err(),
        // A shipped preset that does not compile is a defect the run's
        // boot refuses; the compile check stays silent on it.
        Err(_) => None,
    }
}

/// Read and compile a file that must hold one valid workflow; anything
/// else is bad input (exit 2), with the rendered diagnostics in the error.
pub fn load_workflow(path: &Path) -> anyhow::Result<(Loaded, ir::Workflow)> {
    let loaded = load(path)
        .map_err(|e| UserInputError::new(format!("cannot read {}: {e}", path.display())))?;
    single_workflow(loaded, path)
}

/// The one valid workflow of a compiled source; anything else is bad
/// input, with the rendered diagnostics in the error.
pub fn single_workflow(loaded: Loaded, path: &Path) -> anyhow::Result<(Loaded, ir::Workflow)> {
    if loaded.compiled.has_errors() {
        let mut rendered = iterion_dsl::render_human(&loaded.source, &loaded.compiled.diagnostics);
        if let Some(more) = iterion_dsl::render_omitted(loaded.compiled.omitted) {
            rendered.push_str(&more);
        }
        // The diagnostics escape what they quote of the file.
        return Err(UserInputError::laid_out(format!(
            "{} is not a valid workflow:\n{rendered}",
            iterion_core::display::printable(&path.display().to_string())
        ))
        .into());
    }
    let workflow =
        loaded.compiled.workflows.first().cloned().ok_or_else(|| {
            UserInputError::new(format!("{} declares no workflow", path.display()))
        })?;
    Ok((loaded, workflow))
}
