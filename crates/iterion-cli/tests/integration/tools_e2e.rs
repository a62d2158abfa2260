//! The tool registry through the real binary (issue 20): an agent's
//! `tools:` name the registry does not know fails `iterion validate`
//! with C322 at the entry, and `iterion run` refuses the file as bad input
//! before anything is created; every built-in and an MCP-shaped name pass.

use serde_json::Value;

use crate::support::{Engine, Sandbox};

#[test]
fn unknown_tool_names_fail_validate_with_c322() {
    let sb = Sandbox::new(Engine::Docker);
    let text = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  backend: \"claw\"\n  tools: [read_file, git_diff, Bash, mcp.github.*]\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let file = sb.write("tools.iter", text);
    let out = sb.iterion(&["validate", file.to_str().expect("utf8"), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("validate json");
    let diags = doc["files"][0]["diagnostics"]
        .as_array()
        .expect("diagnostics");
    let c322: Vec<&Value> = diags.iter().filter(|d| d["code"] == "C322").collect();
    assert_eq!(c322.len(), 1, "{doc}");
    assert_eq!(c322[0]["line"], 4);
    let message = c322[0]["message"].as_str().expect("message");
    assert!(message.contains("unknown tool `Bash`"), "{message}");
    assert!(
        message.contains("list_files"),
        "names the built-ins: {message}"
    );

    let out = sb.iterion(&["run", file.to_str().expect("utf8"), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let all = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  backend: \"claw\"\n  tools: [bash, read_file, write_file, file_edit, glob, grep, web_fetch, list_files, tree, search_codebase, git_diff, git_status, patch, run_command, sleep, structured_output, send_user_message, config, todo_write, notebook_edit, task_create, agent, ask_user, mcp.fs.read_text_file, mcp__fs__list]\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let file = sb.write("all.iter", all);
    let out = sb.iterion(&["validate", file.to_str().expect("utf8")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A workflow `tool_policy` that leaves an agent none of its tools is bad
/// input before anything is created: no run recorded, no provider call.
#[test]
fn a_deny_all_tool_policy_refuses_the_run_up_front() {
    let sb = Sandbox::new(Engine::Docker)
        .with_env("ANTHROPIC_API_KEY", "sk-ant-api03-test-key-0001")
        .with_env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    let text = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  tools: [read_file, run_command]\n\nworkflow denyall:\n  tool_policy: [\"!*\"]\n  entry: a\n  a -> done\n";
    let file = sb.write("deny.iter", text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(
        res.stderr.contains("node a") && res.stderr.contains("AGENT_TOOL_POLICY_DENIES_ALL"),
        "{}",
        res.stderr
    );
    assert!(!res.stderr.contains("sk-ant-api03-test-key-0001"));
    let runs = sb.iterion(&["runs", "--json"]);
    assert!(
        !String::from_utf8_lossy(&runs.stdout).contains("denyall"),
        "a run was recorded"
    );
    // A node's own policy replaces the workflow's: this one is admitted
    // (it then fails on the unreachable provider, not on its tools).
    let text = text.replace(
        "  tools: [read_file, run_command]\n",
        "  tools: [read_file, run_command]\n  tool_policy: [\"read_file\"]\n",
    );
    let file = sb.write("node.iter", &text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(1), "admitted, then failed: {}", res.stderr);
    assert!(
        !res.stderr.contains("AGENT_TOOL_POLICY_DENIES_ALL"),
        "{}",
        res.stderr
    );
}
