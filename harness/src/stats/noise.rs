//! What an A/A run says about the measurement itself (`harness noise`): per benchmark, how much
//! the per-round estimate of a change that is not there moves, and the shapes of noise behind
//! it. Pure: the rounds' samples in, one [`NoiseRow`] per benchmark out. The definitions are in
//! harness/STATS.md, "Noise diagnostics".

use serde::{Deserialize, Serialize};

use super::aggregate::{PairLayout, median, paired_log_ratio, round_estimate};
use super::paired::t_quantile;

/// A sample is in the tail when it is this much slower than its round and side's median.
pub const TAIL_FACTOR: f64 = 1.10;
/// The bimodality coefficient of a uniform distribution: above it, a distribution is more
/// bimodal (or more skewed) than a uniform one (Pfister et al. 2013, Front. Psychol. 4:700).
pub const BIMODAL_BC: f64 = 5.0 / 9.0;

/// One round of one benchmark: each side's per-iteration times (ns) in sample order, the side
/// that ran first in the round first. `layout`: sample `i` of both sides were taken back to back
/// in the serve protocol's order ABBA ABBA … (harness/src/measure/serve.rs), and how (`None`: not
/// paired). `base_first`: the
/// first side is the base (the round's order AB).
#[derive(Clone, Debug, PartialEq)]
pub struct NoiseRound {
    pub first: Vec<f64>,
    pub second: Vec<f64>,
    pub layout: Option<PairLayout>,
    pub base_first: bool,
}

/// The diagnostics of one benchmark over an A/A run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseRow {
    pub id: String,
    pub rounds: usize,
    /// Per-round sd of the A/A log ratio ln(head / base), as the gate computes it: the number
    /// every threshold and resolution of the gate scales with. `None` below 2 rounds.
    pub sd_log_ratio: Option<f64>,
    /// Median per-round |ln(second / first)|: the process that started second persistently
    /// slower (or faster) than the first. In the gate's head/base ratio this alternates sign
    /// with the rounds' order AB, BA and becomes sd.
    pub median_abs_log_ratio: Option<f64>,
    /// Share of all samples slower than [`TAIL_FACTOR`] × their round and side's median.
    pub tail_share: Option<f64>,
    /// Lag-1 autocorrelation of the pairs' log ratios within rounds (each round's mean removed):
    /// far above `lag1_band`, the machine's state persists across samples and the pairs share
    /// less than they should.
    pub lag1: Option<f64>,
    /// 1.96 / √n: |lag1| beyond it is unlikely for independent pairs.
    pub lag1_band: Option<f64>,
    /// Bimodality coefficient of the log times, each centred on its round and side's median
    /// (sample skewness and excess kurtosis); above [`BIMODAL_BC`], two speeds (or a heavy
    /// slow tail).
    pub bimodality: Option<f64>,
    /// How much slower the first sample after a switch between sides is than the next sample of
    /// the same side (mean of log(t_switch / t_stay)), with its 95 % interval: a benchmark
    /// whose state the other side's run disturbs (caches, frequency).
    pub switch_effect: Option<Interval>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
}

/// The diagnostics of one benchmark's rounds.
pub fn diagnose(id: &str, rounds: &[NoiseRound]) -> NoiseRow {
    let ratios: Vec<f64> = rounds.iter().filter_map(round_log_ratio).collect();
    let head_base: Vec<f64> = rounds
        .iter()
        .filter_map(|r| round_log_ratio(r).map(|x| if r.base_first { x } else { -x }))
        .collect();
    NoiseRow {
        id: id.to_string(),
        rounds: rounds.len(),
        sd_log_ratio: sd(&head_base),
        median_abs_log_ratio: median(&ratios.iter().map(|r| r.abs()).collect::<Vec<_>>()),
        tail_share: tail_share(rounds),
        lag1: lag1(rounds).map(|(r, _)| r),
        lag1_band: lag1(rounds).map(|(_, n)| 1.96 / (n as f64).sqrt()),
        bimodality: bimodality(&centred_logs(rounds)),
        switch_effect: switch_effect(rounds),
    }
}

/// ln(second / first) of one round: as the gate computes it from sample pairs when paired
/// (`paired_log_ratio`), else the ratio of
/// the sides' round estimates (their lower quartiles), as the gate computes it.
fn round_log_ratio(r: &NoiseRound) -> Option<f64> {
    let ones = |v: &[f64]| vec![1.0; v.len()];
    if let Some(layout) = r.layout {
        paired_log_ratio(
            (&ones(&r.first), &r.first),
            (&ones(&r.second), &r.second),
            layout,
        )
    } else {
        let a = round_estimate(&ones(&r.first), &r.first)?;
        let b = round_estimate(&ones(&r.second), &r.second)?;
        Some((b / a).ln())
    }
}

fn sd(xs: &[f64]) -> Option<f64> {
    super::aggregate::std_dev(xs)
}

fn valid(xs: &[f64]) -> bool {
    !xs.is_empty() && xs.iter().all(|x| x.is_finite() && *x > 0.0)
}

fn tail_share(rounds: &[NoiseRound]) -> Option<f64> {
    let (mut tail, mut n) = (0usize, 0usize);
    for side in rounds.iter().flat_map(|r| [&r.first, &r.second]) {
        if !valid(side) {
            continue;
        }
        let m = median(side)?;
        tail += side.iter().filter(|&&t| t > TAIL_FACTOR * m).count();
        n += side.len();
    }
    (n > 0).then(|| tail as f64 / n as f64)
}

/// Pooled lag-1 autocorrelation of the pair log ratios within paired rounds, and the number of
/// pairs it rests on.
fn lag1(rounds: &[NoiseRound]) -> Option<(f64, usize)> {
    let (mut num, mut den, mut n) = (0.0, 0.0, 0usize);
    for r in rounds.iter().filter(|r| r.layout.is_some()) {
        if !valid(&r.first) || r.first.len() != r.second.len() || r.first.len() < 3 {
            continue;
        }
        let d: Vec<f64> = r
            .first
            .iter()
            .zip(&r.second)
            .map(|(a, b)| (b / a).ln())
            .collect();
        let m = d.iter().sum::<f64>() / d.len() as f64;
        num += d.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>();
        den += d.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        n += d.len();
    }
    (n >= 6 && den > 0.0).then(|| (num / den, n))
}

/// Every sample's log time minus its round and side's median log time.
fn centred_logs(rounds: &[NoiseRound]) -> Vec<f64> {
    let mut out = Vec::new();
    for side in rounds.iter().flat_map(|r| [&r.first, &r.second]) {
        if !valid(side) {
            continue;
        }
        let logs: Vec<f64> = side.iter().map(|t| t.ln()).collect();
        let m = median(&logs).unwrap_or(0.0);
        out.extend(logs.iter().map(|l| l - m));
    }
    out
}

/// The sample bimodality coefficient (g² + 1) / (k + 3(n−1)² / ((n−2)(n−3))), g and k the
/// bias-corrected skewness and excess kurtosis (SAS's definition, as in Pfister et al. 2013).
/// `None` below 4 values or when they are all equal.
pub fn bimodality(xs: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 4 {
        return None;
    }
    let nf = n as f64;
    let mean = xs.iter().sum::<f64>() / nf;
    let m = |p: i32| xs.iter().map(|x| (x - mean).powi(p)).sum::<f64>() / nf;
    let (m2, m3, m4) = (m(2), m(3), m(4));
    if m2 <= 1e-300 {
        return None;
    }
    let g = (nf * (nf - 1.0)).sqrt() / (nf - 2.0) * m3 / m2.powf(1.5);
    let k =
        (nf - 1.0) / ((nf - 2.0) * (nf - 3.0)) * ((nf + 1.0) * m4 / (m2 * m2) - 3.0 * (nf - 1.0));
    Some((g * g + 1.0) / (k + 3.0 * (nf - 1.0).powi(2) / ((nf - 2.0) * (nf - 3.0))))
}

/// In the serve protocol's order (first side F, second S): F S S F F S S F …, so F's samples
/// 0, 1, 3, 5 … and S's samples 0, 2, 4 … come right after the other side ran ("switch"), and
/// F's 2, 4, … and S's 1, 3, … right after their own ("stay"). Each switch sample is set against
/// the stay sample after it: d = ln(t_switch / t_stay); the mean of d with a t interval.
fn switch_effect(rounds: &[NoiseRound]) -> Option<Interval> {
    let mut d = Vec::new();
    for r in rounds
        .iter()
        .filter(|r| r.layout == Some(PairLayout::SwitchAlternates))
    {
        for (side, first_stay) in [(&r.first, 2usize), (&r.second, 1usize)] {
            if !valid(side) {
                continue;
            }
            let mut i = first_stay;
            while i < side.len() {
                d.push((side[i - 1] / side[i]).ln());
                i += 2;
            }
        }
    }
    let n = d.len();
    if n < 3 {
        return None;
    }
    let mean = d.iter().sum::<f64>() / n as f64;
    let se = sd(&d)? / (n as f64).sqrt();
    let t = t_quantile(0.975, (n - 1) as f64);
    Some(Interval {
        estimate: mean,
        lo: mean - t * se,
        hi: mean + t * se,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paired(first: &[f64], second: &[f64]) -> NoiseRound {
        NoiseRound {
            first: first.to_vec(),
            second: second.to_vec(),
            layout: Some(PairLayout::SwitchAlternates),
            base_first: true,
        }
    }

    #[test]
    fn a_steadily_slower_second_process_has_zero_sd_but_a_large_median_ratio() {
        let rounds: Vec<_> = (0..6).map(|_| paired(&[10.0; 8], &[20.0; 8])).collect();
        let row = diagnose("x", &rounds);
        assert!(row.sd_log_ratio.unwrap() < 1e-12);
        assert!((row.median_abs_log_ratio.unwrap() - 2f64.ln()).abs() < 1e-12);
        assert_eq!(row.tail_share, Some(0.0));
    }

    #[test]
    fn a_steadily_slower_second_process_is_sd_in_the_gates_head_over_base_ratio() {
        let rounds: Vec<_> = (0..6)
            .map(|k| NoiseRound {
                base_first: k % 2 == 0,
                ..paired(&[10.0; 8], &[20.0; 8])
            })
            .collect();
        let row = diagnose("x", &rounds);
        assert!((row.sd_log_ratio.unwrap() - 2f64.ln() * (6.0f64 / 5.0).sqrt()).abs() < 1e-9);
    }

    #[test]
    fn the_sd_is_that_of_the_rounds_median_pair_ratios() {
        let r = |f: f64| paired(&[10.0, 10.0, 10.0], &[10.0 * f, 10.0 * f, 10.0 * f]);
        let row = diagnose("x", &[r(1.0), r(1.1), r(0.9)]);
        let want = sd(&[0.0, 1.1f64.ln(), 0.9f64.ln()]).unwrap();
        assert!((row.sd_log_ratio.unwrap() - want).abs() < 1e-12);
        assert_eq!(row.rounds, 3);
    }

    #[test]
    fn tail_share_counts_samples_beyond_ten_percent_over_their_median() {
        let row = diagnose("x", &[paired(&[10.0, 10.0, 10.0, 12.0], &[10.0; 4])]);
        assert_eq!(row.tail_share, Some(1.0 / 8.0));
    }

    #[test]
    fn a_slow_first_sample_after_each_switch_is_seen_and_none_is_not() {
        // F S S F F S S F F S: F's switch samples are 0, 1, 3, 5, 7; S's 0, 2, 4, 6.
        let mut f = [10.0; 10];
        let mut s = [10.0; 10];
        for i in [0, 1, 3, 5, 7, 9] {
            f[i] = 11.0;
        }
        for i in [0, 2, 4, 6, 8] {
            s[i] = 11.0;
        }
        let rounds: Vec<_> = (0..4)
            .map(|k| {
                let j = 1.0 + k as f64 * 0.001;
                paired(
                    &f.iter().map(|x| x * j).collect::<Vec<_>>(),
                    &s.iter().map(|x| x * j * 1.0001).collect::<Vec<_>>(),
                )
            })
            .collect();
        let e = diagnose("x", &rounds).switch_effect.unwrap();
        assert!((e.estimate - 1.1f64.ln()).abs() < 1e-9, "{e:?}");
        let flat: Vec<_> = (0..4)
            .map(|k| {
                paired(
                    &[10.0, 10.1, 9.9, 10.0, 10.05, 9.95],
                    &[10.0 + k as f64 * 0.01; 6],
                )
            })
            .collect();
        let e = diagnose("x", &flat).switch_effect.unwrap();
        assert!(e.lo < 0.0 && e.hi > 0.0, "{e:?}");
    }

    #[test]
    fn two_speeds_are_bimodal_and_a_bell_is_not() {
        let two: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 0 { 0.0 } else { 1.0 })
            .collect();
        assert!(bimodality(&two).unwrap() > 0.9);
        // A deterministic bell: normal quantiles.
        let bell: Vec<f64> = (1..200)
            .map(|i| {
                let p = i as f64 / 200.0;
                statrs::function::erf::erf_inv(2.0 * p - 1.0) * std::f64::consts::SQRT_2
            })
            .collect();
        let bc = bimodality(&bell).unwrap();
        assert!((bc - 1.0 / 3.0).abs() < 0.03, "normal BC ≈ 1/3, got {bc}");
        assert!(bimodality(&[1.0; 10]).is_none());
    }

    #[test]
    fn persistent_drift_within_rounds_shows_as_lag1_autocorrelation() {
        let ramp: Vec<f64> = (0..10).map(|i| 10.0 * (1.0 + 0.01 * i as f64)).collect();
        let rounds: Vec<_> = (0..4).map(|_| paired(&[10.0; 10], &ramp)).collect();
        let row = diagnose("x", &rounds);
        assert!(row.lag1.unwrap() > row.lag1_band.unwrap(), "{row:?}");
        let alt: Vec<f64> = (0..10)
            .map(|i| if i % 2 == 0 { 10.0 } else { 10.3 })
            .collect();
        let rounds: Vec<_> = (0..4).map(|_| paired(&[10.0; 10], &alt)).collect();
        assert!(diagnose("x", &rounds).lag1.unwrap() < 0.0);
    }
}
