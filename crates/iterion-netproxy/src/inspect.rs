//! TLS inspection of the CONNECTs a secret binding names (issue 17, facts
//! §7.5). The proxy first opens TLS to the upstream itself, verified
//! against the system roots plus `ITERION_EGRESS_UPSTREAM_CA`; an upstream
//! whose certificate does not verify gets `502` with
//! `x-iterion-egress: upstream-tls-invalid; reason=…` and a
//! `network_blocked` event, and nothing is ever sent in clear. Only then
//! does the client get its `200`, and TLS with a leaf of the run's CA for
//! the name it asked; each request is then rewritten
//! ([`crate::bindings`]) and forwarded over the verified upstream
//! connection, its response streamed back unbuffered. A client that does
//! not trust the run's CA (or pins its upstream's certificate) fails its
//! handshake: closed, never tunnelled around the inspection.
//!
//! Every other CONNECT stays a blind tunnel (`proxy`), so the cost is paid
//! only by the hosts a secret is for. What it inspects with is an
//! [`Inspection`] (`inspection`), built before the proxy starts; it reads
//! the proxy's [`Shared`] state and reports refusals through it, and never
//! calls back into the proxy that handed it the CONNECT.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::bindings::{Exfiltration, HeadError, Rewriter, Scanner, StreamScan};
use crate::ca::LeafResolver;
use crate::inspection::Inspection;
use crate::report::{BlockReason, BlockedRequest, EGRESS_HEADER};
use crate::shared::{PermitSlot, Shared, TunnelGuard, report};
use crate::wire::{BoxError, Principal, ProxyBody, Target, dial, empty, strip_hop_by_hop, text};

/// The largest request body buffered to put back a placeholder whose
/// value has another length (its `Content-Length` must be recomputed);
/// past it the request is refused with `413`. Same-length placeholders
/// stream with no buffer at all.
pub const MAX_REWRITE_BODY: usize = 16 * 1024 * 1024;
/// The largest request head the inspecting server reads (`431` past it).
const MAX_HEAD: usize = 64 * 1024;

type UpstreamSender = hyper::client::conn::http1::SendRequest<RewriteBody>;

/// Why the upstream connection could not be (re)opened.
enum OpenError {
    /// Its certificate did not verify (or the handshake failed).
    Tls(String),
    /// Anything else (dial, HTTP handshake).
    Other(String),
}

/// The verified upstream of one inspected CONNECT: opened again — on the
/// addresses vetted at CONNECT time, never resolved again, with the same
/// verification — when the upstream closed the previous connection, so a
/// kept-alive client outlives an upstream's `Connection: close`.
struct Upstream {
    sender: Option<UpstreamSender>,
    addrs: Vec<SocketAddr>,
    name: ServerName<'static>,
    connector: TlsConnector,
}

impl Upstream {
    async fn open(
        &self,
        shared: &Shared,
        tcp: Option<TcpStream>,
    ) -> Result<UpstreamSender, OpenError> {
        let deadline = tokio::time::Instant::now() + shared.dial_timeout;
        let tcp = match tcp {
            Some(t) => t,
            None => dial(&self.addrs, deadline)
                .await
                .map_err(|e| OpenError::Other(format!("cannot reach the upstream again: {e}")))?,
        };
        let tls =
            match tokio::time::timeout_at(deadline, self.connector.connect(self.name.clone(), tcp))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(OpenError::Tls(e.to_string())),
                Err(_) => return Err(OpenError::Tls("TLS handshake timed out".into())),
            };
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| OpenError::Other(format!("upstream: {e}")))?;
        let cancel = shared.cancel.clone();
        shared.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                r = conn => if let Err(e) = r { tracing::debug!(error = %e, "inspected upstream ended"); },
            }
        });
        Ok(sender)
    }

    /// A sender ready for the next request, reopening when needed.
    async fn ready(&mut self, shared: &Shared) -> Result<&mut UpstreamSender, OpenError> {
        let alive = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !alive {
            self.sender = None;
            self.sender = Some(self.open(shared, None).await?);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| OpenError::Other("upstream connection closed".into()))
    }
}

/// Answer an inspected CONNECT to `target` over the dialled `upstream`
/// (one of `addrs`, all vetted).
#[allow(clippy::too_many_arguments)] // the CONNECT's parts, as `handle` holds them
pub(crate) async fn connect(
    mut req: Request<Incoming>,
    upstream: TcpStream,
    addrs: Vec<SocketAddr>,
    target: Target,
    shared: &Arc<Shared>,
    slot: &PermitSlot,
    principal: Principal,
    inspection: Arc<Inspection>,
) -> Response<ProxyBody> {
    let Ok(name) = ServerName::try_from(target.host.clone()) else {
        return text(StatusCode::BAD_REQUEST, "invalid target host\n");
    };
    let mut up = Upstream {
        sender: None,
        addrs,
        name,
        connector: TlsConnector::from(inspection.upstream.clone()),
    };
    match up.open(shared, Some(upstream)).await {
        Ok(sender) => up.sender = Some(sender),
        Err(OpenError::Tls(reason)) => {
            return upstream_refused(shared, &target, principal, &reason);
        }
        Err(OpenError::Other(m)) => return text(StatusCode::BAD_GATEWAY, format!("{m}\n")),
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let cancel = shared.cancel.clone();
    let guard = TunnelGuard::new(&shared.tunnels);
    let permit = slot.lock().ok().and_then(|mut p| p.take());
    let shared = shared.clone();
    shared.tracker.clone().spawn(async move {
        let _guard = guard;
        let _permit = permit;
        let upgraded = tokio::select! {
            () = cancel.cancelled() => return,
            u = on_upgrade => match u {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "CONNECT upgrade failed");
                    return;
                }
            },
        };
        // The leaf is the CONNECT host's (see `LeafResolver`).
        let mut server = (*inspection.server).clone();
        server.cert_resolver = Arc::new(LeafResolver {
            ca: inspection.ca.clone(),
            name: target.host.clone(),
        });
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let client = match acceptor.accept(TokioIo::new(upgraded)).await {
            Ok(s) => s,
            Err(e) => {
                // A client that does not trust the run's CA, or pins: it
                // fails closed, and nothing reached the upstream.
                tracing::debug!(error = %e, host = %target.host, "inspected client handshake failed");
                return;
            }
        };
        let h2 = client.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        let sender = Arc::new(tokio::sync::Mutex::new(up));
        // The requests' substitution, bound to the CONNECT's host and
        // port, and the responses' scan (issue 31 items 3 and 4).
        let scans = Arc::new((
            inspection
                .bindings
                .rewriter(Some((&target.host, target.port))),
            inspection.bindings.reflector(),
        ));
        let target = Arc::new(target);
        let svc = service_fn(move |req| {
            let sender = sender.clone();
            let shared = shared.clone();
            let target = target.clone();
            let principal = principal.clone();
            let scans = scans.clone();
            async move {
                let (rw, reflector) = &*scans;
                Ok::<_, Infallible>(
                    relay(req, rw, reflector, &sender, &shared, &target, principal).await,
                )
            }
        });
        if h2 {
            // HTTP/2 towards the client (ALPN); each stream is relayed over
            // the HTTP/1.1 upstream in turn.
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                .max_header_list_size(MAX_HEAD as u32);
            let conn = builder.serve_connection(TokioIo::new(client), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r { tracing::debug!(error = %e, "inspected h2 client ended"); },
                () = cancel.cancelled() => conn.as_mut().graceful_shutdown(),
            }
            return;
        }
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .max_buf_size(MAX_HEAD)
            .keep_alive(true);
        let conn = builder.serve_connection(TokioIo::new(client), svc);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => if let Err(e) = r { tracing::debug!(error = %e, "inspected client ended"); },
            () = cancel.cancelled() => conn.as_mut().graceful_shutdown(),
        }
    });
    empty(StatusCode::OK)
}

/// One inspected request: check its authority, rewrite, forward, stream
/// the response back with every bound value turned into its placeholder.
async fn relay(
    req: Request<Incoming>,
    rw: &Rewriter,
    reflector: &Scanner,
    upstream: &tokio::sync::Mutex<Upstream>,
    shared: &Shared,
    target: &Target,
    principal: Principal,
) -> Response<ProxyBody> {
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // Issue 31 item 4: inside a tunnel to A, a request for B (`Host`,
    // `:authority`, an absolute-form target) is misdirected — never
    // forwarded to A with A's key, nor anywhere else.
    if let Err(asked) = authority_matches(&parts, target) {
        return misdirected(shared, target, principal, &asked);
    }
    // Issue 31 item 3: what the upstream answers is scanned for the bound
    // values, which a compressed body or a byte range would hide: ask for
    // the whole identity body (a compressed answer anyway is refused
    // below). Uncompressing in the proxy would need a decoder per coding,
    // bounds against decompression bombs and a re-framed body, for a
    // saving on the one host a key is for; the providers honour identity.
    parts.headers.remove(header::RANGE);
    parts.headers.remove(header::IF_RANGE);
    parts.headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    match rw.head(&mut parts.uri, &mut parts.headers) {
        Ok(()) => {}
        Err(HeadError::Exfiltration(e)) => return exfiltration(shared, target, principal, e),
        Err(HeadError::Invalid(what)) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("iterion: {what} is not valid with the secret's value in it\n"),
            );
        }
    }
    // An HTTP/2 request names its host in `:authority`; the HTTP/1.1
    // upstream reads `Host`.
    if !parts.headers.contains_key(header::HOST)
        && let Some(v) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, v);
    }
    parts.version = http::Version::HTTP_11;
    // An origin-form target for the upstream, whatever form the client used.
    if let Some(pq) = parts.uri.path_and_query().cloned() {
        parts.uri = pq.as_str().parse().unwrap_or_default();
    }
    let has_length = parts.headers.contains_key(header::CONTENT_LENGTH);
    let flagged = Arc::new(Mutex::new(None));
    let body = if has_length && rw.changes_length() {
        // The value differs in length: buffer (bounded), rewrite, recount.
        let bytes = match Limited::new(body, MAX_REWRITE_BODY).collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "iterion: a request body carrying a bound secret is rewritten in memory, up to {MAX_REWRITE_BODY} bytes\n"
                    ),
                );
            }
        };
        let bytes = match rw.whole(&bytes) {
            Ok(Some(new)) => Bytes::from(new),
            Ok(None) => bytes,
            Err(e) => return exfiltration(shared, target, principal, e),
        };
        if let Ok(v) = HeaderValue::from_str(&bytes.len().to_string()) {
            parts.headers.insert(header::CONTENT_LENGTH, v);
        }
        RewriteBody::Full(Some(bytes))
    } else {
        RewriteBody::streaming(body, rw.stream(), true, flagged.clone())
    };
    let req = Request::from_parts(parts, body);
    let mut up = upstream.lock().await;
    let sender = match up.ready(shared).await {
        Ok(s) => s,
        Err(OpenError::Tls(reason)) => return upstream_refused(shared, target, principal, &reason),
        Err(OpenError::Other(m)) => return text(StatusCode::BAD_GATEWAY, format!("{m}\n")),
    };
    let sent = sender.send_request(req).await;
    drop(up);
    // A placeholder for another host in the body: the request was cut
    // before that chunk left, and it is refused.
    let exfil = flagged.lock().ok().and_then(|mut f| f.take());
    if let Some(e) = exfil {
        let mut resp = exfiltration(shared, target, principal, e);
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    }
    match sent {
        Ok(resp) => reflect(resp, reflector, shared, target, principal),
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("upstream: {e}\n")),
    }
}

/// The upstream's response as the box may see it: every bound secret's
/// value, in a header value or the body (streamed, split anywhere), turned
/// into its placeholder (issue 31 item 3). A body the scan cannot read (a
/// `Content-Encoding` other than identity, sent although identity was
/// asked) is refused with `502`, never passed unread.
fn reflect(
    resp: Response<Incoming>,
    reflector: &Scanner,
    shared: &Shared,
    target: &Target,
    principal: Principal,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let encoded = parts
        .headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return encoded_response(shared, target, principal);
    }
    let mut dropped = Vec::new();
    for (name, value) in parts.headers.iter_mut() {
        match reflector.whole(value.as_bytes()) {
            Ok(None) => {}
            Ok(Some(new)) => match HeaderValue::from_bytes(&new) {
                Ok(v) => *value = v,
                Err(_) => dropped.push(name.clone()),
            },
            // A reflector never refuses; should it, the header goes.
            Err(_) => dropped.push(name.clone()),
        }
    }
    for name in dropped {
        parts.headers.remove(name);
    }
    let keeps_length = !reflector.changes_length();
    if !keeps_length {
        // A value and its placeholder differ in length: the body is
        // re-framed (chunked, or HTTP/2 frames) rather than buffered.
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let flagged = Arc::new(Mutex::new(None));
    let body = RewriteBody::streaming(body, reflector.stream(), keeps_length, flagged);
    Response::from_parts(parts, body.boxed())
}

/// Whether every authority the request names — its `Host` (one only), its
/// `:authority` or absolute-form target — is the CONNECT's host and port
/// (443 when it names none, as `https://` does). `Err` holds what was
/// asked instead.
fn authority_matches(parts: &http::request::Parts, target: &Target) -> Result<(), String> {
    let want = iterion_core::net::Host::parse(&target.host);
    let same = |raw: &str| -> bool {
        let Ok(a) = raw.parse::<http::uri::Authority>() else {
            return false;
        };
        // No userinfo: `Authority` keeps it, and `user@host` is no host.
        !a.as_str().contains('@')
            && iterion_core::net::Host::parse(a.host()) == want
            && a.port_u16().unwrap_or(443) == target.port
    };
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    if let Some(h) = hosts.next() {
        let raw = String::from_utf8_lossy(h.as_bytes());
        if !same(&raw) {
            return Err(raw.into_owned());
        }
        if let Some(second) = hosts.next() {
            return Err(String::from_utf8_lossy(second.as_bytes()).into_owned());
        }
    }
    if let Some(a) = parts.uri.authority()
        && !same(a.as_str())
    {
        return Err(a.as_str().to_owned());
    }
    if let Some(scheme) = parts.uri.scheme_str()
        && !scheme.eq_ignore_ascii_case("https")
    {
        return Err(format!("{scheme}://"));
    }
    Ok(())
}

/// A header-safe rendering of what a client sent.
fn header_safe(raw: &str) -> String {
    raw.chars()
        .take(256)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// `421 blocked-authority-mismatch; authority=…` and the event naming
/// both the CONNECT's target and the authority asked.
fn misdirected(
    shared: &Shared,
    target: &Target,
    principal: Principal,
    asked: &str,
) -> Response<ProxyBody> {
    let asked = header_safe(asked);
    let mut resp = text(
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "iterion: this connection is to {}:{}; a request for {asked} is not forwarded on it\n",
            target.host, target.port
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{}; authority={asked}",
        BlockReason::AuthorityMismatch.as_str()
    )) {
        resp.headers_mut().insert(EGRESS_HEADER, v);
    }
    report(
        shared,
        BlockedRequest {
            host: target.host.clone(),
            port: target.port,
            reason: BlockReason::AuthorityMismatch,
            rule: None,
            exec: principal.exec(),
            secret: None,
            authority: Some(asked),
        },
    );
    resp
}

/// `502 blocked-encoded-response` and the event: a response body the
/// secret scan cannot read never reaches the box.
fn encoded_response(shared: &Shared, target: &Target, principal: Principal) -> Response<ProxyBody> {
    let mut resp = text(
        StatusCode::BAD_GATEWAY,
        format!(
            "iterion: {}:{} answered with a compressed body although identity was asked; it is not passed unread\n",
            target.host, target.port
        ),
    );
    resp.headers_mut().insert(
        EGRESS_HEADER,
        HeaderValue::from_static(BlockReason::EncodedResponse.as_str()),
    );
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    report(
        shared,
        BlockedRequest {
            host: target.host.clone(),
            port: target.port,
            reason: BlockReason::EncodedResponse,
            rule: None,
            exec: principal.exec(),
            secret: None,
            authority: None,
        },
    );
    resp
}

/// `403 blocked-secret-exfiltration; secret=NAME` and the event.
pub(crate) fn exfiltration(
    shared: &Shared,
    target: &Target,
    principal: Principal,
    e: Exfiltration,
) -> Response<ProxyBody> {
    let mut resp = text(
        StatusCode::FORBIDDEN,
        format!(
            "iterion: the request to {} carries the placeholder of secret {}, which is not bound to that host\n",
            target.host, e.secret
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{}; secret={}",
        BlockReason::SecretExfiltration.as_str(),
        e.secret
    )) {
        resp.headers_mut().insert(EGRESS_HEADER, v);
    }
    report(
        shared,
        BlockedRequest {
            host: target.host.clone(),
            port: target.port,
            reason: BlockReason::SecretExfiltration,
            rule: None,
            exec: principal.exec(),
            secret: Some(e.secret),
            authority: None,
        },
    );
    resp
}

/// `502 upstream-tls-invalid; reason=…` and the event: never plaintext.
fn upstream_refused(
    shared: &Shared,
    target: &Target,
    principal: Principal,
    reason: &str,
) -> Response<ProxyBody> {
    let mut resp = text(
        StatusCode::BAD_GATEWAY,
        format!(
            "iterion: the upstream {}:{} failed TLS verification: {reason}\n",
            target.host, target.port
        ),
    );
    let clean = header_safe(reason);
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{}; reason={clean}",
        BlockReason::UpstreamTls.as_str()
    )) {
        resp.headers_mut().insert(EGRESS_HEADER, v);
    }
    report(
        shared,
        BlockedRequest {
            host: target.host.clone(),
            port: target.port,
            reason: BlockReason::UpstreamTls,
            rule: None,
            exec: principal.exec(),
            secret: None,
            authority: None,
        },
    );
    resp
}

/// A body on its way through an inspected connection: a request's with
/// placeholders put back, a response's with values taken out.
pub(crate) enum RewriteBody {
    /// Rewritten whole (a length-changing value).
    Full(Option<Bytes>),
    /// Rewritten as it streams.
    Stream {
        inner: Incoming,
        rw: StreamScan,
        /// The rewrite keeps the length (the inner size hint holds).
        keeps_length: bool,
        done: bool,
        /// Set when a foreign placeholder cut the body.
        flagged: Arc<Mutex<Option<Exfiltration>>>,
    },
}

impl RewriteBody {
    /// A body rewritten as it streams, reporting a foreign placeholder
    /// through `flagged`.
    pub(crate) fn streaming(
        inner: Incoming,
        rw: StreamScan,
        keeps_length: bool,
        flagged: Arc<Mutex<Option<Exfiltration>>>,
    ) -> Self {
        Self::Stream {
            inner,
            rw,
            keeps_length,
            done: false,
            flagged,
        }
    }
}

impl Body for RewriteBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RewriteBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RewriteBody::Stream {
                inner,
                rw,
                done,
                flagged,
                ..
            } => {
                if *done {
                    return Poll::Ready(None);
                }
                let refuse = |e: Exfiltration| {
                    if let Ok(mut f) = flagged.lock() {
                        *f = Some(e);
                    }
                    Poll::Ready(Some(Err(BoxError::from("placeholder for another host"))))
                };
                loop {
                    match Pin::new(&mut *inner).poll_frame(cx) {
                        Poll::Pending => return Poll::Pending,
                        // Trailers are not forwarded (hop-by-hop here).
                        Poll::Ready(Some(Ok(frame))) => {
                            if let Ok(data) = frame.into_data() {
                                match rw.push(data) {
                                    Ok(out) if out.is_empty() => {}
                                    Ok(out) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                                    Err(e) => return refuse(e),
                                }
                            }
                        }
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                        Poll::Ready(None) => {
                            *done = true;
                            return match rw.finish() {
                                Ok(out) if out.is_empty() => Poll::Ready(None),
                                Ok(out) => Poll::Ready(Some(Ok(Frame::data(out)))),
                                Err(e) => refuse(e),
                            };
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RewriteBody::Full(b) => b.is_none(),
            RewriteBody::Stream { done, .. } => *done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RewriteBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            RewriteBody::Full(None) => SizeHint::with_exact(0),
            RewriteBody::Stream {
                inner,
                keeps_length: true,
                ..
            } => inner.size_hint(),
            RewriteBody::Stream { .. } => SizeHint::default(),
        }
    }
}
