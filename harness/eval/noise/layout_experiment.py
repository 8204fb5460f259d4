#!/usr/bin/env python3
"""A/A per-round sd of a served benchmark with and without one memory-layout change, the two in
turn round by round (the experiments of harness/STATS.md §1, "Tried and not adopted").

    layout_experiment.py --variant aslr|thp --rounds 8 EXE ID [EXE ID ...]

Both processes of a pair are pinned to CPU 1 and served as the harness serves them
(HARNESS_BENCH_SERVE, warm-up 0.2 s, 10 samples of ~60 ms, ABBA). `aslr`: the changed setup runs
both under `setarch -R` (no address-space randomisation); `thp`: with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc asks for transparent huge pages). Prints per
benchmark the per-round sd of ln(second / first) for each setup and the per-round values.
"""
import argparse
import math
import os
import statistics as st
import subprocess


def start(exe, bid, changed, variant):
    cmd = [exe, "--bench", "--list"]
    env = dict(os.environ, HARNESS_BENCH_SERVE=bid)
    if changed and variant == "aslr":
        cmd = ["setarch", os.uname().machine, "-R"] + cmd
    if changed and variant == "thp":
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {1}),
                         cwd=os.path.dirname(exe))
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{exe} did not serve {bid}")
        if line.startswith("harness-serve ready"):
            return p


def sample(p, n):
    p.stdin.write(f"{n}\n")
    p.stdin.flush()
    return float(p.stdout.readline().split()[2]) / n


def one_round(exe, bid, changed, variant):
    ps = [start(exe, bid, changed, variant), start(exe, bid, changed, variant)]
    per = []
    for p in ps:
        n, spent, last = 1, 0.0, 0.0
        while spent < 0.2e9:
            last = sample(p, n)
            spent += last * n
            n *= 2
        per.append(last)
    n = max(1, round(60e6 / max(per)))
    ts = [[], []]
    for i in range(10):
        for w in ([0, 1] if i % 2 == 0 else [1, 0]):
            ts[w].append(sample(ps[w], n))
    for p in ps:
        p.stdin.close()
        p.wait()
    return st.median(math.log(b / a) for a, b in zip(*ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["aslr", "thp"], required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("pairs", nargs="+", help="EXE ID EXE ID ...")
    a = ap.parse_args()
    pairs = list(zip(a.pairs[0::2], a.pairs[1::2]))
    res = {}
    for r in range(a.rounds):
        for exe, bid in pairs:
            for changed in ([False, True] if r % 2 == 0 else [True, False]):
                res.setdefault((bid, changed), []).append(one_round(exe, bid, changed, a.variant))
    for _, bid in pairs:
        same, changed = res[(bid, False)], res[(bid, True)]
        print(f"{bid:45s} as configured sd {st.stdev(same):.3f}  {a.variant} sd {st.stdev(changed):.3f}")
        print("   as configured:", " ".join(f"{x:+.3f}" for x in same))
        print(f"   {a.variant}:", " ".join(f"{x:+.3f}" for x in changed))


if __name__ == "__main__":
    main()
