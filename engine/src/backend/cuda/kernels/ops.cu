// Generic primitives of CudaBackend (backend/cuda/backend.rs): elementwise unary and broadcasting
// binary ops on float tensors, strided copies (transpose, slice, expand, concat), gather, RMS
// norm and softmax. One kernel name per op and storage type: `{op}_{dtype}`. The op codes of
// unop / binop (OP_ADD, …) are #defined ahead of this file by backend/cuda/op_codes.rs (the one definition
// the host side passes too).

#define MAX_RANK 8

// An N-d copy: output element e (row-major over `shape`) reads src[src_off + sum i_k src_st_k]
// and writes dst[dst_off + sum i_k dst_st_k]. Strides are in elements and may be 0 (broadcast)
// or negative (reversed slice).
struct Strided {
    long long n;
    long long src_off;
    long long dst_off;
    int rank;
    int pad;
    long long shape[MAX_RANK];
    long long src_st[MAX_RANK];
    long long dst_st[MAX_RANK];
};

template <typename E>
__device__ void copy_strided(const E* __restrict__ src, E* __restrict__ dst, Strided s) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < s.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long rem = e, so = s.src_off, dof = s.dst_off;
        for (int k = s.rank - 1; k >= 0; k--) {
            long long i = rem % s.shape[k];
            rem /= s.shape[k];
            so += i * s.src_st[k];
            dof += i * s.dst_st[k];
        }
        dst[dof] = src[so];
    }
}

extern "C" __global__ void copy_strided_1(const unsigned char* s, unsigned char* d, Strided st) { copy_strided(s, d, st); }
extern "C" __global__ void copy_strided_2(const unsigned short* s, unsigned short* d, Strided st) { copy_strided(s, d, st); }
extern "C" __global__ void copy_strided_4(const unsigned int* s, unsigned int* d, Strided st) { copy_strided(s, d, st); }
extern "C" __global__ void copy_strided_8(const unsigned long long* s, unsigned long long* d, Strided st) { copy_strided(s, d, st); }

// Elementwise semantics follow the CPU backend (backend/cpu/elementwise.rs) bit for bit where
// its tests demand exact results, signed zeros and NaNs included (CUDA's fmaxf(-0, +0) is +0,
// the CPU's and the oracle's Max is its first argument), and formula for formula elsewhere.
// The differential suite checks it against the oracle on the GPU (ENGINE_TEST_BACKEND=cuda).

// Binary op with broadcasting: `a` is read through src_st, `b` through dst_st (as a second
// source), the output is contiguous.
__device__ __forceinline__ float binop(int op, float a, float b) {
    switch (op) {
        case OP_ADD: return a + b;
        case OP_SUB: return a - b;
        case OP_MUL: return a * b;
        case OP_DIV: return a / b;
        case OP_POW: return powf(a, b);
        case OP_MAX: return (a >= b || a != a) ? a : b;
        case OP_MIN: return (a <= b || a != a) ? a : b;
        case OP_FMOD: return fmodf(a, b);
        case OP_MOD: { float r = fmodf(a, b); if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b; return r; }
        // A code the host does not send: a host/kernel mismatch, never a silent result.
        default: __trap(); return 0.0f;
    }
}

template <typename T>
__device__ void binary(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, Strided s, int op) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < s.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long rem = e, ao = 0, bo = 0;
        for (int k = s.rank - 1; k >= 0; k--) {
            long long i = rem % s.shape[k];
            rem /= s.shape[k];
            ao += i * s.src_st[k];
            bo += i * s.dst_st[k];
        }
        y[e] = from_f<T>(binop(op, to_f(a[ao]), to_f(b[bo])));
    }
}

__device__ __forceinline__ float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

__device__ __forceinline__ float unop(int op, float x, float p, float q) {
    switch (op) {
        case OP_NEG: return -x;
        case OP_ABS: return fabsf(x);
        case OP_SQRT: return sqrtf(x);
        case OP_RECIPROCAL: return 1.0f / x;
        case OP_EXP: return expf(x);
        case OP_LOG: return logf(x);
        case OP_SIGMOID: return sigmoid(x);
        case OP_TANH: return tanhf(x);
        case OP_COS: return cosf(x);
        case OP_SIN: return sinf(x);
        case OP_ERF: return erff(x);
        case OP_FLOOR: return floorf(x);
        case OP_CEIL: return ceilf(x);
        case OP_ROUND: return rintf(x);
        case OP_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
        case OP_RELU: return x < 0.0f ? 0.0f : x;
        // max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|.
        case OP_SOFTPLUS: return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
        case OP_SILU: return x * sigmoid(x);
        case OP_LEAKY_RELU: return x < 0.0f ? p * x : x;
        case OP_ELU: return x < 0.0f ? p * expm1f(x) : x;
        case OP_HARD_SIGMOID: {
            // Two roundings, as on the CPU (no fused multiply-add); a NaN stays NaN.
            float v = __fadd_rn(__fmul_rn(p, x), q);
            return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
        }
        // A code the host does not send: a host/kernel mismatch, never a silent result.
        default: __trap(); return 0.0f;
    }
}

template <typename T>
__device__ void unary(const T* __restrict__ x, T* __restrict__ y, long long n, int op, float p, float q) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = from_f<T>(unop(op, to_f(x[i]), p, q));
}

// One block per row of `cols` elements: y = x / sqrt(mean(x^2) + eps) * g.
template <typename T>
__device__ void rms_norm(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ y, int cols, float eps) {
    __shared__ float red[32];
    const T* xr = x + (long long)blockIdx.x * cols;
    T* yr = y + (long long)blockIdx.x * cols;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = to_f(xr[i]); ss += v * v; }
    ss = block_sum(ss, red);
    float r = sqrtf(ss / (float)cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = from_f<T>(to_f(xr[i]) / r * to_f(g[i]));
}

// Softmax along an axis of length `len` with `inner` elements after it: one block per
// (outer, inner) pair.
template <typename T>
__device__ void softmax(const T* __restrict__ x, T* __restrict__ y, int len, long long inner, int logsm) {
    __shared__ float red[32];
    long long o = blockIdx.x / inner, in = blockIdx.x % inner;
    long long base = o * len * inner + in;
    float m = -3.402823466e38f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, to_f(x[base + i * inner]));
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) s += expf(to_f(x[base + i * inner]) - m);
    s = block_sum(s, red);
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        float v = to_f(x[base + i * inner]) - m;
        y[base + i * inner] = from_f<T>(logsm ? v - logf(s) : expf(v) / s);
    }
}

#define OPS_KERNELS(T, S)                                                                          \
extern "C" __global__ void binary_##S(const T* a, const T* b, T* y, Strided s, int op) { binary<T>(a, b, y, s, op); } \
extern "C" __global__ void unary_##S(const T* x, T* y, long long n, int op, float p, float q) { unary<T>(x, y, n, op, p, q); } \
extern "C" __global__ void rms_norm_##S(const T* x, const T* g, T* y, int cols, float eps) { rms_norm<T>(x, g, y, cols, eps); } \
extern "C" __global__ void softmax_##S(const T* x, T* y, int len, long long inner, int logsm) { softmax<T>(x, y, len, inner, logsm); }

OPS_KERNELS(float, f32)
OPS_KERNELS(h16, f16)
OPS_KERNELS(b16, bf16)

// Gather rows: y[o, j, :] = data[o, idx[j], :] with indices already normalised and checked.
template <typename E>
__device__ void gather(const E* __restrict__ data, const long long* __restrict__ idx, E* __restrict__ y,
                       long long outer, long long nidx, long long axis_len, long long inner) {
    long long n = outer * nidx * inner;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        long long i = e % inner, j = (e / inner) % nidx, o = e / (inner * nidx);
        y[e] = data[(o * axis_len + idx[j]) * inner + i];
    }
}

extern "C" __global__ void gather_1(const unsigned char* d, const long long* i, unsigned char* y, long long o, long long n, long long a, long long in) { gather(d, i, y, o, n, a, in); }
extern "C" __global__ void gather_2(const unsigned short* d, const long long* i, unsigned short* y, long long o, long long n, long long a, long long in) { gather(d, i, y, o, n, a, in); }
extern "C" __global__ void gather_4(const unsigned int* d, const long long* i, unsigned int* y, long long o, long long n, long long a, long long in) { gather(d, i, y, o, n, a, in); }
extern "C" __global__ void gather_8(const unsigned long long* d, const long long* i, unsigned long long* y, long long o, long long n, long long a, long long in) { gather(d, i, y, o, n, a, in); }
