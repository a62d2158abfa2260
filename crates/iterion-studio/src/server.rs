//! The HTTP server: the listener, hyper's connection settings (bounded
//! request heads, a header-read timeout, a connection cap), the routing
//! table and the guard every request passes first — method, size, host
//! and token checks, and the security headers on every response,
//! including the guard's own refusals.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, Method, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use iterion_core::RunStore;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, LocalHosts};
use crate::state::AppState;
use crate::{StudioError, StudioSettings, api, live, pages};

/// Largest request head (request line and headers) hyper buffers.
const MAX_HEAD: usize = 16 * 1024;
/// Longest request URI.
const MAX_URI: usize = 4096;
/// Open connections at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// Live streams at once; more get 503.
const MAX_STREAMS: usize = 64;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound studio, ready to serve.
pub struct Studio {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
}

impl Studio {
    /// Listen on `settings.addr` over `store`.
    pub async fn bind(
        store: Arc<dyn RunStore>,
        settings: StudioSettings,
    ) -> Result<Self, StudioError> {
        let listener =
            TcpListener::bind(settings.addr)
                .await
                .map_err(|source| StudioError::Bind {
                    addr: settings.addr,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| StudioError::Bind {
            addr: settings.addr,
            source,
        })?;
        let state = Arc::new(AppState {
            store,
            token: settings.token,
            hosts: LocalHosts::of(addr),
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            shutdown: CancellationToken::new(),
            modes: Mutex::new(HashMap::new()),
        });
        Ok(Self {
            listener,
            addr,
            state,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The studio's URL (never with the token in it).
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Serve until `stop` resolves; then stop accepting, end the live
    /// streams and give open connections a few seconds to finish.
    pub async fn serve(self, stop: impl Future<Output = ()>) -> Result<(), StudioError> {
        let app = router(self.state.clone());
        let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let graceful = GracefulShutdown::new();
        tokio::pin!(stop);
        loop {
            let permit = tokio::select! {
                () = &mut stop => break,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let (stream, _peer) = tokio::select! {
                () = &mut stop => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: back off, go on.
                        tracing::warn!(error = %e, "studio: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let service = TowerToHyperService::new(app.clone());
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                // A client that goes away is not the server's error.
                let _ = conn.await;
                drop(permit);
            });
        }
        self.state.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
        Ok(())
    }
}

/// The routing table.
fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(pages::runs_page))
        .route("/runs/{id}", get(pages::run_page))
        .route("/login", get(login))
        .route("/assets/studio.css", get(pages::css))
        .route("/assets/studio.js", get(pages::js))
        .route("/assets/favicon.svg", get(pages::favicon))
        .route("/api/runs", get(api::runs))
        .route("/api/live/runs", get(live::runs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/events", get(api::events))
        .route("/api/runs/{id}/logs", get(api::logs))
        .route("/api/runs/{id}/files", get(api::files))
        .route("/api/runs/{id}/files/{*path}", get(crate::download::file))
        .route("/api/runs/{id}/graph.svg", get(api::graph))
        .route("/api/runs/{id}/live", get(live::run))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn not_found(req: Request) -> Response {
    api::error_for(
        req.uri().path(),
        StatusCode::NOT_FOUND,
        "STUDIO_NOT_FOUND",
        "no such page",
    )
}

/// `Content-Security-Policy` of every response: nothing but what the
/// studio itself serves, no inline script or style, no framing.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
        (
            http::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            http::HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// Every request passes here first.
async fn guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    secure(check(&state, req, next).await)
}

async fn check(state: &AppState, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = api::error_for(
            &path,
            StatusCode::METHOD_NOT_ALLOWED,
            "STUDIO_READ_ONLY",
            "the studio is read-only: GET and HEAD only",
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    if req.uri().to_string().len() > MAX_URI {
        return api::error_for(
            &path,
            StatusCode::URI_TOO_LONG,
            "STUDIO_URI_TOO_LONG",
            "URI too long",
        );
    }
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return api::error_for(
            &path,
            StatusCode::PAYLOAD_TOO_LARGE,
            "STUDIO_BODY_REFUSED",
            "requests to the studio carry no body",
        );
    }
    match &state.token {
        None => {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if !state.hosts.allows(host) {
                return api::error_for(
                    &path,
                    StatusCode::FORBIDDEN,
                    "STUDIO_FOREIGN_HOST",
                    "this studio answers only to its loopback address",
                );
            }
        }
        Some(token) => {
            // `/login` is the one door: it checks the token itself.
            if path != "/login" && !auth::authorised(token, req.headers()) {
                let mut resp = api::error_for(
                    &path,
                    StatusCode::UNAUTHORIZED,
                    "STUDIO_TOKEN_MISSING",
                    "this studio needs its token: open /login?token=… once, or send Authorization: Bearer …",
                );
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"iterion studio\""),
                );
                return resp;
            }
        }
    }
    next.run(req).await
}

/// `/login?token=…`: sets the session cookie and goes to the runs page, so
/// the token leaves the address bar (and the history) at once.
async fn login(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let Some(token) = &state.token else {
        return redirect_home(None);
    };
    let presented = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "token")
        .map(|(_, v)| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        });
    match presented {
        Some(t) if token.matches(&t) => redirect_home(Some(token.session())),
        _ => api::error_for(
            "/login",
            StatusCode::UNAUTHORIZED,
            "STUDIO_TOKEN_WRONG",
            "that is not this studio's token",
        ),
    }
}

fn redirect_home(session: Option<&str>) -> Response {
    let mut resp = (StatusCode::SEE_OTHER, Body::empty()).into_response();
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Some(s) = session
        && let Ok(v) = HeaderValue::from_str(&format!(
            "{}={s}; Path=/; HttpOnly; SameSite=Strict",
            auth::COOKIE
        ))
    {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}
