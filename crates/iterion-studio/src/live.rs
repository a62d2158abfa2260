//! Live views over server-sent events: the runs list, and one run's
//! timeline while it goes.
//!
//! - `/api/live/runs` re-reads the runs once a second and sends the rows
//!   (`event: runs`) whenever they changed.
//! - `/api/runs/ID/live?after=SEQ` follows the run's events from the
//!   store (`RunStore::follow_events`, read-after-seq, so a reconnect with
//!   `Last-Event-ID` resumes without a gap or a repeat): one `entry` per
//!   event, each with its SSE id = seq, and one `end` with the run's final
//!   view once the run is terminal and every event was sent.
//!
//! Bounded: at most `MAX_STREAMS` streams at once (503 past that), each
//! closed after [`LIFETIME`] (the browser reconnects where it left off),
//! and all closed when the server stops.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, stream};
use http::StatusCode;
use iterion_core::store::StoreStream;
use iterion_core::view::{FilesView, RunView};
use iterion_core::{EventRecord, RunId, StoreError};
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedSemaphorePermit;

use crate::api::{PAGE_EVENTS, RunFilter, error_for, hint, load_run};
use crate::decision::{CardView, DecisionCard};
use crate::graph::{NodeState, Terminals, node_transition};
use crate::state::AppState;
use crate::timeline::{self, Entry};

/// Longest life of one stream.
const LIFETIME: Duration = Duration::from_secs(600);
/// How often the runs list is re-read.
const RUNS_EVERY: Duration = Duration::from_secs(1);
/// Keep-alive comments, so idle proxies keep the stream open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn busy(path: &str) -> Response {
    error_for(
        path,
        StatusCode::SERVICE_UNAVAILABLE,
        "STUDIO_BUSY",
        "too many live views are open; close some and reload",
    )
}

/// The stream, bounded by [`LIFETIME`] and the server's shutdown, holding
/// its permit until it ends.
fn bounded(
    state: &AppState,
    permit: OwnedSemaphorePermit,
    events: impl futures_util::Stream<Item = Event> + Send + 'static,
) -> Response {
    let shutdown = state.shutdown.clone();
    let stop = async move {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = tokio::time::sleep(LIFETIME) => {}
        }
    };
    let s = events.take_until(Box::pin(stop)).map(move |e| {
        let _held = &permit;
        Ok::<_, std::convert::Infallible>(e)
    });
    Sse::new(s)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// `GET /api/live/runs`.
pub(crate) async fn runs(
    State(state): State<Arc<AppState>>,
    Query(filter): Query<RunFilter>,
) -> Response {
    const PATH: &str = "/api/live/runs";
    if let Err(e) = filter.status() {
        return error_for(PATH, StatusCode::BAD_REQUEST, "STUDIO_BAD_FILTER", &e);
    }
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return busy(PATH);
    };
    let st = state.clone();
    let events = stream::unfold(
        (st, filter, None::<String>, true),
        |(st, filter, last, first)| async move {
            let mut last = last;
            let mut first = first;
            loop {
                if !first {
                    tokio::time::sleep(RUNS_EVERY).await;
                }
                first = false;
                let Ok(runs) = filter.runs(&st, PATH).await else {
                    continue;
                };
                let body = match serde_json::to_string(&crate::rows::rows(&st, &runs).await) {
                    Ok(b) => b,
                    Err(_) => continue,
                };
                if last.as_deref() != Some(body.as_str()) {
                    let event = Event::default().event("runs").data(body.clone());
                    return Some((event, (st, filter, Some(body), false)));
                }
                last = Some(body);
            }
        },
    );
    bounded(&state, permit, events)
}

/// `?after=` of the run stream.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct After {
    /// Send events with a seq above this.
    pub after: Option<u64>,
}

/// One `entry` message; `decision` when the event changed the card.
#[derive(Debug, Serialize)]
struct EntryMessage {
    entry: Entry,
    state: Option<NodeMove>,
    decision: Option<CardView>,
}

#[derive(Debug, Serialize)]
struct NodeMove {
    node: String,
    state: NodeState,
}

/// The `end` message: what the page's header and files table show once
/// the run is over.
#[derive(Debug, Serialize)]
struct EndMessage {
    run: RunView,
    duration: String,
    failure_message: Option<String>,
    hint: Option<String>,
    files: Option<FilesView>,
    drain: Option<String>,
    terminals: Terminals,
}

fn entry_event(e: &EventRecord, card: &mut DecisionCard) -> Event {
    let before = card.clone();
    card.apply(e);
    let msg = EntryMessage {
        entry: timeline::entry(e),
        state: node_transition(e).map(|(node, state)| NodeMove {
            node: node.to_owned(),
            state,
        }),
        decision: (*card != before).then(|| card.view()),
    };
    Event::default()
        .event("entry")
        .id(e.seq.to_string())
        .data(serde_json::to_string(&msg).unwrap_or_default())
}

fn error_event(e: &StoreError) -> Event {
    let body = serde_json::json!({"code": e.code(), "message": e.to_string()});
    Event::default().event("failure").data(body.to_string())
}

enum Phase {
    /// Following, with the decision card as of the last event sent.
    Follow(StoreStream<EventRecord>, Box<DecisionCard>),
    Done,
}

/// `GET /api/runs/ID/live`.
pub(crate) async fn run(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(after): Query<After>,
    headers: HeaderMap,
) -> Response {
    const PATH: &str = "/api/runs/live";
    let run = match load_run(&state, PATH, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return busy(PATH);
    };
    // A reconnecting EventSource says where it was; that wins.
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(after.after)
        .unwrap_or(0);
    // The card as of `from`, so a change to it can be told apart.
    let seed = match state
        .store
        .events_after(
            &run.id,
            0,
            usize::try_from(from)
                .unwrap_or(PAGE_EVENTS)
                .min(PAGE_EVENTS),
        )
        .await
    {
        Ok(events) if from > 0 => crate::decision::decision(&events),
        _ => DecisionCard::default(),
    };
    let follow = state.store.follow_events(&run.id, from);
    let st = state.clone();
    let id = run.id.clone();
    let start = Phase::Follow(follow, Box::new(seed));
    let events = stream::unfold((start, st, id), |(phase, st, id)| step(phase, st, id));
    bounded(&state, permit, events)
}

/// One step of a run's stream: the next entry, then the `end` (or a
/// failure), then nothing.
async fn step(
    phase: Phase,
    st: Arc<AppState>,
    id: RunId,
) -> Option<(Event, (Phase, Arc<AppState>, RunId))> {
    let Phase::Follow(mut s, mut card) = phase else {
        return None;
    };
    let event = match s.next().await {
        Some(Ok(e)) => {
            let event = entry_event(&e, &mut card);
            return Some((event, (Phase::Follow(s, card), st, id)));
        }
        Some(Err(e)) => error_event(&e),
        None => match st.store.load_run(&id).await {
            Ok(Some(r)) => {
                let files = crate::api::files_view(&st, &r.id).await.ok();
                let msg = EndMessage {
                    run: RunView::of(&r),
                    duration: crate::rows::row_times(&r).1,
                    failure_message: r.failure.as_ref().map(|f| f.message.clone()),
                    hint: hint(&r),
                    drain: files.as_ref().map(crate::rows::drain_text),
                    files,
                    terminals: crate::api::terminals(&r),
                };
                Event::default()
                    .event("end")
                    .data(serde_json::to_string(&msg).unwrap_or_default())
            }
            Ok(None) => error_event(&StoreError::RunNotFound(id.clone())),
            Err(e) => error_event(&e),
        },
    };
    Some((event, (Phase::Done, st, id)))
}
