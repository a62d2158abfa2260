//! Issue 30, the yardstick: upstream Iterion's own workflow files, run
//! end to end with this engine as a user who brings them would run them.
//!
//! Opt-in, because CI has no copy of upstream: set
//! `ITERION_UPSTREAM_CORPUS` to a checkout of SocialGouv/iterion or to its
//! bare git mirror (the corpus is then exported with `git archive`). Set
//! and wrong (no such path, not upstream) fails the test; unset, the test
//! says so and passes.
//!
//! For each of upstream's workflow files (`*.iter`, `*.bot` under
//! `examples/`, `.archive/examples/`, `pkg/cli/templates/`,
//! `pkg/dsl/testdata/`, `bots/`, `scripts/adhoc/`), the test runs
//! `iterion validate` and `iterion run --no-interactive --sandbox none`
//! in a fresh git workspace, against the testkit's scripted provider in its
//! automatic mode (Anthropic and OpenAI wire formats; each conversation
//! calls its shell tool once, then answers with its output schema filled
//! in), with the real Claude Code CLI for `claude_code` nodes. It prints a
//! table file → validate, outcome, what upstream's engine does with the
//! same file (read from upstream's Go code, column "expected as upstream"),
//! and whether the two agree; then it asserts that at least
//! `ITERION_UPSTREAM_CORPUS_MIN` files (default 60, the issue's bar) agree.
//!
//! ```sh
//! ITERION_UPSTREAM_CORPUS=/work/.mirror/SocialGouv+iterion/repo \
//!   cargo test -p iterion-cli --test integration upstream_corpus -- --nocapture
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use iterion_testkit::agent::claude_cli;
use iterion_testkit::provider::ScriptedProvider;

use crate::support::{Engine, Sandbox, parse_run_output};

/// Where upstream keeps workflow files.
const DIRS: [&str; 6] = [
    "examples",
    ".archive/examples",
    "pkg/cli/templates",
    "pkg/dsl/testdata",
    "bots",
    "scripts/adhoc",
];

/// What upstream's engine (HEAD 2322ab49) does with a file, run the same
/// way: `--no-interactive`, no `--var`, no attachment, the scripted model,
/// the Claude Code CLI on PATH (so upstream's backend detector, like ours,
/// picks `claude_code` for a node that names no backend). Read from
/// upstream's code; each entry says where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// Runs to its end.
    Finishes,
    /// Stops at a human node, waiting.
    PausesForHuman,
    /// The run fails with this code (ours and upstream's name for it).
    Fails(&'static str, &'static str),
    /// The run fails because of what this machine lacks (a server, an
    /// image, credentials); ours agrees when it fails and its outcome
    /// names the first string.
    FailsLacking(&'static str, &'static str),
    /// Upstream finishes; this engine refuses for a documented reason of
    /// its own (docs/upstream.md), named by the first string in its outcome.
    FinishesUpstreamOnly(&'static str, &'static str),
    /// `iterion validate` refuses the file (upstream's diagnostic).
    Refused(&'static str),
}

/// The files whose upstream outcome is not "finishes". A file not listed
/// finishes upstream: its required `vars` without a value stay literal
/// `{{vars.X}}` in prompts (`executor.go:1988`, `engine.go:1610-1660`), an
/// empty `model:` resolves (`executor.go:958`, `claude_code.go:48`),
/// CLI-backend tool names pass to `--allowedTools` unchecked
/// (`executor.go:974`), tool outputs are not checked against their schema
/// (`helpers.go:515`), refs to nodes not yet run give null
/// (`engine.go:1318-1407`).
const EXPECTED: &[(&str, Upstream)] = &[
    (
        "examples/cursors/cursors.iter",
        Upstream::Refused("C006: a catalogue of cursor blocks, no workflow (compile.go:387)"),
    ),
    (
        ".archive/examples/skill/skill/loop_with_judge.iter",
        Upstream::Refused("C033: {{vars.topic}} with no vars block (validate.go:1395)"),
    ),
    (
        "pkg/cli/templates/pr_refine_single_model.iter",
        Upstream::Refused("C034: {{input.review}} not in the input schema (validate.go:1401-1428)"),
    ),
    (
        "pkg/cli/templates/pr_refine_single_model_backend.bot",
        Upstream::Refused("C034: {{input.review}} not in the input schema (validate.go:1401-1428)"),
    ),
    (
        "examples/sec-audit-deps/main.bot",
        Upstream::Fails(
            "WORKSPACE_SAFETY",
            "4 tool branches in one fan_out_all (fan_out.go:51, :737-858)",
        ),
    ),
    (
        "examples/sec-audit-source/main.bot",
        Upstream::Fails(
            "WORKSPACE_SAFETY",
            "5 tool branches in one fan_out_all (fan_out.go:51, :737-858)",
        ),
    ),
    (
        ".archive/examples/recipe_benchmark.iter",
        Upstream::Fails(
            "WORKSPACE_SAFETY",
            "both recipe runners list write_file/patch/run_command (fan_out.go:752-776)",
        ),
    ),
    (
        "pkg/dsl/testdata/recipe_benchmark.iter",
        Upstream::Fails(
            "WORKSPACE_SAFETY",
            "both recipe runners list write_file/patch/run_command (fan_out.go:752-776)",
        ),
    ),
    (
        ".archive/examples/skill/skill/human_gate.iter",
        Upstream::PausesForHuman,
    ),
    ("examples/whats-next/main.bot", Upstream::PausesForHuman),
    (
        ".archive/examples/dogfood_editor_ui_loop.iter",
        Upstream::Fails(
            "WORKFLOW_FAILED",
            "the scripted judge says approved with ui_quality \"broken\" (first enum value): only `judge -> fail` matches",
        ),
    ),
    (
        ".archive/examples/claw_mcp.iter",
        Upstream::FailsLacking(
            "MCP",
            "its MCP server is ${ITERION_MCP_TEST_BINARY}, unset here (mcp/manager.go:134 fails the node)",
        ),
    ),
    (
        ".archive/examples/playwright_visual_qa.iter",
        Upstream::FailsLacking(
            "playwright",
            "claw node `browse` needs the Playwright MCP server (npx @playwright/mcp, a browser): not on this machine",
        ),
    ),
    (
        ".archive/examples/claw_bedrock_provider.iter",
        Upstream::FailsLacking(
            "bedrock",
            "bedrock/ models need an AWS region and credentials: none here",
        ),
    ),
    (
        ".archive/examples/sandbox_build.iter",
        Upstream::FailsLacking(
            "show_marker",
            "reads a marker baked into the image built from examples/sandbox_build.dockerfile; on the host there is none",
        ),
    ),
    (
        ".archive/examples/llm_router_task_dispatch.iter",
        Upstream::FailsLacking(
            "{{vars.default_model}}",
            "model: \"{{vars.default_model}}\" is not rendered (executor.go:958, :1599): the llm router's spec is invalid",
        ),
    ),
    (
        ".archive/examples/vision_attachments.iter",
        Upstream::FinishesUpstreamOnly(
            "ATTACHMENT_REQUIRED",
            "upstream does not enforce `required: true` on attachments at 2322ab49 and runs with {{attachments.logo}} literal",
        ),
    ),
];

fn expected(rel: &str) -> Upstream {
    EXPECTED
        .iter()
        .find(|(p, _)| *p == rel)
        .map_or(Upstream::Finishes, |(_, e)| *e)
}

/// The corpus on disk: the checkout itself, or an export of the mirror.
struct Corpus {
    root: PathBuf,
    _export: Option<tempfile::TempDir>,
}

impl Corpus {
    fn open(given: &str) -> Self {
        let path = PathBuf::from(given);
        assert!(
            path.exists(),
            "ITERION_UPSTREAM_CORPUS={given}: no such path (a checkout or the bare mirror of SocialGouv/iterion)"
        );
        if path.join("examples").is_dir() {
            return Self {
                root: path,
                _export: None,
            };
        }
        let bare = Command::new("git")
            .arg("--git-dir")
            .arg(&path)
            .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
            .output()
            .expect("run git");
        assert!(
            bare.status.success(),
            "ITERION_UPSTREAM_CORPUS={given}: neither a checkout (no examples/) nor a bare git mirror"
        );
        let dir = tempfile::Builder::new()
            .prefix("iterion-upstream-corpus-")
            .tempdir()
            .expect("tempdir");
        // Only the workflow directories: the mirror may lack the blobs of
        // large vendored files.
        let archive = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "git --git-dir \"$1\" archive HEAD {} | tar -x -C \"$2\"",
                DIRS.join(" ")
            ))
            .arg("sh")
            .arg(&path)
            .arg(dir.path())
            .output()
            .expect("run git archive");
        assert!(
            archive.status.success() && dir.path().join("examples").is_dir(),
            "ITERION_UPSTREAM_CORPUS={given}: git archive of {DIRS:?} failed: {}",
            String::from_utf8_lossy(&archive.stderr)
        );
        Self {
            root: dir.path().to_path_buf(),
            _export: Some(dir),
        }
    }

    /// Every workflow file, relative to the root, sorted.
    fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "iter" || x == "bot") {
                    out.push(p);
                }
            }
        }
        let mut all = Vec::new();
        for d in DIRS {
            walk(&self.root.join(d), &mut all);
        }
        let mut rel: Vec<String> = all
            .iter()
            .map(|p| {
                p.strip_prefix(&self.root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        rel.sort();
        rel
    }
}

/// Whether a file ends as upstream's engine would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agrees {
    Yes,
    /// No, for a reason this engine documents.
    Named,
    No,
}

impl Agrees {
    fn when(self, cond: bool) -> Self {
        if cond { self } else { Self::No }
    }
}

/// One file's result.
struct Row {
    file: String,
    validate: String,
    outcome: String,
    expected: Upstream,
    agrees: Agrees,
    secs: f64,
}

/// The first diagnostic code (`error[C322]`) in a validate output.
fn first_error(text: &str) -> Option<String> {
    let at = text.find("error[")? + "error[".len();
    let end = text[at..].find(']')? + at;
    Some(text[at..end].to_owned())
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(110).collect()
}

/// Why a run failed, from its events: the first failed node and its
/// error, else the run's own error.
fn failure_reason(sb: &Sandbox, run_id: &str) -> String {
    let events = sb.events(run_id);
    let short = |t: &str| -> String { t.replace('\n', " ").chars().take(160).collect() };
    if let Some(n) = events.iter().find(|e| e["type"] == "node_failed") {
        return format!(
            "node {}: {}",
            n["node_id"].as_str().unwrap_or("?"),
            short(n["data"]["error"].as_str().unwrap_or(""))
        );
    }
    events
        .iter()
        .find(|e| e["type"] == "run_failed")
        .map(|e| short(e["data"]["error"].as_str().unwrap_or("")))
        .unwrap_or_default()
}

/// A fresh workspace that is a git repository with one commit (upstream's
/// workflows diff, branch and commit).
fn git_workspace(ws: &Path) {
    std::fs::write(ws.join("README.md"), "# a project\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "README.md"],
        &[
            "-c",
            "user.name=corpus",
            "-c",
            "user.email=corpus@example.invalid",
            "commit",
            "-q",
            "-m",
            "initial",
        ],
    ] {
        let st = Command::new("git")
            .args(args)
            .current_dir(ws)
            .status()
            .expect("git");
        assert!(st.success(), "git {args:?} in the workspace");
    }
}

#[test]
fn upstream_corpus_runs_end_to_end() {
    let Ok(given) = std::env::var("ITERION_UPSTREAM_CORPUS") else {
        eprintln!(
            "ITERION_UPSTREAM_CORPUS is not set: the upstream corpus test is opt-in (see its module doc)"
        );
        return;
    };
    let corpus = Corpus::open(&given);
    let files = corpus.files();
    assert!(
        !files.is_empty(),
        "ITERION_UPSTREAM_CORPUS={given}: no *.iter or *.bot under {DIRS:?}"
    );
    let min: usize = std::env::var("ITERION_UPSTREAM_CORPUS_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let provider = rt.block_on(ScriptedProvider::start_auto_on(SocketAddr::from((
        [127, 0, 0, 1],
        0,
    ))));
    let url = provider.url();
    // `claude_code` nodes find the real CLI on PATH.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(claude_cli(), bin.path().join("claude")).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut rows = Vec::new();
    for rel in &files {
        let file = corpus.root.join(rel);
        let file_arg = file.to_string_lossy().into_owned();
        let sb = Sandbox::new(Engine::Docker)
            .with_env("PATH", &path)
            .with_env("ANTHROPIC_API_KEY", "sk-ant-corpus")
            .with_env("ANTHROPIC_BASE_URL", &url)
            .with_env("OPENAI_API_KEY", "sk-corpus")
            .with_env("OPENAI_BASE_URL", &format!("{url}/v1"))
            .with_env("ITERION_LOG_LEVEL", "error");
        git_workspace(&sb.workspace());
        let start = Instant::now();
        let v = sb.iterion(&["validate", &file_arg]);
        let vtext = format!(
            "{}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        );
        let validate = if v.status.success() {
            "ok".to_owned()
        } else {
            format!(
                "refused {}",
                first_error(&vtext).unwrap_or_else(|| first_line(&vtext))
            )
        };
        let res = parse_run_output(
            &sb.command(&[
                "run",
                &file_arg,
                "--json",
                "--no-interactive",
                "--sandbox",
                "none",
                "--timeout",
                "120s",
            ])
            .output()
            .expect("spawn iterion run"),
        );
        let status = res.status().to_owned();
        let code = res.failure_code().map(ToOwned::to_owned);
        let outcome = match (status.as_str(), &code) {
            ("finished", _) => "finished".to_owned(),
            ("paused_waiting_human", _) => "paused for human".to_owned(),
            ("", _) => format!(
                "exit {}: {}",
                res.code.unwrap_or(-1),
                first_line(&res.stderr)
            ),
            (s, c) => format!(
                "{s} {}: {}",
                c.as_deref().unwrap_or("-"),
                failure_reason(&sb, &res.run_id())
            ),
        };
        let exp = expected(rel);
        let not_finished = status != "finished" && status != "paused_waiting_human";
        let agrees = match exp {
            Upstream::Finishes => Agrees::Yes.when(status == "finished"),
            Upstream::PausesForHuman => Agrees::Yes.when(status == "paused_waiting_human"),
            Upstream::Fails(c, _) => {
                Agrees::Yes.when(status == "failed" && code.as_deref() == Some(c))
            }
            Upstream::FailsLacking(needle, _) => {
                Agrees::Yes.when(not_finished && outcome.contains(needle))
            }
            Upstream::FinishesUpstreamOnly(needle, _) => match status.as_str() {
                "finished" => Agrees::Yes,
                _ if outcome.contains(needle) => Agrees::Named,
                _ => Agrees::No,
            },
            Upstream::Refused(_) => Agrees::Yes.when(!v.status.success()),
        };
        let row = Row {
            file: rel.clone(),
            validate,
            outcome,
            expected: exp,
            agrees,
            secs: start.elapsed().as_secs_f64(),
        };
        eprintln!(
            "[{}/{}] {} -> {} ({:.1}s)",
            rows.len() + 1,
            files.len(),
            row.file,
            row.outcome,
            row.secs
        );
        rows.push(row);
    }

    let agreeing = rows.iter().filter(|r| r.agrees == Agrees::Yes).count();
    let named = rows.iter().filter(|r| r.agrees == Agrees::Named).count();
    let mut table = String::from(
        "| file | validate | outcome | expected as upstream | agrees |\n|---|---|---|---|---|\n",
    );
    for r in &rows {
        let exp = match r.expected {
            Upstream::Finishes => "finishes".to_owned(),
            Upstream::PausesForHuman => "paused for human".to_owned(),
            Upstream::Fails(c, why) => format!("fails {c}: {why}"),
            Upstream::FailsLacking(_, why) => format!("fails: {why}"),
            Upstream::FinishesUpstreamOnly(_, why) => format!("finishes: {why}"),
            Upstream::Refused(why) => format!("refused by validate: {why}"),
        };
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.file,
            r.validate,
            r.outcome.replace('|', "/"),
            exp.replace('|', "/"),
            match r.agrees {
                Agrees::Yes => "yes",
                Agrees::Named => "differs (documented)",
                Agrees::No => "NO",
            }
        ));
    }
    let validated = rows.iter().filter(|r| r.validate == "ok").count();
    let refused_upstream = rows
        .iter()
        .filter(|r| matches!(r.expected, Upstream::Refused(_)))
        .count();
    table.push_str(&format!(
        "\n{agreeing}/{} end as upstream's engine would, {named} differ for a documented reason; validate accepts {validated} (upstream accepts {}); total {:.0}s\n",
        rows.len(),
        rows.len() - refused_upstream,
        rows.iter().map(|r| r.secs).sum::<f64>()
    ));
    eprintln!("\n{table}");
    if let Ok(out) = std::env::var("ITERION_UPSTREAM_CORPUS_TABLE") {
        std::fs::write(&out, &table).expect("write the table");
    }
    drop(provider);
    let validate_gap: Vec<&str> = rows
        .iter()
        .filter(|r| r.validate != "ok" && !matches!(r.expected, Upstream::Refused(_)))
        .map(|r| r.file.as_str())
        .collect();
    assert!(
        agreeing >= min && validate_gap.is_empty(),
        "{agreeing} of {} files end as upstream's engine would (at least {min} wanted); \
         validate refuses files upstream accepts: {validate_gap:?}",
        rows.len()
    );
}
