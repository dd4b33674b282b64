//! Numbers as the paper README has always written them: Python's `f"{x:.1f}"`, `f"{x:+.1f}"`
//! and `format(x, ".2g")`, so that a regenerated README differs only where a report changed.
//! Rust's `{:.1}` already rounds like Python's `.1f` (the exact binary value, ties to even);
//! what differs is how a value that is not finite is spelled, and `g`, which Rust lacks.

/// `x` with `digits` decimals, as Python's `f"{x:.{digits}f}"`: `nan`, `inf` and `-inf` where
/// Rust writes `NaN` (Python drops a NaN's sign).
pub(super) fn fixed(x: f64, digits: usize) -> String {
    match non_finite(x) {
        Some(s) => s.to_string(),
        None => format!("{x:.digits$}"),
    }
}

/// `x` with `digits` decimals and its sign always written, as Python's `f"{x:+.{digits}f}"`.
pub(super) fn signed(x: f64, digits: usize) -> String {
    match non_finite(x) {
        Some("-inf") => "-inf".to_string(),
        Some(s) => format!("+{s}"),
        None => format!("{x:+.digits$}"),
    }
}

/// A number written in a CSV file, with `digits` decimals; empty where the text is not a number
/// (Python's `float()` of the text, formatted as [`fixed`]).
pub(super) fn num(text: &str, digits: usize) -> String {
    text.trim().parse::<f64>().map_or(String::new(), |x| fixed(x, digits))
}

/// [`num`] of a value that may be absent (an empty CSV field): empty then.
pub(super) fn num_opt(text: Option<&str>, digits: usize) -> String {
    text.map_or(String::new(), |t| num(t, digits))
}

fn non_finite(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("nan")
    } else if x == f64::INFINITY {
        Some("inf")
    } else if x == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// `x` with `digits` significant digits, as Python's `format(x, ".{digits}g")`: in exponent
/// form when the exponent (after rounding) is below -4 or at least `digits` (`1.5e-05`,
/// `1.2e+04`), plainly otherwise (`0.00012`, `0.05`, `10`); trailing zeros and a trailing
/// point dropped in both. A precision of 0 counts as 1, as in Python.
pub(super) fn fmt_g(x: f64, digits: usize) -> String {
    if let Some(s) = non_finite(x) {
        return s.to_string();
    }
    let p = digits.max(1);
    // Rust's exponent form rounds to `p` significant digits exactly as Python does: what is
    // left is where the point goes.
    let sci = format!("{:.*e}", p - 1, x);
    let Some((mantissa, exp)) = sci.split_once('e') else { return sci };
    let Ok(exp) = exp.parse::<i64>() else { return sci };
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    if exp < -4 || exp >= p as i64 {
        let e_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{}e{e_sign}{:02}", trim_zeros(mantissa), exp.unsigned_abs());
    }
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let plain = if exp >= 0 {
        let (int, frac) = digits.split_at(exp as usize + 1);
        format!("{int}.{frac}")
    } else {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    };
    format!("{sign}{}", trim_zeros(&plain))
}

/// `1.50` -> `1.5`, `2.0` -> `2`; a number without a point as it is.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values are Python 3's `format(x, ".2g")` (and `.3g`, `.1g`, `.0g` where named).
    #[test]
    fn fmt_g_is_pythons_g() {
        let cases: &[(f64, usize, &str)] = &[
            (1.5e-5, 2, "1.5e-05"),
            (0.00012, 2, "0.00012"),
            (0.05, 2, "0.05"),
            (1.0, 2, "1"),
            (0.9, 2, "0.9"),
            (0.0015, 2, "0.0015"),
            (3.7e-6, 2, "3.7e-06"),
            (2.2e-7, 2, "2.2e-07"),
            (0.00066, 2, "0.00066"),
            (0.0042, 2, "0.0042"),
            (9.96, 2, "10"),
            (99.5, 2, "1e+02"),
            (0.000099996, 2, "0.0001"),
            (12345.0, 2, "1.2e+04"),
            (1e22, 2, "1e+22"),
            (1e-300, 2, "1e-300"),
            (1e100, 2, "1e+100"),
            (0.125, 2, "0.12"),
            (0.0, 2, "0"),
            (-0.0, 2, "-0"),
            (-0.0123, 2, "-0.012"),
            (-4.56e-7, 2, "-4.6e-07"),
            (123.456, 3, "123"),
            (1234.5, 3, "1.23e+03"),
            (0.5, 1, "0.5"),
            (15.0, 1, "2e+01"),
            (0.25, 0, "0.2"),
            (f64::NAN, 2, "nan"),
            (f64::INFINITY, 2, "inf"),
            (f64::NEG_INFINITY, 2, "-inf"),
        ];
        for &(x, digits, want) in cases {
            assert_eq!(fmt_g(x, digits), want, "format({x:e}, '.{digits}g')");
        }
    }

    /// A wrong rule for the switch to exponent form (at `exp >= digits + 1`, or below -5) is
    /// told apart: these are the values either side of both thresholds.
    #[test]
    fn fmt_g_switches_at_pythons_thresholds() {
        assert_eq!(fmt_g(0.0001, 2), "0.0001");
        assert_eq!(fmt_g(0.00001, 2), "1e-05");
        assert_eq!(fmt_g(99.0, 2), "99");
        assert_eq!(fmt_g(100.0, 2), "1e+02");
    }

    /// Expected values are Python 3's `f"{x:.1f}"`, `f"{x:+.1f}"` and `float(text)`.
    #[test]
    fn fixed_and_signed_are_pythons() {
        assert_eq!(fixed(0.25, 1), "0.2");
        assert_eq!(fixed(0.35, 1), "0.3");
        assert_eq!(fixed(2.5, 0), "2");
        assert_eq!(fixed(-0.0, 1), "-0.0");
        assert_eq!(fixed(f64::NAN, 1), "nan");
        assert_eq!(fixed(-f64::NAN, 1), "nan");
        assert_eq!(signed(4.25, 1), "+4.2");
        assert_eq!(signed(-0.04, 1), "-0.0");
        assert_eq!(signed(0.0, 1), "+0.0");
        assert_eq!(signed(f64::NAN, 1), "+nan");
        assert_eq!(signed(f64::INFINITY, 1), "+inf");
        assert_eq!(signed(f64::NEG_INFINITY, 1), "-inf");
        assert_eq!(num(" 12.213541666666666", 2), "12.21");
        assert_eq!(num("", 1), "");
        assert_eq!(num("n/a", 1), "");
        assert_eq!(num("inf", 1), "inf");
        assert_eq!(num_opt(None, 1), "");
    }
}
