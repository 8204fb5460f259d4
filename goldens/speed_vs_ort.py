"""Decode speed of the engine vs ONNX Runtime on the same model, prompt and thread count,
measured side by side (interleaved rounds) in one run.

    python3 goldens/speed_vs_ort.py [--engine target/release/engine] [--base-engine OLD]
                                    [--threads 1] [--tokens 64] [--rounds 5]

Both decode greedily with the KV cache and ignore end-of-sequence ids; tok/s counts decode steps
only (the prefill is excluded), one process per engine round, one reused ORT session. Prints each
round, the medians, the engine/ORT ratio of the medians and the median of the per-round ratios. The model is SmolLM2-135M-Instruct f32 unless
--model names another package.

--f16-model DIR also times the engine on the f16 package in every round (f16 against f32).

--base-engine adds a second engine binary (an earlier build) to every round, so a change is
measured before/after in the same run as ORT. Each round starts with a memory-bandwidth probe
(`engine bandwidth`, read-only, the same threads), and the medians are also stated as GB/s of
weights streamed (the bytes of every MatMul weight, read once per decode step) and as a fraction
of the probe's median: a decode step of this model is bound by memory, not arithmetic.
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


def weight_bytes_per_step(model_path):
    """Bytes of the float weights a decode step streams: every MatMul's constant operand (an
    initializer, or a Transpose of one, as the tied vocabulary projection is)."""
    import onnx
    m = onnx.load(str(model_path), load_external_data=False)
    init = {t.name: t for t in m.graph.initializer}
    transposed = {n.output[0]: n.input[0] for n in m.graph.node
                  if n.op_type == "Transpose" and n.input[0] in init}
    size = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2}
    total = 0
    for n in m.graph.node:
        if n.op_type == "MatMul":
            w = transposed.get(n.input[1], n.input[1])
            if w in init:
                t = init[w]
                total += int(np.prod(t.dims)) * size[t.data_type]
    return total


def engine_tok_s(engine, model, prompt, tokens, threads):
    res = subprocess.run([str(engine), "generate", "--model", str(model), "--prompt", prompt,
                          "--max-tokens", str(tokens), "--threads", str(threads),
                          "--ignore-eos", "--json"], check=True, capture_output=True, text=True,
                         timeout=600)
    out = json.loads(res.stdout)
    return out["decode_tok_s"], out["prompt_ids"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="target/release/engine")
    ap.add_argument("--base-engine", help="an earlier engine build, timed in the same rounds")
    ap.add_argument("--model")
    ap.add_argument("--f16-model", help="the f16 package of the same model: the engine decodes it too "
                    "in every round, reported against the engine on --model")
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
    step_bytes = weight_bytes_per_step(model / "model.onnx")
    print(f"weights streamed per decode step: {step_bytes / 1e6:.1f} MB")
    eng, base, ortv, bw, f16 = [], [], [], [], []
    for r in range(args.rounds):
        probe = subprocess.run([str(engine), "bandwidth", "--threads", str(args.threads), "--json"],
                               check=True, capture_output=True, text=True, timeout=300)
        bw.append(json.loads(probe.stdout)["median_gb_s"])
        line = f"round {r + 1}: bandwidth {bw[-1]:6.2f} GB/s  "
        if args.base_engine:
            b, _ = engine_tok_s(args.base_engine, model, PROMPT, args.tokens, args.threads)
            base.append(b)
            line += f"base engine {b:7.2f} tok/s  "
        e, prompt_ids = engine_tok_s(engine, model, PROMPT, args.tokens, args.threads)
        eng.append(e)
        if args.f16_model:
            h, _ = engine_tok_s(engine, args.f16_model, PROMPT, args.tokens, args.threads)
            f16.append(h)
            line += f"engine f16 {h:7.2f} tok/s  "

        ortv.append(ort_decode_tok_s(sess, prompt_ids, args.tokens, cfg["num_hidden_layers"],
                                     cfg["num_key_value_heads"], cfg["head_size"]))
        print(line + f"engine {eng[-1]:7.2f} tok/s   onnxruntime {ortv[-1]:7.2f} tok/s", flush=True)
    me, mo, mbw = statistics.median(eng), statistics.median(ortv), statistics.median(bw)
    print(f"median: engine {me:.2f} tok/s, onnxruntime {mo:.2f} tok/s, engine/ORT = {me / mo:.2f}")
    if base:
        mb = statistics.median(base)
        print(f"median: base engine {mb:.2f} tok/s, engine/base = {me / mb:.2f}")
    # The rounds are paired (the same minute of a shared host): the median of the per-round
    # ratios is the robust figure when the host's speed changes during the run.
    pairs = [("engine/ORT", eng, ortv)] + ([("engine/base", eng, base)] if base else []) + (
        [("engine f16/f32", f16, eng)] if f16 else [])
    if f16:
        print(f"median: engine on the f16 package {statistics.median(f16):.2f} tok/s")
    for name, num, den in pairs:
        rs = sorted(a / b for a, b in zip(num, den))
        print(f"per-round {name}: median {statistics.median(rs):.2f}, "
              f"range {rs[0]:.2f} .. {rs[-1]:.2f} over {len(rs)} rounds")
    for name, v in [("engine", me), ("onnxruntime", mo)] + ([("base engine", mb)] if base else []):
        gbs = v * step_bytes / 1e9
        print(f"{name}: {gbs:.2f} GB/s of weights = {100 * gbs / mbw:.0f} % of the measured read "
              f"bandwidth ({mbw:.2f} GB/s, {args.threads} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
