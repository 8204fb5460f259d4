//! MatMul (numpy `matmul`) and Gemm (transposes, alpha, beta and the bias decomposed onto
//! `Backend::{transpose, matmul, binary}`).

use super::{OpEntry, Outputs, attr, entry, input, one, opt_input, same_dtype, scalar_like};
use crate::backend::{Backend, BinaryOp};
use crate::bail;
use crate::ops::Op;

/// The linear-algebra ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "MatMul", |_, _, _| Ok(Op::MatMul)),
    entry("", "Gemm", |n, _, _| {
        Ok(Op::Gemm {
            alpha: attr::float_or(n, "alpha", 1.0),
            beta: attr::float_or(n, "beta", 1.0),
            trans_a: attr::int_or(n, "transA", 0) != 0,
            trans_b: attr::int_or(n, "transB", 0) != 0,
        })
    }),
];

pub(super) fn mat_mul<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
    same_dtype(b, x, y, "MatMul")?;
    one(b.matmul(x, y)?)
}

/// `A · Bᵀ` over the last two axes of `B` (the executor's fusion of a `Transpose` into the
/// MatMul that reads it).
pub(super) fn mat_mul_transposed_b<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
) -> Outputs<B::Tensor> {
    let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
    same_dtype(b, x, y, "MatMul")?;
    one(b.matmul_transposed_b(x, y)?)
}

pub(super) fn gemm<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    alpha: &f32,
    beta: &f32,
    trans_a: &bool,
    trans_b: &bool,
) -> Outputs<B::Tensor> {
    let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
    same_dtype(b, x, y, "Gemm")?;
    for (t, n) in [(x, "A"), (y, "B")] {
        if b.shape(t).len() != 2 {
            bail!("Gemm input {n} must be 2-D, got shape {:?}", b.shape(t));
        }
    }
    let x = if *trans_a {
        b.transpose(x, &[1, 0])?
    } else {
        x.clone()
    };
    let y = if *trans_b {
        b.transpose(y, &[1, 0])?
    } else {
        y.clone()
    };
    let mut out = b.matmul(&x, &y)?;
    if *alpha != 1.0 {
        out = b.binary(BinaryOp::Mul, &out, &scalar_like(b, &out, *alpha as f64)?)?;
    }
    if let Some(c) = opt_input(inputs, 2) {
        let c = if *beta != 1.0 {
            b.binary(BinaryOp::Mul, c, &scalar_like(b, c, *beta as f64)?)?
        } else {
            c.clone()
        };
        out = b.binary(BinaryOp::Add, &out, &c)?;
    }
    one(out)
}
