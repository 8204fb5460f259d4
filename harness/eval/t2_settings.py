#!/usr/bin/env python3
"""One two-thread row, three ways of timing it: which setting makes the gate and the truth differ.

The fresh corpus's `gemv-blocks-panel-groups` made `matmul/f16_t2/1x256x256` read +15.4 % in the
gate (both sides' processes alive, samples alternating ABBA 60 ms apart: harness/STATS.md §1)
and -2.2 % in its truth (short criterion processes, one at a time, adjacent pairs:
ground_truth.py --processes 10 --paired). This measures the same two executables, in the same
rounds, three ways (results/t2-settings/README.md says what each reading would mean):

  C   adjacent pairs of short criterion processes, one process at a time (the truth's method:
      0.2 s warm-up, 0.3 s measurement, 20 samples; a pair's log ratio, the round's the median
      over its pairs);
  S2  both executables serving at once, samples alternating ABBA (the gate's paired sampling:
      0.2 s warm-up each, 10 samples a side of 60 ms on the slower side);
  S1  each executable serving alone: started, warmed up, its 10 samples, closed; then the other
      (the same sample length as S2 would choose, from the two warm-ups);
  CM  with --together REGEX: as C, but each criterion process runs every benchmark REGEX
      matches, one after another in the bench's order, as the truth's processes do (its filter
      names all of a case's two-thread rows).

BASE_EXE and CASE_EXE may each be a comma-separated list of executables (the same build linked in
several function orders, noise/relink.sh): round r runs element r mod len of each side's list.

Each round runs every mode for every row, the modes' order rotating round by round and the sides'
order alternating. A round's number per mode and side is the lower quartile of ns per iteration
over its samples (the gate's, harness/STATS.md §2); per mode and row the Hodges-Lehmann estimate
of the per-round log ratio with its exact signed-rank 95 % interval (ground_truth.py's).
Raw samples go to OUT.

    python3 harness/eval/t2_settings.py [--modes C,S2,S1,CM] [--together REGEX] \\
        BASE_EXE CASE_EXE ROUNDS OUT.json ID [ID ...]

Standard library only; every child has a deadline (procs.py).
"""
import json
import math
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ground_truth  # noqa: E402
import procs  # noqa: E402

CRIT_ARGS = ['--warm-up-time', '0.2', '--measurement-time', '0.3', '--sample-size', '20',
             '--noplot']
PAIRS = 4
WARM_UP_S, MEASUREMENT_S, SAMPLES = 0.2, 0.6, 10
SERVE_DEADLINE_S = 120
MODES = ('C', 'S2', 'S1')


def criterion_pair(exe, filt, order, scratch):
    """One adjacent pair of criterion processes running the benchmarks `filt` matches:
    {side: {id: ns per iteration (lower quartile)}}."""
    out = {}
    for s in order:
        home = Path(scratch) / f'home-{s}'
        out[s] = ground_truth.measure(exe[s], filt, CRIT_ARGS, home, timeout=300)
    return out


def criterion_round(exe, filt, order, scratch):
    """PAIRS adjacent pairs, the sides' order alternating: (pairs, {id: median log ratio})."""
    pairs = []
    for p in range(PAIRS):
        pairs.append(criterion_pair(exe, filt, order if p % 2 == 0 else order[::-1], scratch))
    ids = set.intersection(*(set(p['base']) & set(p['case']) for p in pairs))
    return pairs, {i: st.median(math.log(p['case'][i] / p['base'][i]) for p in pairs)
                   for i in ids}


class Server:
    """A bench executable serving one benchmark (engine/benches/common/group.rs)."""

    def __init__(self, exe, bench_id):
        self.p = subprocess.Popen([exe], env=dict(os.environ, HARNESS_BENCH_SERVE=bench_id),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.deadline = time.monotonic() + SERVE_DEADLINE_S
        for line in self.p.stdout:
            if line.startswith('harness-serve ready'):
                return
        self.kill()
        sys.exit(f'{exe}: ended without serving {bench_id}')

    def sample(self, n):
        """n iterations: ns per iteration (wall)."""
        if time.monotonic() > self.deadline:
            self.kill()
            sys.exit('a serving executable ran past its deadline')
        self.p.stdin.write(f'{n}\n')
        self.p.stdin.flush()
        for line in self.p.stdout:
            if line.startswith('harness-serve '):
                got_n, ns = line.split()[1:3]
                return int(ns) / int(got_n)
        self.kill()
        sys.exit('a serving executable ended mid-sample')

    def warm_up(self):
        """Doubling n until WARM_UP_S is spent: the last sample's ns per iteration."""
        n, spent, t = 1, 0.0, None
        while spent < WARM_UP_S:
            t = self.sample(n)
            spent += t * n / 1e9
            n *= 2
        return t

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self):
        procs.kill_tree(self.p.pid)


def n_for(per_iter):
    return max(1, round(MEASUREMENT_S / SAMPLES * 1e9 / max(per_iter)))


def serve_both(exe, bench_id, order):
    """S2: both serving at once, ABBA. {side: [ns per iteration per sample]}, n."""
    servers = {s: Server(exe[s], bench_id) for s in order}
    try:
        n = n_for([servers[s].warm_up() for s in order])
        got = {s: [] for s in order}
        for i in range(SAMPLES):
            for s in (order if i % 2 == 0 else order[::-1]):
                got[s].append(servers[s].sample(n))
    finally:
        for s in order:
            servers[s].close()
    return got, n


def serve_alone(exe, bench_id, order, n):
    """S1: each side alone (started, warmed up, sampled, closed), in `order`, n iterations a
    sample (S2's of the same round, so both modes' samples are alike)."""
    got = {}
    for s in order:
        sv = Server(exe[s], bench_id)
        try:
            sv.warm_up()
            got[s] = [sv.sample(n) for _ in range(SAMPLES)]
        finally:
            sv.close()
    return got


def served_log_ratio(got):
    """A served round's ln(case / base): each side's lower quartile of ns per iteration."""
    lq = ground_truth.lower_quartile
    return math.log(lq(got['case']) / lq(got['base']))


def pct(x):
    return None if x is None else 100 * (math.exp(x) - 1)


def summary(lrs):
    """Hodges-Lehmann over the rounds' log ratios, in %, with the 95 % interval (None bounds
    while too few rounds to reach the level)."""
    if len(lrs) < 2:
        return None
    est, lo, hi = ground_truth.hodges_lehmann(lrs)
    return {'change_pct': pct(est), 'ci95_pct': [pct(lo), pct(hi)], 'rounds': len(lrs),
            'per_round_pct': [round(pct(x), 2) for x in lrs]}


def main():
    args = sys.argv[1:]
    modes_asked, together = MODES, None
    while args and args[0].startswith('--'):
        if args[0] == '--modes' and len(args) > 1:
            modes_asked = tuple(args[1].split(','))
        elif args[0] == '--together' and len(args) > 1:
            together = args[1]
        else:
            sys.exit(__doc__)
        args = args[2:]
    if len(args) < 5 or not set(modes_asked) <= set(MODES + ('CM',)) or \
            (('CM' in modes_asked) != (together is not None)):
        sys.exit(__doc__)
    exes = {'base': args[0].split(','), 'case': args[1].split(',')}
    rounds, out, ids = int(args[2]), Path(args[3]), args[4:]
    scratch = tempfile.mkdtemp(prefix='t2-settings-')
    raw = {i: {m: [] for m in modes_asked} for i in ids}
    started = time.time()
    try:
        for r in range(rounds):
            order = ('base', 'case') if r % 2 == 0 else ('case', 'base')
            exe = {s: v[r % len(v)] for s, v in exes.items()}
            per_id = [m for m in modes_asked if m != 'CM']
            k = r % len(per_id) if per_id else 0
            modes = per_id[k:] + per_id[:k]
            if 'CM' in modes_asked:
                pairs, lrs = criterion_round(exe, together, order, scratch)
                for i in ids:
                    if i in lrs:
                        raw[i]['CM'].append({'round': r, 'exe': exe, 'pairs': [
                            {s: p[s][i] for s in p} for p in pairs], 'log_ratio': lrs[i]})
            for i in ids:
                n = None
                for m in modes:
                    if m == 'C':
                        pairs, lrs = criterion_round(exe, '^' + i + '$', order, scratch)
                        raw[i]['C'].append({'round': r, 'exe': exe,
                                            'pairs': [{s: p[s][i] for s in p} for p in pairs],
                                            'log_ratio': lrs[i]})
                    elif m == 'S2':
                        got, n = serve_both(exe, i, order)
                        raw[i]['S2'].append({'round': r, 'exe': exe, 'n': n, 'samples': got,
                                             'log_ratio': served_log_ratio(got)})
                    else:
                        if n is None:
                            probe = {s: Server(exe[s], i) for s in order}
                            try:
                                n = n_for([probe[s].warm_up() for s in order])
                            finally:
                                for s in order:
                                    probe[s].close()
                        got = serve_alone(exe, i, order, n)
                        raw[i]['S1'].append({'round': r, 'exe': exe, 'n': n, 'samples': got,
                                             'log_ratio': served_log_ratio(got)})
            res = {'exe': exes, 'rounds': r + 1, 'wall_s': round(time.time() - started),
                   'settings': {'criterion': CRIT_ARGS, 'pairs': PAIRS, 'serve':
                                {'warm_up_s': WARM_UP_S, 'measurement_s': MEASUREMENT_S,
                                 'samples': SAMPLES}},
                   'modes': list(modes_asked), 'together': together,
                   'summary': {i: {m: summary([x['log_ratio'] for x in raw[i][m]])
                                   for m in modes_asked} for i in ids},
                   'raw': raw}
            out.write_text(json.dumps(res, indent=1))
            print(f'round {r + 1}/{rounds} done {time.strftime("%T")}', flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for i in ids:
        for m in modes_asked:
            s = res['summary'][i][m]
            if s and None not in s['ci95_pct']:
                print(f'{i:32} {m:3} {s["change_pct"]:+6.1f} % '
                      f'[{s["ci95_pct"][0]:+.1f}, {s["ci95_pct"][1]:+.1f}]')


if __name__ == '__main__':
    main()
