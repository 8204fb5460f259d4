//! The CPU backend: host tensors, rayon thread pool, gemm for MatMul.
