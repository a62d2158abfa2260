//! `ask_user` answered by a model: an agent or judge whose `interaction:`
//! is `llm` (or `llm_or_human`) has its questions answered by its
//! `interaction_model:` with its `interaction_prompt:` as the system
//! prompt (upstream `ExecuteHumanLLMForInteraction`,
//! `pkg/backend/model/executor.go`, driven from `pkg/runtime/resume.go`):
//! one structured claw call per question, on the host, the question as
//! JSON for the user message, the answer the `answer` field of the
//! schema. At most [`MAX_ROUNDS`] questions per node call (upstream's
//! bound). Under `llm_or_human` the schema also carries
//! `needs_human_input: bool`; true hands the question to the human asker
//! (a terminal, or the run's pause), as does a node with no
//! `interaction_model:`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use iterion_core::EventKind;
use iterion_core::agent::{AskHuman, AskReply};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::claw::{ClawLoop, ToolDispatch, prepare_client};
use crate::credentials::ProviderCredentials;
use crate::env::EnvSnapshot;
use crate::events::AgentEventSink;
use crate::http::ResolverMode;
use crate::task::AgentTask;
use crate::tools::ToolEntry;

/// Questions one node call may have answered by the interaction model.
pub const MAX_ROUNDS: u32 = 5;

/// Answers a node's `ask_user` calls through its interaction model.
pub(crate) struct LlmAsker {
    pub(crate) env: EnvSnapshot,
    pub(crate) node: String,
    /// `interaction_model:` as written (`${VAR}` expanded per call).
    pub(crate) model: Option<String>,
    /// The rendered `interaction_prompt:`.
    pub(crate) system: Option<String>,
    /// `llm_or_human`: the human asker the model may defer to.
    pub(crate) human: Option<Arc<dyn AskHuman>>,
    pub(crate) or_human: bool,
    pub(crate) rounds: AtomicU32,
}

struct NoTools;

#[async_trait]
impl ToolDispatch for NoTools {
    async fn call(&self, entry: &ToolEntry, _input: &Value) -> Result<String, String> {
        Err(format!(
            "{} is not offered to the interaction model",
            entry.name
        ))
    }
}

/// The interaction call's own events are not the node's: the node's
/// `ask_user` tool events carry the question and the answer.
struct Quiet;

impl AgentEventSink for Quiet {
    fn emit(&self, _event: EventKind) {}
}

impl LlmAsker {
    async fn model_answer(&self, question: &str) -> Result<(String, bool), String> {
        let model = self
            .model
            .as_deref()
            .map(|m| self.env.expand(m).value)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                format!(
                    "node {}: interaction: llm needs interaction_model: (the model that answers its questions)",
                    self.node
                )
            })?;
        let mut task = AgentTask::new(
            format!("{}.interaction", self.node),
            json!({"question": question}).to_string(),
        );
        task.model = Some(model);
        task.system_prompt = self.system.clone();
        let mut schema = json!({
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": false,
        });
        if self.or_human {
            schema["properties"]["needs_human_input"] = json!({"type": "boolean"});
            schema["required"] = json!(["answer", "needs_human_input"]);
        }
        task.output_schema = Some(schema);
        let creds = ProviderCredentials::collect(&self.env);
        let (spec, client) = prepare_client(&task, &creds, &self.env, ResolverMode::System)
            .map_err(|e| format!("interaction model: {e} ({})", e.code()))?;
        let outcome = ClawLoop {
            task: &task,
            model: spec,
            client,
            tools: Vec::new(),
            dispatch: &NoTools,
            sink: &Quiet,
            cancel: CancellationToken::new(),
            in_sandbox: false,
        }
        .run()
        .await
        .map_err(|e| {
            creds
                .redactor()
                .redact(&format!("interaction model: {e} ({})", e.code()))
        })?;
        let answer = outcome
            .output
            .get("answer")
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        let defer = outcome
            .output
            .get("needs_human_input")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok((answer, defer))
    }
}

#[async_trait]
impl AskHuman for LlmAsker {
    async fn ask(&self, question: &str) -> AskReply {
        if self.or_human && self.model.is_none() {
            return match &self.human {
                Some(h) => h.ask(question).await,
                None => AskReply::Refused("no one can answer here".to_owned()),
            };
        }
        if self.rounds.fetch_add(1, Ordering::SeqCst) >= MAX_ROUNDS {
            return AskReply::Refused(format!(
                "the interaction model answers at most {MAX_ROUNDS} questions per node"
            ));
        }
        match self.model_answer(question).await {
            Ok((_, true)) if self.or_human => match &self.human {
                Some(h) => h.ask(question).await,
                None => AskReply::Refused(
                    "the question needs a person, and none can answer here".to_owned(),
                ),
            },
            Ok((answer, _)) => AskReply::Answer(answer),
            Err(e) => AskReply::Refused(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker(model: Option<&str>, or_human: bool) -> LlmAsker {
        LlmAsker {
            env: EnvSnapshot::new(),
            node: "n".into(),
            model: model.map(str::to_owned),
            system: None,
            human: None,
            or_human,
            rounds: AtomicU32::new(0),
        }
    }

    /// Upstream bounds the interaction model at five answers per node
    /// (`pkg/runtime/resume.go`); a node with no interaction model is told
    /// why, and `llm_or_human` without one goes to the person.
    #[tokio::test]
    async fn bounded_and_named() {
        let a = asker(Some("${UNSET_INTERACTION_MODEL}"), false);
        for _ in 0..MAX_ROUNDS {
            match a.ask("q").await {
                AskReply::Refused(why) => assert!(why.contains("interaction_model"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        match a.ask("q").await {
            AskReply::Refused(why) => assert!(why.contains("at most 5"), "{why}"),
            other => panic!("{other:?}"),
        }
        match asker(None, true).ask("q").await {
            AskReply::Refused(why) => assert!(why.contains("no one"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
