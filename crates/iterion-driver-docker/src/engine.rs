//! The shared engine client: one connection to dockerd or Podman, what
//! the engine said it is, and where cleanup problems are reported. The
//! driver, a run's container handle and the identity probe all talk to the
//! engine through it, so none of them holds another (the driver is built
//! on an [`Engine`]; a run keeps only the engine, never the driver). Also
//! the one reading of an engine error: which status, whether the engine
//! is gone, which message.

use std::collections::BTreeMap;
use std::sync::Arc;

use bollard::{ClientVersion, Docker};
use iterion_core::driver::{HostFootprint, NullObserver};
use iterion_core::{DriverError, DriverName, DriverObserver, OutputStream};

use crate::endpoint::Endpoint;

/// Both engines here answer 1.41 and refuse newer clients
/// (reference/test-environment.md, "Engine API version").
const API_VERSION: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 41,
};
/// Per-request bound of the HTTP client (long streams are bounded by the
/// caller; this only catches a dead engine).
const CLIENT_TIMEOUT_SECS: u64 = 3600;

/// One engine connection. Cheap to clone; safe for concurrent runs.
#[derive(Clone)]
pub(crate) struct Engine {
    pub(crate) docker: Docker,
    pub(crate) name: DriverName,
    pub(crate) endpoint: Endpoint,
    pub(crate) version: String,
    pub(crate) reporter: Arc<dyn DriverObserver>,
    /// Asked once, when first needed: Podman's /info takes seconds, so
    /// connecting (every `iterion` verb) does not ask it.
    footprint: Arc<tokio::sync::OnceCell<HostFootprint>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Connect to one endpoint and ask the engine who it is (bounded by
    /// `probe_timeout`).
    pub(crate) async fn connect(
        endpoint: &str,
        probe_timeout: std::time::Duration,
    ) -> Result<Self, DriverError> {
        let endpoint = Endpoint::parse(endpoint)?;
        let docker = match &endpoint {
            Endpoint::Unix(path) => {
                Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, &API_VERSION)
            }
            Endpoint::Tcp(addr) => {
                Docker::connect_with_http(addr, CLIENT_TIMEOUT_SECS, &API_VERSION)
            }
        }
        .map_err(|e| DriverError::Unavailable {
            reason: format!("{}: {e}", endpoint.url()),
        })?;
        let pinged = ping_engine(&endpoint, probe_timeout).await?;
        let name = if pinged.podman {
            DriverName::Podman
        } else {
            DriverName::Docker
        };
        Ok(Self {
            docker,
            name,
            endpoint,
            version: pinged.version,
            reporter: Arc::new(NullObserver),
            footprint: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// `GET /_ping` again (doctor), bounded.
    pub(crate) async fn ping(
        &self,
        bound: std::time::Duration,
    ) -> Result<crate::rawlist::Pinged, DriverError> {
        ping_engine(&self.endpoint, bound).await
    }

    /// The API version this client speaks, `major.minor`.
    pub(crate) fn api_version() -> String {
        format!(
            "{}.{}",
            API_VERSION.major_version, API_VERSION.minor_version
        )
    }

    /// The host facts bind planning needs (asked once per engine).
    pub(crate) async fn host_footprint(&self) -> HostFootprint {
        self.footprint
            .get_or_init(|| crate::footprint::probe(&self.docker, &self.endpoint))
            .await
            .clone()
    }

    /// The raw client.
    pub(crate) fn client(&self) -> &Docker {
        &self.docker
    }

    /// Report a problem that never fails a run (cleanup).
    pub(crate) fn report(&self, line: &str) {
        self.reporter.log(OutputStream::System, line);
    }
}

pub(crate) fn engine_err(
    operation: &'static str,
) -> impl FnOnce(bollard::errors::Error) -> DriverError {
    move |e| DriverError::Engine {
        operation,
        source: Box::new(e),
    }
}

/// HTTP status of an engine answer, when it is one.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The engine did not answer at all: its socket refused the connection or
/// vanished (a killed or restarted daemon), as opposed to an API error. A
/// hyper client error means no HTTP response came back (connect refused,
/// or `SendRequest` on a pooled connection the dead daemon closed).
pub(crate) fn engine_unreachable(e: &bollard::errors::Error) -> bool {
    use std::io::ErrorKind;
    // Out of descriptors is this process's state, not the engine's: the
    // sandbox is still there (issue 19 item 9: a flood of proxy connections
    // once made every exec read as SANDBOX_LOST).
    let exhausted = match e {
        // Transparent: its `source` is the io::Error's own, not the io::Error.
        bollard::errors::Error::IOError { err } => descriptors_exhausted(err),
        other => descriptors_exhausted(other),
    };
    if exhausted {
        return false;
    }
    match e {
        bollard::errors::Error::HyperLegacyError { .. } => true,
        bollard::errors::Error::IOError { err } => matches!(
            err.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::NotFound
                | ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Whether `EMFILE` or `ENFILE` is anywhere in the error's source chain.
pub(crate) fn descriptors_exhausted(e: &(dyn std::error::Error + 'static)) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(ENFILE | EMFILE)) {
                return true;
            }
            // A wrapping io::Error's `source` skips the error it wraps.
            if let Some(inner) = io.get_ref() {
                cur = Some(inner);
                continue;
            }
        }
        cur = err.source();
    }
    false
}

pub(crate) fn message_of(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// `GET /_ping`, bounded by the probe timeout.
async fn ping_engine(
    endpoint: &Endpoint,
    bound: std::time::Duration,
) -> Result<crate::rawlist::Pinged, DriverError> {
    tokio::time::timeout(bound, crate::rawlist::ping(endpoint))
        .await
        .map_err(|_| DriverError::Unavailable {
            reason: format!("{}: no answer within {bound:?}", endpoint.url()),
        })?
        .map_err(|e| DriverError::Unavailable {
            reason: format!("{}: {e}", endpoint.url()),
        })
}

/// Where to look for an engine: `DOCKER_HOST` alone when set; otherwise
/// the standard Docker sockets, then rootful and rootless Podman.
pub(crate) fn discovery_candidates(env: &BTreeMap<String, String>) -> Vec<String> {
    if let Some(host) = env.get("DOCKER_HOST").filter(|h| !h.trim().is_empty()) {
        return vec![host.clone()];
    }
    let mut out = vec![
        "unix:///var/run/docker.sock".to_owned(),
        "unix:///run/docker.sock".to_owned(),
    ];
    if let Some(home) = env.get("HOME") {
        out.push(format!("unix://{home}/.docker/run/docker.sock"));
    }
    out.push("unix:///run/podman/podman.sock".to_owned());
    if let Some(xdg) = env.get("XDG_RUNTIME_DIR") {
        out.push(format!("unix://{xdg}/podman/podman.sock"));
        out.push(format!("unix://{xdg}/docker.sock"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_host_wins_discovery() {
        let env = BTreeMap::from([("DOCKER_HOST".to_owned(), "tcp://x:1".to_owned())]);
        assert_eq!(discovery_candidates(&env), vec!["tcp://x:1".to_owned()]);
        let env = BTreeMap::from([("XDG_RUNTIME_DIR".to_owned(), "/run/user/1".to_owned())]);
        assert!(
            discovery_candidates(&env)
                .contains(&"unix:///run/user/1/podman/podman.sock".to_owned())
        );
    }

    #[test]
    fn descriptor_exhaustion_is_not_a_dead_engine() {
        let io = |errno| bollard::errors::Error::IOError {
            err: std::io::Error::from_raw_os_error(errno),
        };
        // EMFILE, ENFILE: the process, not the engine.
        assert!(!engine_unreachable(&io(24)));
        assert!(!engine_unreachable(&io(23)));
        // ECONNREFUSED, ENOENT: the engine is gone.
        assert!(engine_unreachable(&io(111)));
        assert!(engine_unreachable(&io(2)));
        // Wrapped one level down, as a client error carries it.
        let wrapped = std::io::Error::other(std::io::Error::from_raw_os_error(24));
        assert!(descriptors_exhausted(&wrapped));
    }
}
