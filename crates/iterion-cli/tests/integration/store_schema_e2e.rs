//! `ITERION_STORE=postgres://…?schema=NAME`: two schemas of one database
//! are two isolated stores through the CLI, and a bad schema name is bad
//! input (exit 2) whose message never shows the password.

use serde_json::Value;

use crate::support::{Engine, PgSchema, Sandbox, pg_schema_exists};

const HELLO: &str = r#"
tool hello:
  command: `echo '{}'`

workflow hello:
  entry: hello
  hello -> done
"#;

/// `iterion runs --json` under one store: the listed run ids.
fn run_ids(sb: &Sandbox) -> Vec<String> {
    let out = sb.iterion(&["runs", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "iterion runs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("runs --json is JSON");
    doc["runs"]
        .as_array()
        .expect("runs array")
        .iter()
        .map(|r| r["id"].as_str().expect("run id").to_owned())
        .collect()
}

fn hello_run(sb: &Sandbox) -> String {
    let wf = sb.write("hello.iter", HELLO);
    let res = sb.run(&wf, &["--sandbox", "none"]);
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "run did not finish: {:?}\nstderr: {}",
        res.doc,
        res.stderr
    );
    res.run_id()
}

#[test]
fn two_schemas_in_one_database_are_two_stores() {
    let (a, b) = (PgSchema::new("iso_a"), PgSchema::new("iso_b"));
    let sa = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &a.url());
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &b.url());
    // Each store starts empty, whatever else lives in the database.
    assert_eq!(run_ids(&sa), Vec::<String>::new());
    let run_a = hello_run(&sa);
    assert_eq!(run_ids(&sa), vec![run_a.clone()]);
    assert_eq!(run_ids(&sb), Vec::<String>::new());
    let run_b = hello_run(&sb);
    assert_eq!(run_ids(&sb), vec![run_b.clone()]);
    assert_eq!(run_ids(&sa), vec![run_a.clone()]);
    // A run of one store is unknown to the other.
    let out = sb.iterion(&["events", &run_a, "--json"]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "run {run_a} visible in {}",
        b.name
    );
    assert!(pg_schema_exists(&a.base, &a.name) && pg_schema_exists(&b.base, &b.name));
    let names = (a.name.clone(), b.name.clone(), a.base.clone());
    drop((a, b));
    assert!(!pg_schema_exists(&names.2, &names.0) && !pg_schema_exists(&names.2, &names.1));
}

#[test]
fn a_bad_schema_is_bad_input_and_hides_the_password() {
    let base = PgSchema::new("unused").base.clone();
    let sep = if base.contains('?') { '&' } else { '?' };
    for bad in ["Team", "9lives", "a-b", "x;DROP%20SCHEMA%20public", ""] {
        let url = format!("{base}{sep}schema={bad}");
        let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &url);
        let out = sb.iterion(&["runs", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("STORE_URL_INVALID_SCHEMA"),
            "{bad:?}: {stderr}"
        );
        assert!(!stderr.contains("iterion-test"), "password shown: {stderr}");
        assert!(
            !pg_schema_exists(&base, &bad.to_lowercase()),
            "{bad:?} created"
        );
    }
}
