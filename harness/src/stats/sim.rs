//! Test-only: a deterministic random generator and a simulated noisy machine, so the method's
//! error rates can be checked against the gate's targets without a benchmark in sight.

use super::decide::{analyze, noisy, suspects};
use super::policy::Policy;
use super::profile::NoiseProfile;
use super::types::BenchInput;
use super::types::{Decision, Phase};

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, seedable, good enough for test noise.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// How one benchmark's per-round estimates scatter.
#[derive(Clone, Copy, Debug)]
pub struct Noise {
    /// Lognormal σ of each side's round estimate (independent per side).
    pub sigma: f64,
    /// Lognormal σ of a factor shared by both sides of a round (drift, a load that lasts the
    /// round): pairing cancels it.
    pub common: f64,
    /// Probability that one side of a round is hit by interference of its own…
    pub p_hit: f64,
    /// …which multiplies that side's time by a factor uniform in this range.
    pub hit: (f64, f64),
    /// When above 0: instead of the model above, each round's log ratio `ln(head / base)` is
    /// drawn from the real A/A rounds measured on this machine ([`measured_rounds`]), times this
    /// scale (1 = the noise as measured: sd 0.047, robust sd 0.022, excess kurtosis 21).
    pub measured: f64,
}

impl Noise {
    /// Lognormal noise only.
    pub fn quiet(sigma: f64) -> Noise {
        Noise {
            sigma,
            common: 0.0,
            p_hit: 0.0,
            hit: (1.0, 1.0),
            measured: 0.0,
        }
    }

    /// The real A/A rounds of this machine, scaled by `scale`.
    pub fn measured(scale: f64) -> Noise {
        Noise {
            measured: scale,
            ..Noise::quiet(0.0)
        }
    }

    /// A competing busy loop, pessimistically: rounds drift together by ~10 %, and a third of the
    /// sides are slowed by 5-120 % on their own (on this machine single criterion runs doubled under one busy loop: STATS.md, introduction).
    pub fn loaded(sigma: f64) -> Noise {
        Noise {
            sigma,
            common: 0.10,
            p_hit: 0.3,
            hit: (1.05, 2.2),
            measured: 0.0,
        }
    }

    fn side(&self, rng: &mut Rng, ns: f64, common: f64) -> f64 {
        let mut t = ns * common * (self.sigma * rng.normal()).exp();
        if rng.uniform() < self.p_hit {
            t *= self.hit.0 + (self.hit.1 - self.hit.0) * rng.uniform();
        }
        t
    }
}

/// The per-round paired log ratios of the committed A/A runs under the current defaults
/// (`testdata/aa_round_log_ratios.txt`: every benchmark of 20 loaded and 2 quiet full-suite
/// runs, 2026-11-30; regenerated and checked against the runs by the tests in `gate.rs`).
pub fn measured_rounds() -> &'static [f64] {
    static POOL: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        include_str!("testdata/aa_round_log_ratios.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.parse().expect("a number per line"))
            .collect()
    })
}

/// One simulated benchmark: head is `1 + shift` times base.
#[derive(Clone, Debug)]
pub struct SimBench {
    pub id: String,
    pub shift: f64,
    pub noise: Noise,
}

/// Appends `rounds` paired rounds to `input`.
pub fn add_rounds(rng: &mut Rng, input: &mut BenchInput, bench: &SimBench, rounds: usize) {
    let base_ns = 1000.0;
    if bench.noise.measured > 0.0 {
        let pool = measured_rounds();
        for _ in 0..rounds {
            let r = pool[(rng.next_u64() % pool.len() as u64) as usize];
            input.base.get_or_insert_with(Vec::new).push(base_ns);
            input
                .head
                .get_or_insert_with(Vec::new)
                .push(base_ns * (1.0 + bench.shift) * (bench.noise.measured * r).exp());
        }
        return;
    }
    for _ in 0..rounds {
        let common = (bench.noise.common * rng.normal()).exp();
        let b = bench.noise.side(rng, base_ns, common);
        let h = bench.noise.side(rng, base_ns * (1.0 + bench.shift), common);
        input.base.get_or_insert_with(Vec::new).push(b);
        input.head.get_or_insert_with(Vec::new).push(h);
    }
}

/// `rounds` more rounds for the benchmarks in `ids`; the others get NaN there, as `compare`
/// leaves a round missing, so round indices stay aligned.
fn add_rounds_for(
    rng: &mut Rng,
    inputs: &mut [BenchInput],
    suite: &[SimBench],
    ids: &[String],
    rounds: usize,
) {
    for (input, bench) in inputs.iter_mut().zip(suite) {
        if ids.contains(&input.id) {
            add_rounds(rng, input, bench, rounds);
        } else {
            for side in [&mut input.base, &mut input.head] {
                side.get_or_insert_with(Vec::new)
                    .extend(std::iter::repeat_n(f64::NAN, rounds));
            }
        }
    }
}

/// A whole gate run as `compare` does it: `policy.rounds` rounds of everything, the first pass,
/// `policy.noise_rounds` more first-pass rounds of the noisy ❔ only (the others get NaN there,
/// as `compare` leaves a round missing, so round indices stay aligned), the first pass again,
/// `policy.confirmation_rounds` more rounds of the suspects only, the final pass.
pub fn gate(
    rng: &mut Rng,
    suite: &[SimBench],
    profile: Option<&NoiseProfile>,
    policy: &Policy,
) -> Vec<Decision> {
    gate_with_batches(rng, suite, profile, policy, 0)
}

/// [`gate`] with up to `batches` more batches of `policy.noise_rounds` rounds for the rows
/// still open after the noise rounds, as `compare` runs them under a time budget that covers
/// every open row (`gate::measure_and_decide`): never more than `policy.looks` leaves room for,
/// one look being kept for the confirmation rounds.
pub fn gate_with_batches(
    rng: &mut Rng,
    suite: &[SimBench],
    profile: Option<&NoiseProfile>,
    policy: &Policy,
    batches: usize,
) -> Vec<Decision> {
    let mut inputs: Vec<BenchInput> = suite
        .iter()
        .map(|b| BenchInput {
            id: b.id.clone(),
            base: None,
            head: None,
        })
        .collect();
    for (input, bench) in inputs.iter_mut().zip(suite) {
        add_rounds(rng, input, bench, policy.rounds);
    }
    let mut first = analyze(&inputs, profile, policy, Phase::First);
    let mut first_rounds = policy.rounds;
    let extra = noisy(&first, policy);
    if !extra.is_empty() {
        add_rounds_for(rng, &mut inputs, suite, &extra, policy.noise_rounds);
        first_rounds += policy.noise_rounds;
        first = analyze(&inputs, profile, policy, Phase::First);
    }
    if policy.rule == super::policy::Rule::Resolution {
        let looks_used = 1 + usize::from(first_rounds > policy.rounds);
        let allowed = policy.looks.saturating_sub(looks_used + 1).min(batches);
        for _ in 0..allowed {
            let open = noisy(&first, policy);
            if open.is_empty() {
                break;
            }
            add_rounds_for(rng, &mut inputs, suite, &open, policy.noise_rounds);
            first_rounds += policy.noise_rounds;
            first = analyze(&inputs, profile, policy, Phase::First);
        }
    }
    assert!(
        first
            .iter()
            .all(|d| d.status != crate::results::Status::Regression)
    );
    let sus = suspects(&first);
    for (input, bench) in inputs.iter_mut().zip(suite) {
        if sus.contains(&input.id) {
            add_rounds(rng, input, bench, policy.confirmation_rounds);
        }
    }
    analyze(&inputs, profile, policy, Phase::Final { first_rounds })
}

/// A suite of `n` benchmarks with the same noise and no change.
pub fn aa_suite(n: usize, noise: Noise) -> Vec<SimBench> {
    (0..n)
        .map(|i| SimBench {
            id: format!("group/bench/{i}"),
            shift: 0.0,
            noise,
        })
        .collect()
}
