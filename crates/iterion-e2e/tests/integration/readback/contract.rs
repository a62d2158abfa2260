//! The drain contract: addressing, outcome marking, events, caps summed over
//! attempts, failures of one path not stopping the others.
//!
//! The suite is written once over a store [`Backend`] and mounted once per
//! backend (facts §10 R10: the same contract test passes against the
//! embedded store and its cloud twin).

use iterion_core::EventDraft;
use iterion_core::store::DrainStatus;
use iterion_readback::{DrainOptions, drain};

use crate::readback::store::{Backend, new_run, new_store_on};
use crate::readback::stored;
use crate::readback::support::*;

pub async fn an_empty_run_files_dir_is_complete_not_failed(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(Archive::new().dir("artifact-files/").finish(), 100),
    );
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Complete);
    assert_eq!((report.files, report.bytes, report.reason), (0, 0, None));
    assert!(report.recorded);
    let draft: EventDraft = report.events[0].clone().into();
    assert_eq!(draft.kind, "sandbox_runfiles_drained");
    assert_eq!(draft.data["files"], 0);
    assert_eq!(draft.data["driver"], "kubernetes");
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(record.status, DrainStatus::Complete);
    assert!(stored(&*ts.store, &run_id).await.is_empty());
}

pub async fn files_are_addressed_relative_to_their_declared_dir(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let long = format!(
        "artifact-files/{}/deep.txt",
        "long-directory-name".repeat(8)
    );
    let archive = Archive::new()
        .dir("artifact-files/")
        .file("artifact-files/report.json", b"{\"ok\":true}")
        .dir("artifact-files/sub/")
        .file("artifact-files/sub/a.txt", b"a")
        .file("artifact-files/empty", b"")
        .gnu_long(long.as_bytes(), b'0', b"gnu")
        .pax_path(b"artifact-files/pax/\xc3\xa9t\xc3\xa9.txt", b'0', b"pax")
        .finish();
    let out = Archive::new()
        .dir("out/")
        .file("out/x.bin", &[7u8; 3000])
        .finish();
    let single = Archive::new().file("summary.md", b"# done").finish();
    let run = ServedRun::new()
        .serve("/iterion/artifact-files", Source::Bytes(archive, 7))
        .serve("/home/iterion/out", Source::Bytes(out, 1000))
        .serve("/work/summary.md", Source::Bytes(single, 4096));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[
            run_files(MIB),
            declared("/home/iterion/out", MIB),
            declared("/work/summary.md", MIB),
        ],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Complete, "{report:#?}");
    let files = stored(&*ts.store, &run_id).await;
    let mut expected = std::collections::BTreeMap::new();
    expected.insert("report.json".to_owned(), b"{\"ok\":true}".to_vec());
    expected.insert("sub/a.txt".to_owned(), b"a".to_vec());
    expected.insert("empty".to_owned(), Vec::new());
    expected.insert(long["artifact-files/".len()..].to_owned(), b"gnu".to_vec());
    expected.insert("pax/été.txt".to_owned(), b"pax".to_vec());
    expected.insert(
        ".iterion-readback/home/iterion/out/x.bin".to_owned(),
        vec![7u8; 3000],
    );
    expected.insert(
        ".iterion-readback/work/summary.md/summary.md".to_owned(),
        b"# done".to_vec(),
    );
    assert_eq!(files, expected);
    assert_eq!(report.files, 7);
    assert_eq!(report.bytes, 11 + 1 + 3 + 3 + 3000 + 6);
}

pub async fn a_gone_container_fails_one_path_and_the_others_still_drain(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new()
        .serve("/iterion/artifact-files", Source::Gone)
        .serve(
            "/out",
            Source::Bytes(Archive::new().file("out/kept", b"kept").finish(), 3),
        );
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB), declared("/out", MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Failed);
    assert_eq!(report.reason, Some("container_gone"));
    assert!(report.stale, "files are stored but the set is incomplete");
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        [".iterion-readback/out/kept"]
    );
    let draft: EventDraft = report.events[0].clone().into();
    assert_eq!(draft.kind, "sandbox_runfiles_drain_failed");
    let keys: Vec<&String> = draft
        .data
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["declined", "driver", "reason", "stale"]);
    assert_eq!(draft.data["reason"], "container_gone");
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(
        (record.status, record.reason.as_deref(), record.stale),
        (DrainStatus::Failed, Some("container_gone"), true)
    );
}

pub async fn an_unbounded_timeout_is_no_timeout(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(Archive::new().file("artifact-files/a", b"a").finish(), 512),
    );
    let options = DrainOptions {
        timeout: std::time::Duration::MAX,
        ..DrainOptions::default()
    };
    let report = drain(&run, &*ts.store, &run_id, &[run_files(MIB)], options).await;
    assert_eq!(report.status, DrainStatus::Complete);
}

pub async fn a_gone_container_with_nothing_stored_is_failed_not_stale(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Gone);
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!((report.status, report.stale), (DrainStatus::Failed, false));
    assert_eq!(report.reason, Some("container_gone"));
}

pub async fn a_truncated_archive_keeps_whole_members_and_never_a_cut_one(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let mut bytes = Archive::new()
        .file("artifact-files/whole", b"whole")
        .file("artifact-files/cut", &[1u8; 2000])
        .unfinished()
        .to_vec();
    bytes.truncate(512 + 512 + 512 + 700);
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(bytes.into(), 256));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Failed);
    assert_eq!(report.reason, Some("archive_error"));
    assert!(report.stale);
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["whole"]
    );
}

pub async fn an_archive_without_its_end_marker_is_an_error_not_a_short_set(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let bytes = Archive::new().file("artifact-files/a", b"a").unfinished();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(bytes, 512));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.reason, Some("archive_error"));
    assert_eq!(report.status, DrainStatus::Failed);
}

pub async fn a_stalled_export_times_out_and_later_paths_are_not_started(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let prefix = Archive::new()
        .file("artifact-files/first", b"1")
        .unfinished();
    let run = ServedRun::new()
        .serve("/iterion/artifact-files", Source::Hang(prefix))
        .serve("/out", Source::Bytes(Archive::new().finish(), 512));
    let options = DrainOptions {
        timeout: short_timeout(),
        ..DrainOptions::default()
    };
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB), declared("/out", MIB)],
        options,
    )
    .await;
    assert_eq!(report.status, DrainStatus::Failed);
    assert_eq!(report.reason, Some("timeout"));
    assert!(report.stale);
    assert_eq!(
        report.paths[1].failure.as_ref().map(|f| f.reason),
        Some("timeout")
    );
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["first"]
    );
}

pub async fn the_cap_sums_every_attempt_and_declines_the_member_that_crosses_it(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let decl = [run_files(1000)];

    let first = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(
            Archive::new()
                .file("artifact-files/a", &[b'a'; 600])
                .finish(),
            100,
        ),
    );
    let report = drain(&first, &*ts.store, &run_id, &decl, DrainOptions::default()).await;
    assert_eq!(report.status, DrainStatus::Complete);
    assert_eq!(report.paths[0].metered, 600);

    // Each member alone is under the cap; with the first attempt's 600
    // bytes, `b` would cross it.
    // `b` is declined at its header; `c` comes in its own export.
    let second = ServedRun::new()
        .serve(
            "/iterion/artifact-files",
            Source::Bytes(
                Archive::new()
                    .file("artifact-files/b", &[b'b'; 500])
                    .file("artifact-files/c", &[b'c'; 300])
                    .finish(),
                100,
            ),
        )
        .listing("/iterion/artifact-files", &[b"b", b"c"])
        .serve(
            "/iterion/artifact-files/c",
            Source::Bytes(Archive::new().file("c", &[b'c'; 300]).finish(), 100),
        );
    let report = drain(&second, &*ts.store, &run_id, &decl, DrainOptions::default()).await;
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(report.reason, Some("cap_exceeded"));
    assert_eq!(report.declined, ["/iterion/artifact-files/b"]);
    assert_eq!(report.declined_count, 1);
    assert!(!report.stale);
    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["a", "c"]);
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(
        record.metered,
        [("/iterion/artifact-files".to_owned(), 900)]
    );
    assert_eq!(record.status, DrainStatus::Partial);
    assert_eq!(record.declined, ["/iterion/artifact-files/b"]);
    let draft: EventDraft = report.events[0].clone().into();
    assert_eq!(draft.data["declined"][0], "/iterion/artifact-files/b");
    assert_eq!(draft.data["reason"], "cap_exceeded");

    // A third attempt: only 100 bytes of room are left. `d` is declined at
    // its header and never read; `e` comes in its own export.
    let third = ServedRun::new()
        .serve(
            "/iterion/artifact-files",
            Source::Bytes(
                Archive::new()
                    .file("artifact-files/d", &[b'd'; 101])
                    .file("artifact-files/e", &[b'e'; 100])
                    .finish(),
                64,
            ),
        )
        .listing("/iterion/artifact-files", &[b"d", b"e"])
        .serve(
            "/iterion/artifact-files/e",
            Source::Bytes(Archive::new().file("e", &[b'e'; 100]).finish(), 64),
        );
    let report = drain(&third, &*ts.store, &run_id, &decl, DrainOptions::default()).await;
    assert_eq!(report.declined, ["/iterion/artifact-files/d"]);
    assert_eq!(report.paths[0].metered, 1000);
}

pub async fn a_header_claiming_terabytes_is_declined_before_a_byte_is_read(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    // 2 TiB claimed: the member is declined on its header and the archive
    // dropped there (its missing body is never read). With no listing to
    // export the rest piecewise, the rest is declined by name.
    let bytes = Archive::new()
        .file("artifact-files/ok", b"ok")
        .claim(b"artifact-files/huge", b'0', 2 << 40, &[0u8; 4096])
        .unfinished();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(bytes, 1024));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(256 * MIB)],
        DrainOptions::default(),
    )
    .await;
    assert!(
        report
            .declined
            .contains(&"/iterion/artifact-files/huge".to_owned())
    );
    assert!(
        report
            .declined
            .iter()
            .any(|d| d.starts_with("/iterion/artifact-files/… (not drained"))
    );
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(report.reason, Some("cap_exceeded"));
    assert!(!report.stale);
    assert_eq!(report.paths[0].metered, 2);
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["ok"]
    );
}

pub async fn a_store_failure_is_a_failed_drain_with_store_error(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let faulty = crate::readback::faults::Faulty::new(ts.store.clone());
    faulty
        .fail_put
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut archive = Archive::new();
    for i in 0..5 {
        archive = archive.file(&format!("artifact-files/f{i}"), b"data");
    }
    let run = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(archive.finish(), 512),
    );
    let report = drain(
        &run,
        &faulty,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Failed);
    assert_eq!(report.reason, Some("store_error"));
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(
        (record.status, record.reason.as_deref()),
        (DrainStatus::Failed, Some("store_error"))
    );
}

pub async fn one_refused_member_is_declined_and_the_rest_kept(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let faulty = crate::readback::faults::Faulty::new(ts.store.clone());
    faulty
        .refuse
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push("refused".into());
    let archive = Archive::new()
        .file("artifact-files/before", b"b")
        .file("artifact-files/refused", b"r")
        .file("artifact-files/after", b"a")
        .finish();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(archive, 512));
    let report = drain(
        &run,
        &faulty,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(report.reason, Some("store_error"));
    assert_eq!(report.declined, ["/iterion/artifact-files/refused"]);
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["after", "before"]
    );
}

pub async fn an_unreadable_meter_drains_nothing_and_resets_nothing(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let decl = [run_files(1000)];
    let first = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(
            Archive::new().file("artifact-files/a", &[1; 900]).finish(),
            512,
        ),
    );
    drain(&first, &*ts.store, &run_id, &decl, DrainOptions::default()).await;

    let faulty = crate::readback::faults::Faulty::new(ts.store.clone());
    faulty
        .fail_get_drain
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let second = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Bytes(
            Archive::new().file("artifact-files/b", &[2; 900]).finish(),
            512,
        ),
    );
    let report = drain(&second, &faulty, &run_id, &decl, DrainOptions::default()).await;
    assert_eq!(
        (report.status, report.reason),
        (DrainStatus::Failed, Some("store_error"))
    );
    assert!(!report.recorded);
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["a"]
    );
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("drain not marked"));
    assert_eq!(
        record.metered,
        [("/iterion/artifact-files".to_owned(), 900)]
    );
}

pub async fn a_drain_that_dies_mid_member_has_already_charged_the_meter(backend: Backend) {
    let ts = new_store_on(backend).await;
    let run_id = new_run(&*ts.store).await;
    let decl = [run_files(100 * MIB)];
    // 40 MiB claimed, 1 MiB sent, then the stream stalls; the drain future is
    // dropped as a crashed host would drop it.
    let prefix = Archive::new()
        .claim(
            b"artifact-files/big",
            b'0',
            40 * MIB,
            &vec![0u8; MIB as usize],
        )
        .unfinished();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Hang(prefix));
    let crashed = tokio::time::timeout(
        short_timeout(),
        drain(&run, &*ts.store, &run_id, &decl, DrainOptions::default()),
    )
    .await;
    assert!(crashed.is_err(), "the drain should still be waiting");
    let record = ts.store.get_drain(&run_id).await.ok().flatten();
    let record = record.unwrap_or_else(|| panic!("no in-flight record"));
    assert_eq!(record.status, DrainStatus::Failed);
    assert!(record.stale);
    let charged = record.metered.first().map_or(0, |(_, n)| *n);
    assert!(charged >= 40 * MIB, "meter charged {charged}");

    // The retry meters on top of the charge: 61 MiB more would cross 100.
    let retry = ServedRun::new()
        .serve(
            "/iterion/artifact-files",
            Source::Generated(generated(1, (61 * MIB) as usize, 1, |_| {
                "artifact-files/big".into()
            })),
        )
        .listing("/iterion/artifact-files", &[b"big"]);
    let report = drain(&retry, &*ts.store, &run_id, &decl, DrainOptions::default()).await;
    assert_eq!(report.declined, ["/iterion/artifact-files/big"]);
    assert_eq!(report.reason, Some("cap_exceeded"));
}

/// Mount the whole contract suite on one store backend.
macro_rules! drain_contract_suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            #[tokio::test]
            async fn one_refused_member_is_declined_and_the_rest_kept() {
                crate::readback::contract::one_refused_member_is_declined_and_the_rest_kept($backend).await
            }
            #[tokio::test]
            async fn an_unbounded_timeout_is_no_timeout() {
                crate::readback::contract::an_unbounded_timeout_is_no_timeout($backend).await
            }
            #[tokio::test]
            async fn gnu_tar_formats_ingest_byte_exact() {
                crate::readback::contract::gnu_tar_formats_ingest_byte_exact($backend).await
            }
            #[tokio::test]
            async fn an_empty_run_files_dir_is_complete_not_failed() {
                crate::readback::contract::an_empty_run_files_dir_is_complete_not_failed($backend).await
            }
            #[tokio::test]
            async fn files_are_addressed_relative_to_their_declared_dir() {
                crate::readback::contract::files_are_addressed_relative_to_their_declared_dir($backend).await
            }
            #[tokio::test]
            async fn a_gone_container_fails_one_path_and_the_others_still_drain() {
                crate::readback::contract::a_gone_container_fails_one_path_and_the_others_still_drain(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn a_gone_container_with_nothing_stored_is_failed_not_stale() {
                crate::readback::contract::a_gone_container_with_nothing_stored_is_failed_not_stale($backend)
                    .await
            }
            #[tokio::test]
            async fn a_truncated_archive_keeps_whole_members_and_never_a_cut_one() {
                crate::readback::contract::a_truncated_archive_keeps_whole_members_and_never_a_cut_one(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn an_archive_without_its_end_marker_is_an_error_not_a_short_set() {
                crate::readback::contract::an_archive_without_its_end_marker_is_an_error_not_a_short_set(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn a_stalled_export_times_out_and_later_paths_are_not_started() {
                crate::readback::contract::a_stalled_export_times_out_and_later_paths_are_not_started(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn the_cap_sums_every_attempt_and_declines_the_member_that_crosses_it() {
                crate::readback::contract::the_cap_sums_every_attempt_and_declines_the_member_that_crosses_it(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn a_header_claiming_terabytes_is_declined_before_a_byte_is_read() {
                crate::readback::contract::a_header_claiming_terabytes_is_declined_before_a_byte_is_read(
                    $backend,
                )
                .await
            }
            #[tokio::test]
            async fn a_store_failure_is_a_failed_drain_with_store_error() {
                crate::readback::contract::a_store_failure_is_a_failed_drain_with_store_error($backend).await
            }
            #[tokio::test]
            async fn an_unreadable_meter_drains_nothing_and_resets_nothing() {
                crate::readback::contract::an_unreadable_meter_drains_nothing_and_resets_nothing($backend)
                    .await
            }
            #[tokio::test]
            async fn a_drain_that_dies_mid_member_has_already_charged_the_meter() {
                crate::readback::contract::a_drain_that_dies_mid_member_has_already_charged_the_meter(
                    $backend,
                )
                .await
            }
        }
    };
}

drain_contract_suite!(sqlite, crate::readback::store::Backend::Sqlite);
drain_contract_suite!(postgres, crate::readback::store::Backend::Postgres);

/// Archives written by GNU tar in each of its formats (ustar prefixes, GNU
/// long names, PAX records for long and non-ASCII names) ingest byte-exact.
pub async fn gnu_tar_formats_ingest_byte_exact(backend: Backend) {
    let tree = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tree.path().join("artifact-files");
    let deep = format!("{}/{}", "segment-".repeat(12), "name-".repeat(30));
    let mut expected = std::collections::BTreeMap::new();
    for (rel, data) in [
        ("a.txt".to_owned(), b"alpha".to_vec()),
        ("dir/b.bin".to_owned(), vec![0u8, 1, 2, 255]),
        ("ünïcødé/ß.txt".to_owned(), b"utf8".to_vec()),
        (format!("{deep}.txt"), vec![b'z'; 5000]),
        ("empty".to_owned(), Vec::new()),
    ] {
        let path = root.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap_or(&root)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&path, &data).unwrap_or_else(|e| panic!("{e}"));
        expected.insert(rel, data);
    }
    for format in ["gnu", "posix", "ustar", "oldgnu"] {
        let out = std::process::Command::new("tar")
            .arg("-c")
            .arg(format!("--format={format}"))
            .arg("-C")
            .arg(tree.path())
            .arg("artifact-files")
            .output()
            .unwrap_or_else(|e| panic!("tar: {e}"));
        if format == "ustar" {
            // ustar cannot hold the 200+-byte name: GNU tar refuses it, and
            // what it wrote must still ingest without it.
            assert!(!out.stdout.is_empty());
        } else {
            assert!(
                out.status.success(),
                "{format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let ts = new_store_on(backend).await;
        let run_id = new_run(&*ts.store).await;
        let run = ServedRun::new().serve(
            "/iterion/artifact-files",
            Source::Bytes(out.stdout.into(), 1000),
        );
        let report = drain(
            &run,
            &*ts.store,
            &run_id,
            &[run_files(MIB)],
            DrainOptions::default(),
        )
        .await;
        let files = stored(&*ts.store, &run_id).await;
        if format == "ustar" {
            let mut without = expected.clone();
            without.retain(|k, _| !k.starts_with("segment-"));
            assert_eq!(files, without, "{format}");
        } else {
            assert_eq!(
                report.status,
                DrainStatus::Complete,
                "{format}: {report:#?}"
            );
            assert_eq!(files, expected, "{format}");
        }
    }
}
