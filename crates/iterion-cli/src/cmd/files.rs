//! `iterion files RUN_ID [--json]` lists a run's drained files (path, size,
//! sha256, status) and the drain status of the set — complete, partial with
//! its declined members, failed, stale (ADR-143 R7); `--get PATH [-o OUT]`
//! streams one file to OUT (written beside it and renamed, so a half-written
//! OUT never appears) or to stdout, and only once its bytes match the size
//! and sha256 recorded when it was drained.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::Context as _;
use futures_util::StreamExt;
use iterion_core::display::printable;
use iterion_core::store::{DrainRecord, FileCheck, RunFilePath, RunFileRecord};
use iterion_core::view::{FileStatus, FilesView};
use iterion_core::{RunId, RunStore, StoreError};

use crate::cli::FilesArgs;
use crate::cmd::store_views::{parse_run_id, require_run, table};
use crate::exit::{Exit, UserInputError};
use crate::stores::{self, store_error};

/// Entry point of the verb.
pub async fn run(args: FilesArgs) -> anyhow::Result<Exit> {
    let run = parse_run_id(&args.run_id)?;
    let get = args
        .get
        .as_deref()
        .map(|p| RunFilePath::parse(p).map_err(|e| UserInputError::new(e.to_string())))
        .transpose()?;
    let store = stores::open_from_env().await?;
    match get {
        Some(path) => {
            fetch(
                store.as_ref(),
                &run,
                &path,
                args.output.as_deref(),
                &mut std::io::stdout(),
            )
            .await
        }
        None => list(store.as_ref(), &run, args.json, &mut std::io::stdout()).await,
    }
}

/// List files and the drain status.
pub(crate) async fn list(
    store: &dyn RunStore,
    run: &RunId,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    require_run(store, run).await?;
    let files = store.list_files(run).await.map_err(store_error)?;
    let drain = store.get_drain(run).await.map_err(store_error)?;
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&files_json(run, &files, drain.as_ref()))?
        )?;
    } else {
        out.write_all(render_files(&files, drain.as_ref()).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// The human listing; declined members are listed as `declined`.
pub(crate) fn render_files(files: &[RunFileRecord], drain: Option<&DrainRecord>) -> String {
    let status = FileStatus::under(drain).as_str();
    let mut rows: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            vec![
                f.path.to_string(),
                f.size.to_string(),
                f.sha256.clone(),
                status.to_owned(),
            ]
        })
        .collect();
    if let Some(d) = drain {
        rows.extend(d.declined.iter().map(|p| {
            vec![
                p.clone(),
                "-".to_owned(),
                "-".to_owned(),
                "declined".to_owned(),
            ]
        }));
    }
    let mut s = if rows.is_empty() {
        "no files\n".to_owned()
    } else {
        table(&["PATH", "SIZE", "SHA256", "STATUS"], &rows)
    };
    match drain {
        None => s.push_str("drain: none recorded\n"),
        Some(d) => {
            s.push_str(&format!("drain: {}", d.status.as_str()));
            if let Some(r) = &d.reason {
                s.push_str(&format!(" ({})", printable(r)));
            }
            if !d.declined.is_empty() {
                let names: Vec<_> = d.declined.iter().map(|n| printable(n)).collect();
                s.push_str(&format!("; declined: {}", names.join(", ")));
            }
            if d.stale {
                s.push_str("; stale: what is stored may be out of date");
            }
            s.push('\n');
        }
    }
    s
}

/// The JSON document of `iterion files --json` (the shape the studio's
/// `/api/runs/ID/files` serves too).
pub(crate) fn files_json(
    run: &RunId,
    files: &[RunFileRecord],
    drain: Option<&DrainRecord>,
) -> FilesView {
    FilesView::of(run, files, drain)
}

/// Stream one file to `output` (atomically) or to `out`, after checking
/// its bytes against the size and sha256 its record holds: the bytes are
/// spooled to a temp file first (beside OUT, or an anonymous one for
/// stdout), and nothing reaches OUT or stdout unless they match (issue 19
/// item 3: a forged file is refused, typed, exit 1).
pub(crate) async fn fetch(
    store: &dyn RunStore,
    run: &RunId,
    path: &RunFilePath,
    output: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    require_run(store, run).await?;
    let record = store
        .list_files(run)
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|f| f.path == *path)
        .ok_or_else(|| store_error(StoreError::FileNotFound(path.to_string())))?;
    let mut stream = store.get_file(run, path).await.map_err(store_error)?;
    let mut spool = match output {
        None => Spool::Anonymous(
            tempfile::tempfile().context("creating a temp file to check the file in")?,
        ),
        Some(target) => {
            let dir = match target.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
                _ => std::path::PathBuf::from("."),
            };
            Spool::Named(
                tempfile::NamedTempFile::new_in(&dir)
                    .with_context(|| format!("creating a temp file in {}", dir.display()))?,
            )
        }
    };
    let mut check = FileCheck::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| format!("reading {path} from the store"))?;
        check.update(&chunk);
        spool
            .file()
            .write_all(&chunk)
            .context("spooling the file to check it")?;
    }
    check.finish(&record).map_err(store_error)?;
    match (spool, output) {
        (Spool::Named(tmp), Some(target)) => {
            tmp.as_file()
                .sync_all()
                .with_context(|| format!("writing {}", target.display()))?;
            tmp.persist(target)
                .with_context(|| format!("writing {}", target.display()))?;
        }
        (mut spool, _) => {
            let file = spool.file();
            file.seek(SeekFrom::Start(0))
                .context("rewinding the checked file")?;
            std::io::copy(file, out)?;
            out.flush()?;
        }
    }
    Ok(Exit::Success)
}

/// Where `--get` holds the bytes until they are checked.
enum Spool {
    /// Beside OUT, renamed over it once checked.
    Named(tempfile::NamedTempFile),
    /// For stdout, removed when dropped.
    Anonymous(std::fs::File),
}

impl Spool {
    fn file(&mut self) -> &mut std::fs::File {
        match self {
            Self::Named(t) => t.as_file_mut(),
            Self::Anonymous(f) => f,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use bytes::Bytes;
    use iterion_core::store::{DrainStatus, NewRun, PutOutcome};
    use iterion_core::{ByteStream, Trust};
    use time::macros::datetime;

    use super::*;

    fn rec(path: &str, size: u64, sha: &str) -> RunFileRecord {
        RunFileRecord {
            path: RunFilePath::parse(path).unwrap(),
            size,
            sha256: sha.into(),
            stored_at: datetime!(2026-11-29 08:00:00 UTC),
        }
    }

    fn fixed() -> (Vec<RunFileRecord>, DrainRecord) {
        (
            vec![
                rec(
                    "report.md",
                    1234,
                    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                ),
                rec(
                    "out/coverage.json",
                    42,
                    "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
                ),
            ],
            DrainRecord {
                status: DrainStatus::Partial,
                reason: Some("cap_exceeded".into()),
                declined: vec!["big.bin".into()],
                stale: false,
                metered: vec![("/iterion/artifact-files".into(), 268_435_500)],
                updated_at: datetime!(2026-11-29 08:00:00 UTC),
            },
        )
    }

    #[test]
    fn files_human() {
        let (files, drain) = fixed();
        insta::assert_snapshot!("files_partial", render_files(&files, Some(&drain)));
        let stale = DrainRecord {
            status: DrainStatus::Failed,
            reason: Some("container_gone".into()),
            declined: vec![],
            stale: true,
            ..drain
        };
        insta::assert_snapshot!("files_failed_stale", render_files(&files, Some(&stale)));
        insta::assert_snapshot!("files_no_drain", render_files(&[], None));
    }

    #[test]
    fn hostile_names_neither_forge_rows_nor_reach_the_terminal() {
        // The attack: a drained file named to look like a second row, and
        // one carrying ANSI escapes and a bidi override.
        let forged = "a.txt  1  deadbeef  stored\nforged.txt";
        let ansi = "\u{1b}[2J\u{1b}[31mred\u{202e}txt.exe";
        let files = vec![rec(forged, 1, "00"), rec(ansi, 2, "11")];
        let drain = DrainRecord {
            status: DrainStatus::Partial,
            reason: Some("archive_error".into()),
            declined: vec!["bad\u{1b}]0;title\u{7}".into()],
            stale: false,
            metered: vec![],
            updated_at: datetime!(2026-11-29 08:00:00 UTC),
        };
        let text = render_files(&files, Some(&drain));
        // One header, two file rows, one declined row, the drain line.
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(
            !text.chars().any(|c| c != '\n' && c.is_control()),
            "{text:?}"
        );
        assert!(!text.contains('\u{202e}'));
        assert!(
            text.contains("a.txt  1  deadbeef  stored\\nforged.txt"),
            "{text}"
        );
        assert!(text.contains("\\x1b[31mred\\u{202e}txt.exe"), "{text}");
        // JSON keeps the names exact.
        let run = RunId::parse("r1").unwrap();
        let doc = files_json(&run, &files, Some(&drain));
        assert_eq!(doc.files[0].path.as_str(), forged);
        assert_eq!(doc.files[1].path.as_str(), ansi);
    }

    #[test]
    fn files_json_document() {
        let (files, drain) = fixed();
        let run = RunId::parse("r1").unwrap();
        insta::assert_json_snapshot!(files_json(&run, &files, Some(&drain)));
    }

    #[tokio::test]
    async fn get_writes_the_file_and_unknowns_fail_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let store = iterion_store_sqlite::SqliteStore::open(&dir.path().join("store")).unwrap();
        let run = store
            .create_run(NewRun {
                id: RunId::parse("r1").unwrap(),
                workflow: "w".into(),
                file: "w.iter".into(),
                trust: Trust::Trusted,
                owner: None,
            })
            .await
            .unwrap();
        let content: ByteStream = Box::pin(futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"hello ")),
            Ok(Bytes::from_static(b"world")),
        ]));
        let p = RunFilePath::parse("out/a.txt").unwrap();
        assert!(matches!(
            store.put_file(&run.id, &p, content, 100).await.unwrap(),
            PutOutcome::Stored(_)
        ));
        let target = dir.path().join("a.txt");
        fetch(&store, &run.id, &p, Some(&target), &mut Vec::new())
            .await
            .unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello world");
        let mut out = Vec::new();
        fetch(&store, &run.id, &p, None, &mut out).await.unwrap();
        assert_eq!(out, b"hello world");

        let mut out = Vec::new();
        list(&store, &run.id, true, &mut out).await.unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["files"][0]["path"], "out/a.txt");
        assert_eq!(doc["files"][0]["size"], 11);
        assert!(doc["drain"].is_null());

        let missing = RunFilePath::parse("nope").unwrap();
        let err = fetch(&store, &run.id, &missing, None, &mut Vec::new())
            .await
            .expect_err("missing file");
        assert!(format!("{err:#}").contains("STORE_FILE_NOT_FOUND"));
        assert_eq!(crate::exit::report(Err(err)), Exit::Failure);
        // A stored file rewritten behind the store's back (the attack of
        // issue 19 item 3): refused, typed, exit 1, and nothing written.
        let stored = dir.path().join("store/runs/r1/files/out/a.txt");
        std::fs::write(&stored, b"hello w0rld").unwrap();
        let forged = dir.path().join("forged.txt");
        let mut out = Vec::new();
        let err = fetch(&store, &run.id, &p, Some(&forged), &mut out)
            .await
            .expect_err("tampered");
        assert!(
            format!("{err:#}").contains("STORE_FILE_TAMPERED"),
            "{err:#}"
        );
        assert_eq!(crate::exit::report(Err(err)), Exit::Failure);
        assert!(!forged.exists(), "nothing written to -o");
        let err = fetch(&store, &run.id, &p, None, &mut out)
            .await
            .expect_err("tampered");
        assert!(
            format!("{err:#}").contains("does not match its record"),
            "{err:#}"
        );
        assert!(out.is_empty(), "nothing written to stdout");
        // Same bytes, other length: refused too.
        std::fs::write(&stored, b"hello world!").unwrap();
        assert!(fetch(&store, &run.id, &p, None, &mut out).await.is_err());
        assert!(out.is_empty());

        let ghost = RunId::parse("ghost").unwrap();
        let err = list(&store, &ghost, false, &mut Vec::new())
            .await
            .expect_err("unknown run");
        assert!(format!("{err:#}").contains("no run ghost"));
        assert_eq!(crate::exit::report(Err(err)), Exit::Failure);
    }
}
