#!/usr/bin/env python3
"""How sensitive is the gate? The evaluation of issue 9, driving the real `harness` binary.

Subcommands (each trial is one `harness compare` with its own directory holding results.json,
trial.json and harness.log; a trial whose trial.json exists is skipped, so a campaign can be
interrupted and resumed, also across sessions with the same --out-dir):

  aa         N A/A comparisons (same revision both sides), optionally with a one-core busy loop
  calibrate  the spin rate (ns per spin iteration) and the eval benches' base ns/iter
  inject     REV against throwaway commits with calibrated slowdowns in chosen kernels
  walltime   wall time of one comparison: full/quick suites, warm/cold build caches
  summarize  gate vs naive (one base pass, one PR pass, criterion mean, 15 %/30 %) tables

Python 3 standard library only. See harness/eval/README.md.
"""

import argparse
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hold
import hostkind
import procs
import saved

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parents[2]
RESULTS_ROOT = REPO / "harness" / "eval" / "results"
# Deadlines of the child processes (every one has one): a whole `harness compare` (a cold full
# suite under the one-core load took 23 min on a 2-vCPU VM; gate_cases.py's COMPARE_TIMEOUT_S is
# the same), git and the other short commands, and rustc for the spin calibration.
COMPARE_TIMEOUT_S = 3600
SHORT_TIMEOUT_S = 300

# Serde names of harness::results::Status (snake_case).
RED = "regression"
WARN = "possible_regression"

# The naive method of the reference project's bench bot.
NAIVE_WARN = 0.15
NAIVE_FAIL = 0.30

# Eval suite: the benches that get slower, each with the kernel entry that receives the spin and
# a condition on the call's arguments so that exactly this bench (and no other bench of the
# suites) pays for it. `anchor` is the exact line of the function's signature at REV; the spin
# block goes right after it.
CPU_MOD = "engine/src/backend/cpu/mod.rs"
SAMPLING = "engine/src/sampling.rs"
BINARY_SIG = "    fn binary(&self, op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {\n"
MATMUL_SIG = "    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {\n"
NEXT_TOKEN_SIG = (
    "    pub fn next_token(&mut self, logits: &mut [f32], history: &History) -> Result<u32> {\n"
)
F32 = "matches!(a.dtype(), crate::dtype::DType::F32)"
TARGETS = {
    "add/f32/medium": {
        "class": "st",
        "file": CPU_MOD,
        "anchor": BINARY_SIG,
        "cond": f"matches!(op, BinaryOp::Add) && {F32} "
        "&& a.shape() == &[512usize, 512][..] && b.shape() == &[512usize, 512][..]",
    },
    "matmul/f32_t1/1x256x256": {
        "class": "st",
        "file": CPU_MOD,
        "anchor": MATMUL_SIG,
        "cond": f"self.threads == 1 && {F32} "
        "&& a.shape() == &[1usize, 256][..] && b.shape() == &[256usize, 256][..]",
    },
    "sampling_latency/top_p_per_token/49152": {
        "class": "st",
        "file": SAMPLING,
        "anchor": NEXT_TOKEN_SIG,
        # Private fields: Sampler and ProcessorChain live in the same module. No allocation.
        "cond": "logits.len() == 49152 && !self.greedy && self.chain.processors.len() == 1 "
        '&& self.chain.processors[0].name() == "top_p"',
    },
    "matmul/f32_t{N}/32x512x512": {
        "class": "mt",
        "file": CPU_MOD,
        "anchor": MATMUL_SIG,
        "cond": f"self.threads > 1 && {F32} "
        "&& a.shape() == &[32usize, 512][..] && b.shape() == &[512usize, 512][..]",
    },
}
# Untouched benches in the eval suite: three share a patched function (same kernel, another
# shape or sampler), one is far from any patch. A 🔴/⚠️ on them is a false alarm.
CONTROLS = [
    "add/f32/small",
    "matmul/f32_t1/32x512x512",
    "matmul/f32_t{N}/1x256x256",
    "sampling_latency/top_k_per_token/49152",
    "reduce_mean/f32/medium",
]
# Bench target (engine/benches/<target>.rs) of each id's group.
BENCH_TARGET = {
    "add": "kernels",
    "gather": "kernels",
    "reduce_mean": "kernels",
    "matmul": "matmul",
    "sampling_latency": "sampling",
    "logit_processing": "sampling",
    "kv_cache": "kv_cache",
    "tokenization": "tokenization",
    "decode": "decode",
}


def cores():
    """What std::thread::available_parallelism sees (affinity included), as the benches do."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def bench_id(template):
    """`t{N}` ids follow the machine's core count, like engine/benches/common all_cores()."""
    return template.replace("{N}", str(cores()))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def utc_now():
    return dt.datetime.now(dt.timezone.utc)


def git(*args, env=None, input_text=None):
    out = subprocess.run(
        ["git", "-C", str(REPO), *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        input=input_text,
        timeout=SHORT_TIMEOUT_S,
    )
    return out.stdout.strip()


def host_info():
    """The host a trial ran on: CPU model and, since 2026-12-05, family/model/stepping (one model
    name covers VM kinds on which a patch costs −1.5 % and +25 %: corpus/README.md finding 16,
    so A/A runs are reported per kind), the machine's CPU count, the kernel."""
    return {"cpu": hostkind.cpu_model(), "cpu_id": hostkind.cpu_id(),
            "cores": os.cpu_count() or cores(), "uname": " ".join(os.uname())}


# ---------------------------------------------------------------------------------------------
# Pure parts: naive estimate, counting, aggregation (unit-tested in test_evaluate.py)


def criterion_mean(samples):
    """Criterion's mean estimate of one run: the mean over samples of times_ns / iters (criterion
    0.8 analysis: avg_times = elapsed / iters, estimates.mean = avg_times.mean(); outliers are
    only labelled, never dropped). None without a valid sample."""
    per = []
    for it, t in zip(samples.get("iters", []), samples.get("times_ns", [])):
        if not (it and it > 0 and t is not None and math.isfinite(t) and t > 0):
            return None
        per.append(t / it)
    if not per or len(samples.get("iters", [])) != len(samples.get("times_ns", [])):
        return None
    return sum(per) / len(per)


def round_sample(side, rnd=0):
    if not side:
        return None
    for s in side.get("samples", []):
        if s.get("round") == rnd:
            return s
    return None


def naive_verdict(bench):
    """The naive method on one bench of a results.json: criterion mean, change = head/base - 1
    (criterion's change.mean), 🔴 ≥ 30 %, ⚠️ ≥ 15 %. Returns (status, change) with status one of
    RED, WARN, "no_change", None (not computable).

    Base is round 0 and head is round 1 (round 0 when there is no round 1). The naive bot runs
    the base's whole suite, then the PR's whole suite, so a benchmark's two measurements are one
    suite pass apart; base round 0 and head round 1 are one round (one pass over the suite) apart
    too. Round 0 against round 0 would flatter the naive method: the gate measures a benchmark's
    two sides seconds apart within a round, which the bot never does."""
    b = round_sample(bench.get("base"), 0)
    h = round_sample(bench.get("head"), 1) or round_sample(bench.get("head"), 0)
    mb = criterion_mean(b) if b else None
    mh = criterion_mean(h) if h else None
    if mb is None or mh is None:
        return None, None
    change = mh / mb - 1.0
    eps = 1e-9  # 115/100 - 1 is 0.1499… in binary floating point; the bot compares percentages
    if change >= NAIVE_FAIL - eps:
        return RED, change
    if change >= NAIVE_WARN - eps:
        return WARN, change
    return "no_change", change


def gate_counts(results, ids=None):
    """🔴 and ⚠️ of the gate in one results.json (over `ids` when given)."""
    red = warn = 0
    for b in results.get("benches", []):
        if ids is not None and b["id"] not in ids:
            continue
        red += b.get("status") == RED
        warn += b.get("status") == WARN
    return red, warn


def naive_counts(results, ids=None):
    red = warn = 0
    for b in results.get("benches", []):
        if ids is not None and b["id"] not in ids:
            continue
        s, _ = naive_verdict(b)
        red += s == RED
        warn += s == WARN
    return red, warn


def red_under_family(bench, family, alpha):
    """A 🔴 that would survive Holm over `family` benchmarks too: Holm's first step is
    p·m < alpha, and every later step multiplies by less, so p·m < alpha is sufficient
    (Bonferroni bound). Used to report eval-suite detections conservatively for the full suite,
    whose family is larger than the eval suite's."""
    ch = bench.get("change") or {}
    p = ch.get("p_value")
    return bench.get("status") == RED and p is not None and p * family < alpha


def pct(num, den):
    return None if den == 0 else 100.0 * num / den


def fmt_pct(x):
    return "–" if x is None else f"{x:.0f} %"


def fmt_change(x):
    """A relative change (0.05) as `+5.0 %`, or a dash."""
    return "–" if x is None else f"{100 * x:+.1f} %"


def fmt_threshold(x):
    """A relative threshold (0.124) as `12.4 %`, or a dash."""
    return "–" if x is None else f"{100 * x:.1f} %"


def round_log_ratios(bench):
    """The benchmark's per-round log ratios ln(head/base), paired by round index, from the
    per-round estimates the gate itself computed (`per_round_ns`, one per valid sample file, in
    the order of `samples`)."""
    def by_round(side):
        if not side or len(side.get("samples", [])) != len(side.get("per_round_ns", [])):
            return {}
        return {s["round"]: v for s, v in zip(side["samples"], side["per_round_ns"])
                if isinstance(v, (int, float)) and v > 0}
    b, h = by_round(bench.get("base")), by_round(bench.get("head"))
    return [math.log(h[r] / b[r]) for r in sorted(set(b) & set(h))]


def noise_stats(trials, ids=None):
    """How noisy the rounds were: over every (trial × benchmark) with ≥ 3 paired rounds (only
    `ids` when given), the median and 75th percentile of the sd of the per-round log ratios
    (0.05 ≈ 5 %; the simulation in STATS.md needs ≤ ~0.028 per pair, 2 % per side, for 95 %
    detection of 5 %), and the median threshold the gate applied."""
    sds, thresholds = [], []
    for t in trials:
        for b in t["results"].get("benches", []):
            if ids is not None and b["id"] not in ids:
                continue
            lr = round_log_ratios(b)
            if len(lr) >= 3:
                sds.append(statistics.stdev(lr))
            if isinstance(b.get("threshold"), (int, float)):
                thresholds.append(b["threshold"])
    sds.sort()
    return {
        "round_sd_median": statistics.median(sds) if sds else None,
        "round_sd_p75": sds[math.ceil(0.75 * len(sds)) - 1] if sds else None,
        "threshold_median": statistics.median(thresholds) if thresholds else None,
    }


def aggregate_aa(trials):
    """A/A trials of one scenario → per method: runs, 🔴 total, runs with a 🔴, ⚠️ total and the
    most ⚠️ in one run."""
    out = {}
    for method in ("gate", "naive"):
        counts = [
            (gate_counts if method == "gate" else naive_counts)(t["results"]) for t in trials
        ]
        out[method] = {
            "runs": len(counts),
            "red": sum(r for r, _ in counts),
            "runs_with_red": sum(1 for r, _ in counts if r),
            "warn": sum(w for _, w in counts),
            "max_warn_per_run": max((w for _, w in counts), default=0),
            "runs_with_2_warn": sum(1 for _, w in counts if w >= 2),
        }
    noisy = [sum(b.get("status") == "too_noisy" for b in t["results"].get("benches", []))
             for t in trials]
    out["gate"]["too_noisy_per_run"] = sum(noisy) / len(noisy) if noisy else None
    out["gate"].update(noise_stats(trials))
    return out


def aggregate_inject(trials, ids, controls, family_full=None):
    """Inject trials of one size, over the target ids of one class → per method: observations
    (trials × targets), detected (🔴), detected (🔴 or ⚠️), false alarms on controls, and the
    measured change of the targets (median over observations)."""
    out = {}
    for method in ("gate", "naive"):
        obs = red = redwarn = red_full = 0
        ctrl_red = ctrl_warn = ctrl_obs = 0
        changes = []
        for t in trials:
            res = t["results"]
            alpha = res.get("method", {}).get("alpha", 0.05)
            for b in res.get("benches", []):
                if method == "gate":
                    s = b.get("status")
                    c = (b.get("change") or {}).get("estimate")
                else:
                    s, c = naive_verdict(b)
                if b["id"] in ids:
                    obs += 1
                    red += s == RED
                    redwarn += s in (RED, WARN)
                    if method == "gate" and family_full:
                        red_full += red_under_family(b, family_full, alpha)
                    if c is not None:
                        changes.append(c)
                elif b["id"] in controls:
                    ctrl_obs += 1
                    ctrl_red += s == RED
                    ctrl_warn += s == WARN
        out[method] = {
            "observations": obs,
            "red": red,
            "red_or_warn": redwarn,
            "detection_red": pct(red, obs),
            "detection_red_or_warn": pct(redwarn, obs),
            "control_observations": ctrl_obs,
            "control_red": ctrl_red,
            "control_warn": ctrl_warn,
            "median_change": statistics.median(changes) if changes else None,
        }
        if method == "gate" and family_full:
            out[method]["red_full_family"] = red_full
            out[method]["detection_red_full_family"] = pct(red_full, obs)
    return out


# ---------------------------------------------------------------------------------------------
# Injection: source edits and a throwaway commit


def spin_block(cond, spins, indent="        "):
    """The injected work: `spins` dependent integer multiply-adds, each through black_box so
    the compiler can neither vectorise, unroll away nor hoist them. Same text in the calibration
    program; the rate measured there still differed from the rate in the kernel on this machine,
    hence `spin_rates_in_context`."""
    i = indent
    return (
        f"{i}// eval (harness/eval/evaluate.py): injected slowdown, {spins} spin iterations\n"
        f"{i}if {cond} {{\n"
        f"{i}    let mut x: u64 = std::hint::black_box(0x9E37_79B9_7F4A_7C15);\n"
        f"{i}    for _ in 0..std::hint::black_box({spins}u64) {{\n"
        f"{i}        x = std::hint::black_box(\n"
        f"{i}            x.wrapping_mul(6_364_136_223_846_793_005)\n"
        f"{i}                .wrapping_add(1_442_695_040_888_963_407),\n"
        f"{i}        );\n"
        f"{i}    }}\n"
        f"{i}    std::hint::black_box(x);\n"
        f"{i}}}\n"
    )


def inject_text(text, path, edits):
    """Insert each (anchor, block) right after its anchor line in `text`; every anchor must occur
    exactly once."""
    for anchor, block in edits:
        n = text.count(anchor)
        if n != 1:
            raise SystemExit(
                f"error: injection anchor found {n} times in {path} (expected once): "
                f"{anchor.strip()!r}; update TARGETS in {SCRIPT.name}"
            )
        text = text.replace(anchor, anchor + block, 1)
    return text


def spins_for(pct_size, base_ns, ns_per_spin):
    return max(1, round(pct_size / 100.0 * base_ns / ns_per_spin))


# Fewest earlier inject trials per target for an in-context spin rate.
MIN_CONTEXT_TRIALS = 5


def spin_rates_in_context(trials, rev, min_trials=MIN_CONTEXT_TRIALS):
    """Per target, the slowdown one spin iteration caused where it was injected: the median over
    earlier inject trials of `rev` of the gate's change estimate divided by the spins injected
    (relative change per spin). The standalone rate (`calibrate_spin`) and a base time from a
    4-round A/A overshot on this machine (+7 % measured at "5 %", +16-21 % at "10 %"): the spin
    loop runs slower inside the kernel's code than alone, and the calibration A/A caught the host
    at a slow moment, so its base times were long. Trials are `load_trials` records; targets
    with fewer than `min_trials` usable trials are left out."""
    per = {}
    for t in trials:
        if t.get("kind") != "inject" or t.get("rev") != rev:
            continue
        by_id = {b["id"]: b for b in t["results"].get("benches", [])}
        for tid, v in t.get("targets", {}).items():
            ch = (by_id.get(tid) or {}).get("change") or {}
            est = ch.get("estimate")
            if v.get("spins", 0) > 0 and isinstance(est, (int, float)) and math.isfinite(est):
                per.setdefault(tid, []).append(est / v["spins"])
    return {tid: {"rel_per_spin": statistics.median(xs), "trials": len(xs)}
            for tid, xs in per.items() if len(xs) >= min_trials and statistics.median(xs) > 0}


def check_same_kernels(rate_rev, rev):
    """In-context spin rates of one revision hold for another only when the code the spins are
    injected into is the same: every file of the engine library (`engine/src`) unchanged."""
    diff = subprocess.run(["git", "diff", "--stat", rate_rev, rev, "--", "engine/src"],
                          cwd=REPO, capture_output=True, text=True, timeout=SHORT_TIMEOUT_S)
    if diff.returncode != 0 or diff.stdout.strip():
        raise SystemExit(
            f"error: --rates-from-rev {rate_rev[:12]}: engine/src differs from {rev[:12]}, so its "
            f"spin rates do not carry over:\n{diff.stdout or diff.stderr}")


def spins_in_context(pct_size, rel_per_spin):
    return max(1, round(pct_size / 100.0 / rel_per_spin))


def make_injected_commit(rev_sha, plan, message):
    """A commit whose parent is `rev_sha` and whose tree is rev's with the spin blocks of `plan`
    ({target id: spins}) inserted. Only objects are written: no ref, index, HEAD or working-tree
    file of the user's repository changes (a private index in a temp file). Fixed dates and
    author make the commit's sha a function of its content, so a resumed campaign reuses it and
    its warm build slot."""
    by_file = {}
    for tid, spins in plan.items():
        t = TARGETS[tid]
        by_file.setdefault(t["file"], []).append((t["anchor"], spin_block(t["cond"], spins)))
    date = git("show", "-s", "--format=%cI", rev_sha)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="eval-index-") as tmp:
        env["GIT_INDEX_FILE"] = str(Path(tmp) / "index")
        env.update(
            GIT_AUTHOR_NAME="harness eval",
            GIT_AUTHOR_EMAIL="eval@invalid",
            GIT_COMMITTER_NAME="harness eval",
            GIT_COMMITTER_EMAIL="eval@invalid",
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_DATE=date,
        )
        git("read-tree", rev_sha, env=env)
        for path, edits in sorted(by_file.items()):
            mode = git("ls-tree", rev_sha, "--", path).split()[0]
            text = git("show", f"{rev_sha}:{path}") + "\n"
            new = inject_text(text, path, edits)
            blob = git("hash-object", "-w", "--stdin", "--path", path, input_text=new)
            git("update-index", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        tree = git("write-tree", env=env)
        return git("commit-tree", tree, "-p", rev_sha, "-m", message, env=env)


# ---------------------------------------------------------------------------------------------
# Config generation


def eval_config_text(base_text, rev_note=""):
    """The repository's harness.yaml with its `suites:` block kept and an `eval` suite added: the
    eval targets plus the controls, exact ids. Everything else (criterion settings, policy) is
    the repository's, so the eval measures the gate as configured."""
    lines = base_text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if re.match(r"^suites:\s*$", l))
    except StopIteration:
        raise SystemExit("error: no top-level `suites:` in the harness config") from None
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i] and not lines[i][0].isspace() and not lines[i].startswith("#")
        ),
        len(lines),
    )
    by_target = {}
    for tid in [bench_id(t) for t in list(TARGETS) + CONTROLS]:
        by_target.setdefault(BENCH_TARGET[tid.split("/")[0]], []).append(tid)
    suite = [
        "  # Generated by harness/eval/evaluate.py " + rev_note,
        "  eval:",
        "    description: issue-9 evaluation, injected targets and untouched controls",
        "    benches:",
    ]
    for target, ids in sorted(by_target.items()):
        regexes = ", ".join("'^" + re.escape(i).replace("\\/", "/") + "$'" for i in ids)
        suite.append(f"      {target}: [{regexes}]")
    return "\n".join(lines[:end] + suite + lines[end:]) + "\n"


# ---------------------------------------------------------------------------------------------
# Running harness compare


class Load:
    """A busy loop pinned to one core for the duration of a trial; killed on exit, Ctrl-C and
    SIGTERM (its own process group, so nothing else is signalled)."""

    def __init__(self, kind, cpu=0):
        self.kind, self.cpu, self.proc = kind, cpu, None

    def __enter__(self):
        if self.kind == "one-core":
            code = "import os\ntry: os.sched_setaffinity(0, {%d})\nexcept OSError: pass\nwhile 1: pass" % self.cpu
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], start_new_session=True
            )
        return self

    def record(self):
        if not self.proc:
            return {"kind": "none"}
        return {"kind": self.kind, "cpu": self.cpu, "pid": self.proc.pid}

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        return False


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def harness_path(args):
    p = Path(args.harness)
    if not p.is_absolute():
        p = REPO / p
    if not p.is_file():
        raise SystemExit(
            f"error: harness binary {p} not found; build it with `cargo build --release -p "
            "harness` or pass --harness"
        )
    return p


def run_trial(args, trial_dir, kind, meta, base, head, suite, config, load="none",
              cache_dir=None):
    """One `harness compare` into `trial_dir` (skipped when trial.json is already there).
    Returns the trial record, or None when skipped."""
    if (trial_dir / "trial.json").is_file():
        return None
    hold.wait_while_held(log, f"[{kind}] {trial_dir.name}")
    tmp = trial_dir.with_name(trial_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    cmd = [
        str(harness_path(args)), "compare", "--repo", str(REPO), "--base", base, "--head", head,
        "--suite", suite, "--format", "json", "--out", str(tmp), "--fail-on", "never",
    ]
    if config:
        cmd += ["--config", str(config)]
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    cache = cache_dir or args.cache_dir
    if cache:
        cmd += ["--cache-dir", str(cache)]
    cmd += args.harness_arg or []
    log(f"[{kind}] {trial_dir.relative_to(args.out_dir)}: {shlex.join(cmd)}")
    started = utc_now()
    t0 = time.time()
    with Load(load) as ld, open(tmp / "harness.log", "w") as err, open(
        tmp / "stdout.json", "w"
    ) as out:
        try:
            # At the deadline the harness and every process group it started are killed (its
            # children's own deadlines are threads of the harness, gone with it).
            rc = procs.run(cmd, stdout=out, stderr=err, cwd=REPO,
                           timeout=COMPARE_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            raise SystemExit(f"error: harness compare passed its {COMPARE_TIMEOUT_S} s deadline "
                             f"in {tmp} (log kept there; no trial.json, so a rerun repeats it)")
        load_rec = ld.record()
    wall = time.time() - t0
    res_path = tmp / "results.json"
    if rc != 0 or not res_path.is_file():
        tail = (tmp / "harness.log").read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(
            f"error: harness compare exited {rc} in {tmp} (log kept there):\n  "
            + "\n  ".join(tail)
        )
    results = json.loads(res_path.read_text())
    first_round = min((r["started_unix_s"] for r in results.get("rounds", [])), default=None)
    record = {
        "schema": "harness-eval-trial/1",
        "kind": kind,
        **meta,
        "suite": suite,
        "base": base,
        "head": head,
        "config": str(config) if config else None,
        "rounds_arg": args.rounds,
        "cache_dir": str(cache) if cache else "default",
        "load": load_rec,
        "command": cmd,
        "evaluate_argv": sys.argv,
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_s": wall,
        # Checkout + build before the first round, and the rounds themselves.
        "setup_s": (first_round - t0) if first_round else None,
        "harness_wall_s": results.get("wall_s"),
        "host": host_info(),
        "load_avg_rounds": [r.get("load_avg") for r in results.get("rounds", [])],
    }
    (tmp / "trial.json").write_text(json.dumps(record, indent=2) + "\n")
    (tmp / "stdout.json").unlink(missing_ok=True)  # same content as results.json
    if trial_dir.exists():
        shutil.rmtree(trial_dir)
    tmp.rename(trial_dir)
    saved.compress_saved(trial_dir / "results.json")
    red, warn = gate_counts(results)
    nred, nwarn = naive_counts(results)
    log(f"  done in {wall:.0f} s: gate 🔴 {red} ⚠️ {warn} | naive 🔴 {nred} ⚠️ {nwarn}")
    return record


def resolve_rev(rev):
    return git("rev-parse", "--verify", f"{rev}^{{commit}}")


def write_eval_config(args, rev_sha):
    base_cfg = Path(args.config) if args.config else REPO / "harness.yaml"
    text = eval_config_text(base_cfg.read_text(), f"from {base_cfg.name}")
    path = args.out_dir / "eval-harness.yaml"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# Subcommands


def cmd_aa(args):
    rev = resolve_rev(args.rev)
    config = write_eval_config(args, rev)
    d = args.out_dir / "aa" / f"{args.suite}-{args.load}"
    for i in range(1, args.runs + 1):
        run_trial(
            args, d / f"run-{i:03d}", "aa",
            {"scenario": f"aa/{args.suite}/{args.load}", "rev": rev, "index": i},
            rev, rev, args.suite, config, load=args.load,
        )


SPIN_MAIN = """
use std::time::Instant;

#[inline(never)]
fn spin(n: u64) {
    let one = std::hint::black_box(true);
BLOCK
}

fn main() {
    let mut a = std::env::args().skip(1);
    let n: u64 = a.next().unwrap().parse().unwrap();
    let reps: usize = a.next().unwrap().parse().unwrap();
    spin(n);
    for _ in 0..reps {
        let t = Instant::now();
        spin(n);
        println!("{}", t.elapsed().as_nanos());
    }
}
"""


def calibrate_spin(reps=9):
    """ns per spin iteration: the spin block compiled alone with the bench profile's opt-level 3,
    timed at two sizes (min of `reps` each, so preemption drops out); the slope removes fixed
    overhead."""
    with tempfile.TemporaryDirectory(prefix="eval-spin-") as tmp:
        src = Path(tmp) / "spin.rs"
        block = spin_block("one", "n", indent="    ").replace("nu64", "n")
        src.write_text(SPIN_MAIN.replace("BLOCK", block))
        exe = Path(tmp) / "spin"
        subprocess.run(
            ["rustc", "-C", "opt-level=3", "-C", "debuginfo=0", "-o", str(exe), str(src)],
            check=True, timeout=SHORT_TIMEOUT_S,
        )
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True,
                               timeout=60).stdout
        pts = {}
        for n in (1_000_000, 10_000_000):
            out = subprocess.run([str(exe), str(n), str(reps)], capture_output=True, text=True,
                                 check=True, timeout=SHORT_TIMEOUT_S).stdout.split()
            pts[n] = min(int(x) for x in out)
    (n1, t1), (n2, t2) = sorted(pts.items())
    return {
        "ns_per_spin": (t2 - t1) / (n2 - n1),
        "points_ns": {str(k): v for k, v in pts.items()},
        "rustc": rustc.strip(),
        "flags": "-C opt-level=3",
    }


def base_ns_from(trials_dirs, ids):
    """Per id: the median over A/A trials of the base side's median_ns (the gate's per-round
    lower quartile, median over rounds)."""
    vals = {i: [] for i in ids}
    for d in trials_dirs:
        res = saved.load_json(d / "results.json")
        for b in res.get("benches", []):
            if b["id"] in vals and b.get("base"):
                vals[b["id"]].append(b["base"]["median_ns"])
    return {i: statistics.median(v) for i, v in vals.items() if v}


def load_calibration(args, rev, run_if_missing=True):
    path = args.out_dir / "calibration.json"
    if path.is_file():
        cal = json.loads(path.read_text())
        if cal.get("rev") == rev:
            return cal
        log(f"note: {path} is for {cal.get('rev', '?')[:12]}, not {rev[:12]}: recalibrating")
    if not run_if_missing:
        raise SystemExit(f"error: no calibration in {path}; run `{SCRIPT.name} calibrate`")
    return cmd_calibrate(args)


def cmd_calibrate(args):
    rev = resolve_rev(args.rev)
    config = write_eval_config(args, rev)
    ids = [bench_id(t) for t in TARGETS]
    log("calibrating the spin rate")
    spin = calibrate_spin()
    log(f"  {spin['ns_per_spin']:.3f} ns per spin iteration")
    # Base ns/iter: from A/A trials of this revision already in the out dir that hold every
    # target, else one short A/A run of the eval suite.
    dirs = []
    for p in sorted((args.out_dir / "aa").glob("*/*/trial.json")):
        t = json.loads(p.read_text())
        if t.get("rev") == rev and t["load"]["kind"] == "none":
            dirs.append(p.parent)
    base = base_ns_from(dirs, ids) if dirs else {}
    source = f"{len(dirs)} A/A trials in {args.out_dir / 'aa'}"
    if set(base) != set(ids):
        d = args.out_dir / "calibration-aa"
        saved = args.rounds
        args.rounds = args.calibration_rounds
        run_trial(args, d, "calibration", {"scenario": "calibration", "rev": rev}, rev, rev,
                  "eval", config)
        args.rounds = saved
        base = base_ns_from([d], ids)
        source = f"A/A run {d}"
        missing = set(ids) - set(base)
        if missing:
            raise SystemExit(f"error: calibration A/A run measured none of {sorted(missing)}")
    cal = {
        "schema": "harness-eval-calibration/1",
        "rev": rev,
        "created_utc": utc_now().isoformat(timespec="seconds"),
        "spin": spin,
        "base_ns": base,
        "base_ns_source": source,
        "host": host_info(),
    }
    (args.out_dir / "calibration.json").write_text(json.dumps(cal, indent=2) + "\n")
    for i, ns in base.items():
        log(f"  {i}: {ns:.0f} ns/iter")
    return cal


def cmd_inject(args):
    rev = resolve_rev(args.rev)
    cal = load_calibration(args, rev)
    config = write_eval_config(args, rev)
    targets = [t for t in TARGETS if bench_id(t) in cal["base_ns"]]
    sizes = [float(s) for s in args.sizes.split(",")]
    rates = {}
    rate_rev = resolve_rev(args.rates_from_rev) if args.rates_from_rev else rev
    rate_dir = args.rates_from_dir or args.out_dir
    if rate_rev != rev:
        check_same_kernels(rate_rev, rev)
    if args.spin_rate != "standalone":
        rates = spin_rates_in_context(load_trials(rate_dir / "inject"), rate_rev)
        missing = [bench_id(t) for t in targets if bench_id(t) not in rates]
        if missing and args.spin_rate == "in-context":
            raise SystemExit(
                f"error: --spin-rate in-context needs {MIN_CONTEXT_TRIALS} earlier inject trials "
                f"of {rate_rev[:12]} per target under {rate_dir / 'inject'}; too few for "
                f"{', '.join(missing)} (run with --spin-rate standalone first)")
        if missing:
            rates = {}
        for r in rates.values():
            r["source"] = f"{rate_dir / 'inject'}, trials of {rate_rev[:12]}"
    source = "in-context" if rates else "standalone"
    log(f"spin counts from the {source} spin rate"
        + (": " + ", ".join(f"{i} {100 * r['rel_per_spin'] * 1000:.3f} % per 1000 spins "
                            f"({r['trials']} trials)" for i, r in rates.items()) if rates else ""))
    for size in sizes:  # one commit per size: its trials reuse one warm head build
        plan = {
            t: (spins_in_context(size, rates[bench_id(t)]["rel_per_spin"]) if rates
                else spins_for(size, cal["base_ns"][bench_id(t)], cal["spin"]["ns_per_spin"]))
            for t in targets
        }
        msg = f"eval: inject {size:g} % slowdown (not for merging)\n\n" + "\n".join(
            f"{bench_id(t)}: {n} spins ≈ {n * cal['spin']['ns_per_spin']:.0f} ns "
            f"of {cal['base_ns'][bench_id(t)]:.0f} ns/iter" for t, n in plan.items()
        )
        head = make_injected_commit(rev, plan, msg)
        log(f"inject {size:g} %: commit {head[:12]} (parent {rev[:12]})")
        # Trials of the two spin rates never share a directory (resuming must not mix them).
        d = args.out_dir / "inject" / (f"{size:g}pct" + ("-ctx" if rates else "")
                                       + (f"-{rate_rev[:7]}" if rates and rate_rev != rev else ""))
        for i in range(1, args.trials + 1):
            run_trial(
                args, d / f"trial-{i:03d}", "inject",
                {
                    "scenario": f"inject/{size:g}",
                    "rev": rev,
                    "index": i,
                    "size_pct": size,
                    "spin_rate": source,
                    "targets": {
                        bench_id(t): {
                            "class": TARGETS[t]["class"],
                            "spins": n,
                            "injected_ns": n * cal["spin"]["ns_per_spin"],
                            **({"rel_per_spin": rates[bench_id(t)]["rel_per_spin"],
                                "rate_trials": rates[bench_id(t)]["trials"],
                                "rate_source": rates[bench_id(t)]["source"]} if rates else {}),
                            "base_ns": cal["base_ns"][bench_id(t)],
                            "file": TARGETS[t]["file"],
                        }
                        for t, n in plan.items()
                    },
                    "controls": [bench_id(c) for c in CONTROLS],
                    "calibration": cal,
                },
                rev, head, args.suite, config,
            )


def cmd_walltime(args):
    rev = resolve_rev(args.rev)
    base = resolve_rev(args.base) if args.base else rev
    config = write_eval_config(args, rev)
    for suite in args.suites.split(","):
        for cache in args.caches.split(","):
            d = args.out_dir / "walltime" / f"{suite}-{cache}"
            for i in range(1, args.runs + 1):
                if (d / f"run-{i:03d}" / "trial.json").is_file():
                    continue
                tmp_cache = None
                if cache == "cold":
                    tmp_cache = Path(tempfile.mkdtemp(prefix="eval-cold-cache-"))
                try:
                    run_trial(
                        args, d / f"run-{i:03d}", "walltime",
                        {"scenario": f"walltime/{suite}/{cache}", "rev": rev, "index": i,
                         "cache": cache},
                        base, rev, suite, config, cache_dir=tmp_cache,
                    )
                finally:
                    if tmp_cache:
                        shutil.rmtree(tmp_cache, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# summarize


def load_trials(root):
    trials = []
    for p in sorted(Path(root).rglob("trial.json")):
        if p.parent.name.endswith(".tmp"):
            continue
        rec = json.loads(p.read_text())
        res = saved.find(p.parent / "results.json")
        if res is None:
            continue
        rec["results"] = saved.load_json(res)
        rec["dir"] = str(p.parent)
        trials.append(rec)
    return trials


def pairing(t):
    """How the gate paired base and head in a trial's rounds: `sample` (both sides serve each
    benchmark and their samples alternate, harness/src/measure/serve.rs; every target paired), `bench`
    (one criterion run per benchmark and side, base then head, since 2026-11-30) or `target`
    (each side's whole bench target, before). Trials of different methods are never pooled."""
    method = t["results"].get("method", {})
    sampling = method.get("sampling") or ""
    if sampling.startswith("paired") and "criterion runs for" not in sampling:
        return "sample"
    return "bench" if "one benchmark at a time" in method.get("order", "") else "target"


# Results written before results.json recorded the policy (method.policy, 2026-11-30) were all
# decided with these values of the fields the tuning moved (the eval configs override neither).
LEGACY_POLICY = {"noise_k": 2.5, "max_threshold": 0.15}


def policy_label(t):
    """`noise_k 2.5, max_threshold 0.25[, noise_rounds 6 above 0.06][, 8 rounds]`: the tuned
    fields of the policy that decided a trial (recorded in results.json, else LEGACY_POLICY).
    Trials of different policies never pool."""
    pol = t["results"].get("method", {}).get("policy") or LEGACY_POLICY
    label = ", ".join(f"{k} {pol.get(k, LEGACY_POLICY[k]):g}" for k in LEGACY_POLICY)
    # Noise rounds (on by default since 2026-11-30, with noise_target) add measured rounds.
    if pol.get("noise_rounds"):
        label += f", noise_rounds {pol['noise_rounds']} above {pol.get('noise_target', 0):g}"
    # First-pass rounds: 6 for every full and eval-suite trial until the default became 8
    # (2026-11-30), so only other counts are named.
    rounds = first_pass_rounds(t)
    if rounds is not None and rounds != 6:
        label += f", {rounds} rounds"
    return label


def after_rounds_s(t):
    """Seconds from the end of the last benchmark round to the results: the e2e stage (its
    release build, which dominates when its build cache is cold, and its checks) and the report.
    None when results.json lacks the round or creation times."""
    res = t["results"]
    ends = [r["started_unix_s"] + r["duration_s"] for r in res.get("rounds", [])
            if r.get("started_unix_s") is not None and r.get("duration_s") is not None]
    if not ends or res.get("created_unix_s") is None:
        return None
    return max(0.0, res["created_unix_s"] - max(ends))


def first_pass_rounds(t):
    """The rounds of the trial's first pass, as its results.json records them (`method.rounds`:
    the suite's or `--rounds`' count, before any noise or confirmation rounds)."""
    return t["results"].get("method", {}).get("rounds")


def noise_label(t):
    """`6 above 6 %` when the trial's policy gave noise rounds, else `none`: they add measured
    rounds, so wall times with and without them never pool."""
    pol = t["results"].get("method", {}).get("policy") or {}
    if not pol.get("noise_rounds"):
        return "none"
    return f"{pol['noise_rounds']} above {100 * pol.get('noise_target', 0):g} %"


def criterion_label(t):
    """Warm-up + measurement time per criterion run, e.g. `0.2+0.6 s` (suites may differ)."""
    args = t["results"].get("method", {}).get("criterion_args", [])
    val = {a: b for a, b in zip(args, args[1:])}
    return f"{val.get('--warm-up-time', '?')}+{val.get('--measurement-time', '?')} s"


def summarize(trials, family_full=None):
    """All tables of the summary as one JSON-able dict."""
    out = {"aa": [], "inject": [], "walltime": [], "revisions": [], "hosts": []}
    aa = {}
    for t in trials:
        if t["kind"] == "aa":
            load = t["load"]["kind"]
            aa.setdefault((t["suite"], load, t.get("rounds_arg"), pairing(t), policy_label(t)),
                          []).append(t)
    for (suite, load, rounds, pair, pol), ts in sorted(aa.items(), key=lambda kv: str(kv[0])):
        out["aa"].append({"suite": suite, "load": load, "rounds_arg": rounds, "pairing": pair,
                          "policy": pol,
                          "benches_per_run": len(ts[0]["results"]["benches"]),
                          **aggregate_aa(ts)})
    inj = {}
    for t in trials:
        if t["kind"] == "inject":
            inj.setdefault((t["size_pct"], t["suite"], t.get("rounds_arg"), pairing(t),
                            spin_label(t), policy_label(t)), []).append(t)
    for (size, suite, rounds, pair, spin, pol), ts in sorted(
            inj.items(), key=lambda kv: (kv[0][0], str(kv[0]))):
        for cls in ("st", "mt"):
            ids = {i for t in ts for i, v in t["targets"].items() if v["class"] == cls}
            if not ids:
                continue
            controls = {c for t in ts for c in t["controls"]}
            injected = statistics.median(
                v["injected_ns"] / v["base_ns"] for t in ts for i, v in t["targets"].items()
                if i in ids
            )
            out["inject"].append({
                "size_pct": size, "class": cls, "suite": suite, "rounds_arg": rounds,
                "pairing": pair, "spin_rate": spin, "policy": pol, "trials": len(ts),
                "targets": sorted(ids),
                "injected_fraction": injected,
                **aggregate_inject(ts, ids, controls, family_full),
            })
    out["inject_targets"] = []
    for (size, suite, rounds, pair, spin, pol), ts in sorted(
            inj.items(), key=lambda kv: (kv[0][0], str(kv[0]))):
        for tid in sorted({i for t in ts for i in t["targets"]}):
            agg = aggregate_inject(ts, {tid}, set(), family_full)
            out["inject_targets"].append({
                "size_pct": size, "target": tid, "suite": suite, "rounds_arg": rounds,
                "pairing": pair, "spin_rate": spin, "policy": pol, "class": next(t["targets"][tid]["class"] for t in ts if tid in t["targets"]),
                "gate": {**agg["gate"], **noise_stats(ts, {tid})}, "naive": agg["naive"],
            })
    wt = {}
    for t in trials:
        cache = t.get("cache") or ("cold" if t["cache_dir"] not in ("default", None)
                                   and "eval-cold-cache-" in t["cache_dir"] else "warm")
        # First-pass rounds are part of the key: a change of `rounds` alone changes the time.
        wt.setdefault((t["kind"], t["suite"], cache, t.get("rounds_arg"), pairing(t),
                       criterion_label(t), noise_label(t), first_pass_rounds(t)), []).append(t)
    for (kind, suite, cache, rounds, pair, crit, noise, first), ts in sorted(
            wt.items(), key=lambda kv: str(kv[0])):
        walls = [t["wall_s"] for t in ts]
        setups = [t["setup_s"] for t in ts if t.get("setup_s") is not None]
        afters = [a for a in map(after_rounds_s, ts) if a is not None]
        out["walltime"].append({
            "kind": kind, "suite": suite, "cache": cache, "rounds_arg": rounds, "pairing": pair,
            "criterion": crit, "noise_rounds": noise, "first_pass_rounds": first,
            "runs": len(ts),
            "median_s": statistics.median(walls), "max_s": max(walls), "min_s": min(walls),
            "median_setup_s": statistics.median(setups) if setups else None,
            "max_setup_s": max(setups) if setups else None,
            "median_after_s": statistics.median(afters) if afters else None,
            "max_after_s": max(afters) if afters else None,
        })
    out["revisions"] = sorted({t.get("rev", "?") for t in trials})
    out["hosts"] = sorted({json.dumps(t["host"], sort_keys=True) for t in trials})
    out["hosts"] = [json.loads(h) for h in out["hosts"]]
    out["commands"] = sorted({shlex.join(["python3", "harness/eval/evaluate.py",
                                          *t["evaluate_argv"][1:]]) for t in trials})
    out["profiles"] = sorted({str(t["results"].get("method", {}).get("profile")) for t in trials})
    out["trials"] = len(trials)
    dates = sorted(t.get("started_utc", "") for t in trials)
    out["dates"] = [dates[0], dates[-1]] if dates else []
    return out


def spin_label(t):
    """How a trial's spins were sized: `standalone`, `in-context` (rates from earlier trials of
    the same revision), or `in-context from <rev>` (`--rates-from-rev`: another revision's
    trials, measured with its own method). Trials of different labels are never pooled."""
    spin = t.get("spin_rate", "standalone")
    if spin != "in-context":
        return spin
    for v in t.get("targets", {}).values():
        m = re.search(r"trials of ([0-9a-f]{7,})", v.get("rate_source", ""))
        if m and not t.get("rev", "").startswith(m.group(1)):
            return f"in-context from {m.group(1)[:7]}"
    return spin


def size_label(row):
    """`5 %`, `5 % (ctx)` when the spins came from the in-context spin rate, `5 % (ctx
    f08c84c)` when that rate came from another revision's trials."""
    spin = row.get("spin_rate") or ""
    if spin == "in-context":
        return f"{row['size_pct']:g} % (ctx)"
    if spin.startswith("in-context from "):
        return f"{row['size_pct']:g} % (ctx {spin.split()[-1]})"
    return f"{row['size_pct']:g} %"


def noise_cells(r):
    """`0.117, 0.180 | 14.2 %`: the per-round sd cells of a row (`noise_stats`), or dashes."""
    sd, p75, thr = (r.get("round_sd_median"), r.get("round_sd_p75"), r.get("threshold_median"))
    sds = "–" if sd is None else f"{sd:.3f}, {p75:.3f}"
    return f"{sds} | {fmt_threshold(thr)}"


def fmt_s(s):
    if s is None:
        return "–"
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def render_md(s, generated):
    L = [
        "# How sensitive is the gate? (harness/eval)",
        "",
        f"Generated {generated} by `python3 harness/eval/evaluate.py summarize` from "
        f"{s['trials']} trials, run {' … '.join(s['dates'])} (UTC).",
        "",
    ]
    for h in s["hosts"]:
        L.append(f"- machine: {h['cpu']}, {h['cores']} cores ({h['uname']})")
    for r in s["revisions"]:
        L.append(f"- revision measured: `{r}`")
    L.append(f"- calibration profile used by the gate: {', '.join(s['profiles'])}")
    L += [
        "",
        "## A/A comparisons (same revision both sides: every 🔴/⚠️ is a false alarm)",
        "",
        "pairs: `sample` = base and head alternate sample by sample within each benchmark "
        "(paired sampling, since 2026-11-30; harness/STATS.md, \"Paired sampling\"), "
        "`bench` = one criterion run per benchmark and side, "
        "`target` = whole bench target by whole bench target (before; \"Interleaving\").",
        "",
        "| method | pairs | policy | suite | load | rounds | runs | 🔴 total | runs with 🔴 | ⚠️ total | max ⚠️ per run | runs with ≥ 2 ⚠️ | ❔ per run | per-round sd (median, p75) | median threshold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in s["aa"]:
        for m in ("gate", "naive"):
            r = row[m]
            noisy = r.get("too_noisy_per_run")
            L.append(
                f"| {m} | {row['pairing']} | {row['policy']} | "
                f"{row['suite']} ({row['benches_per_run']} benches) | "
                f"{row['load']} | "
                f"{row['rounds_arg'] or 'default'} | {r['runs']} | {r['red']} | "
                f"{r['runs_with_red']} | {r['warn']} | {r['max_warn_per_run']} | "
                f"{r['runs_with_2_warn']} | {'–' if noisy is None else f'{noisy:.1f}'} | "
                f"{noise_cells(r)} |"
            )
    L += [
        "",
        "## Injected slowdowns (throwaway commits with calibrated extra work in the kernel)",
        "",
        "Detection per (trial × target). ST = single-threaded targets, MT = all cores. "
        "Controls are untouched benches of the same suite: their 🔴/⚠️ are false alarms.",
        "",
        "| method | pairs | policy | size | class | suite | rounds | trials | observations | "
        "detected 🔴 | "
        "detected 🔴+⚠️ | 🔴 under full-suite family | measured change (median) | "
        "control 🔴 / ⚠️ (of obs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in s["inject"]:
        for m in ("gate", "naive"):
            r = row[m]
            full = fmt_pct(r.get("detection_red_full_family")) if m == "gate" else "–"
            mc = fmt_change(r["median_change"])
            L.append(
                f"| {m} | {row['pairing']} | {row['policy']} | {size_label(row)} | "
                f"{row['class'].upper()} | "
                f"{row['suite']} | "
                f"{row['rounds_arg'] or 'default'} | {row['trials']} | {r['observations']} | "
                f"{fmt_pct(r['detection_red'])} ({r['red']}) | "
                f"{fmt_pct(r['detection_red_or_warn'])} ({r['red_or_warn']}) | {full} | {mc} | "
                f"{r['control_red']} / {r['control_warn']} ({r['control_observations']}) |"
            )
    L += [
        "",
        "Per target (gate 🔴 / 🔴+⚠️ · naive 🔴 / 🔴+⚠️ · measured change gate, naive):",
        "",
        "| pairs | size | target | class | trials | gate 🔴 | gate 🔴+⚠️ | naive 🔴 | "
        "naive 🔴+⚠️ | change (gate) | change (naive) | per-round sd (median, p75) | "
        "median threshold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in s["inject_targets"]:
        g, n = row["gate"], row["naive"]
        L.append(
            f"| {row['pairing']} | {size_label(row)} | `{row['target']}` | "
            f"{row['class'].upper()} | "
            f"{g['observations']} | {fmt_pct(g['detection_red'])} | "
            f"{fmt_pct(g['detection_red_or_warn'])} | {fmt_pct(n['detection_red'])} | "
            f"{fmt_pct(n['detection_red_or_warn'])} | {fmt_change(g['median_change'])} | "
            f"{fmt_change(n['median_change'])} | {noise_cells(g)} |"
        )
    L += [
        "",
        "## Wall time per comparison",
        "",
        "setup = checkout and build before the first round (large when the head's code changed "
        "or the cache is cold); after = from the last benchmark round to the results (the e2e "
        "stage: its release build, large when that build's cache is cold, and its checks).",
        "",
        "| kind | pairs | suite | criterion run | noise rounds | cache | rounds | runs | median | "
        "min … max | median setup | max setup | median after | max after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["walltime"]:
        L.append(
            f"| {r['kind']} | {r['pairing']} | {r['suite']} | {r['criterion']} | "
            f"{r.get('noise_rounds', 'none')} | {r['cache']} | {rounds_cell(r)} | "
            f"{r['runs']} | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} … {fmt_s(r['max_s'])} "
            f"| {fmt_s(r['median_setup_s'])} | {fmt_s(r['max_setup_s'])} "
            f"| {fmt_s(r.get('median_after_s'))} | {fmt_s(r.get('max_after_s'))} |"
        )
    L += ["", "## Regenerate", "", "```sh", "cargo build --release -p harness"]
    L += s["commands"]
    L += ["python3 harness/eval/evaluate.py summarize", "```", ""]
    return "\n".join(L)


def rounds_cell(r):
    """A wall-time row's first-pass rounds, `6` or `12 (--rounds)` when the trial set them."""
    first = r.get("first_pass_rounds")
    cell = "?" if first is None else str(first)
    return f"{cell} (--rounds)" if r["rounds_arg"] is not None else cell


README_START = "<!-- eval-table:start -->"
README_END = "<!-- eval-table:end -->"


def render_readme(s, generated, target="harness/eval/README.md"):
    """The short form for the README: false alarms, detection and wall time of the gate at its
    default rounds, per pairing method (`sample`: paired sampling, the current one; `bench`:
    one criterion run per benchmark and side), next to the naive method."""
    L = [f"Generated {generated} by `evaluate.py summarize --readme {target}` from "
         f"{s['trials']} trials ({' … '.join(d[:10] for d in s['dates'])}).", ""]
    L += ["| A/A, same revision both sides | runs | false 🔴 (runs with one) | ⚠️: total, "
          "most in one run | ❔ per run | per-round sd of ln(head/base): median, p75 | "
          "median threshold |", "|---|---|---|---|---|---|---|"]
    for row in s["aa"]:
        if row["rounds_arg"] is not None:
            continue
        for m in ("gate", "naive"):
            r = row[m]
            noisy = r.get("too_noisy_per_run")
            label = (f"{'**gate**' if m == 'gate' else 'naive'}, {row['suite']} suite "
                     f"({row['benches_per_run']}), load: {row['load']}, pairs: {row['pairing']}, "
                     f"{row['policy']}")
            cells = noise_cells(r) if m == "gate" else "– | –"
            L.append(f"| {label} | {r['runs']} | {r['red']} ({r['runs_with_red']}) | "
                     f"{r['warn']}, {r['max_warn_per_run']} | "
                     f"{'–' if noisy is None else f'{noisy:.1f}'} | {cells} |")
    L += ["", "| injected slowdown | measured (median) | class | pairs | policy | trials | "
          "**gate** 🔴 | gate 🔴 or ⚠️ | naive 🔴 | naive 🔴 or ⚠️ | "
          "false 🔴/⚠️ on controls (gate) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in s["inject"]:
        if row["rounds_arg"] is not None:
            continue
        g, n = row["gate"], row["naive"]
        L.append(f"| {size_label(row)} | {fmt_change(g['median_change'])} | "
                 f"{row['class'].upper()} | {row['pairing']} | {row['policy']} | "
                 f"{row['trials']} | "
                 f"{fmt_pct(g['detection_red'])} | {fmt_pct(g['detection_red_or_warn'])} | "
                 f"{fmt_pct(n['detection_red'])} | {fmt_pct(n['detection_red_or_warn'])} | "
                 f"{g['control_red']} / {g['control_warn']} of {g['control_observations']} |")
    L += ["", "| wall time of one comparison | pairs | warm-up + measurement | rounds | "
          "noise rounds | cache | runs | median | range | median setup (checkout, build) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["walltime"]:
        if r["rounds_arg"] is not None or r["pairing"] == "target":
            continue
        L.append(f"| {r['kind']}, {r['suite']} suite | {r['pairing']} | {r['criterion']} | "
                 f"{rounds_cell(r)} | {r.get('noise_rounds', 'none')} | {r['cache']} | "
                 f"{r['runs']} | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} … "
                 f"{fmt_s(r['max_s'])} | {fmt_s(r['median_setup_s'])} |")
    return "\n".join(L)


def splice_readme(path, table):
    text = Path(path).read_text()
    if text.count(README_START) != 1 or text.count(README_END) != 1:
        raise SystemExit(f"error: {path}: needs exactly one {README_START} and one {README_END}")
    head, rest = text.split(README_START)
    _, tail = rest.split(README_END)
    Path(path).write_text(f"{head}{README_START}\n{table}\n{README_END}{tail}")


def cmd_summarize(args):
    root = Path(args.results)
    trials = load_trials(root)
    if not trials:
        raise SystemExit(f"error: no trials (trial.json + results.json) under {root}")
    family = args.full_family
    if family is None:
        fulls = [len(t["results"]["benches"]) for t in trials
                 if t["kind"] == "aa" and t["suite"] == "full"]
        family = max(fulls) if fulls else None
    s = summarize(trials, family)
    s["full_family"] = family
    generated = utc_now().strftime("%Y-%m-%d %H:%M UTC")
    md = render_md(s, generated)
    reps = render_replays(load_replays(root))
    if reps:
        md = md.rstrip("\n") + "\n\n" + "\n".join(reps) + "\n"
    out = Path(args.write_to) if args.write_to else root
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(md)
    (out / "summary.json").write_text(json.dumps({"generated": generated, **s}, indent=2) + "\n")
    print(md)
    log(f"wrote {out / 'summary.md'} and {out / 'summary.json'}")
    if args.readme:
        splice_readme(args.readme, render_readme(s, generated, args.readme))
        log(f"updated the table in {args.readme}")


def replay_trial(args, t):
    """`harness replay` of one trial's results.json under args.policy/args.rounds, starting from
    the policy the trial recorded; for a trial from before policies were recorded, from its
    config's policy with the LEGACY_POLICY values (today's defaults may differ). Returns the
    replayed results."""
    cmd = [str(harness_path(args)), "replay", "--input",
           str(saved.find(Path(t["dir"]) / "results.json")),
           "--format", "json"]
    over = json.loads(args.policy) if args.policy else {}
    if not t["results"].get("method", {}).get("policy"):
        if t.get("config") and Path(t["config"]).is_file():
            cmd += ["--config", t["config"]]
        over = {**LEGACY_POLICY, **over}
    if over:
        cmd += ["--policy", json.dumps(over)]
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=SHORT_TIMEOUT_S)
    if p.returncode != 0:
        raise SystemExit(f"error: {shlex.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def cmd_replay(args):
    """Every A/A and inject trial with benchmark or sample pairing under --results (each pairing
    aggregated apart; target pairing is history), decided again under
    another policy by `harness replay` (nothing is measured), aggregated as `summarize` does:
    results/replay/<label>.json, which `summarize` renders next to the measured tables."""
    root = Path(args.results)
    trials = [t for t in load_trials(root)
              if t["kind"] in ("aa", "inject") and pairing(t) in ("bench", "sample")]
    if not trials:
        raise SystemExit(f"error: no A/A or inject trials with benchmark or sample pairing "
                         f"under {root}")
    replayed = []
    for t in trials:
        replayed.append({**t, "results": replay_trial(args, t)})
    s = summarize(replayed)
    # Suspects that only the variant makes have no confirmation rounds on record; with none, the
    # replay is exactly what the gate would have printed under the variant on these samples.
    unconfirmable = sum("no confirmation rounds were recorded" in (b.get("note") or "")
                        for t in replayed for b in t["results"]["benches"])
    changed = sum(a["status"] != b["status"] for t, o in zip(replayed, trials)
                  for a, b in zip(o["results"]["benches"], t["results"]["benches"]))
    rec = {"schema": "harness-eval-replay/1", "label": args.label, "policy": args.policy or "{}",
           "rounds": args.rounds, "generated": utc_now().isoformat(timespec="seconds"),
           "trials": len(replayed), "unconfirmable_suspects": unconfirmable,
           "changed_statuses": changed, "aa": s["aa"], "inject": s["inject"]}
    out = root / "replay"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.label}.json").write_text(json.dumps(rec, indent=2) + "\n")
    print("\n".join(render_replays([rec])))
    log(f"wrote {out / (args.label + '.json')}")


def load_replays(root):
    d = Path(root) / "replay"
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


def render_replays(recs):
    """The replayed policy variants: A/A false alarms and detection, one row per variant."""
    if not recs:
        return []
    L = ["## Policy variants, replayed on the recorded samples (`evaluate.py replay`)", "",
         "`harness replay` decides every recorded trial again under another policy; nothing is "
         "measured again. A replay cannot add rounds, and a benchmark that becomes a suspect "
         "only under the variant has no confirmation rounds, so it is at most ⚠️: the 🔴 "
         "columns of looser variants are a lower bound. Where a variant made no such suspect "
         "(column \"unconfirmable\" 0), its rows are exactly what the gate would have printed "
         "under it on these samples.", "",
         "| variant | policy overrides | rounds | trials | rows whose status changed | "
         "unconfirmable suspects |", "|---|---|---|---|---|---|"]
    for r in recs:
        L.append(f"| {r['label']} | `{r['policy']}` | {r['rounds'] or 'recorded'} | "
                 f"{r.get('trials', '–')} | {r.get('changed_statuses', '–')} | "
                 f"{r.get('unconfirmable_suspects', '–')} |")
    L += ["",
         "| variant | policy overrides | rounds | A/A scenario | runs | false 🔴 (runs) | "
         "⚠️ total, max per run | ❔ per run | median threshold |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        for row in r["aa"]:
            g = row["gate"]
            L.append(f"| {r['label']} | `{r['policy']}` | {r['rounds'] or 'recorded'} | "
                     f"{row['suite']}, load {row['load']}, pairs {row.get('pairing', 'bench')} | "
                     f"{g['runs']} | {g['red']} "
                     f"({g['runs_with_red']}) | {g['warn']}, {g['max_warn_per_run']} | "
                     f"{g['too_noisy_per_run']:.1f} | "
                     f"{fmt_threshold(g.get('threshold_median'))} |")
    L += ["", "| variant | size | class | pairs | trials | gate 🔴 | gate 🔴 or ⚠️ | "
          "control 🔴 / ⚠️ (of obs) |", "|---|---|---|---|---|---|---|---|"]
    for r in recs:
        for row in r["inject"]:
            g = row["gate"]
            L.append(f"| {r['label']} | {size_label(row)} | {row['class'].upper()} | "
                     f"{row.get('pairing', 'bench')} | {row['trials']} | {fmt_pct(g['detection_red'])} | "
                     f"{fmt_pct(g['detection_red_or_warn'])} | {g['control_red']} / "
                     f"{g['control_warn']} ({g['control_observations']}) |")
    return L


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--harness", default="target/release/harness",
                        help="the harness binary (default: %(default)s, relative to the repo)")
        sp.add_argument("--out-dir", type=Path,
                        help="where trials go (default: harness/eval/results/<UTC date>)")
        sp.add_argument("--rev", default="HEAD", help="the revision under test (default HEAD)")
        sp.add_argument("--rounds", type=int, help="passed to harness compare --rounds")
        sp.add_argument("--cache-dir", help="passed to harness compare --cache-dir")
        sp.add_argument("--config", help="base harness.yaml (default: the repository's)")
        sp.add_argument("--harness-arg", action="append", metavar="ARG",
                        help="extra argument for harness compare (repeat)")
        sp.add_argument("--calibration-rounds", type=int, default=4,
                        help="rounds of the calibration A/A run (default %(default)s)")

    a = sub.add_parser("aa", help="A/A comparisons")
    common(a)
    a.add_argument("--suite", default="full", help="full, quick or eval (default full)")
    a.add_argument("--runs", type=int, required=True)
    a.add_argument("--load", choices=["none", "one-core"], default="none")
    a.set_defaults(fn=cmd_aa)

    c = sub.add_parser("calibrate", help="spin rate and base ns/iter of the targets")
    common(c)
    c.set_defaults(fn=cmd_calibrate)

    i = sub.add_parser("inject", help="detection of injected slowdowns")
    common(i)
    i.add_argument("--sizes", default="1,2,5,10,20", help="slowdowns in %% (default %(default)s)")
    i.add_argument("--trials", type=int, required=True)
    i.add_argument("--spin-rate", choices=["auto", "standalone", "in-context"], default="auto",
                   help="spins per size from the standalone spin loop and calibration base times, "
                        "or from the slowdown per spin measured by earlier inject trials of REV "
                        "in --out-dir (auto: in-context when every target has "
                        f"{MIN_CONTEXT_TRIALS} such trials)")
    i.add_argument("--rates-from-rev", metavar="REV",
                   help="in-context spin rates from the inject trials of REV instead of --rev "
                        "(refused unless engine/src is the same in both)")
    i.add_argument("--rates-from-dir", type=Path, metavar="DIR",
                   help="out dir holding those trials (default --out-dir)")
    i.add_argument("--suite", default="eval",
                   help="eval (targets + controls, default) or full (same commits, every bench)")
    i.set_defaults(fn=cmd_inject)

    w = sub.add_parser("walltime", help="wall time of comparisons, warm and cold caches")
    common(w)
    w.add_argument("--suites", default="full,quick")
    w.add_argument("--caches", default="warm,cold")
    w.add_argument("--runs", type=int, default=1)
    w.add_argument("--base", help="base revision (default: --rev, an A/A comparison)")
    w.set_defaults(fn=cmd_walltime)

    s = sub.add_parser("summarize", help="tables from every trial under --results")
    s.add_argument("--results", default=str(RESULTS_ROOT),
                   help="root searched for trials (default %(default)s)")
    s.add_argument("--write-to", help="where summary.md/json go (default: --results)")
    s.add_argument("--readme", metavar="FILE",
                   help="also replace the table between the eval-table markers in FILE")
    s.add_argument("--full-family", type=int,
                   help="bench count of the full suite for the conservative 🔴 column "
                        "(default: from full A/A trials)")
    s.set_defaults(fn=cmd_summarize)

    r = sub.add_parser("replay", help="every recorded trial decided again under another policy")
    r.add_argument("--results", default=str(RESULTS_ROOT),
                   help="root searched for trials (default %(default)s)")
    r.add_argument("--harness", default="target/release/harness",
                   help="the harness binary (default: %(default)s, relative to the repo)")
    r.add_argument("--policy", help='policy overrides as JSON, e.g. \'{"noise_k": 2}\'')
    r.add_argument("--rounds", type=int, help="use only the first N first-pass rounds")
    r.add_argument("--label", required=True, help="name of the variant (file name)")
    r.set_defaults(fn=cmd_replay)

    args = p.parse_args(argv)
    if args.cmd not in ("summarize", "replay"):
        if args.out_dir is None:
            args.out_dir = RESULTS_ROOT / utc_now().strftime("%Y-%m-%d")
        args.out_dir = args.out_dir.resolve()
        args.out_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        args.fn(args)
    except KeyboardInterrupt:
        log("interrupted: finished trials are kept; rerun the same command to resume")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
