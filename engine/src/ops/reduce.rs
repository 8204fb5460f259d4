//! Reductions (ReduceSum … ReduceLogSumExp), ArgMax / ArgMin and Softmax / LogSoftmax: their
//! parsing (attribute vs input axes, the opset < 13 Softmax that coerces to 2-D) and their
//! lowering onto `Backend::{reduce, softmax}`. ArgMax / ArgMin run on the host.

use super::{
    OpEntry, Outputs, attr, entry, host_ints, input, norm_axes, norm_axis, one, opt_input,
};
use crate::backend::{Backend, ReduceOp};
use crate::bail;
use crate::dtype::DType;
use crate::error::Result;
use crate::onnx::Node;
use crate::ops::Op;
use crate::tensor::{Data, Tensor};

/// The reduction ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "ReduceSum", |n, _, _| Ok(reduce_op(n, ReduceOp::Sum))),
    entry("", "ReduceMean", |n, _, _| Ok(reduce_op(n, ReduceOp::Mean))),
    entry("", "ReduceMax", |n, _, _| Ok(reduce_op(n, ReduceOp::Max))),
    entry("", "ReduceMin", |n, _, _| Ok(reduce_op(n, ReduceOp::Min))),
    entry("", "ReduceProd", |n, _, _| Ok(reduce_op(n, ReduceOp::Prod))),
    entry("", "ReduceSumSquare", |n, _, _| {
        Ok(reduce_op(n, ReduceOp::SumSquare))
    }),
    entry("", "ReduceL1", |n, _, _| Ok(reduce_op(n, ReduceOp::L1))),
    entry("", "ReduceL2", |n, _, _| Ok(reduce_op(n, ReduceOp::L2))),
    entry("", "ReduceLogSumExp", |n, _, _| {
        Ok(reduce_op(n, ReduceOp::LogSumExp))
    }),
    entry("", "ArgMax", |n, _, _| Ok(arg_extreme_op(n, true))),
    entry("", "ArgMin", |n, _, _| Ok(arg_extreme_op(n, false))),
    entry("", "Softmax", |n, opset, _| Ok(softmax_op(n, opset, false))),
    entry("", "LogSoftmax", |n, opset, _| {
        Ok(softmax_op(n, opset, true))
    }),
];

fn reduce_op(node: &Node, op: ReduceOp) -> Op {
    Op::Reduce {
        op,
        axes: attr::ints(node, "axes"),
        keepdims: attr::int_or(node, "keepdims", 1) != 0,
        noop_with_empty_axes: attr::int_or(node, "noop_with_empty_axes", 0) != 0,
    }
}

fn arg_extreme_op(node: &Node, max: bool) -> Op {
    Op::ArgExtreme {
        max,
        axis: attr::int_or(node, "axis", 0),
        keepdims: attr::int_or(node, "keepdims", 1) != 0,
        select_last: attr::int_or(node, "select_last_index", 0) != 0,
    }
}

fn softmax_op(node: &Node, opset: i64, log: bool) -> Op {
    Op::Softmax {
        axis: attr::int_or(node, "axis", if opset >= 13 { -1 } else { 1 }),
        log,
        legacy: opset < 13,
    }
}

pub(super) fn reduce<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    op: &ReduceOp,
    axes: &Option<Vec<i64>>,
    keepdims: &bool,
    noop_with_empty_axes: &bool,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let rank = b.shape(x).len();
    let axes = match opt_input(inputs, 1) {
        Some(t) => host_ints(b, t, "axes")?,
        None => axes.clone().unwrap_or_default(),
    };
    let axes = if axes.is_empty() {
        if *noop_with_empty_axes {
            return one(x.clone());
        }
        (0..rank).collect()
    } else {
        norm_axes(&axes, rank)?
    };
    if rank == 0 {
        // A scalar is a one-element reduction (SumSquare squares it, L1 takes |x|);
        // an empty axis list would mean "no reduction" to the backend.
        let x1 = b.reshape(x, vec![1])?;
        return one(b.reduce(*op, &x1, &[0], false)?);
    }
    one(b.reduce(*op, x, &axes, *keepdims)?)
}

pub(super) fn arg_max_min<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    max: &bool,
    axis: &i64,
    keepdims: &bool,
    select_last: &bool,
) -> Outputs<B::Tensor> {
    let x = b.download(input(inputs, 0)?)?;
    let out = arg_extreme(&x, *axis, *keepdims, *max, *select_last)?;
    one(b.upload(&out)?)
}

pub(super) fn softmax<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
    log: &bool,
    legacy: &bool,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let axis = norm_axis(*axis, shape.len())?;
    if *legacy {
        // Opset < 13: coerce to 2-D [prod(..axis), prod(axis..)].
        let outer = shape[..axis].iter().product();
        let inner = shape[axis..].iter().product();
        let x2 = b.reshape(x, vec![outer, inner])?;
        let y = b.softmax(&x2, 1, *log)?;
        one(b.reshape(&y, shape)?)
    } else {
        one(b.softmax(x, axis, *log)?)
    }
}

/// ArgMax / ArgMin on the host (rare in decoders; not worth a backend primitive).
fn arg_extreme(
    x: &Tensor,
    axis: i64,
    keepdims: bool,
    max: bool,
    select_last: bool,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let axis = norm_axis(axis, shape.len())?;
    // Integers compare exactly as i64 (f64 would merge values above 2^53); floats as f64.
    #[derive(PartialEq, PartialOrd, Clone, Copy)]
    enum Key {
        I(i64),
        F(f64),
    }
    let v: Vec<Key> = match x.dtype() {
        DType::I64 | DType::I32 | DType::U8 | DType::Bool => {
            x.to_i64_vec()?.into_iter().map(Key::I).collect()
        }
        _ => x
            .to_f32_vec()
            .into_iter()
            .map(|v| Key::F(v as f64))
            .collect(),
    };
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if n == 0 {
        bail!("cannot take the arg-extreme of an empty axis {axis}");
    }
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            let mut best_v = v[o * n * inner + i];
            for k in 1..n {
                let cur = v[(o * n + k) * inner + i];
                let better = if max { cur > best_v } else { cur < best_v };
                if better || (select_last && cur == best_v) {
                    best = k;
                    best_v = cur;
                }
            }
            out.push(best as i64);
        }
    }
    let mut out_shape = shape.clone();
    if keepdims {
        out_shape[axis] = 1;
    } else {
        out_shape.remove(axis);
    }
    Tensor::new(out_shape, Data::I64(out))
}
