"""Decode speed of the engine vs ONNX Runtime on the same model, prompt and thread count,
measured side by side (interleaved rounds) in one run.

    python3 goldens/speed_vs_ort.py [--engine target/release/engine] [--threads 1] [--tokens 64] [--rounds 5]

Both decode greedily with the KV cache and ignore end-of-sequence ids; tok/s counts decode steps
only (the prefill is excluded), one process per engine round, one reused ORT session. Prints each
round, the medians and the engine/ORT ratio. The model is SmolLM2-135M-Instruct f32 unless
--model names another package.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venv  # noqa: E402

venv.reexec_in_venv()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

PROMPT = "The capital of France is"


def ort_decode_tok_s(sess, prompt_ids, tokens, layers, kv_heads, head):
    past = {f"past_key_values.{i}.{k}": np.zeros((1, kv_heads, 0, head), np.float32)
            for i in range(layers) for k in ("key", "value")}
    names = [o.name for o in sess.get_outputs()]
    cur, total, steps_s = list(prompt_ids), 0, []
    for step in range(tokens):
        total += len(cur)
        feeds = {"input_ids": np.array([cur], np.int64), "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.arange(total - len(cur), total, dtype=np.int64)[None, :], **past}
        t = time.perf_counter()
        outs = dict(zip(names, sess.run(None, feeds)))
        nxt = int(np.argmax(outs["logits"][0, -1]))
        if step > 0:
            steps_s.append(time.perf_counter() - t)
        for i in range(layers):
            for k in ("key", "value"):
                past[f"past_key_values.{i}.{k}"] = outs[f"present.{i}.{k}"]
        cur = [nxt]
    return len(steps_s) / sum(steps_s)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="target/release/engine")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    engine = Path(args.engine)
    model = Path(args.model) if args.model else Path(subprocess.run(
        [str(engine), "fetch", "smollm2"], check=True, capture_output=True, text=True).stdout.splitlines()[0])
    cfg = json.loads((model / "genai_config.json").read_text())["model"]["decoder"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    print(f"model {model}, {args.threads} thread(s), {args.tokens} tokens, prompt {PROMPT!r}")
    print(f"host: {platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cpus; "
          f"onnxruntime {ort.__version__}")
    eng, ortv = [], []
    prompt_ids = None
    for r in range(args.rounds):
        res = subprocess.run([str(engine), "generate", "--model", str(model), "--prompt", PROMPT,
                              "--max-tokens", str(args.tokens), "--threads", str(args.threads),
                              "--ignore-eos", "--json"], check=True, capture_output=True, text=True)
        out = json.loads(res.stdout)
        prompt_ids = out["prompt_ids"]
        eng.append(out["decode_tok_s"])
        ortv.append(ort_decode_tok_s(sess, prompt_ids, args.tokens, cfg["num_hidden_layers"],
                                     cfg["num_key_value_heads"], cfg["head_size"]))
        print(f"round {r + 1}: engine {eng[-1]:7.2f} tok/s   onnxruntime {ortv[-1]:7.2f} tok/s")
    me, mo = statistics.median(eng), statistics.median(ortv)
    print(f"median: engine {me:.2f} tok/s, onnxruntime {mo:.2f} tok/s, engine/ORT = {me / mo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
