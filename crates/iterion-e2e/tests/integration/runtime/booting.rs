//! The booter seam: policy refusal at admission, boot failures classified
//! by the one setup classifier, teardown errors that never change a status.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use iterion_core::{Disposition, DriverError, FailureCode, RunStatus};
use iterion_runtime::{
    AdmissionVerdict, Admitted, BootContext, BootError, Booted, Engine, HostBooter, SandboxBooter,
};

use crate::runtime::support::*;

#[derive(Default)]
struct Scripted {
    deny: bool,
    boot_error: Option<fn() -> BootError>,
    teardown_fails: bool,
    boots: AtomicUsize,
    teardowns: AtomicUsize,
}

#[async_trait]
impl SandboxBooter for Scripted {
    async fn admit(&self, _ctx: &BootContext<'_>) -> Admitted {
        if self.deny {
            AdmissionVerdict::deny(
                "untrusted_without_sandbox",
                "untrusted workspace resolves no sandbox (mode none from --sandbox)",
            )
            .into()
        } else {
            AdmissionVerdict::Admit {
                reason: "trusted".into(),
            }
            .into()
        }
    }
    async fn boot(&self, ctx: &BootContext<'_>, admitted: Admitted) -> Result<Booted, BootError> {
        self.boots.fetch_add(1, Ordering::SeqCst);
        match self.boot_error {
            Some(make) => Err(make()),
            None => HostBooter::default().boot(ctx, admitted).await,
        }
    }
    async fn teardown(&self, booted: Booted, ctx: &BootContext<'_>) -> Result<(), BootError> {
        self.teardowns.fetch_add(1, Ordering::SeqCst);
        HostBooter::default().teardown(booted, ctx).await?;
        if self.teardown_fails {
            return Err(BootError::Driver {
                source: DriverError::ContainerGone {
                    container: "c1".into(),
                },
            });
        }
        Ok(())
    }
}

fn engine_with(h: &Harness, booter: Arc<Scripted>) -> Engine {
    Engine::new(h.store.clone(), booter)
}

fn one_node() -> iterion_dsl::ir::Workflow {
    workflow(
        "a",
        vec![tool("a", "echo hi", None)],
        vec![edge("a", "done")],
    )
}

#[tokio::test]
async fn a_policy_refusal_is_persisted_and_nothing_boots() {
    let h = Harness::new();
    let booter = Arc::new(Scripted {
        deny: true,
        ..Scripted::default()
    });
    let out = engine_with(&h, booter.clone())
        .run(h.options(one_node()), Default::default())
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::LaunchFailed);
    assert!(failure.message.contains("--sandbox"), "{}", failure.message);
    assert_eq!(booter.boots.load(Ordering::SeqCst), 0);
    let rec = h.store.load_run(&out.run_id).await.unwrap().unwrap();
    let admission = rec.admission.unwrap();
    assert_eq!(admission.code.as_deref(), Some("untrusted_without_sandbox"));
    assert_eq!(admission.phase, "pre_model");
    let events = h.events(&out.run_id).await;
    assert_eq!(events[0].kind, "run_admission");
    assert_eq!(events[0].data["decision"], "denied");
    assert_eq!(events[1].data["failure_code"], "LAUNCH_FAILED");
}

#[tokio::test]
async fn boot_failures_take_their_classified_status() {
    type Case = (fn() -> BootError, FailureCode, RunStatus, Disposition);
    let cases: [Case; 5] = [
        (
            || BootError::Driver {
                source: DriverError::Unavailable {
                    reason: "no docker".into(),
                },
            },
            FailureCode::SandboxDriverUnavailable,
            RunStatus::Failed,
            Disposition::Deterministic,
        ),
        (
            || BootError::Driver {
                source: DriverError::PhaseTimeout {
                    phase: "start",
                    timeout: Duration::from_secs(5),
                    variable: "ITERION_SANDBOX_START_TIMEOUT",
                },
            },
            FailureCode::SandboxSetupTimeout,
            RunStatus::FailedResumable,
            Disposition::Infrastructure,
        ),
        // Issue 14 item 8(c): transient setup failures stay resumable.
        (
            || BootError::Driver {
                source: DriverError::PostCreateFailed {
                    exit_code: 3,
                    output_tail: "setting up".into(),
                },
            },
            FailureCode::SandboxStartFailed,
            RunStatus::FailedResumable,
            Disposition::Transient,
        ),
        (
            || BootError::Io {
                operation: "create the run's host dir".into(),
                source: std::io::Error::other("disk full"),
            },
            FailureCode::SandboxStartFailed,
            RunStatus::FailedResumable,
            Disposition::Transient,
        ),
        (
            || BootError::Refused {
                refused: iterion_sandbox::classify::Refused::NoDriver,
                reason: "inline needs a container runtime".into(),
            },
            FailureCode::SandboxDriverUnavailable,
            RunStatus::Failed,
            Disposition::Deterministic,
        ),
    ];
    for (make, code, status, disposition) in cases {
        let h = Harness::new();
        let booter = Arc::new(Scripted {
            boot_error: Some(make),
            ..Scripted::default()
        });
        let out = engine_with(&h, booter.clone())
            .run(h.options(one_node()), Default::default())
            .await
            .unwrap();
        assert_eq!(out.status, status, "{code}");
        let failure = out.failure.unwrap();
        assert_eq!(failure.code, code);
        assert_eq!(failure.disposition, disposition);
        // Nothing booted, so nothing to tear down; no node ran.
        assert_eq!(booter.teardowns.load(Ordering::SeqCst), 0);
        let kinds = h.kinds(&out.run_id).await;
        assert!(!kinds.contains(&"node_started".to_owned()), "{kinds:?}");
        assert_eq!(kinds.last().unwrap(), "run_failed");
    }
}

#[tokio::test]
async fn a_teardown_error_never_changes_the_status() {
    let h = Harness::new();
    let booter = Arc::new(Scripted {
        teardown_fails: true,
        ..Scripted::default()
    });
    let out = engine_with(&h, booter.clone())
        .run(h.options(one_node()), Default::default())
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Finished);
    assert_eq!(booter.teardowns.load(Ordering::SeqCst), 1);
    let logs = h.logs(&out.run_id).await;
    assert!(
        logs.iter()
            .any(|l| l.stream == "system" && l.line.contains("teardown failed")),
        "{logs:?}"
    );
}
