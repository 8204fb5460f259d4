//! The oracle's dense tensor: a shape, an ONNX element type, and row-major values stored in one
//! of three plain forms — f32 for every float type (f16/bf16 are widened on load), i64 for every
//! integer type, bool — plus the index helpers (strides, broadcasting, strided views) the ops use.
//!
//! The element type is kept as a tag so `Cast`, `CastLike`, `Range` and integer wrap-around follow
//! ONNX; float arithmetic is always done in f32/f64 whatever the tag says (this is the fp32
//! reference). Values are shared behind an `Arc`, so cloning a tensor (a weight fed to an op, a
//! reshape) copies no data.

use std::fmt;
use std::sync::Arc;

use crate::bail;
use crate::error::Result;

/// An ONNX element type the oracle understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
    I32,
    U8,
    Bool,
}

impl DType {
    /// From an ONNX `TensorProto.DataType` code.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            16 => DType::BF16,
            _ => return None,
        })
    }

    pub fn to_onnx(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::BF16 => 16,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::U8)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// Wraps an integer result into this integer type (two's complement, like the storage types).
    pub fn wrap_int(self, v: i64) -> i64 {
        match self {
            DType::I32 => v as i32 as i64,
            DType::U8 => v as u8 as i64,
            _ => v,
        }
    }

    /// Rounds an f32 value to this float type (identity for f32).
    pub fn round_float(self, v: f32) -> f32 {
        match self {
            DType::F16 => half::f16::from_f32(v).to_f32(),
            DType::BF16 => half::bf16::from_f32(v).to_f32(),
            _ => v,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Human name of an ONNX data type code (for unsupported-type errors).
pub fn onnx_type_name(code: i32) -> String {
    match onnx_pb::tensor_proto::DataType::try_from(code) {
        Ok(t) => format!("{} ({code})", t.as_str_name()),
        Err(_) => format!("unknown ({code})"),
    }
}

/// Row-major element storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements at the given flat offsets (all in range: the callers compute them from shapes).
    pub fn select(&self, offsets: &[usize]) -> Data {
        match self {
            Data::F32(v) => Data::F32(offsets.iter().map(|&o| v[o]).collect()),
            Data::I64(v) => Data::I64(offsets.iter().map(|&o| v[o]).collect()),
            Data::Bool(v) => Data::Bool(offsets.iter().map(|&o| v[o]).collect()),
        }
    }

    /// Picks `(source, offset)` pairs from several tensors' data of the same storage form.
    pub fn pick(sources: &[&Data], picks: &[(usize, usize)]) -> Result<Data> {
        macro_rules! go {
            ($variant:ident) => {{
                let mut srcs = Vec::with_capacity(sources.len());
                for s in sources {
                    match s {
                        Data::$variant(v) => srcs.push(v.as_slice()),
                        _ => bail!("inputs have different element types"),
                    }
                }
                Data::$variant(picks.iter().map(|&(s, o)| srcs[s][o]).collect())
            }};
        }
        Ok(match sources.first() {
            None => bail!("nothing to pick from"),
            Some(Data::F32(_)) => go!(F32),
            Some(Data::I64(_)) => go!(I64),
            Some(Data::Bool(_)) => go!(Bool),
        })
    }
}

/// A dense tensor: `shape` (public, row-major), element type and shared values.
#[derive(Clone, Debug)]
pub struct OTensor {
    pub shape: Vec<usize>,
    dtype: DType,
    data: Arc<Data>,
}

impl PartialEq for OTensor {
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.dtype == other.dtype && self.data == other.data
    }
}

impl OTensor {
    /// Builds a tensor, checking that `data` holds `prod(shape)` values of `dtype`'s storage form.
    /// Integer values are wrapped into `dtype` and float values rounded to it, so the tensor holds
    /// exactly what a tensor of that ONNX type can hold.
    pub fn new(shape: Vec<usize>, dtype: DType, data: Data) -> Result<OTensor> {
        let n = checked_numel(&shape)?;
        if data.len() != n {
            bail!("shape {shape:?} needs {n} values, got {}", data.len());
        }
        let data = match (dtype, data) {
            (DType::F32, d @ Data::F32(_))
            | (DType::I64, d @ Data::I64(_))
            | (DType::Bool, d @ Data::Bool(_)) => d,
            (DType::F16 | DType::BF16, Data::F32(v)) => {
                Data::F32(v.into_iter().map(|x| dtype.round_float(x)).collect())
            }
            (DType::I32 | DType::U8, Data::I64(v)) => {
                Data::I64(v.into_iter().map(|x| dtype.wrap_int(x)).collect())
            }
            (dtype, d) => bail!("{dtype} values cannot be stored as {}", storage_name(&d)),
        };
        Ok(OTensor {
            shape,
            dtype,
            data: Arc::new(data),
        })
    }

    pub fn from_f32(shape: Vec<usize>, values: Vec<f32>) -> Result<OTensor> {
        OTensor::new(shape, DType::F32, Data::F32(values))
    }

    pub fn from_i64(shape: Vec<usize>, values: Vec<i64>) -> Result<OTensor> {
        OTensor::new(shape, DType::I64, Data::I64(values))
    }

    pub fn from_i32(shape: Vec<usize>, values: Vec<i32>) -> Result<OTensor> {
        OTensor::new(
            shape,
            DType::I32,
            Data::I64(values.into_iter().map(i64::from).collect()),
        )
    }

    pub fn from_bool(shape: Vec<usize>, values: Vec<bool>) -> Result<OTensor> {
        OTensor::new(shape, DType::Bool, Data::Bool(values))
    }

    pub fn scalar_f32(v: f32) -> OTensor {
        OTensor {
            shape: vec![],
            dtype: DType::F32,
            data: Arc::new(Data::F32(vec![v])),
        }
    }

    pub fn scalar_i64(v: i64) -> OTensor {
        OTensor {
            shape: vec![],
            dtype: DType::I64,
            data: Arc::new(Data::I64(vec![v])),
        }
    }

    /// Same values, another shape (element counts must agree).
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<OTensor> {
        if checked_numel(&shape)? != self.data.len() {
            bail!(
                "cannot view {:?} ({} elements) as {shape:?}",
                self.shape,
                self.data.len()
            );
        }
        Ok(OTensor {
            shape,
            dtype: self.dtype,
            data: self.data.clone(),
        })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn data(&self) -> &Data {
        &self.data
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Float values (f32, or f16/bf16 widened); an error for other types.
    pub fn f32s(&self) -> Result<&[f32]> {
        match &*self.data {
            Data::F32(v) => Ok(v),
            _ => bail!("expected a float tensor, got {}", self.dtype),
        }
    }

    /// Integer values; an error for other types.
    pub fn i64s(&self) -> Result<&[i64]> {
        match &*self.data {
            Data::I64(v) => Ok(v),
            _ => bail!("expected an integer tensor, got {}", self.dtype),
        }
    }

    pub fn bools(&self) -> Result<&[bool]> {
        match &*self.data {
            Data::Bool(v) => Ok(v),
            _ => bail!("expected a bool tensor, got {}", self.dtype),
        }
    }

    /// Every value as f64 (bool as 0/1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &*self.data {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Bool(v) => v.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect(),
        }
    }

    /// Checks that the public `shape` still matches the stored values.
    pub fn check(&self) -> Result<()> {
        let n = checked_numel(&self.shape)?;
        if n != self.data.len() {
            bail!(
                "tensor shape {:?} needs {n} values but holds {}",
                self.shape,
                self.data.len()
            );
        }
        Ok(())
    }
}

fn storage_name(d: &Data) -> &'static str {
    match d {
        Data::F32(_) => "f32",
        Data::I64(_) => "i64",
        Data::Bool(_) => "bool",
    }
}

/// Product of the dims, or an error when it overflows.
pub fn checked_numel(shape: &[usize]) -> Result<usize> {
    match shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
        Some(n) => Ok(n),
        None => bail!("shape {shape:?} has too many elements"),
    }
}

/// Row-major strides (in elements).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
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

/// numpy broadcasting of any number of shapes.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for (i, o) in out.iter_mut().enumerate() {
        // Dim `i` of the output is dim `i - (rank - len)` of each shape, when it has one.
        let mut dim: Option<usize> = None;
        for s in shapes {
            let Some(j) = (i + s.len()).checked_sub(rank) else {
                continue;
            };
            let d = s[j];
            dim = match dim {
                None | Some(1) => Some(d),
                Some(cur) if d == 1 || d == cur => Some(cur),
                Some(_) => bail!("shapes {shapes:?} do not broadcast"),
            };
        }
        *o = dim.unwrap_or(1);
    }
    Ok(out)
}

/// For every element of `out_shape` (row-major), the flat offset `base + sum(index[i] * step[i])`.
/// This is the single primitive behind broadcasting, transposes and slices: a strided view.
pub fn strided_offsets(out_shape: &[usize], base: isize, step: &[isize]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    // Odometer over the output index, last axis fastest, keeping
    // `off = base + sum(idx[a] * step[a])` up to date as each digit moves.
    let mut idx = vec![0usize; out_shape.len()];
    let mut off = base;
    for _ in 0..n {
        out.push(off as usize);
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            off += step[a];
            if idx[a] < out_shape[a] {
                break;
            }
            // This digit wraps to 0: undo its whole run.
            off -= step[a] * out_shape[a] as isize;
            idx[a] = 0;
        }
    }
    out
}

/// Offsets into a tensor of shape `in_shape` for every element of `out_shape`, which it broadcasts
/// to (numpy rules: right-aligned, size-1 dims repeat).
pub fn broadcast_offsets(in_shape: &[usize], out_shape: &[usize]) -> Result<Vec<usize>> {
    if in_shape.len() > out_shape.len() {
        bail!("shape {in_shape:?} does not broadcast to {out_shape:?}");
    }
    let lead = out_shape.len() - in_shape.len();
    let in_strides = strides(in_shape);
    let mut step = vec![0isize; out_shape.len()];
    for (j, (&d, &st)) in in_shape.iter().zip(&in_strides).enumerate() {
        let od = out_shape[lead + j];
        if d == od {
            step[lead + j] = st as isize;
        } else if d != 1 {
            bail!("shape {in_shape:?} does not broadcast to {out_shape:?}");
        }
    }
    Ok(strided_offsets(out_shape, 0, &step))
}

/// Calls `f` with every multi-index of `shape`, row-major.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        f(&idx);
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_shapes_and_offsets() {
        assert_eq!(broadcast_shapes(&[&[2, 1], &[3]]).unwrap(), vec![2, 3]);
        assert_eq!(
            broadcast_shapes(&[&[], &[4, 1], &[1, 5]]).unwrap(),
            vec![4, 5]
        );
        assert!(broadcast_shapes(&[&[2], &[3]]).is_err());
        // [2, 1] -> [2, 3]: each row repeats its single value.
        assert_eq!(
            broadcast_offsets(&[2, 1], &[2, 3]).unwrap(),
            vec![0, 0, 0, 1, 1, 1]
        );
        // [3] -> [2, 3]: the row repeats.
        assert_eq!(
            broadcast_offsets(&[3], &[2, 3]).unwrap(),
            vec![0, 1, 2, 0, 1, 2]
        );
        assert!(broadcast_offsets(&[2], &[3]).is_err());
    }

    #[test]
    fn constructors_check_counts_and_wrap() {
        assert!(OTensor::from_f32(vec![2, 2], vec![1.0; 3]).is_err());
        let t = OTensor::new(vec![2], DType::U8, Data::I64(vec![256 + 7, -1])).unwrap();
        assert_eq!(t.i64s().unwrap(), &[7, 255]);
        let h = OTensor::new(vec![1], DType::F16, Data::F32(vec![0.1])).unwrap();
        assert_eq!(h.f32s().unwrap(), &[half::f16::from_f32(0.1).to_f32()]);
        assert!(OTensor::new(vec![1], DType::I64, Data::F32(vec![0.0])).is_err());
    }

    #[test]
    fn strided_view_walks_row_major() {
        // Transpose of a [2, 3] matrix: out [3, 2], out[i][j] = in[j][i] at offset j*3 + i.
        assert_eq!(strided_offsets(&[3, 2], 0, &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(strided_offsets(&[], 5, &[]), vec![5]);
        assert!(strided_offsets(&[0, 2], 0, &[2, 1]).is_empty());
    }
}
