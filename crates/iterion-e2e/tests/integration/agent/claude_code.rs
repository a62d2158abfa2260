//! The claude_code backend with the real Claude Code CLI on the host (an
//! unsandboxed run) against the scripted provider. The in-container runs
//! are in `in_box`.

use iterion_agent::{
    AgentError, AgentOutcome, AgentPlacement, AgentTask, BackendName, EnvSnapshot, SessionSpec,
    run_agent,
};
use iterion_core::EventKind;
use iterion_testkit::agent::claude_cli;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::json;

use crate::agent::support::*;

/// A host for the CLI: a workspace, a private HOME (the CLI keeps its
/// sessions there) and a PATH holding the CLI as `claude`.
struct CliHost {
    ws: tempfile::TempDir,
    _bin: tempfile::TempDir,
    _home: tempfile::TempDir,
    env: EnvSnapshot,
}

impl CliHost {
    /// The CLI pointed at `p`, with an unrelated key present on the host.
    fn new(p: &ScriptedProvider) -> Self {
        let (bin, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::os::unix::fs::symlink(claude_cli(), bin.path().join("claude")).expect("link claude");
        let env = EnvSnapshot::new()
            .with(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", bin.path().display()),
            )
            .with("HOME", home.path().display().to_string())
            .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .with("ANTHROPIC_BASE_URL", p.url())
            .with("OPENAI_API_KEY", OPENAI_KEY);
        Self::with_env(env, bin, home)
    }

    fn with_env(env: EnvSnapshot, bin: tempfile::TempDir, home: tempfile::TempDir) -> Self {
        Self {
            ws: tempfile::tempdir().unwrap(),
            _bin: bin,
            _home: home,
            env,
        }
    }

    fn bare(env: EnvSnapshot) -> Self {
        Self::with_env(
            env,
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        )
    }

    async fn run(&self, t: &AgentTask) -> (Result<AgentOutcome, AgentError>, Events) {
        let events = Events::default();
        let placement = AgentPlacement::Host {
            workspace: self.ws.path().to_path_buf(),
        };
        let r = run_agent(
            t,
            BackendName::ClaudeCode,
            placement,
            &ctx(&self.env, &events),
        )
        .await;
        (r, events)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_cli_on_the_host_runs_tools_and_answers_the_schema() {
    let p = ScriptedProvider::start(vec![
        Turn::tool(
            "Bash",
            json!({"command": "echo from-claude > claude.txt && echo done-bash", "description": "write"}),
        ),
        Turn::Answer(json!({"summary": "wrote claude.txt", "ok": true})),
        Turn::text("finished"),
    ])
    .await;
    let host = CliHost::new(&p);
    let mut t = task(Wire::Anthropic, "Write claude.txt then report.");
    t.tools = vec!["bash".into()];
    t.output_schema = Some(json!({
        "type": "object",
        "properties": {"summary": {"type": "string"}, "ok": {"type": "boolean"}},
        "required": ["summary", "ok"]
    }));
    let (result, events) = host.run(&t).await;
    let out = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.output,
        json!({"summary": "wrote claude.txt", "ok": true})
    );
    assert!(out.session_id.is_some());
    assert_eq!(
        std::fs::read_to_string(host.ws.path().join("claude.txt")).unwrap(),
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

/// `session: inherit` resumes the CLI session: the second node's request
/// carries the first node's conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_session_inherit_resumes_the_cli_session() {
    let p = ScriptedProvider::start(vec![Turn::text("noted"), Turn::text("it was zebra")]).await;
    let host = CliHost::new(&p);
    let (first, _) = host
        .run(&task(Wire::Anthropic, "Remember the word zebra-4217."))
        .await;
    let session_id = first.expect("first node").session_id.expect("a session id");
    let mut second = task(Wire::Anthropic, "Which word?");
    second.session = SessionSpec::Inherit {
        session_id: Some(session_id),
        messages: vec![],
    };
    let (out, _) = host.run(&second).await;
    assert_eq!(out.expect("second node").text, "it was zebra");
    let last = p.model_calls().last().cloned().expect("calls");
    assert!(
        last.raw.contains("zebra-4217"),
        "the resumed request lacks the first turn"
    );
    assert!(last.raw.contains("Which word?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_max_turns_is_tool_max_steps() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("Bash", json!({"command": "true", "description": "one"})),
        Turn::tool("Bash", json!({"command": "true", "description": "two"})),
        Turn::text("never reached"),
    ])
    .await;
    let host = CliHost::new(&p);
    let mut t = task(Wire::Anthropic, "loop");
    t.tools = vec!["bash".into()];
    t.tool_max_steps = Some(1);
    let (result, _) = host.run(&t).await;
    let err = result.expect_err("max turns");
    assert!(
        matches!(err, AgentError::ToolMaxStepsExceeded { max: 1 }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_cli_missing_on_the_host_is_typed() {
    let host = CliHost::bare(
        EnvSnapshot::new()
            .with("PATH", "/nonexistent")
            .with("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
    );
    let (result, _) = host.run(&task(Wire::Anthropic, "x")).await;
    let err = result.expect_err("missing");
    assert_eq!(err.code(), "AGENT_CLI_MISSING");
    assert!(err.to_string().contains("host PATH"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_without_credentials_is_refused_naming_variables() {
    let host = CliHost::bare(EnvSnapshot::new().with("PATH", "/usr/bin"));
    let (result, _) = host.run(&task(Wire::Anthropic, "x")).await;
    let err = result.expect_err("no creds");
    assert_eq!(err.code(), "AGENT_MISSING_CREDENTIAL");
    assert!(err.to_string().contains("ANTHROPIC_API_KEY"));
}
