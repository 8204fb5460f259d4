//! ONNX operator semantics for the oracle: [`run_op`] reads a node's attributes and inputs and
//! calls the op's function, named like the ONNX op in snake_case (`mat_mul`, `softmax`,
//! `simplified_layer_normalization`, …) so one search finds the engine kernel, this function and
//! their tests. Opset differences (attribute vs input axes, legacy Softmax) are decided here;
//! the functions take plain, already-decided arguments.

pub mod attrs;
pub mod elementwise;
pub mod generate;
pub mod layout;
pub mod linalg;
pub mod norm;
pub mod reduce;

pub use elementwise::*;
pub use generate::*;
pub use layout::*;
pub use linalg::*;
pub use norm::*;
pub use reduce::*;

use onnx_pb as pb;

use crate::bail;
use crate::error::{Error, Result};
use crate::load::ExternalData;
use crate::tensor::OTensor;
use attrs::{bool_or, float_or, has, int, int_or, ints, string};

/// Every (domain, op_type) the oracle runs: the engine's `SUPPORTED` set.
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

/// Whether the oracle runs `(domain, op_type)` (`ai.onnx` counts as the default domain).
pub fn is_supported(domain: &str, op_type: &str) -> bool {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    SUPPORTED.iter().any(|&(d, o)| d == domain && o == op_type)
}

/// Runs one ONNX op. `inputs` follow the node's input list (`None` for an omitted optional
/// input); `n_outputs` is the node's declared output count; `opset` is the default-domain opset.
/// The result has one entry per output the op produces, `None` for an optional output the op does
/// not compute. Errors are [`Error::Op`] naming the op.
pub fn run_op(
    op_type: &str,
    domain: &str,
    attrs: &[pb::AttributeProto],
    inputs: &[Option<OTensor>],
    n_outputs: usize,
    opset: i64,
) -> Result<Vec<Option<OTensor>>> {
    run_op_with(op_type, domain, attrs, inputs, n_outputs, opset, None)
}

/// [`run_op`] with the external data of a model directory available to attribute tensors.
pub(crate) fn run_op_with(
    op_type: &str,
    domain: &str,
    attrs: &[pb::AttributeProto],
    inputs: &[Option<OTensor>],
    n_outputs: usize,
    opset: i64,
    external: Option<&mut ExternalData>,
) -> Result<Vec<Option<OTensor>>> {
    // Op functions prefix their messages with the op name; the wrapper names it once.
    let fail = |e: Error| {
        let message = e.into_message();
        let message = match message.strip_prefix(&format!("{op_type}: ")) {
            Some(rest) => rest.to_string(),
            None => message,
        };
        Error::Op {
            op: op_type.to_string(),
            message,
        }
    };
    if !is_supported(domain, op_type) {
        let d = if domain.is_empty() { "ai.onnx" } else { domain };
        return Err(fail(Error::msg(format!("unsupported op {d}::{op_type}"))));
    }
    for t in inputs.iter().flatten() {
        t.check().map_err(fail)?;
    }
    dispatch(op_type, attrs, inputs, n_outputs, opset, external).map_err(fail)
}

/// Input `i`, required.
fn input(inputs: &[Option<OTensor>], i: usize) -> Result<&OTensor> {
    match inputs.get(i) {
        Some(Some(t)) => Ok(t),
        _ => bail!("required input {i} is missing"),
    }
}

fn opt_input(inputs: &[Option<OTensor>], i: usize) -> Option<&OTensor> {
    inputs.get(i).and_then(Option::as_ref)
}

/// An integer input read as a list (axes, shapes, starts, …).
fn int_list(t: &OTensor, what: &str) -> Result<Vec<i64>> {
    match t.i64s() {
        Ok(v) => Ok(v.to_vec()),
        Err(_) => bail!("{what} must be an integer tensor, got {}", t.dtype()),
    }
}

/// Axes from input `i` when present, else from the `axes` attribute.
fn axes_from(
    inputs: &[Option<OTensor>],
    i: usize,
    attrs: &[pb::AttributeProto],
) -> Result<Option<Vec<i64>>> {
    match opt_input(inputs, i) {
        Some(t) => Ok(Some(int_list(t, "axes")?)),
        None => Ok(ints(attrs, "axes")),
    }
}

fn one(t: OTensor) -> Result<Vec<Option<OTensor>>> {
    Ok(vec![Some(t)])
}

/// All present inputs, in order (variadic ops skip omitted ones).
fn present(inputs: &[Option<OTensor>]) -> Vec<&OTensor> {
    inputs.iter().flatten().collect()
}

fn dispatch(
    op_type: &str,
    attrs: &[pb::AttributeProto],
    inputs: &[Option<OTensor>],
    n_outputs: usize,
    opset: i64,
    external: Option<&mut ExternalData>,
) -> Result<Vec<Option<OTensor>>> {
    let x = || input(inputs, 0);
    let y = || input(inputs, 1);
    match op_type {
        "Abs" => one(abs(x()?)?),
        "Neg" => one(neg(x()?)?),
        "Sqrt" => one(sqrt(x()?)?),
        "Reciprocal" => one(reciprocal(x()?)?),
        "Exp" => one(exp(x()?)?),
        "Log" => one(log(x()?)?),
        "Sigmoid" => one(sigmoid(x()?)?),
        "Tanh" => one(tanh(x()?)?),
        "Cos" => one(cos(x()?)?),
        "Sin" => one(sin(x()?)?),
        "Erf" => one(erf(x()?)?),
        "Floor" => one(floor(x()?)?),
        "Ceil" => one(ceil(x()?)?),
        "Round" => one(round(x()?)?),
        "Sign" => one(sign(x()?)?),
        "Relu" => one(relu(x()?)?),
        "Softplus" => one(softplus(x()?)?),
        "Not" => one(not(x()?)?),
        "IsNaN" => one(is_nan(x()?)?),
        "LeakyRelu" => one(leaky_relu(x()?, float_or(attrs, "alpha", 0.01)?)?),
        "Elu" => one(elu(x()?, float_or(attrs, "alpha", 1.0)?)?),
        "HardSigmoid" => one(hard_sigmoid(
            x()?,
            float_or(attrs, "alpha", 0.2)?,
            float_or(attrs, "beta", 0.5)?,
        )?),
        "HardSwish" => one(hard_swish(x()?)?),
        "Gelu" => match string(attrs, "approximate")?.as_deref() {
            None | Some("none") => one(gelu(x()?, false)?),
            Some("tanh") => one(gelu(x()?, true)?),
            Some(other) => bail!("approximate must be \"none\" or \"tanh\", got {other:?}"),
        },
        "Identity" => one(identity(x()?)?),
        "Dropout" => {
            // Inference: the output is the input; the optional mask is all true.
            if let Some(t) = opt_input(inputs, 2)
                && t.bools().is_ok_and(|b| b.iter().any(|&v| v))
            {
                bail!("Dropout in training mode is random; the oracle runs inference only");
            }
            let data = x()?.clone();
            let mask = if n_outputs > 1 {
                Some(OTensor::from_bool(
                    data.shape.clone(),
                    vec![true; data.numel()],
                )?)
            } else {
                None
            };
            Ok(vec![Some(data), mask])
        }
        "Add" => one(add(x()?, y()?)?),
        "Sub" => one(sub(x()?, y()?)?),
        "Mul" => one(mul(x()?, y()?)?),
        "Div" => one(div(x()?, y()?)?),
        "Pow" => one(pow(x()?, y()?)?),
        "Mod" => one(r#mod(x()?, y()?, bool_or(attrs, "fmod", false)?)?),
        "Equal" => one(equal(x()?, y()?)?),
        "Less" => one(less(x()?, y()?)?),
        "LessOrEqual" => one(less_or_equal(x()?, y()?)?),
        "Greater" => one(greater(x()?, y()?)?),
        "GreaterOrEqual" => one(greater_or_equal(x()?, y()?)?),
        "And" => one(and(x()?, y()?)?),
        "Or" => one(or(x()?, y()?)?),
        "Xor" => one(xor(x()?, y()?)?),
        "Max" => one(max(&present(inputs))?),
        "Min" => one(min(&present(inputs))?),
        "Sum" => one(sum(&present(inputs))?),
        "Mean" => one(mean(&present(inputs))?),
        "Where" => one(r#where(x()?, y()?, input(inputs, 2)?)?),
        "Cast" => {
            let to = int(attrs, "to")?.ok_or_else(|| Error::msg("missing attribute `to`"))?;
            one(cast(x()?, cast_target(to)?)?)
        }
        "CastLike" => one(cast_like(x()?, y()?)?),
        "Clip" => {
            // Bounds are attributes before opset 11 and inputs since.
            let x = x()?;
            let bound = |i: usize, name: &str| -> Result<Option<OTensor>> {
                if let Some(t) = opt_input(inputs, i) {
                    return Ok(Some(t.clone()));
                }
                if has(attrs, name) {
                    let v = OTensor::scalar_f32(float_or(attrs, name, 0.0)?);
                    return Ok(Some(cast(&v, x.dtype())?));
                }
                Ok(None)
            };
            let (lo, hi) = (bound(1, "min")?, bound(2, "max")?);
            one(clip(x, lo.as_ref(), hi.as_ref())?)
        }
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSumExp" => {
            let op = match op_type {
                "ReduceSum" => Reduce::Sum,
                "ReduceMean" => Reduce::Mean,
                "ReduceMax" => Reduce::Max,
                "ReduceMin" => Reduce::Min,
                "ReduceProd" => Reduce::Prod,
                "ReduceSumSquare" => Reduce::SumSquare,
                "ReduceL1" => Reduce::L1,
                "ReduceL2" => Reduce::L2,
                _ => Reduce::LogSumExp,
            };
            let axes = axes_from(inputs, 1, attrs)?;
            let keepdims = bool_or(attrs, "keepdims", true)?;
            let noop = bool_or(attrs, "noop_with_empty_axes", false)?;
            one(reduce(op, x()?, axes.as_deref(), keepdims, noop)?)
        }
        "ArgMax" | "ArgMin" => {
            let axis = int_or(attrs, "axis", 0)?;
            let keepdims = bool_or(attrs, "keepdims", true)?;
            let last = bool_or(attrs, "select_last_index", false)?;
            let f = if op_type == "ArgMax" {
                arg_max
            } else {
                arg_min
            };
            one(f(x()?, axis, keepdims, last)?)
        }
        "Softmax" | "LogSoftmax" => {
            // Opset 13 changed the default axis (1 -> -1) and dropped the 2-D coercion.
            let legacy = opset < 13;
            let axis = int_or(attrs, "axis", if legacy { 1 } else { -1 })?;
            let f = if op_type == "Softmax" {
                softmax
            } else {
                log_softmax
            };
            one(f(x()?, axis, legacy)?)
        }
        "MatMul" => one(mat_mul(x()?, y()?)?),
        "Gemm" => one(gemm(
            x()?,
            y()?,
            opt_input(inputs, 2),
            float_or(attrs, "alpha", 1.0)?,
            float_or(attrs, "beta", 1.0)?,
            bool_or(attrs, "transA", false)?,
            bool_or(attrs, "transB", false)?,
        )?),
        "Gather" => one(gather(x()?, y()?, int_or(attrs, "axis", 0)?)?),
        "Reshape" => one(reshape(
            x()?,
            &int_list(y()?, "shape")?,
            bool_or(attrs, "allowzero", false)?,
        )?),
        "Transpose" => one(transpose(x()?, ints(attrs, "perm").as_deref())?),
        "Concat" => {
            let axis = int(attrs, "axis")?.ok_or_else(|| Error::msg("missing attribute `axis`"))?;
            one(concat(&present(inputs), axis)?)
        }
        "Slice" => {
            if has(attrs, "starts") {
                bail!(
                    "Slice-1 (starts/ends as attributes) is not supported; re-export with opset >= 10"
                );
            }
            let starts = int_list(input(inputs, 1)?, "starts")?;
            let ends = int_list(input(inputs, 2)?, "ends")?;
            let axes = opt_input(inputs, 3)
                .map(|t| int_list(t, "axes"))
                .transpose()?;
            let steps = opt_input(inputs, 4)
                .map(|t| int_list(t, "steps"))
                .transpose()?;
            one(slice(
                x()?,
                &starts,
                &ends,
                axes.as_deref(),
                steps.as_deref(),
            )?)
        }
        "Split" => {
            // `split` is an attribute before opset 13 and an input since; `num_outputs` (18+).
            let sizes = match opt_input(inputs, 1) {
                Some(t) => Some(int_list(t, "split")?),
                None => ints(attrs, "split"),
            };
            let num_outputs = match int(attrs, "num_outputs")? {
                Some(n) if n < 1 => bail!("num_outputs must be >= 1, got {n}"),
                Some(n) => Some(n as usize),
                None => None,
            };
            let parts = split(
                x()?,
                int_or(attrs, "axis", 0)?,
                sizes.as_deref(),
                num_outputs,
                n_outputs,
            )?;
            Ok(parts.into_iter().map(Some).collect())
        }
        "Squeeze" => one(squeeze(x()?, axes_from(inputs, 1, attrs)?.as_deref())?),
        "Unsqueeze" => {
            let axes =
                axes_from(inputs, 1, attrs)?.ok_or_else(|| Error::msg("Unsqueeze needs axes"))?;
            one(unsqueeze(x()?, &axes)?)
        }
        "Flatten" => one(flatten(x()?, int_or(attrs, "axis", 1)?)?),
        "Expand" => one(expand(x()?, &int_list(y()?, "shape")?)?),
        "Tile" => one(tile(x()?, &int_list(y()?, "repeats")?)?),
        "Shape" => one(shape(x()?, int_or(attrs, "start", 0)?, int(attrs, "end")?)?),
        "Size" => one(size(x()?)?),
        "Constant" => one(constant(attrs, external)?),
        "ConstantOfShape" => {
            let value = match attrs::find(attrs, "value").and_then(|a| a.t.as_ref()) {
                Some(t) => Some(
                    crate::load::tensor_from_proto(t, external)
                        .map_err(|e| Error::msg(format!("attribute value: {e}")))?,
                ),
                None => None,
            };
            one(constant_of_shape(
                &int_list(x()?, "shape")?,
                value.as_ref(),
            )?)
        }
        "Range" => one(range(x()?, y()?, input(inputs, 2)?)?),
        "Trilu" => {
            let k = match opt_input(inputs, 1) {
                Some(t) => match int_list(t, "k")?.as_slice() {
                    [k] => *k,
                    _ => bail!("Trilu k must have one element, got shape {:?}", t.shape),
                },
                None => 0,
            };
            one(trilu(x()?, k, bool_or(attrs, "upper", true)?)?)
        }
        "SimplifiedLayerNormalization" => {
            let axis = int_or(attrs, "axis", -1)?;
            let eps = float_or(attrs, "epsilon", 1e-5)?;
            let (y, inv) = simplified_layer_normalization(x()?, y()?, axis, eps)?;
            Ok(vec![Some(y), Some(inv)])
        }
        "RMSNormalization" => {
            let axis = int_or(attrs, "axis", -1)?;
            let eps = float_or(attrs, "epsilon", 1e-5)?;
            one(rms_normalization(x()?, y()?, axis, eps)?)
        }
        "SkipSimplifiedLayerNormalization" => {
            let eps = float_or(attrs, "epsilon", 1e-5)?;
            let (y, inv, sum) = skip_simplified_layer_normalization(
                x()?,
                y()?,
                input(inputs, 2)?,
                opt_input(inputs, 3),
                eps,
            )?;
            // Outputs: output, mean (not defined for the simplified form), inv_std_var, sum.
            Ok(vec![Some(y), None, Some(inv), Some(sum)])
        }
        "LayerNormalization" => {
            let axis = int_or(attrs, "axis", -1)?;
            let eps = float_or(attrs, "epsilon", 1e-5)?;
            let (y, mean, inv) = layer_normalization(x()?, y()?, opt_input(inputs, 2), axis, eps)?;
            Ok(vec![Some(y), Some(mean), Some(inv)])
        }
        other => bail!("no implementation for {other}"),
    }
}
