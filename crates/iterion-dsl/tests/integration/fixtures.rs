use std::path::{Path, PathBuf};

use iterion_dsl::{Severity, compile_source, diag, render_human};

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind)
}

/// Every `.iter` of `tests/fixtures/KIND`, sorted, with its text.
pub(crate) fn fixtures_in(kind: &str) -> Vec<(String, String)> {
    fixtures(kind)
}

fn fixtures(kind: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(fixture_dir(kind))
        .expect("fixtures dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "iter"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("read fixture");
            (name, text)
        })
        .collect();
    out.sort();
    out
}

fn rendered(name: &str, text: &str) -> (String, String, iterion_dsl::Compiled) {
    let c = compile_source(text, Path::new(name));
    let human = render_human(text, &c.diagnostics);
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "files": [diag::json_file(name, &c.diagnostics, c.omitted)]
    }))
    .expect("json");
    (human, json, c)
}

#[test]
fn valid_fixtures_have_no_error() {
    let all = fixtures("valid");
    assert!(all.len() >= 5);
    for (name, text) in all {
        let (human, _, c) = rendered(&name, &text);
        assert!(!c.has_errors(), "{name} has errors:\n{human}");
        assert_eq!(c.workflows.len(), 1, "{name}");
        insta::assert_snapshot!(format!("valid_{name}"), human);
        let ir = serde_json::to_string_pretty(&c.workflows[0]).expect("ir json");
        insta::assert_snapshot!(format!("ir_{name}"), ir);
    }
}

#[test]
fn invalid_fixtures_raise_their_code() {
    let all = fixtures("invalid");
    assert!(all.len() >= 25);
    for (name, text) in all {
        let (human, json, c) = rendered(&name, &text);
        // the file name starts with the code(s) it must raise
        for code in name
            .split('_')
            .take_while(|p| p.len() == 4 && (p.starts_with('C') || p.starts_with('E')))
        {
            assert!(
                c.diagnostics.iter().any(|d| d.code == code),
                "{name} should raise {code}:\n{human}"
            );
        }
        assert!(
            c.diagnostics
                .iter()
                .all(|d| d.line >= 1 && d.column >= 1 && !d.message.is_empty()),
            "{name}"
        );
        insta::assert_snapshot!(format!("human_{name}"), human);
        insta::assert_snapshot!(format!("json_{name}"), json);
    }
}

#[test]
fn sandbox_block_reaches_the_spec() {
    let text =
        std::fs::read_to_string(fixture_dir("valid").join("sandbox_block.iter")).expect("read");
    let c = compile_source(&text, Path::new("sandbox_block.iter"));
    let sb = c.workflows[0].sandbox.as_ref().expect("sandbox");
    assert_eq!(sb.spec.mode, iterion_core::Mode::Inline);
    assert!(sb.mode_written);
    assert_eq!(
        sb.spec.read_back,
        ["/workspace/out", "/iterion/artifact-files"]
            .map(|p| p.parse::<iterion_core::ReadBackPath>().expect("path"))
            .to_vec()
    );
    let net = sb.spec.network.as_ref().expect("network");
    assert_eq!(net.mode, Some(iterion_core::NetworkMode::Denylist));
    assert_eq!(net.rules.len(), 3);
    assert_eq!(sb.spec.env["HOME_COPY"], "${localEnv:HOME}");
    assert_eq!(sb.spec.post_create.as_deref(), Some("npm ci\nmake setup"));
    let b = sb.spec.build.as_ref().expect("build");
    assert_eq!(b.args["UID"], "1000");
}

#[test]
fn block_without_mode_is_inline() {
    let text = "tool a:\n  command: \"x\"\n\nworkflow w:\n  sandbox:\n    image: \"alpine\"\n  entry: a\n  a -> done\n";
    let c = compile_source(text, Path::new("t.iter"));
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
    let sb = c.workflows[0].sandbox.as_ref().expect("sandbox");
    assert_eq!(sb.spec.mode, iterion_core::Mode::Inline);
    assert!(!sb.mode_written);
}

#[test]
fn escapes_follow_the_directive() {
    let cmd = |text: &str| {
        let c = compile_source(text, Path::new("t.iter"));
        match c.workflows[0]
            .nodes
            .values()
            .next()
            .and_then(|n| n.tool.clone())
        {
            Some(iterion_dsl::ir::ToolSpec::Command(c)) => c,
            other => panic!("{other:?}"),
        }
    };
    let body =
        "tool a:\n  command: \"say \\\"hi\\\"\\n\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
    assert_eq!(cmd(body), "say \\\"hi\\\"\\n");
    assert_eq!(
        cmd(&format!("## strict-escape: on\n{body}")),
        "say \"hi\"\n"
    );
}

#[test]
fn a_bad_network_rule_or_preset_is_c313_at_it() {
    let text = "tool a:\n  command: \"x\"\n\nworkflow w:\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: corp\n      rules: [\"ok.com\", \"a*b.com\"]\n  entry: a\n  a -> done\n";
    let c = compile_source(text, Path::new("t.iter"));
    let d: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C313").collect();
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].line, d[0].column), (9, 15));
    assert_eq!(
        d[0].message,
        "unknown network preset `corp` (known: iterion-default)"
    );
    assert_eq!((d[1].line, d[1].column), (10, 25));
    assert_eq!(d[1].severity, Severity::Error);
    assert_eq!(
        d[1].message,
        "network rule `a*b.com`: a wildcard is only allowed as the whole leading label (`*.x`, `**.x`)"
    );
    let net = c.workflows[0]
        .sandbox
        .as_ref()
        .and_then(|s| s.spec.network.as_ref())
        .expect("network");
    assert_eq!(net.rules.len(), 1, "the bad rule is reported, not kept");
}

#[test]
fn not_utf8_is_a_diagnostic() {
    let dir = std::env::temp_dir().join(format!("iterion-dsl-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join("bad.iter");
    std::fs::write(&p, b"tool a:\n  command: \"\xff\"\n").expect("write");
    let c = iterion_dsl::compile_file(&p).expect("io ok");
    assert_eq!(c.diagnostics[0].code, "E006");
    assert_eq!(c.diagnostics[0].line, 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn crlf_and_bom_read_like_lf() {
    for (name, text) in fixtures("valid") {
        let crlf = format!("\u{feff}{}", text.replace('\n', "\r\n"));
        let a = compile_source(&text, Path::new(&name));
        let b = compile_source(&crlf, Path::new(&name));
        assert_eq!(
            a.diagnostics.len(),
            b.diagnostics.len(),
            "{name}: {:?}",
            b.diagnostics
        );
        assert_eq!(a.workflows.len(), b.workflows.len(), "{name}");
        assert_eq!(
            a.workflows[0].nodes.keys().collect::<Vec<_>>(),
            b.workflows[0].nodes.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn with_block_may_close_at_any_indentation() {
    let text = "tool a:\n  command: \"x\"\n\ntool b:\n  command: \"y\"\n\nworkflow w:\n  entry: a\n  a -> b with {\n      k: \"v\"\n}\n  b -> done\n";
    let c = compile_source(text, Path::new("t.iter"));
    assert!(!c.has_errors(), "{:?}", c.diagnostics);
    assert_eq!(c.workflows[0].edges[0].with["k"], "v");
}

/// C322 is for claw nodes only (upstream `pkg/backend/tool/registry.go`
/// `Resolve` fails a claw node on an unknown name; a CLI backend gets the
/// list verbatim, `pkg/backend/delegate/claude_code.go`): a name a claw
/// node lists is checked, whether `claw` is the node's or the workflow's
/// backend; the same name on `claude_code`, on a node whose backend is
/// decided at launch, or written as `${VAR}`, is not.
#[test]
fn tool_hook_reports_c322_at_the_entry() {
    let text = "agent a:\n  model: \"anthropic/x\"\n  backend: \"claw\"\n  tools: [read_file, Bash, mcp.gh.create_issue]\n\njudge j:\n  model: \"anthropic/x\"\n  tools: [\"nuke\", \"${TOOL}\"]\n\nagent c:\n  model: \"anthropic/x\"\n  backend: \"claude_code\"\n  tools: [Bash, Read, git_log]\n\nworkflow w:\n  entry: a\n  default_backend: \"claw\"\n  a -> j\n  j -> c\n  c -> done\n";
    let known = ["read_file", "mcp.gh.create_issue"];
    let check = |name: &str| (!known.contains(&name)).then(|| "not a built-in".to_owned());
    let compile = |text: &str| {
        iterion_dsl::compile_checked(
            text,
            Path::new("t.iter"),
            &iterion_dsl::Checks {
                tool: &check,
                egress: &|_, _| None,
            },
        )
    };
    let c = compile(text);
    let d: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C322").collect();
    assert_eq!(d.len(), 2, "{:?}", c.diagnostics);
    assert_eq!((d[0].line, d[0].column), (4, 22));
    assert!(
        d[0].message.contains("`a`: unknown tool `Bash`"),
        "{}",
        d[0].message
    );
    assert_eq!(d[0].severity, Severity::Error);
    assert_eq!(d[1].line, 8);
    assert!(d[1].message.contains("`nuke`"), "{}", d[1].message);
    // Without a workflow default the judge's backend is decided at launch.
    let c = compile(&text.replace("  default_backend: \"claw\"\n", ""));
    let d: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C322").collect();
    assert_eq!(d.len(), 1, "{:?}", c.diagnostics);
    assert!(d[0].message.contains("`Bash`"), "{}", d[0].message);
    // Without the hook the grammar alone accepts any name.
    let plain = iterion_dsl::compile_source(text, Path::new("t.iter"));
    assert!(!plain.diagnostics.iter().any(|d| d.code == "C322"));
}
