#!/usr/bin/env python3
"""How far apart can base and head be measured? Read off saved results.json files (no measuring).

Per benchmark, over its first-pass rounds, the sd of four per-round log ratios:

  cross_all  ln(LQ(head samples) / LQ(base samples)): the gate's criterion-run rounds, the two
             sides' runs about a second apart (LQ = lower quartile of ns/iter, as the harness);
  cross_odd  the same on the odd samples only (5 per side), to compare like with like;
  alt        within one criterion run, odd samples against even samples (tens of ms apart),
             averaged over both sides: what alternating sample by sample could reach;
  block      within one run, the last five samples against the first five (about 0.3 s apart).

It prints the median and p75 over benchmarks of each sd. This is what predicted, before paired
sampling was built, that alternating the two sides sample by sample would cut the per-round sd
from about 0.11 to about 0.03 (harness/STATS.md, "Paired sampling").

    python3 harness/eval/noise_timescale.py RESULTS.json [...]
"""
import math
import statistics as st
import sys

from paired import lower_quartile as lq  # type-7, as harness/src/stats/aggregate.rs
import saved




def per(s, idx):
    return [s["times_ns"][i] / s["iters"][i] for i in idx]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    res = {"cross_all": [], "cross_odd": [], "alt": [], "block": []}
    for f in sys.argv[1:]:
        for b in saved.load_json(f)["benches"]:
            if not b.get("base") or not b.get("head"):
                continue
            bs = {s["round"]: s for s in b["base"].get("samples", [])}
            hs = {s["round"]: s for s in b["head"].get("samples", [])}
            acc = {k: [] for k in res}
            for r in sorted(set(bs) & set(hs)):
                B, H = bs[r], hs[r]
                if len(B["iters"]) != 10 or len(H["iters"]) != 10:
                    continue
                ev, od, lo, hi = range(0, 10, 2), range(1, 10, 2), range(5), range(5, 10)
                acc["cross_all"].append(math.log(lq(per(H, range(10))) / lq(per(B, range(10)))))
                acc["cross_odd"].append(math.log(lq(per(H, od)) / lq(per(B, od))))
                acc["alt"].append(0.5 * sum(math.log(lq(per(S, od)) / lq(per(S, ev)))
                                            for S in (B, H)))
                acc["block"].append(0.5 * sum(math.log(lq(per(S, hi)) / lq(per(S, lo)))
                                              for S in (B, H)))
            if len(acc["alt"]) >= 4:
                for k in res:
                    res[k].append(st.stdev(acc[k]))
    for k, v in res.items():
        v.sort()
        print(f"{k:10s} n={len(v)} median sd={st.median(v):.3f} p75={v[int(0.75 * len(v))]:.3f}")


if __name__ == "__main__":
    main()
