//! Byte sizes as operators write them: `N`, `NKiB`, `NMiB`, `NGiB`, and the
//! short `K`/`M`/`G` (powers of 1024, `docs/reference/SPEC.md` §4).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// 256 MiB: the default read-back cap per declared path.
    pub const DEFAULT_READBACK_CAP: ByteSize = ByteSize(256 * 1024 * 1024);
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (unit, factor) in UNITS {
            if self.0 >= factor && self.0.is_multiple_of(factor) {
                return write!(f, "{}{unit}", self.0 / factor);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// Why a size string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {value:?}: expected N, NKiB, NMiB, NGiB (or K, M, G)")]
pub struct InvalidSize {
    /// The rejected text.
    pub value: String,
}

/// Parse a size such as `256MiB`, `10G` or `4096`.
pub fn parse_size(text: &str) -> Result<ByteSize, InvalidSize> {
    let err = || InvalidSize {
        value: text.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    if digits.is_empty() {
        return Err(err());
    }
    let n: u64 = digits.parse().map_err(|_| err())?;
    let factor: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "KB" | "kb" | "Ki" => 1 << 10,
        "M" | "m" | "MiB" | "MB" | "mb" | "Mi" => 1 << 20,
        "G" | "g" | "GiB" | "GB" | "gb" | "Gi" => 1 << 30,
        _ => return Err(err()),
    };
    n.checked_mul(factor).map(ByteSize).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096"), Ok(ByteSize(4096)));
        assert_eq!(parse_size("256MiB"), Ok(ByteSize::DEFAULT_READBACK_CAP));
        assert_eq!(parse_size("2K"), Ok(ByteSize(2048)));
        assert_eq!(parse_size("1GiB"), Ok(ByteSize(1 << 30)));
        for bad in ["", "MiB", "-1", "1.5G", "1T", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn displays_round_trip() {
        for s in ["256MiB", "1GiB", "3KiB", "1000"] {
            let parsed = parse_size(s).expect("valid");
            assert_eq!(parsed.to_string(), s);
        }
    }
}
