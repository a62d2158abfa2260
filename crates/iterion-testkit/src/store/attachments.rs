//! The attachment checks (issue 14 item 5): put, list, get, replace, the
//! cap, a failed stream, names, and an unknown run or name.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use iterion_core::attachment::{AttachmentFile, AttachmentName, AttachmentPut};
use iterion_core::id::RunId;
use iterion_core::store::FileCheck;
use iterion_core::{ByteStream, StoreError};

use super::fixture::*;

fn name(n: &str) -> AttachmentName {
    AttachmentName::parse(n).expect("valid attachment name")
}

fn file(f: &str) -> AttachmentFile {
    AttachmentFile::parse(f).expect("valid attachment file")
}

/// Put streams an attachment (multi-chunk), list reports it by name with
/// its file, size and sha256, get streams the same bytes (the reader's
/// check passes), a second put of the name replaces it whole, and the run
/// files do not see attachments.
pub async fn attachments_put_list_get(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("attach")).await.expect("create");
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i % 241) as u8).collect();
    let chunks: Vec<Vec<u8>> = big.chunks(65_536).map(<[u8]>::to_vec).collect();
    let out = s
        .put_attachment(
            &run.id,
            &name("spec"),
            &file("spec.pdf"),
            bytes_stream(chunks),
            8 << 20,
        )
        .await
        .expect("put big");
    let AttachmentPut::Stored(rec) = out else {
        panic!("attachment under the cap was not stored: {out:?}")
    };
    assert_eq!(rec.size, big.len() as u64);
    assert_eq!(rec.sha256, hex::encode(Sha256::digest(&big)));
    assert_eq!(
        rec.container_path(),
        "/run/iterion/attachments/spec/spec.pdf"
    );
    s.put_attachment(
        &run.id,
        &name("logo"),
        &file("a logo.png"),
        bytes_stream(vec![b"png".to_vec()]),
        3,
    )
    .await
    .expect("put at exactly the cap");

    let listed = s.list_attachments(&run.id).await.expect("list");
    let names: Vec<(&str, &str)> = listed
        .iter()
        .map(|a| (a.name.as_str(), a.file.as_str()))
        .collect();
    assert_eq!(names, vec![("logo", "a logo.png"), ("spec", "spec.pdf")]);
    assert_eq!(listed[1], rec);
    let mut check = FileCheck::new();
    let got = read_all(s.get_attachment(&run.id, &name("spec")).await.expect("get")).await;
    check.update(&got);
    check
        .finish_attachment(&rec)
        .expect("the bytes match the record");
    assert_eq!(got, big);

    let replaced = s
        .put_attachment(
            &run.id,
            &name("spec"),
            &file("v2.txt"),
            bytes_stream(vec![b"v2".to_vec()]),
            1 << 20,
        )
        .await
        .expect("replace");
    let AttachmentPut::Stored(replaced) = replaced else {
        panic!("replacement not stored")
    };
    assert_eq!(
        read_all(s.get_attachment(&run.id, &name("spec")).await.expect("get")).await,
        b"v2"
    );
    let listed = s.list_attachments(&run.id).await.expect("list");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1], replaced);
    assert!(s.list_files(&run.id).await.expect("files").is_empty());
}

/// Over the cap nothing is kept (and an earlier attachment of the name
/// stays); a stream that fails keeps nothing.
pub async fn attachments_cap_and_failed_stream_keep_nothing(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("attachcap")).await.expect("create");
    s.put_attachment(
        &run.id,
        &name("a"),
        &file("a"),
        bytes_stream(vec![b"old".to_vec()]),
        10,
    )
    .await
    .expect("put");
    let out = s
        .put_attachment(
            &run.id,
            &name("a"),
            &file("a"),
            bytes_stream(vec![vec![7; 6], vec![7; 6]]),
            10,
        )
        .await
        .expect("over the cap is an outcome");
    assert!(
        matches!(out, AttachmentPut::CapExceeded { cap: 10, .. }),
        "{out:?}"
    );
    let out = s
        .put_attachment(
            &run.id,
            &name("b"),
            &file("b"),
            bytes_stream(vec![vec![1; 11]]),
            10,
        )
        .await
        .expect("over");
    assert!(matches!(out, AttachmentPut::CapExceeded { .. }));
    let broken: ByteStream = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"part")),
        Err(std::io::Error::other("the reader broke")),
    ]));
    assert!(
        s.put_attachment(&run.id, &name("c"), &file("c"), broken, 100)
            .await
            .is_err()
    );
    let listed = s.list_attachments(&run.id).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].size, 3);
    assert_eq!(
        read_all(s.get_attachment(&run.id, &name("a")).await.expect("get")).await,
        b"old"
    );
}

/// An unknown run is `RunNotFound` for every attachment method; an unknown
/// name is `FileNotFound` naming the attachment.
pub async fn attachments_unknown_run_or_name(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let ghost = RunId::parse("ghost-attach").expect("id");
    let e = s
        .put_attachment(
            &ghost,
            &name("a"),
            &file("a"),
            bytes_stream(vec![b"x".to_vec()]),
            10,
        )
        .await
        .expect_err("no run");
    assert!(matches!(e, StoreError::RunNotFound(_)), "{e}");
    assert!(matches!(
        s.list_attachments(&ghost).await,
        Err(StoreError::RunNotFound(_))
    ));
    assert!(matches!(
        s.get_attachment(&ghost, &name("a")).await,
        Err(StoreError::RunNotFound(_))
    ));
    let run = s.create_run(new_run("attachnone")).await.expect("create");
    assert!(s.list_attachments(&run.id).await.expect("list").is_empty());
    match s.get_attachment(&run.id, &name("nope")).await {
        Err(StoreError::FileNotFound(what)) => assert_eq!(what, "attachment nope"),
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("an unknown attachment was served"),
    }
}
