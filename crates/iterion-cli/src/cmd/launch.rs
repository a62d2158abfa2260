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

/// The claw runner for a workflow's sandbox: the static `iterion` the
/// lookup found (`iterion_agent::runner::find_runner`), its read-only
/// bind, and why none can serve when the workflow needs one in the box.
pub(super) struct RunnerWiring {
    /// Whether the workflow needs the runner in the box (agent nodes,
    /// in-box built-ins).
    pub needed: bool,
    /// The static runner, when one was found.
    pub binary: Option<std::path::PathBuf>,
    /// Its read-only bind, for a workflow that needs it.
    pub mounts: Vec<iterion_core::plan::Mount>,
    /// Why none serves, for a workflow that needs one: the decision
    /// refuses a sandboxed run with it.
    pub missing: Option<String>,
    /// `ITERION_BIN` names a file that cannot serve, and the workflow
    /// needs the runner: bad input, refused before anything exists.
    pub bad_iterion_bin: Option<String>,
}

impl RunnerWiring {
    /// Look the runner up for `workflow`, in this process's environment.
    pub(super) fn of(workflow: &iterion_dsl::ir::Workflow) -> Self {
        use iterion_agent::runner::{RunnerLookup, find_runner, runner_mount};
        // A tool node naming a file or process built-in runs it in the box
        // through the same runner as claw's agent nodes.
        let box_builtins = workflow.nodes.values().any(|n| {
            matches!(&n.tool, Some(iterion_dsl::ir::ToolSpec::Command(c))
                if iterion_agent::tool_node::runs_in_box(c.trim()))
        });
        let needs = box_builtins || !iterion_runtime::agents::agent_nodes(workflow).is_empty();
        let lookup = find_runner(
            &iterion_agent::EnvSnapshot::from_process(),
            std::env::current_exe().ok().as_deref(),
        );
        let binary = lookup.path().map(std::path::Path::to_path_buf);
        let problem = needs.then(|| lookup.problem()).flatten();
        Self {
            mounts: match &binary {
                Some(bin) if needs => vec![runner_mount(bin)],
                _ => Vec::new(),
            },
            bad_iterion_bin: problem
                .clone()
                .filter(|_| matches!(lookup, RunnerLookup::IterionBinRejected { .. })),
            missing: problem,
            binary,
            needed: needs,
        }
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
    let runner = workflow.map(RunnerWiring::of);
    SandboxHost::new(
        env,
        local_env,
        drivers,
        iterion_runtime::sandbox_boot::default_state_dir(),
    )
    .with_store_dir(stores::store_dir())
    .with_mounts(
        runner
            .as_ref()
            .map(|r| r.mounts.clone())
            .unwrap_or_default(),
    )
    .with_runner_missing(runner.and_then(|r| r.missing))
}
