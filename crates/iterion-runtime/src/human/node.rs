//! A human node's execution: the answers given on resume, asked on a
//! terminal through the run's [`HumanPrompter`](super::HumanPrompter), or
//! the run's pause (`human_input_requested`). It runs in the run's
//! context (`RunCx`), which carries the prompter; the answers' shape and
//! their checking are the parent module's, which the context and resume
//! read without running a node.
//!
//! It does not decide the run's status (the engine does on `Stop::Paused`).

use iterion_core::{EventKind, FailureCode};
use iterion_dsl::ir;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{HumanRequest, answer_fields, answer_schema, check_answers, interaction_id};
use crate::exec::{NodeError, RunCx, Stop};
use crate::progress::FrameId;

impl<'a> RunCx<'a> {
    /// A human node's output: the answers given on resume, or asked on a
    /// terminal; otherwise the run pauses here.
    pub(crate) async fn human(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        input: &Map<String, Value>,
        answers: Option<Value>,
        cancel: &CancellationToken,
    ) -> Result<Value, Stop> {
        if let Some(answers) = answers {
            // Checked by the resume plan against this node's schema.
            return Ok(answers);
        }
        // `interaction: llm` answers through a model; `llm_or_human` too,
        // unless the model says a person must (upstream `resume.go`):
        // then it is asked, or the run pauses, like any human node.
        if crate::agents::is_llm_human(self.workflow, node) {
            let ask_human = node
                .properties
                .get("interaction")
                .or_else(|| self.workflow.properties.get("interaction"))
                .and_then(Value::as_str)
                == Some("llm_or_human");
            match self
                .run_human_llm(frame, node, input, ask_human, cancel)
                .await
            {
                Ok((output, false)) => return Ok(output),
                Ok((_, true)) => {}
                Err(e) => return Err(self.node_failed(frame, node, e)),
            }
        }
        let schema = answer_schema(self.workflow, node);
        let request = HumanRequest {
            node: node.id.clone(),
            // A declared prompt's body when it names one, else the text.
            instructions: node
                .properties
                .get("instructions")
                .and_then(Value::as_str)
                .map(|t| {
                    self.workflow
                        .prompts
                        .get(t)
                        .map_or(t, String::as_str)
                        .to_owned()
                }),
            questions: Value::Object(input.clone()),
            fields: answer_fields(schema),
        };
        if let Some(prompter) = &self.human {
            let asked = tokio::select! {
                a = prompter.ask(&request) => a,
                () = cancel.cancelled() => return Err(self.node_failed(frame, node, NodeError::Cancelled)),
            };
            let result =
                asked.and_then(|raw| check_answers(node, schema, &raw).map_err(|e| e.to_string()));
            return result.map_err(|e| {
                self.node_failed(frame, node, NodeError::failed(FailureCode::NodeFailed, e))
            });
        }
        if !frame.is_main() {
            // A pause resumes on the main path only (a fork restarts at
            // its router, so a branch's answers would be asked again).
            let e = NodeError::failed(
                FailureCode::NodeFailed,
                "a human node inside a parallel branch or foreach item cannot pause the run; \
                 run it on a terminal to answer it",
            );
            return Err(self.node_failed(frame, node, e));
        }
        let times = self.with_progress(|p| p.visits(frame, &node.id));
        self.emit_node(
            frame,
            &node.id,
            EventKind::HumanInputRequested {
                interaction_id: interaction_id(&node.id, times),
                questions: serde_json::json!({
                    "instructions": request.instructions,
                    "input": request.questions,
                }),
                fields: request.fields.iter().map(|(n, _)| n.clone()).collect(),
            },
        );
        Err(Stop::Paused {
            node: node.id.clone(),
        })
    }
}
