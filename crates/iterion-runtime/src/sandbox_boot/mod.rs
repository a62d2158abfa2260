//! The real booter, [`PolicyBooter`]: it decides a run's sandbox once, at
//! admission ([`SandboxHost::decide`], the pure
//! [`iterion_sandbox::decision::decide`] over snapshots), and then only
//! *executes* the decision — emits its events, and for a sandbox creates
//! the run's host directories, writes the secret files, starts the proxy,
//! prepares and starts the driver (`start`) — and tears it down
//! (`teardown`). It decides nothing itself: a refusal, a degrade, the
//! plan, the identity and the egress verdict are the decision's.
//!
//! Drivers come in as `Arc<dyn Driver>` through [`HostDrivers`] (the CLI
//! discovers and probes them); the runtime never names an engine.

mod dirs;
pub(crate) mod handoff;
mod host;
mod provider_keys;
mod start;
mod teardown;

use std::sync::Arc;

use async_trait::async_trait;
use iterion_core::RunStore;
use iterion_readback::DrainOptions;
use iterion_sandbox::decision::Verdict;

pub use self::dirs::{default_state_dir, host_state_roots, private_state_dirs};
pub use self::handoff::Decided;
pub use self::host::{HostDrivers, RunRequest, SandboxHost};

use crate::boot::{Admitted, BootContext, BootError, Booted, ExecSecrets, SandboxBooter};

/// The booter of `iterion run` and `iterion resume`.
pub struct PolicyBooter {
    host: SandboxHost,
    store: Arc<dyn RunStore>,
    drain: DrainOptions,
    /// Seed step 18's per-run listeners (`None`: the run gets none).
    listeners: Option<Arc<dyn iterion_core::agent::GatewayListeners>>,
    /// The agents' provider keys (issue 17 item 5; `None`: no agents).
    provider_secrets: Option<Arc<dyn iterion_core::agent::ProviderSecrets>>,
}

impl PolicyBooter {
    /// A booter over `host`, draining read-back paths into `store`.
    pub fn new(host: SandboxHost, store: Arc<dyn RunStore>) -> Self {
        Self {
            host,
            store,
            drain: DrainOptions::default(),
            listeners: None,
            provider_secrets: None,
        }
    }

    /// Read the run's agents' provider keys through `secrets`, so a
    /// confined sandbox gets placeholders bound to each provider's host
    /// instead of the values (issue 17 item 5).
    pub fn with_provider_secrets(
        mut self,
        secrets: Arc<dyn iterion_core::agent::ProviderSecrets>,
    ) -> Self {
        self.provider_secrets = Some(secrets);
        self
    }

    /// Start the run's host listeners (seed step 18) through `listeners`
    /// before each sandbox: bound where the driver puts the run's gateway,
    /// admitted by the run's firewall, kept until teardown.
    pub fn with_listeners(
        mut self,
        listeners: Arc<dyn iterion_core::agent::GatewayListeners>,
    ) -> Self {
        self.listeners = Some(listeners);
        self
    }

    /// The host it decides on.
    pub fn host(&self) -> &SandboxHost {
        &self.host
    }
}

#[async_trait]
impl SandboxBooter for PolicyBooter {
    async fn admit(&self, ctx: &BootContext<'_>) -> Admitted {
        Admitted::decided(self.host.decide(&RunRequest {
            run_id: ctx.run_id,
            sandbox: ctx.workflow.sandbox.as_ref().map(|d| &d.spec),
            secrets: &ctx.workflow.secrets,
            trust: ctx.trust,
            workspace: ctx.workspace,
            flags: ctx.flags,
            target: None,
            attachments: !ctx.workflow.attachments.is_empty(),
            worktree_git_dir: ctx.worktree.map(|w| std::path::Path::new(&w.git_dir)),
            worktree_admin_dir: ctx.worktree.map(|w| std::path::Path::new(&w.admin_dir)),
        }))
    }

    async fn boot(&self, ctx: &BootContext<'_>, admitted: Admitted) -> Result<Booted, BootError> {
        // The engine boots only what this booter admitted.
        let Some(decided) = admitted.into_decided() else {
            return Err(BootError::NotAdmitted);
        };
        let Decided { decision, secrets } = *decided;
        // Issue 17 item 5: the agents' provider keys, as the decision said.
        let provider = match &decision.verdict {
            Verdict::Sandbox(plan) => provider_keys::execute(
                self.provider_secrets.as_ref(),
                ctx.workflow,
                &plan.provider_keys,
            ),
            _ => provider_keys::ProviderKeys::default(),
        };
        // Masks the values, bound ones and provider keys included, before
        // any swap.
        let redactor = secrets.redactor_with(&provider.values);
        // Issue 17: bound secrets go in as placeholders where the decision
        // said the proxy can put them back.
        let secrets = match &decision.verdict {
            Verdict::Sandbox(plan) if plan.secret_placeholders => secrets.with_placeholders(),
            _ => secrets,
        };
        let exec = ExecSecrets {
            env: secrets.env.clone(),
            redactor,
            egress: None,
            provider_placeholders: provider.placeholders(),
        };
        // Masked from the first event that could carry one (a driver line,
        // a blocked host during post_create).
        ctx.events.set_redactor(exec.redactor.clone());
        for event in decision.events.into_iter().chain(provider.event.clone()) {
            ctx.events.emit(event);
        }
        match decision.verdict {
            Verdict::Sandbox(plan) => {
                start::start(
                    &self.host,
                    self.listeners.as_ref(),
                    ctx,
                    *plan,
                    &decision.source,
                    decision.mode.mode,
                    &secrets,
                    &provider.bound,
                    exec,
                )
                .await
            }
            Verdict::Host { reason, .. } => {
                crate::boot::host_booted(ctx, reason).map(|b| b.with_secrets(exec))
            }
            Verdict::Refused(refusal) => Err(BootError::Refused {
                refused: refusal.refused,
                reason: refusal.reason,
            }),
            // Admission denied it; the engine does not boot a denied run.
            Verdict::Denied => Err(BootError::Refused {
                refused: iterion_sandbox::classify::Refused::Spec,
                reason: decision.admission.reason().to_owned(),
            }),
        }
    }

    async fn teardown(&self, booted: Booted, ctx: &BootContext<'_>) -> Result<(), BootError> {
        let started = std::time::Instant::now();
        teardown::teardown(
            self.store.as_ref(),
            &self.drain,
            &self.host.local_env,
            booted,
            ctx,
        )
        .await;
        // `--log-level debug`: the driver calls of the teardown, whole.
        tracing::debug!(
            call = "teardown",
            elapsed_ms = started.elapsed().as_millis() as u64,
            "driver call"
        );
        Ok(())
    }
}
