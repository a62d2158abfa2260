//! Issue 19 item 8: a member too large to read — a sparse terabyte — is
//! declined at its header and never read; the drain exports the rest of
//! the path piece by piece from directory listings, so the ordinary files
//! before it, beside it and after it are all drained, and nothing is
//! stale. Each oversized member's data here never ends: reading it would
//! run into the drain's timeout.

use std::time::Duration;

use iterion_core::store::DrainStatus;
use iterion_readback::{DrainOptions, drain};

use crate::readback::store::{new_run, new_store};
use crate::readback::stored;
use crate::readback::support::*;

const TIB: u64 = 1 << 40;

fn options() -> DrainOptions {
    DrainOptions {
        // A drain that read an endless member would end here, as `timeout`.
        timeout: Duration::from_secs(60),
        ..DrainOptions::default()
    }
}

#[tokio::test]
async fn a_sparse_terabyte_costs_nothing_and_spoils_nothing() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let root = "/iterion/artifact-files";
    // The whole path's archive: `a.txt`, then the endless `big`.
    let whole = Archive::new()
        .dir("artifact-files/")
        .file("artifact-files/a.txt", b"before")
        .unfinished();
    // `sub`'s archive: `d.txt`, then the endless `huge`.
    let sub = Archive::new()
        .dir("sub/")
        .file("sub/d.txt", b"deeper")
        .unfinished();
    let run = ServedRun::new()
        .serve(root, endless_member(whole, b"artifact-files/big", TIB))
        .listing(root, &[b"a.txt", b"big", b"c.txt", b"sub", b".hidden"])
        .serve(
            &format!("{root}/c.txt"),
            Source::Bytes(Archive::new().file("c.txt", b"after").finish(), 512),
        )
        .serve(
            &format!("{root}/.hidden"),
            Source::Bytes(Archive::new().file(".hidden", b"dot").finish(), 512),
        )
        .serve(
            &format!("{root}/sub"),
            endless_member(sub, b"sub/huge", TIB),
        )
        .listing(&format!("{root}/sub"), &[b"d.txt", b"huge", b"e.txt"])
        .serve(
            &format!("{root}/sub/e.txt"),
            Source::Bytes(Archive::new().file("e.txt", b"last").finish(), 512),
        );
    let report = drain(
        &run,
        &*ts.store,
        &run_id,
        &[run_files(256 * MIB)],
        options(),
    )
    .await;
    assert_eq!(report.reason, Some("cap_exceeded"), "{report:#?}");
    assert_eq!(report.status, DrainStatus::Partial);
    assert!(!report.stale);
    assert_eq!(
        report.declined,
        [format!("{root}/big"), format!("{root}/sub/huge")]
    );
    let files = stored(&*ts.store, &run_id).await;
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [".hidden", "a.txt", "c.txt", "sub/d.txt", "sub/e.txt"]
    );
    assert_eq!(files["sub/e.txt"], b"last");
    // Neither big member was ever asked for on its own, nor anything twice.
    let exported = run.exported();
    assert_eq!(
        exported,
        [
            root.to_owned(),
            format!("{root}/c.txt"),
            format!("{root}/sub"),
            format!("{root}/.hidden"),
            format!("{root}/sub/e.txt"),
        ]
    );
    assert_eq!(report.paths[0].metered, 6 + 5 + 6 + 3 + 4);
}

#[tokio::test]
async fn without_a_listing_the_rest_is_declined_by_name_not_lost_silently() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let root = "/iterion/artifact-files";
    let whole = Archive::new()
        .file("artifact-files/a.txt", b"before")
        .unfinished();
    // A stopped container, or an image without `sh`: no listing.
    let run = ServedRun::new().serve(root, endless_member(whole, b"artifact-files/big", TIB));
    let report = drain(&run, &*ts.store, &run_id, &[run_files(MIB)], options()).await;
    assert_eq!(report.reason, Some("cap_exceeded"), "{report:#?}");
    assert_eq!(report.status, DrainStatus::Partial);
    assert!(!report.stale);
    assert_eq!(report.declined.len(), 2, "{:?}", report.declined);
    assert_eq!(report.declined[0], format!("{root}/big"));
    assert!(report.declined[1].starts_with(&format!(
        "{root}/… (not drained: the directory could not be listed"
    )));
    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["a.txt"]);
}

#[tokio::test]
async fn a_declined_name_on_a_huge_member_is_not_read_either() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let root = "/iterion/artifact-files";
    // Not storable (non-UTF-8 name) and endless: reading past it would be
    // the same terabyte.
    let whole = Archive::new()
        .file("artifact-files/a.txt", b"before")
        .unfinished();
    let run = ServedRun::new()
        .serve(root, endless_member(whole, b"artifact-files/\xff", TIB))
        .listing(root, &[b"a.txt", b"\xff", b"z.txt"])
        .serve(
            &format!("{root}/z.txt"),
            Source::Bytes(Archive::new().file("z.txt", b"z").finish(), 512),
        );
    let report = drain(&run, &*ts.store, &run_id, &[run_files(MIB)], options()).await;
    assert_ne!(report.reason, Some("timeout"), "{report:#?}");
    assert!(!report.stale);
    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["a.txt", "z.txt"]);
    assert!(
        report.declined.iter().any(|d| d.contains('\u{fffd}')),
        "{:?}",
        report.declined
    );
}

#[tokio::test]
async fn a_small_overage_is_not_read_either() {
    let ts = new_store().await;
    let run_id = new_run(&*ts.store).await;
    let root = "/iterion/artifact-files";
    let run = ServedRun::new()
        .serve(
            root,
            Source::Bytes(
                Archive::new()
                    .file("artifact-files/a", &[b'a'; 600])
                    .file("artifact-files/b", &[b'b'; 600])
                    .file("artifact-files/c", &[b'c'; 300])
                    .finish(),
                256,
            ),
        )
        .listing(root, &[b"a", b"b", b"c"])
        .serve(
            &format!("{root}/c"),
            Source::Bytes(Archive::new().file("c", &[b'c'; 300]).finish(), 256),
        );
    let report = drain(&run, &*ts.store, &run_id, &[run_files(1000)], options()).await;
    assert_eq!(report.declined, [format!("{root}/b")]);
    assert_eq!(run.exported(), [root.to_owned(), format!("{root}/c")]);
    let files = stored(&*ts.store, &run_id).await;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(report.paths[0].metered, 900);
}
