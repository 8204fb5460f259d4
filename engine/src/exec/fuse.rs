//! Plan rewrites made once when the executor is built, after constant folding.
//!
//! - [`fuse_transposed_matmuls`]: a `Transpose` of the last two axes read only by a `MatMul`
//!   becomes [`Op::MatMulTransposedB`] (the backend gives the two ops' bits).
//! - [`fuse_patterns`]: runs of nodes that exporters write for one computation become one
//!   [`Op::Fused`] step: a decomposed RMS norm (6 nodes; 7 with the residual Add that makes its
//!   input), rotate-half RoPE (6 or 7 nodes), SwiGLU's gate (3 nodes), attention's scaled,
//!   masked softmax (3 nodes) and grouped-query attention's `Unsqueeze`, `Expand`, `Reshape` of
//!   the KV cache read by a MatMul (4 nodes). On a device each is one kernel instead of one per
//!   node: the generic decode step of a standard-op export had ~1850 kernels, most of them these.
//!   The step keeps the nodes as its body and runs them when the backend has no kernel or the
//!   run-time shapes do not fit one (`ops/fused.rs`), so the CPU computes exactly what the
//!   unfused plan did.
//!
//! A pattern is fused only when none of its intermediate values is read outside it or is a graph
//! output, so removing its nodes changes nothing else in the plan. The one exception is the
//! residual sum of [`Pattern::AddRmsNorm`]: the fused step outputs it as well, and fuses only when
//! every other reader of it comes after the norm in the plan (the step runs at the norm's place).

use std::collections::HashMap;

use super::Step;
use crate::backend::{BinaryOp, ReduceOp, UnaryOp};
use crate::ops::{BodyNode, FusedOp, Op, Pattern};
use crate::tensor::Tensor;

/// The host value of a slot that holds a constant (`None` for any other slot).
pub(super) type ConstValue<'a> = dyn Fn(usize) -> Option<Tensor> + 'a;

/// Folds `Transpose` steps that only swap the last two axes into the one `MatMul` that reads
/// them as its right operand ([`Op::MatMulTransposedB`]): the backend then reads the matrix in
/// place (the decode step's `q · Kᵀ` over the whole KV cache was a full copy of the keys per
/// layer). Only when nothing else reads the transposed value and it is not a graph output; the
/// fused step keeps the MatMul's name with the transpose's after it, so errors name both.
pub(super) fn fuse_transposed_matmuls(steps: &mut Vec<Step>, graph_outputs: &[usize]) {
    let mut readers: HashMap<usize, usize> = HashMap::new();
    for s in steps.iter() {
        for &i in s.inputs.iter().flatten() {
            *readers.entry(i).or_default() += 1;
        }
    }
    let swaps_last_two = |perm: &[i64]| {
        let r = perm.len();
        r >= 2
            && perm.iter().enumerate().all(|(d, &p)| {
                let want = if d == r - 2 {
                    r - 1
                } else if d == r - 1 {
                    r - 2
                } else {
                    d
                };
                p == want as i64
            })
    };
    let mut drop = vec![false; steps.len()];
    for k in 0..steps.len() {
        if !matches!(steps[k].op, Op::MatMul) {
            continue;
        }
        let Some(Some(b)) = steps[k].inputs.get(1).copied() else {
            continue;
        };
        if readers.get(&b) != Some(&1) || graph_outputs.contains(&b) {
            continue;
        }
        let Some(t) = (0..k).rev().find(|&t| steps[t].outputs.contains(&Some(b))) else {
            continue;
        };
        let fusable = matches!(&steps[t].op, Op::Transpose { perm: Some(p) } if swaps_last_two(p))
            && steps[t].outputs.len() == 1
            && !drop[t];
        let Some(Some(src)) = steps[t].inputs.first().copied().filter(|_| fusable) else {
            continue;
        };
        steps[k].op = Op::MatMulTransposedB;
        steps[k].inputs[1] = Some(src);
        steps[k].name = format!("{} (+ {})", steps[k].name, steps[t].name);
        drop[t] = true;
    }
    let mut i = 0;
    steps.retain(|_| {
        i += 1;
        !drop[i - 1]
    });
}

/// The plan as the matchers read it.
struct View<'a> {
    steps: &'a [Step],
    /// Per slot: the step and output index that compute it.
    producer: Vec<Option<(usize, usize)>>,
    /// Per slot: how many step inputs read it (a step reading it twice counts twice).
    readers: Vec<usize>,
    is_output: Vec<bool>,
    constant: &'a ConstValue<'a>,
}

/// One recognised pattern: what it computes, its nodes (root last), and its first inputs in the
/// order [`crate::backend::Fused`] takes them.
struct Match {
    pattern: Pattern,
    nodes: Vec<usize>,
    first: Vec<usize>,
    /// Values the nodes compute that the step outputs after the root's (and so may be read
    /// outside: by steps after the root only).
    also_out: Vec<usize>,
}

impl View<'_> {
    /// The step computing `slot` as its output `out`, when its op is `want`.
    fn made_by(&self, slot: usize, out: usize, want: impl Fn(&Op) -> bool) -> Option<usize> {
        let (k, o) = self.producer[slot]?;
        (o == out && want(&self.steps[k].op)).then_some(k)
    }

    /// Step `k`'s inputs when it has exactly `n`, all given.
    fn ins(&self, k: usize, n: usize) -> Option<Vec<usize>> {
        let ins = &self.steps[k].inputs;
        (ins.len() == n).then(|| ins.iter().copied().collect::<Option<Vec<_>>>())?
    }

    /// A one-element constant as f64.
    fn scalar(&self, slot: usize) -> Option<f64> {
        let t = (self.constant)(slot)?;
        (t.numel() == 1 && t.dtype().is_float()).then(|| t.to_f32_vec()[0] as f64)
    }

    /// An integer constant's values.
    fn ints(&self, slot: usize) -> Option<Vec<i64>> {
        (self.constant)(slot)?.to_i64_vec().ok()
    }

    /// True when nothing outside `nodes` reads a value they compute (the root's output and
    /// `also_out` aside) and none of those values is a graph output; `also_out`'s values may be
    /// read outside, by steps after `root` only.
    fn closed(&self, nodes: &[usize], root: usize, also_out: &[usize]) -> bool {
        let late_readers_only = |s: usize| {
            self.steps
                .iter()
                .enumerate()
                .all(|(k, step)| k > root || nodes.contains(&k) || !step.inputs.contains(&Some(s)))
        };
        if !also_out.iter().all(|&s| late_readers_only(s)) {
            return false;
        }
        let mut reads: HashMap<usize, usize> = HashMap::new();
        for &k in nodes {
            for &i in self.steps[k].inputs.iter().flatten() {
                *reads.entry(i).or_default() += 1;
            }
        }
        nodes.iter().all(|&k| {
            self.steps[k]
                .outputs
                .iter()
                .enumerate()
                .all(|(o, slot)| match slot {
                    None => true,
                    Some(_) if k == root && o == 0 => true,
                    Some(s) if also_out.contains(s) => true,
                    Some(s) => {
                        k != root
                            && !self.is_output[*s]
                            && reads.get(s).copied().unwrap_or(0) == self.readers[*s]
                    }
                })
        })
    }

    /// `Mul(Div(x, Sqrt(Add(ReduceMean(Mul(x, x) | Pow(x, 2), one axis, keepdims), eps))), w)`,
    /// the Add's and outer Mul's operands in either order.
    fn rms_norm(&self, root: usize) -> Option<Match> {
        let [a, b] = self.ins(root, 2)?[..] else {
            return None;
        };
        if !matches!(self.steps[root].op, Op::Binary(BinaryOp::Mul)) {
            return None;
        }
        [(a, b), (b, a)].into_iter().find_map(|(n, w)| {
            let kd = self.made_by(n, 0, |op| matches!(op, Op::Binary(BinaryOp::Div)))?;
            let [x, sd] = self.ins(kd, 2)?[..] else {
                return None;
            };
            let ks = self.made_by(sd, 0, |op| matches!(op, Op::Unary(UnaryOp::Sqrt)))?;
            let [v] = self.ins(ks, 1)?[..] else {
                return None;
            };
            let ka = self.made_by(v, 0, |op| matches!(op, Op::Binary(BinaryOp::Add)))?;
            let [p, q] = self.ins(ka, 2)?[..] else {
                return None;
            };
            let (m, eps) = match (self.scalar(q), self.scalar(p)) {
                (Some(e), _) => (p, e),
                (None, Some(e)) => (q, e),
                _ => return None,
            };
            let km = self.made_by(m, 0, |op| {
                matches!(
                    op,
                    Op::Reduce {
                        op: ReduceOp::Mean,
                        keepdims: true,
                        ..
                    }
                )
            })?;
            let Op::Reduce { axes, .. } = &self.steps[km].op else {
                return None;
            };
            let red_in = &self.steps[km].inputs;
            let axes = match (axes, red_in.get(1).copied().flatten()) {
                (_, Some(t)) => self.ints(t)?,
                (Some(a), None) => a.clone(),
                (None, None) => return None,
            };
            let (&[axis], Some(Some(sq))) = (&axes[..], red_in.first()) else {
                return None;
            };
            let kq = self.made_by(*sq, 0, |op| {
                matches!(op, Op::Binary(BinaryOp::Mul) | Op::Pow)
            })?;
            let [s0, s1] = self.ins(kq, 2)?[..] else {
                return None;
            };
            let squares_x = match self.steps[kq].op {
                Op::Pow => s0 == x && self.scalar(s1) == Some(2.0),
                _ => s0 == x && s1 == x,
            };
            squares_x.then(|| Match {
                pattern: Pattern::RmsNorm {
                    axis,
                    eps: eps as f32,
                },
                nodes: vec![kq, km, ka, ks, kd, root],
                first: vec![x, w],
                also_out: Vec::new(),
            })
        })
    }

    /// `Add(Mul(x, cos), Mul(Concat(Neg(x2), x1), sin))` where `x1`, `x2` are the halves of `x`
    /// (one Split, or two Slices with constant bounds and unit steps), the Add's and Muls'
    /// operands in either order.
    fn rotary(&self, root: usize) -> Option<Match> {
        if !matches!(self.steps[root].op, Op::Binary(BinaryOp::Add)) {
            return None;
        }
        let [a, b] = self.ins(root, 2)?[..] else {
            return None;
        };
        let is_mul = |op: &Op| matches!(op, Op::Binary(BinaryOp::Mul));
        [(a, b), (b, a)].into_iter().find_map(|(p, q)| {
            let (kp, kq) = (self.made_by(p, 0, is_mul)?, self.made_by(q, 0, is_mul)?);
            let [q0, q1] = self.ins(kq, 2)?[..] else {
                return None;
            };
            let [p0, p1] = self.ins(kp, 2)?[..] else {
                return None;
            };
            [(q0, q1), (q1, q0)].into_iter().find_map(|(rh, sin)| {
                let kc = self.made_by(rh, 0, |op| matches!(op, Op::Concat { .. }))?;
                let Op::Concat { axis: concat_axis } = self.steps[kc].op else {
                    return None;
                };
                let [neg, x1] = self.ins(kc, 2)?[..] else {
                    return None;
                };
                let kn = self.made_by(neg, 0, |op| matches!(op, Op::Unary(UnaryOp::Neg)))?;
                let [x2] = self.ins(kn, 1)?[..] else {
                    return None;
                };
                let (x, split_axis, half, end, split_nodes) = self.halves(x1, x2)?;
                let cos = match (p0 == x, p1 == x) {
                    (true, false) => p1,
                    (false, true) => p0,
                    _ => return None,
                };
                let mut nodes = split_nodes;
                nodes.extend([kn, kc, kp, kq, root]);
                Some(Match {
                    pattern: Pattern::Rotary {
                        concat_axis,
                        split_axis,
                        half,
                        end,
                    },
                    nodes,
                    first: vec![x, cos, sin],
                    also_out: Vec::new(),
                })
            })
        })
    }

    /// `x1`, `x2` as the first and second half of one `x` along one axis: (x, axis, the first
    /// half's length or `None` for an equal Split, the second half's end, the nodes).
    #[allow(clippy::type_complexity)]
    fn halves(&self, x1: usize, x2: usize) -> Option<(usize, i64, Option<usize>, i64, Vec<usize>)> {
        let is_split = |op: &Op| matches!(op, Op::Split { .. });
        if let (Some(k1), Some(k2)) = (self.made_by(x1, 0, is_split), self.made_by(x2, 1, is_split))
        {
            let step = &self.steps[k1];
            let Op::Split {
                axis,
                split,
                num_outputs,
            } = &step.op
            else {
                return None;
            };
            if k1 != k2 || step.outputs.len() != 2 {
                return None;
            }
            let x = step.inputs.first().copied().flatten()?;
            let sizes = match (split, step.inputs.get(1).copied().flatten()) {
                (_, Some(t)) => Some(self.ints(t)?),
                (Some(s), None) => Some(s.clone()),
                (None, None) => None,
            };
            let half = match sizes.as_deref() {
                Some(&[h1, h2]) if h1 == h2 && h1 > 0 => Some(h1 as usize),
                Some(_) => return None,
                None if num_outputs.is_none_or(|n| n == 2) => None,
                None => return None,
            };
            return Some((x, *axis, half, i64::MAX, vec![k1]));
        }
        let is_slice = |op: &Op| matches!(op, Op::Slice);
        let (k1, k2) = (
            self.made_by(x1, 0, is_slice)?,
            self.made_by(x2, 0, is_slice)?,
        );
        // (data, start, end, axis) of a Slice over one axis with a unit step.
        let bounds = |k: usize| -> Option<(usize, i64, i64, i64)> {
            let ins = &self.steps[k].inputs;
            let at = |i: usize| ins.get(i).copied().flatten();
            let one = |i: usize| match self.ints(at(i)?)?[..] {
                [v] => Some(v),
                _ => None,
            };
            if ins.len() > 5 || at(4).is_some_and(|_| one(4) != Some(1)) {
                return None;
            }
            Some((at(0)?, one(1)?, one(2)?, one(3)?))
        };
        let (xa, s1, e1, a1) = bounds(k1)?;
        let (xb, s2, e2, a2) = bounds(k2)?;
        let fits = xa == xb && a1 == a2 && s1 == 0 && e1 > 0 && s2 == e1;
        fits.then(|| (xa, a1, Some(e1 as usize), e2, vec![k1, k2]))
    }

    /// `Softmax(Add(Mul(s, scale), m))` with a one-element constant `scale`, the Add's and
    /// Mul's operands in either order (opset ≥ 13 Softmax: one axis).
    fn scale_mask_softmax(&self, root: usize) -> Option<Match> {
        let Op::Softmax {
            axis,
            log: false,
            legacy: false,
        } = self.steps[root].op
        else {
            return None;
        };
        let [a] = self.ins(root, 1)?[..] else {
            return None;
        };
        let ka = self.made_by(a, 0, |op| matches!(op, Op::Binary(BinaryOp::Add)))?;
        let [p, q] = self.ins(ka, 2)?[..] else {
            return None;
        };
        [(p, q), (q, p)].into_iter().find_map(|(scaled, m)| {
            let km = self.made_by(scaled, 0, |op| matches!(op, Op::Binary(BinaryOp::Mul)))?;
            let [u, v] = self.ins(km, 2)?[..] else {
                return None;
            };
            let (s, scale) = match (self.scalar(v), self.scalar(u)) {
                (Some(c), _) => (u, c),
                (None, Some(c)) => (v, c),
                _ => return None,
            };
            Some(Match {
                pattern: Pattern::ScaleMaskSoftmax {
                    axis,
                    scale: scale as f32,
                },
                nodes: vec![km, ka, root],
                first: vec![s, m],
                also_out: Vec::new(),
            })
        })
    }

    /// An RMS norm whose input `x` is `Add(a, b)`: the Add joins the match and the step outputs
    /// `x` after the norm. `None` when `x` has another producer, or nothing but the norm reads it
    /// and it is no graph output (an output nobody reads would never be freed): the plain norm
    /// is kept.
    fn add_rms_norm(&self, norm: &Match) -> Option<Match> {
        let Pattern::RmsNorm { axis, eps } = norm.pattern else {
            return None;
        };
        let x = *norm.first.first()?;
        let inside = norm
            .nodes
            .iter()
            .flat_map(|&k| self.steps[k].inputs.iter())
            .filter(|&&i| i == Some(x))
            .count();
        if self.readers[x] == inside && !self.is_output[x] {
            return None;
        }
        let ka = self.made_by(x, 0, |op| matches!(op, Op::Binary(BinaryOp::Add)))?;
        let [a, b] = self.ins(ka, 2)?[..] else {
            return None;
        };
        let mut nodes = norm.nodes.clone();
        nodes.push(ka);
        let mut first = vec![a, b];
        first.extend(&norm.first[1..]);
        Some(Match {
            pattern: Pattern::AddRmsNorm { axis, eps },
            nodes,
            first,
            also_out: vec![x],
        })
    }

    /// `MatMul(a, Reshape(Expand(Unsqueeze(kv, axis), e), r))` (or the transposed-B MatMul) with
    /// constant axes, `e` and `r`: grouped-query attention reading the KV cache with each head
    /// repeated. Whether the constants repeat heads is checked at run time (`ops/fused.rs`).
    fn gqa_matmul(&self, root: usize) -> Option<Match> {
        let transpose_b = match self.steps[root].op {
            Op::MatMul => false,
            Op::MatMulTransposedB => true,
            _ => return None,
        };
        let [a, rep] = self.ins(root, 2)?[..] else {
            return None;
        };
        if a == rep {
            return None;
        }
        let kr = self.made_by(rep, 0, |op| matches!(op, Op::Reshape { .. }))?;
        let Op::Reshape { allowzero } = self.steps[kr].op else {
            return None;
        };
        let [e, r] = self.ins(kr, 2)?[..] else {
            return None;
        };
        let ke = self.made_by(e, 0, |op| matches!(op, Op::Expand))?;
        let [u, es] = self.ins(ke, 2)?[..] else {
            return None;
        };
        let ku = self.made_by(u, 0, |op| matches!(op, Op::Unsqueeze { .. }))?;
        let Op::Unsqueeze { axes } = &self.steps[ku].op else {
            return None;
        };
        let ins = &self.steps[ku].inputs;
        let kv = ins.first().copied().flatten()?;
        let axes = match (axes, ins.get(1).copied().flatten()) {
            (_, Some(t)) => self.ints(t)?,
            (Some(a), None) => a.clone(),
            (None, None) => return None,
        };
        let (&[unsqueeze_axis], true) = (&axes[..], ins.len() <= 2) else {
            return None;
        };
        Some(Match {
            pattern: Pattern::GqaMatMul {
                transpose_b,
                unsqueeze_axis,
                expand: self.ints(es)?,
                reshape: self.ints(r)?,
                allowzero,
            },
            nodes: vec![ku, ke, kr, root],
            first: vec![a, kv],
            also_out: Vec::new(),
        })
    }

    /// `Mul(Mul(g, Sigmoid(g)), u)`, every Mul's operands in either order.
    fn silu_mul(&self, root: usize) -> Option<Match> {
        let is_mul = |op: &Op| matches!(op, Op::Binary(BinaryOp::Mul));
        if !is_mul(&self.steps[root].op) {
            return None;
        }
        let [a, b] = self.ins(root, 2)?[..] else {
            return None;
        };
        [(a, b), (b, a)].into_iter().find_map(|(s, u)| {
            let km = self.made_by(s, 0, is_mul)?;
            let [m0, m1] = self.ins(km, 2)?[..] else {
                return None;
            };
            [(m0, m1), (m1, m0)].into_iter().find_map(|(g, sg)| {
                let ks = self.made_by(sg, 0, |op| matches!(op, Op::Unary(UnaryOp::Sigmoid)))?;
                (self.ins(ks, 1)? == [g]).then(|| Match {
                    pattern: Pattern::SiluMul,
                    nodes: vec![ks, km, root],
                    first: vec![g, u],
                    also_out: Vec::new(),
                })
            })
        })
    }
}

/// Replaces each recognised pattern (module docs) by one [`Op::Fused`] step at its last node's
/// place. `constant` gives the host value of constant slots (eps, Slice bounds, axes). Returns
/// how many patterns were fused.
pub(super) fn fuse_patterns(
    steps: &mut Vec<Step>,
    graph_outputs: &[usize],
    n_slots: usize,
    constant: &ConstValue<'_>,
) -> usize {
    let mut producer = vec![None; n_slots];
    let mut readers = vec![0usize; n_slots];
    for (k, s) in steps.iter().enumerate() {
        for (o, slot) in s.outputs.iter().enumerate() {
            if let Some(slot) = slot {
                producer[*slot] = Some((k, o));
            }
        }
        for &i in s.inputs.iter().flatten() {
            readers[i] += 1;
        }
    }
    let mut is_output = vec![false; n_slots];
    for &o in graph_outputs {
        is_output[o] = true;
    }
    let view = View {
        steps,
        producer,
        readers,
        is_output,
        constant,
    };
    let mut used = vec![false; steps.len()];
    let mut fused: HashMap<usize, Step> = HashMap::new();
    for root in 0..steps.len() {
        if used[root] {
            continue;
        }
        let found = match view.rms_norm(root) {
            // With the residual Add before it where that fuses, else the norm alone.
            Some(norm) => vec![view.add_rms_norm(&norm), Some(norm)],
            None => vec![
                view.rotary(root)
                    .or_else(|| view.silu_mul(root))
                    .or_else(|| view.scale_mask_softmax(root))
                    .or_else(|| view.gqa_matmul(root)),
            ],
        };
        let ok = |m: &mut Match| {
            m.nodes.sort_unstable();
            m.nodes.dedup();
            m.nodes.last() == Some(&root)
                && !m.nodes.iter().any(|&k| used[k])
                && view.closed(&m.nodes, root, &m.also_out)
        };
        let Some(m) = found
            .into_iter()
            .flatten()
            .find_map(|mut m| ok(&mut m).then_some(m))
        else {
            continue;
        };
        for &k in &m.nodes {
            used[k] = true;
        }
        fused.insert(root, fused_step(steps, m));
    }
    let n = fused.len();
    let old = std::mem::take(steps);
    for (k, step) in old.into_iter().enumerate() {
        match fused.remove(&k) {
            Some(f) => steps.push(f),
            None if !used[k] => steps.push(step),
            None => {}
        }
    }
    n
}

/// One step for the matched nodes: inputs are the match's first inputs, then every other value
/// the nodes read from outside; the body is the nodes, renumbered.
fn fused_step(steps: &[Step], m: Match) -> Step {
    let root = *m.nodes.last().expect("a match has nodes");
    let mut local: HashMap<usize, usize> = HashMap::new();
    let mut inputs = m.first.clone();
    for (i, &s) in m.first.iter().enumerate() {
        local.entry(s).or_insert(i);
    }
    let produced: Vec<usize> = m
        .nodes
        .iter()
        .flat_map(|&k| steps[k].outputs.iter().flatten().copied())
        .collect();
    for &k in &m.nodes {
        for &s in steps[k].inputs.iter().flatten() {
            if !produced.contains(&s) && !local.contains_key(&s) {
                local.insert(s, inputs.len());
                inputs.push(s);
            }
        }
    }
    let mut n_values = inputs.len();
    let mut body = Vec::with_capacity(m.nodes.len());
    for &k in &m.nodes {
        let ins = steps[k]
            .inputs
            .iter()
            .map(|s| s.map(|s| local[&s]))
            .collect();
        let outs = steps[k]
            .outputs
            .iter()
            .map(|s| {
                s.map(|s| {
                    local.insert(s, n_values);
                    n_values += 1;
                    n_values - 1
                })
            })
            .collect();
        body.push(BodyNode {
            op: steps[k].op.clone(),
            inputs: ins,
            outputs: outs,
        });
    }
    let out = steps[root].outputs[0];
    let mut outputs = vec![out];
    outputs.extend(m.also_out.iter().map(|&s| Some(s)));
    let results = outputs
        .iter()
        .map(|s| local[&s.expect("a fused step's outputs are values")])
        .collect();
    Step {
        name: format!("{} (+ {} nodes)", steps[root].name, m.nodes.len() - 1),
        op_type: format!("Fused {}", m.pattern.name()),
        op: Op::Fused(Box::new(FusedOp {
            pattern: m.pattern,
            body,
            n_values,
            results,
        })),
        inputs: inputs.into_iter().map(Some).collect(),
        outputs,
        frees: Vec::new(),
    }
}
