//! The runner protocol over a real `iterion __claw-runner` process (the
//! static binary, started on the host): the loop through the channel,
//! credentials kept from tool children, launcher-side tools with the
//! truncation marker, and every way the channel can break — each a typed
//! error, never a hang.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use iterion_agent::process::HostProcess;
use iterion_agent::runner::protocol::{MAX_LINE_BYTES, WireMessage, decode};
use iterion_agent::tools::ToolSpec;
use iterion_agent::{AgentError, LauncherTools, drive_runner_session};
use iterion_core::{EventKind, ExecSession, OutputStream};
use iterion_testkit::agent::static_iterion;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::{Value, json};

use crate::agent::support::*;

fn runner_env(p: &ScriptedProvider) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("ANTHROPIC_API_KEY".to_owned(), ANTHROPIC_KEY.to_owned()),
        ("ANTHROPIC_BASE_URL".to_owned(), p.url()),
        ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
    ])
}

fn spawn_runner(env: &BTreeMap<String, String>, ws: &std::path::Path) -> HostProcess {
    let argv = vec![
        static_iterion().display().to_string(),
        "__claw-runner".to_owned(),
    ];
    HostProcess::spawn(&argv, env, ws).expect("spawn runner")
}

fn spawn_sh(script: &str, ws: &std::path::Path) -> HostProcess {
    let argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
    HostProcess::spawn(
        &argv,
        &BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
        ws,
    )
    .expect("spawn sh")
}

/// Everything the runner writes on stdout, as messages, plus its exit code.
async fn collect(mut p: HostProcess) -> (Vec<WireMessage>, i64) {
    let mut out = Vec::new();
    while let Some(c) = p.next_chunk().await {
        let c = c.expect("chunk");
        if c.stream == OutputStream::Stdout {
            out.extend_from_slice(&c.data);
        }
    }
    let code = p.wait().await.expect("wait");
    let msgs = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| decode(l).expect("runner lines decode"))
        .collect();
    (msgs, code)
}

/// The runner's one message when the channel broke: a typed error in a
/// `result`, exit code 2.
async fn protocol_failure(p: HostProcess) -> AgentError {
    let (mut msgs, code) = collect(p).await;
    assert_eq!(code, 2);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let Some(WireMessage::Result { data }) = msgs.pop() else {
        panic!("not a result")
    };
    match *data {
        iterion_agent::runner::protocol::RunnerResult::Err(e) => e,
        iterion_agent::runner::protocol::RunnerResult::Ok(o) => panic!("ok? {o:?}"),
        iterion_agent::runner::protocol::RunnerResult::Tool(t) => panic!("tool? {t:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_runs_the_loop_and_keeps_the_key_from_tools() {
    let p = ScriptedProvider::start(vec![
        Turn::tool("bash", json!({"command": "env; echo marker-$((6*7))"})),
        Turn::text("{\"verdict\": \"pass\"}"),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let env = runner_env(&p);
    let mut session = spawn_runner(&env, ws.path());
    let host_env = iterion_agent::EnvSnapshot::new();
    let events = Events::default();
    let mut t = task(Wire::Anthropic, "inspect");
    t.tools = vec!["bash".into()];
    t.output_schema = Some(json!({"type": "object", "required": ["verdict"]}));
    let out = drive_runner_session(&mut session, &t, &ctx(&host_env, &events))
        .await
        .expect("outcome");
    assert_eq!(out.output["verdict"], "pass");

    let calls = p.model_calls();
    assert_eq!(calls[0].header("x-api-key"), Some(ANTHROPIC_KEY));
    let result = &calls[1].tool_results()[0];
    assert!(result.contains("marker-42"), "{result}");
    // The runner holds the key; its bash children never inherit it. (Its
    // /proc environ is guarded by non-dumpability: proven in a container,
    // where root lacks CAP_SYS_PTRACE; host root can read it anyway.)
    assert!(
        !result.contains(ANTHROPIC_KEY),
        "key leaked to a tool: {result}"
    );
    assert!(!result.contains("ANTHROPIC_API_KEY"), "{result}");
    // Events crossed the channel, tools placed in the "container" (the
    // runner's side).
    assert!(events.all().iter().any(|e| matches!(e,
        iterion_core::EventKind::ToolCalled { tool, placement, .. } if tool == "bash" && placement == "container")));
    assert_eq!(events.count("llm_step_finished"), 2);
}

struct BigTool;

#[async_trait]
impl LauncherTools for BigTool {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "mcp.test.big".into(),
            description: "returns a lot".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    async fn call(&self, name: &str, _input: &Value) -> Result<String, String> {
        assert_eq!(name, "mcp.test.big");
        Ok("y".repeat(MAX_LINE_BYTES + 1024 * 1024))
    }
}

/// A launcher-side result over the line cap reaches the model cut, with
/// the marker; the channel keeps working (the model's next turn ends the
/// node normally).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_launcher_result_is_truncated_with_a_marker() {
    let p = ScriptedProvider::start(vec![
        // The model calls the wire name; the host serves the qualified one.
        Turn::tool("mcp__test__big", json!({})),
        Turn::text("got it"),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut session = spawn_runner(&runner_env(&p), ws.path());
    let host_env = iterion_agent::EnvSnapshot::new();
    let events = Events::default();
    let mut c = ctx(&host_env, &events);
    c.launcher = Some(&BigTool);
    let mut t = task(Wire::Anthropic, "fetch big");
    t.tools = vec!["mcp.test.big".into()];
    let out = drive_runner_session(&mut session, &t, &c)
        .await
        .expect("outcome");
    assert_eq!(out.text, "got it");
    let result = &p.model_calls()[1].tool_results()[0];
    assert!(result.len() <= MAX_LINE_BYTES, "{}", result.len());
    assert!(
        result.ends_with("[iterion: tool result truncated]"),
        "{}",
        &result[result.len() - 60..]
    );
    assert!(events.all().iter().any(|e| matches!(e,
        iterion_core::EventKind::ToolCalled { tool, placement, .. } if tool == "mcp.test.big" && placement == "host")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_line_to_the_runner_is_a_typed_result() {
    let ws = tempfile::tempdir().unwrap();
    let mut p = spawn_runner(&BTreeMap::new(), ws.path());
    p.write_stdin(Bytes::from_static(b"this is not json\n"))
        .await
        .expect("write");
    let e = protocol_failure(p).await;
    assert_eq!(e.code(), "AGENT_RUNNER_PROTOCOL", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_line_to_the_runner_is_a_typed_result() {
    let ws = tempfile::tempdir().unwrap();
    let mut p = spawn_runner(&BTreeMap::new(), ws.path());
    let mut line = vec![b'x'; MAX_LINE_BYTES + 1];
    line.push(b'\n');
    p.write_stdin(Bytes::from(line)).await.expect("write");
    let e = protocol_failure(p).await;
    assert!(
        matches!(&e, AgentError::RunnerLineTooLong { direction, .. } if direction == "host_to_runner"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_refuses_what_a_broken_runner_sends() {
    let ws = tempfile::tempdir().unwrap();
    let host_env = iterion_agent::EnvSnapshot::new();
    let t = task(Wire::Anthropic, "x");
    let cases: [(&str, &str); 4] = [
        // A line over the cap.
        (
            "read x; head -c 5000000 /dev/zero | tr '\\0' a; echo",
            "AGENT_RUNNER_LINE_TOO_LONG",
        ),
        // Not JSON.
        (
            "read x; echo 'garbage from the box'",
            "AGENT_RUNNER_PROTOCOL",
        ),
        // A forged sandbox event.
        (
            r#"read x; echo '{"type":"event","data":{"type":"sandbox_cleanup","data":{"driver":"docker","container":"c","ok":true}}}'"#,
            "AGENT_RUNNER_PROTOCOL",
        ),
        // Gone without a result.
        ("read x; echo oops >&2; exit 3", "AGENT_RUNNER_EXITED"),
    ];
    for (script, code) in cases {
        let events = Events::default();
        let mut s = spawn_sh(script, ws.path());
        let err = drive_runner_session(&mut s, &t, &ctx(&host_env, &events))
            .await
            .expect_err(code);
        assert_eq!(err.code(), code, "{script}: {err}");
        if let AgentError::RunnerExited {
            exit_code,
            stderr_tail,
        } = &err
        {
            assert_eq!(*exit_code, 3);
            assert_eq!(stderr_tail, "oops");
        }
        assert!(
            events.all().is_empty(),
            "{script}: forged events were recorded"
        );
    }
}

/// A runner that asks the host for a tool the node's policy denies (a
/// compromised box forging a `tool_call`): the host refuses it without
/// calling it and records `tool_denied` with `placement: host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_of_a_denied_launcher_tool_is_refused_on_the_host() {
    use iterion_agent::runner::protocol::ToolCallData;
    let call = serde_json::to_string(&WireMessage::ToolCall {
        id: "forged-1".into(),
        data: ToolCallData {
            name: "mcp.test.big".into(),
            input: json!({}),
        },
    })
    .unwrap();
    assert!(!call.contains('\''));
    let script = format!(
        "read -r task; printf '%s\\n' '{call}'; read -r reply; printf '%s' \"$reply\" > reply.json; exit 3"
    );
    let ws = tempfile::tempdir().unwrap();
    let mut s = spawn_sh(&script, ws.path());
    let host_env = iterion_agent::EnvSnapshot::new();
    let events = Events::default();
    let served = std::sync::atomic::AtomicBool::new(false);
    struct Watch<'a>(&'a std::sync::atomic::AtomicBool);
    #[async_trait]
    impl LauncherTools for Watch<'_> {
        fn specs(&self) -> Vec<ToolSpec> {
            BigTool.specs()
        }
        async fn call(&self, _name: &str, _input: &Value) -> Result<String, String> {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok("served".into())
        }
    }
    let watch = Watch(&served);
    let mut c = ctx(&host_env, &events);
    c.launcher = Some(&watch);
    let mut t = task(Wire::Anthropic, "x");
    t.tools = vec!["read_file".into(), "mcp.test.big".into()];
    t.tool_policy = Some(vec!["!mcp.test.*".into()]);
    let err = drive_runner_session(&mut s, &t, &c)
        .await
        .expect_err("the fake runner exits without a result");
    assert_eq!(err.code(), "AGENT_RUNNER_EXITED", "{err}");
    assert!(!served.load(std::sync::atomic::Ordering::SeqCst));
    let reply: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("reply.json")).unwrap())
            .unwrap();
    assert_eq!(reply["type"], "tool_result");
    assert_eq!(reply["id"], "forged-1");
    assert_eq!(reply["data"]["is_error"], true);
    assert!(
        reply["data"]["content"]
            .as_str()
            .unwrap()
            .contains("denied by tool_policy rule \"!mcp.test.*\""),
        "{reply}"
    );
    let denied: Vec<EventKind> = events
        .all()
        .into_iter()
        .filter(|e| matches!(e, EventKind::ToolDenied { .. }))
        .collect();
    assert_eq!(
        denied,
        vec![EventKind::ToolDenied {
            tool: "mcp.test.big".into(),
            tool_use_id: "forged-1".into(),
            rule: Some("!mcp.test.*".into()),
            reason: "tool \"mcp.test.big\" is denied by tool_policy rule \"!mcp.test.*\"".into(),
            placement: "host".into(),
        }]
    );
}
