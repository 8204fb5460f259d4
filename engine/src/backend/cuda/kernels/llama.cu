// The fused llama decode step (one token at batch 1), used by backend/cuda/llama.rs. A step is
// embed -> per layer [rms_qkv_rope, attention, gemv_residual (o_proj), rms_gate_up,
// gemv_residual (down)] -> rms_gemv (lm_head) -> argmax: 5 kernels per layer. The token and
// position live in device memory (`state[0]` = token, `state[1]` = position) and argmax writes
// the next token and advances the position, so a captured CUDA graph replays with no host input.
// Weights are stored row per output ([out, in], transposed at load) so each warp reads one
// contiguous row: the step is latency bound at this size and this keeps every load coalesced.
// The residual stream, queries, attention output and logits are f32; the KV cache is in T.

// Dot products of weight rows with an f32 vector (shared or global), summed across the warp.
// The step is latency bound: each lane loads 16 bytes per iteration (8 halves / 4 floats) and
// the loop is unrolled so several loads are in flight; two rows are walked together when the
// caller needs a pair (RoPE pairs, gate/up). Rows whose length or address is not 16-byte
// aligned take the scalar loop.
template <typename T>
__device__ __forceinline__ void accum16(const uint4& u, const float* v, float& acc) {
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int t = 0; t < (int)(16 / sizeof(T)); t++) acc += to_f(e[t]) * v[t];
}

template <typename T>
__device__ __forceinline__ bool aligned16(const T* w, int n) {
    return ((unsigned long long)w & 15ull) == 0 && (n * (int)sizeof(T)) % 16 == 0;
}

template <typename T>
__device__ __forceinline__ float warp_dot(const T* __restrict__ w, const float* v, int n) {
    const int E = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (aligned16(w, n)) {
        const uint4* w4 = reinterpret_cast<const uint4*>(w);
        int nv = n / E;
#pragma unroll 4
        for (int j = lane; j < nv; j += 32) accum16<T>(w4[j], v + j * E, acc);
    } else {
        for (int k = lane; k < n; k += 32) acc += to_f(w[k]) * v[k];
    }
    return warp_sum(acc);
}

template <typename T>
__device__ __forceinline__ void warp_dot2(const T* __restrict__ w0, const T* __restrict__ w1,
                                          const float* v, int n, float& a, float& b) {
    const int E = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    float acc0 = 0.0f, acc1 = 0.0f;
    if (aligned16(w0, n) && aligned16(w1, n)) {
        const uint4* p0 = reinterpret_cast<const uint4*>(w0);
        const uint4* p1 = reinterpret_cast<const uint4*>(w1);
        int nv = n / E;
#pragma unroll 2
        for (int j = lane; j < nv; j += 32) {
            uint4 u0 = p0[j];
            uint4 u1 = p1[j];
            accum16<T>(u0, v + j * E, acc0);
            accum16<T>(u1, v + j * E, acc1);
        }
    } else {
        for (int k = lane; k < n; k += 32) {
            acc0 += to_f(w0[k]) * v[k];
            acc1 += to_f(w1[k]) * v[k];
        }
    }
    a = warp_sum(acc0);
    b = warp_sum(acc1);
}

// Programmatic dependent launch (sm_90+; the host sets the launch attribute only there): a
// kernel's blocks may start while the previous kernel of the step still runs. Each kernel first
// loads what does not depend on earlier kernels (its weight rows, into registers), then
// `pdl_enter` waits until the previous kernel has completed and its writes are visible (a no-op
// when launched without the attribute), and lets the next kernel start launching: its launch and
// weight loads overlap this kernel. Nothing written by an earlier kernel is touched before it.
__device__ __forceinline__ void pdl_enter() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Up to P 16-byte chunks of one weight row per lane, loaded before the dependency wait: lane
// `l` holds chunks l, l + 32, ... (the order warp_dot walks), so the sums stay bit-identical.
template <int P>
struct RowPre {
    uint4 v[P];
};

template <typename T, int P>
__device__ __forceinline__ void pre_load(const T* __restrict__ w, int n, RowPre<P>& r) {
    if (!aligned16(w, n)) return;
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    int nv = n / (int)(16 / sizeof(T)), lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < P; i++) {
        int j = lane + 32 * i;
        if (j < nv) r.v[i] = w4[j];
    }
}

// This lane's partial dot of row `w` (its first chunks from `r`) with `v`; warp_sum it.
template <typename T, int P>
__device__ __forceinline__ float pre_dot(const T* __restrict__ w, const RowPre<P>& r, const float* v, int n) {
    const int E = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (aligned16(w, n)) {
        const uint4* w4 = reinterpret_cast<const uint4*>(w);
        int nv = n / E;
#pragma unroll
        for (int i = 0; i < P; i++) {
            int j = lane + 32 * i;
            if (j < nv) accum16<T>(r.v[i], v + j * E, acc);
        }
#pragma unroll 4
        for (int j = lane + 32 * P; j < nv; j += 32) accum16<T>(w4[j], v + j * E, acc);
    } else {
        for (int k = lane; k < n; k += 32) acc += to_f(w[k]) * v[k];
    }
    return acc;
}

// xs[i] = x[i] / sqrt(mean(x^2) + eps) * g[i], into shared memory (every block recomputes it:
// h is small and this saves a kernel per norm).
__device__ __forceinline__ void rms_to_shared(const float* __restrict__ x, const float* __restrict__ g,
                                              float eps, int h, float* xs, float* red) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < h; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss, red);
    float r = sqrtf(ss / (float)h + eps);
    for (int i = threadIdx.x; i < h; i += blockDim.x) xs[i] = x[i] / r * g[i];
    __syncthreads();
}

// One 16-byte chunk j of two weight rows against rmsnorm's input: acc += w[k] * (x[k] * g[k])
// and ss += x[k]^2 over the chunk's elements k (see rms_dot2).
template <typename T>
__device__ __forceinline__ void rms_chunk(const uint4& u0, const uint4& u1, const float* __restrict__ x,
                                          const float* __restrict__ g, int j, float& acc0,
                                          float& acc1, float& ss) {
    const int E = 16 / sizeof(T);
    const T* e0 = reinterpret_cast<const T*>(&u0);
    const T* e1 = reinterpret_cast<const T*>(&u1);
    const float4* x4 = reinterpret_cast<const float4*>(x + j * E);
    const float4* g4 = reinterpret_cast<const float4*>(g + j * E);
#pragma unroll
    for (int q = 0; q < E / 4; q++) {
        float4 xv = x4[q], gv = g4[q];
        float xs[4] = {xv.x, xv.y, xv.z, xv.w}, gs[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float xg = xs[t] * gs[t];
            ss += xs[t] * xs[t];
            acc0 += to_f(e0[q * 4 + t]) * xg;
            acc1 += to_f(e1[q * 4 + t]) * xg;
        }
    }
}

// Warp-local RMSNorm fused into two weight rows' dot products: a = dot(w0, rmsnorm(x) * g) and
// b = dot(w1, ...), computed as dot(w, x * g) / rms(x). The lanes' chunks cover the row, and so
// x, exactly once, so the sum of squares is a warp sum of the x the lanes load anyway: no
// staging in shared memory and no block barrier after the dependency wait. The first P chunks
// per lane come from the rows preloaded before it.
template <typename T, int P>
__device__ __forceinline__ void rms_dot2(const T* __restrict__ w0, const RowPre<P>& p0,
                                         const T* __restrict__ w1, const RowPre<P>& p1,
                                         const float* __restrict__ x, const float* __restrict__ g,
                                         float eps, int h, float& a, float& b) {
    const int E = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    float acc0 = 0.0f, acc1 = 0.0f, ss = 0.0f;
    if (aligned16(w0, h) && aligned16(w1, h) && h % 4 == 0) {
        const uint4* q0 = reinterpret_cast<const uint4*>(w0);
        const uint4* q1 = reinterpret_cast<const uint4*>(w1);
        int nv = h / E;
#pragma unroll
        for (int i = 0; i < P; i++) {
            int j = lane + 32 * i;
            if (j < nv) rms_chunk<T>(p0.v[i], p1.v[i], x, g, j, acc0, acc1, ss);
        }
        for (int j = lane + 32 * P; j < nv; j += 32) rms_chunk<T>(q0[j], q1[j], x, g, j, acc0, acc1, ss);
    } else {
        for (int k = lane; k < h; k += 32) {
            float xv = x[k], xg = xv * g[k];
            ss += xv * xv;
            acc0 += to_f(w0[k]) * xg;
            acc1 += to_f(w1[k]) * xg;
        }
    }
    float r = sqrtf(warp_sum(ss) / (float)h + eps);
    a = warp_sum(acc0) / r;
    b = warp_sum(acc1) / r;
}

template <typename T>
__device__ void embed(const T* __restrict__ emb, const int* __restrict__ state, float* __restrict__ x, int h) {
    pdl_enter();
    long tok = state[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < h; i += gridDim.x * blockDim.x)
        x[i] = to_f(emb[tok * h + i]);
}

// Tasks: (nh + 2 kvh) * d/2 row pairs (i, i + d/2) of the fused [q; k; v] weight; one per warp.
// q and k pairs are rotated (rotate-half RoPE at position state[1]); k and v go into the cache.
template <typename T>
__device__ void rms_qkv_rope(const float* __restrict__ x, const float* __restrict__ g, float eps,
                             const T* __restrict__ w, int h, int nh, int kvh, int d,
                             const float* __restrict__ inv_freq, const int* __restrict__ state,
                             float* __restrict__ q, T* __restrict__ kc, T* __restrict__ vc, int max_seq) {
    int half = d / 2;
    int tasks = (nh + 2 * kvh) * half;
    int nw = blockDim.x >> 5;
    int task = blockIdx.x * nw + (threadIdx.x >> 5);
    bool live = task < tasks;
    int head = task / half, i = task % half;
    long r0 = (long)head * d + i;
    RowPre<4> p0, p1;
    if (live) {
        pre_load<T, 4>(w + r0 * h, h, p0);
        pre_load<T, 4>(w + (r0 + half) * h, h, p1);
    }
    // The position and its rotation, before the wait too: state is written only by argmax at
    // the end of the previous step (see attention).
    int pos = state[1];
    float c = 1.0f, s = 0.0f;
    if (live && head < nh + kvh) {
        float ang = (float)pos * inv_freq[i];
        c = cosf(ang);
        s = sinf(ang);
    }
    pdl_enter();
    if (!live) return;
    float a, b;
    rms_dot2<T, 4>(w + r0 * h, p0, w + (r0 + half) * h, p1, x, g, eps, h, a, b);
    if ((threadIdx.x & 31) != 0) return;
    if (head < nh + kvh) {
        float a2 = a * c - b * s;
        float b2 = b * c + a * s;
        a = a2;
        b = b2;
    }
    if (head < nh) {
        q[head * d + i] = a;
        q[head * d + i + half] = b;
    } else {
        int kh = head < nh + kvh ? head - nh : head - nh - kvh;
        T* dst = (head < nh + kvh ? kc : vc) + ((long)kh * max_seq + pos) * d;
        dst[i] = from_f<T>(a);
        dst[i + half] = from_f<T>(b);
    }
}

// Flash-decoding: the cached positions 0..=state[1] are cut into splits of blockDim.x keys, one
// block per (head, split) (grid = heads * splits, splits = capacity / blockDim.x, head-major), so
// a long context is spread over many SMs instead of walked by one block per head. Each block
// scores its keys (one thread per key), takes their softmax max m and sum s, and sums its
// unnormalised output o = sum exp(score - m) v; a split past the context leaves at once. The
// last live block of a head to finish (a per-head arrival counter; __threadfence orders the
// partials before it) combines the splits: out = sum_i o_i e^(m_i - M) / sum_i s_i e^(m_i - M),
// M = max m_i, and resets the counter for the next step. With one live split (a context of at
// most blockDim.x) its block writes o / s directly: the one-block kernel's result bit for bit,
// and no counter, fence or second pass (measured on the H200 at context 8: the combine on every
// step cost 0.464 -> 0.511 ms/step).
// Shared: 32 (reduction) + 8 * blockDim (partial outputs) + d (the query) + blockDim scores:
// nothing grows with the context. `part` holds heads * splits * (d + 2) floats, `count` heads.
// Before the dependency wait a block loads the K and V rows of its positions < state[1] (written
// by earlier steps; state is only written by argmax at the end of the previous step): only the
// current position's K/V and q come from the kernel before it.
template <typename T>
__device__ void attention(const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                          const int* __restrict__ state, int nh, int kvh, int d, int max_seq, float scale,
                          float* __restrict__ out, float* part, unsigned int* count) {
    extern __shared__ float smem[];
    __shared__ bool last_block;
    const int E = 16 / sizeof(T);
    const int KP = 8, VP = 4;
    float* red = smem;
    float* pv = smem + 32;
    float* qs = pv + 8 * blockDim.x;
    float* sc = qs + d;
    int splits = gridDim.x / nh;
    int head = blockIdx.x / splits, sp = blockIdx.x % splits;
    int kh = head / (nh / kvh);
    int len = state[1] + 1;
    int k0 = sp * blockDim.x;
    int nk = min(len - k0, (int)blockDim.x);  // keys of this split
    // Splits past the context leave at once; with one live split its block writes the output
    // itself (o / s, no partials, no counter): short contexts pay nothing for the splitting.
    int live = (len + (int)blockDim.x - 1) / (int)blockDim.x;
    if (nk <= 0) return;
    const T* kb = kc + (long)kh * max_seq * d;
    const T* vb = vc + (long)kh * max_seq * d;
    int tpr = d / E;                      // threads per row in the V pass
    bool vec = aligned16(kb, d) && aligned16(vb, d) && (int)blockDim.x % tpr == 0;
    int rg = vec ? (int)blockDim.x / tpr : 1;  // rows summed in parallel in the V pass
    int grp = vec ? (int)threadIdx.x / tpr : 0, ch = vec ? (int)threadIdx.x % tpr : 0;
    uint4 kr[KP], vr[VP];
    bool kpre = vec && tpr <= KP && k0 + (int)threadIdx.x < len - 1;
    if (kpre) {
        const uint4* k4 = reinterpret_cast<const uint4*>(kb + (long)(k0 + threadIdx.x) * d);
#pragma unroll
        for (int j = 0; j < KP; j++)
            if (j < tpr) kr[j] = k4[j];
    }
    if (vec) {
#pragma unroll
        for (int i = 0; i < VP; i++) {
            int t = grp + rg * i;
            if (t < nk && k0 + t < len - 1) vr[i] = reinterpret_cast<const uint4*>(vb + (long)(k0 + t) * d)[ch];
        }
    }
    pdl_enter();
    float* mine = part + ((long)head * splits + sp) * (d + 2);
    {
        for (int k = threadIdx.x; k < d; k += blockDim.x) qs[k] = q[head * d + k];
        __syncthreads();
        // One thread per key: its row is d contiguous elements, loaded 16 bytes at a time with all
        // loads independent, so the pass costs about one memory latency.
        int t = threadIdx.x;
        if (t < nk) {
            const T* kr_ = kb + (long)(k0 + t) * d;
            float acc = 0.0f;
            if (vec) {
                const uint4* k4 = reinterpret_cast<const uint4*>(kr_);
                if (kpre) {
#pragma unroll
                    for (int j = 0; j < KP; j++)
                        if (j < tpr) accum16<T>(kr[j], qs + j * E, acc);
                } else {
                    for (int j = 0; j < tpr; j++) accum16<T>(k4[j], qs + j * E, acc);
                }
            } else {
                for (int k = 0; k < d; k++) acc += qs[k] * to_f(kr_[k]);
            }
            sc[t] = acc * scale;
        }
        __syncthreads();
        float m = t < nk ? sc[t] : -3.402823466e38f;
        m = block_max(m, red);
        float e = 0.0f;
        if (t < nk) {
            e = expf(sc[t] - m);
            sc[t] = e;
        }
        float s = block_sum(e, red);
        if (vec) {
            // rg rows at a time, each by tpr threads holding one 16-byte chunk of it.
            float acc[16 / sizeof(T)];
#pragma unroll
            for (int e2 = 0; e2 < E; e2++) acc[e2] = 0.0f;
#pragma unroll
            for (int i = 0; i < VP; i++) {
                int t2 = grp + rg * i;
                if (t2 < nk) {
                    uint4 u = k0 + t2 < len - 1 ? vr[i] : reinterpret_cast<const uint4*>(vb + (long)(k0 + t2) * d)[ch];
                    const T* e8 = reinterpret_cast<const T*>(&u);
                    float p = sc[t2];
#pragma unroll
                    for (int e2 = 0; e2 < E; e2++) acc[e2] += p * to_f(e8[e2]);
                }
            }
#pragma unroll 4
            for (int t2 = grp + rg * VP; t2 < nk; t2 += rg) {
                uint4 u = reinterpret_cast<const uint4*>(vb + (long)(k0 + t2) * d)[ch];
                const T* e8 = reinterpret_cast<const T*>(&u);
                float p = sc[t2];
#pragma unroll
                for (int e2 = 0; e2 < E; e2++) acc[e2] += p * to_f(e8[e2]);
            }
#pragma unroll
            for (int e2 = 0; e2 < E; e2++) pv[grp * d + ch * E + e2] = acc[e2];
        } else {
            int groups = blockDim.x / d;
            rg = groups;
            int dd = threadIdx.x % d, g = threadIdx.x / d;
            if (g < groups) {
                float acc = 0.0f;
#pragma unroll 4
                for (int t2 = g; t2 < nk; t2 += groups) acc += sc[t2] * to_f(vb[(long)(k0 + t2) * d + dd]);
                pv[g * d + dd] = acc;
            }
        }
        __syncthreads();
        if (threadIdx.x < d) {
            float acc = 0.0f;
            for (int g2 = 0; g2 < rg; g2++) acc += pv[g2 * d + threadIdx.x];
            if (live == 1) {
                out[head * d + threadIdx.x] = acc / s;
                return;
            }
            mine[threadIdx.x] = acc;
        }
        if (threadIdx.x == 0) {
            mine[d] = m;
            mine[d + 1] = s;
        }
    }
    if (live == 1) return;
    // Publish this split's partial, then count it in; the last live block of the head combines.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(count + head, 1u) == (unsigned)live - 1;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    const float* hp = part + (long)head * splits * (d + 2);
    if (threadIdx.x < d) {
        float mx = -3.402823466e38f;
        for (int i = 0; i < live; i++) mx = fmaxf(mx, __ldcg(hp + (long)i * (d + 2) + d));
        float sum = 0.0f, acc = 0.0f;
        for (int i = 0; i < live; i++) {
            const float* pi = hp + (long)i * (d + 2);
            float w = expf(__ldcg(pi + d) - mx);
            sum += __ldcg(pi + d + 1) * w;
            acc += __ldcg(pi + threadIdx.x) * w;
        }
        out[head * d + threadIdx.x] = acc / sum;
    }
    if (threadIdx.x == 0) count[head] = 0u;
}

// out[r] += dot(w[r], v) for r < rows; one warp per row, v staged in shared memory (cols floats).
template <typename T>
__device__ void gemv_residual(const T* __restrict__ w, const float* __restrict__ v, float* __restrict__ out,
                              int rows, int cols) {
    extern __shared__ float smem[];
    int nw = blockDim.x >> 5;
    int r = blockIdx.x * nw + (threadIdx.x >> 5);
    bool live = r < rows;
    RowPre<8> p;
    if (live) pre_load<T, 8>(w + (long)r * cols, cols, p);
    pdl_enter();
    // The residual is read now, in the shadow of the staging loads, not after the dot.
    float base = live && (threadIdx.x & 31) == 0 ? out[r] : 0.0f;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) smem[k] = v[k];
    __syncthreads();
    if (!live) return;
    float acc = warp_sum(pre_dot<T, 8>(w + (long)r * cols, p, smem, cols));
    if ((threadIdx.x & 31) == 0) out[r] = base + acc;
}

// act[j] = silu(gate_j) * up_j with gate rows 0..f and up rows f..2f of `w`; one warp per j.
template <typename T>
__device__ void rms_gate_up(const float* __restrict__ x, const float* __restrict__ g, float eps,
                            const T* __restrict__ w, int h, int f, float* __restrict__ act) {
    int nw = blockDim.x >> 5;
    int j = blockIdx.x * nw + (threadIdx.x >> 5);
    bool live = j < f;
    RowPre<4> p0, p1;
    if (live) {
        pre_load<T, 4>(w + (long)j * h, h, p0);
        pre_load<T, 4>(w + (long)(f + j) * h, h, p1);
    }
    pdl_enter();
    if (!live) return;
    float gt, up;
    rms_dot2<T, 4>(w + (long)j * h, p0, w + (long)(f + j) * h, p1, x, g, eps, h, gt, up);
    if ((threadIdx.x & 31) == 0) {
        float sg = 1.0f / (1.0f + expf(-gt));
        act[j] = gt * sg * up;
    }
}

// The lm_head over the tied embedding fused with the first argmax stage: out[r] =
// dot(w[r], rmsnorm(x) * g) for r < rows, grid-strided so each warp walks several row pairs
// (one row per warp left the 6144 blocks dominated by their norm and reduction overhead), the
// first pair loaded before the dependency wait, later pairs by the plain loop (double-buffering
// every pair in registers measured no faster on the H200); each block writes its best
// (value, lowest index) to cand_v / cand_i for argmax_next.
__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}

template <typename T>
__device__ void rms_gemv(const float* __restrict__ x, const float* __restrict__ g, float eps,
                         const T* __restrict__ w, int h, int rows, float* __restrict__ out,
                         float* __restrict__ cand_v, int* __restrict__ cand_i) {
    extern __shared__ float smem[];
    __shared__ float bv_s[32];
    __shared__ int bi_s[32];
    float* red = smem;
    float* xs = smem + 32;
    int nw = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int stride = gridDim.x * nw;
    int r = blockIdx.x * nw + warp;
    RowPre<4> c0, c1;
    if (r < rows) pre_load<T, 4>(w + (long)r * h, h, c0);
    if (r + stride < rows) pre_load<T, 4>(w + (long)(r + stride) * h, h, c1);
    pdl_enter();
    rms_to_shared(x, g, eps, h, xs, red);
    float best = -3.402823466e38f;
    int bidx = 0x7fffffff;
    for (bool first = true; r < rows; r += 2 * stride, first = false) {
        int r2 = r + stride;
        float a, b = -3.402823466e38f;
        if (first) {
            // The pair loaded before the wait.
            a = warp_sum(pre_dot<T, 4>(w + (long)r * h, c0, xs, h));
            if (r2 < rows) b = warp_sum(pre_dot<T, 4>(w + (long)r2 * h, c1, xs, h));
        } else if (r2 < rows) {
            warp_dot2(w + (long)r * h, w + (long)r2 * h, xs, h, a, b);
        } else {
            a = warp_dot(w + (long)r * h, xs, h);
        }
        if (lane == 0) {
            out[r] = a;
            better(best, bidx, a, r);
            if (r2 < rows) {
                out[r2] = b;
                better(best, bidx, b, r2);
            }
        }
    }
    if (lane == 0) { bv_s[warp] = best; bi_s[warp] = bidx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < nw; k++) better(best, bidx, bv_s[k], bi_s[k]);
        cand_v[blockIdx.x] = best;
        cand_i[blockIdx.x] = bidx;
    }
}

#define LLAMA_KERNELS(T, S)                                                                       \
extern "C" __global__ void embed_##S(const T* emb, const int* state, float* x, int h) {           \
    embed<T>(emb, state, x, h);                                                                   \
}                                                                                                 \
extern "C" __global__ void rms_qkv_rope_##S(const float* x, const float* g, float eps, const T* w, \
        int h, int nh, int kvh, int d, const float* inv_freq, const int* state, float* q, T* kc,  \
        T* vc, int max_seq) {                                                                     \
    rms_qkv_rope<T>(x, g, eps, w, h, nh, kvh, d, inv_freq, state, q, kc, vc, max_seq);            \
}                                                                                                 \
extern "C" __global__ void attention_##S(const float* q, const T* kc, const T* vc,               \
        const int* state, int nh, int kvh, int d, int max_seq, float scale, float* out,           \
        float* part, unsigned int* count) {                                                       \
    attention<T>(q, kc, vc, state, nh, kvh, d, max_seq, scale, out, part, count);                 \
}                                                                                                 \
extern "C" __global__ void gemv_residual_##S(const T* w, const float* v, float* out, int rows,   \
        int cols) {                                                                               \
    gemv_residual<T>(w, v, out, rows, cols);                                                      \
}                                                                                                 \
extern "C" __global__ void rms_gate_up_##S(const float* x, const float* g, float eps, const T* w, \
        int h, int f, float* act) {                                                               \
    rms_gate_up<T>(x, g, eps, w, h, f, act);                                                      \
}                                                                                                 \
extern "C" __global__ void rms_gemv_##S(const float* x, const float* g, float eps, const T* w,    \
        int h, int rows, float* out, float* cand_v, int* cand_i) {                                \
    rms_gemv<T>(x, g, eps, w, h, rows, out, cand_v, cand_i);                                      \
}

LLAMA_KERNELS(float, f32)
LLAMA_KERNELS(h16, f16)
LLAMA_KERNELS(b16, bf16)

// Greedy pick over the lm_head blocks' n candidates (lowest index wins ties; NaN never wins),
// written to state[0] as the next step's token; the position advances. One block.
extern "C" __global__ void argmax_next(const float* __restrict__ cand_v, const int* __restrict__ cand_i,
                                       int n, int* state) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    pdl_enter();
    float best = -3.402823466e38f;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) better(best, idx, cand_v[i], cand_i[i]);
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        better(best, idx, ov, oi);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x >> 5;
        best = lane < nw ? bv[lane] : -3.402823466e38f;
        idx = lane < nw ? bi[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            better(best, idx, ov, oi);
        }
        if (lane == 0) {
            if (idx == 0x7fffffff) idx = 0;  // all NaN / -inf: token 0, as the CPU argmax
            state[0] = idx;
            state[1] = state[1] + 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The persistent step (experimental, ENGINE_CUDA_PERSISTENT=1): the whole decode step as ONE
// kernel of one block per SM, its phases separated by a grid-wide barrier instead of kernel
// boundaries. Measured on the H200 it is slower than the 5-kernel path (901 vs 1048 tok/s, f16):
// this atomic + spin barrier costs more than a kernel boundary under a CUDA graph. Requires every block to be resident at once:
// the host launches exactly one 256-thread block per SM and nothing else runs on the stream.
// Buffers written inside the kernel are read through plain pointers (never const __restrict__,
// which may use the non-coherent load path).

struct StepParams {
    int h, nh, kvh, d, f, vocab, layers, cap;
    float eps, scale;
};

// Sense-by-generation grid barrier on bar[0] (arrivals) and bar[1] (generation). A wait that
// spins far too long traps (a launch error) instead of hanging the GPU.
__device__ __forceinline__ void grid_sync(unsigned int* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned int* vgen = bar + 1;
        unsigned int gen = *vgen;
        __threadfence();
        unsigned int arrived = atomicAdd(bar, 1u);
        if (arrived == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            long long spins = 0;
            while (*vgen == gen) {
                if (++spins > (1ll << 28)) asm volatile("trap;");
            }
        }
        __threadfence();
    }
    __syncthreads();
}

__device__ __forceinline__ void rms_to_shared_c(const float* x, const float* g, float eps, int h,
                                                float* xs, float* red) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < h; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss, red);
    float r = sqrtf(ss / (float)h + eps);
    for (int i = threadIdx.x; i < h; i += blockDim.x) xs[i] = x[i] / r * g[i];
    __syncthreads();
}

template <typename T>
__device__ void attention_head(int head, const float* q, const T* kc, const T* vc, int len,
                               const StepParams& p, float* out, float* smem) {
    int d = p.d;
    int groups = blockDim.x / d;
    float* red = smem;
    float* part = smem + 32;
    float* qs = part + groups * d;
    float* sc = qs + d;
    int kh = head / (p.nh / p.kvh);
    const T* kb = kc + (long)kh * p.cap * d;
    const T* vb = vc + (long)kh * p.cap * d;
    for (int k = threadIdx.x; k < d; k += blockDim.x) qs[k] = q[head * d + k];
    __syncthreads();
    const int E = 16 / sizeof(T);
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        const T* kr = kb + (long)t * d;
        float acc = 0.0f;
        if (aligned16(kr, d)) {
            const uint4* k4 = reinterpret_cast<const uint4*>(kr);
            for (int j = 0; j < d / E; j++) accum16<T>(k4[j], qs + j * E, acc);
        } else {
            for (int k = 0; k < d; k++) acc += qs[k] * to_f(kr[k]);
        }
        sc[t] = acc * p.scale;
    }
    __syncthreads();
    float m = -3.402823466e38f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) m = fmaxf(m, sc[t]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        float e = expf(sc[t] - m);
        sc[t] = e;
        s += e;
    }
    s = block_sum(s, red);
    int dd = threadIdx.x % d, grp = threadIdx.x / d;
    if (grp < groups) {
        float acc = 0.0f;
#pragma unroll 4
        for (int t = grp; t < len; t += groups) acc += sc[t] * to_f(vb[(long)t * d + dd]);
        part[grp * d + dd] = acc;
    }
    __syncthreads();
    if (threadIdx.x < d) {
        float acc = 0.0f;
        for (int g2 = 0; g2 < groups; g2++) acc += part[g2 * d + threadIdx.x];
        out[head * d + threadIdx.x] = acc / s;
    }
    __syncthreads();
}

// tab: per layer 8 device addresses: wqkv, wo, wgu, wd, ln1, ln2, kc, vc.
template <typename T>
__device__ void step_persistent(const T* __restrict__ emb, const unsigned long long* __restrict__ tab,
                                const float* __restrict__ norm, const float* __restrict__ inv_freq,
                                float* x, float* q, float* attn, float* act, float* logits,
                                float* cand_v, int* cand_i, int* state, unsigned int* bar, StepParams p) {
    extern __shared__ float smem[];
    __shared__ float bv_s[32];
    __shared__ int bi_s[32];
    float* red = smem;
    float* xs = smem + 32;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int gw = blockIdx.x * nw + warp, GW = gridDim.x * nw;
    long tok = state[0];
    int pos = state[1];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.h; i += gridDim.x * blockDim.x)
        x[i] = to_f(emb[tok * p.h + i]);
    grid_sync(bar);
    int half = p.d / 2, qd = p.nh * p.d;
    for (int l = 0; l < p.layers; l++) {
        const unsigned long long* t = tab + l * 8;
        const T* wqkv = reinterpret_cast<const T*>(t[0]);
        const T* wo = reinterpret_cast<const T*>(t[1]);
        const T* wgu = reinterpret_cast<const T*>(t[2]);
        const T* wd = reinterpret_cast<const T*>(t[3]);
        const float* ln1 = reinterpret_cast<const float*>(t[4]);
        const float* ln2 = reinterpret_cast<const float*>(t[5]);
        T* kc = reinterpret_cast<T*>(t[6]);
        T* vc = reinterpret_cast<T*>(t[7]);
        // 1: RMSNorm + QKV + RoPE + KV write
        rms_to_shared_c(x, ln1, p.eps, p.h, xs, red);
        int tasks = (p.nh + 2 * p.kvh) * half;
        for (int task = gw; task < tasks; task += GW) {
            int head = task / half, i = task % half;
            long r0 = (long)head * p.d + i;
            float a, b;
            warp_dot2(wqkv + r0 * p.h, wqkv + (r0 + half) * p.h, xs, p.h, a, b);
            if (lane == 0) {
                if (head < p.nh + p.kvh) {
                    float ang = (float)pos * inv_freq[i];
                    float c = cosf(ang), s = sinf(ang);
                    float a2 = a * c - b * s;
                    float b2 = b * c + a * s;
                    a = a2;
                    b = b2;
                }
                if (head < p.nh) {
                    q[head * p.d + i] = a;
                    q[head * p.d + i + half] = b;
                } else {
                    int kh = head < p.nh + p.kvh ? head - p.nh : head - p.nh - p.kvh;
                    T* dst = (head < p.nh + p.kvh ? kc : vc) + ((long)kh * p.cap + pos) * p.d;
                    dst[i] = from_f<T>(a);
                    dst[i + half] = from_f<T>(b);
                }
            }
        }
        grid_sync(bar);
        // 2: attention, one block per head
        for (int head = blockIdx.x; head < p.nh; head += gridDim.x)
            attention_head<T>(head, q, kc, vc, pos + 1, p, attn, smem);
        grid_sync(bar);
        // 3: o_proj + residual
        for (int r = gw; r < p.h; r += GW) {
            float a = warp_dot(wo + (long)r * qd, attn, qd);
            if (lane == 0) x[r] += a;
        }
        grid_sync(bar);
        // 4: RMSNorm + gate/up + SiLU
        rms_to_shared_c(x, ln2, p.eps, p.h, xs, red);
        for (int j = gw; j < p.f; j += GW) {
            float gt, up;
            warp_dot2(wgu + (long)j * p.h, wgu + (long)(p.f + j) * p.h, xs, p.h, gt, up);
            if (lane == 0) {
                float sg = 1.0f / (1.0f + expf(-gt));
                act[j] = gt * sg * up;
            }
        }
        grid_sync(bar);
        // 5: down + residual
        for (int r = gw; r < p.h; r += GW) {
            float a = warp_dot(wd + (long)r * p.f, act, p.f);
            if (lane == 0) x[r] += a;
        }
        grid_sync(bar);
    }
    // lm_head (tied embedding) with per-block argmax candidates, then the final pick.
    rms_to_shared_c(x, norm, p.eps, p.h, xs, red);
    float best = -3.402823466e38f;
    int bidx = 0x7fffffff;
    for (int r = gw; r < p.vocab; r += 2 * GW) {
        int r2 = r + GW;
        float a, b;
        if (r2 < p.vocab) {
            warp_dot2(emb + (long)r * p.h, emb + (long)r2 * p.h, xs, p.h, a, b);
        } else {
            a = warp_dot(emb + (long)r * p.h, xs, p.h);
            b = -3.402823466e38f;
        }
        if (lane == 0) {
            logits[r] = a;
            better(best, bidx, a, r);
            if (r2 < p.vocab) {
                logits[r2] = b;
                better(best, bidx, b, r2);
            }
        }
    }
    if (lane == 0) { bv_s[warp] = best; bi_s[warp] = bidx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < nw; k++) better(best, bidx, bv_s[k], bi_s[k]);
        cand_v[blockIdx.x] = best;
        cand_i[blockIdx.x] = bidx;
    }
    grid_sync(bar);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float bv = -3.402823466e38f;
        int bi = 0x7fffffff;
        for (int k = 0; k < (int)gridDim.x; k++) better(bv, bi, cand_v[k], cand_i[k]);
        if (bi == 0x7fffffff) bi = 0;
        state[0] = bi;
        state[1] = pos + 1;
    }
}

#define PERSISTENT_KERNEL(T, S)                                                                   \
extern "C" __global__ void step_persistent_##S(const T* emb, const unsigned long long* tab,       \
        const float* norm, const float* inv_freq, float* x, float* q, float* attn, float* act,    \
        float* logits, float* cand_v, int* cand_i, int* state, unsigned int* bar, StepParams p) { \
    step_persistent<T>(emb, tab, norm, inv_freq, x, q, attn, act, logits, cand_v, cand_i, state,  \
                       bar, p);                                                                   \
}

PERSISTENT_KERNEL(float, f32)
PERSISTENT_KERNEL(h16, f16)
PERSISTENT_KERNEL(b16, bf16)
