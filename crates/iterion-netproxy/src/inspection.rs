//! What the proxy inspects with (issue 17): [`Inspection`] — the run's CA,
//! the secret bindings, the TLS server configuration the sandbox's client
//! is answered with and the client configuration upstreams are verified
//! with — and the roots that verification trusts ([`upstream_roots`]).
//! Built once per run and held by the proxy's shared state; how an
//! inspected CONNECT is served is `inspect`'s, which this module does not
//! know.

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::bindings::Bindings;
use crate::ca::{EgressCa, LeafResolver};
use crate::error::NetproxyError;

/// The variable naming a PEM bundle the proxy trusts for upstreams, on top
/// of the system roots (a corporate or a test CA).
pub const UPSTREAM_CA_ENV: &str = "ITERION_EGRESS_UPSTREAM_CA";

/// What the proxy needs to inspect: the run's CA, its bindings, and both
/// TLS configurations.
pub struct Inspection {
    pub(crate) bindings: Bindings,
    pub(crate) ca: Arc<EgressCa>,
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) upstream: Arc<ClientConfig>,
}

impl std::fmt::Debug for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspection")
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

impl Inspection {
    /// Inspection with `ca`, for `bindings`, trusting `upstream_roots`.
    pub fn new(
        ca: Arc<EgressCa>,
        bindings: Bindings,
        upstream_roots: RootCertStore,
    ) -> Result<Self, NetproxyError> {
        let tls = |e: rustls::Error| NetproxyError::Tls {
            reason: e.to_string(),
        };
        let mut server = ServerConfig::builder_with_provider(ca.provider())
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(LeafResolver {
                ca: ca.clone(),
                name: "localhost".to_owned(),
            }));
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let mut upstream = ClientConfig::builder_with_provider(ca.provider())
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_root_certificates(upstream_roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            bindings,
            ca,
            server: Arc::new(server),
            upstream: Arc::new(upstream),
        })
    }

    /// The CA certificate the sandbox must trust (PEM).
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The bindings.
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }
}

/// The system roots plus the PEM bundle at `extra` (the value of
/// [`UPSTREAM_CA_ENV`]). An unreadable or certificate-less bundle is an
/// error, never silently ignored.
pub fn upstream_roots(extra: Option<&Path>) -> Result<RootCertStore, NetproxyError> {
    let mut roots = RootCertStore::empty();
    // Unparseable system entries are skipped, as every client does.
    let native = rustls_native_certs::load_native_certs();
    let _ = roots.add_parsable_certificates(native.certs);
    if let Some(path) = extra {
        let bad = |reason: String| NetproxyError::UpstreamCa {
            path: path.display().to_string(),
            reason,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        for c in certs {
            roots.add(c).map_err(|e| bad(e.to_string()))?;
        }
    }
    Ok(roots)
}
