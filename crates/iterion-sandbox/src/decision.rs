//! The sandbox decision: one pure function, [`decide`], from everything a
//! run's sandbox depends on ([`DecisionRequest`]) to everything about it
//! that can be known before any IO ([`SandboxDecision`]): which mode won
//! and which knob spoke, the host kind, the driver, the admission verdict,
//! what boot does (start a sandbox, run on the host, or refuse with its
//! code), the fused spec, the finalized mount plan with its secret files
//! and promised variables, who the sandbox runs as and its host-root
//! guard, the egress verdict, the read-back plan, the capability gaps, and
//! the events to emit, in order.
//!
//! Its callers never decide again. The runtime's booter *executes* a
//! decision (creates the run's host directories, writes the secret files,
//! starts the proxy, prepares and starts the driver); the engine's
//! admission *reads* [`SandboxDecision::admission`]; `iterion sandbox
//! doctor --strict` and the `ITERION_SANDBOX_PREFLIGHT` pre-flight *render*
//! it. So a run and its doctor cannot disagree: they are handed the same
//! decision for the same request.
//!
//! Pure means: the request is data — the flags, the parsed environment
//! (with `argv[0]`), the workflow's block and secret shapes, a snapshot of
//! the repository and of the host, the drivers' offers from the one probe,
//! and where the booter will create the run's private directories. The one
//! exception is the bind judge's question "what is this path really?",
//! asked through [`crate::binds::HostPaths`] (the caller hands
//! [`crate::binds::RealHost`]; the run's own directories, which do not
//! exist yet, are answered from the request as what the booter will
//! create). No clock, no process environment, no engine is read here.
//!
//! The steps, in the order the seed gives them (steps 3–15), each calling
//! its one home: [`crate::precedence`] (mode, host_state, default image),
//! [`crate::host`] (host kind, driver selection), [`crate::admission`]
//! (untrusted workspaces), [`crate::spec`] (devcontainer fusion),
//! [`crate::verdict`] (degrade vs refuse, egress), [`crate::mounts`]
//! (planning, finalize for the driver), [`crate::devbox`],
//! [`crate::binds`] (real-path judge, masks), [`crate::identity`], and
//! [`crate::classify`] for every refusal's code.

mod outcome;
mod request;
mod steps;

pub use outcome::{
    BindReport, IdentityOutcome, READBACK_UNSERVABLE, RUNNER_UNAVAILABLE, Refusal, SandboxDecision,
    SandboxPlan, SelectedDriver, Verdict,
};
pub use request::{DecisionRequest, FileSecretShape, RepoSnapshot, RunPaths, WorkflowFacts};

use crate::admission::{AdmissionVerdict, admit};
use crate::host::{detect_host, select_driver};
use crate::precedence::{
    PrecedenceInputs, resolve_default_image, resolve_host_state, resolve_mode,
};

/// Decide the sandbox of one run. See the module doc.
pub fn decide(req: &DecisionRequest<'_>) -> SandboxDecision {
    let detected_host = detect_host(&req.env.snapshot);
    let host = req.target.unwrap_or(detected_host);
    let inputs = PrecedenceInputs {
        flags: req.flags,
        env: req.env,
        workflow: req.workflow.sandbox,
    };
    let mode = resolve_mode(&inputs);
    let (host_state, host_state_source) = resolve_host_state(&inputs);
    let (default_image, _) = resolve_default_image(&inputs);
    let selection = select_driver(host, mode.mode, req.offers);
    // Facts §3.5: the one question the run's boot will ask.
    let sandboxed = mode.mode.is_active() && selection.is_ok();
    let mut d = steps::Decider {
        req,
        decision: SandboxDecision {
            host,
            detected_host,
            mode,
            source: mode.source.to_string(),
            host_state,
            host_state_source,
            default_image,
            selection,
            spec: None,
            driver: None,
            binds: None,
            identity: None,
            admission: admit(req.trust, &mode, sandboxed),
            verdict: Verdict::Denied,
            events: Vec::new(),
        },
    };
    let verdict = d.verdict();
    // The runner the sandbox's agents need cannot be put there: refused
    // before anything boots (a host run needs no runner in a box).
    let verdict = match (verdict, req.runner_missing) {
        (Verdict::Sandbox(_), Some(why)) if d.decision.admission.admitted() => {
            d.decision.admission = AdmissionVerdict::deny(RUNNER_UNAVAILABLE, why);
            Verdict::Denied
        }
        (v, _) => v,
    };
    d.decision.verdict = if d.decision.admission.admitted() {
        verdict
    } else {
        Verdict::Denied
    };
    d.decision
}

#[cfg(test)]
mod tests;
