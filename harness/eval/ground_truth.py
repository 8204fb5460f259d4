#!/usr/bin/env python3
"""Ground truth for the realistic PR cases of harness/eval/cases/, measured apart from the gate.

For one case: two throwaway clones of the repository (`git clone --shared`, nothing written to
the repository itself) at the base revision, the case's patch applied to one; each side's
benchmarks built once with its own target dir; then long criterion runs of both sides,
alternating AB / BA by round, each run with its own CRITERION_HOME. Per benchmark and round the
number is criterion's samples' lower quartile of time per iteration (the same per-round estimate
as the gate's, harness/STATS.md section 2, so the truth is about the quantity the gate
estimates), the round's log ratio ln(case / base), and over the rounds the Hodges-Lehmann
estimate with an exact signed-rank 95 % interval (the gate's `rule: resolution` uses the same
method; here at the plain 95 % level, nothing corrected, longer runs and more rounds).
With `--processes K`, each side runs K criterion processes per round (pairs alternating which
side goes first) and a side's round value is the median over its K processes: the method of the
two-thread rows, whose single processes can be slow for their whole life (corpus/README.md).
With `--processes K --paired`, a round's log ratio is instead the median over its K adjacent
(base, case) process pairs of ln(case / base): the method of the sampling rows, whose speed
moves between two levels on a scale of seconds, so only processes run next to each other
compare like with like (corpus/README.md, finding 6).

With `--placement N`, each side's bench executables are also linked in N function orders
(noise/relink.sh: lld's --shuffle-sections, nothing recompiled; seeds 1001, 1003, … for the base
and 1002, 1004, … for the case, apart from any seed the gate draws) and round r runs order
r mod N of each side: the truth of the change averaged over code placement, the quantity the gate
estimates with `placement.sample` (harness/STATS.md §17); with `--e2e`, the engine binaries too
(round r of noise/e2e_ground_truth.py runs order r mod N). Without it, the truth of the two links
cargo made, placement included.

With `--e2e`, also the tiny model's CPU e2e speed rows (decode step and prefill per golden
prompt, in the thread's CPU time as the gate measures them): noise/e2e_ground_truth.py with both
sides' `engine` binaries, after the benchmarks' rounds. `--targets ''` measures only those.

Usage (one case at a time; resumable only by rerunning the case):
  python3 harness/eval/ground_truth.py --case gather-element-loop --filter '^gather/' \\
      --rounds 15 --out harness/eval/results/ground-truth
Standard library only. Every child process has a deadline.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import procs

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "harness" / "eval" / "cases"
BUILD_TIMEOUT_S = 3600
RUN_TIMEOUT_S = 1800


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, cwd=None, env=None, timeout=RUN_TIMEOUT_S):
    return procs.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True,
                     timeout=timeout)


# ----------------------------------------------------------------------------------------------
# Pure parts (tested in test_ground_truth.py)


def lower_quartile(values):
    """Type-7 quantile at 0.25 (Hyndman & Fan 1996), as the harness's round estimate."""
    v = sorted(values)
    if not v:
        return None
    h = (len(v) - 1) * 0.25
    lo = math.floor(h)
    return v[lo] + (h - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])


def round_value(sample):
    """A criterion sample.json's per-round number: the lower quartile of time per iteration."""
    per = [t / i for i, t in zip(sample["iters"], sample["times"]) if i > 0]
    return lower_quartile(per)


def signed_rank_cdf(n):
    """P(W+ <= w) for w = 0..n(n+1)/2: the exact null distribution of the signed-rank statistic."""
    total = n * (n + 1) // 2
    counts = [0] * (total + 1)
    counts[0] = 1
    for k in range(1, n + 1):
        for s in range(total, k - 1, -1):
            counts[s] += counts[s - k]
    acc, out = 0, []
    for c in counts:
        acc += c
        out.append(acc / 2 ** n)
    return out


def side_values(runs):
    """One side's round value per benchmark from its `runs` (each a {benchmark id: value} of one
    process): the median over the processes that report the benchmark (the upper median of an
    even count, so the value is always one process's own). With several processes per side and
    round, one process that is slow for its whole life (harness/STATS.md §13, the vCPU
    wake-up) no longer decides the round."""
    out = {}
    for bid in {b for r in runs for b in r}:
        v = sorted(r[bid] for r in runs if r.get(bid) is not None)
        if v:
            out[bid] = v[len(v) // 2]
    return out


def paired_round(base_runs, case_runs):
    """A round's log ratio per benchmark from its (base, case) process pairs, `base_runs[k]` and
    `case_runs[k]` run next to each other (`process_order`): the median over the pairs that
    both report the benchmark of ln(case / base), and the pairs' own log ratios."""
    out = {}
    for bid in {b for r in base_runs + case_runs for b in r}:
        d = [math.log(c[bid] / b[bid]) for b, c in zip(base_runs, case_runs)
             if b.get(bid) and c.get(bid)]
        if d:
            out[bid] = (statistics.median(d), d)
    return out


def process_order(rnd, processes):
    """The order of a round's 2 × `processes` criterion runs: pairs alternate base-first and
    case-first (AB BA AB … from an even round, BA AB BA … from an odd one), so neither side
    always runs first, nor always right after the other side."""
    out = []
    for k in range(processes):
        out += ["base", "case"] if (rnd + k) % 2 == 0 else ["case", "base"]
    return out


def hodges_lehmann(d, confidence=0.95):
    """Median of the Walsh averages and the exact signed-rank interval at `confidence` (two-sided,
    (1 - confidence) / 2 in each tail); bounds are None when n rounds cannot reach the level."""
    n = len(d)
    walsh = sorted((d[i] + d[j]) / 2 for i in range(n) for j in range(i, n))
    m = len(walsh)
    est = walsh[m // 2] if m % 2 else (walsh[m // 2 - 1] + walsh[m // 2]) / 2
    alpha = (1 - confidence) / 2
    cut = sum(1 for p in signed_rank_cdf(n) if p <= alpha)
    if cut == 0:
        return est, None, None
    return est, walsh[cut - 1], walsh[m - cut]


def truth_row(d):
    """A row's truth from its rounds' log ratios `d`: the Hodges-Lehmann estimate and 95 %
    interval, each turned from a log ratio into a fraction (expm1), beside the rounds."""
    est, lo, hi = (None if x is None else math.expm1(x) for x in hodges_lehmann(d))
    return {"rounds": len(d), "log_ratios": d, "change": est, "ci95": [lo, hi]}


# ----------------------------------------------------------------------------------------------


def prepare_side(root, name, rev, patch):
    d = root / name
    run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(d)])
    run(["git", "-C", str(d), "checkout", "-q", "--detach", rev])
    if patch is not None:
        run(["git", "-C", str(d), "apply", str(patch)])
    return d


def executables(cmd, tree, target_dir, kind):
    """Runs the cargo command `cmd` (with `--message-format=json`) in `tree` with its own target
    dir; the executables it built whose target kind is `kind`, by target name."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    out = run(cmd, cwd=tree, env=env, timeout=BUILD_TIMEOUT_S).stdout
    exes = {}
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("executable") and \
                kind in m["target"]["kind"]:
            exes[m["target"]["name"]] = m["executable"]
    return exes


def build(tree, target_dir, targets):
    """The bench executables of `targets` (name → path)."""
    cmd = ["cargo", "bench", "--no-run", "--message-format=json", "-p", "engine"]
    for t in targets:
        cmd += ["--bench", t]
    exes = executables(cmd, tree, target_dir, "bench")
    missing = set(targets) - set(exes)
    if missing:
        raise SystemExit(f"error: {tree}: no bench executable for {sorted(missing)}")
    return exes


def placement_seeds(side, n):
    """The function-order seeds of `side` under --placement n: odd for the base, even for the
    case, from 1001 (the gate's seeds are 2r+1 and 2r+2 for its rounds r, far below)."""
    first = 1001 if side == "base" else 1002
    return [first + 2 * i for i in range(n)]


def relinked(tree, target_dir, targets, seeds, out):
    """`targets`' executables of `tree` linked in each of `seeds`' function orders
    (noise/relink.sh; the tree's build in `target_dir` reused): {target: [path per seed]}."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    run([str(REPO / "harness" / "eval" / "noise" / "relink.sh"), str(tree), str(out),
         ",".join(map(str, seeds))] + list(targets), env=env, timeout=BUILD_TIMEOUT_S)
    paths = {t: [out / f"{t.removeprefix('bin:')}-s{s}" for s in seeds] for t in targets}
    missing = [str(p) for ps in paths.values() for p in ps if not p.is_file()]
    if missing:
        raise SystemExit(f"error: relink.sh left no {missing[0]}")
    return paths


def build_engine(tree, target_dir):
    """The `engine` binary of `tree` (release, the target dir of its benchmarks)."""
    cmd = ["cargo", "build", "--release", "--message-format=json", "-p", "engine", "--bin",
           "engine"]
    exe = executables(cmd, tree, target_dir, "bin").get("engine")
    if exe is None:
        raise SystemExit(f"error: {tree}: no engine executable")
    return exe


def e2e_rows(engines, tmp, rounds, requests):
    """The tiny model's CPU e2e speed rows (`tiny/<golden>/cpu-f32` and `.../prefill`, as the
    gate names them): per golden prompt of goldens/tiny/, `noise/e2e_ground_truth.py` with the
    two engines (seed-0 tiny model, the golden's prompt ids and token count, one thread, both
    pinned to one CPU), in the decoding thread's CPU time, the clock the gate uses for these rows
    (harness/STATS.md §16). Wall-time estimates kept beside."""
    model = tmp / "tiny-seed0"
    # A side's engines may be several orders of one build, comma-separated (--placement).
    run([engines["base"].split(",")[0], "tiny", "--seed", "0", "--out", str(model)])
    rows = {}
    for golden in sorted((REPO / "goldens" / "tiny").glob("*.json")):
        g = json.loads(golden.read_text())
        res = tmp / f"e2e-{golden.stem}.json"
        log(f"e2e {golden.stem}: {rounds} rounds of {requests} request pairs")
        run([sys.executable, str(REPO / "harness" / "eval" / "noise" / "e2e_ground_truth.py"),
             "--base", engines["base"], "--head", engines["case"], "--model", str(model),
             "--prompt-ids", ",".join(str(i) for i in g["prompt_ids"]),
             "--tokens", str(g["max_new_tokens"]), "--rounds", str(rounds),
             "--requests", str(requests), "--out", str(res)])
        r = json.loads(res.read_text())
        for suffix, cpu, wall in (("", "decode_step_cpu", "decode_step"),
                                  ("/prefill", "prefill_cpu", "prefill")):
            if cpu not in r:
                raise SystemExit(f"error: {golden.stem}: the engines report no CPU time ({cpu})")
            x = r[cpu]
            rows[f"tiny/{golden.stem}/cpu-f32{suffix}"] = {
                "rounds": rounds, "clock": "thread_cpu",
                "log_ratios": x["per_round_log_ratio"], "change": x["estimate"],
                "ci95": [x["ci_low"], x["ci_high"]],
                "wall": {k: r[wall][k] for k in ("estimate", "ci_low", "ci_high")}}
    return rows


def measure(exe, filt, args, home, cpu=None, timeout=RUN_TIMEOUT_S):
    """One criterion run into `home` (pinned, with its threads, to CPU `cpu` when given: one
    CPU number or a set of them); per benchmark id its round value."""
    cpus = None if cpu is None else ({cpu} if isinstance(cpu, int) else set(cpu))
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    cmd = [exe, "--bench", *args] + ([filt] if filt else [])
    procs.run(cmd, cwd=Path(exe).parent, env={**os.environ, "CRITERION_HOME": str(home)},
              check=True, capture_output=True, text=True, timeout=timeout,
              preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))
    out = {}
    for bench in home.rglob("new/benchmark.json"):
        b = json.loads(bench.read_text())
        sample = json.loads((bench.parent / "sample.json").read_text())
        out[b["full_id"]] = round_value(sample)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True, help="a patch name under --cases-dir")
    ap.add_argument("--cases-dir", default=str(CASES),
                    help="where the NAME.patch files are (default harness/eval/cases)")
    ap.add_argument("--rev", default="HEAD", help="base revision (default HEAD)")
    ap.add_argument("--targets", default="kernels,matmul,sampling,kv_cache,tokenization,decode",
                    help="bench targets to build and run")
    ap.add_argument("--filter", default=None, help="criterion filter regex (default: all)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--processes", type=int, default=1,
                    help="criterion processes per side and round; a side's round value is the "
                         "median over them (the two-thread rows' method, corpus/README.md)")
    ap.add_argument("--paired", action="store_true",
                    help="with --processes K: a round's log ratio is the median of its K "
                         "adjacent process pairs' (the sampling rows' method, corpus/README.md)")
    ap.add_argument("--warm-up", type=float, default=0.5)
    ap.add_argument("--measurement", type=float, default=1.5)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin every criterion run, all its threads, to this CPU (a method check; "
                         "the ground truth itself runs unpinned, as `cargo bench` does)")
    ap.add_argument("--aa", action="store_true",
                    help="a method check: both sides run the base's executables (the patch is "
                         "not built); every row's truth should then be 0")
    ap.add_argument("--placement", type=int, default=0, metavar="N",
                    help="run round r in function order r mod N of each side (relinks; the "
                         "truth averaged over code placement); 0: cargo's one link per side")
    ap.add_argument("--e2e", action="store_true",
                    help="also the tiny model's CPU e2e speed rows (noise/e2e_ground_truth.py)")
    ap.add_argument("--e2e-rounds", type=int, default=30)
    ap.add_argument("--e2e-requests", type=int, default=40,
                    help="request pairs per e2e round (a tiny decode is ~4 ms)")
    ap.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "decoder-gate" /
                                                   "ground-truth"))
    ap.add_argument("--out", default=str(REPO / "harness" / "eval" / "results" / "ground-truth"))
    a = ap.parse_args()
    if a.processes < 1:
        raise SystemExit(f"error: --processes {a.processes}: at least 1")
    if a.paired and a.processes < 2:
        raise SystemExit("error: --paired needs --processes 2 or more (the pairs of a round)")
    patch = Path(a.cases_dir) / f"{a.case}.patch"
    if not patch.is_file():
        raise SystemExit(f"error: --case {a.case}: no {patch}")
    rev = run(["git", "-C", str(REPO), "rev-parse", a.rev]).stdout.strip()
    targets = [t for t in a.targets.split(",") if t]
    cache = Path(a.cache_dir)
    args = ["--warm-up-time", str(a.warm_up), "--measurement-time", str(a.measurement),
            "--sample-size", str(a.samples), "--noplot"]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="ground-truth-") as tmp:
        tmp = Path(tmp)
        sides = {"base": prepare_side(tmp, "base", rev, None)}
        if not a.aa:
            sides["case"] = prepare_side(tmp, "case", rev, patch)
        exes, engines = {}, {}
        for side, tree in sides.items():
            if targets:
                log(f"building {side} ({', '.join(targets)})")
                exes[side] = build(tree, cache / f"target-{side}", targets)
            if a.e2e:
                log(f"building {side}'s engine binary")
                engines[side] = build_engine(tree, cache / f"target-{side}")
        orders = {}
        if a.placement and targets:
            for side, tree in sides.items():
                log(f"linking {side} in {a.placement} function orders")
                orders[side] = relinked(tree, cache / f"target-{side}", targets,
                                        placement_seeds(side, a.placement), tmp / f"orders-{side}")
        if a.placement and a.e2e:
            for side, tree in sides.items():
                log(f"linking {side}'s engine in {a.placement} function orders")
                paths = relinked(tree, cache / f"target-{side}", ["bin:engine"],
                                 placement_seeds(side, a.placement), tmp / f"engines-{side}")
                engines[side] = ",".join(map(str, paths["bin:engine"]))
        if a.aa:
            exes["case"], engines["case"] = exes.get("base"), engines.get("base")
            if a.placement and a.e2e:
                paths = relinked(sides["base"], cache / "target-base", ["bin:engine"],
                                 placement_seeds("case", a.placement), tmp / "engines-case")
                engines["case"] = ",".join(map(str, paths["bin:engine"]))
            if a.placement and targets:
                # The base's code in the case's seeds: an A/A of placement alone.
                log(f"linking the base in the case's {a.placement} function orders")
                orders["case"] = relinked(sides["base"], cache / "target-base", targets,
                                          placement_seeds("case", a.placement),
                                          tmp / "orders-case")
        per_round = {"base": [], "case": []}
        paired = []
        rounds_started = time.time()
        for r in range(a.rounds if targets else 0):
            runs = {"base": [], "case": []}
            for t in targets:
                for side in process_order(r, a.processes):
                    exe = orders[side][t][r % a.placement] if orders else exes[side][t]
                    runs[side].append(measure(exe, a.filter, args, tmp / f"home-{side}", a.cpu))
            for side in ("base", "case"):
                per_round[side].append(side_values(runs[side]))
            paired.append(paired_round(runs["base"], runs["case"]))
            left = (time.time() - rounds_started) / (r + 1) * (a.rounds - r - 1)
            log(f"round {r + 1}/{a.rounds} done, about {left / 60:.1f} min left")
        rows = e2e_rows(engines, tmp, a.e2e_rounds, a.e2e_requests) if a.e2e else {}
    for bid in sorted(per_round["base"][0] if per_round["base"] else []):
        if a.paired:
            d = [p[bid][0] for p in paired if bid in p]
        else:
            d = [math.log(c[bid] / b[bid]) for b, c in zip(per_round["base"], per_round["case"])
                 if b.get(bid) and c.get(bid)]
        rows[bid] = truth_row(d)
        if a.paired:
            rows[bid]["pair_log_ratios"] = [p[bid][1] for p in paired if bid in p]
    out = Path(a.out) / a.case
    out.mkdir(parents=True, exist_ok=True)
    rec = {"schema": "harness-eval-ground-truth/1", "case": a.case, "rev": rev,
           "targets": targets, "filter": a.filter, "rounds": a.rounds,
           "processes": a.processes, "paired": a.paired,
           "placement": {"orders": a.placement,
                         "seeds": {side: placement_seeds(side, a.placement)
                                   for side in ("base", "case")}} if a.placement else None,
           "criterion_args": args, "cpu": a.cpu, "aa": a.aa,
           "e2e": {"rounds": a.e2e_rounds, "requests": a.e2e_requests} if a.e2e else None,
           "wall_s": round(time.time() - started, 1), "rows": rows}
    (out / "ground-truth.json").write_text(json.dumps(rec, indent=1) + "\n")
    for bid, r in rows.items():
        ci = r["ci95"]
        ci_s = "unbounded" if None in ci else f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
        print(f"{bid}: {r['change'] * 100:+.1f} % {ci_s} ({r['rounds']} rounds)")
    log(f"wrote {out / 'ground-truth.json'}")


if __name__ == "__main__":
    main()
