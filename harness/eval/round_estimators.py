#!/usr/bin/env python3
"""Which per-round statistic of paired samples is least noisy? Read off saved results.json files.

For every benchmark whose rounds were measured paired (`sampling_mode: "paired"`), over its
first six rounds, the sd of the round's log ratio by four statistics of the round's samples:

  lq       ln(LQ(head) / LQ(base)), each side's lower quartile of ns/iter (criterion runs' rule);
  medpair  the median over sample pairs i of ln(head_i / base_i) (what the harness uses,
           stats::paired_log_ratio);
  min      ln(min(head) / min(base));
  median   ln(median(head) / median(base)).

It prints the median, p75 and p90 over benchmark × trial series (harness/STATS.md, section 2).

    python3 harness/eval/round_estimators.py RESULTS.json [...]
"""
import json
import math
import statistics as st
import sys

from paired import lower_quartile as lq  # type-7, as harness/src/stats/aggregate.rs




def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    res = {"lq": [], "medpair": [], "min": [], "median": []}
    for f in sys.argv[1:]:
        for b in json.load(open(f))["benches"]:
            if not b.get("base") or not b.get("head"):
                continue
            side = {k: {s["round"]: s for s in b[k]["samples"] if s["sampling_mode"] == "paired"}
                    for k in ("base", "head")}
            rounds = sorted(set(side["base"]) & set(side["head"]))[:6]
            if len(rounds) < 6:
                continue
            acc = {k: [] for k in res}
            for r in rounds:
                B, H = ([t / i for t, i in zip(side[k][r]["times_ns"], side[k][r]["iters"])]
                        for k in ("base", "head"))
                acc["lq"].append(math.log(lq(H) / lq(B)))
                acc["medpair"].append(st.median(math.log(h / b) for h, b in zip(H, B)))
                acc["min"].append(math.log(min(H) / min(B)))
                acc["median"].append(math.log(st.median(H) / st.median(B)))
            for k in res:
                res[k].append(st.stdev(acc[k]))
    for k, v in res.items():
        v.sort()
        print(f"{k:8s} n={len(v)} median sd={st.median(v):.4f} p75={v[int(.75 * len(v))]:.4f} "
              f"p90={v[int(.9 * len(v))]:.4f}")


if __name__ == "__main__":
    main()
