//! How this process launches a sandbox decision, shared by `run`,
//! `resume`, the runner, `submit`, `sandbox doctor` and `sandbox
//! manifests`: the CLI's sandbox flags and their one mapping to the
//! policy's knobs ([`LaunchFlags`]), and the host every decision is made
//! on ([`sandbox_host`]). Its own file so the doctor and `run` (which
//! calls the doctor's pre-flight) do not name each other.

use std::collections::BTreeMap;

use iterion_core::{HostState, Mode};
use iterion_runtime::{HostDrivers, SandboxFlags, SandboxHost};
use iterion_sandbox::env::SandboxEnv;
use iterion_sandbox::precedence::PRODUCT_GLOBAL_DEFAULT;

use crate::cli::{HostStateFlag, SandboxFlag};
use crate::stores;

/// The sandbox flags a run was launched with, kept in its launch record
/// so `iterion resume` boots it the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LaunchFlags {
    pub sandbox: Option<SandboxFlag>,
    pub host_state: Option<HostStateFlag>,
    pub default_image: Option<String>,
}

impl LaunchFlags {
    /// The flags as clap parsed them (`run`, `doctor`).
    pub(super) fn of(
        sandbox: Option<SandboxFlag>,
        host_state: Option<HostStateFlag>,
        default_image: &Option<String>,
    ) -> Self {
        Self {
            sandbox,
            host_state,
            default_image: default_image.clone(),
        }
    }

    /// The one mapping of the CLI's words to the policy's knobs (`run`,
    /// `resume`, `doctor --strict` and the pre-flight).
    pub(super) fn sandbox_flags(&self) -> SandboxFlags {
        SandboxFlags {
            sandbox: self.sandbox.map(|s| match s {
                SandboxFlag::Auto => Mode::Auto,
                SandboxFlag::None => Mode::None,
            }),
            host_state: self.host_state.map(|h| match h {
                HostStateFlag::Auto => HostState::Auto,
                HostStateFlag::None => HostState::None,
            }),
            default_image: self.default_image.clone(),
            // The product entry point installs tier 4 (seed step 1).
            global_default: Some(PRODUCT_GLOBAL_DEFAULT),
        }
    }

    pub(super) fn to_settings(&self) -> serde_json::Map<String, serde_json::Value> {
        let word = |auto: Option<bool>| auto.map(|a| if a { "auto" } else { "none" });
        let mut m = serde_json::Map::new();
        m.insert(
            "sandbox".into(),
            serde_json::json!(word(self.sandbox.map(|s| s == SandboxFlag::Auto))),
        );
        m.insert(
            "sandbox_host_state".into(),
            serde_json::json!(word(self.host_state.map(|h| h == HostStateFlag::Auto))),
        );
        m.insert(
            "sandbox_default_image".into(),
            serde_json::json!(self.default_image),
        );
        m
    }

    /// Read back what [`Self::to_settings`] wrote (unknown words: unset).
    pub(super) fn from_settings(m: &serde_json::Map<String, serde_json::Value>) -> Self {
        let word = |k: &str| m.get(k).and_then(serde_json::Value::as_str);
        Self {
            sandbox: match word("sandbox") {
                Some("auto") => Some(SandboxFlag::Auto),
                Some("none") => Some(SandboxFlag::None),
                _ => None,
            },
            host_state: match word("sandbox_host_state") {
                Some("auto") => Some(HostStateFlag::Auto),
                Some("none") => Some(HostStateFlag::None),
                _ => None,
            },
            default_image: word("sandbox_default_image").map(str::to_owned),
        }
    }
}

/// The claw runner's read-only bind, for a workflow with agent nodes or
/// tool nodes calling an in-box built-in.
pub(super) fn runner_mounts(
    workflow: &iterion_dsl::ir::Workflow,
    runner_binary: Option<&std::path::Path>,
) -> Vec<iterion_core::plan::Mount> {
    // A tool node naming a file or process built-in runs it in the box
    // through the same runner.
    let box_builtins = workflow.nodes.values().any(|n| {
        matches!(&n.tool, Some(iterion_dsl::ir::ToolSpec::Command(c))
            if iterion_agent::tool_node::runs_in_box(c.trim()))
    });
    match runner_binary {
        Some(bin) if box_builtins || !iterion_runtime::agents::agent_nodes(workflow).is_empty() => {
            vec![iterion_agent::runner::runner_mount(bin)]
        }
        _ => Vec::new(),
    }
}

/// The host every sandbox decision of this process is made on — a run's
/// and `doctor --strict`'s alike: the parsed environment, the probed
/// drivers, the state and store dirs, and the runner bind `workflow` needs.
pub(super) fn sandbox_host(
    env: SandboxEnv,
    drivers: HostDrivers,
    workflow: Option<&iterion_dsl::ir::Workflow>,
) -> SandboxHost {
    let local_env: BTreeMap<String, String> = std::env::vars().collect();
    let runner = iterion_agent::runner::locate_runner_binary(
        &iterion_agent::EnvSnapshot::from_process(),
        std::env::current_exe().ok().as_deref(),
    );
    let mounts = workflow
        .map(|w| runner_mounts(w, runner.as_deref()))
        .unwrap_or_default();
    SandboxHost::new(
        env,
        local_env,
        drivers,
        iterion_runtime::sandbox_boot::default_state_dir(),
    )
    .with_store_dir(stores::store_dir())
    .with_mounts(mounts)
    // The same static binary verifies the seccomp host-root guard from
    // inside any image (`iterion __guard-probe`).
    .with_guard_probe(runner.as_deref().map(iterion_agent::runner::runner_mount))
}
