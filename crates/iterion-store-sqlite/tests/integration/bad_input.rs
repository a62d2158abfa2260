//! What the embedded store does with a store directory it did not write:
//! a text file or another application's SQLite database where `iterion.db`
//! should be, a schema newer than this binary, a symlink planted in the run
//! file area. Each is a typed error with a stable code, never a panic and
//! never a write elsewhere.

use std::path::Path;

use bytes::Bytes;
use iterion_core::store::{NewRun, PutOutcome, RunFilePath};
use iterion_core::{ByteStream, RunId, RunStore, StoreError, Trust};
use iterion_store_sqlite::{DB_FILE, SqliteStore, schema};

fn open_err(dir: &Path) -> StoreError {
    match SqliteStore::open(dir) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e,
    }
}

fn one_chunk(b: &'static [u8]) -> ByteStream {
    Box::pin(futures_util::stream::iter(vec![Ok(Bytes::from_static(b))]))
}

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: RunId::parse(id).expect("id"),
        workflow: "w".into(),
        file: "w.iter".into(),
        trust: Trust::Trusted,
        owner: None,
    }
}

#[test]
fn a_text_file_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join(DB_FILE),
        "hello, I am notes.txt\n".repeat(100),
    )
    .expect("write");
    let err = open_err(dir.path());
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
    // Untouched.
    assert!(
        std::fs::read_to_string(dir.path().join(DB_FILE))
            .expect("read")
            .starts_with("hello")
    );
}

#[test]
fn a_truncated_sqlite_header_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(DB_FILE), b"SQLite for").expect("write");
    assert_eq!(open_err(dir.path()).code(), "STORE_CORRUPT");
}

#[test]
fn another_apps_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open");
        conn.execute_batch(
            "CREATE TABLE bookmarks (url TEXT); INSERT INTO bookmarks VALUES ('x');",
        )
        .expect("foreign schema");
    }
    let err = open_err(dir.path());
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
    assert!(err.to_string().contains("not an iterion store"), "{err}");

    let dir2 = tempfile::tempdir().expect("tempdir");
    {
        let conn = rusqlite::Connection::open(dir2.path().join(DB_FILE)).expect("open");
        conn.execute_batch("PRAGMA application_id = 1234;")
            .expect("app id");
    }
    let err = open_err(dir2.path());
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
    assert!(err.to_string().contains("another application"), "{err}");
}

#[test]
fn a_newer_schema_is_refused_with_upgrade_advice() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(SqliteStore::open(dir.path()).expect("create"));
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open");
        conn.execute_batch(&format!(
            "PRAGMA user_version = {};",
            schema::SUPPORTED_VERSION + 1
        ))
        .expect("bump");
    }
    match open_err(dir.path()) {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!(found, schema::SUPPORTED_VERSION + 1);
            assert_eq!(supported, schema::SUPPORTED_VERSION);
        }
        other => panic!("expected SchemaTooNew, got {other}"),
    }
    assert!(open_err(dir.path()).to_string().contains("upgrade iterion"));
}

#[test]
fn a_store_path_that_is_a_file_is_an_io_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").expect("write");
    assert_eq!(open_err(&file).code(), "STORE_IO_ERROR");
}

#[tokio::test]
async fn reopening_keeps_data_and_records_the_schema_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open(dir.path()).expect("open");
    s.create_run(new_run("keep")).await.expect("create");
    drop(s);
    let s = SqliteStore::open(dir.path()).expect("reopen");
    assert!(
        s.load_run(&RunId::parse("keep").expect("id"))
            .await
            .expect("load")
            .is_some()
    );
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open");
    let v: i64 = conn
        .query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))
        .expect("schema_version");
    assert_eq!(v, schema::SUPPORTED_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal mode");
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_planted_symlink_in_the_file_area_is_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let s = SqliteStore::open(dir.path()).expect("open");
    let run = s.create_run(new_run("sym")).await.expect("create");
    let files = dir.path().join("runs/sym/files");
    std::fs::create_dir_all(&files).expect("mkdir");
    std::os::unix::fs::symlink(outside.path(), files.join("evil")).expect("symlink dir");
    std::os::unix::fs::symlink(outside.path().join("f"), files.join("link")).expect("symlink file");

    let p = RunFilePath::parse("evil/payload").expect("path");
    let err = s.put_file(&run.id, &p, one_chunk(b"pwn"), 10).await;
    assert!(matches!(err, Err(StoreError::UnsafePath { .. })), "{err:?}");
    let p = RunFilePath::parse("link").expect("path");
    let err = s.put_file(&run.id, &p, one_chunk(b"pwn"), 10).await;
    assert!(matches!(err, Err(StoreError::UnsafePath { .. })), "{err:?}");
    assert_eq!(
        std::fs::read_dir(outside.path()).expect("ls").count(),
        0,
        "wrote outside"
    );
    assert!(s.list_files(&run.id).await.expect("list").is_empty());
    // No temp file is left behind either.
    assert_eq!(
        std::fs::read_dir(dir.path().join("runs/sym/tmp"))
            .expect("ls tmp")
            .count(),
        0
    );
    let ok = s
        .put_file(
            &run.id,
            &RunFilePath::parse("fine").expect("p"),
            one_chunk(b"ok"),
            10,
        )
        .await
        .expect("put");
    assert!(matches!(ok, PutOutcome::Stored(_)));
}

#[tokio::test]
async fn a_run_file_area_replaced_by_a_symlink_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let s = SqliteStore::open(dir.path()).expect("open");
    let run = s.create_run(new_run("swap")).await.expect("create");
    std::fs::create_dir_all(dir.path().join("runs")).expect("mkdir");
    std::os::unix::fs::symlink(outside.path(), dir.path().join("runs/swap")).expect("symlink");
    let p = RunFilePath::parse("x").expect("path");
    let err = s.put_file(&run.id, &p, one_chunk(b"pwn"), 10).await;
    assert!(matches!(err, Err(StoreError::Corrupt { .. })), "{err:?}");
    assert_eq!(
        std::fs::read_dir(outside.path()).expect("ls").count(),
        0,
        "wrote outside"
    );
}

/// Every file under `root`, relative, symlinks not followed.
fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let ty = entry.file_type().expect("file type");
            if ty.is_dir() {
                stack.push(entry.path());
            } else {
                out.push(
                    entry
                        .path()
                        .strip_prefix(root)
                        .expect("under root")
                        .to_path_buf(),
                );
            }
        }
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever string a drain hands over as a name: either it is refused
    /// as a path, or it lands exactly at `runs/<id>/files/<normalized>` —
    /// never anywhere else in (or out of) the store.
    #[test]
    fn any_accepted_path_lands_inside_the_run_file_area(
        raw in "[a./\\\\\\x00 é-]{0,12}"
    ) {
        let Ok(path) = RunFilePath::parse(&raw) else { return Ok(()) };
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let s = SqliteStore::open(dir.path()).expect("open");
            let run = s.create_run(new_run("prop")).await.expect("create");
            let out = s.put_file(&run.id, &path, one_chunk(b"x"), 10).await.expect("put");
            assert!(matches!(out, PutOutcome::Stored(_)));
        });
        let files: Vec<_> = walk(dir.path())
            .into_iter()
            .filter(|p| !p.to_string_lossy().starts_with("iterion.db"))
            .collect();
        let expected = Path::new("runs/prop/files").join(path.as_str());
        proptest::prop_assert_eq!(files, vec![expected]);
    }
}
