//! [`CudaBackend`]: the `Backend` primitives on the GPU. Float tensors (f32, f16, bf16) run on
//! device kernels (`kernels/ops.cu`: unary, broadcasting binary arithmetic, RMS norm, softmax,
//! strided copies for transpose / slice / expand / concat, gather) and MatMul through cuBLAS
//! (strided batched GEMM, f32 accumulation). The rest runs through the CPU backend on a host
//! copy: integer and bool tensors (shape arithmetic, masks: small, and what ORT also keeps on
//! the host), comparisons and logic, where, cast, reduce, trilu, and matmuls whose batch dims
//! broadcast unevenly. Each such call costs a download and an upload; the fused decode path
//! ([`super::llama`]) does not use this backend at all.

use std::sync::Arc;

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig, sys as cublas_sys};
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

use super::op_codes::{binary_code, unary_code};
use super::{Device, cu_err};
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BinaryOp, ReduceOp, SliceDim, UnaryOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor, strides};

const MAX_RANK: usize = 8;

/// A device tensor: shared storage, shape and element type (row-major, contiguous).
#[derive(Clone)]
pub struct CudaTensor {
    buf: Arc<CudaSlice<u8>>,
    shape: Vec<usize>,
    dtype: DType,
    /// The same values on the host, kept by `upload` for tensors of at most [`HOST_MIRROR`]
    /// elements: the shape, index and axis parameters that Reshape, Slice, Expand, Unsqueeze …
    /// read on the host. Without it every such read was a device→host copy that waits for the
    /// stream (a Slice 30 µs and a Reshape 15 µs of host time on the H200, most of a step of the
    /// generic executor). Sound because no kernel writes into an uploaded tensor: every op
    /// writes a fresh `alloc`, and a reshape shares the buffer and keeps the mirror.
    host: Option<Tensor>,
}

/// Tensors of at most this many elements keep a host copy at upload (see [`CudaTensor`]).
const HOST_MIRROR: usize = 64;

impl std::fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaTensor({} {:?})", self.dtype, self.shape)
    }
}

impl CudaTensor {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Mirrors `struct Strided` in kernels/ops.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Strided {
    n: i64,
    src_off: i64,
    dst_off: i64,
    rank: i32,
    pad: i32,
    shape: [i64; MAX_RANK],
    src_st: [i64; MAX_RANK],
    dst_st: [i64; MAX_RANK],
}

// SAFETY: `Strided` is `repr(C)` plain data with the layout of the C struct it is passed as.
unsafe impl DeviceRepr for Strided {}

impl Strided {
    fn new(shape: &[usize], src_st: &[i64], dst_st: &[i64]) -> Result<Strided> {
        if shape.len() > MAX_RANK {
            return Err(Error::msg(format!(
                "cuda: rank {} exceeds the kernels' limit of {MAX_RANK}",
                shape.len()
            )));
        }
        let mut s = Strided {
            n: shape.iter().product::<usize>() as i64,
            rank: shape.len() as i32,
            ..Default::default()
        };
        for (k, &d) in shape.iter().enumerate() {
            s.shape[k] = d as i64;
            s.src_st[k] = src_st[k];
            s.dst_st[k] = dst_st[k];
        }
        Ok(s)
    }
}

fn contiguous(shape: &[usize]) -> Vec<i64> {
    strides(shape).iter().map(|&s| s as i64).collect()
}

fn float_sfx(d: DType) -> Option<&'static str> {
    match d {
        DType::F32 => Some("f32"),
        DType::F16 => Some("f16"),
        DType::BF16 => Some("bf16"),
        _ => None,
    }
}

fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 65535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The GPU backend; see the module docs for what runs where.
pub struct CudaBackend {
    dev: Arc<Device>,
    blas: CudaBlas,
    host: CpuBackend,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("dev", &self.dev)
            .finish()
    }
}

impl CudaBackend {
    pub fn new() -> Result<CudaBackend> {
        let dev = Device::new()?;
        let blas = CudaBlas::new(dev.stream.clone()).map_err(cu_err("cannot create cuBLAS"))?;
        Ok(CudaBackend {
            dev,
            blas,
            host: CpuBackend::new(0)?,
        })
    }

    /// An output buffer, not zeroed: zeroing was one more launch (a memset) per op, a sixth of
    /// an elementwise op's host time on the generic executor. Every caller writes every
    /// element before the tensor is read: the elementwise, softmax, gather and RMSNorm kernels
    /// cover all `n` outputs, transpose / slice / expand copy every output element, concat's
    /// copies tile its output, and an empty tensor (one padding byte) is never read.
    fn alloc(&self, dtype: DType, shape: Vec<usize>) -> Result<CudaTensor> {
        let bytes = (shape.iter().product::<usize>() * dtype.size()).max(1);
        // SAFETY: uninitialised device memory is only ever written before it is read (above);
        // u8 has no invalid bit patterns.
        let buf = unsafe { self.dev.stream.alloc::<u8>(bytes) }.map_err(cu_err("alloc"))?;
        Ok(CudaTensor {
            buf: Arc::new(buf),
            shape,
            dtype,
            host: None,
        })
    }

    /// Runs `f` on the CPU backend over host copies of `xs` and uploads the result.
    fn on_host(
        &self,
        xs: &[&CudaTensor],
        f: impl FnOnce(&CpuBackend, &[Tensor]) -> Result<Tensor>,
    ) -> Result<CudaTensor> {
        let host = xs
            .iter()
            .map(|x| self.download(x))
            .collect::<Result<Vec<_>>>()?;
        self.upload(&f(&self.host, &host)?)
    }

    fn copy(&self, src: &CudaTensor, dst: &CudaTensor, s: Strided) -> Result<()> {
        if s.n == 0 {
            return Ok(());
        }
        let name = format!("copy_strided_{}", src.dtype.size());
        let f = self.dev.function("ops", &name)?;
        // SAFETY: `s` addresses only elements inside `src` and `dst` (built from their shapes
        // by the callers below); element size matches the kernel's.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*src.buf)
                .arg(&*dst.buf)
                .arg(&s)
                .launch(grid(s.n as usize))
                .map_err(cu_err(&name))?;
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn upload(&self, t: &Tensor) -> Result<CudaTensor> {
        let mut bytes = t.data().to_le_bytes();
        if bytes.is_empty() {
            bytes.push(0);
        }
        let buf = self
            .dev
            .stream
            .clone_htod(&bytes)
            .map_err(cu_err("upload"))?;
        Ok(CudaTensor {
            buf: Arc::new(buf),
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            host: (t.numel() <= HOST_MIRROR).then(|| t.clone()),
        })
    }

    fn download(&self, t: &CudaTensor) -> Result<Tensor> {
        if let Some(h) = &t.host {
            return Ok(h.clone());
        }
        let n = t.numel() * t.dtype.size();
        let mut bytes = vec![0u8; n];
        if n > 0 {
            self.dev
                .stream
                .memcpy_dtoh(&t.buf.slice(0..n), &mut bytes)
                .map_err(cu_err("download"))?;
        }
        Tensor::new(t.shape.clone(), Data::from_le_bytes(t.dtype, &bytes))
    }

    fn shape<'a>(&self, t: &'a CudaTensor) -> &'a [usize] {
        &t.shape
    }

    fn dtype(&self, t: &CudaTensor) -> DType {
        t.dtype
    }

    fn reshape(&self, x: &CudaTensor, shape: Vec<usize>) -> Result<CudaTensor> {
        if shape.iter().product::<usize>() != x.numel() {
            return Err(Error::msg(format!(
                "cannot reshape {:?} to {shape:?}",
                x.shape
            )));
        }
        let host = match &x.host {
            Some(h) => Some(h.reshape(shape.clone())?),
            None => None,
        };
        Ok(CudaTensor {
            buf: x.buf.clone(),
            shape,
            dtype: x.dtype,
            host,
        })
    }

    fn unary(&self, op: UnaryOp, x: &CudaTensor) -> Result<CudaTensor> {
        use UnaryOp::*;
        let (p, q) = match op {
            LeakyRelu(a) | Elu(a) => (a, 0.0),
            HardSigmoid { alpha, beta } => (alpha, beta),
            _ => (0.0, 0.0),
        };
        let (Some(sfx), Some(code)) = (float_sfx(x.dtype), unary_code(op)) else {
            return self.on_host(&[x], |cpu, h| cpu.unary(op, &h[0]));
        };
        let y = self.alloc(x.dtype, x.shape.clone())?;
        let n = x.numel() as i64;
        if n == 0 {
            return Ok(y);
        }
        let name = format!("unary_{sfx}");
        let f = self.dev.function("ops", &name)?;
        // SAFETY: x and y hold n elements of the kernel's storage type.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*x.buf)
                .arg(&*y.buf)
                .arg(&n)
                .arg(&code)
                .arg(&p)
                .arg(&q)
                .launch(grid(n as usize))
                .map_err(cu_err(&name))?;
        }
        Ok(y)
    }

    fn binary(&self, op: BinaryOp, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        let sfx = float_sfx(a.dtype).filter(|_| a.dtype == b.dtype);
        let rank = a.shape.len().max(b.shape.len());
        let (Some(sfx), Some(code), true) = (sfx, binary_code(op), rank <= MAX_RANK) else {
            return self.on_host(&[a, b], |cpu, h| cpu.binary(op, &h[0], &h[1]));
        };
        // Broadcast both to the output shape with 0 strides on size-1 / missing dims.
        let pad = |s: &[usize]| -> Vec<usize> {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (pa, pb) = (pad(&a.shape), pad(&b.shape));
        let mut out = Vec::with_capacity(rank);
        for k in 0..rank {
            let (x, y) = (pa[k], pb[k]);
            if x != y && x != 1 && y != 1 {
                return Err(Error::msg(format!(
                    "cannot broadcast {:?} with {:?}",
                    a.shape, b.shape
                )));
            }
            out.push(if x == 1 { y } else { x });
        }
        let bst = |p: &[usize]| -> Vec<i64> {
            contiguous(p)
                .iter()
                .zip(p.iter().zip(&out))
                .map(|(&s, (&d, &o))| if d == 1 && o != 1 { 0 } else { s })
                .collect()
        };
        let s = Strided::new(&out, &bst(&pa), &bst(&pb))?;
        let y = self.alloc(a.dtype, out)?;
        if s.n == 0 {
            return Ok(y);
        }
        let name = format!("binary_{sfx}");
        let f = self.dev.function("ops", &name)?;
        // SAFETY: the strides address elements inside a and b; y holds s.n elements.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*a.buf)
                .arg(&*b.buf)
                .arg(&*y.buf)
                .arg(&s)
                .arg(&code)
                .launch(grid(s.n as usize))
                .map_err(cu_err(&name))?;
        }
        Ok(y)
    }

    fn where_cond(&self, c: &CudaTensor, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        self.on_host(&[c, a, b], |cpu, h| cpu.where_cond(&h[0], &h[1], &h[2]))
    }

    fn cast(&self, x: &CudaTensor, to: DType) -> Result<CudaTensor> {
        if x.dtype == to {
            return Ok(x.clone());
        }
        self.on_host(&[x], |cpu, h| cpu.cast(&h[0], to))
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &CudaTensor,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<CudaTensor> {
        self.on_host(&[x], |cpu, h| cpu.reduce(op, &h[0], axes, keepdims))
    }

    fn softmax(&self, x: &CudaTensor, axis: usize, log: bool) -> Result<CudaTensor> {
        let Some(sfx) = float_sfx(x.dtype).filter(|_| axis < x.shape.len()) else {
            return self.on_host(&[x], |cpu, h| cpu.softmax(&h[0], axis, log));
        };
        let len = x.shape[axis];
        let inner: usize = x.shape[axis + 1..].iter().product();
        let outer: usize = x.shape[..axis].iter().product();
        let y = self.alloc(x.dtype, x.shape.clone())?;
        if len == 0 || inner * outer == 0 {
            return Ok(y);
        }
        let name = format!("softmax_{sfx}");
        let f = self.dev.function("ops", &name)?;
        let (len, inner64, logi) = (len as i32, inner as i64, log as i32);
        // SAFETY: one block per (outer, inner) pair reads and writes `len` elements each,
        // inside x and y.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*x.buf)
                .arg(&*y.buf)
                .arg(&len)
                .arg(&inner64)
                .arg(&logi)
                .launch(LaunchConfig {
                    grid_dim: ((outer * inner) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(cu_err(&name))?;
        }
        Ok(y)
    }

    fn matmul(&self, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let ok = a.dtype == b.dtype && float_sfx(a.dtype).is_some() && ra >= 2 && rb >= 2;
        let (m, k, k2, n) = if ok {
            (
                a.shape[ra - 2],
                a.shape[ra - 1],
                b.shape[rb - 2],
                b.shape[rb - 1],
            )
        } else {
            (0, 0, 1, 0)
        };
        let (ba, bb) = (
            &a.shape[..ra.saturating_sub(2)],
            &b.shape[..rb.saturating_sub(2)],
        );
        // Batch dims must be equal, or b plain 2-D (weights): one strided batched GEMM.
        let batch_ok = ba == bb || bb.is_empty();
        if !ok || k != k2 || !batch_ok || m * n * k == 0 {
            return self.on_host(&[a, b], |cpu, h| cpu.matmul(&h[0], &h[1]));
        }
        let batch: usize = ba.iter().product();
        let mut shape = ba.to_vec();
        shape.extend([m, n]);
        let ny: usize = shape.iter().product();
        let mut ybuf = self
            .dev
            .stream
            .alloc_zeros::<u8>(ny * a.dtype.size())
            .map_err(cu_err("alloc"))?;
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let stride_b = if bb.is_empty() { 0 } else { (k * n) as i64 };
        let dims = GemmDims {
            m: mi,
            n: ni,
            k: ki,
            batch: batch as i32,
            stride_a: stride_b,
            stride_b: (m * k) as i64,
            stride_c: (m * n) as i64,
        };
        let op = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
        let (na, nb) = (a.numel(), b.numel());
        let err = cu_err("cuBLAS gemm");
        // SAFETY: the views cover exactly the tensors' elements of the matching type; the
        // GEMM dims and strides stay inside them.
        unsafe {
            let yb = &mut ybuf;
            match a.dtype {
                DType::F32 => {
                    let (av, bv) = (a.buf.transmute::<f32>(na), b.buf.transmute::<f32>(nb));
                    let mut yv = yb.transmute_mut::<f32>(ny);
                    let (Some(av), Some(bv), Some(yv)) = (av, bv, yv.as_mut()) else {
                        return Err(Error::msg("cuda: matmul buffer sizes"));
                    };
                    self.blas
                        .gemm_strided_batched(dims.config(op, 1.0f32, 0.0), &bv, &av, yv)
                        .map_err(err)?;
                }
                DType::F16 => {
                    let (av, bv) = (
                        a.buf.transmute::<half::f16>(na),
                        b.buf.transmute::<half::f16>(nb),
                    );
                    let mut yv = yb.transmute_mut::<half::f16>(ny);
                    let (Some(av), Some(bv), Some(yv)) = (av, bv, yv.as_mut()) else {
                        return Err(Error::msg("cuda: matmul buffer sizes"));
                    };
                    let c = dims.config(op, half::f16::ONE, half::f16::ZERO);
                    self.blas
                        .gemm_strided_batched(c, &bv, &av, yv)
                        .map_err(err)?;
                }
                _ => {
                    let (av, bv) = (
                        a.buf.transmute::<half::bf16>(na),
                        b.buf.transmute::<half::bf16>(nb),
                    );
                    let mut yv = yb.transmute_mut::<half::bf16>(ny);
                    let (Some(av), Some(bv), Some(yv)) = (av, bv, yv.as_mut()) else {
                        return Err(Error::msg("cuda: matmul buffer sizes"));
                    };
                    let c = dims.config(op, half::bf16::ONE, half::bf16::ZERO);
                    self.blas
                        .gemm_strided_batched(c, &bv, &av, yv)
                        .map_err(err)?;
                }
            }
        }
        Ok(CudaTensor {
            buf: Arc::new(ybuf),
            shape,
            dtype: a.dtype,
            host: None,
        })
    }

    fn gather(&self, data: &CudaTensor, indices: &CudaTensor, axis: usize) -> Result<CudaTensor> {
        if axis >= data.shape.len() {
            return self.on_host(&[data, indices], |cpu, h| cpu.gather(&h[0], &h[1], axis));
        }
        let len = data.shape[axis] as i64;
        let idx = self.download(indices)?.to_i64_vec()?;
        let mut norm = Vec::with_capacity(idx.len());
        for &i in &idx {
            let j = if i < 0 { i + len } else { i };
            if j < 0 || j >= len {
                return Err(Error::msg(format!(
                    "gather index {i} out of range for axis {axis} of size {len}"
                )));
            }
            norm.push(j);
        }
        let mut shape = data.shape[..axis].to_vec();
        shape.extend_from_slice(&indices.shape);
        shape.extend_from_slice(&data.shape[axis + 1..]);
        let y = self.alloc(data.dtype, shape)?;
        let outer: usize = data.shape[..axis].iter().product();
        let inner: usize = data.shape[axis + 1..].iter().product();
        let total = outer * norm.len() * inner;
        if total == 0 {
            return Ok(y);
        }
        let dev_idx = self
            .dev
            .stream
            .clone_htod(&norm)
            .map_err(cu_err("upload indices"))?;
        let name = format!("gather_{}", data.dtype.size());
        let f = self.dev.function("ops", &name)?;
        let (o, ni, a, inn) = (outer as i64, norm.len() as i64, len, inner as i64);
        // SAFETY: indices were checked against the axis length; y holds outer*ni*inner elements.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*data.buf)
                .arg(&dev_idx)
                .arg(&*y.buf)
                .arg(&o)
                .arg(&ni)
                .arg(&a)
                .arg(&inn)
                .launch(grid(total))
                .map_err(cu_err(&name))?;
        }
        Ok(y)
    }

    fn transpose(&self, x: &CudaTensor, perm: &[usize]) -> Result<CudaTensor> {
        if x.shape.len() > MAX_RANK {
            return self.on_host(&[x], |cpu, h| cpu.transpose(&h[0], perm));
        }
        if perm.len() != x.shape.len() || perm.iter().any(|&p| p >= x.shape.len()) {
            return Err(Error::msg(format!(
                "transpose: perm {perm:?} for shape {:?}",
                x.shape
            )));
        }
        let st = contiguous(&x.shape);
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
        let src: Vec<i64> = perm.iter().map(|&p| st[p]).collect();
        let s = Strided::new(&shape, &src, &contiguous(&shape))?;
        let y = self.alloc(x.dtype, shape)?;
        self.copy(x, &y, s)?;
        Ok(y)
    }

    fn concat(&self, xs: &[&CudaTensor], axis: usize) -> Result<CudaTensor> {
        let first = xs.first().ok_or_else(|| Error::msg("concat of nothing"))?;
        if first.shape.len() > MAX_RANK {
            return self.on_host(xs, |cpu, h| cpu.concat(&h.iter().collect::<Vec<_>>(), axis));
        }
        let mut shape = first.shape.clone();
        if axis >= shape.len() {
            return Err(Error::msg(format!("concat axis {axis} out of range")));
        }
        shape[axis] = xs
            .iter()
            .map(|x| x.shape.get(axis).copied().unwrap_or(0))
            .sum();
        let y = self.alloc(first.dtype, shape.clone())?;
        let ost = contiguous(&shape);
        let mut at = 0usize;
        for x in xs {
            if x.dtype != first.dtype || x.shape.len() != shape.len() {
                return Err(Error::msg("concat inputs differ in type or rank"));
            }
            let mut s = Strided::new(&x.shape, &contiguous(&x.shape), &ost)?;
            s.dst_off = at as i64 * ost[axis];
            self.copy(x, &y, s)?;
            at += x.shape[axis];
        }
        Ok(y)
    }

    fn slice(&self, x: &CudaTensor, dims: &[SliceDim]) -> Result<CudaTensor> {
        if x.shape.len() > MAX_RANK {
            return self.on_host(&[x], |cpu, h| cpu.slice(&h[0], dims));
        }
        if dims.len() != x.shape.len() {
            return Err(Error::msg("slice: one SliceDim per axis"));
        }
        let st = contiguous(&x.shape);
        let shape: Vec<usize> = dims.iter().map(|d| d.len).collect();
        let src: Vec<i64> = dims
            .iter()
            .zip(&st)
            .map(|(d, &s)| d.step as i64 * s)
            .collect();
        let mut s = Strided::new(&shape, &src, &contiguous(&shape))?;
        s.src_off = dims
            .iter()
            .zip(&st)
            .map(|(d, &s)| if d.len == 0 { 0 } else { d.start as i64 * s })
            .sum();
        let y = self.alloc(x.dtype, shape)?;
        self.copy(x, &y, s)?;
        Ok(y)
    }

    fn expand(&self, x: &CudaTensor, shape: &[usize]) -> Result<CudaTensor> {
        // Tile lowers to expands of rank 2 x its input's; beyond the kernels' rank limit the
        // copy runs on the host.
        if shape.len() > MAX_RANK {
            return self.on_host(&[x], |cpu, h| cpu.expand(&h[0], shape));
        }
        if shape.len() < x.shape.len() {
            return Err(Error::msg("expand to a lower rank"));
        }
        let lead = shape.len() - x.shape.len();
        let st = contiguous(&x.shape);
        let mut src = vec![0i64; shape.len()];
        for (k, &d) in x.shape.iter().enumerate() {
            let o = shape[lead + k];
            if d != o && d != 1 {
                return Err(Error::msg(format!(
                    "cannot expand {:?} to {shape:?}",
                    x.shape
                )));
            }
            src[lead + k] = if d == 1 { 0 } else { st[k] };
        }
        let s = Strided::new(shape, &src, &contiguous(shape))?;
        let y = self.alloc(x.dtype, shape.to_vec())?;
        self.copy(x, &y, s)?;
        Ok(y)
    }

    fn trilu(&self, x: &CudaTensor, k: i64, upper: bool) -> Result<CudaTensor> {
        self.on_host(&[x], |cpu, h| cpu.trilu(&h[0], k, upper))
    }

    fn rms_norm(
        &self,
        x: &CudaTensor,
        scale: &CudaTensor,
        axis: usize,
        eps: f32,
    ) -> Result<CudaTensor> {
        let cols: usize = x.shape.get(axis..).map(|s| s.iter().product()).unwrap_or(0);
        let sfx = float_sfx(x.dtype).filter(|_| scale.dtype == x.dtype && scale.numel() == cols);
        let Some(sfx) = sfx.filter(|_| cols > 0) else {
            return self.on_host(&[x, scale], |cpu, h| cpu.rms_norm(&h[0], &h[1], axis, eps));
        };
        let rows = x.numel() / cols;
        let y = self.alloc(x.dtype, x.shape.clone())?;
        if rows == 0 {
            return Ok(y);
        }
        let name = format!("rms_norm_{sfx}");
        let f = self.dev.function("ops", &name)?;
        let c = cols as i32;
        // SAFETY: one block per row of `cols` elements inside x and y; scale has `cols`.
        unsafe {
            self.dev
                .stream
                .launch_builder(&f)
                .arg(&*x.buf)
                .arg(&*scale.buf)
                .arg(&*y.buf)
                .arg(&c)
                .arg(&eps)
                .launch(LaunchConfig {
                    grid_dim: (rows as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(cu_err(&name))?;
        }
        Ok(y)
    }
}

/// One batched row-major `C = A B` in cuBLAS's column-major terms (`C^T = B^T A^T`: cuBLAS sees
/// `b` as the left operand), for any element type.
struct GemmDims {
    m: i32,
    n: i32,
    k: i32,
    batch: i32,
    stride_a: i64,
    stride_b: i64,
    stride_c: i64,
}

impl GemmDims {
    fn config<T>(
        &self,
        op: cublas_sys::cublasOperation_t,
        one: T,
        zero: T,
    ) -> StridedBatchedConfig<T> {
        StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op,
                transb: op,
                m: self.n,
                n: self.m,
                k: self.k,
                alpha: one,
                lda: self.n,
                ldb: self.k,
                beta: zero,
                ldc: self.n,
            },
            batch_size: self.batch,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
        }
    }
}
