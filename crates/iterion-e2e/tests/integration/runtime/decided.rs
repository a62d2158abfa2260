//! The policy booter over the test dockerd: a run's sandbox is decided
//! once, at admission, and a refusal the decision makes there lands on the
//! run record before anything is created.
//!
//! Issue 14 item 8(b): a declared read-back path the driver can neither
//! bind nor drain is refused at admission with its own code (ADR-143 R2).
//! No engine offers that pair today (every driver here binds or drains),
//! so the test dockerd is wrapped in a driver that says it can do neither
//! — every call still reaches the real engine. Needs
//! `ITERION_TEST_DOCKER_HOST` (run `scripts/test.sh`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iterion_core::driver::{
    DriverObserver, EgressBinding, EngineInfo, HostFootprint, ManagedResource, Prepared, RunInfo,
};
use iterion_core::{
    Capabilities, Driver, DriverError, DriverName, FailureCode, LaunchPlan, RunStatus, SandboxRun,
};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_runtime::{Engine, HostDrivers, PolicyBooter, SandboxFlags, SandboxHost};
use iterion_sandbox::env::{EnvSnapshot, SandboxEnv};
use iterion_sandbox::precedence::PRODUCT_GLOBAL_DEFAULT;

use crate::runtime::support::*;

/// The test dockerd, reporting no host binds and, unless `drains`, no
/// read-back drain.
struct Narrowed {
    inner: DockerDriver,
    drains: bool,
}

#[async_trait]
impl Driver for Narrowed {
    fn name(&self) -> DriverName {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            host_bind_mounts: false,
            read_back_drain: self.drains,
            ..self.inner.capabilities()
        }
    }
    async fn prepare(
        &self,
        plan: &LaunchPlan,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        self.inner.prepare(plan, observer).await
    }
    async fn egress_binding(
        &self,
        info: &RunInfo,
        enforce: bool,
    ) -> Result<EgressBinding, DriverError> {
        self.inner.egress_binding(info, enforce).await
    }
    async fn start(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError> {
        self.inner.start(prepared, info, observer).await
    }
    async fn ping(&self) -> Result<EngineInfo, DriverError> {
        self.inner.ping().await
    }
    async fn host_footprint(&self) -> HostFootprint {
        self.inner.host_footprint().await
    }
    async fn image_present(&self, image: &str) -> Result<bool, DriverError> {
        self.inner.image_present(image).await
    }
    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        self.inner.list_managed().await
    }
    async fn remove_managed(&self, resource: &ManagedResource) -> Result<(), DriverError> {
        self.inner.remove_managed(resource).await
    }
}

async fn docker() -> DockerDriver {
    let var = "ITERION_TEST_DOCKER_HOST";
    let endpoint =
        std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: run scripts/test.sh"));
    let settings = DockerSettings {
        probe_timeout: Duration::from_secs(60),
        ..DockerSettings::default()
    };
    DockerDriver::connect(&endpoint, settings)
        .await
        .unwrap_or_else(|e| panic!("{var} = {endpoint} does not answer ({e})"))
}

const WORKFLOW: &str = r#"tool probe:
  command: `echo '{}'`

workflow readback_probe:
  entry: probe
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  probe -> done
"#;

/// An engine whose policy booter decides on the one driver `driver`.
async fn engine_over(
    h: &Harness,
    driver: Arc<dyn Driver>,
    state: &tempfile::TempDir,
) -> (Engine, SandboxFlags) {
    let drivers = HostDrivers::probe(vec![driver], Vec::new()).await;
    assert_eq!(drivers.handles().len(), 1, "the test dockerd answers");
    let env = SandboxEnv::parse(&EnvSnapshot::default()).unwrap();
    let local_env: BTreeMap<String, String> = std::env::vars().collect();
    let host = SandboxHost::new(env, local_env, drivers, state.path().join("iterion"));
    let flags = SandboxFlags {
        global_default: Some(PRODUCT_GLOBAL_DEFAULT),
        ..SandboxFlags::default()
    };
    (
        Engine::new(
            h.store.clone(),
            Arc::new(PolicyBooter::new(host, h.store.clone())),
        ),
        flags,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unservable_read_back_path_is_refused_at_admission_with_its_own_code() {
    let mut h = Harness::new();
    let state = tempfile::tempdir().unwrap();
    let driver = Arc::new(Narrowed {
        inner: docker().await,
        drains: false,
    });
    let (engine, flags) = engine_over(&h, driver, &state).await;
    h.engine = engine;
    let mut options = h.options(compile(WORKFLOW));
    options.flags = flags.clone();
    let out = h.run_with(options, Default::default()).await;
    // Refused at admission: the run never started, nothing was created.
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.clone().unwrap();
    assert_eq!(failure.code, FailureCode::LaunchFailed);
    assert!(failure.message.contains("/out"), "{failure:?}");
    let kinds = h.kinds(&out.run_id).await;
    assert_eq!(kinds, ["run_admission", "run_failed"], "{kinds:?}");
    let admission = &h.of_kind(&out.run_id, "run_admission").await[0].data;
    assert_eq!(admission["decision"], "denied");
    assert_eq!(admission["code"], "SANDBOX_READBACK_UNSERVABLE");
    let record = h.store.load_run(&out.run_id).await.unwrap().unwrap();
    let persisted = record.admission.expect("the admission is on the record");
    assert_eq!(
        persisted.code.as_deref(),
        Some("SANDBOX_READBACK_UNSERVABLE")
    );
    let inner = docker().await;
    let left: Vec<_> = inner
        .list_managed()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.run_id == out.run_id.as_str())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        !state
            .path()
            .join("iterion/sandboxes")
            .join(out.run_id.as_str())
            .exists(),
        "no per-run host dir"
    );

    // The benign twin: a driver that drains is admitted and runs.
    let twin = Arc::new(Narrowed {
        inner: docker().await,
        drains: true,
    });
    let (engine, _) = engine_over(&h, twin, &state).await;
    h.engine = engine;
    let mut options = h.options(compile(WORKFLOW));
    options.flags = flags;
    let out = h.run_with(options, Default::default()).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let admission = &h.of_kind(&out.run_id, "run_admission").await[0].data;
    assert_eq!(admission["decision"], "admitted");
    assert_eq!(h.of_kind(&out.run_id, "sandbox_started").await.len(), 1);
}
