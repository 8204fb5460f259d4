//! Helpers the CPU kernels' unit tests share: a one-thread backend, f32 tensors, and a closeness
//! check relative to the expected value (NaN matches NaN).

use super::CpuBackend;
use crate::tensor::Tensor;

pub(super) fn be() -> CpuBackend {
    CpuBackend::new(1).unwrap()
}

pub(super) fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::f32(shape, v.to_vec()).unwrap()
}

/// `|got − want| ≤ tol · (1 + |want|)` element by element, or both NaN.
pub(super) fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
            "{got:?} vs {want:?}"
        );
    }
}
