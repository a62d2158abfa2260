//! Agent, judge and llm-router nodes through the agent seam, with a
//! scripted runner standing where `iterion-agent` will: what the engine
//! hands over (rendered prompts, JSON Schema, backend fields, session,
//! limits, the exec env), what it does with the answer (schema check,
//! bookkeeping fields, routing, persisted events), and how a runner's
//! failure ends the run.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iterion_core::agent::{
    AgentContext, AgentError, AgentOutcome, AgentRequest, AgentRole, AgentRunner, AgentUsage,
    SessionMode,
};
use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::{DriverError, ExecRequest, FailureCode, NodeId, RunStatus};
use serde_json::{Value, json};

use crate::runtime::support::{Harness, compile};

fn event(kind: &str, data: Value) -> iterion_core::EventDraft {
    iterion_core::EventDraft {
        kind: kind.into(),
        node_id: None,
        data,
    }
}

type Answer = dyn Fn(&AgentRequest, usize) -> Result<Value, AgentError> + Send + Sync;

/// Answers each call with `answer(request, nth call of that node)`,
/// records the requests, streams two events, and — when the node has a
/// `bash` tool — execs one command in the sandbox with the node's env.
struct Scripted {
    answer: Box<Answer>,
    requests: Mutex<Vec<AgentRequest>>,
}

impl Scripted {
    fn new(
        answer: impl Fn(&AgentRequest, usize) -> Result<Value, AgentError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            answer: Box::new(answer),
            requests: Mutex::new(Vec::new()),
        })
    }

    fn requests(&self, node: &str) -> Vec<AgentRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.node.as_str() == node)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl AgentRunner for Scripted {
    async fn run(
        &self,
        request: AgentRequest,
        cx: AgentContext<'_>,
    ) -> Result<AgentOutcome, AgentError> {
        let nth = {
            let mut all = self.requests.lock().unwrap();
            all.push(request.clone());
            all.iter().filter(|r| r.node == request.node).count()
        };
        cx.events
            .emit(event("delegate_started", json!({"backend": "scripted"})));
        if request.tools.iter().any(|t| t == "bash") {
            let mut req =
                ExecRequest::new(["sh", "-c", "echo \"$ITERION_NODE_ID\" >> agent_execs.txt"]);
            req.env = cx.exec_env.clone();
            let mut session = cx
                .sandbox
                .exec(req)
                .await
                .map_err(|source| AgentError::Sandbox { source })?;
            let mut ignore = |_: &iterion_core::OutputChunk| {};
            collect_output(session.as_mut(), OutputLimits::default(), &mut ignore)
                .await
                .map_err(|source| AgentError::Sandbox { source })?;
        }
        cx.events.emit(event(
            "llm_step_finished",
            json!({"step": 1, "input_tokens": 100, "output_tokens": 20, "finish_reason": "end_turn"}),
        ));
        let output = (self.answer)(&request, nth)?;
        let Value::Object(output) = output else {
            return Err(AgentError::Output {
                message: "not an object".into(),
            });
        };
        Ok(AgentOutcome {
            output,
            usage: AgentUsage {
                input_tokens: 100,
                output_tokens: 20,
                cost_usd: Some(0.01),
            },
            backend: "scripted".into(),
            session_id: Some(format!("sess-{}-{nth}", request.node)),
        })
    }
}

const REFINE: &str = r#"
vars:
  repo: string = "octo/widgets"

prompt fix_system:
  You fix {{vars.repo}}.

prompt review_user:
  Check: {{input.summary}}

schema patch:
  summary: string

schema verdict:
  approved: bool
  reasons: string

agent fix:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  system: fix_system
  user: "Fix {{vars.repo}}."
  output: patch
  tools: [bash, read_file]
  tool_policy: ["*", "!bash"]
  tool_max_steps: 7

judge review:
  model: "openai/gpt-5"
  system: "Review strictly."
  user: review_user
  output: verdict
  session: inherit

workflow refine:
  entry: fix
  default_backend: "claw"
  tool_policy: ["read_file"]
  fix -> review with { summary: "{{input.summary}}", _session_id: "{{outputs.fix._session_id}}" }
  review -> fix when not approved as refine(3)
  review -> done when approved
"#;

#[tokio::test]
async fn a_judge_verdict_routes_a_refine_loop() {
    let runner = Scripted::new(|req, nth| {
        Ok(match req.node.as_str() {
            "fix" => json!({"summary": format!("patch {nth}")}),
            _ => json!({"approved": nth >= 2, "reasons": "needs tests"}),
        })
    });
    let h = Harness::new().with_agents(runner.clone());
    let out = h.run(compile(REFINE)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);

    let fixes = runner.requests("fix");
    let reviews = runner.requests("review");
    assert_eq!((fixes.len(), reviews.len()), (2, 2));
    let fix = &fixes[0];
    assert_eq!(fix.role, AgentRole::Agent);
    assert_eq!(fix.system_prompt.as_deref(), Some("You fix octo/widgets."));
    assert_eq!(fix.user_prompt, "Fix octo/widgets.");
    assert_eq!(fix.model.as_deref(), Some("anthropic/claude-sonnet-4-6"));
    assert_eq!(fix.backend.as_deref(), Some("claw"));
    assert_eq!(fix.default_backend.as_deref(), Some("claw"));
    assert_eq!(fix.tools, ["bash", "read_file"]);
    assert_eq!(fix.tool_max_steps, Some(7));
    // A node's tool_policy replaces the workflow's; without one it inherits.
    assert_eq!(fix.tool_policy, Some(vec!["*".into(), "!bash".into()]));
    assert_eq!(fix.session, SessionMode::Fresh);
    assert_eq!(
        fix.output_schema,
        Some(json!({
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
            "additionalProperties": false
        }))
    );
    let review = &reviews[1];
    assert_eq!(review.role, AgentRole::Judge);
    assert_eq!(review.system_prompt.as_deref(), Some("Review strictly."));
    assert_eq!(review.user_prompt, "Check: patch 2");
    assert_eq!(review.session, SessionMode::Inherit);
    assert_eq!(review.tool_policy, Some(vec!["read_file".to_owned()]));
    // The session handed on through `with`: fix's second call's session.
    assert_eq!(review.session_id.as_deref(), Some("sess-fix-2"));

    let events = h.events(&out.run_id).await;
    let steps: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "llm_step_finished")
        .map(|e| e.node_id.as_ref().unwrap().as_str())
        .collect();
    assert_eq!(steps, ["fix", "review", "fix", "review"]);
    let fix_done = events
        .iter()
        .find(|e| e.kind == "node_finished" && e.node_id == Some(NodeId::new("fix")))
        .unwrap();
    assert_eq!(
        fix_done.data["output"],
        json!({"summary": "patch 1", "_backend": "scripted", "_tokens": 120, "_cost_usd": 0.01, "_session_id": "sess-fix-1"})
    );
    let looped: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "edge_selected" && e.data["loop"] == "refine")
        .map(|e| &e.data["iteration"])
        .collect();
    assert_eq!(looped, [&json!(1)]);
    // The agent's shell tool ran where the run's nodes run, as its node.
    let execs = std::fs::read_to_string(h.workspace.path().join("agent_execs.txt")).unwrap();
    assert_eq!(execs, "fix\nfix\n");
}

const PICK: &str = r#"
router pick:
  mode: llm
  model: "openai/gpt-5-mini"
  system: "Pick where to go."
  multi: MULTI

tool a:
  command: "echo a > a.txt"
  parallel_safe: true

tool b:
  command: "echo b > b.txt"
  parallel_safe: true

tool j:
  command: "ls a.txt b.txt 2>/dev/null | wc -l"
  await: wait_all

workflow pick:
  entry: pick
  pick -> a
  pick -> b
  a -> j
  b -> j
  j -> done
"#;

#[tokio::test]
async fn an_llm_router_takes_the_route_it_chose() {
    let runner = Scripted::new(|_, _| Ok(json!({"selected_route": "b", "reasoning": "b is next"})));
    let h = Harness::new().with_agents(runner.clone());
    let out = h.run(compile(&PICK.replace("MULTI", "false"))).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    assert!(h.workspace.path().join("b.txt").exists());
    assert!(!h.workspace.path().join("a.txt").exists());
    let req = &runner.requests("pick")[0];
    assert_eq!(
        req.role,
        AgentRole::Router {
            multi: false,
            candidates: vec!["a".into(), "b".into()]
        }
    );
    let schema = req.output_schema.as_ref().unwrap();
    assert_eq!(
        schema["properties"]["selected_route"]["enum"],
        json!(["a", "b"])
    );
    assert!(h.of_kind(&out.run_id, "branch_started").await.is_empty());
}

#[tokio::test]
async fn an_llm_router_choosing_several_routes_fans_out() {
    let runner =
        Scripted::new(|_, _| Ok(json!({"selected_routes": ["b", "a"], "reasoning": "both"})));
    let h = Harness::new().with_agents(runner);
    let out = h.run(compile(&PICK.replace("MULTI", "true"))).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    assert_eq!(h.of_kind(&out.run_id, "branch_started").await.len(), 2);
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join[0].node_id, Some(NodeId::new("j")));
    let events = h.events(&out.run_id).await;
    let j = events
        .iter()
        .find(|e| e.kind == "node_finished" && e.node_id == Some(NodeId::new("j")))
        .unwrap();
    assert_eq!(j.data["output"]["result"], "2");
}

#[tokio::test]
async fn a_route_outside_the_candidates_fails_the_router() {
    let runner = Scripted::new(|_, _| Ok(json!({"selected_route": "zzz", "reasoning": "?"})));
    let h = Harness::new().with_agents(runner);
    let out = h.run(compile(&PICK.replace("MULTI", "false"))).await;
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(failure.message.contains("zzz"), "{}", failure.message);
    assert!(!h.workspace.path().join("a.txt").exists());
}

#[tokio::test]
async fn runner_failures_are_typed_node_failures() {
    for (error, code, needle) in [
        (
            AgentError::Backend {
                backend: "codex".into(),
                reason: "OPENAI_API_KEY is not set".into(),
            },
            FailureCode::NodeFailed,
            "AGENT_BACKEND",
        ),
        (
            AgentError::Sandbox {
                source: DriverError::ContainerGone {
                    container: "c1".into(),
                },
            },
            FailureCode::SandboxLost,
            "c1",
        ),
    ] {
        let error = Mutex::new(Some(error));
        let runner = Scripted::new(move |_, _| Err(error.lock().unwrap().take().unwrap()));
        let h = Harness::new().with_agents(runner);
        let out = h.run(compile(REFINE)).await;
        let failure = out.failure.unwrap();
        assert_eq!(failure.code, code);
        assert!(failure.message.contains(needle), "{}", failure.message);
        let failed = h.of_kind(&out.run_id, "node_failed").await;
        assert_eq!(failed[0].node_id, Some(NodeId::new("fix")));
    }
}

#[tokio::test]
async fn an_answer_missing_a_verdict_field_fails_the_judge() {
    let runner = Scripted::new(|req, _| {
        Ok(match req.node.as_str() {
            "fix" => json!({"summary": "p"}),
            _ => json!({"approved": "yes"}),
        })
    });
    let h = Harness::new().with_agents(runner);
    let out = h.run(compile(REFINE)).await;
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(failure.message.contains("review"), "{}", failure.message);
}
