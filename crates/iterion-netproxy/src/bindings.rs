//! Secret egress bindings (issue 17): each bound secret's placeholder, its
//! value and the hosts it is for. The proxy inspects a CONNECT only when
//! some binding names its host ([`Bindings::inspects`]); on such a
//! request the placeholder becomes the value in the URL, the headers and
//! the body, while a placeholder on a request to any other host — or in
//! plain `http://`, where the value would travel in clear — refuses the
//! request before a byte of it leaves ([`Exfiltration`]). Matching a host
//! is `iterion_core::net`'s rule matcher, the same as the policy's.
//!
//! A body is rewritten as it streams: each chunk is scanned with the last
//! `longest placeholder − 1` bytes of the previous one carried over, so a
//! placeholder split across chunks is still found, and nothing else is
//! held back.
//!
//! A binding made [`SecretBinding::head_only`] (an agent's provider key)
//! gets its value back in the request head only: in a body bound for its
//! own host the placeholder passes as it is. A body is what the sandbox
//! writes — a tool's output in a model conversation, say — and a value
//! put there would reach whatever the upstream echoes back (a model
//! repeating its context), so the box could read the key after all.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::HeaderValue;
use iterion_core::net::{Host, NetRule};

/// One bound secret. Its value is never shown by `Debug`.
#[derive(Clone)]
pub struct SecretBinding {
    name: String,
    hosts: Vec<NetRule>,
    placeholder: String,
    value: String,
    /// The value goes back in the body too (else in the head only).
    in_body: bool,
}

impl std::fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field(
                "hosts",
                &self.hosts.iter().map(NetRule::as_str).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl SecretBinding {
    /// `placeholder` stands for `value` on requests to `hosts`. An empty
    /// placeholder binds nothing (it would match everywhere) and is refused.
    pub fn new(
        name: impl Into<String>,
        hosts: Vec<NetRule>,
        placeholder: impl Into<String>,
        value: impl Into<String>,
    ) -> Option<Self> {
        let placeholder = placeholder.into();
        (!placeholder.is_empty()).then(|| Self {
            name: name.into(),
            hosts,
            placeholder,
            value: value.into(),
            in_body: true,
        })
    }

    /// The same binding with its value put back in the request target and
    /// headers only (see the module's doc).
    pub fn head_only(mut self) -> Self {
        self.in_body = false;
        self
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn bound_to(&self, host: &Host) -> bool {
        self.hosts.iter().any(|r| !r.negated() && r.matches(host))
    }
}

/// A placeholder on a request to a host its secret is not bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exfiltration {
    /// The secret whose placeholder it was.
    pub secret: String,
}

/// The run's bindings.
#[derive(Debug, Clone, Default)]
pub struct Bindings(Arc<Vec<SecretBinding>>);

impl Bindings {
    /// The set.
    pub fn new(bindings: Vec<SecretBinding>) -> Self {
        Self(Arc::new(bindings))
    }

    /// No binding at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some binding names `host`: the proxy terminates TLS for it.
    pub fn inspects(&self, host: &str) -> bool {
        let host = Host::parse(host);
        self.0.iter().any(|b| b.bound_to(&host))
    }

    /// The rewriter of one request to `host` (`None`: plain `http://`, no
    /// value is ever put back, every placeholder refuses).
    pub(crate) fn rewriter(&self, host: Option<&str>) -> Rewriter {
        let host = host.map(Host::parse);
        let rules = self
            .0
            .iter()
            .map(|b| Needle {
                from: b.placeholder.as_bytes().to_vec(),
                to: host
                    .as_ref()
                    .filter(|h| b.bound_to(h))
                    .map(|_| b.value.as_bytes().to_vec()),
                in_body: b.in_body,
                secret: b.name.clone(),
            })
            .collect::<Vec<_>>();
        let longest = rules.iter().map(|n| n.from.len()).max().unwrap_or(0);
        Rewriter {
            needles: Arc::new(rules),
            longest,
        }
    }
}

struct Needle {
    from: Vec<u8>,
    /// The value, on a host the secret is bound to; `None` refuses.
    to: Option<Vec<u8>>,
    /// Put back in a body too (else the placeholder passes there).
    in_body: bool,
    secret: String,
}

/// Which part of a request is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The request target and the headers.
    Head,
    /// The body.
    Body,
}

/// The substitution of one request: head and body.
#[derive(Clone)]
pub(crate) struct Rewriter {
    needles: Arc<Vec<Needle>>,
    longest: usize,
}

impl Rewriter {
    /// Whether any placeholder would change length when put back (the
    /// body's `Content-Length` then has to be recomputed).
    pub(crate) fn changes_length(&self) -> bool {
        self.needles
            .iter()
            .any(|n| n.in_body && n.to.as_ref().is_some_and(|to| to.len() != n.from.len()))
    }

    /// Rewrite `input` (of `part`) whole. `Ok(None)`: nothing to change.
    pub(crate) fn whole(&self, input: &[u8], part: Part) -> Result<Option<Vec<u8>>, Exfiltration> {
        let mut out = Vec::new();
        let (consumed, changed) = self.scan(input, input.len(), part, &mut out)?;
        debug_assert_eq!(consumed, input.len());
        Ok(changed.then_some(out))
    }

    /// Scan `buf`, deciding every position before `stop` (positions past it
    /// may hold the start of a placeholder whose end has not arrived).
    /// Appends the rewritten bytes to `out`; returns how many input bytes
    /// were consumed and whether anything was replaced.
    fn scan(
        &self,
        buf: &[u8],
        stop: usize,
        part: Part,
        out: &mut Vec<u8>,
    ) -> Result<(usize, bool), Exfiltration> {
        let mut i = 0;
        let mut plain = 0;
        let mut changed = false;
        while i < stop {
            let hit = self.needles.iter().find(|n| buf[i..].starts_with(&n.from));
            match hit {
                None => i += 1,
                Some(n) => {
                    let Some(to) = &n.to else {
                        return Err(Exfiltration {
                            secret: n.secret.clone(),
                        });
                    };
                    if part == Part::Body && !n.in_body {
                        // Its own host, in a body: the placeholder passes.
                        i += n.from.len();
                        continue;
                    }
                    out.extend_from_slice(&buf[plain..i]);
                    out.extend_from_slice(to);
                    i += n.from.len();
                    plain = i;
                    changed = true;
                }
            }
        }
        out.extend_from_slice(&buf[plain..i]);
        Ok((i, changed))
    }

    /// Rewrite the request target and every header value in place.
    pub(crate) fn head(
        &self,
        target: &mut http::Uri,
        headers: &mut HeaderMap,
    ) -> Result<(), HeadError> {
        if self.needles.is_empty() {
            return Ok(());
        }
        let pq = target.path_and_query().map_or("", |p| p.as_str());
        if let Some(new) = self
            .whole(pq.as_bytes(), Part::Head)
            .map_err(HeadError::Exfiltration)?
        {
            let mut parts = std::mem::take(target).into_parts();
            parts.path_and_query = Some(
                http::uri::PathAndQuery::try_from(new)
                    .map_err(|_| HeadError::Invalid("the rewritten request target"))?,
            );
            *target = http::Uri::from_parts(parts)
                .map_err(|_| HeadError::Invalid("the rewritten request target"))?;
        }
        for value in headers.values_mut() {
            if let Some(new) = self
                .whole(value.as_bytes(), Part::Head)
                .map_err(HeadError::Exfiltration)?
            {
                *value = HeaderValue::from_bytes(&new)
                    .map_err(|_| HeadError::Invalid("a rewritten header value"))?;
            }
        }
        Ok(())
    }

    /// A streaming body rewriter.
    pub(crate) fn stream(&self) -> StreamRewriter {
        StreamRewriter {
            rw: self.clone(),
            carry: BytesMut::new(),
        }
    }
}

/// Why a request head could not be rewritten.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// A placeholder for another host.
    Exfiltration(Exfiltration),
    /// The value cannot stand where the placeholder stood.
    Invalid(&'static str),
}

/// One body's streaming substitution state.
pub(crate) struct StreamRewriter {
    rw: Rewriter,
    carry: BytesMut,
}

impl StreamRewriter {
    /// The rewritten bytes of `chunk` that are final now.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<Bytes, Exfiltration> {
        if self.rw.needles.is_empty() {
            return Ok(chunk);
        }
        self.carry.extend_from_slice(&chunk);
        let keep = self.rw.longest.saturating_sub(1);
        let stop = self.carry.len().saturating_sub(keep);
        let mut out = Vec::with_capacity(self.carry.len());
        let (consumed, _) = self.rw.scan(&self.carry, stop, Part::Body, &mut out)?;
        let _ = self.carry.split_to(consumed);
        Ok(Bytes::from(out))
    }

    /// The rest, at the end of the body.
    pub(crate) fn finish(&mut self) -> Result<Bytes, Exfiltration> {
        let rest = self.carry.split();
        let mut out = Vec::with_capacity(rest.len());
        self.rw.scan(&rest, rest.len(), Part::Body, &mut out)?;
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings() -> Bindings {
        Bindings::new(vec![
            SecretBinding::new(
                "A",
                vec!["api.example.com".parse().unwrap()],
                "sk-PHAAAAAAAAAAA",
                "sk-REAL-VALUE-A!",
            )
            .unwrap(),
            SecretBinding::new(
                "B",
                vec!["*.other.test".parse().unwrap()],
                "tok-PHBBBB",
                "b-value-longer-than-its-placeholder",
            )
            .unwrap(),
        ])
    }

    #[test]
    fn inspection_is_only_for_bound_hosts() {
        let b = bindings();
        assert!(b.inspects("api.example.com"));
        assert!(b.inspects("API.example.com."));
        assert!(b.inspects("x.other.test"));
        assert!(!b.inspects("other.test"));
        assert!(!b.inspects("example.com"));
    }

    #[test]
    fn a_bound_host_gets_the_value_and_another_host_is_refused() {
        let b = bindings();
        let rw = b.rewriter(Some("api.example.com"));
        assert_eq!(
            rw.whole(b"Bearer sk-PHAAAAAAAAAAA", Part::Head)
                .unwrap()
                .unwrap(),
            b"Bearer sk-REAL-VALUE-A!"
        );
        assert_eq!(rw.whole(b"nothing here", Part::Head).unwrap(), None);
        assert_eq!(
            rw.whole(b"x tok-PHBBBB", Part::Body).unwrap_err(),
            Exfiltration { secret: "B".into() }
        );
        // Plain http: no value ever, every placeholder refuses.
        let plain = b.rewriter(None);
        assert!(plain.whole(b"sk-PHAAAAAAAAAAA", Part::Head).is_err());
        assert!(!rw.changes_length());
        assert!(b.rewriter(Some("a.other.test")).changes_length());
    }

    #[test]
    fn headers_and_the_target_are_rewritten() {
        let rw = bindings().rewriter(Some("api.example.com"));
        let mut uri: http::Uri = "/v1?key=sk-PHAAAAAAAAAAA".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("sk-PHAAAAAAAAAAA"));
        rw.head(&mut uri, &mut h).unwrap();
        assert_eq!(
            uri.path_and_query().unwrap().as_str(),
            "/v1?key=sk-REAL-VALUE-A!"
        );
        assert_eq!(h["x-api-key"], "sk-REAL-VALUE-A!");
    }

    #[test]
    fn a_placeholder_split_across_chunks_is_found() {
        let b = bindings();
        let body = b"{\"k\":\"sk-PHAAAAAAAAAAA\",\"n\":\"sk-PHAAAAAAAAAAA\"} tail";
        for split in 1..body.len() {
            let mut s = b.rewriter(Some("api.example.com")).stream();
            let mut out = Vec::new();
            for chunk in body.chunks(split) {
                out.extend_from_slice(&s.push(Bytes::copy_from_slice(chunk)).unwrap());
            }
            out.extend_from_slice(&s.finish().unwrap());
            assert_eq!(
                out, b"{\"k\":\"sk-REAL-VALUE-A!\",\"n\":\"sk-REAL-VALUE-A!\"} tail",
                "split {split}"
            );
            let mut s = b.rewriter(Some("elsewhere.test")).stream();
            let mut refused = false;
            for c in body.chunks(split) {
                refused |= s.push(Bytes::copy_from_slice(c)).is_err();
            }
            refused |= s.finish().is_err();
            assert!(refused, "split {split}");
        }
    }

    #[test]
    fn a_head_only_binding_never_puts_its_value_in_a_body() {
        let b = Bindings::new(vec![
            SecretBinding::new(
                "KEY",
                vec!["api.example.com".parse().unwrap()],
                "sk-PHAAAAAAAAAAA",
                "sk-REAL-VALUE-A!",
            )
            .unwrap()
            .head_only(),
        ]);
        let rw = b.rewriter(Some("api.example.com"));
        // The head gets the value.
        let mut uri: http::Uri = "/v1".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("sk-PHAAAAAAAAAAA"));
        rw.head(&mut uri, &mut h).unwrap();
        assert_eq!(h["x-api-key"], "sk-REAL-VALUE-A!");
        // The body keeps the placeholder, whole or streamed, split anywhere.
        let body = b"{\"tool_result\":\"key=sk-PHAAAAAAAAAAA\"}";
        assert_eq!(rw.whole(body, Part::Body).unwrap(), None);
        for split in 1..body.len() {
            let mut s = rw.stream();
            let mut out = Vec::new();
            for chunk in body.chunks(split) {
                out.extend_from_slice(&s.push(Bytes::copy_from_slice(chunk)).unwrap());
            }
            out.extend_from_slice(&s.finish().unwrap());
            assert_eq!(out, body, "split {split}");
        }
        assert!(!rw.changes_length());
        // Another host still refuses it, in the body too.
        let other = b.rewriter(Some("elsewhere.test"));
        assert!(other.whole(body, Part::Body).is_err());
    }
}
