//! The engine against a real container: a booter that starts one busybox
//! (no bash) or slim (bash) container per run on the test dockerd, so node
//! execution, the shell probe, script import, cancellation and teardown are
//! checked inside a sandbox rather than on the host.
//!
//! Needs `ITERION_TEST_DOCKER_HOST` (run `scripts/test.sh`); a missing or
//! silent engine fails, never skips.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iterion_core::driver::{NullObserver, RunInfo};
use iterion_core::{Driver, FailureCode, LaunchPlan, RunStatus};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_dsl::ir::ToolSpec;
use iterion_runtime::{Admitted, BootContext, BootError, Booted, Engine, Keep, SandboxBooter};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runtime::support::*;

const BUSYBOX: &str = "iterion-test/busybox:local";
const SLIM: &str = "iterion-sandbox-slim:local";

async fn docker() -> Arc<DockerDriver> {
    let var = "ITERION_TEST_DOCKER_HOST";
    let endpoint = match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{var} is not set: run scripts/test.sh (it starts the real engines)"),
    };
    let settings = DockerSettings {
        probe_timeout: Duration::from_secs(60),
        ..DockerSettings::default()
    };
    match DockerDriver::connect(&endpoint, settings).await {
        Ok(d) => Arc::new(d),
        Err(e) => panic!("{var} = {endpoint} does not answer ({e}): run scripts/test.sh"),
    }
}

struct ContainerBooter {
    driver: Arc<DockerDriver>,
    image: &'static str,
}

#[async_trait]
impl SandboxBooter for ContainerBooter {
    async fn boot(&self, ctx: &BootContext<'_>, _admitted: Admitted) -> Result<Booted, BootError> {
        let plan = LaunchPlan {
            image: Some(self.image.into()),
            workdir: "/tmp/iterion-ws".into(),
            ..LaunchPlan::default()
        };
        let prepared = self
            .driver
            .prepare(&plan, &NullObserver)
            .await
            .map_err(|source| BootError::Driver { source })?;
        let info = RunInfo {
            run_id: ctx.run_id.clone(),
            run_name: Some(ctx.workflow.name.clone()),
            host_workspace: ctx.workspace.display().to_string(),
            max_duration: None,
        };
        let run = self
            .driver
            .start(prepared, &info, &NullObserver)
            .await
            .map_err(|source| BootError::Driver { source })?;
        Ok(Booted::Sandbox {
            run: Arc::from(run),
            scratch_dir: "/tmp/iterion-scripts".into(),
            keep: Keep::nothing(),
            secrets: Default::default(),
        })
    }

    async fn teardown(&self, booted: Booted, _ctx: &BootContext<'_>) -> Result<(), BootError> {
        booted
            .run()
            .cleanup()
            .await
            .map_err(|source| BootError::Driver { source })
    }
}

async fn harness(image: &'static str) -> (Harness, Arc<DockerDriver>) {
    let driver = docker().await;
    let mut h = Harness::new();
    h.engine = Engine::new(
        h.store.clone(),
        Arc::new(ContainerBooter {
            driver: driver.clone(),
            image,
        }),
    );
    (h, driver)
}

async fn containers_of(driver: &DockerDriver, run: &iterion_core::RunId) -> usize {
    driver
        .list_managed()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.run_id == run.as_str())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn busybox_gets_sh_slim_gets_bash_and_teardown_removes_the_container() {
    for (image, shell) in [(BUSYBOX, "sh"), (SLIM, "bash")] {
        let (h, driver) = harness(image).await;
        let wf = workflow(
            "probe",
            vec![tool(
                "probe",
                r#"printf '{"shell": "%s", "pwd": "%s"}' "$0" "$PWD""#,
                None,
            )],
            vec![edge("probe", "done")],
        );
        let out = h.run(wf).await;
        assert_eq!(
            out.status,
            RunStatus::Finished,
            "{image}: {:?}",
            out.failure
        );
        let events = h.events(&out.run_id).await;
        let fin = events.iter().find(|e| e.kind == "node_finished").unwrap();
        assert_eq!(
            fin.data["output"],
            json!({"shell": shell, "pwd": "/tmp/iterion-ws"}),
            "{image}"
        );
        assert_eq!(containers_of(&driver, &out.run_id).await, 0, "{image}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_is_imported_and_run_inside_the_container() {
    let (h, _driver) = harness(BUSYBOX).await;
    let mut node = tool("s", "", None);
    node.tool = Some(ToolSpec::Script {
        script: "echo \"{\\\"host\\\": \\\"$(cat /etc/hostname)\\\", \\\"me\\\": \\\"$0\\\"}\"\n"
            .into(),
        language: "sh".into(),
    });
    let out = h
        .run(workflow("s", vec![node], vec![edge("s", "done")]))
        .await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    let fin = events.iter().find(|e| e.kind == "node_finished").unwrap();
    let me = fin.data["output"]["me"].as_str().unwrap();
    assert!(me.starts_with("/tmp/iterion-scripts/s-"), "{me}");
    let host = fin.data["output"]["host"].as_str().unwrap();
    assert_ne!(
        host,
        std::fs::read_to_string("/etc/hostname").unwrap().trim()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_sandboxed_sleep_ends_cancelled_and_tears_down() {
    let (h, driver) = harness(BUSYBOX).await;
    let wf = workflow(
        "slow",
        vec![tool("slow", "echo started; sleep 100", None)],
        vec![edge("slow", "done")],
    );
    let options = h.options(wf);
    let run_id = options.run_id.clone();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let store = h.store.clone();
    let watcher = tokio::spawn(async move {
        // Cancel once the node has printed: the sleep is running in the
        // container by then.
        loop {
            let logs = store.logs_after(&run_id, 0, 0).await.unwrap_or_default();
            if logs.iter().any(|l| l.line == "started") {
                trigger.cancel();
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let out = h.run_with(options, cancel).await;
    watcher.await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    assert_eq!(out.failure.unwrap().code, FailureCode::Cancelled);
    assert_eq!(containers_of(&driver, &out.run_id).await, 0);
}
