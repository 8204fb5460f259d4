//! Normalisations: LayerNormalization (decomposed into f32 mean / variance / divide), RMS
//! normalisation (ai.onnx `RMSNormalization`, `SimplifiedLayerNormalization` in either domain)
//! and com.microsoft `SkipSimplifiedLayerNormalization`, both on `Backend::rms_norm`.

use super::{
    OpEntry, Outputs, attr, entry, host_scalar, input, norm_axis, one, opt_input, same_dtype,
};
use crate::backend::{Backend, BinaryOp, ReduceOp, UnaryOp};
use crate::dtype::DType;
use crate::onnx::Node;
use crate::ops::Op;

/// The normalisation ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "RMSNormalization", |n, _, _| Ok(rms_norm_op(n))),
    entry("", "SimplifiedLayerNormalization", |n, _, _| {
        Ok(rms_norm_op(n))
    }),
    entry(
        "com.microsoft",
        "SimplifiedLayerNormalization",
        |n, _, _| Ok(rms_norm_op(n)),
    ),
    entry(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        |n, _, _| {
            Ok(Op::SkipRmsNorm {
                eps: attr::float_or(n, "epsilon", 1e-5),
            })
        },
    ),
    entry("", "LayerNormalization", |n, _, _| {
        Ok(Op::LayerNorm {
            axis: attr::int_or(n, "axis", -1),
            eps: attr::float_or(n, "epsilon", 1e-5),
        })
    }),
];

fn rms_norm_op(node: &Node) -> Op {
    Op::RmsNorm {
        axis: attr::int_or(node, "axis", -1),
        eps: attr::float_or(node, "epsilon", 1e-5),
    }
}

pub(super) fn rms_norm<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
    eps: &f32,
) -> Outputs<B::Tensor> {
    let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
    let axis = norm_axis(*axis, b.shape(x).len())?;
    one(b.rms_norm(x, scale, axis, *eps)?)
}

pub(super) fn skip_rms_norm<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    eps: &f32,
) -> Outputs<B::Tensor> {
    let (x, skip, gamma) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    same_dtype(b, x, skip, "SkipSimplifiedLayerNormalization")?;
    let mut sum = b.binary(BinaryOp::Add, x, skip)?;
    if let Some(bias) = opt_input(inputs, 3) {
        sum = b.binary(BinaryOp::Add, &sum, bias)?;
    }
    let axis = b.shape(&sum).len().saturating_sub(1);
    let y = b.rms_norm(&sum, gamma, axis, *eps)?;
    // Outputs: output, mean (unused), inv_std_var (not computed), input_skip_bias_sum.
    Ok(vec![Some(y), None, None, Some(sum)])
}

pub(super) fn layer_norm<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
    eps: &f32,
) -> Outputs<B::Tensor> {
    let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
    let dtype = b.dtype(x);
    let axis = norm_axis(*axis, b.shape(x).len())?;
    let axes: Vec<usize> = (axis..b.shape(x).len()).collect();
    let xf = b.cast(x, DType::F32)?;
    let mean = b.reduce(ReduceOp::Mean, &xf, &axes, true)?;
    let d = b.binary(BinaryOp::Sub, &xf, &mean)?;
    let var = b.reduce(
        ReduceOp::Mean,
        &b.binary(BinaryOp::Mul, &d, &d)?,
        &axes,
        true,
    )?;
    let eps_t = b.upload(&host_scalar(DType::F32, *eps as f64))?;
    let std = b.unary(UnaryOp::Sqrt, &b.binary(BinaryOp::Add, &var, &eps_t)?)?;
    let mut y = b.binary(BinaryOp::Div, &d, &std)?;
    y = b.binary(BinaryOp::Mul, &y, &b.cast(scale, DType::F32)?)?;
    if let Some(bias) = opt_input(inputs, 2) {
        y = b.binary(BinaryOp::Add, &y, &b.cast(bias, DType::F32)?)?;
    }
    one(b.cast(&y, dtype)?)
}
