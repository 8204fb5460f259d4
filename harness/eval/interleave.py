#!/usr/bin/env python3
"""Target-by-target against benchmark-by-benchmark interleaving, measured (harness/src/measure/rounds.rs).

A/A rounds of one bench target with two criterion executables (the base and head builds of the
same revision, e.g. from `harness compare`'s build slots), in two orders that alternate with each
other round by round so both see the same machine:

  T  base runs every selected benchmark, then head runs them all (the harness before 2026-11-30);
  I  for each benchmark: base runs it, then head runs it (the harness since).

Per benchmark and order it prints the sd of the per-round log ratio log(head/base) (the
per-round value is criterion's lower quartile of ns/iter over the round's samples, as in
harness/src/measure/criterion.rs), then the median over benchmarks. Raw per-round values go to OUT.

    python3 harness/eval/interleave.py BASE_EXE HEAD_EXE ROUNDS OUT.json [SUBSTRING,...]

The criterion settings are harness.yaml's (0.2 s warm-up, 0.6 s measurement, 10 samples).
"""
import json
import os
import re
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

from paired import print_round_sd

ARGS = ['--bench', '--noplot', '--warm-up-time', '0.2', '--measurement-time', '0.6',
        '--sample-size', '10', '--nresamples', '1000']


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    exe = {'base': sys.argv[1], 'head': sys.argv[2]}
    rounds, out = int(sys.argv[3]), sys.argv[4]
    listed = subprocess.run([exe['base'], '--bench', '--list'], capture_output=True, text=True,
                            check=True, timeout=60).stdout.splitlines()
    ids = [l[:-len(': benchmark')] for l in listed if l.endswith(': benchmark')]
    if len(sys.argv) > 5:
        ids = [i for i in ids if any(p in i for p in sys.argv[5].split(','))]
    if not ids:
        sys.exit(f'{exe["base"]}: no benchmarks selected')
    scratch = tempfile.mkdtemp(prefix='interleave-')

    def run(side, filt):
        home = os.path.join(scratch, side)
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([exe[side]] + ARGS + [filt], env=dict(os.environ, CRITERION_HOME=home),
                       capture_output=True, check=True, timeout=3600)
        res = {}
        for i in ids:
            p = os.path.join(home, i, 'new', 'sample.json')
            if os.path.exists(p):
                s = json.load(open(p))
                v = sorted(t / n for t, n in zip(s['times'], s['iters']))
                res[i] = st.quantiles(v, n=4)[0]
        return res

    data = {m: {i: {'base': [], 'head': []} for i in ids} for m in 'TI'}
    for r in range(rounds):
        order = ('base', 'head') if r % 2 == 0 else ('head', 'base')
        for mode in (('T', 'I') if r % 2 == 0 else ('I', 'T')):
            if mode == 'T':
                filt = '^(' + '|'.join(re.escape(i) for i in ids) + ')$'
                for s in order:
                    for i, v in run(s, filt).items():
                        data['T'][i][s].append(v)
            else:
                for i in ids:
                    for s in order:
                        for k, v in run(s, '^' + re.escape(i) + '$').items():
                            data['I'][k][s].append(v)
        json.dump({'exe': exe, 'rounds': r + 1, 'per_round_ns': data}, open(out, 'w'))
        print('round', r, time.strftime('%T'), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    print_round_sd(data)


if __name__ == '__main__':
    main()
