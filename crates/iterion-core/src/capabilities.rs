//! What a driver can do. The runtime asks [`Capabilities`] instead of probing
//! types: an optional feature is a flag here plus a trait method that
//! returns [`crate::DriverError::Unsupported`] when the flag is off.

use serde::{Deserialize, Serialize};

/// Capability report of a driver, as shown by `iterion sandbox doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Capabilities {
    /// Runs a container from an image reference.
    pub image: bool,
    /// Builds an image from a Dockerfile (`build:`).
    pub build: bool,
    /// Honours spec mounts at all.
    pub mounts: bool,
    /// Can bind a host directory into the sandbox.
    pub host_bind_mounts: bool,
    /// Cluster-level network policy (Kubernetes NetworkPolicy). Not the
    /// same as egress enforcement (naming trap of facts §12.3).
    pub network_policy: bool,
    /// Can confine the sandbox so that the egress proxy is the only
    /// reachable address (docker/podman internal network, k8s policy).
    pub egress_enforcement: bool,
    /// Runs `post_create`.
    pub post_create: bool,
    /// Honours `user:`.
    pub remote_user: bool,
    /// Can drain declared read-back paths at teardown (ADR-143).
    pub read_back_drain: bool,
    /// Can copy a tar stream into the sandbox.
    pub archive_in: bool,
    /// Copy-based workspace (upstream's WorkspaceExporter): the driver has
    /// no host bind for the workspace, so it copies the host workspace in
    /// before `post_create` and the runtime exports it back through
    /// [`crate::SandboxRun::export`] at teardown, before cleanup. The one
    /// export seam also carries the ADR-143 drain (a declared *set* of
    /// paths): this flag says the workspace is part of that set. `false`
    /// on a bind-based run (the bind is the workspace), so it never copies.
    #[serde(default)]
    pub workspace_export: bool,
    /// Can inject a per-run CA for TLS inspection.
    pub tls_inspection: bool,
    /// Delivers a file secret without a host bind: it reads the bind's
    /// host source at creation and places the content read-only at the
    /// target itself (Kubernetes: a key of the per-run Secret). Only read
    /// where `host_bind_mounts` is false.
    #[serde(default)]
    pub secret_file_copy: bool,
}

impl Capabilities {
    /// A driver that neither binds nor drains cannot serve a read-back path.
    pub fn can_serve_read_back(&self) -> bool {
        self.host_bind_mounts || self.read_back_drain
    }
}
