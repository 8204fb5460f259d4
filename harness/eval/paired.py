#!/usr/bin/env python3
"""Benchmark-by-benchmark criterion runs against paired sampling, measured (harness/src/measure/rounds.rs).

A/A rounds of chosen benchmarks with two bench executables (base and head: two builds, or the
same executable twice), in two methods that alternate with each other round by round so both see
the same machine:

  C  per benchmark: base runs criterion on it, then head does (the harness until 2026-11-30);
  P  per benchmark: both executables serve it (`HARNESS_BENCH_SERVE`, engine/benches/common/
     group.rs) and the driver asks them for samples in turn, ABBA …, each about
     measurement / sample_size long, after a warm-up of each (paired sampling).

Per benchmark and method it prints the sd over rounds of the per-round log ratio log(head/base)
(per round: each side's lower quartile of ns/iter over its samples, as in
harness/src/measure/criterion.rs), then the median over benchmarks. Raw per-round values go to OUT.

    python3 harness/eval/paired.py BASE_DIR HEAD_DIR ROUNDS OUT.json ID [ID ...]

BASE_DIR and HEAD_DIR hold the bench executables by target name (`kernels`, `matmul`, …; the
harness's build slots have them under target/release/deps with a hash suffix, which is accepted);
an ID's target is found by listing. Settings are harness.yaml's: 0.2 s warm-up, 0.6 s measurement,
10 samples.
"""
import glob
import json
import math
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

WARM_UP_S, MEASUREMENT_S, SAMPLES = 0.2, 0.6, 10
ARGS = ['--bench', '--noplot', '--warm-up-time', str(WARM_UP_S), '--measurement-time',
        str(MEASUREMENT_S), '--sample-size', str(SAMPLES), '--nresamples', '1000']


def lower_quartile(v):
    return st.quantiles(sorted(v), n=4, method='inclusive')[0]


def executables(d):
    """target name -> executable path in directory d."""
    out = {}
    for p in sorted(glob.glob(os.path.join(d, '*'))):
        name = os.path.basename(p)
        if not (os.path.isfile(p) and os.access(p, os.X_OK)) or '.' in name:
            continue
        out[name.rsplit('-', 1)[0] if '-' in name else name] = p
    return out


def target_of(exes, ids):
    found = {}
    for target, exe in exes.items():
        listed = subprocess.run([exe, '--bench', '--list'], capture_output=True, text=True,
                                timeout=60)
        for line in listed.stdout.splitlines():
            if line.endswith(': benchmark') and line[:-len(': benchmark')] in ids:
                found[line[:-len(': benchmark')]] = target
    missing = [i for i in ids if i not in found]
    if missing:
        sys.exit(f'no executable lists {missing}')
    return found


def criterion_run(exe, bench_id, scratch):
    home = os.path.join(scratch, 'home')
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([exe] + ARGS + ['^' + bench_id.replace('(', r'\(').replace(')', r'\)') + '$'],
                   env=dict(os.environ, CRITERION_HOME=home), capture_output=True, check=True,
                   timeout=600)
    p = glob.glob(os.path.join(home, '**', 'new', 'sample.json'), recursive=True)[0]
    s = json.load(open(p))
    return lower_quartile([t / n for t, n in zip(s['times'], s['iters'])])


class Server:
    def __init__(self, exe, bench_id):
        self.p = subprocess.Popen([exe], env=dict(os.environ, HARNESS_BENCH_SERVE=bench_id),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = False

    def wait_ready(self):
        for line in self.p.stdout:
            if line.startswith('harness-serve ready'):
                self.ready = True
                return
        sys.exit('executable ended without serving')

    def sample(self, n):
        self.p.stdin.write(f'{n}\n')
        self.p.stdin.flush()
        for line in self.p.stdout:
            if line.startswith('harness-serve '):
                got_n, ns = line.split()[1:3]
                return int(ns) / int(got_n)
        sys.exit('executable ended mid-sample')

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def paired_round(exe, bench_id, order):
    servers = {s: Server(exe[s], bench_id) for s in order}
    for s in order:
        servers[s].wait_ready()
    # Warm-up: each side in turn, doubling n, until each has run WARM_UP_S; the last sample's
    # ns/iter of the slower side sets n.
    per_iter = {}
    for s in order:
        n, spent = 1, 0.0
        while spent < WARM_UP_S:
            t = servers[s].sample(n)
            spent += t * n / 1e9
            per_iter[s] = t
            n *= 2
    n = max(1, round(MEASUREMENT_S / SAMPLES * 1e9 / max(per_iter.values())))
    got = {s: [] for s in order}
    for i in range(SAMPLES):
        pair = order if i % 2 == 0 else order[::-1]
        for s in pair:
            got[s].append(servers[s].sample(n))
    for s in order:
        servers[s].close()
    return {s: lower_quartile(v) for s, v in got.items()}


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    dirs = {'base': sys.argv[1], 'head': sys.argv[2]}
    rounds, out, ids = int(sys.argv[3]), sys.argv[4], sys.argv[5:]
    exes = {s: executables(d) for s, d in dirs.items()}
    targets = target_of(exes['base'], ids)
    scratch = tempfile.mkdtemp(prefix='paired-')
    data = {m: {i: {'base': [], 'head': []} for i in ids} for m in 'CP'}
    for r in range(rounds):
        order = ('base', 'head') if r % 2 == 0 else ('head', 'base')
        for mode in (('C', 'P') if r % 2 == 0 else ('P', 'C')):
            for i in ids:
                exe = {s: exes[s][targets[i]] for s in order}
                if mode == 'C':
                    for s in order:
                        data['C'][i][s].append(criterion_run(exe[s], i, scratch))
                else:
                    for s, v in paired_round(exe, i, order).items():
                        data['P'][i][s].append(v)
        json.dump({'dirs': dirs, 'rounds': r + 1, 'per_round_ns': data}, open(out, 'w'))
        print('round', r, time.strftime('%T'), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    print_round_sd(data)


def print_round_sd(data):
    """Per method and benchmark, the sd and mean of the per-round log ratio ln(head/base); then
    the median sd over benchmarks. `data[method][id]` = {'base': [...], 'head': [...]} (ns per
    round). Also used by interleave.py."""
    for mode, by_id in data.items():
        sds = []
        for i, v in by_id.items():
            lr = [math.log(h / b) for b, h in zip(v['base'], v['head'])]
            sds.append(st.stdev(lr))
            print(mode, i, 'sd %.3f mean %+.3f' % (st.stdev(lr), st.mean(lr)))
        print(mode, 'median sd %.3f' % st.median(sds))


if __name__ == '__main__':
    main()
