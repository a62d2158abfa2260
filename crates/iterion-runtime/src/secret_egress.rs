//! Secrets bound to egress hosts at run time (issue 17): each gets a
//! placeholder minted for this run — unguessable (≥ 190 random bits),
//! keeping the value's public prefix (`sk-ant-api03-`, `ghp_`) so clients
//! that check the shape accept it, and as long as the value when the
//! value is long enough (a body then streams with no buffer) — which the
//! sandbox holds instead of the value, in env and file form alike. The
//! proxy puts the value back only on requests to the secret's hosts
//! (`iterion_netproxy::Inspection`).
//!
//! It also installs the trust: the run's CA certificate (never its key)
//! goes into the sandbox as `/etc/iterion-egress/ca.pem` and a bundle with
//! the image's own roots (`/etc/iterion-egress/ca-bundle.pem`, which also
//! replaces the image's system bundle when it has one), and the variables
//! every common TLS stack reads point at them ([`trust_env`]). A driver
//! that placed the CA at creation (`SandboxRun::egress_ca_placed`: a
//! Kubernetes pod, non-root, the CA projected read-only from the per-run
//! Secret into a writable emptyDir) gets only the bundle, written as the
//! pod's user; its system bundle stays the image's.
//!
//! Whether the run delivers placeholders is the sandbox decision's
//! (`iterion_sandbox::secret_egress`); this module only executes it.

use std::collections::BTreeMap;
use std::io::Read as _;

use bytes::Bytes;
use futures_util::StreamExt as _;
use iterion_core::SandboxRun;
use iterion_core::net::NetRule;
use iterion_dsl::ir::SecretDecl;
use iterion_netproxy::SecretBinding;
use rand::Rng as _;

/// Where a bound secret is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// As this variable.
    Env(String),
    /// As the file secret of this name.
    File(String),
    /// As this provider credential variable of the agents' exec env
    /// (issue 17 item 5).
    Agent(String),
}

/// One bound secret: its hosts, the run's placeholder and the value.
#[derive(Clone)]
pub struct BoundSecret {
    /// The secret's name.
    pub name: String,
    /// Its `egress:` hosts.
    pub hosts: Vec<NetRule>,
    /// How it is delivered.
    pub delivery: Delivered,
    /// The one port it is for (a provider key: its base URL's); `None`:
    /// any port of its hosts (a declared `egress:` secret).
    pub port: Option<u16>,
    placeholder: String,
    value: String,
}

impl std::fmt::Debug for BoundSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundSecret")
            .field("name", &self.name)
            .field("delivery", &self.delivery)
            .finish_non_exhaustive()
    }
}

/// Random characters of a placeholder at least (62 symbols: ≥ 190 bits).
const MIN_RANDOM: usize = 32;

impl BoundSecret {
    /// Mint the run's placeholder for `decl`'s `value`.
    pub fn mint(decl: &SecretDecl, value: &str, delivery: Delivered) -> Self {
        Self {
            name: decl.name.clone(),
            hosts: decl.egress.clone(),
            delivery,
            port: None,
            placeholder: placeholder_for(value),
            value: value.to_owned(),
        }
    }

    /// Mint the run's placeholder for an agent's provider credential,
    /// bound to its provider's host; `None` when the host is no rule the
    /// proxy can match (the key then goes in as it is, said by the event).
    pub fn for_provider(secret: &iterion_core::agent::ProviderSecret) -> Option<Self> {
        let host: NetRule = secret.host.parse().ok()?;
        Some(Self {
            name: secret.variable.clone(),
            hosts: vec![host],
            delivery: Delivered::Agent(secret.variable.clone()),
            port: Some(secret.port),
            placeholder: placeholder_for(secret.value()),
            value: secret.value().to_owned(),
        })
    }

    /// What the sandbox holds.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The value (for the redactor and the proxy only).
    pub(crate) fn value(&self) -> &String {
        &self.value
    }

    /// The proxy's binding.
    pub fn binding(&self) -> Option<SecretBinding> {
        let binding = SecretBinding::new(
            self.name.clone(),
            self.hosts.clone(),
            self.placeholder.clone(),
            self.value.clone(),
        )?;
        let binding = match self.port {
            Some(port) => binding.on_port(port),
            None => binding,
        };
        // A provider key goes back in the header that carries it only: an
        // upstream echoes what it is sent (a model its context, a 404 its
        // request), so a key put anywhere else would come back to the box
        // (iterion_netproxy::bindings).
        Some(match self.delivery {
            Delivered::Agent(_) => binding.head_only(),
            Delivered::Env(_) | Delivered::File(_) => binding,
        })
    }
}

/// The public prefix a client may check (`sk-ant-api03-`, `ghp_`,
/// `xoxb-`): up to three short lower-case groups each ending in `-` or
/// `_`, kept only when at least [`MIN_RANDOM`] characters follow it (a
/// short value shows nothing of itself).
fn known_prefix(value: &str) -> &str {
    let mut end = 0;
    for _ in 0..3 {
        let rest = &value[end..];
        let group = rest
            .find(['-', '_'])
            .filter(|&i| {
                (1..=6).contains(&i)
                    && rest[..i]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            })
            .map(|i| i + 1);
        match group {
            Some(n) => end += n,
            None => break,
        }
    }
    if value.len() - end < MIN_RANDOM {
        return "";
    }
    &value[..end]
}

/// A fresh placeholder for `value`: its public prefix, then random
/// alphanumerics up to the value's length (at least [`MIN_RANDOM`]).
pub fn placeholder_for(value: &str) -> String {
    let prefix = known_prefix(value);
    let random = value.len().saturating_sub(prefix.len()).max(MIN_RANDOM);
    let mut out = String::with_capacity(prefix.len() + random);
    out.push_str(prefix);
    out.extend(
        rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(random)
            .map(char::from),
    );
    out
}

/// The directory of the run's CA in the sandbox (one place on every driver).
pub const TRUST_DIR: &str = iterion_core::plan::EGRESS_TRUST_DIR;
/// The CA certificate alone (for stacks that add to their roots).
pub const TRUST_CA: &str = iterion_core::plan::EGRESS_TRUST_CA;
/// The image's roots plus the CA (for stacks that replace their roots).
pub const TRUST_BUNDLE: &str = iterion_core::plan::EGRESS_TRUST_BUNDLE;
/// The bundle's name inside [`TRUST_DIR`].
const TRUST_BUNDLE_NAME: &str = "ca-bundle.pem";
/// The image's system bundle (Debian, Alpine, Ubuntu), replaced by the
/// bundle when the image has one.
const SYSTEM_BUNDLE_DIR: &str = "/etc/ssl/certs";
const SYSTEM_BUNDLE_NAME: &str = "ca-certificates.crt";
/// The largest system bundle read back from the image.
const MAX_SYSTEM_BUNDLE: u64 = 8 * 1024 * 1024;

/// The variables pointing every common TLS stack at the run's CA.
pub fn trust_env() -> BTreeMap<String, String> {
    [
        ("SSL_CERT_FILE", TRUST_BUNDLE),
        ("NODE_EXTRA_CA_CERTS", TRUST_CA),
        ("REQUESTS_CA_BUNDLE", TRUST_BUNDLE),
        ("CURL_CA_BUNDLE", TRUST_BUNDLE),
        ("GIT_SSL_CAINFO", TRUST_BUNDLE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Why the trust could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the run's egress CA in the sandbox: {0}")]
pub struct TrustError(String);

/// Install `ca_pem` in the started sandbox `run`: the CA, the bundle with
/// the image's roots, and the image's system bundle replaced by it — or,
/// when the driver placed the CA at creation, the bundle alone beside it.
pub async fn install_trust(run: &dyn SandboxRun, ca_pem: &str) -> Result<(), TrustError> {
    let system = read_system_bundle(run).await;
    let bundle = bundle_of(system.as_deref(), ca_pem);
    if run.egress_ca_placed() {
        // The directory exists and is the sandbox user's; the CA in it is
        // read-only. A file member only: a non-root tar may neither
        // re-stamp the directory nor replace the projected CA.
        let archive = tar_of(&[(TRUST_BUNDLE_NAME, Some(bundle.as_bytes()))])
            .map_err(|e| TrustError(e.to_string()))?;
        return run
            .import(TRUST_DIR, one_shot(archive))
            .await
            .map_err(|e| TrustError(e.to_string()));
    }
    let archive = tar_of(&[
        ("iterion-egress/", None),
        ("iterion-egress/ca.pem", Some(ca_pem.as_bytes())),
        ("iterion-egress/ca-bundle.pem", Some(bundle.as_bytes())),
    ])
    .map_err(|e| TrustError(e.to_string()))?;
    run.import("/etc", one_shot(archive))
        .await
        .map_err(|e| TrustError(e.to_string()))?;
    if system.is_some() {
        let archive = tar_of(&[(SYSTEM_BUNDLE_NAME, Some(bundle.as_bytes()))])
            .map_err(|e| TrustError(e.to_string()))?;
        run.import(SYSTEM_BUNDLE_DIR, one_shot(archive))
            .await
            .map_err(|e| TrustError(e.to_string()))?;
    }
    Ok(())
}

/// The image's roots (when it has a bundle) followed by the run's CA.
fn bundle_of(system: Option<&str>, ca_pem: &str) -> String {
    let mut bundle = system.unwrap_or_default().to_owned();
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(ca_pem);
    bundle
}

/// The image's system bundle, when it has one (bounded).
async fn read_system_bundle(run: &dyn SandboxRun) -> Option<String> {
    let path = format!("{SYSTEM_BUNDLE_DIR}/{SYSTEM_BUNDLE_NAME}");
    let mut stream = run.export(&path).await.ok()?;
    let mut tarball = Vec::new();
    while let Some(chunk) = stream.next().await {
        tarball.extend_from_slice(&chunk.ok()?);
        if tarball.len() as u64 > MAX_SYSTEM_BUNDLE + 64 * 1024 {
            return None;
        }
    }
    let mut archive = tar::Archive::new(tarball.as_slice());
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.header().entry_type().is_file() {
            let mut text = String::new();
            entry
                .by_ref()
                .take(MAX_SYSTEM_BUNDLE)
                .read_to_string(&mut text)
                .ok()?;
            return Some(text);
        }
        // A symlinked bundle (some images): left alone, the env points at ours.
        if entry.header().entry_type().is_symlink() {
            return None;
        }
    }
    None
}

/// A tar of root-owned entries: `None` content is a 0755 directory, else
/// a 0644 file.
fn tar_of(entries: &[(&str, Option<&[u8]>)]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, content) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        match content {
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, name, std::io::empty())?;
            }
            Some(data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, name, *data)?;
            }
        }
    }
    b.into_inner()
}

fn one_shot(data: Vec<u8>) -> iterion_core::ByteStream {
    Box::pin(futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(Bytes::from(data))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_keep_the_public_prefix_and_are_unguessable() {
        let v = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdef";
        let a = placeholder_for(v);
        let b = placeholder_for(v);
        assert_ne!(a, b, "fresh per mint");
        assert!(a.starts_with("sk-ant-api03-"), "{a}");
        assert_eq!(a.len(), v.len(), "same length: bodies stream");
        assert!(!a.contains("AbCdEf"));
        assert!(a[13..].bytes().all(|c| c.is_ascii_alphanumeric()));
        // A short or prefix-less value shows nothing of itself.
        let short = placeholder_for("hunter2-pass");
        assert!(!short.starts_with("hunter2"), "{short}");
        assert_eq!(short.len(), MIN_RANDOM);
        assert!(placeholder_for("ghp_0123456789abcdefghijklmnopqrstuvwxyzAB").starts_with("ghp_"));
        assert_eq!(
            known_prefix("Sk-Upper-0123456789abcdefghijklmnopqrstuvwxyz"),
            ""
        );
    }

    #[test]
    fn bound_secrets_are_delivered_as_placeholders_in_env_and_file_form() {
        use iterion_dsl::ir::SecretDelivery;
        let decl = |name: &str, delivery, egress: &[&str]| SecretDecl {
            name: name.into(),
            delivery,
            value: None,
            mount_path: None,
            env: None,
            optional: false,
            egress: egress.iter().map(|e| e.parse().unwrap()).collect(),
        };
        let host: BTreeMap<String, String> = [
            ("KEY", "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz"),
            ("tok", "file-value-0123456789"),
            ("PLAIN", "plain-value"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let resolved = crate::secrets::resolve(
            &[
                decl("KEY", SecretDelivery::Env, &["api.anthropic.com"]),
                decl("tok", SecretDelivery::File, &["*.example.com"]),
                decl("PLAIN", SecretDelivery::Env, &[]),
            ],
            &host,
        )
        .unwrap();
        assert_eq!(resolved.bound.len(), 2);
        let redactor = resolved.redactor();
        let swapped = resolved.clone().with_placeholders();
        let ph = resolved.bound[0].placeholder();
        assert_eq!(swapped.env["KEY"], ph);
        assert_eq!(swapped.env["PLAIN"], "plain-value", "unbound: untouched");
        assert_eq!(swapped.files[0].name, "tok");
        assert_eq!(swapped.files[0].content(), resolved.bound[1].placeholder());
        assert_eq!(resolved.files[0].content(), "file-value-0123456789");
        assert_eq!(swapped.bound[1].binding().unwrap().name(), "tok");
        // The redactor still masks the real values.
        let line = redactor.redact(&format!("k={} t=file-value-0123456789", host["KEY"]));
        assert!(
            !line.contains(&host["KEY"]) && !line.contains("file-value-0123456789"),
            "{line}"
        );
    }

    #[test]
    fn trust_variables_name_the_bundle_and_the_ca() {
        let env = trust_env();
        for k in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
        ] {
            assert_eq!(env[k], TRUST_BUNDLE);
        }
        assert_eq!(env["NODE_EXTRA_CA_CERTS"], TRUST_CA);
    }
}
