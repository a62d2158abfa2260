//! Durations as operators write them in environment variables: Go's
//! `time.ParseDuration` syntax (`90s`, `10m`, `1h30m`, `1.5h`, `250ms`),
//! because the upstream variables (`ITERION_SANDBOX_PULL_TIMEOUT`,
//! `ITERION_SANDBOX_K8S_POD_READY_TIMEOUT`, `ITERION_SANDBOX_REAP_INTERVAL`…)
//! keep their meaning. Parsing only; what a bad value falls back to is
//! each variable's own rule.

use std::time::Duration;

/// Parse a Go-style duration. Returns `None` for anything Go's
/// `time.ParseDuration` would refuse, a negative value, or one too large
/// to be meant (over ~31,000 years).
pub fn parse_go_duration(raw: &str) -> Option<Duration> {
    let s = raw.trim();
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * factor;
    }
    if !total.is_finite() || total > 1e12 {
        return None;
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Some(Duration::ZERO));
        for bad in ["", "10", "-5s", "5x", "m", "1..2s", "1e400h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
