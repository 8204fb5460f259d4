//! `harness history` and `harness trend` as a user runs them: a saved run of this repository,
//! re-stamped as 24 commits with a 2 % slowdown of one benchmark from the 13th, goes into a
//! history; `trend` names the commit where it started and nothing else; hostile input is refused
//! with the file named and nothing written.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SAVED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/eval/results/noise/aa-full-final/results.json.gz"
);

fn harness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .expect("run harness")
}

/// Commit `i`'s run: the saved run with a new head sha and time, its benchmarks' head medians
/// scaled by a small wiggle, and `gather/f32/large` 2 % slower from commit 12 on.
fn commit(saved: &Value, i: usize) -> Value {
    let mut r = saved.clone();
    r["head"]["sha"] = Value::from(format!("{:040x}", 0xfeed_0000_u64 + i as u64));
    r["created_unix_s"] = Value::from(1_800_000_000.0 + 3600.0 * i as f64);
    let wiggle = [0.0, 0.003, -0.002, 0.001, -0.003, 0.002];
    for b in r["benches"].as_array_mut().unwrap() {
        let step = if b["id"] == "gather/f32/large" && i >= 12 {
            1.02
        } else {
            1.0
        };
        let k = step * (1.0 + wiggle[i % wiggle.len()]);
        if let Some(head) = b["head"].as_object_mut() {
            let m = head["median_ns"].as_f64().unwrap() * k;
            head.insert("median_ns".into(), Value::from(m));
        }
    }
    r
}

/// `harness history add --results <results> --dir <dir>`.
fn add(results: &Path, dir: &Path) -> std::process::Output {
    harness(&[
        "history",
        "add",
        "--results",
        results.to_str().unwrap(),
        "--dir",
        dir.to_str().unwrap(),
    ])
}

fn write(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string(v).unwrap()).unwrap();
}

#[test]
fn a_history_of_24_commits_shows_the_one_step_at_its_commit() {
    let saved: Value = serde_json::from_str(
        &harness::commands::read_saved_text(Path::new(SAVED), u64::MAX).unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("history");
    for i in 0..24 {
        let f = tmp.path().join(format!("run{i}.json"));
        write(&f, &commit(&saved, i));
        let out = add(&f, &dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let list = harness(&["history", "list", "--dir", dir.to_str().unwrap()]);
    assert!(list.status.success());
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 24);

    let out = harness(&[
        "trend",
        "--history",
        dir.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trends: Value = serde_json::from_slice(&out.stdout).unwrap();
    let with_points: Vec<&Value> = trends
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["change_points"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(with_points.len(), 1, "{with_points:#?}");
    assert_eq!(with_points[0]["id"], "gather/f32/large");
    let cp = &with_points[0]["change_points"][0];
    assert_eq!(cp["sha"], format!("{:040x}", 0xfeed_0000_u64 + 12));
    assert_eq!(cp["before_sha"], format!("{:040x}", 0xfeed_0000_u64 + 11));
    let ratio = cp["ratio"].as_f64().unwrap();
    assert!((ratio - 1.02).abs() < 0.005, "{ratio}");

    let md = harness(&["trend", "--history", dir.to_str().unwrap()]);
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("`gather/f32/large`") && md.contains("+2.0 %"),
        "{md}"
    );
}

#[test]
fn a_hostile_results_file_is_refused_and_nothing_is_written() {
    let saved: Value = serde_json::from_str(
        &harness::commands::read_saved_text(Path::new(SAVED), u64::MAX).unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("history");
    for (name, edit) in [
        ("bad-sha.json", ("head", "sha", "../../escape")),
        ("bad-host.json", ("host", "fingerprint", "../x")),
    ] {
        let mut r = commit(&saved, 0);
        r[edit.0][edit.1] = Value::from(edit.2);
        let f = tmp.path().join(name);
        write(&f, &r);
        let out = add(&f, &dir);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:"), "{name}: {err}");
        assert!(
            !dir.exists() || std::fs::read_dir(&dir).unwrap().next().is_none(),
            "{name}"
        );
    }
}
