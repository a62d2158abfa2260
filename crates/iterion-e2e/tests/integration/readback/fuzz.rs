//! Property-based fuzzing of tar ingestion (stable toolchain, inside
//! `cargo test`): arbitrary bytes, mutated valid archives and generated
//! hostile archives never panic, never store an unsafe path, and decline
//! every hostile member by name.

use std::collections::BTreeMap;

use bytes::Bytes;
use iterion_core::store::DrainStatus;
use iterion_readback::{DrainOptions, drain};
use proptest::prelude::*;

use crate::readback::store::{new_run, new_store};
use crate::readback::stored;
use crate::readback::support::*;

/// `PROPTEST_CASES` raises the count for a long local fuzz run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn options() -> DrainOptions {
    DrainOptions {
        timeout: std::time::Duration::from_secs(30),
        max_members_per_path: 200,
        ..DrainOptions::default()
    }
}

/// Drain `bytes` as the run-files archive; return the report and the store.
fn ingest(
    bytes: Bytes,
    chunk: usize,
) -> (iterion_readback::DrainReport, BTreeMap<String, Vec<u8>>) {
    ingest_served(ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(bytes, chunk)))
}

/// Drain what `run` serves as the run-files directory.
fn ingest_served(run: ServedRun) -> (iterion_readback::DrainReport, BTreeMap<String, Vec<u8>>) {
    block_on(async move {
        let ts = new_store().await;
        let run_id = new_run(&*ts.store).await;
        let report = drain(
            &run,
            &*ts.store,
            &run_id,
            &[run_files(64 * 1024)],
            options(),
        )
        .await;
        let files = stored(&*ts.store, &run_id).await;
        (report, files)
    })
}

fn valid_archive(files: &[(String, Vec<u8>)]) -> Bytes {
    let mut a = Archive::new().dir("artifact-files/");
    for (name, data) in files {
        a = a.file(&format!("artifact-files/{name}"), data);
    }
    a.finish()
}

fn safe_files() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    proptest::collection::btree_map(
        "[a-z]{1,8}(/[a-z]{1,8}){0,2}",
        proptest::collection::vec(any::<u8>(), 0..1500),
        1..6,
    )
    .prop_map(|m| m.into_iter().collect())
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 1..2048).prop_map(Mutation::Append),
    ]
}

/// Members a hostile container may write, each with its expected verdict.
#[derive(Debug, Clone)]
enum Hostile {
    Safe(String, Vec<u8>),
    DotDot(String),
    Absolute(String),
    Symlink(String),
    Hardlink(String),
    Device(String, u8),
    Fifo(String),
    Sparse(String),
    LongDotDot(String),
    PaxAbsolute(String),
    Huge(String),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    let n = "[a-z]{1,10}";
    prop_oneof![
        (n, proptest::collection::vec(any::<u8>(), 0..700)).prop_map(|(s, d)| Hostile::Safe(s, d)),
        n.prop_map(Hostile::DotDot),
        n.prop_map(Hostile::Absolute),
        n.prop_map(Hostile::Symlink),
        n.prop_map(Hostile::Hardlink),
        (n, prop_oneof![Just(b'3'), Just(b'4')]).prop_map(|(s, t)| Hostile::Device(s, t)),
        n.prop_map(Hostile::Fifo),
        n.prop_map(Hostile::Sparse),
        n.prop_map(Hostile::LongDotDot),
        n.prop_map(Hostile::PaxAbsolute),
        n.prop_map(Hostile::Huge),
    ]
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..6000), chunk in 1usize..700) {
        let (report, files) = ingest(Bytes::from(bytes), chunk);
        // Random bytes are not an archive with an end marker unless they
        // start with a zero block.
        if report.status == DrainStatus::Complete {
            prop_assert!(files.is_empty());
        }
        prop_assert_eq!(report.events.len(), 1);
    }

    #[test]
    fn mutated_archives_never_panic_or_escape(files in safe_files(), mutations in proptest::collection::vec(mutation(), 1..4), chunk in 1usize..2000) {
        let original = valid_archive(&files);
        let mut bytes = original.to_vec();
        let mut only_truncated = true;
        for m in &mutations {
            match m {
                Mutation::Flip(i, x) if !bytes.is_empty() => {
                    let i = i % bytes.len();
                    bytes[i] ^= x;
                    only_truncated = false;
                }
                Mutation::Truncate(i) => bytes.truncate(i % (bytes.len() + 1)),
                Mutation::Append(extra) => { bytes.extend_from_slice(extra); only_truncated = false; }
                Mutation::Flip(..) => {}
            }
        }
        let first_end_block_cut = bytes.len() < original.len() - 512;
        let (report, stored_files) = ingest(Bytes::from(bytes), chunk);
        let expected: BTreeMap<String, Vec<u8>> = files.into_iter().collect();
        if only_truncated {
            // A cut archive keeps whole members only, each byte-exact, and
            // never passes for a complete one.
            for (k, v) in &stored_files {
                prop_assert_eq!(expected.get(k), Some(v));
            }
            if first_end_block_cut {
                prop_assert_eq!(report.status, DrainStatus::Failed);
                prop_assert_eq!(report.reason, Some("archive_error"));
            } else {
                prop_assert_eq!(&stored_files, &expected);
            }
        }
        for k in stored_files.keys() {
            prop_assert!(!k.starts_with('/') && !k.split('/').any(|c| c == ".." || c.is_empty()));
        }
        prop_assert_eq!(report.events.len(), 1);
    }

    #[test]
    fn hostile_members_are_all_declined_by_name(members in proptest::collection::vec(hostile(), 1..12), chunk in 1usize..1500) {
        let mut a = Archive::new().dir("artifact-files/");
        let mut expect_declined = Vec::new();
        let mut expect_stored = BTreeMap::new();
        // A member over the cap ends the whole-path archive at its header;
        // the rest comes piecewise from the directory's listing. The huge
        // ones go last here, each then exported (and declined) on its own,
        // so every other hostile member is still met in the first archive
        // (an engine only archives real entries, which a listing names).
        let mut huge = Vec::new();
        let mut listed: Vec<Vec<u8>> = Vec::new();
        let mut ordered: Vec<(usize, &Hostile)> = members.iter().enumerate().filter(|(_, m)| !matches!(m, Hostile::Huge(_))).collect();
        ordered.extend(members.iter().enumerate().filter(|(_, m)| matches!(m, Hostile::Huge(_))));
        for (i, m) in ordered {
            // Unique names so a later member never overwrites an earlier one.
            let u = |s: &str| format!("{s}{i}");
            a = match m {
                Hostile::Safe(s, d) => { expect_stored.insert(u(s), d.clone()); a.file(&format!("artifact-files/{}", u(s)), d) }
                Hostile::DotDot(s) => { let n = format!("artifact-files/../{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.file(&n, b"x") }
                Hostile::Absolute(s) => { let n = format!("/{}", u(s)); expect_declined.push(n.clone()); a.file(&n, b"x") }
                Hostile::Symlink(s) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.raw(n.as_bytes(), b'2', b"", b"/etc/passwd") }
                Hostile::Hardlink(s) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.raw(n.as_bytes(), b'1', b"", b"/etc/shadow") }
                Hostile::Device(s, t) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.raw(n.as_bytes(), *t, b"", b"") }
                Hostile::Fifo(s) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.raw(n.as_bytes(), b'6', b"", b"") }
                Hostile::Sparse(s) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); a.raw(n.as_bytes(), b'S', b"", b"") }
                Hostile::LongDotDot(s) => { let n = format!("artifact-files/{}/../../{}", "l".repeat(150), u(s)); expect_declined.push(format!("/iterion/{n}")); a.gnu_long(n.as_bytes(), b'0', b"x") }
                Hostile::PaxAbsolute(s) => { let n = format!("/etc/{}", u(s)); expect_declined.push(n.clone()); a.pax_path(n.as_bytes(), b'0', b"x") }
                // Over the 64 KiB cap on its header alone; its body is really
                // there so the archive stays well-formed.
                Hostile::Huge(s) => { let n = format!("artifact-files/{}", u(s)); expect_declined.push(format!("/iterion/{n}")); huge.push(u(s)); a.file(&n, &vec![0u8; 70_000]) }
            };
            if !matches!(m, Hostile::DotDot(_) | Hostile::Absolute(_) | Hostile::LongDotDot(_) | Hostile::PaxAbsolute(_)) {
                let name = match m { Hostile::Safe(s, _) | Hostile::Symlink(s) | Hostile::Hardlink(s) | Hostile::Device(s, _) | Hostile::Fifo(s) | Hostile::Sparse(s) | Hostile::Huge(s) => u(s), _ => String::new() };
                listed.push(name.into_bytes());
            }
        }
        let mut run = ServedRun::new().serve("/iterion/artifact-files", Source::Bytes(a.finish(), chunk));
        let names: Vec<&[u8]> = listed.iter().map(Vec::as_slice).collect();
        run = run.listing("/iterion/artifact-files", &names);
        for h in &huge {
            run = run.serve(&format!("/iterion/artifact-files/{h}"), Source::Bytes(Archive::new().file(h, &vec![0u8; 70_000]).finish(), chunk));
        }
        let (report, files) = ingest_served(run);
        for name in &expect_declined {
            prop_assert!(report.declined.contains(name), "{} not declined: {:?}", name, report.declined);
        }
        prop_assert_eq!(report.declined_count, expect_declined.len() as u64);
        prop_assert_eq!(&files, &expect_stored);
        let want = if expect_declined.is_empty() { DrainStatus::Complete } else { DrainStatus::Partial };
        prop_assert_eq!(report.status, want, "{:#?}", report);
    }
}
