#!/usr/bin/env python3
"""One benchmark row, two bench executables (base and patched), criterion runs alternated AB/BA:
how the measured change depends on the run's setting. A diagnostic for a row where the gate and
the corpus's ground truth disagree (README.md, "Findings while measuring"), not part of the
procedure.

Settings (--mode, repeatable):
  long          criterion as the ground truth runs it: 0.5 s warm-up, 1.0 s, 20 samples,
                unpinned, but only this row in the process (criterion filter `^ID$`)
  long-pinned   the same with the process and its threads pinned to CPU 1
  short-pinned  the gate's sampling (0.25 s, 50 samples), pinned to CPU 1

Per repetition the log ratio of the two runs' lower quartiles of time per iteration (the gate's
and the ground truth's per-round number), and their median.

  context_check.py --base EXE --head EXE --id matmul/bf16_t1/32x1024x1024 --reps 6 \\
      --mode long --mode long-pinned --mode short-pinned
Standard library only. Every child process has a deadline.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

MODES = {"long": (1.0, 20, None), "long-pinned": (1.0, 20, 1), "short-pinned": (0.25, 50, 1)}


def criterion(exe, bid, measurement, samples, cpu, home):
    """One criterion run of `bid` alone; (lower quartile, mean) of time per iteration, ns."""
    shutil.rmtree(home, ignore_errors=True)
    cmd = [exe, "--bench", "--warm-up-time", "0.5", "--measurement-time", str(measurement),
           "--sample-size", str(samples), "--noplot", f"^{bid}$"]
    subprocess.run(cmd, env={**os.environ, "CRITERION_HOME": str(home)}, capture_output=True,
                   check=True, timeout=300,
                   preexec_fn=None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu})))
    for sample in Path(home).rglob("new/sample.json"):
        s = json.loads(sample.read_text())
        per = sorted(t / i for t, i in zip(s["times"], s["iters"]))
        return per[len(per) // 4], statistics.mean(per)
    raise SystemExit(f"error: {exe}: no result for {bid}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--mode", action="append", choices=sorted(MODES), required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="context-check-") as tmp:
        for mode in a.mode:
            mt, ss, cpu = MODES[mode]
            res = {"base": [], "head": []}
            for r in range(a.reps):
                for side in (("base", "head") if r % 2 == 0 else ("head", "base")):
                    res[side].append(criterion(getattr(a, side), a.id, mt, ss, cpu,
                                               Path(tmp) / side))
            lr = [math.log(h[0] / b[0]) for b, h in zip(res["base"], res["head"])]
            print(f"{a.id} {mode}: median log ratio {100 * statistics.median(lr):+.1f} % "
                  f"(per repetition {', '.join(f'{100 * x:+.0f}' for x in lr)}); lower quartiles, "
                  f"ms: base {[round(x[0] / 1e6, 2) for x in res['base']]} "
                  f"head {[round(x[0] / 1e6, 2) for x in res['head']]}", flush=True)


if __name__ == "__main__":
    main()
