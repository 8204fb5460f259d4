//! `harness`: the regression gate. Pipeline (each stage testable alone):
//! [`git`] (revisions, merge-base, worktrees) → [`build`] (cargo in each worktree: bench
//! executables, `engine`/`oracle` binaries) → [`run`] (interleaved ABBA rounds of criterion
//! executables) and [`e2e`] (end-to-end correctness and decode speed through the binaries' JSON
//! contracts) → [`stats`] (pure decision functions) → [`report`] (terminal, markdown, JSON) →
//! [`post`] (the sticky PR comment) and [`actions`] (step summary, annotations). [`results`] is
//! the saved-run data model every stage after `run` reads; [`config`] is `harness.yaml`.

pub mod actions;
pub mod build;
pub mod compare;
pub mod config;
pub mod criterion;
pub mod e2e;
pub mod git;
pub mod hook;
pub mod host;
pub mod post;
pub mod report;
pub mod results;
pub mod run;
pub mod serve;
pub mod stats;
pub mod vocab;
