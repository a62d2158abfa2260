//! Copy-based workspaces (issue 14 item 2): the copy in (what it reads,
//! what it refuses) and the export back onto a real host directory — the
//! run's changes, creations and deletions land; host edits made during the
//! run are kept; hostile members are declined by name and nothing outside
//! the workspace (or in iterion's own area) is touched. The container side
//! is the scripted `ServedRun` (the engines' own archives are exercised by
//! the CLI's bindless e2e tests).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use bytes::Bytes;
use futures_util::StreamExt;
use iterion_core::{EventKind, WorkspaceCopy};
use iterion_readback::workspace::{ExportOptions, copy_in, export};

use crate::readback::support::*;

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every entry of a host tree (symlinks as `-> target`), for before/after.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{e}")) {
            let e = e.unwrap_or_else(|e| panic!("{e}"));
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{e}"));
            let v = if meta.file_type().is_symlink() {
                format!(
                    "-> {}",
                    std::fs::read_link(&p).unwrap_or_default().display()
                )
            } else if meta.is_dir() {
                stack.push(p.clone());
                "dir".to_owned()
            } else {
                String::from_utf8_lossy(&read(&p)).into_owned()
            };
            out.insert(rel, v);
        }
    }
    out
}

struct Copied {
    archive: Vec<u8>,
    copy: WorkspaceCopy,
}

async fn copy(ws: &Path, state: &Path, exclude: &[&str]) -> Copied {
    let copy = WorkspaceCopy {
        host: ws.display().to_string(),
        exclude: exclude.iter().map(|s| (*s).to_owned()).collect(),
        manifest: Some(state.join("manifest").display().to_string()),
    };
    let (mut stream, task) = copy_in(&copy, Some((1000, 1000))).unwrap_or_else(|e| panic!("{e}"));
    let mut archive = Vec::new();
    while let Some(c) = stream.next().await {
        archive.extend_from_slice(&c.unwrap_or_else(|e| panic!("{e}")));
    }
    task.await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    Copied { archive, copy }
}

/// What the container would export after the run: the copied archive
/// re-rooted under `workspace/`, each member kept, dropped (deleted by the
/// run) or given new content (changed by the run, a later mtime), plus
/// `extra` members the run created.
fn after_run(
    copied: &[u8],
    edit: &dyn Fn(&str) -> Option<Option<Vec<u8>>>,
    extra: Archive,
) -> Bytes {
    let mut out = tar::Builder::new(Vec::new());
    let mut root = tar::Header::new_gnu();
    root.set_entry_type(tar::EntryType::Directory);
    root.set_mode(0o755);
    root.set_size(0);
    out.append_data(&mut root, "workspace/", std::io::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut ar = tar::Archive::new(copied);
    for e in ar.entries().unwrap_or_else(|e| panic!("{e}")) {
        let mut e = e.unwrap_or_else(|e| panic!("{e}"));
        let path = e
            .path()
            .unwrap_or_else(|e| panic!("{e}"))
            .display()
            .to_string();
        let mut h = e.header().clone();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap_or_else(|e| panic!("{e}"));
        match edit(path.trim_end_matches('/')) {
            Some(None) => continue,
            Some(Some(new)) => {
                h.set_size(new.len() as u64);
                h.set_mtime(h.mtime().unwrap_or(0) + 100);
                data = new;
            }
            None => {}
        }
        out.append_data(&mut h, format!("workspace/{path}"), data.as_slice())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut bytes = out.into_inner().unwrap_or_else(|e| panic!("{e}"));
    // Drop the end marker, append the extra members (and their marker).
    bytes.truncate(bytes.len() - 1024);
    let mut extra = extra.finish().to_vec();
    bytes.append(&mut extra);
    Bytes::from(bytes)
}

fn served(archive: Bytes) -> ServedRun {
    ServedRun::new().serve("/workspace", Source::Bytes(archive, 1000))
}

#[tokio::test]
async fn the_copy_reads_the_tree_without_following_links_and_leaves_iterions_areas_out() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = ws.path();
    write(&w.join("run.sh"), b"echo hi\n");
    std::fs::set_permissions(w.join("run.sh"), std::fs::Permissions::from_mode(0o4755))
        .unwrap_or_else(|e| panic!("{e}"));
    write(&w.join("src/deep/a.txt"), b"alpha");
    write(&w.join(".iterion/store.db"), b"other runs");
    write(&w.join("state/secret"), b"state dir");
    std::os::unix::fs::symlink("/etc/passwd", w.join("passwd")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("src/deep", w.join("deep")).unwrap_or_else(|e| panic!("{e}"));
    rustix_mkfifo(&w.join("pipe"));
    let copied = copy(w, state.path(), &[".iterion", "state"]).await;
    let mut names = BTreeMap::new();
    let mut ar = tar::Archive::new(copied.archive.as_slice());
    for e in ar.entries().unwrap_or_else(|e| panic!("{e}")) {
        let mut e = e.unwrap_or_else(|e| panic!("{e}"));
        let name = e
            .path()
            .unwrap_or_else(|e| panic!("{e}"))
            .display()
            .to_string();
        let h = e.header();
        assert_eq!(h.uid().ok(), Some(1000), "{name} owned by the sandbox user");
        let kind = h.entry_type();
        let mode = h.mode().unwrap_or(0);
        assert_eq!(mode & 0o7000, 0, "{name}: no setuid/setgid/sticky");
        let v = if kind.is_symlink() {
            format!(
                "-> {}",
                e.link_name().ok().flatten().unwrap_or_default().display()
            )
        } else {
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap_or_default();
            s
        };
        names.insert(name, v);
    }
    assert_eq!(names.get("run.sh").map(String::as_str), Some("echo hi\n"));
    assert_eq!(
        names.get("src/deep/a.txt").map(String::as_str),
        Some("alpha")
    );
    assert_eq!(
        names.get("passwd").map(String::as_str),
        Some("-> /etc/passwd"),
        "a link stays a link"
    );
    assert_eq!(names.get("deep").map(String::as_str), Some("-> src/deep"));
    assert!(!names.contains_key("pipe"), "a fifo is never read");
    assert!(
        !names
            .keys()
            .any(|n| n.starts_with(".iterion") || n.starts_with("state")),
        "iterion's areas are never copied: {names:?}"
    );
    let manifest = read(&state.path().join("manifest"));
    assert!(manifest.starts_with(b"iterion-workspace-manifest 1\n"));
    let mode = std::fs::metadata(state.path().join("manifest"))
        .unwrap_or_else(|e| panic!("{e}"))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The record is never reused: a second copy to the same record fails.
    let again = copy_in(&copied.copy, None).err().map(|e| e.code());
    assert_eq!(again, Some("WORKSPACE_RECORD_FAILED"));
}

fn rustix_mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    assert!(status.success());
}

#[tokio::test]
async fn a_workspace_that_is_a_link_a_file_or_missing_is_a_typed_refusal() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap_or_else(|e| panic!("{e}"));
    write(&tmp.path().join("file"), b"x");
    let code = |p: &Path| {
        copy_in(
            &WorkspaceCopy {
                host: p.display().to_string(),
                ..WorkspaceCopy::default()
            },
            None,
        )
        .err()
        .map(|e| e.code())
    };
    assert_eq!(
        code(&tmp.path().join("link")),
        Some("WORKSPACE_IS_A_SYMLINK")
    );
    assert_eq!(
        code(&tmp.path().join("file")),
        Some("WORKSPACE_NOT_A_DIRECTORY")
    );
    assert_eq!(code(&tmp.path().join("gone")), Some("WORKSPACE_GONE"));
    let e = copy_in(
        &WorkspaceCopy {
            host: tmp.path().join("link").display().to_string(),
            ..WorkspaceCopy::default()
        },
        None,
    )
    .err()
    .map(|e| e.into_driver_error().code());
    assert_eq!(e, Some("SANDBOX_SPEC_REFUSED"));
}

#[tokio::test]
async fn the_export_lands_the_runs_changes_and_keeps_host_edits() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = ws.path();
    write(&w.join("keep.txt"), b"untouched");
    write(&w.join("edit.txt"), b"before");
    write(&w.join("gone.txt"), b"deleted by the run");
    write(&w.join("old/inner.txt"), b"whole dir deleted");
    write(&w.join("both.txt"), b"before");
    write(&w.join("hostedit-deleted.txt"), b"before");
    write(&w.join(".iterion/store.db"), b"store");
    let copied = copy(w, state.path(), &[".iterion"]).await;
    // During the run, the user edits two files on the host.
    write(&w.join("both.txt"), b"host edit");
    write(&w.join("hostedit-deleted.txt"), b"host edit");
    write(&w.join("host-new.txt"), b"created on the host");
    let after = after_run(
        &copied.archive,
        &|p| match p {
            "edit.txt" => Some(Some(b"after".to_vec())),
            "both.txt" => Some(Some(b"run edit".to_vec())),
            "gone.txt" | "old" | "old/inner.txt" | "hostedit-deleted.txt" => Some(None),
            _ => None,
        },
        Archive::new()
            .dir("workspace/new/")
            .file("workspace/new/made.txt", b"made by the run")
            .raw(b"workspace/new/link", b'2', b"", b"made.txt"),
    );
    let run = served(after);
    let report = export(&run, &copied.copy, ExportOptions::default()).await;
    let t = tree(w);
    assert_eq!(t["keep.txt"], "untouched");
    assert_eq!(t["edit.txt"], "after");
    assert_eq!(t["new/made.txt"], "made by the run");
    assert_eq!(t["new/link"], "-> made.txt");
    assert!(
        !t.contains_key("gone.txt"),
        "what the run deleted is deleted: {t:?}"
    );
    assert!(!t.contains_key("old"), "{t:?}");
    assert_eq!(
        t["both.txt"], "host edit",
        "a host edit is never overwritten"
    );
    assert_eq!(t["hostedit-deleted.txt"], "host edit", "nor deleted");
    assert_eq!(t["host-new.txt"], "created on the host");
    assert_eq!(t[".iterion/store.db"], "store");
    assert_eq!(report.deleted, 3, "{report:?}");
    assert_eq!(
        report.files, 2,
        "only what the run changed is written: {report:?}"
    );
    assert!(report.complete);
    let mut kept = report.kept.clone();
    kept.sort();
    assert_eq!(kept, vec!["both.txt", "hostedit-deleted.txt"]);
    match report.events.as_slice() {
        [
            EventKind::SandboxWorkspaceExportFailed {
                reason,
                kept,
                declined,
                ..
            },
        ] => {
            assert_eq!(reason, "host_changed");
            assert_eq!(kept.len(), 2);
            assert!(declined.is_empty(), "{declined:?}");
        }
        other => panic!("{other:?}"),
    }
    // A clean second round (nothing changed anywhere) is `exported`.
    let state2 = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copied = copy(w, state2.path(), &[".iterion"]).await;
    let report = export(
        &served(after_run(&copied.archive, &|_| None, Archive::new())),
        &copied.copy,
        ExportOptions::default(),
    )
    .await;
    assert_eq!((report.files, report.deleted), (0, 0), "{report:?}");
    assert!(matches!(
        report.events.as_slice(),
        [EventKind::SandboxWorkspaceExported {
            files: 0,
            deleted: 0,
            ..
        }]
    ));
    assert_eq!(tree(w), t);
}

#[tokio::test]
async fn hostile_members_are_declined_and_nothing_outside_is_touched() {
    let outside = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let canary = outside.path().join("canary");
    write(&canary, b"untouched");
    let canary_abs = canary.display().to_string();
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = ws.path();
    write(&w.join("a.txt"), b"a");
    write(&w.join(".iterion/store.db"), b"store");
    // A link of the host's own that leads out: never written through.
    std::os::unix::fs::symlink(outside.path(), w.join("out")).unwrap_or_else(|e| panic!("{e}"));
    let copied = copy(w, state.path(), &[".iterion"]).await;
    let before_outside = tree(outside.path());
    let hostile = Archive::new()
        .file("workspace/good.txt", b"good")
        .raw(b"workspace/passwd", b'2', b"", b"/etc/passwd")
        .raw(b"workspace/up", b'2', b"", b"../..")
        .raw(b"workspace/canary", b'2', b"", canary_abs.as_bytes())
        .raw(b"workspace/shadow", b'1', b"", b"/etc/shadow")
        .raw(b"workspace/hl-up", b'1', b"", b"workspace/../x")
        .file("workspace/../escape", b"dotdot")
        .file("/abs", b"absolute")
        .file("workspace/out/evil", b"through the host's link")
        // A link to a directory and a file through it, in that order: the
        // file lands in a real directory, the link is then refused.
        .raw(b"workspace/d", b'2', b"", b"sub")
        .file("workspace/d/x", b"in d")
        // Links that are each inside but chain out.
        .raw(b"workspace/s/l1", b'2', b"", b"..")
        .raw(b"workspace/l2", b'2', b"", b"s/l1/..")
        .file("workspace/.iterion/store.db", b"forged store")
        .raw(b"workspace/tty", b'3', b"", b"")
        .raw(b"workspace/pipe", b'6', b"", b"")
        .gnu_sparse(b"workspace/sparse", 1 << 40)
        .file("workspace/last.txt", b"last")
        .finish();
    let run = served(hostile);
    let report = export(&run, &copied.copy, ExportOptions::default()).await;
    let t = tree(w);
    assert_eq!(t["good.txt"], "good");
    assert_eq!(t["last.txt"], "last");
    assert_eq!(t["d/x"], "in d");
    assert_eq!(t["d"], "dir", "the link over a real directory was refused");
    assert_eq!(
        t[".iterion/store.db"], "store",
        "iterion's area is never written"
    );
    assert_eq!(t["out"], format!("-> {}", outside.path().display()));
    assert_eq!(
        t["a.txt"], "a",
        "not in the export but the export was not clean: kept"
    );
    for absent in [
        "passwd", "up", "canary", "shadow", "hl-up", "tty", "pipe", "sparse", "l2",
    ] {
        assert!(!t.contains_key(absent), "{absent} written: {t:?}");
    }
    assert_eq!(
        tree(outside.path()),
        before_outside,
        "nothing outside changed"
    );
    assert_eq!(read(&canary), b"untouched");
    assert!(!w.parent().unwrap_or(w).join("escape").exists());
    match report.events.as_slice() {
        [
            EventKind::SandboxWorkspaceExportFailed {
                reason, declined, ..
            },
        ] => {
            assert_eq!(reason, "archive_error", "{declined:?}");
            for name in [
                "passwd",
                "canary",
                "shadow",
                "out/evil",
                ".iterion/store.db",
                "tty",
                "pipe",
                "l2",
                "/abs",
            ] {
                assert!(
                    declined.iter().any(|d| d.contains(name)),
                    "{name} not named in {declined:?}"
                );
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        report.deleted, 0,
        "a member of unknown name: nothing is deleted"
    );
}

#[tokio::test]
async fn an_oversized_member_is_declined_at_its_header_and_the_rest_still_lands() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copied = copy(ws.path(), state.path(), &[]).await;
    let head = Archive::new()
        .dir("workspace/")
        .file("workspace/a.txt", b"a")
        .unfinished();
    // 1 TiB claimed, then zeros forever: reading past it never ends.
    let run = ServedRun::new()
        .serve(
            "/workspace",
            endless_member(head, b"workspace/huge", 1 << 40),
        )
        .listing("/workspace", &[b"a.txt", b"huge", b"z.txt"])
        .serve(
            "/workspace/z.txt",
            Source::Bytes(Archive::new().file("z.txt", b"z").finish(), 512),
        );
    let options = ExportOptions {
        cap: 1 << 20,
        ..ExportOptions::default()
    };
    let report = export(&run, &copied.copy, options).await;
    assert_eq!(read(&ws.path().join("a.txt")), b"a");
    assert_eq!(read(&ws.path().join("z.txt")), b"z");
    assert!(!ws.path().join("huge").exists());
    assert_eq!(report.reason, Some("cap_exceeded"), "{report:?}");
    assert!(report.declined.iter().any(|d| d.contains("huge")));
}

#[tokio::test]
async fn a_failed_export_is_an_event_and_leaves_the_host_as_it_was() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(&ws.path().join("a.txt"), b"a");
    let copied = copy(ws.path(), state.path(), &[]).await;
    let before = tree(ws.path());
    // The container is gone: nothing deleted, the event says why.
    let report = export(
        &ServedRun::new().serve("/workspace", Source::Gone),
        &copied.copy,
        ExportOptions::default(),
    )
    .await;
    assert_eq!(tree(ws.path()), before);
    assert!(matches!(
        report.events.as_slice(),
        [EventKind::SandboxWorkspaceExportFailed { reason, .. }] if reason == "container_gone"
    ));
    // A cut archive: what came before the cut lands, nothing is deleted.
    let cut = Archive::new()
        .dir("workspace/")
        .file("workspace/b.txt", b"b")
        .claim(b"workspace/c.txt", b'0', 4096, b"only a bit")
        .unfinished();
    let report = export(&served(cut), &copied.copy, ExportOptions::default()).await;
    assert_eq!(read(&ws.path().join("a.txt")), b"a");
    assert_eq!(read(&ws.path().join("b.txt")), b"b");
    assert!(
        !ws.path().join("c.txt").exists(),
        "a cut file is never written short"
    );
    assert_eq!(report.reason, Some("archive_error"));
    assert_eq!(report.deleted, 0);
    // The workspace vanished during the run.
    let gone = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let g = gone.path().join("ws");
    std::fs::create_dir(&g).unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copied = copy(&g, state.path(), &[]).await;
    std::fs::remove_dir_all(&g).unwrap_or_else(|e| panic!("{e}"));
    let report = export(
        &served(Archive::new().file("workspace/a", b"a").finish()),
        &copied.copy,
        ExportOptions::default(),
    )
    .await;
    assert_eq!(report.reason, Some("workspace_gone"), "{report:?}");
    assert!(!g.exists(), "never recreated");
}

#[tokio::test]
async fn as_root_in_someone_elses_checkout_the_export_writes_as_its_owner() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1);
    assert_eq!(me, 0, "this test needs root (as CI runs it)");
    std::os::unix::fs::chown(ws.path(), Some(4242), Some(4243)).unwrap_or_else(|e| panic!("{e}"));
    let copied = copy(ws.path(), state.path(), &[]).await;
    let run = served(
        Archive::new()
            .dir("workspace/")
            .dir("workspace/d/")
            .file("workspace/d/f.txt", b"f")
            .finish(),
    );
    export(&run, &copied.copy, ExportOptions::default()).await;
    for p in ["d", "d/f.txt"] {
        let m = std::fs::metadata(ws.path().join(p)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.uid(), m.gid()), (4242, 4243), "{p}");
    }
}
