//! Rank-based inference on paired log ratios, robust to the heavy-tailed rounds measured here:
//! the Wilcoxon signed-rank test of a shifted centre and its inversion, the Hodges–Lehmann
//! estimate with its distribution-free confidence bounds (Hodges & Lehmann 1963; Hollander, Wolfe
//! & Chicken, *Nonparametric Statistical Methods*, 3rd ed., §3.1–3.2).
//!
//! Model: the per-round log ratios are `dᵢ = θ + εᵢ` with the `εᵢ` independent and symmetric about
//! 0 (the ABBA order and paired sampling make a round's disturbance as likely on either side);
//! no normality, no finite variance. Under that model every statement here is exact for any
//! `n`: the null distribution of the signed-rank statistic `W⁺` is the distribution of a sum of
//! a random subset of `{1, …, n}`, computed exactly ([`SignedRank`]), and the bounds are order
//! statistics of the `n(n+1)/2` Walsh averages `(dᵢ + dⱼ)/2, i ≤ j`.
//!
//! Why not Student's t on the mean: with excess kurtosis up to 58 in A/A rounds here, the t
//! interval is far from its nominal level in the tails a suite-wide correction needs, and one
//! wild round moves the mean. A rank interval's price is granularity: with `n` rounds no
//! one-sided level below `2⁻ⁿ` is reachable (8 rounds: 0.0039), so a bound at a smaller level
//! is infinite (`-∞` / `+∞`) and says so.

/// The exact null distribution of the Wilcoxon signed-rank statistic `W⁺` for `n` untied,
/// non-zero observations: `P(W⁺ ≤ w)` for `w = 0 … n(n+1)/2`.
#[derive(Clone, Debug, PartialEq)]
pub struct SignedRank {
    n: usize,
    /// `cdf[w] = P(W⁺ ≤ w)`.
    cdf: Vec<f64>,
}

impl SignedRank {
    /// Exact, by the subset-sum recursion over ranks (each rank joins the positive sum with
    /// probability ½). O(n³) time, O(n²) memory: about 1 ms for n = 100.
    pub fn new(n: usize) -> SignedRank {
        let total = n * (n + 1) / 2;
        // pmf[s] = P(sum of the chosen ranks among 1..=k is s), built k by k.
        let mut pmf = vec![0.0f64; total + 1];
        pmf[0] = 1.0;
        for k in 1..=n {
            for s in (0..=total).rev() {
                let with = if s >= k { pmf[s - k] } else { 0.0 };
                pmf[s] = 0.5 * (pmf[s] + with);
            }
        }
        let mut acc = 0.0;
        let cdf = pmf
            .iter()
            .map(|p| {
                acc += p;
                acc.min(1.0)
            })
            .collect();
        SignedRank { n, cdf }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// `P(W⁺ ≤ w)`; 0 below 0, 1 past the maximum `n(n+1)/2`.
    pub fn cdf(&self, w: i64) -> f64 {
        if w < 0 {
            0.0
        } else {
            self.cdf.get(w as usize).copied().unwrap_or(1.0)
        }
    }

    /// The number of Walsh averages that may be cut from one end for a one-sided bound at level
    /// `alpha`: the largest `c` with `P(W⁺ ≤ c − 1) ≤ alpha` (0 when even `P(W⁺ = 0) = 2⁻ⁿ` is
    /// above `alpha`: no finite bound at that level).
    pub fn cut(&self, alpha: f64) -> usize {
        self.cdf.iter().take_while(|&&p| p <= alpha).count()
    }
}

/// The Walsh averages `(dᵢ + dⱼ)/2, i ≤ j`, sorted (`n(n+1)/2` of them). Non-finite values are
/// the caller's to drop first.
pub fn walsh_averages(d: &[f64]) -> Vec<f64> {
    let mut w = Vec::with_capacity(d.len() * (d.len() + 1) / 2);
    for i in 0..d.len() {
        for j in i..d.len() {
            w.push(0.5 * (d[i] + d[j]));
        }
    }
    w.sort_by(f64::total_cmp);
    w
}

/// One benchmark's rank analysis: the Hodges–Lehmann estimate of the centre `θ` and one-sided
/// bounds on it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankAnalysis {
    /// Number of paired rounds.
    pub n: usize,
    /// The median of the Walsh averages (Hodges–Lehmann): `exp(hl) − 1` is the relative change.
    pub hl: f64,
    walsh: Vec<f64>,
    dist: SignedRank,
}

impl RankAnalysis {
    /// None below one round or with a non-finite ratio (the caller drops invalid rounds).
    pub fn new(d: &[f64]) -> Option<RankAnalysis> {
        if d.is_empty() || d.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let walsh = walsh_averages(d);
        let m = walsh.len();
        let hl = if m % 2 == 1 {
            walsh[m / 2]
        } else {
            0.5 * (walsh[m / 2 - 1] + walsh[m / 2])
        };
        Some(RankAnalysis {
            n: d.len(),
            hl,
            walsh,
            dist: SignedRank::new(d.len()),
        })
    }

    /// A lower confidence bound for `θ` at one-sided level `alpha`: `P(θ < lower) ≤ alpha`
    /// under the model; `-∞` when `n` rounds cannot reach `alpha`.
    pub fn lower(&self, alpha: f64) -> f64 {
        match self.dist.cut(alpha) {
            0 => f64::NEG_INFINITY,
            c => self.walsh[c - 1],
        }
    }

    /// An upper confidence bound for `θ` at one-sided level `alpha`: `P(θ > upper) ≤ alpha`;
    /// `+∞` when `n` rounds cannot reach `alpha`.
    pub fn upper(&self, alpha: f64) -> f64 {
        match self.dist.cut(alpha) {
            0 => f64::INFINITY,
            c => self.walsh[self.walsh.len() - c],
        }
    }

    /// The exact one-sided p-value of "θ ≤ shift" against "θ > shift": the smallest level at
    /// which the lower bound clears `shift`, i.e. `P(W⁺ ≥ #{Walsh averages > shift})` under the
    /// null. (The signed-rank statistic of `dᵢ − shift` equals that count.)
    pub fn p_above(&self, shift: f64) -> f64 {
        let above = self.walsh.iter().filter(|&&w| w > shift).count() as i64;
        1.0 - self.dist.cdf(above - 1)
    }

    /// The mirror: the p-value of "θ ≥ shift" against "θ < shift".
    pub fn p_below(&self, shift: f64) -> f64 {
        let below = self.walsh.iter().filter(|&&w| w < shift).count() as i64;
        1.0 - self.dist.cdf(below - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `P(W⁺ ≤ w)` by enumerating all 2ⁿ sign patterns: the definition, independent of the
    /// recursion.
    fn brute_cdf(n: usize, w: usize) -> f64 {
        let hits = (0u32..1 << n)
            .filter(|mask| {
                let s: usize = (0..n).filter(|k| mask >> k & 1 == 1).map(|k| k + 1).sum();
                s <= w
            })
            .count();
        hits as f64 / (1u64 << n) as f64
    }

    #[test]
    fn the_exact_distribution_matches_enumeration() {
        for n in 1..=12 {
            let d = SignedRank::new(n);
            for w in 0..=n * (n + 1) / 2 {
                let (got, want) = (d.cdf(w as i64), brute_cdf(n, w));
                assert!((got - want).abs() < 1e-12, "n {n} w {w}: {got} vs {want}");
            }
            assert_eq!(d.cdf(-1), 0.0);
            assert_eq!(d.cdf((n * (n + 1) / 2) as i64), 1.0);
        }
    }

    #[test]
    fn critical_values_match_the_published_table() {
        // Lower critical values of W⁺ (largest w with P(W⁺ ≤ w) ≤ α) from the standard table
        // (Hollander, Wolfe & Chicken, Table A.4; R's qsignrank(α, n) − 1 where exact):
        // n = 10: α 0.05 → 10, α 0.025 → 8; n = 20: α 0.05 → 60, α 0.01 → 43.
        for (n, alpha, w) in [
            (10, 0.05, 10),
            (10, 0.025, 8),
            (20, 0.05, 60),
            (20, 0.01, 43),
        ] {
            let d = SignedRank::new(n);
            assert_eq!(d.cut(alpha), w + 1, "n {n} α {alpha}");
            assert!(d.cdf(w as i64) <= alpha && d.cdf(w as i64 + 1) > alpha);
        }
        // 8 rounds cannot reach 0.001 one-sided: 2⁻⁸ = 0.0039.
        assert_eq!(SignedRank::new(8).cut(0.001), 0);
        assert_eq!(SignedRank::new(8).cut(1.0 / 256.0), 1);
    }

    #[test]
    fn hodges_lehmann_and_bounds_by_hand() {
        // d = 1, 2, 4: Walsh averages 1, 1.5, 2, 2.5, 3, 4; HL = (2 + 2.5)/2.
        let r = RankAnalysis::new(&[4.0, 1.0, 2.0]).unwrap();
        assert_eq!(
            walsh_averages(&[4.0, 1.0, 2.0]),
            [1.0, 1.5, 2.0, 2.5, 3.0, 4.0]
        );
        assert_eq!(r.hl, 2.25);
        // n = 3: P(W⁺ = 0) = 1/8, so at α = 1/8 one average is cut from each end.
        assert_eq!((r.lower(0.125), r.upper(0.125)), (1.0, 4.0));
        assert_eq!(r.lower(0.1), f64::NEG_INFINITY);
        assert_eq!(r.upper(0.1), f64::INFINITY);
        // P(W⁺ ≤ 1) = 2/8: two cut.
        assert_eq!((r.lower(0.25), r.upper(0.25)), (1.5, 3.0));
    }

    #[test]
    fn p_values_invert_the_bounds() {
        // The lower bound at level α clears `shift` exactly when the p-value is ≤ α.
        let d = [
            0.031, 0.052, 0.044, 0.061, 0.038, 0.049, 0.027, 0.058, 0.041, 0.055,
        ];
        let r = RankAnalysis::new(&d).unwrap();
        for shift in [0.0, 0.02, 0.03, 0.035, 0.04, 0.05] {
            for alpha in [0.001, 0.005, 0.01, 0.025, 0.05, 0.1] {
                let clears = r.lower(alpha) > shift;
                assert_eq!(clears, r.p_above(shift) <= alpha, "shift {shift} α {alpha}");
                let clears_below = r.upper(alpha) < shift;
                assert_eq!(
                    clears_below,
                    r.p_below(shift) <= alpha,
                    "shift {shift} α {alpha}"
                );
            }
        }
        // All ten rounds above 0.02: the smallest p ten rounds can give, 2⁻¹⁰.
        assert_eq!(r.p_above(0.02), 1.0 / 1024.0);
    }

    #[test]
    fn one_wild_round_moves_the_estimate_little() {
        let calm = [0.01, 0.02, 0.015, 0.012, 0.018, 0.011, 0.016, 0.014];
        let mut wild = calm;
        wild[3] = 0.9;
        let (a, b) = (
            RankAnalysis::new(&calm).unwrap(),
            RankAnalysis::new(&wild).unwrap(),
        );
        assert!((a.hl - b.hl).abs() < 0.003, "{} vs {}", a.hl, b.hl);
        let mean = |d: &[f64]| d.iter().sum::<f64>() / d.len() as f64;
        assert!(mean(&wild) - mean(&calm) > 0.1);
    }

    #[test]
    fn coverage_is_at_least_nominal_under_heavy_tails() {
        // Symmetric, very heavy-tailed noise (a Cauchy-like ratio of uniforms), θ = 0.05: the
        // one-sided bounds at 5 % miss θ in at most 5 % of draws, up to sampling error.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut unif = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let theta = 0.05;
        let (mut miss_lo, mut miss_hi, trials) = (0, 0, 4000);
        for _ in 0..trials {
            let d: Vec<f64> = (0..10)
                .map(|_| {
                    let (u, v) = (unif() - 0.5, unif() + 1e-9);
                    theta + 0.01 * u / v
                })
                .collect();
            let r = RankAnalysis::new(&d).unwrap();
            miss_lo += (r.lower(0.05) > theta) as usize;
            miss_hi += (r.upper(0.05) < theta) as usize;
        }
        // 5 % of 4000 = 200, with a binomial sd of 14: 250 is 3.6 sd above.
        assert!(miss_lo < 250 && miss_hi < 250, "{miss_lo} {miss_hi}");
    }

    #[test]
    fn no_rounds_or_bad_rounds_give_no_analysis() {
        assert!(RankAnalysis::new(&[]).is_none());
        assert!(RankAnalysis::new(&[0.1, f64::NAN]).is_none());
    }
}
