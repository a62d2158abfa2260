//! ADR-143 drain: the declared read-back paths of a run, ingested from the
//! sandbox's tar export into the run store, capped and metered on the host.
//!
//! This crate owns the host side of the read-back contract (facts §10 R4,
//! R7, R8): it streams each declared path's archive from
//! [`SandboxRun::export`] through a bounded tar reader of its own (the `tar`
//! module: every piece of metadata has a hard bound), judges every member by
//! name and type ([`name`]), pipes accepted files into [`RunStore::put_file`]
//! chunk by chunk, meters every declared path against its `cap` summed over
//! every drain attempt, marks the stored set with [`RunStore::set_drain`],
//! and returns the event to emit. It does not decide which paths are
//! declared or what their caps are (the policy crate puts both in
//! [`ReadBackDecl`]), it does not append events (the runtime owns the run's
//! linear event sequence), and the drain never touches the host filesystem:
//! the container is untrusted and the store's file area is the only place
//! its bytes land. The one host-directory sink is [`workspace`] (copy-based
//! workspaces, issue 14 item 2): the same reader and walk, writing onto the
//! host workspace only through directory descriptors that never follow a
//! symlink.
//!
//! Time is bounded by what is stored, not by what the container claims: a
//! member over what its path may still take is declined at its tar header
//! and never read (a sparse terabyte costs nothing); the archive is dropped
//! there and the rest of the path is exported entry by entry from
//! [`SandboxRun::list_dir`] listings, each piece read by the same parser
//! (see `drain_path`). Bytes read past without being stored (declined
//! members) are bounded by the cap too.
//!
//! Memory is bounded whatever the archive: per path, at most
//! [`DrainOptions::puts_in_flight`] puts are open, only one of them receiving
//! data, through a channel of [`DrainOptions::chunks_in_flight`] chunks; the
//! others are committing. Declined names are kept up to
//! [`DrainOptions::max_declined_names`], the rest counted.
//!
//! Reason tokens (SPEC §3): when several apply, the report carries the most
//! severe, in the order `timeout` > `container_gone` > `store_error` >
//! `archive_error` > `cap_exceeded`. A member declined for its name or type
//! (absolute, `..`, link, device, fifo, sparse, non-UTF-8, too deep) counts as
//! `archive_error` — the archive held something the drain refuses to store —
//! and a member over the cap or past the member-count bound as
//! `cap_exceeded`; a member the store refused alone, `store_error`.
//!
//! The runtime calls it once at teardown, before cleanup:
//!
//! ```ignore
//! let report = iterion_readback::drain(&*run, &*store, &run_id, &plan.read_back,
//!     DrainOptions::default()).await;
//! for event in report.events { store.append_event(&run_id, event.into(), None).await?; }
//! ```

mod declines;
mod error;
pub mod name;
pub mod reason;
mod tar;
mod walk;
pub mod workspace;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use iterion_core::store::{DrainRecord, DrainStatus, PutOutcome, RunFilePath, StoreError};
use iterion_core::{ByteStream, EventKind, ReadBackDecl, RunId, RunStore, SandboxRun};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::declines::Declines;
pub use crate::error::ReadbackError;
use crate::name::Verdict;
use crate::tar::{Member, MetaLimits, TarStream};
use crate::walk::{Export, MAX_EXPORTS_PER_PATH, Walk, container_path_of, is_not_found, plan_rest};

/// Per-call knobs of [`drain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainOptions {
    /// Bound on the whole drain (every declared path).
    pub timeout: Duration,
    /// Members read per declared path; the rest are declined as a count.
    pub max_members_per_path: u64,
    /// Deepest relative path kept (components below the declared dir).
    pub max_depth: usize,
    /// Declined names kept in the report and the event; the rest are counted.
    pub max_declined_names: usize,
    /// Longest GNU long name read; a longer name is declined.
    pub max_long_name: u64,
    /// Largest PAX header read; a larger one fails the path's archive.
    pub max_pax_header: u64,
    /// Data chunks in flight between the archive and the store per file.
    pub chunks_in_flight: usize,
    /// Puts in flight per path: at most one receives data, the others are
    /// committing (fsync, rename, insert) while the archive reads on.
    pub puts_in_flight: usize,
}

impl Default for DrainOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            max_members_per_path: 100_000,
            max_depth: 128,
            max_declined_names: 1_000,
            max_long_name: 64 * 1024,
            max_pax_header: 1024 * 1024,
            chunks_in_flight: 8,
            puts_in_flight: 8,
        }
    }
}

/// The outcome of one declared path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathReport {
    /// The declared container path.
    pub container_path: String,
    /// Where its files live in the run's file area ([`name::key_prefix`]).
    pub key_prefix: String,
    /// Files stored by this attempt.
    pub files: u64,
    /// Bytes stored by this attempt.
    pub bytes: u64,
    /// Bytes metered for this path over every attempt, this one included.
    pub metered: u64,
    /// Members declined (named or counted).
    pub declined: u64,
    /// Why the path's drain stopped early, when it did.
    pub failure: Option<PathFailure>,
}

/// Why one path's drain stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathFailure {
    /// Reason token.
    pub reason: &'static str,
    /// Stable error code.
    pub code: &'static str,
    /// Human message (no secrets: engine and store messages only).
    pub message: String,
}

/// What a drain did, and the event to emit for it.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainReport {
    /// Files stored by this attempt.
    pub files: u64,
    /// Bytes stored by this attempt.
    pub bytes: u64,
    /// Declined members by container path (bounded by
    /// [`DrainOptions::max_declined_names`]; summaries name counts).
    pub declined: Vec<String>,
    /// Every declined member, named or not.
    pub declined_count: u64,
    /// Complete / Partial / Failed, as marked in the store.
    pub status: DrainStatus,
    /// Reason token when not complete.
    pub reason: Option<&'static str>,
    /// Whether what the store holds may be stale or incomplete: the drain
    /// failed and the store holds files from this or an earlier attempt.
    pub stale: bool,
    /// Whether the drain record was written (a failed `set_drain` leaves the
    /// previous marking in place; the event still says what happened).
    pub recorded: bool,
    /// Per declared path.
    pub paths: Vec<PathReport>,
    /// Events for the runtime to append, in order.
    pub events: Vec<EventKind>,
}

#[derive(Default)]
struct PathState {
    files: u64,
    bytes: u64,
    metered: u64,
    /// What the persisted meter already charges this path (≥ `metered`).
    reserved: u64,
    /// Size of a member whose put was in flight when the drain stopped: it
    /// may have landed, so it is charged (deny wins).
    in_flight: u64,
    declined: u64,
    past_limit: u64,
}

/// The persisted per-path meter of the run, as read from the previous
/// attempt and charged ahead of every put.
struct Meter {
    entries: Vec<(String, u64)>,
}

impl Meter {
    fn get(&self, path: &str) -> u64 {
        self.entries
            .iter()
            .find(|(p, _)| p == path)
            .map_or(0, |(_, n)| *n)
    }

    fn set(&mut self, path: &str, value: u64) {
        match self.entries.iter_mut().find(|(p, _)| p == path) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((path.to_owned(), value)),
        }
    }
}

/// Bytes charged to the persisted meter ahead of the puts they cover.
///
/// The meter must sum every attempt even when an attempt never finishes
/// (the host crashed mid-drain and the drain is retried): before a put would
/// go past what the store already charges, the charge is raised by the
/// member plus this step and written with `set_drain`. A crash therefore
/// over-counts by at most one step — never under-counts.
const RESERVE_STEP: u64 = 16 * 1024 * 1024;

/// Consecutive refused puts after which the store, not the member, is taken
/// to be the problem.
const MAX_CONSECUTIVE_STORE_ERRORS: usize = 3;

/// Drain every declared path of a run into `store`, once, at teardown.
///
/// Never fails: every problem becomes part of the report, and the stored set
/// is marked so a reader can tell "the tool wrote nothing" (Complete, zero
/// files) from "the drain failed" (Failed, with a reason). A path whose
/// export fails does not stop the others.
pub async fn drain(
    run: &dyn SandboxRun,
    store: &dyn RunStore,
    run_id: &RunId,
    declared: &[ReadBackDecl],
    options: DrainOptions,
) -> DrainReport {
    // `Instant + Duration::MAX` would panic; an absurd bound means "none".
    let start = Instant::now();
    let deadline = start
        .checked_add(options.timeout)
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600));
    let driver = run.driver();
    let mut declines = Declines::new(options.max_declined_names);
    let mut failed = false;

    // The meter sums every attempt (facts §10 R8). Without the previous
    // total the cap cannot be honoured, so an unreadable record drains
    // nothing and overwrites nothing.
    let prior = store.get_drain(run_id).await.ok();

    let mut meter = Meter {
        entries: prior
            .as_ref()
            .and_then(|p| p.as_ref())
            .map(|r| r.metered.clone())
            .unwrap_or_default(),
    };

    let mut seen: Vec<&str> = Vec::new();
    let mut paths = Vec::new();
    for decl in declared {
        let container_path = decl.container_path.trim_end_matches('/');
        if seen.contains(&container_path) {
            continue;
        }
        seen.push(container_path);
        let addr = name::addressing(decl);
        let mut state = PathState::default();
        let result = match &prior {
            None => Err(ReadbackError::Store {
                source: StoreError::Unavailable {
                    reason: "the previous drain record could not be read".into(),
                    source: None,
                },
            }),
            Some(_) => {
                state.metered = meter.get(container_path);
                state.reserved = state.metered;
                if Instant::now() >= deadline {
                    Err(ReadbackError::Timeout {
                        after: options.timeout,
                    })
                } else {
                    let work = drain_path(
                        run,
                        store,
                        run_id,
                        decl,
                        &addr,
                        &options,
                        &mut state,
                        &mut meter,
                        &mut declines,
                    );
                    match tokio::time::timeout_at(deadline, work).await {
                        Ok(r) => r,
                        Err(_) => Err(ReadbackError::Timeout {
                            after: options.timeout,
                        }),
                    }
                }
            }
        };
        if state.past_limit > 0 {
            let (n, limit) = (state.past_limit, options.max_members_per_path);
            declines.count += n;
            declines.names.push(format!(
                "{container_path}/… ({n} members past the limit of {limit})"
            ));
            declines.note(reason::CAP_EXCEEDED);
        }
        state.metered += state.in_flight;
        meter.set(container_path, state.metered);
        let failure = result.err().map(|e| {
            failed = true;
            declines.note(e.reason());
            PathFailure {
                reason: e.reason(),
                code: e.code(),
                message: e.to_string(),
            }
        });
        paths.push(PathReport {
            container_path: container_path.to_owned(),
            key_prefix: addr.prefix,
            files: state.files,
            bytes: state.bytes,
            metered: state.metered,
            declined: state.declined + state.past_limit,
            failure,
        });
    }

    let files = paths.iter().map(|p| p.files).sum();
    let bytes = paths.iter().map(|p| p.bytes).sum();
    let mut status = if failed || prior.is_none() {
        DrainStatus::Failed
    } else if declines.count > 0 {
        DrainStatus::Partial
    } else {
        DrainStatus::Complete
    };
    let had_prior = matches!(prior, Some(Some(_)));
    let stale = |status| status == DrainStatus::Failed && (had_prior || files > 0);

    let mut recorded = false;
    if let Some(prior) = &prior {
        let mut metered = prior
            .as_ref()
            .map(|r| r.metered.clone())
            .unwrap_or_default();
        for p in &paths {
            match metered.iter_mut().find(|(k, _)| *k == p.container_path) {
                Some(entry) => entry.1 = p.metered,
                None => metered.push((p.container_path.clone(), p.metered)),
            }
        }
        let record = DrainRecord {
            status,
            reason: (status != DrainStatus::Complete)
                .then(|| declines.worst.unwrap_or(reason::ARCHIVE_ERROR).to_owned()),
            declined: declines.names.clone(),
            stale: stale(status),
            metered,
            updated_at: time::OffsetDateTime::now_utc(),
        };
        match store.set_drain(run_id, record).await {
            Ok(()) => recorded = true,
            Err(_) => {
                status = DrainStatus::Failed;
                declines.note(reason::STORE_ERROR);
            }
        }
    } else {
        declines.note(reason::STORE_ERROR);
    }

    let reason =
        (status != DrainStatus::Complete).then(|| declines.worst.unwrap_or(reason::ARCHIVE_ERROR));
    let stale = stale(status);
    let event = match reason {
        None => EventKind::SandboxRunfilesDrained {
            driver,
            files,
            bytes,
        },
        Some(reason) => EventKind::SandboxRunfilesDrainFailed {
            driver,
            reason: reason.to_owned(),
            declined: declines.names.clone(),
            stale,
        },
    };
    DrainReport {
        files,
        bytes,
        declined: declines.names,
        declined_count: declines.count,
        status,
        reason,
        stale,
        recorded,
        paths,
        events: vec![event],
    }
}

/// What the archive reader hands the committer, in archive order.
enum Step {
    /// Members counted past the member limit.
    PastLimit(u64),
    /// A member declined on its header (name, type, depth).
    Decline(Member),
    /// A member whose data would go past the cap: declined at its header,
    /// the archive dropped there.
    Oversize(Member),
    /// A member to store; its data follows on `body`.
    Put {
        member: Member,
        path: RunFilePath,
        body: mpsc::Receiver<Result<Bytes, io::Error>>,
        /// Set by the reader when the archive ended inside this member, so
        /// the put's failure is reported as the archive's, not the store's.
        cut: Arc<AtomicBool>,
    },
}

/// A put in flight: its outcome, and whether the archive cut it.
type PutFuture<'a> = Pin<
    Box<dyn Future<Output = (Member, Result<PutOutcome, StoreError>, Arc<AtomicBool>)> + Send + 'a>,
>;

/// The committer's view of one path.
struct Settle<'s> {
    addr: &'s name::Addressing,
    state: &'s mut PathState,
    declines: &'s mut Declines,
    /// Bytes of puts started and not settled (charged against the cap).
    pending: u64,
    store_errors: usize,
}

impl Settle<'_> {
    fn decline(&mut self, token: &'static str, member: &Member) {
        self.state.declined += 1;
        let addr = self.addr;
        self.declines.decline(token, || name::display(addr, member));
    }

    fn settle(
        &mut self,
        member: &Member,
        outcome: Result<PutOutcome, StoreError>,
        cut: &AtomicBool,
    ) -> Result<(), ReadbackError> {
        self.pending -= member.size;
        self.state.in_flight = self.pending;
        match outcome {
            Ok(PutOutcome::Stored(record)) => {
                self.store_errors = 0;
                self.state.files += 1;
                self.state.bytes += record.size;
                self.state.metered += record.size;
            }
            Ok(PutOutcome::CapExceeded { .. }) => {
                self.store_errors = 0;
                self.decline(reason::CAP_EXCEEDED, member);
            }
            // The reader fails the path with the archive's own error.
            Err(_) if cut.load(Ordering::SeqCst) => {}
            // One refused member (a file where the archive earlier put a
            // directory of the same name, say) is that member's problem; a
            // run of refusals is the store's, and stops the path.
            Err(source) => {
                self.store_errors += 1;
                if self.store_errors >= MAX_CONSECUTIVE_STORE_ERRORS {
                    return Err(ReadbackError::Store { source });
                }
                self.decline(reason::STORE_ERROR, member);
            }
        }
        Ok(())
    }
}

/// How one export's archive ended.
enum ReadEnd {
    /// At its end-of-archive marker.
    Finished,
    /// At the header of a member too large to read (its path relative to
    /// the declared path, `None` when its name leaves the path): the stream
    /// was dropped there.
    Aborted(Option<Vec<String>>),
}

/// One declared path, ADR-143 §"Unbounded size": its archive is read once,
/// and a member whose data would go past what the path may still take is
/// declined at its header — the stream is dropped there, never read past
/// (a tar stream cannot skip a member without reading it: a sparse 1 TiB
/// file used to cost 1 TiB of zeros and the whole drain). What the archive
/// had not reached yet is then exported piece by piece: each directory on
/// the way to the dropped member is listed (`SandboxRun::list_dir`) and
/// each of its entries not yet drained is exported on its own, with the
/// same rule. The bounded tar reader stays the only parser of every piece.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
async fn drain_path(
    run: &dyn SandboxRun,
    store: &dyn RunStore,
    run_id: &RunId,
    decl: &ReadBackDecl,
    addr: &name::Addressing,
    options: &DrainOptions,
    state: &mut PathState,
    meter: &mut Meter,
    declines: &mut Declines,
) -> Result<(), ReadbackError> {
    let mut settle = Settle {
        addr,
        state,
        declines,
        pending: 0,
        store_errors: 0,
    };
    let base = decl.container_path.trim_end_matches('/');
    let mut walk = Walk::new();
    let mut queue = std::collections::VecDeque::from([Export { rel: Vec::new() }]);
    while let Some(export) = queue.pop_front() {
        if walk.exports >= MAX_EXPORTS_PER_PATH {
            let left = queue.len() as u64 + 1;
            settle.declines.count += left - 1;
            settle.declines.decline(reason::CAP_EXCEEDED, || {
                format!(
                    "{base}/… ({left} entries not drained: more than {MAX_EXPORTS_PER_PATH} exports)"
                )
            });
            break;
        }
        walk.start_export();
        let path = container_path_of(base, &export.rel);
        let stream = match run.export(&path).await {
            Ok(stream) => stream,
            // A piece that vanished since its listing is no failure of the path.
            Err(e) if !export.rel.is_empty() && is_not_found(&e) => continue,
            Err(source) => return Err(ReadbackError::Export { source }),
        };
        let mut tar = TarStream::new(
            stream,
            MetaLimits {
                long_name: options.max_long_name,
                pax: options.max_pax_header,
            },
        );
        let budget = Budget {
            cap: decl.cap.0,
            held: settle.state.metered + settle.pending,
        };
        let (steps_tx, steps_rx) = mpsc::channel(1);
        let (read, committed) = tokio::join!(
            read_archive(
                &mut tar, addr, options, &export, &mut walk, budget, steps_tx
            ),
            commit_members(store, run_id, decl, options, meter, &mut settle, steps_rx),
        );
        // Dropping the reader closes the engine's stream mid-member.
        drop(tar);
        committed?;
        if let ReadEnd::Aborted(at) = read? {
            plan_rest(
                run,
                base,
                &export,
                at.as_deref(),
                &mut walk,
                &mut queue,
                settle.declines,
            )
            .await;
        }
    }
    Ok(())
}

/// What one export may still take: the reader declines at the header a
/// member that does not fit, instead of reading it.
#[derive(Debug, Clone, Copy)]
struct Budget {
    cap: u64,
    /// Bytes the path already holds or has in flight when the export starts.
    held: u64,
}

/// Parse the archive and hand each member to the committer. Stops quietly
/// when the committer has stopped (it reports why).
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
async fn read_archive(
    tar: &mut TarStream,
    addr: &name::Addressing,
    options: &DrainOptions,
    export: &Export,
    walk: &mut Walk,
    budget: Budget,
    steps: mpsc::Sender<Step>,
) -> Result<ReadEnd, ReadbackError> {
    let mut members: u64 = 0;
    let mut past_limit: u64 = 0;
    let mut sent: u64 = 0;
    let result = async {
        while let Some(mut member) = tar.next_member().await? {
            members += 1;
            if !export.rel.is_empty() {
                match name::graft(&member.name, &addr.top, &export.rel) {
                    Some(full) => member.name = full,
                    None => {
                        // Not under the exported entry: declined as such.
                        if steps.send(Step::Decline(member)).await.is_err() {
                            return Ok(ReadEnd::Finished);
                        }
                        continue;
                    }
                }
            }
            // Members past the limit are counted, never remembered; a name
            // that leaves the path (`..`) is declined and plans nothing.
            let rel = (members <= options.max_members_per_path)
                .then(|| name::relative(&member.name, addr))
                .flatten()
                .filter(|r| !r.iter().any(|c| c == ".." || c.contains('\\')));
            let repeat = rel.as_deref().is_some_and(|r| walk.visit(r));
            let room = budget.cap.saturating_sub(budget.held + sent);
            let verdict = if repeat || members > options.max_members_per_path {
                Verdict::Skip
            } else {
                name::judge(&member, addr, options.max_depth)
            };
            // The header's size counts before a byte is read: a member over
            // what the path may still take is declined here and the stream
            // dropped, never read (the sparse terabyte). A member declined
            // for another reason is read past only while the bytes read past
            // stay within the cap.
            let over_cap = match verdict {
                Verdict::Store(_) => member.size > room,
                Verdict::Skip | Verdict::Decline(_) => {
                    member.size > budget.cap.saturating_sub(walk.skipped)
                }
            };
            if over_cap {
                let at = rel;
                if !repeat {
                    let _ = steps.send(Step::Oversize(member)).await;
                }
                return Ok(ReadEnd::Aborted(at));
            }
            if members > options.max_members_per_path {
                // Counted, not named: reading on keeps the stream honest (a
                // cut archive is still an archive_error) without growing
                // memory.
                past_limit += 1;
                walk.skipped += member.size;
                continue;
            }
            let step = match verdict {
                Verdict::Skip => {
                    walk.skipped += member.size;
                    continue;
                }
                Verdict::Decline(_why) => {
                    walk.skipped += member.size;
                    Step::Decline(member)
                }
                Verdict::Store(path) => {
                    sent += member.size;
                    let (tx, body) = mpsc::channel(options.chunks_in_flight.max(1));
                    let cut = Arc::new(AtomicBool::new(false));
                    let step = Step::Put {
                        member,
                        path,
                        body,
                        cut: cut.clone(),
                    };
                    if steps.send(step).await.is_err() {
                        return Ok(ReadEnd::Finished);
                    }
                    feed_member(tar, tx, &cut).await?;
                    continue;
                }
            };
            if steps.send(step).await.is_err() {
                return Ok(ReadEnd::Finished);
            }
        }
        Ok(ReadEnd::Finished)
    }
    .await;
    if past_limit > 0 {
        let _ = steps.send(Step::PastLimit(past_limit)).await;
    }
    result
}

/// Meter, reserve and start the puts the reader hands over, settling them
/// as they finish.
async fn commit_members(
    store: &dyn RunStore,
    run_id: &RunId,
    decl: &ReadBackDecl,
    options: &DrainOptions,
    meter: &mut Meter,
    settle: &mut Settle<'_>,
    mut steps: mpsc::Receiver<Step>,
) -> Result<(), ReadbackError> {
    let cap = decl.cap.0;
    let path_key = decl.container_path.trim_end_matches('/');
    let limit = options.puts_in_flight.max(1);
    let mut puts: FuturesUnordered<PutFuture<'_>> = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            Some((member, outcome, cut)) = puts.next(), if !puts.is_empty() => {
                settle.settle(&member, outcome, &cut)?;
            }
            step = steps.recv(), if open && puts.len() < limit => {
                let Some(step) = step else {
                    open = false;
                    continue;
                };
                let held = settle.state.metered + settle.pending;
                let room = cap.saturating_sub(held);
                match step {
                    Step::PastLimit(n) => settle.state.past_limit += n,
                    Step::Oversize(member) => settle.decline(reason::CAP_EXCEEDED, &member),
                    Step::Decline(member) => {
                        // A member that would not fit anyway (a sparse file
                        // claiming terabytes) is reported for the cap it
                        // breaks.
                        let token = if member.claimed_size > room {
                            reason::CAP_EXCEEDED
                        } else {
                            reason::ARCHIVE_ERROR
                        };
                        settle.decline(token, &member);
                    }
                    Step::Put { member, path, body, cut } => {
                        // The header's size counts before a byte is read: a
                        // 2 TB member is declined here, not after 2 TB (its
                        // body channel is dropped; the reader skips it).
                        if member.size > room {
                            settle.decline(reason::CAP_EXCEEDED, &member);
                            continue;
                        }
                        let needed = held + member.size;
                        if needed > settle.state.reserved {
                            settle.state.reserved =
                                needed.saturating_add(RESERVE_STEP).min(cap.max(needed));
                            meter.set(path_key, settle.state.reserved);
                            store
                                .set_drain(run_id, in_flight_record(meter))
                                .await
                                .map_err(|source| ReadbackError::Store { source })?;
                        }
                        settle.pending += member.size;
                        settle.state.in_flight = settle.pending;
                        let body: ByteStream =
                            Box::pin(futures_util::stream::unfold(body, |mut rx| async move {
                                rx.recv().await.map(|item| (item, rx))
                            }));
                        puts.push(Box::pin(async move {
                            let outcome = store.put_file(run_id, &path, body, room).await;
                            (member, outcome, cut)
                        }));
                    }
                }
            }
            else => return Ok(()),
        }
    }
}

/// Send the current member's data to its put through a bounded channel: at
/// most `chunks_in_flight` chunks wait, whatever the member's size.
async fn feed_member(
    tar: &mut TarStream,
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    cut: &AtomicBool,
) -> Result<(), ReadbackError> {
    let mut tx = Some(tx);
    loop {
        match tar.member_chunk().await {
            Ok(Some(chunk)) => {
                // A store that stopped reading (cap, error) drops its end;
                // the rest of the member is then read and discarded.
                if let Some(sender) = &tx
                    && sender.send(Ok(chunk)).await.is_err()
                {
                    tx = None;
                }
            }
            Ok(None) => return Ok(()),
            Err(fault) => {
                // The store must see an error, never a clean end: a cut
                // member is never stored as a shorter file.
                cut.store(true, Ordering::SeqCst);
                if let Some(sender) = tx.take() {
                    let _ = sender
                        .send(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "archive ended inside a member",
                        )))
                        .await;
                }
                return Err(fault);
            }
        }
    }
}

/// The record that stands while a drain runs: if the host dies here, the
/// set reads as failed and stale, and the meter already charges what the
/// puts in flight may have stored. The reason token of an attempt that never
/// finished is `timeout` (it did not finish in any time).
fn in_flight_record(meter: &Meter) -> DrainRecord {
    DrainRecord {
        status: DrainStatus::Failed,
        reason: Some(reason::TIMEOUT.to_owned()),
        declined: Vec::new(),
        stale: true,
        metered: meter.entries.clone(),
        updated_at: time::OffsetDateTime::now_utc(),
    }
}
