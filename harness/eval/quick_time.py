#!/usr/bin/env python3
"""Where a quick (pre-push) check's time goes, run by run, against its 3-minute target.

Reads the runs `gate_cases.py run … --case NAME:quick --out DIR` saved (`DIR/CASE/run-K/`:
`run.json` with the wall time and the build stages, `results.json[.gz]` with every benchmark
round's start and duration) and prints one markdown table: per run the wall time, the head's
build (until the first round, from the harness's progress lines), the benchmark rounds (first
round's start to last round's end, confirmation rounds included), the rest (the host probes, the
end-to-end stage with its binaries' build, the report), the rows that were not ✅; then the
median and maximum and how many runs took at most the target, with a Clopper–Pearson interval.

  python3 harness/eval/quick_time.py --runs harness/eval/results/quick-time/fresh [--target-s 180]

Standard library only.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import saved  # noqa: E402
from gate_cases import clopper_pearson  # noqa: E402

EMOJI = {"regression": "🔴", "possible_regression": "⚠️", "too_noisy": "❔",
         "improvement": "🟢", "failed": "⛔", "added": "🆕", "removed": "➖"}


def run_times(meta, res):
    """(wall, head build, rounds, rest) in seconds of one run; None where it is not recorded."""
    wall = meta["wall_s"]
    build = (meta.get("stages_s") or {}).get("until_first_round")
    rounds = None
    rs = (res or {}).get("rounds") or []
    if rs:
        first = min(r["started_unix_s"] for r in rs)
        last = max(r["started_unix_s"] + r["duration_s"] for r in rs)
        rounds = last - first
    rest = None if build is None or rounds is None else wall - build - rounds
    return wall, build, rounds, rest


def flagged(res):
    """The rows that are not ✅ (benchmarks, then end-to-end correctness), as `emoji id`."""
    out = [f"{EMOJI.get(b['status'], b['status'])} `{b['id']}`"
           for b in (res or {}).get("benches", []) if b["status"] != "no_change"]
    for c in ((res or {}).get("e2e") or {}).get("correctness") or []:
        if c["status"] not in ("identical", "not_run"):
            out.append(f"{c['status']} `{c['id']}`")
    return out


def runs(root):
    """(case, run dir, run.json, results or None) of every run under `root`, in name order."""
    for run in sorted(Path(root).glob("*/run-*")):
        meta_file = run / "run.json"
        if not meta_file.is_file():
            continue
        meta = saved.load_json(meta_file)
        res_file = saved.find(run / "results.json")
        yield run.parent.name, run, meta, saved.load_json(res_file) if res_file else None


def table(root, target_s):
    rows, walls = [], []
    fmt = lambda x: "—" if x is None else f"{x:.0f}"  # noqa: E731
    for case, run, meta, res in runs(root):
        wall, build, rounds, rest = run_times(meta, res)
        walls.append(wall)
        n = len((res or {}).get("rounds") or [])
        cold = " (cold)" if meta.get("cold") else ""
        rows.append(f"| {case} | {fmt(wall)}{cold} | {fmt(build)} | {fmt(rounds)} ({n}) | "
                    f"{fmt(rest)} | {', '.join(flagged(res)) or 'every row ✅'} |")
    if not walls:
        return f"no runs under {root}\n"
    k = sum(w <= target_s for w in walls)
    lo, hi = clopper_pearson(k, len(walls))
    head = ("| case | wall s | head build s | rounds s (rounds) | rest s | rows not ✅ |\n"
            "|---|---|---|---|---|---|\n")
    summary = (f"\n{len(walls)} runs: median {statistics.median(walls):.0f} s, max "
               f"{max(walls):.0f} s; {k} of {len(walls)} within {target_s:.0f} s "
               f"[{lo * 100:.1f}, {hi * 100:.1f} %] (Clopper–Pearson 95 %).\n")
    return head + "\n".join(rows) + "\n" + summary


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="gate_cases.py run's --out of the quick runs")
    p.add_argument("--target-s", type=float, default=180.0)
    a = p.parse_args()
    sys.stdout.write(table(a.runs, a.target_s))


if __name__ == "__main__":
    main()
