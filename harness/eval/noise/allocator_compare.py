#!/usr/bin/env python3
"""Two full A/A runs of the gate side by side (README.md, 2026-12-04, "the benches on the
product's allocator"): per row the per-round sd of the A/A log ratio (`harness noise --from`),
the rounds the gate spent, the verdict, the instruction counts where the run counted them, and
the base side's median time per iteration of the second run against the first.

Usage:
  python3 harness/eval/noise/allocator_compare.py --harness target/release/harness \\
      harness/eval/results/noise/allocator/glibc/aa/full-none/run-001 \\
      harness/eval/results/noise/allocator/mimalloc/aa/full-none/run-001 [--md OUT.md]
Standard library only; the one child process (`harness noise --from`) has a deadline.
"""

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_SD = 0.03  # the per-round sd target (3 %)


def load_results(run_dir):
    run_dir = Path(run_dir)
    plain, gz = run_dir / "results.json", run_dir / "results.json.gz"
    if plain.is_file():
        return plain.read_text()
    if gz.is_file():
        return gzip.decompress(gz.read_bytes()).decode()
    raise SystemExit(f"error: no results.json(.gz) in {run_dir}")


def noise_rows(harness, text):
    """Per-round sd of the A/A log ratio per row id, from `harness noise --from`."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(text)
        f.flush()
        out = subprocess.run([harness, "noise", "--from", f.name, "--format", "json"],
                             capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"error: harness noise --from exited {out.returncode}:\n{out.stderr}")
    [variant] = json.loads(out.stdout)["variants"]
    return {r["id"].removeprefix("e2e "): r["sd_log_ratio"] for r in variant["rows"]}


def summary(res, sd):
    benches = res["benches"]
    return {
        "wall_min": res["wall_s"] / 60,
        "red": sum(b["status"] == "regression" for b in benches),
        "warn": sum(b["status"] == "possible_regression" for b in benches),
        "quiet": sum(v <= TARGET_SD for v in sd.values()),
        "rows": len(sd),
        "extra_rounds": sorted(b["id"] for b in benches
                               if b["rounds"] > min(x["rounds"] for x in benches)),
        "instructions_differ": sorted(
            b["id"] for b in benches if b.get("instructions")
            and b["instructions"]["base"] and abs(b["instructions"]["head"]
                                                  / b["instructions"]["base"] - 1) > 0.001),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", default="target/release/harness")
    ap.add_argument("first", help="the first A/A trial directory (results.json[.gz])")
    ap.add_argument("second", help="the second A/A trial directory")
    ap.add_argument("--md", help="also write the table here")
    a = ap.parse_args()
    runs = []
    for d in (a.first, a.second):
        text = load_results(d)
        res = json.loads(text)
        runs.append((res, noise_rows(a.harness, text)))
    (r1, sd1), (r2, sd2) = runs
    b1 = {b["id"]: b for b in r1["benches"]}
    b2 = {b["id"]: b for b in r2["benches"]}
    lines = [f"first: {a.first}", f"second: {a.second}", "",
             "| row | sd first | sd second | rounds | verdicts | time per iteration, second / "
             "first (base side) | instructions (base, first → second) |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for bid in sorted(set(b1) | set(b2) | set(sd1) | set(sd2)):  # the e2e rows by sd alone
        x, y = b1.get(bid), b2.get(bid)
        t = (f"{(y['base']['median_ns'] / x['base']['median_ns'] - 1) * 100:+.1f} %"
             if x and y and x["base"].get("median_ns") and y["base"].get("median_ns") else "—")
        ins = [(b or {}).get("instructions") for b in (x, y)]
        ins_s = " → ".join(f"{i['base']:.0f}" if i else "—" for i in ins)
        lines.append(
            f"| `{bid}` | {sd1.get(bid, float('nan')) * 100:.1f} % | "
            f"{sd2.get(bid, float('nan')) * 100:.1f} % | {x['rounds'] if x else '—'} / "
            f"{y['rounds'] if y else '—'} | {x['status'] if x else '—'} / "
            f"{y['status'] if y else '—'} | {t} | {ins_s} |")
    for name, (res, sd) in (("first", runs[0]), ("second", runs[1])):
        s = summary(res, sd)
        lines += ["", f"**{name}**: {s['wall_min']:.1f} min, {s['red']} 🔴 {s['warn']} ⚠️; "
                      f"per-round sd ≤ 3 % on {s['quiet']} of {s['rows']} rows; "
                      f"{len(s['extra_rounds'])} benchmarks with extra rounds "
                      f"({', '.join(s['extra_rounds'])}); instructions differing between the "
                      f"sides by > 0.1 %: {', '.join(s['instructions_differ']) or 'none'}"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.md:
        Path(a.md).write_text(text)


if __name__ == "__main__":
    main()
