//! Elementwise kernels: unary functions, broadcasting binary ops and `where`, dtype casts.
//!
//! Float ops compute in f32. f32 and bf16 convert one element at a time inside the loop (bf16 is
//! a shift); f16 is widened and narrowed a block of 256 values at a time with `half`'s slice
//! conversions (`map1_blocks`, `map2_blocks`; why in `Float for f16`), with the same bits.

use half::{bf16, f16};

use super::broadcast::Bcast;
use super::{CpuBackend, Elem, Float, Int};
use crate::backend::{BinaryOp, UnaryOp};
use crate::bail;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor};

pub(crate) fn unary_name(op: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match op {
        Neg => "Neg",
        Abs => "Abs",
        Sqrt => "Sqrt",
        Reciprocal => "Reciprocal",
        Exp => "Exp",
        Log => "Log",
        Sigmoid => "Sigmoid",
        Tanh => "Tanh",
        Cos => "Cos",
        Sin => "Sin",
        Erf => "Erf",
        Floor => "Floor",
        Ceil => "Ceil",
        Round => "Round",
        Sign => "Sign",
        Relu => "Relu",
        Softplus => "Softplus",
        Silu => "Silu",
        LeakyRelu(_) => "LeakyRelu",
        Elu(_) => "Elu",
        HardSigmoid { .. } => "HardSigmoid",
        Not => "Not",
        IsNaN => "IsNaN",
    }
}

pub(crate) fn binary_name(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Add => "Add",
        Sub => "Sub",
        Mul => "Mul",
        Div => "Div",
        Pow => "Pow",
        Max => "Max",
        Min => "Min",
        Mod { .. } => "Mod",
        Equal => "Equal",
        Less => "Less",
        LessOrEqual => "LessOrEqual",
        Greater => "Greater",
        GreaterOrEqual => "GreaterOrEqual",
        And => "And",
        Or => "Or",
        Xor => "Xor",
    }
}

/// `f` over every element of `x`, in parallel chunks when large.
fn map1<A: Copy + Sync, O: Copy + Default + Send>(
    be: &CpuBackend,
    x: &[A],
    f: impl Fn(A) -> O + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); x.len()];
    be.for_chunks(&mut out, 1, |off, chunk| {
        let src = &x[off..off + chunk.len()];
        for (o, &v) in chunk.iter_mut().zip(src) {
            *o = f(v);
        }
    });
    out
}

/// Elements per block of the blockwise kernels (1 KiB of f32 per buffer, on the stack).
const BLOCK: usize = 256;

/// The blockwise kernels' `K` block buffers, at the start of a 4 KiB page of the stack.
///
/// Where in its page a buffer lies decides how fast the f16 add runs: on the stack's own place,
/// which the kernel draws per process in 16-byte steps, `add/f16/*` ran from 0.89× to 1.17× its
/// median by offset, and 5.3-9.1× at two offsets in 256 (every process at them, none
/// elsewhere), the offset explaining 99 % of the spread between processes
/// (an Intel Xeon VM, harness/eval/results/noise/f16-placement/; the buffers are written 32 bytes at a time and
/// read back beside the heap buffers they fill and drain). Aligned to the page, they have one
/// place in every process and thread, so the kernel's speed is one number, not a draw.
#[repr(C, align(4096))]
struct Blocks<const K: usize>([[f32; BLOCK]; K]);

impl<const K: usize> Blocks<K> {
    fn new() -> Self {
        Blocks([[0.0; BLOCK]; K])
    }
}

/// [`map1`] for a float `f` computed in f32, a block of [`BLOCK`] values at a time: widen the
/// block, apply `f`, narrow the results ([`Float::BLOCKWISE`] types).
fn map1_blocks<T: Float>(be: &CpuBackend, x: &[T], f: impl Fn(f32) -> f32 + Sync) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    be.for_chunks(&mut out, 1, |off, chunk| {
        let mut blocks = Blocks::<1>::new();
        let [buf] = &mut blocks.0;
        for (i, dst) in chunk.chunks_mut(BLOCK).enumerate() {
            let (src, b) = (&x[off + i * BLOCK..][..dst.len()], &mut buf[..dst.len()]);
            T::widen(src, b);
            for v in b.iter_mut() {
                *v = f(*v);
            }
            T::narrow(b, dst);
        }
    });
    out
}

/// [`map2`] for a float `f` computed in f32, blockwise as [`map1_blocks`]: each contiguous run
/// of the broadcast is widened, combined and narrowed a block at a time (a broadcast scalar is
/// widened once; a strided run goes element by element).
fn map2_blocks<T: Float>(
    be: &CpuBackend,
    bc: &Bcast<2>,
    a: &[T],
    b: &[T],
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); bc.numel()];
    let [sa, sb] = bc.inner_strides();
    be.for_chunks(&mut out, 1, |start, chunk| {
        let mut blocks = Blocks::<2>::new();
        let [xa, xb] = &mut blocks.0;
        bc.runs(start, start + chunk.len(), |pos, [oa, ob], len| {
            let dst = &mut chunk[pos - start..pos - start + len];
            match (sa, sb) {
                (1, 1) | (1, 0) | (0, 1) if len > 0 => {
                    // A broadcast operand (stride 0) is one value, widened once.
                    let (ya, yb) = (a[oa].to_f32(), b[ob].to_f32());
                    for (i, d) in dst.chunks_mut(BLOCK).enumerate() {
                        let (n, at) = (d.len(), i * BLOCK);
                        let (xa, xb) = (&mut xa[..n], &mut xb[..n]);
                        match (sa, sb) {
                            (1, 1) => {
                                T::widen(&a[oa + at..oa + at + n], xa);
                                T::widen(&b[ob + at..ob + at + n], xb);
                                for (x, &y) in xa.iter_mut().zip(xb.iter()) {
                                    *x = f(*x, y);
                                }
                            }
                            (1, _) => {
                                T::widen(&a[oa + at..oa + at + n], xa);
                                for x in xa.iter_mut() {
                                    *x = f(*x, yb);
                                }
                            }
                            _ => {
                                T::widen(&b[ob + at..ob + at + n], xb);
                                for (x, &y) in xa.iter_mut().zip(xb.iter()) {
                                    *x = f(ya, y);
                                }
                            }
                        }
                        T::narrow(xa, d);
                    }
                }
                (sa, sb) => {
                    for (j, o) in dst.iter_mut().enumerate() {
                        *o = T::from_f32(f(a[oa + j * sa].to_f32(), b[ob + j * sb].to_f32()));
                    }
                }
            }
        });
    });
    out
}

/// `f` over the broadcast of `a` and `b`, one tight loop per contiguous run.
fn map2<A: Copy + Sync, O: Copy + Default + Send>(
    be: &CpuBackend,
    bc: &Bcast<2>,
    a: &[A],
    b: &[A],
    f: impl Fn(A, A) -> O + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); bc.numel()];
    let [sa, sb] = bc.inner_strides();
    be.for_chunks(&mut out, 1, |start, chunk| {
        bc.runs(start, start + chunk.len(), |pos, [oa, ob], len| {
            let dst = &mut chunk[pos - start..pos - start + len];
            match (sa, sb) {
                (1, 1) => {
                    for ((o, &x), &y) in dst.iter_mut().zip(&a[oa..oa + len]).zip(&b[ob..ob + len])
                    {
                        *o = f(x, y);
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, &x) in dst.iter_mut().zip(&a[oa..oa + len]) {
                        *o = f(x, y);
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, &y) in dst.iter_mut().zip(&b[ob..ob + len]) {
                        *o = f(x, y);
                    }
                }
                (0, 0) => dst.fill(f(a[oa], b[ob])),
                (sa, sb) => {
                    for (j, o) in dst.iter_mut().enumerate() {
                        *o = f(a[oa + j * sa], b[ob + j * sb]);
                    }
                }
            }
        });
    });
    out
}

pub(super) fn unary(be: &CpuBackend, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let data = match x.data() {
        Data::F32(v) => unary_float(be, op, v)?,
        Data::F16(v) => unary_float(be, op, v)?,
        Data::BF16(v) => unary_float(be, op, v)?,
        Data::I64(v) => unary_int(be, op, v)?,
        Data::I32(v) => unary_int(be, op, v)?,
        Data::U8(v) => unary_int(be, op, v)?,
        Data::Bool(v) => match op {
            UnaryOp::Not => Data::Bool(map1(be, v, |b| !b)),
            _ => bail!("{}: unsupported dtype bool", unary_name(op)),
        },
    };
    Ok(Tensor::from_parts(x.shape().to_vec(), data))
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn unary_float<T: Float>(be: &CpuBackend, op: UnaryOp, v: &[T]) -> Result<Data> {
    use UnaryOp::*;
    macro_rules! m {
        (|$x:ident| $e:expr) => {
            if T::BLOCKWISE {
                T::wrap(map1_blocks(be, v, |$x: f32| $e))
            } else {
                T::wrap(map1(be, v, |t: T| {
                    let $x = t.to_f32();
                    T::from_f32($e)
                }))
            }
        };
    }
    Ok(match op {
        Neg => m!(|x| -x),
        Abs => m!(|x| x.abs()),
        Sqrt => m!(|x| x.sqrt()),
        Reciprocal => m!(|x| 1.0 / x),
        Exp => m!(|x| x.exp()),
        Log => m!(|x| x.ln()),
        Sigmoid => m!(|x| sigmoid(x)),
        Tanh => m!(|x| x.tanh()),
        Cos => m!(|x| x.cos()),
        Sin => m!(|x| x.sin()),
        Erf => m!(|x| erf(x as f64) as f32),
        Floor => m!(|x| x.floor()),
        Ceil => m!(|x| x.ceil()),
        Round => m!(|x| x.round_ties_even()),
        Sign => m!(|x| if x > 0.0 {
            1.0
        } else if x < 0.0 {
            -1.0
        } else {
            x
        }),
        Relu => m!(|x| if x < 0.0 { 0.0 } else { x }),
        // max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|.
        Softplus => m!(|x| x.max(0.0) + (-x.abs()).exp().ln_1p()),
        Silu => m!(|x| x * sigmoid(x)),
        LeakyRelu(alpha) => m!(|x| if x < 0.0 { alpha * x } else { x }),
        Elu(alpha) => m!(|x| if x < 0.0 { alpha * x.exp_m1() } else { x }),
        HardSigmoid { alpha, beta } => m!(|x| (alpha * x + beta).clamp(0.0, 1.0)),
        IsNaN => Data::Bool(map1(be, v, |t: T| t.to_f32().is_nan())),
        Not => bail!("Not: unsupported dtype {}", T::DTYPE),
    })
}

fn unary_int<T: Int>(be: &CpuBackend, op: UnaryOp, v: &[T]) -> Result<Data> {
    use UnaryOp::*;
    macro_rules! m {
        (|$x:ident| $e:expr) => {
            T::wrap(map1(be, v, |t: T| {
                let $x = t.to_i64();
                T::from_i64($e)
            }))
        };
    }
    Ok(match op {
        Neg if T::SIGNED => m!(|x| x.wrapping_neg()),
        Abs => m!(|x| x.wrapping_abs()),
        Sign => m!(|x| x.signum()),
        Relu => m!(|x| x.max(0)),
        _ => bail!("{}: unsupported dtype {}", unary_name(op), T::DTYPE),
    })
}

/// erf in f64: for |x| < 3 the series `2/sqrt(pi) exp(-x^2) sum (2x^2)^n x / (2n+1)!!` (positive
/// terms, no cancellation; relative error ~1e-16); beyond, `1 - erfc` with erfc's continued
/// fraction `exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))` (erfc(3) ~ 2e-5,
/// so its error is far below f32 resolution of the result).
pub(crate) fn erf(x: f64) -> f64 {
    const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 3.0 {
        let x2 = a * a;
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        while term > sum * 1e-17 {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            sum += term;
        }
        FRAC_2_SQRT_PI * (-x2).exp() * sum
    } else if a < 6.0 {
        let mut t = a;
        for n in (1..=40).rev() {
            t = a + (n as f64 * 0.5) / t;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
    } else {
        1.0
    };
    r.copysign(x)
}

pub(super) fn binary(be: &CpuBackend, op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let name = binary_name(op);
    if a.dtype() != b.dtype() {
        bail!("{name}: dtype mismatch {} vs {}", a.dtype(), b.dtype());
    }
    let bc = Bcast::new([a.shape(), b.shape()]).ok_or_else(|| {
        Error::msg(format!(
            "{name}: cannot broadcast shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        ))
    })?;
    super::out_numel(name, bc.out_shape())?;
    let data = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => binary_float(be, op, &bc, x, y)?,
        (Data::F16(x), Data::F16(y)) => binary_float(be, op, &bc, x, y)?,
        (Data::BF16(x), Data::BF16(y)) => binary_float(be, op, &bc, x, y)?,
        (Data::I64(x), Data::I64(y)) => binary_int(be, op, &bc, x, y)?,
        (Data::I32(x), Data::I32(y)) => binary_int(be, op, &bc, x, y)?,
        (Data::U8(x), Data::U8(y)) => binary_int(be, op, &bc, x, y)?,
        (Data::Bool(x), Data::Bool(y)) => binary_bool(be, op, &bc, x, y)?,
        _ => bail!("{name}: dtype mismatch {} vs {}", a.dtype(), b.dtype()),
    };
    Ok(Tensor::from_parts(bc.out_shape().to_vec(), data))
}

/// NaN-propagating max and min (numpy `maximum`/`minimum`).
#[inline(always)]
fn fmax(a: f32, b: f32) -> f32 {
    if a >= b || a.is_nan() { a } else { b }
}

#[inline(always)]
fn fmin(a: f32, b: f32) -> f32 {
    if a <= b || a.is_nan() { a } else { b }
}

fn binary_float<T: Float>(
    be: &CpuBackend,
    op: BinaryOp,
    bc: &Bcast<2>,
    a: &[T],
    b: &[T],
) -> Result<Data> {
    use BinaryOp::*;
    macro_rules! m {
        (|$x:ident, $y:ident| $e:expr) => {
            if T::BLOCKWISE {
                T::wrap(map2_blocks(be, bc, a, b, |$x: f32, $y: f32| $e))
            } else {
                T::wrap(map2(be, bc, a, b, |p: T, q: T| {
                    let ($x, $y) = (p.to_f32(), q.to_f32());
                    T::from_f32($e)
                }))
            }
        };
    }
    macro_rules! pred {
        (|$x:ident, $y:ident| $e:expr) => {
            Data::Bool(map2(be, bc, a, b, |p: T, q: T| {
                let ($x, $y) = (p.to_f32(), q.to_f32());
                $e
            }))
        };
    }
    Ok(match op {
        Add => m!(|x, y| x + y),
        Sub => m!(|x, y| x - y),
        Mul => m!(|x, y| x * y),
        Div => m!(|x, y| x / y),
        Pow => m!(|x, y| x.powf(y)),
        Max => m!(|x, y| fmax(x, y)),
        Min => m!(|x, y| fmin(x, y)),
        Mod { fmod: true } => m!(|x, y| x % y),
        Mod { fmod: false } => m!(|x, y| {
            let r = x % y;
            if r != 0.0 && (r < 0.0) != (y < 0.0) {
                r + y
            } else {
                r
            }
        }),
        Equal => pred!(|x, y| x == y),
        Less => pred!(|x, y| x < y),
        LessOrEqual => pred!(|x, y| x <= y),
        Greater => pred!(|x, y| x > y),
        GreaterOrEqual => pred!(|x, y| x >= y),
        And | Or | Xor => bail!("{}: unsupported dtype {}", binary_name(op), T::DTYPE),
    })
}

/// `base^exp` with wrapping multiplication; negative exponents truncate like `1 / base^-exp`.
fn ipow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut acc, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    acc
}

fn binary_int<T: Int>(
    be: &CpuBackend,
    op: BinaryOp,
    bc: &Bcast<2>,
    a: &[T],
    b: &[T],
) -> Result<Data> {
    use BinaryOp::*;
    macro_rules! m {
        (|$x:ident, $y:ident| $e:expr) => {
            T::wrap(map2(be, bc, a, b, |p: T, q: T| {
                let ($x, $y) = (p.to_i64(), q.to_i64());
                T::from_i64($e)
            }))
        };
    }
    macro_rules! pred {
        (|$x:ident, $y:ident| $e:expr) => {
            Data::Bool(map2(be, bc, a, b, |p: T, q: T| {
                let ($x, $y) = (p.to_i64(), q.to_i64());
                $e
            }))
        };
    }
    if matches!(op, Div | Mod { .. }) && bc.numel() > 0 && b.iter().any(|&v| v.to_i64() == 0) {
        bail!(
            "{}: integer division by zero ({})",
            binary_name(op),
            T::DTYPE
        );
    }
    Ok(match op {
        Add => m!(|x, y| x.wrapping_add(y)),
        Sub => m!(|x, y| x.wrapping_sub(y)),
        Mul => m!(|x, y| x.wrapping_mul(y)),
        // Checked above: y != 0. wrapping_div truncates toward zero.
        Div => m!(|x, y| if y == 0 { 0 } else { x.wrapping_div(y) }),
        Pow => m!(|x, y| ipow(x, y)),
        Max => m!(|x, y| x.max(y)),
        Min => m!(|x, y| x.min(y)),
        Mod { fmod: true } => m!(|x, y| if y == 0 { 0 } else { x.wrapping_rem(y) }),
        Mod { fmod: false } => m!(|x, y| {
            let r = if y == 0 { 0 } else { x.wrapping_rem(y) };
            if r != 0 && (r < 0) != (y < 0) {
                r + y
            } else {
                r
            }
        }),
        Equal => pred!(|x, y| x == y),
        Less => pred!(|x, y| x < y),
        LessOrEqual => pred!(|x, y| x <= y),
        Greater => pred!(|x, y| x > y),
        GreaterOrEqual => pred!(|x, y| x >= y),
        And | Or | Xor => bail!("{}: unsupported dtype {}", binary_name(op), T::DTYPE),
    })
}

fn binary_bool(
    be: &CpuBackend,
    op: BinaryOp,
    bc: &Bcast<2>,
    a: &[bool],
    b: &[bool],
) -> Result<Data> {
    use BinaryOp::*;
    let out = match op {
        And => map2(be, bc, a, b, |x, y| x & y),
        Or => map2(be, bc, a, b, |x, y| x | y),
        Xor => map2(be, bc, a, b, |x, y| x ^ y),
        Equal => map2(be, bc, a, b, |x, y| x == y),
        _ => bail!("{}: unsupported dtype bool", binary_name(op)),
    };
    Ok(Data::Bool(out))
}

pub(super) fn where_cond(be: &CpuBackend, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let Data::Bool(c) = cond.data() else {
        bail!("Where: condition must be bool, got {}", cond.dtype());
    };
    if a.dtype() != b.dtype() {
        bail!("Where: dtype mismatch {} vs {}", a.dtype(), b.dtype());
    }
    let bc = Bcast::new([cond.shape(), a.shape(), b.shape()]).ok_or_else(|| {
        Error::msg(format!(
            "Where: cannot broadcast shapes {:?}, {:?} and {:?}",
            cond.shape(),
            a.shape(),
            b.shape()
        ))
    })?;
    super::out_numel("Where", bc.out_shape())?;
    let data = with_dtype!(a.dtype(), T => {
        let x = super::elems::<T>("Where", a)?;
        let y = super::elems::<T>("Where", b)?;
        T::wrap(select(be, &bc, c, x, y))
    });
    Ok(Tensor::from_parts(bc.out_shape().to_vec(), data))
}

fn select<T: Elem>(be: &CpuBackend, bc: &Bcast<3>, c: &[bool], a: &[T], b: &[T]) -> Vec<T> {
    let mut out = vec![T::default(); bc.numel()];
    let [sc, sa, sb] = bc.inner_strides();
    be.for_chunks(&mut out, 1, |start, chunk| {
        bc.runs(start, start + chunk.len(), |pos, [oc, oa, ob], len| {
            let dst = &mut chunk[pos - start..pos - start + len];
            if (sc, sa, sb) == (1, 1, 1) {
                let it = c[oc..oc + len]
                    .iter()
                    .zip(&a[oa..oa + len])
                    .zip(&b[ob..ob + len]);
                for (o, ((&c, &x), &y)) in dst.iter_mut().zip(it) {
                    *o = if c { x } else { y };
                }
            } else {
                for (j, o) in dst.iter_mut().enumerate() {
                    *o = if c[oc + j * sc] {
                        a[oa + j * sa]
                    } else {
                        b[ob + j * sb]
                    };
                }
            }
        });
    });
    out
}

pub(super) fn cast(be: &CpuBackend, x: &Tensor, to: DType) -> Result<Tensor> {
    if x.dtype() == to {
        return Ok(x.clone());
    }
    let data = match x.data() {
        Data::F32(v) => from_f32s(be, v, to),
        Data::F16(v) => from_f32s(be, v, to),
        Data::BF16(v) => from_f32s(be, v, to),
        Data::I64(v) => from_i64s(be, v, to),
        Data::I32(v) => from_i64s(be, v, to),
        Data::U8(v) => from_i64s(be, v, to),
        Data::Bool(v) => from_i64s(be, v, to),
    };
    Ok(Tensor::from_parts(x.shape().to_vec(), data))
}

/// A value every stored type can be read as: floats through f32, the rest through i64.
trait CastSrc: Copy + Sync {
    type Via: Copy;
    fn via(self) -> Self::Via;
}

macro_rules! cast_src {
    ($via:ty: $($t:ty => |$x:ident| $e:expr),*) => {
        $(impl CastSrc for $t {
            type Via = $via;
            #[inline(always)]
            fn via(self) -> $via {
                let $x = self;
                $e
            }
        })*
    };
}

cast_src!(f32: f32 => |x| x, f16 => |x| x.to_f32(), bf16 => |x| x.to_f32());
cast_src!(i64: i64 => |x| x, i32 => |x| x as i64, u8 => |x| x as i64, bool => |x| x as i64);

/// Casts float sources. `as` truncates toward zero, saturates, and maps NaN to 0.
fn from_f32s<S: CastSrc<Via = f32>>(be: &CpuBackend, v: &[S], to: DType) -> Data {
    match to {
        DType::F32 => Data::F32(map1(be, v, |s| s.via())),
        DType::F16 => Data::F16(map1(be, v, |s| f16::from_f32(s.via()))),
        DType::BF16 => Data::BF16(map1(be, v, |s| bf16::from_f32(s.via()))),
        DType::I64 => Data::I64(map1(be, v, |s| s.via() as i64)),
        DType::I32 => Data::I32(map1(be, v, |s| s.via() as i32)),
        DType::U8 => Data::U8(map1(be, v, |s| s.via() as u8)),
        DType::Bool => Data::Bool(map1(be, v, |s| s.via() != 0.0)),
    }
}

/// Casts integer and bool sources. Narrowing integer casts wrap (two's complement), as numpy.
fn from_i64s<S: CastSrc<Via = i64>>(be: &CpuBackend, v: &[S], to: DType) -> Data {
    match to {
        DType::F32 => Data::F32(map1(be, v, |s| s.via() as f32)),
        DType::F16 => Data::F16(map1(be, v, |s| f16::from_f32(s.via() as f32))),
        DType::BF16 => Data::BF16(map1(be, v, |s| bf16::from_f32(s.via() as f32))),
        DType::I64 => Data::I64(map1(be, v, |s| s.via())),
        DType::I32 => Data::I32(map1(be, v, |s| s.via() as i32)),
        DType::U8 => Data::U8(map1(be, v, |s| s.via() as u8)),
        DType::Bool => Data::Bool(map1(be, v, |s| s.via() != 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::test_util::{be, close, f32t};

    fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::i64(shape, v.to_vec()).unwrap()
    }

    fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
        Tensor::new(shape.to_vec(), Data::Bool(v.to_vec())).unwrap()
    }

    fn un(op: UnaryOp, v: &[f32]) -> Vec<f32> {
        be().unary(op, &f32t(&[v.len()], v)).unwrap().to_f32_vec()
    }

    #[test]
    fn unary_float_ops() {
        use UnaryOp::*;
        close(&un(Neg, &[1.0, -2.0]), &[-1.0, 2.0], 0.0);
        close(&un(Abs, &[-1.5, 2.0]), &[1.5, 2.0], 0.0);
        close(&un(Sqrt, &[4.0, 2.25]), &[2.0, 1.5], 0.0);
        close(&un(Reciprocal, &[4.0, -0.5]), &[0.25, -2.0], 0.0);
        close(&un(Exp, &[0.0, 1.0]), &[1.0, std::f32::consts::E], 1e-6);
        close(&un(Log, &[1.0, std::f32::consts::E]), &[0.0, 1.0], 1e-6);
        close(
            &un(Sigmoid, &[0.0, 2.0, -2.0]),
            &[0.5, 0.880797, 0.119203],
            1e-6,
        );
        close(&un(Sigmoid, &[-200.0, 200.0]), &[0.0, 1.0], 0.0);
        close(&un(Tanh, &[0.0, 1.0]), &[0.0, 0.7615942], 1e-6);
        close(&un(Cos, &[0.0, std::f32::consts::PI]), &[1.0, -1.0], 1e-6);
        close(
            &un(Sin, &[0.0, std::f32::consts::FRAC_PI_2]),
            &[0.0, 1.0],
            1e-6,
        );
        close(&un(Floor, &[1.5, -1.5]), &[1.0, -2.0], 0.0);
        close(&un(Ceil, &[1.5, -1.5]), &[2.0, -1.0], 0.0);
        close(
            &un(Round, &[0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6]),
            &[0., 2., 2., -0., -2., 2., 3.],
            0.0,
        );
        close(
            &un(Sign, &[-3.0, 0.0, 2.0, f32::NAN]),
            &[-1.0, 0.0, 1.0, f32::NAN],
            0.0,
        );
        close(&un(Relu, &[-1.0, 0.0, 3.0]), &[0.0, 0.0, 3.0], 0.0);
        close(
            &un(Softplus, &[0.0, 100.0, -100.0]),
            &[std::f32::consts::LN_2, 100.0, 0.0],
            1e-6,
        );
        close(
            &un(Silu, &[0.0, 1.0, -1.0]),
            &[0.0, 0.7310586, -0.26894143],
            1e-6,
        );
        close(&un(LeakyRelu(0.1), &[-2.0, 3.0]), &[-0.2, 3.0], 1e-7);
        close(
            &un(Elu(2.0), &[-1.0, 3.0]),
            &[2.0 * (-0.63212055), 3.0],
            1e-6,
        );
        close(
            &un(
                HardSigmoid {
                    alpha: 0.2,
                    beta: 0.5,
                },
                &[-5.0, 0.0, 1.0, 5.0],
            ),
            &[0.0, 0.5, 0.7, 1.0],
            1e-7,
        );
        let nan = be().unary(IsNaN, &f32t(&[2], &[f32::NAN, 1.0])).unwrap();
        assert_eq!(nan.data(), &Data::Bool(vec![true, false]));
    }

    #[test]
    fn erf_matches_reference_values() {
        // Reference values from libm's erf (Python `math.erf`).
        let cases = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (-0.5, -0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (2.99, 0.9999764743969194),
            (3.0, 0.9999779095030014),
            (3.0001, 0.9999779234241298),
            (5.0, 0.9999999999984626),
            (3.5, 0.9999992569016276),
            (-4.0, -0.9999999845827421),
            (10.0, 1.0),
        ];
        for (x, want) in cases {
            let got = erf(x);
            assert!((got - want).abs() < 1e-12, "erf({x}) = {got}, want {want}");
        }
        let got = un(UnaryOp::Erf, &[0.5, -1.0, 3.0]);
        close(&got, &[0.5204999, -0.8427008, 0.9999779], 1e-7);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn unary_half_types_round_back() {
        let x = Tensor::new(
            vec![3],
            Data::F16(vec![
                f16::from_f32(1.0),
                f16::from_f32(4.0),
                f16::from_f32(-2.0),
            ]),
        )
        .unwrap();
        let y = be().unary(UnaryOp::Sqrt, &x).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        close(&y.to_f32_vec(), &[1.0, 2.0, f32::NAN], 0.0);
        let x = Tensor::new(
            vec![2],
            Data::BF16(vec![bf16::from_f32(1.0), bf16::from_f32(-3.0)]),
        )
        .unwrap();
        let y = be().unary(UnaryOp::Exp, &x).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        // bf16 keeps 8 significant bits: e = 2.71875 after rounding.
        assert_eq!(
            y.to_f32_vec(),
            vec![2.71875, bf16::from_f32((-3.0f32).exp()).to_f32()]
        );
    }

    #[test]
    fn unary_integer_and_bool() {
        use UnaryOp::*;
        let x = i64t(&[4], &[-3, 0, 5, i64::MIN]);
        let y = be().unary(Neg, &x).unwrap();
        assert_eq!(y.as_i64().unwrap(), &[3, 0, -5, i64::MIN]);
        assert_eq!(
            be().unary(Abs, &x).unwrap().as_i64().unwrap(),
            &[3, 0, 5, i64::MIN]
        );
        assert_eq!(
            be().unary(Sign, &x).unwrap().as_i64().unwrap(),
            &[-1, 0, 1, -1]
        );
        assert_eq!(
            be().unary(Relu, &x).unwrap().as_i64().unwrap(),
            &[0, 0, 5, 0]
        );
        let x = Tensor::new(vec![2], Data::I32(vec![-7, 7])).unwrap();
        assert_eq!(be().unary(Abs, &x).unwrap().data(), &Data::I32(vec![7, 7]));
        let u = Tensor::new(vec![2], Data::U8(vec![0, 200])).unwrap();
        assert_eq!(be().unary(Sign, &u).unwrap().data(), &Data::U8(vec![0, 1]));
        let err = be().unary(Neg, &u).unwrap_err().to_string();
        assert_eq!(err, "Neg: unsupported dtype u8");
        let err = be().unary(Sqrt, &x).unwrap_err().to_string();
        assert_eq!(err, "Sqrt: unsupported dtype i32");
        let b = boolt(&[2], &[true, false]);
        assert_eq!(
            be().unary(Not, &b).unwrap().data(),
            &Data::Bool(vec![false, true])
        );
        let err = be().unary(Exp, &b).unwrap_err().to_string();
        assert_eq!(err, "Exp: unsupported dtype bool");
        let err = be()
            .unary(Not, &f32t(&[1], &[1.0]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Not: unsupported dtype f32");
    }

    fn bin(op: BinaryOp, a: &Tensor, b: &Tensor) -> Tensor {
        be().binary(op, a, b).unwrap()
    }

    #[test]
    fn block_buffers_start_a_page_wherever_the_stack_is() {
        // The invariant `Blocks` is for: one place within a page in every process and thread
        // (the f16 kernels' speed depended on it), however deep the stack is when it is made.
        fn at_depth(d: usize) -> Vec<usize> {
            let b = Blocks::<2>::new();
            let mut here = vec![
                b.0[0].as_ptr() as usize % 4096,
                b.0[1].as_ptr() as usize % 4096,
            ];
            if d > 0 {
                here.extend(at_depth(d - 1));
            }
            std::hint::black_box(here)
        }
        let got = at_depth(5);
        assert_eq!(got.len(), 12);
        for pair in got.chunks(2) {
            assert_eq!(pair, [0, BLOCK * 4]);
        }
        let other = std::thread::spawn(|| at_depth(0)).join().unwrap();
        assert_eq!(other, [0, BLOCK * 4]);
    }

    /// f16 runs blockwise (`map1_blocks`, `map2_blocks`): the same bits as converting one
    /// element at a time, across block and chunk boundaries, for every broadcast pattern, on
    /// one and two threads, with NaN, infinities, zeros and subnormals among the values.
    #[test]
    fn f16_blocks_give_the_bits_of_one_element_at_a_time() {
        use BinaryOp::*;
        let special = [
            f32::NAN,
            f32::INFINITY,
            -0.0,
            0.0,
            6e-8,
            -3e-5,
            65504.0,
            1e5,
        ];
        let vals = |n: usize, seed: u32| -> Vec<f16> {
            (0..n)
                .map(|i| {
                    let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761);
                    if h.is_multiple_of(17) {
                        f16::from_f32(special[(h >> 8) as usize % special.len()])
                    } else {
                        f16::from_f32(((h >> 8) % 20001) as f32 / 1000.0 - 10.0)
                    }
                })
                .collect()
        };
        let same = |got: &Tensor, want: &[f16]| {
            let Data::F16(g) = got.data() else {
                panic!("not f16")
            };
            assert_eq!(g.len(), want.len());
            for (i, (x, y)) in g.iter().zip(want).enumerate() {
                assert!(
                    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                    "element {i}: {x} vs {y}"
                );
            }
        };
        // numpy broadcasting of a [rows, cols] result by hand.
        let at = |v: &[f16], shape: &[usize], i: usize, j: usize| -> f32 {
            match shape {
                [_] => v[0].to_f32(),
                [r, c] => v[if *r == 1 { 0 } else { i } * c + if *c == 1 { 0 } else { j }].to_f32(),
                _ => unreachable!(),
            }
        };
        let (rows, cols) = (3, 700);
        let shapes: [(&[usize], &[usize]); 5] = [
            (&[rows, cols], &[rows, cols]),
            (&[rows, cols], &[1, cols]),
            (&[rows, cols], &[rows, 1]),
            (&[1], &[rows, cols]),
            (&[rows, 1], &[1, cols]),
        ];
        type Binary = fn(f32, f32) -> f32;
        let ops: [(BinaryOp, Binary); 4] = [
            (Add, |x, y| x + y),
            (Mul, |x, y| x * y),
            (Div, |x, y| x / y),
            (Max, fmax),
        ];
        for threads in [1, 2] {
            let be = CpuBackend::new(threads).unwrap();
            for (sa, sb) in shapes {
                let (va, vb) = (vals(sa.iter().product(), 1), vals(sb.iter().product(), 2));
                let a = Tensor::new(sa.to_vec(), Data::F16(va.clone())).unwrap();
                let b = Tensor::new(sb.to_vec(), Data::F16(vb.clone())).unwrap();
                for (op, f) in ops {
                    let want: Vec<f16> = (0..rows)
                        .flat_map(|i| (0..cols).map(move |j| (i, j)))
                        .map(|(i, j)| f16::from_f32(f(at(&va, sa, i, j), at(&vb, sb, i, j))))
                        .collect();
                    same(&be.binary(op, &a, &b).unwrap(), &want);
                }
            }
            let x = vals(2100, 3);
            let t = Tensor::new(vec![2100], Data::F16(x.clone())).unwrap();
            type Unary = fn(f32) -> f32;
            let unary: [(UnaryOp, Unary); 3] = [
                (UnaryOp::Exp, |x| x.exp()),
                (UnaryOp::Silu, |x| x * sigmoid(x)),
                (UnaryOp::Neg, |x| -x),
            ];
            for (op, f) in unary {
                let want: Vec<f16> = x.iter().map(|v| f16::from_f32(f(v.to_f32()))).collect();
                same(&be.unary(op, &t).unwrap(), &want);
            }
        }
    }

    #[test]
    fn binary_float_ops() {
        use BinaryOp::*;
        let a = f32t(&[4], &[1.0, -2.0, 5.5, -7.0]);
        let b = f32t(&[4], &[2.0, 3.0, 2.0, 2.0]);
        assert_eq!(bin(Add, &a, &b).to_f32_vec(), vec![3.0, 1.0, 7.5, -5.0]);
        assert_eq!(bin(Sub, &a, &b).to_f32_vec(), vec![-1.0, -5.0, 3.5, -9.0]);
        assert_eq!(bin(Mul, &a, &b).to_f32_vec(), vec![2.0, -6.0, 11.0, -14.0]);
        assert_eq!(
            bin(Div, &a, &b).to_f32_vec(),
            vec![0.5, -2.0 / 3.0, 2.75, -3.5]
        );
        assert_eq!(bin(Pow, &a, &b).to_f32_vec(), vec![1.0, -8.0, 30.25, 49.0]);
        assert_eq!(bin(Max, &a, &b).to_f32_vec(), vec![2.0, 3.0, 5.5, 2.0]);
        assert_eq!(bin(Min, &a, &b).to_f32_vec(), vec![1.0, -2.0, 2.0, -7.0]);
        assert_eq!(
            bin(Mod { fmod: true }, &a, &b).to_f32_vec(),
            vec![1.0, -2.0, 1.5, -1.0]
        );
        assert_eq!(
            bin(Mod { fmod: false }, &a, &b).to_f32_vec(),
            vec![1.0, 1.0, 1.5, 1.0]
        );
        let nan = f32t(&[2], &[f32::NAN, 1.0]);
        let one = f32t(&[2], &[1.0, f32::NAN]);
        assert!(bin(Max, &nan, &one).to_f32_vec().iter().all(|v| v.is_nan()));
        assert!(bin(Min, &nan, &one).to_f32_vec().iter().all(|v| v.is_nan()));
        let x = f32t(&[3], &[1.0, 2.0, 3.0]);
        let y = f32t(&[3], &[2.0, 2.0, 2.0]);
        assert_eq!(
            bin(Equal, &x, &y).data(),
            &Data::Bool(vec![false, true, false])
        );
        assert_eq!(
            bin(Less, &x, &y).data(),
            &Data::Bool(vec![true, false, false])
        );
        assert_eq!(
            bin(LessOrEqual, &x, &y).data(),
            &Data::Bool(vec![true, true, false])
        );
        assert_eq!(
            bin(Greater, &x, &y).data(),
            &Data::Bool(vec![false, false, true])
        );
        assert_eq!(
            bin(GreaterOrEqual, &x, &y).data(),
            &Data::Bool(vec![false, true, true])
        );
        let err = be().binary(And, &x, &y).unwrap_err().to_string();
        assert_eq!(err, "And: unsupported dtype f32");
    }

    #[test]
    fn binary_broadcasting() {
        use BinaryOp::*;
        let a = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        // Scalar (rank 0) on either side.
        let s = f32t(&[], &[10.0]);
        let y = bin(Add, &a, &s);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_f32_vec(), vec![11., 12., 13., 14., 15., 16.]);
        assert_eq!(bin(Sub, &s, &a).to_f32_vec(), vec![9., 8., 7., 6., 5., 4.]);
        // Row.
        let row = f32t(&[3], &[10., 20., 30.]);
        assert_eq!(
            bin(Mul, &a, &row).to_f32_vec(),
            vec![10., 40., 90., 40., 100., 180.]
        );
        // Column.
        let col = f32t(&[2, 1], &[1., 2.]);
        assert_eq!(
            bin(Div, &a, &col).to_f32_vec(),
            vec![1., 2., 3., 2., 2.5, 3.]
        );
        // Both sides: [3,1] x [1,4] -> [3,4].
        let c = f32t(&[3, 1], &[0., 10., 20.]);
        let r = f32t(&[1, 4], &[1., 2., 3., 4.]);
        let y = bin(Add, &c, &r);
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(
            y.to_f32_vec(),
            vec![1., 2., 3., 4., 11., 12., 13., 14., 21., 22., 23., 24.]
        );
        // Middle-dim broadcast: [2,1,2] x [1,3,1] -> [2,3,2].
        let p = f32t(&[2, 1, 2], &[1., 2., 3., 4.]);
        let q = f32t(&[1, 3, 1], &[0., 10., 100.]);
        let y = bin(Add, &p, &q);
        assert_eq!(y.shape(), &[2, 3, 2]);
        assert_eq!(
            y.to_f32_vec(),
            vec![1., 2., 11., 12., 101., 102., 3., 4., 13., 14., 103., 104.]
        );
        // Empty result.
        let e = f32t(&[0, 3], &[]);
        assert_eq!(bin(Add, &e, &row).shape(), &[0, 3]);
    }

    #[test]
    fn binary_large_parallel_matches_serial() {
        let n = 3 * 40_000;
        let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.5).collect();
        let b: Vec<f32> = (0..40_000).map(|i| (i % 13) as f32).collect();
        let ta = f32t(&[3, 40_000], &a);
        let tb = f32t(&[40_000], &b);
        let be2 = CpuBackend::new(2).unwrap();
        let y = be2.binary(BinaryOp::Sub, &ta, &tb).unwrap().to_f32_vec();
        let want: Vec<f32> = (0..n).map(|i| a[i] - b[i % 40_000]).collect();
        assert_eq!(y, want);
        let c = f32t(&[3, 1], &[1.0, 2.0, 3.0]);
        let y = be2.binary(BinaryOp::Mul, &ta, &c).unwrap().to_f32_vec();
        let want: Vec<f32> = (0..n).map(|i| a[i] * (1 + i / 40_000) as f32).collect();
        assert_eq!(y, want);
    }

    #[test]
    fn binary_half_types() {
        let a = Tensor::new(
            vec![2],
            Data::F16(vec![f16::from_f32(1.5), f16::from_f32(2.0)]),
        )
        .unwrap();
        let b = Tensor::new(vec![1], Data::F16(vec![f16::from_f32(0.25)])).unwrap();
        let y = bin(BinaryOp::Add, &a, &b);
        assert_eq!(
            y.data(),
            &Data::F16(vec![f16::from_f32(1.75), f16::from_f32(2.25)])
        );
        let a = Tensor::new(
            vec![2],
            Data::BF16(vec![bf16::from_f32(3.0), bf16::from_f32(1.0)]),
        )
        .unwrap();
        let b = Tensor::new(
            vec![2],
            Data::BF16(vec![bf16::from_f32(2.0), bf16::from_f32(1.0)]),
        )
        .unwrap();
        let y = bin(BinaryOp::Mul, &a, &b);
        assert_eq!(
            y.data(),
            &Data::BF16(vec![bf16::from_f32(6.0), bf16::from_f32(1.0)])
        );
        assert_eq!(
            bin(BinaryOp::Greater, &a, &b).data(),
            &Data::Bool(vec![true, false])
        );
    }

    #[test]
    fn binary_integer_ops() {
        use BinaryOp::*;
        let a = i64t(&[4], &[7, -7, 7, -7]);
        let b = i64t(&[4], &[2, 2, -2, -2]);
        assert_eq!(bin(Add, &a, &b).as_i64().unwrap(), &[9, -5, 5, -9]);
        assert_eq!(bin(Sub, &a, &b).as_i64().unwrap(), &[5, -9, 9, -5]);
        assert_eq!(bin(Mul, &a, &b).as_i64().unwrap(), &[14, -14, -14, 14]);
        assert_eq!(bin(Div, &a, &b).as_i64().unwrap(), &[3, -3, -3, 3]);
        assert_eq!(
            bin(Mod { fmod: true }, &a, &b).as_i64().unwrap(),
            &[1, -1, 1, -1]
        );
        assert_eq!(
            bin(Mod { fmod: false }, &a, &b).as_i64().unwrap(),
            &[1, 1, -1, -1]
        );
        assert_eq!(bin(Max, &a, &b).as_i64().unwrap(), &[7, 2, 7, -2]);
        assert_eq!(bin(Min, &a, &b).as_i64().unwrap(), &[2, -7, -2, -7]);
        let p = i64t(&[5], &[2, -3, 2, 1, -1]);
        let e = i64t(&[5], &[10, 3, -1, -5, -3]);
        assert_eq!(bin(Pow, &p, &e).as_i64().unwrap(), &[1024, -27, 0, 1, -1]);
        assert_eq!(bin(Equal, &a, &b).data(), &Data::Bool(vec![false; 4]));
        assert_eq!(
            bin(Less, &a, &b).data(),
            &Data::Bool(vec![false, true, false, true])
        );
        assert_eq!(
            bin(GreaterOrEqual, &a, &b).data(),
            &Data::Bool(vec![true, false, true, false])
        );
        let x = Tensor::new(vec![3], Data::I32(vec![i32::MAX, 5, -9])).unwrap();
        let one = Tensor::new(vec![], Data::I32(vec![1])).unwrap();
        assert_eq!(bin(Add, &x, &one).data(), &Data::I32(vec![i32::MIN, 6, -8]));
        let u = Tensor::new(vec![2], Data::U8(vec![250, 3])).unwrap();
        let v = Tensor::new(vec![2], Data::U8(vec![10, 2])).unwrap();
        assert_eq!(bin(Add, &u, &v).data(), &Data::U8(vec![4, 5]));
        assert_eq!(bin(Div, &u, &v).data(), &Data::U8(vec![25, 1]));
        let err = be()
            .binary(Div, &a, &i64t(&[1], &[0]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Div: integer division by zero (i64)");
        let err = be().binary(Xor, &a, &b).unwrap_err().to_string();
        assert_eq!(err, "Xor: unsupported dtype i64");
    }

    #[test]
    fn binary_bool_ops() {
        use BinaryOp::*;
        let a = boolt(&[4], &[true, true, false, false]);
        let b = boolt(&[4], &[true, false, true, false]);
        assert_eq!(
            bin(And, &a, &b).data(),
            &Data::Bool(vec![true, false, false, false])
        );
        assert_eq!(
            bin(Or, &a, &b).data(),
            &Data::Bool(vec![true, true, true, false])
        );
        assert_eq!(
            bin(Xor, &a, &b).data(),
            &Data::Bool(vec![false, true, true, false])
        );
        assert_eq!(
            bin(Equal, &a, &b).data(),
            &Data::Bool(vec![true, false, false, true])
        );
        let err = be().binary(Add, &a, &b).unwrap_err().to_string();
        assert_eq!(err, "Add: unsupported dtype bool");
    }

    #[test]
    fn binary_errors() {
        let a = f32t(&[2, 3], &[0.0; 6]);
        let err = be()
            .binary(BinaryOp::Add, &a, &f32t(&[4], &[0.0; 4]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Add: cannot broadcast shapes [2, 3] and [4]");
        let err = be()
            .binary(BinaryOp::Mul, &a, &i64t(&[3], &[1, 2, 3]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Mul: dtype mismatch f32 vs i64");
        // An output too large to allocate is an error, not an abort.
        let n = 1 << 21;
        let c = Tensor::zeros(DType::Bool, &[n, 1, 1]);
        let x = Tensor::zeros(DType::U8, &[n, 1]);
        let y = Tensor::zeros(DType::U8, &[n]);
        let err = be().where_cond(&c, &x, &y).unwrap_err().to_string();
        assert_eq!(
            err,
            "Where: output shape [2097152, 2097152, 2097152] is too large"
        );
    }

    #[test]
    fn where_broadcasts_three_ways() {
        let c = boolt(&[2, 1], &[true, false]);
        let a = f32t(&[1, 3], &[1., 2., 3.]);
        let b = f32t(&[], &[-1.0]);
        let y = be().where_cond(&c, &a, &b).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_f32_vec(), vec![1., 2., 3., -1., -1., -1.]);
        let c = boolt(&[3], &[true, false, true]);
        let a = i64t(&[3], &[1, 2, 3]);
        let b = i64t(&[3], &[4, 5, 6]);
        assert_eq!(
            be().where_cond(&c, &a, &b).unwrap().as_i64().unwrap(),
            &[1, 5, 3]
        );
        let err = be().where_cond(&a, &a, &b).unwrap_err().to_string();
        assert_eq!(err, "Where: condition must be bool, got i64");
        let err = be()
            .where_cond(&c, &a, &f32t(&[3], &[0.0; 3]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Where: dtype mismatch i64 vs f32");
        let err = be()
            .where_cond(&c, &a, &i64t(&[2], &[0, 0]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Where: cannot broadcast shapes [3], [3] and [2]");
    }

    #[test]
    fn cast_between_all_types() {
        let x = f32t(&[5], &[-1.7, 0.0, 2.9, f32::NAN, 300.0]);
        let b = be();
        assert_eq!(
            b.cast(&x, DType::I64).unwrap().as_i64().unwrap(),
            &[-1, 0, 2, 0, 300]
        );
        assert_eq!(
            b.cast(&x, DType::I32).unwrap().data(),
            &Data::I32(vec![-1, 0, 2, 0, 300])
        );
        assert_eq!(
            b.cast(&x, DType::U8).unwrap().data(),
            &Data::U8(vec![0, 0, 2, 0, 255])
        );
        assert_eq!(
            b.cast(&x, DType::Bool).unwrap().data(),
            &Data::Bool(vec![true, false, true, true, true])
        );
        let h = b.cast(&x, DType::F16).unwrap();
        assert_eq!(h.dtype(), DType::F16);
        let back = b.cast(&h, DType::F32).unwrap().to_f32_vec();
        assert_eq!(back[0], f16::from_f32(-1.7).to_f32());
        assert_eq!(back[4], 300.0);
        let bf = b.cast(&h, DType::BF16).unwrap().to_f32_vec();
        assert_eq!(bf[..3], [-1.703125, 0.0, 2.90625]);
        assert!(bf[3].is_nan());
        assert_eq!(bf[4], 300.0);
        let i = i64t(&[3], &[-1, 256, 1 << 40]);
        assert_eq!(
            b.cast(&i, DType::I32).unwrap().data(),
            &Data::I32(vec![-1, 256, 0])
        );
        assert_eq!(
            b.cast(&i, DType::U8).unwrap().data(),
            &Data::U8(vec![255, 0, 0])
        );
        assert_eq!(
            b.cast(&i, DType::F32).unwrap().to_f32_vec(),
            vec![-1.0, 256.0, 1099511627776.0]
        );
        assert_eq!(
            b.cast(&i, DType::Bool).unwrap().data(),
            &Data::Bool(vec![true, true, true])
        );
        assert_eq!(
            b.cast(&i, DType::BF16).unwrap().to_f32_vec(),
            vec![-1.0, 256.0, 1099511627776.0]
        );
        let t = boolt(&[2], &[true, false]);
        assert_eq!(b.cast(&t, DType::F16).unwrap().to_f32_vec(), vec![1.0, 0.0]);
        assert_eq!(b.cast(&t, DType::I64).unwrap().as_i64().unwrap(), &[1, 0]);
        let u = Tensor::new(vec![1], Data::U8(vec![200])).unwrap();
        assert_eq!(
            b.cast(&u, DType::I32).unwrap().data(),
            &Data::I32(vec![200])
        );
        // Same type: shares storage.
        let same = b.cast(&x, DType::F32).unwrap();
        assert!(std::ptr::eq(
            same.as_f32().unwrap().as_ptr(),
            x.as_f32().unwrap().as_ptr()
        ));
    }
}
