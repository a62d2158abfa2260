//! The HTTP pieces of one proxied request, shared by the proxy, its plain
//! forwarder and the inspector: where it goes ([`Target`]), who sent it
//! ([`Principal`]), the responses the proxy writes itself ([`text`],
//! [`empty`]), the hop-by-hop headers never forwarded
//! ([`strip_hop_by_hop`]), and the dial of vetted addresses ([`dial`]).
//! Owns no decision: which target is allowed is the policy's, which
//! principal is valid the proxy's authentication.

use std::io;
use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::net::TcpStream;

/// Any body error (hyper's, or a refusal of the inspecting scan).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) type ProxyBody = BoxBody<Bytes, BoxError>;

pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut resp = Response::new(Full::new(body.into()).map_err(|n| match n {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub(crate) fn empty(status: StatusCode) -> Response<ProxyBody> {
    let mut resp = Response::new(Empty::new().map_err(|n| match n {}).boxed());
    *resp.status_mut() = status;
    resp
}

/// Where a request goes.
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The Host an absolute-form request is forwarded with (its
    /// request-target's authority); `None` for origin-form and CONNECT.
    pub(crate) host_header: Option<HeaderValue>,
}

/// Who presented a valid credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// The run token (the sandbox as a whole).
    Run,
    /// A per-exec credential, with its label.
    Exec(String),
}

impl Principal {
    pub(crate) fn exec(self) -> Option<String> {
        match self {
            Self::Run => None,
            Self::Exec(label) => Some(label),
        }
    }
}

/// Dial the vetted addresses in order; never resolves again (no rebinding window).
pub(crate) async fn dial(
    addrs: &[SocketAddr],
    deadline: tokio::time::Instant,
) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = e,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "dial timed out")),
        }
    }
    Err(last)
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Remove hop-by-hop headers, including every header `Connection` names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    // Not in the RFC list but only ever meant for the proxy.
    headers.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_stripped_including_connection_named() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Bearer t"),
            ("proxy-authenticate", "Basic"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("x-keep", "yes"),
            ("content-length", "3"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_owned()).collect();
        left.sort();
        assert_eq!(left, vec!["content-length", "x-keep"]);
    }
}
