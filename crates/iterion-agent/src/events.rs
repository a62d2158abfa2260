//! How an agent streams its events to the caller: typed
//! [`iterion_core::EventKind`] values (upstream names: `llm_request`,
//! `llm_step_finished`, `llm_retry`, `tool_started`, `tool_called`,
//! `tool_error`, `tool_denied`, `delegate_*`, `budget_*`,
//! `sandbox_claw_routed_via_runner`) handed to an [`AgentEventSink`].
//!
//! Also the two filters every event passes: [`Redacting`] scrubs
//! credential values from any string in a payload, and
//! [`is_agent_event`] is the allowlist of what a runner inside the
//! container may report (it must never be able to forge a sandbox or run
//! event on the host's record).

use iterion_core::EventKind;

use crate::credentials::Redactor;

/// Receives an agent's events as they happen.
pub trait AgentEventSink: Send + Sync {
    /// One event.
    fn emit(&self, event: EventKind);
}

impl AgentEventSink for tokio::sync::mpsc::UnboundedSender<EventKind> {
    fn emit(&self, event: EventKind) {
        // A caller that stopped listening loses events, not the node.
        let _ = self.send(event);
    }
}

impl<F: Fn(EventKind) + Send + Sync> AgentEventSink for F {
    fn emit(&self, event: EventKind) {
        self(event);
    }
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl AgentEventSink for NullSink {
    fn emit(&self, _event: EventKind) {}
}

/// Wraps a sink; every string in every payload is redacted first.
pub struct Redacting<'a> {
    inner: &'a dyn AgentEventSink,
    redactor: Redactor,
}

impl<'a> Redacting<'a> {
    /// Wrap `inner`.
    pub fn new(inner: &'a dyn AgentEventSink, redactor: Redactor) -> Self {
        Self { inner, redactor }
    }
}

impl AgentEventSink for Redacting<'_> {
    fn emit(&self, event: EventKind) {
        self.inner.emit(redact_event(&self.redactor, event));
    }
}

/// Scrub credential values from an event's payload.
pub fn redact_event(redactor: &Redactor, event: EventKind) -> EventKind {
    let Ok(mut value) = serde_json::to_value(&event) else {
        return event;
    };
    redactor.redact_json(&mut value);
    serde_json::from_value(value).unwrap_or(event)
}

/// The events an in-box runner may send to the host.
pub fn is_agent_event(event: &EventKind) -> bool {
    matches!(
        event,
        EventKind::LlmRequest { .. }
            | EventKind::LlmStepFinished { .. }
            | EventKind::LlmRetry { .. }
            | EventKind::ToolStarted { .. }
            | EventKind::ToolCalled { .. }
            | EventKind::ToolError { .. }
            | EventKind::ToolDenied { .. }
            | EventKind::BudgetWarning { .. }
            | EventKind::BudgetExceeded { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacting_sink_scrubs_payload_strings() {
        let got = std::sync::Mutex::new(Vec::new());
        let sink = |e: EventKind| got.lock().expect("lock").push(e);
        let red = Redacting::new(&sink, Redactor::new(["sk-secret-value".to_owned()]));
        red.emit(EventKind::ToolError {
            tool: "bash".into(),
            tool_use_id: "t".into(),
            input_size: 1,
            duration_ms: 1,
            error: "echo sk-secret-value".into(),
            placement: "container".into(),
            server: None,
        });
        let got = got.lock().expect("lock");
        let EventKind::ToolError { error, .. } = &got[0] else {
            panic!("kind")
        };
        assert_eq!(error, "echo [REDACTED]");
    }

    #[test]
    fn runner_may_not_forge_sandbox_events() {
        assert!(!is_agent_event(&EventKind::SandboxSkipped {
            mode: iterion_core::Mode::Auto,
            source: "x".into(),
            reason: "x".into(),
            file_secrets_dropped: false,
            refused: None,
            error_code: None,
            driver: None,
        }));
        assert!(!is_agent_event(&EventKind::DelegateStarted {
            backend: "claw".into()
        }));
        assert!(is_agent_event(&EventKind::LlmRetry {
            attempt: 1,
            delay_ms: 1,
            error: "e".into(),
            status_code: None,
        }));
    }
}
