//! Issue 16 item 2, "parse, don't validate": each rule of a sandbox block
//! has one parser in `iterion-core`, and every consumer gives the same
//! answer for the same text. The egress rule grammar used to be parsed by
//! the proxy and again, differently, by the doctor; these property tests
//! hold the DSL (what `validate`, `run` and `sandbox doctor` load), the
//! proxy's policy and the serde path to one verdict over generated input.

use std::path::Path;

use iterion_core::{NetRule, NetworkMode, NetworkSpec};
use iterion_netproxy::Policy;
use proptest::prelude::*;

fn workflow_with_rule(rule: &str) -> String {
    format!(
        "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"x\"\n    network:\n      mode: allowlist\n      rules: [\"{rule}\"]\n  t -> done\n"
    )
}

/// The DSL's verdict: the parsed rule, or the C313 message at it.
fn dsl_rule(rule: &str) -> Result<NetRule, String> {
    let c = iterion_dsl::compile_source(&workflow_with_rule(rule), Path::new("p.iter"));
    let c313: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C313").collect();
    let net = c.workflows[0]
        .sandbox
        .as_ref()
        .and_then(|s| s.spec.network.clone())
        .expect("network block");
    match (c313.as_slice(), net.rules.as_slice()) {
        ([d], []) => Err(d.message.clone()),
        ([], [r]) => Ok(r.clone()),
        other => panic!("{rule:?}: C313 and kept rules disagree: {other:?}"),
    }
}

/// The proxy's verdict: the block as the runtime hands it over (serde),
/// compiled into the policy the proxy enforces.
fn proxy_rule(rule: &str) -> Result<Policy, String> {
    let json =
        serde_json::json!({"mode": "allowlist", "preset": null, "rules": [rule], "inherit": null});
    let spec: NetworkSpec = serde_json::from_value(json).map_err(|e| e.to_string())?;
    Policy::compile(&spec).map_err(|e| e.to_string())
}

fn agree(rule: &str, hosts: &[String]) {
    let direct = rule.parse::<NetRule>();
    let dsl = dsl_rule(rule);
    let proxy = proxy_rule(rule);
    assert_eq!(
        direct.as_ref().map_err(ToString::to_string),
        dsl.as_ref().map_err(Clone::clone),
        "{rule:?}: the DSL and the grammar disagree"
    );
    assert_eq!(direct.is_ok(), proxy.is_ok(), "{rule:?}: {proxy:?}");
    if let (Ok(from_dsl), Ok(policy)) = (dsl, proxy) {
        let spec = NetworkSpec {
            mode: Some(NetworkMode::Allowlist),
            rules: vec![from_dsl],
            ..NetworkSpec::default()
        };
        let from_dsl = Policy::compile(&spec).expect("a parsed rule compiles");
        for host in hosts {
            assert_eq!(
                from_dsl.decide(host),
                policy.decide(host),
                "{rule:?} on {host:?}"
            );
        }
    }
}

/// The shapes the two old parsers disagreed on (the doctor accepted
/// `example.com:443`, `1.2.3.4.5`, `*.0.2` and `Iterion-Default`-style
/// case-folded presets differently from the proxy) and the plain ones.
#[test]
fn rule_table() {
    let hosts: Vec<String> = [
        "a.example.com",
        "example.com",
        "10.0.0.2",
        "0.2",
        "intranet",
    ]
    .map(String::from)
    .to_vec();
    for rule in [
        "example.com",
        "**.example.com",
        "*.example.com",
        "!*.example.com",
        "*",
        "**",
        "10.0.0.0/8",
        "::1",
        "2886729730",
        "",
        "!",
        "a*b.com",
        "*.",
        "example.com:443",
        "1.2.3.4.5",
        "*.0.2",
        "10.0.0.0/33",
        "a b",
    ] {
        agree(rule, &hosts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rules_get_one_verdict(
        rule in "!?[a-z0-9*.:/\\[\\] x-]{0,14}",
        hosts in proptest::collection::vec("[a-z0-9.:\\[\\]]{0,14}", 1..4),
    ) {
        agree(&rule, &hosts);
    }
}

fn workflow_with_read_back(path: &str) -> String {
    format!(
        "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"x\"\n    read_back: [\"{path}\"]\n  t -> done\n"
    )
}

/// One verdict for a read-back path from the DSL (C320), the sandbox
/// guards (what `plan_launch` and `check_launch_plan` call), the serde
/// path and the core parser: `Ok(path)` or the reason.
fn read_back_verdicts(path: &str) -> [Result<String, String>; 4] {
    let direct = path
        .parse::<iterion_core::ReadBackPath>()
        .map(String::from)
        .map_err(|e| e.kind.to_string());
    let c = iterion_dsl::compile_source(&workflow_with_read_back(path), Path::new("p.iter"));
    let c320: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C320").collect();
    let kept = c.workflows[0]
        .sandbox
        .as_ref()
        .map(|s| s.spec.read_back.clone())
        .unwrap_or_default();
    let dsl = match (c320.as_slice(), kept.as_slice()) {
        ([d], []) => Err(d.message.clone()),
        ([], [p]) => Ok(p.to_string()),
        other => panic!("{path:?}: C320 and kept paths disagree: {other:?}"),
    };
    // The DSL's message names the path; the reason is what must agree.
    let dsl = dsl.map_err(|m| m.rsplit(": ").next().unwrap_or_default().to_owned());
    let guard = iterion_sandbox::guards::check_read_back_path(path).map_err(|e| e.reason);
    let serde = serde_json::from_value::<iterion_core::ReadBackPath>(serde_json::json!(path))
        .map(String::from)
        .map_err(|e| e.to_string());
    let serde = serde.map_err(|m| {
        direct
            .as_ref()
            .err()
            .filter(|why| m.contains(why.as_str()))
            .cloned()
            .unwrap_or(m)
    });
    [direct, dsl, guard, serde]
}

fn read_back_agree(path: &str) {
    let [direct, rest @ ..] = read_back_verdicts(path);
    for (who, verdict) in ["the DSL", "the guards", "serde"].iter().zip(rest) {
        assert_eq!(verdict, direct, "{path:?}: {who} disagrees with the parser");
    }
}

/// `/a/./b` and friends: the DSL refused them, the guards normalised them
/// (`/a/b`); the one answer is the SPEC's "normalized" (iterion_core::path).
#[test]
fn read_back_table() {
    for path in [
        "/workspace/out",
        "/a/./b",
        "/a/../b",
        "/a//b",
        "/out/",
        "/",
        "/proc/self",
        "/dev/../dev/shm",
        "/device",
        "out",
        "/a/.b",
    ] {
        read_back_agree(path);
    }
    assert!(read_back_verdicts("/a/./b")[0].is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn read_back_paths_get_one_verdict(path in "/?((proc|dev|a|\\.|\\.\\.|b\\.c)/?){0,4}") {
        read_back_agree(&path);
    }
}
