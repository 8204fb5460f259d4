#!/usr/bin/env python3
"""The tiny model's CPU e2e speed rows of two given `engine` binaries, by the ground truth's own
method (ground_truth.py --e2e: noise/e2e_ground_truth.py per golden prompt, 30 rounds of 40
request pairs, both pinned to one CPU, the decoding thread's CPU time). A diagnostic for an e2e
row where the gate and the corpus's ground truth disagree (README.md, "Findings while
measuring"): run with the gate's own binaries (from its slots' target dirs), it separates "the
two builds differ" from "the two measurements differ". Not part of the procedure.

  e2e_check.py --base ENGINE --head ENGINE --out DIR [--rounds 30] [--requests 40]
Standard library only. Every child process has a deadline.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ground_truth  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--requests", type=int, default=40)
    a = ap.parse_args()
    engines = {"base": str(Path(a.base).resolve()), "case": str(Path(a.head).resolve())}
    with tempfile.TemporaryDirectory(prefix="e2e-check-") as tmp:
        rows = ground_truth.e2e_rows(engines, Path(tmp), a.rounds, a.requests)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = {"schema": "harness-eval-e2e-check/1", "engines": engines, "rounds": a.rounds,
           "requests": a.requests, "rows": rows}
    (out / "e2e-check.json").write_text(json.dumps(rec, indent=1) + "\n")
    for bid, r in rows.items():
        lo, hi = r["ci95"]
        print(f"{bid}: {r['change'] * 100:+.1f} % [{lo * 100:+.1f}, {hi * 100:+.1f}]")


if __name__ == "__main__":
    main()
