#!/usr/bin/env python3
"""The engine's CUDA speed at several prompt lengths, one or more engine binaries interleaved
(run on the GPU machine; `goldens/torch_anchors.py` measures the PyTorch anchors there).

For each context C a synthetic prompt of C token ids (deterministic, the same for every binary)
is prefilled and `--tokens` new tokens are decoded greedily by `engine profile --ep cuda
--json`; the table gives the median prefill time and the median decode step (steps at contexts
C .. C + tokens). Binaries alternate per context, so both see the same machine state.

    python3 goldens/cuda_speed.py --model DIR --dtype f16 --contexts 8,256,4000 \\
        --engine base=./engine-base --engine new=./engine [--env new:ENGINE_CUDA_PREFILL=step]
"""

import argparse
import json
import os
import subprocess
import sys


def prompt_ids(n, vocab_hi=49000):
    # Deterministic ids in [100, vocab_hi): a prompt of realistic length, not of realistic text
    # (speed does not depend on which ids).
    out, s = [], 12345
    for _ in range(n):
        s = (s * 1103515245 + 12345) % (1 << 31)
        out.append(100 + s % (vocab_hi - 100))
    return out


def run(binary, env, model, dtype, ids, tokens, warmups, runs, timeout):
    cmd = [binary, "profile", "--model", model, "--ep", "cuda", "--dtype", dtype,
           "--prompt-ids", ",".join(map(str, ids)), "--tokens", str(tokens),
           "--warmups", str(warmups), "--runs", str(runs), "--decode-skip", "2", "--json"]
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"{binary} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--contexts", default="8,256,1024,2048,4000")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--warmups", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engine", action="append", required=True, help="NAME=PATH (repeatable)")
    ap.add_argument("--env", action="append", default=[], help="NAME:VAR=VALUE for that engine")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    engines = [tuple(x.split("=", 1)) for x in a.engine]
    envs = {name: {} for name, _ in engines}
    for x in a.env:
        name, kv = x.split(":", 1)
        k, v = kv.split("=", 1)
        envs[name][k] = v
    rows = []
    for c in [int(x) for x in a.contexts.split(",") if x]:
        ids = prompt_ids(c)
        for name, binary in engines:
            r = run(binary, envs[name], a.model, a.dtype, ids, a.tokens, a.warmups, a.runs, a.timeout)
            g = r.get("cuda_graph") or {}
            row = dict(engine=name, context=c, prefill_ms=r["prefill_ms"],
                       ms_per_step=r["median_ms_per_step"], tok_s=r["median_tok_s"],
                       captures=g.get("captures"), fallbacks=g.get("fallbacks"),
                       generated_ids=r["generated_ids"])
            rows.append(row)
            print(f"{name:>8} context {c:5d}: prefill {row['prefill_ms']:10.2f} ms, "
                  f"step {row['ms_per_step']:.3f} ms ({row['tok_s']:.0f} tok/s), "
                  f"graph captures={row['captures']} fallbacks={row['fallbacks']}", flush=True)
        same = {tuple(r["generated_ids"]) for r in rows if r["context"] == c}
        if len(engines) > 1:
            print(f"         context {c:5d}: tokens {'identical' if len(same) == 1 else 'DIFFER'} across engines",
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, dtype=a.dtype, tokens=a.tokens, runs=a.runs, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
