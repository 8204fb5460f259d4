//! The decision: per benchmark a paired change estimate with its interval and p-value, a
//! threshold, Holm control across the suite, and a status; first pass (suspects) and final pass
//! (after confirmation rounds). Under `policy.rule: resolution`, [`analyze`] and [`noisy`] hand
//! over to `super::resolution`. The method is written out in `harness/STATS.md`.

use super::notes::{p_str, pct, pct_abs};
use super::paired::{PairedT, holm, log_ratios};
use super::policy::Policy;
use super::policy::Rule;
use super::profile::NoiseProfile;
use super::types::{BenchInput, Change, Decision, Phase, Status, Threshold, ThresholdSource};

/// The ids that need confirmation rounds after the first pass, in input order.
pub fn suspects(decisions: &[Decision]) -> Vec<String> {
    decisions
        .iter()
        .filter(|d| d.suspect)
        .map(|d| d.id.clone())
        .collect()
}

/// The ids that get noise rounds after the first pass (`policy.noise_rounds` more first-pass
/// rounds), in input order, chosen by their noise alone:
/// - a threshold above `noise_target` (for a spread-derived threshold, that is the sd of the
///   rounds: under normal noise independent of their mean), suspect or not;
/// - ❔ and not a suspect because of the noise: an estimate inside the threshold with too wide an
///   interval.
///
/// Not a ❔ whose estimate is past a threshold at or under `noise_target` without significance:
/// more rounds chosen because an estimate looked large would be optional stopping, a way to
/// manufacture a slowdown or an improvement. Empty when `policy.noise_rounds` is 0.
pub fn noisy(decisions: &[Decision], policy: &Policy) -> Vec<String> {
    if policy.noise_rounds == 0 {
        return Vec::new();
    }
    if policy.rule == Rule::Resolution {
        // Rounds go where the answer is still open (the levels are divided by `looks`, so
        // choosing by the data is allowed).
        return super::resolution::open(decisions, policy);
    }
    decisions
        .iter()
        .filter(|d| {
            let inside = d.change.as_ref().is_none_or(|c| {
                !c.estimate.is_finite() || c.estimate.ln_1p().abs() <= d.threshold.ln_1p()
            });
            d.threshold > policy.noise_target
                || (d.status == Status::TooNoisy && !d.suspect && inside)
        })
        .map(|d| d.id.clone())
        .collect()
}

/// What one benchmark's data amount to, before the suite-wide correction.
struct Prepared<'a> {
    input: &'a BenchInput,
    kind: Kind,
    threshold: Threshold,
}

enum Kind {
    Added,
    Removed,
    Neither,
    Paired {
        n: usize,
        n_confirm: usize,
        /// All valid rounds (the estimate and its interval); `None` below two rounds.
        all: Option<PairedT>,
        /// The confirmation rounds alone (final pass).
        confirm: Option<PairedT>,
    },
}

/// Decides every benchmark of a suite. `profile` is the calibration profile matching this host,
/// if any (the caller checks the fingerprint); `phase` says whether confirmation rounds have been
/// run. Pure: the same inputs give the same decisions, in input order.
pub fn analyze(
    inputs: &[BenchInput],
    profile: Option<&NoiseProfile>,
    policy: &Policy,
    phase: Phase,
) -> Vec<Decision> {
    if policy.rule == Rule::Resolution {
        return super::resolution::analyze(inputs, policy, phase);
    }
    let prepared: Vec<Prepared> = inputs
        .iter()
        .map(|input| prepare(input, profile, policy, phase))
        .collect();

    // Holm across every benchmark that has a test, in one family.
    let tested: Vec<(usize, f64)> = prepared
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.kind {
            Kind::Paired { all: Some(t), .. } => Some((i, t.p_two_sided())),
            _ => None,
        })
        .collect();
    let adjusted = holm(&tested.iter().map(|&(_, p)| p).collect::<Vec<_>>());
    let mut p_adj = vec![f64::NAN; prepared.len()];
    for (&(i, _), a) in tested.iter().zip(adjusted) {
        p_adj[i] = a;
    }

    prepared
        .iter()
        .zip(p_adj)
        .map(|(p, adj)| decide(p, adj, policy, phase))
        .collect()
}

fn prepare<'a>(
    input: &'a BenchInput,
    profile: Option<&NoiseProfile>,
    policy: &Policy,
    phase: Phase,
) -> Prepared<'a> {
    let configured = policy.thresholds.get(&input.id).map(|&v| {
        if v >= policy.floor {
            Threshold {
                value: v,
                source: ThresholdSource::Config,
                derived: 0.0,
            }
        } else {
            Threshold::floor(policy)
        }
    });
    let profiled = profile.and_then(|p| p.threshold_for(&input.id, policy));
    let fixed = configured.or(profiled);

    let (base, head) = match (&input.base, &input.head) {
        (Some(b), Some(h)) => (b, h),
        (b, h) => {
            let kind = match (b, h) {
                (None, Some(_)) => Kind::Added,
                (Some(_), None) => Kind::Removed,
                _ => Kind::Neither,
            };
            let threshold = fixed.unwrap_or_else(|| Threshold::floor(policy));
            return Prepared {
                input,
                kind,
                threshold,
            };
        }
    };

    // Rounds at index ≥ split are confirmation rounds (none in the first pass).
    let pairs = base.len().min(head.len());
    let split = match phase {
        Phase::First => pairs,
        Phase::Final { first_rounds } => first_rounds.min(pairs),
    };
    let first_d = log_ratios(&base[..split], &head[..split]);
    let confirm_d = log_ratios(&base[split..pairs], &head[split..pairs]);
    let all_d: Vec<f64> = first_d.iter().chain(&confirm_d).copied().collect();
    let all = PairedT::new(&all_d);
    let confirm = PairedT::new(&confirm_d);

    // Spread noise: the standard error a first-pass estimate has, from the spread of all rounds
    // (the profile's noise is the same quantity measured across A/A runs). Confirmation rounds
    // sharpen the estimate of the spread, not the benchmark's noise level.
    let n_ref = if first_d.len() >= 2 {
        first_d.len()
    } else {
        all_d.len()
    };
    let threshold = fixed.unwrap_or_else(|| match &all {
        Some(t) => {
            let noise = t.sd / (n_ref as f64).sqrt();
            Threshold::from_noise(noise, ThresholdSource::Spread, policy)
        }
        None => Threshold::floor(policy),
    });
    Prepared {
        input,
        kind: Kind::Paired {
            n: all_d.len(),
            n_confirm: confirm_d.len(),
            all,
            confirm,
        },
        threshold,
    }
}

fn decide(p: &Prepared, p_adjusted: f64, policy: &Policy, phase: Phase) -> Decision {
    let th = p.threshold;
    let mut d = Decision {
        id: p.input.id.clone(),
        status: Status::TooNoisy,
        change: None,
        threshold: th.value,
        threshold_source: th.source,
        note: None,
        rounds: 0,
        confirmation_rounds: 0,
        suspect: false,
    };
    let (n, n_confirm, all, confirm) = match &p.kind {
        Kind::Added => {
            d.status = Status::Added;
            return d;
        }
        Kind::Removed => {
            d.status = Status::Removed;
            return d;
        }
        Kind::Neither => {
            d.note = Some("no timings on either side".to_string());
            return d;
        }
        Kind::Paired {
            n,
            n_confirm,
            all,
            confirm,
        } => (*n, *n_confirm, all, confirm),
    };
    d.rounds = n;
    d.confirmation_rounds = n_confirm;
    let Some(t) = all else {
        d.note = Some(format!(
            "only {n} valid paired rounds (need {})",
            policy.min_rounds
        ));
        return d;
    };

    let (lo, hi) = t.interval(policy.confidence);
    let p_value = t.p_two_sided();
    d.change = Some(Change {
        estimate: t.mean.exp_m1(),
        ci_low: lo.exp_m1(),
        ci_high: hi.exp_m1(),
        confidence: policy.confidence,
        p_value,
        p_adjusted,
    });
    if n < policy.min_rounds {
        d.note = Some(format!(
            "only {n} valid paired rounds (need {})",
            policy.min_rounds
        ));
        return d;
    }

    let tau = th.log();
    let m = t.mean;
    let est = pct(m.exp_m1());
    let thr = pct_abs(th.value);
    let significant = p_adjusted < policy.alpha;
    let holm_note = format!("Holm-adjusted p {}", p_str(p_adjusted));
    // A benchmark whose own noise calls for a threshold past `max_threshold` cannot be gated in
    // this run: at most ⚠️, otherwise ❔.
    let noise_source = matches!(
        th.source,
        ThresholdSource::Profile | ThresholdSource::Spread
    );
    let ungateable = (noise_source && th.derived > policy.max_threshold).then(|| {
        format!(
            "too noisy to gate: its noise needs a {} threshold (limit {})",
            pct_abs(th.derived),
            pct_abs(policy.max_threshold)
        )
    });

    if m > tau {
        match phase {
            Phase::First => {
                // Suspect: a slowdown, one-sided p below screen_alpha, interval past the threshold.
                d.suspect = t.p_slower() < policy.screen_alpha && hi > tau;
                if d.suspect {
                    d.status = Status::PossibleRegression;
                    d.note = Some(format!(
                        "suspect: {est} beyond the {thr} threshold ({holm_note}); \
                         awaiting confirmation rounds"
                    ));
                } else {
                    d.note = Some(format!(
                        "{est} beyond the {thr} threshold but not significant (p {})",
                        p_str(p_value)
                    ));
                }
            }
            Phase::Final { .. } => {
                let (confirmed, confirm_note) =
                    confirmation(confirm.as_ref(), n_confirm, tau, policy);
                let (status, note) = match (significant, confirmed) {
                    (true, true) => match &ungateable {
                        None => (
                            Status::Regression,
                            format!(
                                "{est} beyond the {thr} threshold ({holm_note}); {confirm_note}"
                            ),
                        ),
                        // Too noisy to gate small changes, but a regression whose interval lies
                        // wholly above even `max_threshold`, both pooled and in the confirmation
                        // rounds alone, is beyond doubt: 🔴.
                        Some(why)
                            if lo > policy.max_threshold.ln_1p()
                                && confirm.as_ref().is_some_and(|c| {
                                    c.interval(policy.confidence).0 > policy.max_threshold.ln_1p()
                                }) =>
                        {
                            (
                                Status::Regression,
                                format!(
                                    "{est}, interval entirely above {} ({holm_note}; \
                                 {confirm_note}), although {why}",
                                    pct_abs(policy.max_threshold)
                                ),
                            )
                        }
                        Some(why) => (
                            Status::PossibleRegression,
                            format!("{est} ({holm_note}; {confirm_note}) but {why}"),
                        ),
                    },
                    (true, false) => (
                        Status::PossibleRegression,
                        format!(
                            "{est} beyond the {thr} threshold ({holm_note}) but not confirmed: \
                             {confirm_note}"
                        ),
                    ),
                    (false, true) => (
                        Status::PossibleRegression,
                        format!(
                            "{est} beyond the {thr} threshold and {confirm_note}, but not \
                             significant across the suite ({holm_note})"
                        ),
                    ),
                    (false, false) => (
                        Status::TooNoisy,
                        format!(
                            "{est} beyond the {thr} threshold but not significant ({holm_note})"
                        ),
                    ),
                };
                d.status = status;
                d.note = Some(note);
            }
        }
        return d;
    }

    // No regression beyond the threshold. The first pass still screens near-misses whose
    // interval reaches past the threshold.
    if phase == Phase::First && m > 0.0 {
        d.suspect = t.p_slower() < policy.screen_alpha && hi > tau;
    }
    if m < -tau {
        if significant {
            d.status = Status::Improvement;
        } else {
            d.note = Some(format!(
                "{est} beyond the {thr} threshold but not significant ({holm_note})"
            ));
        }
        return d;
    }
    let w = hi - m;
    if let Some(why) = ungateable {
        d.note = Some(why);
    } else if w > policy.wide_factor * tau {
        d.note = Some(format!(
            "interval ±{} is wider than {}× the {thr} threshold: this run is noisier than its \
             threshold assumes",
            pct_abs(w.exp_m1()),
            policy.wide_factor
        ));
    } else {
        d.status = Status::NoChange;
        if d.suspect {
            d.note = Some(format!(
                "suspect: {est}, interval reaches past the {thr} threshold; awaiting \
                 confirmation rounds"
            ));
        }
    }
    d
}

/// Whether the confirmation rounds alone show the slowdown: one-sided p below
/// `confirm_alpha` and an estimate of at least `confirm_fraction` × the threshold. Returns the
/// verdict and a phrase for the note.
fn confirmation(t: Option<&PairedT>, n: usize, tau: f64, policy: &Policy) -> (bool, String) {
    match t {
        Some(t) if n >= policy.min_rounds => {
            let p = t.p_slower();
            let ok = p < policy.confirm_alpha && t.mean >= policy.confirm_fraction * tau;
            let shown = format!("{}, one-sided p {}", pct(t.mean.exp_m1()), p_str(p));
            let phrase = if ok {
                format!("confirmed by {n} confirmation rounds alone ({shown})")
            } else {
                format!("{n} confirmation rounds alone show {shown}")
            };
            (ok, phrase)
        }
        _ if n == 0 => (false, "no confirmation rounds".to_string()),
        _ => (
            false,
            format!("only {n} confirmation rounds (need {})", policy.min_rounds),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::profile::NoiseProfile;
    use crate::stats::sim::{Noise, Rng, SimBench, aa_suite, add_rounds, gate};

    fn input(id: &str, base: &[f64], head: &[f64]) -> BenchInput {
        BenchInput {
            id: id.into(),
            base: Some(base.to_vec()),
            head: Some(head.to_vec()),
        }
    }

    fn one(inputs: &[BenchInput], phase: Phase) -> Decision {
        analyze(inputs, None, &Policy::default(), phase).remove(0)
    }

    fn count(ds: &[Decision], s: Status) -> usize {
        ds.iter().filter(|d| d.status == s).count()
    }

    /// `n` rounds of `ns` with a small deterministic wobble shared by both sides.
    fn steady(ns: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| ns * (1.0 + 0.01 * (i % 3) as f64)).collect()
    }

    #[test]
    fn twice_as_slow_is_red_only_after_confirmation() {
        let base = steady(100.0, 6);
        let head: Vec<f64> = base.iter().map(|b| 2.0 * b).collect();
        let first = one(&[input("k", &base, &head)], Phase::First);
        assert_eq!(first.status, Status::PossibleRegression, "{first:?}");
        assert!(first.suspect);
        assert_eq!(
            suspects(std::slice::from_ref(&first)),
            vec!["k".to_string()]
        );

        // No confirmation rounds ran: still only ⚠️.
        let unconfirmed = one(
            &[input("k", &base, &head)],
            Phase::Final { first_rounds: 6 },
        );
        assert_eq!(unconfirmed.status, Status::PossibleRegression);
        assert!(unconfirmed.note.as_ref().unwrap().contains("not confirmed"));

        let base = steady(100.0, 12);
        let head: Vec<f64> = base.iter().map(|b| 2.0 * b).collect();
        let last = one(
            &[input("k", &base, &head)],
            Phase::Final { first_rounds: 6 },
        );
        assert_eq!(last.status, Status::Regression, "{last:?}");
        assert!(!last.suspect);
        assert_eq!((last.rounds, last.confirmation_rounds), (12, 6));
        let c = last.change.unwrap();
        assert!((c.estimate - 1.0).abs() < 1e-9, "{c:?}");
        assert!(c.ci_low <= c.estimate && c.estimate <= c.ci_high);
        assert_eq!(c.p_value, 0.0);
    }

    /// A loaded run: per-round log ratios swing by ±0.3 (far too noisy to gate a 5 % change),
    /// yet a 2× slowdown lies wholly above `max_threshold`: 🔴, not ⚠️. The same noise around
    /// +10 % stays ⚠️ or ❔.
    #[test]
    fn twice_as_slow_in_a_very_noisy_run_is_still_red() {
        let swing = [
            0.3, -0.3, 0.25, -0.2, 0.3, -0.35, 0.2, -0.25, 0.3, -0.3, 0.25, -0.25,
        ];
        let base = steady(100.0, 12);
        let head = |factor: f64| -> Vec<f64> {
            base.iter()
                .zip(swing)
                .map(|(b, s)| b * factor * f64::exp(s))
                .collect()
        };
        let red = one(
            &[input("k", &base, &head(2.0))],
            Phase::Final { first_rounds: 6 },
        );
        assert!(red.threshold > Policy::default().max_threshold, "{red:?}");
        assert_eq!(red.status, Status::Regression, "{red:?}");
        assert!(
            red.note.as_ref().unwrap().contains("entirely above"),
            "{red:?}"
        );
        let small = one(
            &[input("k", &base, &head(1.1))],
            Phase::Final { first_rounds: 6 },
        );
        assert_ne!(small.status, Status::Regression, "{small:?}");
    }

    #[test]
    fn twice_as_fast_is_green() {
        let base = steady(100.0, 6);
        let head: Vec<f64> = base.iter().map(|b| b / 2.0).collect();
        let d = one(&[input("k", &base, &head)], Phase::First);
        assert_eq!(d.status, Status::Improvement);
        assert!(!d.suspect);
        assert!((d.change.unwrap().estimate + 0.5).abs() < 1e-9);
    }

    #[test]
    fn identical_noise_free_is_no_change() {
        let base = steady(100.0, 6);
        for phase in [Phase::First, Phase::Final { first_rounds: 6 }] {
            let d = one(&[input("k", &base, &base)], phase);
            assert_eq!(d.status, Status::NoChange, "{d:?}");
            let c = d.change.unwrap();
            assert_eq!((c.estimate, c.ci_low, c.ci_high), (0.0, 0.0, 0.0));
            assert_eq!((c.p_value, c.p_adjusted), (1.0, 1.0));
            assert_eq!(
                (d.threshold, d.threshold_source),
                (0.03, ThresholdSource::Floor)
            );
        }
    }

    #[test]
    fn change_carries_the_back_transformed_interval() {
        // Log ratios 0.00 … 0.04 (the hand-computed sample in paired.rs): 95 % interval
        // 0.02 ± 0.0196324 on the log scale.
        let d: [f64; 5] = [0.01, 0.03, 0.00, 0.04, 0.02];
        let base = [100.0; 5];
        let head: Vec<f64> = d.iter().map(|x| 100.0 * x.exp()).collect();
        let c = one(&[input("k", &base, &head)], Phase::First)
            .change
            .unwrap();
        assert!((c.estimate - 0.02f64.exp_m1()).abs() < 1e-9);
        assert!((c.ci_low - 0.000_367_568f64.exp_m1()).abs() < 1e-9, "{c:?}");
        assert!(
            (c.ci_high - 0.039_632_432f64.exp_m1()).abs() < 1e-9,
            "{c:?}"
        );
        assert!((c.p_value - 0.047_420_7).abs() < 1e-6);
        assert_eq!(c.p_adjusted, c.p_value, "a family of one is not corrected");
        assert_eq!(c.confidence, 0.95);
    }

    #[test]
    fn five_percent_with_one_percent_noise_is_detected() {
        let mut rng = Rng::new(7);
        let policy = Policy::default();
        let bench = SimBench {
            id: "k".into(),
            shift: 0.05,
            noise: Noise::quiet(0.01),
        };
        let mut inp = BenchInput {
            id: "k".into(),
            base: None,
            head: None,
        };
        add_rounds(&mut rng, &mut inp, &bench, 6);
        let first = analyze(std::slice::from_ref(&inp), None, &policy, Phase::First);
        assert!(first[0].suspect, "{first:?}");
        add_rounds(&mut rng, &mut inp, &bench, policy.confirmation_rounds);
        let last = analyze(&[inp], None, &policy, Phase::Final { first_rounds: 6 });
        assert_eq!(last[0].status, Status::Regression, "{last:?}");
        let c = last[0].change.unwrap();
        assert!((c.estimate - 0.05).abs() < 0.01, "{c:?}");
    }

    #[test]
    fn detection_power_meets_the_targets() {
        // One changed benchmark among 40 unchanged ones, no profile, default policy. Targets:
        // ≥ 95 % of 5 % slowdowns single-threaded (per-side round noise 1.5 %), ≥ 90 % of 10 %
        // multi-threaded (4 %). 1000 runs each: a rate, not one seed's luck, decides.
        let policy = Policy::default();
        let cases = [(0.05, 0.015, 0.95), (0.10, 0.04, 0.90)];
        for (shift, sigma, target) in cases {
            let mut rng = Rng::new(42);
            let mut suite = aa_suite(39, Noise::quiet(sigma));
            suite.push(SimBench {
                id: "changed".into(),
                shift,
                noise: Noise::quiet(sigma),
            });
            let runs = 1000;
            let (mut hits, mut false_red) = (0, 0);
            for _ in 0..runs {
                let ds = gate(&mut rng, &suite, None, &policy);
                hits += usize::from(ds[39].status == Status::Regression);
                false_red += count(&ds[..39], Status::Regression);
            }
            let rate = hits as f64 / runs as f64;
            eprintln!("{shift} at σ {sigma}: detected {rate}, {false_red} false 🔴 in {runs} runs");
            assert!(rate >= target, "{shift} at σ {sigma}: detected {rate}");
            // Holm bounds the suite's false 🔴 at α = 5 % of runs; the threshold cuts it further.
            assert!(
                false_red * 40 <= runs,
                "{false_red} false 🔴 in {runs} runs"
            );
        }
    }

    #[test]
    fn aa_runs_raise_no_false_red_and_rare_warnings() {
        // 40-benchmark suites, 1000 A/A runs each: quiet lognormal noise, then a pessimistic
        // competing load. Target on the machine: no 🔴 in 20 runs, at most one ⚠️ per run. In
        // this model: a 🔴 in at most 1 % of runs (then 20 runs are all clean 82 % of the time or
        // more) and more than one ⚠️ in at most 0.5 %.
        let policy = Policy::default();
        for (noise, seed) in [(Noise::quiet(0.02), 1), (Noise::loaded(0.03), 2)] {
            let mut rng = Rng::new(seed);
            let suite = aa_suite(40, noise);
            let runs = 1000;
            let (mut red_runs, mut warned_runs) = (0, 0);
            for _ in 0..runs {
                let ds = gate(&mut rng, &suite, None, &policy);
                red_runs += usize::from(count(&ds, Status::Regression) > 0);
                warned_runs += usize::from(count(&ds, Status::PossibleRegression) > 1);
            }
            eprintln!("{noise:?}: {red_runs} runs with 🔴, {warned_runs} with ≥ 2 ⚠️ in {runs}");
            assert!(
                red_runs * 100 <= runs,
                "{noise:?}: {red_runs} runs with 🔴 in {runs}"
            );
            assert!(
                warned_runs * 200 <= runs,
                "{noise:?}: {warned_runs} runs with ≥ 2 ⚠️ in {runs}"
            );
        }
    }

    #[test]
    fn five_percent_in_twenty_percent_noise_is_rarely_red_and_mostly_unclear() {
        let policy = Policy::default();
        let bench = SimBench {
            id: "k".into(),
            shift: 0.05,
            noise: Noise::quiet(0.20),
        };
        let mut rng = Rng::new(3);
        let mut statuses = Vec::new();
        for _ in 0..1000 {
            let d = gate(&mut rng, std::slice::from_ref(&bench), None, &policy).remove(0);
            statuses.push(d.status);
        }
        // A +5 % change under ±20 % noise per side: the gate should say it cannot tell. A run
        // whose six rounds happen to spread little gets a threshold under `max_threshold` and is
        // gated: then a large excursion can pass both looks (2 in 1000 at the default 0.20; 0 at
        // 0.15, 4 at 0.25). Such a 🔴 is no false alarm (the slowdown is real) but overstates it.
        let n = |st: Status| statuses.iter().filter(|&&s| s == st).count();
        assert!(
            n(Status::Regression) <= 5,
            "{} 🔴 in 1000",
            n(Status::Regression)
        );
        let calm = n(Status::TooNoisy) + n(Status::NoChange);
        assert!(calm >= 970, "only {calm} of 1000 were ❔ or ✅");
    }

    #[test]
    fn one_huge_outlier_round_is_not_red() {
        // A/A, 1 % noise, and interference slows one side of one round fivefold. With one outlier
        // among n rounds the t statistic is ~1 whatever its size.
        let base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0];
        for side in ["head", "base"] {
            let mut head = [100.5, 100.0, 99.5, 101.0, 99.0, 100.0];
            let mut base = base;
            if side == "head" {
                head[2] *= 5.0
            } else {
                base[2] *= 5.0
            }
            let first = one(&[input("k", &base, &head)], Phase::First);
            assert!(
                !first.suspect && first.status != Status::Regression,
                "{side}: {first:?}"
            );
            let last = one(
                &[input("k", &base, &head)],
                Phase::Final { first_rounds: 6 },
            );
            assert_ne!(last.status, Status::Regression);
            assert_ne!(last.status, Status::PossibleRegression);
        }
    }

    #[test]
    fn a_transient_spike_during_the_first_pass_is_not_confirmed() {
        // Head was 30 % slower in every first-pass round (a load spike that happened to hit it),
        // then unchanged in the confirmation rounds: all rounds together are still past the
        // threshold and significant, but the confirmation rounds alone disagree. A fixed 5 %
        // threshold keeps the spike's spread from making the benchmark ungateable.
        let mut policy = Policy::default();
        policy.thresholds.insert("k".into(), 0.05);
        let base = steady(100.0, 14);
        let wobble = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01];
        let mut head: Vec<f64> = base
            .iter()
            .zip(wobble.iter().cycle())
            .map(|(b, w)| b * w)
            .collect();
        for h in &mut head[..6] {
            *h *= 1.3;
        }
        let first = analyze(
            &[input("k", &base[..6], &head[..6])],
            None,
            &policy,
            Phase::First,
        );
        assert!(first[0].suspect, "{first:?}");
        let last = analyze(
            &[input("k", &base, &head)],
            None,
            &policy,
            Phase::Final { first_rounds: 6 },
        )
        .remove(0);
        assert_eq!(last.status, Status::PossibleRegression, "{last:?}");
        assert!(last.change.unwrap().p_adjusted < 0.05);
        assert!(last.note.unwrap().contains("not confirmed"));

        // Confirmation rounds that are certainly slower, but by 1 %, less than half the
        // threshold: they do not confirm a 5 % regression either.
        let slight = [1.01, 1.012, 1.008, 1.011, 1.009, 1.01, 1.012, 1.008];
        for (h, (b, w)) in head[6..].iter_mut().zip(base[6..].iter().zip(slight)) {
            *h = b * w;
        }
        let last = analyze(
            &[input("k", &base, &head)],
            None,
            &policy,
            Phase::Final { first_rounds: 6 },
        )
        .remove(0);
        assert_eq!(last.status, Status::PossibleRegression, "{last:?}");
        assert!(last.note.unwrap().contains("one-sided p < 0.0001"));
    }

    #[test]
    fn the_screen_needs_evidence_and_catches_near_misses() {
        let mut policy = Policy::default();
        policy.thresholds.insert("k".into(), 0.05);
        let run = |d: &[f64]| {
            let base = vec![100.0; d.len()];
            let head: Vec<f64> = d.iter().map(|x| 100.0 * x.exp()).collect();
            analyze(&[input("k", &base, &head)], None, &policy, Phase::First).remove(0)
        };
        // Mean +7.5 % past the 5 % threshold, but t ≈ 1: not worth confirmation rounds.
        let noisy = run(&[0.3, -0.1, 0.25, -0.05, 0.2, -0.15]);
        assert_eq!(
            (noisy.status, noisy.suspect),
            (Status::TooNoisy, false),
            "{noisy:?}"
        );
        // Mean +4 % under the threshold, clearly slower, interval reaching past 5 %: a suspect.
        let near = run(&[0.02, 0.06, 0.03, 0.055, 0.025, 0.05]);
        assert_eq!(
            (near.status, near.suspect),
            (Status::NoChange, true),
            "{near:?}"
        );
        assert!(near.note.unwrap().contains("suspect"));
    }

    #[test]
    fn holm_keeps_a_lone_marginal_result_from_turning_red() {
        // One benchmark 8 % slower with p ≈ 0.002 on its own: red alone, but among 40 the Holm
        // bar is 0.05/40 = 0.00125 and the confirmation rounds cannot lift it.
        let d = [
            0.06, 0.10, 0.07, 0.09, 0.05, 0.11, 0.06, 0.10, 0.07, 0.09, 0.05, 0.11,
        ];
        let d: Vec<f64> = d.iter().map(|x| x * 4.0).collect();
        let base = vec![100.0; 12];
        let head: Vec<f64> = d.iter().map(|x| 100.0 * x.exp()).collect();
        let alone = one(
            &[input("k", &base, &head)],
            Phase::Final { first_rounds: 6 },
        );
        assert_eq!(alone.status, Status::Regression, "{alone:?}");

        // The same data with a noisier shape: p₁ ≈ 0.004 alone, ≈ 0.16 after Holm over 40.
        let d = [
            0.02, 0.20, 0.05, 0.18, 0.01, 0.12, 0.03, 0.21, 0.04, 0.16, 0.0, 0.14,
        ];
        let head: Vec<f64> = d.iter().map(|x| 100.0 * f64::exp(*x)).collect();
        let mut suite = vec![input("k", &base, &head)];
        for i in 0..39 {
            let b = steady(100.0, 6);
            let h: Vec<f64> = b.iter().rev().copied().collect();
            suite.push(input(&format!("other/{i}"), &b, &h));
        }
        let ds = analyze(
            &suite,
            None,
            &Policy::default(),
            Phase::Final { first_rounds: 6 },
        );
        let c = ds[0].change.unwrap();
        assert!(c.p_value < 0.01 && c.p_adjusted > 0.05, "{c:?}");
        assert_eq!(ds[0].status, Status::PossibleRegression, "{:?}", ds[0]);
        assert!(
            ds[0]
                .note
                .as_ref()
                .unwrap()
                .contains("not significant across the suite")
        );
    }

    #[test]
    fn threshold_sources() {
        let policy = Policy {
            profile_min_trials: 2,
            ..Policy::default()
        };
        // A/A trials: "noisy" moves ±5 % between trials, "calm" not at all.
        let aa = |m: f64| {
            vec![
                input("noisy", &[100.0; 4], &[100.0 * m.exp(); 4]),
                input("calm", &[100.0; 4], &[100.0; 4]),
            ]
        };
        let profile = NoiseProfile::from_aa_trials("fp", 0.0, &[aa(0.05), aa(-0.05)]);
        let mut p = policy.clone();
        p.thresholds.insert("fixed".into(), 0.08);
        p.thresholds.insert("tiny".into(), 0.01);
        let run: Vec<BenchInput> = ["noisy", "calm", "fresh", "fixed", "tiny"]
            .iter()
            .map(|id| input(id, &steady(100.0, 6), &steady(100.0, 6)))
            .collect();
        let ds = analyze(&run, Some(&profile), &p, Phase::First);
        let src: Vec<_> = ds
            .iter()
            .map(|d| (d.threshold_source, d.threshold))
            .collect();
        assert_eq!(src[0].0, ThresholdSource::Profile);
        assert!(
            (src[0].1 - (2.5f64 * 0.05).exp_m1()).abs() < 1e-12,
            "{src:?}"
        );
        assert_eq!(
            src[1],
            (ThresholdSource::Floor, 0.03),
            "noise below the floor"
        );
        assert_eq!(
            src[2],
            (ThresholdSource::Floor, 0.03),
            "zero spread, not in the profile"
        );
        assert_eq!(src[3], (ThresholdSource::Config, 0.08));
        assert_eq!(
            src[4],
            (ThresholdSource::Floor, 0.03),
            "config never goes below the floor"
        );

        // Without a profile a noisy run sets its own threshold from its spread.
        let base = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0];
        let head = [104.0, 96.0, 103.0, 97.0, 105.0, 95.0];
        let d = one(&[input("k", &base, &head)], Phase::First);
        assert_eq!(d.threshold_source, ThresholdSource::Spread);
        let sd = PairedT::new(&log_ratios(&base, &head)).unwrap().sd;
        assert!((d.threshold - (2.5 * sd / 6f64.sqrt()).exp_m1()).abs() < 1e-12);

        // Confirmation rounds sharpen the spread estimate, but the threshold stays that of a
        // first-pass estimate: sd of all 14 rounds over √6, not over √14.
        let base = [100.0; 14];
        let head: Vec<f64> = head.iter().cycle().take(14).copied().collect();
        let d = one(
            &[input("k", &base, &head)],
            Phase::Final { first_rounds: 6 },
        );
        let sd = PairedT::new(&log_ratios(&base, &head)).unwrap().sd;
        assert!((d.threshold - (2.5 * sd / 6f64.sqrt()).exp_m1()).abs() < 1e-12);
    }

    #[test]
    fn too_noisy_rules() {
        // A loaded run against a quiet profile: the interval is far wider than the threshold.
        let policy = Policy {
            profile_min_trials: 2,
            ..Policy::default()
        };
        let quiet = |id: &str| input(id, &[100.0; 6], &[100.0; 6]);
        let profile =
            NoiseProfile::from_aa_trials("fp", 0.0, &[vec![quiet("k")], vec![quiet("k")]]);
        let base = [100.0; 6];
        let head = [130.0, 75.0, 120.0, 80.0, 125.0, 78.0];
        let d = analyze(
            &[input("k", &base, &head)],
            Some(&profile),
            &policy,
            Phase::First,
        )
        .remove(0);
        assert_eq!(d.status, Status::TooNoisy, "{d:?}");
        assert!(d.note.unwrap().contains("wider than"));

        // No profile: the spread would need a threshold beyond max_threshold.
        let d = one(&[input("k", &base, &head)], Phase::First);
        assert_eq!(
            (d.status, d.threshold_source),
            (Status::TooNoisy, ThresholdSource::Spread)
        );
        assert!(
            d.note.as_ref().unwrap().contains("too noisy to gate"),
            "{d:?}"
        );

        // Too few rounds.
        let d = one(
            &[input("k", &[100.0, 100.0], &[200.0, 200.0])],
            Phase::First,
        );
        assert_eq!(d.status, Status::TooNoisy);
        assert!(
            d.change.is_some(),
            "two rounds still give an estimate to show"
        );
        assert!(d.note.unwrap().contains("only 2 valid paired rounds"));
    }

    #[test]
    fn bad_inputs_never_panic() {
        let nan = f64::NAN;
        let cases = [
            input("empty", &[], &[]),
            input("nan", &[nan, nan, nan], &[nan, nan, nan]),
            input("zero", &[0.0, 0.0, 0.0], &[0.0, 0.0, 0.0]),
            input("negative", &[-1.0, 1.0, 1.0], &[1.0, -1.0, 1.0]),
            input("one", &[100.0], &[200.0]),
            input("inf", &[f64::INFINITY; 4], &[1.0; 4]),
            BenchInput {
                id: "neither".into(),
                base: None,
                head: None,
            },
        ];
        for phase in [
            Phase::First,
            Phase::Final { first_rounds: 0 },
            Phase::Final { first_rounds: 99 },
        ] {
            for d in analyze(&cases, None, &Policy::default(), phase) {
                assert_eq!(d.status, Status::TooNoisy, "{d:?}");
                assert!(d.change.is_none(), "{d:?}");
                assert!(d.note.is_some());
                assert!(!d.suspect);
            }
        }
        // Lengths that differ pair up to the shorter side; NaN rounds drop out.
        let d = one(
            &[input(
                "k",
                &[100.0, nan, 100.0, 100.0, 100.0],
                &[100.0, 100.0, 100.0, 100.0],
            )],
            Phase::First,
        );
        assert_eq!((d.status, d.rounds), (Status::NoChange, 3));
        assert!(analyze(&[], None, &Policy::default(), Phase::First).is_empty());
    }

    #[test]
    fn added_and_removed() {
        let ds = analyze(
            &[
                BenchInput {
                    id: "new".into(),
                    base: None,
                    head: Some(vec![1.0; 6]),
                },
                BenchInput {
                    id: "old".into(),
                    base: Some(vec![1.0; 6]),
                    head: None,
                },
            ],
            None,
            &Policy::default(),
            Phase::First,
        );
        assert_eq!(
            (ds[0].status, ds[1].status),
            (Status::Added, Status::Removed)
        );
        assert!(ds.iter().all(|d| d.change.is_none() && !d.suspect));
    }

    /// The error rates quoted in STATS.md ("What the defaults buy"). Slow-ish (a few seconds);
    /// run with `cargo test -p harness --lib simulation_table -- --ignored --nocapture`, and set
    /// `SIM_POLICY='{"noise_k": 3}'` (JSON, any `Policy` fields) to try other settings.
    #[test]
    #[ignore = "a generator, not a check: prints the STATS.md simulation tables (slow)"]
    fn simulation_table() {
        let policy: Policy = match std::env::var("SIM_POLICY") {
            Ok(json) => serde_json::from_str(&json).expect("SIM_POLICY is a JSON Policy"),
            Err(_) => Policy::default(),
        };
        let runs = 1000;
        println!(
            "| A/A noise model (40 benchmarks) | runs with a 🔴 | runs with ≥ 2 ⚠️ | ❔ per run |"
        );
        println!("|---|---|---|---|");
        let models = [
            ("quiet, σ 2 % per side", Noise::quiet(0.02)),
            ("quiet, σ 5 % per side", Noise::quiet(0.05)),
            // harness/eval, 2026-11-30: per-round sd of ln(head/base) on this 2-vCPU VM, median
            // 0.11 and p75 0.17 over benchmarks, i.e. about 8 % and 12 % per side.
            ("noisy VM, σ 8 % per side", Noise::quiet(0.08)),
            ("noisy VM, σ 15 % per side", Noise::quiet(0.15)),
            (
                "loaded, mostly shared: rounds drift ±30 % together, 10 % of sides hit ×1.05-2.2",
                Noise {
                    sigma: 0.03,
                    common: 0.3,
                    p_hit: 0.1,
                    hit: (1.05, 2.2),
                    measured: 0.0,
                },
            ),
            (
                "loaded: σ 3 %, 30 % of sides hit ×1.05-2.2",
                Noise::loaded(0.03),
            ),
            (
                "loaded harder: 50 % of sides hit ×1.05-2.5",
                Noise {
                    sigma: 0.03,
                    common: 0.1,
                    p_hit: 0.5,
                    hit: (1.05, 2.5),
                    measured: 0.0,
                },
            ),
        ];
        for (label, noise) in models {
            let mut rng = Rng::new(5);
            let suite = aa_suite(40, noise);
            let (mut red, mut warn2, mut unclear) = (0, 0, 0);
            for _ in 0..runs {
                let ds = gate(&mut rng, &suite, None, &policy);
                red += usize::from(count(&ds, Status::Regression) > 0);
                warn2 += usize::from(count(&ds, Status::PossibleRegression) > 1);
                unclear += count(&ds, Status::TooNoisy);
            }
            let per_run = unclear as f64 / runs as f64;
            println!("| {label} | {red} / {runs} | {warn2} / {runs} | {per_run:.1} |");
        }
        println!();
        println!("| slowdown | σ per side per round | detected (🔴) |");
        println!("|---|---|---|");
        for (shift, sigma) in [
            (0.05, 0.01),
            (0.05, 0.015),
            (0.05, 0.02),
            // The single-threaded eval targets measured 2026-11-30: per-round sd of the paired
            // log ratio about 0.035, i.e. about 2.5 % per side.
            (0.05, 0.025),
            (0.10, 0.04),
            (0.10, 0.05),
        ] {
            let mut rng = Rng::new(42);
            let mut suite = aa_suite(39, Noise::quiet(sigma));
            suite.push(SimBench {
                id: "changed".into(),
                shift,
                noise: Noise::quiet(sigma),
            });
            let hits = (0..runs)
                .filter(|_| gate(&mut rng, &suite, None, &policy)[39].status == Status::Regression)
                .count();
            println!(
                "| {:.0} % | {:.1} % | {:.1} % |",
                shift * 100.0,
                sigma * 100.0,
                hits as f64 / runs as f64 * 100.0
            );
        }
    }
}
