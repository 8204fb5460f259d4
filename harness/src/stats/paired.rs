//! The paired test: per-round log ratios `ln(head / base)`, Student's t on their mean (interval,
//! two- and one-sided p-values), and the Holm–Bonferroni correction across the suite.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Below this a standard error or deviation (in log-ratio units, i.e. ~relative) is rounding
/// error: identical noise-free rounds give exactly zero spread, not 1e-17.
const NEGLIGIBLE: f64 = 1e-12;

/// The paired log ratios `ln(head[i] / base[i])` of the rounds where both sides are valid (finite
/// and > 0), in round order. Rounds past the shorter side are ignored; an invalid round drops its
/// pair.
pub fn log_ratios(base: &[f64], head: &[f64]) -> Vec<f64> {
    base.iter()
        .zip(head)
        .filter(|&(&b, &h)| b.is_finite() && b > 0.0 && h.is_finite() && h > 0.0)
        .map(|(&b, &h)| (h / b).ln())
        .collect()
}

/// The `p`-quantile of Student's t with `df` degrees of freedom; NaN (never a panic) for `p`
/// outside `(0, 1)` or `df ≤ 0`.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return f64::NAN;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

/// `P(T > t)` for Student's t with `df` degrees of freedom (the survival function, accurate in
/// the far tail where `1 − cdf` would round to 0); NaN for bad `t` or `df`.
pub fn t_sf(t: f64, df: f64) -> f64 {
    if t.is_nan() {
        return f64::NAN;
    }
    if t == f64::INFINITY {
        return 0.0;
    }
    if t == f64::NEG_INFINITY {
        return 1.0;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(dist) => dist.sf(t).clamp(0.0, 1.0),
        Err(_) => f64::NAN,
    }
}

/// A one-sample Student t analysis of paired log ratios (Student 1908; the paired design of
/// Kalibera & Jones 2013 with one pair per round).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedT {
    /// Number of paired rounds.
    pub n: usize,
    /// Mean log ratio: `exp(mean) − 1` is the relative change (+0.05 = head 5 % slower).
    pub mean: f64,
    /// Sample standard deviation of the per-round log ratios (0 when below rounding error).
    pub sd: f64,
    /// Standard error of the mean, `sd / √n`.
    pub se: f64,
}

impl PairedT {
    /// `None` for fewer than two values or any value not finite.
    pub fn new(d: &[f64]) -> Option<PairedT> {
        let n = d.len();
        if n < 2 || d.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mean = d.iter().sum::<f64>() / n as f64;
        let ss: f64 = d.iter().map(|x| (x - mean) * (x - mean)).sum();
        let mut sd = (ss / (n - 1) as f64).sqrt();
        if sd < NEGLIGIBLE {
            sd = 0.0;
        }
        Some(PairedT {
            n,
            mean,
            sd,
            se: sd / (n as f64).sqrt(),
        })
    }

    pub fn df(&self) -> f64 {
        (self.n - 1) as f64
    }

    /// `mean / se`; with zero spread: 0 for a zero mean, ±∞ otherwise (a noise-free change is
    /// certain).
    pub fn t_stat(&self) -> f64 {
        if self.se == 0.0 {
            if self.mean.abs() < NEGLIGIBLE {
                0.0
            } else {
                self.mean.signum() * f64::INFINITY
            }
        } else {
            self.mean / self.se
        }
    }

    /// Two-sided p-value of "no change" (mean log ratio 0).
    pub fn p_two_sided(&self) -> f64 {
        (2.0 * t_sf(self.t_stat().abs(), self.df())).min(1.0)
    }

    /// One-sided p-value of "no slowdown" against "head slower" (mean log ratio > 0).
    pub fn p_slower(&self) -> f64 {
        t_sf(self.t_stat(), self.df())
    }

    /// Half-width of the two-sided `confidence` interval of the mean log ratio, `t·se`.
    pub fn half_width(&self, confidence: f64) -> f64 {
        if self.se == 0.0 {
            return 0.0;
        }
        t_quantile(0.5 + confidence / 2.0, self.df()) * self.se
    }

    /// The two-sided `confidence` interval of the mean log ratio.
    pub fn interval(&self, confidence: f64) -> (f64, f64) {
        let w = self.half_width(confidence);
        (self.mean - w, self.mean + w)
    }
}

/// Holm–Bonferroni adjusted p-values (Holm 1979), in input order: sort ascending, the `j`-th
/// smallest gets `max over k ≤ j of min(1, (m − k + 1)·p₍ₖ₎)`. Rejecting where the adjusted value
/// is `< α` controls the family-wise error rate at `α` under any dependence between the tests.
/// A NaN p-value counts in `m` and is treated as 1.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let clean: Vec<f64> = p
        .iter()
        .map(|&x| if x.is_nan() { 1.0 } else { x.clamp(0.0, 1.0) })
        .collect();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| clean[a].total_cmp(&clean[b]));
    let mut adjusted = vec![1.0; m];
    let mut running = 0.0f64;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(((m - k) as f64 * clean[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn log_ratios_pair_valid_rounds_only() {
        let d = log_ratios(
            &[1.0, 2.0, f64::NAN, 4.0, 5.0],
            &[2.0, 2.0, 3.0, 0.0, 5.0, 9.0],
        );
        assert_eq!(d.len(), 3);
        assert!(close(d[0], 2f64.ln(), 1e-15));
        assert_eq!(d[1], 0.0);
        assert_eq!(d[2], 0.0);
        assert!(log_ratios(&[], &[1.0]).is_empty());
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Standard table values.
        assert!(close(t_quantile(0.975, 4.0), 2.776_445_105, 1e-6));
        assert!(close(t_quantile(0.975, 5.0), 2.570_581_836, 1e-6));
        assert!(close(t_quantile(0.95, 10.0), 1.812_461_123, 1e-6));
        assert!(t_quantile(1.0, 4.0).is_nan());
        assert!(t_quantile(0.5, 0.0).is_nan());
        assert!(t_sf(f64::NAN, 3.0).is_nan());
        assert_eq!(t_sf(f64::INFINITY, 3.0), 0.0);
    }

    #[test]
    fn interval_and_p_of_a_small_sample_by_hand() {
        // d = 0.00 0.01 0.02 0.03 0.04: mean 0.02, sd = √(0.001/4) = 0.0158114, se = 0.00707107,
        // t = 2√2 = 2.828427 on 4 df; t₀.₉₇₅,₄ = 2.7764451 → 95 % interval 0.02 ± 0.0196324.
        // p two-sided = 2·P(T₄ > t), and for 4 df P(T₄ > t) = 1/2 − x(3 − x²)/4 with
        // x = t/√(t² + 4) = √(2/3): 0.0237103 each side, 0.0474207 both.
        let t = PairedT::new(&[0.01, 0.03, 0.00, 0.04, 0.02]).unwrap();
        assert_eq!(t.n, 5);
        assert!(close(t.mean, 0.02, 1e-15));
        assert!(close(t.sd, 0.015_811_388, 1e-9));
        assert!(close(t.se, 0.007_071_068, 1e-9));
        assert!(close(t.t_stat(), 2.828_427_125, 1e-8));
        let (lo, hi) = t.interval(0.95);
        assert!(close(lo, 0.000_367_568, 1e-9), "{lo}");
        assert!(close(hi, 0.039_632_432, 1e-9), "{hi}");
        assert!(
            close(t.p_two_sided(), 0.047_420_7, 1e-7),
            "{}",
            t.p_two_sided()
        );
        assert!(close(t.p_slower(), 0.023_710_3, 1e-7));
    }

    #[test]
    fn zero_spread_is_certain() {
        let same = PairedT::new(&[0.0; 4]).unwrap();
        assert_eq!(same.t_stat(), 0.0);
        assert_eq!(same.p_two_sided(), 1.0);
        assert_eq!(same.interval(0.95), (0.0, 0.0));
        let slower = PairedT::new(&[2f64.ln(); 4]).unwrap();
        assert_eq!(slower.sd, 0.0);
        assert_eq!(slower.p_two_sided(), 0.0);
        assert_eq!(slower.p_slower(), 0.0);
        let faster = PairedT::new(&[-(2f64.ln()); 4]).unwrap();
        assert_eq!(faster.p_slower(), 1.0);
        assert_eq!(PairedT::new(&[1.0]), None);
        assert_eq!(PairedT::new(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn holm_matches_a_hand_computed_example() {
        // m = 5, sorted p: 0.001 0.01 0.02 0.04 0.30
        // raw × (5, 4, 3, 2, 1): 0.005 0.04 0.06 0.08 0.30; running max keeps them monotone.
        let p = [0.04, 0.001, 0.30, 0.02, 0.01];
        let adj = holm(&p);
        let want = [0.08, 0.005, 0.30, 0.06, 0.04];
        for (a, w) in adj.iter().zip(want) {
            assert!(close(*a, w, 1e-12), "{adj:?}");
        }
        // Monotonicity: 0.010 × 3 = 0.03 but 0.011 × 2 = 0.022 must be lifted to 0.03.
        let adj = holm(&[0.010, 0.011, 0.5]);
        assert!(
            close(adj[0], 0.03, 1e-12) && close(adj[1], 0.03, 1e-12),
            "{adj:?}"
        );
        let adj = holm(&[0.6, f64::NAN]);
        assert_eq!(adj, vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }
}
