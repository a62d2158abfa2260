use std::collections::BTreeMap;

use iterion_dsl::ir::AttachmentDecl;

use super::*;

fn workflow(decls: &[(&str, bool)]) -> ir::Workflow {
    let src = "workflow w:\n  entry: a\n  a -> done\ntool a:\n  command: \"true\"\n";
    let mut w = iterion_dsl::compile_source(src, std::path::Path::new("w.iter"))
        .workflows
        .into_iter()
        .next()
        .expect("a workflow");
    w.attachments = decls
        .iter()
        .map(|(n, required)| {
            (
                (*n).to_owned(),
                AttachmentDecl {
                    kind: "file".into(),
                    required: *required,
                    ..AttachmentDecl::default()
                },
            )
        })
        .collect::<BTreeMap<_, _>>();
    w
}

fn attach(name: &str, path: &Path) -> LaunchAttachment {
    LaunchAttachment::parse(&format!("{name}={}", path.display())).expect("NAME=PATH")
}

#[test]
fn the_argument_is_name_equals_path() {
    let a = LaunchAttachment::parse("spec=/tmp/a=b.pdf").expect("parse");
    assert_eq!(a.name.as_str(), "spec");
    assert_eq!(a.path, PathBuf::from("/tmp/a=b.pdf"));
    for bad in ["spec", "spec=", "=x", "2x=/a", "a-b=/a"] {
        let e = LaunchAttachment::parse(bad).expect_err(bad);
        assert_eq!(e.code(), "ATTACHMENT_BAD_ARGUMENT", "{bad}");
    }
}

/// Every bad input of a launch, each with its own code; nothing is read
/// from a source that is not a regular file.
#[test]
fn bad_launches_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("spec.pdf");
    std::fs::write(&file, b"%PDF").expect("file");
    let link = dir.path().join("link.pdf");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("fifo");
    let w = workflow(&[("spec", true), ("logo", false)]);
    let code = |given: &[LaunchAttachment]| check_launch(&w, given).map_err(|e| e.code()).err();
    assert_eq!(code(&[attach("spec", &file)]), None);
    assert_eq!(
        code(&[attach("spec", &file), attach("logo", &file)]),
        None,
        "one file may serve two names"
    );
    assert_eq!(code(&[]), Some("ATTACHMENT_REQUIRED"));
    assert_eq!(code(&[attach("logo", &file)]), Some("ATTACHMENT_REQUIRED"));
    assert_eq!(
        code(&[attach("spec", &file), attach("nope", &file)]),
        Some("ATTACHMENT_UNDECLARED")
    );
    assert_eq!(
        code(&[attach("spec", &file), attach("spec", &file)]),
        Some("ATTACHMENT_DUPLICATE")
    );
    assert_eq!(
        code(&[attach("spec", &dir.path().join("missing"))]),
        Some("ATTACHMENT_NOT_FOUND")
    );
    assert_eq!(
        code(&[attach("spec", &link)]),
        Some("ATTACHMENT_IS_A_SYMLINK")
    );
    assert_eq!(
        code(&[attach("spec", dir.path())]),
        Some("ATTACHMENT_NOT_A_FILE")
    );
    assert_eq!(
        code(&[attach("spec", &fifo)]),
        Some("ATTACHMENT_NOT_A_FILE")
    );
    assert_eq!(
        code(&[attach("spec", Path::new("/dev/null"))]),
        Some("ATTACHMENT_NOT_A_FILE")
    );
    // A sparse file over the cap: refused by its size, never read.
    let huge = dir.path().join("huge.bin");
    let f = std::fs::File::create(&huge).expect("huge");
    f.set_len(ATTACHMENT_CAP + 1).expect("sparse");
    assert_eq!(code(&[attach("spec", &huge)]), Some("ATTACHMENT_TOO_LARGE"));
    let undeclared = workflow(&[]);
    let e = check_launch(&undeclared, &[attach("spec", &file)]).expect_err("none declared");
    assert!(e.to_string().contains("declared: none"), "{e}");
}

#[test]
fn the_total_and_the_count_are_bounded() {
    let dir = tempfile::tempdir().expect("dir");
    let names: Vec<String> = (0..=MAX_ATTACHMENTS).map(|i| format!("a{i}")).collect();
    let decls: Vec<(&str, bool)> = names.iter().map(|n| (n.as_str(), false)).collect();
    let w = workflow(&decls);
    let file = dir.path().join("x");
    std::fs::write(&file, b"x").expect("file");
    let given: Vec<LaunchAttachment> = names.iter().map(|n| attach(n, &file)).collect();
    assert_eq!(
        check_launch(&w, &given).expect_err("too many").code(),
        "ATTACHMENT_TOO_MANY"
    );
    // Five files each at the cap are over the run's total.
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(ATTACHMENT_CAP))
        .expect("big");
    let given: Vec<LaunchAttachment> = names[..5].iter().map(|n| attach(n, &big)).collect();
    assert_eq!(
        check_launch(&w, &given).expect_err("total").code(),
        "ATTACHMENTS_TOO_LARGE"
    );
}

#[test]
fn accept_mime_is_matched_by_type_and_subtype() {
    assert!(mime_matches("image/*", "image/png"));
    assert!(mime_matches("*/*", "application/pdf"));
    assert!(mime_matches("Application/PDF", "application/pdf"));
    assert!(!mime_matches("image/*", "application/pdf"));
    assert!(!mime_matches("bad", "image/png"));
    let dir = tempfile::tempdir().expect("dir");
    let pdf = dir.path().join("a.pdf");
    std::fs::write(&pdf, b"%PDF").expect("pdf");
    let mut w = workflow(&[("logo", false)]);
    if let Some(d) = w.attachments.get_mut("logo") {
        d.accept_mime = vec!["image/*".into()];
    }
    let e = check_launch(&w, &[attach("logo", &pdf)]).expect_err("a pdf is no image");
    assert_eq!(e.code(), "ATTACHMENT_TYPE_REFUSED");
    let png = dir.path().join("a.png");
    std::fs::write(&png, b"png").expect("png");
    check_launch(&w, &[attach("logo", &png)]).expect("an image");
}

#[test]
fn mime_types_follow_the_file_name() {
    assert_eq!(provide::mime_of("a.PNG"), "image/png");
    assert_eq!(provide::mime_of("spec.pdf"), "application/pdf");
    assert_eq!(provide::mime_of("noext"), "application/octet-stream");
}
