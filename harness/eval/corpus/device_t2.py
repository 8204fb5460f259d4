#!/usr/bin/env python3
"""The two-thread rows' ground truth on a dedicated machine (README.md, step 2's second
amendment of 2026-12-04): this 2-vCPU VM cannot give `matmul/*_t2/*` rows a truth finer than
±10-40 % (the A/A of step 2's first amendment), so their criterion rounds run on the device
host, two physical cores per job.

  pack     here: for the base and every case whose reach (reach.json) has `_t2` rows, the
           `matmul` bench executable, built in release from a throwaway clone exactly as
           ground_truth.py builds it, stripped, into DIR (git-ignored, carried to the device),
           with DIR/manifest.json: per job its two executables and its exact-id filter. Job
           `aa` is the base against itself on all nine `_t2` rows, the method's check.
  run      there: every job's rounds (ground_truth.py's: AB/BA by round, one criterion process
           per side and round, the lower quartile of its samples, Hodges-Lehmann with its exact
           95 % interval), each job pinned to its own two physical cores (one logical CPU of
           each; the first physical core left to the system), the jobs side by side on disjoint
           pairs, queued when there are more jobs than pairs. Jobs not finished by --budget-s
           are stopped and left out; one JSON with every finished job -> --out.
  unpack   here: that JSON into OUT_DIR/JOB/ground-truth.json, one per job (the schema of
           ground_truth.py, with the machine's description); OUT_DIR defaults to
           ../results/corpus/ground-truth-t2/, where `gate_cases.py --ground-t2` reads.

Usage:
  python3 harness/eval/corpus/device_t2.py pack --rev SHA [--dir .device/t2]
  (device) python3 harness/eval/corpus/device_t2.py run --dir .device/t2 --out $OUT/t2.json
  python3 harness/eval/corpus/device_t2.py unpack FILE
Standard library only. Every child process has a deadline.
"""

import argparse
import gzip
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVAL = HERE.parent
REPO = HERE.parents[2]
sys.path.insert(0, str(EVAL))
import ground_truth as gt  # noqa: E402
from measure import BENCH_IDS  # noqa: E402  (the full suite's benchmark ids)

RESULTS = EVAL / "results" / "corpus"
TWO_THREAD = re.compile(r"^matmul/(f32|f16|bf16)_t2/")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def two_thread_ids(reach):
    """The full suite's `_t2` benchmark ids that a case's reach patterns match."""
    return [b for b in BENCH_IDS if TWO_THREAD.search(b) and any(re.search(p, b) for p in reach)]


def exact_filter(ids):
    return "^(?:" + "|".join(re.escape(b) for b in ids) + ")$"


def pack(a):
    reach = json.loads((HERE / "reach.json").read_text())
    rev = gt.run(["git", "-C", str(REPO), "rev-parse", a.rev]).stdout.strip()
    out = Path(a.dir)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    all_t2 = [b for b in BENCH_IDS if TWO_THREAD.search(b)]
    jobs = {"aa": {"base": "base", "case": "base", "ids": all_t2}}
    for case, r in reach.items():
        ids = two_thread_ids(r["reach"])
        if ids:
            jobs[case] = {"base": "base", "case": case, "ids": ids}
    cache = Path(a.cache_dir)
    with tempfile.TemporaryDirectory(prefix="device-t2-") as tmp:
        tmp = Path(tmp)
        for name in ["base"] + [j for j in jobs if j != "aa"]:
            patch = None if name == "base" else HERE / f"{name}.patch"
            log(f"building {name}'s matmul bench")
            tree = gt.prepare_side(tmp, name, rev, patch)
            exe = gt.build(tree, cache / ("target-base" if name == "base" else "target-case"),
                           ["matmul"])["matmul"]
            shutil.copy2(exe, out / name)
            gt.run(["strip", str(out / name)])
            # Compressed to travel (4.7 MB → 1.8 MB each); `run` unpacks them.
            with open(out / name, "rb") as src, gzip.GzipFile(
                    out / f"{name}.gz", "wb", compresslevel=9, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
            (out / name).unlink()
            shutil.rmtree(tree)
    (out / "manifest.json").write_text(json.dumps(
        {"schema": "harness-eval-device-t2/1", "rev": rev, "jobs": jobs}, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir()) / 2 ** 20
    log(f"wrote {out} ({len(jobs)} jobs, {size:.1f} MiB)")


def physical_pairs():
    """Pairs of logical CPUs on distinct physical cores (one logical CPU per core), the first
    core left out; from sysfs topology, within this process's allowed CPUs."""
    first_of_core = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            key = ((topo / "physical_package_id").read_text().strip(),
                   (topo / "core_id").read_text().strip())
        except OSError:
            key = ("?", str(cpu))
        first_of_core.setdefault(key, cpu)
    cpus = sorted(first_of_core.values())[1:]
    return [(cpus[i], cpus[i + 1]) for i in range(0, len(cpus) - 1, 2)]


def unpacked(d, name):
    """The executable `name` of `d`, unpacked from `name.gz` when it is not there yet."""
    exe = d / name
    if not exe.is_file():
        with gzip.open(d / f"{name}.gz", "rb") as src, open(exe, "wb") as dst:
            shutil.copyfileobj(src, dst)
        exe.chmod(0o755)
    return str(exe)


def run_job(name, job, d, rounds, args, cpus, deadline, results):
    started = time.time()
    exes = {side: str(d / job[side]) for side in ("base", "case")}
    filt = exact_filter(job["ids"])
    per_round = {"base": [], "case": []}
    with tempfile.TemporaryDirectory(prefix=f"t2-{name}-") as tmp:
        tmp = Path(tmp)
        for r in range(rounds):
            order = ["base", "case"] if r % 2 == 0 else ["case", "base"]
            for side in order:
                left = deadline - time.time()
                if left < 5:
                    log(f"{name}: stopped at round {r + 1}/{rounds} (budget)")
                    return
                per_round[side].append(gt.measure(exes[side], filt, args, tmp / f"home-{side}",
                                                  cpus, timeout=left))
            log(f"{name}: round {r + 1}/{rounds} on CPUs {cpus}")
    rows = {}
    for bid in job["ids"]:
        dl = [math.log(c[bid] / b[bid]) for b, c in zip(per_round["base"], per_round["case"])
              if b.get(bid) and c.get(bid)]
        est, lo, hi = gt.hodges_lehmann(dl)
        rows[bid] = {"rounds": len(dl), "log_ratios": dl, "change": math.expm1(est),
                     "ci95": [None if lo is None else math.expm1(lo),
                              None if hi is None else math.expm1(hi)]}
    results[name] = {"cpus": list(cpus), "wall_s": round(time.time() - started, 1),
                     "filter": filt, "rows": rows}


def run(a):
    d = Path(a.dir).resolve()
    manifest = json.loads((d / "manifest.json").read_text())
    jobs = manifest["jobs"]
    if a.jobs:
        jobs = {j: jobs[j] for j in a.jobs.split(",")}
    for job in jobs.values():  # before the threads start: no two unpack one file at once
        for side in ("base", "case"):
            unpacked(d, job[side])
    pairs = physical_pairs()
    if not pairs:
        raise SystemExit("error: fewer than three physical cores: no pair to pin a job to")
    args = ["--warm-up-time", "0.5", "--measurement-time", str(a.measurement),
            "--sample-size", "20", "--noplot"]
    deadline = time.time() + a.budget_s
    log(f"{len(jobs)} jobs on {len(pairs)} core pairs {pairs}, budget {a.budget_s} s")
    # Largest jobs first, so the queue ends with short ones.
    queue = sorted(jobs, key=lambda j: -len(jobs[j]["ids"]))
    results, lock = {}, threading.Lock()

    def worker(cpus):
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop(0)
            run_job(name, jobs[name], d, a.rounds, args, cpus, deadline, results)

    threads = [threading.Thread(target=worker, args=(p,)) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), platform.processor())
    rec = {"schema": "harness-eval-device-t2-results/1", "rev": manifest["rev"],
           "machine": {"model": model, "logical_cpus": os.cpu_count(), "pairs": pairs,
                       "lscpu": lscpu},
           "rounds": a.rounds, "criterion_args": args, "jobs": results,
           "not_finished": sorted(set(jobs) - set(results))}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    for name, r in results.items():
        for bid, row in r["rows"].items():
            lo, hi = row["ci95"]
            print(f"{name} {bid}: {row['change'] * 100:+.1f} % "
                  f"[{'—' if lo is None else f'{lo * 100:+.1f}'}, "
                  f"{'—' if hi is None else f'{hi * 100:+.1f}'}]")
    log(f"wrote {a.out}; not finished: {rec['not_finished']}")


def unpack(a):
    rec = json.loads(Path(a.file).read_text())
    machine = {k: rec["machine"][k] for k in ("model", "logical_cpus")}
    for name, r in rec["jobs"].items():
        out = Path(a.out_dir) / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "ground-truth.json").write_text(json.dumps(
            {"schema": "harness-eval-ground-truth/1", "case": name, "rev": rec["rev"],
             "targets": ["matmul"], "filter": r["filter"], "rounds": rec["rounds"],
             "processes": 1, "criterion_args": rec["criterion_args"], "cpu": r["cpus"],
             "aa": name == "aa", "machine": machine, "wall_s": r["wall_s"],
             "rows": r["rows"]}, indent=1) + "\n")
        log(f"wrote {out / 'ground-truth.json'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--rev", required=True, help="the base revision of every case")
    p.add_argument("--dir", default=str(REPO / ".device" / "t2"))
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "decoder-gate" /
                                                  "ground-truth"))
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".device" / "t2"))
    r.add_argument("--out", required=True)
    r.add_argument("--rounds", type=int, default=12)
    r.add_argument("--measurement", type=float, default=1.0)
    r.add_argument("--jobs", default=None, help="comma-separated job names (default: all)")
    r.add_argument("--budget-s", type=float, default=540.0,
                   help="jobs not finished by then are stopped and left out")
    u = sub.add_parser("unpack")
    u.add_argument("file")
    u.add_argument("--out-dir", default=str(RESULTS / "ground-truth-t2"),
                   help="one JSON per job under OUT_DIR/JOB/ (default: where gate_cases.py's "
                        "--ground-t2 reads; a method check goes under ../results/corpus/checks/)")
    a = ap.parse_args()
    {"pack": pack, "run": run, "unpack": unpack}[a.cmd](a)


if __name__ == "__main__":
    main()
