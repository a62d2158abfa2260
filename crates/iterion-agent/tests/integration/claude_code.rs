//! The claude_code backend with the real Claude Code CLI against the
//! scripted provider: on the host (an unsandboxed run) and inside a
//! container of the slim image on dockerd and Podman, behind the real
//! egress proxy.

use iterion_agent::{AgentPlacement, BackendName, EnvSnapshot, run_agent};
use iterion_core::EventKind;
use iterion_testkit::agent::claude_cli;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::json;

use crate::support::*;

fn schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"summary": {"type": "string"}, "ok": {"type": "boolean"}},
        "required": ["summary", "ok"]
    })
}

/// A PATH holding only the CLI (as `claude`) and the system tools.
fn host_env(p: &ScriptedProvider, bin: &std::path::Path, home: &std::path::Path) -> EnvSnapshot {
    std::os::unix::fs::symlink(claude_cli(), bin.join("claude")).expect("link claude");
    EnvSnapshot::new()
        .with(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        )
        .with("HOME", home.display().to_string())
        .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .with("ANTHROPIC_BASE_URL", p.url())
        .with("OPENAI_API_KEY", OPENAI_KEY)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_cli_on_the_host_runs_tools_and_answers_the_schema() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("Bash", json!({"command": "echo from-claude > claude.txt && echo done-bash", "description": "write"})),
        Turn::Answer(json!({"summary": "wrote claude.txt", "ok": true})),
        Turn::text("finished"),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = host_env(&p, bin.path(), home.path());
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "Write claude.txt then report.");
    t.model = Some("anthropic/claude-sonnet-4-6".into());
    t.tools = vec!["bash".into()];
    t.output_schema = Some(schema());
    let out = run_agent(
        &t,
        BackendName::ClaudeCode,
        AgentPlacement::Host {
            workspace: ws.path().to_path_buf(),
        },
        &ctx(&env, &events),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nrequests: {:#?}",
            p.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
        )
    });
    assert_eq!(
        out.output,
        json!({"summary": "wrote claude.txt", "ok": true})
    );
    assert!(out.session_id.is_some());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("claude.txt")).unwrap(),
        "from-claude\n"
    );

    let calls = p.model_calls();
    assert!(
        calls.iter().all(|c| c.path.starts_with("/v1/messages")),
        "{:?}",
        calls.iter().map(|c| &c.path).collect::<Vec<_>>()
    );
    for c in &calls {
        assert_eq!(c.header("x-api-key"), Some(ANTHROPIC_KEY));
        assert!(
            !c.raw.contains(OPENAI_KEY),
            "an unrelated key reached the provider"
        );
    }
    // The CLI offered its StructuredOutput tool (from --json-schema).
    assert!(calls.iter().any(|c| c.raw.contains("StructuredOutput")));
    assert!(
        calls
            .iter()
            .flat_map(|c| c.tool_results())
            .any(|r| r.contains("done-bash"))
    );
    assert!(events.all().iter().any(|e| matches!(e,
        EventKind::ToolCalled { tool, placement, .. } if tool == "Bash" && placement == "host")));
    assert_eq!(events.names().last(), Some(&"delegate_finished"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_cli_missing_on_the_host_is_typed() {
    let ws = tempfile::tempdir().unwrap();
    let env = EnvSnapshot::new()
        .with("PATH", "/nonexistent")
        .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY);
    let events = Events::default();
    let err = run_agent(
        &task(Wire::Anthropic, "x"),
        BackendName::ClaudeCode,
        AgentPlacement::Host {
            workspace: ws.path().to_path_buf(),
        },
        &ctx(&env, &events),
    )
    .await
    .expect_err("missing");
    assert_eq!(err.code(), "AGENT_CLI_MISSING");
    assert!(err.to_string().contains("host PATH"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_without_credentials_is_refused_naming_variables() {
    let ws = tempfile::tempdir().unwrap();
    let env = EnvSnapshot::new().with("PATH", "/usr/bin");
    let events = Events::default();
    let err = run_agent(
        &task(Wire::Anthropic, "x"),
        BackendName::ClaudeCode,
        AgentPlacement::Host {
            workspace: ws.path().to_path_buf(),
        },
        &ctx(&env, &events),
    )
    .await
    .expect_err("no creds");
    assert_eq!(err.code(), "AGENT_MISSING_CREDENTIAL");
    assert!(err.to_string().contains("ANTHROPIC_API_KEY"));
}
