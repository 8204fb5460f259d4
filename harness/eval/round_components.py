#!/usr/bin/env python3
"""Where a paired round's noise comes from: within the round (sample pairs), or between rounds
(fresh processes)? Read off saved results.json files; nothing is measured.

For every benchmark series measured paired (`sampling_mode: "paired"`, first six rounds), the sd
over rounds of the round statistic the gate uses (the median over sample pairs of ln(head/base),
stats::paired_log_ratio), computed from all 10 pairs and from subsets of them:

  all10   every pair (what the gate decides on);
  first5  pairs 0-4, as if a round had 5 samples;   last5  pairs 5-9;
  first3  pairs 0-2.

If the noise were independent from pair to pair, first5 would be about √2 × all10, and the
per-round medians of the even and of the odd pairs would disagree about as much as rounds do.
Where rounds disagree far more than their halves (the ratio `between/halves`), the noise is a
per-round (per-process) state that more samples per round cannot average out: only more rounds
can. It prints the median, p75 and p90 over series, then per benchmark id (IDs given, or every
id whose between/halves ratio is above 2).

    python3 harness/eval/round_components.py RESULTS.json [...] [--id ID ...]
"""
import math
import statistics as st
import sys
from collections import defaultdict

import saved

SUBSETS = {"all10": slice(0, 10), "first5": slice(0, 5), "last5": slice(5, 10),
           "first3": slice(0, 3)}


def paired_rounds(files):
    """(id, [(base ns/iter per sample, head ns/iter per sample) per round]) per benchmark × file,
    its first six paired rounds; series with fewer are skipped. Also used by round_estimators.py."""
    for f in files:
        for b in saved.load_json(f)["benches"]:
            if not b.get("base") or not b.get("head"):
                continue
            side = {k: {s["round"]: s for s in b[k]["samples"] if s["sampling_mode"] == "paired"}
                    for k in ("base", "head")}
            rounds = sorted(set(side["base"]) & set(side["head"]))[:6]
            if len(rounds) < 6:
                continue
            per_iter = {k: [[t / i for t, i in zip(side[k][r]["times_ns"], side[k][r]["iters"])]
                            for r in rounds] for k in ("base", "head")}
            yield b["id"], list(zip(per_iter["base"], per_iter["head"]))


def series(files):
    """(id, [per-round ln(head_i/base_i) lists]) per series of at least 10 sample pairs a round."""
    for bench, rounds in paired_rounds(files):
        per_round = [[math.log(h / x) for h, x in zip(head, base)] for base, head in rounds]
        if all(len(lr) >= 10 for lr in per_round):
            yield bench, per_round


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    ids = args[args.index("--id") + 1:] if "--id" in args else []
    files = args[:args.index("--id")] if "--id" in args else args
    sds = defaultdict(list)
    by_id = defaultdict(lambda: defaultdict(list))
    for bench, per_round in series(files):
        for name, sl in SUBSETS.items():
            sd = st.stdev([st.median(lr[sl]) for lr in per_round])
            sds[name].append(sd)
            by_id[bench][name].append(sd)
        # Half against half inside each round: the within-round part of the noise.
        halves = st.stdev([st.median(lr[0::2]) - st.median(lr[1::2]) for lr in per_round]) / 2
        by_id[bench]["halves"].append(halves)
    for name, v in sds.items():
        v.sort()
        print(f"{name:7s} n={len(v)} median sd {st.median(v):.4f} p75 {v[int(.75 * len(v))]:.4f} "
              f"p90 {v[int(.9 * len(v))]:.4f}")
    print()
    for bench, v in sorted(by_id.items()):
        between, halves = st.median(v["all10"]), st.median(v["halves"])
        if bench in ids or (not ids and between > 2 * halves):
            print(f"{bench:45s} series {len(v['all10']):3d}  " + "  ".join(
                f"{k} {st.median(x):.3f}" for k, x in v.items() if k != "halves")
                  + f"  halves {halves:.3f}  between/halves {between / halves:.1f}")


if __name__ == "__main__":
    main()
