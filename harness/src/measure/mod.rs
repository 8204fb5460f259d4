//! The measure stage: how both sides' benchmarks are timed. [`rounds`] runs the interleaved
//! rounds (ABBA, one benchmark at a time) behind the [`Measurer`] trait, so the decision path is
//! tested with scripted timings; [`criterion`] runs a criterion executable once (its own
//! `CRITERION_HOME`), lists its benchmark ids and reads its sample files; [`serve`] measures a
//! benchmark paired, both sides' executables serving samples in turn; [`plan`] says what a
//! suite measures and which part a shard takes; [`affinity`] which CPU a measured process may run
//! on and whether it may be timed in CPU time; [`clock`] which clock a paired round keeps;
//! [`placement`] which executable a round runs (a relink in the round's own function order);
//! [`instructions`] the instruction counts of single-threaded rows (callgrind, under its own
//! deadline).

pub mod affinity;
pub mod clock;
pub mod criterion;
pub mod instructions;
pub mod placement;
pub mod plan;
pub mod rounds;
pub mod serve;

pub use affinity::Affinity;
pub use criterion::{Measured, exact_filter, list_ids, read_run};
pub use placement::Placement;
pub use plan::{parse_shard, plan_for, shard_plan};
pub use rounds::{
    Collect, Collected, CriterionMeasurer, Measurer, TargetPlan, interleave_units, round_order,
    run_rounds,
};
