//! Secret egress bindings (issue 17, issue 31 items 3 and 4): each bound
//! secret's placeholder, its value and the hosts (and, for a provider key,
//! the port) it is for. The proxy inspects a CONNECT only when some
//! binding names its host and port ([`Bindings::inspects`]). On such a
//! request a declared `egress:` secret's placeholder becomes the value in
//! the target, the headers and the body; a provider key's
//! ([`SecretBinding::head_only`]) only in the one header that carries it
//! — `x-api-key: <placeholder>` or `Authorization: Bearer <placeholder>`,
//! the exact value — and passes as the placeholder anywhere else. A
//! placeholder on a request to any other host — or in plain `http://`,
//! where the value would travel in clear — refuses the request before a
//! byte of it leaves ([`Exfiltration`]). Matching a host is
//! `iterion_core::net`'s rule matcher, the same as the policy's.
//!
//! Why the provider key is confined to its header: anything else the box
//! writes (a path, a query, another header, a body such as a tool's output
//! in a model conversation) is what an upstream echoes back — an
//! unknown-path 404 quoting the request, a model repeating its context —
//! and a value put there would come back to the box.
//!
//! The other direction closes what is left: every response on an
//! inspected connection goes through a [`Reflector`] that puts the
//! placeholder back wherever the real value of ANY bound secret appears,
//! in the header values and in the body as it streams. So even a declared
//! secret a provider echoes (its value is put everywhere on the way out)
//! never reaches the box.
//!
//! Both directions scan a stream the same way ([`Scanner`]): one
//! Aho-Corasick pass over the bytes that arrived, holding back only a tail
//! that is the beginning of some needle (so a needle split across chunks
//! is still found, and an SSE event that ends a chunk is never delayed
//! unless its last bytes look like the start of a secret).

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::{self, HeaderValue};
use iterion_core::net::{Host, NetRule};

/// One bound secret. Its value is never shown by `Debug`.
#[derive(Clone)]
pub struct SecretBinding {
    name: String,
    hosts: Vec<NetRule>,
    /// The one port it is for (`None`: any port of its hosts).
    port: Option<u16>,
    placeholder: String,
    value: String,
    /// The value goes back everywhere (else in its carrier header only).
    everywhere: bool,
}

impl std::fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field(
                "hosts",
                &self.hosts.iter().map(NetRule::as_str).collect::<Vec<_>>(),
            )
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl SecretBinding {
    /// `placeholder` stands for `value` on requests to `hosts`. An empty
    /// placeholder binds nothing (it would match everywhere) and is
    /// refused, and so is an empty value (the response scan would match
    /// it everywhere).
    pub fn new(
        name: impl Into<String>,
        hosts: Vec<NetRule>,
        placeholder: impl Into<String>,
        value: impl Into<String>,
    ) -> Option<Self> {
        let placeholder = placeholder.into();
        let value = value.into();
        (!placeholder.is_empty() && !value.is_empty()).then(|| Self {
            name: name.into(),
            hosts,
            port: None,
            placeholder,
            value,
            everywhere: true,
        })
    }

    /// The same binding with its value put back only in the header that
    /// carries a key — `x-api-key` or `Authorization: Bearer`, the exact
    /// placeholder — never in the target, another header or a body (a
    /// provider key; see the module's doc).
    pub fn head_only(mut self) -> Self {
        self.everywhere = false;
        self
    }

    /// The same binding for `port` only (a provider key: its base URL's
    /// port, 443 unless the URL names another).
    pub fn on_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn bound_to(&self, host: &Host, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
            && self.hosts.iter().any(|r| !r.negated() && r.matches(host))
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

    /// Whether some binding names `host` on `port`: the proxy terminates
    /// TLS for it.
    pub fn inspects(&self, host: &str, port: u16) -> bool {
        let host = Host::parse(host);
        self.0.iter().any(|b| b.bound_to(&host, port))
    }

    /// The rewriter of the requests to `host:port` (`None`: plain
    /// `http://`, no value is ever put back, every placeholder refuses).
    pub(crate) fn rewriter(&self, to: Option<(&str, u16)>) -> Rewriter {
        let to = to.map(|(h, p)| (Host::parse(h), p));
        let mut needles = Vec::with_capacity(self.0.len());
        let mut carried = Vec::new();
        for b in self.0.iter() {
            let bound = to.as_ref().is_some_and(|(h, p)| b.bound_to(h, *p));
            let action = match (bound, b.everywhere) {
                (false, _) => Action::Refuse(b.name.clone()),
                (true, true) => Action::Replace(b.value.as_bytes().to_vec()),
                (true, false) => {
                    carried.push(Carried {
                        placeholder: b.placeholder.clone(),
                        value: b.value.clone(),
                    });
                    Action::Pass
                }
            };
            needles.push((b.placeholder.as_bytes().to_vec(), action));
        }
        Rewriter {
            scanner: Scanner::new(needles),
            carried: Arc::new(carried),
        }
    }

    /// The scan of every response on an inspected connection: the real
    /// value of any bound secret becomes its placeholder.
    pub(crate) fn reflector(&self) -> Scanner {
        Scanner::new(
            self.0
                .iter()
                .map(|b| {
                    (
                        b.value.as_bytes().to_vec(),
                        Action::Replace(b.placeholder.as_bytes().to_vec()),
                    )
                })
                .collect(),
        )
    }
}

/// What a scan does where it finds a needle.
#[derive(Debug, Clone)]
enum Action {
    /// Put these bytes in its place.
    Replace(Vec<u8>),
    /// Leave it (a provider key's placeholder outside its carrier header).
    Pass,
    /// Refuse the request: the placeholder of this secret, on a host it is
    /// not bound to.
    Refuse(String),
}

/// A set of needles and what to do where each is found, over whole
/// buffers or streams.
#[derive(Clone)]
pub(crate) struct Scanner {
    inner: Option<Arc<ScannerInner>>,
}

struct ScannerInner {
    ac: AhoCorasick,
    needles: Vec<(Vec<u8>, Action)>,
    longest: usize,
}

impl Scanner {
    fn new(needles: Vec<(Vec<u8>, Action)>) -> Self {
        let needles: Vec<_> = needles.into_iter().filter(|(n, _)| !n.is_empty()).collect();
        if needles.is_empty() {
            return Self { inner: None };
        }
        // Leftmost-longest: where two needles start at one place, the
        // longer wins, so a value that begins with another never leaves a
        // tail of itself behind. Building only fails past the automaton's
        // size limits, which a run's handful of secrets never reaches;
        // should it, no scan is possible and every byte is held as
        // suspicious rather than passed (see `scan`).
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(needles.iter().map(|(n, _)| n));
        let longest = needles.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        match ac {
            Ok(ac) => Self {
                inner: Some(Arc::new(ScannerInner {
                    ac,
                    needles,
                    longest,
                })),
            },
            Err(e) => {
                tracing::error!(error = %e, "secret scanner could not be built");
                Self { inner: None }
            }
        }
    }

    /// Whether a replacement may change the length (a body's
    /// `Content-Length` then has to be recomputed or dropped).
    pub(crate) fn changes_length(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| {
            s.needles
                .iter()
                .any(|(from, a)| matches!(a, Action::Replace(to) if to.len() != from.len()))
        })
    }

    /// Scan `input` whole. `Ok(None)`: nothing to change.
    pub(crate) fn whole(&self, input: &[u8]) -> Result<Option<Vec<u8>>, Exfiltration> {
        let Some(s) = &self.inner else {
            return Ok(None);
        };
        let mut out = Vec::new();
        let (_, changed) = s.scan(input, true, &mut out)?;
        Ok(changed.then_some(out))
    }

    /// A streaming scan.
    pub(crate) fn stream(&self) -> StreamScan {
        StreamScan {
            scanner: self.clone(),
            carry: BytesMut::new(),
        }
    }
}

impl ScannerInner {
    /// Where a tail of `buf` that could be the start of a needle begins
    /// (`buf.len()` when none could).
    fn partial_start(&self, buf: &[u8]) -> usize {
        let from = buf.len().saturating_sub(self.longest.saturating_sub(1));
        (from..buf.len())
            .find(|&p| {
                let tail = &buf[p..];
                self.needles
                    .iter()
                    .any(|(n, _)| n.len() > tail.len() && n.starts_with(tail))
            })
            .unwrap_or(buf.len())
    }

    /// Scan `buf` (all of it when `eof`, else up to the tail that may
    /// still become a needle); returns how many input bytes were consumed
    /// and whether anything was replaced. Only when something was is the
    /// result of the consumed bytes appended to `out` (else it is those
    /// bytes as they are, copied by no one).
    fn scan(
        &self,
        buf: &[u8],
        eof: bool,
        out: &mut Vec<u8>,
    ) -> Result<(usize, bool), Exfiltration> {
        let cut = if eof {
            buf.len()
        } else {
            self.partial_start(buf)
        };
        let mut plain = 0;
        let mut end = cut;
        let mut changed = false;
        for m in self.ac.find_iter(buf) {
            if m.start() >= cut {
                break;
            }
            match &self.needles[m.pattern().as_usize()].1 {
                Action::Refuse(secret) => {
                    return Err(Exfiltration {
                        secret: secret.clone(),
                    });
                }
                Action::Pass => {}
                Action::Replace(to) => {
                    out.extend_from_slice(&buf[plain..m.start()]);
                    out.extend_from_slice(to);
                    plain = m.end();
                    changed = true;
                }
            }
            end = end.max(m.end());
        }
        if changed {
            out.extend_from_slice(&buf[plain..end]);
        }
        Ok((end, changed))
    }
}

/// A provider key bound to the request's host: its value goes in its
/// carrier header only.
struct Carried {
    placeholder: String,
    value: String,
}

/// The substitution of the requests to one host.
#[derive(Clone)]
pub(crate) struct Rewriter {
    scanner: Scanner,
    carried: Arc<Vec<Carried>>,
}

impl Rewriter {
    /// Whether a body's replacement may change its length.
    pub(crate) fn changes_length(&self) -> bool {
        self.scanner.changes_length()
    }

    /// Rewrite a body whole. `Ok(None)`: nothing to change.
    pub(crate) fn whole(&self, input: &[u8]) -> Result<Option<Vec<u8>>, Exfiltration> {
        self.scanner.whole(input)
    }

    /// A streaming body rewriter.
    pub(crate) fn stream(&self) -> StreamScan {
        self.scanner.stream()
    }

    /// The value of the provider key `value` (a header of `name`) carries,
    /// when it carries one exactly.
    fn carried(&self, name: &header::HeaderName, value: &[u8]) -> Option<Vec<u8>> {
        if self.carried.is_empty() {
            return None;
        }
        if name.as_str() == "x-api-key" {
            return self
                .carried
                .iter()
                .find(|c| c.placeholder.as_bytes() == value)
                .map(|c| c.value.as_bytes().to_vec());
        }
        if name == header::AUTHORIZATION {
            let (scheme, token) = value.split_at_checked(7)?;
            if !scheme.eq_ignore_ascii_case(b"bearer ") {
                return None;
            }
            return self
                .carried
                .iter()
                .find(|c| c.placeholder.as_bytes() == token)
                .map(|c| [b"Bearer ".as_slice(), c.value.as_bytes()].concat());
        }
        None
    }

    /// Rewrite the request target and every header value in place.
    pub(crate) fn head(
        &self,
        target: &mut http::Uri,
        headers: &mut HeaderMap,
    ) -> Result<(), HeadError> {
        if self.scanner.inner.is_none() {
            return Ok(());
        }
        let pq = target.path_and_query().map_or("", |p| p.as_str());
        if let Some(new) = self
            .scanner
            .whole(pq.as_bytes())
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
        for (name, value) in headers.iter_mut() {
            let new = match self.carried(name, value.as_bytes()) {
                Some(v) => Some(v),
                None => self
                    .scanner
                    .whole(value.as_bytes())
                    .map_err(HeadError::Exfiltration)?,
            };
            if let Some(new) = new {
                *value = HeaderValue::from_bytes(&new)
                    .map_err(|_| HeadError::Invalid("a rewritten header value"))?;
            }
        }
        Ok(())
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

/// One body's streaming scan state.
pub(crate) struct StreamScan {
    scanner: Scanner,
    carry: BytesMut,
}

impl StreamScan {
    /// The scanned bytes of `chunk` that are final now.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<Bytes, Exfiltration> {
        let Some(s) = &self.scanner.inner else {
            return Ok(chunk);
        };
        if self.carry.is_empty() {
            // The common case: nothing held back, the chunk scanned as it is.
            let mut out = Vec::new();
            let (consumed, changed) = s.scan(&chunk, false, &mut out)?;
            self.carry.extend_from_slice(&chunk[consumed..]);
            return Ok(if changed {
                Bytes::from(out)
            } else {
                chunk.slice(..consumed)
            });
        }
        self.carry.extend_from_slice(&chunk);
        let mut out = Vec::new();
        let (consumed, changed) = s.scan(&self.carry, false, &mut out)?;
        let done = self.carry.split_to(consumed).freeze();
        Ok(if changed { Bytes::from(out) } else { done })
    }

    /// The rest, at the end of the body.
    pub(crate) fn finish(&mut self) -> Result<Bytes, Exfiltration> {
        let rest = self.carry.split();
        let Some(s) = &self.scanner.inner else {
            return Ok(rest.freeze());
        };
        let mut out = Vec::new();
        let (_, changed) = s.scan(&rest, true, &mut out)?;
        Ok(if changed {
            Bytes::from(out)
        } else {
            rest.freeze()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PH_A: &str = "sk-PHAAAAAAAAAAA";
    const VAL_A: &str = "sk-REAL-VALUE-A!";
    const PH_KEY: &str = "sk-ant-PHkkkkkkkkkkkkkkkk";
    const VAL_KEY: &str = "sk-ant-REALkeyREALkeyREAL";

    fn bindings() -> Bindings {
        Bindings::new(vec![
            SecretBinding::new("A", vec!["api.example.com".parse().unwrap()], PH_A, VAL_A).unwrap(),
            SecretBinding::new(
                "B",
                vec!["*.other.test".parse().unwrap()],
                "tok-PHBBBB",
                "b-value-longer-than-its-placeholder",
            )
            .unwrap(),
            SecretBinding::new(
                "KEY",
                vec!["provider.test".parse().unwrap()],
                PH_KEY,
                VAL_KEY,
            )
            .unwrap()
            .head_only()
            .on_port(443),
        ])
    }

    fn streamed(mut s: StreamScan, input: &[u8], split: usize) -> Result<Vec<u8>, Exfiltration> {
        let mut out = Vec::new();
        for chunk in input.chunks(split) {
            out.extend_from_slice(&s.push(Bytes::copy_from_slice(chunk))?);
        }
        out.extend_from_slice(&s.finish()?);
        Ok(out)
    }

    #[test]
    fn inspection_is_only_for_bound_hosts_and_ports() {
        let b = bindings();
        assert!(b.inspects("api.example.com", 443));
        assert!(
            b.inspects("API.example.com.", 8443),
            "a declared secret: any port"
        );
        assert!(b.inspects("x.other.test", 443));
        assert!(!b.inspects("other.test", 443));
        assert!(!b.inspects("example.com", 443));
        assert!(b.inspects("provider.test", 443));
        assert!(
            !b.inspects("provider.test", 8443),
            "a provider key: its port only"
        );
        assert!(SecretBinding::new("E", vec![], "ph", "").is_none());
    }

    #[test]
    fn a_bound_host_gets_the_value_and_another_host_is_refused() {
        let b = bindings();
        let rw = b.rewriter(Some(("api.example.com", 443)));
        assert_eq!(
            rw.whole(format!("Bearer {PH_A}").as_bytes())
                .unwrap()
                .unwrap(),
            format!("Bearer {VAL_A}").as_bytes()
        );
        assert_eq!(rw.whole(b"nothing here").unwrap(), None);
        assert_eq!(
            rw.whole(b"x tok-PHBBBB").unwrap_err(),
            Exfiltration { secret: "B".into() }
        );
        // Plain http: no value ever, every placeholder refuses.
        let plain = b.rewriter(None);
        assert!(plain.whole(PH_A.as_bytes()).is_err());
        assert!(plain.whole(PH_KEY.as_bytes()).is_err());
        assert!(!rw.changes_length());
        assert!(b.rewriter(Some(("a.other.test", 443))).changes_length());
        // A provider key on another port of its host is refused.
        let other_port = b.rewriter(Some(("provider.test", 8443)));
        assert_eq!(
            other_port.whole(PH_KEY.as_bytes()).unwrap_err(),
            Exfiltration {
                secret: "KEY".into()
            }
        );
    }

    #[test]
    fn a_declared_secret_goes_back_in_the_target_and_every_header() {
        let rw = bindings().rewriter(Some(("api.example.com", 443)));
        let mut uri: http::Uri = format!("/v1?key={PH_A}").parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-token", HeaderValue::from_static(PH_A));
        rw.head(&mut uri, &mut h).unwrap();
        assert_eq!(
            uri.path_and_query().unwrap().as_str(),
            format!("/v1?key={VAL_A}")
        );
        assert_eq!(h["x-token"], VAL_A);
    }

    /// Issue 31 item 3: a provider key is put back in its carrier header
    /// (exact value) and nowhere else on its own host.
    #[test]
    fn a_provider_key_goes_back_only_in_the_header_that_carries_it() {
        let rw = bindings().rewriter(Some(("provider.test", 443)));
        let mut uri: http::Uri = format!("/nope/{PH_KEY}?k={PH_KEY}").parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_str(PH_KEY).unwrap());
        h.append(
            "authorization",
            HeaderValue::from_str(&format!("bearer {PH_KEY}")).unwrap(),
        );
        h.insert("x-echo", HeaderValue::from_str(PH_KEY).unwrap());
        h.insert(
            "x-api-key-2",
            HeaderValue::from_str(&format!("{PH_KEY} ")).unwrap(),
        );
        let mut near = HeaderMap::new();
        near.insert(
            "x-api-key",
            HeaderValue::from_str(&format!("k={PH_KEY}")).unwrap(),
        );
        near.insert(
            "authorization",
            HeaderValue::from_str(&format!("Basic {PH_KEY}")).unwrap(),
        );
        rw.head(&mut uri, &mut h).unwrap();
        assert_eq!(h["x-api-key"], VAL_KEY);
        assert_eq!(h["authorization"], format!("Bearer {VAL_KEY}").as_str());
        assert_eq!(h["x-echo"], PH_KEY, "another header keeps the placeholder");
        assert_eq!(h["x-api-key-2"], format!("{PH_KEY} ").as_str());
        assert_eq!(
            uri.path_and_query().unwrap().as_str(),
            format!("/nope/{PH_KEY}?k={PH_KEY}"),
            "the target keeps the placeholder"
        );
        let mut u: http::Uri = "/".parse().unwrap();
        rw.head(&mut u, &mut near).unwrap();
        assert_eq!(
            near["x-api-key"],
            format!("k={PH_KEY}").as_str(),
            "not exact"
        );
        assert_eq!(near["authorization"], format!("Basic {PH_KEY}").as_str());
        // In a body it passes, whole or streamed, split anywhere.
        let body = format!("{{\"tool_result\":\"key={PH_KEY}\"}}");
        assert_eq!(rw.whole(body.as_bytes()).unwrap(), None);
        for split in 1..body.len() {
            assert_eq!(
                streamed(rw.stream(), body.as_bytes(), split).unwrap(),
                body.as_bytes()
            );
        }
        // Another host still refuses it, in a body or a header.
        let other = bindings().rewriter(Some(("api.example.com", 443)));
        assert!(other.whole(body.as_bytes()).is_err());
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_str(PH_KEY).unwrap());
        assert!(matches!(
            other.head(&mut "/".parse().unwrap(), &mut h),
            Err(HeadError::Exfiltration(_))
        ));
    }

    #[test]
    fn a_placeholder_split_across_chunks_is_found() {
        let b = bindings();
        let body = format!("{{\"k\":\"{PH_A}\",\"n\":\"{PH_A}\"}} tail");
        let want = format!("{{\"k\":\"{VAL_A}\",\"n\":\"{VAL_A}\"}} tail");
        for split in 1..body.len() {
            let rw = b.rewriter(Some(("api.example.com", 443)));
            assert_eq!(
                streamed(rw.stream(), body.as_bytes(), split).unwrap(),
                want.as_bytes(),
                "split {split}"
            );
            let other = b.rewriter(Some(("elsewhere.test", 443)));
            assert!(
                streamed(other.stream(), body.as_bytes(), split).is_err(),
                "split {split}"
            );
        }
    }

    /// Issue 31 item 3: the real value of any bound secret in a response,
    /// split anywhere across chunks, comes out as its placeholder.
    #[test]
    fn a_response_never_carries_a_real_value() {
        let r = bindings().reflector();
        let body = format!(
            "404 no route for /nope?k={VAL_KEY} (x-api-key: {VAL_KEY}, t={VAL_A}, b=b-value-longer-than-its-placeholder)"
        );
        let want = format!(
            "404 no route for /nope?k={PH_KEY} (x-api-key: {PH_KEY}, t={PH_A}, b=tok-PHBBBB)"
        );
        assert_eq!(r.whole(body.as_bytes()).unwrap().unwrap(), want.as_bytes());
        for split in 1..body.len() {
            assert_eq!(
                streamed(r.stream(), body.as_bytes(), split).unwrap(),
                want.as_bytes(),
                "split {split}"
            );
        }
        assert!(r.changes_length());
        // One byte at a time, a value never shows whole in what has been
        // let through so far.
        let mut s = r.stream();
        let mut out = Vec::new();
        for b in body.as_bytes() {
            out.extend_from_slice(&s.push(Bytes::copy_from_slice(&[*b])).unwrap());
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains(VAL_KEY) && !text.contains(VAL_A));
        }
    }

    /// A chunk that ends in text that cannot start a value is let through
    /// whole at once (an SSE event is not held until the next one).
    #[test]
    fn only_a_possible_start_of_a_value_is_held_back() {
        let r = bindings().reflector();
        let mut s = r.stream();
        let event = Bytes::from_static(b"data: {\"type\":\"ping\"}\n\n");
        assert_eq!(s.push(event.clone()).unwrap(), event);
        // A tail that may begin a value is held, then let through.
        assert_eq!(s.push(Bytes::from_static(b"x sk-ant-RE")).unwrap(), "x ");
        assert_eq!(s.push(Bytes::from_static(b"D!")).unwrap(), "sk-ant-RED!");
        assert_eq!(s.finish().unwrap(), "");
    }
}
