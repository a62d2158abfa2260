//! The host a request names, canonicalised the way rules see it (facts
//! §2.3): the proxy classifies every `Host:` header and CONNECT authority
//! here, so a rule and a request can never read the same text apart.

use std::net::IpAddr;

use super::literal;

/// A canonical host as matched by the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IP literal in any shape a resolver accepts (v4-mapped IPv6 unmapped).
    Ip(IpAddr),
    /// A DNS name: lower-cased, punycode, no trailing dot, no port.
    Dns(String),
    /// Numeric-looking but no address (`1.2.3.4.5`): neither a name nor
    /// an address, so no rule — not even `**` — matches it.
    Invalid,
}

impl Host {
    /// Canonicalise a host: trim, strip `[…]` around IPv6 and a `:port`,
    /// strip one trailing dot, lower-case, IDN → punycode (falling back to
    /// the lower-cased input when the name is not valid IDNA). IP literals
    /// — every `inet_aton` shape included (`2887581698`, `127.1`,
    /// `0x7f.1`) — become [`Host::Ip`].
    pub fn parse(raw: &str) -> Self {
        let s = raw.trim();
        let s = if let Some(rest) = s.strip_prefix('[') {
            // `[v6]` or `[v6]:port`
            rest.split_once(']').map_or(rest, |(inside, _)| inside)
        } else if s.matches(':').count() == 1 {
            s.split_once(':').map_or(s, |(h, _)| h)
        } else {
            s
        };
        let s = s.strip_suffix('.').unwrap_or(s);
        let lower = s.to_lowercase();
        // IDNA maps full-width digits and dots to ASCII (`１２７.０.０.１`), so
        // the literal check runs on what a resolver would finally see.
        let name = idna::domain_to_ascii(&lower).unwrap_or(lower);
        match literal::ip_of(strip_dot(&name)) {
            Ok(Some(ip)) => Host::Ip(unmap_ip(ip)),
            Ok(None) => Host::Dns(name),
            Err(()) => Host::Invalid,
        }
    }

    /// Whether no rule can name this host: an invalid numeric form or an
    /// empty name.
    pub fn is_unnameable(&self) -> bool {
        match self {
            Host::Invalid => true,
            Host::Dns(h) => h.is_empty(),
            Host::Ip(_) => false,
        }
    }
}

/// [`Host::parse`] as text: the canonical name or address, `None` for a
/// host that looks numeric but is no address (it is never a name).
pub fn canonical_host(raw: &str) -> Option<String> {
    match Host::parse(raw) {
        Host::Ip(ip) => Some(ip.to_string()),
        Host::Dns(name) => Some(name),
        Host::Invalid => None,
    }
}

/// Unmap `::ffff:a.b.c.d` so v4 rules (and the loopback check) see the v4 address.
pub fn unmap_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

pub(super) fn strip_dot(s: &str) -> &str {
    s.strip_suffix('.').unwrap_or(s)
}

pub(super) fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonicalisation() {
        let c = |h: &str| canonical_host(h).unwrap_or_default();
        assert_eq!(c("  Example.COM.:443 "), "example.com");
        assert_eq!(c("[2001:DB8::1]:8443"), "2001:db8::1");
        assert_eq!(c("bücher.de"), "xn--bcher-kva.de");
        assert_eq!(c("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(c("0x7f.1"), "127.0.0.1");
        assert_eq!(canonical_host("1.2.3.4.5"), None);
        assert!(Host::parse(" ").is_unnameable());
    }
}
