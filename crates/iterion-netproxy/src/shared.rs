//! The state every connection of one running proxy shares ([`Shared`]:
//! the run's policy, token and credentials, its callbacks, timeouts and
//! resolver, the cancellation and task tracking of its work, the
//! connection cap, the inspection), the guards that account for work
//! against it ([`PermitSlot`], [`TunnelGuard`]), and the one way a refusal
//! reaches the run ([`report`]). Built by the proxy at start; read by the
//! proxy's connections, the plain forwarder and the inspector alike, so
//! none of them reaches into another for it. Owns no request handling.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::credentials::CredentialBook;
use crate::inspection::Inspection;
use crate::policy::Policy;
use crate::report::{BlockedCallback, BlockedRequest, Limits};
use crate::resolver::Resolver;
use crate::token::ProxyToken;

/// What every connection of one proxy shares.
pub(crate) struct Shared {
    pub(crate) policy: Arc<Policy>,
    pub(crate) token: ProxyToken,
    pub(crate) credentials: CredentialBook,
    pub(crate) on_blocked: BlockedCallback,
    pub(crate) dial_timeout: Duration,
    pub(crate) header_read_timeout: Duration,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) cancel: CancellationToken,
    pub(crate) tracker: TaskTracker,
    pub(crate) tunnels: Arc<AtomicUsize>,
    /// One permit per client connection held (issue 19 item 9).
    pub(crate) connections: Arc<Semaphore>,
    pub(crate) max_connections: usize,
    /// One permit per over-cap connection being answered `503`.
    pub(crate) overflow: Arc<Semaphore>,
    pub(crate) limits: Limits,
    pub(crate) inspection: Option<Arc<Inspection>>,
}

/// A connection's cap permit, handed to its tunnel when it becomes one.
pub(crate) type PermitSlot = Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// Hand a refusal to the run's callback, which never takes the proxy down
/// (facts §7.3).
pub(crate) fn report(shared: &Shared, event: BlockedRequest) {
    let cb = shared.on_blocked.clone();
    if std::panic::catch_unwind(AssertUnwindSafe(move || cb(event))).is_err() {
        tracing::warn!("egress proxy on_blocked callback panicked; ignored");
    }
}

/// Counts a live tunnel for as long as it exists.
pub(crate) struct TunnelGuard(Arc<AtomicUsize>);

impl TunnelGuard {
    pub(crate) fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
