//! What counts as an IP literal in a host: the one answer the policy, the
//! proxy's target parsing and its dialer share.
//!
//! Why more than `IpAddr::from_str`: the system resolver (`getaddrinfo`,
//! which runs `inet_aton` first) reads `2887581698`, `0xac100002`,
//! `0254.16.0.2`, `127.1` and `0x7f.1` as IPv4 addresses, while the
//! std parser sees names — so a rule like `*` ("any single-label name")
//! used to match `2887581698` and the dialler then reached 172.16.0.2
//! (issue 19, item 10). Here a host whose last label is a number is an
//! IPv4 literal in any `inet_aton` shape, and one that looks numeric but
//! is no valid address is refused: it is never a name. The rule is the
//! WHATWG URL host parser's "ends in a number", which browsers use for the
//! same reason. This module owns the classification only; rules live in
//! `super::rule`, the host a request names in `super::host`.

use std::net::{IpAddr, Ipv4Addr};

/// How a host string reads once brackets, port and trailing dot are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Numeric {
    /// Not numeric: a DNS name (or something `classify` treats as one).
    Name,
    /// An IPv4 address in one of the `inet_aton` shapes.
    V4(Ipv4Addr),
    /// Numeric-looking (its last label is a number) but no valid address:
    /// `1.2.3.4.5`, `256.1.1.1`, `08.1.1.1`, `example.123`.
    Invalid,
}

/// Classify `host` (already stripped of brackets, port and one trailing
/// dot). Standard dotted-quad and IPv6 text are the caller's
/// `IpAddr::from_str`; this covers every other numeric shape.
pub(crate) fn numeric_ipv4(host: &str) -> Numeric {
    let mut parts: Vec<&str> = host.split('.').collect();
    // WHATWG: one empty last label (a trailing dot) is dropped first.
    if parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    let Some(last) = parts.last() else {
        return Numeric::Name;
    };
    if !is_number_label(last) {
        return Numeric::Name;
    }
    if parts.len() > 4 {
        return Numeric::Invalid;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        match parse_part(part) {
            Some(v) => values.push(v),
            None => return Numeric::Invalid,
        }
    }
    // inet_aton: every part but the last is one byte; the last fills the
    // bytes that remain (`a.b` = a, then b over 24 bits).
    let (head, tail) = values.split_at(values.len() - 1);
    if head.iter().any(|v| *v > 0xff) {
        return Numeric::Invalid;
    }
    let tail_bits = 8 * (4 - head.len() as u32);
    let tail = tail[0];
    if tail_bits < 64 && tail >> tail_bits != 0 {
        return Numeric::Invalid;
    }
    let mut addr: u64 = 0;
    for v in head {
        addr = (addr << 8) | v;
    }
    addr = (addr << tail_bits) | tail;
    match u32::try_from(addr) {
        Ok(a) => Numeric::V4(Ipv4Addr::from(a)),
        Err(_) => Numeric::Invalid,
    }
}

/// The whole classification of a stripped host: an IP (std text or an
/// `inet_aton` shape), a name, or an invalid numeric form.
pub(crate) fn ip_of(host: &str) -> Result<Option<IpAddr>, ()> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Some(ip));
    }
    match numeric_ipv4(host) {
        Numeric::Name => Ok(None),
        Numeric::V4(v4) => Ok(Some(IpAddr::V4(v4))),
        Numeric::Invalid => Err(()),
    }
}

/// A label the resolver would read as a number: decimal digits, or `0x`
/// followed by hex digits (`0x` alone is zero, as in WHATWG).
fn is_number_label(label: &str) -> bool {
    if label.is_empty() {
        return false;
    }
    if let Some(hex) = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"))
    {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    label.bytes().all(|b| b.is_ascii_digit())
}

/// One part: `0x…` hex, `0…` octal, else decimal; `None` when it is not a
/// number of that radix or does not fit 64 bits.
fn parse_part(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            if hex.is_empty() {
                return Some(0);
            }
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inet_aton_shapes() {
        let v4 = |s: &str| match numeric_ipv4(s) {
            Numeric::V4(a) => a.to_string(),
            other => format!("{other:?}"),
        };
        for (input, want) in [
            ("2886729730", "172.16.0.2"),
            ("0xac100002", "172.16.0.2"),
            ("0XAC100002", "172.16.0.2"),
            ("025404000002", "172.16.0.2"),
            ("127.1", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
            ("169.254.43518", "169.254.169.254"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("4294967295", "255.255.255.255"),
            ("1.2.3.4", "1.2.3.4"),
            ("1.2.3.", "1.2.0.3"),
        ] {
            assert_eq!(v4(input), want, "{input}");
        }
        for bad in [
            "4294967296",
            "1.2.3.4.5",
            "256.1.1.1",
            "1.256.1.1",
            "1.2.65536",
            "08.1.1.1",
            "1..2",
            "example.123",
            "a.b.0x10",
            "99999999999999999999999",
        ] {
            assert_eq!(numeric_ipv4(bad), Numeric::Invalid, "{bad}");
        }
        for name in [
            "example.com",
            "1.2.3.com",
            "deadbeef",
            "0x1g",
            "1.2.3..",
            "0xdeadbeef.com",
            "intranet",
            "1e3",
        ] {
            assert_eq!(numeric_ipv4(name), Numeric::Name, "{name}");
        }
    }
}
