//! Issue 17 item 5 end to end, on dockerd and on Podman: a confined run's
//! agents carry placeholders of their provider keys, never the values,
//! while the provider — behind an `https://` base URL, as the public APIs
//! are — receives the real keys from the run's proxy.
//!
//! The provider is the scripted one of `iterion-testkit`, served over TLS
//! on the host's primary address with a test CA the proxy trusts through
//! `ITERION_EGRESS_UPSTREAM_CA` (how an operator names a corporate or test
//! upstream). The work node runs the real Claude Code CLI of the slim
//! image: its own `Bash` inherits the CLI's env, so what that shell prints
//! of `ANTHROPIC_API_KEY` is what the CLI holds. The router and the judge
//! are claw in-box runners on the OpenAI wire. What is not proven here: a
//! real provider's certificate chain (the system roots are the same code
//! path as the test CA) and HTTP/2 towards the provider (the scripted
//! provider speaks HTTP/1.1).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use iterion_testkit::agent::static_iterion;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::{Value, json};

use crate::agents_e2e::{ROUTE, output_of, refine};
use crate::egress_e2e::host_ip;
use crate::secret_egress_e2e::{assert_values_nowhere, inspect_live, test_pki};
use crate::support::{Engine, Sandbox, container_exists, of_type, parse_run_output, slim};

/// Long enough that the placeholder keeps the public prefix and the length.
const ANTHROPIC_KEY: &str = "sk-ant-api03-e2eREALanthropicKEY0123456789abcdefghijklmnop";
const OPENAI_KEY: &str = "sk-proj-e2eREALopenaiKEY0123456789abcdefghijklmnopqrstuv";

/// The scripted provider over TLS on the host's primary address, on its
/// own runtime (the test thread blocks on `iterion run`).
struct TlsProvider {
    _rt: tokio::runtime::Runtime,
    p: ScriptedProvider,
    ca_pem: String,
}

impl TlsProvider {
    fn start(turns: Vec<Turn>) -> Self {
        let (config, ca_pem) = test_pki(&[host_ip().to_string()]);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let p = rt.block_on(ScriptedProvider::start_tls_on(
            SocketAddr::new(host_ip(), 0),
            turns,
            config,
        ));
        Self { _rt: rt, p, ca_pem }
    }

    fn url(&self) -> String {
        format!("https://{}", self.p.addr())
    }

    /// The env of an operator holding both keys behind HTTPS base URLs.
    fn sandbox(&self, engine: Engine) -> Sandbox {
        let sb = Sandbox::new(engine);
        let ca = sb.dir.path().join("provider-ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        sb.with_env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .with_env("ANTHROPIC_BASE_URL", &self.url())
            .with_env("OPENAI_API_KEY", OPENAI_KEY)
            .with_env("OPENAI_BASE_URL", &format!("{}/v1", self.url()))
            .with_env("ITERION_EGRESS_UPSTREAM_CA", &ca.to_string_lossy())
            .with_env("ITERION_BIN", &static_iterion().display().to_string())
    }
}

/// What the CLI's own shell prints (and keeps in the workspace): the key
/// it holds, then where it runs.
const SHOW_KEY: &str = "echo \"key=$ANTHROPIC_API_KEY\" | tee held-key.txt; hostname";

fn turns() -> Vec<Turn> {
    vec![
        ROUTE.clone(),
        Turn::tool(
            "Bash",
            json!({"command": SHOW_KEY, "description": "show the key this shell holds"}),
        ),
        Turn::Answer(json!({"summary": "first"})),
        Turn::text("done"),
        Turn::text("{\"approved\": true, \"reasons\": \"fine\"}"),
    ]
}

fn provider_keys_bound(engine: Engine) {
    let prov = TlsProvider::start(turns());
    let sb = prov.sandbox(engine);
    let rules = format!("\"{}\"", host_ip());
    let file = sb.write("agents.iter", &refine(&slim(), &rules, "claude_code"));
    let f = file.to_string_lossy().into_owned();
    let child = sb
        .command(&["run", &f, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion");
    let inspect = inspect_live(
        engine,
        &sb.workspace().to_string_lossy(),
        Duration::from_secs(60),
    );
    let out = child.wait_with_output().expect("wait iterion");
    let r = parse_run_output(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let run_id = r.run_id();
    let events = sb.events(&run_id);
    assert_eq!(
        r.code,
        Some(0),
        "{engine:?}: {stderr}\n{}",
        serde_json::to_string_pretty(&events).unwrap()
    );
    assert_eq!(prov.p.remaining(), 0, "every scripted turn was played");

    // The run said how the keys went in: names and hosts, no value.
    let said = of_type(&events, "sandbox_provider_keys");
    assert_eq!(said.len(), 1, "{events:#?}");
    assert_eq!(said[0]["data"]["delivery"], "placeholder");
    assert_eq!(
        said[0]["data"]["variables"],
        json!(["ANTHROPIC_API_KEY", "OPENAI_API_KEY"])
    );
    assert_eq!(said[0]["data"]["hosts"], json!([host_ip().to_string()]));

    // The CLI's own shell held a placeholder shaped like the key.
    let results: Vec<String> = prov
        .p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    let held = results
        .iter()
        .find_map(|r| {
            r.lines()
                .find_map(|l| l.strip_prefix("key="))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("{engine:?}: the Bash tool never ran: {results:?}"));
    assert_ne!(held, ANTHROPIC_KEY, "{engine:?}: the box held the real key");
    assert!(
        held.starts_with("sk-ant-api03-") && held.len() == ANTHROPIC_KEY.len(),
        "{engine:?}: {held}"
    );
    // What the provider read of the tool's output is what the box wrote:
    // a key's value goes back in the request head only, never into a
    // conversation (which a model could echo back into the box).
    assert_eq!(
        std::fs::read_to_string(sb.workspace().join("held-key.txt")).unwrap(),
        format!("key={held}\n"),
        "{engine:?}"
    );
    let box_host = results
        .iter()
        .find_map(|r| r.lines().nth(1).map(str::to_owned))
        .unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(
        !box_host.is_empty() && box_host != host.trim(),
        "{engine:?}: the CLI's Bash did not run in the box: {results:?}"
    );

    // The provider was authenticated with the real keys, each on its own
    // wire; the key itself never travelled in a body.
    let calls = prov.p.model_calls();
    assert!(calls.len() >= 4, "{engine:?}: {} model calls", calls.len());
    for c in &calls {
        let raw = format!("{:?} {}", c.headers, c.raw);
        assert!(
            !c.raw.contains(ANTHROPIC_KEY) && !c.raw.contains(OPENAI_KEY),
            "{engine:?}: a key in a request body"
        );
        if c.path.contains("chat/completions") {
            assert_eq!(
                c.header("authorization"),
                Some(format!("Bearer {OPENAI_KEY}").as_str()),
                "{engine:?}"
            );
            assert!(!raw.contains(ANTHROPIC_KEY));
        } else {
            assert_eq!(c.header("x-api-key"), Some(ANTHROPIC_KEY), "{engine:?}");
            assert!(!raw.contains(OPENAI_KEY));
        }
    }
    assert_eq!(output_of(&events, "work")[0]["_backend"], "claude_code");
    assert_eq!(output_of(&events, "review")[0]["approved"], true);

    // No value anywhere the sandbox or the record can show.
    let inspect = inspect.unwrap_or_else(|| panic!("{engine:?}: container never seen"));
    assert_values_nowhere(
        engine,
        &sb,
        &run_id,
        &inspect,
        &events,
        (&stdout, &stderr),
        &[ANTHROPIC_KEY, OPENAI_KEY],
    );
    assert!(
        !container_exists(engine, &run_id),
        "{engine:?}: container of {run_id} left behind"
    );
}

/// Issue 31 item 3, the attack: the CLI's own shell sends the key it
/// holds to its provider in the path, the query and another header; the
/// provider's unknown-path 404 quotes the request back. The proxy put the
/// real key only in `x-api-key`, and the echo comes back into the box with
/// the placeholder in its place.
const REFLECT: &str = "curl -sS -m 20 \"$ANTHROPIC_BASE_URL/nope/$ANTHROPIC_API_KEY?key=$ANTHROPIC_API_KEY\" -H \"x-api-key: $ANTHROPIC_API_KEY\" -H \"x-debug: $ANTHROPIC_API_KEY\" > echoed.txt 2>&1; echo \"key=$ANTHROPIC_API_KEY\"; cat echoed.txt";

fn reflected_key_stays_a_placeholder(engine: Engine) {
    let prov = TlsProvider::start(vec![
        ROUTE.clone(),
        Turn::tool(
            "Bash",
            json!({"command": REFLECT, "description": "ask the provider for an unknown path"}),
        ),
        Turn::Answer(json!({"summary": "first"})),
        Turn::text("done"),
        Turn::text("{\"approved\": true, \"reasons\": \"fine\"}"),
    ]);
    let sb = prov.sandbox(engine);
    let rules = format!("\"{}\"", host_ip());
    let file = sb.write("agents.iter", &refine(&slim(), &rules, "claude_code"));
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    assert_eq!(
        res.code,
        Some(0),
        "{engine:?}: {}",
        serde_json::to_string_pretty(&events).unwrap()
    );
    // The provider got the real key in x-api-key only: the path, the
    // query and the other header carried the placeholder.
    let requests = prov.p.requests();
    let echo = requests
        .iter()
        .find(|r| r.path.starts_with("/nope/"))
        .unwrap_or_else(|| panic!("{engine:?}: the curl never reached the provider"));
    assert_eq!(echo.header("x-api-key"), Some(ANTHROPIC_KEY), "{engine:?}");
    assert!(
        !echo.path.contains(ANTHROPIC_KEY),
        "{engine:?}: {}",
        echo.path
    );
    let held = echo.header("x-debug").unwrap_or_default().to_owned();
    assert!(
        held.starts_with("sk-ant-api03-") && held != ANTHROPIC_KEY,
        "{engine:?}: {held}"
    );
    assert_eq!(echo.path, format!("/nope/{held}?key={held}"), "{engine:?}");
    // What came back into the box: the echo, the placeholder in the key's
    // place, never the key.
    let echoed = std::fs::read_to_string(sb.workspace().join("echoed.txt")).unwrap();
    assert!(echoed.contains("not scripted"), "{engine:?}: {echoed}");
    assert!(
        echoed.contains(&format!("x-api-key: {held}")),
        "{engine:?}: {echoed}"
    );
    assert!(
        !echoed.contains(ANTHROPIC_KEY),
        "{engine:?}: the key came back"
    );
    // The tool's result the model read is the same: no key in it.
    let results: Vec<String> = prov
        .p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    assert!(
        results.iter().any(|r| r.contains("not scripted")),
        "{engine:?}: {results:?}"
    );
    assert!(
        results.iter().all(|r| !r.contains(ANTHROPIC_KEY)),
        "{engine:?}: the key reached the conversation"
    );
    assert!(!container_exists(engine, &run_id));
}

#[test]
fn dockerd_an_echoing_provider_never_hands_the_key_to_the_box() {
    reflected_key_stays_a_placeholder(Engine::Docker);
}

#[test]
fn podman_an_echoing_provider_never_hands_the_key_to_the_box() {
    reflected_key_stays_a_placeholder(Engine::Podman);
}

#[test]
fn dockerd_agents_hold_placeholders_the_provider_gets_the_keys() {
    provider_keys_bound(Engine::Docker);
}

#[test]
fn podman_agents_hold_placeholders_the_provider_gets_the_keys() {
    provider_keys_bound(Engine::Podman);
}

/// `ITERION_SANDBOX_PROVIDER_KEYS=plain`: the operator keeps the values
/// (a client that pins certificates); the run says so with the reason,
/// and the proxy inspects nothing — the box's own TLS check then meets the
/// test provider's certificate, which it does not trust, so the run fails
/// at the provider: what this proves is the event and that no value is in
/// the record, not a plain run against a real provider.
#[test]
fn dockerd_plain_provider_keys_are_said() {
    let prov = TlsProvider::start(turns());
    let sb = prov
        .sandbox(Engine::Docker)
        .with_env("ITERION_SANDBOX_PROVIDER_KEYS", "plain");
    let text = refine(&slim(), &format!("\"{}\"", host_ip()), "claw");
    let file = sb.write("agents.iter", &text);
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    let said: Vec<&Value> = of_type(&events, "sandbox_provider_keys");
    assert_eq!(said.len(), 1, "{events:#?}");
    assert_eq!(said[0]["data"]["delivery"], "plain");
    assert!(
        said[0]["data"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("ITERION_SANDBOX_PROVIDER_KEYS")),
        "{}",
        said[0]
    );
    // Nothing was inspected: the provider saw no request through the run's CA.
    assert!(
        prov.p.model_calls().is_empty(),
        "the box trusted the provider?"
    );
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(ANTHROPIC_KEY) && !all.contains(OPENAI_KEY));
    assert!(!container_exists(Engine::Docker, &run_id));
}
