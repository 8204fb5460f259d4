//! ONNX operator semantics: parses a node's attributes once (at plan time) into an [`Op`], and
//! evaluates it by lowering onto [`Backend`] primitives. This is the only place that knows about
//! opset differences (attribute vs input axes, legacy Softmax), negative axes, and how composite
//! ops (Gemm, Tile, LayerNormalization, Gelu …) decompose.
//!
//! One file per op family, the same families as the oracle (`oracles/src/ops/`) and the CPU
//! kernels (`backend/cpu/`): [`elementwise`], [`reduce`], [`layout`], [`linalg`], [`norm`],
//! [`generate`]. Each family owns its ops' parse functions (its `OPS` list) and their
//! evaluation; this module holds the [`Op`] enum and its dispatch, the [`REGISTRY`] assembled
//! from the families' lists (from which [`SUPPORTED`] is derived and through which [`parse`]
//! looks a node up), and the helpers the families share. [`fused`] is not a family: it runs the
//! steps the executor fused from several nodes.
//!
//! Shape-like inputs (Reshape's shape, Slice's starts, …) are read on the host via
//! [`Backend::download`]; they are small i64 tensors.

mod attr;
mod elementwise;
mod fused;
mod generate;
mod layout;
mod linalg;
mod norm;
mod reduce;

use std::path::Path;

use half::{bf16, f16};

pub use fused::{BodyNode, FusedOp, Pattern};
pub use layout::{reshape_target, slice_dim};

use crate::backend::{Backend, BinaryOp, ReduceOp, UnaryOp};
use crate::bail;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::onnx::Node;
use crate::tensor::{Data, Tensor};

/// Why a node could not be turned into an [`Op`].
#[derive(Debug)]
pub enum ParseError {
    /// No implementation for this (domain, op_type).
    Unsupported,
    /// Implemented, but the node's attributes are invalid.
    Invalid(String),
}

impl From<String> for ParseError {
    fn from(s: String) -> Self {
        ParseError::Invalid(s)
    }
}

/// A parsed node: the operator plus its attributes, ready to evaluate.
#[derive(Clone, Debug)]
pub enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `Pow`: the exponent is cast to the base's type when they differ.
    Pow,
    /// Variadic Max / Min / Sum (folded with the binary op).
    Variadic(BinaryOp),
    /// Variadic Mean.
    Mean,
    Where,
    Cast(DType),
    CastLike,
    Clip {
        min: Option<f32>,
        max: Option<f32>,
    },
    Reduce {
        op: ReduceOp,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
    ArgExtreme {
        max: bool,
        axis: i64,
        keepdims: bool,
        select_last: bool,
    },
    Softmax {
        axis: i64,
        log: bool,
        legacy: bool,
    },
    MatMul,
    /// Not an ONNX op: `MatMul(A, Transpose(B))` where the transpose only swaps the last two axes
    /// and nothing else reads it, fused by the executor (`exec.rs`) so the backend reads `B`
    /// in place ([`Backend::matmul_transposed_b`]). Inputs: A, B (untransposed).
    MatMulTransposedB,
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    Gather {
        axis: i64,
    },
    Reshape {
        allowzero: bool,
    },
    Transpose {
        perm: Option<Vec<i64>>,
    },
    Concat {
        axis: i64,
    },
    Slice,
    Split {
        axis: i64,
        split: Option<Vec<i64>>,
        num_outputs: Option<usize>,
    },
    Squeeze {
        axes: Option<Vec<i64>>,
    },
    Unsqueeze {
        axes: Option<Vec<i64>>,
    },
    Flatten {
        axis: i64,
    },
    Expand,
    Tile,
    Shape {
        start: i64,
        end: Option<i64>,
    },
    Size,
    Constant(Tensor),
    ConstantOfShape(Tensor),
    Range,
    Trilu {
        upper: bool,
    },
    Identity,
    /// `SimplifiedLayerNormalization` / `RMSNormalization`.
    RmsNorm {
        axis: i64,
        eps: f32,
    },
    /// com.microsoft `SkipSimplifiedLayerNormalization`.
    SkipRmsNorm {
        eps: f32,
    },
    LayerNorm {
        axis: i64,
        eps: f32,
    },
    Gelu {
        tanh: bool,
    },
    HardSwish,
    /// Not an ONNX op: a run of nodes the executor recognised as one computation (`exec/fuse.rs`),
    /// run as one backend kernel where the device has it, else node by node ([`FusedOp`]).
    Fused(Box<FusedOp>),
}

/// Parses one node (from a model whose default-domain opset is `opset`, stored in `model_dir`)
/// whose (domain, op_type) is the entry's.
pub type ParseFn = fn(&Node, i64, &Path) -> Result<Op, ParseError>;

/// One supported operator: its (domain, op_type) and how to parse a node of it.
#[derive(Clone, Copy, Debug)]
pub struct OpEntry {
    pub domain: &'static str,
    pub op_type: &'static str,
    pub parse: ParseFn,
}

/// An [`OpEntry`] (for the families' `OPS` lists).
const fn entry(domain: &'static str, op_type: &'static str, parse: ParseFn) -> OpEntry {
    OpEntry {
        domain,
        op_type,
        parse,
    }
}

/// The families' op lists, concatenated into [`REGISTRY`].
const FAMILIES: &[&[OpEntry]] = &[
    elementwise::OPS,
    reduce::OPS,
    layout::OPS,
    linalg::OPS,
    norm::OPS,
    generate::OPS,
];

const N_OPS: usize = {
    let mut n = 0;
    let mut f = 0;
    while f < FAMILIES.len() {
        n += FAMILIES[f].len();
        f += 1;
    }
    n
};

/// Every operator the engine runs, family by family: the one list of ops. Adding an op is one
/// line in its family's `OPS`; [`SUPPORTED`] and [`parse`] follow from it.
pub const REGISTRY: &[OpEntry] = &{
    let mut out = [entry("", "", |_, _, _| Err(ParseError::Unsupported)); N_OPS];
    let (mut k, mut f) = (0, 0);
    while f < FAMILIES.len() {
        let mut i = 0;
        while i < FAMILIES[f].len() {
            out[k] = FAMILIES[f][i];
            k += 1;
            i += 1;
        }
        f += 1;
    }
    out
};

/// Every (domain, op_type) [`parse`] accepts, for docs and error messages: the keys of
/// [`REGISTRY`], in its order.
pub const SUPPORTED: &[(&str, &str)] = &{
    let mut out = [("", ""); N_OPS];
    let mut i = 0;
    while i < N_OPS {
        out[i] = (REGISTRY[i].domain, REGISTRY[i].op_type);
        i += 1;
    }
    out
};

/// Parses `node` (from a model whose default-domain opset is `opset`, stored in `model_dir`)
/// with its [`REGISTRY`] entry; [`ParseError::Unsupported`] when it has none.
pub fn parse(node: &Node, opset: i64, model_dir: &Path) -> Result<Op, ParseError> {
    let entry = REGISTRY
        .iter()
        .find(|e| e.domain == node.domain && e.op_type == node.op_type)
        .ok_or(ParseError::Unsupported)?;
    (entry.parse)(node, opset, model_dir)
}

impl From<Error> for ParseError {
    fn from(e: Error) -> Self {
        ParseError::Invalid(e.to_string())
    }
}

/// A host scalar of `dtype` holding `v`.
pub fn host_scalar(dtype: DType, v: f64) -> Tensor {
    let data = match dtype {
        DType::F32 => Data::F32(vec![v as f32]),
        DType::F16 => Data::F16(vec![f16::from_f64(v)]),
        DType::BF16 => Data::BF16(vec![bf16::from_f64(v)]),
        DType::I64 => Data::I64(vec![v as i64]),
        DType::I32 => Data::I32(vec![v as i32]),
        DType::U8 => Data::U8(vec![v as u8]),
        DType::Bool => Data::Bool(vec![v != 0.0]),
    };
    Tensor::from_parts(vec![], data)
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

/// numpy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => bail!("shapes {a:?} and {b:?} do not broadcast"),
        };
    }
    Ok(out)
}

fn input<'a, T>(inputs: &[Option<&'a T>], i: usize) -> Result<&'a T> {
    match inputs.get(i) {
        Some(Some(t)) => Ok(t),
        _ => bail!("required input {i} is missing"),
    }
}

fn opt_input<'a, T>(inputs: &[Option<&'a T>], i: usize) -> Option<&'a T> {
    inputs.get(i).copied().flatten()
}

fn host_ints<B: Backend>(b: &B, t: &B::Tensor, what: &str) -> Result<Vec<i64>> {
    b.download(t)?
        .to_i64_vec()
        .map_err(|e| Error::msg(format!("{what}: {e}")))
}

fn host_f64<B: Backend>(b: &B, t: &B::Tensor, what: &str) -> Result<f64> {
    let t = b.download(t)?;
    if t.numel() != 1 {
        bail!("{what} must have one element, got shape {:?}", t.shape());
    }
    Ok(match t.data() {
        Data::I64(v) => v[0] as f64,
        Data::I32(v) => v[0] as f64,
        _ => t.to_f32_vec()[0] as f64,
    })
}

fn scalar_like<B: Backend>(b: &B, like: &B::Tensor, v: f64) -> Result<B::Tensor> {
    b.upload(&host_scalar(b.dtype(like), v))
}

fn same_dtype<B: Backend>(b: &B, x: &B::Tensor, y: &B::Tensor, what: &str) -> Result<()> {
    let (dx, dy) = (b.dtype(x), b.dtype(y));
    if dx != dy {
        bail!("{what}: input types differ ({dx} vs {dy})");
    }
    Ok(())
}

/// Sorted unique non-negative axes.
fn norm_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    let n = out.len();
    out.dedup();
    if out.len() != n {
        bail!("axes {axes:?} repeat an axis");
    }
    Ok(out)
}

/// What an op's evaluation gives: one entry per output it can produce (`None`: an optional
/// output it does not compute).
type Outputs<T> = Result<Vec<Option<T>>>;

impl Op {
    /// Evaluates the op. `n_outputs` is the node's declared output count. The result has one entry
    /// per output the op can produce; `None` marks an optional output it does not compute.
    pub fn eval<B: Backend>(
        &self,
        b: &B,
        inputs: &[Option<&B::Tensor>],
        n_outputs: usize,
    ) -> Result<Vec<Option<B::Tensor>>> {
        match self {
            Op::Unary(op) => elementwise::unary(b, inputs, op),
            Op::Binary(op) => elementwise::binary(b, inputs, op),
            Op::Pow => elementwise::pow(b, inputs),
            Op::Variadic(op) => elementwise::variadic(b, inputs, op),
            Op::Mean => elementwise::mean(b, inputs),
            Op::Where => elementwise::r#where(b, inputs),
            Op::Cast(to) => elementwise::cast(b, inputs, to),
            Op::CastLike => elementwise::cast_like(b, inputs),
            Op::Clip { min, max } => elementwise::clip(b, inputs, min, max),
            Op::Identity => elementwise::identity(inputs),
            Op::Gelu { tanh } => elementwise::gelu(b, inputs, tanh),
            Op::HardSwish => elementwise::hard_swish(b, inputs),
            Op::Reduce {
                op,
                axes,
                keepdims,
                noop_with_empty_axes,
            } => reduce::reduce(b, inputs, op, axes, keepdims, noop_with_empty_axes),
            Op::ArgExtreme {
                max,
                axis,
                keepdims,
                select_last,
            } => reduce::arg_max_min(b, inputs, max, axis, keepdims, select_last),
            Op::Softmax { axis, log, legacy } => reduce::softmax(b, inputs, axis, log, legacy),
            Op::MatMul => linalg::mat_mul(b, inputs),
            Op::MatMulTransposedB => linalg::mat_mul_transposed_b(b, inputs),
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => linalg::gemm(b, inputs, alpha, beta, trans_a, trans_b),
            Op::Gather { axis } => layout::gather(b, inputs, axis),
            Op::Reshape { allowzero } => layout::reshape(b, inputs, allowzero),
            Op::Transpose { perm } => layout::transpose(b, inputs, perm),
            Op::Concat { axis } => layout::concat(b, inputs, axis),
            Op::Slice => layout::slice(b, inputs),
            Op::Split {
                axis,
                split,
                num_outputs,
            } => layout::split(b, inputs, axis, split, num_outputs, n_outputs),
            Op::Squeeze { axes } => layout::squeeze(b, inputs, axes),
            Op::Unsqueeze { axes } => layout::unsqueeze(b, inputs, axes),
            Op::Flatten { axis } => layout::flatten(b, inputs, axis),
            Op::Expand => layout::expand(b, inputs),
            Op::Tile => layout::tile(b, inputs),
            Op::Shape { start, end } => layout::shape(b, inputs, start, end),
            Op::Size => layout::size(b, inputs),
            Op::Trilu { upper } => layout::trilu(b, inputs, upper),
            Op::RmsNorm { axis, eps } => norm::rms_norm(b, inputs, axis, eps),
            Op::SkipRmsNorm { eps } => norm::skip_rms_norm(b, inputs, eps),
            Op::LayerNorm { axis, eps } => norm::layer_norm(b, inputs, axis, eps),
            Op::Constant(t) => generate::constant(b, t),
            Op::ConstantOfShape(value) => generate::constant_of_shape(b, inputs, value),
            Op::Range => generate::range(b, inputs),
            Op::Fused(f) => f.eval(b, inputs),
        }
    }
}

/// A single output.
fn one<T>(t: T) -> Outputs<T> {
    Ok(vec![Some(t)])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn node(domain: &str, op_type: &str) -> Node {
        Node {
            name: "n".into(),
            op_type: op_type.into(),
            domain: domain.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attributes: Vec::new(),
        }
    }

    #[test]
    fn registry_has_no_duplicate_ops() {
        let mut seen = BTreeSet::new();
        let dups: Vec<_> = REGISTRY
            .iter()
            .filter(|e| !seen.insert((e.domain, e.op_type)))
            .map(|e| (e.domain, e.op_type))
            .collect();
        assert!(dups.is_empty(), "ops registered twice: {dups:?}");
    }

    #[test]
    fn supported_lists_the_registry_in_order() {
        let keys: Vec<_> = REGISTRY.iter().map(|e| (e.domain, e.op_type)).collect();
        assert_eq!(SUPPORTED, keys.as_slice());
        assert!(SUPPORTED.iter().all(|(_, op)| !op.is_empty()));
    }

    #[test]
    fn parse_finds_every_registered_op_and_only_those() {
        for &(domain, op_type) in SUPPORTED {
            let got = parse(&node(domain, op_type), 18, Path::new("."));
            assert!(
                !matches!(got, Err(ParseError::Unsupported)),
                "{domain:?} {op_type}: not found by parse"
            );
        }
        for (domain, op_type) in [("", "Conv"), ("com.microsoft", "Add"), ("", "RmsNorm")] {
            let got = parse(&node(domain, op_type), 18, Path::new("."));
            assert!(
                matches!(got, Err(ParseError::Unsupported)),
                "{domain:?} {op_type}"
            );
        }
        // SimplifiedLayerNormalization is registered in both domains, RMSNormalization in one.
        let got = parse(
            &node("com.microsoft", "RMSNormalization"),
            18,
            Path::new("."),
        );
        assert!(matches!(got, Err(ParseError::Unsupported)));
    }
}
