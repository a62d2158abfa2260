//! The one event writer of a run, and the per-node run-log splitter.
//!
//! A single task owns every append of the run (events and log lines), fed
//! by one channel, so seq order is the order of emission. Emitting never
//! waits for the store: the channel is unbounded, and what bounds memory is
//! upstream of it (a node's log is capped by [`NodeLog`]; events are a few
//! per node). A failed append is logged at warn and never breaks the run
//! (facts §8).

use std::sync::Arc;

use iterion_core::driver::{DriverObserver, Progress};
use iterion_core::store::NewLogLine;

use crate::redact::{LineRedactor, Redactor};
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

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Emitter {
    tx: mpsc::UnboundedSender<Msg>,
    redactor: Arc<std::sync::RwLock<Redactor>>,
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

    /// Queue run-log lines.
    pub fn logs(&self, lines: Vec<NewLogLine>) {
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
    (Emitter { tx, redactor }, handle)
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

/// Splits one node's output chunks into run-log lines, bounded.
///
/// At most `cap` bytes of a node's output reach the log; the rest is
/// counted and reported as one `…truncated N bytes` line, so a node printing
/// 100 MB costs the log (and memory) `cap`, not 100 MB. A line longer than
/// `max_line` is split.
#[derive(Debug)]
pub struct NodeLog {
    node: String,
    emitter: Emitter,
    cap: u64,
    max_line: usize,
    logged: u64,
    dropped: u64,
    partial: [Vec<u8>; 2],
    batch: Vec<NewLogLine>,
    /// One masker per stream: a secret split over two lines of the same
    /// stream is masked on both.
    masks: [LineRedactor<()>; 2],
}

impl NodeLog {
    /// A splitter for `node`.
    pub fn new(node: &NodeId, emitter: Emitter, cap: u64, max_line: usize) -> Self {
        Self {
            node: node.to_string(),
            emitter,
            cap,
            max_line: max_line.max(1),
            logged: 0,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
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
        let room = self.cap.saturating_sub(self.logged);
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
        while self.partial[slot].len() >= self.max_line {
            let rest = self.partial[slot].split_off(self.max_line);
            self.line(slot);
            self.partial[slot] = rest;
        }
        // Hand complete lines over per chunk, not per batch: the log is
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
            self.batch.push(NewLogLine {
                stream: Self::stream_name(slot).into(),
                node_id: Some(self.node.clone()),
                line: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
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
        if self.dropped > 0 {
            self.batch.push(NewLogLine {
                stream: OutputStream::System.as_str().into(),
                node_id: Some(self.node.clone()),
                line: format!(
                    "…truncated {} bytes (node log cap {} bytes)",
                    self.dropped, self.cap
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
        };
        let mut log = NodeLog::new(&NodeId::new("n"), emitter, 20, 6);
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
                "system:…truncated 12 bytes (node log cap 20 bytes)"
            ]
        );
    }
}
