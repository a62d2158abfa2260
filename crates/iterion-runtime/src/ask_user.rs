//! An agent's `ask_user` call, the engine's side: which nodes may ask
//! (the one home of "interactive"), and who answers. On a terminal the
//! question goes to the same [`HumanPrompter`] human nodes use and the
//! answer is the tool's result; without one the run pauses exactly as at
//! a human node (`human_input_requested` with the question, status
//! `paused_waiting_human`) and `iterion resume --answer answer=…` runs
//! the node again, its first `ask_user` call answered with that text
//! (upstream reruns the node with the prior question and answer).
//!
//! How the question reaches the host (the runner channel for claw, the
//! per-run ask-user listener for `claude_code`) is the agent runner's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iterion_core::NodeId;
use iterion_core::agent::{AskHuman, AskReply};
use iterion_dsl::ir::{self, NodeKind};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::human::{AnswerInput, DEFAULT_ANSWER_FIELD, HumanPrompter, HumanRequest};

/// The `interaction:` words under which a person may answer an agent.
const HUMAN_INTERACTIONS: &[&str] = &["human", "llm_or_human", "human_or_host"];

/// Whether `node` may ask the human (`ask_user` served): an agent or
/// judge whose `interaction:` (its own, else the workflow's) lets a
/// person answer, or one that lists `ask_user` in its `tools:`.
pub fn interactive(workflow: &ir::Workflow, node: &ir::Node) -> bool {
    if !matches!(node.kind, NodeKind::Agent | NodeKind::Judge) {
        return false;
    }
    let word = node
        .properties
        .get("interaction")
        .or_else(|| workflow.properties.get("interaction"))
        .and_then(Value::as_str);
    let listed = node
        .properties
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|v| v.as_str() == Some("ask_user")));
    listed || word.is_some_and(|w| HUMAN_INTERACTIONS.contains(&w))
}

/// Whether any node of `workflow` may ask the human.
pub fn has_interactive_node(workflow: &ir::Workflow) -> bool {
    workflow.nodes.values().any(|n| interactive(workflow, n))
}

/// The text an agent node's resume answers carry.
pub(crate) fn resumed_answer(answers: &Value) -> String {
    match answers.get(DEFAULT_ANSWER_FIELD) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => answers.to_string(),
    }
}

/// One node call's asker.
pub(crate) struct NodeAsk {
    node: NodeId,
    prompter: Option<Arc<dyn HumanPrompter>>,
    main_path: bool,
    resumed: Mutex<Option<String>>,
    pending: Mutex<Option<String>>,
    pause: CancellationToken,
}

impl NodeAsk {
    pub(crate) fn new(
        node: NodeId,
        prompter: Option<Arc<dyn HumanPrompter>>,
        main_path: bool,
        resumed: Option<String>,
    ) -> Self {
        Self {
            node,
            prompter,
            main_path,
            resumed: Mutex::new(resumed),
            pending: Mutex::new(None),
            pause: CancellationToken::new(),
        }
    }

    /// Fires when a question must wait for a human (the node stops).
    pub(crate) fn paused(&self) -> CancellationToken {
        self.pause.clone()
    }

    /// The question the node paused on.
    pub(crate) fn pending(&self) -> Option<String> {
        self.pending.lock().ok().and_then(|p| p.clone())
    }
}

#[async_trait]
impl AskHuman for NodeAsk {
    async fn ask(&self, question: &str) -> AskReply {
        if let Some(answer) = self.resumed.lock().ok().and_then(|mut r| r.take()) {
            return AskReply::Answer(answer);
        }
        if let Some(prompter) = &self.prompter {
            let request = HumanRequest {
                node: self.node.clone(),
                instructions: Some(question.to_owned()),
                questions: serde_json::json!({ "question": question }),
                fields: vec![(DEFAULT_ANSWER_FIELD.to_owned(), "string")],
            };
            return match prompter.ask(&request).await {
                Ok(raw) => answer_text(&raw).map_or_else(
                    || AskReply::Refused("ask_user: no answer was given".to_owned()),
                    AskReply::Answer,
                ),
                Err(e) => AskReply::Refused(format!("ask_user: {e}")),
            };
        }
        if !self.main_path {
            return AskReply::Refused(
                "ask_user inside a parallel branch or foreach item cannot pause the run; \
                 run it on a terminal to answer it"
                    .to_owned(),
            );
        }
        if let Ok(mut p) = self.pending.lock() {
            *p = Some(question.to_owned());
        }
        self.pause.cancel();
        // The node is stopped by the engine now (it drops the call): the
        // model gets no answer and so makes no further call, which a
        // rerun on resume would otherwise find already spent.
        std::future::pending::<()>().await;
        AskReply::Paused
    }
}

fn answer_text(raw: &BTreeMap<String, AnswerInput>) -> Option<String> {
    match raw.get(DEFAULT_ANSWER_FIELD)? {
        AnswerInput::Text(t) => Some(t.clone()),
        AnswerInput::Json(Value::String(s)) => Some(s.clone()),
        AnswerInput::Json(v) => Some(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    struct Tty(&'static str);

    #[async_trait]
    impl HumanPrompter for Tty {
        async fn ask(
            &self,
            request: &HumanRequest,
        ) -> Result<BTreeMap<String, AnswerInput>, String> {
            assert_eq!(request.fields[0].0, "answer");
            let mut m = BTreeMap::new();
            m.insert(
                "answer".to_owned(),
                AnswerInput::Text(format!("{} ({})", self.0, request.questions["question"])),
            );
            Ok(m)
        }
    }

    #[tokio::test]
    async fn a_terminal_answers_a_resume_answers_once_otherwise_it_pauses() {
        let tty = NodeAsk::new(NodeId::new("a"), Some(Arc::new(Tty("blue"))), true, None);
        assert_eq!(
            tty.ask("colour?").await,
            AskReply::Answer("blue (\"colour?\")".to_owned())
        );
        assert!(!tty.paused().is_cancelled());
        let resumed = NodeAsk::new(NodeId::new("a"), None, true, Some("green".into()));
        assert_eq!(
            resumed.ask("colour?").await,
            AskReply::Answer("green".into())
        );
        // An unanswerable question never returns: the engine stops the node.
        let mut never = std::pin::pin!(resumed.ask("size?"));
        let polled =
            std::future::poll_fn(|cx| std::task::Poll::Ready(never.as_mut().poll(cx))).await;
        assert!(polled.is_pending(), "a pausing ask returned");
        assert!(resumed.paused().is_cancelled());
        assert_eq!(resumed.pending().as_deref(), Some("size?"));
        let branch = NodeAsk::new(NodeId::new("a"), None, false, None);
        assert!(matches!(branch.ask("x").await, AskReply::Refused(_)));
        assert!(!branch.paused().is_cancelled());
    }
}
