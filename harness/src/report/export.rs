//! Machine renderings: the saved run as JSON, and the `customSmallerIsBetter` input of
//! benchmark-action/github-action-benchmark for charting history across commits.

use serde_json::{Value, json as j};

use super::format as fmt;
use crate::results::Results;

/// The run as pretty-printed `harness-results/1` JSON; [`serde_json::from_str`] reads it back into
/// an equal [`Results`] (for finite numbers: JSON has no NaN).
pub fn json(results: &Results) -> String {
    // Plain structs, string keys, no custom serializers: serialising cannot fail.
    serde_json::to_string_pretty(results).expect("Results serialises to JSON")
}

/// Entries for github-action-benchmark with `tool: customSmallerIsBetter`: a JSON array of
/// `{name, unit, value, range, extra}` where `value` is the PR's median time per iteration in ns,
/// `range` (a string, as the action expects) the half-width of the PR time's confidence interval
/// in ns, `"± 12.3"`, taken from the change interval, and `extra` (a string, shown in the chart's
/// tooltip) the status, base time, change and threshold. Benchmarks without a PR time (removed,
/// failed, or not a finite number) are left out: there is no point to plot.
pub fn github_action_benchmark(results: &Results) -> Value {
    let entries = results
        .benches
        .iter()
        .filter_map(|b| {
            let head = b.head.as_ref()?.median_ns;
            if b.status == crate::results::Status::Failed || !head.is_finite() {
                return None;
            }
            let base = b.base.as_ref().map(|s| s.median_ns);
            let mut extra = vec![format!("{} {}", b.status.emoji(), b.label())];
            if let Some(base) = base {
                extra.push(format!("base {}", fmt::time(base)));
            }
            let mut entry = j!({
                "name": b.id,
                "unit": "ns/iter",
                "value": head,
            });
            if let (Some(c), Some(base)) = (b.change, base) {
                extra.push(format!(
                    "change {} {} ({} CI)",
                    fmt::change(c.estimate),
                    fmt::interval(c.ci_low, c.ci_high),
                    fmt::level(c.confidence)
                ));
                extra.push(format!(
                    "threshold {}",
                    fmt::threshold(b.threshold, b.threshold_source)
                ));
                let half_width = base * (c.ci_high - c.ci_low) / 2.0;
                if half_width.is_finite() {
                    entry["range"] = Value::from(format!("± {}", fmt::number(half_width)));
                }
            }
            entry["extra"] = Value::from(extra.join("\n"));
            Some(entry)
        })
        .collect();
    Value::Array(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn json_round_trips() {
        for r in [
            fixtures::mixed(),
            fixtures::clean_pass(3),
            fixtures::base_build_failure(),
        ] {
            let text = json(&r);
            assert!(
                text.contains("\n  \"schema\": \"harness-results/1\""),
                "not pretty"
            );
            let back: Results = serde_json::from_str(&text).unwrap();
            assert_same(
                &serde_json::to_value(&back).unwrap(),
                &serde_json::to_value(&r).unwrap(),
                "$",
            );
        }
    }

    /// Equal JSON trees, floats to within 2 ulp: serde_json's default float parser (without its
    /// `float_roundtrip` feature) can be one ulp off, e.g. `1918.7883` reads back as
    /// `1918.7883000000002`.
    fn assert_same(a: &Value, b: &Value, path: &str) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                assert_eq!(
                    x.keys().collect::<Vec<_>>(),
                    y.keys().collect::<Vec<_>>(),
                    "{path}"
                );
                for (k, v) in x {
                    assert_same(v, &y[k], &format!("{path}.{k}"));
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                assert_eq!(x.len(), y.len(), "{path}");
                for (i, (v, w)) in x.iter().zip(y).enumerate() {
                    assert_same(v, w, &format!("{path}[{i}]"));
                }
            }
            (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= 2.0 * f64::EPSILON * x.abs().max(y.abs()),
                    "{path}: {x} vs {y}"
                );
            }
            _ => assert_eq!(a, b, "{path}"),
        }
    }

    #[test]
    fn github_action_benchmark_shape() {
        let r = fixtures::mixed();
        let v = github_action_benchmark(&r);
        let entries = v.as_array().unwrap();
        // Removed and failed benchmarks have no PR time to plot.
        assert_eq!(entries.len(), r.benches.len() - 2);
        for e in entries {
            let o = e.as_object().unwrap();
            assert!(
                o.keys()
                    .all(|k| ["name", "unit", "value", "range", "extra"].contains(&k.as_str()))
            );
            assert!(o["name"].is_string());
            assert_eq!(o["unit"], "ns/iter");
            assert!(o["value"].as_f64().unwrap() > 0.0);
            assert!(o["extra"].is_string());
            if let Some(range) = o.get("range") {
                assert!(range.as_str().unwrap().starts_with("± "), "{range}");
            }
        }
        let matmul = entries
            .iter()
            .find(|e| e["name"] == "matmul/f32/1024x1024")
            .unwrap();
        // 9.87 ms × 1.104, and the CI [+8.1, +12.7] % of 9.87 ms is ± 227 µs.
        assert!((matmul["value"].as_f64().unwrap() - 10_896_480.0).abs() < 1e-3);
        assert_eq!(matmul["range"], "± 227010");
        assert_eq!(
            matmul["extra"],
            "🔴 regression\nbase 9.87 ms\nchange +10.4 % [+8.1, +12.7] (95 % CI)\nthreshold ±3.0 % (profile)"
        );
        // An added benchmark: a value, no base, no range.
        let added = entries
            .iter()
            .find(|e| e["name"] == "softmax/online/576")
            .unwrap();
        assert!(added.get("range").is_none());
        assert_eq!(added["extra"], "🆕 added");
    }
}
