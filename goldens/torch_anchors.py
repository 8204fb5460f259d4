#!/usr/bin/env python3
"""PyTorch anchors for the engine's CUDA speed (run on the GPU machine, in the same session as
the engine's figures, which `goldens/cuda_speed.py` measures).

A SmolLM2-135M-shaped llama (hidden 576, 30 layers, 9 query / 3 KV heads of 64, SwiGLU 1536,
vocabulary 49152, tied embedding) with random weights, batch 1, on the GPU:

- prefill of N prompt tokens, eager PyTorch with `scaled_dot_product_attention(is_causal=True)`
  (FlashAttention / memory-efficient kernels), last-row logits and argmax, as the engine's
  prefill returns its first token;
- one decode step at context C with a static KV cache, compiled with
  `torch.compile(mode="reduce-overhead")` (CUDA graphs), attention over the cache with a
  position mask.

Times are medians of `--runs` after warm-up, synchronised with `torch.cuda.synchronize()`.
Prints a table and, with `--json FILE`, writes the figures.

    python3 goldens/torch_anchors.py --dtype f16 --prefill 256,4000 --decode 8,4000
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

SHAPE = dict(vocab=49152, hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64, ffn=1536)


class Model:
    def __init__(self, dtype, device, seed=0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        s = SHAPE
        h, d = s["hidden"], s["head_dim"]

        def w(*shape):
            return (torch.randn(*shape, generator=g) * (1.0 / math.sqrt(shape[-1]))).to(device, dtype)

        self.embed = w(s["vocab"], h)
        self.layers = []
        for _ in range(s["layers"]):
            self.layers.append(
                dict(
                    ln1=torch.ones(h, device=device, dtype=dtype),
                    ln2=torch.ones(h, device=device, dtype=dtype),
                    wqkv=w((s["heads"] + 2 * s["kv_heads"]) * d, h),
                    wo=w(h, s["heads"] * d),
                    wgu=w(2 * s["ffn"], h),
                    wd=w(h, s["ffn"]),
                )
            )
        self.norm = torch.ones(h, device=device, dtype=dtype)
        inv = 1.0 / (100000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.inv_freq = inv.to(device)
        self.dtype = dtype


def rms(x, g, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g


def rope(x, pos, inv_freq):
    # x [..., n, d], pos [n]
    ang = pos.float()[:, None] * inv_freq[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def prefill(m, ids, kc, vc):
    """The whole prompt at once; writes the caches [layers][kv, cap, d]; returns the next id."""
    s = SHAPE
    nh, kvh, d = s["heads"], s["kv_heads"], s["head_dim"]
    n = ids.shape[0]
    pos = torch.arange(n, device=ids.device)
    x = m.embed[ids]
    for li, L in enumerate(m.layers):
        qkv = rms(x, L["ln1"]) @ L["wqkv"].T
        q = qkv[:, : nh * d].view(n, nh, d).transpose(0, 1)
        k = qkv[:, nh * d : (nh + kvh) * d].view(n, kvh, d).transpose(0, 1)
        v = qkv[:, (nh + kvh) * d :].view(n, kvh, d).transpose(0, 1)
        q, k = rope(q, pos, m.inv_freq), rope(k, pos, m.inv_freq)
        kc[li][:, :n] = k
        vc[li][:, :n] = v
        o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)[0]
        x = x + o.transpose(0, 1).reshape(n, nh * d) @ L["wo"].T
        gu = rms(x, L["ln2"]) @ L["wgu"].T
        gt, up = gu[:, : s["ffn"]], gu[:, s["ffn"] :]
        x = x + (F.silu(gt) * up) @ L["wd"].T
    logits = rms(x[-1:], m.norm) @ m.embed.T
    return logits.argmax(-1)


class Step(torch.nn.Module):
    """One decode step; the KV caches are buffers, so CUDA graphs (reduce-overhead) keep them
    in place (a mutated plain input would make torch.compile skip graphs)."""

    def __init__(self, m, cap):
        super().__init__()
        s = SHAPE
        self.m, self.cap = m, cap
        for li in range(s["layers"]):
            self.register_buffer(f"k{li}", torch.randn(s["kv_heads"], cap, s["head_dim"], device="cuda", dtype=m.dtype))
            self.register_buffer(f"v{li}", torch.randn(s["kv_heads"], cap, s["head_dim"], device="cuda", dtype=m.dtype))
        self.register_buffer("ar", torch.arange(cap, device="cuda"))

    def forward(self, tok, pos):
        # tok [1] long, pos [1] long (device tensors: no recompilation per position)
        m, s = self.m, SHAPE
        nh, kvh, d = s["heads"], s["kv_heads"], s["head_dim"]
        x = m.embed[tok]
        mask = (self.ar <= pos)[None, None, None, :]
        for li, L in enumerate(m.layers):
            kc, vc = getattr(self, f"k{li}"), getattr(self, f"v{li}")
            qkv = rms(x, L["ln1"]) @ L["wqkv"].T
            q = qkv[:, : nh * d].view(1, nh, d).transpose(0, 1)
            k = qkv[:, nh * d : (nh + kvh) * d].view(1, kvh, d).transpose(0, 1)
            v = qkv[:, (nh + kvh) * d :].view(1, kvh, d).transpose(0, 1)
            q, k = rope(q, pos, m.inv_freq), rope(k, pos, m.inv_freq)
            kc.index_copy_(1, pos, k)
            vc.index_copy_(1, pos, v)
            o = F.scaled_dot_product_attention(q[None], kc[None], vc[None], attn_mask=mask, enable_gqa=True)[0]
            x = x + o.transpose(0, 1).reshape(1, nh * d) @ L["wo"].T
            gu = rms(x, L["ln2"]) @ L["wgu"].T
            gt, up = gu[:, : s["ffn"]], gu[:, s["ffn"] :]
            x = x + (F.silu(gt) * up) @ L["wd"].T
        logits = rms(x, m.norm) @ m.embed.T
        return logits.argmax(-1)


def timed(fn, runs, warmups):
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    ap.add_argument("--prefill", default="256,4000", help="prompt lengths, comma-separated")
    ap.add_argument("--decode", default="8,4000", help="contexts, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50, help="decode steps per timed run")
    ap.add_argument("--json")
    a = ap.parse_args()
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    torch.manual_seed(0)
    m = Model(dt, "cuda")
    s = SHAPE
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "dtype": a.dtype,
           "prefill": {}, "decode": {}}
    with torch.inference_mode():
        for n in [int(x) for x in a.prefill.split(",") if x]:
            kc = [torch.zeros(s["kv_heads"], n, s["head_dim"], device="cuda", dtype=dt) for _ in range(s["layers"])]
            vc = [torch.zeros_like(c) for c in kc]
            ids = torch.randint(100, s["vocab"], (n,), device="cuda")
            med, all_ = timed(lambda: prefill(m, ids, kc, vc), a.runs, 2)
            res["prefill"][n] = {"median_ms": med, "runs_ms": all_}
            print(f"prefill {n:5d} tokens, eager + SDPA: {med:8.2f} ms (runs {['%.2f' % x for x in all_]})", flush=True)
        for ctx in [int(x) for x in a.decode.split(",") if x]:
            cap = ctx + a.steps + 8
            step = torch.compile(Step(m, cap), mode="reduce-overhead", fullgraph=True)
            tok = torch.tensor([123], device="cuda")
            t0 = time.perf_counter()
            for i in range(3):
                step(tok, torch.tensor([ctx + i], device="cuda"))
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            pos = [torch.tensor([ctx + i], device="cuda") for i in range(a.steps)]

            def run():
                t = tok
                for p in pos:
                    t = step(t, p).clone()

            med, all_ = timed(run, a.runs, 1)
            per = med / a.steps
            res["decode"][ctx] = {"median_ms_per_step": per, "runs_ms": all_, "compile_s": compile_s}
            print(f"decode step at context {ctx:5d}, torch.compile reduce-overhead: {per:.3f} ms/step "
                  f"({1e3 / per:.0f} tok/s; compile {compile_s:.0f} s)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
