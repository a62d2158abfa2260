//! The run-gateway HTTP plumbing every per-run listener shares — the MCP
//! listener (`listener`) and the engine-tool listeners (`engine_tools`):
//! the name a container reaches the host by ([`GATEWAY_HOST`]), binding
//! on the gateway (which may not exist yet), the accept loop, token
//! minting and the `Authorization: Bearer` reading, the plain status
//! answers, and the guard that stops a listener when dropped. Owns no
//! listener, no route and no grant.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use tokio_util::sync::CancellationToken;

/// The name the container reaches the host by.
pub const GATEWAY_HOST: &str = "host.docker.internal";

/// Stops the listener when dropped.
#[derive(Debug)]
pub struct GatewayGuard(CancellationToken);

impl GatewayGuard {
    pub(super) fn new(cancel: CancellationToken) -> Self {
        Self(cancel)
    }
}

impl Drop for GatewayGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

pub(super) fn mint() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

pub(super) fn bind(addr: SocketAddr, freebind: bool) -> std::io::Result<tokio::net::TcpListener> {
    let domain = match addr {
        SocketAddr::V4(_) => socket2::Domain::IPV4,
        SocketAddr::V6(_) => socket2::Domain::IPV6,
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    if freebind {
        // A Podman network's gateway appears with its bridge, when the
        // container starts; the proxy binds the same way.
        #[cfg(target_os = "linux")]
        socket.set_freebind_v4(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(64)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// Serve HTTP/1 on `listener` with `handler` until `cancel`.
pub(super) async fn accept_loop<F, Fut>(
    listener: tokio::net::TcpListener,
    cancel: CancellationToken,
    handler: F,
) where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Body>> + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = cancel.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

pub(super) type Body = BoxBody<Bytes, Infallible>;

pub(super) fn status(code: u16, text: &'static str) -> http::Response<Body> {
    let mut r = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_REQUEST);
    r
}

/// The request's `Authorization: Bearer` value.
pub(super) fn bearer<B>(req: &http::Request<B>) -> Option<String> {
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
}
