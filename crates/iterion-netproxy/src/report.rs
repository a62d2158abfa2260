//! What the proxy reports about itself: a refused request
//! ([`BlockedRequest`], its [`BlockReason`] and the [`EGRESS_HEADER`] the
//! client reads it in) and a resource limit hit ([`LimitNotice`], rate
//! limited by [`Limits`]), each through a run's callback. The records and
//! their rate, nothing else: which request is refused is the policy's and
//! the proxy's, what a report becomes (an event, a log line) the runtime's.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The header a denied request carries (machine-readable reason + rule).
pub const EGRESS_HEADER: &str = "x-iterion-egress";

/// Why the proxy refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockReason {
    /// Allowlist mode: no rule allowed the host, or a negated rule matched.
    Allowlist,
    /// Denylist mode: a negated rule matched.
    Denylist,
    /// The host was allowed but an address it resolved to is refused
    /// ([`crate::Policy::vet_address`]).
    ResolvedAddress,
    /// A bound secret's placeholder on a request to a host it is not bound
    /// to, or in plain `http://` (issue 17).
    SecretExfiltration,
    /// An inspected upstream's certificate did not verify (issue 17).
    UpstreamTls,
    /// Inside an inspected tunnel, a request named another authority
    /// (`Host`, `:authority`) than the CONNECT's target (issue 31 item 4):
    /// `421`.
    AuthorityMismatch,
    /// An inspected upstream answered with a compressed body although
    /// identity was asked: the secret scan cannot read it (issue 31
    /// item 3), `502`.
    EncodedResponse,
}

impl BlockReason {
    /// The token used in the `x-iterion-egress` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowlist => "blocked-by-allowlist",
            Self::Denylist => "blocked-by-denylist",
            Self::ResolvedAddress => "blocked-resolved-address",
            Self::SecretExfiltration => "blocked-secret-exfiltration",
            Self::UpstreamTls => "upstream-tls-invalid",
            Self::AuthorityMismatch => "blocked-authority-mismatch",
            Self::EncodedResponse => "blocked-encoded-response",
        }
    }

    /// The reason a `network_blocked` event carries: the header token,
    /// except for the issue 17 reasons, named as the issue names them.
    pub fn event_reason(self) -> &'static str {
        match self {
            Self::SecretExfiltration => "secret_exfiltration",
            Self::UpstreamTls => "upstream_tls_invalid",
            Self::AuthorityMismatch => "authority_mismatch",
            Self::EncodedResponse => "encoded_response",
            other => other.as_str(),
        }
    }
}

/// One denied request, handed to [`crate::ProxyOptions::on_blocked`] exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedRequest {
    /// The canonical host the client asked for.
    pub host: String,
    /// The requested port.
    pub port: u16,
    /// Why it was refused.
    pub reason: BlockReason,
    /// The deciding rule as written (`None`: the mode default or the
    /// built-in sensitive-address guard decided).
    pub rule: Option<String>,
    /// The label of the per-exec credential the request presented
    /// ([`crate::CredentialBook::issue`]); `None` when it used the run token.
    pub exec: Option<String>,
    /// The bound secret whose placeholder the request carried
    /// ([`BlockReason::SecretExfiltration`]): its name, never its value.
    pub secret: Option<String>,
    /// The authority a request asked for inside a tunnel to `host:port`
    /// ([`BlockReason::AuthorityMismatch`]), as sent (made header-safe).
    pub authority: Option<String>,
}

/// Callback for denied requests (the runtime turns it into `network_blocked`).
pub type BlockedCallback = Arc<dyn Fn(BlockedRequest) + Send + Sync>;

/// A resource limit the proxy hit, reported through
/// [`crate::ProxyOptions::on_limit`]: the first time, then at most once per
/// [`LIMIT_NOTICE_INTERVAL`] with what was refused in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitNotice {
    /// The run held [`crate::ProxyOptions::max_connections`] connections; `refused`
    /// new ones were answered `503` (or closed unanswered) since the last notice.
    Connections {
        /// The cap.
        limit: usize,
        /// Connections refused since the previous notice.
        refused: u64,
    },
    /// The process is out of file descriptors (`EMFILE`/`ENFILE` on
    /// accept): the proxy backs off; `failures` accepts failed since the
    /// last notice.
    Descriptors {
        /// Failed accepts since the previous notice.
        failures: u64,
    },
}

/// Callback for [`LimitNotice`]s (the runtime writes them to the run log).
pub type LimitCallback = Arc<dyn Fn(LimitNotice) + Send + Sync>;

/// Shortest interval between two [`LimitNotice`]s of one kind.
pub const LIMIT_NOTICE_INTERVAL: Duration = Duration::from_secs(10);

/// Rate-limited [`LimitNotice`]s: the first of a kind at once, then at
/// most one per [`LIMIT_NOTICE_INTERVAL`] carrying the count in between.
pub(crate) struct Limits {
    callback: LimitCallback,
    refused: std::sync::atomic::AtomicU64,
    emfile: std::sync::atomic::AtomicU64,
    last: std::sync::Mutex<[Option<std::time::Instant>; 2]>,
}

impl Limits {
    pub(crate) fn new(callback: LimitCallback) -> Self {
        Self {
            callback,
            refused: 0.into(),
            emfile: 0.into(),
            last: std::sync::Mutex::new([None, None]),
        }
    }

    pub(crate) fn note(&self, slot: usize, limit: usize) {
        let counter = if slot == 0 {
            &self.refused
        } else {
            &self.emfile
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let now = std::time::Instant::now();
        let due = match self.last.lock() {
            Ok(mut last) => match last[slot] {
                Some(t) if now.duration_since(t) < LIMIT_NOTICE_INTERVAL => false,
                _ => {
                    last[slot] = Some(now);
                    true
                }
            },
            Err(_) => false,
        };
        if !due {
            return;
        }
        let n = counter.swap(0, Ordering::Relaxed);
        let notice = if slot == 0 {
            LimitNotice::Connections { limit, refused: n }
        } else {
            LimitNotice::Descriptors { failures: n }
        };
        tracing::warn!(?notice, "egress proxy limit reached");
        let cb = self.callback.clone();
        if std::panic::catch_unwind(AssertUnwindSafe(move || cb(notice))).is_err() {
            tracing::warn!("egress proxy on_limit callback panicked; ignored");
        }
    }
}
