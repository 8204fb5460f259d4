#!/usr/bin/env python3
"""Two full A/A runs of the gate side by side (README.md, 2026-12-04, "the benches on the
product's allocator"): per row the per-round sd of the A/A log ratio (`harness noise --from`),
the rounds the gate spent, the verdict, the instruction counts where the run counted them, and
the base side's median time per iteration of the second run against the first.

Usage:
  python3 harness/eval/noise/allocator_compare.py --harness target/release/harness \\
      harness/eval/results/noise/allocator/glibc/aa/full-none/run-001 \\
      harness/eval/results/noise/allocator/mimalloc/aa/full-none/run-001 [--md OUT.md]
Standard library and the eval's own modules only; the one child process (`harness noise
--from`) has a deadline.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import saved  # noqa: E402
from gate_cases import result_rows  # noqa: E402  (every benchmark and e2e speed row's status)

TARGET_SD = 0.03  # the per-round sd target (3 %)


def load_results(run_dir):
    """The trial's results (plain or gzip-compressed, as `saved` keeps them)."""
    found = saved.find(Path(run_dir) / "results.json")
    if found is None:
        raise SystemExit(f"error: no results.json(.gz) in {run_dir}")
    return saved.load_json(found)


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


def open_after_first_pass(run_dir):
    """Rows the gate left undecided after its first pass: the first "N row(s) still open" line
    of the trial's harness.log (the A/A target's figure; results.json keeps each row's total
    rounds, which mixes budget and confirmation rounds), or None without a log."""
    log = Path(run_dir) / "harness.log"
    if not log.is_file():
        return None
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"^(\d+) row\(s\) still open", line)
        if m:
            return int(m.group(1))
    return 0


def counted(ins):
    """An instruction count with both sides present (a failed count has nulls and an error)."""
    return bool(ins) and ins.get("base") is not None and ins.get("head") is not None


def summary(res, sd, run_dir):
    benches = res["benches"]
    statuses = [st for _, st, _, _ in result_rows(res)]
    first_pass = (res.get("method") or {}).get("rounds")
    return {
        "wall_min": res["wall_s"] / 60,
        "red": statuses.count("regression"),
        "warn": statuses.count("possible_regression"),
        "quiet": sum(v <= TARGET_SD for v in sd.values()),
        "rows": len(sd),
        "open": open_after_first_pass(run_dir),
        "more_rounds": sorted(b["id"] for b in benches
                              if first_pass is not None and b["rounds"] > first_pass),
        "counted": sum(counted(b.get("instructions")) for b in benches),
        "instructions_differ": sorted(
            b["id"] for b in benches if counted(b.get("instructions"))
            and b["instructions"]["base"]
            and abs(b["instructions"]["head"] / b["instructions"]["base"] - 1) > 0.001),
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
        res = load_results(d)
        runs.append((res, noise_rows(a.harness, json.dumps(res))))
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
        ins_s = " → ".join(f"{i['base']:.0f}" if counted(i) else "—" for i in ins)
        sd_s = [f"{s[bid] * 100:.1f} %" if bid in s else "—" for s in (sd1, sd2)]
        lines.append(
            f"| `{bid}` | {sd_s[0]} | {sd_s[1]} | {x['rounds'] if x else '—'} / "
            f"{y['rounds'] if y else '—'} | {x['status'] if x else '—'} / "
            f"{y['status'] if y else '—'} | {t} | {ins_s} |")
    for name, d, (res, sd) in (("first", a.first, runs[0]), ("second", a.second, runs[1])):
        s = summary(res, sd, d)
        lines += ["", f"**{name}**: {s['wall_min']:.1f} min, {s['red']} 🔴 {s['warn']} ⚠️; "
                      f"per-round sd ≤ 3 % on {s['quiet']} of {s['rows']} rows; "
                      f"{s['open'] if s['open'] is not None else '?'} rows open after the "
                      f"first pass; {len(s['more_rounds'])} benchmarks given rounds beyond it, "
                      f"budget or confirmation ({', '.join(s['more_rounds'])}); instructions "
                      f"counted on {s['counted']} rows, differing between the sides by "
                      f"> 0.1 % on: {', '.join(s['instructions_differ']) or 'none'}"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.md:
        Path(a.md).write_text(text)


if __name__ == "__main__":
    main()
