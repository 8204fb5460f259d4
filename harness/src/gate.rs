//! The gate: measurements → decisions. [`measure_and_decide`] runs the passes of one comparison
//! on a [`Measurer`] (first pass, noise rounds for what it left ❔, confirmation rounds for the
//! suspects, final pass; under `rule: resolution` with a suite's `budget_minutes`, batches of
//! noise rounds for the rows still open while the time allows: `plan_batch`) and turns each
//! benchmark's samples into a report row; [`replay`]
//! decides a saved run again from its recorded samples (nothing measured). Everything between
//! the samples and the statistics lives here once: the per-round estimates, the pairing of
//! rounds, and the `method` a run records.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::config::{Config, CriterionSettings};
use crate::measure::serve::pair_layout;
use crate::measure::{Collect, Collected, Measurer, TargetPlan, exact_filter, run_rounds};
use crate::progress::Progress;
use crate::results::{BenchResult, Method, RawSample, Results, SideResult, Status, now_unix};
use crate::stats::{self, BenchInput, NoiseProfile, Phase, Policy, Rule};

/// Per benchmark, the per-round estimates of both sides paired by round index.
pub fn inputs_from(collected: &Collected) -> Vec<BenchInput> {
    collected
        .benches
        .iter()
        .map(|(id, c)| {
            let est = |s: &[RawSample]| -> BTreeMap<u32, f64> {
                s.iter()
                    .filter_map(|x| {
                        stats::round_estimate(&x.iters, &x.times_ns).map(|e| (x.round, e))
                    })
                    .collect()
            };
            let (b, h) = (est(&c.base), est(&c.head));
            let (base, head) = match (c.base.is_empty(), c.head.is_empty()) {
                (false, false) => {
                    // Index i is round i on both sides; a round missing on one side (or with
                    // unusable samples) is NaN there, and the stats drop that pair. Keeping the
                    // indices aligned keeps confirmation rounds at index >= first-pass rounds.
                    let last = b.keys().chain(h.keys()).max().copied().unwrap_or(0);
                    let side = |m: &BTreeMap<u32, f64>| -> Vec<f64> {
                        (0..=last)
                            .map(|r| m.get(&r).copied().unwrap_or(f64::NAN))
                            .collect()
                    };
                    let base = side(&b);
                    let mut head = side(&h);
                    // A paired round's log ratio is the median over its sample pairs
                    // (`stats::paired_log_ratio`); the decision only ever uses ln(head / base),
                    // so the head's value for it is base · e^(that ratio).
                    for (r, hv) in head.iter_mut().enumerate() {
                        if let Some(d) = paired_ratio(&c.base, &c.head, r as u32) {
                            *hv = base[r] * d.exp();
                        }
                    }
                    (Some(base), Some(head))
                }
                (false, true) => (Some(b.values().copied().collect()), None),
                (true, false) => (None, Some(h.values().copied().collect())),
                (true, true) => (None, None),
            };
            BenchInput {
                id: id.clone(),
                base,
                head,
            }
        })
        .collect()
}

/// Round `r`'s paired log ratio, when both sides' samples of that round were taken paired.
fn paired_ratio(base: &[RawSample], head: &[RawSample], r: u32) -> Option<f64> {
    fn of(s: &[RawSample], r: u32) -> Option<&RawSample> {
        s.iter()
            .find(|x| x.round == r && pair_layout(&x.sampling_mode).is_some())
    }
    let (b, h) = (of(base, r)?, of(head, r)?);
    if b.sampling_mode != h.sampling_mode {
        return None;
    }
    let layout = pair_layout(&b.sampling_mode)?;
    stats::paired_log_ratio((&b.iters, &b.times_ns), (&h.iters, &h.times_ns), layout)
}

fn side_result(samples: &[RawSample]) -> Option<SideResult> {
    if samples.is_empty() {
        return None;
    }
    let per_round_ns: Vec<f64> = samples
        .iter()
        .filter_map(|s| stats::round_estimate(&s.iters, &s.times_ns))
        .collect();
    let median_ns = stats::median(&per_round_ns).unwrap_or(f64::NAN);
    Some(SideResult {
        per_round_ns,
        median_ns,
        samples: samples.to_vec(),
    })
}

/// One plan entry per target that has any of `ids`, filtered to exactly those ids.
fn plan_of(collected: &Collected, ids: &[String]) -> Vec<TargetPlan> {
    let mut by_target: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for id in ids {
        if let Some(c) = collected.benches.get(id) {
            by_target.entry(&c.target).or_default().push(id);
        }
    }
    by_target
        .iter()
        .map(|(t, ids)| TargetPlan {
            target: t.to_string(),
            filter: Some(exact_filter(ids)),
        })
        .collect()
}

/// Runs the measurement and decision on already-built executables: the part shared by
/// `compare` and `calibrate`, and what tests drive with a scripted [`Measurer`]. First pass
/// (`rounds`), noise rounds for what it left ❔, confirmation rounds for the suspects, final pass.
pub fn measure_and_decide(
    m: &mut dyn Measurer,
    plan: &[TargetPlan],
    policy: &Policy,
    rounds: u32,
    profile: Option<&NoiseProfile>,
    budget: Option<Duration>,
    progress: &dyn Progress,
) -> (Collected, Vec<BenchResult>) {
    let started = Instant::now();
    let mut collected = Collected::default();
    run_rounds(m, plan, 0, rounds, false, &mut collected, &mut |d, t, w| {
        progress.rounds(d, t, w)
    });
    let mut first = stats::analyze(&inputs_from(&collected), profile, policy, Phase::First);
    // Noise rounds: more first-pass rounds for what the first `rounds` left ❔ because of its
    // noise (STATS.md, section 6). Their round indices come before the confirmation rounds'.
    let mut first_rounds = rounds;
    // Under `rule: resolution` with a budget, the noise rounds are the first of the budget's
    // batches (below): they too go only where the time left allows, most promising first.
    let budget = budget.filter(|_| policy.rule == Rule::Resolution);
    let mut noisy = if budget.is_some() {
        Vec::new()
    } else {
        stats::noisy(&first, policy)
    };
    // A row crowded already (STATS.md §18) stays ❔ whatever more rounds show: none for it.
    let crowded = crowded_rows(&collected, policy);
    noisy.retain(|id| !crowded.contains(id));
    if !noisy.is_empty() {
        let why = match policy.rule {
            Rule::Threshold => format!(
                "too noisy after {rounds} rounds (a threshold above {:.1} %, or ❔)",
                policy.noise_target * 100.0
            ),
            Rule::Resolution => format!("still open after {rounds} rounds"),
        };
        progress.stage(&format!(
            "{} benchmark(s) {why}: {} more rounds for them: {}",
            noisy.len(),
            policy.noise_rounds,
            noisy.join(", ")
        ));
        run_rounds(
            m,
            &plan_of(&collected, &noisy),
            rounds,
            policy.noise_rounds as u32,
            false,
            &mut collected,
            &mut |d, t, w| progress.rounds(d, t, w),
        );
        first_rounds = rounds + policy.noise_rounds as u32;
        first = stats::analyze(&inputs_from(&collected), profile, policy, Phase::First);
    }
    if let Some(budget) = budget {
        // The first pass was one look, and one stays for the confirmation rounds.
        let batches = policy.looks.saturating_sub(2);
        // Seconds per benchmark-round of the last batch: its rows can be slower than the first
        // pass's average (8 % in the first full-suite A/A under a budget).
        let mut last_per: Option<f64> = None;
        for _ in 0..batches {
            let crowded = crowded_rows(&collected, policy);
            let mut open = stats::noisy(&first, policy);
            open.retain(|id| !crowded.contains(id));
            if open.is_empty() {
                break;
            }
            // Time per benchmark-round so far, and what the suspects' confirmation will need.
            let done: usize = collected
                .benches
                .values()
                .map(|c| c.base.len().min(c.head.len()))
                .sum();
            let per_all = started.elapsed().as_secs_f64() / done.max(1) as f64;
            let per = last_per.map_or(per_all, |p| p.max(per_all));
            let reserve = per * (stats::suspects(&first).len() * policy.confirmation_rounds) as f64;
            let left = budget.as_secs_f64() - started.elapsed().as_secs_f64() - reserve;
            let batch = policy.noise_rounds.max(1);
            progress.stage(&format!(
                "{} row(s) still open, {:.1} min of the budget left",
                open.len(),
                (budget.as_secs_f64() - started.elapsed().as_secs_f64()).max(0.0) / 60.0
            ));
            let chosen = plan_batch(&first, &open, per, left, batch, policy.confirmation_rounds);
            if chosen.is_empty() {
                break;
            }
            let batch_started = Instant::now();
            progress.stage(&format!(
                "{batch} more rounds for {} of them: {}",
                chosen.len(),
                chosen.join(", ")
            ));
            run_rounds(
                m,
                &plan_of(&collected, &chosen),
                first_rounds,
                batch as u32,
                false,
                &mut collected,
                &mut |d, t, w| progress.rounds(d, t, w),
            );
            first_rounds += batch as u32;
            last_per =
                Some(batch_started.elapsed().as_secs_f64() / (chosen.len() * batch).max(1) as f64);
            first = stats::analyze(&inputs_from(&collected), profile, policy, Phase::First);
        }
    }
    let mut suspects = stats::suspects(&first);
    let crowded = crowded_rows(&collected, policy);
    suspects.retain(|id| !crowded.contains(id));
    let decisions = if suspects.is_empty() || policy.confirmation_rounds == 0 {
        first
    } else {
        progress.stage(&format!(
            "confirming {} suspect(s) with {} more rounds: {}",
            suspects.len(),
            policy.confirmation_rounds,
            suspects.join(", ")
        ));
        run_rounds(
            m,
            &plan_of(&collected, &suspects),
            first_rounds,
            policy.confirmation_rounds as u32,
            true,
            &mut collected,
            &mut |d, t, w| progress.rounds(d, t, w),
        );
        stats::analyze(
            &inputs_from(&collected),
            profile,
            policy,
            Phase::Final {
                first_rounds: first_rounds as usize,
            },
        )
    };
    let benches = bench_results(&collected, decisions, policy);
    (collected, benches)
}

/// The policy a replay of `saved` starts from, and where it came from: `config`'s (an explicit
/// `--config`), else the one `saved` recorded, else `local`'s (./harness.yaml) when it exists,
/// else today's built-in defaults, which may differ from those the run had.
pub fn replay_base_policy(
    saved: &Results,
    config: Option<&Path>,
    local: &Path,
) -> anyhow::Result<(Policy, String)> {
    Ok(match (config, &saved.method.policy) {
        (Some(p), _) => (
            Config::load(p)?.policy,
            format!("the policy of {}", p.display()),
        ),
        (None, Some(recorded)) => (recorded.clone(), "the policy it recorded".to_string()),
        (None, None) if local.is_file() => (
            Config::load(local)?.policy,
            format!("the policy of {} (it recorded none)", local.display()),
        ),
        (None, None) => (
            Policy::default(),
            "today's built-in policy (it recorded none)".to_string(),
        ),
    })
}

/// `harness replay`: a saved comparison decided again under `policy`, from the criterion samples
/// it recorded; nothing is built or measured. For tuning the method on real runs (harness/eval):
/// "what would this A/A run, or this PR, have shown with `noise_k: 2`, or with 4 rounds?"
///
/// What a replay cannot do, and how it says so: it cannot add rounds. `first_rounds` (default:
/// all the saved first-pass rounds, noise rounds included) may only truncate the first pass.
/// Confirmation rounds exist only for the saved run's suspects: a benchmark that becomes a
/// suspect under `policy` without recorded confirmation rounds cannot be confirmed, so it is at
/// most ⚠️, and its note says why; a policy asking for more confirmation rounds than were
/// recorded uses those recorded. Rows the saved run marked ⛔ stay ⛔. The thresholds come from
/// `profile` when given, else from the spread, whatever the saved run used
/// (`method.replay` records it).
pub fn replay(
    saved: &Results,
    policy: &Policy,
    first_rounds: Option<u32>,
    profile: Option<(&NoiseProfile, &str)>,
    source: &str,
) -> anyhow::Result<Results> {
    policy
        .validate()
        .map_err(|e| anyhow::anyhow!("replay policy: {e}"))?;
    let ids: Vec<String> = saved.benches.iter().map(|b| b.id.clone()).collect();
    let unmatched = policy.unmatched_resolutions(&ids);
    if !unmatched.is_empty() {
        bail!(
            "policy.resolutions: no benchmark of {source} matches {}",
            unmatched.join(", ")
        );
    }
    let recorded_first = saved
        .rounds
        .iter()
        .filter(|r| !r.confirmation)
        .map(|r| r.index + 1)
        .max()
        .unwrap_or(saved.method.rounds);
    // The saved run's regular first-pass rounds; those above them were noise rounds, which only
    // its noisy benchmarks had (absent when none was noisy).
    let regular = saved.method.rounds.min(recorded_first);
    let first = first_rounds.unwrap_or(recorded_first);
    if first < 2 {
        bail!("--rounds {first}: at least 2 rounds are needed for a paired interval");
    }
    if first > recorded_first {
        bail!(
            "--rounds {first}: {source} has {recorded_first} first-pass rounds; a replay cannot add rounds"
        );
    }
    let confirmation_limit = recorded_first + policy.confirmation_rounds as u32;
    // The samples of `keep`'s rounds, per benchmark. ⛔ rows stay in the family, as they were
    // in the saved run's analysis, and are carried over as saved below.
    let collect = |keep: &dyn Fn(&str, u32) -> bool| collected_from(saved, keep);
    let prof = profile.map(|(p, _)| p);
    let first_pass = collect(&|_, r| r < first);
    let firsts = stats::analyze(&inputs_from(&first_pass), prof, policy, Phase::First);
    let mut suspects = stats::suspects(&firsts);
    let crowded = crowded_rows(&first_pass, policy);
    suspects.retain(|id| !crowded.contains(id));
    let (collected, decisions) = if suspects.is_empty() || policy.confirmation_rounds == 0 {
        (first_pass, firsts)
    } else {
        let all = collect(&|id, r| {
            r < first
                || (r >= recorded_first
                    && r < confirmation_limit
                    && suspects.iter().any(|s| s == id))
        });
        let d = stats::analyze(
            &inputs_from(&all),
            prof,
            policy,
            Phase::Final {
                first_rounds: recorded_first as usize,
            },
        );
        (all, d)
    };
    let mut benches = bench_results(&collected, decisions, policy);
    for b in benches.iter_mut() {
        let unconfirmable = suspects.contains(&b.id)
            && policy.confirmation_rounds > 0
            && !b.confirmed
            && b.status != Status::Regression;
        if unconfirmable {
            let why = "replay: no confirmation rounds were recorded for this benchmark (it was not \
                       a suspect in the saved run), so it cannot be confirmed here";
            b.note = Some(match b.note.take() {
                Some(n) => format!("{n}; {why}"),
                None => why.to_string(),
            });
        }
    }
    // ⛔ rows as saved, in the saved order.
    let mut by_id: BTreeMap<String, BenchResult> =
        benches.into_iter().map(|b| (b.id.clone(), b)).collect();
    let benches: Vec<BenchResult> = saved
        .benches
        .iter()
        .map(|b| match by_id.remove(&b.id) {
            Some(mut r) if b.status != Status::Failed => {
                // The saved counts, and their rule applied to the replayed status.
                r.instructions = b.instructions.clone();
                apply_instructions(&mut r);
                r
            }
            _ => b.clone(),
        })
        .collect();
    let outcome = Results::decide_all(&benches, &saved.failures, saved.e2e.as_ref());
    let mut method = saved.method.clone();
    // Rounds past the regular ones are the saved noise rounds the replay kept, not regular ones.
    method.rounds = first.min(regular);
    method.noise_rounds = first - method.rounds;
    method.confirmation_rounds = policy.confirmation_rounds as u32;
    method.confidence = policy.confidence;
    method.alpha = policy.alpha;
    method.floor = policy.floor;
    method.policy = Some(policy.clone());
    method.profile = profile
        .map(|(p, path)| format!("{path} (host {}, {} A/A trials)", p.fingerprint, p.trials));
    method.replay = Some(format!(
        "replayed from {source} (its first pass: {}; used: {first}) under policy {}",
        match recorded_first - regular {
            0 => format!("{regular} rounds"),
            n => format!("{regular} rounds + {n} noise rounds"),
        },
        serde_json::to_string(policy).unwrap_or_default()
    ));
    Ok(Results {
        created_unix_s: now_unix(),
        method,
        benches,
        outcome,
        ..saved.clone()
    })
}

/// A row's instruction counts applied to its status (`stats::with_instructions`: only ❔ with
/// at least 1 % more instructions becomes ⚠️, the reason first in its note).
pub fn apply_instructions(b: &mut BenchResult) {
    let Some(ic) = &b.instructions else { return };
    let (Some(base), Some(head)) = (ic.base, ic.head) else {
        return;
    };
    if let Some((status, note)) = stats::with_instructions(b.status, base, head) {
        b.status = status;
        b.note = Some(match b.note.take() {
            Some(n) => format!("{note}; {n}"),
            None => note,
        });
    }
}

/// A saved run's recorded samples as the rounds collected them, keeping the rounds `keep` says
/// (benchmark id, round index).
fn collected_from(saved: &Results, keep: &dyn Fn(&str, u32) -> bool) -> Collected {
    let mut c = Collected::default();
    for b in &saved.benches {
        let side = |s: &Option<SideResult>| -> Vec<RawSample> {
            s.iter()
                .flat_map(|s| s.samples.iter())
                .filter(|x| keep(&b.id, x.round))
                .cloned()
                .collect()
        };
        c.benches.insert(
            b.id.clone(),
            Collect {
                target: String::new(),
                throughput: b.throughput,
                base: side(&b.base),
                head: side(&b.head),
            },
        );
    }
    c
}

/// Of the `open` rows, the `k` nearest a decision: the ones whose interval needs to shrink least
/// (relative to its width) to clear the resolution on either side.
/// The open rows one batch of `batch` rounds can take within `left` seconds at `per` seconds
/// per benchmark-round, nearest a decision first ([`most_promising`]). A row that leans slower
/// (estimate above 0) and is not a suspect yet also costs its confirmation rounds: the batch
/// may make it one, and the confirmation rounds of the suspects known before the batch are
/// already reserved (two of the four suspects of the first full-suite A/A under a budget
/// appeared during its batch, and their confirmation ran past the budget).
fn plan_batch(
    decisions: &[stats::Decision],
    open: &[String],
    per: f64,
    left: f64,
    batch: usize,
    confirmation_rounds: usize,
) -> Vec<String> {
    let mut chosen = Vec::new();
    let mut cost = 0.0;
    for id in most_promising(decisions, open, open.len()) {
        let leans = decisions
            .iter()
            .find(|d| d.id == id)
            .is_some_and(|d| !d.suspect && d.change.as_ref().is_some_and(|c| c.estimate > 0.0));
        let rounds = batch + if leans { confirmation_rounds } else { 0 };
        let c = per * rounds as f64;
        if cost + c <= left {
            cost += c;
            chosen.push(id);
        }
    }
    chosen
}

fn most_promising(decisions: &[stats::Decision], open: &[String], k: usize) -> Vec<String> {
    let mut scored: Vec<(f64, &String)> = open
        .iter()
        .map(|id| {
            let score = decisions
                .iter()
                .find(|d| &d.id == id)
                .and_then(|d| {
                    let c = d.change.as_ref()?;
                    let tau = d.threshold.ln_1p();
                    let (lo, hi) = (c.ci_low.ln_1p(), c.ci_high.ln_1p());
                    let width = (hi - lo).max(f64::MIN_POSITIVE);
                    // How far each bound is from clearing: ✅ needs hi < τ, 🔴 lo > τ.
                    Some(((hi - tau).max(0.0).min((tau - lo).max(0.0))) / width)
                })
                .unwrap_or(f64::INFINITY);
            (score, id)
        })
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(k)
        .map(|(_, id)| id.clone())
        .collect()
}

/// The report rows of `decisions`: each with both sides' samples and per-round estimates; a
/// benchmark of a target that failed to run on a side is ⛔ whatever its numbers said; a
/// multi-threaded one measured on a busy machine is ❔ (`stats::when_crowded`).
fn bench_results(
    collected: &Collected,
    decisions: Vec<stats::Decision>,
    policy: &Policy,
) -> Vec<BenchResult> {
    decisions
        .into_iter()
        .map(|d| {
            let c: &Collect = &collected.benches[&d.id];
            let failed_target = collected
                .failed_targets
                .iter()
                .find(|(_, t)| *t == c.target)
                .map(|(s, _)| s.name());
            let failed_bench = collected
                .failed_benches
                .iter()
                .find(|(_, b)| *b == d.id)
                .map(|(s, _)| s.name());
            let (status, note) = match (failed_target, failed_bench) {
                (Some(side), _) => (
                    Status::Failed,
                    Some(format!("bench target {} failed to run on {side}", c.target)),
                ),
                (None, Some(side)) => (
                    Status::Failed,
                    Some(format!(
                        "failed to run on {side} after {} round(s); see the failures",
                        d.rounds
                    )),
                ),
                (None, None) => match stats::when_crowded(
                    d.status,
                    others_cores(c),
                    d.rounds,
                    policy.crowded_cores,
                ) {
                    Some((status, why)) => (
                        status,
                        Some(match d.note {
                            Some(n) => format!("{why}; {n}"),
                            None => why,
                        }),
                    ),
                    None => (d.status, d.note),
                },
            };
            BenchResult {
                id: d.id,
                status,
                base: side_result(&c.base),
                head: side_result(&c.head),
                change: d.change,
                threshold: d.threshold,
                threshold_source: d.threshold_source,
                throughput: c.throughput,
                rounds: d.rounds as u32,
                confirmed: d.confirmation_rounds > 0,
                note,
                instructions: None,
            }
        })
        .collect()
}

/// The rows whose readings so far reach `policy.crowded_cores` (`stats::when_crowded` will make
/// them ❔, so more rounds for them would be time spent for nothing).
fn crowded_rows(collected: &Collected, policy: &Policy) -> Vec<String> {
    collected
        .benches
        .iter()
        .filter(|(_, c)| stats::crowded(others_cores(c), policy.crowded_cores))
        .map(|(id, _)| id.clone())
        .collect()
}

/// The mean of the cores other processes kept busy over a row's samples (those of the rounds
/// that entered its decision; a replay uses the saved readings and takes no new ones): `None`
/// when they carry no reading (a single-threaded row, a run from before the readings).
fn others_cores(c: &Collect) -> Option<f64> {
    let read: Vec<f64> = c
        .base
        .iter()
        .chain(&c.head)
        .filter_map(|s| s.others_cores)
        .collect();
    (!read.is_empty()).then(|| read.iter().sum::<f64>() / read.len() as f64)
}

pub fn method(
    policy: &Policy,
    rounds: u32,
    criterion: &CriterionSettings,
    profile: Option<String>,
) -> Method {
    Method {
        rounds,
        confirmation_rounds: policy.confirmation_rounds as u32,
        noise_rounds: policy.noise_rounds as u32,
        order: "ABBA (AB on even rounds, BA on odd), one benchmark at a time".into(),
        criterion_args: criterion.args(),
        confidence: policy.confidence,
        alpha: policy.alpha,
        correction: stats::CORRECTION.into(),
        floor: policy.floor,
        profile,
        replay: None,
        policy: Some(policy.clone()),
        sampling: None,
        placement: None,
    }
}

/// `Method.sampling`: paired or criterion runs, the bench targets that fell back, and where the
/// paired processes ran (`affinity`, its description).
pub fn describe_sampling(
    paired: bool,
    unpaired: &BTreeMap<String, String>,
    affinity: &str,
) -> String {
    if !paired {
        return "criterion runs: one per benchmark and side (criterion.paired: false)".into();
    }
    let mut s = format!(
        "paired: both sides serve each benchmark and its samples alternate ABBA, \
         about measurement / sample_size apart (harness/src/measure/serve.rs); {affinity}"
    );
    if !unpaired.is_empty() {
        let list: Vec<String> = unpaired
            .iter()
            .map(|(t, why)| format!("{t} ({why})"))
            .collect();
        s.push_str("; criterion runs for ");
        s.push_str(&list.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Measured;
    use crate::results::{HostInfo, Outcome, Revision};
    use crate::vocab::{ProcessFailure, Side};

    #[test]
    fn a_paired_round_decides_on_the_median_of_its_sample_pairs() {
        let sample = |mode: &str, times: [f64; 5]| RawSample {
            round: 0,
            sampling_mode: mode.into(),
            iters: vec![1.0; 5],
            times_ns: times.to_vec(),
            ..Default::default()
        };
        // The machine slows through the round (head's samples 110 → 198, each taken next to
        // base's), and base's first two samples were disturbed (300 instead of 100 and 120).
        // Pairs: 0.37×, 0.44×, 1.1×, 1.1×, 1.1×: the median pair says 1.1×. The sides' lower
        // quartiles say 132 / 160 = 0.825×: the disturbance took away base's fast samples.
        let base = [300.0, 300.0, 140.0, 160.0, 180.0];
        let head = [110.0, 132.0, 154.0, 176.0, 198.0];
        let ratio = |mode: &str| {
            let mut c = Collected::default();
            c.benches.insert(
                "g/x".into(),
                crate::measure::Collect {
                    target: "t".into(),
                    throughput: None,
                    base: vec![sample(mode, base)],
                    head: vec![sample(mode, head)],
                },
            );
            let i = &inputs_from(&c)[0];
            i.head.as_ref().unwrap()[0] / i.base.as_ref().unwrap()[0]
        };
        assert!((ratio("paired") - 1.1).abs() < 1e-9, "{}", ratio("paired"));
        // Criterion runs were not taken pairwise: each side's lower quartile.
        assert!(
            (ratio("linear") - 132.0 / 160.0).abs() < 1e-9,
            "{}",
            ratio("linear")
        );
    }

    /// One target `t` whose benchmarks answer `ns(id, side, round)`; records (id, round) of
    /// every measurement.
    struct Script {
        ns: fn(&str, Side, u32) -> f64,
        ids: Vec<&'static str>,
        measured: Vec<(String, u32)>,
    }

    impl Measurer for Script {
        fn has_target(&self, _: Side, _: &str) -> bool {
            true
        }
        fn bench_ids(&self, _: Side, _: &str, filter: Option<&str>) -> Option<Vec<String>> {
            let re = filter.map(|f| regex_lite::Regex::new(f).unwrap());
            let ids = self
                .ids
                .iter()
                .filter(|id| re.as_ref().is_none_or(|r| r.is_match(id)));
            Some(ids.map(|s| s.to_string()).collect())
        }
        fn measure(
            &mut self,
            side: Side,
            target: &str,
            filter: Option<&str>,
            round: u32,
        ) -> Result<BTreeMap<String, Measured>, ProcessFailure> {
            let mut out = BTreeMap::new();
            for id in self.bench_ids(side, target, filter).unwrap() {
                if side == Side::Base {
                    self.measured.push((id.clone(), round));
                }
                let ns = (self.ns)(&id, side, round);
                let sample = RawSample {
                    round,
                    sampling_mode: "flat".into(),
                    iters: vec![1.0; 4],
                    times_ns: vec![ns; 4],
                    ..Default::default()
                };
                let m = Measured {
                    id: id.clone(),
                    throughput: None,
                    sample,
                };
                out.insert(id, m);
            }
            Ok(out)
        }
    }

    /// `quiet`: no change. `noisy`: ±25 % per round in the first six rounds (a spread threshold
    /// far above max_threshold: ❔), exactly equal after. `slow`: +20 % with a little noise (a
    /// suspect, confirmed). `lucky`: −6 % in four rounds, 0 in two: an estimate of −3.9 %,
    /// past its 3.2 % threshold, t = 3.2 and Holm-adjusted p ≈ 0.08, so ❔, and not for noise
    /// rounds (its threshold is under `noise_target`; chosen for a large estimate, they would be
    /// optional stopping). `spread`: +8.3 % with ±8 % per round, so a six-round threshold of
    /// 9.4 % (above `noise_target`): noise rounds bring it to 6.2 %, and the slowdown is caught.
    fn scripted_ns(id: &str, side: Side, round: u32) -> f64 {
        let wobble: f64 = if round.is_multiple_of(2) { 1.0 } else { -1.0 };
        match (id, side) {
            (_, Side::Base) => 100.0,
            ("t/noisy", Side::Head) if round < 6 => 100.0 * (0.25 * wobble).exp(),
            ("t/slow", Side::Head) => 120.0 * (0.01 * wobble).exp(),
            ("t/slower", Side::Head) => 140.0 * (0.01 * wobble).exp(),
            ("t/spread", Side::Head) => 100.0 * (0.08 + 0.08 * wobble).exp(),
            ("t/lucky", Side::Head) if round < 6 && round != 1 && round != 4 => {
                100.0 * (-0.06f64).exp()
            }
            _ => 100.0,
        }
    }

    fn run_script(noise_rounds: usize) -> (Script, Vec<BenchResult>) {
        let mut m = Script {
            ns: scripted_ns,
            ids: vec!["t/quiet", "t/noisy", "t/slow", "t/lucky", "t/spread"],
            measured: Vec::new(),
        };
        let policy = Policy {
            noise_rounds,
            ..Policy::default()
        };
        let plan = [TargetPlan {
            target: "t".into(),
            filter: None,
        }];
        let (_, benches) = measure_and_decide(
            &mut m,
            &plan,
            &policy,
            6,
            None,
            None,
            &crate::progress::Silent,
        );
        (m, benches)
    }

    fn rounds_of(m: &Script, id: &str) -> Vec<u32> {
        m.measured
            .iter()
            .filter(|x| x.0 == id)
            .map(|x| x.1)
            .collect()
    }

    #[test]
    fn noise_rounds_go_to_the_too_noisy_and_confirmation_rounds_come_after_them() {
        let (m, benches) = run_script(Policy::default().noise_rounds);
        let status = |id: &str| benches.iter().find(|b| b.id == id).unwrap().status;
        // Rounds 0-5 for everyone; 6-11 (noise) for t/noisy and t/spread only; 12-19
        // (confirmation, the default 8) for the suspects t/slow and t/spread only.
        assert_eq!(rounds_of(&m, "t/quiet"), (0..6).collect::<Vec<_>>());
        assert_eq!(rounds_of(&m, "t/noisy"), (0..12).collect::<Vec<_>>());
        assert_eq!(status("t/lucky"), Status::TooNoisy);
        // Its threshold is under noise_target, so no noise rounds for it.
        let lucky = benches.iter().find(|b| b.id == "t/lucky").unwrap();
        assert!((lucky.threshold - 0.032).abs() < 0.001, "{lucky:?}");
        assert!(
            (lucky.change.unwrap().estimate + 0.039).abs() < 0.001,
            "{lucky:?}"
        );
        assert_eq!(rounds_of(&m, "t/lucky"), (0..6).collect::<Vec<_>>());
        let slow: Vec<u32> = (0..6).chain(12..20).collect();
        assert_eq!(rounds_of(&m, "t/slow"), slow);
        assert_eq!(rounds_of(&m, "t/spread"), (0..20).collect::<Vec<_>>());
        let spread = benches.iter().find(|b| b.id == "t/spread").unwrap();
        assert_eq!(spread.status, Status::Regression, "{spread:?}");
        assert!(spread.threshold < 0.065, "{spread:?}");
        assert_eq!(status("t/quiet"), Status::NoChange);
        assert_eq!(status("t/noisy"), Status::NoChange, "12 rounds can tell");
        assert_eq!(status("t/slow"), Status::Regression);
        let noisy = benches.iter().find(|b| b.id == "t/noisy").unwrap();
        assert_eq!(noisy.rounds, 12);
        assert!(!noisy.confirmed);
    }

    /// A saved scripted comparison under `policy`, as `harness compare` would write it.
    fn saved_run(policy: &Policy, ids: Vec<&'static str>) -> Results {
        let mut m = Script {
            ns: scripted_ns,
            ids,
            measured: Vec::new(),
        };
        let plan = [TargetPlan {
            target: "t".into(),
            filter: None,
        }];
        let (collected, benches) = measure_and_decide(
            &mut m,
            &plan,
            policy,
            6,
            None,
            None,
            &crate::progress::Silent,
        );
        let rev = Revision {
            spec: "x".into(),
            sha: "0".repeat(40),
            subject: "s".into(),
            dirty: false,
        };
        Results {
            schema: crate::results::SCHEMA.into(),
            tool_version: "test".into(),
            created_unix_s: 0.0,
            suite: "s".into(),
            shard: None,
            base: rev.clone(),
            head: rev,
            host: HostInfo::default(),
            method: method(policy, 6, &CriterionSettings::default(), None),
            rounds: collected.rounds,
            outcome: Results::decide_all(&benches, &[], None),
            benches,
            failures: vec![],
            wall_s: 1.0,
            reproduce: vec![],
            e2e: None,
            gate_changes: vec![],
            lost_time: vec![],
        }
    }

    fn by_id<'a>(r: &'a Results, id: &str) -> &'a BenchResult {
        r.benches.iter().find(|b| b.id == id).unwrap()
    }

    #[test]
    fn a_replay_under_the_same_policy_gives_the_saved_decisions() {
        // Without noise rounds, so that the saved first pass is exactly 6 rounds long.
        let policy = Policy {
            noise_rounds: 0,
            ..Policy::default()
        };
        let saved = saved_run(&policy, vec!["t/quiet", "t/noisy", "t/slow", "t/slower"]);
        assert_eq!(by_id(&saved, "t/slow").status, Status::Regression);
        let r = replay(&saved, &policy, None, None, "saved.json").unwrap();
        assert_eq!(r.benches, saved.benches);
        assert_eq!(r.outcome, saved.outcome);
        // A ⛔ row (its target failed on a side) stays as saved; the others are unchanged.
        let mut failed = saved.clone();
        failed.benches[0].status = Status::Failed;
        failed.benches[0].note = Some("bench target t failed to run on head".into());
        let rf = replay(&failed, &policy, None, None, "saved.json").unwrap();
        assert_eq!(rf.benches, failed.benches);
        let note = r.method.replay.as_deref().unwrap();
        assert!(
            note.contains("saved.json") && note.contains("\"noise_k\":2.5"),
            "{note}"
        );
        // Fewer first-pass rounds: the confirmation rounds are still the recorded ones.
        let r4 = replay(&saved, &policy, Some(4), None, "saved.json").unwrap();
        assert_eq!(by_id(&r4, "t/quiet").rounds, 4);
        assert_eq!(by_id(&r4, "t/slow").rounds, 4 + 8);
        assert_eq!(by_id(&r4, "t/slow").status, Status::Regression);
        assert_eq!(r4.method.rounds, 4);
        let e = replay(&saved, &policy, Some(7), None, "saved.json").unwrap_err();
        assert!(e.to_string().contains("cannot add rounds"), "{e}");
        assert!(replay(&saved, &policy, Some(1), None, "saved.json").is_err());
        // A saved suspect that is none under the variant (a fixed 50 % threshold) while another
        // still is: the first one's confirmation rounds are not used.
        let fixed = Policy::default()
            .with_overrides(r#"{"thresholds": {"t/slow": 0.5}}"#)
            .unwrap();
        let r = replay(&saved, &fixed, None, None, "saved.json").unwrap();
        let slow = by_id(&r, "t/slow");
        assert_eq!(
            (slow.status, slow.rounds, slow.confirmed),
            (Status::NoChange, 6, false)
        );
        let slower = by_id(&r, "t/slower");
        assert_eq!((slower.status, slower.rounds), (Status::Regression, 14));
    }

    #[test]
    fn a_multi_threaded_row_measured_on_a_busy_machine_is_too_noisy_whatever_it_read() {
        let policy = Policy {
            noise_rounds: 0,
            ..Policy::default()
        };
        let saved = saved_run(&policy, vec!["t/quiet", "t/slow"]);
        assert_eq!(by_id(&saved, "t/quiet").status, Status::NoChange);
        assert_eq!(by_id(&saved, "t/slow").status, Status::Regression);
        // Both rows' rounds as if measured while others kept `others` cores busy.
        let busy = |others: f64| {
            let mut r = saved.clone();
            for b in &mut r.benches {
                for s in b.base.iter_mut().chain(b.head.iter_mut()) {
                    for x in &mut s.samples {
                        x.others_cores = Some(others);
                    }
                }
            }
            replay(&r, &policy, None, None, "saved.json").unwrap()
        };
        let crowded = busy(0.97);
        // t/slow is no suspect once crowded (its confirmation rounds could not change its ❔),
        // so as measured it reads ⚠️, not the 🔴 of the saved run.
        for (id, read) in [
            ("t/quiet", "✅ no change"),
            ("t/slow", "⚠️ possible regression"),
        ] {
            let b = by_id(&crowded, id);
            assert_eq!(b.status, Status::TooNoisy, "{b:?}");
            let note = b.note.as_deref().unwrap();
            assert!(
                note.starts_with("measured while other processes kept 0.97 cores busy")
                    && note.contains(&format!("as measured it read {read}")),
                "{note}"
            );
            if id == "t/quiet" {
                assert_eq!(b.change, by_id(&saved, id).change, "the interval is kept");
            } else {
                assert_eq!(b.rounds, 6, "{b:?}");
                assert!(b.change.as_ref().unwrap().estimate > 0.1, "{b:?}");
            }
        }
        assert_ne!(
            crowded.outcome, saved.outcome,
            "no confirmed regression is left"
        );
        // Below `crowded_cores`, and with the rule off, the saved verdicts stand.
        let quiet = busy(0.05);
        assert_eq!(quiet.benches.len(), saved.benches.len());
        for b in &saved.benches {
            let q = by_id(&quiet, &b.id);
            assert_eq!((q.status, &q.note), (b.status, &b.note));
        }
        let off = Policy {
            crowded_cores: 0.0,
            ..policy.clone()
        };
        let mut r = saved.clone();
        let slow = r.benches.iter_mut().find(|b| b.id == "t/slow").unwrap();
        for x in &mut slow.head.as_mut().unwrap().samples {
            x.others_cores = Some(2.0);
        }
        let r = replay(&r, &off, None, None, "saved.json").unwrap();
        assert_eq!(by_id(&r, "t/slow").status, Status::Regression);
    }

    #[test]
    fn a_replay_counts_the_saved_noise_rounds_apart_from_the_regular_ones() {
        // Saved under the defaults: 6 regular rounds, then 6 noise rounds for t/noisy and
        // t/spread, then confirmation rounds.
        let policy = Policy::default();
        let saved = saved_run(&policy, vec!["t/quiet", "t/noisy", "t/slow", "t/spread"]);
        assert_eq!(by_id(&saved, "t/noisy").rounds, 12);
        let r = replay(&saved, &policy, None, None, "saved.json").unwrap();
        assert_eq!(r.benches, saved.benches);
        assert_eq!(
            (r.method.rounds, r.method.noise_rounds),
            (6, policy.noise_rounds as u32)
        );
        let note = r.method.replay.as_deref().unwrap();
        assert!(
            note.contains("6 rounds + 6 noise rounds; used: 12"),
            "{note}"
        );
        // Truncated into the noise rounds, then to the regular rounds only.
        let r9 = replay(&saved, &policy, Some(9), None, "saved.json").unwrap();
        assert_eq!((r9.method.rounds, r9.method.noise_rounds), (6, 3));
        assert_eq!(by_id(&r9, "t/noisy").rounds, 9);
        let r6 = replay(&saved, &policy, Some(6), None, "saved.json").unwrap();
        assert_eq!((r6.method.rounds, r6.method.noise_rounds), (6, 0));
        assert_eq!(by_id(&r6, "t/noisy").rounds, 6);
    }

    #[test]
    fn a_replay_starts_from_the_recorded_policy_unless_a_config_is_given() {
        let recorded = Policy {
            noise_k: 3.0,
            ..Policy::default()
        };
        let mut saved = saved_run(&recorded, vec!["t/quiet"]);
        assert_eq!(saved.method.policy.as_ref(), Some(&recorded));
        let none = Path::new("/nonexistent/harness.yaml");
        let (p, from) = replay_base_policy(&saved, None, none).unwrap();
        assert_eq!(
            (p, from.as_str()),
            (recorded.clone(), "the policy it recorded")
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("harness.yaml");
        std::fs::write(
            &cfg,
            "packages: [engine]\nsuites:\n  full:\n    benches:\n      kernels: []\n\
             policy:\n  noise_k: 2\n",
        )
        .unwrap();
        let (p, from) = replay_base_policy(&saved, Some(&cfg), none).unwrap();
        assert_eq!(p.noise_k, 2.0);
        assert!(from.contains("harness.yaml"), "{from}");
        // A results file from before policies were recorded.
        saved.method.policy = None;
        assert_eq!(
            replay_base_policy(&saved, None, none).unwrap().0,
            Policy::default()
        );
        assert_eq!(
            replay_base_policy(&saved, None, &cfg).unwrap().0.noise_k,
            2.0
        );
        assert!(replay_base_policy(&saved, Some(none), none).is_err());
    }

    #[test]
    fn a_suspect_without_recorded_confirmation_rounds_is_at_most_a_warning() {
        // Saved under a 25 % floor: the +20 % of t/slow is no suspect, so it has no
        // confirmation rounds on record.
        let high = Policy {
            floor: 0.25,
            max_threshold: 0.5,
            ..Policy::default()
        };
        let saved = saved_run(&high, vec!["t/quiet", "t/noisy", "t/slow", "t/lucky"]);
        assert_eq!(by_id(&saved, "t/slow").status, Status::NoChange);
        assert!(saved.rounds.iter().all(|r| !r.confirmation));
        let r = replay(&saved, &Policy::default(), None, None, "saved.json").unwrap();
        let slow = by_id(&r, "t/slow");
        assert_eq!(slow.status, Status::PossibleRegression);
        assert!(!slow.confirmed);
        assert!(
            slow.note
                .as_deref()
                .unwrap()
                .contains("no confirmation rounds were recorded"),
            "{:?}",
            slow.note
        );
        assert_eq!(r.outcome, Outcome::Warn);
    }

    #[test]
    fn without_noise_rounds_the_noisy_benchmark_stays_too_noisy() {
        let (m, benches) = run_script(0);
        let noisy = benches.iter().find(|b| b.id == "t/noisy").unwrap();
        assert_eq!(noisy.status, Status::TooNoisy);
        assert_eq!(rounds_of(&m, "t/noisy"), (0..6).collect::<Vec<_>>());
        let slow: Vec<u32> = (0..6).chain(6..14).collect();
        assert_eq!(rounds_of(&m, "t/slow"), slow);
        // Six rounds give t/spread a 9.4 % threshold; its +8.3 % stays inside.
        let spread = benches.iter().find(|b| b.id == "t/spread").unwrap();
        assert_eq!(spread.status, Status::NoChange, "{spread:?}");
        assert!(spread.threshold > 0.085, "{spread:?}");
    }

    #[test]
    fn under_a_budget_open_rows_get_more_rounds_and_without_one_they_do_not() {
        use crate::stats::Rule;
        let policy = Policy {
            rule: Rule::Resolution,
            looks: 5,
            ..Policy::default()
        };
        let plan = [TargetPlan {
            target: "t".into(),
            filter: None,
        }];
        let run = |budget: Option<Duration>| {
            let mut m = Script {
                ns: scripted_ns,
                ids: vec!["t/quiet", "t/noisy", "t/slow"],
                measured: Vec::new(),
            };
            let (_, b) = measure_and_decide(
                &mut m,
                &plan,
                &policy,
                6,
                None,
                budget,
                &crate::progress::Silent,
            );
            (m, b)
        };
        // No budget left: the first pass and the suspects' confirmation only. 6 rounds cannot
        // reach ok_alpha / looks, so every row but the suspect t/slow stays open.
        let (m0, b0) = run(Some(Duration::ZERO));
        assert_eq!(rounds_of(&m0, "t/quiet").len(), 6);
        assert_eq!(rounds_of(&m0, "t/noisy").len(), 6);
        assert_eq!(rounds_of(&m0, "t/slow").len(), 6 + 8);
        let noisy0 = b0.iter().find(|b| b.id == "t/noisy").unwrap();
        assert_eq!(noisy0.status, Status::TooNoisy, "{noisy0:?}");
        // Ten minutes: batches of noise_rounds for the open rows while looks allow (5 looks:
        // first pass, three batches, confirmation): t/quiet is ✅ after the first batch (12
        // rounds) and gets no more; t/noisy (its ±25 % rounds keep it open) gets them all; the
        // confirmation rounds still come last.
        let (m1, b1) = run(Some(Duration::from_secs(600)));
        assert_eq!(rounds_of(&m1, "t/quiet").len(), 12);
        assert!(
            rounds_of(&m1, "t/noisy").len() >= 18,
            "{:?}",
            rounds_of(&m1, "t/noisy")
        );
        // t/slow (+20 %) is a suspect from the first pass on, but 6 rounds cannot put its
        // interval above δ at alpha / looks (2⁻⁶ > 0.01): it is open and gets the first batch;
        // 12 rounds do, so then it waits for its 8 confirmation rounds only.
        let slow = rounds_of(&m1, "t/slow");
        assert_eq!(slow.len(), 6 + 6 + 8, "{slow:?}");
        let noisy_last = *rounds_of(&m1, "t/noisy").last().unwrap();
        assert!(
            slow[12] > noisy_last,
            "confirmation after the batches: {slow:?}"
        );
        let slow_row = b1.iter().find(|b| b.id == "t/slow").unwrap();
        assert_eq!(slow_row.status, Status::Regression, "{slow_row:?}");
        let quiet = b1.iter().find(|b| b.id == "t/quiet").unwrap();
        assert_eq!(quiet.status, Status::NoChange, "{quiet:?}");
        assert_eq!(rounds_of(&m1, "t/noisy").len(), 6 + 3 * 6);
        // Without a budget at all (the threshold rule's callers, e2e rows): the fixed passes,
        // the noise rounds for every open row included.
        let (m2, _) = run(None);
        assert_eq!(rounds_of(&m2, "t/quiet").len(), 12);
        assert_eq!(rounds_of(&m2, "t/noisy").len(), 12);
    }

    #[test]
    fn a_batch_reserves_confirmation_for_rows_it_may_make_suspects() {
        use crate::stats::{Change, Decision, ThresholdSource};
        let row = |id: &str, estimate: f64, suspect: bool| Decision {
            id: id.into(),
            status: Status::TooNoisy,
            change: Some(Change {
                estimate,
                ci_low: estimate - 0.05,
                ci_high: estimate + 0.05,
                confidence: 0.975,
                p_value: 0.5,
                p_adjusted: 1.0,
            }),
            threshold: 0.03,
            threshold_source: ThresholdSource::Floor,
            note: None,
            rounds: 8,
            confirmation_rounds: 0,
            suspect,
        };
        // Equally near a decision; "up" leans slower, "down" faster, "sus" is a suspect already
        // (its confirmation is reserved elsewhere).
        let ds = [
            row("down", -0.01, false),
            row("up", 0.01, false),
            row("sus", 0.01, true),
        ];
        let open: Vec<String> = ["down", "up", "sus"].map(String::from).to_vec();
        // 1 s per benchmark-round, batches of 6, 8 confirmation rounds: "up" costs 14 s, the
        // others 6 s each.
        let plan = |left: f64| plan_batch(&ds, &open, 1.0, left, 6, 8);
        assert_eq!(plan(26.0), ["down", "sus", "up"]);
        assert_eq!(plan(25.0), ["down", "sus"]);
        assert_eq!(plan(13.0), ["down", "sus"]);
        assert_eq!(plan(6.0), ["down"]);
        assert!(plan(5.0).is_empty());
    }

    #[test]
    fn a_replay_refuses_resolutions_that_match_no_benchmark() {
        let policy = Policy::default();
        let saved = saved_run(&policy, vec!["t/quiet", "t/slow"]);
        let typo = policy
            .with_overrides(r#"{"rule": "resolution", "resolutions": {"t/nope*": 0.05}}"#)
            .unwrap();
        let e = replay(&saved, &typo, None, None, "saved")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t/nope*"), "{e}");
        let glob = policy
            .with_overrides(r#"{"rule": "resolution", "resolutions": {"t/*": 0.05}}"#)
            .unwrap();
        let r = replay(&saved, &glob, None, None, "saved").unwrap();
        assert!(
            r.benches.iter().all(|b| b.threshold == 0.05),
            "{:?}",
            r.benches
        );
    }

    /// The committed A/A runs under the current defaults whose rounds the simulations of
    /// `stats` draw their noise from.
    const AA_RUNS: &str = "eval/results/2026-11-30-rounds8/aa";

    /// The per-round paired log ratios of every benchmark of every A/A run under [`AA_RUNS`],
    /// exactly as the decision sees them (`inputs_from`), in file order.
    fn aa_round_log_ratios() -> Vec<f64> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(AA_RUNS);
        let mut files = Vec::new();
        let mut todo = vec![root];
        while let Some(dir) = todo.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.ends_with("results.json") || p.ends_with("results.json.gz") {
                    files.push(p);
                }
            }
        }
        files.sort();
        let mut out = Vec::new();
        for f in files {
            let saved: Results =
                serde_json::from_str(&crate::commands::read_saved_text(&f, u64::MAX).unwrap())
                    .unwrap();
            let c = collected_from(&saved, &|_, _| true);
            for input in inputs_from(&c) {
                if let (Some(b), Some(h)) = (&input.base, &input.head) {
                    out.extend(stats::log_ratios(b, h));
                }
            }
        }
        out
    }

    /// Regenerates `stats/testdata/aa_round_log_ratios.txt`, the noise the simulations draw from
    /// (`cargo test -p harness --lib write_the_aa_round_pool -- --ignored`).
    #[test]
    #[ignore]
    fn write_the_aa_round_pool() {
        let d = aa_round_log_ratios();
        let text: String = d.iter().map(|x| format!("{x:.6}\n")).collect();
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/stats/testdata/aa_round_log_ratios.txt");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            format!(
                "# {} paired rounds of the A/A runs under {AA_RUNS}, ln(head / base)\n{text}",
                d.len()
            ),
        )
        .unwrap();
    }

    #[test]
    fn the_committed_noise_pool_is_what_the_aa_runs_give() {
        let want = aa_round_log_ratios();
        let text = include_str!("stats/testdata/aa_round_log_ratios.txt");
        let got: Vec<f64> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
    }
}
