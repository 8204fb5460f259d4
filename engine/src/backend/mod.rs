//! The backend trait: one method per primitive the ONNX op layer (`crate::ops`) lowers onto.
//! Backends own tensor storage and kernels; they know nothing of ONNX attributes, opsets or
//! graphs. Shapes passed in are already validated and normalised by the op layer (axes are
//! non-negative, output shapes resolved), but kernels still return errors, never panic, on
//! inconsistent input.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
/// Without the `cuda` feature, a stub of the same name whose entry points fail with one clear
/// error ("engine was built without the `cuda` feature").
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;
/// The CUDA op codes are plain Rust: their tests (generated defines vs `kernels/ops.cu`) also run
/// in builds without the `cuda` feature, which is what CI's CPU jobs test.
#[cfg(all(test, not(feature = "cuda")))]
#[path = "cuda/op_codes.rs"]
mod cuda_op_codes;

use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

/// Elementwise functions of one tensor. Float-only unless noted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// Also defined on signed integers.
    Neg,
    /// Also defined on integers.
    Abs,
    Sqrt,
    Reciprocal,
    Exp,
    Log,
    Sigmoid,
    Tanh,
    Cos,
    Sin,
    Erf,
    Floor,
    Ceil,
    /// Round half to even, as ONNX `Round`.
    Round,
    /// Also defined on integers.
    Sign,
    /// Also defined on integers.
    Relu,
    Softplus,
    /// `x * sigmoid(x)` (no ONNX op of its own; used by fusions and tests).
    Silu,
    LeakyRelu(f32),
    Elu(f32),
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// Bool only.
    Not,
    /// Output is bool.
    IsNaN,
}

/// Elementwise functions of two tensors with ONNX/numpy multidirectional broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Integer division truncates toward zero (ONNX `Div` on integers).
    Div,
    Pow,
    Max,
    Min,
    /// `fmod = true`: sign of the dividend (C fmod); false: sign of the divisor (Python %).
    Mod {
        fmod: bool,
    },
    /// Comparisons output bool.
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    /// Logical ops take and output bool.
    And,
    Or,
    Xor,
}

impl BinaryOp {
    /// True when the output is bool whatever the input type.
    pub fn is_predicate(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Equal | Less | LessOrEqual | Greater | GreaterOrEqual | And | Or | Xor
        )
    }
}

/// Reductions over a set of axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    /// Sum of squares.
    SumSquare,
    /// sqrt of the sum of squares.
    L2,
    /// Sum of absolute values.
    L1,
    LogSumExp,
}

/// One axis of a strided slice: output element `i` reads input index `start + i * step`.
/// `start` is already clamped into range and `len` is the output extent (may be 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceDim {
    pub start: usize,
    pub step: isize,
    pub len: usize,
}

/// A computation the executor recognised in a run of ONNX nodes (`exec/fuse.rs`) that a device
/// may do in one kernel ([`Backend::fused`]). Each names the nodes it stands for; its inputs are
/// already checked against the conditions below by the op layer (`ops/fused.rs`), which runs
/// the nodes themselves when a backend has no kernel for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fused {
    /// Inputs `x`, `w`: `Mul(Div(x, Sqrt(Add(ReduceMean(x·x, last axis), eps))), w)`, `w`
    /// holding one value per element of `x`'s last axis.
    RmsNorm { eps: f32 },
    /// Inputs `x`, `cos`, `sin`: `x·cos + rotate_half(x)·sin`, where `rotate_half(x)` is
    /// `Concat(-x[…, half..], x[…, ..half])` on the last axis (of length `2 · half`), and `cos`,
    /// `sin` have one shape that broadcasts to `x`'s.
    Rotary { half: usize },
    /// Inputs `g`, `u` of one shape: `(g · Sigmoid(g)) · u` (SwiGLU's gate).
    SiluMul,
    /// Inputs `s`, `m`: `Softmax(s · scale + m)` over the last axis, `m` broadcasting to `s`'s
    /// shape (attention scores, their scale and the additive mask).
    ScaleMaskSoftmax { scale: f32 },
    /// Inputs `a`, `b` of one shape and `w`: outputs `RmsNorm(a + b, w)` ([`Fused::RmsNorm`])
    /// and the sum `a + b` itself (a residual Add read by the next norm and by the next
    /// residual).
    AddRmsNorm { eps: f32 },
    /// Inputs `a` `[B, G·R, S, K]` and `kv` `[B, G, T, D]`: `MatMul(a, r)` (or `MatMul(a, rᵀ)`
    /// with `transpose_b`, the last two axes swapped) where `r` `[B, G·R, T, D]` repeats each of
    /// `kv`'s `G` heads `R` times in a row (grouped-query attention's `Unsqueeze`, `Expand`,
    /// `Reshape` of the KV cache). `R = a`'s heads / `kv`'s heads. A device reads `kv` in place:
    /// query heads `g·R .. (g+1)·R` are the rows of one product with head `g`.
    GqaMatMul { transpose_b: bool },
}

impl Fused {
    /// How many inputs it takes ([`Backend::fused`] gets exactly these).
    pub fn arity(&self) -> usize {
        match self {
            Fused::RmsNorm { .. }
            | Fused::SiluMul
            | Fused::ScaleMaskSoftmax { .. }
            | Fused::GqaMatMul { .. } => 2,
            Fused::Rotary { .. } | Fused::AddRmsNorm { .. } => 3,
        }
    }

    /// How many outputs it gives, in the order documented at each variant.
    pub fn outputs(&self) -> usize {
        match self {
            Fused::AddRmsNorm { .. } => 2,
            _ => 1,
        }
    }
}

/// The primitives of a device. `Tensor` is the device's tensor handle; cloning it is cheap.
pub trait Backend {
    type Tensor: Clone + std::fmt::Debug;

    fn name(&self) -> &'static str;

    /// Host to device.
    fn upload(&self, t: &Tensor) -> Result<Self::Tensor>;
    /// Device to host.
    fn download(&self, t: &Self::Tensor) -> Result<Tensor>;
    fn shape<'a>(&self, t: &'a Self::Tensor) -> &'a [usize];
    fn dtype(&self, t: &Self::Tensor) -> DType;

    /// Same elements, new shape (element counts must agree); no copy where the device allows.
    fn reshape(&self, x: &Self::Tensor, shape: Vec<usize>) -> Result<Self::Tensor>;
    fn unary(&self, op: UnaryOp, x: &Self::Tensor) -> Result<Self::Tensor>;
    /// Broadcasting binary op; both inputs have the same dtype (the op layer checks).
    fn binary(&self, op: BinaryOp, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;
    /// `cond ? a : b` with three-way broadcasting; `cond` is bool.
    fn where_cond(
        &self,
        cond: &Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
    ) -> Result<Self::Tensor>;
    /// Converts elements; float to int truncates toward zero, to bool is `!= 0`.
    fn cast(&self, x: &Self::Tensor, to: DType) -> Result<Self::Tensor>;
    /// Reduces over `axes` (sorted, unique, in range; empty means no reduction: identity).
    fn reduce(
        &self,
        op: ReduceOp,
        x: &Self::Tensor,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Self::Tensor>;
    /// Softmax (or log-softmax) along one axis, numerically stable (max subtracted).
    fn softmax(&self, x: &Self::Tensor, axis: usize, log: bool) -> Result<Self::Tensor>;
    /// numpy `matmul`: 1-D operands promoted and the added dim removed, batch dims broadcast.
    fn matmul(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;
    /// `matmul(a, transpose(b))` with the last two axes of `b` (rank ≥ 2) swapped: bit for bit
    /// what those two ops give. Default: exactly those two ops.
    fn matmul_transposed_b(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor> {
        transpose_then_matmul(self, a, b)
    }
    /// A constant that is the right operand of a MatMul, prepared once at load for the device's
    /// kernels (the CPU packs a 2-D f32/f16 weight for its matrix-vector kernel beside the
    /// row-major values, [`cpu::Panels`]); the result has the same shape and values. Default:
    /// unchanged.
    fn prepare_weight(&self, t: &Self::Tensor) -> Result<Self::Tensor> {
        Ok(t.clone())
    }
    /// numpy `take` along `axis`; indices are i64 or i32, negative values count from the end,
    /// out-of-range values are an error.
    fn gather(
        &self,
        data: &Self::Tensor,
        indices: &Self::Tensor,
        axis: usize,
    ) -> Result<Self::Tensor>;
    fn transpose(&self, x: &Self::Tensor, perm: &[usize]) -> Result<Self::Tensor>;
    /// All inputs have the same dtype and rank and agree on every dim but `axis`.
    fn concat(&self, xs: &[&Self::Tensor], axis: usize) -> Result<Self::Tensor>;
    /// One [`SliceDim`] per axis of `x`.
    fn slice(&self, x: &Self::Tensor, dims: &[SliceDim]) -> Result<Self::Tensor>;
    /// Broadcasts `x` to `shape` (numpy rules; `shape` is the final, already-broadcast shape).
    fn expand(&self, x: &Self::Tensor, shape: &[usize]) -> Result<Self::Tensor>;
    /// Keeps the upper (or lower) triangle of the last two dims, diagonal offset `k`; zeroes the rest.
    fn trilu(&self, x: &Self::Tensor, k: i64, upper: bool) -> Result<Self::Tensor>;
    /// A device backend: why the work since the last call left the device (an op computed on
    /// a host copy, a value read back), or `None` when it stayed there: what keeps a step out
    /// of a CUDA graph, per op ([`crate::exec::StepMode`]). Clears what it reports. `None` on
    /// the CPU.
    fn take_host_work(&self) -> Option<String> {
        None
    }
    /// RMS normalisation over dims `axis..rank`: `x / sqrt(mean(x^2) + eps) * scale`, computed in
    /// f32 whatever the storage type; `scale` broadcasts against the normalised dims.
    fn rms_norm(
        &self,
        x: &Self::Tensor,
        scale: &Self::Tensor,
        axis: usize,
        eps: f32,
    ) -> Result<Self::Tensor>;
    /// `op` over `xs` in one kernel, or `None` when this backend has none (the op layer then runs
    /// the nodes `op` stands for); `Some` holds exactly [`Fused::outputs`] tensors. A kernel
    /// rounds every intermediate to the storage type as those nodes would, so its result is
    /// theirs on the same device (a reduction or a product may sum in another order). Default:
    /// `None` (the CPU runs the nodes: its fused plan gives the unfused plan's bits).
    fn fused(&self, op: &Fused, xs: &[&Self::Tensor]) -> Result<Option<Vec<Self::Tensor>>> {
        let _ = (op, xs);
        Ok(None)
    }
}

/// `matmul(a, transpose(b))` with the last two axes of `b` swapped: the two ops that
/// [`Backend::matmul_transposed_b`] stands for, and its default.
pub fn transpose_then_matmul<B: Backend + ?Sized>(
    be: &B,
    a: &B::Tensor,
    b: &B::Tensor,
) -> Result<B::Tensor> {
    let r = be.shape(b).len();
    if r < 2 {
        crate::bail!(
            "MatMul: a transposed right operand needs rank 2 or more, got shape {:?}",
            be.shape(b)
        );
    }
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    be.matmul(a, &be.transpose(b, &perm)?)
}
