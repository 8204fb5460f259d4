#!/usr/bin/env python3
"""Runs the realistic cases of harness/eval/cases/ through the gate, and tabulates the verdicts
against the ground truth (ground_truth.py's results).

`run`: one throwaway clone of the repository (`git clone --shared`, nothing written to the
repository itself) with one branch per case (the patch committed on the base revision); then
`harness compare --repo CLONE --config harness/eval/cases/gate.yaml --suite SUITE --base BASE
--head case/NAME --format json --out OUT/NAME/run-K --fail-on never` per case. The clone lives
under --work so its slots and target dirs stay warm from one invocation to the next.

`table`: per case and row, the gate's status, estimate and interval beside the ground truth's
change and 95 % interval, and the two acceptance checks of the verdict rules:
  - a row whose true slowdown is at least δ + 1 % (its ground-truth lower bound, so it is
    certainly that slow) must not be ✅;
  - a row the case does not touch (ground truth interval within ±δ, or outside the rows the
    patch can reach, `REACH`, and not measured) must not be 🔴;
  - nor a row the case makes faster (ground truth interval below +δ, reaching past −δ).

Usage:
  python3 harness/eval/gate_cases.py run --harness target/release/harness \\
      --case add-extra-copy:case-kernels --out harness/eval/results/cases
  python3 harness/eval/gate_cases.py table --out harness/eval/results/cases
The corpus (harness/eval/corpus/, its reach in reach.json), under one-core load:
  python3 harness/eval/gate_cases.py run --harness target/release/harness \\
      --cases-dir harness/eval/corpus --config harness.yaml --load one-core \\
      --case bcast-no-dim-merge:full --out harness/eval/results/corpus/one-core
  python3 harness/eval/gate_cases.py table --cases-dir harness/eval/corpus \\
      --ground harness/eval/results/corpus/ground-truth --out harness/eval/results/corpus/one-core
`headline`: the corpus's figures against its targets, one column per condition (the README's
headline table):
  python3 harness/eval/gate_cases.py headline --cases-dir harness/eval/corpus \\
      --ground harness/eval/results/corpus/ground-truth \\
      --ground-sampling harness/eval/results/corpus/ground-truth-sampling \\
      --out harness/eval/results/corpus/quiet --load none \\
      --out harness/eval/results/corpus/one-core --load one-core \\
      --aa harness/eval/results/corpus/aa --quick harness/eval/results/corpus/quick \\
      --readme README.md
The fresh corpus's table (harness/eval/README.md, "The fresh corpus's table"; no --readme: it
has no markers there):
  python3 harness/eval/gate_cases.py headline --cases-dir harness/eval/corpus-fresh \\
      --ground harness/eval/results/corpus-fresh/ground-truth \\
      --ground-sampling harness/eval/results/corpus-fresh/ground-truth-sampling \\
      --ground-t2 harness/eval/results/corpus-fresh/ground-truth-t2 \\
      --out harness/eval/results/corpus-fresh/quiet --load none \\
      --out harness/eval/results/corpus-fresh/one-core --load one-core \\
      --aa harness/eval/results/corpus-fresh/aa --quick harness/eval/results/corpus-fresh/quick
The third corpus's (the README's headline; its two-thread truths in two sittings, pooled), with
its per-row tables and buckets: harness/eval/corpus-third/tabulate.sh.
Standard library only. Every child process has a deadline.
"""

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import ground_truth
import hold
import hostkind
import procs
import saved

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import Load  # noqa: E402  (the same one-core busy loop as the A/A runs)

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "harness" / "eval" / "cases"
GROUND = REPO / "harness" / "eval" / "results" / "ground-truth"
COMPARE_TIMEOUT_S = 3600

# The rows each patch can reach, from cases/README.md's "expected rows" (written before any
# measurement): a row outside its case's reach that the ground truth did not measure is
# untouched by construction (the patch changes no code it runs).
REACH = {
    "sampling-top-p-one-histogram": r"^(sampling_latency/top_p|logit_processing/)",
    "gather-element-loop": r"^gather/",
    "add-extra-copy": r"^add/",
    "matmul-small-gemm-unthreaded": r"^matmul/(f32|f16|bf16)_t2/",
    "neutral-move-ipow": r"^$",
    "neutral-move-top-p-buckets": r"^$",
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          timeout=300).stdout.strip()


def prepare(work, rev, cases, cases_dir=CASES):
    """The clone at `work` with branch case/NAME = `rev` + the case's patch, for each case."""
    # Absolute: `git apply` runs inside the work clone, where a relative path means nothing.
    cases_dir = Path(cases_dir).resolve()
    if not (work / ".git").is_dir():
        work.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(work)], check=True,
                       timeout=600)
    git("fetch", "-q", str(REPO), rev, cwd=work)
    git("checkout", "-q", "--detach", rev, cwd=work)
    git("config", "user.email", "eval@localhost", cwd=work)
    git("config", "user.name", "eval", cwd=work)
    for name in cases:
        git("checkout", "-q", "--detach", rev, cwd=work)
        git("apply", "--index", str(cases_dir / f"{name}.patch"), cwd=work)
        git("commit", "-q", "-m", f"case {name}", cwd=work)
        git("branch", "-f", f"case/{name}", "HEAD", cwd=work)
    git("checkout", "-q", "--detach", rev, cwd=work)


def run_cases(a):
    rev = git("rev-parse", a.rev, cwd=REPO)
    pairs = [c.split(":", 1) for c in a.case]
    cases_dir = Path(a.cases_dir).resolve()
    for name, _ in pairs:
        if not (cases_dir / f"{name}.patch").is_file():
            raise SystemExit(f"error: --case {name}: no {cases_dir / (name + '.patch')}")
    work = Path(a.work)
    prepare(work, rev, [n for n, _ in pairs], cases_dir)
    for name, suite in pairs:
        out = Path(a.out) / name
        k = 1 + sum(1 for p in out.glob("run-*") if p.is_dir()) if out.is_dir() else 1
        dest = out / f"run-{k:03d}"
        hold.wait_while_held(log, f"{name} {suite}")
        cmd = [str(Path(a.harness).resolve()), "compare", "--repo", str(work),
               "--config", str(Path(a.config).resolve()),
               "--suite", suite, "--base", rev, "--head", f"case/{name}", "--format", "json",
               "--out", str(dest.resolve()), "--fail-on", "never", "--no-profile"]
        log(f"{name}: {' '.join(cmd)}")
        started = time.time()
        with Load(a.load) as ld:
            load_rec = ld.record()
            code, lines = run_timed(cmd, work, COMPARE_TIMEOUT_S)
        (dest).mkdir(parents=True, exist_ok=True)
        (dest / "stderr.txt").write_text("".join(line for _, line in lines))
        if code is None:
            # No run.json: the run did not finish, and measure.py takes a run.json as a done step.
            raise SystemExit(f"error: {name}: harness compare passed its {COMPARE_TIMEOUT_S} s "
                             f"deadline and was killed; its stderr is in {dest / 'stderr.txt'}")
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        stages = stage_times(lines)
        meta = {"case": name, "suite": suite, "base": rev, "exit": code,
                "wall_s": round(time.time() - started, 1), "loadavg_after": load,
                "condition": "quiet" if a.load == "none" else a.load, "load": load_rec,
                "stages_s": stages, "cold": is_cold(stages),
                # The host, as measure.py records a case's in hosts.json: quick runs are started
                # by measure-all.sh without it, so each says itself where it ran.
                "cpu": hostkind.cpu_model(), "cpu_id": hostkind.cpu_id()}
        (dest / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
        if (dest / "results.json").is_file():
            saved.compress_saved(dest / "results.json")
        log(f"{name}: exit {code} in {meta['wall_s']:.0f} s -> {dest} (stages {stages}"
            f"{', cold' if meta['cold'] else ''})")
        if code not in (0, 1):
            log("".join(line for _, line in lines)[-2000:])


# A warm base build is cargo finding every artifact fresh: seconds (the base is the same
# revision in every case, so from the second run on a VM its target dir is complete). A first
# run on a fresh VM builds the base's whole dependency graph, 5-15 min: such a run is not the
# "warm" full check the 20-minute target is about, and the headline keeps it apart.
COLD_BASE_BUILD_S = 60.0


def run_timed(cmd, cwd, timeout_s):
    """Run `cmd`, keeping each line of its stderr with the seconds since the start at which it
    came; (exit code, [(seconds, line)]). At the deadline the child and every process group it
    started are killed (`procs.kill_tree`: the harness's own deadlines for its children are
    threads of the harness and die with it); exit code None then, and a last line saying so.
    The child stays in this process group, so stopping the corpus (`kill -TERM -- -PGID` of
    measure.py) reaches it, though not the groups it started (a build then runs to its end)."""
    import threading

    started = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, errors="replace")
    lines = []

    def read():
        # errors="replace": a stray byte must not end the reader and leave the pipe undrained.
        for line in p.stderr:
            lines.append((round(time.time() - started, 1), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        procs.kill_tree(p.pid)  # the harness and every process group it started
        p.wait()
        code = None
    reader.join(timeout=10)
    if code is None:
        lines.append((round(time.time() - started, 1), f"killed at the {timeout_s} s deadline\n"))
    return code, lines


ROUND_LINE = re.compile(r"^\[\d+/\d+\] round ")


def stage_times(lines):
    """Seconds spent building the base, building the head (with listing the benches and the
    2 s probe of the host that follow it), and until the first benchmark round starts, from the
    harness's progress lines (`building base in …`, `building head in …`, `[0/N] round 1 …`);
    None for a stage whose lines are missing."""
    def first(pred):
        return next((t for t, line in lines if pred(line)), None)

    base = first(lambda x: x.startswith("building base"))
    head = first(lambda x: x.startswith("building head"))
    rounds = first(lambda x: ROUND_LINE.match(x) is not None)
    return {"base_build": None if base is None or head is None else round(head - base, 1),
            "head_build": None if head is None or rounds is None else round(rounds - head, 1),
            "until_first_round": rounds}


def is_cold(stages):
    """Whether the run built the base from an empty target dir (COLD_BASE_BUILD_S); None when
    the run recorded no build times (runs from before 2026-12-05)."""
    b = (stages or {}).get("base_build")
    return None if b is None else b > COLD_BASE_BUILD_S


def reach_patterns(cases_dir):
    """Per case, one regular expression for the rows its patch can reach: `reach.json` of the
    cases directory where there is one (the corpus: a list of patterns per case), else `REACH`."""
    f = Path(cases_dir) / "reach.json"
    if not f.is_file():
        return dict(REACH)
    return {name: "|".join(f"(?:{p})" for p in c["reach"]) or r"^$"
            for name, c in json.loads(f.read_text()).items()}


def result_rows(res):
    """(id, status, threshold, change) of every benchmark and end-to-end speed row."""
    rows = [(b["id"], b["status"], b.get("threshold"), b.get("change") or {})
            for b in res.get("benches", [])]
    for r in ((res.get("e2e") or {}).get("speed") or []):
        rows.append((r["id"], r["status"], r.get("threshold"), r.get("change") or {}))
    return rows


def case_runs(out, ground, ground_t2=None, ground_sampling=None):
    """(case, run dir, its ground-truth rows, its results or None) of every run under `out`.
    With `ground_t2`, a two-thread row's truth comes from `ground_t2/CASE/ground-truth.json`
    when there is one, and with `ground_sampling` a sampling row's from
    `ground_sampling/CASE/ground-truth.json`, each marked with its method: `"paired"` for
    ground_truth.py --paired (corpus/README.md, finding 6 and step 2's third two-thread method),
    `"device"` for corpus/device_t2.py (a dedicated machine, step 2).
    `ground_t2` may name several directories, comma-separated: sittings of the same truth at
    different times, whose rounds are pooled (`pooled_sittings`; the third corpus's procedure,
    corpus-third/README.md, from results/t2-settings/)."""
    if not Path(out).is_dir():  # a corpus with no gate run yet under this condition
        return
    for case_dir in sorted(p for p in Path(out).iterdir() if p.is_dir()):
        truth_file = Path(ground) / case_dir.name / "ground-truth.json"
        truth = json.loads(truth_file.read_text())["rows"] if truth_file.is_file() else {}
        for extra, rows_of in ((ground_t2, "two"), (ground_sampling, "sampling")):
            recs = []
            for d in (str(extra).split(",") if extra else []):
                f = Path(d) / case_dir.name / "ground-truth.json"
                if f.is_file():
                    recs.append(json.loads(f.read_text()))
            for bid, row in pooled_sittings(recs).items():
                if row_kind(bid) == rows_of:
                    truth[bid] = row
        for run in sorted(case_dir.glob("run-*")):
            res_file = saved.find(run / "results.json")
            res = saved.load_json(res_file) if res_file is not None else None
            yield case_dir.name, run, truth, res


def pooled_sittings(recs):
    """One truth per row from one or more ground_truth.py records of the same case (sittings at
    different times): with one, its rows as they are; with more, each row's rounds (`log_ratios`)
    pooled over the sittings that have it, and the Hodges-Lehmann estimate and exact signed-rank
    95 % interval taken again over them (`ground_truth.truth_row`, as each sitting's was),
    each sitting's own kept in `sittings`. A row's method is "paired" only if every sitting's
    is.

    Where two sittings' intervals do not overlap, the row's cost moved with the machine's state
    between them (results/t2-settings/README.md): its rounds are then two clusters, not one
    sample, and the pooled signed-rank interval (which assumes one distribution symmetric about
    the change) would sit narrow between them. The interval is then the hull of the sittings'
    intervals, and `disagree` says so: a truth that cannot say which state a run will meet."""
    rows = {}
    for rec in recs:
        method = "paired" if rec.get("paired") else "device"
        for bid, row in rec["rows"].items():
            rows.setdefault(bid, []).append({**row, "method": method})
    out = {}
    for bid, got in rows.items():
        if len(got) == 1:
            out[bid] = got[0]
            continue
        d = [x for g in got for x in g["log_ratios"]]
        pooled = ground_truth.truth_row(d)
        own = [g["ci95"] for g in got]
        disagree = max(b[0] for b in own) > min(b[1] for b in own)
        if disagree:
            pooled["ci95"] = [min(b[0] for b in own), max(b[1] for b in own)]
        out[bid] = {**pooled, "disagree": disagree,
                    "method": ("paired" if all(g["method"] == "paired" for g in got)
                               else "device"),
                    "sittings": [{"change": g["change"], "ci95": g["ci95"]} for g in got]}
    return out


def pct(x):
    return "—" if x is None else f"{x * 100:+.1f}"


def judged_rows(out, ground, reach_of, ground_t2=None, ground_sampling=None):
    """Every gate row of every run under `out`, judged against its ground truth by the two
    rules of the module doc: dicts with the case, run, row id, status, δ, the gate's change,
    the truth (or None), whether the row is in the case's reach, `kind` (`slow ≥ δ+1 %`,
    `untouched` or `unchecked`), `violation` and `noise` (a violation that rests on a truth whose
    method is noise for that row, `method_noise`)."""
    for case, run, truth, res in case_runs(out, ground, ground_t2, ground_sampling):
        for bid, status, thr, ch in result_rows(res) if res is not None else []:
            thr = thr or 0.03
            t = truth.get(bid)
            # A case without a reach reaches every row (no row of it is untouched by construction).
            reach = re.search(reach_of.get(case, ""), bid) is not None
            tlo, thi = t["ci95"] if t is not None else (None, None)
            # A row outside the reach is untouched by construction, whatever a truth says of it.
            slow = reach and tlo is not None and tlo >= thr + 0.01
            untouched = not reach or (tlo is not None and thi is not None
                                      and -thr < tlo and thi < thr)
            # Truly faster: the truth's interval below +δ and reaching past −δ (a speed-up, or
            # one too uncertain to call within ±δ, but certainly not a slowdown of δ). A 🔴 there
            # is as false as on an untouched row (added 2026-12-05, before any such 🔴 was seen:
            # the first rule left these rows unchecked).
            # (checked after `slow` and `untouched` below, so only the upper bound is asked)
            faster = thi is not None and thi < thr
            kind = ("slow ≥ δ+1 %" if slow else "untouched" if untouched
                    else "faster" if faster else "unchecked")
            forbidden = {"slow ≥ δ+1 %": "no_change", "untouched": "regression",
                         "faster": "regression"}.get(kind)
            violation = status == forbidden
            yield {"case": case, "run": run, "id": bid, "status": status, "thr": thr,
                   "change": ch, "truth": t, "reach": reach, "kind": kind,
                   "violation": violation,
                   # corpus/README.md, finding 1, step 2's amendments and finding 6: on this VM,
                   # plain criterion rounds give two-thread and sampling rows intervals 10-50 %
                   # wide or off 0 on unchanged code.
                   "noise": violation and reach and method_noise(bid, t),
                   # whether the row's check stands on a truth that can place it (a row outside
                   # the reach needs none)
                   "trusted": not (reach and method_noise(bid, t))}


def table(a):
    out = Path(a.out)
    lines = ["| case | run | row | gate | gate change [interval] | δ | true change [95 %] | "
             "check |", "|---|---|---|---|---|---|---|---|"]
    violations, checked, counts = [], 0, {}
    reach_of = reach_patterns(a.cases_dir)
    for r in judged_rows(out, a.ground, reach_of, a.ground_t2, a.ground_sampling):
        case, run, bid, status, thr, t = (r["case"], r["run"], r["id"], r["status"], r["thr"],
                                          r["truth"])
        ch = r["change"]
        est, lo, hi = ch.get("estimate"), ch.get("ci_low"), ch.get("ci_high")
        if t is not None:
            tlo, thi = t["ci95"]
            true_s = f"{pct(t['change'])} [{pct(tlo)}, {pct(thi)}]"
            if t.get("method") in ("device", "paired"):
                true_s += f" ({t['method']})"
            if t.get("disagree"):
                true_s += " (its sittings disagree: " + "; ".join(
                    f"{pct(x['change'])} [{pct(x['ci95'][0])}, {pct(x['ci95'][1])}]"
                    for x in t["sittings"]) + ")"
        else:
            true_s = "not measured" if r["reach"] else "not measured, outside the patch's reach"
        kind, check = r["kind"], ""
        if kind != "unchecked":
            checked += 1
            emoji = "✅" if kind == "slow ≥ δ+1 %" else "🔴"
            check = f"{kind}: not {emoji}"
            if r["violation"]:
                check = f"**VIOLATION: {emoji}**" + (" (truth: method noise)" if r["noise"] else "")
                violations.append((case, run.name, bid, r["noise"]))
        counts[(kind, status)] = counts.get((kind, status), 0) + 1
        lines.append(f"| {case} | {run.name} | `{bid}` | {status} | "
                     f"{pct(est)} [{pct(lo)}, {pct(hi)}] | {thr * 100:.0f} % | {true_s} | "
                     f"{check} |")
    print("\n".join(lines))
    two = sum(1 for v in violations if threads_of(v[2]) == "two")
    noise = sum(1 for v in violations if v[3])
    print(f"\n{checked} rows checked against the ground truth, {len(violations)} violations "
          f"({two} on two-thread rows; {noise} where the truth's method is noise there)")
    for (kind, status), n in sorted(counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"{kind}: {status} {n}")
    for v in violations:
        print(f"violation: {v[:3]}" + (" (truth: method noise)" if v[3] else ""))


def binom_sf(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p). Each term in logs (lgamma): the integer binomial
    coefficient overflows a float from n ≈ 1030 on (the corpus's untouched rows pass that)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq, lf = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    return min(1.0, sum(math.exp(lf - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * lp + (n - i) * lq) for i in range(k, n + 1)))


def clopper_pearson(k, n, confidence=0.95):
    """The exact (Clopper-Pearson) interval of a rate, k successes in n trials: the p where
    P(X >= k) and P(X <= k) reach (1 - confidence) / 2, found by bisection on the exact binomial
    tails (no beta quantile in the standard library). (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    a = (1 - confidence) / 2

    def solve(f):  # the p in [0, 1] where the increasing f(p) crosses a
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < a else (lo, mid)
        return (lo + hi) / 2
    lower = 0.0 if k == 0 else solve(lambda p: binom_sf(k, n, p))
    # P(X <= k | p) = P(n - X >= n - k | 1 - p): the upper bound is 1 - the q where that
    # (increasing in q) tail reaches a.
    upper = 1.0 if k == n else 1 - solve(lambda q: binom_sf(n - k, n, q))
    return lower, upper


BUCKETS = ["< δ", "δ to 5 %", "5 to 10 %", "≥ 10 %"]


def bucket_of(change, thr):
    """The true-effect bucket of a row: its ground-truth point estimate against its δ."""
    if change < thr:
        return BUCKETS[0]
    return BUCKETS[1] if change < 0.05 else BUCKETS[2] if change < 0.10 else BUCKETS[3]


def threads_of(bid):
    """`two` for the two-thread matmuls, `single` for every other row (corpus/README.md)."""
    return "two" if re.search(r"_t2/", bid) else "single"


def row_kind(bid):
    """`two` for a two-thread row, `sampling` for a sampling row, else `other`."""
    if threads_of(bid) == "two":
        return "two"
    return "sampling" if re.match(r"(sampling_latency|logit_processing)/", bid) else "other"


def truth_method(bid):
    """The ground-truth method a row's truth must come from to count (corpus/README.md): the
    paired processes' (`paired`) for a two-thread or sampling row, where this VM's plain
    criterion rounds are method noise (step 2's amendments, finding 6; the dedicated machine's
    `device` truth failed its A/A); None (the plain rounds) for every other row."""
    return None if row_kind(bid) == "other" else "paired"


def method_noise(bid, truth):
    """Whether a row's truth comes from a method that cannot place it (see `truth_method`)."""
    need = truth_method(bid)
    return need is not None and (truth or {}).get("method") != need


def bucket_rows(out, ground, reach_of, ground_t2=None, ground_sampling=None):
    """(threads, bucket, status) of every gate row that has a ground truth, in every run under
    `out`, and the runs' `run.json` records (wall time, build stages). A two-thread row counts
    only with a truth of the paired processes (`ground_t2`), a sampling row likewise
    (`ground_sampling`): this VM's plain rounds are method noise for them (corpus/README.md,
    step 2's amendments, finding 6; see `truth_method`)."""
    rows, metas = [], []
    for case, run, truth, res in case_runs(out, ground, ground_t2, ground_sampling):
        meta = run / "run.json"
        if meta.is_file():
            metas.append(json.loads(meta.read_text()))
        for bid, status, thr, _ in result_rows(res) if res is not None else []:
            t = truth.get(bid)
            if t is None or not re.search(reach_of.get(case, ""), bid):
                continue
            if method_noise(bid, t):
                continue
            rows.append((threads_of(bid), bucket_of(t["change"], thr or 0.03), status))
    return rows, metas


def buckets(a):
    """Detection by true-effect bucket per condition, 🔴 share with its Clopper-Pearson 95 %
    interval; the issue's targets (single-threaded rows ≥ 5 %, two-thread rows ≥ 10 %) apart."""
    reach_of = reach_patterns(a.cases_dir)
    lines = ["| condition | threads | true slowdown | rows | 🔴 | ⚠️ | ❔ | ✅ | "
             "🔴 share [95 % CP] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for out in a.out:
        rows, metas = bucket_rows(out, a.ground, reach_of, a.ground_t2, a.ground_sampling)
        cond = Path(out).name
        groups = [(th, [b], b) for th in ("single", "two") for b in BUCKETS]
        groups += [("single", BUCKETS[2:], "**≥ 5 % (target ≥ 90 %)**"),
                   ("two", BUCKETS[3:], "**≥ 10 % (target ≥ 90 %)**")]
        for th, bs, label in groups:
            sel = [st for t, b, st in rows if t == th and b in bs]
            if not sel:
                continue
            n, k = len(sel), sel.count("regression")
            lo, hi = clopper_pearson(k, n)
            lines.append(f"| {cond} | {th} | {label} | {n} | {k} | "
                         f"{sel.count('possible_regression')} "
                         f"| {sel.count('too_noisy')} | {sel.count('no_change')} | "
                         f"{100 * k / n:.0f} % [{100 * lo:.0f}, {100 * hi:.0f}] |")
        if metas:  # the headline's rule: warm runs counted, cold first runs apart
            lines.append(f"| {cond} | wall time | {len(metas)} runs | {wall_cell(metas)} "
                         "| | | | | |")
    print("\n".join(lines))


def aa_runs(aa_dir, load):
    """(🔴 rows, rows, wall s, CPU model) of every A/A trial of `evaluate.py aa --suite full
    --load LOAD --out-dir AA_DIR` (its `aa/full-LOAD/run-*`). The model is the trial's host
    (`trial.json`'s `host.cpu`): sessions land on different CPU models, and the corpus reports
    per model (README.md finding 13)."""
    out = []
    for trial in sorted((Path(aa_dir) / "aa" / f"full-{load}").glob("run-*")):
        res_file = saved.find(trial / "results.json")
        if res_file is None or not (trial / "trial.json").is_file():
            continue
        statuses = [st for _, st, _, _ in result_rows(saved.load_json(res_file))]
        rec = json.loads((trial / "trial.json").read_text())
        out.append((statuses.count("regression"), len(statuses), rec["wall_s"], cpu_of(rec)))
    return out


CROWDED_NOTE = "measured while other processes kept"


def aa_crowding(aa_dir, load):
    """(❔ because crowded, mean others' cores) of every row of the A/A trials of `load` whose
    samples carry `others_cores` (multi-threaded rows, gate builds with the busy-machine rule:
    harness/STATS.md §18); the mean is over both sides' samples, as the gate takes it."""
    out = []
    for trial in sorted((Path(aa_dir) / "aa" / f"full-{load}").glob("run-*")):
        res_file = saved.find(trial / "results.json")
        if res_file is None:
            continue
        for b in saved.load_json(res_file).get("benches", []):
            read = [x["others_cores"] for side in ("base", "head")
                    for x in ((b.get(side) or {}).get("samples") or [])
                    if x.get("others_cores") is not None]
            if read:
                crowded = b.get("status") == "too_noisy" and \
                    (b.get("note") or "").startswith(CROWDED_NOTE)
                out.append((crowded, sum(read) / len(read)))
    return out


def crowding_cell(rows):
    """The headline's cell for `aa_crowding`'s rows."""
    if not rows:
        return "none yet"
    means = sorted(m for _, m in rows)
    return (f"{share(sum(1 for c, _ in rows if c), len(rows))} rows; others' cores per row "
            f"median {statistics.median(means):.2f}, range {means[0]:.2f} to {means[-1]:.2f}")


def cpu_of(rec):
    """The CPU kind a run or trial record names: `host.cpu`, with `host.cpu_id` (family, model,
    stepping; A/A trials since 2026-12-05) in brackets where there is one; "unknown" without a
    model."""
    host = rec.get("host") or {}
    model = host.get("cpu") or "unknown"
    return f"{model} ({host['cpu_id']})" if host.get("cpu_id") else model


def load_hosts(out):
    """The corpus's `hosts.json` beside a condition's folder (`results/corpus/hosts.json` for
    `results/corpus/quiet`), {} when there is none (the cases of `../cases/`)."""
    f = Path(out).parent / "hosts.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def case_models(out, hosts=None):
    """`; on CPU models: A n, B m` (cases per model, from each gate run's `host.cpu`) when the
    runs under `out` come from more than one model, else nothing: each case is measured on one
    model (corpus/README.md finding 13), and a reader must know which figures come from which.
    A run without results (a failed one) names no model; one without a host counts as
    "unknown". `hosts` (the corpus's `hosts.json`, case → its kind) adds the family, model and
    stepping that the gate's own results do not record, where the case has one (finding 16:
    one model name covers different VM kinds)."""
    per_case = {}
    for run in sorted(Path(out).glob("*/run-*")):
        res_file = saved.find(run / "results.json")
        if res_file is None:
            continue
        rec = saved.load_json(res_file)
        cpu_id = ((hosts or {}).get(run.parent.name) or {}).get("cpu_id") or ""
        # Only a measured id ("family …"), not an entry's note that its kind went unrecorded.
        if cpu_id.startswith("family ") and \
                (rec.get("host") or {}).get("cpu") == hosts[run.parent.name].get("cpu"):
            rec = {**rec, "host": {**rec["host"], "cpu_id": cpu_id}}
        per_case.setdefault(run.parent.name, set()).add(cpu_of(rec))
    models = sorted({m for ms in per_case.values() for m in ms})
    if len(models) < 2:
        return ""
    return "; on CPU models: " + ", ".join(
        f"{m} {sum(1 for ms in per_case.values() if m in ms)}" for m in models)


def aa_cell(aa):
    """The headline's A/A cell: runs with any 🔴 (Clopper-Pearson), rows and wall time, and the
    runs and rows per CPU model when the runs come from more than one."""
    if not aa:
        return "none yet"

    def counts(runs):
        return (f"{share(sum(1 for r in runs if r[0]), len(runs))} runs, "
                f"{sum(r[0] for r in runs)} 🔴 of {sum(r[1] for r in runs)} rows")
    cell = f"{counts(aa)}; wall time {minutes([r[2] for r in aa])}"
    models = sorted({r[3] for r in aa})
    if len(models) > 1:
        cell += "; per CPU model: " + "; ".join(
            f"{m}: {counts([r for r in aa if r[3] == m])}" for m in models)
    return cell


def share(k, n):
    """`k of n` with its Clopper-Pearson 95 % interval in percent."""
    if n == 0:
        return "none yet"
    lo, hi = clopper_pearson(k, n)
    return f"{k} of {n} [{100 * lo:.1f}, {100 * hi:.1f} %]"


def minutes(walls):
    """`median M min, max X min (N runs)` of wall times in seconds."""
    if not walls:
        return "none yet"
    return (f"median {statistics.median(walls) / 60:.1f} min, max {max(walls) / 60:.1f} min "
            f"({len(walls)} run{'' if len(walls) == 1 else 's'})")


def compare_ran(meta):
    """Whether a run's `run.json` record timed a check: its `harness compare` exited 0 or 1
    (records from before `exit` was kept count). measure.py's `ran` is laxer on purpose: a gate
    run that built something and then exited 2 is a result there, its rows kept."""
    return meta.get("exit") in (None, 0, 1)


def wall_cell(metas):
    """The wall-time cell of runs' `run.json` records: the warm ones' median and max, and the
    cold ones (a first run on a fresh VM, which built the base's whole dependency graph:
    `is_cold`) apart with their build time, since the target is about a warm check. Runs from
    before 2026-12-05 recorded no build times and count as warm (which of them were a VM's
    first is not known; corpus/README.md says so). A run whose `harness compare` could not run
    (exit 2 or any other code than 0 and 1) timed no check: it is left out, and the cell says how
    many were."""
    failed = [m for m in metas if not compare_ran(m)]
    metas = [m for m in metas if compare_ran(m)]
    warm = [m["wall_s"] for m in metas if not m.get("cold")]
    cold = [m for m in metas if m.get("cold")]
    cell = minutes(warm) if warm or not cold else "no warm run yet"
    if cold:
        def one(m):
            b = (m.get("stages_s") or {}).get("base_build")
            return f"{m['wall_s'] / 60:.1f} min" + (
                f" ({b / 60:.1f} of it the base's build)" if b is not None else "")
        cell += "; apart, cold first runs: " + ", ".join(one(m) for m in cold)
    if failed:
        codes = ", ".join(str(m.get("exit")) for m in failed)
        runs = f"{len(failed)} run{'s' if len(failed) > 1 else ''}"
        cell += f"; left out: {runs} that could not run (exit {codes})"
    return cell


def headline(a):
    """The corpus's figures against issue's targets, one column per condition: the README's
    headline table (regenerated from the saved runs, nothing typed by hand)."""
    reach_of = reach_patterns(a.cases_dir)
    reach_file = Path(a.cases_dir) / "reach.json"
    corpus = json.loads(reach_file.read_text())
    neutral = {n for n, c in corpus.items() if c.get("neutral")}
    conds = [(Path(o).name, Path(o), load) for o, load in zip(a.out, a.load)]
    cols = {k: [] for k in ("cases", "untouched", "aa", "crowded", "missed", "single", "two",
                            "wall", "quick")}
    for name, out, load in conds:
        rows = list(judged_rows(out, a.ground, reach_of, a.ground_t2, a.ground_sampling))
        runs = {(r["case"], r["run"]) for r in rows}
        cases = {c for c, _ in runs}
        n_neutral = len(cases & neutral)
        cols["cases"].append(f"{len(cases) - n_neutral} regressions, {n_neutral} neutral"
                             + (f" ({len(runs)} runs)" if len(runs) != len(cases) else "")
                             + case_models(out, load_hosts(out)))
        u = [r for r in rows if r["kind"] in ("untouched", "faster")]
        noisy = sum(r["violation"] and not r["trusted"] for r in u)
        u = [r for r in u if r["trusted"]]
        cols["untouched"].append(share(sum(r["violation"] for r in u), len(u)) + (
            f"; and {noisy} on a truth of a method that cannot place the row" if noisy else ""))
        cols["aa"].append(aa_cell(aa_runs(a.aa, load) if a.aa else []))
        cols["crowded"].append(crowding_cell(aa_crowding(a.aa, load) if a.aa else []))
        # Every row with a truth of an accepted method (the target says "any row"), split by
        # threads, since the two-thread truths came later (their paired method's A/A).
        slow = [r for r in rows if r["kind"] == "slow ≥ δ+1 %"]
        trusted = [r for r in slow if r["trusted"]]
        noisy = sum(r["violation"] and not r["trusted"] for r in slow)
        by = {th: [r for r in trusted if threads_of(r["id"]) == th] for th in ("single", "two")}
        cols["missed"].append(
            share(sum(r["violation"] for r in trusted), len(trusted))
            + f": single-threaded {sum(r['violation'] for r in by['single'])} of "
              f"{len(by['single'])}, two-thread {sum(r['violation'] for r in by['two'])} of "
              f"{len(by['two'])}"
            + (f"; and {noisy} on a truth of a method that cannot place the row" if noisy
               else ""))
        brows, metas = bucket_rows(out, a.ground, reach_of, a.ground_t2, a.ground_sampling)
        for key, th, bs in (("single", "single", BUCKETS[2:]), ("two", "two", BUCKETS[3:])):
            sel = [st for t, b, st in brows if t == th and b in bs]
            cols[key].append(share(sel.count("regression"), len(sel)) if sel else "none yet")
        cols["wall"].append(wall_cell(metas))
        quick = [json.loads(f.read_text()) for f in
                 sorted(Path(a.quick).glob("*/run-*/run.json"))] if a.quick else []
        cols["quick"].append(wall_cell(quick) if load == "none" else "—")
    what = {
        "cases": ("corpus PRs measured",
                  f"{len(corpus)} ({len(corpus) - len(neutral)} regressions, "
                  f"{len(neutral)} neutral)"),
        "untouched": ("🔴 on a row the PR does not slow (outside its reach, or true change "
                      "within ±δ or faster)", "0"),
        "aa": ("A/A runs of the full suite with any 🔴", "0 of 20"),
        "crowded": ("multi-threaded rows of the A/A runs made ❔ by a busy machine "
                    "(STATS.md §18; rows with a reading)",
                    "none quiet; all under one busy core"),
        "missed": ("✅ on a row truly slower by δ + 1 % or more", "0"),
        "single": ("🔴 on single-threaded rows truly ≥ 5 % slower", "≥ 90 %"),
        "two": ("🔴 on two-thread rows truly ≥ 10 % slower", "≥ 90 %"),
        "wall": ("wall time of a full check of a corpus PR, warm", "≤ 20 min"),
        "quick": ("wall time of a quick (pre-push) check, warm, the head's build included",
                  "≤ 3 min"),
    }
    lines = ["| what | " + " | ".join(n for n, _, _ in conds) + " | target |",
             "|---|" + "---|" * len(conds) + "---|"]
    for key, (label, target) in what.items():
        lines.append(f"| {label} | " + " | ".join(cols[key]) + f" | {target} |")
    text = "\n".join(lines)
    print(text)
    if a.readme:
        replace_between(Path(a.readme), HEADLINE_START, HEADLINE_END,
                        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
                        "`harness/eval/gate_cases.py headline` from the saved runs.\n\n" + text)


HEADLINE_START = "<!-- corpus-headline:start -->"
HEADLINE_END = "<!-- corpus-headline:end -->"


def replace_between(path, start, end, text):
    """`path` with what lies between its `start` and `end` marker lines replaced by `text`."""
    old = path.read_text()
    i, j = old.find(start), old.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"error: {path}: no {start} … {end} markers")
    path.write_text(old[:i + len(start)] + "\n" + text + "\n" + old[j:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--harness", required=True, help="the harness binary (a release build)")
    r.add_argument("--case", action="append", required=True, help="NAME:SUITE (repeatable)")
    r.add_argument("--rev", default="HEAD", help="base revision (default HEAD)")
    r.add_argument("--config", default=str(CASES / "gate.yaml"))
    r.add_argument("--cases-dir", default=str(CASES),
                   help="where the NAME.patch files are (default harness/eval/cases)")
    r.add_argument("--work", default=str(Path.home() / ".cache" / "decoder-gate" / "gate-cases"))
    r.add_argument("--load", choices=["none", "one-core"], default="none",
                   help="one-core: a busy loop pinned to CPU 0 for each compare (evaluate.py's)")
    r.add_argument("--out", default=str(REPO / "harness" / "eval" / "results" / "cases"))
    t = sub.add_parser("table")
    t.add_argument("--out", default=str(REPO / "harness" / "eval" / "results" / "cases"))
    t.add_argument("--cases-dir", default=str(CASES),
                   help="where the cases are: their reach.json, if any, gives each case's reach")
    t.add_argument("--ground", default=str(GROUND), help="the ground-truth directory")
    t.add_argument("--ground-t2", default=None,
                   help="the two-thread rows' ground truth, if any (several sittings: DIR,DIR)")
    t.add_argument("--ground-sampling", default=None,
                   help="the sampling rows' ground truth of the paired processes, if any")
    b = sub.add_parser("buckets")
    b.add_argument("--out", action="append", required=True,
                   help="a condition's results directory (repeatable: quiet, one-core)")
    b.add_argument("--cases-dir", default=str(CASES))
    b.add_argument("--ground", default=str(GROUND), help="the ground-truth directory")
    b.add_argument("--ground-t2", default=None,
                   help="the two-thread rows' ground truth, if any (several sittings: DIR,DIR)")
    b.add_argument("--ground-sampling", default=None,
                   help="the sampling rows' ground truth of the paired processes, if any")
    h = sub.add_parser("headline")
    h.add_argument("--out", action="append", required=True,
                   help="a condition's results directory (repeatable: quiet, one-core)")
    h.add_argument("--load", action="append", required=True, choices=["none", "one-core"],
                   help="each --out's load, in the same order (its A/A runs are those)")
    h.add_argument("--aa", default=None, help="evaluate.py aa's --out-dir of the A/A runs")
    h.add_argument("--cases-dir", default=str(CASES))
    h.add_argument("--ground", default=str(GROUND), help="the ground-truth directory")
    h.add_argument("--ground-t2", default=None,
                   help="the two-thread rows' ground truth, if any (several sittings: DIR,DIR)")
    h.add_argument("--ground-sampling", default=None)
    h.add_argument("--quick", default=None,
                   help="the quick suite's runs (gate_cases.py run … NAME:quick): wall time")
    h.add_argument("--readme", default=None,
                   help="also put the table between the corpus-headline markers of this file")
    a = ap.parse_args()
    if a.cmd == "headline" and len(a.load) != len(a.out):
        raise SystemExit("error: one --load per --out")
    {"run": run_cases, "table": table, "buckets": buckets, "headline": headline}[a.cmd](a)


if __name__ == "__main__":
    main()
