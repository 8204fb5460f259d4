#!/usr/bin/env python3
"""How far the link order alone moves a benchmark: the same compiled code linked with different
function orders (`relink.sh`: lld's `--shuffle-sections=*=SEED`), each order served against
the unshuffled link as the harness serves a pair (both processes pinned to one CPU, warm-up
0.2 s, 10 samples of ~60 ms in ABBA, a round's value the median of ln(order / unshuffled)).

    link_order.py --bins DIR --seeds 1,2,3,4,5 --rounds 12 --cpu 2 --out FILE ID [ID ...]

DIR holds `<bench target>-s<N>` executables (`-s0` the unshuffled link); the id's group names
its target (`sampling_latency` → `sampling`, …). Every round serves, per id, the unshuffled
link against each seed and against a second copy of itself (seed "0b", the method's own
noise), in an order rotated by round. The output (JSON) holds every round's value; the summary
per id and seed is the Hodges-Lehmann estimate over rounds with its 95 % interval
(`ground_truth.hodges_lehmann`, the corpus's truth estimator).

Why: in the corpus (corpus/README.md findings 3, 8, 10, 11, 14, 15) rows that a patch's code
cannot reach moved by 4-9 % in its build. If a relink moves them as much, the build-to-build
spread is function placement that a gate can sample (rotate link orders over rounds) instead
of reporting it as the pull request's effect. noise/README.md ("Link order") holds the plan
written before this ran and its result.
"""
import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hostkind  # noqa: E402
from ground_truth import hodges_lehmann  # noqa: E402

TARGET_OF = {"add": "kernels", "gather": "kernels", "reduce_mean": "kernels",
             "matmul": "matmul", "matvec": "matmul", "sampling_latency": "sampling",
             "logit_processing": "sampling", "kv_cache": "kv_cache",
             "tokenization": "tokenization", "decode": "decode"}
READY_TIMEOUT_S = 60
SAMPLE_TIMEOUT_S = 30


class Served:
    """One bench process serving `bid` (engine/benches/common/group.rs's protocol), pinned."""

    def __init__(self, exe, bid, cpu):
        self.exe, self.bid = exe, bid
        env = dict(os.environ, HARNESS_BENCH_SERVE=bid)
        self.p = subprocess.Popen([exe, "--bench", "--list"], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
                                  cwd=os.path.dirname(exe))
        line = self._line(READY_TIMEOUT_S)
        if not line.startswith("harness-serve ready"):
            self.kill()
            raise SystemExit(f"{exe} did not serve {bid}: {line!r}")

    def kill(self):
        self.p.kill()
        self.p.wait()

    def _line(self, timeout_s):
        """The next line, or SystemExit (the process killed) when none comes in `timeout_s` or
        the process ended. The deadline is an alarm, so a half-written line cannot hang it."""
        def late(signum, frame):
            raise TimeoutError

        old = signal.signal(signal.SIGALRM, late)
        signal.alarm(timeout_s)
        try:
            line = self.p.stdout.readline()
        except TimeoutError:
            line = None
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        if not line:
            self.kill()
            raise SystemExit(f"{self.exe} ({self.bid}): "
                             + (f"no answer within {timeout_s} s" if line is None else "ended"))
        return line

    def sample(self, n):
        """ns per iteration of one sample of n iterations."""
        self.p.stdin.write(f"{n}\n")
        self.p.stdin.flush()
        fields = self._line(SAMPLE_TIMEOUT_S).split()
        if len(fields) < 3 or fields[0] != "harness-serve":
            self.kill()
            raise SystemExit(f"{self.exe} ({self.bid}): not a sample line: {' '.join(fields)!r}")
        return float(fields[2]) / n

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def pair(exe_a, exe_b, bid, cpu):
    """median of ln(b / a) over 10 ABBA samples of ~60 ms, after 0.2 s of warm-up each."""
    ps = [Served(exe_a, bid, cpu)]
    try:
        ps.append(Served(exe_b, bid, cpu))
        per = []
        for p in ps:
            n, spent, last = 1, 0.0, 0.0
            while spent < 0.2e9:
                last = p.sample(n)
                spent += last * n
                n *= 2
            per.append(last)
        n = max(1, round(60e6 / max(per)))
        ts = [[], []]
        for i in range(10):
            for w in ([0, 1] if i % 2 == 0 else [1, 0]):
                ts[w].append(ps[w].sample(n))
    finally:
        for p in ps:
            p.close()
    logs = sorted(math.log(b / a) for a, b in zip(*ts))
    return (logs[4] + logs[5]) / 2


def fmt(x):
    return "—" if x is None else f"{x:+.1f}"


def write_atomic(path, obj):
    """`obj` as JSON into `path` through a temporary file and a rename: a run killed while
    writing leaves the previous file, never a truncated one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bins", type=Path, required=True)
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cpu", type=int, required=True, help="the CPU both processes are pinned to")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("ids", nargs="+")
    a = ap.parse_args()
    seeds = ["0b"] + [s.strip() for s in a.seeds.split(",") if s.strip()]
    for bid in a.ids:
        if bid.split("/")[0] not in TARGET_OF:
            raise SystemExit(f"error: {bid}: no bench target known for its group "
                             f"(known: {', '.join(sorted(TARGET_OF))})")
    # The host kind with the results (finding 16 of corpus/README.md: a model name is not a kind).
    head = {"pinned_cpu": a.cpu, "node": platform.node(), "cpu": hostkind.cpu_model(),
            "cpu_id": hostkind.cpu_id(), "seeds": seeds}
    # The copies go to a scratch folder, not beside --out (which may be a folder copied back).
    work = Path(tempfile.mkdtemp(prefix="link-order-"))
    try:
        exes = {}
        for bid in a.ids:
            target = TARGET_OF[bid.split("/")[0]]
            for s in ["0"] + seeds:
                src = a.bins / f"{target}-s{'0' if s == '0b' else s}"
                if not src.is_file():
                    raise SystemExit(f"error: {src}: no such executable (relink.sh makes them)")
                dst = work / f"{target}-s{s}"  # 0b: a copy, so a pair is two files, as the gate's
                if not dst.exists():
                    shutil.copy2(src, dst)
                exes[(target, s)] = str(dst.resolve())
        values = {bid: {s: [] for s in seeds} for bid in a.ids}
        t0 = time.time()
        for r in range(a.rounds):
            k = r % len(seeds)
            order = seeds[k:] + seeds[:k]
            for bid in a.ids:
                target = TARGET_OF[bid.split("/")[0]]
                for s in order:
                    a_exe, b_exe = exes[(target, "0")], exes[(target, s)]
                    # Which of the two starts first alternates by round, as the gate's AB/BA.
                    v = pair(a_exe, b_exe, bid, a.cpu) if r % 2 == 0 else \
                        -pair(b_exe, a_exe, bid, a.cpu)
                    values[bid][s].append(v)
            print(f"[cpu {a.cpu}] round {r + 1}/{a.rounds} done in {time.time() - t0:.0f} s",
                  flush=True)
            # Every finished round is kept, so a run stopped at a deadline leaves its rounds.
            write_atomic(a.out, {**head, "rounds": r + 1, "values": values})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for bid in a.ids:
        summary[bid] = {}
        for s in seeds:
            est, lo, hi = hodges_lehmann(values[bid][s])
            summary[bid][s] = {"pct": 100 * math.expm1(est),
                               "lo": None if lo is None else 100 * math.expm1(lo),
                               "hi": None if hi is None else 100 * math.expm1(hi)}
    write_atomic(a.out, {**head, "rounds": a.rounds, "values": values, "summary": summary})
    for bid in a.ids:
        cells = "  ".join(f"s{s} {v['pct']:+.1f} [{fmt(v['lo'])}, {fmt(v['hi'])}]"
                          for s, v in summary[bid].items())
        print(f"{bid}: {cells}")


if __name__ == "__main__":
    main()
