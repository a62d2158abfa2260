//! A hostile tree written by a real container on the test dockerd and Podman, exported
//! through the engine's archive endpoint (bollard standing in for the docker
//! driver's `export`), drained into the store.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptionsBuilder, RemoveContainerOptions,
};
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use iterion_core::driver::DriverError;
use iterion_core::store::DrainStatus;
use iterion_core::{ByteStream, DriverName, ExecRequest, ExecSession, SandboxRun};
use iterion_readback::{DrainOptions, drain};

use crate::readback::store::{new_run, new_store};
use crate::readback::stored;
use crate::readback::support::*;

struct EngineRun {
    docker: Docker,
    id: String,
}

#[async_trait]
impl SandboxRun for EngineRun {
    fn driver(&self) -> DriverName {
        DriverName::Docker
    }
    fn container(&self) -> &str {
        &self.id
    }
    fn workdir(&self) -> &str {
        "/"
    }
    async fn exec(&self, _r: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        Err(DriverError::Unsupported {
            driver: DriverName::Docker,
            feature: "exec",
        })
    }
    async fn export(&self, path: &str) -> Result<ByteStream, DriverError> {
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        Ok(Box::pin(
            self.docker
                .download_from_container(&self.id, Some(options))
                .map_err(std::io::Error::other),
        ))
    }
    async fn import(&self, _d: &str, _a: ByteStream) -> Result<(), DriverError> {
        Ok(())
    }
    async fn is_alive(&self) -> Result<bool, DriverError> {
        Ok(true)
    }
    async fn cleanup(&self) -> Result<(), DriverError> {
        Ok(())
    }
}

fn engine(variable: &str) -> Docker {
    let host = std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: run scripts/test.sh (or source scripts/lib.sh)")
    });
    let socket = host.strip_prefix("unix://").unwrap_or(&host).to_owned();
    Docker::connect_with_unix(&socket, 120, bollard::API_DEFAULT_VERSION).unwrap_or_else(|e| {
        panic!("the engine at {host} does not answer ({e}): run scripts/test.sh")
    })
}

/// The hostile tree (exec'd as is through the real driver; the bare
/// container runs it with [`READY`] appended).
const TREE: &str = r#"set -e
d=/iterion/artifact-files
mkdir -p $d/sub $d/.iterion-readback/out
printf good > $d/good.txt
printf nested > $d/sub/nested.txt
printf imp > $d/.iterion-readback/out/x
ln -s /etc/passwd $d/passwd-link
ln -s ../../../../etc $d/etc-link
printf hard > $d/hard-src
ln $d/hard-src $d/hard-dst
mkfifo $d/pipe
# Podman drops CAP_MKNOD by default; a char device is then a plain file
# the test expects to see declined only where it exists.
mknod $d/null c 1 3 || touch /no-mknod
printf x > "$d/$(printf 'bad-\377')"
printf y > "$d/$(printf 'nl\nname')"
p=$d; i=0; while [ $i -lt 150 ]; do p=$p/n; i=$((i+1)); done
mkdir -p $p && printf deep > $p/deep.txt
"#;

const READY: &str = "touch /ready\nsleep 600\n";

#[tokio::test]
async fn a_hostile_tree_from_a_docker_container_is_declined_by_name() {
    hostile_tree_on(&engine("ITERION_TEST_DOCKER_HOST")).await;
}

/// Parity (facts §10 R14): Podman's Docker-compatible archive endpoint.
#[tokio::test]
async fn a_hostile_tree_from_a_podman_container_is_declined_by_name() {
    hostile_tree_on(&engine("ITERION_TEST_PODMAN_HOST")).await;
}

async fn hostile_tree_on(docker: &Docker) {
    let image = std::env::var("ITERION_TEST_BUSYBOX_IMAGE")
        .unwrap_or_else(|_| "iterion-test/busybox:local".into());
    let test_label = format!("readback-engine-{}", std::process::id());
    let labels = HashMap::from([
        ("iterion.io/managed".to_owned(), "true".to_owned()),
        ("iterion.io/test".to_owned(), test_label.clone()),
    ]);
    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec!["sh".into(), "-c".into(), format!("{TREE}{READY}")]),
        labels: Some(labels),
        ..Default::default()
    };
    let created = docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .unwrap_or_else(|e| panic!("create: {e} (run scripts/test.sh to build the images)"));
    let id = created.id;
    let result = std::panic::AssertUnwindSafe(async {
        docker
            .start_container(&id, None)
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        let mut ready = false;
        for _ in 0..100 {
            let options = DownloadFromContainerOptionsBuilder::default()
                .path("/ready")
                .build();
            let mut probe = docker.download_from_container(&id, Some(options));
            if matches!(probe.next().await, Some(Ok(_))) {
                ready = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(ready, "the container never wrote its tree");

        let ts = new_store().await;
        let run_id = new_run(&*ts.store).await;
        let run = EngineRun {
            docker: docker.clone(),
            id: id.clone(),
        };
        let report = drain(
            &run,
            &*ts.store,
            &run_id,
            &[run_files(MIB)],
            DrainOptions::default(),
        )
        .await;
        let no_mknod = {
            let options = DownloadFromContainerOptionsBuilder::default()
                .path("/no-mknod")
                .build();
            let mut probe = docker.download_from_container(&id, Some(options));
            matches!(probe.next().await, Some(Ok(_)))
        };
        (report, stored(&*ts.store, &run_id).await, no_mknod)
    })
    .catch_unwind()
    .await;
    let _ = docker
        .remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
    // Removed before any assertion, so a failure leaves nothing behind.
    let (report, files, no_mknod) = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    check(&report, &files, no_mknod);
}

fn check(
    report: &iterion_readback::DrainReport,
    files: &BTreeMap<String, Vec<u8>>,
    no_mknod: bool,
) {
    let d = "/iterion/artifact-files";
    for name in [
        format!("{d}/passwd-link"),
        format!("{d}/etc-link"),
        format!("{d}/pipe"),
        format!("{d}/bad-\u{fffd}"),
        format!("{d}/.iterion-readback/out/x"),
    ] {
        assert!(
            report.declined.contains(&name),
            "{name} not declined: {:#?}",
            report.declined
        );
    }
    assert!(
        report
            .declined
            .iter()
            .any(|n| n.starts_with(&format!("{d}/n/n/n/"))),
        "the 150-level member is not declined: {:#?}",
        report.declined
    );
    // The engine writes the first name of a hardlinked inode as a file and
    // the other as a link to it; which is first is the engine's order.
    let (link, file) = if report.declined.contains(&format!("{d}/hard-dst")) {
        ("hard-dst", "hard-src")
    } else {
        ("hard-src", "hard-dst")
    };
    assert!(report.declined.contains(&format!("{d}/{link}")));
    if !no_mknod {
        assert!(report.declined.contains(&format!("{d}/null")));
    }
    // 8 hostile members (7 without the device); the deep directories are
    // not among them.
    assert_eq!(
        report.declined_count,
        if no_mknod { 7 } else { 8 },
        "{:#?}",
        report.declined
    );
    assert_eq!(report.status, DrainStatus::Partial);
    let expected: BTreeMap<String, Vec<u8>> = [
        ("good.txt", &b"good"[..]),
        (file, b"hard"),
        ("nl\nname", b"y"),
        ("sub/nested.txt", b"nested"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_vec()))
    .collect();
    assert_eq!(files, &expected);
}

/// The real seam: the docker driver's own `export` (not a stand-in) of the
/// run-files volume its plan mounts, drained into the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_tree_through_the_docker_driver_is_declined_by_name() {
    use iterion_driver_docker::{DockerDriver, DockerSettings};
    let host = std::env::var("ITERION_TEST_DOCKER_HOST").unwrap_or_else(|_| {
        panic!(
            "ITERION_TEST_DOCKER_HOST is not set: run scripts/test.sh (or source scripts/lib.sh)"
        )
    });
    let image = std::env::var("ITERION_TEST_BUSYBOX_IMAGE")
        .unwrap_or_else(|_| "iterion-test/busybox:local".into());
    let driver = DockerDriver::connect(&host, DockerSettings::default())
        .await
        .unwrap_or_else(|e| panic!("dockerd at {host} does not answer ({e}): run scripts/test.sh"));
    let started = iterion_testkit::driver::start(
        &driver,
        "readback",
        iterion_testkit::driver::base_plan(&image),
    )
    .await;
    let out = started
        .sh(&format!("{TREE}[ -f /no-mknod ] && echo no-mknod || true"))
        .await;
    assert_eq!(
        out.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr_tail)
    );
    let no_mknod = iterion_testkit::driver::Started::stdout(&out).contains("no-mknod");
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let report = drain(
        &*started.run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    let files = stored(&*ts.store, &run_id).await;
    // `Started` cleans the container up when dropped, before the checks.
    drop(started);
    check(&report, &files, no_mknod);
}
