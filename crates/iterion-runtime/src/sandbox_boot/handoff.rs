//! What the policy booter hands itself through the engine's seam: the
//! run's decision and its secrets from `admit` to `boot` ([`Decided`],
//! carried inside `Admitted`), and what a started sandbox holds until
//! teardown ([`Kept`], carried inside `Keep`). The seam's types name these
//! two and nothing else of the booter, so they live apart from the code
//! that makes and spends them (`host.rs`, `start.rs`, `teardown.rs`),
//! below both the seam and the booter.
//!
//! It does not decide, start or tear down anything.

use std::path::PathBuf;

use iterion_core::{ByteSize, LaunchPlan};
use iterion_netproxy::ProxyHandle;
use iterion_sandbox::decision::SandboxDecision;

use crate::secrets::{ResolvedSecrets, SecretFiles};

/// A run's decision and the secrets it was made with (values stay here,
/// out of the decision, which `doctor` renders).
pub struct Decided {
    /// The decision.
    pub decision: SandboxDecision,
    pub(crate) secrets: ResolvedSecrets,
}

impl std::fmt::Debug for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decided")
            .field("decision", &self.decision)
            .field("secrets", &self.secrets)
            .finish()
    }
}

/// What a sandboxed boot keeps alive until teardown.
#[derive(Debug)]
pub(crate) struct Kept {
    pub plan: LaunchPlan,
    pub proxy: Option<ProxyHandle>,
    pub host_dir: Option<PathBuf>,
    /// Removes the host secret files when dropped.
    pub secret_files: Option<SecretFiles>,
    /// The size of the tmpfs bounding the run-files dir, when mounted.
    pub run_files_bound: Option<ByteSize>,
    /// The run's host listeners (seed step 18); stopped when dropped.
    pub gateway: Option<iterion_core::agent::GatewayHandle>,
}
