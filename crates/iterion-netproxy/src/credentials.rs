//! Per-exec proxy credentials: which exec a request came from.
//!
//! The run token (create-time `*_PROXY` env) authenticates the whole
//! sandbox; it cannot say which node's process asked, and with parallel
//! branches several run at once. Each exec therefore gets its own
//! credential — a public id as the Basic user name plus a secret as the
//! password — issued by the runtime from the run's [`CredentialBook`] and
//! put on that exec's env only. A request presenting it is attributed to
//! the exec's label (its node), so `network_blocked` names the right node
//! whatever else runs at the same time.
//!
//! Attribution, not isolation: every process in the container shares the
//! run's egress policy, and a process able to read another exec's
//! environment could borrow its credential. A credential stays valid until
//! the proxy stops, so a background process a node started is still
//! attributed to that node after the node finished.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use rand::RngCore;

use crate::token::ProxyToken;

/// One exec's credential. Debug and Display never show the secret.
#[derive(Clone)]
pub struct ExecCredential {
    id: String,
    secret: ProxyToken,
}

impl ExecCredential {
    /// The public id (the Basic user name).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The proxy URL for the exec's `*_PROXY` env:
    /// `http://<id>:<secret>@<host>:<port>`. Contains the secret.
    pub fn endpoint_url(&self, host: &str, port: u16) -> String {
        format!("http://{}:{}@{host}:{port}", self.id, self.secret.expose())
    }
}

impl fmt::Debug for ExecCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecCredential")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

struct Entry {
    secret: ProxyToken,
    label: String,
}

/// The credentials issued for one run's proxy. Cheap to clone (shared);
/// the runtime issues, the proxy checks.
#[derive(Clone, Default)]
pub struct CredentialBook {
    entries: Arc<RwLock<HashMap<String, Entry>>>,
}

impl fmt::Debug for CredentialBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialBook")
            .field("issued", &self.len())
            .finish()
    }
}

impl CredentialBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Issue a fresh credential attributed to `label` (a node id).
    pub fn issue(&self, label: &str) -> ExecCredential {
        let mut raw = [0u8; 12];
        rand::rng().fill_bytes(&mut raw);
        // The id is not secret, only unique; a prefix keeps it apart from
        // the run token's conventional user name `t`.
        let id = format!("x{}", hex::encode(raw));
        let secret = ProxyToken::generate();
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.insert(
            id.clone(),
            Entry {
                secret: secret.clone(),
                label: label.to_owned(),
            },
        );
        ExecCredential { id, secret }
    }

    /// How many credentials were issued.
    pub fn len(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether none was issued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The label of the credential `user:secret` presents, when it is one
    /// (secret compared in constant time).
    pub(crate) fn identify(&self, user: &[u8], secret: &[u8]) -> Option<String> {
        let user = std::str::from_utf8(user).ok()?;
        let entries = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.get(user)?;
        entry.secret.matches(secret).then(|| entry.label.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_credentials_identify_their_label_only() {
        let book = CredentialBook::new();
        let a = book.issue("node_a");
        let b = book.issue("node_b");
        assert_ne!(a.id(), b.id());
        assert_eq!(book.len(), 2);
        let secret_of = |c: &ExecCredential| {
            let url = c.endpoint_url("h", 1);
            let (_, rest) = url.split_once(':').unwrap();
            let (_, rest) = rest.split_once(':').unwrap();
            rest.split_once('@').unwrap().0.to_owned()
        };
        let sa = secret_of(&a);
        assert_eq!(
            book.identify(a.id().as_bytes(), sa.as_bytes()),
            Some("node_a".to_owned())
        );
        // Another exec's id with this secret, or a wrong secret: nobody.
        assert_eq!(book.identify(b.id().as_bytes(), sa.as_bytes()), None);
        assert_eq!(book.identify(a.id().as_bytes(), b"nope"), None);
        assert_eq!(book.identify(b"t", sa.as_bytes()), None);
        assert!(!format!("{a:?}{book:?}").contains(&sa));
        assert!(a.endpoint_url("host", 8080).ends_with("@host:8080"));
    }
}
