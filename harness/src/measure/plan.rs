//! What a run measures: the bench plan of a suite (one [`TargetPlan`] per bench target, its
//! filters joined into one regex) and, for matrix jobs, the part of it one shard measures.

use crate::config::Config;

use super::criterion::exact_filter;
use super::rounds::TargetPlan;

/// The bench plan of a suite: one entry per bench target, its filters joined into one regex.
pub fn plan_for(config: &Config, suite: &str) -> anyhow::Result<Vec<TargetPlan>> {
    let s = config.suite(suite).map_err(anyhow::Error::msg)?;
    Ok(s.benches
        .iter()
        .map(|(target, filters)| TargetPlan {
            target: target.clone(),
            filter: match filters.len() {
                0 => None,
                1 => Some(filters[0].clone()),
                _ => Some(
                    filters
                        .iter()
                        .map(|f| format!("(?:{f})"))
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
            },
        })
        .collect())
}

/// Parses `i/n` (1 ≤ i ≤ n).
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--shard {s:?}: expected i/n with 1 <= i <= n, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if i == 0 || n == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Restricts `plan` to shard `(i, n)`: the suite's benchmark ids (listed from both sides'
/// executables, sorted) are dealt round-robin, so shards are disjoint, cover the suite, and
/// differ in size by at most one benchmark. Targets with no id in this shard are dropped.
pub fn shard_plan(
    plan: &[TargetPlan],
    ids_of: &dyn Fn(&TargetPlan) -> Vec<String>,
    (i, n): (u32, u32),
) -> Vec<TargetPlan> {
    let mut all: Vec<(String, String)> = plan
        .iter()
        .flat_map(|tp| {
            ids_of(tp)
                .into_iter()
                .map(|id| (id, tp.target.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all.dedup();
    let mine: Vec<&(String, String)> = all
        .iter()
        .enumerate()
        .filter(|(k, _)| *k as u32 % n == i - 1)
        .map(|(_, x)| x)
        .collect();
    plan.iter()
        .filter_map(|tp| {
            let ids: Vec<&str> = mine
                .iter()
                .filter(|(_, t)| *t == tp.target)
                .map(|(id, _)| id.as_str())
                .collect();
            (!ids.is_empty()).then(|| TargetPlan {
                target: tp.target.clone(),
                filter: Some(exact_filter(&ids)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_parse_or_name_the_flag() {
        assert_eq!(parse_shard("2/4"), Ok((2, 4)));
        for bad in ["0/4", "5/4", "1/0", "x/2", "3", ""] {
            let e = parse_shard(bad).unwrap_err();
            assert!(e.starts_with("--shard"), "{e}");
        }
    }

    #[test]
    fn shards_are_disjoint_cover_the_suite_and_balance() {
        let plan = vec![
            TargetPlan {
                target: "kernels".into(),
                filter: None,
            },
            TargetPlan {
                target: "decode".into(),
                filter: Some("^decode/".into()),
            },
        ];
        let ids_of = |tp: &TargetPlan| -> Vec<String> {
            match tp.target.as_str() {
                "kernels" => (0..7).map(|i| format!("add/f32/{i}")).collect(),
                _ => vec!["decode/tiny/32".into()],
            }
        };
        let n = 3;
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        for i in 1..=n {
            let p = shard_plan(&plan, &ids_of, (i, n));
            let mut count = 0;
            for tp in &p {
                let re = regex_lite::Regex::new(tp.filter.as_ref().unwrap()).unwrap();
                for id in ids_of(tp) {
                    if re.is_match(&id) {
                        seen.push(id);
                        count += 1;
                    }
                }
            }
            sizes.push(count);
        }
        seen.sort();
        let mut all: Vec<String> = plan.iter().flat_map(ids_of).collect();
        all.sort();
        assert_eq!(seen, all, "every id exactly once over the shards");
        assert!(
            sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
            "{sizes:?}"
        );
    }
}
