//! Drain throughput and peak memory, against `tar -x` of the same archive.
//!
//! Run: `cargo bench -p iterion-e2e --bench readback_drain` (release). The archive
//! (500 MB in 1,000 files by default; `ITERION_BENCH_FILES`,
//! `ITERION_BENCH_FILE_BYTES`) is generated lazily on both sides. The
//! baseline pipes it into `tar -x -C <tmp>` (then `sync -f`, since the store
//! fsyncs every file and `tar` does not); the drain runs in a child process of
//! this binary, streaming it into the SQLite store (run files on disk,
//! fsynced and renamed; metadata in SQLite), and reports its own peak RSS
//! (`VmHWM`), so the number is the drain's and not the generator's or the
//! parent's. With `ITERION_TEST_DOCKER_HOST` set it then compares `docker cp`
//! of a real container tree with the drain of the same tree through the real
//! docker driver's `export` (started by the driver, run-files on a volume).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use iterion_core::driver::DriverError;
use iterion_core::plan::RUN_FILES_CONTAINER_DIR;
use iterion_core::{
    ByteSize, ByteStream, DriverName, ExecRequest, ExecSession, MountOrigin, ReadBackDecl,
    RunStore, SandboxRun,
};
use iterion_readback::{DrainOptions, drain};

fn files() -> u64 {
    std::env::var("ITERION_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

fn file_bytes() -> usize {
    std::env::var("ITERION_BENCH_FILE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000)
}

fn header(name: &str, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_size(size);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let mut out = [0u8; 512];
    out.copy_from_slice(h.as_bytes());
    out
}

/// The archive, one member (header + data + padding) per chunk, then the
/// end marker: what the engine's archive endpoint streams.
fn archive_chunks() -> impl Iterator<Item = Bytes> {
    let (n, size) = (files(), file_bytes());
    let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let body = Bytes::from(body);
    let pad = (512 - size % 512) % 512;
    (0..n)
        .flat_map(move |i| {
            let mut head =
                header(&format!("artifact-files/d{}/f{i}.bin", i % 10), size as u64).to_vec();
            head.shrink_to_fit();
            [Bytes::from(head), body.clone(), Bytes::from(vec![0u8; pad])]
        })
        .chain(std::iter::once(Bytes::from(vec![0u8; 1024])))
}

struct GeneratedRun;

#[async_trait::async_trait]
impl SandboxRun for GeneratedRun {
    fn driver(&self) -> DriverName {
        DriverName::Docker
    }
    fn container(&self) -> &str {
        "bench"
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
    async fn export(&self, _path: &str) -> Result<ByteStream, DriverError> {
        Ok(Box::pin(futures_util::stream::iter(
            archive_chunks().map(Ok),
        )))
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

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn child_drain() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (store, label): (Arc<dyn RunStore>, &str) = bench_store::open(dir.path()).await;
        let run_id = bench_store::new_run(&*store).await;
        let before = vm_hwm_kib();
        let decl = [ReadBackDecl {
            container_path: RUN_FILES_CONTAINER_DIR.into(),
            cap: ByteSize(u64::MAX / 2),
            origin: MountOrigin::RunFiles,
        }];
        let start = Instant::now();
        let report = drain(
            &GeneratedRun,
            &*store,
            &run_id,
            &decl,
            DrainOptions::default(),
        )
        .await;
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(report.files, files(), "{report:?}");
        println!(
            "CHILD store={label} secs={secs:.3} bytes={} hwm_kib={} hwm_before_kib={before}",
            report.bytes,
            vm_hwm_kib()
        );
    });
}

/// Seconds of `tar -x`, and of `tar -x` plus the `sync -f` that makes it as
/// durable as the store's puts.
fn baseline_tar_x() -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut child = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .spawn()
        .expect("tar");
    {
        let mut stdin = child.stdin.take().unwrap();
        for chunk in archive_chunks() {
            stdin.write_all(&chunk).unwrap();
        }
    }
    assert!(child.wait().unwrap().success());
    let extracted = start.elapsed().as_secs_f64();
    let synced = Command::new("sync")
        .arg("-f")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(synced.success());
    (extracted, start.elapsed().as_secs_f64())
}

fn docker_host() -> Option<String> {
    std::env::var("ITERION_TEST_DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
}

fn docker(host: &str) -> Command {
    let mut cmd = Command::new("docker");
    cmd.arg("-H").arg(host);
    cmd
}

/// The docker comparison, in one child process so its `VmHWM` is the
/// drain's: the real docker driver starts the container (run-files on a
/// source-less volume, the bindless storage the policy lays), fills it, then
/// each round times `docker cp` of the tree (a separate process, not in this
/// RSS) and the drain of the same tree through the driver's own `export`
/// (engine archive endpoint + re-rooting) into a fresh SQLite store.
fn child_docker() {
    use iterion_driver_docker::{DockerDriver, DockerSettings};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let host = docker_host().unwrap();
        let image = std::env::var("ITERION_TEST_BUSYBOX_IMAGE")
            .unwrap_or_else(|_| "iterion-test/busybox:local".into());
        let driver = DockerDriver::connect(&host, DockerSettings::default())
            .await
            .unwrap();
        let started = iterion_testkit::driver::start(
            &driver,
            "bench",
            iterion_testkit::driver::base_plan(&image),
        )
        .await;
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do d={RUN_FILES_CONTAINER_DIR}/d$((i%10)); mkdir -p $d; \
             head -c {size} /dev/urandom > $d/f$i.bin; i=$((i+1)); done",
            n = files(),
            size = file_bytes()
        );
        let out = started.sh(&script).await;
        assert_eq!(out.exit_code, 0, "fill: {}", String::from_utf8_lossy(&out.stderr_tail));
        let container = started.run.container().to_owned();
        let before = vm_hwm_kib();
        for round in 1..=2 {
            let dir = tempfile::tempdir().unwrap();
            let start = Instant::now();
            let cp = docker(&host)
                .arg("cp")
                .arg(format!("{container}:{RUN_FILES_CONTAINER_DIR}"))
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(cp.success());
            let cp_secs = start.elapsed().as_secs_f64();
            // The store fsyncs every file; `docker cp` does not.
            let synced = Command::new("sync").arg("-f").arg(dir.path()).status().unwrap();
            assert!(synced.success());
            let cp_sync_secs = start.elapsed().as_secs_f64();
            drop(dir);

            let dir = tempfile::tempdir().unwrap();
            let (store, label) = bench_store::open(dir.path()).await;
            let run_id = bench_store::new_run(&*store).await;
            let decl = [ReadBackDecl {
                container_path: RUN_FILES_CONTAINER_DIR.into(),
                cap: ByteSize(u64::MAX / 2),
                origin: MountOrigin::RunFiles,
            }];
            let start = Instant::now();
            let report = drain(
                &*started.run,
                &*store,
                &run_id,
                &decl,
                DrainOptions::default(),
            )
            .await;
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(report.files, files(), "{report:?}");
            println!(
                "CHILD round={round} store={label} cp_secs={cp_secs:.3} cp_sync_secs={cp_sync_secs:.3} secs={secs:.3} bytes={} hwm_kib={} hwm_before_kib={before}",
                report.bytes,
                vm_hwm_kib()
            );
        }
        drop(started);
    });
}

/// `docker cp` of a real container tree vs the drain of the same tree
/// through the real docker driver, side by side.
fn docker_end_to_end() {
    if docker_host().is_none() {
        println!(
            "docker end-to-end: skipped (ITERION_TEST_DOCKER_HOST unset; source scripts/lib.sh)"
        );
        return;
    }
    let mb = (files() * file_bytes() as u64) as f64 / 1e6;
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child-docker")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("CHILD")).collect();
    if lines.is_empty() {
        println!(
            "docker drain failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    for line in lines {
        let field = |k: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or("?")
                .to_owned()
        };
        let cp_secs: f64 = field("cp_secs").parse().unwrap_or(f64::NAN);
        let cp_sync_secs: f64 = field("cp_sync_secs").parse().unwrap_or(f64::NAN);
        let secs: f64 = field("secs").parse().unwrap_or(f64::NAN);
        let hwm: f64 = field("hwm_kib").parse().unwrap_or(f64::NAN);
        let before: f64 = field("hwm_before_kib").parse().unwrap_or(f64::NAN);
        println!(
            "docker round {}: docker cp {cp_secs:.2}s ({:.0} MB/s), +sync {cp_sync_secs:.2}s | real driver export -> drain into {} {secs:.2}s ({:.0} MB/s) | drain/cp {:.2}, drain/(cp+sync) {:.2} | peak RSS {:.1} MiB (before the drains {:.1} MiB; target < 64 MiB)",
            field("round"),
            mb / cp_secs,
            field("store"),
            mb / secs,
            secs / cp_secs,
            secs / cp_sync_secs,
            hwm / 1024.0,
            before / 1024.0
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--child-drain") {
        child_drain();
        return;
    }
    if args.iter().any(|a| a == "--child-docker") {
        child_docker();
        return;
    }
    let total = files() * file_bytes() as u64;
    let mb = total as f64 / 1e6;
    println!("archive: {} files, {:.0} MB", files(), mb);
    for round in 1..=2 {
        let (tar_secs, tar_sync_secs) = baseline_tar_x();
        let out = Command::new(std::env::current_exe().unwrap())
            .arg("--child-drain")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("CHILD"))
            .unwrap_or_else(|| {
                panic!(
                    "child failed: {}{}",
                    text,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let field = |k: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or("?")
                .to_owned()
        };
        let drain_secs: f64 = field("secs").parse().unwrap_or(f64::NAN);
        let hwm: f64 = field("hwm_kib").parse().unwrap_or(f64::NAN);
        println!(
            "round {round}: tar -x {:.2}s ({:.0} MB/s), +sync {:.2}s | drain into {} {:.2}s ({:.0} MB/s) | drain/tar {:.2}, drain/(tar+sync) {:.2} | drain peak RSS {:.1} MiB (target < 64 MiB)",
            tar_secs,
            mb / tar_secs,
            tar_sync_secs,
            field("store"),
            drain_secs,
            mb / drain_secs,
            drain_secs / tar_secs,
            drain_secs / tar_sync_secs,
            hwm / 1024.0
        );
    }
    docker_end_to_end();
}

/// The store the drain writes into: the real embedded store.
mod bench_store {
    use std::path::Path;
    use std::sync::Arc;

    use iterion_core::store::NewRun;
    use iterion_core::{RunId, RunStore, Trust};
    use iterion_store_sqlite::SqliteStore;

    pub async fn open(dir: &Path) -> (Arc<dyn RunStore>, &'static str) {
        (Arc::new(SqliteStore::open(dir).unwrap()), "sqlite")
    }

    pub async fn new_run(store: &dyn RunStore) -> RunId {
        let id = RunId::generate();
        store
            .create_run(NewRun {
                id: id.clone(),
                workflow: "bench".into(),
                file: "bench.iter".into(),
                trust: Trust::Trusted,
                owner: None,
            })
            .await
            .unwrap();
        id
    }
}
