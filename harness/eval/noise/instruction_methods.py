#!/usr/bin/env python3
"""Instruction counts per iteration of one served benchmark by the harness's two methods, many
times over, to compare their process-to-process spread (harness/STATS.md §14):

  one process   callgrind dumps after each request of n, n, 2n (`--dump-after`); (I3 - I2) / n
  two processes one process serves n, another 2n; (I(2n) - I(n)) / n

Usage: instruction_methods.py EXE ID N --repeats R --out FILE.json [--one-only] [--preload LIB]
The executable must have the serve loop's `one_request` (engine/benches/common/group.rs). Each
valgrind run has a 300 s deadline. `--one-only` runs the one-process method alone; `--preload`
puts LIB in the counted process's LD_PRELOAD (valgrind's environment only, not this script's),
as the harness does with its fixed `getrandom` (harness/src/measure/fixed_getrandom.c).
Standard library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TOGGLE = "*common::group::serve*"
DUMP_AFTER = "*common::group::one_request*"


def totals(path):
    for line in Path(path).read_text().splitlines():
        for key in ("summary:", "totals:"):
            if line.startswith(key):
                return int(line[len(key):].split()[0])
    raise SystemExit(f"no totals in {path}")


def run(exe, bench_id, samples, work, dump, preload=None):
    out = Path(work) / "cg.out"
    for p in Path(work).iterdir():
        p.unlink()
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={TOGGLE}",
           f"--callgrind-out-file={out}"]
    if dump:
        cmd.append(f"--dump-after={DUMP_AFTER}")
    cmd += [exe, "--bench", "--list"]
    env = dict(os.environ, HARNESS_BENCH_SERVE=bench_id)
    if preload:
        env["LD_PRELOAD"] = str(Path(preload).resolve())
    subprocess.run(cmd, input="".join(f"{n}\n" for n in samples), text=True, env=env,
                   cwd=Path(exe).parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300, check=True)
    if dump:
        return [totals(Path(work) / f"cg.out.{k}") for k in range(1, len(samples) + 1)]
    return [totals(out)]


def spread(xs):
    return (max(xs) - min(xs)) / statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("id")
    ap.add_argument("n", type=int)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("--one-only", action="store_true")
    ap.add_argument("--preload")
    a = ap.parse_args()
    one, two, first = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for r in range(a.repeats):
            p = run(a.exe, a.id, [a.n, a.n, 2 * a.n], work, True, a.preload)
            one.append((p[2] - p[1]) / a.n)
            first.append((p[2] - p[0]) / a.n)
            if not a.one_only:
                i1 = run(a.exe, a.id, [a.n], work, False, a.preload)[0]
                i2 = run(a.exe, a.id, [2 * a.n], work, False, a.preload)[0]
                two.append((i2 - i1) / a.n)
            print(f"[{r + 1}/{a.repeats}] one process {one[-1]:.1f}"
                  + ("" if a.one_only else f", two processes {two[-1]:.1f}"),
                  file=sys.stderr, flush=True)
    res = {"exe": a.exe, "id": a.id, "n": a.n, "repeats": a.repeats, "preload": a.preload}
    methods = [("one_process", one), ("one_process_first_sample", first)]
    if not a.one_only:
        methods.append(("two_processes", two))
    for name, xs in methods:
        res[name] = {"per_iteration": xs, "median": statistics.median(xs),
                     "sd_rel": statistics.stdev(xs) / statistics.mean(xs),
                     "spread": spread(xs)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    for name, _ in methods:
        x = res[name]
        print(f"{name}: median {x['median']:.1f}, sd {100 * x['sd_rel']:.4f} %, "
              f"spread {100 * x['spread']:.4f} %")


if __name__ == "__main__":
    main()
