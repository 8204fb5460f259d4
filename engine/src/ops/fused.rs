//! Fused steps: not ONNX ops, but a run of nodes the executor recognised as one computation
//! (`exec/fuse.rs`: a decomposed RMS norm with or without the residual Add before it, rotate-half
//! RoPE, SwiGLU's gate, attention's scaled and masked softmax, grouped-query attention's repeated
//! KV heads read by a MatMul). The step keeps
//! those nodes as its body. At run time it checks the conditions under which the computation is
//! the [`Fused`] primitive (the reduced and rotated axis is the last one, the halves meet, the
//! operands broadcast as the kernel reads them) and asks the backend for one kernel
//! ([`Backend::fused`]); when a condition fails or the backend has no kernel, it runs the body,
//! node by node, exactly as the unfused plan would. So the CPU (no fused kernels) gives the
//! unfused plan's bits, and a graph that only looks like a pattern still computes what it says.

use super::{Op, Outputs, broadcast_shapes, norm_axis, reshape_target};
use crate::backend::{Backend, Fused};
use crate::error::{Error, Result};

/// What the recognised nodes compute, with the facts the run-time check needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Inputs `x`, `w`: [`Fused::RmsNorm`]; `axis` is ReduceMean's (must be `x`'s last).
    RmsNorm { axis: i64, eps: f32 },
    /// Inputs `x`, `cos`, `sin`: [`Fused::Rotary`]. `concat_axis` and `split_axis` must be `x`'s
    /// last; `half`: the first half's length (`None`: Split into two equal halves);
    /// `end`: the second half's end as written (a Slice clamps it; it must reach the end).
    Rotary {
        concat_axis: i64,
        split_axis: i64,
        half: Option<usize>,
        end: i64,
    },
    /// Inputs `g`, `u`: [`Fused::SiluMul`].
    SiluMul,
    /// Inputs `s`, `m`: [`Fused::ScaleMaskSoftmax`]; `axis` is Softmax's (must be the last).
    ScaleMaskSoftmax { axis: i64, scale: f32 },
    /// Inputs `a`, `b`, `w`: [`Fused::AddRmsNorm`], outputs the norm and the sum.
    AddRmsNorm { axis: i64, eps: f32 },
    /// Inputs `a`, `kv`: [`Fused::GqaMatMul`] when `kv` `[B, G, T, D]` Unsqueezed at
    /// `unsqueeze_axis`, Expanded to `expand` and Reshaped to `reshape` (`allowzero` as written)
    /// is `[B, G·R, T, D]` with each head repeated `R` times in a row, and `a` is
    /// `[B, G·R, S, K]`. The three constants as the graph wrote them; checked at run time
    /// against the shapes.
    GqaMatMul {
        transpose_b: bool,
        unsqueeze_axis: i64,
        expand: Vec<i64>,
        reshape: Vec<i64>,
        allowzero: bool,
    },
}

impl Pattern {
    /// A short name for traces and step types.
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::RmsNorm { .. } => "RmsNorm",
            Pattern::Rotary { .. } => "Rotary",
            Pattern::SiluMul => "SiluMul",
            Pattern::ScaleMaskSoftmax { .. } => "ScaleMaskSoftmax",
            Pattern::AddRmsNorm { .. } => "AddRmsNorm",
            Pattern::GqaMatMul { .. } => "GqaMatMul",
        }
    }
}

/// One node of a fused step's body, its values numbered locally: the step's inputs are
/// `0..n_inputs`, then each node's outputs in order.
#[derive(Clone, Debug)]
pub struct BodyNode {
    pub op: Op,
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<Option<usize>>,
}

/// A fused step ([`Op::Fused`]).
#[derive(Clone, Debug)]
pub struct FusedOp {
    pub pattern: Pattern,
    /// The recognised nodes in plan order.
    pub body: Vec<BodyNode>,
    /// Local values in all (inputs included).
    pub n_values: usize,
    /// The local values the step outputs, in the order of [`crate::backend::Fused`]'s outputs.
    pub results: Vec<usize>,
}

impl FusedOp {
    pub(super) fn eval<B: Backend>(
        &self,
        b: &B,
        inputs: &[Option<&B::Tensor>],
    ) -> Outputs<B::Tensor> {
        let all: Option<Vec<&B::Tensor>> = inputs.iter().copied().collect();
        // The step's inputs start with the primitive's; the rest (eps, Slice bounds, the scale:
        // already in the primitive) only the body reads.
        if let Some(xs) = all
            && let Some(op) = self.primitive(b, &xs)?
            && let Some(ins) = xs.get(..op.arity())
            && let Some(ys) = b.fused(&op, ins)?
        {
            if ys.len() != op.outputs() || ys.len() != self.results.len() {
                return Err(Error::msg(format!(
                    "fused step {}: the backend gave {} outputs for {}",
                    self.pattern.name(),
                    ys.len(),
                    self.results.len()
                )));
            }
            return Ok(ys.into_iter().map(Some).collect());
        }
        self.run_body(b, inputs)
    }

    /// The body, node by node.
    fn run_body<B: Backend>(&self, b: &B, inputs: &[Option<&B::Tensor>]) -> Outputs<B::Tensor> {
        let mut values: Vec<Option<B::Tensor>> = vec![None; self.n_values];
        for (v, t) in values.iter_mut().zip(inputs) {
            *v = t.cloned();
        }
        for node in &self.body {
            let outs = {
                let ins: Vec<Option<&B::Tensor>> = node
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| values[s].as_ref()))
                    .collect();
                node.op.eval(b, &ins, node.outputs.len())?
            };
            for (slot, v) in node.outputs.iter().zip(outs) {
                if let (Some(slot), Some(v)) = (slot, v) {
                    values[*slot] = Some(v);
                }
            }
        }
        self.results
            .iter()
            .map(|&r| {
                values[r]
                    .take()
                    .map(Some)
                    .ok_or_else(|| Error::msg("fused step: a node of its body gave no output"))
            })
            .collect()
    }

    /// The primitive these inputs make, or `None` when a condition of it does not hold.
    fn primitive<B: Backend>(&self, b: &B, xs: &[&B::Tensor]) -> Result<Option<Fused>> {
        let float = |t: &B::Tensor| b.dtype(t).is_float();
        let same_type = |ts: &[&B::Tensor]| ts.iter().all(|t| b.dtype(t) == b.dtype(ts[0]));
        let last_axis =
            |axis: i64, rank: usize| rank > 0 && norm_axis(axis, rank).ok() == Some(rank - 1);
        // The RMS norm's conditions on x's shape and w's.
        let norm_fits = |axis: i64, xs: &[usize], ws: &[usize]| {
            let d = xs.last().copied().unwrap_or(0);
            last_axis(axis, xs.len())
                && d > 0
                && ws.iter().product::<usize>() == d
                && ws.last() == Some(&d)
                && broadcast_shapes(xs, ws).ok().as_deref() == Some(xs)
        };
        Ok(match (&self.pattern, xs) {
            (Pattern::RmsNorm { axis, eps }, [x, w, ..]) => {
                let fits = norm_fits(*axis, b.shape(x), b.shape(w));
                (fits && float(x) && same_type(&[x, w])).then_some(Fused::RmsNorm { eps: *eps })
            }
            (Pattern::AddRmsNorm { axis, eps }, [x, y, w, ..]) => {
                let fits = b.shape(x) == b.shape(y) && norm_fits(*axis, b.shape(x), b.shape(w));
                (fits && float(x) && same_type(&[x, y, w]))
                    .then_some(Fused::AddRmsNorm { eps: *eps })
            }
            (
                Pattern::GqaMatMul {
                    transpose_b,
                    unsqueeze_axis,
                    expand,
                    reshape,
                    allowzero,
                },
                [a, kv, ..],
            ) => {
                let fits = gqa_fits(
                    b.shape(a),
                    b.shape(kv),
                    *transpose_b,
                    *unsqueeze_axis,
                    expand,
                    reshape,
                    *allowzero,
                );
                (fits && float(a) && same_type(&[a, kv])).then_some(Fused::GqaMatMul {
                    transpose_b: *transpose_b,
                })
            }
            (
                Pattern::Rotary {
                    concat_axis,
                    split_axis,
                    half,
                    end,
                },
                [x, cos, sin, ..],
            ) => {
                let xs = b.shape(x);
                let r = xs.len();
                let d = xs.last().copied().unwrap_or(0);
                let h = half.unwrap_or(d / 2);
                let fits = last_axis(*concat_axis, r)
                    && last_axis(*split_axis, r)
                    && h > 0
                    && d == 2 * h
                    && *end >= d as i64
                    && b.shape(cos) == b.shape(sin)
                    && broadcast_shapes(xs, b.shape(cos)).ok().as_deref() == Some(xs);
                (fits && float(x) && same_type(&[x, cos, sin])).then_some(Fused::Rotary { half: h })
            }
            (Pattern::ScaleMaskSoftmax { axis, scale }, [sc, m, ..]) => {
                let ss = b.shape(sc);
                let fits = last_axis(*axis, ss.len())
                    && broadcast_shapes(ss, b.shape(m)).ok().as_deref() == Some(ss);
                (fits && float(sc) && same_type(&[sc, m]))
                    .then_some(Fused::ScaleMaskSoftmax { scale: *scale })
            }
            (Pattern::SiluMul, [g, u, ..]) => {
                let fits = b.shape(g) == b.shape(u) && float(g) && same_type(&[g, u]);
                fits.then_some(Fused::SiluMul)
            }
            _ => None,
        })
    }
}

/// Whether `Reshape(Expand(Unsqueeze(kv, axis), expand), reshape)` repeats each head of `kv`
/// `[B, G, T, D]` `R` times in a row, giving `[B, G·R, T, D]`, and `a` is `[B, G·R, S, K]` with
/// `K` the product's inner dim (`D` for `a · rᵀ`, `T` for `a · r`). Anything else (another
/// axis, an Expand that also broadcasts B or T, a Reshape that does not merge G and R) runs the
/// nodes.
fn gqa_fits(
    a: &[usize],
    kv: &[usize],
    transpose_b: bool,
    unsqueeze_axis: i64,
    expand: &[i64],
    reshape: &[i64],
    allowzero: bool,
) -> bool {
    let (&[ba, h, _, k], &[bk, g, t, d]) = (a, kv) else {
        return false;
    };
    if norm_axis(unsqueeze_axis, 5).ok() != Some(2) || expand.iter().any(|&e| e < 0) {
        return false;
    }
    let unsq = [bk, g, 1, t, d];
    let want: Vec<usize> = expand.iter().map(|&e| e as usize).collect();
    let Ok(expanded) = broadcast_shapes(&unsq, &want) else {
        return false;
    };
    let &[eb, eg, r, et, ed] = &expanded[..] else {
        return false;
    };
    let repeated = (eb, eg, et, ed) == (bk, g, t, d) && r > 0;
    let merged = reshape_target(&expanded, reshape, allowzero).ok() == Some(vec![bk, g * r, t, d]);
    let inner = if transpose_b { d } else { t };
    repeated && merged && ba == bk && h == g * r && k == inner
}
