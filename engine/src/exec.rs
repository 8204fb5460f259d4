//! The graph executor: turns a loaded [`Model`] into a topologically ordered plan of parsed ops
//! over value slots, folds everything that depends only on initializers/constants once at build
//! time, and runs the plan on a [`Backend`], freeing each intermediate after its last use.
//! Shapes are not inferred ahead: every op resolves its output shape at run time.

use std::collections::HashMap;
use std::path::Path;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::onnx::Model;
use crate::ops::{self, Op, ParseError};

struct Step {
    name: String,
    op_type: String,
    op: Op,
    inputs: Vec<Option<usize>>,
    outputs: Vec<Option<usize>>,
    /// Slots whose last reader is this step (freed after it runs).
    frees: Vec<usize>,
}

/// A model bound to a backend, ready to run many times.
pub struct Executor<B: Backend> {
    backend: B,
    steps: Vec<Step>,
    n_slots: usize,
    /// Initializers and folded constants, uploaded once.
    constants: Vec<(usize, B::Tensor)>,
    inputs: Vec<(String, usize)>,
    outputs: Vec<(String, usize)>,
}

impl<B: Backend> std::fmt::Debug for Executor<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("backend", &self.backend.name())
            .field("steps", &self.steps.len())
            .field("constants", &self.constants.len())
            .finish()
    }
}

impl<B: Backend> Executor<B> {
    /// Parses every node (all unsupported ops are reported in one error), orders the graph,
    /// uploads initializers and folds constant subgraphs.
    pub fn new(model: &Model, backend: B) -> Result<Executor<B>> {
        let dir = model.path.parent().unwrap_or(Path::new("."));
        let mut unsupported: Vec<(String, String)> = Vec::new();
        let mut parsed = Vec::with_capacity(model.nodes.len());
        for n in &model.nodes {
            match ops::parse(n, model.opset, dir) {
                Ok(op) => parsed.push(Some(op)),
                Err(ParseError::Unsupported) => {
                    let key = (n.domain.clone(), n.op_type.clone());
                    if !unsupported.contains(&key) {
                        unsupported.push(key);
                    }
                    parsed.push(None);
                }
                Err(ParseError::Invalid(message)) => {
                    return Err(Error::Node {
                        node: n.name.clone(),
                        op: n.op_type.clone(),
                        message,
                    });
                }
            }
        }
        if !unsupported.is_empty() {
            unsupported.sort();
            return Err(Error::Unsupported {
                path: model.path.clone(),
                ops: unsupported,
            });
        }

        // Slots: one per distinct value name.
        let mut slot_of: HashMap<&str, usize> = HashMap::new();
        let names = model
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .chain(model.initializers.keys().map(String::as_str))
            .chain(
                model
                    .nodes
                    .iter()
                    .flat_map(|n| n.inputs.iter().chain(&n.outputs))
                    .map(String::as_str),
            )
            .filter(|v| !v.is_empty());
        for name in names {
            let n = slot_of.len();
            slot_of.entry(name).or_insert(n);
        }
        let n_slots = slot_of.len();

        // Kahn's algorithm over value availability.
        let mut available = vec![false; n_slots];
        for p in &model.inputs {
            available[slot_of[p.name.as_str()]] = true;
        }
        for name in model.initializers.keys() {
            available[slot_of[name.as_str()]] = true;
        }
        let mut order = Vec::with_capacity(model.nodes.len());
        let mut done = vec![false; model.nodes.len()];
        // Nodes are usually already sorted: repeated forward sweeps finish in one pass then.
        loop {
            let mut progressed = false;
            for (i, n) in model.nodes.iter().enumerate() {
                if done[i] {
                    continue;
                }
                if n.inputs
                    .iter()
                    .filter(|v| !v.is_empty())
                    .all(|v| available[slot_of[v.as_str()]])
                {
                    for o in n.outputs.iter().filter(|v| !v.is_empty()) {
                        available[slot_of[o.as_str()]] = true;
                    }
                    done[i] = true;
                    order.push(i);
                    progressed = true;
                }
            }
            if order.len() == model.nodes.len() {
                break;
            }
            if !progressed {
                let stuck = done.iter().position(|d| !d).map(|i| &model.nodes[i]);
                let (node, op) = stuck
                    .map(|n| (n.name.clone(), n.op_type.clone()))
                    .unwrap_or_default();
                return Err(Error::Node {
                    node,
                    op,
                    message: "the graph has a cycle through this node".into(),
                });
            }
        }

        let mut steps: Vec<Step> = order
            .iter()
            .map(|&i| {
                let n = &model.nodes[i];
                let ids = |vs: &[String]| -> Vec<Option<usize>> {
                    vs.iter()
                        .map(|v| (!v.is_empty()).then(|| slot_of[v.as_str()]))
                        .collect()
                };
                Step {
                    name: n.name.clone(),
                    op_type: n.op_type.clone(),
                    op: parsed[i].take().expect("every node parsed"),
                    inputs: ids(&n.inputs),
                    outputs: ids(&n.outputs),
                    frees: Vec::new(),
                }
            })
            .collect();

        // Upload initializers, then fold steps whose inputs are all constant.
        let mut constant: Vec<Option<B::Tensor>> = vec![None; n_slots];
        for (name, t) in &model.initializers {
            constant[slot_of[name.as_str()]] = Some(backend.upload(t)?);
        }
        let mut kept = Vec::with_capacity(steps.len());
        for step in steps.drain(..) {
            let foldable = step.inputs.iter().flatten().all(|&s| constant[s].is_some());
            if !foldable {
                kept.push(step);
                continue;
            }
            let ins: Vec<Option<&B::Tensor>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| constant[s].as_ref()))
                .collect();
            let outs = run_step(&backend, &step, &ins)?;
            for (slot, value) in step.outputs.iter().zip(outs) {
                if let (Some(slot), Some(value)) = (slot, value) {
                    constant[*slot] = Some(value);
                }
            }
        }
        let mut steps = kept;
        let graph_outputs: Vec<usize> = model
            .outputs
            .iter()
            .map(|p| slot_of[p.name.as_str()])
            .collect();
        fuse_transposed_matmuls(&mut steps, &graph_outputs);

        let inputs: Vec<(String, usize)> = model
            .inputs
            .iter()
            .map(|p| (p.name.clone(), slot_of[p.name.as_str()]))
            .collect();
        let outputs: Vec<(String, usize)> = model
            .outputs
            .iter()
            .map(|p| (p.name.clone(), slot_of[p.name.as_str()]))
            .collect();

        // Constants still read at run time (by a kept step or as a graph output).
        let mut needed = vec![false; n_slots];
        for s in &steps {
            for &i in s.inputs.iter().flatten() {
                needed[i] = true;
            }
        }
        for (_, i) in &outputs {
            needed[*i] = true;
        }
        // A constant right operand of a MatMul is prepared once for the device's kernel.
        let mut weight = vec![false; n_slots];
        for s in &steps {
            if matches!(s.op, Op::MatMul)
                && let Some(&Some(w)) = s.inputs.get(1)
            {
                weight[w] = true;
            }
        }
        let constants: Vec<(usize, B::Tensor)> = constant
            .into_iter()
            .enumerate()
            .filter_map(|(i, t)| t.filter(|_| needed[i]).map(|t| (i, t)))
            .map(|(i, t)| {
                let t = if weight[i] {
                    backend.prepare_weight(&t)?
                } else {
                    t
                };
                Ok((i, t))
            })
            .collect::<Result<_>>()?;

        // Free each non-constant, non-output slot after its last reader.
        let mut last_use: Vec<Option<usize>> = vec![None; n_slots];
        for (k, s) in steps.iter().enumerate() {
            for &i in s.inputs.iter().flatten() {
                last_use[i] = Some(k);
            }
        }
        let mut pinned = vec![false; n_slots];
        for (i, _) in &constants {
            pinned[*i] = true;
        }
        for (_, i) in &outputs {
            pinned[*i] = true;
        }
        for (slot, k) in last_use.iter().enumerate() {
            if let Some(k) = k
                && !pinned[slot]
            {
                steps[*k].frees.push(slot);
            }
        }

        Ok(Executor {
            backend,
            steps,
            n_slots,
            constants,
            inputs,
            outputs,
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Graph input names, in declaration order (initializer-backed inputs excluded).
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(|(n, _)| n.as_str())
    }

    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(|(n, _)| n.as_str())
    }

    /// Number of steps left after constant folding.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Runs the graph. `inputs` gives a value for every graph input, by name; returns every
    /// graph output in declaration order.
    pub fn run(&self, inputs: &[(&str, B::Tensor)]) -> Result<Vec<B::Tensor>> {
        self.run_traced(inputs, None)
    }

    /// [`Executor::run`], adding each step's wall time into `trace` when given (one clock read
    /// per step; on a backend that runs ops asynchronously the times are launch times).
    pub fn run_traced(
        &self,
        inputs: &[(&str, B::Tensor)],
        mut trace: Option<&mut OpTrace>,
    ) -> Result<Vec<B::Tensor>> {
        if let Some(t) = trace.as_deref_mut() {
            t.step_ns.resize(self.steps.len(), 0);
            t.runs += 1;
        }
        let mut values: Vec<Option<B::Tensor>> = vec![None; self.n_slots];
        for (slot, t) in &self.constants {
            values[*slot] = Some(t.clone());
        }
        // Callers give the inputs in the graph's order (a decode step: 63 of them), so each is
        // found at its own index first; a search over all of them only for the others.
        let mut in_order = inputs.len() == self.inputs.len();
        for (i, (name, slot)) in self.inputs.iter().enumerate() {
            let t = match inputs.get(i).filter(|(n, _)| n == name) {
                Some(t) => t,
                None => {
                    in_order = false;
                    inputs.iter().find(|(n, _)| n == name).ok_or_else(|| {
                        Error::msg(format!("graph input {name:?} was not given a value"))
                    })?
                }
            };
            values[*slot] = Some(t.1.clone());
        }
        if !in_order {
            for (name, _) in inputs {
                if !self.inputs.iter().any(|(n, _)| n == name) {
                    return Err(Error::msg(format!("{name:?} is not a graph input")));
                }
            }
        }
        for (k, step) in self.steps.iter().enumerate() {
            let start = trace.is_some().then(std::time::Instant::now);
            let outs = {
                let ins: Vec<Option<&B::Tensor>> = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| values[s].as_ref()))
                    .collect();
                run_step(&self.backend, step, &ins)?
            };
            if let (Some(t), Some(start)) = (trace.as_deref_mut(), start) {
                t.step_ns[k] += start.elapsed().as_nanos() as u64;
            }
            for (slot, value) in step.outputs.iter().zip(outs) {
                if let (Some(slot), Some(value)) = (slot, value) {
                    values[*slot] = Some(value);
                }
            }
            for &s in &step.frees {
                values[s] = None;
            }
        }
        self.outputs
            .iter()
            .map(|(name, slot)| {
                values[*slot]
                    .clone()
                    .ok_or_else(|| Error::msg(format!("graph output {name:?} was not computed")))
            })
            .collect()
    }
}

/// Folds `Transpose` steps that only swap the last two axes into the one `MatMul` that reads
/// them as its right operand ([`Op::MatMulTransposedB`]): the backend then reads the matrix in
/// place (the decode step's `q · Kᵀ` over the whole KV cache was a full copy of the keys per
/// layer). Only when nothing else reads the transposed value and it is not a graph output; the
/// fused step keeps the MatMul's name with the transpose's after it, so errors name both.
fn fuse_transposed_matmuls(steps: &mut Vec<Step>, graph_outputs: &[usize]) {
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

/// Wall time per plan step, summed over the runs traced into it (see [`Executor::run_traced`]).
#[derive(Clone, Debug, Default)]
pub struct OpTrace {
    /// Nanoseconds per step of the plan, in plan order.
    pub step_ns: Vec<u64>,
    /// Graph runs traced.
    pub runs: u64,
}

/// One op type's share of traced runs.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub op_type: String,
    /// Nodes of this type in the plan (after constant folding).
    pub nodes: usize,
    /// Mean wall time per traced run, milliseconds.
    pub ms_per_run: f64,
}

impl<B: Backend> Executor<B> {
    /// `trace` summed per op type, largest first.
    pub fn op_times(&self, trace: &OpTrace) -> Vec<OpTime> {
        let mut by: Vec<OpTime> = Vec::new();
        for (_, op_type, ms) in self.node_times(trace) {
            match by.iter_mut().find(|o| o.op_type == op_type) {
                Some(o) => {
                    o.nodes += 1;
                    o.ms_per_run += ms;
                }
                None => by.push(OpTime {
                    op_type,
                    nodes: 1,
                    ms_per_run: ms,
                }),
            }
        }
        by.sort_by(|a, b| b.ms_per_run.total_cmp(&a.ms_per_run));
        by
    }

    /// Every node of `trace`, slowest first, as (node name, op type, mean ms per traced run).
    pub fn node_times(&self, trace: &OpTrace) -> Vec<(String, String, f64)> {
        let mut v: Vec<(String, String, f64)> = self
            .steps
            .iter()
            .zip(&trace.step_ns)
            .map(|(s, &ns)| {
                let ms = ns as f64 / 1e6 / trace.runs.max(1) as f64;
                (s.name.clone(), s.op_type.clone(), ms)
            })
            .collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        v
    }
}

/// Evaluates one step, wrapping errors with the node's name and checking that every output the
/// graph names was produced.
fn run_step<B: Backend>(
    backend: &B,
    step: &Step,
    ins: &[Option<&B::Tensor>],
) -> Result<Vec<Option<B::Tensor>>> {
    let wrap = |message: String| Error::Node {
        node: step.name.clone(),
        op: step.op_type.clone(),
        message,
    };
    let mut outs = step
        .op
        .eval(backend, ins, step.outputs.len())
        .map_err(|e| wrap(e.to_string()))?;
    outs.resize(step.outputs.len().max(outs.len()), None);
    for (i, (slot, value)) in step.outputs.iter().zip(&outs).enumerate() {
        if slot.is_some() && value.is_none() {
            return Err(wrap(format!(
                "output {i} is used by the graph but this engine does not compute it"
            )));
        }
    }
    Ok(outs)
}
