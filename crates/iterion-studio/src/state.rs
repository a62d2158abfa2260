//! What every handler shares ([`AppState`]), in a module of its own so the
//! handlers and the server that routes to them do not import each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iterion_core::{RunId, RunStore};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::{LocalHosts, StudioToken};

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) token: Option<StudioToken>,
    pub(crate) hosts: LocalHosts,
    /// Permits for live streams.
    pub(crate) streams: Arc<Semaphore>,
    /// Cancelled when the server stops: live streams end with it.
    pub(crate) shutdown: CancellationToken,
    /// Each run's sandbox mode once decided (it never changes), so the
    /// runs page does not re-read every run's events each refresh.
    pub(crate) modes: Mutex<HashMap<RunId, Option<String>>>,
}
