//! Ops that make tensors from attributes or scalars: Constant, ConstantOfShape, Range.

use onnx_pb as pb;

use crate::bail;
use crate::error::Result;
use crate::load::{ExternalData, tensor_from_proto};
use crate::ops::attrs::{find, floats, int, ints};
use crate::tensor::{DType, Data, OTensor};

/// `Constant`: the value of whichever of `value`, `value_float(s)`, `value_int(s)` is given.
/// A `value` tensor with external data needs `external` (the model directory).
pub fn constant(
    attrs: &[pb::AttributeProto],
    external: Option<&mut ExternalData>,
) -> Result<OTensor> {
    if let Some(t) = find(attrs, "value").and_then(|a| a.t.as_ref()) {
        return tensor_from_proto(t, external)
            .map_err(|e| crate::error::Error::msg(format!("attribute value: {e}")));
    }
    if let Some(v) = find(attrs, "value_float").and_then(|a| a.f) {
        return Ok(OTensor::scalar_f32(v));
    }
    if let Some(v) = floats(attrs, "value_floats") {
        return OTensor::from_f32(vec![v.len()], v);
    }
    if let Some(v) = int(attrs, "value_int")? {
        return Ok(OTensor::scalar_i64(v));
    }
    if let Some(v) = ints(attrs, "value_ints") {
        return OTensor::from_i64(vec![v.len()], v);
    }
    bail!("Constant needs one of value, value_float, value_floats, value_int, value_ints")
}

/// A tensor of `shape` filled with `value` (one element; default f32 zero).
pub fn constant_of_shape(shape: &[i64], value: Option<&OTensor>) -> Result<OTensor> {
    if let Some(&bad) = shape.iter().find(|&&d| d < 0) {
        bail!("shape {shape:?} has a negative dim {bad}");
    }
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n = crate::tensor::checked_numel(&dims)?;
    let value = value.cloned().unwrap_or_else(|| OTensor::scalar_f32(0.0));
    if value.numel() != 1 {
        bail!(
            "ConstantOfShape value must have one element, got shape {:?}",
            value.shape
        );
    }
    let data = match value.data() {
        Data::F32(v) => Data::F32(vec![v[0]; n]),
        Data::I64(v) => Data::I64(vec![v[0]; n]),
        Data::Bool(v) => Data::Bool(vec![v[0]; n]),
    };
    OTensor::new(dims, value.dtype(), data)
}

/// The single value of a scalar-like tensor, as f64.
fn scalar(t: &OTensor, what: &str) -> Result<f64> {
    if t.numel() != 1 {
        bail!(
            "Range {what} must have one element, got shape {:?}",
            t.shape
        );
    }
    Ok(t.to_f64_vec()[0])
}

/// `[start, start + delta, …]` while before `limit`: `max(ceil((limit - start) / delta), 0)`
/// elements of `start`'s type. Integer ranges are computed exactly in i64.
pub fn range(start: &OTensor, limit: &OTensor, delta: &OTensor) -> Result<OTensor> {
    let dtype = start.dtype();
    if limit.dtype() != dtype || delta.dtype() != dtype {
        bail!(
            "Range inputs must have one type, got {}, {} and {}",
            dtype,
            limit.dtype(),
            delta.dtype()
        );
    }
    match start.data() {
        Data::I64(_) => {
            let one = |t: &OTensor, what: &str| -> Result<i64> {
                match t.i64s()? {
                    [v] => Ok(*v),
                    _ => bail!(
                        "Range {what} must have one element, got shape {:?}",
                        t.shape
                    ),
                }
            };
            let (s, l, d) = (
                one(start, "start")?,
                one(limit, "limit")?,
                one(delta, "delta")?,
            );
            if d == 0 {
                bail!("Range delta must not be 0");
            }
            // Number of steps before `limit`: ceil((l - s) / d), at least 0 (in i128: no overflow).
            let (s, l, d) = (s as i128, l as i128, d as i128);
            let n = if d > 0 {
                (l - s + d - 1).div_euclid(d)
            } else {
                (s - l - d - 1).div_euclid(-d)
            }
            .max(0);
            if n > 1_000_000_000 {
                bail!("Range from {s} to {l} by {d} is too long ({n} elements)");
            }
            let out: Vec<i64> = (0..n).map(|i| (s + i * d) as i64).collect();
            OTensor::new(vec![out.len()], dtype, Data::I64(out))
        }
        Data::F32(_) => {
            let (s, l, d) = (
                scalar(start, "start")?,
                scalar(limit, "limit")?,
                scalar(delta, "delta")?,
            );
            if d == 0.0 {
                bail!("Range delta must not be 0");
            }
            let n = ((l - s) / d).ceil().max(0.0);
            if !n.is_finite() || n > 1e9 {
                bail!("Range from {s} to {l} by {d} is too long");
            }
            let out = (0..n as usize).map(|i| (s + i as f64 * d) as f32).collect();
            OTensor::new(vec![n as usize], dtype, Data::F32(out))
        }
        Data::Bool(_) => bail!("Range does not take bool"),
    }
}

/// The element type a `Cast`'s `to` attribute names.
pub fn cast_target(code: i64) -> Result<DType> {
    match DType::from_onnx(code as i32) {
        Some(t) => Ok(t),
        None => bail!(
            "cannot cast to {}",
            crate::tensor::onnx_type_name(code as i32)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_by_hand() {
        let r = range(
            &OTensor::scalar_i64(3),
            &OTensor::scalar_i64(-4),
            &OTensor::scalar_i64(-3),
        )
        .unwrap();
        assert_eq!(r.i64s().unwrap(), &[3, 0, -3]);
        let e = range(
            &OTensor::scalar_i64(0),
            &OTensor::scalar_i64(0),
            &OTensor::scalar_i64(1),
        )
        .unwrap();
        assert_eq!(e.shape, vec![0]);
        let f = range(
            &OTensor::scalar_f32(1.0),
            &OTensor::scalar_f32(2.0),
            &OTensor::scalar_f32(0.25),
        )
        .unwrap();
        assert_eq!(f.f32s().unwrap(), &[1.0, 1.25, 1.5, 1.75]);
        assert!(
            range(
                &OTensor::scalar_i64(0),
                &OTensor::scalar_i64(1),
                &OTensor::scalar_i64(0)
            )
            .is_err()
        );
    }

    #[test]
    fn constant_of_shape_fills() {
        let z = constant_of_shape(&[2, 0], None).unwrap();
        assert_eq!((z.shape.clone(), z.dtype()), (vec![2, 0], DType::F32));
        let o = constant_of_shape(&[3], Some(&OTensor::scalar_i64(7))).unwrap();
        assert_eq!(o.i64s().unwrap(), &[7, 7, 7]);
        let s = constant_of_shape(&[], None).unwrap();
        assert_eq!(
            (s.shape.clone(), s.f32s().unwrap()),
            (vec![], &[0.0f32][..])
        );
    }
}
