//! The run-file checks: put, list, get, the cap, confined paths, a failed
//! stream, the drain record.

use bytes::Bytes;
use serde_json::json;
use sha2::{Digest, Sha256};

use iterion_core::store::{DrainRecord, DrainStatus, PutOutcome, RunFilePath};
use iterion_core::{ByteStream, StoreError};

use super::fixture::*;

/// Put streams a file (multi-chunk), list reports size + sha256 sorted by
/// path, get streams it back, a second put replaces it.
pub async fn files_put_list_get(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("files")).await.expect("create");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let chunks: Vec<Vec<u8>> = big.chunks(65_536).map(<[u8]>::to_vec).collect();
    let out = s
        .put_file(
            &run.id,
            &path("reports/big.bin"),
            bytes_stream(chunks),
            8 << 20,
        )
        .await
        .expect("put big");
    let PutOutcome::Stored(rec) = out else {
        panic!("big file under the cap was not stored: {out:?}")
    };
    assert_eq!(rec.size, big.len() as u64);
    assert_eq!(rec.sha256, hex::encode(Sha256::digest(&big)));
    s.put_file(
        &run.id,
        &path("a.txt"),
        bytes_stream(vec![b"hello".to_vec()]),
        5,
    )
    .await
    .expect("put at exactly the cap");
    s.put_file(&run.id, &path("empty"), bytes_stream(vec![]), 0)
        .await
        .expect("put empty");

    let listed = s.list_files(&run.id).await.expect("list");
    let names: Vec<&str> = listed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(names, vec!["a.txt", "empty", "reports/big.bin"]);
    assert_eq!(listed[0].size, 5);
    assert_eq!(listed[0].sha256, hex::encode(Sha256::digest(b"hello")));
    assert_eq!(listed[1].size, 0);
    assert_eq!(
        read_all(
            s.get_file(&run.id, &path("reports/big.bin"))
                .await
                .expect("get")
        )
        .await,
        big
    );
    assert!(
        read_all(s.get_file(&run.id, &path("empty")).await.expect("get"))
            .await
            .is_empty()
    );

    s.put_file(
        &run.id,
        &path("a.txt"),
        bytes_stream(vec![b"good".to_vec(), b"bye".to_vec()]),
        100,
    )
    .await
    .expect("replace");
    assert_eq!(
        read_all(s.get_file(&run.id, &path("./a.txt")).await.expect("get")).await,
        b"goodbye"
    );
    let listed = s.list_files(&run.id).await.expect("list");
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].size, 7);

    let missing = s.get_file(&run.id, &path("nope.txt")).await;
    assert!(matches!(missing, Err(StoreError::FileNotFound(_))));
    // Files are per run.
    let other = s.create_run(new_run("files-other")).await.expect("create");
    assert!(s.list_files(&other.id).await.expect("list").is_empty());
    assert!(matches!(
        s.get_file(&other.id, &path("a.txt")).await,
        Err(StoreError::FileNotFound(_))
    ));
}

/// Over the cap: `CapExceeded`, nothing listed, nothing readable, and an
/// earlier good version of the same path is left as it was.
pub async fn files_cap_keeps_nothing(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("cap")).await.expect("create");
    let out = s
        .put_file(
            &run.id,
            &path("out/huge.log"),
            bytes_stream(vec![vec![b'x'; 600], vec![b'y'; 600], vec![b'z'; 600]]),
            1000,
        )
        .await
        .expect("put over cap");
    match out {
        PutOutcome::CapExceeded { read, cap } => {
            assert_eq!(cap, 1000);
            assert!(
                read > 1000 && read <= 1200,
                "stopped at the chunk that crossed: {read}"
            );
        }
        other => panic!("expected CapExceeded, got {other:?}"),
    }
    assert!(s.list_files(&run.id).await.expect("list").is_empty());
    assert!(matches!(
        s.get_file(&run.id, &path("out/huge.log")).await,
        Err(StoreError::FileNotFound(_))
    ));
    s.put_file(
        &run.id,
        &path("keep.txt"),
        bytes_stream(vec![b"v1".to_vec()]),
        10,
    )
    .await
    .expect("put");
    let over = s
        .put_file(
            &run.id,
            &path("keep.txt"),
            bytes_stream(vec![vec![0; 11]]),
            10,
        )
        .await
        .expect("put over cap");
    assert!(matches!(over, PutOutcome::CapExceeded { .. }));
    assert_eq!(
        read_all(s.get_file(&run.id, &path("keep.txt")).await.expect("get")).await,
        b"v1"
    );
    assert_eq!(s.list_files(&run.id).await.expect("list").len(), 1);
}

/// Absolute, `..`, NUL, backslash: refused before any backend sees them,
/// also through serde (a path read from an event or a request).
pub async fn files_paths_are_confined(fx: &StoreFixture, _open: OpenFn) {
    for bad in [
        "/etc/passwd",
        "../../etc/passwd",
        "a/../../b",
        "a\0b",
        "",
        "..",
        "a\\..\\b",
        "\\windows",
    ] {
        let err = RunFilePath::parse(bad).expect_err(bad);
        assert_eq!(err.code(), "STORE_UNSAFE_PATH");
        let via_serde: Result<RunFilePath, _> = serde_json::from_value(json!(bad));
        assert!(via_serde.is_err(), "{bad:?} accepted through serde");
    }
    assert_eq!(path("x/./y//z.txt").as_str(), "x/y/z.txt");
    // A normalized path that collides with an existing file's parent is a
    // typed error, never a write elsewhere.
    let s = &fx.store;
    let run = s.create_run(new_run("confined")).await.expect("create");
    s.put_file(
        &run.id,
        &path("a"),
        bytes_stream(vec![b"file".to_vec()]),
        10,
    )
    .await
    .expect("put a");
    let clash = s
        .put_file(&run.id, &path("a/b"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await;
    assert!(
        matches!(clash, Err(StoreError::UnsafePath { .. })),
        "a file cannot also be a directory: {clash:?}"
    );
    s.put_file(&run.id, &path("d/x"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await
        .expect("put d/x");
    let clash = s
        .put_file(&run.id, &path("d"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await;
    assert!(
        matches!(clash, Err(StoreError::UnsafePath { .. })),
        "a directory cannot also be a file: {clash:?}"
    );
    assert_eq!(
        read_all(s.get_file(&run.id, &path("a")).await.expect("get")).await,
        b"file"
    );
}

/// A stream that fails midway stores nothing.
pub async fn files_failed_stream_keeps_nothing(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("broken")).await.expect("create");
    let stream: ByteStream = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(std::io::Error::other("archive ended early")),
    ]));
    let r = s.put_file(&run.id, &path("p.txt"), stream, 100).await;
    assert!(r.is_err(), "{r:?}");
    assert!(s.list_files(&run.id).await.expect("list").is_empty());
}

/// The drain record keeps status, reason, declined members, staleness and
/// per-path metered bytes.
pub async fn drain_record_round_trip(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("drain")).await.expect("create");
    assert!(s.get_drain(&run.id).await.expect("get").is_none());
    let partial = DrainRecord {
        status: DrainStatus::Partial,
        reason: Some("cap_exceeded".into()),
        declined: vec!["/iterion/artifact-files/huge.bin".into(), "link-out".into()],
        stale: true,
        metered: vec![
            ("/iterion/artifact-files".into(), 268_435_457),
            ("/work/out".into(), 12),
        ],
        updated_at: time::macros::datetime!(2026-03-04 05:06:07 UTC),
    };
    s.set_drain(&run.id, partial.clone()).await.expect("set");
    assert_eq!(s.get_drain(&run.id).await.expect("get"), Some(partial));
    let complete = DrainRecord {
        status: DrainStatus::Complete,
        reason: None,
        declined: vec![],
        stale: false,
        metered: vec![("/iterion/artifact-files".into(), 10)],
        updated_at: time::macros::datetime!(2026-03-04 05:06:08 UTC),
    };
    s.set_drain(&run.id, complete.clone())
        .await
        .expect("replace");
    assert_eq!(s.get_drain(&run.id).await.expect("get"), Some(complete));
}
