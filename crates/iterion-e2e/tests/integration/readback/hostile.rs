//! Hostile archives from an untrusted container: every hostile member is
//! declined by name, nothing lands outside the run's file area, and the host
//! filesystem is untouched.

use std::collections::BTreeSet;
use std::path::Path;

use iterion_core::store::DrainStatus;
use iterion_readback::{DrainOptions, drain};

use crate::readback::store::{new_run, new_store};
use crate::readback::stored;
use crate::readback::support::*;

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn hostile_members_are_declined_by_name_and_never_followed() {
    let canary_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let canary = canary_dir.path().join("canary");
    std::fs::write(&canary, b"untouched").unwrap_or_else(|e| panic!("{e}"));
    let canary_abs = canary.to_string_lossy().into_owned();
    let cwd = std::env::current_dir().unwrap_or_else(|e| panic!("{e}"));
    let cwd_before = listing(&cwd);

    let escape = format!("artifact-files/../../../../../../../..{canary_abs}-escaped");
    let deep = format!("artifact-files/{}f", "d/".repeat(10_000));
    let archive = Archive::new()
        .dir("artifact-files/")
        .file("artifact-files/good.txt", b"good")
        .raw(b"artifact-files/passwd", b'2', b"", b"/etc/passwd")
        // A file "through" the symlink: stored as a plain key, never resolved.
        .file("artifact-files/passwd/through", b"plain")
        .raw(b"artifact-files/shadow", b'1', b"", b"/etc/shadow")
        .raw(b"artifact-files/canary", b'2', b"", canary_abs.as_bytes())
        .file("artifact-files/../../x", b"dotdot")
        .file("/abs", b"absolute")
        .gnu_long(escape.as_bytes(), b'0', b"escape")
        .pax_path(canary_abs.as_bytes(), b'0', b"pax-absolute")
        .raw(b"artifact-files/tty", b'3', b"", b"")
        .raw(b"artifact-files/sda", b'4', b"", b"")
        .raw(b"artifact-files/pipe", b'6', b"", b"")
        .raw(b"artifact-files/weird", b'Z', b"", b"")
        .claim(b"artifact-files/sparse", b'S', 0, b"")
        .raw(b"artifact-files/bad-\xff\xfe", b'0', b"x", b"")
        .file("artifact-files/.iterion-readback/out/x", b"impersonation")
        .file("elsewhere/x", b"outside the declared dir")
        .file("artifact-files/a\\..\\b", b"backslash")
        .gnu_long(deep.as_bytes(), b'0', b"deep")
        .gnu_long(&vec![b'n'; 100_000], b'0', b"too long")
        .file("artifact-files/last.txt", b"last")
        .finish();
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(archive, 333));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(MIB)],
        DrainOptions::default(),
    )
    .await;

    let declined: BTreeSet<&str> = report.declined.iter().map(String::as_str).collect();
    for name in [
        "/iterion/artifact-files/passwd".to_owned(),
        "/iterion/artifact-files/shadow".to_owned(),
        "/iterion/artifact-files/canary".to_owned(),
        "/iterion/artifact-files/../../x".to_owned(),
        "/abs".to_owned(),
        format!("/iterion/{escape}"),
        canary_abs.clone(),
        "/iterion/artifact-files/tty".to_owned(),
        "/iterion/artifact-files/sda".to_owned(),
        "/iterion/artifact-files/pipe".to_owned(),
        "/iterion/artifact-files/weird".to_owned(),
        "/iterion/artifact-files/sparse".to_owned(),
        "/iterion/artifact-files/bad-\u{fffd}\u{fffd}".to_owned(),
        "/iterion/artifact-files/.iterion-readback/out/x".to_owned(),
        "/iterion/elsewhere/x".to_owned(),
        "/iterion/artifact-files/a\\..\\b".to_owned(),
    ] {
        assert!(
            declined.contains(name.as_str()),
            "{name} not declined: {declined:#?}"
        );
    }
    // The 10,000-level and 100 KB names are reported cut, never whole.
    assert!(
        report
            .declined
            .iter()
            .any(|d| d.starts_with("/iterion/artifact-files/d/d/") && d.ends_with('…'))
    );
    assert!(
        report
            .declined
            .iter()
            .any(|d| d.starts_with("/iterion/nnnn") && d.ends_with('…'))
    );
    assert!(report.declined.iter().all(|d| d.len() < 600));
    assert_eq!(report.declined_count, 18);
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(report.reason, Some("archive_error"));

    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        ["good.txt", "last.txt", "passwd/through"]
    );
    assert_eq!(files["passwd/through"], b"plain");

    assert_eq!(
        listing(canary_dir.path()),
        BTreeSet::from(["canary".to_owned()])
    );
    assert_eq!(std::fs::read(&canary).unwrap_or_default(), b"untouched");
    assert_eq!(listing(&cwd), cwd_before);
}

#[tokio::test]
async fn a_million_empty_members_are_counted_not_listed() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Generated(generated(1_000_000, 0, 2_000, |i| {
            format!("artifact-files/f{i}")
        })),
    );
    let options = DrainOptions {
        max_members_per_path: 1_000,
        ..DrainOptions::default()
    };
    let report = drain(&run, &*ts.store, &run_id, &[run_files(MIB)], options).await;
    assert_eq!(report.files, 1_000);
    assert_eq!(report.declined_count, 999_000);
    assert_eq!(
        report.declined,
        ["/iterion/artifact-files/… (999000 members past the limit of 1000)"]
    );
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(report.reason, Some("cap_exceeded"));
    assert_eq!(stored(&*ts.store, &run_id).await.len(), 1_000);
}

#[tokio::test]
async fn declined_names_are_bounded_and_counted() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let run = ServedRun::new().serve(
        "/iterion/artifact-files",
        Source::Generated(generated(5_000, 0, 500, |i| format!("/abs/{i}"))),
    );
    let options = DrainOptions {
        max_declined_names: 100,
        ..DrainOptions::default()
    };
    let report = drain(&run, &*ts.store, &run_id, &[run_files(MIB)], options).await;
    assert_eq!(report.declined.len(), 100);
    assert_eq!(report.declined_count, 5_000);
    assert_eq!(report.files, 0);
}

#[tokio::test]
async fn an_oversized_pax_header_fails_the_path_without_buffering_it() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let archive = Archive::new()
        .file("artifact-files/before", b"b")
        .claim(b"PaxHeaders/x", b'x', 8 << 30, &[b'9'; 4096])
        .unfinished();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(archive, 512));
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
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["before"]
    );
}

#[tokio::test]
async fn a_sparse_member_claiming_terabytes_is_declined_for_the_cap_and_the_stream_stays_in_step() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let archive = Archive::new()
        .gnu_sparse(b"artifact-files/sparse-2tb", 2 << 40)
        .file("artifact-files/after", b"after")
        .finish();
    let run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(archive, 100));
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(256 * MIB)],
        DrainOptions::default(),
    )
    .await;
    assert_eq!(report.declined, ["/iterion/artifact-files/sparse-2tb"]);
    assert_eq!(report.reason, Some("cap_exceeded"));
    assert_eq!(report.status, DrainStatus::Partial);
    assert_eq!(
        stored(&*ts.store, &run_id).await.keys().collect::<Vec<_>>(),
        ["after"]
    );
}

/// What a reader of the event log sees for a hostile archive.
#[tokio::test]
async fn the_drain_failed_event_names_what_was_declined() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let archive = Archive::new()
        .file("artifact-files/kept.txt", b"kept")
        .raw(b"artifact-files/passwd", b'2', b"", b"/etc/passwd")
        .raw(b"artifact-files/shadow", b'1', b"", b"/etc/shadow")
        .file("artifact-files/../../x", b"x")
        .raw(b"artifact-files/pipe", b'6', b"", b"")
        .file("artifact-files/too-big", &[0u8; 2048])
        .finish();
    let run = ServedRun::new()
        .serve("/iterion/artifact-files", Source::Bytes(archive, 512))
        .listing(
            "/iterion/artifact-files",
            &[b"kept.txt", b"passwd", b"shadow", b"pipe", b"too-big"],
        );
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(1024)],
        DrainOptions::default(),
    )
    .await;
    let draft: iterion_core::EventDraft = report.events[0].clone().into();
    insta::assert_json_snapshot!(serde_json::json!({"type": draft.kind, "data": draft.data}));
}
