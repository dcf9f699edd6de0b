//! Resource quantities (`500m`, `1.5`, `4Gi`, `1e3`) parsed by Kubernetes' own grammar, so every errand component accepts exactly what the API server does, and compared exactly, without floating point.
//!
//! `<signedNumber><suffix>`, where the number is `digits`, `digits.digits`, `digits.` or
//! `.digits`, and the suffix is binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`, ``, `k`, `M`,
//! `G`, `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`). The scanner follows
//! `k8s.io/apimachinery`'s `parseQuantityString` step by step, including its leniencies
//! (`1.G` and `.5` are quantities, and a bare suffix such as `Gi` is zero), and so do its
//! error messages.

use std::cmp::Ordering;
use std::fmt;

/// A parsed quantity: `±digits × 10^exponent × 2^binary_exponent`, exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedQuantity {
    /// Whether the value is below zero.
    pub negative: bool,
    /// The significant digits, without leading or trailing zeros (`""` for zero).
    digits: String,
    /// Power of ten applied to `digits`.
    exponent: i64,
    /// Power of two of a binary suffix (`Ki` is 10).
    binary_exponent: u32,
}

/// Why a text is not a quantity, in Kubernetes' words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// The text does not have the shape of a quantity.
    FormatWrong,
    /// The suffix is not one Kubernetes knows.
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantityError::FormatWrong => f.write_str(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ),
            QuantityError::Suffix => f.write_str("unable to parse quantity's suffix"),
        }
    }
}

impl std::error::Error for QuantityError {}

const SUFFIX_CHARS: &[u8] = b"eEinumkKMGTP";

/// Parses `text` as Kubernetes parses a quantity.
pub fn parse_quantity(text: &str) -> Result<ParsedQuantity, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut negative = false;
    match bytes[0] {
        b'-' => {
            negative = true;
            pos = 1;
        }
        b'+' => pos = 1,
        _ => {}
    }
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    let whole_start = pos;
    while pos < end && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    let whole = &text[whole_start..pos];
    let mut fraction = "";
    if pos < end && bytes[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        fraction = &text[start..pos];
    }
    let suffix_start = pos;
    while pos < end && SUFFIX_CHARS.contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && matches!(bytes[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    let (exponent, binary_exponent) = suffix(&text[suffix_start..])?;
    Ok(ParsedQuantity::new(
        negative,
        whole,
        fraction,
        exponent,
        binary_exponent,
    ))
}

/// The powers of ten and two a suffix stands for.
fn suffix(suffix: &str) -> Result<(i64, u32), QuantityError> {
    let decimal = match suffix {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(exponent) = decimal {
        return Ok((exponent, 0));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(binary) = binary {
        return Ok((0, binary));
    }
    match suffix.as_bytes() {
        [b'e' | b'E', _, ..] => suffix[1..]
            .parse::<i32>()
            .map(|e| (i64::from(e), 0))
            .map_err(|_| QuantityError::Suffix),
        _ => Err(QuantityError::Suffix),
    }
}

impl ParsedQuantity {
    fn new(negative: bool, whole: &str, fraction: &str, exponent: i64, binary: u32) -> Self {
        let all = format!("{whole}{fraction}");
        let mut exponent = exponent - fraction.len() as i64;
        let trimmed_end = all.trim_end_matches('0');
        exponent += (all.len() - trimmed_end.len()) as i64;
        let digits = trimmed_end.trim_start_matches('0').to_owned();
        let zero = digits.is_empty();
        Self {
            negative: negative && !zero,
            exponent: if zero { 0 } else { exponent },
            binary_exponent: if zero { 0 } else { binary },
            digits,
        }
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether the value is a whole number (`2`, `1e3`, `2000m`, `1Ki`), as extended resources
    /// such as `nvidia.com/gpu` must be.
    pub fn is_whole(&self) -> bool {
        if self.is_zero() || self.exponent >= 0 {
            return true;
        }
        // digits × 2^b / 10^k is whole iff 5^k divides digits and 2^k divides digits × 2^b.
        // The digits end in a non-zero digit, so without a binary suffix it never is.
        let k = self.exponent.unsigned_abs();
        if self.binary_exponent == 0 || k > 64 {
            return false;
        }
        let Ok(digits) = self.digits.parse::<u128>() else {
            return false;
        };
        let Some(five_k) = 5u128.checked_pow(k as u32) else {
            return false;
        };
        let twos = u64::from(digits.trailing_zeros()) + u64::from(self.binary_exponent);
        digits % five_k == 0 && twos >= k
    }
}

impl PartialOrd for ParsedQuantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ParsedQuantity {
    /// Compares the values (`1` equals `1000m`, `1Gi` equals `1024Mi`), not the texts.
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |q: &Self| match (q.is_zero(), q.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal if self.negative => other.magnitude_cmp(self),
            Ordering::Equal => self.magnitude_cmp(other),
            unequal => unequal,
        }
    }
}

impl ParsedQuantity {
    /// Compares `|self|` with `|other|`, both non-zero or both zero. Each is
    /// `digits × 10^exponent × 2^binary` with `2^binary < 10^19`, so values whose orders of
    /// magnitude are 20 or more apart compare by that alone; closer ones are brought to
    /// integers over the smaller power of ten (a shift no longer than the texts plus 20) and
    /// compared digit by digit.
    fn magnitude_cmp(&self, other: &Self) -> Ordering {
        if self.is_zero() || other.is_zero() {
            return self.digits.len().cmp(&other.digits.len());
        }
        let order = |q: &Self| q.digits.len() as i64 + q.exponent;
        let gap = order(self) - order(other);
        if gap.abs() >= 20 {
            return gap.cmp(&0);
        }
        let low = self.exponent.min(other.exponent);
        let common = self.binary_exponent.min(other.binary_exponent);
        let scaled = |q: &Self| {
            let mut number = Decimal::from_digits(&q.digits);
            number.shift_ten(q.exponent - low);
            number.times_power_of_two(q.binary_exponent - common);
            number
        };
        scaled(self).cmp(&scaled(other))
    }
}

/// A non-negative integer of any size, as decimal digits (most significant first, no leading
/// zeros), for exact comparisons of quantities far apart in scale.
#[derive(PartialEq, Eq)]
struct Decimal(Vec<u8>);

impl Decimal {
    fn from_digits(digits: &str) -> Self {
        Self(digits.bytes().map(|b| b - b'0').collect())
    }

    /// Multiplies by `10^by` (`by` is never negative).
    fn shift_ten(&mut self, by: i64) {
        self.0
            .extend(std::iter::repeat_n(0, usize::try_from(by).unwrap_or(0)));
    }

    fn times_power_of_two(&mut self, power: u32) {
        for _ in 0..power {
            let mut carry = 0;
            for digit in self.0.iter_mut().rev() {
                let doubled = *digit * 2 + carry;
                *digit = doubled % 10;
                carry = doubled / 10;
            }
            if carry > 0 {
                self.0.insert(0, carry);
            }
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn q(text: &str) -> ParsedQuantity {
        parse_quantity(text).unwrap_or_else(|error| panic!("{text} parses: {error}"))
    }

    #[test]
    fn quantities_compare_across_suffixes() {
        assert_eq!(q("1").cmp(&q("1000m")), Ordering::Equal);
        assert_eq!(q("0.5").cmp(&q("500m")), Ordering::Equal);
        assert_eq!(q("1Gi").cmp(&q("1024Mi")), Ordering::Equal);
        assert_eq!(q("1.5Gi").cmp(&q("1536Mi")), Ordering::Equal);
        assert_eq!(q("1k").cmp(&q("1000")), Ordering::Equal);
        assert_eq!(q("1e3").cmp(&q("1k")), Ordering::Equal);
        assert_eq!(q("0").cmp(&q("Gi")), Ordering::Equal);
        assert!(q("1001m") > q("1"));
        assert!(q("1025Mi") > q("1Gi"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("0") < q("1n"));
        assert!(q("-1") < q("0"));
        assert!(q("-2") < q("-1"));
        assert!(q("99999999999999999999999999999999E") > q("1Ei"));
        assert!(q("1n") < q("99999999999999999999999999999999"));
        assert!(q("1e-2147483648") < q("1n"));
        assert!(q("1e2147483647") > q("99999999999999999999999999999999E"));
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
            if let Ok(quantity) = parse_quantity(&text) {
                let _ = quantity.cmp(&quantity);
            }
        }
    }

    #[test]
    fn accepts_what_kubernetes_accepts() {
        for ok in [
            "1",
            "0",
            "500m",
            "0.5",
            "1.5",
            ".5",
            "1.",
            "1.G",
            "4Gi",
            "128974848",
            "129M",
            "1e3",
            "1E3",
            "1e-3",
            "1E",
            "+2",
            "-1",
            "100n",
            "12u",
            "1Ei",
            "0.000",
            // Kubernetes reads a missing number as zero.
            "Gi",
            ".",
            "m",
        ] {
            assert!(parse_quantity(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_what_kubernetes_refuses_with_its_messages() {
        for (bad, error) in [
            ("", QuantityError::FormatWrong),
            ("abc", QuantityError::FormatWrong),
            ("1.2.3", QuantityError::FormatWrong),
            ("1 Gi", QuantityError::FormatWrong),
            ("1Xi", QuantityError::FormatWrong),
            ("1ki", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1Kii", QuantityError::Suffix),
            ("1e99999999999", QuantityError::Suffix),
        ] {
            assert_eq!(parse_quantity(bad), Err(error), "{bad}");
        }
        assert_eq!(
            QuantityError::Suffix.to_string(),
            "unable to parse quantity's suffix"
        );
    }

    #[test]
    fn knows_whole_numbers_and_signs() {
        for whole in ["2", "1e3", "2000m", "1Ki", "0.5Ki", "0", "10.0", "1E"] {
            assert!(parse_quantity(whole).unwrap().is_whole(), "{whole}");
        }
        for fractional in ["0.5", "1500m", "1e-1", "0.3Ki", "1n"] {
            assert!(
                !parse_quantity(fractional).unwrap().is_whole(),
                "{fractional}"
            );
        }
        assert!(parse_quantity("-1").unwrap().negative);
        assert!(!parse_quantity("-0").unwrap().negative);
    }
}
