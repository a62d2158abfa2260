//! The privacy tools against a real SQLite run store: round trips, the
//! vault's persistence and refusals (upstream `register_test.go`,
//! `vault_test.go`).

use std::sync::Arc;

use iterion_core::store::{NewRun, RunFilePath};
use iterion_core::{RunId, RunStore, Trust};
use serde_json::{Value, json};

use iterion_agent::tools::privacy::*;

async fn store_with_run() -> (tempfile::TempDir, Arc<dyn RunStore>, RunId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn RunStore> =
        Arc::new(iterion_store_sqlite::SqliteStore::open(dir.path()).expect("store"));
    let run = RunId::generate();
    store
        .create_run(NewRun {
            id: run.clone(),
            workflow: "w".into(),
            file: "w.iter".into(),
            trust: Trust::Trusted,
            owner: None,
        })
        .await
        .expect("run");
    (dir, store, run)
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).expect("json answer")
}

const TEXT: &str = "Write to alice@example.com or call +33612345678; IBAN FR1420041010050500013M02606, docs at https://example.com/x.";

#[tokio::test]
async fn filter_then_unfilter_restores_the_text() {
    let (_d, store, run) = store_with_run().await;
    let tools = PrivacyTools::new(store.clone());
    let out = parse(
        &tools
            .call(&run, FILTER, &json!({"text": TEXT}))
            .await
            .expect("filter"),
    );
    let redacted = out["redacted"].as_str().expect("redacted");
    for clear in [
        "alice@example.com",
        "+33612345678",
        "FR1420041010050500013M02606",
        "https://example.com/x.",
    ] {
        assert!(!redacted.contains(clear), "{clear} left in {redacted}");
    }
    assert_eq!(out["placeholders"].as_array().map(Vec::len), Some(4));
    for c in ["email", "phone", "url", "account_number"] {
        assert_eq!(out[format!("has_{c}")], json!(true), "{c}");
    }
    assert_eq!(out["has_secret"], json!(false));
    // Same value, same token within the run.
    let again = parse(
        &tools
            .call(&run, FILTER, &json!({"text": TEXT}))
            .await
            .expect("again"),
    );
    assert_eq!(again["redacted"], out["redacted"]);

    // A fresh process (empty cache) reads the vault from the store.
    let fresh = PrivacyTools::new(store.clone());
    let back = parse(
        &fresh
            .call(&run, UNFILTER, &json!({"text": redacted}))
            .await
            .expect("unfilter"),
    );
    assert_eq!(back["text"], json!(TEXT));
    assert_eq!(back["substituted"].as_array().map(Vec::len), Some(4));
    assert_eq!(back["missing"], json!([]));

    // The vault is a run file, not an event nor a log line.
    let files = store.list_files(&run).await.expect("files");
    assert!(files.iter().any(|f| f.path.as_str() == vault::VAULT_PATH));
    let events = store.events_after(&run, 0, 1000).await.expect("events");
    assert!(events.is_empty());
}

#[tokio::test]
async fn tokens_differ_across_runs_and_categories() {
    let a = RunId::generate();
    let b = RunId::generate();
    assert_ne!(
        token_of(&a, "x@y.io", "email"),
        token_of(&b, "x@y.io", "email")
    );
    assert_ne!(
        token_of(&a, "x@y.io", "email"),
        token_of(&a, "x@y.io", "url")
    );
    let t = token_of(&a, "x@y.io", "email");
    let hex = t.strip_prefix("PII_").unwrap_or_default();
    assert!(
        hex.len() == 8
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{t}"
    );
}

#[tokio::test]
async fn missing_tokens_follow_the_policy() {
    let (_d, store, run) = store_with_run().await;
    let tools = PrivacyTools::new(store);
    let text = "hello PII_deadbeef";
    let leave = parse(
        &tools
            .call(&run, UNFILTER, &json!({"text": text}))
            .await
            .expect("leave"),
    );
    assert_eq!(leave["text"], json!(text));
    assert_eq!(leave["missing"], json!(["PII_deadbeef"]));
    let remove = parse(
        &tools
            .call(
                &run,
                UNFILTER,
                &json!({"text": text, "missing_policy": "remove"}),
            )
            .await
            .expect("remove"),
    );
    assert_eq!(remove["text"], json!("hello "));
    let err = tools
        .call(
            &run,
            UNFILTER,
            &json!({"text": text, "missing_policy": "error"}),
        )
        .await
        .expect_err("error policy");
    assert!(err.contains("PII_deadbeef"), "{err}");
}

#[tokio::test]
async fn detect_mode_reports_hashes_not_values() {
    let (_d, store, run) = store_with_run().await;
    let tools = PrivacyTools::new(store.clone());
    let raw = tools
        .call(
            &run,
            FILTER,
            &json!({"text": "😀 alice@example.com", "mode": "detect"}),
        )
        .await
        .expect("detect");
    assert!(!raw.contains("alice@example.com"), "{raw}");
    let out = parse(&raw);
    assert_eq!(out["spans"][0]["start"], json!(2));
    assert_eq!(out["spans"][0]["end"], json!(19));
    assert_eq!(out["has_email"], json!(true));
    // Detect writes no vault.
    assert!(store.list_files(&run).await.expect("files").is_empty());
}

#[tokio::test]
async fn bad_input_is_refused_without_echoing_it() {
    let (_d, store, run) = store_with_run().await;
    let tools = PrivacyTools::new(store);
    for (input, want) in [
        (json!({"text": "x", "mode": "scramble"}), "unknown mode"),
        (
            json!({"text": "x", "categories": ["dna"]}),
            "unknown category",
        ),
        (json!({"text": "x", "min_score": 3}), "min_score"),
        (json!({"txt": "alice@example.com"}), "bad input"),
        (json!({"text": 42}), "bad input"),
    ] {
        let err = tools.call(&run, FILTER, &input).await.expect_err("refused");
        assert!(err.contains(want), "{err}");
        assert!(!err.contains("alice@example.com"), "{err}");
    }
    let err = tools
        .call(
            &run,
            UNFILTER,
            &json!({"text": "x", "missing_policy": "shrug"}),
        )
        .await
        .expect_err("refused");
    assert!(err.contains("missing_policy"), "{err}");
}

#[tokio::test]
async fn a_vault_of_another_run_or_version_is_refused() {
    let (_d, store, run) = store_with_run().await;
    let path = RunFilePath::parse(vault::VAULT_PATH).expect("path");
    for body in [
        json!({"version": 1, "run_id": "someone-else", "entries": {}}),
        json!({"version": 9, "run_id": run.as_str(), "entries": {}}),
    ] {
        let bytes = bytes::Bytes::from(body.to_string());
        let stream: iterion_core::ByteStream = Box::pin(futures_util::stream::once(async move {
            Ok::<_, std::io::Error>(bytes)
        }));
        store
            .put_file(&run, &path, stream, 1 << 20)
            .await
            .expect("put");
        let tools = PrivacyTools::new(store.clone());
        let err = tools
            .call(&run, UNFILTER, &json!({"text": "PII_00000000"}))
            .await
            .expect_err("refused");
        assert!(err.contains("unreadable"), "{err}");
    }
}

#[test]
fn events_see_the_marker() {
    let v = for_event(json!({"text": "alice@example.com", "missing": []}));
    assert_eq!(v["text"], json!(EVENT_TEXT_MARKER));
    assert_eq!(v["missing"], json!([]));
    assert_eq!(
        for_event(json!({"redacted": "x"})),
        json!({"redacted": "x"})
    );
}

#[test]
fn specs_name_both_tools() {
    let names: Vec<String> = specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, [FILTER, UNFILTER]);
}
