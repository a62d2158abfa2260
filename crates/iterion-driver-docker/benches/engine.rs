//! Engine benchmarks, side by side in one process against dockerd with the
//! same image (busybox): (a) sandbox start to first exec done vs
//! `docker run -d` + `docker exec`; (b) exec round trip of `true` vs
//! `docker exec` and vs a raw bollard exec; (c) archive-out throughput of
//! 200 MB vs `docker cp`; (d) what the host guards of issue 19 add to a
//! start (bind re-check, identity resolved and verified) vs a plain start. Prints each ratio; asserts nothing (STYLE: no
//! timed assertions). Run: `source scripts/lib.sh && cargo bench -p
//! iterion-driver-docker --bench engine`.
//!
//! The plan is handed to `start` as a `Prepared` directly: this measures the
//! engine path, not the policy guards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use iterion_core::driver::{NullObserver, OutputLimits, collect_output};
use iterion_core::{Driver, ExecRequest, LaunchPlan, Prepared, RunId, RunInfo, SandboxRun};
use iterion_driver_docker::{DockerDriver, DockerSettings};

const IMAGE: &str = "iterion-test/busybox:local";

fn host() -> String {
    std::env::var("ITERION_TEST_DOCKER_HOST")
        .expect("ITERION_TEST_DOCKER_HOST is not set: source scripts/lib.sh (run scripts/test.sh)")
}

fn cli(args: &[&str]) -> String {
    let out = Command::new("/usr/local/bin/docker")
        .arg("-H")
        .arg(host())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("docker cli");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn pct(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn plan() -> LaunchPlan {
    LaunchPlan {
        image: Some(IMAGE.to_owned()),
        workdir: "/tmp".to_owned(),
        ..LaunchPlan::default()
    }
}

async fn start(driver: &DockerDriver, tag: &str) -> Box<dyn SandboxRun> {
    start_plan(driver, tag, plan()).await
}

/// The plan of (d): a writable workspace bind and an unprivileged `user`,
/// so the host guards of issue 19 run (bind re-check before create, the
/// identity resolved, handed the storage and verified before the first exec).
fn guarded_plan(ws: &std::path::Path, user: &str) -> LaunchPlan {
    let mut p = plan();
    p.user = Some(user.to_owned());
    p.mounts.push(iterion_core::Mount {
        kind: iterion_core::MountKind::Bind,
        source: Some(ws.display().to_string()),
        target: "/work".to_owned(),
        readonly: false,
        size: None,
        origin: iterion_core::MountOrigin::Workspace,
    });
    p
}

async fn start_plan(driver: &DockerDriver, tag: &str, plan: LaunchPlan) -> Box<dyn SandboxRun> {
    let n: u32 = rand::random();
    let info = RunInfo {
        run_id: RunId::parse(format!("bench-{tag}-{n:08x}")).unwrap(),
        run_name: None,
        host_workspace: "/tmp".to_owned(),
        max_duration: None,
    };
    let prepared = Prepared {
        driver: driver.name(),
        plan,
    };
    driver
        .start(prepared, &info, &NullObserver)
        .await
        .expect("start")
}

async fn exec_true(run: &dyn SandboxRun) {
    let mut s = run.exec(ExecRequest::new(["true"])).await.expect("exec");
    let out = collect_output(s.as_mut(), OutputLimits::default(), &mut |_| {})
        .await
        .expect("collect");
    assert_eq!(out.exit_code, 0);
}

async fn raw_exec_true(docker: &bollard::Docker, container: &str) {
    let created = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(vec!["true"]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .expect("create");
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&created.id, None).await.expect("start")
    {
        while output.next().await.is_some() {}
    }
    let inspect = docker.inspect_exec(&created.id).await.expect("inspect");
    assert_eq!(inspect.exit_code, Some(0));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let driver = DockerDriver::connect(&host(), DockerSettings::default())
        .await
        .expect("dockerd answers (run scripts/test.sh)");

    // (a) start to first exec done.
    const STARTS: usize = 10;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..STARTS {
        let t = Instant::now();
        let run = start(&driver, &format!("s{i}")).await;
        exec_true(&*run).await;
        ours.push(t.elapsed());
        run.cleanup().await.expect("cleanup");

        let t = Instant::now();
        let id = cli(&[
            "run",
            "-d",
            "--init",
            "--label",
            "iterion.io/bench=1",
            IMAGE,
            "sleep",
            "2147483647",
        ]);
        cli(&["exec", &id, "true"]);
        theirs.push(t.elapsed());
        cli(&["rm", "-f", &id]);
    }
    let (o, c) = (pct(&mut ours, 0.5), pct(&mut theirs, 0.5));
    println!(
        "start+first exec   p50: driver {:7.1} ms | docker run -d + exec {:7.1} ms | ratio {:.2} (target <= 1.0)",
        ms(o),
        ms(c),
        o.as_secs_f64() / c.as_secs_f64()
    );

    // (d) what the host guards add to a start: the plain start of (a) vs a
    // writable bind with a numeric user, vs the same with a user name
    // resolved in the image (busybox has no /etc/passwd: a uid alone).
    let ws = tempfile::tempdir().expect("ws");
    std::os::unix::fs::chown(ws.path(), Some(4242), Some(4242)).expect("chown ws");
    driver.host_footprint().await;
    let mut plain = Vec::new();
    let mut numeric = Vec::new();
    let mut named = Vec::new();
    for i in 0..STARTS {
        for (samples, plan) in [
            (&mut plain, plan()),
            (&mut numeric, guarded_plan(ws.path(), "4242:4242")),
            (&mut named, guarded_plan(ws.path(), "4242")),
        ] {
            let t = Instant::now();
            let run = start_plan(&driver, &format!("g{i}"), plan).await;
            exec_true(&*run).await;
            samples.push(t.elapsed());
            run.cleanup().await.expect("cleanup");
        }
    }
    let (p, n, r) = (
        pct(&mut plain, 0.5),
        pct(&mut numeric, 0.5),
        pct(&mut named, 0.5),
    );
    println!(
        "guarded start      p50: plain {:7.1} ms | bind + uid:gid {:7.1} ms (ratio {:.2}) | bind + uid looked up {:7.1} ms (ratio {:.2})",
        ms(p),
        ms(n),
        n.as_secs_f64() / p.as_secs_f64(),
        ms(r),
        r.as_secs_f64() / p.as_secs_f64()
    );

    // (b) exec round trip of `true`.
    const EXECS: usize = 200;
    let run = start(&driver, "exec").await;
    for _ in 0..5 {
        exec_true(&*run).await;
    }
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..EXECS {
        let t = Instant::now();
        exec_true(&*run).await;
        ours.push(t.elapsed());
        let t = Instant::now();
        raw_exec_true(driver.client(), run.container()).await;
        raw.push(t.elapsed());
        let t = Instant::now();
        cli(&["exec", run.container(), "true"]);
        theirs.push(t.elapsed());
    }
    for p in [0.5, 0.95] {
        let (o, r, c) = (pct(&mut ours, p), pct(&mut raw, p), pct(&mut theirs, p));
        println!(
            "exec true          p{:02}: driver {:7.1} ms | raw bollard {:7.1} ms | docker exec {:7.1} ms | vs cli {:.2} (target <= 0.7) | vs raw {:.2}",
            (p * 100.0) as u32,
            ms(o),
            ms(r),
            ms(c),
            o.as_secs_f64() / c.as_secs_f64(),
            o.as_secs_f64() / r.as_secs_f64()
        );
    }

    // (c) archive out, 200 MB.
    const SIZE: u64 = 200 * 1024 * 1024;
    let mut s = run
        .exec(ExecRequest::new([
            "sh",
            "-c",
            "head -c 209715200 /dev/urandom > /tmp/big",
        ]))
        .await
        .expect("exec");
    collect_output(s.as_mut(), OutputLimits::default(), &mut |_| {})
        .await
        .expect("fill");
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut stream = driver.client().download_from_container(
            run.container(),
            Some(bollard::query_parameters::DownloadFromContainerOptions {
                path: "/tmp/big".to_owned(),
            }),
        );
        while let Some(c) = stream.next().await {
            c.expect("chunk");
        }
        raw.push(t.elapsed());

        let t = Instant::now();
        let stream = run.export("/tmp/big").await.expect("export");
        let n = iterion_driver_docker::drain_len(stream)
            .await
            .expect("drain");
        ours.push(t.elapsed());
        assert!(n >= SIZE);

        let t = Instant::now();
        let status = Command::new("/usr/local/bin/docker")
            .arg("-H")
            .arg(host())
            .args(["cp", &format!("{}:/tmp/big", run.container()), "-"])
            .stdout(Stdio::null())
            .status()
            .expect("docker cp");
        assert!(status.success());
        theirs.push(t.elapsed());
    }
    let (o, r, c) = (
        pct(&mut ours, 0.5),
        pct(&mut raw, 0.5),
        pct(&mut theirs, 0.5),
    );
    let mbps = |d: Duration| SIZE as f64 / (1024.0 * 1024.0) / d.as_secs_f64();
    println!(
        "archive out 200MB  p50: driver {:7.1} MB/s | raw bollard {:7.1} MB/s | docker cp {:7.1} MB/s | ratio {:.2} (target >= 0.9)",
        mbps(o),
        mbps(r),
        mbps(c),
        mbps(o) / mbps(c)
    );
    run.cleanup().await.expect("cleanup");
}
