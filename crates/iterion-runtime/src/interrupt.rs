//! A run stopped by its platform, not by its user: a cloud runner that
//! lost its lease or is draining (facts §9.2 "setup interrupted (drain,
//! lost heartbeat)"). The caller records why and cancels the run's token;
//! the engine then ends the run `failed_resumable` with `INTERRUPTED` and a
//! `run_interrupted` event instead of `cancelled`, so a healthy runner
//! takes it over. Owns nothing else: the sandbox is torn down as for any
//! stop.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Shared between the caller that interrupts and the engine that reads
/// why. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    reason: Arc<Mutex<Option<String>>>,
}

impl Interrupt {
    /// Not interrupted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record `reason` (the first one wins) and cancel `token`, the run's
    /// cancellation token. The reason is set before the cancel, so whoever
    /// wakes on the token reads it.
    pub fn interrupt(&self, reason: impl Into<String>, token: &CancellationToken) {
        {
            let mut slot = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(reason.into());
            }
        }
        token.cancel();
    }

    /// Why the run was interrupted, if it was.
    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins_and_the_token_is_cancelled() {
        let token = CancellationToken::new();
        let i = Interrupt::new();
        assert_eq!(i.reason(), None);
        i.interrupt("lease lost", &token);
        i.clone().interrupt("draining", &token);
        assert!(token.is_cancelled());
        assert_eq!(i.reason().as_deref(), Some("lease lost"));
    }
}
