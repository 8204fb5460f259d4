"""Checks that a standard-op export decodes the same with its KV cache kept at one fixed length:
the cache left-padded to WINDOW positions, the padding masked out by `attention_mask`,
`position_ids` the true positions, and after each step the cache shifted left by one (the
step's `present` without its first position becomes the next `past`). That is the shape-stable
decode step a runtime can capture once as a CUDA graph and replay; this script checks the
contract on the ONNX side with ONNX Runtime (CPU), against the ordinary growing cache.

    python3 goldens/check_padded_window.py --model DIR [--window 96] [--tokens 30]

DIR is a package written by `goldens/export_standard_onnx.py`. The prompt is prefilled the
ordinary way; the decode steps then run in the window. Prints the tokens of both runs and the
largest logit difference; exits 1 when a token differs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venv  # noqa: E402

venv.reexec_in_venv()

import argparse  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

PROMPT = "The capital of France is"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--window", type=int, default=96)
    ap.add_argument("--tokens", type=int, default=30)
    a = ap.parse_args()
    cfg = json.loads((a.model / "genai_config.json").read_text())["model"]["decoder"]
    layers, kvh, d = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(a.model / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    kv_in = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    kv_out = [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    prompt = Tokenizer.from_file(str(a.model / "tokenizer.json")).encode(PROMPT).ids
    n = len(prompt)
    if a.window < n + a.tokens:
        print(f"--window {a.window} is shorter than the prompt ({n}) plus --tokens {a.tokens}")
        return 2

    def run(ids, mask, pos, past):
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": mask[None, :].astype(np.int64),
                 "position_ids": np.array([pos], np.int64), **past}
        outs = dict(zip(names, sess.run(None, feeds)))
        return outs["logits"][0, -1], {i: outs[o] for i, o in zip(kv_in, kv_out)}

    empty = {k: np.zeros((1, kvh, 0, d), np.float32) for k in kv_in}
    logits0, cache0 = run(prompt, np.ones(n), list(range(n)), empty)

    # The ordinary growing cache.
    grow, logits, past = [], logits0, cache0
    for step in range(a.tokens):
        t = int(np.argmax(logits))
        grow.append(t)
        total = n + step + 1
        logits, past = run([t], np.ones(total), [total - 1], past)
    grow_logits = logits

    # The fixed window: WINDOW past positions, the real ones at the right end.
    W = a.window
    past = {k: np.concatenate([np.zeros((1, kvh, W - n, d), np.float32), v], axis=2) for k, v in cache0.items()}
    win, logits = [], logits0
    for step in range(a.tokens):
        t = int(np.argmax(logits))
        win.append(t)
        real = n + step  # positions already in the cache
        mask = np.concatenate([np.zeros(W - real), np.ones(real + 1)])
        logits, present = run([t], mask, [real], past)
        assert all(v.shape[2] == W + 1 for v in present.values())
        past = {k: v[:, :, 1:, :] for k, v in present.items()}
    worst = float(np.max(np.abs(logits - grow_logits)))
    print(f"prompt {n} tokens, window {W}, {a.tokens} steps")
    print(f"growing cache: {grow}")
    print(f"fixed window:  {win}")
    print(f"last step's logits, largest difference: {worst:.3g}")
    if grow != win:
        print("DIFFERENT tokens")
        return 1
    print("identical tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
