#!/usr/bin/env python3
"""Per-process speed of one served benchmark: start the bench executable N times (each pinned to
one CPU, serving BENCH as the harness does), time a few samples in each, and print each
process's best ns per iteration beside the low 12 bits of its stack start (`startstack` of
/proc/PID/stat: the stack's placement within a 4 KiB page, randomised per process). A row
whose processes fall into a fast and a slow group, with the group set by the stack offset, has a
placement cause (a buffer on the stack straddling a cache line or a page) rather than the host.

Usage: process_speeds.py EXE BENCH [--processes 40] [--iters N] [--samples 5] [--cpu 1]
                         [--cpus 1,2,3 ...] [--json FILE]
`--cpus` runs that many processes at once, one per listed CPU (each pinned to its own), for
rare states that need thousands of processes to show. Standard library only; every process has
a deadline.
"""

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time


def read_line(p, deadline):
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.time()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            raise TimeoutError("no answer")
        c = p.stdout.read1(1)
        if not c:
            raise EOFError("closed")
        buf += c
    return buf.decode()


def one(exe, bench, iters, samples, cpu):
    env = {**os.environ, "HARNESS_BENCH_SERVE": bench}
    # taskset, not preexec_fn: this runs in threads (--cpus), where preexec_fn is not safe.
    p = subprocess.Popen(["taskset", "-c", str(cpu), exe, "--bench"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    try:
        while True:
            line = read_line(p, deadline)
            if line.startswith("harness-serve ready"):
                break
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        startstack = int(fields[25])  # field 28 of stat; fields[0] is field 3
        best_wall, best_cpu = [], []
        for _ in range(samples):
            p.stdin.write(f"{iters}\n".encode())
            p.stdin.flush()
            while True:
                parts = read_line(p, deadline).split()
                if parts[0] == "harness-serve" and parts[1].isdigit():
                    break
            n = int(parts[1])
            best_wall.append(int(parts[2]) / n)
            if len(parts) >= 4:
                best_cpu.append(int(parts[3]) / n)
        return {"pid": p.pid, "cpu": cpu, "startstack": startstack,
                "stack_in_page": startstack % 4096,
                "ns_wall": min(best_wall), "ns_cpu": min(best_cpu) if best_cpu else None}
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def offset_summary(rows, med):
    """How much of the processes' spread their stack offsets explain: the share of the variance
    of log(ns) between the offsets' means, over all processes and over those within 1.5x of the
    median; and the spread of those (sd of log ns, the 5th-95th percentile of ns / median)."""
    import math

    def share(keep):
        g = {}
        for r in rows:
            t = r["ns_cpu"] or r["ns_wall"]
            if keep(t):
                g.setdefault(r["stack_in_page"], []).append(math.log(t))
        xs = [x for v in g.values() for x in v]
        if len(xs) < 3:
            return float("nan"), len(g)
        m = statistics.mean(xs)
        total = sum((x - m) ** 2 for x in xs)
        between = sum(len(v) * (statistics.mean(v) - m) ** 2 for v in g.values())
        return (between / total if total > 0 else float("nan")), len(g)

    all_share, offsets = share(lambda t: True)
    rest_share, _ = share(lambda t: t <= 1.5 * med)
    rest = [(r["ns_cpu"] or r["ns_wall"]) / med for r in rows]
    rest = [x for x in rest if x <= 1.5]
    q = statistics.quantiles(rest, n=20) if len(rest) >= 20 else [float("nan")] * 19
    sd = statistics.stdev(math.log(x) for x in rest) if len(rest) >= 2 else float("nan")
    return (f"stack offsets seen: {offsets}; variance of log(ns) between offsets: "
            f"{100 * all_share:.1f} % of all, {100 * rest_share:.1f} % without the > 1.5x; "
            f"those: sd {100 * sd:.2f} %, 5-95 % of ns/median {q[0]:.3f}-{q[-1]:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("exe")
    ap.add_argument("bench")
    ap.add_argument("--processes", type=int, default=40)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--cpus", help="comma-separated CPUs to run processes on at once")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    cpus = [int(c) for c in a.cpus.split(",")] if a.cpus else [a.cpu]
    from concurrent.futures import ThreadPoolExecutor
    from queue import Queue
    free = Queue()
    for c in cpus:
        free.put(c)

    def on_a_free_cpu(_):
        c = free.get()
        try:
            return one(a.exe, a.bench, a.iters, a.samples, c)
        finally:
            free.put(c)

    with ThreadPoolExecutor(len(cpus)) as pool:
        rows = list(pool.map(on_a_free_cpu, range(a.processes)))
    med = statistics.median(r["ns_cpu"] or r["ns_wall"] for r in rows)
    for r in sorted(rows, key=lambda r: r["stack_in_page"]):
        t = r["ns_cpu"] or r["ns_wall"]
        if a.processes > 100 and t <= 1.5 * med:
            continue  # with thousands of processes only the slow ones are listed
        print(f"stack +{r['stack_in_page']:4d} (0x{r['stack_in_page']:03x})  "
              f"{t:9.1f} ns  {t / med:5.2f}x {'SLOW' if t > 1.5 * med else ''}")
    slow = sum((r["ns_cpu"] or r["ns_wall"]) > 1.5 * med for r in rows)
    print(f"{a.bench}: {slow} of {len(rows)} processes > 1.5x the median ({med:.1f} ns)")
    print(offset_summary(rows, med))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": a.bench, "exe": a.exe, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
