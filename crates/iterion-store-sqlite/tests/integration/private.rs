//! Issue 19 item 3: a store is private to its owner. Every directory it
//! creates is 0700 and every file 0600 — the database, SQLite's `-wal` and
//! `-shm` beside it, the run file area and the run files — whatever the
//! umask, so no other local user reads another run's outputs or the
//! digests that vouch for them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bytes::Bytes;
use iterion_core::store::{NewRun, PutOutcome, RunFilePath};
use iterion_core::{ByteStream, RunId, RunStore, Trust};
use iterion_store_sqlite::{DB_FILE, SqliteStore};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn everything_the_store_creates_is_private() {
    let root = tempfile::tempdir().expect("tempdir");
    // Parents the store creates are private too.
    let dir = root.path().join("a/b/store");
    let store = SqliteStore::open(&dir).expect("open");
    let run = store
        .create_run(NewRun {
            id: RunId::parse("r-private").expect("id"),
            workflow: "w".into(),
            file: "w.iter".into(),
            trust: Trust::Trusted,
            owner: None,
        })
        .await
        .expect("run");
    let body: ByteStream = Box::pin(futures_util::stream::iter(vec![Ok(Bytes::from_static(
        b"report",
    ))]));
    let path = RunFilePath::parse("reports/deep/report.txt").expect("path");
    assert!(matches!(
        store
            .put_file(&run.id, &path, body, 1024)
            .await
            .expect("put"),
        PutOutcome::Stored(_)
    ));
    for d in [
        root.path().join("a"),
        root.path().join("a/b"),
        dir.clone(),
        dir.join("runs"),
        dir.join("runs/r-private"),
        dir.join("runs/r-private/files"),
        dir.join("runs/r-private/files/reports"),
        dir.join("runs/r-private/files/reports/deep"),
        dir.join("runs/r-private/tmp"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let mut files = vec![
        dir.join(DB_FILE),
        dir.join("runs/r-private/files/reports/deep/report.txt"),
    ];
    for side in ["-wal", "-shm"] {
        let p = dir.join(format!("{DB_FILE}{side}"));
        if p.exists() {
            files.push(p);
        }
    }
    assert!(
        files.len() >= 3,
        "WAL mode leaves a -wal beside the database: {files:?}"
    );
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}
