//! R8 on the real wiring: two drains of one run through the real docker
//! driver's `export` (dockerd and Podman), each attempt under the cap, their
//! sum over it. `iterion run` drains once at teardown, so a retried drain
//! cannot be driven end to end; this is the runtime-level twin of the CLI
//! suite (`crates/iterion-cli/tests/integration/readback_e2e.rs`).

use iterion_core::store::DrainStatus;
use iterion_core::{ReadBackDecl, RunId, RunStore, SandboxRun};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_readback::{DrainOptions, DrainReport, drain};

use crate::readback::store::{new_run, new_store};
use crate::readback::stored;
use crate::readback::support::*;

fn host(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: run scripts/test.sh (or source scripts/lib.sh)")
    })
}

async fn attempt(
    run: &dyn SandboxRun,
    store: &dyn RunStore,
    run_id: &RunId,
    decl: &[ReadBackDecl],
) -> DrainReport {
    drain(run, store, run_id, decl, DrainOptions::default()).await
}

async fn two_attempts_sum_over_the_cap(variable: &str) {
    let endpoint = host(variable);
    let image = std::env::var("ITERION_TEST_BUSYBOX_IMAGE")
        .unwrap_or_else(|_| "iterion-test/busybox:local".into());
    let driver = DockerDriver::connect(&endpoint, DockerSettings::default())
        .await
        .unwrap_or_else(|e| {
            panic!("the engine at {endpoint} does not answer ({e}): run scripts/test.sh")
        });
    // The testkit's base plan serves run-files with a source-less volume,
    // the bindless storage the policy lays.
    let started = iterion_testkit::driver::start(
        &driver,
        "attempts",
        iterion_testkit::driver::base_plan(&image),
    )
    .await;
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let decl = [run_files(1000)];

    let out = started
        .sh("yes a | head -c 600 > /iterion/artifact-files/a.bin")
        .await;
    assert_eq!(
        out.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr_tail)
    );
    let first = attempt(&*started.run, &*ts.store, &run_id, &decl).await;
    assert_eq!(first.status, DrainStatus::Complete, "{first:?}");
    assert_eq!(first.paths[0].metered, 600);

    // The retry sees a different tree: `a` is gone from the container, `b`
    // and `c` are new, each under the cap. The 600 bytes of the first
    // attempt still count (the store keeps `a`), so `b` crosses the cap
    // whatever the archive order, and `c` fits either way.
    let out = started
        .sh("cd /iterion/artifact-files && rm a.bin && yes b | head -c 500 > b.bin && yes c | head -c 300 > c.bin")
        .await;
    assert_eq!(
        out.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr_tail)
    );
    let second = attempt(&*started.run, &*ts.store, &run_id, &decl).await;
    drop(started);
    assert_eq!(second.status, DrainStatus::Partial, "{second:?}");
    assert_eq!(second.reason, Some("cap_exceeded"));
    assert_eq!(second.declined, ["/iterion/artifact-files/b.bin"]);
    assert!(!second.stale);
    assert_eq!(second.paths[0].metered, 900);
    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a.bin", "c.bin"]
    );
    let record = ts
        .store
        .get_drain(&run_id)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(
        record.metered,
        [("/iterion/artifact-files".to_owned(), 900)]
    );
    assert_eq!(record.declined, ["/iterion/artifact-files/b.bin"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_two_attempts_sum_over_the_cap() {
    two_attempts_sum_over_the_cap("ITERION_TEST_DOCKER_HOST").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_two_attempts_sum_over_the_cap() {
    two_attempts_sum_over_the_cap("ITERION_TEST_PODMAN_HOST").await;
}
