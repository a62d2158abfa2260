//! The database goes away mid-append: a private, throwaway PostgreSQL
//! (never the shared one) is SIGKILLed by pid while a writer appends, then
//! restarted. Appends during the outage fail with a typed, transient error
//! (no panic); after the restart they continue; every acknowledged event is
//! there and seqs stay gapless.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_core::event::EventDraft;
use iterion_core::store::NewRun;
use iterion_core::{RunId, RunStore, Trust};
use iterion_store_postgres::PostgresStore;

const BIN: &str = "/usr/lib/postgresql/15/bin";

fn postgres_ids() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("a postgres user (scripts/setup.sh installs PostgreSQL)");
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().expect("uid"), f[3].parse().expect("gid"))
}

fn as_postgres(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = postgres_ids();
    // PostgreSQL refuses to run as root.
    cmd.uid(uid).gid(gid)
}

struct Server {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl Server {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn init() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let (uid, gid) = postgres_ids();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown tempdir");
        let out = as_postgres(Command::new(format!("{BIN}/initdb")).args([
            "-D",
            dir.path().join("data").to_str().expect("utf-8 path"),
            "-U",
            "iterion",
            "--auth=trust",
            "--locale=C",
            "-E",
            "UTF8",
            "-N",
        ]))
        .output()
        .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port();
        Server {
            dir,
            port,
            child: None,
        }
    }

    fn url(&self) -> String {
        format!("postgres://iterion@127.0.0.1:{}/postgres", self.port)
    }

    async fn start(&mut self) {
        // A SIGKILLed postmaster leaves backends that exit on their own a
        // moment later; until then the old shared memory is "in use".
        for _ in 0..100 {
            let log = std::fs::File::create(self.dir.path().join("pg.log")).expect("log");
            let child = as_postgres(Command::new(format!("{BIN}/postgres")).args([
                "-D",
                self.data().to_str().expect("utf-8"),
                "-p",
                &self.port.to_string(),
                "-k",
                self.dir.path().to_str().expect("utf-8"),
                "-h",
                "127.0.0.1",
            ]))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
            self.child = Some(child);
            for _ in 0..50 {
                if tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
                    .await
                    .is_ok()
                {
                    return;
                }
                if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.kill();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "throwaway PostgreSQL did not start: {}",
            std::fs::read_to_string(self.dir.path().join("pg.log")).unwrap_or_default()
        );
    }

    /// SIGKILL by pid, then reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A clean stop of our own server (backends included), then make sure.
        if self.child.is_some() {
            let data = self.data();
            let _ = as_postgres(Command::new(format!("{BIN}/pg_ctl")).args([
                "-D",
                data.to_str().unwrap_or("/nonexistent"),
                "-m",
                "immediate",
                "-w",
                "stop",
            ]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        }
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_killed_mid_append_loses_nothing_acknowledged() {
    let mut server = Server::init();
    server.start().await;
    let store = Arc::new(
        PostgresStore::connect(&server.url(), None)
            .await
            .expect("connect"),
    );
    let run = RunId::parse("outage").expect("id");
    store
        .create_run(NewRun {
            id: run.clone(),
            workflow: "w".into(),
            file: "w.iter".into(),
            trust: Trust::Trusted,
            owner: None,
        })
        .await
        .expect("create");

    #[derive(Default)]
    struct Log {
        acked: Vec<u64>,
        errors: Vec<(&'static str, bool)>,
        stop: bool,
    }
    let log = Arc::new(Mutex::new(Log::default()));
    let writer = {
        let (store, run, log) = (store.clone(), run.clone(), log.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                if log.lock().expect("log").stop {
                    return;
                }
                n += 1;
                let draft = EventDraft {
                    kind: "tick".into(),
                    node_id: None,
                    data: serde_json::json!({ "n": n }),
                };
                match store.append_event(&run, draft, None).await {
                    Ok(rec) => log.lock().expect("log").acked.push(rec.seq),
                    Err(e) => {
                        log.lock()
                            .expect("log")
                            .errors
                            .push((e.code(), e.is_transient()));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        })
    };
    let wait_for = |pred: &dyn Fn(&Log) -> bool| pred(&log.lock().expect("log"));
    // Hang guard only (no timing assertion): generous bounds.
    for _ in 0..600 {
        if wait_for(&|l| l.acked.len() >= 50) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        wait_for(&|l| l.acked.len() >= 50),
        "writer made no progress"
    );
    server.kill();
    for _ in 0..600 {
        if wait_for(&|l| l.errors.len() >= 3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before_restart = log.lock().expect("log").acked.len();
    server.start().await;
    for _ in 0..600 {
        if wait_for(&|l| l.acked.len() >= before_restart + 30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    log.lock().expect("log").stop = true;
    writer.await.expect("writer task did not panic");

    let log = Arc::try_unwrap(log)
        .ok()
        .expect("sole owner")
        .into_inner()
        .expect("log");
    assert!(log.errors.len() >= 3, "the outage was not observed");
    for (code, transient) in &log.errors {
        assert!(
            *code == "STORE_UNAVAILABLE" && *transient,
            "outage errors are typed and transient: {:?}",
            log.errors
        );
    }
    assert!(
        log.acked.len() >= before_restart + 30,
        "writer did not recover after restart"
    );
    let events = store
        .events_after(&run, 0, 0)
        .await
        .expect("read after restart");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gapless");
    for s in &log.acked {
        assert!(seqs.contains(s), "acknowledged seq {s} lost");
    }
}
