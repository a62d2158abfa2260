//! Hostile inputs (NULs, deep nesting, long lines, many errors, an unclosed
//! bracket before a sea of blank lines) stay bounded through compile *and*
//! rendering: at most `MAX_PER_FILE` diagnostics, output bytes bounded by
//! the diagnostics shown, peak heap of the compile+render measured by a
//! counting allocator, and the work (bytes allocated in total) growing
//! linearly between a 64 KiB and a 1 MiB input. No timing here: wall time
//! is the bench's job (`cargo bench -p iterion-dsl --bench parse`).

// The counting allocator needs `unsafe impl GlobalAlloc`; no maintained
// crate counts per thread, and the test harness runs tests on parallel
// threads, so a process-wide counter would mix their figures.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use iterion_dsl::diag::{MAX_MESSAGE_CHARS, MAX_PER_FILE, WINDOW_CHARS};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
    static TOTAL: Cell<u64> = const { Cell::new(0) };
}

fn note(delta: i64, grown: u64) {
    let _ = ON.try_with(|on| {
        if on.get() {
            let live = LIVE.with(|l| {
                l.set(l.get() + delta);
                l.get()
            });
            PEAK.with(|p| p.set(p.get().max(live)));
            TOTAL.with(|t| t.set(t.get() + grown));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping only touches const-initialised thread-locals (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as i64, layout.size() as u64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as i64), 0);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let delta = new_size as i64 - layout.size() as i64;
            note(delta, delta.max(0) as u64);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// What one compile + both renderings cost on this thread.
#[derive(Debug, Clone, Copy)]
struct Cost {
    peak_bytes: i64,
    total_bytes: u64,
    kept: usize,
    #[allow(dead_code, reason = "shown in the failure message")]
    omitted: usize,
    human_bytes: usize,
    json_bytes: usize,
}

fn measure(text: &str) -> Cost {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TOTAL.with(|t| t.set(0));
    ON.with(|o| o.set(true));
    let c = iterion_dsl::compile_source(text, Path::new("hostile.iter"));
    let mut human = iterion_dsl::render_human(text, &c.diagnostics);
    if let Some(more) = iterion_dsl::render_omitted(c.omitted) {
        human.push_str(&more);
    }
    let json = serde_json::to_string(&iterion_dsl::diag::json_file(
        "hostile.iter",
        &c.diagnostics,
        c.omitted,
    ))
    .expect("json");
    ON.with(|o| o.set(false));
    assert!(c.has_errors(), "hostile input must be refused");
    assert_rendering_bounded(&human, c.diagnostics.len());
    Cost {
        peak_bytes: PEAK.with(Cell::get),
        total_bytes: TOTAL.with(Cell::get),
        kept: c.diagnostics.len(),
        omitted: c.omitted.total(),
        human_bytes: human.len(),
        json_bytes: json.len(),
    }
}

/// Every rendered line is at most a window plus its frame, no control
/// character reaches the terminal, and the whole is bounded per diagnostic.
pub(crate) fn assert_rendering_bounded(human: &str, kept: usize) {
    // a message or hint (plus its prefix and ellipsis), or a window line
    let max_line_chars = (MAX_MESSAGE_CHARS + 40).max(WINDOW_CHARS + 20);
    for line in human.lines() {
        assert!(
            line.chars().count() <= max_line_chars,
            "rendered line too long: {} chars",
            line.chars().count()
        );
        assert!(
            !line.chars().any(|c| c.is_control()),
            "control character rendered: {line:?}"
        );
    }
    // header, -->, |, source, caret, hint, blank: 7 lines of ≤ 4 bytes/char
    assert!(human.len() <= (kept + 1) * 7 * max_line_chars * 4);
}

const KIB: usize = 1024;

use crate::hostile_inputs::{
    deep_brackets, deep_indent, long_line, many_errors, nul, open_bracket_then_blank,
};

fn check_kind(name: &str, make: fn(usize) -> String) {
    let small = measure(&make(64 * KIB));
    let big_text = make(KIB * KIB);
    let big = measure(&big_text);
    eprintln!("{name}: 64 KiB {small:?}\n{name}:  1 MiB {big:?}");
    for c in [small, big] {
        assert!(c.kept <= MAX_PER_FILE, "{name}: {c:?}");
        assert!(c.human_bytes <= 1024 * KIB, "{name}: {c:?}");
        assert!(c.json_bytes <= 1024 * KIB, "{name}: {c:?}");
    }
    // the bound for a 1 MiB hostile input
    assert!(big.peak_bytes <= 100 * 1024 * 1024, "{name}: {big:?}");
    // linear: 16x the input may cost at most ~24x the work and the peak
    // (plus a constant for what does not depend on the size)
    let slack = 4 * 1024 * 1024;
    assert!(
        big.total_bytes <= small.total_bytes * 24 + slack,
        "{name}: total {} vs {}",
        big.total_bytes,
        small.total_bytes
    );
    assert!(
        big.peak_bytes <= small.peak_bytes * 24 + slack as i64,
        "{name}: peak {} vs {}",
        big.peak_bytes,
        small.peak_bytes
    );
}

#[test]
fn nul_bytes_are_one_merged_diagnostic() {
    check_kind("nul", nul);
    let text = nul(32 * KIB);
    let c = iterion_dsl::compile_source(&text, Path::new("nul.iter"));
    let e001: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "E001").collect();
    assert_eq!(e001.len(), 1, "{:?}", c.diagnostics);
    assert!(
        e001[0].message.contains("32767 more like it"),
        "{}",
        e001[0].message
    );
    assert_eq!(c.omitted.total(), 0);
}

#[test]
fn deep_indentation_is_bounded() {
    check_kind("deep_indent", deep_indent);
}

#[test]
fn deep_brackets_are_bounded() {
    check_kind("deep_brackets", deep_brackets);
}

#[test]
fn long_lines_render_a_window() {
    check_kind("long_line", long_line);
    let text = long_line(KIB * KIB);
    let c = iterion_dsl::compile_source(&text, Path::new("long.iter"));
    let human = iterion_dsl::render_human(&text, &c.diagnostics);
    let source_line = human
        .lines()
        .find(|l| l.starts_with("2 | "))
        .expect("source excerpt");
    assert!(source_line.ends_with('…'), "{source_line}");
}

#[test]
fn many_errors_are_capped_with_a_count() {
    check_kind("many_errors", many_errors);
    let text = many_errors(64 * KIB);
    let c = iterion_dsl::compile_source(&text, Path::new("many.iter"));
    assert_eq!(c.diagnostics.len(), MAX_PER_FILE);
    assert!(c.omitted.errors > 1000, "{:?}", c.omitted);
    let more = iterion_dsl::render_omitted(c.omitted).expect("more line");
    assert!(more.contains(&format!("{} more", c.omitted.total())));
    let json = iterion_dsl::diag::json_file("many.iter", &c.diagnostics, c.omitted);
    assert_eq!(json["omitted"]["errors"], c.omitted.errors);
}

#[test]
fn blank_lines_inside_an_open_bracket_stay_linear() {
    check_kind("open_bracket_blank", open_bracket_then_blank);
}

#[test]
fn control_characters_never_reach_the_terminal() {
    let text = "tool a:\n  command: \"\u{1b}[2J\u{7}\"\n  bogus\u{1b}: \"\u{1b}]0;pwned\u{7}\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let c = iterion_dsl::compile_source(text, Path::new("esc.iter"));
    assert!(c.has_errors());
    let human = iterion_dsl::render_human(text, &c.diagnostics);
    assert!(!human.contains('\u{1b}'), "{human}");
    assert_rendering_bounded(&human, c.diagnostics.len());
}

#[test]
fn ten_thousand_deep_expressions_are_c040_not_a_crash() {
    for body in [
        format!("{}ok{}", "(".repeat(10_000), ")".repeat(10_000)),
        format!("{}ok", "!".repeat(10_000)),
        format!("{}1", "-".repeat(10_000)),
        format!("length({}1{})", "concat(".repeat(5_000), ")".repeat(5_000)),
    ] {
        let text = format!(
            "schema v:\n  ok: bool\n\ntool a:\n  command: \"true\"\n  output: v\n\nworkflow w:\n  entry: a\n  a -> done when \"{body}\"\n  a -> fail\n"
        );
        let c = iterion_dsl::compile_source(&text, Path::new("deep.iter"));
        let c040: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C040").collect();
        assert_eq!(c040.len(), 1, "{:?}", c.diagnostics);
        assert!(
            c040[0].message.contains("deeper than 256"),
            "{}",
            c040[0].message
        );
        assert_eq!(c040[0].line, 10);
    }
}
