//! The claw loop on the host (an unsandboxed run) against the scripted
//! provider over real loopback sockets: both wire formats, streamed and
//! whole; tool use; structured output (native and after tools); retries;
//! the bad inputs, each a typed error.

use iterion_agent::{AgentError, AgentPlacement, BackendName, BudgetSpec, run_agent};
use iterion_core::EventKind;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::json;

use crate::agent::support::*;

fn verdict_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}, "files": {"type": "integer"}},
        "required": ["verdict"]
    })
}

fn host(ws: &tempfile::TempDir) -> AgentPlacement<'static> {
    AgentPlacement::Host {
        workspace: ws.path().to_path_buf(),
    }
}

/// Tools, then a JSON final answer, on every wire × streaming combination.
#[tokio::test]
async fn tool_loop_then_schema_answer_on_every_wire() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        for stream in [true, false] {
            let p = ScriptedProvider::start(vec![
                Turn::tool(
                    "bash",
                    json!({"command": "echo from-bash > made.txt && cat made.txt"}),
                ),
                Turn::tool("read_file", json!({"path": "made.txt"})),
                Turn::text("{\"verdict\": \"pass\", \"files\": 1}"),
            ])
            .await;
            let mut t = task(wire, "make a file and report");
            t.tools = vec!["bash".into(), "read_file".into()];
            t.output_schema = Some(verdict_schema());
            t.stream = stream;
            let HostRun { ws, events, result } = claw_on_host(&p, wire, &t).await;
            let out = result.unwrap_or_else(|e| panic!("{wire:?} stream={stream}: {e}"));
            assert_eq!(
                out.output,
                json!({"verdict": "pass", "files": 1}),
                "{wire:?} {stream}"
            );
            assert!(!out.formatting_pass_used);
            assert_eq!(out.steps, 3);
            assert_eq!(out.usage.input_tokens, 300);
            assert_eq!(out.usage.output_tokens, 60);
            assert_eq!(
                std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
                "from-bash\n"
            );

            let calls = p.model_calls();
            assert_eq!(calls.len(), 3);
            assert_eq!(
                calls[0]
                    .body
                    .get("stream")
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                stream
            );
            // The prompt carries the JSON-only instruction (tools + schema).
            assert!(calls[0].raw.contains("OUTPUT FORMAT"));
            // Tool results went back to the model.
            assert_eq!(calls[1].tool_results(), vec!["from-bash\n".to_owned()]);
            assert_eq!(
                calls[2].tool_results().last().map(String::as_str),
                Some("from-bash\n")
            );
            match wire {
                Wire::Anthropic => {
                    assert_eq!(calls[0].path, "/v1/messages");
                    assert_eq!(calls[0].header("x-api-key"), Some(ANTHROPIC_KEY));
                    assert_eq!(calls[0].header("anthropic-version"), Some("2023-06-01"));
                    assert_eq!(calls[0].body["model"], "claude-sonnet-4-6");
                }
                Wire::OpenAi => {
                    assert_eq!(calls[0].path, "/v1/chat/completions");
                    assert_eq!(
                        calls[0].header("authorization"),
                        Some(format!("Bearer {OPENAI_KEY}").as_str())
                    );
                    assert_eq!(calls[0].body["model"], "gpt-4o-mini");
                }
            }

            let names = events.names();
            assert_eq!(names.first(), Some(&"delegate_started"));
            assert_eq!(names.last(), Some(&"delegate_finished"));
            assert_eq!(events.count("llm_request"), 3);
            assert_eq!(events.count("llm_step_finished"), 3);
            assert_eq!(events.count("tool_called"), 2);
            assert!(events.all().iter().any(|e| matches!(e,
                EventKind::ToolCalled { tool, placement, .. } if tool == "bash" && placement == "host")));
        }
    }
}

/// Without tools the schema is asked natively: a forced tool on
/// Anthropic, a json_schema response format on OpenAI.
#[tokio::test]
async fn schema_without_tools_is_native_structured_output() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let p = ScriptedProvider::start(vec![Turn::Answer(json!({"verdict": "fail"}))]).await;
        let mut t = task(wire, "judge");
        t.output_schema = Some(verdict_schema());
        let out = claw_on_host(&p, wire, &t).await.result.expect("ok");
        assert_eq!(out.output, json!({"verdict": "fail"}));
        let call = &p.model_calls()[0];
        match wire {
            Wire::Anthropic => {
                assert_eq!(
                    call.body["tool_choice"],
                    json!({"type": "tool", "name": "structured_output"})
                );
                assert_eq!(call.body["tools"][0]["input_schema"], verdict_schema());
            }
            Wire::OpenAi => {
                assert_eq!(call.body["response_format"]["type"], "json_schema");
                assert_eq!(
                    call.body["response_format"]["json_schema"]["schema"],
                    verdict_schema()
                );
            }
        }
    }
}

#[tokio::test]
async fn schema_repair_turn_then_typed_mismatch() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        // One bad answer, repaired.
        let p = ScriptedProvider::start(vec![
            Turn::Answer(json!({"verdict": "maybe"})),
            Turn::Answer(json!({"verdict": "pass"})),
        ])
        .await;
        let mut t = task(wire, "judge");
        t.output_schema = Some(verdict_schema());
        let out = claw_on_host(&p, wire, &t).await.result.expect("repaired");
        assert_eq!(out.output["verdict"], "pass");
        assert!(out.formatting_pass_used);
        // The repair turn told the model what was wrong.
        assert!(
            p.model_calls()[1]
                .raw
                .contains("does not match the required schema")
        );

        // Two bad answers: typed failure after exactly one repair.
        let p = ScriptedProvider::start(vec![
            Turn::Answer(json!({"verdict": "maybe"})),
            Turn::Answer(json!({"files": 2})),
            Turn::Answer(json!({"verdict": "pass"})),
        ])
        .await;
        let HostRun { events, result, .. } = claw_on_host(&p, wire, &t).await;
        let err = result.expect_err("mismatch");
        assert_eq!(err.code(), "AGENT_SCHEMA_MISMATCH", "{err}");
        assert_eq!(p.model_calls().len(), 2);
        assert_eq!(events.names().last(), Some(&"delegate_error"));
    }
}

/// With tools, a narrative final answer gets one tool-free structured turn.
#[tokio::test]
async fn tools_then_prose_gets_one_json_only_turn() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("glob", json!({"pattern": "*"})),
        Turn::text("I looked around, all good."),
        Turn::Answer(json!({"verdict": "pass"})),
    ])
    .await;
    let mut t = task(Wire::Anthropic, "look");
    t.tools = vec!["glob".into()];
    t.output_schema = Some(verdict_schema());
    let out = claw_on_host(&p, Wire::Anthropic, &t)
        .await
        .result
        .expect("ok");
    assert_eq!(out.output["verdict"], "pass");
    assert!(out.formatting_pass_used);
    let last = &p.model_calls()[2];
    assert_eq!(last.body["tool_choice"]["name"], "structured_output");
}

#[tokio::test]
async fn retries_429_twice_then_succeeds() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let p = ScriptedProvider::start(vec![
            Turn::Status(429, "slow down".into()),
            Turn::Status(429, "slow down".into()),
            Turn::text("finally"),
        ])
        .await;
        let HostRun { events, result, .. } = claw_on_host(&p, wire, &task(wire, "hi")).await;
        let out = result.expect("ok");
        assert_eq!(out.text, "finally");
        let retries: Vec<_> = events
            .all()
            .into_iter()
            .filter_map(|e| match e {
                EventKind::LlmRetry {
                    attempt,
                    status_code,
                    ..
                } => Some((attempt, status_code)),
                _ => None,
            })
            .collect();
        assert_eq!(retries, vec![(1, Some(429)), (2, Some(429))]);
    }
}

#[tokio::test]
async fn retries_are_bounded_and_typed() {
    let p = ScriptedProvider::start(vec![
        Turn::Status(503, "down".into()),
        Turn::Status(500, "down".into()),
        Turn::Status(502, "down".into()),
        Turn::text("too late"),
    ])
    .await;
    let err = claw_on_host(&p, Wire::Anthropic, &task(Wire::Anthropic, "hi"))
        .await
        .result
        .expect_err("exhausted");
    assert!(
        matches!(
            err,
            AgentError::RetriesExhausted {
                attempts: 3,
                status: Some(502),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(p.remaining(), 1);
    // A 400 is not retried.
    let p = ScriptedProvider::start(vec![
        Turn::Status(400, "bad request".into()),
        Turn::text("x"),
    ])
    .await;
    let err = claw_on_host(&p, Wire::Anthropic, &task(Wire::Anthropic, "hi"))
        .await
        .result
        .expect_err("400");
    assert!(
        matches!(err, AgentError::ProviderStatus { status: 400, .. }),
        "{err}"
    );
    assert_eq!(p.model_calls().len(), 1);
}

#[tokio::test]
async fn tool_max_steps_is_enforced() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("bash", json!({"command": "true"})),
        Turn::tool("bash", json!({"command": "true"})),
        Turn::tool("bash", json!({"command": "true"})),
    ])
    .await;
    let mut t = task(Wire::OpenAi, "loop forever");
    t.tools = vec!["bash".into()];
    t.tool_max_steps = Some(2);
    let HostRun { events, result, .. } = claw_on_host(&p, Wire::OpenAi, &t).await;
    let err = result.expect_err("steps");
    assert!(
        matches!(err, AgentError::ToolMaxStepsExceeded { max: 2 }),
        "{err}"
    );
    assert_eq!(p.model_calls().len(), 2);
    // The tool of the last allowed turn was not run.
    assert_eq!(events.count("tool_called"), 1);
}

#[tokio::test]
async fn provider_garbage_is_typed() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        for stream in [true, false] {
            let p = ScriptedProvider::start(vec![Turn::Garbage]).await;
            let mut t = task(wire, "hi");
            t.stream = stream;
            let err = claw_on_host(&p, wire, &t)
                .await
                .result
                .expect_err("garbage");
            assert_eq!(
                err.code(),
                "AGENT_PROVIDER_GARBAGE",
                "{wire:?} {stream}: {err}"
            );
        }
    }
}

/// Bad input is refused before any request reaches the provider.
#[tokio::test]
async fn bad_input_is_refused_before_any_call() {
    let p = ScriptedProvider::start(vec![Turn::text("never")]).await;
    let ws = tempfile::tempdir().unwrap();
    let env = env_for(&p, Wire::Anthropic);
    let events = Events::default();
    type Edit = Box<dyn Fn(&mut iterion_agent::AgentTask)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|t| t.model = Some("mistral/large".into())),
            "AGENT_UNKNOWN_PROVIDER",
        ),
        (
            Box::new(|t| t.model = Some("claude".into())),
            "AGENT_INVALID_MODEL",
        ),
        (
            Box::new(|t| t.model = Some("openai/gpt-4o".into())),
            "AGENT_MISSING_CREDENTIAL",
        ),
        (
            Box::new(|t| t.tools = vec!["bash".into(), "format_disk".into()]),
            "AGENT_TOOL_REFUSED",
        ),
        (
            Box::new(|t| t.output_schema = Some(json!({"type": "array"}))),
            "AGENT_INVALID_SCHEMA",
        ),
    ];
    for (edit, code) in cases {
        let mut t = task(Wire::Anthropic, "hi");
        edit(&mut t);
        let err = run_agent(&t, BackendName::Claw, host(&ws), &ctx(&env, &events))
            .await
            .expect_err(code);
        assert_eq!(err.code(), code, "{err}");
        let e = iterion_agent::preflight(
            &t,
            BackendName::Claw,
            &env,
            &Default::default(),
            false,
            None,
        )
        .expect_err("preflight refuses too");
        assert_eq!(e.code(), code);
    }
    let missing = run_agent(
        &task(Wire::OpenAi, "hi"),
        BackendName::Claw,
        host(&ws),
        &ctx(&env, &events),
    )
    .await
    .expect_err("missing");
    assert!(missing.to_string().contains("OPENAI_API_KEY"), "{missing}");
    assert!(!missing.to_string().contains(ANTHROPIC_KEY));
    assert!(
        p.requests().is_empty(),
        "a request went out: {:?}",
        p.requests()
    );
}

#[tokio::test]
async fn budget_warns_then_stops_the_node() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("bash", json!({"command": "true"})),
        Turn::tool("bash", json!({"command": "true"})),
        Turn::text("done"),
    ])
    .await;
    let mut t = task(Wire::Anthropic, "spend");
    t.tools = vec!["bash".into()];
    // Each scripted answer costs 120 tokens: 120 ≥ 80 % of 150 warns,
    // 240 ≥ 150 stops.
    t.budget = Some(BudgetSpec {
        max_tokens: Some(150),
        ..BudgetSpec::default()
    });
    let HostRun { events, result, .. } = claw_on_host(&p, Wire::Anthropic, &t).await;
    let err = result.expect_err("budget");
    assert!(
        matches!(err, AgentError::BudgetExceeded { ref dimension, .. } if dimension == "tokens"),
        "{err}"
    );
    let names = events.names();
    let w = names
        .iter()
        .position(|n| *n == "budget_warning")
        .expect("warning");
    let x = names
        .iter()
        .position(|n| *n == "budget_exceeded")
        .expect("exceeded");
    assert!(w < x);
    assert_eq!(p.model_calls().len(), 2);
}

#[tokio::test]
async fn cancellation_stops_a_running_tool() {
    let p = ScriptedProvider::start(vec![Turn::tool("bash", json!({"command": "sleep 30"}))]).await;
    let ws = tempfile::tempdir().unwrap();
    let env = env_for(&p, Wire::Anthropic);
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "sleep");
    t.tools = vec!["bash".into()];
    let c = ctx(&env, &events);
    let cancel = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        cancel.cancel();
    });
    // Without the cancel, bash would finish after 30 s and the exhausted
    // script would end the node with RetriesExhausted instead.
    let err = run_agent(&t, BackendName::Claw, host(&ws), &c)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, AgentError::Cancelled), "{err}");
}

#[tokio::test]
async fn codex_is_a_typed_refusal() {
    let ws = tempfile::tempdir().unwrap();
    let env = iterion_agent::EnvSnapshot::new();
    let events = Events::default();
    let err = run_agent(
        &task(Wire::Anthropic, "x"),
        BackendName::Codex,
        host(&ws),
        &ctx(&env, &events),
    )
    .await
    .expect_err("codex");
    assert_eq!(err.code(), "AGENT_CODEX_REFUSED");
    assert!(err.to_string().contains("not built"), "{err}");
}

/// `session: inherit` on claw: the previous node's conversation is
/// replayed before this node's prompt.
#[tokio::test]
async fn session_inherit_replays_the_previous_conversation() {
    let p = ScriptedProvider::start(vec![Turn::text("noted"), Turn::text("zebra")]).await;
    let first = claw_on_host(&p, Wire::OpenAi, &task(Wire::OpenAi, "Remember zebra-99."))
        .await
        .result
        .expect("first");
    let mut second = task(Wire::OpenAi, "Which word?");
    second.session = iterion_agent::SessionSpec::Inherit {
        session_id: None,
        messages: first.messages,
    };
    let out = claw_on_host(&p, Wire::OpenAi, &second)
        .await
        .result
        .expect("second");
    assert_eq!(out.text, "zebra");
    let msgs = p.model_calls()[1].body["messages"].clone();
    let texts: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(texts, vec!["Remember zebra-99.", "noted", "Which word?"]);
}

/// A `tool_policy` that leaves none of the node's tools is refused before
/// any model call; one that denies a tool keeps it from the model.
#[tokio::test]
async fn tool_policy_denying_every_tool_is_refused_up_front() {
    let p = ScriptedProvider::start(vec![Turn::text("unreachable")]).await;
    let mut t = task(Wire::Anthropic, "x");
    t.tools = vec!["read_file".into(), "mcp__gh__issue".into()];
    t.tool_policy = Some(vec![]);
    // The MCP name is refused first: nobody serves it here.
    let HostRun { result, .. } = claw_on_host(&p, Wire::Anthropic, &t).await;
    assert_eq!(result.expect_err("unserved").code(), "AGENT_TOOL_REFUSED");
    t.tools = vec!["read_file".into(), "git_diff".into()];
    for policy in [vec![], vec!["!*".to_owned()], vec!["mcp.*".to_owned()]] {
        t.tool_policy = Some(policy.clone());
        let HostRun { result, events, .. } = claw_on_host(&p, Wire::Anthropic, &t).await;
        let err = result.expect_err("denies all");
        assert_eq!(err.code(), "AGENT_TOOL_POLICY_DENIES_ALL", "{policy:?}");
        assert!(err.to_string().contains("read_file"), "{err}");
        assert_eq!(events.count("delegate_error"), 1);
    }
    assert!(p.requests().is_empty());
}
