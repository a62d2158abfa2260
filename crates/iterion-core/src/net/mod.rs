//! The egress rule language of a `network:` block, parsed once.
//!
//! Owns the grammar every consumer shares (issue 16 item 2: the DSL, the
//! proxy and the doctor used to parse it apart and disagree): a rule
//! ([`NetRule`]), the host a request names ([`Host`]), the mode words
//! ([`NetworkMode`](crate::NetworkMode), in `spec`) and the preset names
//! ([`NetPreset`]). It decides what a rule *says* and whether one rule
//! matches one host; it does not decide whether a host is allowed (last
//! match wins, mode defaults, address vetting: `iterion_netproxy::Policy`)
//! nor what a preset contains (`iterion_netproxy::preset`).

mod host;
mod literal;
mod rule;

pub use host::{Host, canonical_host, unmap_ip};
pub use rule::{NetPreset, NetRule, NetRuleError, NetRuleErrorKind, UnknownPreset};
