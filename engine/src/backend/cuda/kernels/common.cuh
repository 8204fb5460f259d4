// Shared header of the engine's CUDA kernels, prepended to every .cu file before NVRTC compiles
// it (no #include: NVRTC then needs no CUDA headers on disk). Storage types: float (f32),
// h16 (IEEE half, converted with PTX cvt), b16 (bfloat16, converted by bit arithmetic).
// Arithmetic is always f32.

struct h16 { unsigned short x; };
struct b16 { unsigned short x; };

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(h16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
    return f;
}
__device__ __forceinline__ float to_f(b16 v) {
    return __uint_as_float(((unsigned int)v.x) << 16);
}

template <typename T> __device__ __forceinline__ T from_f(float f);
template <> __device__ __forceinline__ float from_f<float>(float f) { return f; }
template <> __device__ __forceinline__ h16 from_f<h16>(float f) {
    h16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
    return r;
}
template <> __device__ __forceinline__ b16 from_f<b16>(float f) {
    // Round to nearest even; NaN stays a (quiet) NaN.
    unsigned int u = __float_as_uint(f);
    b16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.x = (unsigned short)((u >> 16) | 0x40u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        r.x = (unsigned short)(u >> 16);
    }
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `red` is 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    return warp_sum(t);
}

__device__ __forceinline__ float block_max(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : -3.402823466e38f;
    return warp_max(t);
}
