//! Guards that refuse a plan: sensitive bind sources, flag/line injection in
//! mount specs, image, user and workdir, bad env names/values.
//!
//! CONTRACT (drivers call this in `prepare`): keep the signature of
//! [`check_launch_plan`]. The policy issue fills in every rule.

use iterion_core::LaunchPlan;

/// A guard refused a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} refused: {reason}")]
pub struct GuardViolation {
    /// Which field (`mount`, `image`, `user`, `workdir`, `env`…).
    pub field: String,
    /// The offending value (never a secret: env values are not echoed).
    pub value: String,
    /// Why.
    pub reason: String,
}

impl GuardViolation {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_SPEC_REFUSED"
    }
}

/// Check every guard on a finalized plan.
pub fn check_launch_plan(plan: &LaunchPlan) -> Result<(), GuardViolation> {
    let _ = plan;
    Err(GuardViolation {
        field: "plan".into(),
        value: String::new(),
        reason: "guards not implemented yet (fail closed)".into(),
    })
}
