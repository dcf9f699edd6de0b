//! Resource quantities (`500m`, `2`, `1.5Gi`) read exactly and compared, without floating point.

use std::cmp::Ordering;

/// Suffixes and what they multiply by: a power of two (binary SI) or of ten (decimal SI).
const SUFFIXES: [(&str, Scale); 15] = [
    ("Ki", Scale::Binary(10)),
    ("Mi", Scale::Binary(20)),
    ("Gi", Scale::Binary(30)),
    ("Ti", Scale::Binary(40)),
    ("Pi", Scale::Binary(50)),
    ("Ei", Scale::Binary(60)),
    ("n", Scale::Decimal(-9)),
    ("u", Scale::Decimal(-6)),
    ("m", Scale::Decimal(-3)),
    ("k", Scale::Decimal(3)),
    ("M", Scale::Decimal(6)),
    ("G", Scale::Decimal(9)),
    ("T", Scale::Decimal(12)),
    ("P", Scale::Decimal(15)),
    ("E", Scale::Decimal(18)),
];

#[derive(Clone, Copy)]
enum Scale {
    Binary(u32),
    Decimal(i32),
}

/// A non-negative quantity as `mantissa × 10^exponent`, exactly.
#[derive(Clone, Copy, Debug)]
pub struct QuantityValue {
    mantissa: u128,
    exponent: i32,
}

impl QuantityValue {
    /// Reads `text`: digits with at most one `.`, then an optional suffix. Signs and exponent
    /// forms are not accepted (no resource errand sets needs them), nor numbers too large to
    /// hold exactly.
    pub fn parse(text: &str) -> Option<Self> {
        let (number, scale) = SUFFIXES
            .iter()
            .find_map(|(suffix, scale)| Some((text.strip_suffix(suffix)?, *scale)))
            .unwrap_or((text, Scale::Decimal(0)));
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.len() + fraction.len() == 0 || !digits_only(whole) || !digits_only(fraction) {
            return None;
        }
        let mut mantissa: u128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(u128::from(digit - b'0'))?;
        }
        let mut exponent = -i32::try_from(fraction.len()).ok()?;
        match scale {
            Scale::Binary(bits) => mantissa = mantissa.checked_mul(1u128 << bits)?,
            Scale::Decimal(power) => exponent += power,
        }
        Some(Self { mantissa, exponent })
    }

    /// Whether this is a whole number (no fraction left after the suffix).
    pub fn is_whole(&self) -> bool {
        self.exponent >= 0
            || self.mantissa == 0
            || 10u128
                .checked_pow(self.exponent.unsigned_abs())
                .is_some_and(|divisor| self.mantissa.is_multiple_of(divisor))
    }
}

impl PartialEq for QuantityValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for QuantityValue {}

impl PartialOrd for QuantityValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for QuantityValue {
    /// Compares `a × 10^x` with `b × 10^y` by scaling the one with the larger exponent down to
    /// the other's: if that overflows, it is the larger (the other mantissa fits in a `u128`).
    fn cmp(&self, other: &Self) -> Ordering {
        if self.mantissa == 0 || other.mantissa == 0 {
            return self.mantissa.cmp(&other.mantissa);
        }
        let scaled = |value: &Self, by: u32| {
            10u128
                .checked_pow(by)
                .and_then(|factor| value.mantissa.checked_mul(factor))
        };
        match self.exponent.cmp(&other.exponent) {
            Ordering::Equal => self.mantissa.cmp(&other.mantissa),
            Ordering::Greater => {
                let by = self.exponent.abs_diff(other.exponent);
                scaled(self, by).map_or(Ordering::Greater, |m| m.cmp(&other.mantissa))
            }
            Ordering::Less => {
                let by = other.exponent.abs_diff(self.exponent);
                scaled(other, by).map_or(Ordering::Less, |m| self.mantissa.cmp(&m))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn q(text: &str) -> QuantityValue {
        QuantityValue::parse(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        for ok in [
            "1",
            "500m",
            "0.5",
            "4Gi",
            "128974848",
            "129M",
            "1.",
            ".5",
            "0",
        ] {
            assert!(QuantityValue::parse(ok).is_some(), "{ok}");
        }
        for bad in ["", "Gi", "1.2.3", "-1", "1Xi", ".", "1e3", "+1", " 1"] {
            assert!(QuantityValue::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn quantities_compare_across_suffixes() {
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("1k"), q("1000"));
        assert!(q("1001m") > q("1"));
        assert!(q("1025Mi") > q("1Gi"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("0") < q("1n"));
        assert!(q("99999999999999999999999999999999E") > q("1Ei"));
        assert!(q("1n") < q("99999999999999999999999999999999"));
    }

    #[test]
    fn whole_numbers() {
        assert!(q("2").is_whole());
        assert!(q("2000m").is_whole());
        assert!(q("1k").is_whole());
        assert!(!q("1.5").is_whole());
        assert!(!q("500m").is_whole());
    }

    proptest! {
        #[test]
        fn order_agrees_with_the_integers(a in 0u64..1_000_000_000_000, b in 0u64..1_000_000_000_000) {
            let (qa, qb) = (q(&format!("{a}m")), q(&format!("{b}m")));
            prop_assert_eq!(qa.cmp(&qb), a.cmp(&b));
            let (ka, kb) = (q(&format!("{a}Ki")), q(&format!("{}", b.saturating_mul(1024))));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }

        #[test]
        fn any_text_parses_or_not_without_panicking(text in "\\PC{0,40}") {
            let _ = QuantityValue::parse(&text);
        }
    }
}
