//! The egress policy language: compiling a `NetworkSpec` into a [`Policy`]
//! and deciding whether a host (and every address it resolves to) may be
//! reached. This is the one place "is a host allowed" lives; the proxy and
//! `iterion validate` both call it. It does no I/O.
//!
//! Semantics follow facts §2.3 with two deliberate divergences, both in the
//! deny direction: an unknown preset is an error instead of resolving to
//! nothing, and a DNS rule carrying a `:port` is rejected instead of silently
//! never matching (in a denylist that would fail open).

use std::fmt;
use std::net::IpAddr;

use iterion_core::{NetworkMode, NetworkSpec};

use crate::error::NetproxyError;
use crate::{literal, preset};

/// Why one rule of a `network:` block cannot compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// Zero-based position of the rule in the block's `rules:` list.
    pub index: usize,
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub kind: RuleErrorKind,
}

/// The rejected rule shapes of facts §2.3 (plus `:port`, see module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleErrorKind {
    /// The rule is empty or only whitespace.
    Empty,
    /// The rule is a bare `!`.
    BareNegation,
    /// A `*` appears outside the leading label (`a*b.com`, `foo.*.com`).
    WildcardNotLeading,
    /// `*.` or `**.` with nothing after the dot.
    WildcardEmptySuffix,
    /// More than one wildcard in one rule.
    MultipleWildcards,
    /// A rule containing `/` that is not `address/prefix`.
    InvalidCidr {
        /// What did not parse.
        detail: String,
    },
    /// A DNS rule naming a port; rules match hosts only.
    PortInRule,
    /// A numeric rule (its last label is a number) that is no valid
    /// address: it can never be a name (see `literal`).
    InvalidAddress,
    /// A wildcard over a numeric suffix (`*.0.2`): every host ending in a
    /// number is an IP literal, which no DNS pattern matches, so the rule
    /// could never match (in a denylist, silently failing open).
    NumericWildcard,
}

impl RuleErrorKind {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Empty => "empty_rule",
            Self::BareNegation => "bare_negation",
            Self::WildcardNotLeading => "wildcard_not_leading",
            Self::WildcardEmptySuffix => "wildcard_empty_suffix",
            Self::MultipleWildcards => "multiple_wildcards",
            Self::InvalidCidr { .. } => "invalid_cidr",
            Self::PortInRule => "port_in_rule",
            Self::InvalidAddress => "invalid_address",
            Self::NumericWildcard => "numeric_wildcard",
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.kind {
            RuleErrorKind::Empty => "empty rule".to_owned(),
            RuleErrorKind::BareNegation => "bare `!` negates nothing".to_owned(),
            RuleErrorKind::WildcardNotLeading => {
                "a wildcard is only allowed as the whole leading label (`*.x`, `**.x`)".to_owned()
            }
            RuleErrorKind::WildcardEmptySuffix => {
                "wildcard with an empty suffix (write `**` to match everything)".to_owned()
            }
            RuleErrorKind::MultipleWildcards => "more than one wildcard".to_owned(),
            RuleErrorKind::InvalidCidr { detail } => format!("invalid CIDR: {detail}"),
            RuleErrorKind::PortInRule => {
                "rules match hosts, not ports (drop the `:port`)".to_owned()
            }
            RuleErrorKind::InvalidAddress => {
                "a numeric host that is no valid IP address (write the address dotted)".to_owned()
            }
            RuleErrorKind::NumericWildcard => {
                "a wildcard over a numeric suffix matches nothing: hosts ending in a number are IP addresses (write a CIDR)".to_owned()
            }
        };
        write!(f, "network rule #{} `{}`: {what}", self.index, self.rule)
    }
}

impl std::error::Error for RuleError {}

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the host may be reached.
    pub allowed: bool,
    /// The rule that decided, as written (`None` when the mode default decided).
    pub rule: Option<String>,
}

/// An IP network (`address/prefix`), host bits masked away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = text
            .split_once('/')
            .ok_or_else(|| "missing `/prefix`".to_owned())?;
        let addr = strip_brackets(addr);
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("prefix `{prefix}` is not in 0..={max}"))?;
        let network = match addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a) & mask32(prefix);
                IpAddr::V4(bits.into())
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a) & mask128(prefix);
                IpAddr::V6(bits.into())
            }
        };
        Ok(Self { network, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(a) & mask32(self.prefix) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => u128::from(a) & mask128(self.prefix) == u128::from(n),
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// One compiled pattern (without its negation).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// `host.example.com`
    Exact(String),
    /// `*.suffix`: exactly one extra label.
    OneLabel(String),
    /// `**.suffix`: one or more extra labels, and the bare suffix (facts §2.3, code behaviour).
    AnyLabels(String),
    /// `**`
    Everything,
    /// `*`: a single-label DNS host.
    SingleLabel,
    /// An IP literal.
    Ip(IpAddr),
    /// `addr/prefix`
    Cidr(Cidr),
}

impl Pattern {
    fn is_ip_rule(&self) -> bool {
        matches!(self, Pattern::Ip(_) | Pattern::Cidr(_))
    }

    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (Pattern::Everything, Host::Ip(_) | Host::Dns(_)) => true,
            (Pattern::Ip(p), Host::Ip(ip)) => p == ip,
            (Pattern::Cidr(c), Host::Ip(ip)) => c.contains(*ip),
            // An IP literal never matches a DNS pattern (facts §2.3): bare
            // metadata IPs stay refused unless an IP rule lists them.
            (_, Host::Ip(_)) => false,
            // Not even `**`: it is neither a name nor an address.
            (_, Host::Invalid) => false,
            (Pattern::Ip(_) | Pattern::Cidr(_), Host::Dns(_)) => false,
            (Pattern::Exact(p), Host::Dns(h)) => p == h,
            (Pattern::SingleLabel, Host::Dns(h)) => !h.contains('.'),
            (Pattern::OneLabel(suffix), Host::Dns(h)) => h
                .strip_suffix(suffix.as_str())
                .and_then(|rest| rest.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            (Pattern::AnyLabels(suffix), Host::Dns(h)) => {
                h == suffix
                    || h.strip_suffix(suffix.as_str())
                        .and_then(|rest| rest.strip_suffix('.'))
                        .is_some_and(|labels| !labels.is_empty() && !labels.starts_with('.'))
            }
        }
    }
}

/// A rule: pattern, negation, and its text for reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    negated: bool,
    pattern: Pattern,
    text: String,
}

/// A canonical host as matched by the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    Dns(String),
    /// Numeric-looking but no address (`1.2.3.4.5`): refused everywhere.
    Invalid,
}

fn strip_dot(s: &str) -> &str {
    s.strip_suffix('.').unwrap_or(s)
}

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s)
}

/// Unmap `::ffff:a.b.c.d` so v4 rules (and the loopback check) see the v4 address.
fn normalise_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Canonicalise a host the way the matcher sees it (facts §2.3): trim,
/// strip `[…]` around IPv6 and a `:port`, strip one trailing dot,
/// lower-case, IDN → punycode (falling back to the lower-cased input when
/// the name is not valid IDNA). IP literals — every `inet_aton` shape
/// included (`2887581698`, `127.1`, `0x7f.1`) — come back in their
/// canonical text form (v4-mapped IPv6 unmapped). `None` for a host that
/// looks numeric but is no address (`1.2.3.4.5`): it is never a name.
pub fn canonical_host(raw: &str) -> Option<String> {
    match classify(raw) {
        Host::Ip(ip) => Some(ip.to_string()),
        Host::Dns(name) => Some(name),
        Host::Invalid => None,
    }
}

fn classify(raw: &str) -> Host {
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
        Ok(Some(ip)) => Host::Ip(normalise_ip(ip)),
        Ok(None) => Host::Dns(name),
        Err(()) => Host::Invalid,
    }
}

/// Lower-case and IDN-encode a DNS pattern body (after its wildcard label).
fn canonical_dns_pattern(s: &str) -> String {
    let lower = s.to_lowercase();
    idna::domain_to_ascii(&lower).unwrap_or(lower)
}

fn compile_rule(index: usize, raw: &str) -> Result<Rule, RuleError> {
    let err = |kind| RuleError {
        index,
        rule: raw.to_owned(),
        kind,
    };
    let text = raw.trim().to_lowercase();
    if text.is_empty() {
        return Err(err(RuleErrorKind::Empty));
    }
    let (negated, body) = match text.strip_prefix('!') {
        Some(rest) => (true, rest.trim()),
        None => (false, text.as_str()),
    };
    if body.is_empty() {
        return Err(err(RuleErrorKind::BareNegation));
    }
    let pattern = if body.contains('/') {
        Pattern::Cidr(
            Cidr::parse(body).map_err(|detail| err(RuleErrorKind::InvalidCidr { detail }))?,
        )
    } else if let Some(ip) = (!body.starts_with('*'))
        .then(|| literal::ip_of(strip_dot(strip_brackets(body))))
        .transpose()
        .map_err(|()| err(RuleErrorKind::InvalidAddress))?
        .flatten()
    {
        Pattern::Ip(normalise_ip(ip))
    } else if body == "**" {
        Pattern::Everything
    } else if body == "*" {
        Pattern::SingleLabel
    } else {
        let body = body.strip_suffix('.').unwrap_or(body);
        let wildcards = body.split('.').filter(|l| l.contains('*')).count()
            + body
                .split('.')
                .filter(|l| l.matches('*').count() > 2)
                .count();
        let (lead, rest) = body.split_once('.').unwrap_or((body, ""));
        if wildcards > 1 {
            return Err(err(RuleErrorKind::MultipleWildcards));
        }
        if wildcards == 1 && lead != "*" && lead != "**" {
            return Err(err(RuleErrorKind::WildcardNotLeading));
        }
        if body.contains(':') {
            return Err(err(RuleErrorKind::PortInRule));
        }
        match lead {
            "*" | "**" if rest.is_empty() => return Err(err(RuleErrorKind::WildcardEmptySuffix)),
            "*" | "**" if literal::numeric_ipv4(rest) != literal::Numeric::Name => {
                return Err(err(RuleErrorKind::NumericWildcard));
            }
            "*" => Pattern::OneLabel(canonical_dns_pattern(rest)),
            "**" => Pattern::AnyLabels(canonical_dns_pattern(rest)),
            _ => Pattern::Exact(canonical_dns_pattern(body)),
        }
    };
    Ok(Rule {
        negated,
        pattern,
        text: raw.trim().to_owned(),
    })
}

/// Every rule of the block that cannot compile, with its index. Empty when
/// the block is well-formed. `iterion validate` turns these into
/// compile-time diagnostics; [`Policy::compile`] refuses the same inputs.
pub fn check_rules(spec: &NetworkSpec) -> Vec<RuleError> {
    spec.rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| compile_rule(i, r).err())
        .collect()
}

/// The preset problem of a block, if any (an unknown preset name).
pub fn check_preset(spec: &NetworkSpec) -> Option<NetproxyError> {
    let name = spec.preset.as_deref()?.trim();
    if name.is_empty() || preset::rules(name).is_some() {
        None
    } else {
        Some(NetproxyError::UnknownPreset {
            name: name.to_owned(),
        })
    }
}

/// Why a resolved address is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressRefusal {
    /// The refused address.
    pub addr: IpAddr,
    /// The negated IP/CIDR rule that refused it, when one did.
    pub rule: Option<String>,
}

/// A compiled egress policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    mode: NetworkMode,
    rules: Vec<Rule>,
}

impl Policy {
    /// The open policy: no proxy at all.
    pub fn open() -> Self {
        Self {
            mode: NetworkMode::Open,
            rules: Vec::new(),
        }
    }

    /// Compile the run's `network:` block; `None` (no block) is open.
    pub fn from_spec(spec: Option<&NetworkSpec>) -> Result<Self, NetproxyError> {
        spec.map_or_else(|| Ok(Self::open()), Self::compile)
    }

    /// Compile a `network:` block. A block without `mode:` resolves to open
    /// (facts §7.1 [I], compile warning C312), but its rules and preset are
    /// still checked so a typo never hides. Preset rules come first, then
    /// the block's (facts §2.3).
    pub fn compile(spec: &NetworkSpec) -> Result<Self, NetproxyError> {
        let errors = check_rules(spec);
        if !errors.is_empty() {
            return Err(NetproxyError::InvalidRules { errors });
        }
        if let Some(e) = check_preset(spec) {
            return Err(e);
        }
        let mode = spec.mode.unwrap_or(NetworkMode::Open);
        let preset_rules = spec
            .preset
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .and_then(preset::rules)
            .unwrap_or(&[]);
        let mut rules = Vec::with_capacity(preset_rules.len() + spec.rules.len());
        for (i, r) in preset_rules.iter().enumerate() {
            // Shipped presets are tested to compile; a failure here is a bug, refused not ignored.
            rules.push(
                compile_rule(i, r).map_err(|e| NetproxyError::InvalidRules { errors: vec![e] })?,
            );
        }
        for (i, r) in spec.rules.iter().enumerate() {
            rules.push(
                compile_rule(i, r).map_err(|e| NetproxyError::InvalidRules { errors: vec![e] })?,
            );
        }
        Ok(Self { mode, rules })
    }

    /// The effective mode (`open` for a mode-less block).
    pub fn mode(&self) -> NetworkMode {
        self.mode
    }

    /// Whether enforcing this policy needs a proxy. False for open: the
    /// runtime then mints no token and binds no port (facts §7.1).
    pub fn needs_proxy(&self) -> bool {
        self.mode != NetworkMode::Open
    }

    /// Is `host` (any form a client may send: `Host:` header, CONNECT
    /// authority, bracketed IPv6, trailing dot, IDN) allowed? Walks every
    /// rule, last match wins; no match falls back to the mode default.
    pub fn decide(&self, host: &str) -> Decision {
        if self.mode == NetworkMode::Open {
            return Decision {
                allowed: true,
                rule: None,
            };
        }
        let host = classify(host);
        if matches!(&host, Host::Invalid) || matches!(&host, Host::Dns(h) if h.is_empty()) {
            return Decision {
                allowed: false,
                rule: None,
            };
        }
        match self.rules.iter().rev().find(|r| r.pattern.matches(&host)) {
            Some(r) => Decision {
                allowed: !r.negated,
                rule: Some(r.text.clone()),
            },
            None => Decision {
                allowed: self.mode == NetworkMode::Denylist,
                rule: None,
            },
        }
    }

    /// Vet one address a host resolved to (or the literal itself), so a
    /// name cannot smuggle traffic to an address its IP rules forbid.
    ///
    /// The rule: take the last IP or CIDR rule (`**` and DNS rules do not
    /// count) matching the address. A negated one refuses it. Otherwise a
    /// loopback (127.0.0.0/8, ::1), link-local / metadata (169.254.0.0/16,
    /// fe80::/10), unspecified (0.0.0.0, ::) or own-host (any address of
    /// the machine the proxy runs on) address is refused unless
    /// that last matching IP rule is a plain (allowing) one. Any other
    /// address passes. Open policies vet nothing.
    pub fn vet_address(&self, addr: IpAddr) -> Result<(), AddressRefusal> {
        if self.mode == NetworkMode::Open {
            return Ok(());
        }
        let addr = normalise_ip(addr);
        let host = Host::Ip(addr);
        let last = self
            .rules
            .iter()
            .rev()
            .find(|r| r.pattern.is_ip_rule() && r.pattern.matches(&host));
        match last {
            Some(r) if r.negated => Err(AddressRefusal {
                addr,
                rule: Some(r.text.clone()),
            }),
            Some(_) => Ok(()),
            None if is_sensitive(addr) || is_host_address(addr) => {
                Err(AddressRefusal { addr, rule: None })
            }
            None => Ok(()),
        }
    }
}

/// An address of THIS host (the proxy runs on it): its primary IP, a
/// bridge gateway… Reaching one through the proxy reaches every host
/// service listening on 0.0.0.0, exactly like loopback, so it gets the
/// same treatment. Binding a port-0 UDP socket succeeds only on a local
/// address (no packet is sent).
fn is_host_address(addr: IpAddr) -> bool {
    !addr.is_multicast() && std::net::UdpSocket::bind(std::net::SocketAddr::new(addr, 0)).is_ok()
}

/// Loopback, link-local (cloud metadata lives at 169.254.169.254) or unspecified.
fn is_sensitive(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_loopback() || a.is_link_local() || a.is_unspecified(),
        IpAddr::V6(a) => {
            a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(mode: NetworkMode, rules: &[&str]) -> NetworkSpec {
        NetworkSpec {
            mode: Some(mode),
            rules: rules.iter().map(|s| (*s).to_owned()).collect(),
            ..NetworkSpec::default()
        }
    }

    fn allow(rules: &[&str]) -> Policy {
        Policy::compile(&spec(NetworkMode::Allowlist, rules)).unwrap()
    }

    #[test]
    fn pattern_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("example.com", "example.com", true),
            ("example.com", "EXAMPLE.com.", true),
            ("example.com", "a.example.com", false),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "a.b.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.example.com", "aexample.com", false),
            ("**.example.com", "example.com", true),
            ("**.example.com", "a.example.com", true),
            ("**.example.com", "a.b.example.com", true),
            ("**.example.com", "badexample.com", false),
            ("**", "anything.at.all", true),
            ("**", "10.1.2.3", true),
            ("*", "intranet", true),
            ("*", "intra.net", false),
            ("*", "10.0.0.1", false),
            ("*", "::1", false),
            ("10.1.2.3", "10.1.2.3", true),
            ("10.1.2.3", "10.1.2.4", false),
            ("10.0.0.0/8", "10.200.1.1", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("10.0.0.0/8", "ten.example", false),
            ("::1", "[::1]:443", true),
            ("[2001:db8::1]", "2001:DB8::1", true),
            ("2001:db8::/32", "[2001:db8:1::5]", true),
            ("2001:db8::/32", "2001:db9::5", false),
            ("127.0.0.1", "[::ffff:127.0.0.1]", true),
            ("example.com", "example.com:8443", true),
            ("bücher.de", "xn--bcher-kva.de", true),
            ("xn--bcher-kva.de", "BÜCHER.de", true),
            ("*.bücher.de", "shop.bücher.de.", true),
            ("0.0.0.0/0", "8.8.8.8", true),
            ("0.0.0.0/0", "::1", false),
        ];
        for (rule, host, want) in cases {
            let d = allow(&[rule]).decide(host);
            assert_eq!(d.allowed, *want, "rule {rule:?} host {host:?}");
            assert_eq!(d.rule.is_some(), *want, "rule {rule:?} host {host:?}");
        }
    }

    /// Issue 19 item 10: every shape the resolver reads as an IPv4 address
    /// is an IP literal to the matcher too — never a one-label name.
    #[test]
    fn numeric_hosts_are_ip_literals() {
        let star = allow(&["*"]);
        for host in [
            "2886729730",
            "2886729730:8080",
            "0xac100002",
            "0254.16.0.2",
            "172.16.2",
            "0xac.0x10.0.2",
            "[::ffff:172.16.0.2]",
            "１７２.１６.０.２",
            "２８８６７２９７３０",
        ] {
            assert!(!star.decide(host).allowed, "{host} matched a DNS pattern");
            assert_eq!(
                canonical_host(host).as_deref(),
                Some("172.16.0.2"),
                "{host}"
            );
            assert!(allow(&["172.16.0.2"]).decide(host).allowed, "{host}");
            assert!(allow(&["172.16.0.0/12"]).decide(host).allowed, "{host}");
            assert!(allow(&["2886729730"]).decide("172.16.0.2").allowed);
        }
        assert!(!allow(&["*"]).decide("127.1").allowed);
        assert_eq!(canonical_host("0x7f.1").as_deref(), Some("127.0.0.1"));
        // Numeric-looking but no address: neither a name nor an IP, so
        // not even `**` reaches it, and it is no valid rule.
        for bad in [
            "1.2.3.4.5",
            "256.0.0.1",
            "4294967296",
            "example.123",
            "08.1.1.1",
        ] {
            assert_eq!(canonical_host(bad), None, "{bad}");
            assert!(!allow(&["**", "*"]).decide(bad).allowed, "{bad}");
            let errs = check_rules(&spec(NetworkMode::Allowlist, &[bad]));
            assert_eq!(errs.len(), 1, "{bad}");
            assert_eq!(errs[0].kind.code(), "invalid_address");
        }
        // Names that merely contain digits stay names.
        assert!(star.decide("intranet").allowed);
        assert!(allow(&["**.example.com"]).decide("1.2.example.com").allowed);
    }

    #[test]
    fn ip_literal_never_matches_dns_patterns() {
        let p = allow(&["*", "169.254.169.254.nip.io", "**.nip.io"]);
        assert!(!p.decide("169.254.169.254").allowed);
        assert!(!p.decide("[fe80::1]").allowed);
        // A wildcard over a numeric suffix could only ever target an IP:
        // refused when the workflow compiles (it would never match).
        for rule in ["*.254.169.254", "**.169.254", "!*.0.2", "*.0x10"] {
            let errs = check_rules(&spec(NetworkMode::Denylist, &[rule]));
            assert_eq!(errs.len(), 1, "{rule}");
            assert_eq!(errs[0].kind.code(), "numeric_wildcard", "{rule}");
        }
    }

    #[test]
    fn last_match_wins_and_defaults() {
        let p = allow(&["**.example.com", "!bad.example.com"]);
        assert!(p.decide("good.example.com").allowed);
        let d = p.decide("bad.example.com");
        assert_eq!(
            d,
            Decision {
                allowed: false,
                rule: Some("!bad.example.com".into())
            }
        );
        // A later allow re-allows.
        let p = allow(&["!bad.example.com", "**.example.com"]);
        assert!(p.decide("bad.example.com").allowed);
        // No match → mode default.
        assert_eq!(
            p.decide("other.org"),
            Decision {
                allowed: false,
                rule: None
            }
        );
        let deny = Policy::compile(&spec(NetworkMode::Denylist, &["!*.evil.com"])).unwrap();
        assert!(deny.decide("good.org").allowed);
        assert!(!deny.decide("x.evil.com").allowed);
        let open = Policy::compile(&spec(NetworkMode::Open, &["!**"])).unwrap();
        assert!(open.decide("x.evil.com").allowed);
        assert!(!open.needs_proxy());
    }

    #[test]
    fn empty_host_allowed_only_in_open() {
        assert!(!allow(&["**"]).decide("").allowed);
        assert!(
            !Policy::compile(&spec(NetworkMode::Denylist, &[]))
                .unwrap()
                .decide(" ")
                .allowed
        );
        assert!(Policy::open().decide("").allowed);
    }

    #[test]
    fn modeless_block_is_open_and_no_block_is_open() {
        let s = NetworkSpec {
            mode: None,
            rules: vec!["example.com".into()],
            ..NetworkSpec::default()
        };
        let p = Policy::compile(&s).unwrap();
        assert_eq!(p.mode(), NetworkMode::Open);
        assert!(!p.needs_proxy());
        assert!(!Policy::from_spec(None).unwrap().needs_proxy());
        assert!(allow(&[]).needs_proxy());
    }

    #[test]
    fn rejected_shapes_are_indexed() {
        let s = spec(
            NetworkMode::Allowlist,
            &[
                "ok.com",
                "",
                "  ",
                "!",
                "! ",
                "a*b.com",
                "foo.*.com",
                "*.",
                "**.",
                "*.*.com",
                "**.*.com",
                "10.0.0.0/33",
                "nope/8",
                "1.2.3.4/x",
                "example.com:443",
                "***.com",
            ],
        );
        let errs: Vec<(usize, &str)> = check_rules(&s)
            .iter()
            .map(|e| (e.index, e.kind.code()))
            .collect();
        assert_eq!(
            errs,
            vec![
                (1, "empty_rule"),
                (2, "empty_rule"),
                (3, "bare_negation"),
                (4, "bare_negation"),
                (5, "wildcard_not_leading"),
                (6, "wildcard_not_leading"),
                (7, "wildcard_empty_suffix"),
                (8, "wildcard_empty_suffix"),
                (9, "multiple_wildcards"),
                (10, "multiple_wildcards"),
                (11, "invalid_cidr"),
                (12, "invalid_cidr"),
                (13, "invalid_cidr"),
                (14, "port_in_rule"),
                (15, "multiple_wildcards"),
            ]
        );
        let msg = check_rules(&s)[4].to_string();
        assert_eq!(
            msg,
            "network rule #5 `a*b.com`: a wildcard is only allowed as the whole leading label (`*.x`, `**.x`)"
        );
        assert!(matches!(
            Policy::compile(&s),
            Err(NetproxyError::InvalidRules { errors }) if errors.len() == 15
        ));
    }

    #[test]
    fn presets() {
        let mut s = spec(NetworkMode::Allowlist, &["!api.openai.com"]);
        s.preset = Some("iterion-default".into());
        let p = Policy::compile(&s).unwrap();
        assert!(p.decide("api.anthropic.com").allowed);
        assert!(p.decide("us-east-1.bedrock.amazonaws.com").allowed);
        assert!(p.decide("github.com").allowed);
        assert!(p.decide("api.github.com").allowed);
        // The block's rules come after the preset's: the deny wins.
        assert!(!p.decide("api.openai.com").allowed);
        assert!(!p.decide("example.com").allowed);
        s.preset = Some("no-such-preset".into());
        assert!(matches!(
            Policy::compile(&s),
            Err(NetproxyError::UnknownPreset { name }) if name == "no-such-preset"
        ));
        assert!(check_preset(&s).is_some());
    }

    #[test]
    fn vetting_resolved_addresses() {
        let p = allow(&["allowed.test"]);
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
            "::ffff:127.0.0.1",
        ] {
            assert!(p.vet_address(ip.parse().unwrap()).is_err(), "{ip}");
        }
        assert!(p.vet_address("93.184.216.34".parse().unwrap()).is_ok());
        let p = allow(&["allowed.test", "127.0.0.1", "!10.0.0.0/8"]);
        assert!(p.vet_address("127.0.0.1".parse().unwrap()).is_ok());
        assert!(p.vet_address("127.0.0.2".parse().unwrap()).is_err());
        assert_eq!(
            p.vet_address("10.1.1.1".parse().unwrap())
                .unwrap_err()
                .rule
                .as_deref(),
            Some("!10.0.0.0/8")
        );
        // The host's own non-loopback address is as sensitive as loopback.
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if sock.connect("192.0.2.1:9").is_ok() {
            let own = sock.local_addr().unwrap().ip();
            assert!(allow(&["**"]).vet_address(own).is_err(), "{own}");
            let rule = own.to_string();
            assert!(allow(&[rule.as_str()]).vet_address(own).is_ok(), "{own}");
        }
        // `**` is not an explicit IP allow.
        assert!(
            allow(&["**"])
                .vet_address("169.254.169.254".parse().unwrap())
                .is_err()
        );
        assert!(
            allow(&["169.254.0.0/16"])
                .vet_address("169.254.169.254".parse().unwrap())
                .is_ok()
        );
    }

    #[test]
    fn canonicalisation() {
        let c = |h: &str| canonical_host(h).unwrap_or_default();
        assert_eq!(c("  Example.COM.:443 "), "example.com");
        assert_eq!(c("[2001:DB8::1]:8443"), "2001:db8::1");
        assert_eq!(c("bücher.de"), "xn--bcher-kva.de");
        assert_eq!(c("::ffff:10.0.0.1"), "10.0.0.1");
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9-]{0,10}[a-z0-9]"
    }

    fn mixed_case(s: &str, mask: u64) -> String {
        s.chars()
            .enumerate()
            .map(|(i, c)| {
                if mask >> (i % 64) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn case_and_trailing_dot_insensitive(labels in proptest::collection::vec(label(), 1..5), mask: u64, dot: bool, port in proptest::option::of(1u16..)) {
            let host = labels.join(".");
            let p = allow(&[&host]);
            let mut probe = mixed_case(&host, mask);
            if dot { probe.push('.'); }
            if let Some(port) = port { probe = format!("{probe}:{port}"); }
            prop_assert!(p.decide(&probe).allowed);
            prop_assert!(allow(&[&mixed_case(&host, !mask)]).decide(&host).allowed);
        }

        #[test]
        fn later_deny_wins(labels in proptest::collection::vec(label(), 2..5), extra in label()) {
            let host = labels.join(".");
            let sub = format!("{extra}.{host}");
            let later_deny = allow(&[&format!("**.{host}"), &format!("!{sub}")]);
            prop_assert!(!later_deny.decide(&sub).allowed);
            prop_assert!(later_deny.decide(&host).allowed);
            let later_allow = allow(&[&format!("!{sub}"), &format!("**.{host}")]);
            prop_assert!(later_allow.decide(&sub).allowed);
        }

        #[test]
        fn one_label_wildcard(labels in proptest::collection::vec(label(), 1..4), a in label(), b in label()) {
            let suffix = labels.join(".");
            let p = allow(&[&format!("*.{suffix}")]);
            let one = format!("{a}.{suffix}");
            let two = format!("{b}.{a}.{suffix}");
            prop_assert!(p.decide(&one).allowed);
            prop_assert!(!p.decide(&two).allowed);
            prop_assert!(!p.decide(&suffix).allowed);
        }

        #[test]
        fn ip_literals_ignore_dns_patterns(a: u8, b: u8, c: u8, d: u8) {
            let ip = format!("{a}.{b}.{c}.{d}");
            let p = allow(&["*", &format!("{a}.{b}.{c}.{d}.nip.io"), "**.nip.io"]);
            prop_assert!(!p.decide(&ip).allowed);
            let numeric_suffix = spec(NetworkMode::Allowlist, &[&format!("*.{b}.{c}.{d}"), &format!("**.{c}.{d}")]);
            prop_assert_eq!(check_rules(&numeric_suffix).len(), 2);
            let with_port = format!("{ip}:80");
            let cidr = format!("{a}.0.0.0/8");
            prop_assert!(allow(&[&ip]).decide(&with_port).allowed);
            prop_assert!(allow(&[&cidr]).decide(&ip).allowed);
        }

        #[test]
        fn every_inet_aton_shape_is_the_same_literal(a: u8, b: u8, c: u8, d: u8, port: u16) {
            let ip = std::net::Ipv4Addr::new(a, b, c, d);
            let n = u32::from(ip);
            let dotted = ip.to_string();
            let forms = [
                n.to_string(),
                format!("{n:#x}"),
                format!("0{n:o}"),
                format!("{a}.{}", n & 0xff_ffff),
                format!("{a}.{b}.{}", n & 0xffff),
                format!("{a:#x}.0{b:o}.{c}.{d:#x}"),
                format!("{n}:{port}"),
            ];
            let star = allow(&["*", "**"]);
            let names_only = allow(&["*"]);
            for form in &forms {
                let canonical = canonical_host(form);
                prop_assert_eq!(canonical.as_deref(), Some(dotted.as_str()), "{}", form);
                prop_assert!(!names_only.decide(form).allowed, "{}", form);
                // `**` is every host, IP literals included: the same decision
                // the dotted form gets, whatever the spelling.
                prop_assert_eq!(star.decide(form), star.decide(&dotted), "{}", form);
                prop_assert!(allow(&[&dotted]).decide(form).allowed, "{}", form);
            }
        }

        #[test]
        fn ipv6_brackets_and_port(segs: [u16; 8], port: u16) {
            let ip = std::net::Ipv6Addr::from(segs);
            prop_assume!(ip.to_ipv4_mapped().is_none());
            let p = allow(&[&ip.to_string()]);
            let bracketed = format!("[{ip}]:{port}");
            prop_assert!(p.decide(&bracketed).allowed);
            prop_assert!(p.decide(&ip.to_string().to_uppercase()).allowed);
        }

        #[test]
        fn compile_never_panics(rule in "\\PC{0,30}", host in "\\PC{0,30}") {
            let s = spec(NetworkMode::Allowlist, &[&rule]);
            if let Ok(p) = Policy::compile(&s) {
                let _ = p.decide(&host);
            }
        }
    }
}
