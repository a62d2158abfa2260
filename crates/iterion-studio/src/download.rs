//! `GET /api/runs/ID/files/PATH`: one drained file, as an attachment.
//!
//! The bytes are spooled to an anonymous temporary file while
//! `iterion_core::store::FileCheck` checks them against the size and
//! sha256 recorded at drain time, exactly as `iterion files --get` does;
//! a file rewritten behind the store's back is refused
//! (`STORE_FILE_TAMPERED`, 409) and not one byte of it is sent. What is
//! sent is always `application/octet-stream` and an attachment, so no
//! browser renders a run's file as a page of the studio; its name is
//! given as a safe ASCII `filename` and, exactly, as RFC 6266's
//! `filename*`.

use std::io::SeekFrom;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode, header};
use iterion_core::StoreError;
use iterion_core::store::{FileCheck, RunFilePath};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::api::{error_for, load_run, store_failure, with_type};
use crate::state::AppState;

const PATH: &str = "/api/runs/files/PATH";

/// RFC 8187 `attr-char`: what `filename*` may carry unencoded.
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// `Content-Disposition` for a file at `path`: its last component, as a
/// quoted ASCII fallback (anything outside `[A-Za-z0-9._-]` becomes `_`,
/// no leading dot, never empty) and as an exact UTF-8 `filename*`.
pub(crate) fn content_disposition(path: &RunFilePath) -> String {
    let name = path.as_str().rsplit('/').next().unwrap_or("");
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    let ascii = ascii.trim_start_matches('.');
    let ascii = if ascii.is_empty() { "download" } else { ascii };
    format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{}",
        utf8_percent_encode(name, ATTR_CHAR)
    )
}

/// The handler.
pub(crate) async fn file(
    State(state): State<Arc<AppState>>,
    Path((id, raw)): Path<(String, String)>,
) -> Response {
    let run = match load_run(&state, PATH, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let path = match RunFilePath::parse(&raw) {
        Ok(p) => p,
        Err(e) => return store_failure(PATH, &e),
    };
    let record = match state.store.list_files(&run.id).await {
        Ok(files) => match files.into_iter().find(|f| f.path == path) {
            Some(r) => r,
            None => return store_failure(PATH, &StoreError::FileNotFound(path.to_string())),
        },
        Err(e) => return store_failure(PATH, &e),
    };
    let mut stream = match state.store.get_file(&run.id, &path).await {
        Ok(s) => s,
        Err(e) => return store_failure(PATH, &e),
    };
    let io_failure = |what: &str, e: std::io::Error| {
        error_for(
            PATH,
            StatusCode::INTERNAL_SERVER_ERROR,
            "STUDIO_SPOOL_FAILED",
            &format!("{what}: {e}"),
        )
    };
    let spool = match tempfile::tempfile() {
        Ok(f) => f,
        Err(e) => return io_failure("creating a temp file to check the file in", e),
    };
    let mut spool = tokio::fs::File::from_std(spool);
    let mut check = FileCheck::new();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => return io_failure("reading the file from the store", e),
        };
        check.update(&chunk);
        // Never spool more than the record says: a file grown behind the
        // store's back fails the check anyway, without filling the disk.
        if check.size() > record.size {
            break;
        }
        if let Err(e) = spool.write_all(&chunk).await {
            return io_failure("spooling the file", e);
        }
    }
    if let Err(e) = check.finish(&record) {
        tracing::warn!(run = %run.id, code = e.code(), "studio: refused a tampered run file");
        return store_failure(PATH, &e);
    }
    if let Err(e) = spool.flush().await {
        return io_failure("spooling the file", e);
    }
    if let Err(e) = spool.seek(SeekFrom::Start(0)).await {
        return io_failure("rewinding the checked file", e);
    }
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(spool));
    let mut resp = with_type(StatusCode::OK, body, "application/octet-stream");
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size));
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&path)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cd(p: &str) -> String {
        content_disposition(&RunFilePath::parse(p).expect("path"))
    }

    #[test]
    fn names_are_safe_and_exact() {
        assert_eq!(
            cd("out/report.md"),
            "attachment; filename=\"report.md\"; filename*=UTF-8''report.md"
        );
        assert_eq!(
            cd("out/<img src=x onerror=alert(1)>.txt"),
            "attachment; filename=\"_img_src_x_onerror_alert_1__.txt\"; filename*=UTF-8''%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E.txt"
        );
        assert_eq!(
            cd("a/\"quoted\";\r\nX: y"),
            "attachment; filename=\"_quoted____X__y\"; filename*=UTF-8''%22quoted%22%3B%0D%0AX%3A%20y"
        );
        assert_eq!(
            cd("résumé.pdf"),
            "attachment; filename=\"r_sum_.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"
        );
        assert!(cd(".env").starts_with("attachment; filename=\"env\""));
        assert!(cd("...").starts_with("attachment; filename=\"download\""));
    }
}
