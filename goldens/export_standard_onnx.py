"""Builds a standard-op ONNX export of SmolLM2-135M-Instruct from the pinned GGUF, with
`onnx.helper`: the graph an optimum-style exporter would write (plain MatMul, Softmax,
Concat/Expand KV, RoPE from Cos/Sin, a causal mask from Range/LessOrEqual/Where in the cache's
frame, so a left-padded cache with its padding masked out decodes the same), with
`past_key_values.N.key|value` inputs and `present.N.key|value` outputs, and none of the node or
initializer names the engine's own converter (`engine convert`) writes. It is the package the
engine's generic executor must run on every backend: the fused CUDA llama path does not
recognise it.

    python3 goldens/export_standard_onnx.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
        --tokenizer-from ~/.cache/decoder-gate/models/smollm2-135m-instruct --out DIR

Weights are read and dequantised with llama.cpp's `gguf` package (pinned in requirements.txt);
q/k rows are un-permuted from llama.cpp's adjacent-pair RoPE order back to rotate-half, as
`engine/src/convert.rs` does. Tokenizer files come from an engine package (`--tokenizer-from`):
this script checks the graph, not the tokenizer. f32 only.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venv  # noqa: E402

venv.reexec_in_venv()

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 17


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if v.dtype == np.uint8 else v.item()


def tensors(reader):
    out = {}
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        # GGUF lists dims fastest-first; numpy shape is the reverse (row-major [out, in]).
        out[t.name] = a.reshape([int(d) for d in reversed(t.shape)])
    return out


def unpermute(w, heads):
    """llama.cpp stores q/k rows as (head, i, half); HF rotate-half wants (head, half, i)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, name, **attrs):
        self.n += 1
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{name}", **attrs))
        return out


def build(gguf_path, tokenizer_from, out_dir):
    r = GGUFReader(str(gguf_path))
    arch = field(r, "general.architecture")
    key = lambda k: f"{arch}.{k}"  # noqa: E731
    layers = field(r, key("block_count"))
    hidden = field(r, key("embedding_length"))
    heads = field(r, key("attention.head_count"))
    kv_heads = field(r, key("attention.head_count_kv"))
    eps = float(field(r, key("attention.layer_norm_rms_epsilon")))
    theta = float(field(r, key("rope.freq_base")))
    context = int(field(r, key("context_length")))
    d = hidden // heads
    w = tensors(r)
    vocab = w["token_embd.weight"].shape[0]

    g = Graph()
    g.const("eps", np.array(eps, np.float32))
    g.const("scale", np.array(1.0 / np.sqrt(d), np.float32))
    g.const("inv_freq", (1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)).astype(np.float32))
    g.const("axes_1", np.array([1], np.int64))
    g.const("axes_2", np.array([2], np.int64))
    g.const("axes_01", np.array([0, 1], np.int64))
    g.const("axes_02", np.array([0, 2], np.int64))
    g.const("axes_3", np.array([3], np.int64))
    g.const("zero_i", np.array(0, np.int64))
    g.const("one_i", np.array(1, np.int64))
    g.const("idx_1", np.array(1, np.int64))
    g.const("half_lo", np.array([0], np.int64))
    g.const("half_mid", np.array([d // 2], np.int64))
    g.const("half_hi", np.array([d], np.int64))
    g.const("zero_f", np.array(0.0, np.float32))
    g.const("neg_big", np.array(np.finfo(np.float32).min, np.float32))
    g.const("q_shape", np.array([1, -1, heads, d], np.int64))
    g.const("kv_shape", np.array([1, -1, kv_heads, d], np.int64))
    g.const("rep_shape", np.array([1, 1, heads // kv_heads, 1, 1], np.int64))
    g.const("gqa_shape", np.array([1, heads, -1, d], np.int64))
    g.const("ctx_shape", np.array([1, -1, heads * d], np.int64))
    g.const("embed", w["token_embd.weight"])
    g.const("lm_head_t", np.ascontiguousarray(w.get("output.weight", w["token_embd.weight"]).T))
    g.const("final_norm", w["output_norm.weight"])

    def rms(x, weight, name):
        sq = g.op("Mul", [x, x], f"{name}/sq")
        ms = g.op("ReduceMean", [sq], f"{name}/mean", axes=[-1], keepdims=1)
        rt = g.op("Sqrt", [g.op("Add", [ms, "eps"], f"{name}/add_eps")], f"{name}/sqrt")
        return g.op("Mul", [g.op("Div", [x, rt], f"{name}/div"), weight], f"{name}/scale")

    # Rotary tables for these positions, shared by every layer: [1, 1, s, d].
    pos = g.op("Cast", ["position_ids"], "rope/pos", to=TensorProto.FLOAT)
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, "axes_2"], "rope/pos3"), "inv_freq"], "rope/freqs")
    emb = g.op("Concat", [freqs, freqs], "rope/emb", axis=-1)
    cos = g.op("Unsqueeze", [g.op("Cos", [emb], "rope/cos0"), "axes_1"], "rope/cos")
    sin = g.op("Unsqueeze", [g.op("Sin", [emb], "rope/sin0"), "axes_1"], "rope/sin")

    # Causal mask over the whole cache, in the cache's own frame (as transformers builds it
    # from the cache positions, not from position_ids): query i of s sits at key index
    # T - s + i and sees keys 0..=T-s+i that the attention mask keeps. [1, 1, s, T], 0 or the
    # most negative float. With no padding this is "keys 0..=position"; with a left-padded cache
    # (padding masked out by attention_mask, position_ids the true positions) it still is, so
    # a runtime may run every step at one fixed cache length.
    total = g.op("Gather", [g.op("Shape", ["attention_mask"], "mask/shape"), "idx_1"], "mask/total", axis=0)
    seq = g.op("Gather", [g.op("Shape", ["input_ids"], "mask/ids_shape"), "idx_1"], "mask/seq", axis=0)
    keys = g.op("Range", ["zero_i", total, "one_i"], "mask/keys")
    keys3 = g.op("Unsqueeze", [keys, "axes_01"], "mask/keys3")
    qidx = g.op("Range", [g.op("Sub", [total, seq], "mask/first_q"), total, "one_i"], "mask/qidx")
    posq = g.op("Unsqueeze", [qidx, "axes_02"], "mask/posq")
    causal = g.op("LessOrEqual", [keys3, posq], "mask/causal")
    kept = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], "mask/bool", to=TensorProto.BOOL), "axes_1"], "mask/kept")
    allowed = g.op("And", [causal, kept], "mask/allowed")
    bias = g.op("Unsqueeze", [g.op("Where", [allowed, "zero_f", "neg_big"], "mask/where"), "axes_1"], "mask/bias")

    def rotate(x, name):
        x1 = g.op("Slice", [x, "half_lo", "half_mid", "axes_3"], f"{name}/x1")
        x2 = g.op("Slice", [x, "half_mid", "half_hi", "axes_3"], f"{name}/x2")
        rh = g.op("Concat", [g.op("Neg", [x2], f"{name}/neg"), x1], f"{name}/rotate_half", axis=3)
        return g.op("Add", [g.op("Mul", [x, cos], f"{name}/xcos"), g.op("Mul", [rh, sin], f"{name}/rsin")], f"{name}/rope")

    x = g.op("Gather", ["embed", "input_ids"], "embed/gather", axis=0)
    in_kv, out_kv = [], []
    for i in range(layers):
        p = f"layer{i}"
        t = lambda n: f"blk.{i}.{n}.weight"  # noqa: E731
        g.const(f"{p}.ln1", w[t("attn_norm")])
        g.const(f"{p}.ln2", w[t("ffn_norm")])
        g.const(f"{p}.wq_t", np.ascontiguousarray(unpermute(w[t("attn_q")], heads).T))
        g.const(f"{p}.wk_t", np.ascontiguousarray(unpermute(w[t("attn_k")], kv_heads).T))
        g.const(f"{p}.wv_t", np.ascontiguousarray(w[t("attn_v")].T))
        g.const(f"{p}.wo_t", np.ascontiguousarray(w[t("attn_output")].T))
        g.const(f"{p}.wg_t", np.ascontiguousarray(w[t("ffn_gate")].T))
        g.const(f"{p}.wu_t", np.ascontiguousarray(w[t("ffn_up")].T))
        g.const(f"{p}.wd_t", np.ascontiguousarray(w[t("ffn_down")].T))
        h = rms(x, f"{p}.ln1", f"{p}/rms1")
        q = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [h, f"{p}.wq_t"], f"{p}/q"), "q_shape"], f"{p}/q4")], f"{p}/qt", perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [h, f"{p}.wk_t"], f"{p}/k"), "kv_shape"], f"{p}/k4")], f"{p}/kt", perm=[0, 2, 1, 3])
        v = g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [h, f"{p}.wv_t"], f"{p}/v"), "kv_shape"], f"{p}/v4")], f"{p}/vt", perm=[0, 2, 1, 3])
        q, k = rotate(q, f"{p}/q"), rotate(k, f"{p}/k")
        pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        in_kv += [pk, pv]
        k_all = g.op("Concat", [pk, k], f"{p}/k_cat", axis=2)
        v_all = g.op("Concat", [pv, v], f"{p}/v_cat", axis=2)
        ok, ov = f"present.{i}.key", f"present.{i}.value"
        g.nodes.append(helper.make_node("Identity", [k_all], [ok], name=f"{p}/present_k"))
        g.nodes.append(helper.make_node("Identity", [v_all], [ov], name=f"{p}/present_v"))
        out_kv += [ok, ov]

        def repeat(t_, name):
            e = g.op("Expand", [g.op("Unsqueeze", [t_, "axes_2"], f"{name}/unsq"), "rep_shape"], f"{name}/expand")
            return g.op("Reshape", [e, "gqa_shape"], f"{name}/gqa")

        kr, vr = repeat(k_all, f"{p}/krep"), repeat(v_all, f"{p}/vrep")
        scores = g.op("MatMul", [q, g.op("Transpose", [kr], f"{p}/kT", perm=[0, 1, 3, 2])], f"{p}/scores")
        probs = g.op("Softmax", [g.op("Add", [g.op("Mul", [scores, "scale"], f"{p}/scaled"), bias], f"{p}/masked")], f"{p}/softmax", axis=-1)
        ctx = g.op("MatMul", [probs, vr], f"{p}/ctx")
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], f"{p}/ctxT", perm=[0, 2, 1, 3]), "ctx_shape"], f"{p}/ctx2")
        x = g.op("Add", [x, g.op("MatMul", [ctx, f"{p}.wo_t"], f"{p}/o")], f"{p}/res1")
        h = rms(x, f"{p}.ln2", f"{p}/rms2")
        gate = g.op("MatMul", [h, f"{p}.wg_t"], f"{p}/gate")
        up = g.op("MatMul", [h, f"{p}.wu_t"], f"{p}/up")
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{p}/sig")], f"{p}/silu"), up], f"{p}/act")
        x = g.op("Add", [x, g.op("MatMul", [act, f"{p}.wd_t"], f"{p}/down")], f"{p}/res2")
    h = rms(x, "final_norm", "final/rms")
    g.nodes.append(helper.make_node("MatMul", [h, "lm_head_t"], ["logits"], name="lm_head"))

    kv_shape = ["batch", kv_heads, "past", d]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ] + [helper.make_tensor_value_info(n, TensorProto.FLOAT, kv_shape) for n in in_kv]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])] + [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", kv_heads, "total", d]) for n in out_kv
    ]
    graph = helper.make_graph(g.nodes, "smollm2_standard_ops", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="goldens/export_standard_onnx.py")
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_dir / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    onnx.checker.check_model(str(out_dir / "model.onnx"))
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(Path(tokenizer_from) / f, out_dir / f)
    src = json.loads((Path(tokenizer_from) / "genai_config.json").read_text())["model"]
    genai = {"model": {k: src[k] for k in ["bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"] if k in src}}
    genai["model"]["context_length"] = context
    # The geometry only: the port names are derived from the graph (standard names).
    genai["model"]["decoder"] = {
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_size": d,
        "hidden_size": hidden,
    }
    (out_dir / "genai_config.json").write_text(json.dumps(genai, indent=2) + "\n")
    print(f"wrote {out_dir}: {layers} layers, {heads}/{kv_heads} heads of {d}, hidden {hidden}, vocab {vocab}, {len(g.nodes)} nodes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--tokenizer-from", required=True, type=Path, help="an engine package of the same model")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    build(a.gguf, a.tokenizer_from, a.out)


if __name__ == "__main__":
    main()
