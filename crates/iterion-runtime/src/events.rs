//! The one event writer of a run, and the per-node run-log splitter.
//!
//! A single task owns every append of the run (events and log lines), fed
//! by one channel, so seq order is the order of emission. Emitting never
//! waits for the store: the channel is unbounded, and what bounds memory is
//! upstream of it (a node's log is capped by [`NodeLog`]; events are a few
//! per node). A failed append is logged at warn and never breaks the run
//! (facts §8).
//!
//! The run log is bounded twice (issue 31 #6): each node execution by
//! [`NodeLog`] (bytes, and rows: past half of its row budget a node's lines
//! are coalesced into rows of up to the longest line), and the whole run by
//! the [`Emitter`]'s [`RunLogBounds`], checked before a line is queued, so
//! neither the queue, the store nor a reader of the log grows with the
//! number of lines a workload prints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use iterion_core::driver::{DriverObserver, Progress};
use iterion_core::store::NewLogLine;

use iterion_core::redact::{LineRedactor, Redactor};
use iterion_core::{
    EventDraft, EventKind, EventRecord, NodeId, OutputChunk, OutputStream, RunId, RunStore,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most log lines written in one `append_logs`.
const LOG_BATCH: usize = 512;

enum Msg {
    Event(EventDraft),
    Logs(Vec<NewLogLine>),
    Flush(oneshot::Sender<()>),
}

/// What the whole run may write to its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLogBounds {
    /// Bytes of line text.
    pub bytes: u64,
    /// Rows.
    pub rows: u64,
}

impl Default for RunLogBounds {
    fn default() -> Self {
        let s = crate::settings::EngineSettings::default();
        Self {
            bytes: s.run_log_cap,
            rows: s.run_log_rows,
        }
    }
}

/// The run's log budget, shared by every clone of its [`Emitter`].
#[derive(Debug, Default)]
struct RunLogBudget {
    bounds: RunLogBounds,
    bytes: AtomicU64,
    rows: AtomicU64,
    hit: AtomicBool,
}

impl RunLogBudget {
    /// Whether a line of `len` bytes still fits; what does not fit is not
    /// taken from the budget (a later, shorter line may still fit).
    fn take(&self, len: u64) -> bool {
        let fits = |used: &AtomicU64, add: u64, cap: u64| {
            used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(add).filter(|n| *n <= cap)
            })
            .is_ok()
        };
        if !fits(&self.rows, 1, self.bounds.rows) {
            return false;
        }
        if !fits(&self.bytes, len, self.bounds.bytes) {
            self.rows.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Emitter {
    tx: mpsc::UnboundedSender<Msg>,
    redactor: Arc<std::sync::RwLock<Redactor>>,
    budget: Arc<RunLogBudget>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter").finish_non_exhaustive()
    }
}

impl Emitter {
    /// Emit a run-level event.
    pub fn emit(&self, kind: EventKind) {
        self.send(Msg::Event(kind.into()));
    }

    /// Emit an event about a node.
    pub fn emit_node(&self, node: &NodeId, kind: EventKind) {
        self.send(Msg::Event(EventDraft::from(kind).for_node(node.clone())));
    }

    /// Emit a pre-built draft (events defined outside [`EventKind`]).
    pub fn emit_draft(&self, draft: EventDraft) {
        self.send(Msg::Event(draft));
    }

    /// Queue run-log lines, as many as the run's log budget still holds.
    /// The first line it refuses writes one system line and a
    /// `sandbox_limit_reached` event (`limit: run_log`); later ones are
    /// dropped silently.
    pub fn logs(&self, mut lines: Vec<NewLogLine>) {
        let before = lines.len();
        lines.retain(|l| self.budget.take(l.line.len() as u64));
        if lines.len() < before && !self.budget.hit.swap(true, Ordering::Relaxed) {
            let RunLogBounds { bytes, rows } = self.budget.bounds;
            let detail = format!(
                "the run log holds at most {bytes} bytes and {rows} rows; \
                 later lines of this run are dropped"
            );
            lines.push(NewLogLine {
                stream: OutputStream::System.as_str().into(),
                node_id: None,
                line: format!("…{detail}"),
            });
            self.send(Msg::Logs(lines));
            self.emit(EventKind::SandboxLimitReached {
                limit: "run_log".into(),
                bound: Some(bytes),
                detail,
            });
            return;
        }
        if !lines.is_empty() {
            self.send(Msg::Logs(lines));
        }
    }

    /// One system line in the run log.
    pub fn system_log(&self, node: Option<&NodeId>, line: impl Into<String>) {
        self.logs(vec![NewLogLine {
            stream: OutputStream::System.as_str().into(),
            node_id: node.map(|n| n.to_string()),
            line: line.into(),
        }]);
    }

    /// Mask the run's secrets (and their encodings) in every event payload
    /// and log line written from now on: the last line of defence for text
    /// no node log saw (a blocked host name, a driver's line, an error).
    pub fn set_redactor(&self, redactor: Redactor) {
        if let Ok(mut r) = self.redactor.write() {
            *r = redactor;
        }
    }

    /// Wait until everything emitted so far has been handed to the store.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Flush(tx));
        let _ = rx.await;
    }

    fn send(&self, msg: Msg) {
        if self.tx.send(msg).is_err() {
            tracing::warn!("event writer is gone; event dropped");
        }
    }
}

/// Where appended events are copied for live rendering (the CLI's
/// progress). A tap that is gone or slow never affects the run.
pub type EventTap = mpsc::UnboundedSender<EventRecord>;

/// Start the writer task of `run`. It ends when every [`Emitter`] is dropped.
pub fn spawn_writer(
    store: Arc<dyn RunStore>,
    run: RunId,
    tap: Option<EventTap>,
    bounds: RunLogBounds,
) -> (Emitter, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let redactor: Arc<std::sync::RwLock<Redactor>> = Arc::default();
    let masks = Arc::clone(&redactor);
    let current = move || masks.read().map(|r| r.clone()).unwrap_or_default();
    let handle = tokio::spawn(async move {
        let mut held: Option<Msg> = None;
        loop {
            let msg = match held.take() {
                Some(m) => m,
                None => match rx.recv().await {
                    Some(m) => m,
                    None => return,
                },
            };
            match msg {
                Msg::Event(mut draft) => {
                    current().redact_json(&mut draft.data);
                    let kind = draft.kind.clone();
                    match store.append_event(&run, draft, None).await {
                        Ok(record) => {
                            if let Some(tap) = &tap {
                                let _ = tap.send(record);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(run = %run, event = %kind, code = e.code(), error = %e,
                                "event emission failed; the run continues");
                        }
                    }
                }
                Msg::Logs(mut lines) => {
                    // Coalesce queued log messages into one batch, stopping
                    // at the first non-log message so order is kept.
                    while lines.len() < LOG_BATCH {
                        match rx.try_recv() {
                            Ok(Msg::Logs(more)) => lines.extend(more),
                            Ok(other) => {
                                held = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let masks = current();
                    if !masks.is_empty() {
                        for l in &mut lines {
                            l.line = masks.redact(&l.line);
                        }
                    }
                    if let Err(e) = store.append_logs(&run, lines).await {
                        tracing::warn!(run = %run, code = e.code(), error = %e,
                            "run-log append failed; the run continues");
                    }
                }
                Msg::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    });
    let budget = Arc::new(RunLogBudget {
        bounds,
        ..RunLogBudget::default()
    });
    (
        Emitter {
            tx,
            redactor,
            budget,
        },
        handle,
    )
}

/// A [`DriverObserver`] that writes a driver's lines into the run log and
/// its pull progress as `sandbox_image_pull` events (facts §8: in cloud the
/// run logger is teed into the store, so driver commands are readable
/// afterwards). Build lines go to the log only.
#[derive(Debug, Clone)]
pub struct RunObserver {
    emitter: Emitter,
}

impl RunObserver {
    /// An observer writing through `emitter`.
    pub fn new(emitter: Emitter) -> Self {
        Self { emitter }
    }
}

impl DriverObserver for RunObserver {
    fn log(&self, stream: OutputStream, line: &str) {
        self.emitter.logs(vec![NewLogLine {
            stream: stream.as_str().into(),
            node_id: None,
            line: line.to_owned(),
        }]);
    }

    fn progress(&self, progress: Progress) {
        match progress {
            Progress::Pull {
                image,
                status,
                current,
                total,
            } => self.emitter.emit(EventKind::SandboxImagePull {
                image,
                status,
                current,
                total,
            }),
            Progress::Build { line } => self.log(OutputStream::System, &line),
        }
    }
}

/// How long a coalesced row may wait for more lines before it is written
/// (the log is followed live).
const COALESCE_WAIT: Duration = Duration::from_secs(1);

/// What one node execution may write to the run log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLogBounds {
    /// Bytes of output; the rest is counted and reported.
    pub bytes: u64,
    /// Rows. Past half of them lines are coalesced; past all of them the
    /// rest is counted and reported.
    pub rows: u64,
    /// Longest line (and longest coalesced row); longer lines are split.
    pub max_line: usize,
}

/// Splits one node's output chunks into run-log rows, bounded.
///
/// At most `bytes` of a node's output reach the log; the rest is counted
/// and reported as one `…truncated N bytes` line, so a node printing 100 MB
/// costs the log (and memory) the cap, not 100 MB. A line longer than
/// `max_line` is split. Rows are bounded too: a row is one line until the
/// node has written half of its row budget, then lines of one stream are
/// coalesced (joined by `\n`) into rows of up to `max_line` bytes, written
/// when full, when the stream changes, a second after the row began, or at
/// the end; so 8 MiB of one-byte lines is a few hundred rows, not four
/// million (issue 31 #6). Masking runs on lines, before coalescing.
#[derive(Debug)]
pub struct NodeLog {
    node: String,
    emitter: Emitter,
    bounds: NodeLogBounds,
    logged: u64,
    dropped: u64,
    rows: u64,
    partial: [Vec<u8>; 2],
    /// The row being coalesced: its stream slot, text, and when it began.
    row: Option<(usize, Vec<u8>, Instant)>,
    batch: Vec<NewLogLine>,
    /// One masker per stream: a secret split over two lines of the same
    /// stream is masked on both.
    masks: [LineRedactor<()>; 2],
}

impl NodeLog {
    /// A splitter for `node`.
    pub fn new(node: &NodeId, emitter: Emitter, bounds: NodeLogBounds) -> Self {
        Self {
            node: node.to_string(),
            emitter,
            bounds: NodeLogBounds {
                max_line: bounds.max_line.max(1),
                rows: bounds.rows.max(2),
                ..bounds
            },
            logged: 0,
            dropped: 0,
            rows: 0,
            partial: [Vec::new(), Vec::new()],
            row: None,
            batch: Vec::new(),
            masks: [Redactor::default().lines(), Redactor::default().lines()],
        }
    }

    /// Mask the run's secret values (and their encodings, and values split
    /// over lines or `max_line` pieces of one stream) in every line.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.masks = [redactor.lines(), redactor.lines()];
        self
    }

    fn slot(stream: OutputStream) -> usize {
        match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr | OutputStream::System => 1,
        }
    }

    fn stream_name(slot: usize) -> &'static str {
        if slot == 0 { "stdout" } else { "stderr" }
    }

    /// Feed one chunk.
    pub fn push(&mut self, chunk: &OutputChunk) {
        let room = self.bounds.bytes.saturating_sub(self.logged);
        let len = chunk.data.len() as u64;
        let keep = usize::try_from(room.min(len)).unwrap_or(usize::MAX);
        self.dropped += len - keep as u64;
        self.logged += keep as u64;
        let slot = Self::slot(chunk.stream);
        let mut data = &chunk.data[..keep];
        while let Some(pos) = data.iter().position(|b| *b == b'\n') {
            self.partial[slot].extend_from_slice(&data[..pos]);
            self.line(slot);
            data = &data[pos + 1..];
        }
        self.partial[slot].extend_from_slice(data);
        while self.partial[slot].len() >= self.bounds.max_line {
            let rest = self.partial[slot].split_off(self.bounds.max_line);
            self.line(slot);
            self.partial[slot] = rest;
        }
        if self
            .row
            .as_ref()
            .is_some_and(|(_, _, began)| began.elapsed() >= COALESCE_WAIT)
        {
            self.close_row();
        }
        // Hand complete rows over per chunk, not per batch: the log is
        // followed live, and the writer coalesces whatever queues up.
        self.emitter.logs(std::mem::take(&mut self.batch));
    }

    fn line(&mut self, slot: usize) {
        let mut bytes = std::mem::take(&mut self.partial[slot]);
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        let ready = self.masks[slot].push(&bytes, ());
        self.emit_lines(slot, ready);
    }

    fn emit_lines(&mut self, slot: usize, lines: Vec<(Vec<u8>, ())>) {
        for (bytes, ()) in lines {
            self.add(slot, bytes);
        }
    }

    /// One masked line: its own row while the node has rows to spare, else
    /// appended to the row being coalesced.
    fn add(&mut self, slot: usize, bytes: Vec<u8>) {
        if self.rows >= self.bounds.rows {
            self.dropped += bytes.len() as u64 + 1;
            return;
        }
        if self.rows < self.bounds.rows / 2 {
            self.row_out(slot, &bytes);
            return;
        }
        if let Some((s, text, _)) = &self.row
            && (*s != slot || text.len() + 1 + bytes.len() > self.bounds.max_line)
        {
            self.close_row();
        }
        match &mut self.row {
            Some((_, text, _)) => {
                text.push(b'\n');
                text.extend_from_slice(&bytes);
            }
            None => self.row = Some((slot, bytes, Instant::now())),
        }
    }

    fn close_row(&mut self) {
        if let Some((slot, text, _)) = self.row.take() {
            if self.rows >= self.bounds.rows {
                self.dropped += text.len() as u64 + 1;
                return;
            }
            self.row_out(slot, &text);
        }
    }

    fn row_out(&mut self, slot: usize, bytes: &[u8]) {
        self.rows += 1;
        self.batch.push(NewLogLine {
            stream: Self::stream_name(slot).into(),
            node_id: Some(self.node.clone()),
            line: String::from_utf8_lossy(bytes).into_owned(),
        });
    }

    /// Flush partial lines and report truncation. Returns the bytes dropped.
    pub fn finish(mut self) -> u64 {
        for slot in 0..2 {
            if !self.partial[slot].is_empty() {
                self.line(slot);
            }
            let rest = self.masks[slot].finish();
            self.emit_lines(slot, rest);
        }
        self.close_row();
        if self.dropped > 0 {
            self.batch.push(NewLogLine {
                stream: OutputStream::System.as_str().into(),
                node_id: Some(self.node.clone()),
                line: format!(
                    "…truncated {} bytes (node log cap {} bytes, {} rows)",
                    self.dropped, self.bounds.bytes, self.bounds.rows
                ),
            });
        }
        self.emitter.logs(std::mem::take(&mut self.batch));
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn chunk(stream: OutputStream, s: &str) -> OutputChunk {
        OutputChunk {
            stream,
            data: Bytes::copy_from_slice(s.as_bytes()),
        }
    }

    #[tokio::test]
    async fn splits_caps_and_reports() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let emitter = Emitter {
            tx,
            redactor: Arc::default(),
            budget: Arc::default(),
        };
        let mut log = NodeLog::new(
            &NodeId::new("n"),
            emitter,
            NodeLogBounds {
                bytes: 20,
                rows: 100,
                max_line: 6,
            },
        );
        log.push(&chunk(OutputStream::Stdout, "ab\ncdefghij"));
        log.push(&chunk(OutputStream::Stderr, "err\n"));
        log.push(&chunk(OutputStream::Stdout, "kl\nmnopqrstuvwxyz"));
        assert_eq!(log.finish(), 12);
        let mut lines = Vec::new();
        while let Ok(Msg::Logs(batch)) = rx.try_recv() {
            lines.extend(
                batch
                    .into_iter()
                    .map(|l| format!("{}:{}", l.stream, l.line)),
            );
        }
        assert_eq!(
            lines,
            [
                "stdout:ab",
                "stdout:cdefgh",
                "stderr:err",
                "stdout:ijkl",
                "stdout:mn",
                "system:…truncated 12 bytes (node log cap 20 bytes, 100 rows)"
            ]
        );
    }

    fn emitter(bounds: RunLogBounds) -> (Emitter, mpsc::UnboundedReceiver<Msg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let budget = Arc::new(RunLogBudget {
            bounds,
            ..RunLogBudget::default()
        });
        let emitter = Emitter {
            tx,
            redactor: Arc::default(),
            budget,
        };
        (emitter, rx)
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<Msg>) -> (Vec<NewLogLine>, Vec<EventDraft>) {
        let (mut lines, mut events) = (Vec::new(), Vec::new());
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Msg::Logs(batch) => lines.extend(batch),
                Msg::Event(e) => events.push(e),
                Msg::Flush(_) => {}
            }
        }
        (lines, events)
    }

    #[test]
    fn one_byte_lines_are_coalesced_once_half_the_rows_are_used() {
        // `yes | head -n 5000000`: 10 MB in 64 KiB chunks of "y\n".
        let (emitter, mut rx) = emitter(RunLogBounds::default());
        let bounds = NodeLogBounds {
            bytes: 8 * 1024 * 1024,
            rows: 1000,
            max_line: 64 * 1024,
        };
        let mut log = NodeLog::new(&NodeId::new("yes"), emitter, bounds);
        let piece = "y\n".repeat(32 * 1024);
        for _ in 0..(10_000_000 / piece.len()) {
            log.push(&chunk(OutputStream::Stdout, &piece));
        }
        let dropped = log.finish();
        let (lines, _) = drain(&mut rx);
        let (system, out): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.stream == "system");
        // 500 single rows, then rows of up to 64 KiB: 8 MiB needs ~128.
        assert!(
            out.len() <= 500 + 8 * 1024 * 1024 / (64 * 1024) + 2,
            "{}",
            out.len()
        );
        assert!(out[..500].iter().all(|l| l.line == "y"));
        assert!(out.iter().all(|l| l.line.len() <= 64 * 1024));
        // Every byte up to the cap is in the log, lines intact.
        let text: usize = out.iter().map(|l| l.line.len() + 1).sum();
        assert_eq!(text as u64, 8 * 1024 * 1024);
        assert!(out.iter().all(|l| l.line.split('\n').all(|y| y == "y")));
        assert_eq!(
            dropped,
            10_000_000 / piece.len() as u64 * piece.len() as u64 - 8 * 1024 * 1024
        );
        assert_eq!(system.len(), 1);
        assert!(
            system[0].line.starts_with("…truncated "),
            "{}",
            system[0].line
        );
    }

    #[test]
    fn rows_past_the_node_row_cap_are_dropped_and_counted() {
        // Alternating streams defeat coalescing: the row cap still holds.
        let (emitter, mut rx) = emitter(RunLogBounds::default());
        let bounds = NodeLogBounds {
            bytes: 1 << 30,
            rows: 10,
            max_line: 1024,
        };
        let mut log = NodeLog::new(&NodeId::new("n"), emitter, bounds);
        for i in 0..100 {
            let stream = [OutputStream::Stdout, OutputStream::Stderr][i % 2];
            log.push(&chunk(stream, "ab\n"));
        }
        assert_eq!(log.finish(), 90 * 3);
        let (lines, _) = drain(&mut rx);
        assert_eq!(lines.len(), 11);
        assert_eq!(
            lines[10].line,
            "…truncated 270 bytes (node log cap 1073741824 bytes, 10 rows)"
        );
    }

    #[test]
    fn the_run_budget_drops_what_exceeds_it_once_announced() {
        let (emitter, mut rx) = emitter(RunLogBounds { bytes: 10, rows: 3 });
        let line = |s: &str| NewLogLine {
            stream: "stdout".into(),
            node_id: None,
            line: s.into(),
        };
        emitter.logs(vec![line("12345"), line("1234567"), line("12345")]);
        emitter.logs(vec![line("1"), line("2")]);
        emitter.logs(vec![line("3")]);
        let (lines, events) = drain(&mut rx);
        let texts: Vec<&str> = lines.iter().map(|l| l.line.as_str()).collect();
        // The third line fits (10 bytes, 2 rows); the budget is then spent:
        // one notice, and nothing after it.
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert_eq!(&texts[..2], ["12345", "12345"]);
        assert!(
            texts[2].contains("at most 10 bytes and 3 rows"),
            "{}",
            texts[2]
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "sandbox_limit_reached");
        assert_eq!(events[0].data["limit"], "run_log");
        assert_eq!(events[0].data["bound"], 10);
    }
}
