//! iterion-netproxy owns a run's egress policy and the proxy enforcing it:
//! compiling a `network:` block ([`NetworkSpec`](iterion_core::NetworkSpec))
//! into a [`Policy`] (presets, last-match-wins, address vetting; the
//! rule grammar itself is `iterion_core::net`'s), the per-run [`ProxyToken`] and per-exec [`ExecCredential`]s
//! (which exec asked), and the token-authenticated CONNECT/HTTP
//! [`EgressProxy`] that reports every denial, attributed, through a
//! callback; and, for the hosts a secret binding names, TLS inspection
//! with a per-run [`EgressCa`] that puts a placeholder's value back only
//! where the secret is for ([`Inspection`], issue 17). It does not decide when a proxy runs (the runtime asks
//! [`Policy::needs_proxy`]), how a container is confined to it (drivers),
//! nor how a denial becomes an event (the runtime's callback).

mod bindings;
pub mod ca;
mod credentials;
mod error;
mod inspect;
mod policy;
pub mod preset;
mod proxy;
mod resolver;
mod token;

pub use bindings::{Bindings, SecretBinding};
pub use ca::EgressCa;
pub use credentials::{CredentialBook, ExecCredential};
pub use error::NetproxyError;
pub use inspect::{Inspection, MAX_REWRITE_BODY, UPSTREAM_CA_ENV, upstream_roots};
pub use policy::{AddressRefusal, Decision, Policy, canonical_host};
pub use proxy::{
    BlockReason, BlockedCallback, BlockedRequest, DEFAULT_DIAL_TIMEOUT,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, EGRESS_HEADER, EgressProxy,
    LIMIT_NOTICE_INTERVAL, LimitCallback, LimitNotice, ProxyHandle, ProxyOptions, strip_hop_by_hop,
};
pub use resolver::{Resolver, StaticResolver, SystemResolver};
pub use token::ProxyToken;
