#!/usr/bin/env python3
"""Steps 2 and 3 of the corpus procedure (README.md) for one case after another, resumable: a
step whose result is already there is skipped, so a run stopped anywhere (a session's end)
goes on where it stopped.

Per case, in this order:
  truth     ground_truth.py with the case's benchmark reach (reach.json: its patterns other than
            the e2e ones, as criterion's filter, and only the bench targets they name), 12 rounds
            of 1.0 s, and `--e2e` when its reach has the tiny model's CPU rows
            -> ../results/corpus/ground-truth/CASE/ground-truth.json
  truth-sampling
            when the reach has sampling rows (sampling_latency/, logit_processing/): their truth by
            the paired processes (finding 6: ground_truth.py --processes 10 --paired, 12 rounds of
            0.3 s, those rows by exact id)
            -> ../results/corpus/ground-truth-sampling/CASE/ground-truth.json
  truth-t2  when the reach has two-thread rows (matmul/*_t2/): their truth by the same paired
            processes (README.md step 2's third method; matmul target, those rows by exact id)
            -> ../results/corpus/ground-truth-t2/CASE/ground-truth.json
  Both paired steps passed their A/A (README.md step 2, 2026-12-04), so the default runs them.
  quiet     gate_cases.py run, suite full, harness.yaml, no load -> ../results/corpus/quiet/CASE/
  one-core  the same under evaluate.py's one-core busy loop -> ../results/corpus/one-core/CASE/
  truth-t2-late
            truth-t2 again after the gate's runs, a second sitting at least 25 minutes after the
            first ended (LATE_AFTER_S)
            (the third corpus's procedure: a two-thread row's cost moves with the machine's
            state, results/t2-settings/README.md; gate_cases.py pools the two sittings)
            -> ../results/corpus/ground-truth-t2-late/CASE/ground-truth.json

One host kind per case: every step of a case runs on the CPU model its first step ran on
(`../results/corpus/hosts.json`, written as steps finish). Sessions land on different VMs (AMD
EPYC, Intel Xeon), and a truth from one model says nothing exact about a gate run on another
(finding 13: the same two builds, greedy +0.6 % quiet on an EPYC and +36 % under one-core load
on a Xeon). A case begun on another model is skipped with a message, for a session on that
model; the cases not begun take whatever host this is. From 2026-12-05 the CPU's family, model
and stepping are recorded too (`cpu_id`, `step_ids`) and compared where a case has them: one
model name ("AMD EPYC") covers more than one generation (finding 16).

Before the first step: the base revision given (--rev, the same for every case) has the corpus's
pinned engine (git diff of its `engine/` against ENGINE_COMMIT, or `--engine`'s commit). Every
side of every step is built from that revision (plus the case's patch), so what `engine/` is at
HEAD does not matter.

Another corpus (`--corpus DIR`: its patches and reach.json, e.g. ../corpus-fresh) keeps its
results apart (`--results DIR`, with its own hosts.json). `--placement N` measures every truth
averaged over N function orders per side (ground_truth.py --placement), the quantity a gate with
`placement.sample` estimates (harness/STATS.md §17).

Usage:
  python3 harness/eval/corpus/measure.py --rev SHA --harness target/release/harness \\
      [--steps truth,truth-sampling,truth-t2,quiet,one-core,truth-t2-late] CASE...
      (or --all: every case of reach.json)
      [--corpus DIR --results DIR --placement N --config FILE --engine COMMIT]
A step waits to start while the hold file exists (hold.py: a pause asked for from outside,
between steps, never within one). Standard library only. Every child process has a deadline.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
EVAL = REPO / "harness" / "eval"
sys.path.insert(0, str(EVAL))
import hold  # noqa: E402
import hostkind  # noqa: E402
import procs  # noqa: E402
import saved  # noqa: E402

RESULTS = EVAL / "results" / "corpus"
# The engine every case is measured on (README.md, procedure step 3).
ENGINE_COMMIT = "65df3a8"
# The bench target of each benchmark group (engine/benches/*.rs).
TARGET_OF = {"add": "kernels", "gather": "kernels", "reduce_mean": "kernels",
             "matmul": "matmul", "matvec": "matmul", "sampling_latency": "sampling",
             "logit_processing": "sampling", "kv_cache": "kv_cache",
             "tokenization": "tokenization", "decode": "decode"}
STEP_TIMEOUT_S = 4 * 3600
# The full suite's benchmark ids (the last full A/A before the corpus), to find the bench
# targets a case's reach patterns name.
BENCH_IDS = [b["id"] for b in saved.load_json(
    EVAL / "results" / "noise" / "aa-full-2026-12-03-cold2" / "results.json")["benches"]]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def plan(reach):
    """(criterion filter or None, bench targets, e2e?) of a case's reach patterns."""
    bench = [p for p in reach if not p.startswith("^tiny/")]
    targets = []
    for p in bench:
        hits = [b for b in BENCH_IDS if re.search(p, b)]
        if not hits:
            raise SystemExit(f"error: reach pattern {p!r} matches no benchmark of the full suite")
        for b in hits:
            t = TARGET_OF[b.split("/")[0]]
            if t not in targets:
                targets.append(t)
    e2e = any(re.search(p, "tiny/x/cpu-f32") or re.search(p, "tiny/x/cpu-f32/prefill")
              for p in reach if p.startswith("^tiny/"))
    return ("|".join(f"(?:{p})" for p in bench) or None), targets, e2e


SAMPLING_ROWS = r"^(sampling_latency|logit_processing)/"
T2_ROWS = r"^matmul/[a-z0-9]+_t2/"


def rows_filter(reach, rows):
    """Criterion's filter for the rows matching `rows` that a case's reach names, by exact id;
    None if none."""
    ids = [b for b in BENCH_IDS if re.search(rows, b) and any(re.search(p, b) for p in reach)]
    return "|".join(f"^{re.escape(b)}$" for b in ids) or None


def engine_pinned(rev, engine=ENGINE_COMMIT):
    return subprocess.run(["git", "diff", "--quiet", engine, rev, "--", "engine"],
                          cwd=REPO, timeout=60).returncode == 0


HOSTS = RESULTS / "hosts.json"


# This machine's CPU model name and family/model/stepping (`hostkind.py`): VMs of one model
# name can be different generations (finding 16), so the one-host rule compares the id too
# where a case recorded one (cases begun from 2026-12-05).
host_cpu = hostkind.cpu_model
host_cpu_id = hostkind.cpu_id


def load_hosts():
    return json.loads(HOSTS.read_text()) if HOSTS.exists() else {}


def begun_elsewhere(hosts, case, here, here_id=None):
    """The CPU `case` was begun on, when it is not this one (`here`, the model name, and
    `here_id`, family, model and stepping, compared where both sides have one); else None."""
    entry = hosts.get(case, {})
    begun_on, begun_id = entry.get("cpu"), entry.get("cpu_id")
    if not begun_on:
        return None
    if begun_on != here:
        return begun_on
    if begun_id and begun_id != here_id:  # this host's id unknown: not shown to be the same
        return f"{begun_on} ({begun_id})"
    return None


def record_host(case, name, cpu, cpu_id=None):
    """Records the CPU a step ran on; a case's first step fixes its `cpu` (and `cpu_id`, which
    cases begun before 2026-12-05 do not have: not filled in later from another step)."""
    hosts = load_hosts()
    # New only when absent: some entries were written by hand with no steps (cases begun before
    # hosts were recorded), and those must not take this VM's id.
    new = case not in hosts
    entry = hosts.setdefault(case, {"cpu": cpu, "steps": {}})
    if cpu_id is not None and new:
        entry["cpu_id"] = cpu_id
    entry["steps"][name] = cpu
    if cpu_id is not None:
        entry.setdefault("step_ids", {})[name] = cpu_id
    HOSTS.write_text(json.dumps(hosts, indent=1, sort_keys=True) + "\n")


def ran(run_json):
    """Whether a gate run's record is a result: not one where the harness exited 2 before it
    built anything (its configuration or flags refused: nothing was measured, and the step must
    run again, not count as done)."""
    if not run_json.is_file():
        return False
    r = json.loads(run_json.read_text())
    refused = r.get("exit") == 2 and not any((r.get("stages_s") or {}).values())
    if refused:
        log(f"{rel(run_json)}: the harness refused to run (exit 2, nothing built); "
            "measured again")
    return not refused


def rel(p):
    """`p` relative to the repository when it lies inside it (for log lines)."""
    try:
        return p.relative_to(REPO)
    except ValueError:
        return p


def truth_placement(path):
    """The --placement a saved truth was measured with (0: cargo's links)."""
    rec = json.loads(path.read_text())
    return (rec.get("placement") or {}).get("orders", 0)


def step(name, case, cmd, done, partial=()):
    """Runs `cmd` unless `done` exists; `partial`: directories an interrupted run of this step
    left without a result, removed first (the step writes them again). Records the host the
    step ran on."""
    if done.exists():
        log(f"{case} {name}: already there ({rel(done)})")
        return
    hold.wait_while_held(log, f"{case} {name}")
    for d in partial:
        log(f"{case} {name}: removing {rel(d)}, left by an interrupted run")
        shutil.rmtree(d)
    log(f"{case} {name}: {' '.join(cmd)}")
    started = time.time()
    p = procs.run(cmd, cwd=REPO, timeout=STEP_TIMEOUT_S)  # the step's script and all it started
    log(f"{case} {name}: exit {p.returncode} in {(time.time() - started) / 60:.1f} min")
    if p.returncode != 0:
        raise SystemExit(f"error: {case} {name} failed (exit {p.returncode})")
    record_host(case, name, host_cpu(), host_cpu_id())


# How long after the first two-thread sitting ended the second may start: about the gate's two
# runs of a case (results/t2-settings/README.md: the cost of a two-thread change moved with the
# machine's state over minutes; one 11-minute sitting saw one state).
LATE_AFTER_S = 25 * 60


def sitting_ended(path):
    """When a truth file was written, at the latest: its mtime or, where git holds it unchanged,
    the time of the last commit that changed it if that is earlier (a fresh clone sets every
    mtime to the checkout's time, which would make the second sitting wait as if the first had
    just ended)."""
    ended = path.stat().st_mtime
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", path.name], cwd=path.parent,
                               capture_output=True, text=True, timeout=30)
        changed = subprocess.run(["git", "log", "-1", "--format=%ct", "--", path.name],
                                 cwd=path.parent, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ended
    if dirty.returncode == 0 and not dirty.stdout.strip() and changed.stdout.strip().isdigit():
        ended = min(ended, float(changed.stdout.strip()))
    return ended


TEST_TARGET = Path.home() / ".cache" / "decoder-gate" / "corpus-tests-target"


def test_case(case, rev, out):
    """Step `test`: `cargo test -p engine --release` with the case's patch on `rev`, in a
    throwaway clone (a target dir shared by every case, so only the engine builds again). The
    record (`out`, exit and last lines) is written either way; whether it passed."""
    import tempfile
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="corpus-test-") as tmp:
        src = Path(tmp) / "src"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(src)],
                       check=True, timeout=600)
        subprocess.run(["git", "-C", str(src), "checkout", "-q", "--detach", rev], check=True,
                       timeout=600)
        subprocess.run(["git", "-C", str(src), "apply", str(HERE / f"{case}.patch")],
                       check=True, timeout=60)
        try:
            p = procs.run(["cargo", "test", "-q", "--release", "-p", "engine"], cwd=src,
                          env={**os.environ, "CARGO_TARGET_DIR": str(TEST_TARGET)},
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
            code, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            code, text = 124, f"timed out after {STEP_TIMEOUT_S} s"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"case": case, "rev": rev, "exit": code,
                               "wall_s": round(time.time() - started, 1),
                               "tail": text.splitlines()[-40:]}, indent=1) + "\n")
    return code == 0


def main():
    global HERE, RESULTS, HOSTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--all", action="store_true", help="every case of reach.json, in its order")
    ap.add_argument("--rev", required=True, help="the base revision of every case")
    ap.add_argument("--harness", required=True, help="the harness binary (a release build)")
    ap.add_argument("--config", type=Path, default=REPO / "harness.yaml",
                    help="the gate's configuration (default: the repository's); a harness binary "
                         "older than the repository's harness.yaml needs the file of its time, "
                         "e.g. `git show 349aca8:harness.yaml` for the corpus's binary (it knows "
                         "no `placement:` key)")
    ap.add_argument("--engine", default=ENGINE_COMMIT,
                    help=f"the commit whose engine/ the corpus's patches are made against "
                         f"(default {ENGINE_COMMIT}, the first two corpora's)")
    ap.add_argument("--steps", default="truth,truth-sampling,truth-t2,quiet,one-core",
                    help="of test, truth, truth-sampling, truth-t2, quiet, one-core, "
                         "truth-t2-late (the paired "
                         "steps' methods passed their A/A, README.md step 2; `test`: cargo test "
                         "with the patch first, a case that fails is not measured)")
    ap.add_argument("--corpus", type=Path, default=HERE,
                    help="the corpus: its NAME.patch files and reach.json (default: this one)")
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help="where its results go (default: ../results/corpus)")
    ap.add_argument("--placement", type=int, default=0, metavar="N",
                    help="truths averaged over N function orders per side (0: cargo's link)")
    a = ap.parse_args()
    HERE, RESULTS = a.corpus.resolve(), a.results.resolve()
    HOSTS = RESULTS / "hosts.json"
    reach = json.loads((HERE / "reach.json").read_text())
    cases = list(reach) if a.all else a.cases
    for c in cases:
        if c not in reach:
            raise SystemExit(f"error: {c}: not a case of {HERE / 'reach.json'}")
    if not engine_pinned(a.rev, a.engine):
        raise SystemExit(f"error: {a.rev}'s engine/ differs from {a.engine}'s: the corpus is "
                         "measured on that engine (README.md, step 3)")
    steps = a.steps.split(",")
    py = sys.executable
    here, here_id = host_cpu(), host_cpu_id()
    for c in cases:
        begun_on = begun_elsewhere(load_hosts(), c, here, here_id)
        if begun_on:
            log(f"{c}: begun on {begun_on!r}, this host is {here!r} ({here_id}): left for a "
                "host like the first")
            continue
        filt, targets, e2e = plan(reach[c]["reach"])
        if "test" in steps:
            rec = RESULTS / "tests" / f"{c}.json"
            if rec.exists():
                passed = json.loads(rec.read_text())["exit"] == 0
                log(f"{c} test: already there ({'passed' if passed else 'FAILED'})")
            else:
                hold.wait_while_held(log, f"{c} test")
                log(f"{c} test: cargo test -p engine --release with the patch")
                passed = test_case(c, a.rev, rec)
                log(f"{c} test: {'passed' if passed else 'FAILED'} ({rel(rec)})")
            if not passed:
                log(f"{c}: its tests fail; no step measures it until the patch is fixed and "
                    f"{rel(rec)} removed")
                continue
        if "truth" in steps:
            cmd = [py, str(EVAL / "ground_truth.py"), "--cases-dir", str(HERE), "--case", c,
                   "--rev", a.rev, "--rounds", "12", "--measurement", "1.0",
                   "--targets", ",".join(targets), "--out", str(RESULTS / "ground-truth")]
            cmd += ["--placement", str(a.placement)] if a.placement else []
            cmd += ["--filter", filt] if filt else []
            cmd += ["--e2e"] if e2e else []
            done = RESULTS / "ground-truth" / c / "ground-truth.json"
            if done.exists() and truth_placement(done) != a.placement:
                raise SystemExit(f"error: {rel(done)} was measured with --placement "
                                 f"{truth_placement(done)}, this run asks for {a.placement}")
            step("truth", c, cmd, done)
        paired_steps = (("truth-sampling", SAMPLING_ROWS, "sampling"),
                        ("truth-t2", T2_ROWS, "matmul"), ("truth-t2-late", T2_ROWS, "matmul"))

        def paired_truth(name, rows, target):
            filt = rows_filter(reach[c]["reach"], rows)
            if name in steps and filt:
                out = RESULTS / f"ground-{name}"
                cmd = [py, str(EVAL / "ground_truth.py"), "--cases-dir", str(HERE), "--case", c,
                       "--rev", a.rev, "--processes", "10", "--paired", "--rounds", "12",
                       "--warm-up", "0.2", "--measurement", "0.3", "--targets", target,
                       "--filter", filt, "--out", str(out)]
                cmd += ["--placement", str(a.placement)] if a.placement else []
                step(name, c, cmd, out / c / "ground-truth.json")

        for ps in paired_steps[:2]:
            paired_truth(*ps)
        for cond, load in (("quiet", "none"), ("one-core", "one-core")):
            if cond in steps:
                cmd = [py, str(EVAL / "gate_cases.py"), "run", "--harness", a.harness,
                       "--cases-dir", str(HERE), "--config", str(a.config),
                       "--rev", a.rev, "--case", f"{c}:full", "--load", load,
                       "--out", str(RESULTS / cond)]
                runs = sorted((RESULTS / cond / c).glob("run-*"))
                done = [r / "run.json" for r in runs if ran(r / "run.json")]
                step(cond, c, cmd, done[0] if done else RESULTS / cond / c / "run-001" / "run.json",
                     partial=[] if done else runs)
        first = RESULTS / "ground-truth-t2" / c / "ground-truth.json"
        late = RESULTS / "ground-truth-t2-late" / c / "ground-truth.json"
        if "truth-t2-late" in steps and first.exists() and not late.exists():
            # The second sitting only means something apart from the first in time.
            wait = LATE_AFTER_S - (time.time() - sitting_ended(first))
            if wait > 0:
                log(f"{c} truth-t2-late: waiting {wait / 60:.0f} min, {LATE_AFTER_S // 60} min "
                    "after the first sitting ended")
                time.sleep(wait)
        paired_truth(*paired_steps[2])


if __name__ == "__main__":
    main()
