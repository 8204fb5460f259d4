//! Aggregates of timings: quantiles and summaries for the report, one round's ns/iteration
//! from criterion's samples, and a paired round's log ratio ([`paired_log_ratio`] by its
//! [`PairLayout`]). Every function takes untrusted numbers and answers `None` rather
//! than panicking.

/// The quantile of a round's per-sample times taken as that round's estimate: the lower quartile.
/// Interference (another process, a hypervisor steal, an interrupt) only ever adds time, so the
/// fast end of the samples is the least disturbed (Chen & Revels 2016); a quartile rather than the
/// minimum keeps one unusually fast sample from deciding the round. See STATS.md.
pub const ROUND_QUANTILE: f64 = 0.25;

/// The `q`-quantile (`0 ≤ q ≤ 1`) by linear interpolation between order statistics (Hyndman &
/// Fan's type 7, R's and numpy's default). `None` when `xs` is empty, `q` is outside `[0, 1]`, or
/// any value is not finite.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() || !(0.0..=1.0).contains(&q) || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    Some(v[lo] + (h - lo as f64) * (v[hi] - v[lo]))
}

/// The median (type-7 quantile 0.5): the number the report shows for a side across its rounds.
pub fn median(xs: &[f64]) -> Option<f64> {
    quantile(xs, 0.5)
}

/// The arithmetic mean; `None` when empty or any value is not finite.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    Some(xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The sample standard deviation (divisor `n − 1`); `None` for fewer than two values or any value
/// not finite.
pub fn std_dev(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (xs.len() - 1) as f64).sqrt())
}

/// What the report prints for one side across rounds (`median`, `mean ± σ`, `min … max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    /// Sample standard deviation; 0 for a single value.
    pub std_dev: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// Coefficient of variation `σ / mean` (0 when the mean is 0), for "base is noisy" warnings.
    pub fn cv(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.std_dev / self.mean.abs()
        }
    }
}

/// Summary of per-round estimates; `None` when empty or any value is not finite.
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    let mean = mean(xs)?;
    Some(Summary {
        n: xs.len(),
        median: median(xs)?,
        mean,
        std_dev: std_dev(xs).unwrap_or(0.0),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// One round's time per iteration (ns) from criterion's `sample.json` of that round: the
/// [`ROUND_QUANTILE`] of the per-sample times `times_ns[i] / iters[i]`. The same rule serves
/// linear sampling (`iters` = d, 2d, 3d, …) and flat sampling (equal `iters`): per-sample times
/// are comparable in both, and at criterion's iteration counts the fixed per-sample overhead
/// divided by `iters[i]` is negligible.
///
/// `None` when the slices are empty or differ in length, or any sample has `iters ≤ 0`,
/// `times_ns ≤ 0` or a value that is not finite: a corrupt sample file makes the round invalid
/// rather than being half-used.
pub fn round_estimate(iters: &[f64], times_ns: &[f64]) -> Option<f64> {
    quantile(&per_iteration(iters, times_ns)?, ROUND_QUANTILE)
}

/// `times_ns[i] / iters[i]` for every sample; `None` for empty or mismatched slices or any
/// sample with `iters ≤ 0`, `times_ns ≤ 0` or a value that is not finite.
fn per_iteration(iters: &[f64], times_ns: &[f64]) -> Option<Vec<f64>> {
    if iters.is_empty() || iters.len() != times_ns.len() {
        return None;
    }
    iters
        .iter()
        .zip(times_ns)
        .map(|(&n, &t)| (n.is_finite() && n > 0.0 && t.is_finite() && t > 0.0).then(|| t / n))
        .collect()
}

/// How the samples of a paired round were taken (harness/src/measure/serve.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairLayout {
    /// F S S F F S …: in each pair one side's sample follows the other process's (benchmarks).
    SwitchAlternates,
    /// Each side's first request after a switch was dropped (end-to-end decodes).
    Warm,
}

/// The log ratio `ln(head / base)` of one **paired** round (harness/src/measure/serve.rs): sample `i` of
/// each side was taken back to back with the other's, so each pair shares the machine's state of
/// that moment, and a drift across the round cancels within each pair. Of the per-iteration
/// pair log ratios `dᵢ = ln(head_i / base_i)`, the round's value is the mean of two medians:
/// over the even-indexed pairs and over the odd-indexed ones (the
/// median of all with fewer than 6 pairs, where a class of 2 would be its mean). A pair in which
/// one side was disturbed moves its class's median little.
///
/// Why two medians: the serve protocol samples F S S F F S … (`measure_pair` keeps that layout
/// across process pairs), so in every pair one side's sample came right after the other process
/// ran, and it is the second side in even pairs, the first in odd ones. That sample is slower
/// when the other process evicted its caches (+12 % on `tokenization/encode`, +8 % on
/// `matmul/bf16_t1/32x1024x1024`; `harness noise`'s switch column), so the pairs' ratios alternate
/// `true + s`, `true − s`; one median over all of them lands anywhere between, while the mean of
/// the two classes' medians cancels `s` (the carry-over balance of an ABBA crossover). Measured
/// on saved A/A runs (harness/eval/noise/switch_blocks.py; harness/STATS.md, section 2).
///
/// `None` unless both sides have the same number of valid samples (as [`round_estimate`]).
/// With [`PairLayout::Warm`] (no kept sample follows a switch: the end-to-end decodes) there is
/// nothing to cancel, and the median over all pairs is kept: on the saved end-to-end A/A rows
/// two medians of 5 had a higher per-round sd than one of 10 (median 3.0 against 2.4 %).
pub fn paired_log_ratio(
    base: (&[f64], &[f64]),
    head: (&[f64], &[f64]),
    layout: PairLayout,
) -> Option<f64> {
    let (b, h) = (
        per_iteration(base.0, base.1)?,
        per_iteration(head.0, head.1)?,
    );
    if b.len() != h.len() {
        return None;
    }
    let d: Vec<f64> = b.iter().zip(&h).map(|(b, h)| (h / b).ln()).collect();
    if d.len() < 6 || layout == PairLayout::Warm {
        return median(&d);
    }
    let class = |parity: usize| -> Vec<f64> { d.iter().skip(parity).step_by(2).copied().collect() };
    Some((median(&class(0))? + median(&class(1))?) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paired_round_outvotes_a_disturbed_pair_and_cancels_a_step() {
        let iters = [2.0; 5];
        let base = [200.0, 200.0, 400.0, 200.0, 200.0];
        // Pairs 1.1×, 1.1×, 0.55× (base disturbed), 1.1×, 3× (head disturbed): median 1.1×.
        let head = [220.0, 220.0, 220.0, 220.0, 600.0];
        let d = paired_log_ratio(
            (&iters, &base),
            (&iters, &head),
            PairLayout::SwitchAlternates,
        )
        .unwrap();
        assert!((d - 1.1f64.ln()).abs() < 1e-12, "{d}");
        // A step in the machine's speed between pairs cancels within each pair.
        let slow = [220.0, 220.0, 440.0, 440.0, 440.0];
        let slow_head = [242.0, 242.0, 484.0, 484.0, 484.0];
        let d = paired_log_ratio(
            (&iters, &slow),
            (&iters, &slow_head),
            PairLayout::SwitchAlternates,
        )
        .unwrap();
        assert!((d - 1.1f64.ln()).abs() < 1e-12, "{d}");
        assert_eq!(
            paired_log_ratio(
                (&iters, &base),
                (&iters[..4], &head[..4]),
                PairLayout::SwitchAlternates
            ),
            None
        );
        assert_eq!(
            paired_log_ratio(
                (&iters, &base),
                (&iters, &[0.0; 5]),
                PairLayout::SwitchAlternates
            ),
            None
        );
        assert_eq!(
            paired_log_ratio((&[], &[]), (&[], &[]), PairLayout::SwitchAlternates),
            None
        );
    }

    #[test]
    fn a_switch_effect_that_alternates_between_pairs_cancels() {
        // True ratio 1.05; the sample after a switch is 12 % slower: head's in even pairs, base's
        // in odd ones, so the pairs' ratios alternate 1.05·1.12 and 1.05/1.12. One pair's base
        // sample was disturbed (1.5× slower): a single median over all pairs then falls into
        // the lower class (about 1.05/1.12), the two classes' medians keep 1.05.
        let iters = [1.0; 10];
        let mut base: Vec<f64> = (0..10)
            .map(|i| if i % 2 == 1 { 112.0 } else { 100.0 } + 0.1 * i as f64)
            .collect();
        base[4] *= 1.5;
        let head: Vec<f64> = (0..10)
            .map(|i| 105.0 * if i % 2 == 0 { 1.12 } else { 1.0 } + 0.07 * i as f64)
            .collect();
        let d = paired_log_ratio(
            (&iters, &base),
            (&iters, &head),
            PairLayout::SwitchAlternates,
        )
        .unwrap();
        assert!((d - 1.05f64.ln()).abs() < 0.01, "{d}");
        let all: Vec<f64> = base.iter().zip(&head).map(|(b, h)| (h / b).ln()).collect();
        let one_median = median(&all).unwrap();
        assert!(
            (one_median - (1.05f64 / 1.12).ln()).abs() < 0.01,
            "{one_median}"
        );
        // Five pairs: too few for two classes of three, the median of all.
        let d = paired_log_ratio(
            (&iters[..5], &base[..5]),
            (&iters[..5], &head[..5]),
            PairLayout::SwitchAlternates,
        )
        .unwrap();
        assert_eq!(Some(d), median(&all[..5]));
    }

    #[test]
    fn quantile_interpolates_like_type_7() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        // Sorted 1 2 3 4: h = 3q.
        assert_eq!(quantile(&xs, 0.0), Some(1.0));
        assert_eq!(quantile(&xs, 1.0), Some(4.0));
        assert_eq!(quantile(&xs, 0.5), Some(2.5));
        assert_eq!(quantile(&xs, 0.25), Some(1.75));
        assert_eq!(quantile(&[7.0], 0.3), Some(7.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    }

    #[test]
    fn aggregates_refuse_bad_input() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[1.0], 1.5), None);
        assert_eq!(quantile(&[1.0, f64::NAN], 0.5), None);
        assert_eq!(quantile(&[1.0, f64::INFINITY], 0.5), None);
        assert_eq!(mean(&[]), None);
        assert_eq!(std_dev(&[1.0]), None);
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn summary_of_known_values() {
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.median, 4.5);
        assert_eq!(s.min, 2.0);
        assert_eq!(s.max, 9.0);
        // Sum of squares 32, divisor 7.
        assert!((s.std_dev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((s.cv() - s.std_dev / 5.0).abs() < 1e-12);
        assert_eq!(summarize(&[3.0]).unwrap().std_dev, 0.0);
    }

    #[test]
    fn round_estimate_linear_sampling() {
        // Linear mode: iters d, 2d, …, 10d at 10 ns/iter, with two samples slowed by interference.
        let iters: Vec<f64> = (1..=10).map(|i| 1000.0 * i as f64).collect();
        let mut times: Vec<f64> = iters.iter().map(|n| n * 10.0).collect();
        times[3] *= 3.0;
        times[8] *= 1.5;
        assert_eq!(round_estimate(&iters, &times), Some(10.0));
    }

    #[test]
    fn round_estimate_flat_sampling_takes_the_lower_quartile() {
        // Flat mode: equal iters; per-sample times 10..=19 ns: the lower quartile is 12.25
        // (h = 9 × 0.25 = 2.25 between 12 and 13), not the mean 14.5.
        let iters = vec![500.0; 10];
        let times: Vec<f64> = (10..20).rev().map(|t| 500.0 * t as f64).collect();
        let est = round_estimate(&iters, &times).unwrap();
        assert!((est - 12.25).abs() < 1e-9, "{est}");
    }

    #[test]
    fn round_estimate_rejects_invalid_samples() {
        assert_eq!(round_estimate(&[], &[]), None);
        assert_eq!(round_estimate(&[1.0, 2.0], &[10.0]), None);
        assert_eq!(round_estimate(&[0.0, 2.0], &[10.0, 20.0]), None);
        assert_eq!(round_estimate(&[1.0, -2.0], &[10.0, 20.0]), None);
        assert_eq!(round_estimate(&[1.0, f64::NAN], &[10.0, 20.0]), None);
        assert_eq!(round_estimate(&[1.0, 2.0], &[10.0, f64::NAN]), None);
        assert_eq!(round_estimate(&[1.0, 2.0], &[10.0, f64::INFINITY]), None);
        assert_eq!(round_estimate(&[1.0, 2.0], &[0.0, 20.0]), None);
    }
}
