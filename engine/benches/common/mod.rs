//! Inputs shared by the benches: deterministic tensors in each float dtype, and the global
//! allocator.
#![allow(dead_code)]

mod group;

/// The allocator the engine binary runs (`src/main.rs`), so that a row times a kernel's
/// allocations under the product's heap and not glibc's, whose cost for a block above its
/// mmap threshold (128 KiB at first, then moving) depends on what the process freed before
/// (harness/eval/corpus/README.md, finding 9; the switch measured in
/// harness/eval/noise/README.md, 2026-12-04). Every bench target includes this module, so each
/// executable gets it once.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use group::group;

use engine::{DType, Data, Tensor};
use half::{bf16, f16};

/// The float dtypes every kernel bench covers, with the name used in bench ids.
pub const FLOAT_DTYPES: [(DType, &str); 3] = [
    (DType::F32, "f32"),
    (DType::F16, "f16"),
    (DType::BF16, "bf16"),
];

/// A deterministic tensor of `shape` in `dtype` with values in [-0.5, 0.5).
pub fn tensor(dtype: DType, shape: &[usize], salt: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let x = (i.wrapping_mul(2654435761).wrapping_add(salt * 97)) % 1000;
            x as f32 / 1000.0 - 0.5
        })
        .collect();
    let data = match dtype {
        DType::F32 => Data::F32(v),
        DType::F16 => Data::F16(v.into_iter().map(f16::from_f32).collect()),
        DType::BF16 => Data::BF16(v.into_iter().map(bf16::from_f32).collect()),
        other => panic!("bench inputs are float tensors, not {other:?}"),
    };
    Tensor::new(shape.to_vec(), data).expect("shape matches data")
}

/// Bytes per element of a float dtype.
pub fn elem_bytes(dtype: DType) -> u64 {
    match dtype {
        DType::F32 => 4,
        _ => 2,
    }
}

/// All cores of this machine (the `threads=all` variants).
pub fn all_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
