//! The README and the `docs/` pages cannot rot (issue 32 item 5): what
//! they show is run against the `iterion` binary they describe.
//!
//! - every fenced block says its language, and every ```` ```iter ````
//!   block is a whole workflow that `iterion validate` accepts without a
//!   warning (```` ```iter run ```` blocks are also run on the host and
//!   must end with exit 0);
//! - every `examples/*.iter` the pages name exists, and every example
//!   validates;
//! - every relative link of the repository's Markdown resolves, its
//!   `#anchor` included;
//! - every `iterion …` line of a ```` ```sh ```` block names a real verb
//!   and only flags that verb accepts; the lines that are concrete and
//!   cheap (`validate`, `run` of an example without agents, `sandbox
//!   doctor`, `sandbox manifests`, `sandbox reap --dry-run`, `runs`) are
//!   run as written — on dockerd and on Podman when they touch an engine —
//!   and must succeed; every `scripts/*.sh` a line runs exists;
//! - every `ITERION_*` variable the code reads or sets is in
//!   `docs/environment.md`, and every code or variable the pages name
//!   (`SANDBOX_SPEC_REFUSED`, `ITERION_SANDBOX_MEMORY`, `C044`) exists in
//!   the code or in `DIAGNOSTICS.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use crate::support::Engine;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_iterion")
}

/// The pages a newcomer reads: the README and `docs/*.md` (the reference
/// copies under `docs/reference/` are upstream facts, not our examples).
fn user_pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(
        docs.len() >= 10,
        "docs/ lost its pages: {docs:?} (the README links them)"
    );
    pages.extend(docs);
    pages
}

/// Every Markdown file of the repository we write (links are checked in
/// all of them).
fn all_markdown() -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    for dir in [root.clone(), root.join("docs"), root.join("docs/reference")] {
        for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let p = e.path();
            if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    for e in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        for e in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fenced block: its info string, its text, the line it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

/// A link or image target, with its line.
struct Link {
    dest: String,
    line: usize,
}

/// What a page holds: fenced blocks, links, its heading anchors and its
/// inline code spans.
struct Page {
    blocks: Vec<Block>,
    links: Vec<Link>,
    anchors: BTreeSet<String>,
    spans: Vec<String>,
}

fn parse(text: &str) -> Page {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut page = Page {
        blocks: Vec::new(),
        links: Vec::new(),
        anchors: BTreeSet::new(),
        spans: Vec::new(),
    };
    let mut block: Option<Block> = None;
    let mut heading: Option<String> = None;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (ev, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match ev {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => "(indented)".to_owned(),
                };
                block = Some(Block {
                    info,
                    text: String::new(),
                    line: line_of(range.start),
                });
            }
            Event::End(TagEnd::CodeBlock) => page.blocks.extend(block.take()),
            Event::Start(Tag::Heading { level, .. }) => {
                let _: HeadingLevel = level;
                heading = Some(String::new());
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    // GitHub's anchors: lower case, punctuation dropped,
                    // spaces to dashes, repeats numbered.
                    let base: String = h
                        .to_lowercase()
                        .chars()
                        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                        .map(|c| if c == ' ' { '-' } else { c })
                        .collect();
                    let n = seen.entry(base.clone()).or_insert(0);
                    let anchor = if *n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    };
                    *n += 1;
                    page.anchors.insert(anchor);
                }
            }
            Event::Code(t) => {
                page.spans.push(t.to_string());
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Text(t) => {
                if let Some(b) = block.as_mut() {
                    b.text.push_str(&t);
                } else if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(Link {
                    dest: dest_url.to_string(),
                    line: line_of(range.start),
                });
            }
            _ => {}
        }
    }
    page
}

/// `iterion validate --json FILE` must accept `file` without a diagnostic.
fn assert_validates_clean(file: &Path, cwd: &Path, what: &str) {
    let out = Command::new(bin())
        .args(["validate", "--json"])
        .arg(file)
        .current_dir(cwd)
        .output()
        .expect("spawn iterion validate");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let diags = &doc["files"][0]["diagnostics"];
    assert!(
        out.status.success() && diags.as_array().is_some_and(Vec::is_empty),
        "{what} does not validate cleanly (exit {:?}):\n{}\n{}",
        out.status.code(),
        serde_json::to_string_pretty(diags).unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fence languages the pages may use: `iter` is validated, `sh` is
/// checked line by line, the others are shown as they are.
const LANGUAGES: &[&str] = &["iter", "sh", "text", "json", "yaml"];

#[test]
fn every_block_of_the_docs_says_its_language_and_every_workflow_validates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut validated = 0;
    let mut ran = 0;
    for page in user_pages() {
        for (i, b) in parse(&read(&page)).blocks.iter().enumerate() {
            let where_ = format!("{}:{} (block {i})", rel(&page), b.line);
            let mut words = b.info.split_whitespace();
            let lang = words.next().unwrap_or("");
            assert!(
                LANGUAGES.contains(&lang),
                "{where_}: a fenced block must say its language, one of {LANGUAGES:?} (got {:?}), so that none escapes this test",
                b.info
            );
            if lang != "iter" {
                continue;
            }
            let file = tmp.path().join(format!("block-{validated}.iter"));
            std::fs::write(&file, &b.text).expect("write block");
            assert_validates_clean(&file, tmp.path(), &where_);
            validated += 1;
            if words.next() == Some("run") {
                let store = tmp.path().join(format!("store-{ran}"));
                let out = Command::new(bin())
                    .args(["run", "--sandbox", "none", "--no-interactive", "--json"])
                    .arg(&file)
                    .current_dir(tmp.path())
                    .env("ITERION_STORE", &store)
                    .output()
                    .expect("spawn iterion run");
                assert!(
                    out.status.success(),
                    "{where_}: `iterion run --sandbox none` of this block failed (exit {:?}):\n{}\n{}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                ran += 1;
            }
        }
    }
    // The README's hello block and the pages' examples: a parser that
    // found nothing would pass vacuously.
    assert!(
        validated >= 15 && ran >= 3,
        "only {validated} iter blocks validated and {ran} run"
    );
}

#[test]
fn every_example_the_docs_name_exists_and_every_example_validates() {
    let root = root();
    let named = regex_lite_examples();
    let mut pages = all_markdown();
    pages.push(root.join("scripts/quickstart.sh"));
    for page in &pages {
        let text = read(page);
        for name in named(&text) {
            if name.contains('*') {
                continue;
            }
            assert!(
                root.join(&name).is_file(),
                "{} names {name}, which does not exist",
                rel(page)
            );
        }
    }
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "iter"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 5, "examples/ lost its workflows");
    for ex in examples {
        assert_validates_clean(&ex, &root, &rel(&ex));
    }
}

/// `examples/NAME.iter` mentions of a text (no regex crate for one shape).
fn regex_lite_examples() -> impl Fn(&str) -> Vec<String> {
    |text: &str| {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("examples/") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/._*-".contains(c)))
                .unwrap_or(tail.len());
            let name = tail[..end].trim_end_matches('.');
            if name.ends_with(".iter") {
                out.push(name.to_owned());
            }
            rest = &tail["examples/".len()..];
        }
        out
    }
}

#[test]
fn every_relative_link_resolves() {
    let mut anchors: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |p: &Path| {
        anchors
            .entry(p.to_path_buf())
            .or_insert_with(|| parse(&read(p)).anchors)
            .clone()
    };
    let mut checked = 0;
    for page in all_markdown() {
        let parsed = parse(&read(&page));
        for link in &parsed.links {
            let dest = link.dest.as_str();
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            let where_ = format!("{}:{}", rel(&page), link.line);
            let (path, frag) = dest.split_once('#').unwrap_or((dest, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("parent").join(path)
            };
            assert!(
                target.exists(),
                "{where_}: link {dest:?} points at {}, which does not exist",
                target.display()
            );
            if !frag.is_empty() {
                assert!(
                    target.extension().is_some_and(|e| e == "md"),
                    "{where_}: an anchor into a file that is not Markdown: {dest:?}"
                );
                let known = anchors_of(&target.canonicalize().expect("canonical"));
                assert!(
                    known.contains(frag),
                    "{where_}: {dest:?} names no heading of {} (its anchors: {known:?})",
                    rel(&target)
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} relative links found");
}

/// One command of a shell line: its leading `NAME=value` assignments
/// dropped, `$(…)` replaced by a word, comments gone.
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    // `$(…)` is a value the docs leave to the shell: one opaque word.
    let mut flat = String::new();
    let mut depth = 0usize;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek() == Some(&'(') {
            chars.next();
            depth += 1;
            flat.push_str("SUBST");
            continue;
        }
        if depth > 0 {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            continue;
        }
        flat.push(c);
    }
    let words = shlex::split(&flat).unwrap_or_else(|| panic!("not a shell line: {line}"));
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    for w in words {
        // Separators shlex leaves glued to a word.
        let (word, ends) = match w.strip_suffix(';') {
            Some(s) => (s.to_owned(), true),
            None => (
                w.clone(),
                matches!(w.as_str(), "&&" | "||" | "|" | "&" | ";"),
            ),
        };
        if !matches!(word.as_str(), "&&" | "||" | "|" | "&" | ";" | "") {
            if cur.is_empty() && is_assignment(&word) {
                continue;
            }
            cur.push(word);
        }
        if ends && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A word the docs leave for the reader to fill (`FILE`, `RUN_ID`,
/// `K=V`, `sk-ant-...`): such a line is checked, never run.
fn is_placeholder(w: &str) -> bool {
    if w.contains("...") || w.contains('…') || w.contains('<') || w == "SUBST" {
        return true;
    }
    // Two or more capitals in a row, not inside a lower-case word.
    let b = w.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_uppercase() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_uppercase() || b[i] == b'_') {
                i += 1;
            }
            let glued = (start > 0 && b[start - 1].is_ascii_lowercase())
                || (i < b.len() && b[i].is_ascii_lowercase());
            if i - start >= 2 && !glued {
                return true;
            }
            if i - start == 1 && !glued && (i == b.len() || b[i] == b'=') {
                // `K=V`, `V`: single-letter stand-ins.
                return true;
            }
        } else {
            i += 1;
        }
    }
    false
}

/// The flags `iterion VERB… --help` lists.
fn flags_of(verb: &[String]) -> &'static BTreeSet<String> {
    static CACHE: OnceLock<std::sync::Mutex<BTreeMap<Vec<String>, &'static BTreeSet<String>>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().expect("cache");
    if let Some(f) = cache.get(verb) {
        return f;
    }
    let out = Command::new(bin())
        .args(verb)
        .arg("--help")
        .output()
        .expect("spawn iterion --help");
    assert!(
        out.status.success(),
        "`iterion {} --help` fails: the docs name a verb the binary does not have\n{}",
        verb.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let flags: BTreeSet<String> = help
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '[' | ']' | '='))
        .filter(|w| w.starts_with('-') && w.len() > 1)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_owned()
        })
        .collect();
    let leaked: &'static BTreeSet<String> = Box::leak(Box::new(flags));
    cache.insert(verb.to_vec(), leaked);
    leaked
}

/// The verb path of `iterion ARGS` (`["sandbox", "doctor"]`), and where
/// its arguments start.
fn verb_of(args: &[String]) -> (Vec<String>, usize) {
    match args.first().map(String::as_str) {
        Some("sandbox") => (args.iter().take(2).cloned().collect(), 2),
        Some(_) => (vec![args[0].clone()], 1),
        None => (Vec::new(), 0),
    }
}

/// Whether a concrete `iterion ARGS` line is cheap and safe to run as
/// written, and on how many engines (`true`: each of dockerd and Podman).
fn runnable(args: &[String], root: &Path) -> Option<bool> {
    let (verb, at) = verb_of(args);
    let rest = &args[at..];
    match verb.join(" ").as_str() {
        "validate" | "runs" | "sandbox manifests" => Some(false),
        "sandbox doctor" => Some(true),
        "sandbox reap" if rest.iter().any(|a| a == "--dry-run") => Some(true),
        "run" => {
            let file = rest.iter().find(|a| a.ends_with(".iter"))?;
            let text = std::fs::read_to_string(root.join(file)).ok()?;
            // An agent needs a provider; the agents example has its own test.
            let has_agent = text
                .lines()
                .any(|l| l.starts_with("agent ") || l.starts_with("judge "));
            let sandboxed = !rest
                .windows(2)
                .any(|w| w[0] == "--sandbox" && w[1] == "none");
            (file.starts_with("examples/") && !has_agent).then_some(sandboxed)
        }
        _ => None,
    }
}

/// Run `iterion ARGS` as the docs wrote it, from a copy of the
/// repository's examples, with a private store.
fn run_as_written(args: &[String], engine: Option<Engine>, work: &Path) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(work)
        .env("ITERION_STORE", work.join(".store"))
        .env("ITERION_MODE", "local")
        .env_remove("ITERION_SANDBOX_DEFAULT")
        .env_remove("ITERION_SANDBOX_OVERRIDE")
        .env_remove("ITERION_SANDBOX_PREFLIGHT")
        .env_remove("ITERION_SANDBOX_DOCKER_BINDS")
        .env_remove("ITERION_SANDBOX_DEFAULT_IMAGE");
    match engine {
        Some(e) => cmd.env("DOCKER_HOST", e.host()),
        // Host-only commands must not need an engine.
        None => cmd.env("DOCKER_HOST", "unix:///nonexistent/iterion-docs-test.sock"),
    };
    cmd.output().expect("spawn iterion")
}

#[test]
fn the_shell_lines_of_the_docs_name_real_verbs_and_flags_and_the_cheap_ones_run() {
    let root = root();
    let work = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(work.path().join("examples")).expect("mkdir");
    for e in std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .flatten()
    {
        std::fs::copy(e.path(), work.path().join("examples").join(e.file_name()))
            .expect("copy example");
    }
    let mut checked = 0;
    let mut ran: BTreeSet<String> = BTreeSet::new();
    for page in user_pages() {
        let parsed = parse(&read(&page));
        for b in parsed.blocks.iter().filter(|b| b.info == "sh") {
            for (n, line) in b.text.lines().enumerate() {
                let where_ = format!("{}:{}", rel(&page), b.line + 1 + n);
                for cmd in shell_commands(line) {
                    let program = cmd[0].as_str();
                    if program.starts_with("scripts/") {
                        let p = root.join(program);
                        assert!(p.is_file(), "{where_}: {program} does not exist");
                        continue;
                    }
                    if program != "iterion" {
                        continue;
                    }
                    let args = &cmd[1..];
                    let (verb, at) = verb_of(args);
                    let flags = flags_of(&verb);
                    for a in &args[at..] {
                        if !a.starts_with('-') || a == "-" {
                            continue;
                        }
                        let flag = a.split('=').next().unwrap_or(a);
                        assert!(
                            flags.contains(flag),
                            "{where_}: `iterion {}` has no flag {flag} (it has {flags:?})",
                            verb.join(" ")
                        );
                    }
                    checked += 1;
                    if args.iter().any(|a| is_placeholder(a)) {
                        continue;
                    }
                    let Some(on_engines) = runnable(args, &root) else {
                        continue;
                    };
                    // Globs (`examples/*.iter`) are the shell's.
                    let args: Vec<String> = args
                        .iter()
                        .flat_map(|a| expand_glob(a, work.path()))
                        .collect();
                    let engines: Vec<Option<Engine>> = if on_engines {
                        Engine::ALL.iter().copied().map(Some).collect()
                    } else {
                        vec![None]
                    };
                    for engine in engines {
                        let out = run_as_written(&args, engine, work.path());
                        assert!(
                            out.status.success(),
                            "{where_}: `iterion {}` ({engine:?}) failed with exit {:?}:\n{}\n{}",
                            args.join(" "),
                            out.status.code(),
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        );
                    }
                    ran.insert(format!("iterion {}", cmd[1..].join(" ")));
                }
            }
        }
    }
    // The README's own first commands are among those run: a classifier
    // that ran nothing would pass vacuously.
    for must in [
        "iterion validate examples/hello.iter",
        "iterion run examples/hello.iter",
        "iterion run examples/hello.iter --sandbox none",
        "iterion sandbox doctor",
    ] {
        assert!(ran.contains(must), "`{must}` was not run; ran {ran:#?}");
    }
    assert!(checked >= 30, "only {checked} iterion lines checked");
}

fn expand_glob(word: &str, cwd: &Path) -> Vec<String> {
    let Some((dir, pat)) = word.rsplit_once('/') else {
        return vec![word.to_owned()];
    };
    let Some((pre, post)) = pat.split_once('*') else {
        return vec![word.to_owned()];
    };
    let mut out: Vec<String> = std::fs::read_dir(cwd.join(dir))
        .expect("glob dir")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(pre) && n.ends_with(post))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{word} matches nothing");
    out
}

/// Every `.rs` file under `crates/*/src` (what iterion itself reads and
/// sets), and under `crates/*/tests` too when `tests` is set.
fn rust_sources(tests: bool) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push((p.clone(), read(&p)));
            }
        }
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        walk(&e.path().join("src"), &mut out);
        if tests {
            walk(&e.path().join("tests"), &mut out);
            walk(&e.path().join("benches"), &mut out);
        }
    }
    out
}

/// `"ITERION_…"` string literals of a source text.
fn iterion_literals(text: &str) -> Vec<String> {
    text.match_indices("\"ITERION_")
        .filter_map(|(at, _)| {
            let tail = &text[at + 1..];
            let end =
                tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))?;
            // `"ITERION_"` alone is a prefix the code tests, not a variable.
            (end > "ITERION_".len() && tail.as_bytes().get(end) == Some(&b'"'))
                .then(|| tail[..end].to_owned())
        })
        .collect()
}

#[test]
fn the_environment_page_names_every_variable_the_code_reads_or_sets() {
    let env_page = read(&root().join("docs/environment.md"));
    // Names that are not variables of iterion: the test kit's own, a
    // unit test's, and NATS stream names.
    const NOT_OPERATOR_VARIABLES: &[&str] = &[
        "ITERION_X",
        "ITERION_TEST_SECRET_VAR",
        "ITERION_RUNS",
        "ITERION_RUNS_DLQ",
    ];
    let mut missing = BTreeSet::new();
    let mut seen = 0;
    for (path, text) in rust_sources(false) {
        if path
            .components()
            .any(|c| c.as_os_str() == "iterion-testkit")
        {
            continue;
        }
        for var in iterion_literals(&text) {
            seen += 1;
            if NOT_OPERATOR_VARIABLES.contains(&var.as_str()) {
                continue;
            }
            if !env_page.contains(&format!("`{var}`")) {
                missing.insert(format!("{var} ({})", rel(&path)));
            }
        }
    }
    assert!(seen > 50, "found only {seen} ITERION_ literals");
    assert!(
        missing.is_empty(),
        "docs/environment.md does not name these variables the code reads or sets: {missing:#?}"
    );
}

#[test]
fn every_code_and_variable_the_docs_name_exists() {
    let root = root();
    // Whole words only: `ITERION_SANDBOX_CPU` is not `ITERION_SANDBOX_CPUS`.
    let code: BTreeSet<String> = rust_sources(true)
        .into_iter()
        // This file quotes names to explain itself.
        .filter(|(p, _)| !p.ends_with("docs_e2e.rs"))
        .map(|(_, t)| t)
        .chain(
            std::fs::read_dir(root.join("scripts"))
                .expect("scripts/")
                .flatten()
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()),
        )
        .flat_map(|t| {
            t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.contains('_'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let diagnostics = read(&root.join("crates/iterion-dsl/DIAGNOSTICS.md"));
    let mut unknown = BTreeSet::new();
    let mut seen = 0;
    for page in user_pages() {
        let text = read(&page);
        for span in parse(&text).spans {
            // `${VAR}` is the reader's variable, not ours.
            let span = strip_expansions(&span);
            for word in span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let upper_snake = word.contains('_')
                    && word.starts_with(|c: char| c.is_ascii_uppercase())
                    && word
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !word.ends_with('_');
                if upper_snake {
                    seen += 1;
                    if !code.contains(word) {
                        unknown.insert(format!("{word} ({})", rel(&page)));
                    }
                }
            }
        }
        for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
            let is_diag = word.len() == 4
                && (word.starts_with('C') || word.starts_with('E'))
                && word[1..].chars().all(|c| c.is_ascii_digit());
            if is_diag && !diagnostics.contains(word) {
                unknown.insert(format!("{word} ({}, not in DIAGNOSTICS.md)", rel(&page)));
            }
        }
    }
    assert!(seen > 100, "found only {seen} codes and variables");
    assert!(
        unknown.is_empty(),
        "the docs name codes or variables the code does not have: {unknown:#?}"
    );
}

fn strip_expansions(span: &str) -> String {
    let mut out = String::new();
    let mut rest = span;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        match rest[at..].find('}') {
            Some(end) => rest = &rest[at + end + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn the_shell_splitter_reads_the_docs_lines_as_sh_does() {
    assert_eq!(
        shell_commands(
            "ITERION_STUDIO_TOKEN=$(openssl rand -hex 24) iterion studio --addr 0.0.0.0:4891"
        ),
        vec![vec!["iterion", "studio", "--addr", "0.0.0.0:4891"]]
    );
    assert_eq!(
        shell_commands("iterion runs; iterion events RUN_ID --follow        # from any machine"),
        vec![
            vec!["iterion", "runs"],
            vec!["iterion", "events", "RUN_ID", "--follow"]
        ]
    );
    assert_eq!(
        shell_commands("iterion runner --concurrency 2 &  # each"),
        vec![vec!["iterion", "runner", "--concurrency", "2"]]
    );
    for p in ["FILE", "RUN_ID", "K=V", "sk-ant-...", "spec=./PATH", "<id>"] {
        assert!(is_placeholder(p), "{p}");
    }
    for w in [
        "examples/hello.iter",
        "--sandbox",
        "none",
        "127.0.0.1:4891",
        "spec=./spec.pdf",
        "--json",
    ] {
        assert!(!is_placeholder(w), "{w}");
    }
}
