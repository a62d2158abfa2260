//! The run's in-memory inspection CA (facts §7.5, issue 17): a P-256 key
//! that never leaves this process, a CA certificate with path length 0
//! valid from an hour ago to a day ahead, and per-SNI leaf certificates
//! (P-256, server auth, a DNS or IP SAN, the same validity) for each
//! inspected host, minted on first use and cached for the run. Only the CA's
//! certificate is ever exported ([`EgressCa::cert_pem`]); the sandbox
//! trusts it, nothing else holds it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::NetproxyError;

/// The CA's common name.
pub const CA_COMMON_NAME: &str = "iterion sandbox egress CA";
/// Leaves cached per run; past it the oldest half is dropped (a run
/// naming this many bound hosts is unusual, a loop minting SNIs is not).
const MAX_LEAVES: usize = 1024;

/// The run's inspection CA.
pub struct EgressCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for EgressCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressCa")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

fn ca_error(what: &str, e: impl std::fmt::Display) -> NetproxyError {
    NetproxyError::Tls {
        reason: format!("{what}: {e}"),
    }
}

impl EgressCa {
    /// Mint a fresh CA (valid −1 h … +24 h).
    pub fn generate() -> Result<Self, NetproxyError> {
        let now = time::OffsetDateTime::now_utc();
        let not_before = now - time::Duration::hours(1);
        let not_after = now + time::Duration::hours(24);
        let key = KeyPair::generate().map_err(|e| ca_error("CA key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, CA_COMMON_NAME);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .self_signed(&key)
            .map_err(|e| ca_error("CA certificate", e))?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            not_before,
            not_after,
            leaves: Mutex::new(HashMap::new()),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        })
    }

    /// The CA certificate, PEM (what the sandbox trusts; never the key).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The leaf for `name` (an SNI or an IP literal), minted once per run.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, NetproxyError> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self.leaves.lock().ok().and_then(|m| m.get(&name).cloned()) {
            return Ok(k);
        }
        let key = KeyPair::generate().map_err(|e| ca_error("leaf key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name.as_str());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(|e| ca_error("leaf name", e))?,
            ),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| ca_error("leaf certificate", e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = self
            .provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| ca_error("leaf key load", e))?;
        let certified = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der.clone()],
            signing,
        ));
        if let Ok(mut m) = self.leaves.lock() {
            if m.len() >= MAX_LEAVES {
                let drop: Vec<String> = m.keys().take(MAX_LEAVES / 2).cloned().collect();
                for k in drop {
                    m.remove(&k);
                }
            }
            m.insert(name, certified.clone());
        }
        Ok(certified)
    }

    /// The crypto provider the proxy's TLS configs use.
    pub(crate) fn provider(&self) -> Arc<rustls::crypto::CryptoProvider> {
        self.provider.clone()
    }
}

/// Answers a ClientHello with the CA's leaf for the CONNECT's host — the
/// name the policy judged and the upstream's certificate was verified
/// for — whatever SNI the client sent (a client asking another name
/// fails its own verification; a client sending none, as curl does for an
/// IP, still gets the right leaf). A divergence from upstream, which mints
/// per SNI and falls back to `localhost`.
#[derive(Debug)]
pub(crate) struct LeafResolver {
    pub ca: Arc<EgressCa>,
    pub name: String,
}

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.ca.leaf(&self.name).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;

    #[test]
    fn leaves_are_cached_per_name_and_chain_to_the_ca() {
        let ca = EgressCa::generate().expect("ca");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!ca.cert_pem().contains("PRIVATE KEY"));
        let a = ca.leaf("api.example.com").expect("leaf");
        let b = ca.leaf("API.example.com.").expect("leaf");
        assert!(Arc::ptr_eq(&a, &b), "one leaf per name");
        let ip = ca.leaf("127.0.0.1").expect("ip leaf");
        assert_eq!(ip.cert.len(), 2);
        assert_eq!(ip.cert[1], *ca.cert_der());
        // A client trusting only the CA accepts the leaf for its name.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der().clone()).expect("root");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            ca.provider(),
        )
        .build()
        .expect("verifier");
        let now = rustls_pki_types::UnixTime::now();
        let name = rustls_pki_types::ServerName::try_from("api.example.com").expect("name");
        verifier
            .verify_server_cert(&a.cert[0], &a.cert[1..], &name, &[], now)
            .expect("the leaf verifies against the CA");
        let other = rustls_pki_types::ServerName::try_from("other.example.com").expect("name");
        assert!(
            verifier
                .verify_server_cert(&a.cert[0], &a.cert[1..], &other, &[], now)
                .is_err()
        );
    }
}
