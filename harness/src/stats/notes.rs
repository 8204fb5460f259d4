//! How the decision notes write numbers: signed and unsigned percentages with one decimal and
//! p-values, the same in every rule.

/// A signed relative change: `+4.9 %`.
pub(super) fn pct(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

/// An unsigned relative size: `3.0 %`.
pub(super) fn pct_abs(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// A p-value: four decimals, or `< 0.0001`.
pub(super) fn p_str(p: f64) -> String {
    if p < 0.0001 {
        "< 0.0001".to_string()
    } else {
        format!("{p:.4}")
    }
}
