//! The driver conformance suite: one set of checks every [`Driver`] must
//! pass, mounted once per backend with [`driver_conformance!`] (the rustls
//! pattern: one suite, many providers). Each check starts its own run with
//! a unique id, labels it, and cleans up even when it fails (the `Guard`).
//!
//! It owns the behaviour every driver shares (lifecycle, exec semantics,
//! stdin, streaming, kill, zombies, archives, cleanup, labels, a killed
//! container). Engine-specific checks (egress, bindless volumes, build)
//! live in the driver crate's own tests.
//!
//! The suite reads the driver's [`Capabilities`] and gates on them only
//! what a capability says is not offered; a gated check still asserts
//! what the seam promises instead. A driver without `image` runs no
//! container (the noop driver): its sandbox is the host workspace, it
//! creates no managed resource, orphans are the host init's, and the
//! host's analogue of a killed container is a workspace removed from
//! outside. A driver without `remote_user` answers an exec as another
//! user with [`DriverError::Unsupported`].

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use iterion_core::driver::{NullObserver, OutputLimits, ResourceKind, collect_output};
use iterion_core::plan::{Limits, MountOrigin, RUN_FILES_CONTAINER_DIR};
use iterion_core::{
    Capabilities, Driver, DriverError, ExecOutput, ExecRequest, LaunchPlan, Mount, MountKind,
    Prepared, RunId, RunInfo, SandboxRun,
};

/// Kills a container from outside (the engine API), given its name.
pub type ExternalKill =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The workspace path inside the sandbox for every check.
pub const WORKDIR: &str = "/tmp/iterion-ws";

/// A fresh run id for one check.
pub fn run_id(tag: &str) -> RunId {
    let n: u32 = rand::random();
    RunId::parse(format!("ct-{tag}-{n:08x}")).expect("valid run id")
}

/// The plan every check starts from: the image, a workdir, one env var,
/// and a source-less run-files volume (ADR-143 storage in bindless mode).
pub fn base_plan(image: &str) -> LaunchPlan {
    LaunchPlan {
        image: Some(image.to_owned()),
        workdir: WORKDIR.to_owned(),
        env: BTreeMap::from([("ITERION_CT".to_owned(), "plan-env".to_owned())]),
        mounts: vec![Mount {
            kind: MountKind::Volume,
            source: None,
            target: RUN_FILES_CONTAINER_DIR.to_owned(),
            readonly: false,
            size: None,
            origin: MountOrigin::RunFiles,
        }],
        limits: Limits::default(),
        ..LaunchPlan::default()
    }
}

/// Prepare through the driver (guards included).
pub async fn prepare(driver: &dyn Driver, plan: &LaunchPlan) -> Prepared {
    driver
        .prepare(plan, &NullObserver)
        .await
        .unwrap_or_else(|e| panic!("prepare failed: {e} ({})", e.code()))
}

/// A started run that is cleaned up when dropped (best effort).
pub struct Started {
    pub run: Box<dyn SandboxRun>,
    pub info: RunInfo,
    _ws: tempfile::TempDir,
}

impl Started {
    /// Wrap a run started by the caller (cleanup-on-drop included).
    pub fn from_parts(run: Box<dyn SandboxRun>, info: RunInfo) -> Self {
        Self {
            run,
            info,
            _ws: tempfile::tempdir().expect("tmp"),
        }
    }

    /// Run a command to completion, bounded output.
    pub async fn sh(&self, script: &str) -> ExecOutput {
        self.exec(ExecRequest::new(["sh", "-c", script])).await
    }

    pub async fn exec(&self, req: ExecRequest) -> ExecOutput {
        let mut s = self.run.exec(req).await.expect("exec");
        collect_output(s.as_mut(), OutputLimits::default(), &mut |_| {})
            .await
            .expect("collect")
    }

    pub fn stdout(out: &ExecOutput) -> String {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // Best-effort cleanup when a check panics midway (the suite runs on
        // the multi-thread runtime, where blocking here is allowed).
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let run = &self.run;
            tokio::task::block_in_place(|| {
                let _ = handle.block_on(run.cleanup());
            });
        }
    }
}

/// Start a run of `plan` on `driver`.
pub async fn start(driver: &dyn Driver, tag: &str, plan: LaunchPlan) -> Started {
    let ws = tempfile::tempdir().expect("tmp");
    let info = RunInfo {
        run_id: run_id(tag),
        run_name: Some(format!("conformance-{tag}")),
        host_workspace: ws.path().display().to_string(),
        max_duration: None,
    };
    let prepared = prepare(driver, &plan).await;
    let run = driver
        .start(prepared, &info, &NullObserver)
        .await
        .unwrap_or_else(|e| panic!("start failed: {e} ({})", e.code()));
    Started { run, info, _ws: ws }
}

/// Whether the driver runs a container: the checks that observe one (its
/// workdir from the plan, its managed resources, its init, a kill from
/// outside) read this. `image` is the flag: a driver that starts nothing
/// from an image runs on the host.
fn contained(caps: &Capabilities) -> bool {
    caps.image
}

/// The run's workdir as `pwd` prints it: the plan's inside a container,
/// the host workspace's real path on the host.
fn pwd_of(caps: &Capabilities, s: &Started) -> String {
    if contained(caps) {
        WORKDIR.to_owned()
    } else {
        std::fs::canonicalize(s.run.workdir())
            .expect("the host workspace exists")
            .display()
            .to_string()
    }
}

pub async fn lifecycle_and_labels(driver: &dyn Driver, image: &str) {
    let caps = driver.capabilities();
    let s = start(driver, "life", base_plan(image)).await;
    assert!(s.run.is_alive().await.expect("alive"));
    let managed = driver.list_managed().await.expect("list");
    let mine: Vec<_> = managed
        .iter()
        .filter(|r| r.run_id == s.info.run_id.as_str())
        .collect();
    if contained(&caps) {
        assert_eq!(s.run.workdir(), WORKDIR);
        assert!(
            mine.iter().any(|r| r.kind == ResourceKind::Container),
            "container not listed as managed with its run id: {managed:?}"
        );
    } else {
        assert_eq!(
            s.run.workdir(),
            s.info.host_workspace,
            "a driver without a container runs in the host workspace"
        );
        assert!(
            mine.is_empty(),
            "a driver without a container creates no managed resource: {mine:?}"
        );
    }
    s.run.cleanup().await.expect("cleanup");
    s.run.cleanup().await.expect("cleanup is idempotent");
    if contained(&caps) {
        assert!(!s.run.is_alive().await.expect("alive after cleanup"));
    } else {
        // Cleanup removes what the run created, and on the host that is
        // nothing: the workspace is the user's and stays.
        assert!(
            std::path::Path::new(&s.info.host_workspace).is_dir(),
            "cleanup removed the host workspace"
        );
        assert!(s.run.is_alive().await.expect("alive after cleanup"));
    }
    let left: Vec<_> = driver
        .list_managed()
        .await
        .expect("list")
        .into_iter()
        .filter(|r| r.run_id == s.info.run_id.as_str())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

pub async fn exec_semantics(driver: &dyn Driver, image: &str) {
    let s = start(driver, "exec", base_plan(image)).await;
    let out = s.sh("echo out; echo err >&2; exit 3").await;
    assert_eq!(out.exit_code, 3, "non-zero exit is data");
    assert_eq!(Started::stdout(&out), "out");
    assert_eq!(String::from_utf8_lossy(&out.stderr_tail).trim(), "err");
    let ok = s.exec(ExecRequest::new(["true"])).await;
    assert_eq!(ok.exit_code, 0);
    let missing = s.run.exec(ExecRequest::new(["/no/such/binary"])).await;
    if let Ok(mut session) = missing {
        let out = collect_output(session.as_mut(), OutputLimits::default(), &mut |_| {})
            .await
            .expect("collect");
        assert_ne!(out.exit_code, 0);
    }
    s.run.cleanup().await.expect("cleanup");
}

pub async fn env_workdir_user(driver: &dyn Driver, image: &str) {
    let caps = driver.capabilities();
    let s = start(driver, "env", base_plan(image)).await;
    let out = s.sh("pwd; echo $ITERION_CT").await;
    assert_eq!(
        Started::stdout(&out),
        format!("{}\nplan-env", pwd_of(&caps, &s))
    );
    let mut req = ExecRequest::new(["sh", "-c", "pwd; echo \"[$EXTRA][$EMPTY]\""]);
    req.env.insert("EXTRA".into(), "x y".into());
    req.env.insert("EMPTY".into(), String::new());
    req.workdir = Some("/tmp".into());
    let out = s.exec(req.clone()).await;
    assert_eq!(Started::stdout(&out), "/tmp\n[x y][]");
    req.argv = ["sh", "-c", "id -u"].map(String::from).to_vec();
    req.user = Some("1000".into());
    if caps.remote_user {
        let out = s.exec(req).await;
        assert_eq!(
            out.exit_code,
            0,
            "{:?}",
            String::from_utf8_lossy(&out.stderr_tail)
        );
        assert_eq!(Started::stdout(&out), "1000");
    } else {
        // Not offered: the typed refusal, never a command run as whoever
        // the driver happens to be.
        match s.run.exec(req).await {
            Err(DriverError::Unsupported { driver: d, .. }) => assert_eq!(d, driver.name()),
            Err(e) => panic!("exec as a user without remote_user: {e} ({})", e.code()),
            Ok(_) => panic!("exec as a user ran on a driver without remote_user"),
        }
    }
    s.run.cleanup().await.expect("cleanup");
}

pub async fn stdin_round_trip(driver: &dyn Driver, image: &str) {
    let s = start(driver, "stdin", base_plan(image)).await;
    let mut req = ExecRequest::new(["cat"]);
    req.attach_stdin = true;
    let mut session = s.run.exec(req).await.expect("exec");
    session
        .write_stdin(Bytes::from_static(b"hello\nworld\n"))
        .await
        .expect("write");
    session.close_stdin().await.expect("close");
    let out = collect_output(session.as_mut(), OutputLimits::default(), &mut |_| {})
        .await
        .expect("collect");
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, b"hello\nworld\n");
    s.run.cleanup().await.expect("cleanup");
}

pub async fn large_output_streams(driver: &dyn Driver, image: &str) {
    const SIZE: u64 = 50 * 1024 * 1024;
    let s = start(driver, "large", base_plan(image)).await;
    let mut session = s
        .run
        .exec(ExecRequest::new(["head", "-c", "52428800", "/dev/zero"]))
        .await
        .expect("exec");
    // Count without keeping: the suite never holds the 50 MB.
    let mut total = 0u64;
    let mut biggest = 0usize;
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk.expect("chunk");
        total += chunk.data.len() as u64;
        biggest = biggest.max(chunk.data.len());
    }
    assert_eq!(session.wait().await.expect("wait"), 0);
    assert_eq!(total, SIZE);
    assert!(biggest <= 4 * 1024 * 1024, "a chunk of {biggest} bytes");
    s.run.cleanup().await.expect("cleanup");
}

/// The pids of `pids` that still run in the sandbox (neither gone nor a
/// zombie awaiting its reaper), asked from inside it: a container's pids
/// are its own namespace's, the host's are the host's.
async fn still_running(s: &Started, pids: &[String]) -> String {
    let script = format!(
        "for p in {}; do st=$(awk '{{print $3}}' /proc/$p/stat 2>/dev/null); \
         [ -n \"$st\" ] && [ \"$st\" != Z ] && echo $p; done; true",
        pids.join(" ")
    );
    Started::stdout(&s.sh(&script).await)
}

/// Read `n` lines of a session's stdout (pids the command announces).
async fn read_lines(session: &mut dyn iterion_core::ExecSession, n: usize) -> Vec<String> {
    let mut text = String::new();
    while text.lines().count() < n || !text.ends_with('\n') {
        let chunk = session
            .next_chunk()
            .await
            .expect("the command ended before announcing its pids")
            .expect("chunk");
        if chunk.stream == iterion_core::OutputStream::Stdout {
            text.push_str(&String::from_utf8_lossy(&chunk.data));
        }
    }
    text.lines().map(str::to_owned).collect()
}

pub async fn kill_is_real(driver: &dyn Driver, image: &str) {
    let s = start(driver, "kill", base_plan(image)).await;
    // The shell and both sleeps announce their pids, so the check looks
    // for exactly them (a `ps` of the host would see other work).
    let mut session = s
        .run
        .exec(ExecRequest::new([
            "sh",
            "-c",
            "echo $$; sleep 1000 & echo $!; sleep 1001 & echo $!; wait",
        ]))
        .await
        .expect("exec");
    let pids = read_lines(session.as_mut(), 3).await;
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert_eq!(
        still_running(&s, &pids).await.lines().count(),
        3,
        "{pids:?}"
    );
    session.kill().await.expect("kill");
    // The exit code is data (a shell may handle TERM and exit 0); what
    // matters is that the wait returns and nothing survives. A KILL is
    // delivered asynchronously: poll (bounded) until the tree is gone.
    session.wait().await.expect("wait after kill");
    let mut left = String::new();
    for _ in 0..100 {
        left = still_running(&s, &pids).await;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(left.is_empty(), "processes survived kill: {left}");
    s.run.cleanup().await.expect("cleanup");
}

pub async fn zombies_are_reaped(driver: &dyn Driver, image: &str) {
    let s = start(driver, "zombie", base_plan(image)).await;
    if !contained(&driver.capabilities()) {
        // No container, no init of its own: orphans are the host init's.
        // What the driver owns is what it starts: a finished exec leaves
        // no zombie of its process behind once waited for.
        let mut session = s
            .run
            .exec(ExecRequest::new([
                "sh",
                "-c",
                "echo $$; sh -c 'true & exit 0'; exit 0",
            ]))
            .await
            .expect("exec");
        let pids = read_lines(session.as_mut(), 1).await;
        assert_eq!(session.wait().await.expect("wait"), 0);
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[0]));
        assert!(
            stat.is_err(),
            "the exec's process was not reaped by its wait: {stat:?}"
        );
        s.run.cleanup().await.expect("cleanup");
        return;
    }
    // 200 children orphaned by their parent shell, each exiting at once.
    let out = s
        .sh("i=0; while [ $i -lt 200 ]; do sh -c 'true & exit 0'; i=$((i+1)); done")
        .await;
    assert_eq!(out.exit_code, 0);
    let mut zombies = String::new();
    for _ in 0..50 {
        let ps = s.sh("ps -o stat,args | awk '$1 ~ /^Z/' | wc -l").await;
        zombies = Started::stdout(&ps);
        if zombies == "0" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(zombies, "0", "zombies remain");
    s.run.cleanup().await.expect("cleanup");
}

fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, *data).expect("append");
    }
    b.into_inner().expect("tar")
}

async fn read_tar(stream: iterion_core::ByteStream) -> BTreeMap<String, Vec<u8>> {
    let mut bytes = Vec::new();
    let mut stream = stream;
    while let Some(c) = stream.next().await {
        bytes.extend_from_slice(&c.expect("chunk"));
    }
    let mut out = BTreeMap::new();
    let mut ar = tar::Archive::new(bytes.as_slice());
    for e in ar.entries().expect("entries") {
        let mut e = e.expect("entry");
        if e.header().entry_type().is_file() {
            let mut data = Vec::new();
            e.read_to_end(&mut data).expect("read");
            out.insert(e.path().expect("path").display().to_string(), data);
        }
    }
    out
}

fn once(bytes: Vec<u8>) -> iterion_core::ByteStream {
    Box::pin(futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(Bytes::from(bytes))
    }))
}

pub async fn archive_round_trip(driver: &dyn Driver, image: &str) {
    let s = start(driver, "archive", base_plan(image)).await;
    // The run's own workdir: the plan's in a container, the host
    // workspace on the host (never a shared host path).
    let workdir = s.run.workdir().to_owned();
    let tar = tar_of(&[("a.txt", b"alpha"), ("sub/b.bin", &[0u8, 1, 2, 255])]);
    s.run.import(&workdir, once(tar)).await.expect("import");
    let cat = s.sh("cat a.txt").await;
    assert_eq!(Started::stdout(&cat), "alpha");
    let files = read_tar(
        s.run
            .export(&format!("{workdir}/sub"))
            .await
            .expect("export"),
    )
    .await;
    assert_eq!(
        files.get("sub/b.bin").map(Vec::as_slice),
        Some(&[0u8, 1, 2, 255][..])
    );
    s.run.cleanup().await.expect("cleanup");
}

/// The run's sandbox removed from outside mid-run: a container killed
/// through the engine (`kill`), or, for a driver without a container, the
/// host workspace removed (no `kill` needed, none taken).
pub async fn killed_container_is_gone(
    driver: &dyn Driver,
    image: &str,
    kill: Option<ExternalKill>,
) {
    let caps = driver.capabilities();
    let s = start(driver, "killed", base_plan(image)).await;
    let kill = match (contained(&caps), kill) {
        (true, Some(kill)) => kill,
        (true, None) => panic!("a driver with containers mounts the suite with an external kill"),
        (false, _) => {
            std::fs::remove_dir_all(&s.info.host_workspace).expect("remove the workspace");
            assert!(!s.run.is_alive().await.expect("is_alive"));
            match s.run.exec(ExecRequest::new(["true"])).await {
                Err(DriverError::ContainerGone { .. }) => {}
                Err(e) => panic!("exec into a removed workspace: {e} ({})", e.code()),
                Ok(_) => panic!("exec into a removed workspace succeeded"),
            }
            // Nothing outlives the sandbox to drain: the capability says so.
            assert!(!caps.read_back_drain, "{caps:?}");
            s.run.cleanup().await.expect("cleanup");
            s.run.cleanup().await.expect("cleanup again");
            return;
        }
    };
    let w = s
        .sh(&format!("echo drained > {RUN_FILES_CONTAINER_DIR}/out.txt"))
        .await;
    assert_eq!(w.exit_code, 0);
    kill(s.run.container().to_owned()).await;
    assert!(!s.run.is_alive().await.expect("is_alive"));
    match s.run.exec(ExecRequest::new(["true"])).await {
        Err(DriverError::ContainerGone { .. }) => {}
        Err(e) => panic!("exec into a killed container: {e} ({})", e.code()),
        Ok(_) => panic!("exec into a killed container succeeded"),
    }
    // ADR-143: the read-back volume still drains until cleanup.
    let files = read_tar(
        s.run
            .export(RUN_FILES_CONTAINER_DIR)
            .await
            .expect("export from a killed container"),
    )
    .await;
    assert_eq!(
        files.get("artifact-files/out.txt").map(Vec::as_slice),
        Some(&b"drained\n"[..]),
        "{:?}",
        files.keys().collect::<Vec<_>>()
    );
    s.run.cleanup().await.expect("cleanup");
    s.run.cleanup().await.expect("cleanup again");
}

/// Mount the suite: `driver_conformance!(module, async { driver }, "image", kill)`
/// where the factory yields something that derefs to a [`Driver`] and `kill`
/// is an [`ExternalKill`] expression; a driver without containers (no
/// `image` capability) mounts it without one:
/// `driver_conformance!(module, async { driver }, "image")`.
#[macro_export]
macro_rules! driver_conformance {
    ($module:ident, $factory:expr, $image:expr, $kill:expr) => {
        $crate::driver_conformance!(@suite $module, $factory, $image, Some($kill));
    };
    ($module:ident, $factory:expr, $image:expr) => {
        $crate::driver_conformance!(@suite $module, $factory, $image, None);
    };
    (@suite $module:ident, $factory:expr, $image:expr, $kill:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use $crate::driver as ct;

            macro_rules! check {
                ($name:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let driver = $factory.await;
                        ct::$name(&*driver, $image).await;
                    }
                };
            }

            check!(lifecycle_and_labels);
            check!(exec_semantics);
            check!(env_workdir_user);
            check!(stdin_round_trip);
            check!(large_output_streams);
            check!(kill_is_real);
            check!(zombies_are_reaped);
            check!(archive_round_trip);

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn killed_container_is_gone() {
                let driver = $factory.await;
                ct::killed_container_is_gone(&*driver, $image, $kill).await;
            }
        }
    };
}
