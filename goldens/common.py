"""Shared helpers for the golden scripts: package hashing, chat rendering, ORT greedy decoding."""

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx


def model_sha256(package: Path) -> str:
    """sha256 over model.onnx followed by every external data file it references, in sorted
    file-name order: the package hash the engine, the oracle and the goldens all record."""
    model_path = package / "model.onnx"
    m = onnx.load(str(model_path), load_external_data=False)
    files = sorted({e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"})
    h = hashlib.sha256()
    h.update(model_path.read_bytes())
    for f in files:
        with open(package / f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def render_chat(package: Path, prompt: str) -> str:
    """Renders one user turn with the package's chat template through Jinja, as transformers does."""
    import jinja2

    cfg = json.loads((package / "tokenizer_config.json").read_text())
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(cfg["chat_template"])
    return template.render(messages=[{"role": "user", "content": prompt}], add_generation_prompt=True)


def top5(logits: np.ndarray) -> list:
    """Top 5 (id, logit) by logit descending, lower id first on ties."""
    order = np.lexsort((np.arange(len(logits)), -logits.astype(np.float64)))[:5]
    return [[int(i), float(logits[i])] for i in order]


def ort_greedy(package: Path, prompt_ids: list, max_new_tokens: int, eos_ids: list, threads: int = 1):
    """Greedy decoding with the KV cache (prefill, then one token per step), stopping after an
    end-of-sequence id (kept) or max_new_tokens. Returns (generated ids, per-step top-5)."""
    import onnxruntime as ort

    cfg = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    layers, kv_heads, head = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(package / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    kv_type = np.float16 if sess.get_inputs()[3].type == "tensor(float16)" else np.float32
    past = {}
    for i in range(layers):
        for kind in ("key", "value"):
            past[f"past_key_values.{i}.{kind}"] = np.zeros((1, kv_heads, 0, head), kv_type)
    out_names = [o.name for o in sess.get_outputs()]
    total = 0
    cur = list(prompt_ids)
    generated, steps = [], []
    while len(generated) < max_new_tokens:
        total += len(cur)
        feeds = {
            "input_ids": np.array([cur], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(total - len(cur), total, dtype=np.int64)[None, :],
            **past,
        }
        outs = dict(zip(out_names, sess.run(None, feeds)))
        logits = outs["logits"][0, -1].astype(np.float32)
        nxt = int(np.argmax(logits))
        generated.append(nxt)
        steps.append({"top": top5(logits)})
        if nxt in eos_ids:
            break
        for i in range(layers):
            for kind in ("key", "value"):
                past[f"past_key_values.{i}.{kind}"] = outs[f"present.{i}.{kind}"]
        cur = [nxt]
    return generated, steps
