#!/usr/bin/env python3
"""Per-round sd of the A/A log ratio of each row of a `harness noise --out` run, in the samples'
own clock (`times_ns`: thread CPU time where `clock` says so) and in wall time (`wall_ns`, kept
beside CPU times), from the same samples: what the CPU clock (harness/STATS.md §16) changes.

    clock_sd.py harness/eval/results/noise/<dir>/noise.json
Standard library only. A round's log ratio is the median over its sample pairs of ln(head /
base) per iteration, the two parity classes averaged as the harness does (serve.rs's layout).
"""
import math
import statistics
import sys
from pathlib import Path as _Path

sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import saved  # noqa: E402


def round_ratio(b, h, key):
    tb, th = b.get(key) or [], h.get(key) or []
    if not tb or len(tb) != len(th):
        return None
    d = [math.log((y / ih) / (x / ib)) for x, y, ib, ih in zip(tb, th, b["iters"], h["iters"])]
    if len(d) < 6:
        return statistics.median(d)
    return (statistics.median(d[0::2]) + statistics.median(d[1::2])) / 2


def main():
    run = saved.load_json(sys.argv[1])
    rows = []
    for rid, (base, head) in sorted(run["variants"][0]["samples"].items()):
        if rid.startswith("e2e "):
            continue
        cpu = [b.get("clock") == "thread_cpu" for b in base]
        own = [round_ratio(b, h, "times_ns") for b, h in zip(base, head)]
        wall = [round_ratio(b, h, "wall_ns") if b.get("wall_ns") else round_ratio(b, h, "times_ns")
                for b, h in zip(base, head)]
        own, wall = [x for x in own if x is not None], [x for x in wall if x is not None]
        if len(own) < 3:
            continue
        rows.append((rid, sum(cpu), len(cpu), statistics.stdev(own), statistics.stdev(wall)))
    print("| row | rounds in CPU time | sd, kept clock | sd, wall time |")
    print("|---|---:|---:|---:|")
    for rid, k, n, a, w in rows:
        print(f"| `{rid}` | {k}/{n} | {a * 100:.1f} % | {w * 100:.1f} % |")
    if rows:
        print(f"\nmedian sd: kept clock {statistics.median([r[3] for r in rows]) * 100:.1f} %, "
              f"wall {statistics.median([r[4] for r in rows]) * 100:.1f} %; rows ≤ 3 %: "
              f"{sum(r[3] <= 0.03 for r in rows)} vs {sum(r[4] <= 0.03 for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
