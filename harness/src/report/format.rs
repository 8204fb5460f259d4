//! Number formatting shared by every rendering: times, throughputs, relative changes, intervals
//! and thresholds, the way hyperfine prints them (`+3.1 % [+1.9, +4.4]`).
//!
//! Rules: about three significant digits (`9.87`, `98.7`, `987`); one unit per row, chosen so the
//! row's smaller value is at least 1 in it, both sides with the same decimals so they line up;
//! changes and interval ends with one decimal and an explicit sign, a value that rounds to zero
//! written `0.0` (no sign: a sign on zero suggests a direction that is not there); anything not
//! finite written `n/a` rather than `NaN` or a nonsense unit.

use crate::results::{ThresholdSource, Throughput};

/// Written for values that are not finite numbers.
pub const NOT_AVAILABLE: &str = "n/a";

const TIME_UNITS: [(f64, &str); 4] = [(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")];
const BYTE_UNITS: [(f64, &str); 5] = [
    (1.0, "B/s"),
    (1024.0, "KiB/s"),
    (1024.0 * 1024.0, "MiB/s"),
    (1024.0 * 1024.0 * 1024.0, "GiB/s"),
    (1024.0 * 1024.0 * 1024.0 * 1024.0, "TiB/s"),
];
const ELEMENT_UNITS: [(f64, &str); 5] = [
    (1.0, "elem/s"),
    (1e3, "Kelem/s"),
    (1e6, "Melem/s"),
    (1e9, "Gelem/s"),
    (1e12, "Telem/s"),
];

/// Decimals that give about three significant digits for a value in a unit (`9.87`, `98.7`, `987`).
fn decimals_for(scaled: f64) -> usize {
    let a = scaled.abs();
    if a < 10.0 {
        2
    } else if a < 100.0 {
        1
    } else {
        0
    }
}

fn round_to(x: f64, decimals: usize) -> f64 {
    let p = 10f64.powi(decimals as i32);
    (x * p).round() / p
}

/// The unit (divisor, name) and decimals for `value`: the largest unit in which it is at least 1,
/// moved up when rounding would print a full step of the next unit (`999.7 ns` is `1.00 µs`).
fn scale(value: f64, units: &[(f64, &'static str)]) -> (f64, &'static str, usize) {
    let a = value.abs();
    let mut i = units.iter().rposition(|&(div, _)| a >= div).unwrap_or(0);
    let mut d = decimals_for(a / units[i].0);
    if i + 1 < units.len() {
        let step = units[i + 1].0 / units[i].0;
        if round_to(a / units[i].0, d) >= step {
            i += 1;
            d = decimals_for(a / units[i].0);
        }
    }
    // 9.996 rounds to 10.00: print it as 10.0, three digits like its neighbours.
    let rounded = round_to(a / units[i].0, d);
    d = d.min(decimals_for(rounded));
    (units[i].0, units[i].1, d)
}

fn with_unit(value: f64, units: &[(f64, &'static str)]) -> String {
    if !value.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let (div, unit, d) = scale(value, units);
    format!("{:.*} {unit}", d, value / div)
}

/// A time per iteration, e.g. `812 ns`, `9.87 µs`, `1.23 s`.
pub fn time(ns: f64) -> String {
    with_unit(ns, &TIME_UNITS)
}

/// Base and head times of one row in one unit with the same decimals, chosen for the smaller of
/// the two so neither is printed below 1 (`998 ns` / `1020 ns`, `9.87 ms` / `10.90 ms`).
pub fn time_pair(base_ns: f64, head_ns: f64) -> (String, String) {
    if !base_ns.is_finite() || !head_ns.is_finite() {
        return (time(base_ns), time(head_ns));
    }
    let (div, unit, d) = scale(base_ns.abs().min(head_ns.abs()), &TIME_UNITS);
    (
        format!("{:.*} {unit}", d, base_ns / div),
        format!("{:.*} {unit}", d, head_ns / div),
    )
}

/// Throughput at `ns` per iteration: binary units for bytes (`1.23 GiB/s`, as criterion prints
/// them), decimal for elements (`45.6 Melem/s`).
pub fn throughput(tp: Throughput, ns: f64) -> String {
    if !(ns.is_finite() && ns > 0.0) {
        return NOT_AVAILABLE.to_string();
    }
    let per_s = 1e9 / ns;
    match tp {
        Throughput::Bytes(b) => with_unit(b as f64 * per_s, &BYTE_UNITS),
        Throughput::Elements(e) => with_unit(e as f64 * per_s, &ELEMENT_UNITS),
    }
}

/// A relative value as signed percent with one decimal and no `%`: `+3.1`, `-12.0`, `0.0`.
pub fn signed_percent(rel: f64) -> String {
    if !rel.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let pct = round_to(rel * 100.0, 1);
    if pct == 0.0 {
        "0.0".to_string()
    } else {
        format!("{pct:+.1}")
    }
}

/// A relative change (`+0.031` is 3.1 % slower): `+3.1 %`.
pub fn change(rel: f64) -> String {
    let s = signed_percent(rel);
    if s == NOT_AVAILABLE {
        s
    } else {
        format!("{s} %")
    }
}

/// A confidence interval of a relative change: `[+1.9, +4.4]`.
pub fn interval(low: f64, high: f64) -> String {
    format!("[{}, {}]", signed_percent(low), signed_percent(high))
}

/// An unsigned percentage with one decimal: `2.0 %`.
pub fn percent(rel: f64) -> String {
    if !rel.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    format!("{:.1} %", rel * 100.0)
}

/// A level such as a confidence without trailing zeros: `0.95` is `95 %`, `0.999` is `99.9 %`.
pub fn level(p: f64) -> String {
    if !p.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let s = format!("{:.2}", p * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} %")
}

pub fn threshold_source(source: ThresholdSource) -> &'static str {
    match source {
        ThresholdSource::Profile => "profile",
        ThresholdSource::Spread => "spread",
        ThresholdSource::Floor => "floor",
        ThresholdSource::Config => "config",
    }
}

/// A decision threshold with where it came from: `±2.0 % (profile)`.
pub fn threshold(rel: f64, source: ThresholdSource) -> String {
    format!("±{} ({})", percent(rel), threshold_source(source))
}

/// A wall-clock duration: `41.2 s`, `12 min 03 s`, `1 h 02 min`.
pub fn duration(s: f64) -> String {
    if !(s.is_finite() && s >= 0.0) {
        return NOT_AVAILABLE.to_string();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let total = s.round() as u64;
    let (h, m, sec) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 {
        format!("{h} h {m:02} min")
    } else {
        format!("{m} min {sec:02} s")
    }
}

/// A bare number with about three significant digits (`329`, `12.3`, `0.42`), for fields that
/// carry their unit elsewhere.
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let d = decimals_for(x);
    let d = d.min(decimals_for(round_to(x, d)));
    format!("{x:.d$}")
}

/// The first seven characters of a commit id.
pub fn short_sha(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_pick_a_unit_and_three_digits() {
        assert_eq!(time(0.42), "0.42 ns");
        assert_eq!(time(5.0), "5.00 ns");
        assert_eq!(time(812.4), "812 ns");
        assert_eq!(time(9_870.0), "9.87 µs");
        assert_eq!(time(98_740.0), "98.7 µs");
        assert_eq!(time(1_234_567.0), "1.23 ms");
        assert_eq!(time(2_500_000_000.0), "2.50 s");
        assert_eq!(time(125_000_000_000.0), "125 s");
        assert_eq!(time(f64::NAN), "n/a");
        assert_eq!(time(f64::INFINITY), "n/a");
    }

    #[test]
    fn times_that_round_up_move_to_the_next_unit() {
        assert_eq!(time(999.4), "999 ns");
        assert_eq!(time(999.7), "1.00 µs");
        assert_eq!(time(9.996), "10.0 ns");
        assert_eq!(time(99.97), "100 ns");
        assert_eq!(time(999_999_999.0), "1.00 s");
    }

    #[test]
    fn a_row_shares_one_unit_and_decimals() {
        assert_eq!(
            time_pair(998.0, 1_020.0),
            ("998 ns".into(), "1020 ns".into())
        );
        assert_eq!(
            time_pair(9_870_000.0, 10_900_000.0),
            ("9.87 ms".into(), "10.90 ms".into())
        );
        // The unit follows the smaller side, whichever it is.
        assert_eq!(
            time_pair(1_500.0, 900.0),
            ("1500 ns".into(), "900 ns".into())
        );
        assert_eq!(time_pair(f64::NAN, 900.0), ("n/a".into(), "900 ns".into()));
    }

    #[test]
    fn throughput_in_binary_bytes_and_decimal_elements() {
        // 1 GiB in 1 s.
        assert_eq!(throughput(Throughput::Bytes(1 << 30), 1e9), "1.00 GiB/s");
        // 48 KiB per 38.1 µs ≈ 1.20 GiB/s.
        assert_eq!(
            throughput(Throughput::Bytes(49_152), 38_100.0),
            "1.20 GiB/s"
        );
        assert_eq!(
            throughput(Throughput::Elements(576), 12_630.0),
            "45.6 Melem/s"
        );
        assert_eq!(throughput(Throughput::Elements(1), 2e9), "0.50 elem/s");
        assert_eq!(throughput(Throughput::Bytes(100), 0.0), "n/a");
        // 1023.9 KiB/s rounds to a full MiB/s.
        assert_eq!(throughput(Throughput::Bytes(1_048_470), 1e9), "1.00 MiB/s");
    }

    #[test]
    fn changes_are_signed_with_one_decimal() {
        assert_eq!(change(0.031), "+3.1 %");
        assert_eq!(change(-0.123), "-12.3 %");
        assert_eq!(change(0.0449), "+4.5 %");
        assert_eq!(change(0.0441), "+4.4 %");
        assert_eq!(change(0.8), "+80.0 %");
        assert_eq!(change(1.5), "+150.0 %");
        assert_eq!(change(0.0004), "0.0 %");
        assert_eq!(change(-0.0004), "0.0 %");
        assert_eq!(change(f64::NAN), "n/a");
        assert_eq!(interval(0.019, 0.044), "[+1.9, +4.4]");
        assert_eq!(interval(-0.061, 0.117), "[-6.1, +11.7]");
        assert_eq!(interval(-0.0002, 0.0), "[0.0, 0.0]");
    }

    #[test]
    fn thresholds_levels_and_durations() {
        assert_eq!(
            threshold(0.02, ThresholdSource::Profile),
            "±2.0 % (profile)"
        );
        assert_eq!(threshold(0.005, ThresholdSource::Floor), "±0.5 % (floor)");
        assert_eq!(threshold(0.1, ThresholdSource::Spread), "±10.0 % (spread)");
        assert_eq!(level(0.95), "95 %");
        assert_eq!(level(0.999), "99.9 %");
        assert_eq!(duration(41.24), "41.2 s");
        assert_eq!(duration(723.0), "12 min 03 s");
        assert_eq!(duration(3720.0), "1 h 02 min");
        assert_eq!(number(329.4), "329");
        assert_eq!(number(0.4213), "0.42");
        assert_eq!(short_sha("abf7efe1234"), "abf7efe");
        assert_eq!(short_sha("abc"), "abc");
    }
}
