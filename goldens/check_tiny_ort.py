"""Runs the tiny model greedily with ONNX Runtime and with the engine and compares the tokens.

    python3 goldens/check_tiny_ort.py [--engine target/release/engine] [--tokens 32]

Builds the tiny package with `engine tiny --seed 0` into a temporary directory, then for each prompt:
tokenizes it with the Python `tokenizers` package (and checks the engine's prompt ids agree), runs ORT
with the KV cache (past/present fed back, like the engine), and compares the generated ids. Exits 1 on
any difference. The venv with pinned onnxruntime/onnx/numpy is created on first use.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venv  # noqa: E402

venv.reexec_in_venv()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time there was",
    "Numbers like 12 and 345, café, 世界",
]
EOS = 2


def ort_greedy(model_dir: Path, prompt_ids: list[int], tokens: int) -> list[int]:
    cfg = json.loads((model_dir / "genai_config.json").read_text())["model"]["decoder"]
    layers, kv_heads, head = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    past = {}
    for i in range(layers):
        for kind in ("key", "value"):
            past[f"past_key_values.{i}.{kind}"] = np.zeros((1, kv_heads, 0, head), np.float32)
    out_names = [o.name for o in sess.get_outputs()]
    ids = list(prompt_ids)
    cur = list(prompt_ids)
    generated = []
    for _ in range(tokens):
        total = len(ids)
        feeds = {
            "input_ids": np.array([cur], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(total - len(cur), total, dtype=np.int64)[None, :],
            **past,
        }
        outs = dict(zip(out_names, sess.run(None, feeds)))
        nxt = int(np.argmax(outs["logits"][0, -1]))
        generated.append(nxt)
        if nxt == EOS:
            break
        for i in range(layers):
            for kind in ("key", "value"):
                past[f"past_key_values.{i}.{kind}"] = outs[f"present.{i}.{kind}"]
        ids.append(nxt)
        cur = [nxt]
    return generated


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="target/release/engine")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    engine = Path(args.engine)
    if not engine.exists():
        print(f"error: {engine} not found; build it with `cargo build --release -p engine`", file=sys.stderr)
        return 2
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny"
        subprocess.run([str(engine), "tiny", "--seed", str(args.seed), "--out", str(model)], check=True,
                       stdout=subprocess.DEVNULL)
        tok = Tokenizer.from_file(str(model / "tokenizer.json"))
        for prompt in PROMPTS:
            py_ids = tok.encode(prompt, add_special_tokens=False).ids
            res = subprocess.run([str(engine), "generate", "--model", str(model), "--prompt", prompt,
                                  "--max-tokens", str(args.tokens), "--threads", "1", "--json"],
                                 check=True, capture_output=True, text=True)
            eng = json.loads(res.stdout)
            ort_ids = ort_greedy(model, eng["prompt_ids"], args.tokens)
            same_prompt = eng["prompt_ids"] == py_ids
            same = eng["generated_ids"] == ort_ids
            status = "identical" if same and same_prompt else "DIFFERENT"
            print(f"{status}: {prompt!r}")
            print(f"  prompt ids engine={eng['prompt_ids']} python-tokenizers={py_ids}")
            print(f"  engine: {eng['generated_ids']}")
            print(f"  ort:    {ort_ids}")
            failures += not (same and same_prompt)
    print(f"{len(PROMPTS) - failures}/{len(PROMPTS)} prompts identical")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
