//! RMS normalisation (`Backend::rms_norm`, behind RMSNormalization, SimplifiedLayerNormalization
//! and SkipSimplifiedLayerNormalization): each row is scaled by `1 / sqrt(mean(row^2) + eps)`
//! and the broadcast scale, the sum of squares accumulated in f64, the rest in f32.

use super::broadcast::{Bcast, expand_into};
use super::{CpuBackend, Float, numel};
use crate::bail;
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor};

pub(super) fn rms_norm(
    be: &CpuBackend,
    x: &Tensor,
    scale: &Tensor,
    axis: usize,
    eps: f32,
) -> Result<Tensor> {
    let shape = x.shape();
    if axis >= shape.len() {
        bail!(
            "RMSNormalization: axis {axis} out of range for rank {}",
            shape.len()
        );
    }
    if !scale.dtype().is_float() {
        bail!(
            "RMSNormalization: scale must be a float tensor, got {}",
            scale.dtype()
        );
    }
    let norm_shape = &shape[axis..];
    let bc = Bcast::to([scale.shape()], norm_shape).ok_or_else(|| {
        Error::msg(format!(
            "RMSNormalization: scale shape {:?} does not broadcast to normalised dims {:?}",
            scale.shape(),
            norm_shape
        ))
    })?;
    let d = numel(norm_shape);
    let mut s = vec![0f32; d];
    expand_into(&bc, &scale.to_f32_vec(), &mut s, 0);
    let data = match x.data() {
        Data::F32(v) => Data::F32(rms_norm_t(be, v, &s, eps)),
        Data::F16(v) => Data::F16(rms_norm_t(be, v, &s, eps)),
        Data::BF16(v) => Data::BF16(rms_norm_t(be, v, &s, eps)),
        _ => bail!("RMSNormalization: unsupported dtype {}", x.dtype()),
    };
    Ok(Tensor::from_parts(shape.to_vec(), data))
}

/// Each row of `x` (rows of `scale.len()`) times `1 / sqrt(mean(row^2) + eps)` times `scale`.
fn rms_norm_t<T: Float>(be: &CpuBackend, x: &[T], scale: &[f32], eps: f32) -> Vec<T> {
    let d = scale.len();
    let mut out = vec![T::default(); x.len()];
    if d == 0 {
        return out;
    }
    be.for_chunks(&mut out, d, |off, chunk| {
        for (r, dst) in chunk.chunks_mut(d).enumerate() {
            let start = off + r * d;
            let row = &x[start..start + d];
            let ss: f64 = row.iter().map(|&v| (v.to_f32() as f64).powi(2)).sum();
            let inv = 1.0 / ((ss / d as f64) as f32 + eps).sqrt();
            for ((o, &v), &s) in dst.iter_mut().zip(row).zip(scale) {
                *o = T::from_f32(v.to_f32() * inv * s);
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::test_util::{be, close, f32t};

    #[test]
    fn rms_norm_rows() {
        let x = f32t(&[2, 2], &[3., 4., 1., 1.]);
        let s = f32t(&[2], &[1., 2.]);
        let y = be().rms_norm(&x, &s, 1, 0.0).unwrap().to_f32_vec();
        let r = (12.5f32).sqrt();
        close(&y, &[3. / r, 8. / r, 1., 2.], 1e-6);
        // Over the last two dims, scale broadcast from [2] to [1, 2]... and eps.
        let x = f32t(&[1, 2, 2], &[1., 1., 1., 1.]);
        let y = be().rms_norm(&x, &s, 1, 3.0).unwrap().to_f32_vec();
        close(&y, &[0.5, 1., 0.5, 1.], 1e-6);
        // f16 input, bf16 scale.
        let h = Tensor::new(
            vec![1, 2],
            Data::F16(vec![f16::from_f32(2.0), f16::from_f32(2.0)]),
        )
        .unwrap();
        let bs = Tensor::new(
            vec![2],
            Data::BF16(vec![bf16::from_f32(1.0), bf16::from_f32(3.0)]),
        )
        .unwrap();
        let y = be().rms_norm(&h, &bs, 1, 0.0).unwrap();
        assert_eq!(
            y.data(),
            &Data::F16(vec![f16::from_f32(1.0), f16::from_f32(3.0)])
        );
        let err = be()
            .rms_norm(&x, &f32t(&[3], &[1.; 3]), 1, 0.0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "RMSNormalization: scale shape [3] does not broadcast to normalised dims [2, 2]"
        );
        let err = be().rms_norm(&x, &s, 3, 0.0).unwrap_err().to_string();
        assert_eq!(err, "RMSNormalization: axis 3 out of range for rank 3");
    }

    #[test]
    fn rms_norm_parallel_matches_serial() {
        let x: Vec<f32> = (0..64 * 1024)
            .map(|i| ((i * 31) % 200) as f32 / 50.0 - 2.0)
            .collect();
        let t = f32t(&[64, 1024], &x);
        let s = f32t(
            &[1024],
            &(0..1024).map(|i| i as f32 / 1024.0).collect::<Vec<_>>(),
        );
        let one = be().rms_norm(&t, &s, 1, 1e-6).unwrap();
        let two = CpuBackend::new(2)
            .unwrap()
            .rms_norm(&t, &s, 1, 1e-6)
            .unwrap();
        assert_eq!(one, two);
    }
}
