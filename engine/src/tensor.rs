//! The host tensor: a shape plus typed, reference-counted element storage (row-major, contiguous).
//! Cloning and reshaping share the storage; kernels write new tensors.

use std::sync::Arc;

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Typed element storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

impl Data {
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
            Data::I64(_) => DType::I64,
            Data::I32(_) => DType::I32,
            Data::U8(_) => DType::U8,
            Data::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::BF16(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zero elements of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        match dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::F16 => Data::F16(vec![f16::ZERO; n]),
            DType::BF16 => Data::BF16(vec![bf16::ZERO; n]),
            DType::I64 => Data::I64(vec![0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::U8 => Data::U8(vec![0; n]),
            DType::Bool => Data::Bool(vec![false; n]),
        }
    }

    /// Decodes ONNX raw little-endian bytes. `bytes.len()` must be `n * dtype.size()`.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Data {
        fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        match dtype {
            DType::F32 => Data::F32(chunks(bytes, f32::from_le_bytes)),
            DType::F16 => Data::F16(chunks(bytes, f16::from_le_bytes)),
            DType::BF16 => Data::BF16(chunks(bytes, bf16::from_le_bytes)),
            DType::I64 => Data::I64(chunks(bytes, i64::from_le_bytes)),
            DType::I32 => Data::I32(chunks(bytes, i32::from_le_bytes)),
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
        }
    }

    /// ONNX raw little-endian bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::U8(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
        }
    }
}

/// A backend's own layout of a constant tensor's values, carried beside them
/// ([`Tensor::with_prepared`]; the CPU backend's packed matrix-vector panels). Opaque here, so
/// that this module stays below the backends: it imports no engine module above it.
pub trait Prepared: std::any::Any + Send + Sync + std::fmt::Debug {}

/// A dense row-major tensor on the host.
#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Arc<Data>,
    /// The same values re-laid by a backend for one of its kernels (the CPU backend's packed
    /// matrix-vector panels), on a constant MatMul weight
    /// ([`crate::backend::Backend::prepare_weight`]); every other tensor has none, and a
    /// reshape drops it.
    prepared: Option<Arc<dyn Prepared>>,
}

/// Equal shape and values (the packed copy is the same values).
impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.shape == other.shape && self.data == other.data
    }
}

impl Tensor {
    /// Builds a tensor; errors when the element count does not match the shape.
    pub fn new(shape: Vec<usize>, data: Data) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::msg(format!(
                "tensor of shape {shape:?} needs {numel} elements, got {}",
                data.len()
            )));
        }
        Ok(Tensor {
            shape,
            data: Arc::new(data),
            prepared: None,
        })
    }

    /// Like [`Tensor::new`] for callers that computed the length from the shape themselves.
    pub(crate) fn from_parts(shape: Vec<usize>, data: Data) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor {
            shape,
            data: Arc::new(data),
            prepared: None,
        }
    }

    pub fn f32(shape: &[usize], v: Vec<f32>) -> Result<Tensor> {
        Tensor::new(shape.to_vec(), Data::F32(v))
    }

    pub fn i64(shape: &[usize], v: Vec<i64>) -> Result<Tensor> {
        Tensor::new(shape.to_vec(), Data::I64(v))
    }

    pub fn scalar_i64(v: i64) -> Tensor {
        Tensor::from_parts(vec![], Data::I64(vec![v]))
    }

    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_parts(shape.to_vec(), Data::zeros(dtype, n))
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn data(&self) -> &Data {
        &self.data
    }

    /// Same storage, new shape (element counts must agree).
    pub fn reshape(&self, shape: Vec<usize>) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if numel != self.numel() {
            return Err(Error::msg(format!(
                "cannot reshape {:?} ({} elements) to {shape:?} ({numel} elements)",
                self.shape,
                self.numel()
            )));
        }
        Ok(Tensor {
            shape,
            data: self.data.clone(),
            prepared: None,
        })
    }

    /// This tensor with a backend's re-laid copy of its values beside them.
    pub(crate) fn with_prepared(&self, prepared: impl Prepared) -> Tensor {
        Tensor {
            prepared: Some(Arc::new(prepared)),
            ..self.clone()
        }
    }

    /// The re-laid copy, when this is a prepared weight and the copy is a `P`.
    pub(crate) fn prepared<P: Prepared>(&self) -> Option<&P> {
        let p: &dyn std::any::Any = self.prepared.as_deref()?;
        p.downcast_ref()
    }

    /// Elements converted to f32 (exact for every stored type but large i64/i32).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &*self.data {
            Data::F32(v) => v.clone(),
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::U8(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f32).collect(),
        }
    }

    /// Integer elements as i64 (for shape-like inputs); errors for float tensors.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        Ok(match &*self.data {
            Data::I64(v) => v.clone(),
            Data::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            other => {
                return Err(Error::msg(format!(
                    "expected an integer tensor, got {}",
                    other.dtype()
                )));
            }
        })
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &*self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        match &*self.data {
            Data::I64(v) => Some(v),
            _ => None,
        }
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}
