//! The two pages (the runs list and one run) rendered on the server, and
//! the embedded assets. Every run-supplied value goes through
//! [`crate::escape`]; the markup of a timeline entry, a run row and a file
//! row is the same here and in `assets/studio.js`, which builds the live
//! ones with `textContent` only. The pages work without the script; it
//! only makes them live and filterable. No inline script or style (the
//! CSP forbids both): state reaches the script through `data-` attributes.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::StatusCode;
use iterion_core::failure::RunStatus;
use iterion_core::store::LogLine;
use iterion_core::view::{FilesView, human_time};

use crate::api::{self, RunDetail, RunFilter, error_for, store_failure, with_type};
use crate::decision::{CardView, DecisionCard};
use crate::escape::{attr, path_segment, path_segments, text};
use crate::rows::{RunRow, drain_text, row_times, rows};
use crate::state::AppState;
use crate::timeline::{self, Entry};

/// Timeline entries a page shows at most (the API has all of them).
const PAGE_ENTRIES: usize = 3_000;
/// Log lines a page shows at most.
const PAGE_LOG_LINES: usize = 5_000;

const CSS: &str = include_str!("../assets/studio.css");
const JS: &str = include_str!("../assets/studio.js");
const FAVICON: &str = include_str!("../assets/favicon.svg");

/// `GET /assets/studio.css`.
pub(crate) async fn css() -> Response {
    with_type(StatusCode::OK, CSS, "text/css; charset=utf-8")
}

/// `GET /assets/studio.js`.
pub(crate) async fn js() -> Response {
    with_type(StatusCode::OK, JS, "text/javascript; charset=utf-8")
}

/// `GET /assets/favicon.svg`.
pub(crate) async fn favicon() -> Response {
    with_type(StatusCode::OK, FAVICON, "image/svg+xml")
}

fn page(title: &str, body_attrs: &str, store: &str, main: &str) -> Response {
    let html = format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{}</title><link rel="icon" href="/assets/favicon.svg" type="image/svg+xml"><link rel="stylesheet" href="/assets/studio.css"><script src="/assets/studio.js" defer></script></head><body{body_attrs}><header class="top"><a class="brand" href="/">iterion studio</a><span class="store" title="the run store">{}</span></header><main>{main}</main></body></html>"#,
        text(title),
        text(store),
    );
    with_type(StatusCode::OK, html, "text/html; charset=utf-8")
}

fn badge(status: RunStatus) -> String {
    format!(
        r#"<span class="badge status-{s}">{s}</span>"#,
        s = status.as_str()
    )
}

/// One row of the runs table (the script builds the same from a
/// [`RunRow`]).
fn run_row(row: &RunRow) -> String {
    let r = &row.run;
    format!(
        r#"<tr data-status="{status}"><td><a class="run-link" href="/runs/{href}">{id}</a></td><td>{wf}</td><td>{badge}</td><td class="code">{code}</td><td><time>{started}</time></td><td>{duration}</td><td>{mode}</td></tr>"#,
        status = r.status.as_str(),
        href = path_segment(r.id.as_str()),
        id = text(r.id.as_str()),
        wf = text(&r.workflow),
        badge = badge(r.status),
        code = r.failure_code.map_or("-", |c| c.as_str()),
        started = text(&row.started),
        duration = text(&row.duration),
        mode = text(row.mode.as_deref().unwrap_or("-")),
    )
}

/// `GET /`: every run, filtered by `?status=` and `?workflow=`.
pub(crate) async fn runs_page(
    State(state): State<Arc<AppState>>,
    Query(filter): Query<RunFilter>,
) -> Response {
    let all = match state.store.list_all_runs().await {
        Ok(all) => all,
        Err(e) => return store_failure("/", &e),
    };
    let workflows: BTreeSet<&str> = all.iter().map(|r| r.workflow.as_str()).collect();
    let shown = match filter.select(&all) {
        Ok(s) => s,
        Err(e) => return error_for("/", StatusCode::BAD_REQUEST, "STUDIO_BAD_FILTER", &e),
    };
    let status = filter.status().ok().flatten();
    let mut m = String::from(
        r#"<h1>Runs</h1><form class="filters" method="get" action="/"><label>Status <select name="status"><option value="">any</option>"#,
    );
    for s in RunStatus::ALL {
        let sel = if status == Some(s) { " selected" } else { "" };
        let _ = write!(
            m,
            r#"<option value="{v}"{sel}>{v}</option>"#,
            v = s.as_str()
        );
    }
    m.push_str(
        r#"</select></label><label>Workflow <select name="workflow"><option value="">any</option>"#,
    );
    for w in &workflows {
        let sel = if filter.workflow.as_deref() == Some(*w) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            m,
            r#"<option value="{}"{sel}>{}</option>"#,
            attr(w),
            text(w)
        );
    }
    m.push_str(r#"</select></label><button type="submit">Filter</button><span class="live-state" id="live-state"></span></form>"#);
    m.push_str(r#"<table class="runs"><thead><tr><th>Run</th><th>Workflow</th><th>Status</th><th>Failure code</th><th>Started</th><th>Duration</th><th>Mode</th></tr></thead><tbody id="runs-body">"#);
    for row in rows(&state, &shown).await {
        m.push_str(&run_row(&row));
    }
    m.push_str("</tbody></table>");
    let _ = write!(
        m,
        r#"<p class="empty" id="runs-empty"{}>No runs yet: <code>iterion run examples/hello.iter</code>, then this page shows it.</p>"#,
        if shown.is_empty() { "" } else { " hidden" }
    );
    page(
        "iterion studio: runs",
        r#" data-page="runs""#,
        &state.store.describe(),
        &m,
    )
}

fn dl_rows(out: &mut String, rows: &[(String, String)]) {
    for (name, value) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", text(name), text(value));
    }
}

/// The inside of the decision card (the script re-renders the same from
/// a [`CardView`] while a run boots).
fn decision_body(card: &CardView) -> String {
    let class = serde_json::to_value(card.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut s = format!(
        r#"<p class="verdict verdict-{class}" id="verdict">{}</p><dl class="facts">"#,
        text(card.title)
    );
    dl_rows(&mut s, &card.facts);
    s.push_str("</dl>");
    if !card.limits.is_empty() {
        s.push_str(r#"<h3>Limits</h3><dl class="facts limits">"#);
        dl_rows(&mut s, &card.limits);
        s.push_str("</dl>");
    }
    if !card.notes.is_empty() {
        s.push_str(r#"<ul class="notes">"#);
        for n in &card.notes {
            let _ = write!(s, "<li>{}</li>", text(n));
        }
        s.push_str("</ul>");
    }
    s
}

fn decision_card(card: &DecisionCard) -> String {
    format!(
        r#"<section class="card decision" id="decision"><h2>Sandbox decision</h2><div id="decision-body">{}</div></section>"#,
        decision_body(&card.view())
    )
}

/// One timeline entry (the script builds the same from an [`Entry`]).
fn entry_item(e: &Entry) -> String {
    let group = serde_json::to_value(e.group)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let level = serde_json::to_value(e.level)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let quiet = if e.kind == "run_checkpoint" {
        " quiet"
    } else {
        ""
    };
    let mut s = format!(
        r#"<li class="entry level-{level} group-{group}{quiet}" data-group="{group}" data-kind="{kind}" data-node="{node}" data-seq="{seq}"><span class="seq">{seq}</span><time>{time}</time><span class="kind">{kind_t}</span><span class="node">{node_t}</span><span class="summary">{summary}</span>"#,
        kind = attr(&e.kind),
        node = attr(e.node.as_deref().unwrap_or("")),
        seq = e.seq,
        time = text(&e.time),
        kind_t = text(&e.kind),
        node_t = text(e.node.as_deref().unwrap_or("")),
        summary = text(&e.summary),
    );
    if !e.fields.is_empty() {
        s.push_str(r#"<details><summary>data</summary><dl class="fields">"#);
        for f in &e.fields {
            let _ = write!(s, "<dt>{}</dt><dd>{}</dd>", text(&f.name), text(&f.value));
        }
        s.push_str("</dl></details>");
    }
    s.push_str("</li>");
    s
}

/// The files table (the script builds the same rows from a
/// [`FilesView`]).
fn files_table(run: &str, files: &FilesView) -> String {
    let mut s = format!(
        r#"<p class="drain" id="drain">{}"#,
        text(&drain_text(files))
    );
    s.push_str(r#"</p><table class="files"><thead><tr><th>Path</th><th>Size</th><th>SHA-256</th><th>Status</th><th></th></tr></thead><tbody id="files-body">"#);
    for f in &files.files {
        let _ = write!(
            s,
            r#"<tr><td class="path">{p}</td><td>{size}</td><td class="sha">{sha}</td><td>{st}</td><td><a class="download" href="/api/runs/{run}/files/{href}" download>download</a></td></tr>"#,
            p = text(f.path.as_str()),
            size = f.size,
            sha = text(&f.sha256),
            st = f.status.as_str(),
            run = path_segment(run),
            href = path_segments(f.path.as_str()),
        );
    }
    s.push_str("</tbody></table>");
    if files.files.is_empty() {
        s.push_str(r#"<p class="empty" id="files-empty">No files were kept.</p>"#);
    }
    s
}

fn log_lines(lines: &[LogLine], truncated: bool, run: &str) -> String {
    let mut s = String::from(r#"<div class="logs" id="logs">"#);
    for l in lines {
        let node = l.node_id.as_deref().unwrap_or("");
        let _ = write!(
            s,
            r#"<div class="log-line stream-{stream}" data-node="{node_a}"><time>{t}</time> <span class="stream">{stream_t}</span> <span class="lnode">{node_t}</span> <span class="text">{line}</span></div>"#,
            stream = attr(&l.stream),
            node_a = attr(node),
            t = text(&human_time(l.timestamp)),
            stream_t = text(&l.stream),
            node_t = text(node),
            line = text(&l.line),
        );
    }
    s.push_str("</div>");
    if lines.is_empty() {
        s.push_str(r#"<p class="empty">No log lines.</p>"#);
    }
    if truncated {
        let _ = write!(
            s,
            r#"<p class="more">First {PAGE_LOG_LINES} lines; the whole log is at <a href="/api/runs/{r}/logs">/api/runs/{t}/logs</a>.</p>"#,
            r = path_segment(run),
            t = text(run)
        );
    }
    s
}

/// `GET /runs/ID`.
pub(crate) async fn run_page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Response {
    let path = "/runs/ID";
    let (run, events) = match api::load_with_events(&state, path, &id).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let files = match api::files_view(&state, &run.id).await {
        Ok(f) => f,
        Err(e) => return store_failure(path, &e),
    };
    let logs = match state.store.logs_after(&run.id, 0, PAGE_LOG_LINES + 1).await {
        Ok(l) => l,
        Err(e) => return store_failure(path, &e),
    };
    let detail = RunDetail::of(&run, &events);
    let graph = api::graph_svg(&run, &events).await;
    let rid = run.id.as_str();
    let (started, duration) = row_times(&run);
    let r = &detail.run;

    let mut m = format!(
        r#"<nav class="crumbs"><a href="/">Runs</a> / <span>{id}</span></nav><section class="run-header"><h1>{wf} <span id="run-status">{badge}</span></h1><dl class="facts"><dt>Run</dt><dd>{id}</dd><dt>File</dt><dd>{file}</dd><dt>Trust</dt><dd>{trust}</dd><dt>Started</dt><dd><time>{started}</time></dd><dt>Duration</dt><dd id="run-duration">{duration}</dd></dl>"#,
        id = text(rid),
        wf = text(&r.workflow),
        badge = badge(r.status),
        file = text(&r.file),
        trust = if r.trust == iterion_core::Trust::Trusted {
            "trusted"
        } else {
            "untrusted"
        },
    );
    let _ = write!(
        m,
        r#"<div class="failure" id="run-failure"{hidden}><p><span class="code" id="failure-code">{code}</span> <span class="disposition" id="failure-disposition">{disp}</span></p><p id="failure-message">{msg}</p></div>"#,
        hidden = if detail.failure.is_some() {
            ""
        } else {
            " hidden"
        },
        code = detail.failure.as_ref().map_or("", |f| f.code.as_str()),
        disp = detail
            .failure
            .as_ref()
            .map_or("", |f| f.disposition.as_str()),
        msg = text(detail.failure.as_ref().map_or("", |f| f.message.as_str())),
    );
    let _ = write!(
        m,
        r#"<p class="hint" id="run-hint"{}>{}</p></section>"#,
        if detail.hint.is_some() { "" } else { " hidden" },
        text(detail.hint.as_deref().unwrap_or(""))
    );
    m.push_str(r#"<div class="grid">"#);
    m.push_str(&decision_card(&detail.decision));
    m.push_str(r#"<section class="card graph-card" id="graph"><h2>Workflow graph</h2>"#);
    match &graph {
        Ok(svg) => {
            m.push_str(r#"<div class="graph-box">"#);
            m.push_str(svg);
            m.push_str("</div>");
        }
        Err(why) => {
            let _ = write!(m, r#"<p class="unavailable">No graph: {}</p>"#, text(why));
        }
    }
    m.push_str("</section></div>");

    // Timeline.
    let entries: Vec<Entry> = events.iter().map(timeline::entry).collect();
    let skip = entries.len().saturating_sub(PAGE_ENTRIES);
    m.push_str(r#"<section class="card timeline-card"><h2>Timeline <span class="live-state" id="live-state"></span></h2><div class="filters" id="timeline-filters">"#);
    for g in [
        "run", "sandbox", "node", "agent", "network", "files", "other",
    ] {
        let _ = write!(
            m,
            r#"<label><input type="checkbox" data-group="{g}" checked> {g}</label>"#
        );
    }
    m.push_str(r#"<label><input type="checkbox" data-quiet="1"> checkpoints</label></div><p class="node-filter" id="node-filter" hidden>Showing node <span id="node-filter-name"></span> <button type="button" id="node-filter-clear">show all</button></p>"#);
    if skip > 0 {
        let _ = write!(
            m,
            r#"<p class="more">{skip} earlier events not shown; all are at <a href="/api/runs/{}/events">the events API</a>.</p>"#,
            path_segment(rid)
        );
    }
    m.push_str(r#"<ol class="timeline" id="timeline">"#);
    for e in &entries[skip..] {
        m.push_str(&entry_item(e));
    }
    m.push_str("</ol></section>");

    // Agent steps and tool calls, when the run had agents.
    let agent: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.group == timeline::Group::Agent)
        .collect();
    if !agent.is_empty() {
        m.push_str(r#"<section class="card"><h2>Agent steps and tool calls</h2><ol class="timeline agent">"#);
        for e in agent.iter().rev().take(PAGE_ENTRIES).rev() {
            m.push_str(&entry_item(e));
        }
        m.push_str("</ol></section>");
    }

    // Network.
    m.push_str(r#"<section class="card" id="network"><h2>Network</h2>"#);
    if detail.blocked.is_empty() {
        m.push_str(r#"<p class="empty">No request was blocked.</p>"#);
    } else {
        m.push_str(r#"<table class="network"><thead><tr><th>Host</th><th>Port</th><th>Rule</th><th>Reason</th><th>Node</th></tr></thead><tbody>"#);
        for b in &detail.blocked {
            let _ = write!(
                m,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(&b.host),
                b.port,
                text(b.rule.as_deref().unwrap_or("-")),
                text(&b.reason),
                text(b.node.as_deref().unwrap_or("-"))
            );
        }
        m.push_str("</tbody></table>");
    }
    m.push_str("</section>");

    m.push_str(r#"<section class="card" id="files"><h2>Files</h2>"#);
    m.push_str(&files_table(rid, &files));
    m.push_str("</section>");

    let truncated = logs.len() > PAGE_LOG_LINES;
    m.push_str(r#"<section class="card" id="logs-card"><h2>Logs</h2>"#);
    m.push_str(&log_lines(
        &logs[..logs.len().min(PAGE_LOG_LINES)],
        truncated,
        rid,
    ));
    m.push_str("</section>");

    let live = !run.status.is_terminal();
    let attrs = format!(
        r#" data-page="run" data-run="{}" data-after="{}" data-live="{}""#,
        attr(rid),
        detail.last_seq,
        if live { "1" } else { "0" }
    );
    page(
        &format!("iterion studio: {} {}", r.workflow, rid),
        &attrs,
        &state.store.describe(),
        &m,
    )
}
