//! ONNX operator semantics: parses a node's attributes once (at plan time) into an [`Op`], and
//! evaluates it by lowering onto [`Backend`] primitives. This is the only place that knows about
//! opset differences (attribute vs input axes, legacy Softmax), negative axes, and how composite
//! ops (Gemm, Tile, LayerNormalization, Gelu …) decompose.
//!
//! Shape-like inputs (Reshape's shape, Slice's starts, …) are read on the host via
//! [`Backend::download`]; they are small i64 tensors.

mod attr;

use std::path::Path;

use half::{bf16, f16};

use crate::backend::{Backend, BinaryOp, ReduceOp, SliceDim, UnaryOp};
use crate::bail;
use crate::dtype::{DType, onnx_type_name};
use crate::error::{Error, Result};
use crate::onnx::{Node, attribute_tensor};
use crate::tensor::{Data, Tensor};

/// Why a node could not be turned into an [`Op`].
#[derive(Debug)]
pub enum ParseError {
    /// No implementation for this (domain, op_type).
    Unsupported,
    /// Implemented, but the node's attributes are invalid.
    Invalid(String),
}

impl From<String> for ParseError {
    fn from(s: String) -> Self {
        ParseError::Invalid(s)
    }
}

/// A parsed node: the operator plus its attributes, ready to evaluate.
#[derive(Clone, Debug)]
pub enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `Pow`: the exponent is cast to the base's type when they differ.
    Pow,
    /// Variadic Max / Min / Sum (folded with the binary op).
    Variadic(BinaryOp),
    /// Variadic Mean.
    Mean,
    Where,
    Cast(DType),
    CastLike,
    Clip {
        min: Option<f32>,
        max: Option<f32>,
    },
    Reduce {
        op: ReduceOp,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
    ArgExtreme {
        max: bool,
        axis: i64,
        keepdims: bool,
        select_last: bool,
    },
    Softmax {
        axis: i64,
        log: bool,
        legacy: bool,
    },
    MatMul,
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    Gather {
        axis: i64,
    },
    Reshape {
        allowzero: bool,
    },
    Transpose {
        perm: Option<Vec<i64>>,
    },
    Concat {
        axis: i64,
    },
    Slice,
    Split {
        axis: i64,
        split: Option<Vec<i64>>,
        num_outputs: Option<usize>,
    },
    Squeeze {
        axes: Option<Vec<i64>>,
    },
    Unsqueeze {
        axes: Option<Vec<i64>>,
    },
    Flatten {
        axis: i64,
    },
    Expand,
    Tile,
    Shape {
        start: i64,
        end: Option<i64>,
    },
    Size,
    Constant(Tensor),
    ConstantOfShape(Tensor),
    Range,
    Trilu {
        upper: bool,
    },
    Identity,
    /// `SimplifiedLayerNormalization` / `RMSNormalization`.
    RmsNorm {
        axis: i64,
        eps: f32,
    },
    /// com.microsoft `SkipSimplifiedLayerNormalization`.
    SkipRmsNorm {
        eps: f32,
    },
    LayerNorm {
        axis: i64,
        eps: f32,
    },
    Gelu {
        tanh: bool,
    },
    HardSwish,
}

/// Every (domain, op_type) [`parse`] accepts, for docs and error messages.
pub const SUPPORTED: &[(&str, &str)] = &[
    ("", "Abs"),
    ("", "Add"),
    ("", "And"),
    ("", "ArgMax"),
    ("", "ArgMin"),
    ("", "Cast"),
    ("", "CastLike"),
    ("", "Ceil"),
    ("", "Clip"),
    ("", "Concat"),
    ("", "Constant"),
    ("", "ConstantOfShape"),
    ("", "Cos"),
    ("", "Div"),
    ("", "Dropout"),
    ("", "Elu"),
    ("", "Equal"),
    ("", "Erf"),
    ("", "Exp"),
    ("", "Expand"),
    ("", "Flatten"),
    ("", "Floor"),
    ("", "Gather"),
    ("", "Gelu"),
    ("", "Gemm"),
    ("", "Greater"),
    ("", "GreaterOrEqual"),
    ("", "HardSigmoid"),
    ("", "HardSwish"),
    ("", "Identity"),
    ("", "IsNaN"),
    ("", "LayerNormalization"),
    ("", "LeakyRelu"),
    ("", "Less"),
    ("", "LessOrEqual"),
    ("", "Log"),
    ("", "LogSoftmax"),
    ("", "MatMul"),
    ("", "Max"),
    ("", "Mean"),
    ("", "Min"),
    ("", "Mod"),
    ("", "Mul"),
    ("", "Neg"),
    ("", "Not"),
    ("", "Or"),
    ("", "Pow"),
    ("", "RMSNormalization"),
    ("", "Range"),
    ("", "Reciprocal"),
    ("", "ReduceL1"),
    ("", "ReduceL2"),
    ("", "ReduceLogSumExp"),
    ("", "ReduceMax"),
    ("", "ReduceMean"),
    ("", "ReduceMin"),
    ("", "ReduceProd"),
    ("", "ReduceSum"),
    ("", "ReduceSumSquare"),
    ("", "Relu"),
    ("", "Reshape"),
    ("", "Round"),
    ("", "Shape"),
    ("", "Sigmoid"),
    ("", "Sign"),
    ("", "SimplifiedLayerNormalization"),
    ("", "Sin"),
    ("", "Size"),
    ("", "Slice"),
    ("", "Softmax"),
    ("", "Softplus"),
    ("", "Split"),
    ("", "Sqrt"),
    ("", "Squeeze"),
    ("", "Sub"),
    ("", "Sum"),
    ("", "Tanh"),
    ("", "Tile"),
    ("", "Transpose"),
    ("", "Trilu"),
    ("", "Unsqueeze"),
    ("", "Where"),
    ("", "Xor"),
    ("com.microsoft", "SimplifiedLayerNormalization"),
    ("com.microsoft", "SkipSimplifiedLayerNormalization"),
];

/// Parses `node` (from a model whose default-domain opset is `opset`, stored in `model_dir`).
pub fn parse(node: &Node, opset: i64, model_dir: &Path) -> Result<Op, ParseError> {
    use BinaryOp as B;
    use UnaryOp as U;
    let op = match (node.domain.as_str(), node.op_type.as_str()) {
        ("com.microsoft", "SkipSimplifiedLayerNormalization") => Op::SkipRmsNorm {
            eps: attr::float_or(node, "epsilon", 1e-5),
        },
        ("" | "com.microsoft", "SimplifiedLayerNormalization") | ("", "RMSNormalization") => {
            Op::RmsNorm {
                axis: attr::int_or(node, "axis", -1),
                eps: attr::float_or(node, "epsilon", 1e-5),
            }
        }
        ("", op_type) => match op_type {
            "Neg" => Op::Unary(U::Neg),
            "Abs" => Op::Unary(U::Abs),
            "Sqrt" => Op::Unary(U::Sqrt),
            "Reciprocal" => Op::Unary(U::Reciprocal),
            "Exp" => Op::Unary(U::Exp),
            "Log" => Op::Unary(U::Log),
            "Sigmoid" => Op::Unary(U::Sigmoid),
            "Tanh" => Op::Unary(U::Tanh),
            "Cos" => Op::Unary(U::Cos),
            "Sin" => Op::Unary(U::Sin),
            "Erf" => Op::Unary(U::Erf),
            "Floor" => Op::Unary(U::Floor),
            "Ceil" => Op::Unary(U::Ceil),
            "Round" => Op::Unary(U::Round),
            "Sign" => Op::Unary(U::Sign),
            "Relu" => Op::Unary(U::Relu),
            "Softplus" => Op::Unary(U::Softplus),
            "Not" => Op::Unary(U::Not),
            "IsNaN" => Op::Unary(U::IsNaN),
            "LeakyRelu" => Op::Unary(U::LeakyRelu(attr::float_or(node, "alpha", 0.01))),
            "Elu" => Op::Unary(U::Elu(attr::float_or(node, "alpha", 1.0))),
            "HardSigmoid" => Op::Unary(U::HardSigmoid {
                alpha: attr::float_or(node, "alpha", 0.2),
                beta: attr::float_or(node, "beta", 0.5),
            }),
            "HardSwish" => Op::HardSwish,
            "Gelu" => match attr::string(node, "approximate").as_deref() {
                None | Some("none") => Op::Gelu { tanh: false },
                Some("tanh") => Op::Gelu { tanh: true },
                Some(other) => {
                    return Err(
                        format!("approximate must be \"none\" or \"tanh\", got {other:?}").into(),
                    );
                }
            },
            "Add" => Op::Binary(B::Add),
            "Sub" => Op::Binary(B::Sub),
            "Mul" => Op::Binary(B::Mul),
            "Div" => Op::Binary(B::Div),
            "Pow" => Op::Pow,
            "Mod" => Op::Binary(B::Mod {
                fmod: attr::int_or(node, "fmod", 0) != 0,
            }),
            "Equal" => Op::Binary(B::Equal),
            "Less" => Op::Binary(B::Less),
            "LessOrEqual" => Op::Binary(B::LessOrEqual),
            "Greater" => Op::Binary(B::Greater),
            "GreaterOrEqual" => Op::Binary(B::GreaterOrEqual),
            "And" => Op::Binary(B::And),
            "Or" => Op::Binary(B::Or),
            "Xor" => Op::Binary(B::Xor),
            "Max" => Op::Variadic(B::Max),
            "Min" => Op::Variadic(B::Min),
            "Sum" => Op::Variadic(B::Add),
            "Mean" => Op::Mean,
            "Where" => Op::Where,
            "Cast" => {
                let code = attr::int(node, "to").ok_or("missing attribute `to`".to_string())?;
                let to = DType::from_onnx(code as i32)
                    .ok_or_else(|| format!("cannot cast to {}", onnx_type_name(code as i32)))?;
                Op::Cast(to)
            }
            "CastLike" => Op::CastLike,
            "Clip" => Op::Clip {
                // Attributes before opset 11; inputs after.
                min: attr::has(node, "min").then(|| attr::float_or(node, "min", f32::MIN)),
                max: attr::has(node, "max").then(|| attr::float_or(node, "max", f32::MAX)),
            },
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd"
            | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSumExp" => Op::Reduce {
                op: match op_type {
                    "ReduceSum" => ReduceOp::Sum,
                    "ReduceMean" => ReduceOp::Mean,
                    "ReduceMax" => ReduceOp::Max,
                    "ReduceMin" => ReduceOp::Min,
                    "ReduceProd" => ReduceOp::Prod,
                    "ReduceSumSquare" => ReduceOp::SumSquare,
                    "ReduceL1" => ReduceOp::L1,
                    "ReduceL2" => ReduceOp::L2,
                    _ => ReduceOp::LogSumExp,
                },
                axes: attr::ints(node, "axes"),
                keepdims: attr::int_or(node, "keepdims", 1) != 0,
                noop_with_empty_axes: attr::int_or(node, "noop_with_empty_axes", 0) != 0,
            },
            "ArgMax" | "ArgMin" => Op::ArgExtreme {
                max: op_type == "ArgMax",
                axis: attr::int_or(node, "axis", 0),
                keepdims: attr::int_or(node, "keepdims", 1) != 0,
                select_last: attr::int_or(node, "select_last_index", 0) != 0,
            },
            "Softmax" | "LogSoftmax" => Op::Softmax {
                axis: attr::int_or(node, "axis", if opset >= 13 { -1 } else { 1 }),
                log: op_type == "LogSoftmax",
                legacy: opset < 13,
            },
            "MatMul" => Op::MatMul,
            "Gemm" => Op::Gemm {
                alpha: attr::float_or(node, "alpha", 1.0),
                beta: attr::float_or(node, "beta", 1.0),
                trans_a: attr::int_or(node, "transA", 0) != 0,
                trans_b: attr::int_or(node, "transB", 0) != 0,
            },
            "Gather" => Op::Gather {
                axis: attr::int_or(node, "axis", 0),
            },
            "Reshape" => Op::Reshape {
                allowzero: attr::int_or(node, "allowzero", 0) != 0,
            },
            "Transpose" => Op::Transpose {
                perm: attr::ints(node, "perm"),
            },
            "Concat" => Op::Concat {
                axis: attr::int(node, "axis").ok_or("missing attribute `axis`".to_string())?,
            },
            "Slice" => {
                if attr::has(node, "starts") {
                    return Err("Slice-1 (starts/ends as attributes) is not supported; re-export with opset >= 10"
                        .to_string()
                        .into());
                }
                Op::Slice
            }
            "Split" => Op::Split {
                axis: attr::int_or(node, "axis", 0),
                split: attr::ints(node, "split"),
                num_outputs: attr::int(node, "num_outputs").map(|n| n.max(0) as usize),
            },
            "Squeeze" => Op::Squeeze {
                axes: attr::ints(node, "axes"),
            },
            "Unsqueeze" => Op::Unsqueeze {
                axes: attr::ints(node, "axes"),
            },
            "Flatten" => Op::Flatten {
                axis: attr::int_or(node, "axis", 1),
            },
            "Expand" => Op::Expand,
            "Tile" => Op::Tile,
            "Shape" => Op::Shape {
                start: attr::int_or(node, "start", 0),
                end: attr::int(node, "end"),
            },
            "Size" => Op::Size,
            "Constant" => Op::Constant(constant_value(node, model_dir)?),
            "ConstantOfShape" => Op::ConstantOfShape(match attr::tensor(node, "value") {
                Some(t) => {
                    let v = attribute_tensor(t, model_dir)
                        .map_err(|e| format!("attribute value: {e}"))?;
                    if v.numel() != 1 {
                        return Err(
                            format!("value must have one element, got {}", v.numel()).into()
                        );
                    }
                    v.reshape(vec![])?
                }
                None => Tensor::from_parts(vec![], Data::F32(vec![0.0])),
            }),
            "Range" => Op::Range,
            "Trilu" => Op::Trilu {
                upper: attr::int_or(node, "upper", 1) != 0,
            },
            "Identity" | "Dropout" => Op::Identity,
            "LayerNormalization" => Op::LayerNorm {
                axis: attr::int_or(node, "axis", -1),
                eps: attr::float_or(node, "epsilon", 1e-5),
            },
            _ => return Err(ParseError::Unsupported),
        },
        _ => return Err(ParseError::Unsupported),
    };
    Ok(op)
}

impl From<Error> for ParseError {
    fn from(e: Error) -> Self {
        ParseError::Invalid(e.to_string())
    }
}

fn constant_value(node: &Node, model_dir: &Path) -> Result<Tensor, ParseError> {
    if let Some(t) = attr::tensor(node, "value") {
        return attribute_tensor(t, model_dir).map_err(|e| format!("attribute value: {e}").into());
    }
    if let Some(v) = node
        .attributes
        .iter()
        .find(|a| a.name() == "value_float")
        .and_then(|a| a.f)
    {
        return Ok(Tensor::from_parts(vec![], Data::F32(vec![v])));
    }
    if let Some(v) = attr::floats(node, "value_floats").filter(|_| attr::has(node, "value_floats"))
    {
        return Ok(Tensor::from_parts(vec![v.len()], Data::F32(v)));
    }
    if let Some(v) = attr::int(node, "value_int") {
        return Ok(Tensor::scalar_i64(v));
    }
    if let Some(v) = attr::ints(node, "value_ints") {
        return Ok(Tensor::from_parts(vec![v.len()], Data::I64(v)));
    }
    Err("Constant needs one of value, value_float(s), value_int(s)"
        .to_string()
        .into())
}

/// A host scalar of `dtype` holding `v`.
pub fn host_scalar(dtype: DType, v: f64) -> Tensor {
    let data = match dtype {
        DType::F32 => Data::F32(vec![v as f32]),
        DType::F16 => Data::F16(vec![f16::from_f64(v)]),
        DType::BF16 => Data::BF16(vec![bf16::from_f64(v)]),
        DType::I64 => Data::I64(vec![v as i64]),
        DType::I32 => Data::I32(vec![v as i32]),
        DType::U8 => Data::U8(vec![v as u8]),
        DType::Bool => Data::Bool(vec![v != 0.0]),
    };
    Tensor::from_parts(vec![], data)
}

/// Normalises a possibly negative axis against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!("axis {axis} is out of range for rank {rank}");
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// numpy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => bail!("shapes {a:?} and {b:?} do not broadcast"),
        };
    }
    Ok(out)
}

fn input<'a, T>(inputs: &[Option<&'a T>], i: usize) -> Result<&'a T> {
    match inputs.get(i) {
        Some(Some(t)) => Ok(t),
        _ => bail!("required input {i} is missing"),
    }
}

fn opt_input<'a, T>(inputs: &[Option<&'a T>], i: usize) -> Option<&'a T> {
    inputs.get(i).copied().flatten()
}

fn host_ints<B: Backend>(b: &B, t: &B::Tensor, what: &str) -> Result<Vec<i64>> {
    b.download(t)?
        .to_i64_vec()
        .map_err(|e| Error::msg(format!("{what}: {e}")))
}

fn host_f64<B: Backend>(b: &B, t: &B::Tensor, what: &str) -> Result<f64> {
    let t = b.download(t)?;
    if t.numel() != 1 {
        bail!("{what} must have one element, got shape {:?}", t.shape());
    }
    Ok(match t.data() {
        Data::I64(v) => v[0] as f64,
        Data::I32(v) => v[0] as f64,
        _ => t.to_f32_vec()[0] as f64,
    })
}

fn scalar_like<B: Backend>(b: &B, like: &B::Tensor, v: f64) -> Result<B::Tensor> {
    b.upload(&host_scalar(b.dtype(like), v))
}

fn same_dtype<B: Backend>(b: &B, x: &B::Tensor, y: &B::Tensor, what: &str) -> Result<()> {
    let (dx, dy) = (b.dtype(x), b.dtype(y));
    if dx != dy {
        bail!("{what}: input types differ ({dx} vs {dy})");
    }
    Ok(())
}

/// Sorted unique non-negative axes.
fn norm_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    let n = out.len();
    out.dedup();
    if out.len() != n {
        bail!("axes {axes:?} repeat an axis");
    }
    Ok(out)
}

/// Clamps ONNX Slice bounds for one axis into a [`SliceDim`].
pub fn slice_dim(dim: usize, start: i64, end: i64, step: i64) -> Result<SliceDim> {
    if step == 0 {
        bail!("slice step must not be 0");
    }
    if dim == 0 {
        return Ok(SliceDim {
            start: 0,
            step: step as isize,
            len: 0,
        });
    }
    let d = dim as i64;
    let (start, end) = if step > 0 {
        let s = if start < 0 { start + d } else { start }.clamp(0, d);
        let e = if end < 0 { end + d } else { end }.clamp(0, d);
        (s, e)
    } else {
        let s = if start < 0 { start + d } else { start }.clamp(0, d - 1);
        let e = if end < 0 { end + d } else { end }.clamp(-1, d - 1);
        (s, e)
    };
    let len = if step > 0 {
        if end > start {
            (end - start + step - 1) / step
        } else {
            0
        }
    } else if start > end {
        (start - end + (-step) - 1) / (-step)
    } else {
        0
    };
    Ok(SliceDim {
        start: if len == 0 { 0 } else { start as usize },
        step: step as isize,
        len: len as usize,
    })
}

impl Op {
    /// Evaluates the op. `n_outputs` is the node's declared output count. The result has one entry
    /// per output the op can produce; `None` marks an optional output it does not compute.
    pub fn eval<B: Backend>(
        &self,
        b: &B,
        inputs: &[Option<&B::Tensor>],
        n_outputs: usize,
    ) -> Result<Vec<Option<B::Tensor>>> {
        let one = |t: B::Tensor| Ok(vec![Some(t)]);
        match self {
            Op::Unary(op) => one(b.unary(*op, input(inputs, 0)?)?),
            Op::Binary(op) => {
                let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
                same_dtype(b, x, y, "binary op")?;
                one(b.binary(*op, x, y)?)
            }
            Op::Pow => {
                let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
                let y = if b.dtype(x) != b.dtype(y) {
                    b.cast(y, b.dtype(x))?
                } else {
                    y.clone()
                };
                one(b.binary(BinaryOp::Pow, x, &y)?)
            }
            Op::Variadic(op) => {
                let mut acc = input(inputs, 0)?.clone();
                for t in inputs.iter().skip(1).flatten() {
                    same_dtype(b, &acc, t, "variadic op")?;
                    acc = b.binary(*op, &acc, t)?;
                }
                one(acc)
            }
            Op::Mean => {
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
            Op::Where => {
                let (c, x, y) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
                if b.dtype(c) != DType::Bool {
                    bail!("condition must be bool, got {}", b.dtype(c));
                }
                same_dtype(b, x, y, "Where")?;
                one(b.where_cond(c, x, y)?)
            }
            Op::Cast(to) => one(b.cast(input(inputs, 0)?, *to)?),
            Op::CastLike => one(b.cast(input(inputs, 0)?, b.dtype(input(inputs, 1)?))?),
            Op::Clip { min, max } => {
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
            Op::Reduce {
                op,
                axes,
                keepdims,
                noop_with_empty_axes,
            } => {
                let x = input(inputs, 0)?;
                let rank = b.shape(x).len();
                let axes = match opt_input(inputs, 1) {
                    Some(t) => host_ints(b, t, "axes")?,
                    None => axes.clone().unwrap_or_default(),
                };
                let axes = if axes.is_empty() {
                    if *noop_with_empty_axes {
                        return one(x.clone());
                    }
                    (0..rank).collect()
                } else {
                    norm_axes(&axes, rank)?
                };
                if rank == 0 {
                    // A scalar is a one-element reduction (SumSquare squares it, L1 takes |x|);
                    // an empty axis list would mean "no reduction" to the backend.
                    let x1 = b.reshape(x, vec![1])?;
                    return one(b.reduce(*op, &x1, &[0], false)?);
                }
                one(b.reduce(*op, x, &axes, *keepdims)?)
            }
            Op::ArgExtreme {
                max,
                axis,
                keepdims,
                select_last,
            } => {
                let x = b.download(input(inputs, 0)?)?;
                let out = arg_extreme(&x, *axis, *keepdims, *max, *select_last)?;
                one(b.upload(&out)?)
            }
            Op::Softmax { axis, log, legacy } => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let axis = norm_axis(*axis, shape.len())?;
                if *legacy {
                    // Opset < 13: coerce to 2-D [prod(..axis), prod(axis..)].
                    let outer = shape[..axis].iter().product();
                    let inner = shape[axis..].iter().product();
                    let x2 = b.reshape(x, vec![outer, inner])?;
                    let y = b.softmax(&x2, 1, *log)?;
                    one(b.reshape(&y, shape)?)
                } else {
                    one(b.softmax(x, axis, *log)?)
                }
            }
            Op::MatMul => {
                let (x, y) = (input(inputs, 0)?, input(inputs, 1)?);
                same_dtype(b, x, y, "MatMul")?;
                one(b.matmul(x, y)?)
            }
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => {
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
            Op::Gather { axis } => {
                let (x, idx) = (input(inputs, 0)?, input(inputs, 1)?);
                let axis = norm_axis(*axis, b.shape(x).len())?;
                one(b.gather(x, idx, axis)?)
            }
            Op::Reshape { allowzero } => {
                let x = input(inputs, 0)?;
                let spec = host_ints(b, input(inputs, 1)?, "shape")?;
                one(b.reshape(x, reshape_target(b.shape(x), &spec, *allowzero)?)?)
            }
            Op::Transpose { perm } => {
                let x = input(inputs, 0)?;
                let rank = b.shape(x).len();
                let perm: Vec<usize> = match perm {
                    Some(p) => p
                        .iter()
                        .map(|&a| norm_axis(a, rank))
                        .collect::<Result<_>>()?,
                    None => (0..rank).rev().collect(),
                };
                one(b.transpose(x, &perm)?)
            }
            Op::Concat { axis } => {
                let xs: Vec<&B::Tensor> = inputs.iter().flatten().copied().collect();
                let first = xs
                    .first()
                    .ok_or_else(|| Error::msg("Concat needs at least one input"))?;
                let axis = norm_axis(*axis, b.shape(first).len())?;
                for t in &xs[1..] {
                    same_dtype(b, first, t, "Concat")?;
                }
                one(b.concat(&xs, axis)?)
            }
            Op::Slice => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let starts = host_ints(b, input(inputs, 1)?, "starts")?;
                let ends = host_ints(b, input(inputs, 2)?, "ends")?;
                let axes = match opt_input(inputs, 3) {
                    Some(t) => host_ints(b, t, "axes")?,
                    None => (0..starts.len() as i64).collect(),
                };
                let steps = match opt_input(inputs, 4) {
                    Some(t) => host_ints(b, t, "steps")?,
                    None => vec![1; starts.len()],
                };
                if ends.len() != starts.len()
                    || axes.len() != starts.len()
                    || steps.len() != starts.len()
                {
                    bail!(
                        "starts, ends, axes and steps must have the same length, got {}, {}, {}, {}",
                        starts.len(),
                        ends.len(),
                        axes.len(),
                        steps.len()
                    );
                }
                let mut dims: Vec<SliceDim> = shape
                    .iter()
                    .map(|&d| SliceDim {
                        start: 0,
                        step: 1,
                        len: d,
                    })
                    .collect();
                let mut seen = vec![false; shape.len()];
                for i in 0..starts.len() {
                    let a = norm_axis(axes[i], shape.len())?;
                    if std::mem::replace(&mut seen[a], true) {
                        bail!("axis {} appears twice in axes", axes[i]);
                    }
                    dims[a] = slice_dim(shape[a], starts[i], ends[i], steps[i])?;
                }
                one(b.slice(x, &dims)?)
            }
            Op::Split {
                axis,
                split,
                num_outputs,
            } => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let axis = norm_axis(*axis, shape.len())?;
                let dim = shape[axis];
                let sizes: Vec<usize> = match (opt_input(inputs, 1), split) {
                    (Some(t), _) => host_ints(b, t, "split")?
                        .iter()
                        .map(|&s| s.max(0) as usize)
                        .collect(),
                    (None, Some(s)) => s.iter().map(|&s| s.max(0) as usize).collect(),
                    (None, None) => {
                        let n = num_outputs.unwrap_or(n_outputs).max(1);
                        let chunk = dim.div_ceil(n);
                        (0..n)
                            .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                            .collect()
                    }
                };
                if sizes.iter().sum::<usize>() != dim {
                    bail!("split sizes {sizes:?} do not add up to dim {dim} of axis {axis}");
                }
                let mut out = Vec::with_capacity(sizes.len());
                let mut start = 0;
                for len in sizes {
                    let mut dims: Vec<SliceDim> = shape
                        .iter()
                        .map(|&d| SliceDim {
                            start: 0,
                            step: 1,
                            len: d,
                        })
                        .collect();
                    dims[axis] = SliceDim {
                        start,
                        step: 1,
                        len,
                    };
                    out.push(Some(b.slice(x, &dims)?));
                    start += len;
                }
                Ok(out)
            }
            Op::Squeeze { axes } => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let axes = match opt_input(inputs, 1) {
                    Some(t) => Some(host_ints(b, t, "axes")?),
                    None => axes.clone(),
                };
                let new_shape: Vec<usize> = match axes {
                    Some(axes) => {
                        let axes = norm_axes(&axes, shape.len())?;
                        for &a in &axes {
                            if shape[a] != 1 {
                                bail!(
                                    "cannot squeeze axis {a} of size {} (shape {shape:?})",
                                    shape[a]
                                );
                            }
                        }
                        shape
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !axes.contains(i))
                            .map(|(_, &d)| d)
                            .collect()
                    }
                    None => shape.iter().copied().filter(|&d| d != 1).collect(),
                };
                one(b.reshape(x, new_shape)?)
            }
            Op::Unsqueeze { axes } => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let axes = match opt_input(inputs, 1) {
                    Some(t) => host_ints(b, t, "axes")?,
                    None => axes
                        .clone()
                        .ok_or_else(|| Error::msg("Unsqueeze needs axes"))?,
                };
                let out_rank = shape.len() + axes.len();
                let axes = norm_axes(&axes, out_rank)?;
                let mut rest = shape.iter();
                let new_shape: Vec<usize> = (0..out_rank)
                    .map(|i| {
                        if axes.contains(&i) {
                            1
                        } else {
                            rest.next().copied().unwrap_or(1)
                        }
                    })
                    .collect();
                one(b.reshape(x, new_shape)?)
            }
            Op::Flatten { axis } => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let r = shape.len() as i64;
                if *axis < -r || *axis > r {
                    bail!("axis {axis} is out of range for rank {r}");
                }
                let axis = if *axis < 0 { axis + r } else { *axis } as usize;
                let outer = shape[..axis].iter().product();
                let inner = shape[axis..].iter().product();
                one(b.reshape(x, vec![outer, inner])?)
            }
            Op::Expand => {
                let x = input(inputs, 0)?;
                let spec = host_ints(b, input(inputs, 1)?, "shape")?;
                if spec.iter().any(|&d| d < 0) {
                    bail!("Expand shape {spec:?} has a negative dim");
                }
                let spec: Vec<usize> = spec.iter().map(|&d| d as usize).collect();
                let target = broadcast_shapes(b.shape(x), &spec)?;
                one(b.expand(x, &target)?)
            }
            Op::Tile => {
                let x = input(inputs, 0)?;
                let shape = b.shape(x).to_vec();
                let reps = host_ints(b, input(inputs, 1)?, "repeats")?;
                if reps.len() != shape.len() || reps.iter().any(|&r| r < 0) {
                    bail!(
                        "repeats {reps:?} must be {} non-negative values for shape {shape:?}",
                        shape.len()
                    );
                }
                // x[d0, d1] tiled [r0, r1] == reshape(expand(x as [1, d0, 1, d1], [r0, d0, r1, d1]))
                let mut inter = Vec::with_capacity(2 * shape.len());
                let mut expanded = Vec::with_capacity(2 * shape.len());
                for (&d, &r) in shape.iter().zip(&reps) {
                    inter.extend([1, d]);
                    expanded.extend([r as usize, d]);
                }
                let y = b.expand(&b.reshape(x, inter)?, &expanded)?;
                let out: Vec<usize> = shape
                    .iter()
                    .zip(&reps)
                    .map(|(&d, &r)| d * r as usize)
                    .collect();
                one(b.reshape(&y, out)?)
            }
            Op::Shape { start, end } => {
                let shape = b.shape(input(inputs, 0)?);
                let r = shape.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
                let dims: Vec<i64> = shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                one(b.upload(&Tensor::from_parts(vec![dims.len()], Data::I64(dims)))?)
            }
            Op::Size => {
                let n = b.shape(input(inputs, 0)?).iter().product::<usize>();
                one(b.upload(&Tensor::scalar_i64(n as i64))?)
            }
            Op::Constant(t) => one(b.upload(t)?),
            Op::ConstantOfShape(value) => {
                let spec = host_ints(b, input(inputs, 0)?, "shape")?;
                if spec.iter().any(|&d| d < 0) {
                    bail!("shape {spec:?} has a negative dim");
                }
                let shape: Vec<usize> = spec.iter().map(|&d| d as usize).collect();
                one(b.expand(&b.upload(value)?, &shape)?)
            }
            Op::Range => {
                let (s, l, d) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
                let dtype = b.dtype(s);
                if matches!(dtype, DType::I64 | DType::I32) {
                    // Exact integer arithmetic (f64 would round values above 2^53).
                    let scalar = |t: &B::Tensor, what: &str| -> Result<i64> {
                        match host_ints(b, t, what)?.as_slice() {
                            [v] => Ok(*v),
                            other => bail!("{what} must have one element, got {}", other.len()),
                        }
                    };
                    let (start, limit, delta) = (
                        scalar(s, "start")?,
                        scalar(l, "limit")?,
                        scalar(d, "delta")?,
                    );
                    if delta == 0 {
                        bail!("Range delta must not be 0");
                    }
                    let span = limit as i128 - start as i128;
                    let step = delta.unsigned_abs() as i128;
                    let n = if span != 0 && (span > 0) == (delta > 0) {
                        ((span.abs() + step - 1) / step) as usize
                    } else {
                        0
                    };
                    let values = (0..n as i64).map(|i| start.wrapping_add(i.wrapping_mul(delta)));
                    let data = if dtype == DType::I64 {
                        Data::I64(values.collect())
                    } else {
                        Data::I32(values.map(|v| v as i32).collect())
                    };
                    return one(b.upload(&Tensor::from_parts(vec![n], data))?);
                }
                let (start, limit, delta) = (
                    host_f64(b, s, "start")?,
                    host_f64(b, l, "limit")?,
                    host_f64(b, d, "delta")?,
                );
                if delta == 0.0 {
                    bail!("Range delta must not be 0");
                }
                let n = ((limit - start) / delta).ceil().max(0.0) as usize;
                let values: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
                let data = match dtype {
                    DType::I64 => Data::I64(values.iter().map(|&v| v as i64).collect()),
                    DType::I32 => Data::I32(values.iter().map(|&v| v as i32).collect()),
                    DType::F32 => Data::F32(values.iter().map(|&v| v as f32).collect()),
                    DType::F16 => Data::F16(values.iter().map(|&v| f16::from_f64(v)).collect()),
                    DType::BF16 => Data::BF16(values.iter().map(|&v| bf16::from_f64(v)).collect()),
                    other => bail!("Range does not support {other}"),
                };
                one(b.upload(&Tensor::from_parts(vec![n], data))?)
            }
            Op::Trilu { upper } => {
                let x = input(inputs, 0)?;
                let k = match opt_input(inputs, 1) {
                    Some(t) => host_f64(b, t, "k")? as i64,
                    None => 0,
                };
                one(b.trilu(x, k, *upper)?)
            }
            Op::Identity => one(input(inputs, 0)?.clone()),
            Op::RmsNorm { axis, eps } => {
                let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
                let axis = norm_axis(*axis, b.shape(x).len())?;
                one(b.rms_norm(x, scale, axis, *eps)?)
            }
            Op::SkipRmsNorm { eps } => {
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
            Op::LayerNorm { axis, eps } => {
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
            Op::Gelu { tanh } => {
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
            Op::HardSwish => {
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
        }
    }
}

/// Resolves a Reshape spec (0 = copy, -1 = infer) against the input shape.
pub fn reshape_target(shape: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 => {
                if infer.replace(i).is_some() {
                    bail!("reshape spec {spec:?} has more than one -1");
                }
                out.push(1);
            }
            0 if !allowzero => match shape.get(i) {
                Some(&s) => out.push(s),
                None => bail!(
                    "reshape spec {spec:?} copies dim {i} (0) but the input {shape:?} has rank {}",
                    shape.len()
                ),
            },
            d if d < 0 => bail!("reshape spec {spec:?} has invalid dim {d}"),
            d => out.push(d as usize),
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || !numel.is_multiple_of(known) {
            bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
        }
        out[i] = numel / known;
    }
    if out.iter().product::<usize>() != numel {
        bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
    }
    Ok(out)
}

/// ArgMax / ArgMin on the host (rare in decoders; not worth a backend primitive).
fn arg_extreme(
    x: &Tensor,
    axis: i64,
    keepdims: bool,
    max: bool,
    select_last: bool,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let axis = norm_axis(axis, shape.len())?;
    // Integers compare exactly as i64 (f64 would merge values above 2^53); floats as f64.
    #[derive(PartialEq, PartialOrd, Clone, Copy)]
    enum Key {
        I(i64),
        F(f64),
    }
    let v: Vec<Key> = match x.dtype() {
        DType::I64 | DType::I32 | DType::U8 | DType::Bool => {
            x.to_i64_vec()?.into_iter().map(Key::I).collect()
        }
        _ => x
            .to_f32_vec()
            .into_iter()
            .map(|v| Key::F(v as f64))
            .collect(),
    };
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if n == 0 {
        bail!("cannot take the arg-extreme of an empty axis {axis}");
    }
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            let mut best_v = v[o * n * inner + i];
            for k in 1..n {
                let cur = v[(o * n + k) * inner + i];
                let better = if max { cur > best_v } else { cur < best_v };
                if better || (select_last && cur == best_v) {
                    best = k;
                    best_v = cur;
                }
            }
            out.push(best as i64);
        }
    }
    let mut out_shape = shape.clone();
    if keepdims {
        out_shape[axis] = 1;
    } else {
        out_shape.remove(axis);
    }
    Tensor::new(out_shape, Data::I64(out))
}
