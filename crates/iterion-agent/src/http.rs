//! The HTTP client of the claw loop and of `web_fetch`: reqwest on rustls
//! (ring provider, Mozilla roots compiled in so a bare image without a CA
//! bundle still verifies TLS, plus `SSL_CERT_FILE` when set), with the
//! proxy taken from the snapshot's `HTTPS_PROXY` / `HTTP_PROXY` /
//! `NO_PROXY` (lower-case variants too). Proxy credentials in the URL
//! (`http://t:<token>@gateway:port`, how the sandbox's egress proxy wants
//! its per-run token) become `Proxy-Authorization: Basic`.
//!
//! Inside the sandbox the runner is a static binary: glibc's resolver
//! (NSS) must not run there. [`ResolverMode::HostsFile`] resolves only IP
//! literals and `/etc/hosts` entries (how `host.docker.internal` reaches the
//! container) and leaves every other name to the proxy, which resolves on
//! the host.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::env::EnvSnapshot;
use crate::error::AgentError;

/// How host names are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverMode {
    /// The platform resolver (a host process).
    System,
    /// IP literals and `/etc/hosts` only (the in-box runner).
    HostsFile,
}

/// Client settings derived from an environment snapshot.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Proxy for `http://` URLs.
    pub http_proxy: Option<String>,
    /// Proxy for `https://` URLs.
    pub https_proxy: Option<String>,
    /// Hosts that bypass the proxy (curl syntax).
    pub no_proxy: Option<String>,
    /// Name resolution.
    pub resolver: ResolverMode,
    /// Extra PEM roots (`SSL_CERT_FILE`).
    pub extra_roots: Option<PathBuf>,
    /// Connect timeout.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Proxy URLs carry the per-run token: print whether they are set only.
        f.debug_struct("HttpSettings")
            .field("http_proxy", &self.http_proxy.is_some())
            .field("https_proxy", &self.https_proxy.is_some())
            .field("no_proxy", &self.no_proxy)
            .field("resolver", &self.resolver)
            .finish_non_exhaustive()
    }
}

impl HttpSettings {
    /// Settings from a snapshot (upper-case variables win over lower-case).
    pub fn from_env(env: &EnvSnapshot, resolver: ResolverMode) -> Self {
        let pick = |a: &str, b: &str| env.get(a).or_else(|| env.get(b)).map(ToOwned::to_owned);
        Self {
            http_proxy: pick("HTTP_PROXY", "http_proxy"),
            https_proxy: pick("HTTPS_PROXY", "https_proxy"),
            no_proxy: pick("NO_PROXY", "no_proxy"),
            resolver,
            extra_roots: env.get("SSL_CERT_FILE").map(PathBuf::from),
            connect_timeout: Duration::from_secs(15),
        }
    }

    /// Build a client.
    pub fn client(&self) -> Result<reqwest::Client, AgentError> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .tls_backend_preconfigured(self.tls_config()?);
        let no_proxy = self
            .no_proxy
            .as_deref()
            .and_then(reqwest::NoProxy::from_string);
        if let Some(url) = &self.https_proxy {
            builder =
                builder.proxy(proxy(url, |u| reqwest::Proxy::https(u))?.no_proxy(no_proxy.clone()));
        }
        if let Some(url) = &self.http_proxy {
            builder = builder.proxy(proxy(url, |u| reqwest::Proxy::http(u))?.no_proxy(no_proxy));
        }
        if self.resolver == ResolverMode::HostsFile {
            builder = builder.dns_resolver(Arc::new(HostsFileResolver {
                hosts: PathBuf::from("/etc/hosts"),
            }));
        }
        builder.build().map_err(|e| AgentError::HttpSetup {
            detail: e.to_string(),
        })
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, AgentError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = &self.extra_roots {
            use rustls_pki_types::pem::PemObject;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| {
                AgentError::HttpSetup {
                    detail: format!("SSL_CERT_FILE {}: {e}", path.display()),
                }
            })?;
            for cert in certs.flatten() {
                // A bundle may hold certificates rustls cannot use as roots.
                let _ = roots.add(cert);
            }
        }
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| AgentError::HttpSetup {
            detail: e.to_string(),
        })
    }
}

fn proxy(
    url: &str,
    make: impl Fn(&str) -> reqwest::Result<reqwest::Proxy>,
) -> Result<reqwest::Proxy, AgentError> {
    let setup = |detail: String| AgentError::HttpSetup { detail };
    let parsed = reqwest::Url::parse(url).map_err(|e| setup(format!("invalid proxy URL: {e}")))?;
    let mut bare = parsed.clone();
    // The token rides as an explicit header value, not inside a URL that
    // could end up in an error message.
    let _ = bare.set_username("");
    let _ = bare.set_password(None);
    let mut p = make(bare.as_str()).map_err(|e| setup(format!("invalid proxy URL: {e}")))?;
    if let Some(password) = parsed.password() {
        let user = percent_decode(parsed.username());
        p = p.basic_auth(&user, &percent_decode(password));
    }
    Ok(p)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Resolves IP literals and `/etc/hosts` entries; any other name is an
/// error (the proxy resolves names; a static runner must not call NSS).
#[derive(Debug)]
struct HostsFileResolver {
    hosts: PathBuf,
}

impl reqwest::dns::Resolve for HostsFileResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let path = self.hosts.clone();
        Box::pin(async move {
            if let Ok(ip) = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
            {
                let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(SocketAddr::new(ip, 0)));
                return Ok(addrs);
            }
            let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
            let found = lookup_hosts(&text, &host);
            if found.is_empty() {
                return Err(format!(
                    "{host}: not an IP and not in {}; inside the sandbox names are resolved by the egress proxy (set HTTPS_PROXY)",
                    path.display()
                )
                .into());
            }
            let addrs: reqwest::dns::Addrs =
                Box::new(found.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// The addresses `/etc/hosts` text gives `host`.
fn lookup_hosts(text: &str, host: &str) -> Vec<IpAddr> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let ip: IpAddr = fields.next()?.parse().ok()?;
            fields.any(|n| n.eq_ignore_ascii_case(host)).then_some(ip)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lookup() {
        let text = "127.0.0.1 localhost\n# 1.1.1.1 host.docker.internal\n172.17.0.1\thost.docker.internal gw # x\n::1 localhost ip6-localhost\n";
        assert_eq!(
            lookup_hosts(text, "host.docker.internal"),
            vec!["172.17.0.1".parse::<IpAddr>().expect("ip")]
        );
        assert_eq!(lookup_hosts(text, "localhost").len(), 2);
        assert!(lookup_hosts(text, "example.com").is_empty());
    }

    #[test]
    fn settings_from_env_and_debug_hides_token() {
        let env = EnvSnapshot::new()
            .with("https_proxy", "http://t:tok-secret-1@10.0.0.1:3128")
            .with("NO_PROXY", "localhost,127.0.0.1");
        let s = HttpSettings::from_env(&env, ResolverMode::HostsFile);
        assert_eq!(
            s.https_proxy.as_deref(),
            Some("http://t:tok-secret-1@10.0.0.1:3128")
        );
        assert!(!format!("{s:?}").contains("tok-secret-1"));
        assert!(s.client().is_ok());
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Ab"), "a:b");
        assert_eq!(percent_decode("abc%"), "abc%");
    }
}
