//! Elementwise ops: unary functions (and the composites Gelu and HardSwish), broadcasting binary
//! arithmetic / comparison / logic, Pow, the variadic Max / Min / Sum / Mean, Where, Cast,
//! CastLike, Clip, Identity and Dropout: their parsing and their lowering onto
//! `Backend::{unary, binary, where_cond, cast}`.

use std::path::Path;

use super::{
    OpEntry, Outputs, ParseError, attr, entry, input, one, opt_input, same_dtype, scalar_like,
};
use crate::backend::{Backend, BinaryOp, UnaryOp};
use crate::bail;
use crate::dtype::{DType, onnx_type_name};
use crate::onnx::Node;
use crate::ops::Op;

use BinaryOp as B;
use UnaryOp as U;

/// The elementwise ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "Neg", |_, _, _| Ok(Op::Unary(U::Neg))),
    entry("", "Abs", |_, _, _| Ok(Op::Unary(U::Abs))),
    entry("", "Sqrt", |_, _, _| Ok(Op::Unary(U::Sqrt))),
    entry("", "Reciprocal", |_, _, _| Ok(Op::Unary(U::Reciprocal))),
    entry("", "Exp", |_, _, _| Ok(Op::Unary(U::Exp))),
    entry("", "Log", |_, _, _| Ok(Op::Unary(U::Log))),
    entry("", "Sigmoid", |_, _, _| Ok(Op::Unary(U::Sigmoid))),
    entry("", "Tanh", |_, _, _| Ok(Op::Unary(U::Tanh))),
    entry("", "Cos", |_, _, _| Ok(Op::Unary(U::Cos))),
    entry("", "Sin", |_, _, _| Ok(Op::Unary(U::Sin))),
    entry("", "Erf", |_, _, _| Ok(Op::Unary(U::Erf))),
    entry("", "Floor", |_, _, _| Ok(Op::Unary(U::Floor))),
    entry("", "Ceil", |_, _, _| Ok(Op::Unary(U::Ceil))),
    entry("", "Round", |_, _, _| Ok(Op::Unary(U::Round))),
    entry("", "Sign", |_, _, _| Ok(Op::Unary(U::Sign))),
    entry("", "Relu", |_, _, _| Ok(Op::Unary(U::Relu))),
    entry("", "Softplus", |_, _, _| Ok(Op::Unary(U::Softplus))),
    entry("", "Not", |_, _, _| Ok(Op::Unary(U::Not))),
    entry("", "IsNaN", |_, _, _| Ok(Op::Unary(U::IsNaN))),
    entry("", "LeakyRelu", |n, _, _| {
        Ok(Op::Unary(U::LeakyRelu(attr::float_or(n, "alpha", 0.01))))
    }),
    entry("", "Elu", |n, _, _| {
        Ok(Op::Unary(U::Elu(attr::float_or(n, "alpha", 1.0))))
    }),
    entry("", "HardSigmoid", |n, _, _| {
        Ok(Op::Unary(U::HardSigmoid {
            alpha: attr::float_or(n, "alpha", 0.2),
            beta: attr::float_or(n, "beta", 0.5),
        }))
    }),
    entry("", "HardSwish", |_, _, _| Ok(Op::HardSwish)),
    entry("", "Gelu", parse_gelu),
    entry("", "Add", |_, _, _| Ok(Op::Binary(B::Add))),
    entry("", "Sub", |_, _, _| Ok(Op::Binary(B::Sub))),
    entry("", "Mul", |_, _, _| Ok(Op::Binary(B::Mul))),
    entry("", "Div", |_, _, _| Ok(Op::Binary(B::Div))),
    entry("", "Pow", |_, _, _| Ok(Op::Pow)),
    entry("", "Mod", |n, _, _| {
        Ok(Op::Binary(B::Mod {
            fmod: attr::int_or(n, "fmod", 0) != 0,
        }))
    }),
    entry("", "Equal", |_, _, _| Ok(Op::Binary(B::Equal))),
    entry("", "Less", |_, _, _| Ok(Op::Binary(B::Less))),
    entry("", "LessOrEqual", |_, _, _| Ok(Op::Binary(B::LessOrEqual))),
    entry("", "Greater", |_, _, _| Ok(Op::Binary(B::Greater))),
    entry("", "GreaterOrEqual", |_, _, _| {
        Ok(Op::Binary(B::GreaterOrEqual))
    }),
    entry("", "And", |_, _, _| Ok(Op::Binary(B::And))),
    entry("", "Or", |_, _, _| Ok(Op::Binary(B::Or))),
    entry("", "Xor", |_, _, _| Ok(Op::Binary(B::Xor))),
    entry("", "Max", |_, _, _| Ok(Op::Variadic(B::Max))),
    entry("", "Min", |_, _, _| Ok(Op::Variadic(B::Min))),
    entry("", "Sum", |_, _, _| Ok(Op::Variadic(B::Add))),
    entry("", "Mean", |_, _, _| Ok(Op::Mean)),
    entry("", "Where", |_, _, _| Ok(Op::Where)),
    entry("", "Cast", parse_cast),
    entry("", "CastLike", |_, _, _| Ok(Op::CastLike)),
    entry("", "Clip", |n, _, _| {
        Ok(Op::Clip {
            // Attributes before opset 11; inputs after.
            min: attr::has(n, "min").then(|| attr::float_or(n, "min", f32::MIN)),
            max: attr::has(n, "max").then(|| attr::float_or(n, "max", f32::MAX)),
        })
    }),
    entry("", "Identity", |_, _, _| Ok(Op::Identity)),
    entry("", "Dropout", |_, _, _| Ok(Op::Identity)),
];

fn parse_gelu(node: &Node, _opset: i64, _dir: &Path) -> Result<Op, ParseError> {
    match attr::string(node, "approximate").as_deref() {
        None | Some("none") => Ok(Op::Gelu { tanh: false }),
        Some("tanh") => Ok(Op::Gelu { tanh: true }),
        Some(other) => {
            Err(format!("approximate must be \"none\" or \"tanh\", got {other:?}").into())
        }
    }
}

fn parse_cast(node: &Node, _opset: i64, _dir: &Path) -> Result<Op, ParseError> {
    let code = attr::int(node, "to").ok_or("missing attribute `to`".to_string())?;
    let to = DType::from_onnx(code as i32)
        .ok_or_else(|| format!("cannot cast to {}", onnx_type_name(code as i32)))?;
    Ok(Op::Cast(to))
}

pub(super) fn unary<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    op: &UnaryOp,
) -> Outputs<B::Tensor> {
    one(b.unary(*op, input(inputs, 0)?)?)
}

pub(super) fn binary<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    op: &BinaryOp,
) -> Outputs<B::Tensor> {
    let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
    same_dtype(b, x, y, "binary op")?;
    one(b.binary(*op, x, y)?)
}

/// `Pow`: the exponent is cast to the base's type when they differ.
pub(super) fn pow<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
    let y = if b.dtype(x) != b.dtype(y) {
        b.cast(y, b.dtype(x))?
    } else {
        y.clone()
    };
    one(b.binary(BinaryOp::Pow, x, &y)?)
}

/// Variadic Max / Min / Sum, folded with the binary op.
pub(super) fn variadic<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    op: &BinaryOp,
) -> Outputs<B::Tensor> {
    let mut acc = input(inputs, 0)?.clone();
    for t in inputs.iter().skip(1).flatten() {
        same_dtype(b, &acc, t, "variadic op")?;
        acc = b.binary(*op, &acc, t)?;
    }
    one(acc)
}

pub(super) fn mean<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let mut acc = input(inputs, 0)?.clone();
    let mut n = 1;
    for t in inputs.iter().skip(1).flatten() {
        same_dtype(b, &acc, t, "Mean")?;
        acc = b.binary(BinaryOp::Add, &acc, t)?;
        n += 1;
    }
    let div = scalar_like(b, &acc, n as f64)?;
    one(b.binary(BinaryOp::Div, &acc, &div)?)
}

pub(super) fn r#where<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let (c, x, y) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    if b.dtype(c) != DType::Bool {
        bail!("condition must be bool, got {}", b.dtype(c));
    }
    same_dtype(b, x, y, "Where")?;
    one(b.where_cond(c, x, y)?)
}

pub(super) fn cast<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    to: &DType,
) -> Outputs<B::Tensor> {
    one(b.cast(input(inputs, 0)?, *to)?)
}

pub(super) fn cast_like<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    one(b.cast(input(inputs, 0)?, b.dtype(input(inputs, 1)?))?)
}

pub(super) fn clip<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    min: &Option<f32>,
    max: &Option<f32>,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let mut y = x.clone();
    let lo = match opt_input(inputs, 1) {
        Some(t) => Some(t.clone()),
        None => min.map(|v| scalar_like(b, x, v as f64)).transpose()?,
    };
    let hi = match opt_input(inputs, 2) {
        Some(t) => Some(t.clone()),
        None => max.map(|v| scalar_like(b, x, v as f64)).transpose()?,
    };
    if let Some(lo) = lo {
        y = b.binary(BinaryOp::Max, &y, &lo)?;
    }
    if let Some(hi) = hi {
        y = b.binary(BinaryOp::Min, &y, &hi)?;
    }
    one(y)
}

/// Identity and inference-mode Dropout.
pub(super) fn identity<T: Clone>(inputs: &[Option<&T>]) -> Outputs<T> {
    one(input(inputs, 0)?.clone())
}

pub(super) fn gelu<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    tanh: &bool,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let half = scalar_like(b, x, 0.5)?;
    let one_t = scalar_like(b, x, 1.0)?;
    let inner = if *tanh {
        // sqrt(2/pi) * (x + 0.044715 x^3)
        let x3 = b.binary(BinaryOp::Mul, &b.binary(BinaryOp::Mul, x, x)?, x)?;
        let t = b.binary(BinaryOp::Mul, &x3, &scalar_like(b, x, 0.044715)?)?;
        let t = b.binary(BinaryOp::Add, x, &t)?;
        let t = b.binary(
            BinaryOp::Mul,
            &t,
            &scalar_like(b, x, (2.0 / std::f64::consts::PI).sqrt())?,
        )?;
        b.unary(UnaryOp::Tanh, &t)?
    } else {
        let t = b.binary(
            BinaryOp::Mul,
            x,
            &scalar_like(b, x, std::f64::consts::FRAC_1_SQRT_2)?,
        )?;
        b.unary(UnaryOp::Erf, &t)?
    };
    let y = b.binary(BinaryOp::Add, &inner, &one_t)?;
    let y = b.binary(BinaryOp::Mul, &y, x)?;
    one(b.binary(BinaryOp::Mul, &y, &half)?)
}

pub(super) fn hard_swish<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let hs = b.unary(
        UnaryOp::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        },
        x,
    )?;
    one(b.binary(BinaryOp::Mul, x, &hs)?)
}
