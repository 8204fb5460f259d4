#!/usr/bin/env python3
"""Ground truth of an end-to-end speed change, measured apart from the gate.

Two `engine profile --serve` processes (base and changed engine, same model, same prompt), both
pinned to one CPU, asked for timed decodes in turn ABBA for many rounds; each round is a fresh
pair of processes; the first decode after a switch of engine is a warm-up, not kept (as the
harness does). Per round the median over request pairs of ln(changed / base), for the decode
step and for the prefill; over rounds the Hodges-Lehmann estimate with a distribution-free 95 %
interval (the order statistics of the Walsh averages, normal approximation of the signed-rank
distribution). With engines that report the decoding thread's CPU time (`cpu_ms_per_step`,
`cpu_prefill_ms`), the decode step and the prefill in that clock too (`decode_step_cpu`,
`prefill_cpu`: the clock the gate uses for these rows, harness/STATS.md §16). Standard library
only.

    e2e_ground_truth.py --base ENGINE --head ENGINE --model DIR --prompt-ids 1,2,3 \\
        --tokens 32 --rounds 30 --requests 10 --out result.json
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

PREFIX = "engine-profile-serve"


def start(engine, args, cpu):
    p = subprocess.Popen(
        [engine, "profile", *args, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None,
    )
    line = p.stdout.readline().strip()
    if line != f"{PREFIX} ready":
        sys.exit(f"{engine}: not ready: {line!r} {p.stderr.read()}")
    return p


def run(p):
    p.stdin.write("run\n")
    p.stdin.flush()
    line = p.stdout.readline().strip()
    if not line.startswith(f"{PREFIX} run "):
        sys.exit(f"bad answer {line!r}")
    return json.loads(line[len(PREFIX) + 5 :])


def hodges_lehmann(xs, z=1.959964):
    """Estimate and 95 % interval of the centre of a symmetric distribution from `xs`."""
    n = len(xs)
    walsh = sorted((xs[i] + xs[j]) / 2 for i in range(n) for j in range(i, n))
    m = len(walsh)
    est = statistics.median(walsh)
    # Signed-rank statistic: mean n(n+1)/4, sd sqrt(n(n+1)(2n+1)/24).
    k = int(math.floor(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))
    k = max(k, 0)
    return est, walsh[k], walsh[m - 1 - k]


def engine_of(engines, r):
    """Round r's engine of a side given as one path or comma-separated orders of one build."""
    paths = engines.split(",")
    return paths[r % len(paths)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True,
                    help="the base engine, or several separated by commas (the same code linked "
                         "in other function orders, relink.sh): round r runs the (r mod N)th")
    ap.add_argument("--head", required=True, help="the same for the changed engine")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    args = ["--model", a.model, "--ep", "cpu", "--prompt-ids", a.prompt_ids,
            "--tokens", str(a.tokens), "--warmups", "1", "--decode-skip", "1", "--threads", "1"]
    step, prefill, cpu_step, cpu_prefill, raw = [], [], [], [], []
    for r in range(a.rounds):
        order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
        procs = {s: start(engine_of(getattr(a, s), r), args, a.cpu) for s in order}
        got = {"base": [], "head": []}
        last = None
        for i in range(a.requests):
            for s in (order if i % 2 == 0 else order[::-1]):
                if last != s:
                    run(procs[s])  # the first decode after a switch of engine is not kept
                last = s
                got[s].append(run(procs[s]))
        for p in procs.values():
            p.stdin.close()
            p.wait()
        pairs = list(zip(got["base"], got["head"]))
        ls = [math.log(h["ms_per_step"] / b["ms_per_step"]) for b, h in pairs]
        lp = [math.log(h["prefill_ms"] / b["prefill_ms"]) for b, h in pairs]
        step.append(statistics.median(ls))
        prefill.append(statistics.median(lp))
        # The same in the decoding thread's CPU time, where both engines report it.
        if all("cpu_ms_per_step" in x for pair in pairs for x in pair):
            cpu_step.append(statistics.median(
                [math.log(h["cpu_ms_per_step"] / b["cpu_ms_per_step"]) for b, h in pairs]))
        if all("cpu_prefill_ms" in x for pair in pairs for x in pair):
            cpu_prefill.append(statistics.median(
                [math.log(h["cpu_prefill_ms"] / b["cpu_prefill_ms"]) for b, h in pairs]))
        raw.append(got)
        print(f"round {r + 1}/{a.rounds}: step {step[-1]:+.4f} prefill {prefill[-1]:+.4f}", flush=True)
    out = {"rounds": a.rounds, "requests": a.requests}
    rows = [("decode_step", step), ("prefill", prefill)]
    if len(cpu_step) == a.rounds:
        rows.append(("decode_step_cpu", cpu_step))
    if len(cpu_prefill) == a.rounds:
        rows.append(("prefill_cpu", cpu_prefill))
    for name, xs in rows:
        est, lo, hi = hodges_lehmann(xs)
        out[name] = {
            "estimate": math.expm1(est),
            "ci_low": math.expm1(lo),
            "ci_high": math.expm1(hi),
            "per_round_log_ratio": xs,
            "per_round_sd": statistics.stdev(xs),
        }
        print(f"{name}: {math.expm1(est) * 100:+.2f} % [{math.expm1(lo) * 100:+.2f}, "
              f"{math.expm1(hi) * 100:+.2f}] (per-round sd {statistics.stdev(xs):.4f})")
    if a.out:
        out["raw"] = raw
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
