// Generic primitives of CudaBackend (backend/cuda/backend.rs): elementwise unary and broadcasting
// binary ops on float tensors, strided copies (transpose, slice, expand, concat), RMS norm and
// softmax; then casts, where, comparisons and logic, float reductions, a gather that reads
// its indices on the device (what keeps a decode step's work on the device), one-launch concat,
// and the fused steps. One kernel name per op and storage type: `{op}_{dtype}`. The op codes of
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

// copy_strided for pair blockIdx.y of up to 64 (src, dst) pairs that share one walk (64 =
// COPY_MANY in backend.rs, which fills this struct).
struct PtrPairs { unsigned long long src[64]; unsigned long long dst[64]; };
template <typename E>
__device__ void copy_strided_many(PtrPairs p, Strided s) {
    copy_strided((const E*)p.src[blockIdx.y], (E*)p.dst[blockIdx.y], s);
}

extern "C" __global__ void copy_strided_many_1(PtrPairs p, Strided st) { copy_strided_many<unsigned char>(p, st); }
extern "C" __global__ void copy_strided_many_2(PtrPairs p, Strided st) { copy_strided_many<unsigned short>(p, st); }
extern "C" __global__ void copy_strided_many_4(PtrPairs p, Strided st) { copy_strided_many<unsigned int>(p, st); }
extern "C" __global__ void copy_strided_many_8(PtrPairs p, Strided st) { copy_strided_many<unsigned long long>(p, st); }

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

// ---- What keeps a decode step on the device (a CUDA graph captures only device work) ----

// Casts between every pair of stored types, one kernel per pair: cast_{from}_{to}. As the CPU
// (backend/cpu/elementwise.rs): floats are read through f32 and integers through i64; float to
// integer truncates toward zero, saturates and maps NaN to 0; narrowing integer casts wrap;
// anything to bool is `!= 0` (NaN is true).
struct bool8 { unsigned char x; };
struct CastVal { int isf; float f; long long i; };
__device__ __forceinline__ CastVal cast_ld(float v) { CastVal c; c.isf = 1; c.f = v; c.i = 0; return c; }
__device__ __forceinline__ CastVal cast_ld(h16 v) { return cast_ld(to_f(v)); }
__device__ __forceinline__ CastVal cast_ld(b16 v) { return cast_ld(to_f(v)); }
__device__ __forceinline__ CastVal cast_ld(long long v) { CastVal c; c.isf = 0; c.f = 0.0f; c.i = v; return c; }
__device__ __forceinline__ CastVal cast_ld(int v) { return cast_ld((long long)v); }
__device__ __forceinline__ CastVal cast_ld(unsigned char v) { return cast_ld((long long)v); }
__device__ __forceinline__ CastVal cast_ld(bool8 v) { return cast_ld((long long)(v.x != 0)); }
// Rust's saturating float-to-int `as`.
__device__ __forceinline__ long long sat_i64(float f, double lo, double hi) {
    if (f != f) return 0;
    double d = (double)f;
    if (d <= lo) return (long long)lo;
    if (d >= hi) return (long long)hi;
    return (long long)d;
}
template <typename D> __device__ __forceinline__ D cast_st(CastVal c);
template <> __device__ __forceinline__ float cast_st<float>(CastVal c) { return c.isf ? c.f : (float)c.i; }
template <> __device__ __forceinline__ h16 cast_st<h16>(CastVal c) { return from_f<h16>(cast_st<float>(c)); }
template <> __device__ __forceinline__ b16 cast_st<b16>(CastVal c) { return from_f<b16>(cast_st<float>(c)); }
template <> __device__ __forceinline__ long long cast_st<long long>(CastVal c) {
    return c.isf ? sat_i64(c.f, -9223372036854775808.0, 9223372036854775807.0) : c.i;
}
template <> __device__ __forceinline__ int cast_st<int>(CastVal c) {
    return c.isf ? (int)sat_i64(c.f, -2147483648.0, 2147483647.0) : (int)c.i;
}
template <> __device__ __forceinline__ unsigned char cast_st<unsigned char>(CastVal c) {
    return c.isf ? (unsigned char)sat_i64(c.f, 0.0, 255.0) : (unsigned char)c.i;
}
template <> __device__ __forceinline__ bool8 cast_st<bool8>(CastVal c) {
    bool8 b; b.x = c.isf ? (c.f != 0.0f) : (c.i != 0); return b;
}
template <typename S, typename D>
__device__ void cast_any(const S* __restrict__ x, D* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = cast_st<D>(cast_ld(x[i]));
}
#define CAST_TO(S, SN, D, DN) \
extern "C" __global__ void cast_##SN##_##DN(const S* x, D* y, long long n) { cast_any<S, D>(x, y, n); }
#define CAST_FROM(S, SN) \
CAST_TO(S, SN, float, f32) CAST_TO(S, SN, h16, f16) CAST_TO(S, SN, b16, bf16) \
CAST_TO(S, SN, long long, i64) CAST_TO(S, SN, int, i32) CAST_TO(S, SN, unsigned char, u8) \
CAST_TO(S, SN, bool8, bool)
CAST_FROM(float, f32) CAST_FROM(h16, f16) CAST_FROM(b16, bf16) CAST_FROM(long long, i64)
CAST_FROM(int, i32) CAST_FROM(unsigned char, u8) CAST_FROM(bool8, bool)

// Three-way broadcasting: output element e reads cond, a and b through their own strides.
struct Strided3 {
    long long n;
    int rank;
    int pad;
    long long shape[MAX_RANK];
    long long c_st[MAX_RANK];
    long long a_st[MAX_RANK];
    long long b_st[MAX_RANK];
};

template <typename E>
__device__ void where_sel(const unsigned char* __restrict__ c, const E* __restrict__ a,
                          const E* __restrict__ b, E* __restrict__ y, Strided3 s) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < s.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long rem = e, co = 0, ao = 0, bo = 0;
        for (int k = s.rank - 1; k >= 0; k--) {
            long long i = rem % s.shape[k];
            rem /= s.shape[k];
            co += i * s.c_st[k];
            ao += i * s.a_st[k];
            bo += i * s.b_st[k];
        }
        y[e] = c[co] ? a[ao] : b[bo];
    }
}
extern "C" __global__ void where_1(const unsigned char* c, const unsigned char* a, const unsigned char* b, unsigned char* y, Strided3 s) { where_sel(c, a, b, y, s); }
extern "C" __global__ void where_2(const unsigned char* c, const unsigned short* a, const unsigned short* b, unsigned short* y, Strided3 s) { where_sel(c, a, b, y, s); }
extern "C" __global__ void where_4(const unsigned char* c, const unsigned int* a, const unsigned int* b, unsigned int* y, Strided3 s) { where_sel(c, a, b, y, s); }
extern "C" __global__ void where_8(const unsigned char* c, const unsigned long long* a, const unsigned long long* b, unsigned long long* y, Strided3 s) { where_sel(c, a, b, y, s); }

// Comparisons (any stored type; floats compared as f32, so NaN compares false) and logic (bool)
// with broadcasting, output bool: `a` through src_st, `b` through dst_st, as `binary`.
__device__ __forceinline__ float cmp_val(float v) { return v; }
__device__ __forceinline__ float cmp_val(h16 v) { return to_f(v); }
__device__ __forceinline__ float cmp_val(b16 v) { return to_f(v); }
__device__ __forceinline__ long long cmp_val(long long v) { return v; }
__device__ __forceinline__ long long cmp_val(int v) { return v; }
__device__ __forceinline__ long long cmp_val(unsigned char v) { return v; }
template <typename V>
__device__ __forceinline__ unsigned char predop(int op, V a, V b) {
    switch (op) {
        case OP_EQUAL: return a == b;
        case OP_LESS: return a < b;
        case OP_LESS_OR_EQUAL: return a <= b;
        case OP_GREATER: return a > b;
        case OP_GREATER_OR_EQUAL: return a >= b;
        case OP_AND: return (a != 0) && (b != 0);
        case OP_OR: return (a != 0) || (b != 0);
        case OP_XOR: return (a != 0) != (b != 0);
        // A code the host does not send: a host/kernel mismatch, never a silent result.
        default: __trap(); return 0;
    }
}
template <typename T>
__device__ void compare(const T* __restrict__ a, const T* __restrict__ b, unsigned char* __restrict__ y, Strided s, int op) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < s.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long rem = e, ao = 0, bo = 0;
        for (int k = s.rank - 1; k >= 0; k--) {
            long long i = rem % s.shape[k];
            rem /= s.shape[k];
            ao += i * s.src_st[k];
            bo += i * s.dst_st[k];
        }
        y[e] = predop(op, cmp_val(a[ao]), cmp_val(b[bo]));
    }
}
extern "C" __global__ void compare_f32(const float* a, const float* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }
extern "C" __global__ void compare_f16(const h16* a, const h16* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }
extern "C" __global__ void compare_bf16(const b16* a, const b16* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }
extern "C" __global__ void compare_i64(const long long* a, const long long* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }
extern "C" __global__ void compare_i32(const int* a, const int* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }
extern "C" __global__ void compare_u8(const unsigned char* a, const unsigned char* b, unsigned char* y, Strided s, int op) { compare(a, b, y, s, op); }

// Float reductions over one contiguous block of axes: the input is [outer, len, inner] and one
// block computes one of the outer * inner outputs, accumulating in f64 as the CPU does (the
// order of the sum differs; the result rounds to the same f32 almost always).
#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_PROD 4
#define RED_SUMSQ 5
#define RED_L2 6
#define RED_L1 7
#define RED_LSE 8
#define D_INF __longlong_as_double(0x7ff0000000000000LL)
__device__ __forceinline__ double dmax_nan(double a, double b) { return (a >= b || a != a) ? a : b; }
__device__ __forceinline__ double dmin_nan(double a, double b) { return (a <= b || a != a) ? a : b; }
template <int OP>
__device__ double red_combine(double a, double b) {
    if (OP == RED_MAX || OP == RED_LSE) return dmax_nan(a, b);
    if (OP == RED_MIN) return dmin_nan(a, b);
    if (OP == RED_PROD) return a * b;
    return a + b;
}
template <int OP>
__device__ double block_reduce_d(double v, double* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = red_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < nw; w++) v = red_combine<OP>(v, red[w]);
    return v;
}
template <typename T, int OP>
__device__ void reduce_axis(const T* __restrict__ x, T* __restrict__ y, long long len, long long inner) {
    __shared__ double red[32];
    long long o = blockIdx.x / inner, in = blockIdx.x % inner;
    const T* base = x + o * len * inner + in;
    double init = (OP == RED_MAX || OP == RED_LSE) ? -D_INF : (OP == RED_MIN ? D_INF : (OP == RED_PROD ? 1.0 : 0.0));
    double acc = init;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) {
        double v = (double)to_f(base[i * inner]);
        if (OP == RED_SUMSQ || OP == RED_L2) v = v * v;
        if (OP == RED_L1) v = fabs(v);
        acc = red_combine<OP>(acc, v);
    }
    acc = block_reduce_d<OP>(acc, red);
    if (OP == RED_LSE) {
        double m = acc, s = 0.0;
        __syncthreads();
        for (long long i = threadIdx.x; i < len; i += blockDim.x) s += exp((double)to_f(base[i * inner]) - m);
        s = block_reduce_d<RED_SUM>(s, red);
        acc = (m == m && m != D_INF && m != -D_INF) ? m + log(s) : m;
    }
    if (OP == RED_MEAN) acc = acc / (double)len;
    if (OP == RED_L2) acc = sqrt(acc);
    if (threadIdx.x == 0) y[blockIdx.x] = from_f<T>((float)acc);
}
#define REDUCE_KERNEL(T, S, NAME, OP) \
extern "C" __global__ void reduce_##NAME##_##S(const T* x, T* y, long long len, long long inner) { reduce_axis<T, OP>(x, y, len, inner); }
#define REDUCE_KERNELS(T, S) \
REDUCE_KERNEL(T, S, sum, RED_SUM) REDUCE_KERNEL(T, S, mean, RED_MEAN) REDUCE_KERNEL(T, S, max, RED_MAX) \
REDUCE_KERNEL(T, S, min, RED_MIN) REDUCE_KERNEL(T, S, prod, RED_PROD) REDUCE_KERNEL(T, S, sumsq, RED_SUMSQ) \
REDUCE_KERNEL(T, S, l2, RED_L2) REDUCE_KERNEL(T, S, l1, RED_L1) REDUCE_KERNEL(T, S, lse, RED_LSE)
REDUCE_KERNELS(float, f32)
REDUCE_KERNELS(h16, f16)
REDUCE_KERNELS(b16, bf16)

// Gather with the indices on the device (i64 or i32, negative counts from the end): nothing
// leaves the device, so the step stays capturable. An index out of range writes 0 and records
// itself in `err` ([flag, index, axis length]); the host reads `err` at its next sync.
template <typename E, typename I>
__device__ void gather_dev(const E* __restrict__ data, const I* __restrict__ idx, E* __restrict__ y,
                           long long outer, long long nidx, long long axis_len, long long inner,
                           long long* err) {
    long long n = outer * nidx * inner;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        long long i = e % inner, j = (e / inner) % nidx, o = e / (inner * nidx);
        long long raw = (long long)idx[j];
        long long k = raw < 0 ? raw + axis_len : raw;
        if (k < 0 || k >= axis_len) {
            if (i == 0 && o == 0) { err[1] = raw; err[2] = axis_len; atomicExch((unsigned long long*)err, 1ull); }
            y[e] = (E)0;
            continue;
        }
        y[e] = data[(o * axis_len + k) * inner + i];
    }
}
#define GATHER_DEV(E, ES, I, IS) \
extern "C" __global__ void gather_##IS##_##ES(const E* d, const I* i, E* y, long long o, long long n, long long a, long long in, long long* err) { gather_dev(d, i, y, o, n, a, in, err); }
GATHER_DEV(unsigned char, 1, long long, i64) GATHER_DEV(unsigned short, 2, long long, i64)
GATHER_DEV(unsigned int, 4, long long, i64) GATHER_DEV(unsigned long long, 8, long long, i64)
GATHER_DEV(unsigned char, 1, int, i32) GATHER_DEV(unsigned short, 2, int, i32)
GATHER_DEV(unsigned int, 4, int, i32) GATHER_DEV(unsigned long long, 8, int, i32)

// Concatenation in one launch (up to 8 inputs): the output is `n / row` rows of `row` elements;
// input j fills [start[j], start[j] + len[j]) of each row from its own rows of len[j].
struct ConcatArgs {
    long long n;
    long long row;
    int k;
    int pad;
    unsigned long long src[8];
    long long start[8];
    long long len[8];
};
template <typename E>
__device__ void concat_rows(E* __restrict__ y, ConcatArgs a) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < a.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long r = e / a.row, c = e % a.row;
        int j = 0;
        while (j + 1 < a.k && c >= a.start[j + 1]) j++;
        const E* s = (const E*)a.src[j];
        y[e] = s[r * a.len[j] + (c - a.start[j])];
    }
}
extern "C" __global__ void concat_1(unsigned char* y, ConcatArgs a) { concat_rows(y, a); }
extern "C" __global__ void concat_2(unsigned short* y, ConcatArgs a) { concat_rows(y, a); }
extern "C" __global__ void concat_4(unsigned int* y, ConcatArgs a) { concat_rows(y, a); }
extern "C" __global__ void concat_8(unsigned long long* y, ConcatArgs a) { concat_rows(y, a); }

// ---- Fused steps (ops/fused.rs, Backend::fused): several ONNX nodes in one kernel ----
// Each rounds every intermediate to the storage type T, as the nodes' own kernels do between
// launches (`rnd`), and multiplies and adds without contraction (__fmul_rn / __fadd_rn), so its
// result is the nodes' result on this device; only the RMS norm's mean sums in another order.
template <typename T> __device__ __forceinline__ float rnd(float v) { return to_f(from_f<T>(v)); }

// One block per row of `cols`: Mul(Div(x, Sqrt(Add(ReduceMean(x·x), eps))), w). The mean
// accumulates the rounded squares in f64 as the reduce kernel does.
template <typename T>
__device__ void rms_nodes(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int cols, float eps) {
    __shared__ double red[32];
    const T* xr = x + (long long)blockIdx.x * cols;
    T* yr = y + (long long)blockIdx.x * cols;
    double acc = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = to_f(xr[i]);
        acc += (double)rnd<T>(__fmul_rn(v, v));
    }
    acc = block_reduce_d<RED_SUM>(acc, red);
    float mean = to_f(from_f<T>((float)(acc / (double)cols)));
    float r = rnd<T>(sqrtf(rnd<T>(__fadd_rn(mean, eps))));
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        yr[i] = from_f<T>(__fmul_rn(rnd<T>(__fdiv_rn(to_f(xr[i]), r)), to_f(w[i])));
}

// rms_nodes over x = Add(a, b), rounded to T, which is also written out (the residual sum). Each
// thread reads back only the sums it wrote.
template <typename T>
__device__ void add_rms_nodes(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ w,
                              T* __restrict__ s, T* __restrict__ y, int cols, float eps) {
    __shared__ double red[32];
    const long long off = (long long)blockIdx.x * cols;
    double acc = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        T x = from_f<T>(__fadd_rn(to_f(a[off + i]), to_f(b[off + i])));
        s[off + i] = x;
        float v = to_f(x);
        acc += (double)rnd<T>(__fmul_rn(v, v));
    }
    acc = block_reduce_d<RED_SUM>(acc, red);
    float mean = to_f(from_f<T>((float)(acc / (double)cols)));
    float r = rnd<T>(sqrtf(rnd<T>(__fadd_rn(mean, eps))));
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        y[off + i] = from_f<T>(__fmul_rn(rnd<T>(__fdiv_rn(to_f(s[off + i]), r)), to_f(w[i])));
}

// Add(Mul(x, cos), Mul(Concat(Neg(x[..., h:]), x[..., :h]), sin)) over a last axis of 2h;
// element e of x reads cos/sin at the broadcast offset that `s` (src_st) gives.
template <typename T>
__device__ void rotary(const T* __restrict__ x, const T* __restrict__ c, const T* __restrict__ sn,
                       T* __restrict__ y, Strided s, long long h) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < s.n;
         e += (long long)gridDim.x * blockDim.x) {
        long long rem = e, co = 0;
        for (int k = s.rank - 1; k >= 0; k--) {
            long long i = rem % s.shape[k];
            rem /= s.shape[k];
            co += i * s.src_st[k];
        }
        long long i = e % (2 * h);
        float rot = i < h ? -to_f(x[e + h]) : to_f(x[e - h]);
        float a = rnd<T>(__fmul_rn(to_f(x[e]), to_f(c[co])));
        float b = rnd<T>(__fmul_rn(rot, to_f(sn[co])));
        y[e] = from_f<T>(__fadd_rn(a, b));
    }
}

// Mul(Mul(g, Sigmoid(g)), u).
template <typename T>
__device__ void silu_mul(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = to_f(g[i]);
        float t = rnd<T>(__fmul_rn(v, rnd<T>(sigmoid(v))));
        y[i] = from_f<T>(__fmul_rn(t, to_f(u[i])));
    }
}

// Softmax(Add(Mul(x, scale), m)) over rows of `len`, one block per row: the softmax kernel's
// walk over values computed in place; element e of x reads m at the offset `s` (src_st) gives.
template <typename T>
__device__ __forceinline__ float smask_val(const T* __restrict__ x, const T* __restrict__ m, const Strided& s,
                                           long long e, float scale) {
    long long rem = e, mo = 0;
    for (int k = s.rank - 1; k >= 0; k--) {
        long long i = rem % s.shape[k];
        rem /= s.shape[k];
        mo += i * s.src_st[k];
    }
    return rnd<T>(__fadd_rn(rnd<T>(__fmul_rn(to_f(x[e]), scale)), to_f(m[mo])));
}
template <typename T>
__device__ void scale_mask_softmax(const T* __restrict__ x, const T* __restrict__ m, T* __restrict__ y,
                                   Strided s, int len, float scale) {
    __shared__ float red[32];
    long long base = (long long)blockIdx.x * len;
    float mx = -3.402823466e38f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) mx = fmaxf(mx, smask_val(x, m, s, base + i, scale));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) sum += expf(smask_val(x, m, s, base + i, scale) - mx);
    sum = block_sum(sum, red);
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        float v = smask_val(x, m, s, base + i, scale) - mx;
        y[base + i] = from_f<T>(expf(v) / sum);
    }
}

#define FUSED_KERNELS(T, S) \
extern "C" __global__ void rms_nodes_##S(const T* x, const T* w, T* y, int cols, float eps) { rms_nodes<T>(x, w, y, cols, eps); } \
extern "C" __global__ void add_rms_nodes_##S(const T* a, const T* b, const T* w, T* s, T* y, int cols, float eps) { add_rms_nodes<T>(a, b, w, s, y, cols, eps); } \
extern "C" __global__ void rotary_##S(const T* x, const T* c, const T* sn, T* y, Strided s, long long h) { rotary<T>(x, c, sn, y, s, h); } \
extern "C" __global__ void silu_mul_##S(const T* g, const T* u, T* y, long long n) { silu_mul<T>(g, u, y, n); } \
extern "C" __global__ void scale_mask_softmax_##S(const T* x, const T* m, T* y, Strided s, int len, float scale) { scale_mask_softmax<T>(x, m, y, s, len, scale); }
FUSED_KERNELS(float, f32)
FUSED_KERNELS(h16, f16)
FUSED_KERNELS(b16, bf16)
