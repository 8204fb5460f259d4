// Batched prefill of the fused llama decoder (decode/cuda_llama.rs): the prompt's n tokens go
// through each layer as one [n, hidden] pass. The matrix products are cuBLAS GEMMs (tensor
// cores for f16/bf16, f32 accumulation, f32 outputs); these kernels do the rest:
//   embed_rows -> per layer [rms_rows, (GEMM qkv), rope_kv, flash attention, (GEMM o_proj +=),
//   rms_rows, (GEMM gate/up), silu_mul, (GEMM down +=)]
// and the decode step's lm_head + argmax on the last row give the first new token.
// Rows are positions pos0 .. pos0 + n - 1 (a long prompt is prefilled in chunks; each chunk's
// queries see the keys of every earlier chunk, already in the cache).
// The residual stream x is f32 [n, h]; GEMM inputs are T (the package's float type); q/k/v and
// gate/up come out of their GEMMs in f32, and the KV cache is written in T, as the decode step
// writes it.

// x[r] = emb[ids[r]] for r < n; one block per row.
template <typename T>
__device__ void embed_rows(const T* __restrict__ emb, const int* __restrict__ ids, float* __restrict__ x,
                           int h, int n) {
    int r = blockIdx.x;
    if (r >= n) return;
    long tok = ids[r];
    for (int i = threadIdx.x; i < h; i += blockDim.x) x[(long)r * h + i] = to_f(emb[tok * h + i]);
}

// out[r] = T(x[r] / sqrt(mean(x[r]^2) + eps) * g); one warp per row.
template <typename T>
__device__ void rms_rows(const float* __restrict__ x, const float* __restrict__ g, float eps, int h, int n,
                         T* __restrict__ out) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= n) return;
    const float* xr = x + (long)r * h;
    float ss = 0.0f;
    for (int i = lane; i < h; i += 32) ss += xr[i] * xr[i];
    float rr = sqrtf(warp_sum(ss) / (float)h + eps);
    for (int i = lane; i < h; i += 32) out[(long)r * h + i] = from_f<T>(xr[i] / rr * g[i]);
}

// Rotate-half RoPE of the q and k heads of each row of qkv ([n, (nh + 2 kvh) d], f32) at
// position pos0 + r, with the decode step's angle arithmetic; q goes to `q` ([n, nh d], T), k and
// v into the cache ([kvh, cap, d] each). One thread per (row, head, i < d/2).
template <typename T>
__device__ void rope_kv(const float* __restrict__ qkv, const float* __restrict__ inv_freq, int pos0, int n,
                        int nh, int kvh, int d, T* __restrict__ q, T* __restrict__ kc, T* __restrict__ vc,
                        int cap) {
    int half = d / 2, heads = nh + 2 * kvh;
    long task = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (task >= (long)n * heads * half) return;
    int i = (int)(task % half);
    int head = (int)((task / half) % heads);
    int r = (int)(task / ((long)half * heads));
    int pos = pos0 + r;
    const float* src = qkv + (long)r * heads * d + (long)head * d;
    float a = src[i], b = src[i + half];
    if (head < nh + kvh) {
        float ang = (float)pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        float a2 = a * c - b * s;
        float b2 = b * c + a * s;
        a = a2;
        b = b2;
    }
    if (head < nh) {
        T* dst = q + (long)r * nh * d + (long)head * d;
        dst[i] = from_f<T>(a);
        dst[i + half] = from_f<T>(b);
    } else {
        int kh = head < nh + kvh ? head - nh : head - nh - kvh;
        T* dst = (head < nh + kvh ? kc : vc) + ((long)kh * cap + pos) * d;
        dst[i] = from_f<T>(a);
        dst[i + half] = from_f<T>(b);
    }
}

// act[r, j] = T(silu(gate) * up) from gu = [n, 2f] (gate columns 0..f, up f..2f), the decode
// step's formula.
template <typename T>
__device__ void silu_mul(const float* __restrict__ gu, int f, int n, T* __restrict__ act) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)n * f) return;
    long r = idx / f;
    int j = (int)(idx % f);
    float gt = gu[r * 2 * f + j], up = gu[r * 2 * f + f + j];
    float sg = 1.0f / (1.0f + expf(-gt));
    act[idx] = from_f<T>(gt * sg * up);
}

// ---------------------------------------------------------------------------------------------
// Causal attention over the cache for the n queries of a chunk: row r (position pos0 + r) of
// head `head` sees keys 0 ..= pos0 + r of kv head head / (nh / kvh). q and out are [n, nh D] in
// T. Flash attention: key tiles staged in shared memory, an online softmax per query row (the
// running max and sum rescale the partial output), so nothing of size n x n exists.

// Tensor-core version (f16 / bf16): 4 warps x 16 query rows per block, 64-key tiles;
// S = Q K^T and O += P V with mma.sync m16n8k16 (f32 accumulation), P rounded to T for the
// second product (as flash attention does). Fragment layouts are PTX's for m16n8k16:
// A (16x16, row): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// B (16x8, col): b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); C: c0,c1 (g, 2t..), c2,c3 (g+8, 2t..),
// with g = lane / 4, t = lane % 4. Two adjacent n8 tiles of C are one A operand.

__device__ __forceinline__ unsigned pack2(h16*, float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned pack2(b16*, float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ void mma16816(h16*, float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(b16*, float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#define NEG_INF (-__int_as_float(0x7f800000))

template <typename T, int D>
__device__ void flash_prefill_mma(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                                  int n, int pos0, int nh, int kvh, int cap, float scale,
                                  T* __restrict__ out) {
    constexpr int BQ = 64, BK = 64, LD = D + 8;  // shared rows padded by 16 bytes: no bank conflicts
    __shared__ __align__(16) unsigned short ks[BK * LD];
    __shared__ __align__(16) unsigned short vs[BK * LD];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int head = blockIdx.y, kh = head / (nh / kvh);
    int q0 = blockIdx.x * BQ, r0 = q0 + warp * 16, qd = nh * D;
    const unsigned short* qb = reinterpret_cast<const unsigned short*>(q);
    unsigned qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = r0 + g + (e & 1) * 8, c = kk * 16 + (e >> 1) * 8 + 2 * t;
            qa[kk][e] = r < n ? *reinterpret_cast<const unsigned*>(qb + (long)r * qd + head * D + c) : 0u;
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
    const float sl = scale * 1.4426950408889634f;  // scores in log2 units: exp2f below
    int qp0 = pos0 + r0 + g, qp1 = qp0 + 8;
    int last = pos0 + min(q0 + BQ, n) - 1;    // the last key any row of the block sees
    int wlast = pos0 + min(r0 + 16, n) - 1;   // ... any row of this warp
    const unsigned short* kb = reinterpret_cast<const unsigned short*>(kc) + (long)kh * cap * D;
    const unsigned short* vb = reinterpret_cast<const unsigned short*>(vc) + (long)kh * cap * D;
    T* tag = nullptr;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        for (int c = threadIdx.x; c < BK * D / 8; c += blockDim.x) {
            int row = c / (D / 8), col = (c % (D / 8)) * 8;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;
            if (k0 + row <= last) {
                kv = *reinterpret_cast<const uint4*>(kb + (long)(k0 + row) * D + col);
                vv = *reinterpret_cast<const uint4*>(vb + (long)(k0 + row) * D + col);
            }
            *reinterpret_cast<uint4*>(ks + row * LD + col) = kv;
            *reinterpret_cast<uint4*>(vs + row * LD + col) = vv;
        }
        __syncthreads();
        if (k0 > wlast) continue;  // the whole tile is after this warp's rows (block-uniform loop)
        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const unsigned short* kr = ks + (j * 8 + g) * LD + kk * 16 + 2 * t;
                mma16816(tag, s[j], qa[kk], *reinterpret_cast<const unsigned*>(kr),
                         *reinterpret_cast<const unsigned*>(kr + 8));
            }
        }
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = k0 + j * 8 + 2 * t + e;
                s[j][e] = key <= qp0 ? s[j][e] * sl : NEG_INF;
                s[j][2 + e] = key <= qp1 ? s[j][2 + e] * sl : NEG_INF;
                mx0 = fmaxf(mx0, s[j][e]);
                mx1 = fmaxf(mx1, s[j][2 + e]);
            }
        }
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
        }
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // A row with no key yet (m = -inf) keeps a zero output; exp2f(-inf) = 0 does the rest.
        float b0 = mn0 == NEG_INF ? 0.0f : mn0, b1 = mn1 == NEG_INF ? 0.0f : mn1;
        float c0 = exp2f(m0 - b0), c1 = exp2f(m1 - b1);
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= c0;
            o[j][1] *= c0;
            o[j][2] *= c1;
            o[j][3] *= c1;
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
            s[j][0] = exp2f(s[j][0] - b0);
            s[j][1] = exp2f(s[j][1] - b0);
            s[j][2] = exp2f(s[j][2] - b1);
            s[j][3] = exp2f(s[j][3] - b1);
            l0 += s[j][0] + s[j][1];
            l1 += s[j][2] + s[j][3];
        }
        m0 = mn0;
        m1 = mn1;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            unsigned pa[4] = {pack2(tag, s[2 * kk][0], s[2 * kk][1]), pack2(tag, s[2 * kk][2], s[2 * kk][3]),
                              pack2(tag, s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2(tag, s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const unsigned short* v0 = vs + (kk * 16 + 2 * t) * LD + g;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const unsigned short* vp = v0 + j * 8;
                unsigned bb0 = (unsigned)vp[0] | ((unsigned)vp[LD] << 16);
                unsigned bb1 = (unsigned)vp[8 * LD] | ((unsigned)vp[9 * LD] << 16);
                mma16816(tag, o[j], pa, bb0, bb1);
            }
        }
    }
    // Each row's sum is spread over the 4 lanes of its quad.
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
    }
    float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    int ra = r0 + g, rb = ra + 8;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        long c = (long)head * D + j * 8 + 2 * t;
        if (ra < n) {
            out[(long)ra * qd + c] = from_f<T>(o[j][0] * i0);
            out[(long)ra * qd + c + 1] = from_f<T>(o[j][1] * i0);
        }
        if (rb < n) {
            out[(long)rb * qd + c] = from_f<T>(o[j][2] * i1);
            out[(long)rb * qd + c + 1] = from_f<T>(o[j][3] * i1);
        }
    }
}

// CUDA-core version (any T; used for f32 packages, whose products stay in f32): one thread per
// query row, 64 rows per block, 32-key tiles in shared memory read by every thread at once
// (broadcast); the query and the output row live in registers.
template <typename T, int D>
__device__ void flash_prefill_simt(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                                   int n, int pos0, int nh, int kvh, int cap, float scale,
                                   T* __restrict__ out) {
    constexpr int BQ = 64, BK = 32;
    __shared__ float ks[BK][D];
    __shared__ float vs[BK][D];
    int head = blockIdx.y, kh = head / (nh / kvh), qd = nh * D;
    int r = blockIdx.x * BQ + threadIdx.x;
    bool live = r < n;
    float qv[D], o[D];
#pragma unroll
    for (int k = 0; k < D; k++) {
        qv[k] = live ? to_f(q[(long)r * qd + head * D + k]) : 0.0f;
        o[k] = 0.0f;
    }
    int qp = pos0 + r;
    int last = pos0 + min((int)(blockIdx.x * BQ + BQ), n) - 1;
    const T* kb = kc + (long)kh * cap * D;
    const T* vb = vc + (long)kh * cap * D;
    float m = NEG_INF, l = 0.0f;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        for (int c = threadIdx.x; c < BK * D; c += blockDim.x) {
            int row = c / D, col = c % D;
            bool in = k0 + row <= last;
            ks[row][col] = in ? to_f(kb[(long)(k0 + row) * D + col]) : 0.0f;
            vs[row][col] = in ? to_f(vb[(long)(k0 + row) * D + col]) : 0.0f;
        }
        __syncthreads();
        if (!live || k0 > qp) continue;
        float sc[BK];
        float mx = NEG_INF;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < D; k++) a += qv[k] * ks[j][k];
            sc[j] = k0 + j <= qp ? a * scale : NEG_INF;
            mx = fmaxf(mx, sc[j]);
        }
        float mn = fmaxf(m, mx);  // finite: key k0 <= qp is in the tile
        float c = expf(m - mn);
        l *= c;
#pragma unroll
        for (int k = 0; k < D; k++) o[k] *= c;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            float p = expf(sc[j] - mn);
            l += p;
#pragma unroll
            for (int k = 0; k < D; k++) o[k] += p * vs[j][k];
        }
        m = mn;
    }
    if (!live) return;
#pragma unroll
    for (int k = 0; k < D; k++) out[(long)r * qd + head * D + k] = from_f<T>(o[k] / l);
}

#define PREFILL_KERNELS(T, S)                                                                     \
extern "C" __global__ void embed_rows_##S(const T* emb, const int* ids, float* x, int h, int n) { \
    embed_rows<T>(emb, ids, x, h, n);                                                             \
}                                                                                                 \
extern "C" __global__ void rms_rows_##S(const float* x, const float* g, float eps, int h, int n,  \
        T* out) {                                                                                 \
    rms_rows<T>(x, g, eps, h, n, out);                                                            \
}                                                                                                 \
extern "C" __global__ void rope_kv_##S(const float* qkv, const float* inv_freq, int pos0, int n,  \
        int nh, int kvh, int d, T* q, T* kc, T* vc, int cap) {                                    \
    rope_kv<T>(qkv, inv_freq, pos0, n, nh, kvh, d, q, kc, vc, cap);                               \
}                                                                                                 \
extern "C" __global__ void silu_mul_##S(const float* gu, int f, int n, T* act) {                  \
    silu_mul<T>(gu, f, n, act);                                                                   \
}

#define FLASH_SIMT(T, S, D)                                                                       \
extern "C" __global__ void __launch_bounds__(64) flash_prefill_simt_##S##_d##D(const T* q,       \
        const T* kc, const T* vc, int n, int pos0, int nh, int kvh, int cap, float scale,         \
        T* out) {                                                                                 \
    flash_prefill_simt<T, D>(q, kc, vc, n, pos0, nh, kvh, cap, scale, out);                       \
}

#define FLASH_MMA(T, S, D)                                                                        \
extern "C" __global__ void __launch_bounds__(128) flash_prefill_mma_##S##_d##D(const T* q,       \
        const T* kc, const T* vc, int n, int pos0, int nh, int kvh, int cap, float scale,         \
        T* out) {                                                                                 \
    flash_prefill_mma<T, D>(q, kc, vc, n, pos0, nh, kvh, cap, scale, out);                        \
}

PREFILL_KERNELS(float, f32)
PREFILL_KERNELS(h16, f16)
PREFILL_KERNELS(b16, bf16)

// Head sizes with a compiled attention kernel; others prefill token by token through the step.
FLASH_SIMT(float, f32, 16)
FLASH_SIMT(float, f32, 32)
FLASH_SIMT(float, f32, 64)
FLASH_SIMT(float, f32, 128)
FLASH_MMA(h16, f16, 16)
FLASH_MMA(h16, f16, 32)
FLASH_MMA(h16, f16, 64)
FLASH_MMA(h16, f16, 128)
FLASH_MMA(b16, bf16, 16)
FLASH_MMA(b16, bf16, 32)
FLASH_MMA(b16, bf16, 64)
FLASH_MMA(b16, bf16, 128)
