//! [`Container`]: one run's container as the engine sees it — the engine
//! client and the container's name — and the one reading of an engine
//! error on it (404, "not running", a vanished daemon: the container is
//! gone). A run and each of its execs hold one; neither holds the other.

use iterion_core::DriverError;

use crate::engine::{Engine, engine_err, engine_unreachable, message_of, status_of};

/// A run's container.
#[derive(Debug, Clone)]
pub(crate) struct Container {
    pub(crate) engine: Engine,
    pub(crate) name: String,
}

impl Container {
    /// The raw client.
    pub(crate) fn client(&self) -> &bollard::Docker {
        &self.engine.docker
    }

    pub(crate) fn gone(&self) -> DriverError {
        DriverError::ContainerGone {
            container: self.name.clone(),
        }
    }

    /// Map an engine error on this container: 404, or 409 "not running",
    /// means the container is gone.
    pub(crate) fn map_err(
        &self,
        operation: &'static str,
        e: bollard::errors::Error,
    ) -> DriverError {
        let msg = message_of(&e);
        match status_of(&e) {
            Some(404) => self.gone(),
            Some(409) if msg.contains("not running") || msg.contains("paused") => self.gone(),
            // Podman answers 500 for exec into a stopped container, and for
            // an exec whose container was removed under it ("… does not
            // exist in database: no such container").
            Some(500)
                if msg.contains("not running")
                    || msg.contains("state improper")
                    || msg.contains("no such container") =>
            {
                self.gone()
            }
            // Podman answers 500 for an exec inspect of a removed container
            // (seen in the e2e flood test when a reaper removed it).
            Some(500) if msg.contains("no such container") => self.gone(),
            // A daemon that no longer answers mid-run has taken the sandbox
            // with it as far as the run can tell: SANDBOX_LOST, not a node
            // failure (found by the dead-daemon e2e test).
            _ if engine_unreachable(&e) => self.gone(),
            _ => engine_err(operation)(e),
        }
    }

    /// Whether the container no longer exists or is being removed.
    pub(crate) async fn removed_or_removing(&self) -> bool {
        match self.engine.docker.inspect_container(&self.name, None).await {
            Ok(c) => {
                let status = c
                    .state
                    .and_then(|s| s.status)
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                matches!(status.as_str(), "removing" | "dead")
            }
            Err(e) => status_of(&e) == Some(404),
        }
    }
}
