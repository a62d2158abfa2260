//! Kubernetes resource quantities for the sandbox pod's requests and
//! limits, validated the way upstream validates them at runner boot: non
//! zero, the suffix class of the resource (cores or millicores for CPU;
//! bytes with a decimal or binary suffix for memory), and comparable so a
//! limit below its request is caught before any pod exists.
//!
//! Hand-written because k8s-openapi's `Quantity` is an unchecked string
//! and the apimachinery parser has no Rust port; the grammar accepted here
//! is the common subset (no exponent forms such as `1e9`, at most three
//! decimals of a core), and anything outside it is refused, never guessed.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A CPU quantity (`2`, `0.5`, `250m`), compared in millicores.
#[derive(Debug, Clone)]
pub struct Cpu {
    text: String,
    millis: u64,
}

/// A memory quantity (`512Mi`, `1G`, `1073741824`), compared in bytes.
#[derive(Debug, Clone)]
pub struct Memory {
    text: String,
    bytes: u128,
}

macro_rules! ordered_by {
    ($ty:ty, $field:ident) => {
        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.$field == other.$field
            }
        }
        impl Eq for $ty {}
        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> Ordering {
                self.$field.cmp(&other.$field)
            }
        }
    };
}
ordered_by!(Cpu, millis);
ordered_by!(Memory, bytes);

/// `digits[.digits]` split into its integer and fraction parts.
fn decimal(number: &str) -> Option<(u128, &str)> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if number.contains('.') && (frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    Some((int.parse().ok()?, frac))
}

impl Cpu {
    /// Parse and validate.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let text = raw.trim();
        let class = "CPU is cores (`2`, `0.5`) or millicores (`250m`)";
        let millis = if let Some(n) = text.strip_suffix('m') {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("not a quantity; {class}"));
            }
            n.parse::<u64>().map_err(|_| "too large".to_owned())?
        } else {
            let (int, frac) = decimal(text).ok_or_else(|| {
                if text.ends_with(|c: char| c.is_ascii_alphabetic()) {
                    format!("wrong suffix for CPU; {class}")
                } else {
                    format!("not a quantity; {class}")
                }
            })?;
            if frac.len() > 3 {
                return Err("finer than a millicore".to_owned());
            }
            let frac_millis: u128 = format!("{frac:0<3}").parse().unwrap_or(0);
            let total = int
                .checked_mul(1000)
                .and_then(|v| v.checked_add(frac_millis))
                .ok_or_else(|| "too large".to_owned())?;
            u64::try_from(total).map_err(|_| "too large".to_owned())?
        };
        if millis == 0 {
            return Err("must be greater than zero".to_owned());
        }
        Ok(Self {
            text: text.to_owned(),
            millis,
        })
    }

    /// A quantity of `millis` millicores.
    pub fn from_millis(millis: u64) -> Self {
        Self {
            text: format!("{millis}m"),
            millis,
        }
    }

    /// As the operator wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Millicores.
    pub fn millis(&self) -> u64 {
        self.millis
    }

    /// The API type.
    pub fn quantity(&self) -> Quantity {
        Quantity(self.text.clone())
    }
}

impl Memory {
    /// Parse and validate.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let text = raw.trim();
        let class =
            "memory is bytes with an optional Ki/Mi/Gi/Ti/Pi/Ei or k/M/G/T/P/E suffix (`512Mi`)";
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let factor: u128 = match suffix {
            "" => 1,
            "Ki" => 1 << 10,
            "Mi" => 1 << 20,
            "Gi" => 1 << 30,
            "Ti" => 1 << 40,
            "Pi" => 1 << 50,
            "Ei" => 1 << 60,
            "k" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            "P" => 1_000_000_000_000_000,
            "E" => 1_000_000_000_000_000_000,
            "m" => return Err(format!("millibytes make no sense; {class}")),
            _ => return Err(format!("wrong suffix for memory; {class}")),
        };
        let (int, frac) = decimal(number).ok_or_else(|| format!("not a quantity; {class}"))?;
        if frac.len() > 18 {
            return Err("too many decimals".to_owned());
        }
        let scale = 10u128.pow(u32::try_from(frac.len()).unwrap_or(0));
        let frac_value: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| "not a quantity".to_owned())?
        };
        // Fractional bytes round up, as the API server does.
        let bytes = int
            .checked_mul(factor)
            .and_then(|whole| {
                frac_value
                    .checked_mul(factor)
                    .map(|f| whole + f.div_ceil(scale))
            })
            .ok_or_else(|| "too large".to_owned())?;
        if bytes == 0 {
            return Err("must be greater than zero".to_owned());
        }
        Ok(Self {
            text: text.to_owned(),
            bytes,
        })
    }

    /// A quantity of `bytes` bytes.
    pub fn from_bytes(bytes: u64) -> Self {
        Self {
            text: bytes.to_string(),
            bytes: u128::from(bytes),
        }
    }

    /// As the operator wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Bytes.
    pub fn bytes(&self) -> u128 {
        self.bytes
    }

    /// The API type.
    pub fn quantity(&self) -> Quantity {
        Quantity(self.text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_grammar() {
        for (raw, millis) in [
            ("2", 2000),
            ("0.5", 500),
            ("250m", 250),
            (" 1.25 ", 1250),
            ("0.001", 1),
        ] {
            assert_eq!(Cpu::parse(raw).map(|c| c.millis()), Ok(millis), "{raw}");
        }
        for bad in [
            "", "0", "0m", "0.0", "m", "1Gi", "1k", "-1", "1.", ".5", "0.0001", "1e3", "2 cores",
        ] {
            assert!(Cpu::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn memory_grammar() {
        for (raw, bytes) in [
            ("512Mi", 512u128 << 20),
            ("1G", 1_000_000_000),
            ("1.5Gi", 3 << 29),
            ("4096", 4096),
            ("1k", 1000),
            ("1Ei", 1 << 60),
        ] {
            assert_eq!(Memory::parse(raw).map(|m| m.bytes()), Ok(bytes), "{raw}");
        }
        for bad in [
            "", "0", "0Mi", "500m", "1GB", "1gi", "lots", "-1Gi", "1e9", "Mi",
        ] {
            assert!(Memory::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn compares_by_value_not_text() {
        let a = Memory::parse("1Gi").expect("ok");
        let b = Memory::parse("1024Mi").expect("ok");
        assert_eq!(a, b);
        assert!(Memory::parse("1G").expect("ok") < a);
        assert!(Cpu::parse("1").expect("ok") == Cpu::parse("1000m").expect("ok"));
    }
}
