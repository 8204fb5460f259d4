#!/usr/bin/env python3
"""Replays saved paired samples with two round estimators and prints, per benchmark, the
per-round sd of the A/A log ratio under each.

The serve protocol samples the two sides F S S F F S S F … (harness/src/measure/serve.rs):
every pair of samples (i, the same index on both sides) holds one sample taken right after the
other side ran, the other side's in even pairs and the first side's in odd pairs, and pair 0
follows both sides' warm-ups (F warmed up first, so both of its samples follow a switch). A
"switch effect" s (the first sample after the other process ran is slower: its caches were
evicted) then enters the pairs' log ratios as +s, −s, +s, … around the true ratio, and the round's
median of pairs lands anywhere between.

- `pairs`: the median over pairs of ln(head_i / base_i) (the estimator in use until 2026-12-02);
- `blocks`: the median over blocks of the mean of consecutive pairs' log ratios, blocks
  {0}, {1, 2}, {3, 4}, … (a trailing pair without its partner dropped), in which s cancels.

Usage: switch_blocks.py FILE… (results.json of `harness compare`, or noise.json of `harness noise`).
"""
import statistics as st
import sys
from math import log
from pathlib import Path as _Path

sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import saved  # noqa: E402


def rounds_of(path):
    """{variant: {bench: [(base_times, head_times)] per round}} from either file kind."""
    r = saved.load_json(path)
    out = {}
    if "variants" in r:
        for v in r["variants"]:
            m = {}
            for bid, (base, head) in v["samples"].items():
                hb = {s["round"]: s for s in head}
                m[bid] = [
                    (
                        [t / i for t, i in zip(b["times_ns"], b["iters"])],
                        [t / i for t, i in zip(hb[b["round"]]["times_ns"], hb[b["round"]]["iters"])],
                    )
                    for b in base
                    if b["round"] in hb and b.get("sampling_mode") == "paired"
                ]
            out[v["name"]] = m
    else:
        m = {}
        for b in r["benches"]:
            if not b.get("base") or not b.get("head"):
                continue
            hb = {s["round"]: s for s in b["head"]["samples"]}
            m[b["id"]] = [
                (
                    [t / i for t, i in zip(s["times_ns"], s["iters"])],
                    [t / i for t, i in zip(hb[s["round"]]["times_ns"], hb[s["round"]]["iters"])],
                )
                for s in b["base"]["samples"]
                if s["round"] in hb and s.get("sampling_mode") == "paired"
            ]
        out["saved"] = m
    return out


def pairs(d):
    return st.median(d)


def blocks(d):
    bl = [d[0]] + [(d[i] + d[i + 1]) / 2 for i in range(1, len(d) - 1, 2)]
    return st.median(bl)


def main():
    for path in sys.argv[1:]:
        for name, m in rounds_of(path).items():
            rows = []
            for bid, rs in sorted(m.items()):
                ds = [[log(h / b) for b, h in zip(bs, hs)] for bs, hs in rs if len(bs) == len(hs) > 2]
                if len(ds) < 3:
                    continue
                a = st.stdev([pairs(d) for d in ds])
                c = st.stdev([blocks(d) for d in ds])
                rows.append((bid, len(ds), a, c))
            print(f"## {path} [{name}]")
            print("| benchmark | rounds | sd pairs | sd blocks |")
            print("|---|---:|---:|---:|")
            for bid, n, a, c in sorted(rows, key=lambda r: -r[2]):
                print(f"| `{bid}` | {n} | {a:.2%} | {c:.2%} |")
            sa = [r[2] for r in rows]
            sc = [r[3] for r in rows]
            print(
                f"\n{len(rows)} benchmarks: median sd {st.median(sa):.2%} pairs, {st.median(sc):.2%} blocks; "
                f"≤ 3 %: {sum(x <= 0.03 for x in sa)} pairs, {sum(x <= 0.03 for x in sc)} blocks; "
                f"blocks lower on {sum(c < a for a, c in zip(sa, sc))}\n"
            )


if __name__ == "__main__":
    main()
