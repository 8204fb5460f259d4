//! Change points in a benchmark's history on main: the commits where the level of a series
//! moved, which no single pull request's check can see when each step is small (a 2 % step
//! below a 3 % resolution, or a creep of 1 % steps).
//!
//! The method is E-divisive with means (Matteson & James 2014, "A nonparametric approach for
//! multiple change point analysis of multivariate data", JASA 109(505)), as MongoDB's
//! performance CI uses it (Daly et al. 2020, "The Use of Change Point Detection to Identify
//! Software Performance Regressions in a Continuous Integration System", ICPE): on the log of the
//! values (so a step is a ratio), for every split `τ` of a segment the energy statistic
//!
//! ```text
//! Q(τ) = l·r/(l+r) · ( 2/(l·r) Σ_{i<τ≤j} |z_i − z_j|  −  2/(l(l−1)) Σ_{i<k<τ} |z_i − z_k|
//!                                                 −  2/(r(r−1)) Σ_{τ≤j<k} |z_j − z_k| )
//! ```
//!
//! (`l`, `r` the points left and right of `τ`), the best split over all current segments is
//! proposed, and a permutation test keeps it when the best `Q` over the same segments, each
//! shuffled on its own, reaches the observed one in at most `sig_level` of `permutations` shuffles
//! (p = (1 + hits) / (1 + permutations)). Accepted points split their segment and the search
//! repeats until a proposal fails the test (bisection, the order in which points are found is
//! kept). Segments keep at least `min_size` points.
//!
//! Written here rather than taken from a crate: the one Rust port (`edivisive` 0.1.0, 2021, no
//! release since) pulls in ndarray for an n × n matrix this needs as two running sums; the method
//! is 60 lines, and the tests below hold it to its job (a 2 % step, three 1 % steps, and its false
//! alarm rate on flat noisy series). The shuffles come from a ChaCha generator seeded from the
//! series, so the same history always gives the same answer.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// How [`e_divisive`] decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChangePointConfig {
    /// A proposed change point is kept when its permutation p-value is at most this.
    pub sig_level: f64,
    /// Shuffles per permutation test.
    pub permutations: usize,
    /// Fewest points on either side of a change point (and in every segment).
    pub min_size: usize,
}

impl Default for ChangePointConfig {
    /// 199 shuffles as the R `ecp` package; significance 0.01 (the Rust port's default; `ecp`
    /// has 0.05): each accepted point opens new segments that are tested again, so at 0.05 the
    /// search went on past the real steps and added sub-1 % points at p 0.02-0.045 (first tried
    /// on the seeds 0-19 and 100-119 of the tests below, then checked on fresh seeds, which the
    /// tests now use). `min_size` 3 (not `ecp`'s 30): a history is tens of commits, and a level
    /// needs a few commits to be told from one outlier.
    fn default() -> ChangePointConfig {
        ChangePointConfig {
            sig_level: 0.01,
            permutations: 199,
            min_size: 3,
        }
    }
}

/// One change of level.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChangePoint {
    /// Index of the first point at the new level.
    pub index: usize,
    /// Permutation p-value when it was accepted.
    pub p_value: f64,
    /// Its energy statistic `Q`.
    pub q: f64,
    /// Median of the values from the previous change point (or the start) up to this one, and
    /// from this one to the next (or the end).
    pub before: f64,
    pub after: f64,
    /// `after / before` (above 1: slower when the values are times).
    pub ratio: f64,
    /// 1-based order in which the bisection found it (the strongest first).
    pub order: usize,
}

/// The change points of `series` (positive values, e.g. ns per iteration, in commit order),
/// sorted by index. Values that are not finite and positive make the series unusable: none.
pub fn e_divisive(series: &[f64], cfg: &ChangePointConfig) -> Vec<ChangePoint> {
    let min = cfg.min_size.max(1);
    if series.len() < 2 * min || series.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Vec::new();
    }
    let z: Vec<f64> = series.iter().map(|v| v.ln()).collect();
    let seed = z.iter().fold(0x5EED_u64, |h, v| {
        (h ^ v.to_bits()).wrapping_mul(0x100_0000_01B3)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Accepted change points with their p-value, Q and order.
    let mut found: Vec<(usize, f64, f64)> = Vec::new();
    loop {
        let mut bounds: Vec<usize> = found.iter().map(|f| f.0).collect();
        bounds.extend([0, z.len()]);
        bounds.sort_unstable();
        let Some((tau, q)) = best_split(&z, &bounds, min) else {
            break;
        };
        let mut shuffled = z.clone();
        let mut hits = 0usize;
        for _ in 0..cfg.permutations {
            for w in bounds.windows(2) {
                shuffled[w[0]..w[1]].copy_from_slice(&z[w[0]..w[1]]);
                shuffled[w[0]..w[1]].shuffle(&mut rng);
            }
            if best_split(&shuffled, &bounds, min).is_some_and(|(_, qp)| qp >= q) {
                hits += 1;
            }
        }
        let p = (1 + hits) as f64 / (1 + cfg.permutations) as f64;
        if p > cfg.sig_level {
            break;
        }
        found.push((tau, p, q));
    }
    let mut idx: Vec<usize> = found.iter().map(|f| f.0).collect();
    idx.sort_unstable();
    let median = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    };
    let mut out: Vec<ChangePoint> = found
        .iter()
        .enumerate()
        .map(|(order, &(index, p_value, q))| {
            let k = idx.binary_search(&index).unwrap_or(0);
            let start = if k == 0 { 0 } else { idx[k - 1] };
            let end = idx.get(k + 1).copied().unwrap_or(series.len());
            let (before, after) = (median(&series[start..index]), median(&series[index..end]));
            ChangePoint {
                index,
                p_value,
                q,
                before,
                after,
                ratio: after / before,
                order: order + 1,
            }
        })
        .collect();
    out.sort_by_key(|c| c.index);
    out
}

/// The split with the largest `Q` over the segments between consecutive `bounds`.
fn best_split(z: &[f64], bounds: &[usize], min: usize) -> Option<(usize, f64)> {
    bounds
        .windows(2)
        .filter_map(|w| segment_best(&z[w[0]..w[1]], min).map(|(t, q)| (w[0] + t, q)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The best split of one segment: O(m²) with three running sums (between the sides, within the
/// left, within the right) moved one point at a time.
fn segment_best(z: &[f64], min: usize) -> Option<(usize, f64)> {
    let m = z.len();
    if m < 2 * min || min == 0 {
        return None;
    }
    let d = |i: usize, j: usize| (z[i] - z[j]).abs();
    // Split at τ = 1: left {0}, right {1..m}.
    let mut between: f64 = (1..m).map(|j| d(0, j)).sum();
    let mut left = 0.0;
    let mut right: f64 = (1..m)
        .flat_map(|j| (j + 1..m).map(move |k| (j, k)))
        .map(|(j, k)| d(j, k))
        .sum();
    let mut best: Option<(usize, f64)> = None;
    for tau in 1..m {
        if tau >= min && m - tau >= min {
            let (l, r) = (tau as f64, (m - tau) as f64);
            let within = |s: f64, n: f64| {
                if n > 1.0 {
                    2.0 * s / (n * (n - 1.0))
                } else {
                    0.0
                }
            };
            let e = 2.0 * between / (l * r) - within(left, l) - within(right, r);
            let q = l * r / (l + r) * e;
            if best.is_none_or(|(_, bq)| q > bq) {
                best = Some((tau, q));
            }
        }
        if tau + 1 < m {
            // Move point τ from the right side to the left.
            let to_left: f64 = (0..tau).map(|i| d(i, tau)).sum();
            let to_right: f64 = (tau + 1..m).map(|j| d(tau, j)).sum();
            between += to_right - to_left;
            left += to_left;
            right -= to_right;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::super::sim::Rng;
    use super::*;

    /// `n` points around 100 with lognormal noise `sd`, times `1 + step` from each index given.
    fn series(seed: u64, n: usize, sd: f64, steps: &[(usize, f64)]) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|i| {
                let level: f64 = steps
                    .iter()
                    .filter(|(at, _)| i >= *at)
                    .map(|(_, s)| 1.0 + s)
                    .product();
                100.0 * level * (sd * rng.normal()).exp()
            })
            .collect()
    }

    /// The Q of every split by the definition (all pairs), for the running sums to match.
    fn q_by_definition(z: &[f64], tau: usize) -> f64 {
        let (a, b) = z.split_at(tau);
        let (l, r) = (a.len() as f64, b.len() as f64);
        let mean_abs = |x: &[f64], y: &[f64]| {
            x.iter()
                .flat_map(|p| y.iter().map(move |q| (p - q).abs()))
                .sum::<f64>()
        };
        let within = |x: &[f64]| {
            let n = x.len() as f64;
            if n < 2.0 {
                0.0
            } else {
                mean_abs(x, x) / 2.0 * 2.0 / (n * (n - 1.0))
            }
        };
        l * r / (l + r) * (2.0 * mean_abs(a, b) / (l * r) - within(a) - within(b))
    }

    #[test]
    fn running_sums_give_the_statistic_of_the_definition() {
        let z: Vec<f64> = series(3, 17, 0.05, &[(9, 0.1)])
            .iter()
            .map(|v| v.ln())
            .collect();
        let (tau, q) = segment_best(&z, 2).unwrap();
        let want = (2..=15)
            .map(|t| (t, q_by_definition(&z, t)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        assert_eq!(tau, want.0);
        assert!((q - want.1).abs() < 1e-12, "{q} vs {}", want.1);
    }

    /// Runs `e_divisive` on 20 series with these steps and counts: series with exactly as many
    /// change points as steps, each within one commit of its step (`found`), and of those steps
    /// how many at their very commit (`exact`).
    fn detection(seed: u64, n: usize, sd: f64, steps: &[(usize, f64)]) -> (usize, usize) {
        detection_with(seed, n, sd, steps, &ChangePointConfig::default())
    }

    fn detection_with(
        seed: u64,
        n: usize,
        sd: f64,
        steps: &[(usize, f64)],
        cfg: &ChangePointConfig,
    ) -> (usize, usize) {
        let (mut found, mut exact) = (0, 0);
        for k in 0..20 {
            let cps = e_divisive(&series(seed + k, n, sd, steps), cfg);
            let near = cps.len() == steps.len()
                && cps.iter().zip(steps).all(|(c, (at, step))| {
                    c.index.abs_diff(*at) <= 1 && (c.ratio - 1.0 - step).abs() < step / 3.0
                });
            if near {
                found += 1;
                exact += cps
                    .iter()
                    .zip(steps)
                    .filter(|(c, (at, _))| c.index == *at)
                    .count();
            }
        }
        (found, exact)
    }

    /// A 2 % step in 0.6 % noise (about what a median of 8 rounds scatters on this machine): a
    /// single PR with a 3 % resolution cannot flag it; the history finds it within one commit
    /// (noise can make the last commit before the step look like the new level, or the first
    /// after it like the old) in at least 18 of 20 series.
    #[test]
    fn a_two_percent_step_is_found_at_its_commit() {
        let (found, exact) = detection(500, 40, 0.006, &[(22, 0.02)]);
        eprintln!("2 % step: found in {found} of 20 series, at its very commit in {exact}");
        assert!(found >= 18, "{found} of 20");
    }

    /// A creep: three 1 % steps, 15 commits apart, in 0.3 % noise. All three steps are found in
    /// nearly every series and placed within one commit about as often as a least-squares oracle
    /// that knows there are three can (`creep_against_an_oracle`: 371 of 400 fresh series
    /// against the oracle's 376); this test also wants each step's size within a third of 1 %
    /// from the medians beside it, which the noise sometimes denies. These seeds: 15 of 20; held
    /// at 14.
    #[test]
    fn a_creep_of_three_one_percent_steps_is_three_change_points() {
        let (found, exact) = detection(600, 60, 0.003, &[(15, 0.01), (30, 0.01), (45, 0.01)]);
        eprintln!(
            "1 % creep: all three found in {found} of 20 series, {exact} of their steps at their very commit"
        );
        assert!(found >= 14, "{found} of 20");
    }

    /// The best placement of exactly `k` change points in `z` by least squares (dynamic
    /// programming over all placements, segments of at least `min`): an oracle that knows how
    /// many steps there are, for how well *any* method can place them in this noise.
    fn oracle_steps(z: &[f64], k: usize, min: usize) -> Vec<usize> {
        let n = z.len();
        let sse = |a: usize, b: usize| {
            let m = z[a..b].iter().sum::<f64>() / (b - a) as f64;
            z[a..b].iter().map(|x| (x - m).powi(2)).sum::<f64>()
        };
        // best[j][e]: cost of z[0..e] in j + 1 segments, with the last split in arg[j][e].
        let mut best = vec![vec![f64::INFINITY; n + 1]; k + 1];
        let mut arg = vec![vec![0usize; n + 1]; k + 1];
        for e in min..=n {
            best[0][e] = sse(0, e);
        }
        for j in 1..=k {
            for e in (j + 1) * min..=n {
                for t in j * min..=e - min {
                    let c = best[j - 1][t] + sse(t, e);
                    if c < best[j][e] {
                        best[j][e] = c;
                        arg[j][e] = t;
                    }
                }
            }
        }
        let mut out = Vec::new();
        let mut e = n;
        for j in (1..=k).rev() {
            e = arg[j][e];
            out.push(e);
        }
        out.reverse();
        out
    }

    /// How well the creep's steps can be placed at all in this noise: E-divisive against a
    /// least-squares oracle that is told there are exactly three steps, both counted the same
    /// way (all three points within one commit of their steps; E-divisive also with the
    /// `detection` rule, which in addition wants each step's size, from the medians of the
    /// segments beside it, within a third of 1 %). Seeds 700-980 were looked at while trying two
    /// placements after the bisection (a fit between neighbours, then a joint least-squares
    /// placement within 3 commits): 183 → 184 of 200 within one commit, 371 → 373 of the fresh
    /// 400, against the oracle's 187 and 376; both dropped. The earlier "176 against 187" compared
    /// the `detection` rule with the oracle's location-only count: the gap was the size rule.
    /// `cargo test --release -p harness --lib creep_against_an_oracle -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement: prints E-divisive against the oracle on 600 creep series"]
    fn creep_against_an_oracle() {
        let creep = [(15, 0.01), (30, 0.01), (45, 0.01)];
        let sets: [(&str, Vec<u64>); 2] = [
            (
                "looked at",
                (700..1000).step_by(20).filter(|b| b % 200 >= 100).collect(),
            ),
            ("fresh", (1100..1500).step_by(20).collect()),
        ];
        let near = |at: &[usize]| {
            at.len() == 3
                && at
                    .iter()
                    .zip(&creep)
                    .all(|(a, (st, _))| a.abs_diff(*st) <= 1)
        };
        for (what, bases) in sets {
            let (mut with_size, mut located, mut oracle, mut wrong_count) = (0, 0, 0, 0);
            for &base in &bases {
                with_size += detection(base, 60, 0.003, &creep).0;
                for k in 0..20 {
                    let s = series(base + k, 60, 0.003, &creep);
                    let z: Vec<f64> = s.iter().map(|v| v.ln()).collect();
                    if near(&oracle_steps(&z, 3, 3)) {
                        oracle += 1;
                    }
                    let at: Vec<usize> = e_divisive(&s, &ChangePointConfig::default())
                        .iter()
                        .map(|c| c.index)
                        .collect();
                    wrong_count += usize::from(at.len() != 3);
                    located += usize::from(near(&at));
                }
            }
            let n = bases.len() * 20;
            let ci = |k: usize| {
                let (lo, hi) = clopper_pearson(k, n);
                format!("{k} of {n} ({:.1}-{:.1} %)", 100.0 * lo, 100.0 * hi)
            };
            eprintln!(
                "{what} seeds {}..{}: all three within one commit: E-divisive {}, the oracle {}; \
                 E-divisive with the size rule {}; another number of change points in {wrong_count}",
                bases[0],
                bases[bases.len() - 1] + 19,
                ci(located),
                ci(oracle),
                ci(with_size),
            );
        }
    }

    /// Two-sided 95 % Clopper–Pearson interval of `k` successes in `n`.
    fn clopper_pearson(k: usize, n: usize) -> (f64, f64) {
        use statrs::distribution::{Beta, ContinuousCDF};
        let lo = if k == 0 {
            0.0
        } else {
            Beta::new(k as f64, (n - k + 1) as f64)
                .unwrap()
                .inverse_cdf(0.025)
        };
        let hi = if k == n {
            1.0
        } else {
            Beta::new((k + 1) as f64, (n - k) as f64)
                .unwrap()
                .inverse_cdf(0.975)
        };
        (lo, hi)
    }

    /// Flat noisy series: the share with any change point is the test's false alarm rate, about
    /// `sig_level` (0.01) by construction. 100 series of 40 points; held to at most 5 (the 99.9th
    /// percentile of Binomial(100, 0.01)), and the rate printed with its Clopper–Pearson interval.
    #[test]
    fn flat_series_rarely_get_a_change_point() {
        let n = 100usize;
        let alarms = (0..n)
            .filter(|&seed| {
                let s = series(2000 + seed as u64, 40, 0.01, &[]);
                !e_divisive(&s, &ChangePointConfig::default()).is_empty()
            })
            .count();
        let (lo, hi) = clopper_pearson(alarms, n);
        eprintln!("false change points: {alarms} of {n} flat series (95 % CI {lo:.3}-{hi:.3})");
        assert!(alarms <= 5, "{alarms} of {n}");
    }

    #[test]
    fn short_or_unusable_series_have_none() {
        let cfg = ChangePointConfig::default();
        assert!(e_divisive(&[1.0, 2.0, 3.0, 4.0, 5.0], &cfg).is_empty());
        let mut s = series(7, 30, 0.001, &[(15, 0.5)]);
        assert_eq!(e_divisive(&s, &cfg).len(), 1);
        s[3] = f64::NAN;
        assert!(e_divisive(&s, &cfg).is_empty());
        s[3] = 0.0;
        assert!(e_divisive(&s, &cfg).is_empty());
    }

    #[test]
    fn the_same_series_gives_the_same_answer() {
        let s = series(9, 40, 0.006, &[(20, 0.015)]);
        let cfg = ChangePointConfig::default();
        assert_eq!(e_divisive(&s, &cfg), e_divisive(&s, &cfg));
    }
}
