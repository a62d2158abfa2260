//! The studio's HTTP surface on a real socket over a real SQLite store:
//! security headers, methods, sizes, the host check, the token rule,
//! verified downloads, the live stream, escaping, typed errors.

use iterion_core::failure::{FailureCode, RunStatus};
use serde_json::json;

use crate::studio::support::*;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn assert_locked(r: &Resp, what: &str) {
    assert_eq!(r.header("content-security-policy"), Some(CSP), "{what}");
    assert_eq!(
        r.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{what}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what}");
}

#[test]
fn every_response_is_locked_down() {
    let s = serve(None, finished_run);
    for path in [
        "/",
        "/runs/done-1",
        "/api/runs",
        "/api/runs/done-1",
        "/api/runs/done-1/events",
        "/api/runs/done-1/files",
        "/assets/studio.js",
        "/assets/studio.css",
        "/no/such/page",
        "/api/runs/ghost",
    ] {
        let r = get(s.addr, path, &[]);
        assert_locked(&r, path);
    }
    assert!(!CSP.contains("unsafe"), "no unsafe-inline, no unsafe-eval");
    let js = get(s.addr, "/assets/studio.js", &[]);
    assert_eq!(js.status, 200);
    assert!(
        js.header("content-type")
            .unwrap_or("")
            .starts_with("text/javascript")
    );
    // The script never parses markup.
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(
            !js.text()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains(sink)),
            "studio.js uses {sink}"
        );
    }
}

#[test]
fn only_get_and_head_are_served() {
    let s = serve(None, finished_run);
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        for path in ["/", "/api/runs", "/api/runs/done-1/files/out/x", "/nowhere"] {
            let r = request(s.addr, method, path, &[("Content-Length", "0")]);
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method} {path}");
            assert_locked(&r, path);
        }
    }
    let head = request(s.addr, "HEAD", "/", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[test]
fn bodies_long_uris_and_big_heads_are_refused() {
    let s = serve(None, finished_run);
    let body = raw(
        s.addr,
        &format!(
            "GET /api/runs HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
            s.addr
        ),
    );
    assert_eq!(body.status, 413);
    let long = get(
        s.addr,
        &format!("/api/runs?workflow={}", "a".repeat(5000)),
        &[],
    );
    assert_eq!(long.status, 414);
    let big = get(s.addr, "/", &[("X-Filler", &"b".repeat(40_000))]);
    assert_eq!(big.status, 431, "a request head past the bound is refused");
}

#[test]
fn loopback_answers_only_to_its_own_names() {
    let s = serve(None, finished_run);
    let port = s.addr.port();
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        assert_eq!(get(s.addr, "/", &[("Host", &host)]).status, 200, "{host}");
    }
    // A page that rebinds its own name to 127.0.0.1 reads nothing.
    for host in [
        format!("evil.test:{port}"),
        "127.0.0.1".to_owned(),
        String::new(),
    ] {
        let r = get(s.addr, "/api/runs", &[("Host", &host)]);
        assert_eq!(r.status, 403, "Host {host:?}");
        assert_eq!(r.json()["error"]["code"], "STUDIO_FOREIGN_HOST");
        assert!(!r.text().contains("done-1"));
    }
}

#[test]
fn a_token_guards_every_route() {
    let token = "s3cret-token-for-the-studio";
    let s = serve(Some(token), finished_run);
    for path in [
        "/",
        "/runs/done-1",
        "/api/runs",
        "/api/live/runs",
        "/api/runs/done-1/live",
        "/api/runs/done-1/events",
        "/api/runs/done-1/files/out/%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.txt",
        "/assets/studio.js",
    ] {
        let r = get(s.addr, path, &[]);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.header("www-authenticate").is_some(), "{path}");
        assert!(!r.text().contains("drained bytes"), "{path}");
        let wrong = get(
            s.addr,
            path,
            &[("Authorization", "Bearer s3cret-token-for-the-studiO")],
        );
        assert_eq!(wrong.status, 401, "{path}");
    }
    let bearer = format!("Bearer {token}");
    let ok = get(s.addr, "/api/runs", &[("Authorization", &bearer)]);
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["runs"][0]["id"], "done-1");
    let dl = get(
        s.addr,
        "/api/runs/done-1/files/out/%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.txt",
        &[("Authorization", &bearer)],
    );
    assert_eq!(dl.body, b"drained bytes\n");
    // The login door: a wrong token is refused, the right one sets the
    // session cookie (never the token itself) and leaves the URL.
    assert_eq!(
        get(s.addr, "/login?token=nope-nope-nope-nope", &[]).status,
        401
    );
    let login = get(s.addr, &format!("/login?token={token}"), &[]);
    assert_eq!(login.status, 303);
    assert_eq!(login.header("location"), Some("/"));
    let cookie = login
        .header("set-cookie")
        .expect("a session cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(token), "{cookie}");
    let session = cookie.split(';').next().expect("name=value").to_owned();
    let page = get(s.addr, "/runs/done-1", &[("Cookie", &session)]);
    assert_eq!(page.status, 200);
    let forged = format!("iterion_studio={token}");
    assert_eq!(get(s.addr, "/", &[("Cookie", &forged)]).status, 401);
    // With a token the Host check gives way (the cookie and token are the
    // guard), so a studio behind a name works.
    let named = get(
        s.addr,
        "/api/runs",
        &[("Host", "studio.example:443"), ("Authorization", &bearer)],
    );
    assert_eq!(named.status, 200);
}

#[test]
fn downloads_are_checked_attachments() {
    let s = serve(None, finished_run);
    let path = "/api/runs/done-1/files/out/%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.txt";
    let r = get(s.addr, path, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"drained bytes\n");
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(
        r.header("content-disposition"),
        Some(
            "attachment; filename=\"_img_src_x_onerror_alert_5__.txt\"; filename*=UTF-8''%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.txt"
        )
    );
    assert_locked(&r, path);
    // Rewritten behind the store's back: refused, typed, nothing sent.
    let stored = s
        .dir
        .path()
        .join("store/runs/done-1/files/out/<img src=x onerror=alert(5)>.txt");
    std::fs::write(&stored, b"forged bytes!\n").expect("tamper");
    let r = get(s.addr, path, &[]);
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["code"], "STORE_FILE_TAMPERED");
    assert!(!r.text().contains("forged"));
    let missing = get(s.addr, "/api/runs/done-1/files/out/nope.txt", &[]);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], "STORE_FILE_NOT_FOUND");
    let escape = get(s.addr, "/api/runs/done-1/files/..%2F..%2Fetc%2Fpasswd", &[]);
    assert_eq!(escape.status, 400);
    assert_eq!(escape.json()["error"]["code"], "STORE_UNSAFE_PATH");
}

#[test]
fn run_supplied_markup_is_text_on_the_pages() {
    let s = serve(None, finished_run);
    for path in ["/", "/runs/done-1"] {
        let page = get(s.addr, path, &[]).text();
        for n in 1..=5 {
            assert!(
                !page.contains(&format!("<img src=x onerror=alert({n})>")),
                "{path}: markup {n} reached the page"
            );
        }
        assert!(!page.contains("<svg onload"), "{path}");
        assert!(!page.contains("</script><img"), "{path}");
        // Our own script tag is the only one.
        assert_eq!(page.matches("<script").count(), 1, "{path}");
    }
    let run = get(s.addr, "/runs/done-1", &[]).text();
    assert!(
        run.contains("&lt;img src=x onerror=alert(1)&gt;.test"),
        "the blocked host, as text"
    );
    assert!(
        run.contains("&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"),
        "the output"
    );
    assert!(
        run.contains("&lt;img src=x onerror=alert(4)&gt;"),
        "the log line"
    );
    assert!(run.contains("quantum_flux"), "an unknown kind is shown");
    assert!(
        run.contains("&lt;svg onload=alert(3)&gt;"),
        "its payload, as text"
    );
    assert!(
        run.contains("out/&lt;img src=x onerror=alert(5)&gt;.txt"),
        "the file name"
    );
    assert!(
        run.contains(
            "href=\"/api/runs/done-1/files/out/%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E.txt\""
        ),
        "the download link is encoded"
    );
}

#[test]
fn errors_are_typed() {
    let s = serve(None, finished_run);
    let bad = get(s.addr, "/api/runs/Not%20An%20Id", &[]);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["code"], "STUDIO_BAD_RUN_ID");
    let ghost = get(s.addr, "/api/runs/ghost/events", &[]);
    assert_eq!(ghost.status, 404);
    assert_eq!(ghost.json()["error"]["code"], "STORE_RUN_NOT_FOUND");
    let filter = get(s.addr, "/api/runs?status=sideways", &[]);
    assert_eq!(filter.status, 400);
    assert_eq!(filter.json()["error"]["code"], "STUDIO_BAD_FILTER");
    let page = get(s.addr, "/runs/ghost", &[]);
    assert_eq!(page.status, 404);
    assert!(
        page.header("content-type")
            .unwrap_or("")
            .starts_with("text/html")
    );
    let filtered = get(s.addr, "/api/runs?status=failed", &[]).json();
    assert_eq!(filtered["runs"], json!([]));
}

#[test]
fn the_live_timeline_follows_resumes_and_ends() {
    let s = serve(None, |store| async move {
        let run = running(store.as_ref(), "live-1", "slow").await;
        event(
            store.as_ref(),
            &run,
            "run_started",
            None,
            json!({"workflow": "slow", "file": "slow.iter", "trust": "untrusted"}),
        )
        .await;
    });
    let mut sse = Sse::open(s.addr, "/api/runs/live-1/live?after=0", &[]);
    assert!(sse.until("text/event-stream"), "{}", sse.seen);
    assert!(sse.until("id: 1"), "{}", sse.seen);
    let store = s.store.clone();
    let run = id("live-1");
    s.rt.block_on(event(
        store.as_ref(),
        &run,
        "node_started",
        Some("nap"),
        json!({"kind": "tool"}),
    ));
    assert!(sse.until("id: 2"), "{}", sse.seen);
    assert!(
        sse.seen
            .contains(r#""state":{"node":"nap","state":"running"}"#),
        "{}",
        sse.seen
    );
    // A reconnect says where it was: nothing is sent twice.
    let mut again = Sse::open(s.addr, "/api/runs/live-1/live", &[("Last-Event-ID", "1")]);
    assert!(again.until("id: 2"), "{}", again.seen);
    assert!(!again.seen.contains("id: 1\n"), "{}", again.seen);
    s.rt.block_on(async {
        event(
            store.as_ref(),
            &run,
            "node_failed",
            Some("nap"),
            json!({"exit_code": 3, "error": "exit 3", "stderr_tail": ""}),
        )
        .await;
        end(
            store.as_ref(),
            &run,
            RunStatus::Failed,
            Some(FailureCode::NodeFailed),
        )
        .await;
    });
    assert!(sse.until("event: end"), "{}", sse.seen);
    assert!(sse.seen.contains("NODE_FAILED"), "{}", sse.seen);
    assert!(sse.closed(), "the stream closes once the run is over");
    // The runs list streams too.
    let mut runs = Sse::open(s.addr, "/api/live/runs?status=failed", &[]);
    assert!(runs.until("event: runs"), "{}", runs.seen);
    assert!(runs.until("live-1"), "{}", runs.seen);
}

#[test]
fn the_api_has_the_cli_documents() {
    let s = serve(None, finished_run);
    let runs = get(s.addr, "/api/runs", &[]);
    assert_eq!(runs.header("content-type"), Some("application/json"));
    let doc = runs.json();
    assert_eq!(doc["runs"][0]["status"], "finished");
    assert!(
        runs.text().ends_with("}\n"),
        "pretty, with a final newline, as the CLI"
    );
    let events = get(s.addr, "/api/runs/done-1/events", &[]).text();
    let lines: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[0]["type"], "sandbox_driver_selected");
    let detail = get(s.addr, "/api/runs/done-1", &[]).json();
    assert_eq!(detail["decision"]["verdict"], "sandboxed");
    assert_eq!(detail["blocked"][0]["node"], "probe");
    assert_eq!(detail["nodes"]["probe"], "finished");
}
