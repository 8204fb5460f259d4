//! Benchmark history on main (`harness history`, `harness trend`): one file per measured commit,
//! `DIR/<host fingerprint>/<commit sha>.json` (schema `harness-history/1`), holding the absolute
//! per-round ns/iteration of every benchmark of that commit's run, so a series can be read back
//! per benchmark and per host. Rows of different hosts are never in one series: each host is its
//! own directory. A record is written whole or not at all (temporary file, then rename), and
//! adding the same commit again replaces its record.
//!
//! A results file is checked before anything is written (its commit ids, as `harness post` does;
//! the host fingerprint must be a plain token, since it names a directory), and every file read
//! back is size-capped and parsed strictly: an error names the file.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::results::{HostInfo, Results};
use crate::stats::{ChangePoint, ChangePointConfig, e_divisive};
use crate::vocab::Side;

pub const SCHEMA: &str = "harness-history/1";
/// A history record is a few hundred bytes per benchmark; anything past this is not one.
const MAX_RECORD_BYTES: u64 = 4 << 20;

/// One commit's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub schema: String,
    pub sha: String,
    pub subject: String,
    /// When the run that measured it was made (orders the series).
    pub created_unix_s: f64,
    pub suite: String,
    pub host: HostInfo,
    pub benches: Vec<Point>,
}

/// One benchmark of one commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub id: String,
    /// ns per iteration, one per round, in round order.
    pub per_round_ns: Vec<f64>,
    pub median_ns: f64,
}

/// The record of `side` of a saved run: every benchmark, and every end-to-end speed row as
/// `e2e/<row id>` (its per-round ms as ns). Rows without a measurement on that side are left out.
pub fn record_of(results: &Results, side: Side) -> anyhow::Result<Record> {
    let rev = match side {
        Side::Base => &results.base,
        Side::Head => &results.head,
    };
    let benches = results
        .benches
        .iter()
        .filter_map(|b| {
            let s = match side {
                Side::Base => b.base.as_ref(),
                Side::Head => b.head.as_ref(),
            }?;
            let ok = !s.per_round_ns.is_empty()
                && s.per_round_ns.iter().all(|v| v.is_finite() && *v > 0.0)
                && s.median_ns.is_finite()
                && s.median_ns > 0.0;
            ok.then(|| Point {
                id: b.id.clone(),
                per_round_ns: s.per_round_ns.clone(),
                median_ns: s.median_ns,
            })
        })
        .collect::<Vec<_>>();
    let mut benches = benches;
    // End-to-end speed rows (decode step and prefill, CPU and CUDA: the nightly GPU A/B's
    // rows) as series of their own, `e2e/<row id>`, in ns like the benchmarks.
    for r in results.e2e.iter().flat_map(|e| &e.speed) {
        let Some(s) = (match side {
            Side::Base => r.base.as_ref(),
            Side::Head => r.head.as_ref(),
        }) else {
            continue;
        };
        let ns: Vec<f64> = s.per_round_ms.iter().map(|v| v * 1e6).collect();
        let median = s.median_ms_per_step * 1e6;
        if !ns.is_empty()
            && ns.iter().all(|v| v.is_finite() && *v > 0.0)
            && median.is_finite()
            && median > 0.0
        {
            benches.push(Point {
                id: format!("e2e/{}", r.id),
                per_round_ns: ns,
                median_ns: median,
            });
        }
    }
    if benches.is_empty() {
        bail!(
            "the results have no measured benchmark on the {} side",
            side.name()
        );
    }
    Ok(Record {
        schema: SCHEMA.to_string(),
        sha: rev.sha.clone(),
        subject: rev.subject.clone(),
        created_unix_s: results.created_unix_s,
        suite: results.suite.clone(),
        host: results.host.clone(),
        benches,
    })
}

fn md_cap(s: &str) -> String {
    crate::report::md::cap(s, 80)
}

/// A host fingerprint as a directory name: ASCII letters, digits, `-` and `_` only.
fn host_dir(fingerprint: &str) -> anyhow::Result<&str> {
    let plain = !fingerprint.is_empty()
        && fingerprint.len() <= 64
        && fingerprint
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain {
        bail!(
            "host fingerprint {:?} is not a plain token (letters, digits, - and _, at most 64): \
             it names a directory of the history",
            md_cap(fingerprint)
        );
    }
    Ok(fingerprint)
}

/// Writes `record` under `dir` and returns its path.
pub fn add(dir: &Path, record: &Record) -> anyhow::Result<PathBuf> {
    if !crate::post::is_commit_id(&record.sha) {
        bail!("{:?} is not a commit id", md_cap(&record.sha));
    }
    let host = dir.join(host_dir(&record.host.fingerprint)?);
    std::fs::create_dir_all(&host).with_context(|| format!("cannot create {}", host.display()))?;
    let path = host.join(format!("{}.json", record.sha));
    let mut tmp = tempfile::NamedTempFile::new_in(&host)
        .with_context(|| format!("cannot write in {}", host.display()))?;
    serde_json::to_writer_pretty(&mut tmp, record)?;
    tmp.persist(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Every record under `dir`, oldest first (by the time of its run, then sha).
pub fn load(dir: &Path) -> anyhow::Result<Vec<Record>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    let hosts = std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for host in hosts {
        let host = host
            .with_context(|| format!("cannot read {}", dir.display()))?
            .path();
        if !host.is_dir() {
            continue;
        }
        let files =
            std::fs::read_dir(&host).with_context(|| format!("cannot read {}", host.display()))?;
        for f in files {
            let path = f
                .with_context(|| format!("cannot read {}", host.display()))?
                .path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let mut text = String::new();
            std::fs::File::open(&path)
                .and_then(|f| f.take(MAX_RECORD_BYTES + 1).read_to_string(&mut text))
                .with_context(|| format!("cannot read {}", path.display()))?;
            if text.len() as u64 > MAX_RECORD_BYTES {
                bail!(
                    "{} is over {MAX_RECORD_BYTES} bytes: not a history record",
                    path.display()
                );
            }
            let r: Record = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a history record", path.display()))?;
            if r.schema != SCHEMA {
                bail!(
                    "{}: schema {:?}, expected {SCHEMA}",
                    path.display(),
                    r.schema
                );
            }
            // The commit ids and the host go into reports unescaped (short shas, a directory
            // name): held to what `add` writes.
            if !crate::post::is_commit_id(&r.sha) {
                bail!(
                    "{}: {:?} is not a commit id",
                    path.display(),
                    md_cap(&r.sha)
                );
            }
            host_dir(&r.host.fingerprint).with_context(|| path.display().to_string())?;
            out.push(r);
        }
    }
    out.sort_by(|a, b| {
        a.created_unix_s
            .total_cmp(&b.created_unix_s)
            .then_with(|| a.sha.cmp(&b.sha))
    });
    Ok(out)
}

/// One benchmark's series on one host, and its change points.
#[derive(Clone, Debug, Serialize)]
pub struct Trend {
    pub host: String,
    pub id: String,
    /// Commits in order, and the benchmark's median ns/iteration at each.
    pub shas: Vec<String>,
    pub median_ns: Vec<f64>,
    pub change_points: Vec<TrendPoint>,
}

/// A change point with the commits around it: the level changed between `before_sha` (the last
/// commit at the old level) and `sha` (the first at the new one).
#[derive(Clone, Debug, Serialize)]
pub struct TrendPoint {
    pub sha: String,
    pub before_sha: String,
    #[serde(flatten)]
    pub point: ChangePoint,
}

/// The series of every benchmark on every host in `records` (ordered as [`load`] returns them)
/// and their change points.
pub fn trends(records: &[Record], cfg: &ChangePointConfig) -> Vec<Trend> {
    let mut series: std::collections::BTreeMap<(String, String), (Vec<String>, Vec<f64>)> =
        Default::default();
    for r in records {
        for p in &r.benches {
            let e = series
                .entry((r.host.fingerprint.clone(), p.id.clone()))
                .or_default();
            e.0.push(r.sha.clone());
            e.1.push(p.median_ns);
        }
    }
    series
        .into_iter()
        .map(|((host, id), (shas, median_ns))| {
            let change_points = e_divisive(&median_ns, cfg)
                .into_iter()
                .map(|c| TrendPoint {
                    sha: shas[c.index].clone(),
                    before_sha: shas[c.index - 1].clone(),
                    point: c,
                })
                .collect();
            Trend {
                host,
                id,
                shas,
                median_ns,
                change_points,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(fp: &str) -> HostInfo {
        HostInfo {
            cpu: "test cpu".into(),
            cores: 2,
            os: "linux".into(),
            kernel: "6".into(),
            rustc: "1.95".into(),
            mem_gib: 24.0,
            fingerprint: fp.into(),
        }
    }

    fn record(i: usize, fp: &str, ns: f64) -> Record {
        Record {
            schema: SCHEMA.into(),
            sha: format!("{:040x}", 0xabc0_0000 + i),
            subject: format!("commit {i}"),
            created_unix_s: 1_700_000_000.0 + i as f64 * 3600.0,
            suite: "full".into(),
            host: host(fp),
            benches: vec![Point {
                id: "add/f32/large".into(),
                per_round_ns: vec![ns; 8],
                median_ns: ns,
            }],
        }
    }

    /// 30 commits, a 2 % step at the 18th, plus a second host whose series is flat: the
    /// change is found between commits 17 and 18, and only on the host that has it.
    #[test]
    fn a_step_in_a_written_history_is_found_between_its_commits_and_hosts_stay_apart() {
        let dir = tempfile::tempdir().unwrap();
        let wiggle = [0.0, 0.004, -0.003, 0.002, -0.004, 0.001, 0.003, -0.002];
        for i in 0..30 {
            let level = if i >= 18 { 1.02 } else { 1.0 };
            let ns = 1000.0 * level * (1.0 + wiggle[i % 8]);
            add(dir.path(), &record(i, "hostA", ns)).unwrap();
            add(
                dir.path(),
                &record(i, "hostB", 2000.0 * (1.0 + wiggle[(i + 3) % 8])),
            )
            .unwrap();
        }
        let records = load(dir.path()).unwrap();
        assert_eq!(records.len(), 60);
        let t = trends(&records, &ChangePointConfig::default());
        assert_eq!(t.len(), 2);
        let a = t.iter().find(|t| t.host == "hostA").unwrap();
        assert_eq!(a.median_ns.len(), 30);
        assert_eq!(a.change_points.len(), 1, "{:?}", a.change_points);
        assert_eq!(a.change_points[0].sha, record(18, "hostA", 1.0).sha);
        assert_eq!(a.change_points[0].before_sha, record(17, "hostA", 1.0).sha);
        let b = t.iter().find(|t| t.host == "hostB").unwrap();
        assert!(b.change_points.is_empty(), "{:?}", b.change_points);
    }

    #[test]
    fn end_to_end_speed_rows_become_series_of_their_own() {
        let r = crate::report::fixtures::with_e2e();
        let rows: Vec<_> = r
            .e2e
            .as_ref()
            .unwrap()
            .speed
            .iter()
            .filter(|s| s.head.as_ref().is_some_and(|h| !h.per_round_ms.is_empty()))
            .collect();
        assert!(!rows.is_empty());
        let rec = record_of(&r, Side::Head).unwrap();
        for row in rows {
            let p = rec
                .benches
                .iter()
                .find(|p| p.id == format!("e2e/{}", row.id))
                .unwrap_or_else(|| panic!("no series for {}", row.id));
            let h = row.head.as_ref().unwrap();
            assert_eq!(p.median_ns, h.median_ms_per_step * 1e6);
            assert_eq!(p.per_round_ns.len(), h.per_round_ms.len());
        }
    }

    #[test]
    fn adding_a_commit_again_replaces_its_record() {
        let dir = tempfile::tempdir().unwrap();
        add(dir.path(), &record(1, "h", 10.0)).unwrap();
        add(dir.path(), &record(1, "h", 11.0)).unwrap();
        let r = load(dir.path()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].benches[0].median_ns, 11.0);
    }

    #[test]
    fn hostile_names_and_files_are_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = add(dir.path(), &record(1, "../../etc", 1.0)).unwrap_err();
        assert!(err.to_string().contains("not a plain token"), "{err}");
        let mut r = record(1, "h", 1.0);
        r.sha = "../x".into();
        assert!(
            add(dir.path(), &r)
                .unwrap_err()
                .to_string()
                .contains("not a commit id")
        );
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "nothing written"
        );
        std::fs::create_dir(dir.path().join("h")).unwrap();
        std::fs::write(dir.path().join("h/bad.json"), "{\"schema\": 1}").unwrap();
        let err = format!("{:#}", load(dir.path()).unwrap_err());
        assert!(
            err.contains("bad.json") && err.contains("not a history record"),
            "{err}"
        );
        let mut r = record(2, "h", 1.0);
        r.sha = "[x](https://e.vil)".into();
        std::fs::write(
            dir.path().join("h/bad.json"),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        let err = format!("{:#}", load(dir.path()).unwrap_err());
        assert!(
            err.contains("bad.json") && err.contains("not a commit id"),
            "{err}"
        );
    }
}
