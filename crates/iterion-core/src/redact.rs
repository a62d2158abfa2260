//! Masking the run's secret values in everything it writes down: node log
//! lines, stderr tails, node outputs and event payloads (issue 19 #13).
//!
//! Exact matching alone let a secret out as soon as a command transformed
//! it. A value is masked as written and in the encodings a command reaches
//! for without trying: ASCII case changed (upper, lower, mixed) and Unicode
//! upper/lower case, base64 (standard and URL-safe, with and without
//! padding, and the part of it that stays fixed when the value sits at any
//! offset of a longer encoded text), and hex (either case). A value split
//! by a line break — printed in two `echo`s, wrapped by `base64`, or a
//! multi-line secret itself — is masked on each line: line breaks are
//! invisible to the matcher.
//!
//! Cost is linear in the output: one Aho–Corasick automaton (a DFA, or the
//! NFA when the patterns would make the DFA too large) over every variant
//! of every value, stepped byte by byte through the stream with
//! line breaks skipped; a [`LineRedactor`] holds back only the lines a
//! match still in progress could reach (at most the longest variant's
//! length of text).
//!
//! It is the one redactor of iterion (issue 31 #9): the runtime's node
//! logs, event payloads and stderr tails, and a driver's own exec output
//! ([`crate::driver::LineSplitter`], e.g. a `post_create` echoing the proxy
//! URL) all mask through it, so a value masked on one path is masked in the
//! same forms on every other.
//!
//! It does not decide which values are secret (the runtime's secrets
//! module does) nor where text goes (the engine, the event writer and the
//! drivers do).

use std::sync::Arc;

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Anchored, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// What a masked value reads as.
pub const REDACTED: &str = "[REDACTED]";

/// Shortest offset-free base64 core worth a pattern: below 8 characters it
/// would mask innocent text (the whole encodings are patterns anyway).
const MIN_CORE: usize = 8;

/// Masks secret values and their common encodings.
#[derive(Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    /// `None` when no automaton could be built: every line is then masked
    /// whole (failing closed, never open).
    machine: Option<Machine>,
    max_len: usize,
}

/// The automaton stepped through the stream: a DFA (one table lookup per
/// byte) unless the patterns make it too large, then the NFA (failure
/// links, still linear).
enum Machine {
    Dfa(DFA),
    Nfa(NFA),
}

impl Machine {
    fn build(patterns: &[Vec<u8>]) -> Result<Self, aho_corasick::BuildError> {
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(true)
            .start_kind(aho_corasick::StartKind::Unanchored)
            .build(patterns);
        match dfa {
            Ok(d) => Ok(Self::Dfa(d)),
            Err(_) => NFA::builder()
                .match_kind(MatchKind::Standard)
                .ascii_case_insensitive(true)
                .build(patterns)
                .map(Self::Nfa),
        }
    }

    fn patterns(&self) -> usize {
        match self {
            Self::Dfa(d) => d.patterns_len(),
            Self::Nfa(n) => n.patterns_len(),
        }
    }

    fn longest(&self) -> usize {
        match self {
            Self::Dfa(d) => d.max_pattern_len(),
            Self::Nfa(n) => n.max_pattern_len(),
        }
    }

    fn start(&self) -> Option<StateID> {
        match self {
            Self::Dfa(d) => d.start_state(Anchored::No).ok(),
            Self::Nfa(n) => n.start_state(Anchored::No).ok(),
        }
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            None => f.write_str("Redactor(none)"),
            Some(i) => match &i.machine {
                Some(m) => write!(f, "Redactor({} patterns)", m.patterns()),
                None => f.write_str("Redactor(masks everything)"),
            },
        }
    }
}

/// Every form of `value` that is masked, without line breaks (the matcher
/// never sees them).
fn variants(value: &str) -> Vec<Vec<u8>> {
    let bytes = value.as_bytes();
    let flat = |s: &str| -> Vec<u8> { s.bytes().filter(|b| !matches!(b, b'\n' | b'\r')).collect() };
    let mut out = vec![
        flat(value),
        flat(&value.to_uppercase()),
        flat(&value.to_lowercase()),
        // Hex in either case: the automaton ignores ASCII case.
        hex::encode(bytes).into_bytes(),
    ];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        out.push(engine.encode(bytes).into_bytes());
    }
    // Inside a longer encoded text the value starts at byte offset 0, 1 or
    // 2 of a 3-byte group; the groups made of its own bytes only encode the
    // same whatever surrounds them.
    for skip in 1..3 {
        if let Some(rest) = bytes.get(skip..) {
            let whole = rest.len() - rest.len() % 3;
            for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                let core = engine.encode(&rest[..whole]);
                if core.len() >= MIN_CORE {
                    out.push(core.into_bytes());
                }
            }
        }
    }
    let whole = bytes.len() - bytes.len() % 3;
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        let core = engine.encode(&bytes[..whole]);
        if core.len() >= MIN_CORE {
            out.push(core.into_bytes());
        }
    }
    out.retain(|v| !v.is_empty());
    out.sort();
    out.dedup();
    out
}

impl Redactor {
    /// A redactor for `values` (empty ones are ignored).
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns: Vec<Vec<u8>> = values
            .into_iter()
            .filter(|v| !v.as_ref().is_empty())
            .flat_map(|v| variants(v.as_ref()))
            .collect();
        if patterns.is_empty() {
            return Self::default();
        }
        let inner = match Machine::build(&patterns) {
            Ok(m) => Inner {
                max_len: m.longest(),
                machine: Some(m),
            },
            // Only megabytes of secrets exceed the automaton's limits: the
            // run's output is then masked whole rather than left open.
            // [`Redactor::masks_everything`] lets a caller say so.
            Err(_) => Inner {
                machine: None,
                max_len: 0,
            },
        };
        Self {
            inner: Some(Arc::new(inner)),
        }
    }

    /// Whether no matcher could be built for the values (only megabytes of
    /// secrets do that), so every line is masked whole: failing closed.
    pub fn masks_everything(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.machine.is_none())
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `text` with every masked form replaced by [`REDACTED`]; a form split
    /// over the text's line breaks is masked on each of its lines.
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_owned();
        }
        let mut lines = self.lines();
        let mut out = Vec::new();
        let mut parts = text.split('\n').peekable();
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            let (body, cr) = match part.strip_suffix('\r') {
                Some(b) => (b, true),
                None => (part, false),
            };
            out.extend(lines.push(body.as_bytes(), (cr, !last)));
        }
        out.extend(lines.finish());
        let mut s = String::with_capacity(text.len());
        for (line, (cr, newline)) in out {
            s.push_str(&String::from_utf8_lossy(&line));
            if cr {
                s.push('\r');
            }
            if newline {
                s.push('\n');
            }
        }
        s
    }

    /// Mask every string in `value` (event payloads), keys included; each
    /// string is its own text.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::String(s) => {
                    let masked = self.redact(s);
                    if masked != *s {
                        *s = masked;
                    }
                }
                serde_json::Value::Array(a) => stack.extend(a.iter_mut()),
                serde_json::Value::Object(o) => {
                    // Keys too: an agent's structured output may name a
                    // secret in one.
                    if o.keys().any(|k| self.redact(k) != *k) {
                        let taken = std::mem::take(o);
                        for (k, v) in taken {
                            o.insert(self.redact(&k), v);
                        }
                    }
                    stack.extend(o.values_mut());
                }
                _ => {}
            }
        }
    }

    /// A masker for one stream of lines.
    pub fn lines<T>(&self) -> LineRedactor<T> {
        let state = self
            .inner
            .as_ref()
            .and_then(|i| i.machine.as_ref())
            .and_then(Machine::start);
        LineRedactor {
            inner: self.inner.clone(),
            state,
            pos: 0,
            pending: std::collections::VecDeque::new(),
            masked: Vec::new(),
        }
    }
}

/// Masks one stream of lines (a node's stdout, or its stderr): a value
/// split by a line break is masked on both lines. A line comes back once
/// no match still in progress can reach it, with the tag it was pushed
/// with; [`LineRedactor::finish`] returns the rest.
pub struct LineRedactor<T> {
    inner: Option<Arc<Inner>>,
    state: Option<StateID>,
    /// Bytes of the stream seen so far (line breaks excluded).
    pos: usize,
    /// Lines not yet returned: start offset, bytes, tag.
    pending: std::collections::VecDeque<(usize, Vec<u8>, T)>,
    /// Masked ranges `[start, end)` of the stream, ascending, merged.
    masked: Vec<(usize, usize)>,
}

impl<T> std::fmt::Debug for LineRedactor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineRedactor")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<T> LineRedactor<T> {
    /// Feed one line (without its line break); returns the lines now safe
    /// to write, masked, in order.
    pub fn push(&mut self, line: &[u8], tag: T) -> Vec<(Vec<u8>, T)> {
        let Some(inner) = self.inner.clone() else {
            return vec![(line.to_vec(), tag)];
        };
        let (Some(machine), Some(mut sid)) = (inner.machine.as_ref(), self.state) else {
            return vec![(REDACTED.as_bytes().to_vec(), tag)];
        };
        let start = self.pos;
        match machine {
            Machine::Dfa(d) => self.scan(d, &mut sid, line),
            Machine::Nfa(n) => self.scan(n, &mut sid, line),
        }
        self.state = Some(sid);
        self.pending.push_back((start, line.to_vec(), tag));
        // A match not yet seen ends past `pos` and is at most `max_len`
        // long: a line ending at or before `pos + 1 - max_len` is final.
        // Back at the start state no pattern is under way at all: every
        // line is final (the common case: nothing is held back).
        let horizon = match machine.start() == Some(sid) {
            true => self.pos,
            false => (self.pos + 1).saturating_sub(inner.max_len),
        };
        let mut ready = Vec::new();
        while self
            .pending
            .front()
            .is_some_and(|(s, l, _)| s + l.len() <= horizon)
        {
            if let Some(done) = self.release() {
                ready.push(done);
            }
        }
        ready
    }

    /// Step the automaton through `line`, masking every match that ends.
    fn scan<A: Automaton>(&mut self, aut: &A, sid: &mut StateID, line: &[u8]) {
        for &b in line {
            *sid = aut.next_state(Anchored::No, *sid, b);
            self.pos += 1;
            if aut.is_special(*sid) && aut.is_match(*sid) {
                for i in 0..aut.match_len(*sid) {
                    let len = aut.pattern_len(aut.match_pattern(*sid, i));
                    self.mask(self.pos.saturating_sub(len), self.pos);
                }
            }
        }
    }

    /// Every line still held, masked.
    pub fn finish(&mut self) -> Vec<(Vec<u8>, T)> {
        let mut out = Vec::new();
        while let Some(done) = self.release() {
            out.push(done);
        }
        out
    }

    fn mask(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        match self.masked.last_mut() {
            // Matches end in order, so only the last range can touch.
            Some((_, e)) if start <= *e => *e = (*e).max(end),
            _ => {
                let at = self.masked.partition_point(|(s, _)| *s < start);
                self.masked.insert(at, (start, end));
                // Keep the list merged after an out-of-order insert.
                let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.masked.len());
                for (s, e) in self.masked.drain(..) {
                    match merged.last_mut() {
                        Some((_, me)) if s <= *me => *me = (*me).max(e),
                        _ => merged.push((s, e)),
                    }
                }
                self.masked = merged;
            }
        }
    }

    fn release(&mut self) -> Option<(Vec<u8>, T)> {
        let (start, line, tag) = self.pending.pop_front()?;
        let end = start + line.len();
        if !self.masked.iter().any(|&(s, e)| s < end && e > start) {
            self.masked.retain(|(_, e)| *e > end);
            return Some((line, tag));
        }
        let mut out = Vec::with_capacity(line.len());
        let mut at = start;
        // Ranges are merged: each one is one marker.
        for &(s, e) in &self.masked {
            if e <= start || s >= end {
                continue;
            }
            let (s, e) = (s.max(start), e.min(end));
            if s >= e {
                continue;
            }
            out.extend_from_slice(&line[at - start..s - start]);
            out.extend_from_slice(REDACTED.as_bytes());
            at = e;
        }
        out.extend_from_slice(&line[at - start..]);
        // Ranges wholly before what is still pending are done with.
        let next = self.pending.front().map_or(self.pos, |(s, _, _)| *s);
        self.masked.retain(|(_, e)| *e > next);
        Some((out, tag))
    }
}

/// The last `cap` bytes of one stream (a node's stderr tail), masked as
/// the whole stream is: every byte goes through the stream's masker and
/// only the last lines are kept, so a tail that starts inside a secret
/// never shows the rest of it.
pub struct TailRedactor {
    partial: Vec<u8>,
    mask: LineRedactor<()>,
    lines: std::collections::VecDeque<Vec<u8>>,
    held: usize,
    cap: usize,
    max_line: usize,
}

impl std::fmt::Debug for TailRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailRedactor")
            .field("held", &self.held)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl TailRedactor {
    /// A tail of at most `cap` bytes; lines longer than `max_line` are
    /// taken in pieces (memory stays bounded whatever the stream).
    pub fn new(redactor: &Redactor, cap: usize, max_line: usize) -> Self {
        Self {
            partial: Vec::new(),
            mask: redactor.lines(),
            lines: std::collections::VecDeque::new(),
            held: 0,
            cap,
            max_line: max_line.max(1),
        }
    }

    /// Feed the stream's next bytes.
    pub fn push(&mut self, mut data: &[u8]) {
        while let Some(at) = data.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&data[..at]);
            self.line();
            data = &data[at + 1..];
        }
        self.partial.extend_from_slice(data);
        while self.partial.len() >= self.max_line {
            let rest = self.partial.split_off(self.max_line);
            self.line();
            self.partial = rest;
        }
    }

    fn line(&mut self) {
        let mut line = std::mem::take(&mut self.partial);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let ready = self.mask.push(&line, ());
        self.keep(ready);
    }

    fn keep(&mut self, ready: Vec<(Vec<u8>, ())>) {
        for (line, ()) in ready {
            self.held += line.len() + 1;
            self.lines.push_back(line);
            while self.held > self.cap && self.lines.len() > 1 {
                if let Some(old) = self.lines.pop_front() {
                    self.held -= old.len() + 1;
                }
            }
        }
    }

    /// The masked tail, at most `cap` bytes (cut at a character boundary).
    pub fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            self.line();
        }
        let rest = self.mask.finish();
        self.keep(rest);
        let joined: Vec<u8> = self
            .lines
            .iter()
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect();
        let text = String::from_utf8_lossy(&joined).into_owned();
        let mut cut = text.len().saturating_sub(self.cap);
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text[cut..].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "ghp_S3cr3tValue-42x";

    fn r() -> Redactor {
        Redactor::new([SECRET, "t0ken"])
    }

    #[test]
    fn exact_case_changed_and_encoded_copies_are_masked() {
        let b64 = STANDARD.encode(SECRET);
        let cases = [
            SECRET.to_owned(),
            SECRET.to_uppercase(),
            SECRET.to_lowercase(),
            "gHP_s3CR3tVALUE-42X".to_owned(),
            b64.clone(),
            b64.trim_end_matches('=').to_owned(),
            URL_SAFE.encode(SECRET),
            URL_SAFE_NO_PAD.encode(SECRET),
            hex::encode(SECRET),
            hex::encode_upper(SECRET),
        ];
        for leak in cases {
            let out = r().redact(&format!("before {leak} after"));
            assert_eq!(out, "before [REDACTED] after", "{leak}");
        }
    }

    #[test]
    fn base64_of_a_longer_text_is_masked_at_every_offset() {
        for prefix in ["", "a", "ab", "abc", "token=", "Authorization: "] {
            let text = STANDARD.encode(format!("{prefix}{SECRET} trailing"));
            let out = r().redact(&text);
            assert!(out.contains(REDACTED), "{prefix:?}: {out}");
            // What is left visible is the surrounding text's own
            // encoding plus at most a partial group on each side.
            let visible: usize = out.split(REDACTED).map(str::len).sum();
            assert!(visible <= text.len() - 16, "{prefix:?}: {out}");
        }
    }

    #[test]
    fn a_value_split_over_lines_is_masked_on_each() {
        let (a, b) = SECRET.split_at(7);
        assert_eq!(
            r().redact(&format!("x {a}\n{b} y\n")),
            "x [REDACTED]\n[REDACTED] y\n"
        );
        assert_eq!(
            r().redact(&format!("{a}\r\n{b}")),
            "[REDACTED]\r\n[REDACTED]"
        );
        // `base64` wraps its output at 76 columns.
        let long = "k".repeat(70) + SECRET;
        let wrapped = STANDARD.encode(&long);
        let (w1, w2) = wrapped.split_at(76);
        let out = r().redact(&format!("{w1}\n{w2}"));
        assert!(out.contains(REDACTED), "{out}");
        // A one-character-per-line dribble still adds up.
        let dribble: String = SECRET.chars().map(|c| format!("{c}\n")).collect();
        let out = r().redact(&dribble);
        assert!(!out.contains('S'), "{out}");
    }

    #[test]
    fn streams_hold_a_line_only_while_a_match_may_run_into_the_next() {
        let red = r();
        let mut s = red.lines::<u32>();
        let (a, b) = SECRET.split_at(10);
        // No pattern under way: out at once.
        let out = s.push(b"hello", 1);
        assert_eq!(out, vec![(b"hello".to_vec(), 1)]);
        // The first half of a secret may continue on the next line: held.
        assert!(s.push(format!("x {a}").as_bytes(), 2).is_empty());
        let out = s.push(format!("{b} y").as_bytes(), 3);
        let texts: Vec<(String, u32)> = out
            .into_iter()
            .map(|(l, t)| (String::from_utf8_lossy(&l).into_owned(), t))
            .collect();
        assert_eq!(
            texts,
            [(format!("x {REDACTED}"), 2), (format!("{REDACTED} y"), 3)]
        );
        assert!(s.finish().is_empty());
        // A prefix that never completes is released once it cannot.
        let mut s = red.lines::<u32>();
        assert!(s.push(a.as_bytes(), 4).is_empty());
        let out = s.push(b" not the rest...", 5);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].0, a.as_bytes());
    }

    #[test]
    fn innocent_text_is_untouched_and_nothing_masks_nothing() {
        let text = "the build passed: 42 tests, 0 failures\n";
        assert_eq!(r().redact(text), text);
        assert_eq!(Redactor::default().redact(text), text);
        assert!(Redactor::new([""]).is_empty());
    }

    #[test]
    fn json_strings_are_masked_in_place() {
        let mut v = serde_json::json!({"host": format!("{}.evil.test", hex::encode(SECRET)), "n": [1, "t0ken"]});
        r().redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"host": "[REDACTED].evil.test", "n": [1, "[REDACTED]"]})
        );
    }

    #[test]
    fn a_tail_cut_inside_a_secret_shows_none_of_it() {
        let red = r();
        let mut tail = TailRedactor::new(&red, 24, 64);
        // The cap would cut the secret in two: the tail must not start
        // with its second half.
        tail.push(format!("noise\nvalue is {SECRET}").as_bytes());
        tail.push(b" end\n");
        let out = tail.finish();
        assert!(out.len() <= 24, "{out}");
        for piece in [&SECRET[5..], &SECRET[10..], "42x"] {
            assert!(!out.contains(piece), "{out}");
        }
        assert!(out.ends_with(" end\n"), "{out}");
        // Memory stays bounded on a stream without line breaks.
        let mut tail = TailRedactor::new(&red, 16, 32);
        for _ in 0..1000 {
            tail.push(&[b'x'; 100]);
        }
        assert!(tail.lines.len() <= 2 && tail.partial.len() < 32);
    }

    fn encode(kind: u8, v: &str) -> String {
        match kind % 8 {
            0 => v.to_owned(),
            1 => v.to_uppercase(),
            2 => v.to_lowercase(),
            3 => STANDARD.encode(v),
            4 => STANDARD_NO_PAD.encode(v),
            5 => URL_SAFE_NO_PAD.encode(v),
            6 => hex::encode(v),
            _ => hex::encode_upper(v),
        }
    }

    proptest::proptest! {
        /// Whatever the encoding, the surrounding text and where a line
        /// break splits it, no copy of the value survives.
        #[test]
        fn no_encoded_copy_survives(
            secret in "[A-Za-z0-9_.-]{8,40}",
            prefix in "[ -~]{0,30}",
            suffix in "[ -~]{0,30}",
            kind in 0u8..8,
            split in proptest::option::of(0usize..200),
        ) {
            let red = Redactor::new([secret.as_str()]);
            let mut leak = encode(kind, &secret);
            if let Some(at) = split.map(|s| s % (leak.len() + 1)) {
                leak.insert(at, '\n');
            }
            let out = red.redact(&format!("{prefix}{leak}{suffix}"));
            let flat: String = out.chars().filter(|c| *c != '\n').collect();
            let needle = encode(kind, &secret);
            proptest::prop_assert!(!flat.contains(&needle), "{out:?}");
            proptest::prop_assert!(!flat.contains(&secret), "{out:?}");
        }
    }

    #[test]
    fn longest_and_overlapping_values_are_masked_whole() {
        let red = Redactor::new(["abcdef", "cdefgh"]);
        assert_eq!(red.redact("xxabcdefghyy"), "xx[REDACTED]yy");
    }
}
