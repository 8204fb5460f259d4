//! Normalisations: LayerNormalization, RMS normalisation (ai.onnx `RMSNormalization`,
//! `SimplifiedLayerNormalization` in either domain) and com.microsoft
//! `SkipSimplifiedLayerNormalization`. Means and variances are accumulated in f64, and each output
//! is computed in f64 and rounded once.

use crate::bail;
use crate::error::Result;
use crate::ops::elementwise::add;
use crate::tensor::{DType, Data, OTensor, broadcast_offsets, norm_axis};

/// The values of `param` (scale or bias) broadcast to the normalised dims `x.shape[axis..]`.
fn broadcast_param(
    op: &str,
    what: &str,
    param: &OTensor,
    x: &OTensor,
    axis: usize,
) -> Result<Vec<f64>> {
    let Data::F32(v) = param.data() else {
        bail!("{op}: {what} must be float, got {}", param.dtype());
    };
    let tail = &x.shape[axis..];
    let offsets = broadcast_offsets(&param.shape, tail).map_err(|_| {
        crate::error::Error::msg(format!(
            "{op}: {what} shape {:?} does not broadcast to the normalised dims {tail:?}",
            param.shape
        ))
    })?;
    Ok(offsets.iter().map(|&o| v[o] as f64).collect())
}

/// The statistics shape: `x`'s shape with the normalised dims set to 1.
fn stats_shape(x: &OTensor, axis: usize) -> Vec<usize> {
    x.shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if i >= axis { 1 } else { d })
        .collect()
}

/// `y = x / sqrt(mean(x^2) + eps) * scale` over dims `axis..`; also returns `1 / sqrt(mean(x^2) + eps)`
/// (f32, shape with the normalised dims set to 1).
fn rms_norm(
    op: &str,
    x: &OTensor,
    scale: &OTensor,
    axis: i64,
    eps: f32,
) -> Result<(OTensor, OTensor)> {
    let Data::F32(v) = x.data() else {
        bail!("{op}: input must be float, got {}", x.dtype());
    };
    let axis = norm_axis(axis, x.rank())?;
    let n: usize = x.shape[axis..].iter().product();
    let scale = broadcast_param(op, "scale", scale, x, axis)?;
    let mut out = vec![0f32; v.len()];
    let mut inv = Vec::new();
    if n > 0 {
        for (row, out_row) in v.chunks(n).zip(out.chunks_mut(n)) {
            let mean_sq = row.iter().map(|&a| a as f64 * a as f64).sum::<f64>() / n as f64;
            let r = 1.0 / (mean_sq + eps as f64).sqrt();
            for ((o, &a), &g) in out_row.iter_mut().zip(row).zip(&scale) {
                *o = (a as f64 * r * g) as f32;
            }
            inv.push(r as f32);
        }
    }
    let inv_shape = stats_shape(x, axis);
    let inv = if n == 0 {
        vec![0.0; inv_shape.iter().product()]
    } else {
        inv
    };
    Ok((
        OTensor::new(x.shape.clone(), x.dtype(), Data::F32(out))?,
        OTensor::new(inv_shape, DType::F32, Data::F32(inv))?,
    ))
}

/// `SimplifiedLayerNormalization` (ai.onnx or com.microsoft): outputs `Y` and `inv_std_var`.
pub fn simplified_layer_normalization(
    x: &OTensor,
    scale: &OTensor,
    axis: i64,
    epsilon: f32,
) -> Result<(OTensor, OTensor)> {
    rms_norm("SimplifiedLayerNormalization", x, scale, axis, epsilon)
}

/// ai.onnx `RMSNormalization` (opset 23): the same normalisation, output `Y` only.
pub fn rms_normalization(x: &OTensor, scale: &OTensor, axis: i64, epsilon: f32) -> Result<OTensor> {
    Ok(rms_norm("RMSNormalization", x, scale, axis, epsilon)?.0)
}

/// com.microsoft `SkipSimplifiedLayerNormalization`: `s = x + skip (+ bias)` (each add rounded to
/// f32, as the op's element type), then RMS normalisation of `s` over the last axis with `gamma`.
/// Returns `(output, inv_std_var, input_skip_bias_sum)`; the op's `mean` output is not defined for
/// the simplified form.
pub fn skip_simplified_layer_normalization(
    x: &OTensor,
    skip: &OTensor,
    gamma: &OTensor,
    bias: Option<&OTensor>,
    epsilon: f32,
) -> Result<(OTensor, OTensor, OTensor)> {
    let mut sum = add(x, skip)?;
    if let Some(bias) = bias {
        sum = add(&sum, bias)?;
    }
    let (y, inv) = rms_norm("SkipSimplifiedLayerNormalization", &sum, gamma, -1, epsilon)?;
    Ok((y, inv, sum))
}

/// `LayerNormalization`: `y = (x - mean) / sqrt(var + eps) * scale + bias` over dims `axis..`.
/// Returns `(Y, Mean, InvStdDev)`; the statistics are f32 with the normalised dims set to 1.
pub fn layer_normalization(
    x: &OTensor,
    scale: &OTensor,
    bias: Option<&OTensor>,
    axis: i64,
    epsilon: f32,
) -> Result<(OTensor, OTensor, OTensor)> {
    const OP: &str = "LayerNormalization";
    let Data::F32(v) = x.data() else {
        bail!("{OP}: input must be float, got {}", x.dtype());
    };
    let axis = norm_axis(axis, x.rank())?;
    let n: usize = x.shape[axis..].iter().product();
    let scale = broadcast_param(OP, "scale", scale, x, axis)?;
    let bias = match bias {
        Some(b) => broadcast_param(OP, "bias", b, x, axis)?,
        None => vec![0.0; n],
    };
    let mut out = vec![0f32; v.len()];
    let (mut means, mut invs) = (Vec::new(), Vec::new());
    if n > 0 {
        for (row, out_row) in v.chunks(n).zip(out.chunks_mut(n)) {
            let mean = row.iter().map(|&a| a as f64).sum::<f64>() / n as f64;
            let var = row
                .iter()
                .map(|&a| (a as f64 - mean) * (a as f64 - mean))
                .sum::<f64>()
                / n as f64;
            let r = 1.0 / (var + epsilon as f64).sqrt();
            for (j, (o, &a)) in out_row.iter_mut().zip(row).enumerate() {
                *o = ((a as f64 - mean) * r * scale[j] + bias[j]) as f32;
            }
            means.push(mean as f32);
            invs.push(r as f32);
        }
    }
    let st = stats_shape(x, axis);
    let count: usize = st.iter().product();
    if n == 0 {
        means = vec![0.0; count];
        invs = vec![0.0; count];
    }
    Ok((
        OTensor::new(x.shape.clone(), x.dtype(), Data::F32(out))?,
        OTensor::new(st.clone(), DType::F32, Data::F32(means))?,
        OTensor::new(st, DType::F32, Data::F32(invs))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], v: &[f32]) -> OTensor {
        OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn rms_norm_by_hand() {
        // Row [3, 4]: mean of squares 12.5, so y = [3, 4] / sqrt(12.5) * [1, 2].
        let x = f(&[2, 2], &[3.0, 4.0, 0.0, 0.0]);
        let (y, inv) = simplified_layer_normalization(&x, &f(&[2], &[1.0, 2.0]), -1, 0.0).unwrap();
        let r = 1.0 / 12.5f64.sqrt();
        assert_eq!(y.f32s().unwrap()[..2], [(3.0 * r) as f32, (8.0 * r) as f32]);
        assert_eq!(inv.shape, vec![2, 1]);
        // An all-zero row with eps 0 divides 0 by 0: NaN, not a panic.
        assert!(y.f32s().unwrap()[2].is_nan());
        let (y2, _) = simplified_layer_normalization(&x, &f(&[2], &[1.0, 1.0]), -1, 1e-5).unwrap();
        assert_eq!(&y2.f32s().unwrap()[2..], &[0.0, 0.0]);
        assert!(
            rms_normalization(&x, &f(&[3], &[1.0; 3]), -1, 1e-5).is_err(),
            "scale must fit"
        );
    }

    #[test]
    fn skip_rms_norm_returns_the_sum() {
        let x = f(&[1, 2], &[1.0, 2.0]);
        let skip = f(&[1, 2], &[2.0, 2.0]);
        let bias = f(&[2], &[0.0, 1.0]);
        let (y, _, sum) =
            skip_simplified_layer_normalization(&x, &skip, &f(&[2], &[1.0, 1.0]), Some(&bias), 0.0)
                .unwrap();
        assert_eq!(sum.f32s().unwrap(), &[3.0, 5.0]);
        let r = 1.0 / ((9.0f64 + 25.0) / 2.0).sqrt();
        assert_eq!(y.f32s().unwrap(), &[(3.0 * r) as f32, (5.0 * r) as f32]);
    }

    #[test]
    fn layer_norm_by_hand() {
        // Row [1, 3]: mean 2, var 1 → [-1, 1] * scale + bias.
        let (y, mean, inv) = layer_normalization(
            &f(&[1, 2], &[1.0, 3.0]),
            &f(&[2], &[2.0, 3.0]),
            Some(&f(&[2], &[0.5, 0.5])),
            -1,
            0.0,
        )
        .unwrap();
        assert_eq!(y.f32s().unwrap(), &[-1.5, 3.5]);
        assert_eq!(mean.f32s().unwrap(), &[2.0]);
        assert_eq!(inv.f32s().unwrap(), &[1.0]);
    }
}
