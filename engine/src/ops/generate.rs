//! Ops that make tensors from attributes or scalars: Constant, ConstantOfShape and Range
//! (computed on the host, exactly in integers, then uploaded).

use std::path::Path;

use half::{bf16, f16};

use super::{OpEntry, Outputs, ParseError, attr, entry, host_f64, host_ints, input, one};
use crate::backend::Backend;
use crate::bail;
use crate::dtype::DType;
use crate::error::Result;
use crate::onnx::{Node, attribute_tensor};
use crate::ops::Op;
use crate::tensor::{Data, Tensor};

/// The generator ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "Constant", |n, _, dir| {
        Ok(Op::Constant(constant_value(n, dir)?))
    }),
    entry("", "ConstantOfShape", parse_constant_of_shape),
    entry("", "Range", |_, _, _| Ok(Op::Range)),
];

fn parse_constant_of_shape(node: &Node, _opset: i64, model_dir: &Path) -> Result<Op, ParseError> {
    Ok(Op::ConstantOfShape(match attr::tensor(node, "value") {
        Some(t) => {
            let v = attribute_tensor(t, model_dir).map_err(|e| format!("attribute value: {e}"))?;
            if v.numel() != 1 {
                return Err(format!("value must have one element, got {}", v.numel()).into());
            }
            v.reshape(vec![])?
        }
        None => Tensor::from_parts(vec![], Data::F32(vec![0.0])),
    }))
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

pub(super) fn constant<B: Backend>(b: &B, t: &Tensor) -> Outputs<B::Tensor> {
    one(b.upload(t)?)
}

pub(super) fn constant_of_shape<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    value: &Tensor,
) -> Outputs<B::Tensor> {
    let spec = host_ints(b, input(inputs, 0)?, "shape")?;
    if spec.iter().any(|&d| d < 0) {
        bail!("shape {spec:?} has a negative dim");
    }
    let shape: Vec<usize> = spec.iter().map(|&d| d as usize).collect();
    one(b.expand(&b.upload(value)?, &shape)?)
}

pub(super) fn range<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
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
