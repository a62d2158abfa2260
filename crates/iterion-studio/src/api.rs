//! The JSON API under `/api/`. `runs`, `events` and `files` answer with
//! exactly what `iterion runs --json`, `iterion events RUN --json` and
//! `iterion files RUN --json` print (the same `iterion_core::view`
//! documents, the same formatting), so a script can move between the two;
//! `runs/ID` adds what only the page shows (the decision card, the node
//! states, the blocked requests), and `logs` is the run log as JSON Lines.
//! Also the error responses of every route: JSON `{"error": {code,
//! message}}` under `/api/`, a small escaped page elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use iterion_core::failure::{Disposition, FailureCode, RunStatus};
use iterion_core::store::RunRecord;
use iterion_core::view::{FilesView, RunView, RunsView};
use iterion_core::{EventRecord, RunId, StoreError};
use serde::{Deserialize, Serialize};

use crate::decision::{self, BlockedRequest, DecisionCard};
use crate::escape::text;
use crate::graph::{self, NodeState, Terminals};
use crate::state::AppState;

/// Most events a page or `runs/ID` reads (the `events` API has them all).
pub(crate) const PAGE_EVENTS: usize = 20_000;

/// An error response for `path`.
pub(crate) fn error_for(path: &str, status: StatusCode, code: &str, message: &str) -> Response {
    if path.starts_with("/api/") {
        let body = serde_json::json!({"error": {"code": code, "message": message}});
        with_type(status, body.to_string() + "\n", "application/json")
    } else {
        let page = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>iterion studio: {status}</title><link rel=\"stylesheet\" href=\"/assets/studio.css\"></head><body><main class=\"error\"><h1>{}</h1><p class=\"code\">{}</p><p>{}</p><p><a href=\"/\">all runs</a></p></main></body></html>",
            text(status.canonical_reason().unwrap_or("error")),
            text(code),
            text(message)
        );
        with_type(status, page, "text/html; charset=utf-8")
    }
}

/// A response with a body and its content type.
pub(crate) fn with_type(
    status: StatusCode,
    body: impl Into<Body>,
    ctype: &'static str,
) -> Response {
    let mut resp = (status, body.into()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    resp
}

/// A store failure as a response.
pub(crate) fn store_failure(path: &str, e: &StoreError) -> Response {
    let status = match e {
        StoreError::RunNotFound(_) | StoreError::FileNotFound(_) => StatusCode::NOT_FOUND,
        StoreError::UnsafePath { .. } => StatusCode::BAD_REQUEST,
        StoreError::Tampered { .. } => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    error_for(path, status, e.code(), &e.to_string())
}

/// The run `raw` names, or the response saying why not.
pub(crate) async fn load_run(
    state: &AppState,
    path: &str,
    raw: &str,
) -> Result<RunRecord, Response> {
    let id = RunId::parse(raw).map_err(|e| {
        error_for(
            path,
            StatusCode::BAD_REQUEST,
            "STUDIO_BAD_RUN_ID",
            &e.to_string(),
        )
    })?;
    match state.store.load_run(&id).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(store_failure(path, &StoreError::RunNotFound(id))),
        Err(e) => Err(store_failure(path, &e)),
    }
}

/// The run `raw` names and its first [`PAGE_EVENTS`] events.
pub(crate) async fn load_with_events(
    state: &AppState,
    path: &str,
    raw: &str,
) -> Result<(RunRecord, Vec<EventRecord>), Response> {
    let run = load_run(state, path, raw).await?;
    match state.store.events_after(&run.id, 0, PAGE_EVENTS).await {
        Ok(events) => Ok((run, events)),
        Err(e) => Err(store_failure(path, &e)),
    }
}

/// The filters of the runs page and `/api/runs`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunFilter {
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
}

impl RunFilter {
    /// The status asked for (`None`: any); an unknown word is an error.
    pub(crate) fn status(&self) -> Result<Option<RunStatus>, String> {
        match self.status.as_deref().filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s.parse().map(Some),
        }
    }

    /// The runs of `all` that pass.
    pub(crate) fn select(&self, all: &[RunRecord]) -> Result<Vec<RunRecord>, String> {
        let status = self.status()?;
        let workflow = self.workflow.as_deref().filter(|w| !w.is_empty());
        Ok(all
            .iter()
            .filter(|r| status.is_none_or(|s| r.status == s))
            .filter(|r| workflow.is_none_or(|w| r.workflow == w))
            .cloned()
            .collect())
    }

    /// Every run of the store that passes.
    pub(crate) async fn runs(
        &self,
        state: &AppState,
        path: &str,
    ) -> Result<Vec<RunRecord>, Response> {
        let all = state
            .store
            .list_all_runs()
            .await
            .map_err(|e| store_failure(path, &e))?;
        self.select(&all)
            .map_err(|e| error_for(path, StatusCode::BAD_REQUEST, "STUDIO_BAD_FILTER", &e))
    }
}

/// A document pretty-printed with a final newline, as the CLI prints it.
fn pretty<T: Serialize>(doc: &T) -> Response {
    match serde_json::to_string_pretty(doc) {
        Ok(s) => with_type(StatusCode::OK, s + "\n", "application/json"),
        Err(e) => error_for(
            "/api/",
            StatusCode::INTERNAL_SERVER_ERROR,
            "STUDIO_ENCODE",
            &e.to_string(),
        ),
    }
}

/// JSON Lines, one item a line, as `iterion events --json` prints them.
fn lines<T: Serialize>(items: &[T]) -> Response {
    let mut out = String::new();
    for item in items {
        match serde_json::to_string(item) {
            Ok(s) => {
                out.push_str(&s);
                out.push('\n');
            }
            Err(e) => {
                return error_for(
                    "/api/",
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "STUDIO_ENCODE",
                    &e.to_string(),
                );
            }
        }
    }
    with_type(StatusCode::OK, out, "application/x-ndjson")
}

/// `GET /api/runs`: `iterion runs --json`, filtered by `?status=` and
/// `?workflow=` when given.
pub(crate) async fn runs(
    State(state): State<Arc<AppState>>,
    Query(filter): Query<RunFilter>,
) -> Response {
    match filter.runs(&state, "/api/runs").await {
        Ok(runs) => pretty(&RunsView::of(&runs)),
        Err(resp) => resp,
    }
}

/// `GET /api/runs/ID/events`: `iterion events ID --json`.
pub(crate) async fn events(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let path = "/api/runs/events";
    let run = match load_run(&state, path, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match state.store.events_after(&run.id, 0, 0).await {
        Ok(events) => lines(&events),
        Err(e) => store_failure(path, &e),
    }
}

/// `?node=` of the log API.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LogFilter {
    /// Only this node's lines.
    pub node: Option<String>,
}

/// Rows the log API reads from the store at a time.
const LOG_PAGE: usize = 512;

/// `GET /api/runs/ID/logs`: the run log as JSON Lines, streamed page by
/// page from the store: a request holds one page, never the whole log
/// (issue 31 #6). A store failure before the first row is the usual error
/// response; one later ends the body early (the client sees it cut).
pub(crate) async fn logs(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(filter): Query<LogFilter>,
) -> Response {
    let path = "/api/runs/logs";
    let run = match load_run(&state, path, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let first = match state.store.logs_after(&run.id, 0, LOG_PAGE).await {
        Ok(page) => page,
        Err(e) => return store_failure(path, &e),
    };
    let store = Arc::clone(&state.store);
    let node = filter.node;
    let pages = futures_util::stream::unfold(Some(first), move |page| {
        let store = Arc::clone(&store);
        let node = node.clone();
        let run = run.id.clone();
        async move {
            let page = page?;
            let last = page.last()?.seq;
            let mut out = Vec::new();
            for l in page.iter().filter(|l| node.is_none() || l.node_id == node) {
                if let Err(e) = serde_json::to_writer(&mut out, l) {
                    return Some((Err(std::io::Error::other(e)), None));
                }
                out.push(b'\n');
            }
            let next = match page.len() < LOG_PAGE {
                true => None,
                false => match store.logs_after(&run, last, LOG_PAGE).await {
                    Ok(next) => Some(next),
                    Err(e) => {
                        tracing::warn!(run = %run, code = e.code(), error = %e,
                            "log API: store read failed mid-stream");
                        return Some((Err(std::io::Error::other(e)), None));
                    }
                },
            };
            Some((Ok(axum::body::Bytes::from(out)), next))
        }
    });
    with_type(
        StatusCode::OK,
        Body::from_stream(pages),
        "application/x-ndjson",
    )
}

/// `GET /api/runs/ID/files`: `iterion files ID --json`.
pub(crate) async fn files(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let path = "/api/runs/files";
    let run = match load_run(&state, path, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match files_view(&state, &run.id).await {
        Ok(v) => pretty(&v),
        Err(e) => store_failure(path, &e),
    }
}

/// The files document of a run.
pub(crate) async fn files_view(state: &AppState, run: &RunId) -> Result<FilesView, StoreError> {
    let files = state.store.list_files(run).await?;
    let drain = state.store.get_drain(run).await?;
    Ok(FilesView::of(run, &files, drain.as_ref()))
}

/// A run's failure as the header shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FailureView {
    /// Code.
    pub code: FailureCode,
    /// Disposition.
    pub disposition: Disposition,
    /// Message.
    pub message: String,
}

/// Everything the run page shows but the files and logs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunDetail {
    /// The run, as `iterion runs --json` shows it.
    pub run: RunView,
    /// Its failure.
    pub failure: Option<FailureView>,
    /// What to do next, as the CLI says it.
    pub hint: Option<String>,
    /// The sandbox decision.
    pub decision: DecisionCard,
    /// Refused egress.
    pub blocked: Vec<BlockedRequest>,
    /// Node states.
    pub nodes: BTreeMap<String, NodeState>,
    /// The seq of the last event read.
    pub last_seq: u64,
}

impl RunDetail {
    /// The detail of `run` after `events`.
    pub(crate) fn of(run: &RunRecord, events: &[EventRecord]) -> Self {
        Self {
            run: RunView::of(run),
            failure: run.failure.as_ref().map(|f| FailureView {
                code: f.code,
                disposition: f.disposition,
                message: f.message.clone(),
            }),
            hint: hint(run),
            decision: decision::decision(events),
            blocked: decision::blocked(events),
            nodes: graph::node_states(events),
            last_seq: events.last().map_or(0, |e| e.seq),
        }
    }
}

/// What the CLI tells an operator to do next with a run in this state.
pub(crate) fn hint(run: &RunRecord) -> Option<String> {
    let id = &run.id;
    match run.status {
        RunStatus::PausedWaitingHuman => Some(format!(
            "answer with `iterion resume --run-id {id} --answer FIELD=VALUE`"
        )),
        RunStatus::PausedOperator | RunStatus::FailedResumable | RunStatus::Cancelled => {
            Some(format!("continue it with `iterion resume --run-id {id}`"))
        }
        RunStatus::Failed
            if run
                .failure
                .as_ref()
                .is_some_and(|f| f.code != FailureCode::WorkflowFailed) =>
        {
            Some(format!(
                "after fixing the cause, `iterion resume --run-id {id}` continues from where it stopped"
            ))
        }
        _ => None,
    }
}

/// `GET /api/runs/ID`.
pub(crate) async fn run(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match load_with_events(&state, "/api/runs/ID", &id).await {
        Ok((run, events)) => pretty(&RunDetail::of(&run, &events)),
        Err(resp) => resp,
    }
}

/// How the terminals of the graph stand after a run.
pub(crate) fn terminals(run: &RunRecord) -> Terminals {
    Terminals {
        done: run.status == RunStatus::Finished,
        fail: run
            .failure
            .as_ref()
            .is_some_and(|f| f.code == FailureCode::WorkflowFailed),
    }
}

/// The graph of a run as SVG, or why there is none.
pub(crate) async fn graph_svg(run: &RunRecord, events: &[EventRecord]) -> Result<String, String> {
    let wf = crate::source::workflow_of(&run.workflow, events)
        .await
        .map_err(|e| e.to_string())?;
    Ok(graph::layout(&wf).svg(&graph::node_states(events), terminals(run)))
}

/// `GET /api/runs/ID/graph.svg`.
pub(crate) async fn graph(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let path = "/api/runs/graph";
    let (run, events) = match load_with_events(&state, path, &id).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    match graph_svg(&run, &events).await {
        Ok(svg) => with_type(StatusCode::OK, svg, "image/svg+xml"),
        Err(why) => error_for(
            path,
            StatusCode::NOT_FOUND,
            "STUDIO_GRAPH_UNAVAILABLE",
            &why,
        ),
    }
}
