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
mod inspection;
mod policy;
pub mod preset;
mod proxy;
mod report;
mod resolver;
mod shared;
mod token;
mod wire;

pub use bindings::{Bindings, SecretBinding};
pub use ca::EgressCa;
pub use credentials::{CredentialBook, ExecCredential};
pub use error::NetproxyError;
pub use inspect::MAX_REWRITE_BODY;
pub use inspection::{Inspection, UPSTREAM_CA_ENV, upstream_roots};
pub use policy::{AddressRefusal, Decision, Policy, canonical_host};
pub use proxy::{
    DEFAULT_DIAL_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, EgressProxy,
    ProxyHandle, ProxyOptions,
};
pub use report::{
    BlockReason, BlockedCallback, BlockedRequest, EGRESS_HEADER, LIMIT_NOTICE_INTERVAL,
    LimitCallback, LimitNotice,
};
pub use resolver::{Resolver, StaticResolver, SystemResolver};
pub use token::ProxyToken;
pub use wire::strip_hop_by_hop;
