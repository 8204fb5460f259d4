//! The graph executor: turns a loaded [`Model`] into a topologically ordered plan of parsed ops
//! over value slots, folds everything that depends only on initializers/constants once at build
//! time, rewrites the plan where several nodes are one computation (`exec/fuse.rs`), and runs it
//! on a [`Backend`], freeing each intermediate after its last use. Shapes are not inferred ahead:
//! every op resolves its output shape at run time.

use std::collections::HashMap;
use std::path::Path;

mod fuse;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::onnx::Model;
use crate::ops::{self, Op, ParseError};

/// How [`Executor::with_options`] builds a plan.
#[derive(Clone, Copy, Debug)]
pub struct ExecOptions {
    /// Fuse the node patterns of `exec/fuse.rs` (decomposed RMS norm, rotate-half RoPE,
    /// SwiGLU's gate) into one step each. On by default: a backend without their kernels runs
    /// the same nodes inside the step, so only a device with kernels computes differently
    /// (the same values, with fewer launches). Off: the plan has one step per node.
    pub fuse_patterns: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            fuse_patterns: true,
        }
    }
}

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
    /// uploads initializers, folds constant subgraphs and fuses (default [`ExecOptions`]).
    pub fn new(model: &Model, backend: B) -> Result<Executor<B>> {
        Self::with_options(model, backend, ExecOptions::default())
    }

    /// [`Executor::new`] with `options`.
    pub fn with_options(model: &Model, backend: B, options: ExecOptions) -> Result<Executor<B>> {
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
        fuse::fuse_transposed_matmuls(&mut steps, &graph_outputs);
        if options.fuse_patterns {
            let value = |slot: usize| {
                let t = constant.get(slot)?.as_ref()?;
                backend.download(t).ok()
            };
            fuse::fuse_patterns(&mut steps, &graph_outputs, n_slots, &value);
        }

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
        let mut values = self.bind_inputs(inputs)?;
        for (k, step) in self.steps.iter().enumerate() {
            self.run_one(k, &mut values, &step.frees, trace.as_deref_mut(), None)?;
        }
        self.collect_outputs(&values)
    }

    /// Places the constants and `inputs` (by name, as [`Executor::run`] takes them) into a
    /// fresh value table.
    fn bind_inputs(&self, inputs: &[(&str, B::Tensor)]) -> Result<Vec<Option<B::Tensor>>> {
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
        Ok(values)
    }

    /// Runs plan step `k` over `values`, then drops the slots in `frees`. With `probe`, asks the
    /// backend afterwards whether the step worked on the host ([`Backend::take_host_work`]).
    fn run_one(
        &self,
        k: usize,
        values: &mut [Option<B::Tensor>],
        frees: &[usize],
        trace: Option<&mut OpTrace>,
        probe: Option<&mut [StepMode]>,
    ) -> Result<()> {
        let step = &self.steps[k];
        let start = trace.is_some().then(std::time::Instant::now);
        let outs = {
            let ins: Vec<Option<&B::Tensor>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| values[s].as_ref()))
                .collect();
            run_step(&self.backend, step, &ins)?
        };
        if let (Some(t), Some(start)) = (trace, start) {
            t.step_ns[k] += start.elapsed().as_nanos() as u64;
        }
        if let Some(p) = probe {
            p[k] = match self.backend.take_host_work() {
                Some(why) => StepMode::Host(why),
                None => StepMode::Device,
            };
        }
        for (slot, value) in step.outputs.iter().zip(outs) {
            if let (Some(slot), Some(value)) = (slot, value) {
                values[*slot] = Some(value);
            }
        }
        for &s in frees {
            values[s] = None;
        }
        Ok(())
    }

    fn collect_outputs(&self, values: &[Option<B::Tensor>]) -> Result<Vec<B::Tensor>> {
        self.outputs
            .iter()
            .map(|(name, slot)| {
                values[*slot]
                    .clone()
                    .ok_or_else(|| Error::msg(format!("graph output {name:?} was not computed")))
            })
            .collect()
    }

    /// Runs the graph once on `inputs` and specialises the plan to their shapes: every step
    /// whose outputs follow from the constants and the input *shapes* alone (`Shape`, `Size`
    /// and everything computed only from them and from constants: a decoder's shape
    /// arithmetic, ranges and causal mask) is computed here once and kept as a value; the
    /// steps that read input values stay. [`Executor::run_specialised`] then runs only those,
    /// on inputs of exactly these shapes: a decode step at a fixed cache length (a window) is
    /// the same plan every time, and its remaining steps are device work a CUDA graph can
    /// capture. Returns the plan and this run's outputs.
    pub fn specialise(&self, inputs: &[(&str, B::Tensor)]) -> Result<SpecialisedRun<B::Tensor>> {
        let mut values = self.bind_inputs(inputs)?;
        let mut fixed = vec![false; self.n_slots];
        for (slot, _) in &self.constants {
            fixed[*slot] = true;
        }
        let mut kept = Vec::new();
        for (k, step) in self.steps.iter().enumerate() {
            // Nothing is freed here: a folded value may be read by a kept step much later.
            self.run_one(k, &mut values, &[], None, None)?;
            let reads_shape_only = matches!(step.op, Op::Shape { .. } | Op::Size);
            if reads_shape_only || step.inputs.iter().flatten().all(|&s| fixed[s]) {
                for &o in step.outputs.iter().flatten() {
                    fixed[o] = true;
                }
            } else {
                kept.push(k);
            }
        }
        let outputs = self.collect_outputs(&values)?;
        // Values the kept steps or the outputs read, and that no kept step computes.
        let mut needed = vec![false; self.n_slots];
        for &k in &kept {
            for &i in self.steps[k].inputs.iter().flatten() {
                needed[i] = true;
            }
        }
        for (_, i) in &self.outputs {
            needed[*i] = true;
        }
        let folded: Vec<(usize, B::Tensor)> = values
            .iter()
            .enumerate()
            .filter(|&(i, v)| needed[i] && fixed[i] && v.is_some())
            .filter_map(|(i, v)| v.clone().map(|v| (i, v)))
            .collect();
        let mut pinned = vec![false; self.n_slots];
        for (i, _) in &folded {
            pinned[*i] = true;
        }
        for (_, i) in &self.outputs {
            pinned[*i] = true;
        }
        let mut last_use: Vec<Option<usize>> = vec![None; self.n_slots];
        for (j, &k) in kept.iter().enumerate() {
            for &i in self.steps[k].inputs.iter().flatten() {
                last_use[i] = Some(j);
            }
        }
        let mut frees = vec![Vec::new(); kept.len()];
        for (slot, j) in last_use.iter().enumerate() {
            if let Some(j) = j
                && !pinned[slot]
            {
                frees[*j].push(slot);
            }
        }
        let shapes = self
            .inputs
            .iter()
            .map(|(_, slot)| {
                values[*slot]
                    .as_ref()
                    .map(|t| self.backend.shape(t).to_vec())
                    .unwrap_or_default()
            })
            .collect();
        let mut mode = vec![StepMode::Folded; self.steps.len()];
        for &k in &kept {
            mode[k] = StepMode::Device;
        }
        Ok((
            Specialised {
                shapes,
                steps: kept,
                frees,
                values: folded,
                mode,
            },
            outputs,
        ))
    }

    /// Runs `plan` (made by [`Executor::specialise`]) on `inputs`, which must have the shapes it
    /// was made for. With `probe`, records in the plan which steps worked on the host
    /// ([`Specialised::modes`]).
    pub fn run_specialised(
        &self,
        plan: &mut Specialised<B::Tensor>,
        inputs: &[(&str, B::Tensor)],
        mut trace: Option<&mut OpTrace>,
        probe: bool,
    ) -> Result<Vec<B::Tensor>> {
        if let Some(t) = trace.as_deref_mut() {
            t.step_ns.resize(self.steps.len(), 0);
            t.runs += 1;
        }
        let mut values = self.bind_inputs(inputs)?;
        for ((name, slot), want) in self.inputs.iter().zip(&plan.shapes) {
            let got = values[*slot].as_ref().map(|t| self.backend.shape(t));
            if got != Some(want.as_slice()) {
                return Err(Error::msg(format!(
                    "graph input {name:?} has shape {got:?}; this plan was specialised for {want:?}"
                )));
            }
        }
        for (slot, t) in &plan.values {
            values[*slot] = Some(t.clone());
        }
        if probe {
            // Clears anything an earlier call left behind.
            let _ = self.backend.take_host_work();
        }
        for (j, &k) in plan.steps.iter().enumerate() {
            let p = probe.then_some(plan.mode.as_mut_slice());
            self.run_one(k, &mut values, &plan.frees[j], trace.as_deref_mut(), p)?;
        }
        self.collect_outputs(&values)
    }

    /// Per plan step: name and op type (in the order of [`Specialised::modes`]).
    pub fn step_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.steps
            .iter()
            .map(|s| (s.name.as_str(), s.op_type.as_str()))
    }
}

/// How one plan step runs in a [`Specialised`] plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepMode {
    /// Computed once when the plan was specialised (shape arithmetic and what follows from it).
    Folded,
    /// Runs each time, as device work only (on a device backend: capturable in a CUDA graph).
    Device,
    /// Runs each time and did work on the host the last time it was probed: why.
    Host(String),
}

/// What [`Executor::specialise`] gives: the plan, and the outputs of the run that made it.
pub type SpecialisedRun<T> = (Specialised<T>, Vec<T>);

/// A plan specialised on one set of input shapes ([`Executor::specialise`]).
pub struct Specialised<T> {
    /// Per graph input (declaration order), the shape this plan was made for.
    shapes: Vec<Vec<usize>>,
    /// The steps that run, in plan order.
    steps: Vec<usize>,
    /// Per kept step, the slots to drop after it.
    frees: Vec<Vec<usize>>,
    /// Slots computed once (and constants the kept steps read).
    values: Vec<(usize, T)>,
    /// Per plan step.
    mode: Vec<StepMode>,
}

impl<T> Specialised<T> {
    /// Steps that run each time.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Per plan step (the executor's order, [`Executor::step_names`]): folded, device, or host
    /// work and why (as of the last probed run).
    pub fn modes(&self) -> &[StepMode] {
        &self.mode
    }
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
