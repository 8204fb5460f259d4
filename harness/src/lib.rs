//! `harness`: the regression gate. Its modules form one chain of stages, each depending only on
//! those before it (`tests/module_graph.rs` fails on an import cycle):
//!
//! [`vocab`] (sides, devices, failures) → [`stats`] (pure decision functions) →
//! [`config`] (`harness.yaml`) → [`results`] (the saved-run data model) → [`process`] (children
//! under deadlines), [`host`], [`git`] (revisions, slots), [`placement`] (the linker wrapper and
//! relinks in another function order), [`progress`] → [`build`] (cargo in each slot), [`cache`]
//! (the cache layout) → [`measure`] (interleaved rounds of criterion executables, paired
//! serving) → [`gate`] (measurements → decisions, replays) → [`e2e`] (end-to-end correctness and
//! decode speed through each revision's binaries) → [`report`] (terminal, markdown, JSON) →
//! [`actions`], [`post`] (GitHub) and [`hook`] (the pre-push hook) → [`history`] (the benchmark
//! history on main) → [`alert`] (an issue per change point) → [`commands`] (one file per
//! subcommand). The same order as ARCHITECTURE.md's harness section.

pub mod actions;
pub mod alert;
pub mod build;
pub mod cache;
pub mod commands;
pub mod config;
pub mod e2e;
pub mod gate;
pub mod git;
pub mod history;
pub mod hook;
pub mod host;
pub mod measure;
pub mod placement;
pub mod post;
pub mod process;
pub mod progress;
pub mod report;
pub mod results;
pub mod stats;
pub mod vocab;
