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
//! Each run of a criterion executable gets its own `CRITERION_HOME`, so nothing carries over
//! between runs.
//! The measuring itself is behind [`Measurer`], so the stats and report path is tested with
//! scripted timings.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::build::{BenchExes, LOG_TAIL_LINES, tail};
use crate::criterion::{Measured, read_run};
use crate::host;
use crate::results::{Failure, RawSample, RoundInfo, Throughput};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Base,
    Head,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Head => "head",
        }
    }
}

/// The order of the two sides in round `r`: AB, BA, AB, BA …
pub fn round_order(r: u32) -> [Side; 2] {
    if r.is_multiple_of(2) {
        [Side::Base, Side::Head]
    } else {
        [Side::Head, Side::Base]
    }
}

/// A run of one side's bench target that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFailure {
    pub message: String,
    pub log_tail: Vec<String>,
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
    ) -> Result<BTreeMap<String, Measured>, RunFailure>;
    /// The benchmark ids this side's target runs under `filter`, in its own order; `None` when
    /// the measurer cannot list them (the target is then measured in one run per side).
    fn bench_ids(&self, _side: Side, _target: &str, _filter: Option<&str>) -> Option<Vec<String>> {
        None
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
}

impl CriterionMeasurer {
    fn exes(&self, side: Side) -> &BenchExes {
        match side {
            Side::Base => &self.base,
            Side::Head => &self.head,
        }
    }
}

impl Measurer for CriterionMeasurer {
    fn has_target(&self, side: Side, target: &str) -> bool {
        self.exes(side).by_target.contains_key(target)
    }

    fn bench_ids(&self, side: Side, target: &str, filter: Option<&str>) -> Option<Vec<String>> {
        let exe = self.exes(side).by_target.get(target)?;
        let ids = crate::compare::list_ids(exe, filter);
        // An executable that lists nothing may be broken: run it whole, so that its failure is
        // reported, rather than skip it.
        (!ids.is_empty()).then_some(ids)
    }

    fn measure(
        &mut self,
        side: Side,
        target: &str,
        filter: Option<&str>,
        round: u32,
    ) -> Result<BTreeMap<String, Measured>, RunFailure> {
        let exe = self
            .exes(side)
            .by_target
            .get(target)
            .ok_or_else(|| RunFailure {
                message: format!("{} has no bench target {target:?}", side.name()),
                log_tail: Vec::new(),
            })?;
        let home = self
            .work_dir
            .join(format!("r{round:03}-{}-{target}", side.name()));
        let _ = std::fs::remove_dir_all(&home);
        run_criterion(exe, &self.args, filter, &home, &*self.on_line)?;
        read_run(&home, round).map_err(|e| RunFailure {
            message: e.to_string(),
            log_tail: Vec::new(),
        })
    }
}

/// Runs one criterion executable into `home`.
pub fn run_criterion(
    exe: &Path,
    args: &[String],
    filter: Option<&str>,
    home: &Path,
    on_line: &dyn Fn(&str),
) -> Result<(), RunFailure> {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    // Criterion resolves relative paths against the executable's cwd: run it in its home.
    std::fs::create_dir_all(home).map_err(|e| RunFailure {
        message: format!("cannot create {}: {e}", home.display()),
        log_tail: Vec::new(),
    })?;
    cmd.env("CRITERION_HOME", home)
        .current_dir(exe.parent().unwrap_or(Path::new(".")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| RunFailure {
        message: format!("cannot run {}: {e}", exe.display()),
        log_tail: Vec::new(),
    })?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let lines = std::thread::scope(|s| {
        let err = s.spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            on_line(&line);
            lines.push(line);
        }
        let mut err = err.join().unwrap_or_default();
        lines.append(&mut err);
        lines
    });
    let status = child.wait().map_err(|e| RunFailure {
        message: format!("{}: {e}", exe.display()),
        log_tail: Vec::new(),
    })?;
    if !status.success() {
        return Err(RunFailure {
            message: format!("{} exited with {status}", exe.display()),
            log_tail: tail(&lines, LOG_TAIL_LINES),
        });
    }
    Ok(())
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

/// The runs of one round, in order: each plan entry split into one exact filter per benchmark
/// (the union of both sides' ids, base's order first, so a benchmark only one side has is still
/// measured there), or the entry whole when a side cannot list its benchmarks. Each unit comes
/// with its label for progress lines: the benchmark id, or the target when run whole.
pub fn interleave_units(m: &dyn Measurer, plan: &[TargetPlan]) -> Vec<(TargetPlan, String)> {
    let mut units = Vec::new();
    for tp in plan {
        let mut ids: Vec<String> = Vec::new();
        let mut listed = true;
        for side in [Side::Base, Side::Head] {
            if !m.has_target(side, &tp.target) {
                continue;
            }
            match m.bench_ids(side, &tp.target, tp.filter.as_deref()) {
                Some(l) => {
                    for id in l {
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                None => listed = false,
            }
        }
        if listed && !ids.is_empty() {
            units.extend(ids.into_iter().map(|id| {
                let unit = TargetPlan {
                    target: tp.target.clone(),
                    filter: Some(crate::criterion::exact_filter(&[id.as_str()])),
                };
                (unit, id)
            }));
        } else {
            units.push((tp.clone(), tp.target.clone()));
        }
    }
    units
}

/// Runs rounds `first..first + count` of `plan`, adding to `into`, one benchmark at a time
/// ([`interleave_units`]). `progress(done, total, what)` is called before each executable runs.
pub fn run_rounds(
    m: &mut dyn Measurer,
    plan: &[TargetPlan],
    first: u32,
    count: u32,
    confirmation: bool,
    into: &mut Collected,
    progress: &mut dyn FnMut(u64, u64, &str),
) {
    let plan = interleave_units(m, plan);
    let total = count as u64 * plan.len() as u64 * 2;
    let mut done = 0u64;
    for r in first..first + count {
        let started = Instant::now();
        let started_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let load_avg = host::load_avg();
        let order = round_order(r);
        for (tp, what) in &plan {
            for side in order {
                progress(
                    done,
                    total,
                    &format!("round {} {} {what}", r + 1, side.name()),
                );
                done += 1;
                let failed = into
                    .failed_targets
                    .iter()
                    .any(|(s, t)| *s == side && *t == tp.target);
                if failed || !m.has_target(side, &tp.target) {
                    continue;
                }
                match m.measure(side, &tp.target, tp.filter.as_deref(), r) {
                    Ok(measured) => {
                        for (id, ms) in measured {
                            let e = into.benches.entry(id).or_default();
                            e.target = tp.target.clone();
                            e.throughput = e.throughput.or(ms.throughput);
                            match side {
                                Side::Base => e.base.push(ms.sample),
                                Side::Head => e.head.push(ms.sample),
                            }
                        }
                    }
                    Err(f) => {
                        into.failed_targets.push((side, tp.target.clone()));
                        into.failures.push(Failure {
                            side: side.name().into(),
                            stage: "run".into(),
                            message: format!("bench target {}: {}", tp.target, f.message),
                            log_tail: f.log_tail,
                        });
                    }
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
    }

    fn scripted(ids: Vec<&'static str>, fail: Option<(Side, u32)>, listable: bool) -> Scripted {
        Scripted {
            ids,
            calls: Vec::new(),
            fail,
            listable,
            filters: Vec::new(),
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
        ) -> Result<BTreeMap<String, Measured>, RunFailure> {
            self.calls.push((side, target.to_string(), round));
            self.filters.push(filter.map(String::from));
            if self.fail == Some((side, round)) {
                return Err(RunFailure {
                    message: "boom".into(),
                    log_tail: vec!["panicked".into()],
                });
            }
            Ok(self
                .matching(filter)
                .into_iter()
                .map(|id| {
                    let ns = if side == Side::Head { 200.0 } else { 100.0 };
                    (
                        id.to_string(),
                        Measured {
                            id: id.to_string(),
                            throughput: None,
                            sample: RawSample {
                                round,
                                sampling_mode: "flat".into(),
                                iters: vec![1.0],
                                times_ns: vec![ns],
                            },
                        },
                    )
                })
                .collect())
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
        assert_eq!(c.failures[0].side, "head");
        assert!(c.failures[0].message.contains("boom"));
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
}
