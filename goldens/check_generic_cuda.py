"""Decodes SmolLM2's goldens through the engine's generic executor on CUDA (a package the fused
decoder does not recognise, such as `export_standard_onnx.py`'s, or any package with
`--generic`) and checks each case's tokens against the golden's and that the decode step was
captured in a CUDA graph with no fallback. Prints one row per case; exit 1 when a case differs,
was not captured, or the engine failed.

    python3 goldens/check_generic_cuda.py --engine target/release/engine --model DIR \\
        [--generic] [--cases capital_plain,haiku_chat] [--no-graph]

The export decodes to the goldens' tokens on the CPU with the engine and with ONNX Runtime
(goldens/README.md), which is what makes the goldens its reference here. Standard library only
(the GPU machine has no network).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDENS = HERE / "smollm2-135m-instruct"
DEFAULT_CASES = "capital_chat,capital_plain,digits_plain,french_plain,haiku_chat,long_plain,unicode_chat"


def check(engine, model, case, generic, graph, timeout):
    g = json.loads((GOLDENS / f"{case}.json").read_text())
    want = g["generated_ids"]
    cmd = [engine, "profile", "--model", model, "--ep", "cuda", "--prompt-ids", ",".join(map(str, g["prompt_ids"])),
           "--tokens", str(len(want)), "--warmups", "0", "--runs", "1", "--json"]
    if generic:
        cmd.append("--generic")
    if not graph:
        cmd.append("--no-cuda-graph")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"{case}: engine timed out after {timeout} s"
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        return False, f"{case}: engine exit {r.returncode}: {tail}"
    p = json.loads(r.stdout)
    got = p["generated_ids"][: len(want)]
    same = got == want
    cg = p.get("cuda_graph") or {}
    captured = not graph or (cg.get("captures", 0) >= 1 and cg.get("fallbacks", 0) == 0)
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    msg = (f"{case}: {len(g['prompt_ids'])} prompt tokens, {len(want)} new: "
           f"{'identical' if same else f'DIFFERENT from token {first}'}; "
           f"graph captures {cg.get('captures')}, replays {cg.get('replays')}, fallbacks {cg.get('fallbacks')}"
           f"{' ' + '; '.join(cg.get('fallback_reasons', [])) if cg.get('fallback_reasons') else ''}; "
           f"{p['median_tok_s']:.1f} tok/s")
    return same and captured, msg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--generic", action="store_true", help="force the generic executor (a package the fused decoder knows)")
    ap.add_argument("--no-graph", action="store_true", help="eager steps (the capture is then not checked)")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per engine call")
    a = ap.parse_args()
    ok = True
    for case in a.cases.split(","):
        good, msg = check(a.engine, a.model, case, a.generic, not a.no_graph, a.timeout)
        print(("ok   " if good else "FAIL ") + msg, flush=True)
        ok &= good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
