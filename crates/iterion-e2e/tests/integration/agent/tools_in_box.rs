//! The tool registry end to end inside real containers (dockerd and
//! Podman, behind the real egress proxy): built-ins run in the container
//! through the in-box runner, a launcher-side tool is called by its wire
//! name and served on the host under its qualified name, and the node's
//! `tool_policy` refuses a call before it runs anywhere, with a
//! `tool_denied` event.

use async_trait::async_trait;
use iterion_agent::runner::{RunnerBinary, runner_mount};
use iterion_agent::tools::ToolSpec;
use iterion_agent::{AgentPlacement, BackendName, LauncherTools, run_agent};
use iterion_core::EventKind;
use iterion_driver_docker::BindsMode;
use iterion_testkit::agent::static_iterion;
use iterion_testkit::driver::Started;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::{Value, json};
use std::sync::Mutex;

use crate::agent::in_box::{BUSYBOX, Engine, boxed, driver, provider_env, proxy};
use crate::agent::support::*;

/// A launcher-side tool served on the host: proves the round trip from
/// the container's runner to the host and back, and what name it got.
#[derive(Default)]
struct HostNotes {
    calls: Mutex<Vec<(String, Value)>>,
}

#[async_trait]
impl LauncherTools for HostNotes {
    fn specs(&self) -> Vec<ToolSpec> {
        ["mcp.notes.get-note", "mcp.notes.drop"]
            .into_iter()
            .map(|n| ToolSpec {
                name: n.to_owned(),
                description: "host-side notes".to_owned(),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    async fn call(&self, name: &str, input: &Value) -> Result<String, String> {
        self.calls
            .lock()
            .unwrap()
            .push((name.to_owned(), input.clone()));
        Ok(format!("host note for {name} (pid {})", std::process::id()))
    }
}

async fn registry_in_box(engine: Engine) {
    let d = driver(engine, BindsMode::default()).await;
    let p = ScriptedProvider::start(vec![
        Turn::tool(
            "write_file",
            json!({"path": "notes/a.txt", "content": "line1\nline2\n"}),
        ),
        Turn::tool("read_file", json!({"path": "notes/a.txt", "offset": 2})),
        // Denied by the policy (never offered); must not run.
        Turn::tool("run_command", json!({"command": "echo ran > denied.txt"})),
        Turn::tool("mcp__notes__get-note", json!({"id": 7})),
        Turn::tool("mcp__notes__drop", json!({})),
        Turn::tool("list_files", json!({"path": "notes"})),
        Turn::text("{\"verdict\": \"pass\"}"),
    ])
    .await;
    let (px, token, blocked) = proxy(true).await;
    let s = boxed(
        &d,
        BUSYBOX,
        "tools",
        vec![runner_mount(&static_iterion())],
        &px,
        &token,
        true,
    )
    .await;
    let env = provider_env(&p);
    let events = Events::default();
    let notes = HostNotes::default();
    let mut t = task(Wire::Anthropic, "use your tools");
    t.tools = [
        "write_file",
        "read_file",
        "run_command",
        "list_files",
        "mcp.notes.get-note",
        "mcp.notes.drop",
    ]
    .map(str::to_owned)
    .to_vec();
    t.tool_policy = Some(
        ["*", "!run_command", "!mcp.notes.drop"]
            .map(str::to_owned)
            .to_vec(),
    );
    t.tool_max_steps = Some(10);
    t.output_schema = Some(json!({"type": "object", "required": ["verdict"]}));
    let placement = AgentPlacement::Sandbox {
        run: &*s.run,
        runner: RunnerBinary::InSandbox,
        image: Some(BUSYBOX.to_owned()),
        exec_env: Default::default(),
        placeholders: Default::default(),
    };
    let mut c = ctx(&env, &events);
    c.launcher = Some(&notes);
    let out = run_agent(&t, BackendName::Claw, placement, &c)
        .await
        .unwrap_or_else(|e| panic!("{engine:?}: {e} (blocked: {:?})", blocked.lock().unwrap()));
    assert_eq!(out.output["verdict"], "pass");

    // The model was offered wire names only, and never the denied ones.
    let calls = p.model_calls();
    let offered: Vec<String> = calls[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        offered,
        [
            "write_file",
            "read_file",
            "list_files",
            "mcp__notes__get-note"
        ],
        "{engine:?}"
    );
    // write_file and read_file ran in the container: the file is there.
    assert_eq!(
        Started::stdout(&s.sh("cat notes/a.txt").await),
        "line1\nline2"
    );
    // Each call carries the conversation so far: its last result is new.
    let last = |i: usize| calls[i].tool_results().last().cloned().unwrap();
    assert_eq!(last(2), "line2\n");
    // The denied call never ran, and the model was told why.
    assert_eq!(
        Started::stdout(
            &s.sh("test -e denied.txt && echo present || echo absent")
                .await
        ),
        "absent"
    );
    let denied = last(3);
    assert!(
        denied.contains("denied by tool_policy rule \"!run_command\""),
        "{denied}"
    );
    // The launcher-side tool crossed the channel under its qualified name.
    assert!(last(4).starts_with("host note for mcp.notes.get-note"));
    assert_eq!(
        notes.calls.lock().unwrap().clone(),
        vec![("mcp.notes.get-note".to_owned(), json!({"id": 7}))]
    );
    assert!(last(5).contains("!mcp.notes.drop"));
    assert_eq!(last(6), "a.txt");

    let all = events.all();
    for tool in ["write_file", "read_file", "list_files"] {
        assert!(
            all.iter().any(|e| matches!(e,
                EventKind::ToolCalled { tool: t, placement, .. } if t == tool && placement == "container")),
            "{engine:?} {tool}: {all:?}"
        );
    }
    assert!(all.iter().any(|e| matches!(e,
        EventKind::ToolCalled { tool, placement, .. } if tool == "mcp.notes.get-note" && placement == "host")));
    let denials: Vec<(String, Option<String>, String)> = all
        .iter()
        .filter_map(|e| match e {
            EventKind::ToolDenied {
                tool,
                rule,
                placement,
                ..
            } => Some((tool.clone(), rule.clone(), placement.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        denials,
        vec![
            (
                "run_command".to_owned(),
                Some("!run_command".to_owned()),
                "container".to_owned()
            ),
            (
                "mcp.notes.drop".to_owned(),
                Some("!mcp.notes.drop".to_owned()),
                "container".to_owned()
            ),
        ]
    );
    // A denied tool never starts.
    assert!(!all.iter().any(|e| matches!(e,
        EventKind::ToolStarted { tool, .. } if tool == "run_command" || tool == "mcp.notes.drop")));
    assert!(blocked.lock().unwrap().is_empty());
    s.run.cleanup().await.expect("cleanup");
    px.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_registry_tools_run_in_the_box_and_policy_refuses() {
    registry_in_box(Engine::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_registry_tools_run_in_the_box_and_policy_refuses() {
    registry_in_box(Engine::Podman).await;
}
