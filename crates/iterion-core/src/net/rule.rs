//! One egress rule (`host.example.com`, `*.x`, `**.x`, `**`, `*`, an IP
//! literal, a CIDR, any of them behind `!`) and the preset names. The one
//! parser is [`NetRule`]'s `FromStr`; serde goes through it.
//!
//! Semantics follow facts §2.3 with deliberate divergences, all in the
//! deny direction: a DNS rule carrying a `:port` is rejected instead of
//! silently never matching (in a denylist that would fail open), a rule
//! whose last label is a number must be a valid address (see `literal`),
//! and a wildcard over a numeric suffix is rejected (it could only target
//! IP literals, which no DNS pattern matches). Whitespace inside a
//! pattern is refused too: the doctor's old check refused it while the
//! proxy accepted a rule that could never match; deny wins.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::host::{Host, strip_brackets, strip_dot, unmap_ip};
use super::literal;

/// A rule of a `network:` block that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network rule `{rule}`: {kind}")]
pub struct NetRuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub kind: NetRuleErrorKind,
}

impl NetRuleError {
    /// Stable machine-readable code (the kind is [`NetRuleErrorKind::code`]).
    pub fn code(&self) -> &'static str {
        "NETWORK_RULE_INVALID"
    }
}

/// The rejected rule shapes of facts §2.3 (plus those of the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetRuleErrorKind {
    /// The rule is empty or only whitespace.
    #[error("empty rule")]
    Empty,
    /// The rule is a bare `!`.
    #[error("bare `!` negates nothing")]
    BareNegation,
    /// A `*` appears outside the leading label (`a*b.com`, `foo.*.com`).
    #[error("a wildcard is only allowed as the whole leading label (`*.x`, `**.x`)")]
    WildcardNotLeading,
    /// `*.` or `**.` with nothing after the dot.
    #[error("wildcard with an empty suffix (write `**` to match everything)")]
    WildcardEmptySuffix,
    /// More than one wildcard in one rule.
    #[error("more than one wildcard")]
    MultipleWildcards,
    /// Whitespace or a control character inside the pattern: no host
    /// carries one, so the rule could never match (in a denylist, silently
    /// failing open).
    #[error("contains whitespace or a control character")]
    Whitespace,
    /// A rule containing `/` that is not `address/prefix`.
    #[error("invalid CIDR: {detail}")]
    InvalidCidr {
        /// What did not parse.
        detail: String,
    },
    /// A DNS rule naming a port; rules match hosts only.
    #[error("rules match hosts, not ports (drop the `:port`)")]
    PortInRule,
    /// A numeric rule (its last label is a number) that is no valid
    /// address: it can never be a name (see `literal`).
    #[error("a numeric host that is no valid IP address (write the address dotted)")]
    InvalidAddress,
    /// A wildcard over a numeric suffix (`*.0.2`): every host ending in a
    /// number is an IP literal, which no DNS pattern matches, so the rule
    /// could never match (in a denylist, silently failing open).
    #[error(
        "a wildcard over a numeric suffix matches nothing: hosts ending in a number are IP addresses (write a CIDR)"
    )]
    NumericWildcard,
}

impl NetRuleErrorKind {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Empty => "empty_rule",
            Self::BareNegation => "bare_negation",
            Self::WildcardNotLeading => "wildcard_not_leading",
            Self::WildcardEmptySuffix => "wildcard_empty_suffix",
            Self::MultipleWildcards => "multiple_wildcards",
            Self::Whitespace => "whitespace",
            Self::InvalidCidr { .. } => "invalid_cidr",
            Self::PortInRule => "port_in_rule",
            Self::InvalidAddress => "invalid_address",
            Self::NumericWildcard => "numeric_wildcard",
        }
    }
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
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask32(prefix)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask128(prefix)).into()),
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

/// One parsed pattern (without its negation).
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

/// Lower-case and IDN-encode a DNS pattern body (after its wildcard label).
fn canonical_dns_pattern(s: &str) -> String {
    let lower = s.to_lowercase();
    idna::domain_to_ascii(&lower).unwrap_or(lower)
}

fn parse_pattern(body: &str) -> Result<Pattern, NetRuleErrorKind> {
    if body.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(NetRuleErrorKind::Whitespace);
    }
    if body.contains('/') {
        return Cidr::parse(body)
            .map(Pattern::Cidr)
            .map_err(|detail| NetRuleErrorKind::InvalidCidr { detail });
    }
    if !body.starts_with('*') {
        match literal::ip_of(strip_dot(strip_brackets(body))) {
            Ok(Some(ip)) => return Ok(Pattern::Ip(unmap_ip(ip))),
            Ok(None) => {}
            Err(()) => return Err(NetRuleErrorKind::InvalidAddress),
        }
    }
    match body {
        "**" => return Ok(Pattern::Everything),
        "*" => return Ok(Pattern::SingleLabel),
        _ => {}
    }
    let body = body.strip_suffix('.').unwrap_or(body);
    let wildcards = body.split('.').filter(|l| l.contains('*')).count()
        + body
            .split('.')
            .filter(|l| l.matches('*').count() > 2)
            .count();
    let (lead, rest) = body.split_once('.').unwrap_or((body, ""));
    if wildcards > 1 {
        return Err(NetRuleErrorKind::MultipleWildcards);
    }
    if wildcards == 1 && lead != "*" && lead != "**" {
        return Err(NetRuleErrorKind::WildcardNotLeading);
    }
    if body.contains(':') {
        return Err(NetRuleErrorKind::PortInRule);
    }
    match lead {
        "*" | "**" if rest.is_empty() => Err(NetRuleErrorKind::WildcardEmptySuffix),
        "*" | "**" if literal::numeric_ipv4(rest) != literal::Numeric::Name => {
            Err(NetRuleErrorKind::NumericWildcard)
        }
        "*" => Ok(Pattern::OneLabel(canonical_dns_pattern(rest))),
        "**" => Ok(Pattern::AnyLabels(canonical_dns_pattern(rest))),
        _ => Ok(Pattern::Exact(canonical_dns_pattern(body))),
    }
}

/// One parsed egress rule: its pattern, its negation and its text (trimmed,
/// as written) for reporting (`x-iterion-egress: …; rule=…`, events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NetRule {
    negated: bool,
    pattern: Pattern,
    text: String,
}

impl NetRule {
    /// Whether a match denies (`!pattern`).
    pub fn negated(&self) -> bool {
        self.negated
    }

    /// The rule as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the rule names addresses (an IP literal or a CIDR) rather
    /// than names: only those may allow a sensitive resolved address.
    pub fn is_ip_rule(&self) -> bool {
        matches!(self.pattern, Pattern::Ip(_) | Pattern::Cidr(_))
    }

    /// Whether the pattern matches `host`, negation aside.
    pub fn matches(&self, host: &Host) -> bool {
        self.pattern.matches(host)
    }
}

impl FromStr for NetRule {
    type Err = NetRuleError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = |kind| NetRuleError {
            rule: raw.to_owned(),
            kind,
        };
        let text = raw.trim().to_lowercase();
        if text.is_empty() {
            return Err(err(NetRuleErrorKind::Empty));
        }
        let (negated, body) = match text.strip_prefix('!') {
            Some(rest) => (true, rest.trim()),
            None => (false, text.as_str()),
        };
        if body.is_empty() {
            return Err(err(NetRuleErrorKind::BareNegation));
        }
        Ok(Self {
            negated,
            pattern: parse_pattern(body).map_err(err)?,
            text: raw.trim().to_owned(),
        })
    }
}

impl TryFrom<String> for NetRule {
    type Error = NetRuleError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<NetRule> for String {
    fn from(r: NetRule) -> Self {
        r.text
    }
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A shipped rule preset (facts §7.4); only `iterion-default` exists. Its
/// host list is `iterion_netproxy::preset`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum NetPreset {
    /// LLM APIs, package registries, forges, Debian and Nix mirrors.
    IterionDefault,
}

impl NetPreset {
    /// The name workflows write.
    pub fn as_str(self) -> &'static str {
        match self {
            NetPreset::IterionDefault => "iterion-default",
        }
    }
}

impl fmt::Display for NetPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A preset name that does not exist. Upstream resolves an unknown preset
/// to nothing; it is refused here so a typo cannot silently drop the allow
/// rules the author meant (deny wins, loudly).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network preset `{name}` (known: iterion-default)")]
pub struct UnknownPreset {
    /// The name as written.
    pub name: String,
}

impl UnknownPreset {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        "NETWORK_PRESET_UNKNOWN"
    }
}

/// Names compare trimmed and case-insensitively: the proxy, which enforces
/// the preset, always read them so (the doctor's exact check disagreed and
/// is gone), and a workflow that runs today keeps running.
impl FromStr for NetPreset {
    type Err = UnknownPreset;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim()
            .eq_ignore_ascii_case(NetPreset::IterionDefault.as_str())
        {
            Ok(NetPreset::IterionDefault)
        } else {
            Err(UnknownPreset { name: s.to_owned() })
        }
    }
}

impl TryFrom<String> for NetPreset {
    type Error = UnknownPreset;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<NetPreset> for String {
    fn from(p: NetPreset) -> Self {
        p.as_str().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(rule: &str) -> Option<&'static str> {
        rule.parse::<NetRule>().err().map(|e| e.kind.code())
    }

    #[test]
    fn rejected_shapes() {
        for (rule, want) in [
            ("ok.com", None),
            ("", Some("empty_rule")),
            ("  ", Some("empty_rule")),
            ("!", Some("bare_negation")),
            ("! ", Some("bare_negation")),
            ("a*b.com", Some("wildcard_not_leading")),
            ("foo.*.com", Some("wildcard_not_leading")),
            ("*.", Some("wildcard_empty_suffix")),
            ("**.", Some("wildcard_empty_suffix")),
            ("*.*.com", Some("multiple_wildcards")),
            ("**.*.com", Some("multiple_wildcards")),
            ("10.0.0.0/33", Some("invalid_cidr")),
            ("nope/8", Some("invalid_cidr")),
            ("1.2.3.4/x", Some("invalid_cidr")),
            ("example.com:443", Some("port_in_rule")),
            ("***.com", Some("multiple_wildcards")),
            ("a b", Some("whitespace")),
            ("!evil .com", Some("whitespace")),
            ("x.com\u{7f}", Some("whitespace")),
            ("! x.com", None),
            ("1.2.3.4.5", Some("invalid_address")),
            ("256.0.0.1", Some("invalid_address")),
            ("4294967296", Some("invalid_address")),
            ("example.123", Some("invalid_address")),
            ("08.1.1.1", Some("invalid_address")),
            ("*.254.169.254", Some("numeric_wildcard")),
            ("**.169.254", Some("numeric_wildcard")),
            ("!*.0.2", Some("numeric_wildcard")),
            ("*.0x10", Some("numeric_wildcard")),
            ("*", None),
            ("**", None),
            ("!x.com", None),
            ("10.0.0.0/8", None),
            ("::1/128", None),
            ("[2001:db8::1]", None),
            ("2886729730", None),
        ] {
            assert_eq!(kind(rule), want, "{rule:?}");
        }
        let e = "a*b.com".parse::<NetRule>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "network rule `a*b.com`: a wildcard is only allowed as the whole leading label (`*.x`, `**.x`)"
        );
    }

    #[test]
    fn serde_goes_through_the_parser() {
        let r: NetRule = serde_json::from_str("\" !**.Example.com \"").unwrap();
        assert!(r.negated());
        assert_eq!(r.as_str(), "!**.Example.com");
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"!**.Example.com\"");
        assert!(serde_json::from_str::<NetRule>("\"a*b.com\"").is_err());
        let p: NetPreset = serde_json::from_str("\"Iterion-Default\"").unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"iterion-default\"");
        assert!(serde_json::from_str::<NetPreset>("\"corp\"").is_err());
        assert!("".parse::<NetPreset>().is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(rule in "\\PC{0,30}") {
            if let Ok(r) = rule.parse::<NetRule>() {
                let again: NetRule = r.as_str().parse().expect("its own text parses");
                prop_assert_eq!(again, r);
            }
        }
    }
}
