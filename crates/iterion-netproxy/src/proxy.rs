//! The per-run egress proxy (facts §7.3): HTTP/1 on one listener, every
//! request authenticated by the run's token, CONNECT tunnels and plain
//! `http://` forwarding, each target decided by the run's [`Policy`] and
//! every resolved address vetted before dialling. It does not decide when
//! to run (the runtime asks [`Policy::needs_proxy`]) nor how containers
//! reach it (the driver's internal network and proxy env).
//!
//! Divergences from upstream, on purpose:
//! * Plain HTTP opens one upstream connection per forwarded request (no
//!   pool): each dial goes through the same resolve → vet → dial path, so a
//!   pooled connection can never outlive a policy decision.
//! * A tunnel propagates a half-close (EOF one way shuts the other side's
//!   write) and ends when both directions finish or either fails; upstream
//!   closes both at the first EOF and waits 5 s, which truncates clients that
//!   half-close after sending.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use iterion_core::NetworkMode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod forward;
/// Zero-copy splicing (socket → pipe → socket, splice(2)).
#[cfg(target_os = "linux")]
mod splice;

use self::forward::forward;
use crate::credentials::CredentialBook;
use crate::error::NetproxyError;
use crate::inspect;
use crate::inspection::Inspection;
use crate::policy::{Policy, canonical_host};
use crate::report::{
    BlockReason, BlockedCallback, BlockedRequest, EGRESS_HEADER, LimitCallback, Limits,
};
use crate::resolver::{Resolver, SystemResolver};
use crate::shared::{PermitSlot, Shared, TunnelGuard, report};
use crate::token::ProxyToken;
use crate::wire::{Principal, ProxyBody, Target, dial, empty, text};

/// Default dial timeout (facts §7.3).
pub const DEFAULT_DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Default read-header timeout (facts §7.3).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`ProxyHandle::shutdown`] lets in-flight work finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Per-direction tunnel buffer; allocated only once the direction carries data.
const TUNNEL_BUF: usize = 256 * 1024;

/// Concurrent client connections one proxy (one run) holds by default
/// (issue 19 item 9). Each costs at most two sockets and, while it
/// tunnels, two pipes: well inside a descriptor limit raised to its hard
/// bound (`iterion` does that at start).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Over-cap connections answered `503` at the same time; past this they
/// are closed unanswered, so refusing can never exhaust descriptors itself.
const OVERFLOW_ANSWERS: usize = 32;

/// Per-start knobs of the proxy.
#[derive(Clone)]
pub struct ProxyOptions {
    /// Listen address (`0.0.0.0:0` for container drivers, facts §7.2).
    pub bind: SocketAddr,
    /// The run's compiled policy.
    pub policy: Arc<Policy>,
    /// The run's token.
    pub token: ProxyToken,
    /// Per-exec credentials, accepted alongside the run token and naming
    /// the exec in [`BlockedRequest::exec`].
    pub credentials: CredentialBook,
    /// Called once per denied request; a panic inside it is contained.
    pub on_blocked: BlockedCallback,
    /// Upper bound on resolving plus connecting to the target.
    pub dial_timeout: Duration,
    /// Upper bound on reading a request head.
    pub header_read_timeout: Duration,
    /// Name resolution for targets.
    pub resolver: Arc<dyn Resolver>,
    /// Concurrent client connections held; past it a new connection gets
    /// `503` and is closed (never queued: a run cannot starve the proxy).
    pub max_connections: usize,
    /// Bind even when `bind`'s address is not (yet) configured on this
    /// host (`IP_FREEBIND`): a Podman network's gateway only appears on
    /// its bridge once the first container joins, after the proxy starts.
    pub freebind: bool,
    /// Called when a limit is hit (rate-limited); a panic inside it is contained.
    pub on_limit: LimitCallback,
    /// TLS inspection for the hosts secret bindings name (issue 17);
    /// `None`: every CONNECT is a blind tunnel.
    pub inspection: Option<Arc<Inspection>>,
}

impl ProxyOptions {
    /// Options with the defaults of facts §7.3, the system resolver and a
    /// no-op callback.
    pub fn new(bind: SocketAddr, policy: Arc<Policy>, token: ProxyToken) -> Self {
        Self {
            bind,
            policy,
            token,
            credentials: CredentialBook::new(),
            on_blocked: Arc::new(|_| {}),
            dial_timeout: DEFAULT_DIAL_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            resolver: Arc::new(SystemResolver),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            freebind: false,
            on_limit: Arc::new(|_| {}),
            inspection: None,
        }
    }
}

impl std::fmt::Debug for ProxyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyOptions")
            .field("bind", &self.bind)
            .field("mode", &self.policy.mode())
            .field("token", &self.token)
            .field("dial_timeout", &self.dial_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("freebind", &self.freebind)
            .finish_non_exhaustive()
    }
}

/// Entry point of the proxy.
#[derive(Debug)]
pub struct EgressProxy;

impl EgressProxy {
    /// Bind and start serving; the proxy is listening when this returns.
    pub async fn start(opts: ProxyOptions) -> Result<ProxyHandle, NetproxyError> {
        let listener = listen(opts.bind, opts.freebind).map_err(|source| NetproxyError::Bind {
            addr: opts.bind,
            source,
        })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| NetproxyError::Bind {
                addr: opts.bind,
                source,
            })?;
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let tunnels = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            policy: opts.policy,
            token: opts.token,
            credentials: opts.credentials,
            on_blocked: opts.on_blocked,
            dial_timeout: opts.dial_timeout,
            header_read_timeout: opts.header_read_timeout,
            resolver: opts.resolver,
            cancel: cancel.clone(),
            tracker: tracker.clone(),
            tunnels: tunnels.clone(),
            connections: Arc::new(Semaphore::new(opts.max_connections.max(1))),
            max_connections: opts.max_connections.max(1),
            overflow: Arc::new(Semaphore::new(OVERFLOW_ANSWERS)),
            limits: Limits::new(opts.on_limit),
            inspection: opts.inspection,
        });
        tracker.spawn(accept_loop(listener, shared));
        Ok(ProxyHandle {
            local_addr,
            cancel,
            tracker,
            tunnels,
        })
    }
}

/// The live proxy. Dropping it stops the proxy without waiting.
#[derive(Debug)]
pub struct ProxyHandle {
    local_addr: SocketAddr,
    cancel: CancellationToken,
    tracker: TaskTracker,
    tunnels: Arc<AtomicUsize>,
}

impl ProxyHandle {
    /// The bound address (the real port when bound to `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Tunnels currently spliced.
    pub fn active_tunnels(&self) -> usize {
        self.tunnels.load(Ordering::Relaxed)
    }

    /// Stop accepting, ask keep-alive connections to finish their current
    /// request, close every tunnel, and wait (at most 5 s) for all of it.
    /// Idempotent: later calls return once the first one's work is done.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = self.tracker.len(),
                "egress proxy tasks still running after the shutdown grace"
            );
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A listening socket on `addr`; with `freebind`, also when the address is
/// not configured yet (`IP_FREEBIND`, Linux).
fn listen(addr: SocketAddr, freebind: bool) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    #[cfg(target_os = "linux")]
    if freebind {
        match addr {
            SocketAddr::V4(_) => socket.set_freebind_v4(true)?,
            SocketAddr::V6(_) => socket.set_freebind_v6(true)?,
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = freebind;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            () = shared.cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _peer)) => match shared.connections.clone().try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    shared
                        .tracker
                        .spawn(serve_connection(stream, shared.clone(), permit));
                }
                Err(_) => {
                    shared.limits.note(0, shared.max_connections);
                    refuse_over_cap(stream, &shared);
                }
            },
            Err(e) => {
                // EMFILE/ENFILE: the process is out of descriptors. Back off
                // instead of spinning, and say so (a run's own flood cannot
                // get here past the cap; other load in the process can).
                if matches!(
                    e.raw_os_error(),
                    Some(libc_emfile::EMFILE | libc_emfile::ENFILE)
                ) {
                    shared.limits.note(1, shared.max_connections);
                } else {
                    tracing::warn!(error = %e, "egress proxy accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// `errno` values of descriptor exhaustion (Linux; the same on the BSDs).
mod libc_emfile {
    pub(super) const ENFILE: i32 = 23;
    pub(super) const EMFILE: i32 = 24;
}

/// Answer an over-cap connection `503` and close it, without reading its
/// request: a bounded number at a time, the rest closed unanswered.
fn refuse_over_cap(mut stream: TcpStream, shared: &Shared) {
    let Ok(permit) = shared.overflow.clone().try_acquire_owned() else {
        return;
    };
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\n{EGRESS_HEADER}: connection-limit; limit={}\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        shared.max_connections,
        OVER_CAP_BODY.len(),
        OVER_CAP_BODY
    );
    shared.tracker.spawn(async move {
        let _permit = permit;
        let work = async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes, so closing our end
            // does not reset the answer away (bounded in bytes and time).
            let mut sink = [0u8; 4096];
            let mut left: usize = 64 * 1024;
            while left > 0 {
                let n = stream.read(&mut sink).await?;
                if n == 0 {
                    break;
                }
                left = left.saturating_sub(n);
            }
            Ok::<(), io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), work).await;
    });
}

const OVER_CAP_BODY: &str =
    "iterion: the run's egress proxy holds its maximum of concurrent connections; retry later\n";

async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    // The connection's permit lives as long as the connection; when it
    // becomes a CONNECT tunnel, hyper's connection ends and the tunnel task
    // takes the permit over (a tunnel counts against the cap like any
    // connection).
    let slot: PermitSlot = Arc::new(std::sync::Mutex::new(Some(permit)));
    let cancel = shared.cancel.clone();
    let timeout = shared.header_read_timeout;
    let svc = service_fn(move |req| {
        let shared = shared.clone();
        let slot = slot.clone();
        async move { Ok::<_, Infallible>(handle(req, shared, slot).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: PermitSlot,
) -> Response<ProxyBody> {
    let Some(principal) = authorized(req.headers(), &shared.token, &shared.credentials) else {
        let mut resp = text(
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            "proxy authentication required\n",
        );
        resp.headers_mut().insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"iterion\""),
        );
        // Issue 19 item 9: an unauthenticated client gets no kept-alive
        // connection to hold (hyper closes after a `Connection: close`).
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    };
    let target = match target_of(&req) {
        Ok(t) => t,
        Err(msg) => {
            let mut resp = text(StatusCode::BAD_REQUEST, format!("{msg}\n"));
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return resp;
        }
    };
    let decision = shared.policy.decide(&target.host);
    if !decision.allowed {
        let reason = match shared.policy.mode() {
            NetworkMode::Denylist => BlockReason::Denylist,
            NetworkMode::Allowlist | NetworkMode::Open => BlockReason::Allowlist,
        };
        return blocked(&shared, target, reason, decision.rule, principal);
    }
    let deadline = tokio::time::Instant::now() + shared.dial_timeout;
    let addrs = match resolve(&shared, &target, deadline).await {
        Ok(a) => a,
        Err(msg) => return text(StatusCode::BAD_GATEWAY, format!("{msg}\n")),
    };
    for addr in &addrs {
        if let Err(refusal) = shared.policy.vet_address(addr.ip()) {
            return blocked(
                &shared,
                target,
                BlockReason::ResolvedAddress,
                refusal.rule,
                principal,
            );
        }
    }
    let upstream = match dial(&addrs, deadline).await {
        Ok(s) => s,
        Err(e) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("cannot reach {}:{}: {e}\n", target.host, target.port),
            );
        }
    };
    if req.method() == Method::CONNECT {
        // Issue 17: terminate TLS only where a bound secret is for the host.
        match shared.inspection.clone() {
            Some(i) if i.bindings().inspects(&target.host, target.port) => {
                inspect::connect(req, upstream, addrs, target, &shared, &slot, principal, i).await
            }
            _ => tunnel(req, upstream, &shared, &slot),
        }
    } else {
        forward(req, upstream, &target, &shared, principal).await
    }
}

/// `Bearer <token>`, `Basic base64(<any>:<token>)` (the run), or
/// `Basic base64(<id>:<secret>)` of an issued per-exec credential; secrets
/// compared in constant time.
fn authorized(
    headers: &HeaderMap,
    token: &ProxyToken,
    credentials: &CredentialBook,
) -> Option<Principal> {
    let value = headers
        .get(header::PROXY_AUTHORIZATION)
        .and_then(|v| v.to_str().ok())?;
    let (scheme, cred) = value.trim().split_once(' ')?;
    let cred = cred.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        token.matches(cred.as_bytes()).then_some(Principal::Run)
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(cred)
            .ok()?;
        let i = decoded.iter().position(|b| *b == b':')?;
        let (user, secret) = (&decoded[..i], &decoded[i + 1..]);
        if let Some(label) = credentials.identify(user, secret) {
            return Some(Principal::Exec(label));
        }
        token.matches(secret).then_some(Principal::Run)
    } else {
        None
    }
}

fn target_of(req: &Request<Incoming>) -> Result<Target, &'static str> {
    // RFC 9112 §3.2: more than one Host is a 400, or the policy could
    // judge one while the upstream reads the other.
    if req.headers().get_all(header::HOST).iter().count() > 1 {
        return Err("more than one Host header");
    }
    let mut host_header = None;
    let (raw_host, port) = if req.method() == Method::CONNECT {
        let auth = req
            .uri()
            .authority()
            .ok_or("CONNECT needs a host:port authority")?;
        (auth.host().to_owned(), auth.port_u16().unwrap_or(443))
    } else {
        match req.uri().scheme_str() {
            None | Some("http") => {}
            Some(_) => return Err("only http:// is forwarded; use CONNECT for other schemes"),
        }
        if let Some(auth) = req.uri().authority() {
            // Issue 19 item 11: the policy judges this authority, so the
            // upstream gets exactly it as Host (RFC 9112 §3.2.2: a proxy
            // replaces the Host of an absolute-form request), whatever
            // Host the client sent alongside.
            let shown = auth.as_str().rsplit('@').next().unwrap_or_default();
            host_header =
                Some(HeaderValue::from_str(shown).map_err(|_| "invalid request-target authority")?);
            (auth.host().to_owned(), auth.port_u16().unwrap_or(80))
        } else {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .ok_or("missing host")?;
            let auth: http::uri::Authority = host.parse().map_err(|_| "invalid Host header")?;
            if auth.as_str().contains('@') {
                return Err("invalid Host header");
            }
            (auth.host().to_owned(), auth.port_u16().unwrap_or(80))
        }
    };
    // Never a name when it reads as a number (issue 19 item 10): the
    // canonical form of `2887581698` is `172.16.0.2`, and that is what the
    // policy judges and the dialer dials.
    let host = canonical_host(&raw_host).ok_or("the host looks numeric but is no IP address")?;
    let plausible = !host.is_empty()
        && (host.parse::<IpAddr>().is_ok()
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_'));
    if !plausible || port == 0 {
        return Err("missing or invalid target host");
    }
    Ok(Target {
        host,
        port,
        host_header,
    })
}

fn blocked(
    shared: &Shared,
    target: Target,
    reason: BlockReason,
    rule: Option<String>,
    principal: Principal,
) -> Response<ProxyBody> {
    let rule_text = rule
        .as_deref()
        .map_or_else(|| "none".to_owned(), |r| r.escape_default().to_string());
    let mut resp = text(
        StatusCode::FORBIDDEN,
        format!(
            "iterion: egress to {}:{} refused by the run's network policy ({})\n",
            target.host,
            target.port,
            reason.as_str()
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("{}; rule={rule_text}", reason.as_str())) {
        resp.headers_mut().insert(EGRESS_HEADER, v);
    }
    report(
        shared,
        BlockedRequest {
            host: target.host,
            port: target.port,
            reason,
            rule,
            exec: principal.exec(),
            secret: None,
            authority: None,
        },
    );
    resp
}

async fn resolve(
    shared: &Shared,
    target: &Target,
    deadline: tokio::time::Instant,
) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, target.port)]);
    }
    let addrs =
        tokio::time::timeout_at(deadline, shared.resolver.resolve(&target.host, target.port))
            .await
            .map_err(|_| format!("resolving {} timed out", target.host))?
            .map_err(|e| format!("cannot resolve {}: {e}", target.host))?;
    if addrs.is_empty() {
        return Err(format!("{} has no addresses", target.host));
    }
    Ok(addrs)
}

fn tunnel(
    mut req: Request<Incoming>,
    upstream: TcpStream,
    shared: &Shared,
    slot: &PermitSlot,
) -> Response<ProxyBody> {
    let on_upgrade = hyper::upgrade::on(&mut req);
    let cancel = shared.cancel.clone();
    let guard = TunnelGuard::new(&shared.tunnels);
    let permit = slot.lock().ok().and_then(|mut p| p.take());
    shared.tracker.spawn(async move {
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
        if let Err(e) = splice(upgraded, upstream, &cancel).await {
            tracing::debug!(error = %e, "tunnel ended with an error");
        }
    });
    empty(StatusCode::OK)
}

async fn splice(
    upgraded: hyper::upgrade::Upgraded,
    mut upstream: TcpStream,
    cancel: &CancellationToken,
) -> io::Result<()> {
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            // Bytes the client sent right after its CONNECT head (e.g. a TLS
            // ClientHello) were read by hyper; forward them first.
            if !parts.read_buf.is_empty() {
                upstream.write_all(&parts.read_buf).await?;
            }
            let client = parts.io.into_inner();
            let (cr, cw) = client.into_split();
            let (ur, uw) = upstream.into_split();
            run_both(pump_tcp(cr, uw), pump_tcp(ur, cw), cancel).await
        }
        Err(upgraded) => {
            let (cr, cw) = tokio::io::split(TokioIo::new(upgraded));
            let (ur, uw) = upstream.into_split();
            run_both(pump(cr, uw), pump(ur, cw), cancel).await
        }
    }
}

async fn run_both(
    a: impl Future<Output = io::Result<()>>,
    b: impl Future<Output = io::Result<()>>,
    cancel: &CancellationToken,
) -> io::Result<()> {
    tokio::select! {
        () = cancel.cancelled() => Ok(()),
        r = async { tokio::try_join!(a, b) } => r.map(|_| ()),
    }
}

/// One direction over raw TCP halves. Nothing (buffer, pipe) is allocated
/// until the source is readable, so idle tunnels cost only their sockets.
async fn pump_tcp(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) -> io::Result<()> {
    from.readable().await?;
    #[cfg(target_os = "linux")]
    if let Some(pipe) = splice::Pipe::new() {
        pipe.pump(from.as_ref(), to.as_ref()).await?;
        let _ = to.shutdown().await;
        return Ok(());
    }
    let mut buf = vec![0u8; TUNNEL_BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await?;
    }
    // Propagate the half-close; the peer may already be gone.
    let _ = to.shutdown().await;
    Ok(())
}

/// One direction over generic halves (fallback when the upgrade is not raw TCP).
async fn pump<R, W>(mut from: R, mut to: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tokio::io::copy(&mut from, &mut to).await?;
    let _ = to.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_forms() {
        let t = ProxyToken::generate();
        let book = CredentialBook::new();
        let authorized = |h: &HeaderMap, t: &ProxyToken| authorized(h, t, &book).is_some();
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, &t));
        let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        for (value, ok) in [
            (format!("Bearer {}", t.expose()), true),
            (format!("bearer  {}", t.expose()), true),
            (format!("Basic {}", b64(format!("t:{}", t.expose()))), true),
            (format!("Basic {}", b64(format!(":{}", t.expose()))), true),
            (format!("Basic {}", b64(t.expose().to_owned())), false),
            (format!("Basic {}", b64(format!("{}:x", t.expose()))), false),
            ("Bearer nope".to_owned(), false),
            (format!("Token {}", t.expose()), false),
            ("Basic !!!".to_owned(), false),
        ] {
            h.insert(
                header::PROXY_AUTHORIZATION,
                HeaderValue::from_str(&value).unwrap(),
            );
            assert_eq!(authorized(&h, &t), ok, "{value}");
        }
    }

    #[test]
    fn exec_credentials_name_their_exec() {
        let t = ProxyToken::generate();
        let book = CredentialBook::new();
        let cred = book.issue("probe");
        let url = cred.endpoint_url("h", 1);
        let userinfo = url
            .strip_prefix("http://")
            .and_then(|u| u.split_once('@'))
            .map(|(u, _)| u.to_owned())
            .unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut h = HeaderMap::new();
        let mut with = |value: String| {
            h.insert(
                header::PROXY_AUTHORIZATION,
                HeaderValue::from_str(&value).unwrap(),
            );
            authorized(&h, &t, &book)
        };
        assert_eq!(
            with(format!("Basic {}", b64(&userinfo))),
            Some(Principal::Exec("probe".into()))
        );
        assert_eq!(
            with(format!("Basic {}", b64(&format!("t:{}", t.expose())))),
            Some(Principal::Run)
        );
        // The run token under an exec's id still speaks for the run only.
        let id = userinfo.split(':').next().unwrap();
        assert_eq!(
            with(format!("Basic {}", b64(&format!("{id}:{}", t.expose())))),
            Some(Principal::Run)
        );
        // An exec secret as a Bearer token is not accepted.
        let secret = userinfo.split(':').nth(1).unwrap();
        assert_eq!(with(format!("Bearer {secret}")), None);
        assert_eq!(with(format!("Basic {}", b64(&format!("t:{secret}")))), None);
    }
}
