//! The egress policy: a `NetworkSpec` (whose rules the core grammar,
//! `iterion_core::net`, already parsed) compiled into a [`Policy`] that
//! decides whether a host (and every address it resolves to) may be
//! reached. This is the one place "is a host allowed" lives; the proxy and
//! the doctor both call it. It does no I/O.
//!
//! Semantics follow facts §2.3; an unknown preset cannot reach here (the
//! preset name is parsed, and refused, where the block is read).

use std::net::IpAddr;

pub use iterion_core::net::canonical_host;
use iterion_core::net::{Host, NetRule, unmap_ip};
use iterion_core::{NetworkMode, NetworkSpec};

use crate::error::NetproxyError;
use crate::preset;

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the host may be reached.
    pub allowed: bool,
    /// The rule that decided, as written (`None` when the mode default decided).
    pub rule: Option<String>,
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
    rules: Vec<NetRule>,
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
    /// (facts §7.1 [I], compile warning C312). Preset rules come first,
    /// then the block's (facts §2.3).
    pub fn compile(spec: &NetworkSpec) -> Result<Self, NetproxyError> {
        let mode = spec.effective_mode();
        let preset_rules = spec.preset.map(preset::rules).unwrap_or(&[]);
        let mut rules = Vec::with_capacity(preset_rules.len() + spec.rules.len());
        for r in preset_rules {
            // Shipped presets are tested to parse; a failure here is a bug, refused not ignored.
            rules.push(r.parse().map_err(|source| NetproxyError::PresetRule {
                preset: spec.preset.map(|p| p.as_str()).unwrap_or_default(),
                source,
            })?);
        }
        rules.extend(spec.rules.iter().cloned());
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
        let host = Host::parse(host);
        if host.is_unnameable() {
            return Decision {
                allowed: false,
                rule: None,
            };
        }
        match self.rules.iter().rev().find(|r| r.matches(&host)) {
            Some(r) => Decision {
                allowed: !r.negated(),
                rule: Some(r.as_str().to_owned()),
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
        let addr = unmap_ip(addr);
        let host = Host::Ip(addr);
        let last = self
            .rules
            .iter()
            .rev()
            .find(|r| r.is_ip_rule() && r.matches(&host));
        match last {
            Some(r) if r.negated() => Err(AddressRefusal {
                addr,
                rule: Some(r.as_str().to_owned()),
            }),
            Some(_) => Ok(()),
            None if is_sensitive(addr) || is_host_address(addr) => {
                Err(AddressRefusal { addr, rule: None })
            }
            None => Ok(()),
        }
    }
}

impl Policy {
    /// Could a request to some host `binding` (a secret's `egress:`
    /// pattern) pass this policy? `Err` says why none could: the compile
    /// check of a binding (DSL `C325`), answered by [`Policy::decide`] on
    /// the binding's own host, or for a wildcard on a host it names (a
    /// probe label under its suffix, and every exact host a rule of this
    /// policy allows under it). A CIDR binding is judged by its rules only
    /// at run time.
    pub fn binding_reachable(&self, binding: &NetRule) -> Result<(), String> {
        if self.mode == NetworkMode::Open {
            return Ok(());
        }
        let text = binding.as_str().to_lowercase();
        let mut probes: Vec<String> = Vec::new();
        if let Some(suffix) = text.strip_prefix("**.") {
            probes.push(suffix.to_owned());
            probes.push(format!("{BINDING_PROBE}.{suffix}"));
        } else if let Some(suffix) = text.strip_prefix("*.") {
            probes.push(format!("{BINDING_PROBE}.{suffix}"));
        } else if text == "*" {
            probes.push(BINDING_PROBE.to_owned());
        } else if text.contains('/') {
            return Ok(());
        } else {
            probes.push(text.clone());
        }
        // Exact hosts the policy names that the binding covers.
        probes.extend(
            self.rules
                .iter()
                .filter(|r| !r.negated() && !r.as_str().contains('*'))
                .map(|r| r.as_str().to_lowercase())
                .filter(|h| binding.matches(&Host::parse(h))),
        );
        if probes.iter().any(|h| self.decide(h).allowed) {
            return Ok(());
        }
        let d = self.decide(&probes[0]);
        Err(match d.rule {
            Some(rule) => format!("rule `{rule}` refuses it"),
            None => format!("no rule of the {} allows it", self.mode.as_str()),
        })
    }
}

/// A label no real host is expected to carry, standing for "some host"
/// under a wildcard binding.
const BINDING_PROBE: &str = "iterion-binding-probe";

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
            rules: rules.iter().map(|s| s.parse().unwrap()).collect(),
            ..NetworkSpec::default()
        }
    }

    fn allow(rules: &[&str]) -> Policy {
        Policy::compile(&spec(NetworkMode::Allowlist, rules)).unwrap()
    }

    #[test]
    fn a_binding_is_reachable_only_where_the_policy_lets_some_host_through() {
        let rule = |s: &str| -> NetRule { s.parse().unwrap() };
        let p = allow(&[
            "api.example.com",
            "**.corp.test",
            "!bad.corp.test",
            "10.0.0.0/8",
        ]);
        assert!(p.binding_reachable(&rule("api.example.com")).is_ok());
        assert!(
            p.binding_reachable(&rule("*.example.com")).is_ok(),
            "covers an allowed host"
        );
        assert!(p.binding_reachable(&rule("x.corp.test")).is_ok());
        assert!(p.binding_reachable(&rule("10.1.2.3")).is_ok());
        let why = p.binding_reachable(&rule("bad.corp.test")).unwrap_err();
        assert!(why.contains("!bad.corp.test"), "{why}");
        let why = p.binding_reachable(&rule("evil.test")).unwrap_err();
        assert!(why.contains("allowlist"), "{why}");
        assert!(p.binding_reachable(&rule("*.other.test")).is_err());
        // Open: every binding is reachable (the run decides placeholders).
        assert!(Policy::open().binding_reachable(&rule("evil.test")).is_ok());
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
            let err = bad.parse::<NetRule>().unwrap_err();
            assert_eq!(err.kind.code(), "invalid_address", "{bad}");
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
            let err = rule.parse::<NetRule>().unwrap_err();
            assert_eq!(err.kind.code(), "numeric_wildcard", "{rule}");
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
            rules: vec!["example.com".parse().unwrap()],
            ..NetworkSpec::default()
        };
        let p = Policy::compile(&s).unwrap();
        assert_eq!(p.mode(), NetworkMode::Open);
        assert!(!p.needs_proxy());
        assert!(!Policy::from_spec(None).unwrap().needs_proxy());
        assert!(allow(&[]).needs_proxy());
    }

    #[test]
    fn presets() {
        let mut s = spec(NetworkMode::Allowlist, &["!api.openai.com"]);
        s.preset = Some(iterion_core::NetPreset::IterionDefault);
        let p = Policy::compile(&s).unwrap();
        assert!(p.decide("api.anthropic.com").allowed);
        assert!(p.decide("us-east-1.bedrock.amazonaws.com").allowed);
        assert!(p.decide("github.com").allowed);
        assert!(p.decide("api.github.com").allowed);
        // The block's rules come after the preset's: the deny wins.
        assert!(!p.decide("api.openai.com").allowed);
        assert!(!p.decide("example.com").allowed);
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
            let one = format!("*.{b}.{c}.{d}").parse::<NetRule>();
            let any = format!("**.{c}.{d}").parse::<NetRule>();
            prop_assert!(one.is_err() && any.is_err());
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
        fn decide_never_panics(rule in "\\PC{0,30}", host in "\\PC{0,30}") {
            if let Ok(rule) = rule.parse::<NetRule>() {
                let s = NetworkSpec { mode: Some(NetworkMode::Allowlist), rules: vec![rule], ..NetworkSpec::default() };
                let p = Policy::compile(&s).unwrap();
                let _ = p.decide(&host);
            }
        }
    }
}
