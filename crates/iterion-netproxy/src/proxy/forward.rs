//! Plain `http://` forwarding: one upstream connection per request (no
//! pool, so a pooled connection never outlives a policy decision), the
//! request-target made origin-form, the `Host` the policy judged, and no
//! bound secret's placeholder ever let through in clear (issue 17).

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::inspect::{self, RewriteBody};
use crate::shared::Shared;
use crate::wire::{Principal, ProxyBody, Target, strip_hop_by_hop, text};

pub(super) async fn forward(
    req: Request<Incoming>,
    upstream: TcpStream,
    target: &Target,
    shared: &Shared,
    principal: Principal,
) -> Response<ProxyBody> {
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // Issue 17: plain http never carries a bound secret's value, and a
    // placeholder in it is refused before a byte leaves.
    let bindings = shared.inspection.as_ref().map(|i| i.bindings().clone());
    let rewriter = bindings.unwrap_or_default().rewriter(None);
    if let Err(crate::bindings::HeadError::Exfiltration(e)) =
        rewriter.head(&mut parts.uri, &mut parts.headers)
    {
        return inspect::exfiltration(shared, target, principal, e);
    }
    let flagged = Arc::new(std::sync::Mutex::new(None));
    let body = RewriteBody::streaming(body, rewriter.stream(), true, flagged.clone());
    let origin_form = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    parts.uri = match origin_form.parse::<Uri>() {
        Ok(u) => u,
        Err(_) => return text(StatusCode::BAD_REQUEST, "invalid request target\n"),
    };
    if let Some(judged) = &target.host_header {
        parts.headers.insert(header::HOST, judged.clone());
    } else if !parts.headers.contains_key(header::HOST) {
        let host = if target.host.contains(':') {
            format!("[{}]:{}", target.host, target.port)
        } else {
            format!("{}:{}", target.host, target.port)
        };
        if let Ok(v) = HeaderValue::from_str(&host) {
            parts.headers.insert(header::HOST, v);
        }
    }
    let req = Request::from_parts(parts, body);
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return text(StatusCode::BAD_GATEWAY, format!("upstream: {e}\n")),
        };
    let cancel = shared.cancel.clone();
    shared.tracker.spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            r = conn => if let Err(e) = r { tracing::debug!(error = %e, "upstream connection ended"); },
        }
    });
    let sent = sender.send_request(req).await;
    if let Some(e) = flagged.lock().ok().and_then(|mut f| f.take()) {
        return inspect::exfiltration(shared, target, principal, e);
    }
    match sent {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.map_err(Into::into).boxed())
        }
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("upstream: {e}\n")),
    }
}
