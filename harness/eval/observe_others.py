#!/usr/bin/env python3
"""Watches, from outside, how many cores processes other than a running harness keep busy:
every 2 s, the machine's busy ticks (`/proc/stat`: user, nice, system, irq, softirq) less those
of the process tree of every process whose name starts with `harness` (utime, stime, cutime,
cstime of each), over the interval. The gate's own reading (`host::others_cores`, harness/STATS.md
§18) is the same quantity taken around each multi-threaded measurement; this script was used to
see what it reads on a quiet machine and under the evaluation's one-core load before the rule
existed. Windows in which the tree gains or loses processes (builds, the run's start and end)
give large spikes of either sign: read the measuring phase only.

    python3 harness/eval/observe_others.py > others.log   # stop with Ctrl-C

Lines: `HH:MM:SS others <cores> own <cores> steal <cores>`. Standard library only, Linux.
"""

import os
import time

HZ = os.sysconf("SC_CLK_TCK")


def machine():
    """(busy, steal) ticks of all CPUs."""
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:9]))
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq, steal


def processes():
    """pid -> (name, ppid, utime + stime, cutime + cstime)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        r = s.rindex(")")
        name, f = s[s.index("(") + 1:r], s[r + 2:].split()
        out[int(p)] = (name, int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))
    return out


def tree_ticks(ps):
    """Ticks of every harness process and its descendants, and how many harness roots."""
    roots = [p for p, v in ps.items() if v[0].startswith("harness")]
    kids = {}
    for p, v in ps.items():
        kids.setdefault(v[1], []).append(p)
    seen, stack, total = set(), list(roots), 0
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += ps[p][2] + ps[p][3]
        stack += kids.get(p, [])
    return total, len(roots)


def main():
    prev = None
    while True:
        t = time.time()
        busy, steal = machine()
        own, roots = tree_ticks(processes())
        if prev and roots and prev[4]:
            dt = t - prev[0]
            print(f"{time.strftime('%H:%M:%S')} others "
                  f"{(busy - prev[1] - (own - prev[3])) / HZ / dt:.3f} "
                  f"own {(own - prev[3]) / HZ / dt:.3f} steal {(steal - prev[2]) / HZ / dt:.3f}",
                  flush=True)
        prev = (t, busy, steal, own, roots)
        time.sleep(2)


if __name__ == "__main__":
    main()
