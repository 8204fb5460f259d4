//! `harness merge`: one report from the results of several shards of the same comparison.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use super::{Output, read_results_limited};
use crate::report::format::short_sha as short;
use crate::results::Results;

/// Join the results.json of several shards into one report.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A shard's results.json (repeat for each shard).
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    #[command(flatten)]
    output: Output,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let parts = args
        .input
        .iter()
        .map(|p| {
            read_results_limited(p, crate::post::MAX_INPUT_BYTES * 4).and_then(|r| {
                // Shards come from runs that executed PR code: their commit ids checked and
                // their "Reproduce" commands rebuilt, as `harness post` does, before the merged
                // report reaches the step summary.
                crate::post::vetted(r)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("{} cannot be merged", p.display()))
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let merged = merge(parts)?;
    args.output.emit(&merged)
}

/// `harness merge`: one report from the results of several shards of the same comparison.
/// Base, head and suite must agree; benchmarks and failures are joined (an id measured by two
/// shards is an error: the shards overlapped), rounds concatenated, the outcome re-decided.
/// Statuses stay as each shard decided them (Holm ran within each shard).
pub fn merge(parts: Vec<Results>) -> anyhow::Result<Results> {
    let mut it = parts.into_iter();
    let Some(mut out) = it.next() else {
        bail!("nothing to merge: give at least one --input");
    };
    let mut seen: std::collections::BTreeSet<String> =
        out.benches.iter().map(|b| b.id.clone()).collect();
    let mut shards: Vec<(u32, u32)> = out.shard.into_iter().collect();
    for r in it {
        if r.base.sha != out.base.sha || r.head.sha != out.head.sha || r.suite != out.suite {
            bail!(
                "cannot merge results of different comparisons: {}..{} ({}) vs {}..{} ({})",
                short(&out.base.sha),
                short(&out.head.sha),
                out.suite,
                short(&r.base.sha),
                short(&r.head.sha),
                r.suite
            );
        }
        if r.host.fingerprint != out.host.fingerprint {
            out.host.cpu = format!(
                "{} (and others: shards ran on different hosts)",
                out.host.cpu
            );
        }
        for b in r.benches {
            if !seen.insert(b.id.clone()) {
                bail!(
                    "benchmark {} appears in two shards: the shards overlap",
                    b.id
                );
            }
            out.benches.push(b);
        }
        out.failures.extend(r.failures);
        out.rounds.extend(r.rounds);
        out.wall_s = out.wall_s.max(r.wall_s);
        shards.extend(r.shard);
        out.reproduce.extend(r.reproduce);
        out.gate_changes.extend(r.gate_changes);
        out.e2e = match (out.e2e.take(), r.e2e) {
            (Some(mut a), Some(b)) => {
                a.correctness.extend(b.correctness);
                a.speed.extend(b.speed);
                a.failures.extend(b.failures);
                a.require_cuda |= b.require_cuda;
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
    out.reproduce.dedup();
    out.gate_changes.sort();
    out.gate_changes.dedup();
    shards.sort();
    shards.dedup();
    if let Some(&(_, n)) = shards.first()
        && (shards.len() as u32 != n || shards.iter().any(|&(_, m)| m != n))
    {
        let have: Vec<String> = shards.iter().map(|(i, n)| format!("{i}/{n}")).collect();
        bail!(
            "incomplete or mixed shards: got {}, expected 1..{n} of {n}",
            have.join(", ")
        );
    }
    out.shard = None;
    out.outcome = Results::decide_all(&out.benches, &out.failures, out.e2e.as_ref());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CriterionSettings;
    use crate::gate::method;
    use crate::results::*;
    use crate::stats::Policy;
    use crate::vocab::{ProcessFailure, Side, Stage};

    fn part(shard: (u32, u32), ids: &[&str], status: Status) -> Results {
        Results {
            schema: SCHEMA.into(),
            tool_version: "0".into(),
            created_unix_s: 0.0,
            suite: "full".into(),
            shard: Some(shard),
            base: Revision {
                spec: "main".into(),
                sha: "a".repeat(40),
                subject: "base".into(),
                dirty: false,
            },
            head: Revision {
                spec: "pr".into(),
                sha: "b".repeat(40),
                subject: "head".into(),
                dirty: false,
            },
            host: HostInfo::default(),
            method: method(&Policy::default(), 6, &CriterionSettings::default(), None),
            rounds: Vec::new(),
            benches: ids
                .iter()
                .map(|id| BenchResult {
                    id: id.to_string(),
                    status,
                    base: None,
                    head: None,
                    change: None,
                    threshold: 0.03,
                    threshold_source: ThresholdSource::Floor,
                    throughput: None,
                    rounds: 6,
                    confirmed: false,
                    note: None,
                    instructions: None,
                })
                .collect(),
            failures: Vec::new(),
            outcome: Outcome::Pass,
            wall_s: shard.0 as f64,
            reproduce: vec![format!("harness compare --shard {}/{}", shard.0, shard.1)],
            e2e: None,
            gate_changes: vec![],
            lost_time: vec![],
        }
    }

    #[test]
    fn merge_joins_shards_and_redecides() {
        let a = part((1, 2), &["x/1", "x/2"], Status::NoChange);
        let mut b = part((2, 2), &["y/1"], Status::Regression);
        b.outcome = Outcome::Fail;
        let m = merge(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(m.benches.len(), 3);
        assert_eq!(m.outcome, Outcome::Fail);
        assert_eq!(m.shard, None);
        assert_eq!(m.wall_s, 2.0);
        assert_eq!(m.reproduce.len(), 2);

        let e = merge(vec![a.clone()]).unwrap_err().to_string();
        assert!(e.contains("incomplete"), "{e}");
        let e = merge(vec![a.clone(), a.clone()]).unwrap_err().to_string();
        assert!(e.contains("appears in two shards"), "{e}");
        let mut other = b.clone();
        other.head.sha = "c".repeat(40);
        let e = merge(vec![a.clone(), other]).unwrap_err().to_string();
        assert!(e.contains("different comparisons"), "{e}");
        let mut failing = b;
        failing.benches.clear();
        failing.failures.push(Failure {
            side: Side::Head,
            stage: Stage::Build,
            failure: ProcessFailure::new("boom", Vec::new()),
        });
        assert_eq!(merge(vec![a, failing]).unwrap().outcome, Outcome::Fail);
    }
}
