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
import math
import statistics as st
import sys

from paired import lower_quartile as lq  # type-7, as harness/src/stats/aggregate.rs
from round_components import paired_rounds




def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    res = {"lq": [], "medpair": [], "min": [], "median": []}
    for _, rounds in paired_rounds(sys.argv[1:]):
        acc = {k: [] for k in res}
        for B, H in rounds:
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
