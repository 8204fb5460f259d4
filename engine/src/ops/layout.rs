//! Layout ops: they move or select values without arithmetic — Reshape, Transpose, Concat,
//! Slice, Split, Squeeze, Unsqueeze, Flatten, Expand, Tile, Gather, Shape, Size, Trilu. Shape-like
//! inputs (Reshape's shape, Slice's starts, …) are read on the host; the data moves through
//! `Backend::{reshape, transpose, concat, slice, expand, gather, trilu}`.

use super::{
    OpEntry, Outputs, attr, broadcast_shapes, entry, host_f64, host_ints, input, norm_axes,
    norm_axis, one, opt_input, same_dtype,
};
use crate::backend::{Backend, SliceDim};
use crate::bail;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::tensor::{Data, Tensor};

/// The layout ops of the registry.
pub(super) const OPS: &[OpEntry] = &[
    entry("", "Reshape", |n, _, _| {
        Ok(Op::Reshape {
            allowzero: attr::int_or(n, "allowzero", 0) != 0,
        })
    }),
    entry("", "Transpose", |n, _, _| {
        Ok(Op::Transpose {
            perm: attr::ints(n, "perm"),
        })
    }),
    entry("", "Concat", |n, _, _| {
        Ok(Op::Concat {
            axis: attr::int(n, "axis").ok_or("missing attribute `axis`".to_string())?,
        })
    }),
    entry("", "Slice", |n, _, _| {
        if attr::has(n, "starts") {
            return Err(
                "Slice-1 (starts/ends as attributes) is not supported; re-export with opset >= 10"
                    .to_string()
                    .into(),
            );
        }
        Ok(Op::Slice)
    }),
    entry("", "Split", |n, _, _| {
        Ok(Op::Split {
            axis: attr::int_or(n, "axis", 0),
            split: attr::ints(n, "split"),
            num_outputs: attr::int(n, "num_outputs").map(|n| n.max(0) as usize),
        })
    }),
    entry("", "Squeeze", |n, _, _| {
        Ok(Op::Squeeze {
            axes: attr::ints(n, "axes"),
        })
    }),
    entry("", "Unsqueeze", |n, _, _| {
        Ok(Op::Unsqueeze {
            axes: attr::ints(n, "axes"),
        })
    }),
    entry("", "Flatten", |n, _, _| {
        Ok(Op::Flatten {
            axis: attr::int_or(n, "axis", 1),
        })
    }),
    entry("", "Expand", |_, _, _| Ok(Op::Expand)),
    entry("", "Tile", |_, _, _| Ok(Op::Tile)),
    entry("", "Gather", |n, _, _| {
        Ok(Op::Gather {
            axis: attr::int_or(n, "axis", 0),
        })
    }),
    entry("", "Shape", |n, _, _| {
        Ok(Op::Shape {
            start: attr::int_or(n, "start", 0),
            end: attr::int(n, "end"),
        })
    }),
    entry("", "Size", |_, _, _| Ok(Op::Size)),
    entry("", "Trilu", |n, _, _| {
        Ok(Op::Trilu {
            upper: attr::int_or(n, "upper", 1) != 0,
        })
    }),
];

pub(super) fn gather<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
) -> Outputs<B::Tensor> {
    let (x, idx) = (input(inputs, 0)?, input(inputs, 1)?);
    let axis = norm_axis(*axis, b.shape(x).len())?;
    one(b.gather(x, idx, axis)?)
}

pub(super) fn reshape<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    allowzero: &bool,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let spec = host_ints(b, input(inputs, 1)?, "shape")?;
    one(b.reshape(x, reshape_target(b.shape(x), &spec, *allowzero)?)?)
}

pub(super) fn transpose<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    perm: &Option<Vec<i64>>,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let rank = b.shape(x).len();
    let perm: Vec<usize> = match perm {
        Some(p) => p
            .iter()
            .map(|&a| norm_axis(a, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).rev().collect(),
    };
    one(b.transpose(x, &perm)?)
}

pub(super) fn concat<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
) -> Outputs<B::Tensor> {
    let xs: Vec<&B::Tensor> = inputs.iter().flatten().copied().collect();
    let first = xs
        .first()
        .ok_or_else(|| Error::msg("Concat needs at least one input"))?;
    let axis = norm_axis(*axis, b.shape(first).len())?;
    for t in &xs[1..] {
        same_dtype(b, first, t, "Concat")?;
    }
    one(b.concat(&xs, axis)?)
}

pub(super) fn slice<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let starts = host_ints(b, input(inputs, 1)?, "starts")?;
    let ends = host_ints(b, input(inputs, 2)?, "ends")?;
    let axes = match opt_input(inputs, 3) {
        Some(t) => host_ints(b, t, "axes")?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match opt_input(inputs, 4) {
        Some(t) => host_ints(b, t, "steps")?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        bail!(
            "starts, ends, axes and steps must have the same length, got {}, {}, {}, {}",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        );
    }
    let mut dims: Vec<SliceDim> = shape
        .iter()
        .map(|&d| SliceDim {
            start: 0,
            step: 1,
            len: d,
        })
        .collect();
    let mut seen = vec![false; shape.len()];
    for i in 0..starts.len() {
        let a = norm_axis(axes[i], shape.len())?;
        if std::mem::replace(&mut seen[a], true) {
            bail!("axis {} appears twice in axes", axes[i]);
        }
        dims[a] = slice_dim(shape[a], starts[i], ends[i], steps[i])?;
    }
    one(b.slice(x, &dims)?)
}

/// `n_outputs` is the node's declared output count (the number of parts when neither `split`
/// nor `num_outputs` says).
pub(super) fn split<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
    split: &Option<Vec<i64>>,
    num_outputs: &Option<usize>,
    n_outputs: usize,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let axis = norm_axis(*axis, shape.len())?;
    let dim = shape[axis];
    let sizes: Vec<usize> = match (opt_input(inputs, 1), split) {
        (Some(t), _) => host_ints(b, t, "split")?
            .iter()
            .map(|&s| s.max(0) as usize)
            .collect(),
        (None, Some(s)) => s.iter().map(|&s| s.max(0) as usize).collect(),
        (None, None) => {
            let n = num_outputs.unwrap_or(n_outputs).max(1);
            let chunk = dim.div_ceil(n);
            (0..n)
                .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != dim {
        bail!("split sizes {sizes:?} do not add up to dim {dim} of axis {axis}");
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for len in sizes {
        let mut dims: Vec<SliceDim> = shape
            .iter()
            .map(|&d| SliceDim {
                start: 0,
                step: 1,
                len: d,
            })
            .collect();
        dims[axis] = SliceDim {
            start,
            step: 1,
            len,
        };
        out.push(Some(b.slice(x, &dims)?));
        start += len;
    }
    Ok(out)
}

pub(super) fn squeeze<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axes: &Option<Vec<i64>>,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let axes = match opt_input(inputs, 1) {
        Some(t) => Some(host_ints(b, t, "axes")?),
        None => axes.clone(),
    };
    let new_shape: Vec<usize> = match axes {
        Some(axes) => {
            let axes = norm_axes(&axes, shape.len())?;
            for &a in &axes {
                if shape[a] != 1 {
                    bail!(
                        "cannot squeeze axis {a} of size {} (shape {shape:?})",
                        shape[a]
                    );
                }
            }
            shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect()
        }
        None => shape.iter().copied().filter(|&d| d != 1).collect(),
    };
    one(b.reshape(x, new_shape)?)
}

pub(super) fn unsqueeze<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axes: &Option<Vec<i64>>,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let axes = match opt_input(inputs, 1) {
        Some(t) => host_ints(b, t, "axes")?,
        None => axes
            .clone()
            .ok_or_else(|| Error::msg("Unsqueeze needs axes"))?,
    };
    let out_rank = shape.len() + axes.len();
    let axes = norm_axes(&axes, out_rank)?;
    let mut rest = shape.iter();
    let new_shape: Vec<usize> = (0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                rest.next().copied().unwrap_or(1)
            }
        })
        .collect();
    one(b.reshape(x, new_shape)?)
}

pub(super) fn flatten<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    axis: &i64,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let r = shape.len() as i64;
    if *axis < -r || *axis > r {
        bail!("axis {axis} is out of range for rank {r}");
    }
    let axis = if *axis < 0 { axis + r } else { *axis } as usize;
    let outer = shape[..axis].iter().product();
    let inner = shape[axis..].iter().product();
    one(b.reshape(x, vec![outer, inner])?)
}

pub(super) fn expand<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let spec = host_ints(b, input(inputs, 1)?, "shape")?;
    if spec.iter().any(|&d| d < 0) {
        bail!("Expand shape {spec:?} has a negative dim");
    }
    let spec: Vec<usize> = spec.iter().map(|&d| d as usize).collect();
    let target = broadcast_shapes(b.shape(x), &spec)?;
    one(b.expand(x, &target)?)
}

pub(super) fn tile<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let shape = b.shape(x).to_vec();
    let reps = host_ints(b, input(inputs, 1)?, "repeats")?;
    if reps.len() != shape.len() || reps.iter().any(|&r| r < 0) {
        bail!(
            "repeats {reps:?} must be {} non-negative values for shape {shape:?}",
            shape.len()
        );
    }
    // x[d0, d1] tiled [r0, r1] == reshape(expand(x as [1, d0, 1, d1], [r0, d0, r1, d1]))
    let mut inter = Vec::with_capacity(2 * shape.len());
    let mut expanded = Vec::with_capacity(2 * shape.len());
    for (&d, &r) in shape.iter().zip(&reps) {
        inter.extend([1, d]);
        expanded.extend([r as usize, d]);
    }
    let y = b.expand(&b.reshape(x, inter)?, &expanded)?;
    let out: Vec<usize> = shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    one(b.reshape(&y, out)?)
}

pub(super) fn shape<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    start: &i64,
    end: &Option<i64>,
) -> Outputs<B::Tensor> {
    let shape = b.shape(input(inputs, 0)?);
    let r = shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
    let dims: Vec<i64> = shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
    one(b.upload(&Tensor::from_parts(vec![dims.len()], Data::I64(dims)))?)
}

pub(super) fn size<B: Backend>(b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
    let n = b.shape(input(inputs, 0)?).iter().product::<usize>();
    one(b.upload(&Tensor::scalar_i64(n as i64))?)
}

pub(super) fn trilu<B: Backend>(
    b: &B,
    inputs: &[Option<&B::Tensor>],
    upper: &bool,
) -> Outputs<B::Tensor> {
    let x = input(inputs, 0)?;
    let k = match opt_input(inputs, 1) {
        Some(t) => host_f64(b, t, "k")? as i64,
        None => 0,
    };
    one(b.trilu(x, k, *upper)?)
}

/// Resolves a Reshape spec (0 = copy, -1 = infer) against the input shape.
pub fn reshape_target(shape: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 => {
                if infer.replace(i).is_some() {
                    bail!("reshape spec {spec:?} has more than one -1");
                }
                out.push(1);
            }
            0 if !allowzero => match shape.get(i) {
                Some(&s) => out.push(s),
                None => bail!(
                    "reshape spec {spec:?} copies dim {i} (0) but the input {shape:?} has rank {}",
                    shape.len()
                ),
            },
            d if d < 0 => bail!("reshape spec {spec:?} has invalid dim {d}"),
            d => out.push(d as usize),
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || !numel.is_multiple_of(known) {
            bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
        }
        out[i] = numel / known;
    }
    if out.iter().product::<usize>() != numel {
        bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
    }
    Ok(out)
}

/// Clamps ONNX Slice bounds for one axis into a [`SliceDim`].
pub fn slice_dim(dim: usize, start: i64, end: i64, step: i64) -> Result<SliceDim> {
    if step == 0 {
        bail!("slice step must not be 0");
    }
    if dim == 0 {
        return Ok(SliceDim {
            start: 0,
            step: step as isize,
            len: 0,
        });
    }
    let d = dim as i64;
    let (start, end) = if step > 0 {
        let s = if start < 0 { start + d } else { start }.clamp(0, d);
        let e = if end < 0 { end + d } else { end }.clamp(0, d);
        (s, e)
    } else {
        let s = if start < 0 { start + d } else { start }.clamp(0, d - 1);
        let e = if end < 0 { end + d } else { end }.clamp(-1, d - 1);
        (s, e)
    };
    let len = if step > 0 {
        if end > start {
            (end - start + step - 1) / step
        } else {
            0
        }
    } else if start > end {
        (start - end + (-step) - 1) / (-step)
    } else {
        0
    };
    Ok(SliceDim {
        start: if len == 0 { 0 } else { start as usize },
        step: step as isize,
        len: len as usize,
    })
}
