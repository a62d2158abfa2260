//! `iterion runs`, `iterion events`, `iterion logs`: read-only views of the
//! store `ITERION_STORE` names (`docs/reference/SPEC.md` §2). Rendering is pure
//! (records in, text out) so the output is snapshot-tested; the verbs only
//! fetch and print.

use std::io::Write;
use unicode_width::UnicodeWidthStr;

use futures_util::StreamExt;
use iterion_core::display::printable;
use iterion_core::event::EventRecord;
use iterion_core::store::{LogLine, RunRecord};
use iterion_core::view::{RunsView, run_duration_ms};
pub(crate) use iterion_core::view::{human_duration, human_time};
use iterion_core::{RunId, RunStore};

use crate::cli::{EventsArgs, LogsArgs, RunsArgs};
use crate::exit::{Exit, UserInputError};
use crate::stores::{self, store_error};

/// `iterion runs`.
pub async fn runs(args: RunsArgs) -> anyhow::Result<Exit> {
    let store = stores::open_from_env().await?;
    list_runs(store.as_ref(), args.json, &mut std::io::stdout()).await
}

/// `iterion events`.
pub async fn events(args: EventsArgs) -> anyhow::Result<Exit> {
    let run = parse_run_id(&args.run_id)?;
    let store = stores::open_from_env().await?;
    show_events(
        store.as_ref(),
        &run,
        args.json,
        args.follow,
        &mut std::io::stdout(),
    )
    .await
}

/// `iterion logs`.
pub async fn logs(args: LogsArgs) -> anyhow::Result<Exit> {
    let run = parse_run_id(&args.run_id)?;
    let store = stores::open_from_env().await?;
    show_logs(store.as_ref(), &run, args.follow, &mut std::io::stdout()).await
}

/// A malformed id is bad input (exit 2); a well-formed unknown one is a
/// failed lookup (exit 1, see [`require_run`]).
pub(crate) fn parse_run_id(value: &str) -> anyhow::Result<RunId> {
    RunId::parse(value).map_err(|e| UserInputError::new(e.to_string()).into())
}

/// Load a run or fail with a clear "not found" naming the store.
pub(crate) async fn require_run(store: &dyn RunStore, run: &RunId) -> anyhow::Result<RunRecord> {
    match store.load_run(run).await.map_err(store_error)? {
        Some(r) => Ok(r),
        None => Err(
            store_error(iterion_core::StoreError::RunNotFound(run.clone()))
                .context(format!("no run {run} in the {}", store.describe())),
        ),
    }
}

/// Every run, newest first, human table or one JSON document.
pub(crate) async fn list_runs(
    store: &dyn RunStore,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let all = store.list_all_runs().await.map_err(store_error)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&runs_json(&all))?)?;
    } else {
        out.write_all(render_runs(&all).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// Print the run's events; with `follow`, keep printing until it ends.
pub(crate) async fn show_events(
    store: &dyn RunStore,
    run: &RunId,
    json: bool,
    follow: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    require_run(store, run).await?;
    let print = |e: &EventRecord, out: &mut dyn Write| -> anyhow::Result<()> {
        if json {
            writeln!(out, "{}", serde_json::to_string(e)?)?;
        } else {
            writeln!(out, "{}", render_event(e))?;
        }
        out.flush()?;
        Ok(())
    };
    if follow {
        let mut stream = store.follow_events(run, 0);
        while let Some(e) = stream.next().await {
            print(&e.map_err(store_error)?, out)?;
        }
    } else {
        for e in store.events_after(run, 0, 0).await.map_err(store_error)? {
            print(&e, out)?;
        }
    }
    Ok(Exit::Success)
}

/// Print the run log; with `follow`, keep printing until the run ends.
pub(crate) async fn show_logs(
    store: &dyn RunStore,
    run: &RunId,
    follow: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    require_run(store, run).await?;
    if follow {
        let mut stream = store.follow_logs(run, 0);
        while let Some(l) = stream.next().await {
            writeln!(out, "{}", render_log(&l.map_err(store_error)?))?;
            out.flush()?;
        }
    } else {
        // Page by page from the store, never the whole log in memory: a
        // run's log holds up to `run_log_cap` bytes (issue 31 #6).
        let mut after = 0;
        loop {
            let page = store
                .logs_after(run, after, LOG_PAGE)
                .await
                .map_err(store_error)?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            let mut buf = std::io::BufWriter::new(&mut *out);
            for l in &page {
                writeln!(buf, "{}", render_log(l))?;
            }
            buf.flush()?;
        }
    }
    Ok(Exit::Success)
}

/// Rows `iterion logs` reads from the store at a time.
const LOG_PAGE: usize = 512;

/// Left-aligned columns, two spaces apart, no trailing blanks. Cells are
/// run-supplied (file and workflow names): control and bidi characters are
/// escaped, so a name can neither break a row nor drive the terminal.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c).into_owned()).collect())
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    let mut s = String::new();
    let line = |cells: Vec<&str>, s: &mut String| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            l.push_str(cell);
            // Display columns, not chars: a CJK name takes two per character.
            l.extend(std::iter::repeat_n(' ', w.saturating_sub(cell.width())));
        }
        s.push_str(l.trim_end());
        s.push('\n');
    };
    line(header.to_vec(), &mut s);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &mut s);
    }
    s
}

/// The human table of `iterion runs`.
pub(crate) fn render_runs(runs: &[RunRecord]) -> String {
    if runs.is_empty() {
        return "no runs\n".to_owned();
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.workflow.clone(),
                r.status.to_string(),
                r.failure
                    .as_ref()
                    .map_or("-".to_owned(), |f| f.code.to_string()),
                human_time(r.created_at),
                run_duration_ms(r).map_or("-".to_owned(), human_duration),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "WORKFLOW",
            "STATUS",
            "FAILURE_CODE",
            "STARTED",
            "DURATION",
        ],
        &rows,
    )
}

/// The JSON document of `iterion runs --json` (the shape the studio's
/// `/api/runs` serves too).
pub(crate) fn runs_json(runs: &[RunRecord]) -> RunsView {
    RunsView::of(runs)
}

/// One event, one line: `seq  time  type  [node]  data`.
pub(crate) fn render_event(e: &EventRecord) -> String {
    let node = e
        .node_id
        .as_ref()
        .map(|n| format!("  [{n}]"))
        .unwrap_or_default();
    // `data` prints as JSON (its strings escaped by JSON itself).
    format!(
        "{:>5}  {}  {}{}  {}",
        e.seq,
        human_time(e.timestamp),
        printable(&e.kind),
        printable(&node),
        e.data
    )
}

/// One log line: `time  stream  [node]  text`.
pub(crate) fn render_log(l: &LogLine) -> String {
    let node = l
        .node_id
        .as_ref()
        .map(|n| format!("[{n}] "))
        .unwrap_or_default();
    let prefix = format!(
        "{}  {:<6}  {}",
        human_time(l.timestamp),
        printable(&l.stream),
        printable(&node),
    );
    // A row may hold several lines (a loud node's lines are coalesced):
    // each is printed as its own line with the row's prefix. The line is
    // the command's own output: escaped, so it can neither fake another
    // line (`\r`) nor drive the terminal (ANSI).
    let mut s = String::with_capacity(l.line.len() + prefix.len());
    for (i, line) in l.line.split('\n').enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s.push_str(&prefix);
        s.push_str(&printable(line));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use iterion_core::failure::{FailureCode, RunStatus};
    use iterion_core::store::{Failure, NewLogLine, NewRun, Transition};
    use iterion_core::{EventDraft, NodeId, Trust};
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    fn record(id: &str, status: RunStatus, failure: Option<FailureCode>, secs: i64) -> RunRecord {
        let created = datetime!(2026-11-29 08:00:00.123456 UTC);
        RunRecord {
            id: RunId::parse(id).unwrap(),
            workflow: "review".into(),
            file: "flows/review.iter".into(),
            trust: Trust::Trusted,
            status,
            failure: failure.map(|c| Failure::new(c, "boom")),
            admission: None,
            owner: None,
            revision: 3,
            created_at: created,
            updated_at: created + time::Duration::seconds(secs),
        }
    }

    fn fixed_runs() -> Vec<RunRecord> {
        vec![
            record("r20261129080000-0000000c", RunStatus::Running, None, 5),
            record(
                "r20261129080000-0000000b",
                RunStatus::Failed,
                Some(FailureCode::SandboxDriverUnavailable),
                0,
            ),
            record(
                "r20261129080000-0000000a",
                RunStatus::FailedResumable,
                Some(FailureCode::SandboxSetupTimeout),
                245,
            ),
            record("r20261129080000-00000009", RunStatus::Finished, None, 7_384),
        ]
    }

    #[test]
    fn runs_human() {
        insta::assert_snapshot!(render_runs(&fixed_runs()));
        assert_eq!(render_runs(&[]), "no runs\n");
    }

    #[test]
    fn runs_json_document() {
        insta::assert_json_snapshot!(runs_json(&fixed_runs()));
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_345), "12.3s");
        assert_eq!(human_duration(245_000), "4m05s");
        assert_eq!(human_duration(7_384_000), "2h03m");
    }

    fn fixed_events() -> Vec<EventRecord> {
        let run = RunId::parse("r20261129080000-0000000a").unwrap();
        let at = datetime!(2026-11-29 08:00:01.5 UTC);
        vec![
            EventRecord {
                seq: 1,
                timestamp: at,
                kind: "run_started".into(),
                run_id: run.clone(),
                node_id: None,
                data: json!({"workflow": "review", "file": "flows/review.iter", "trust": "untrusted"}),
            },
            EventRecord {
                seq: 2,
                timestamp: at + time::Duration::seconds(2),
                kind: "network_blocked".into(),
                run_id: run,
                node_id: Some(NodeId::new("probe")),
                data: json!({"host": "evil.test", "port": 443, "reason": "blocked-by-allowlist", "rule": null, "node_id": "probe"}),
            },
        ]
    }

    #[test]
    fn events_human_and_json_lines() {
        let human: Vec<String> = fixed_events().iter().map(render_event).collect();
        insta::assert_snapshot!("events_human", human.join("\n"));
        let lines: Vec<String> = fixed_events()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        insta::assert_snapshot!("events_json_lines", lines.join("\n"));
    }

    #[test]
    fn logs_human() {
        let at = datetime!(2026-11-29 08:00:02 UTC);
        let lines = [
            LogLine {
                seq: 1,
                timestamp: at,
                stream: "system".into(),
                node_id: None,
                line: "docker run -d --network iterion-r1 iterion-sandbox-slim:local".into(),
            },
            LogLine {
                seq: 2,
                timestamp: at,
                stream: "stderr".into(),
                node_id: Some("build".into()),
                line: "warning: unused variable".into(),
            },
        ];
        let text: Vec<String> = lines.iter().map(render_log).collect();
        insta::assert_snapshot!(text.join("\n"));
    }

    #[test]
    fn run_supplied_text_is_escaped_in_runs_events_and_logs() {
        let mut run = record("r20261129080000-0000000a", RunStatus::Running, None, 5);
        run.workflow = "wf\n r-forged  finished".into();
        let table = render_runs(&[run]);
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(table.contains("wf\\n r-forged"), "{table}");
        let mut e = fixed_events().remove(1);
        e.node_id = Some(NodeId::new("probe\u{1b}[2K\r    1  fake"));
        e.data = json!({"host": "x\u{1b}[31m.test"});
        let line = render_event(&e);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("probe\\x1b[2K\\r"), "{line}");
        let log = LogLine {
            seq: 1,
            timestamp: datetime!(2026-11-29 08:00:02 UTC),
            stream: "stdout".into(),
            node_id: Some("n".into()),
            line: "ok\r2026-11-29T08:00:02Z  system  all clean\u{1b}[0m".into(),
        };
        let text = render_log(&log);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            text.ends_with("ok\\r2026-11-29T08:00:02Z  system  all clean\\x1b[0m"),
            "{text}"
        );
    }

    async fn store() -> (tempfile::TempDir, std::sync::Arc<dyn RunStore>) {
        let dir = tempfile::tempdir().unwrap();
        let s = iterion_store_sqlite::SqliteStore::open(dir.path()).unwrap();
        (dir, std::sync::Arc::new(s))
    }

    #[tokio::test]
    async fn unknown_run_is_a_clear_failure_and_bad_id_is_bad_input() {
        let (_dir, s) = store().await;
        let ghost = RunId::parse("ghost").unwrap();
        let err = show_events(s.as_ref(), &ghost, false, false, &mut Vec::new())
            .await
            .expect_err("unknown run");
        let msg = format!("{err:#}");
        assert!(msg.contains("no run ghost"), "{msg}");
        assert!(msg.contains("STORE_RUN_NOT_FOUND"), "{msg}");
        assert!(msg.contains("iterion runs"), "{msg}");
        assert_eq!(crate::exit::report(Err(err)), Exit::Failure);
        let err = show_logs(s.as_ref(), &ghost, false, &mut Vec::new())
            .await
            .expect_err("unknown run");
        assert_eq!(crate::exit::report(Err(err)), Exit::Failure);
        let bad = parse_run_id("../etc").expect_err("bad id");
        assert_eq!(crate::exit::report(Err(bad)), Exit::BadInput);
    }

    #[tokio::test]
    async fn events_follow_prints_until_the_run_ends() {
        let (_dir, s) = store().await;
        let run = s
            .create_run(NewRun {
                id: RunId::parse("live").unwrap(),
                workflow: "w".into(),
                file: "w.iter".into(),
                trust: Trust::Trusted,
                owner: None,
            })
            .await
            .unwrap();
        let draft = |k: &str| EventDraft {
            kind: k.into(),
            node_id: None,
            data: json!({}),
        };
        s.append_event(&run.id, draft("run_started"), None)
            .await
            .unwrap();
        let writer = {
            let s = s.clone();
            let id = run.id.clone();
            tokio::spawn(async move {
                s.transition(
                    &id,
                    Transition {
                        from: RunStatus::Queued,
                        expected_revision: None,
                        to: RunStatus::Running,
                        failure: None,
                    },
                )
                .await
                .unwrap();
                s.append_event(&id, draft("node_started"), None)
                    .await
                    .unwrap();
                s.append_logs(
                    &id,
                    vec![NewLogLine {
                        stream: "stdout".into(),
                        node_id: None,
                        line: "hi".into(),
                    }],
                )
                .await
                .unwrap();
                s.transition(
                    &id,
                    Transition {
                        from: RunStatus::Running,
                        expected_revision: None,
                        to: RunStatus::Finished,
                        failure: None,
                    },
                )
                .await
                .unwrap();
            })
        };
        let mut out = Vec::new();
        show_events(s.as_ref(), &run.id, true, true, &mut out)
            .await
            .unwrap();
        writer.await.unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["type"], "node_started");
        assert_eq!(lines[1]["seq"], 2);
        let mut out = Vec::new();
        show_logs(s.as_ref(), &run.id, true, &mut out)
            .await
            .unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("stdout  hi\n"));
        let mut out = Vec::new();
        list_runs(s.as_ref(), true, &mut out).await.unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["runs"][0]["status"], "finished");
    }
}
