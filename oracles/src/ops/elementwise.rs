//! Elementwise ops: unary functions, broadcasting binary arithmetic / comparison / logic, the
//! variadic Max / Min / Sum / Mean, Where, Cast, CastLike and Clip.
//!
//! Float values are computed in f64 and rounded to f32 once (for + − × ÷ this equals the f32
//! result exactly, since f64 has more than twice f32's precision). Integers are computed in i64
//! with wrapping and wrapped back into the tensor's integer type.

use crate::bail;
use crate::error::Result;
use crate::tensor::{DType, Data, OTensor, broadcast_offsets, broadcast_shapes};

// ------------------------------------------------------------------------------------------------
// Unary

/// Applies `f` to every float value (computed in f64).
fn float_map(x: &OTensor, op: &str, f: impl Fn(f64) -> f64) -> Result<OTensor> {
    let Data::F32(v) = x.data() else {
        bail!("{op} needs a float input, got {}", x.dtype());
    };
    let out = v.iter().map(|&a| f(a as f64) as f32).collect();
    OTensor::new(x.shape.clone(), x.dtype(), Data::F32(out))
}

/// Applies `f_float` to floats and `f_int` to integers.
fn num_map(
    x: &OTensor,
    op: &str,
    f_float: impl Fn(f64) -> f64,
    f_int: impl Fn(i64) -> i64,
) -> Result<OTensor> {
    match x.data() {
        Data::F32(_) => float_map(x, op, f_float),
        Data::I64(v) => {
            let out = v.iter().map(|&a| x.dtype().wrap_int(f_int(a))).collect();
            OTensor::new(x.shape.clone(), x.dtype(), Data::I64(out))
        }
        Data::Bool(_) => bail!("{op} does not take bool"),
    }
}

pub fn neg(x: &OTensor) -> Result<OTensor> {
    if x.dtype() == DType::U8 {
        bail!("Neg does not take u8 (unsigned)");
    }
    num_map(x, "Neg", |a| -a, |a| a.wrapping_neg())
}

pub fn abs(x: &OTensor) -> Result<OTensor> {
    num_map(x, "Abs", f64::abs, i64::wrapping_abs)
}

pub fn sign(x: &OTensor) -> Result<OTensor> {
    // Zero (of either sign) and NaN map to themselves.
    num_map(
        x,
        "Sign",
        |a| {
            if a > 0.0 {
                1.0
            } else if a < 0.0 {
                -1.0
            } else {
                a
            }
        },
        i64::signum,
    )
}

pub fn relu(x: &OTensor) -> Result<OTensor> {
    num_map(x, "Relu", |a| if a < 0.0 { 0.0 } else { a }, |a| a.max(0))
}

pub fn sqrt(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Sqrt", f64::sqrt)
}

pub fn reciprocal(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Reciprocal", |a| 1.0 / a)
}

pub fn exp(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Exp", f64::exp)
}

pub fn log(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Log", f64::ln)
}

pub fn sigmoid(x: &OTensor) -> Result<OTensor> {
    // exp(-a) may overflow to inf for very negative a: 1 / inf = 0, the right limit.
    float_map(x, "Sigmoid", |a| 1.0 / (1.0 + (-a).exp()))
}

pub fn tanh(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Tanh", f64::tanh)
}

pub fn cos(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Cos", f64::cos)
}

pub fn sin(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Sin", f64::sin)
}

pub fn erf(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Erf", erf_f64)
}

pub fn floor(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Floor", f64::floor)
}

pub fn ceil(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Ceil", f64::ceil)
}

/// Round half to even, as ONNX `Round`.
pub fn round(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Round", f64::round_ties_even)
}

/// `log(1 + exp(x))`, written so that neither branch overflows.
pub fn softplus(x: &OTensor) -> Result<OTensor> {
    float_map(x, "Softplus", |a| {
        if a > 0.0 {
            a + (-a).exp().ln_1p()
        } else {
            a.exp().ln_1p()
        }
    })
}

pub fn leaky_relu(x: &OTensor, alpha: f32) -> Result<OTensor> {
    float_map(
        x,
        "LeakyRelu",
        |a| if a < 0.0 { alpha as f64 * a } else { a },
    )
}

pub fn elu(x: &OTensor, alpha: f32) -> Result<OTensor> {
    float_map(x, "Elu", |a| {
        if a < 0.0 {
            alpha as f64 * a.exp_m1()
        } else {
            a
        }
    })
}

pub fn hard_sigmoid(x: &OTensor, alpha: f32, beta: f32) -> Result<OTensor> {
    float_map(x, "HardSigmoid", |a| {
        (alpha as f64 * a + beta as f64).clamp(0.0, 1.0)
    })
}

/// `x * HardSigmoid(x)` with alpha 1/6, beta 0.5.
pub fn hard_swish(x: &OTensor) -> Result<OTensor> {
    float_map(x, "HardSwish", |a| a * (a / 6.0 + 0.5).clamp(0.0, 1.0))
}

/// `0.5 x (1 + erf(x / sqrt 2))`, or with `tanh` the approximation
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu(x: &OTensor, tanh: bool) -> Result<OTensor> {
    if tanh {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        float_map(x, "Gelu", |a| {
            0.5 * a * (1.0 + (c * (a + 0.044715 * a * a * a)).tanh())
        })
    } else {
        float_map(x, "Gelu", |a| {
            0.5 * a * (1.0 + erf_f64(a / std::f64::consts::SQRT_2))
        })
    }
}

pub fn not(x: &OTensor) -> Result<OTensor> {
    let Data::Bool(v) = x.data() else {
        bail!("Not needs a bool input, got {}", x.dtype());
    };
    OTensor::from_bool(x.shape.clone(), v.iter().map(|&b| !b).collect())
}

pub fn is_nan(x: &OTensor) -> Result<OTensor> {
    let Data::F32(v) = x.data() else {
        bail!("IsNaN needs a float input, got {}", x.dtype());
    };
    OTensor::from_bool(x.shape.clone(), v.iter().map(|a| a.is_nan()).collect())
}

pub fn identity(x: &OTensor) -> Result<OTensor> {
    Ok(x.clone())
}

/// The error function in f64.
///
/// |x| < 3: the Maclaurin series `2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))`, summed until
/// the terms stop mattering (at |x| = 3 the largest term is ~1e3, so ~1e-13 absolute accuracy).
/// |x| >= 3: `1 - erfc(x)` with erfc from its Laplace continued fraction
/// `erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`, evaluated from a
/// fixed depth upwards (erfc(3) ~ 2e-5, so any error there is far below f32 resolution).
pub fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 3.0 {
        let mut sum = 0.0;
        let mut power = a; // a^(2n+1) / n!, with the sign folded in
        // At |x| < 3 the terms are below 1e-17 of the sum well before n = 100.
        for n in 0..100 {
            let term = power / (2 * n + 1) as f64;
            sum += term;
            if term.abs() <= 1e-17 * sum.abs() {
                break;
            }
            power *= -a * a / (n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut cf = a;
        for k in (1..=60).rev() {
            cf = a + (k as f64 / 2.0) / cf;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / cf
    };
    if x < 0.0 { -r } else { r }
}

// ------------------------------------------------------------------------------------------------
// Binary

fn same_dtype(op: &str, a: &OTensor, b: &OTensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        bail!("{op}: input types differ ({} vs {})", a.dtype(), b.dtype());
    }
    Ok(())
}

/// The broadcast shape of `a` and `b` and, for every output element, the offsets into each.
fn broadcast2(a: &OTensor, b: &OTensor) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    let shape = broadcast_shapes(&[&a.shape, &b.shape])?;
    let oa = broadcast_offsets(&a.shape, &shape)?;
    let ob = broadcast_offsets(&b.shape, &shape)?;
    Ok((shape, oa, ob))
}

/// Arithmetic with broadcasting: `ff` on floats (in f64), `fi` on integers (in i64, wrapped back).
fn arith(
    op: &str,
    a: &OTensor,
    b: &OTensor,
    ff: impl Fn(f64, f64) -> f64,
    fi: impl Fn(i64, i64) -> Result<i64>,
) -> Result<OTensor> {
    same_dtype(op, a, b)?;
    let (shape, oa, ob) = broadcast2(a, b)?;
    let data = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => Data::F32(
            oa.iter()
                .zip(&ob)
                .map(|(&i, &j)| ff(x[i] as f64, y[j] as f64) as f32)
                .collect(),
        ),
        (Data::I64(x), Data::I64(y)) => {
            let mut out = Vec::with_capacity(oa.len());
            for (&i, &j) in oa.iter().zip(&ob) {
                out.push(a.dtype().wrap_int(fi(x[i], y[j])?));
            }
            Data::I64(out)
        }
        _ => bail!("{op} does not take {}", a.dtype()),
    };
    OTensor::new(shape, a.dtype(), data)
}

pub fn add(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    arith("Add", a, b, |x, y| x + y, |x, y| Ok(x.wrapping_add(y)))
}

pub fn sub(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    arith("Sub", a, b, |x, y| x - y, |x, y| Ok(x.wrapping_sub(y)))
}

pub fn mul(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    arith("Mul", a, b, |x, y| x * y, |x, y| Ok(x.wrapping_mul(y)))
}

/// Integer division truncates toward zero; dividing an integer by zero is an error.
pub fn div(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    arith(
        "Div",
        a,
        b,
        |x, y| x / y,
        |x, y| match y {
            0 => bail!("Div: integer division by zero"),
            _ => Ok(x.wrapping_div(y)),
        },
    )
}

/// `fmod`: the remainder takes the dividend's sign (C `fmod`); otherwise the divisor's (Python
/// `%`), for floats as well as integers.
pub fn r#mod(a: &OTensor, b: &OTensor, fmod: bool) -> Result<OTensor> {
    let ff = |x: f64, y: f64| {
        let r = x % y;
        if !fmod && r != 0.0 && (r < 0.0) != (y < 0.0) {
            r + y
        } else {
            r
        }
    };
    let fi = |x: i64, y: i64| {
        if y == 0 {
            bail!("Mod: integer division by zero");
        }
        let r = x.wrapping_rem(y);
        Ok(if !fmod && r != 0 && (r < 0) != (y < 0) {
            r + y
        } else {
            r
        })
    };
    arith("Mod", a, b, ff, fi)
}

/// `a ^ b`. When the exponent's type differs from the base's it is first cast to the base's type.
/// Integer powers wrap; a negative integer exponent gives the truncated `1 / a^-b`.
pub fn pow(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    let b = if b.dtype() != a.dtype() {
        cast(b, a.dtype())?
    } else {
        b.clone()
    };
    arith("Pow", a, &b, f64::powf, |x, y| Ok(int_pow(x, y)))
}

fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        // 1 / base^|exp| truncated toward zero: only |base| = 1 gives a non-zero result.
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
    // Square and multiply.
    let mut result = 1i64;
    let mut b = base;
    let mut e = exp;
    while e > 0 {
        if e % 2 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e /= 2;
    }
    result
}

/// Comparison with broadcasting; bool output.
fn compare(
    op: &str,
    a: &OTensor,
    b: &OTensor,
    ff: impl Fn(f64, f64) -> bool,
    fi: impl Fn(i64, i64) -> bool,
    fb: Option<fn(bool, bool) -> bool>,
) -> Result<OTensor> {
    same_dtype(op, a, b)?;
    let (shape, oa, ob) = broadcast2(a, b)?;
    let out = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => oa
            .iter()
            .zip(&ob)
            .map(|(&i, &j)| ff(x[i] as f64, y[j] as f64))
            .collect(),
        (Data::I64(x), Data::I64(y)) => oa.iter().zip(&ob).map(|(&i, &j)| fi(x[i], y[j])).collect(),
        (Data::Bool(x), Data::Bool(y)) => match fb {
            Some(f) => oa.iter().zip(&ob).map(|(&i, &j)| f(x[i], y[j])).collect(),
            None => bail!("{op} does not take bool"),
        },
        _ => bail!("{op}: input types differ"),
    };
    OTensor::from_bool(shape, out)
}

pub fn equal(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    compare(
        "Equal",
        a,
        b,
        |x, y| x == y,
        |x, y| x == y,
        Some(|x, y| x == y),
    )
}

pub fn less(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    compare("Less", a, b, |x, y| x < y, |x, y| x < y, None)
}

pub fn less_or_equal(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    compare("LessOrEqual", a, b, |x, y| x <= y, |x, y| x <= y, None)
}

pub fn greater(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    compare("Greater", a, b, |x, y| x > y, |x, y| x > y, None)
}

pub fn greater_or_equal(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    compare("GreaterOrEqual", a, b, |x, y| x >= y, |x, y| x >= y, None)
}

/// Logical op on bools with broadcasting.
fn logical(op: &str, a: &OTensor, b: &OTensor, f: impl Fn(bool, bool) -> bool) -> Result<OTensor> {
    let (Data::Bool(x), Data::Bool(y)) = (a.data(), b.data()) else {
        bail!(
            "{op} needs bool inputs, got {} and {}",
            a.dtype(),
            b.dtype()
        );
    };
    let (shape, oa, ob) = broadcast2(a, b)?;
    OTensor::from_bool(
        shape,
        oa.iter().zip(&ob).map(|(&i, &j)| f(x[i], y[j])).collect(),
    )
}

pub fn and(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    logical("And", a, b, |x, y| x && y)
}

pub fn or(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    logical("Or", a, b, |x, y| x || y)
}

pub fn xor(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    logical("Xor", a, b, |x, y| x != y)
}

// ------------------------------------------------------------------------------------------------
// Variadic

/// NaN-propagating maximum (numpy `maximum`).
fn max_f(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}

fn min_f(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
    }
}

/// Folds all (present) inputs pairwise with broadcasting.
fn fold(
    op: &str,
    xs: &[&OTensor],
    f: impl Fn(&OTensor, &OTensor) -> Result<OTensor>,
) -> Result<OTensor> {
    let Some((first, rest)) = xs.split_first() else {
        bail!("{op} needs at least one input");
    };
    let mut acc = (*first).clone();
    for x in rest {
        acc = f(&acc, x)?;
    }
    Ok(acc)
}

pub fn max(xs: &[&OTensor]) -> Result<OTensor> {
    fold("Max", xs, |a, b| {
        arith("Max", a, b, max_f, |x, y| Ok(x.max(y)))
    })
}

pub fn min(xs: &[&OTensor]) -> Result<OTensor> {
    fold("Min", xs, |a, b| {
        arith("Min", a, b, min_f, |x, y| Ok(x.min(y)))
    })
}

/// Elementwise sum of all inputs with broadcasting; floats are summed in f64 and rounded once.
pub fn sum(xs: &[&OTensor]) -> Result<OTensor> {
    sum_and_count("Sum", xs, false)
}

/// Elementwise mean; integer means truncate toward zero.
pub fn mean(xs: &[&OTensor]) -> Result<OTensor> {
    sum_and_count("Mean", xs, true)
}

fn sum_and_count(op: &str, xs: &[&OTensor], mean: bool) -> Result<OTensor> {
    let Some(first) = xs.first() else {
        bail!("{op} needs at least one input");
    };
    for x in xs {
        same_dtype(op, first, x)?;
    }
    let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape.as_slice()).collect();
    let shape = broadcast_shapes(&shapes)?;
    let offsets = xs
        .iter()
        .map(|x| broadcast_offsets(&x.shape, &shape))
        .collect::<Result<Vec<_>>>()?;
    let n: usize = shape.iter().product();
    let count = xs.len();
    let data = match first.data() {
        Data::F32(_) => {
            let vals = xs.iter().map(|x| x.f32s()).collect::<Result<Vec<_>>>()?;
            let mut out = Vec::with_capacity(n);
            for e in 0..n {
                let s: f64 = vals.iter().zip(&offsets).map(|(v, o)| v[o[e]] as f64).sum();
                out.push(if mean { s / count as f64 } else { s } as f32);
            }
            Data::F32(out)
        }
        Data::I64(_) => {
            let vals = xs.iter().map(|x| x.i64s()).collect::<Result<Vec<_>>>()?;
            let mut out = Vec::with_capacity(n);
            for e in 0..n {
                let s = vals
                    .iter()
                    .zip(&offsets)
                    .fold(0i64, |acc, (v, o)| acc.wrapping_add(v[o[e]]));
                let s = first.dtype().wrap_int(s);
                out.push(if mean {
                    first.dtype().wrap_int(s / count as i64)
                } else {
                    s
                });
            }
            Data::I64(out)
        }
        Data::Bool(_) => bail!("{op} does not take bool"),
    };
    OTensor::new(shape, first.dtype(), data)
}

/// `cond ? x : y` with three-way broadcasting.
pub fn r#where(cond: &OTensor, x: &OTensor, y: &OTensor) -> Result<OTensor> {
    if cond.dtype() != DType::Bool {
        bail!("Where: condition must be bool, got {}", cond.dtype());
    }
    same_dtype("Where", x, y)?;
    let c = cond.bools()?;
    let shape = broadcast_shapes(&[&cond.shape, &x.shape, &y.shape])?;
    let oc = broadcast_offsets(&cond.shape, &shape)?;
    let ox = broadcast_offsets(&x.shape, &shape)?;
    let oy = broadcast_offsets(&y.shape, &shape)?;
    let picks: Vec<(usize, usize)> = (0..oc.len())
        .map(|e| if c[oc[e]] { (0, ox[e]) } else { (1, oy[e]) })
        .collect();
    OTensor::new(shape, x.dtype(), Data::pick(&[x.data(), y.data()], &picks)?)
}

// ------------------------------------------------------------------------------------------------
// Casts and Clip

/// Converts to `to`. Float to integer truncates toward zero and saturates (NaN gives 0); integer
/// narrowing wraps; anything to bool is `!= 0`; float to f16/bf16 rounds to nearest even.
pub fn cast(x: &OTensor, to: DType) -> Result<OTensor> {
    let data = match (x.data(), to) {
        (Data::F32(v), t) if t.is_float() => {
            Data::F32(v.iter().map(|&a| t.round_float(a)).collect())
        }
        (Data::F32(v), DType::I64) => Data::I64(v.iter().map(|&a| a as i64).collect()),
        (Data::F32(v), DType::I32) => Data::I64(v.iter().map(|&a| a as i32 as i64).collect()),
        (Data::F32(v), DType::U8) => Data::I64(v.iter().map(|&a| a as u8 as i64).collect()),
        (Data::F32(v), _) => Data::Bool(v.iter().map(|&a| a != 0.0).collect()),
        (Data::I64(v), t) if t.is_float() => {
            Data::F32(v.iter().map(|&a| t.round_float(a as f32)).collect())
        }
        (Data::I64(v), t) if t.is_int() => Data::I64(v.iter().map(|&a| t.wrap_int(a)).collect()),
        (Data::I64(v), _) => Data::Bool(v.iter().map(|&a| a != 0).collect()),
        (Data::Bool(v), t) if t.is_float() => {
            Data::F32(v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect())
        }
        (Data::Bool(v), t) if t.is_int() => Data::I64(v.iter().map(|&b| b as i64).collect()),
        (Data::Bool(v), _) => Data::Bool(v.clone()),
    };
    OTensor::new(x.shape.clone(), to, data)
}

/// Casts `x` to the type of `like`.
pub fn cast_like(x: &OTensor, like: &OTensor) -> Result<OTensor> {
    cast(x, like.dtype())
}

/// `min(max(x, lo), hi)` with broadcasting; a missing bound does not clip.
pub fn clip(x: &OTensor, lo: Option<&OTensor>, hi: Option<&OTensor>) -> Result<OTensor> {
    let mut y = x.clone();
    if let Some(lo) = lo {
        y = max(&[&y, lo])?;
    }
    if let Some(hi) = hi {
        y = min(&[&y, hi])?;
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], v: &[f32]) -> OTensor {
        OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
    }

    fn i(shape: &[usize], v: &[i64]) -> OTensor {
        OTensor::from_i64(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn add_broadcasts_column_against_row() {
        // [[1], [2]] + [10, 20, 30] = [[11, 21, 31], [12, 22, 32]]
        let y = add(&f(&[2, 1], &[1.0, 2.0]), &f(&[3], &[10.0, 20.0, 30.0])).unwrap();
        assert_eq!(y.shape, vec![2, 3]);
        assert_eq!(y.f32s().unwrap(), &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
        let s = mul(&f(&[], &[2.0]), &f(&[2, 2], &[1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!(s.f32s().unwrap(), &[2.0, 4.0, 6.0, 8.0]);
        assert!(add(&f(&[2], &[1.0, 2.0]), &f(&[3], &[1.0; 3])).is_err());
        assert!(
            add(&f(&[1], &[1.0]), &i(&[1], &[1])).is_err(),
            "mixed types are an error"
        );
    }

    #[test]
    fn integer_division_and_modulo_follow_onnx() {
        let a = i(&[4], &[7, -7, 7, -7]);
        let b = i(&[4], &[2, 2, -2, -2]);
        assert_eq!(div(&a, &b).unwrap().i64s().unwrap(), &[3, -3, -3, 3]);
        assert_eq!(
            r#mod(&a, &b, false).unwrap().i64s().unwrap(),
            &[1, 1, -1, -1]
        );
        assert_eq!(
            r#mod(&a, &b, true).unwrap().i64s().unwrap(),
            &[1, -1, 1, -1]
        );
        assert!(div(&a, &i(&[1], &[0])).is_err());
        let fm = r#mod(&f(&[2], &[-7.5, 7.5]), &f(&[1], &[2.0]), false).unwrap();
        assert_eq!(fm.f32s().unwrap(), &[0.5, 1.5]);
    }

    #[test]
    fn pow_casts_the_exponent() {
        let y = pow(&f(&[3], &[2.0, 3.0, 4.0]), &i(&[], &[2])).unwrap();
        assert_eq!(y.f32s().unwrap(), &[4.0, 9.0, 16.0]);
        let z = pow(&i(&[3], &[2, -1, 5]), &i(&[3], &[10, -3, -1])).unwrap();
        assert_eq!(z.i64s().unwrap(), &[1024, -1, 0]);
    }

    #[test]
    fn unary_values() {
        let r = round(&f(&[5], &[0.5, 1.5, 2.5, -0.5, 2.6])).unwrap();
        assert_eq!(r.f32s().unwrap(), &[0.0, 2.0, 2.0, -0.0, 3.0]);
        let s = sigmoid(&f(&[3], &[0.0, -1000.0, 1000.0])).unwrap();
        assert_eq!(s.f32s().unwrap(), &[0.5, 0.0, 1.0]);
        let sp = softplus(&f(&[2], &[0.0, 100.0])).unwrap();
        assert_eq!(sp.f32s().unwrap(), &[std::f32::consts::LN_2, 100.0]);
        assert_eq!(
            neg(&i(&[1], &[i64::MIN])).unwrap().i64s().unwrap(),
            &[i64::MIN]
        );
        assert!(sqrt(&i(&[1], &[4])).is_err());
    }

    #[test]
    fn erf_matches_tabulated_values() {
        // Abramowitz & Stegun table 7.1.
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265_0),
            (3.5, 0.999_999_256_9),
        ] {
            assert!(
                (erf_f64(x) - want).abs() < 1e-9,
                "erf({x}) = {}",
                erf_f64(x)
            );
            assert!((erf_f64(-x) + want).abs() < 1e-9);
        }
        assert!(
            (erf_f64(3.0 - 1e-10) - erf_f64(3.0)).abs() < 1e-12,
            "the two branches join"
        );
    }

    #[test]
    fn casts_truncate_saturate_and_wrap() {
        let x = f(&[5], &[1.9, -1.9, 1e20, f32::NAN, 300.0]);
        assert_eq!(
            cast(&x, DType::I64).unwrap().i64s().unwrap(),
            &[1, -1, i64::MAX, 0, 300]
        );
        assert_eq!(
            cast(&x, DType::U8).unwrap().i64s().unwrap(),
            &[1, 0, 255, 0, 255]
        );
        assert_eq!(
            cast(&i(&[2], &[300, -1]), DType::U8)
                .unwrap()
                .i64s()
                .unwrap(),
            &[44, 255]
        );
        assert_eq!(
            cast(&f(&[2], &[0.0, -2.0]), DType::Bool)
                .unwrap()
                .bools()
                .unwrap(),
            &[false, true]
        );
        let h = cast(&f(&[1], &[1.0 + 1.0 / 4096.0]), DType::F16).unwrap();
        assert_eq!((h.dtype(), h.f32s().unwrap()), (DType::F16, &[1.0f32][..]));
    }

    #[test]
    fn where_and_clip_broadcast() {
        let c = OTensor::from_bool(vec![2, 1], vec![true, false]).unwrap();
        let y = r#where(&c, &f(&[2], &[1.0, 2.0]), &f(&[], &[0.0])).unwrap();
        assert_eq!(y.f32s().unwrap(), &[1.0, 2.0, 0.0, 0.0]);
        let z = clip(
            &f(&[3], &[-5.0, 0.5, 5.0]),
            Some(&f(&[], &[0.0])),
            Some(&f(&[], &[1.0])),
        )
        .unwrap();
        assert_eq!(z.f32s().unwrap(), &[0.0, 0.5, 1.0]);
        let m = max(&[&f(&[2], &[1.0, f32::NAN]), &f(&[2], &[2.0, 0.0])]).unwrap();
        assert_eq!(m.f32s().unwrap()[0], 2.0);
        assert!(m.f32s().unwrap()[1].is_nan());
        let mi = mean(&[&i(&[1], &[3]), &i(&[1], &[4])]).unwrap();
        assert_eq!(mi.i64s().unwrap(), &[3]);
    }
}
