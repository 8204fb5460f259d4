//! The run stage: interleaved rounds. Round `r` runs every benchmark of the suite once per side,
//! base and head back to back, in the order AB on even rounds and BA on odd ones (so the sequence
//! is ABBA ABBA …: a linear drift or a slow start hits both sides equally).
//!
//! The unit of interleaving is **one benchmark**, not one bench target: base runs benchmark X,
//! then head runs X, then both run Y. Run target by target, the two measurements of X were a
//! whole target apart (about 20 s for the 18 matmul benchmarks), and this machine's speed shifts
//! by 20-40 % on a scale of seconds to tens of seconds (other tenants of the host; STATS.md,
//! "Interleaving"): the pair no longer shared the conditions it was meant to share. Measured on
//! the matmul target, quiet machine, 6 A/A rounds each, the two orders interleaved with each
//! other: median per-round sd of the log ratio 0.192 target by target, 0.117 benchmark by
//! benchmark (`harness/eval/interleave.py`). The price is one process start per benchmark and
//! side (about 0.2 s more per benchmark per round).
//!
//! Within that, a benchmark both sides serve is measured **paired** ([`super::serve`]): both
//! executables run at once and their samples alternate about 60 ms apart, which cuts the
//! per-round sd of the log ratio about fourfold again (0.139 → 0.025 on a quiet machine,
//! `harness/eval/paired.py`). A target either side cannot serve is measured as above, one
//! criterion run per side, and `Collected::unpaired` says why. Each run of a criterion executable
//! gets its own `CRITERION_HOME`, so nothing carries over between runs.
//! The measuring itself is behind [`Measurer`], so the stats and report path is tested with
//! scripted timings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::criterion::{Measured, read_run, run_criterion};
use crate::build::BenchExes;
use crate::config::PairSettings;
use crate::host;
use crate::results::{Failure, RawSample, RoundInfo, Throughput};
use crate::vocab::{ProcessFailure, Side, Stage};

/// The order of the two sides in round `r`: AB, BA, AB, BA …
pub fn round_order(r: u32) -> [Side; 2] {
    if r.is_multiple_of(2) {
        [Side::Base, Side::Head]
    } else {
        [Side::Head, Side::Base]
    }
}

/// Measures one bench target of one side, once.
pub trait Measurer {
    /// Whether this side has that target (absent targets are skipped: their benchmarks become
    /// 🆕 or ➖).
    fn has_target(&self, side: Side, target: &str) -> bool;
    /// Runs the target's benchmarks matching `filter` (a criterion regex; None = all).
    fn measure(
        &mut self,
        side: Side,
        target: &str,
        filter: Option<&str>,
        round: u32,
    ) -> Result<BTreeMap<String, Measured>, ProcessFailure>;
    /// The benchmark ids this side's target runs under `filter`, in its own order; `None` when
    /// the measurer cannot list them (the target is then measured in one run per side).
    fn bench_ids(&self, _side: Side, _target: &str, _filter: Option<&str>) -> Option<Vec<String>> {
        None
    }
    /// Whether this side's target can serve paired samples ([`super::serve`]); `Err` says why
    /// not (its benchmarks are then measured with criterion runs on both sides).
    fn can_pair(&mut self, _side: Side, _target: &str) -> Result<(), String> {
        Err("this measurer has no paired sampling".into())
    }
    /// Measures benchmark `id` of `target` on both sides at once, `order[0]` first, paired
    /// sample by sample: each side's samples of `id` (and of any other row the same paired run
    /// measures, such as an end-to-end check's prefill). Only called when
    /// [`Measurer::can_pair`] said yes for both sides.
    fn measure_pair(
        &mut self,
        target: &str,
        id: &str,
        order: [Side; 2],
        round: u32,
    ) -> Result<Vec<(Side, Measured)>, (Side, ProcessFailure)> {
        let _ = (target, id, round);
        Err((
            order[0],
            ProcessFailure {
                message: "this measurer has no paired sampling".into(),
                log_tail: Vec::new(),
            },
        ))
    }
    /// Called before round `round` measures anything, with the targets it will run: work that
    /// must not fall between two timed benchmarks goes here (relinking for placement).
    fn begin_round(&mut self, _round: u32, _targets: &[&str]) {}
    /// Whether benchmark `id` of `target` runs on more than one thread, timed in wall time:
    /// then its samples carry the cores other processes kept busy while it was measured
    /// ([`RawSample::others_cores`]), and a machine busy with other work leaves its row ❔
    /// (`policy.crowded_cores`).
    fn multi_threaded(&self, _target: &str, _id: &str) -> bool {
        false
    }
}

/// The real measurer: runs criterion executables with the round's short settings.
pub struct CriterionMeasurer {
    pub base: BenchExes,
    pub head: BenchExes,
    /// Criterion arguments (`--bench --noplot --warm-up-time …`).
    pub args: Vec<String>,
    /// Scratch dir: one `CRITERION_HOME` per run under it.
    pub work_dir: PathBuf,
    /// Where the executable's stderr lines go (progress), besides the failure tail.
    pub on_line: Box<dyn Fn(&str)>,
    /// Paired sampling's settings, or None for criterion runs only (`criterion.paired: false`).
    pub pair: Option<PairSettings>,
    /// The paired settings of the benchmarks `affinity.multi_threaded` names, when they differ
    /// (`suites.<name>.criterion_multi_threaded`).
    pub pair_multi_threaded: Option<PairSettings>,
    /// Per side and target, whether its executable serves paired samples (probed once).
    pub serves: BTreeMap<(Side, String), Result<(), String>>,
    /// Which CPU each paired benchmark's two processes run on. Criterion runs (a revision that
    /// cannot serve) are never pinned: a whole target may hold multi-threaded benchmarks.
    pub affinity: super::affinity::Affinity,
    /// How long one criterion run may take (`deadlines.bench_s`).
    pub deadline: std::time::Duration,
    /// Which executables a round runs: the built ones, or relinks in the round's function
    /// orders (`placement.sample`).
    pub placement: super::Placement,
}

impl CriterionMeasurer {
    fn exes(&self, side: Side) -> &BenchExes {
        match side {
            Side::Base => &self.base,
            Side::Head => &self.head,
        }
    }

    /// `side`'s executable of `target` in round `round`, with the other side's relinked for
    /// the round at the same time: both sides of a round are relinks or both are cargo's builds
    /// (`Placement::exes` falls back for all it is given), also when each side runs alone.
    fn round_exe(&mut self, target: &str, side: Side, built: &Path, round: u32) -> PathBuf {
        let mut sides: Vec<(Side, PathBuf)> = Side::BOTH
            .iter()
            .filter_map(|s| Some((*s, self.exes(*s).by_target.get(target)?.clone())))
            .collect();
        if !sides.iter().any(|(s, _)| *s == side) {
            sides.push((side, built.to_path_buf()));
        }
        let pairs: Vec<(Side, &Path)> = sides.iter().map(|(s, p)| (*s, p.as_path())).collect();
        let run = self.placement.exes(target, &pairs, round);
        let i = sides.iter().position(|(s, _)| *s == side).expect("added");
        run[i].clone()
    }
}

impl Measurer for CriterionMeasurer {
    fn has_target(&self, side: Side, target: &str) -> bool {
        self.exes(side).by_target.contains_key(target)
    }

    fn bench_ids(&self, side: Side, target: &str, filter: Option<&str>) -> Option<Vec<String>> {
        let exe = self.exes(side).by_target.get(target)?;
        let ids = super::criterion::list_ids(exe, filter);
        // An executable that lists nothing may be broken: run it whole, so that its failure is
        // reported, rather than skip it.
        (!ids.is_empty()).then_some(ids)
    }

    fn can_pair(&mut self, side: Side, target: &str) -> Result<(), String> {
        if self.pair.is_none() {
            return Err("paired sampling is off (criterion.paired: false)".into());
        }
        if let Some(r) = self.serves.get(&(side, target.to_string())) {
            return r.clone();
        }
        let exe = self.exes(side).by_target.get(target).cloned();
        let first = exe
            .as_deref()
            .and_then(|e| super::criterion::list_ids(e, None).into_iter().next());
        let r = match (exe, first) {
            (Some(exe), Some(id)) if super::serve::serves(&exe, &id) => Ok(()),
            (Some(_), Some(_)) => Err(format!(
                "the {} executable does not serve paired samples (its revision predates them)",
                side.name()
            )),
            _ => Err(format!("the {} side lists no benchmarks", side.name())),
        };
        self.serves.insert((side, target.to_string()), r.clone());
        r
    }

    fn multi_threaded(&self, _target: &str, id: &str) -> bool {
        self.affinity.is_multi_threaded(id)
    }

    /// Every target's relinks for the round, made before it starts (a relink is lld on every
    /// CPU and a file written out: not between two timed benchmarks).
    fn begin_round(&mut self, round: u32, targets: &[&str]) {
        for target in targets {
            let built = Side::BOTH
                .iter()
                .find_map(|s| Some((*s, self.exes(*s).by_target.get(*target)?.clone())));
            if let Some((side, built)) = built {
                self.round_exe(target, side, &built, round);
            }
        }
    }

    fn measure_pair(
        &mut self,
        target: &str,
        id: &str,
        order: [Side; 2],
        round: u32,
    ) -> Result<Vec<(Side, Measured)>, (Side, ProcessFailure)> {
        let missing = |side: Side| {
            (
                side,
                ProcessFailure {
                    message: format!("{} has no bench target {target:?}", side.name()),
                    log_tail: Vec::new(),
                },
            )
        };
        let mut settings = self.pair.ok_or_else(|| missing(order[0]))?;
        if let Some(m) = self.pair_multi_threaded
            && self.affinity.is_multi_threaded(id)
        {
            settings = m;
        }
        let exe = |side: Side| {
            self.exes(side)
                .by_target
                .get(target)
                .cloned()
                .ok_or(missing(side))
        };
        let built = [exe(order[0])?, exe(order[1])?];
        let run = self.placement.exes(
            target,
            &[
                (order[0], built[0].as_path()),
                (order[1], built[1].as_path()),
            ],
            round,
        );
        let exes = [run[0].as_path(), run[1].as_path()];
        let cpu = self.affinity.cpu_for_bench(id);
        settings.cpu_clock = self.affinity.cpu_clock_for_bench(id);
        match super::serve::measure_pair(exes, id, &settings, round, cpu) {
            Ok([a, b]) => Ok(vec![(order[0], a), (order[1], b)]),
            Err(f) => Err((order[f.which], f.failure)),
        }
    }

    fn measure(
        &mut self,
        side: Side,
        target: &str,
        filter: Option<&str>,
        round: u32,
    ) -> Result<BTreeMap<String, Measured>, ProcessFailure> {
        let built = self
            .exes(side)
            .by_target
            .get(target)
            .cloned()
            .ok_or_else(|| ProcessFailure {
                message: format!("{} has no bench target {target:?}", side.name()),
                log_tail: Vec::new(),
            })?;
        let exe = self.round_exe(target, side, &built, round);
        let exe = exe.as_path();
        let home = self
            .work_dir
            .join(format!("r{round:03}-{}-{target}", side.name()));
        let _ = std::fs::remove_dir_all(&home);
        run_criterion(
            exe,
            &self.args,
            filter,
            &home,
            &*self.on_line,
            self.deadline,
        )?;
        read_run(&home, round).map_err(|e| ProcessFailure {
            message: e.to_string(),
            log_tail: Vec::new(),
        })
    }
}

/// Everything the rounds collected.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Collected {
    /// Per benchmark id: throughput, the target it came from, and each side's samples.
    pub benches: BTreeMap<String, Collect>,
    pub rounds: Vec<RoundInfo>,
    pub failures: Vec<Failure>,
    /// (side, target) pairs that failed to run: not run again, their benchmarks become ⛔.
    pub failed_targets: Vec<(Side, String)>,
    /// (side, benchmark id) pairs whose paired measurement failed (a crash, a deadline): that
    /// benchmark is not measured again and becomes ⛔; the target's other benchmarks go on.
    pub failed_benches: Vec<(Side, String)>,
    /// Bench targets measured with criterion runs although paired sampling was asked for, and
    /// why (the first reason met).
    pub unpaired: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Collect {
    pub target: String,
    pub throughput: Option<Throughput>,
    pub base: Vec<RawSample>,
    pub head: Vec<RawSample>,
}

/// One unit of work: a bench target and the criterion filter to pass it.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetPlan {
    pub target: String,
    pub filter: Option<String>,
}

/// One run of a round: a bench target and the filter to pass it, the label for progress lines
/// (the benchmark id, or the target when run whole), and the benchmark id when both sides list
/// it (only such a unit can be measured paired).
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub plan: TargetPlan,
    pub label: String,
    pub on_both: Option<String>,
}

/// The runs of one round, in order: each plan entry split into one exact filter per benchmark
/// (the union of both sides' ids, base's order first, so a benchmark only one side has is still
/// measured there), or the entry whole when a side cannot list its benchmarks.
pub fn interleave_units(m: &dyn Measurer, plan: &[TargetPlan]) -> Vec<Unit> {
    let mut units = Vec::new();
    for tp in plan {
        let mut ids: Vec<String> = Vec::new();
        let mut per_side: Vec<Vec<String>> = Vec::new();
        let mut listed = true;
        for side in [Side::Base, Side::Head] {
            if !m.has_target(side, &tp.target) {
                per_side.push(Vec::new());
                continue;
            }
            match m.bench_ids(side, &tp.target, tp.filter.as_deref()) {
                Some(l) => {
                    for id in &l {
                        if !ids.contains(id) {
                            ids.push(id.clone());
                        }
                    }
                    per_side.push(l);
                }
                None => listed = false,
            }
        }
        if listed && !ids.is_empty() {
            units.extend(ids.into_iter().map(|id| {
                let plan = TargetPlan {
                    target: tp.target.clone(),
                    filter: Some(super::criterion::exact_filter(&[id.as_str()])),
                };
                let on_both = per_side.iter().all(|l| l.contains(&id)).then(|| id.clone());
                Unit {
                    plan,
                    label: id,
                    on_both,
                }
            }));
        } else {
            units.push(Unit {
                plan: tp.clone(),
                label: tp.target.clone(),
                on_both: None,
            });
        }
    }
    units
}

/// Whether `unit` is measured paired: both sides list its benchmark and both serve paired
/// samples. The reason a target is not is noted once in `into.unpaired`.
fn pairs(m: &mut dyn Measurer, unit: &Unit, into: &mut Collected) -> bool {
    if unit.on_both.is_none() {
        return false;
    }
    let target = &unit.plan.target;
    for side in [Side::Base, Side::Head] {
        if let Err(why) = m.can_pair(side, target) {
            into.unpaired.entry(target.clone()).or_insert(why);
            return false;
        }
    }
    true
}

/// Runs rounds `first..first + count` of `plan`, adding to `into`, one benchmark at a time
/// ([`interleave_units`]): paired when both sides can ([`super::serve`]), else one criterion
/// run per side. `progress(done, total, what)` is called before each benchmark (or each side's
/// run of it).
pub fn run_rounds(
    m: &mut dyn Measurer,
    plan: &[TargetPlan],
    first: u32,
    count: u32,
    confirmation: bool,
    into: &mut Collected,
    progress: &mut dyn FnMut(u64, u64, &str),
) {
    let units: Vec<(Unit, bool)> = interleave_units(m, plan)
        .into_iter()
        .map(|u| {
            let paired = pairs(m, &u, into);
            (u, paired)
        })
        .collect();
    let total = count as u64 * units.len() as u64 * 2;
    let mut done = 0u64;
    for r in first..first + count {
        let started = Instant::now();
        let started_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let mut targets: Vec<&str> = Vec::new();
        for (u, _) in &units {
            if !targets.contains(&u.plan.target.as_str()) {
                targets.push(&u.plan.target);
            }
        }
        m.begin_round(r, &targets);
        let load_avg = host::load_avg();
        let order = round_order(r);
        for (unit, paired) in &units {
            let tp = &unit.plan;
            let failed = |into: &Collected, side: Side| {
                into.failed_targets
                    .iter()
                    .any(|(s, t)| *s == side && *t == tp.target)
            };
            if let (true, Some(id)) = (*paired, &unit.on_both) {
                progress(
                    done,
                    total,
                    &format!("round {} paired {}", r + 1, unit.label),
                );
                done += 2;
                let bench_failed = into.failed_benches.iter().any(|(_, b)| b == id);
                if failed(into, Side::Base) || failed(into, Side::Head) || bench_failed {
                    continue;
                }
                // Read only where it is kept (a scan of /proc: 0.8 ms on the 2-vCPU VM,
                // `cpu_others.rs`).
                let before = m
                    .multi_threaded(&tp.target, id)
                    .then(host::cpu_reading)
                    .flatten();
                let measured = m.measure_pair(&tp.target, id, order, r);
                let others = others_since(before);
                match measured {
                    Ok(both) => {
                        for (side, ms) in both {
                            record(into, &*m, &tp.target, side, ms, others);
                        }
                    }
                    Err((side, f)) => fail_bench(into, side, &tp.target, id, f),
                }
                continue;
            }
            for side in order {
                progress(
                    done,
                    total,
                    &format!("round {} {} {}", r + 1, side.name(), unit.label),
                );
                done += 1;
                if failed(into, side) || !m.has_target(side, &tp.target) {
                    continue;
                }
                // A whole target may hold multi-threaded benchmarks: read for it too.
                let before = (unit.label == tp.target || m.multi_threaded(&tp.target, &unit.label))
                    .then(host::cpu_reading)
                    .flatten();
                let measured = m.measure(side, &tp.target, tp.filter.as_deref(), r);
                let others = others_since(before);
                match measured {
                    Ok(measured) => {
                        for (_, ms) in measured {
                            record(into, &*m, &tp.target, side, ms, others);
                        }
                    }
                    Err(f) => fail(into, side, &tp.target, f),
                }
            }
        }
        into.rounds.push(RoundInfo {
            index: r,
            order: if order[0] == Side::Base { "AB" } else { "BA" }.into(),
            confirmation,
            started_unix_s,
            duration_s: started.elapsed().as_secs_f64(),
            load_avg,
        });
    }
    progress(total, total, "done");
}

/// The cores other processes kept busy since `before` (`host::others_cores`).
fn others_since(before: Option<host::CpuReading>) -> Option<f64> {
    host::others_cores(&before?, &host::cpu_reading()?)
}

/// Adds one side's sample of a benchmark; a multi-threaded one's carries `others`, the cores
/// other processes kept busy while it was measured.
fn record(
    into: &mut Collected,
    m: &dyn Measurer,
    target: &str,
    side: Side,
    mut ms: Measured,
    others: Option<f64>,
) {
    if m.multi_threaded(target, &ms.id) {
        ms.sample.others_cores = others;
    }
    let e = into.benches.entry(ms.id).or_default();
    e.target = target.to_string();
    e.throughput = e.throughput.or(ms.throughput);
    match side {
        Side::Base => e.base.push(ms.sample),
        Side::Head => e.head.push(ms.sample),
    }
}

/// One benchmark's paired measurement failed on a side: recorded once, and not run again.
/// Its row exists even when this was its first round (a ⛔ row, not a missing one).
fn fail_bench(into: &mut Collected, side: Side, target: &str, id: &str, f: ProcessFailure) {
    into.failed_benches.push((side, id.to_string()));
    into.benches.entry(id.to_string()).or_default().target = target.to_string();
    into.failures.push(Failure {
        side,
        stage: Stage::Run,
        failure: ProcessFailure::new(format!("benchmark {id}: {}", f.message), f.log_tail),
    });
}

/// A side's target failed: recorded once, and not run again.
fn fail(into: &mut Collected, side: Side, target: &str, f: ProcessFailure) {
    into.failed_targets.push((side, target.to_string()));
    into.failures.push(Failure {
        side,
        stage: Stage::Run,
        failure: ProcessFailure::new(format!("bench target {target}: {}", f.message), f.log_tail),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripted timings: `ns(side, id, round)`; records the call order.
    struct Scripted {
        ids: Vec<&'static str>,
        calls: Vec<(Side, String, u32)>,
        fail: Option<(Side, u32)>,
        /// Whether `bench_ids` answers (criterion executables do; e2e cases do not).
        listable: bool,
        /// The filters `measure` was given, in order.
        filters: Vec<Option<String>>,
        /// Whether each side serves paired samples (`Err`: why not); None: no pairing at all.
        serve: Option<[Result<(), String>; 2]>,
        /// `measure_pair` calls: (id, order, round).
        pairs: Vec<(String, [Side; 2], u32)>,
    }

    fn scripted(ids: Vec<&'static str>, fail: Option<(Side, u32)>, listable: bool) -> Scripted {
        Scripted {
            ids,
            calls: Vec::new(),
            fail,
            listable,
            filters: Vec::new(),
            serve: None,
            pairs: Vec::new(),
        }
    }

    fn sample(id: &str, side: Side, round: u32, mode: &str) -> Measured {
        let ns = if side == Side::Head { 200.0 } else { 100.0 };
        Measured {
            id: id.to_string(),
            throughput: None,
            sample: RawSample {
                round,
                sampling_mode: mode.into(),
                iters: vec![1.0],
                times_ns: vec![ns],
                ..Default::default()
            },
        }
    }

    impl Scripted {
        fn matching(&self, filter: Option<&str>) -> Vec<&'static str> {
            let re = filter.map(|f| regex_lite::Regex::new(f).unwrap());
            let ok = |id: &&str| re.as_ref().is_none_or(|r| r.is_match(id));
            self.ids.iter().copied().filter(ok).collect()
        }
    }

    impl Measurer for Scripted {
        fn has_target(&self, _: Side, _: &str) -> bool {
            true
        }
        fn bench_ids(&self, _: Side, _: &str, filter: Option<&str>) -> Option<Vec<String>> {
            let ids = self.matching(filter).into_iter().map(String::from);
            self.listable.then(|| ids.collect())
        }
        fn measure(
            &mut self,
            side: Side,
            target: &str,
            filter: Option<&str>,
            round: u32,
        ) -> Result<BTreeMap<String, Measured>, ProcessFailure> {
            self.calls.push((side, target.to_string(), round));
            self.filters.push(filter.map(String::from));
            if filter.is_some_and(|f| f.contains("_t2")) {
                // Long enough for /proc/stat's ticks (10 ms per CPU) to move between readings.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if self.fail == Some((side, round)) {
                return Err(ProcessFailure {
                    message: "boom".into(),
                    log_tail: vec!["panicked".into()],
                });
            }
            Ok(self
                .matching(filter)
                .into_iter()
                .map(|id| (id.to_string(), sample(id, side, round, "flat")))
                .collect())
        }
        fn can_pair(&mut self, side: Side, _: &str) -> Result<(), String> {
            match &self.serve {
                None => Err("no pairing".into()),
                Some(s) => s[side as usize].clone(),
            }
        }
        fn measure_pair(
            &mut self,
            _: &str,
            id: &str,
            order: [Side; 2],
            round: u32,
        ) -> Result<Vec<(Side, Measured)>, (Side, ProcessFailure)> {
            self.pairs.push((id.to_string(), order, round));
            if id.contains("_t2") {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if self.fail == Some((Side::Head, round)) && id == self.ids[0] {
                return Err((
                    Side::Head,
                    ProcessFailure::new("timed out after 300 s", vec!["last words".into()]),
                ));
            }
            Ok(order
                .map(|side| (side, sample(id, side, round, "paired")))
                .to_vec())
        }
        fn multi_threaded(&self, _: &str, id: &str) -> bool {
            id.contains("_t2")
        }
    }

    #[test]
    fn multi_threaded_samples_carry_the_others_cores_and_single_threaded_ones_do_not() {
        for paired in [true, false] {
            let mut m = scripted(vec!["a/x_t1", "a/x_t2"], None, true);
            if paired {
                m.serve = Some([Ok(()), Ok(())]);
            }
            let plan = [TargetPlan {
                target: "a".into(),
                filter: None,
            }];
            let mut c = Collected::default();
            run_rounds(&mut m, &plan, 0, 2, false, &mut c, &mut |_, _, _| {});
            let all = |id: &str| {
                let b = &c.benches[id];
                b.base
                    .iter()
                    .chain(&b.head)
                    .map(|s| s.others_cores)
                    .collect::<Vec<_>>()
            };
            let t1 = all("a/x_t1");
            let t2 = all("a/x_t2");
            assert_eq!(t1.len(), 4);
            assert!(t1.iter().all(Option::is_none), "paired {paired}: {t1:?}");
            assert_eq!(t2.len(), 4);
            if host::cpu_reading().is_some() {
                assert!(
                    t2.iter().all(|o| o.is_some_and(f64::is_finite)),
                    "paired {paired}: {t2:?}"
                );
            }
        }
    }

    #[test]
    fn rounds_alternate_ab_and_ba_and_pair_samples() {
        let mut m = scripted(vec!["a/x"], None, true);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        run_rounds(&mut m, &plan, 0, 4, false, &mut c, &mut |_, _, _| {});
        let sides: Vec<Side> = m.calls.iter().map(|c| c.0).collect();
        use Side::*;
        assert_eq!(sides, [Base, Head, Head, Base, Base, Head, Head, Base]);
        assert_eq!(c.rounds.len(), 4);
        assert_eq!(c.rounds[1].order, "BA");
        assert_eq!(c.benches["a/x"].base.len(), 4);
        assert_eq!(c.benches["a/x"].head[3].times_ns, vec![200.0]);
        assert_eq!(c.benches["a/x"].head[3].round, 3);
    }

    #[test]
    fn a_failed_target_is_recorded_once_and_not_rerun() {
        let mut m = scripted(vec!["a/x", "a/y"], Some((Side::Head, 1)), true);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        run_rounds(&mut m, &plan, 0, 3, false, &mut c, &mut |_, _, _| {});
        assert_eq!(c.failures.len(), 1);
        assert_eq!(c.failures[0].side, Side::Head);
        assert!(c.failures[0].failure.message.contains("boom"));
        assert_eq!(c.failed_targets, vec![(Side::Head, "a".to_string())]);
        // Round 1 (BA): head failed on a/x, so base still measured a/x, and a/y ran on base
        // only; round 2 ran base only.
        let r1: Vec<Side> = m.calls.iter().filter(|c| c.2 == 1).map(|c| c.0).collect();
        assert_eq!(r1, vec![Side::Head, Side::Base, Side::Base]);
        let r2: Vec<Side> = m.calls.iter().filter(|c| c.2 == 2).map(|c| c.0).collect();
        assert_eq!(r2, vec![Side::Base, Side::Base]);
    }

    #[test]
    fn each_benchmark_is_measured_on_both_sides_before_the_next() {
        let mut m = scripted(vec!["a/x", "a/y(1)", "a/z"], None, true);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: Some("^a/(x|y)".into()),
        }];
        let mut c = Collected::default();
        let mut whats = Vec::new();
        run_rounds(&mut m, &plan, 0, 2, false, &mut c, &mut |_, _, w| {
            whats.push(w.to_string())
        });
        let filters: Vec<&str> = m.filters.iter().map(|f| f.as_deref().unwrap()).collect();
        let x = r"^(a/x)$";
        let y = r"^(a/y\(1\))$";
        assert_eq!(filters, [x, x, y, y, x, x, y, y]);
        use Side::*;
        let sides: Vec<Side> = m.calls.iter().map(|c| c.0).collect();
        assert_eq!(sides, [Base, Head, Base, Head, Head, Base, Head, Base]);
        assert_eq!(whats[2], "round 1 base a/y(1)");
        assert_eq!(c.benches.len(), 2, "a/z is outside the filter");
        assert_eq!(c.benches["a/y(1)"].head.len(), 2);
    }

    #[test]
    fn a_target_that_cannot_list_its_benchmarks_runs_whole() {
        let mut m = scripted(vec!["a/x", "a/y"], None, false);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        run_rounds(&mut m, &plan, 0, 2, false, &mut c, &mut |_, _, _| {});
        assert_eq!(m.filters, vec![None; 4]);
        assert_eq!(c.benches["a/y"].base.len(), 2);
    }

    #[test]
    fn each_benchmark_is_measured_paired_when_both_sides_serve() {
        let mut m = scripted(vec!["a/x", "a/y"], None, true);
        m.serve = Some([Ok(()), Ok(())]);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        let mut whats = Vec::new();
        run_rounds(&mut m, &plan, 0, 2, false, &mut c, &mut |_, _, w| {
            whats.push(w.to_string())
        });
        assert!(m.calls.is_empty(), "no criterion run: {:?}", m.calls);
        use Side::*;
        let pairs: Vec<(&str, [Side; 2], u32)> = m
            .pairs
            .iter()
            .map(|(i, o, r)| (i.as_str(), *o, *r))
            .collect();
        assert_eq!(
            pairs,
            [
                ("a/x", [Base, Head], 0),
                ("a/y", [Base, Head], 0),
                ("a/x", [Head, Base], 1),
                ("a/y", [Head, Base], 1)
            ]
        );
        assert_eq!(whats[1], "round 1 paired a/y");
        assert_eq!(c.benches["a/y"].head.len(), 2);
        assert_eq!(c.benches["a/y"].head[1].times_ns, vec![200.0]);
        assert_eq!(c.benches["a/y"].base[1].sampling_mode, "paired");
        assert!(c.unpaired.is_empty());
    }

    #[test]
    fn a_failed_paired_benchmark_stops_alone_and_its_target_goes_on() {
        // Head's first benchmark fails (hangs and is killed) in round 1.
        let mut m = scripted(vec!["a/x", "a/y"], Some((Side::Head, 1)), true);
        m.serve = Some([Ok(()), Ok(())]);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        run_rounds(&mut m, &plan, 0, 4, false, &mut c, &mut |_, _, _| {});
        assert_eq!(c.failures.len(), 1, "recorded once: {:?}", c.failures);
        assert!(
            c.failures[0]
                .failure
                .message
                .starts_with("benchmark a/x: timed out")
        );
        assert_eq!(c.failures[0].failure.log_tail, ["last words"]);
        assert_eq!(c.failed_benches, vec![(Side::Head, "a/x".to_string())]);
        assert!(c.failed_targets.is_empty());
        let ran = |id: &str| m.pairs.iter().filter(|p| p.0 == id).count();
        assert_eq!(
            (ran("a/x"), ran("a/y")),
            (2, 4),
            "a/x not again; a/y every round"
        );
        assert_eq!(c.benches["a/y"].head.len(), 4);
    }

    #[test]
    fn a_side_that_cannot_serve_gets_criterion_runs_on_both_sides_and_the_reason_is_kept() {
        let mut m = scripted(vec!["a/x"], None, true);
        m.serve = Some([Ok(()), Err("the head predates it".into())]);
        let plan = [TargetPlan {
            target: "a".into(),
            filter: None,
        }];
        let mut c = Collected::default();
        run_rounds(&mut m, &plan, 0, 2, false, &mut c, &mut |_, _, _| {});
        assert!(m.pairs.is_empty());
        assert_eq!(m.calls.len(), 4);
        assert_eq!(c.unpaired["a"], "the head predates it");
        assert_eq!(c.benches["a/x"].base[0].sampling_mode, "flat");
    }
}
