//! The generic executor on the GPU (feature `cuda`): any package the fused llama path
//! (`cuda_llama`) does not recognise, such as a standard-op export
//! (`goldens/export_standard_onnx.py`), decoded on [`CudaBackend`] with the KV cache on the
//! device, the decode step captured in one CUDA graph and replayed.
//!
//! **A step of one shape.** A graph replays fixed kernels on fixed addresses, so every decode
//! step must be the same work. The cache is held at one fixed length, a *window* of `W`
//! positions (the prompt plus the new tokens, rounded up to [`WINDOW_ROUND`]), left-padded:
//! the padding is hidden by `attention_mask` (0 over it), `position_ids` carry the true
//! positions, and after each step the `present` without its first position is the next `past`
//! ([`Session::window_inputs`], [`Session::generate_window`] is the same decode on any backend
//! and is tested against the growing cache on the CPU). This needs a graph that builds its
//! causal mask in the cache's frame, as transformers' exports and `crate::llama` do.
//!
//! **The step's life.** Step 1 runs the whole plan once and specialises it to the window's
//! shapes ([`Executor::specialise`]: `Shape` and everything computed from shapes alone, the
//! mask's ranges and comparisons, folded once). Step 2 runs the specialised plan eagerly,
//! asking the backend after each op whether it left the device ([`Specialised::modes`]) and
//! measuring the arena its outputs need. If every op stayed on the device, step 3 is captured:
//! inputs are written into fixed buffers beforehand, outputs are carved from the arena (same
//! addresses every replay), work that would leave the device is an error, and the graph ends by
//! copying `present[.., 1.., ..]` into the fixed `past` buffers. Every later step writes the
//! token, mask and position, replays the graph and reads the logits. An op that leaves the
//! device keeps the step eager, and the report says which op and why.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaGraph, CudaSlice, sys};

use super::{CudaGraphStats, DecodeRun, Decoder};
use crate::backend::cuda::backend::CudaTensor;
use crate::backend::cuda::{CudaBackend, cu_err};
use crate::error::{Error, Result};
use crate::exec::{OpTrace, Specialised, StepMode};
use crate::package::Package;
use crate::session::{CaptureReport, Session, StepTrace, TraceReport};

/// Windows are whole multiples of this many positions, so decodes of nearby lengths share one
/// captured step (a longer window costs attention over more masked positions).
pub const WINDOW_ROUND: usize = 64;

pub struct CudaGenericDecoder {
    session: Session<CudaBackend>,
    use_graph: bool,
    win: Option<Window>,
    stats: CudaGraphStats,
    trace: Option<StepTrace>,
}

/// The fixed buffers, plan and graph of one window length.
struct Window {
    len: usize,
    /// token, attention mask, position: written before every step.
    inputs: Vec<(String, CudaTensor)>,
    /// Per layer (key, value), `[1, kv_heads, len, head_dim]`.
    past: Vec<(CudaTensor, CudaTensor)>,
    plan: Option<Specialised<CudaTensor>>,
    /// Arena bytes the specialised step's outputs need (measured on its first eager run).
    arena_bytes: Option<usize>,
    graph: Option<Captured>,
    /// Why this window's step is not captured (first failure; then it stays eager).
    broken: Option<String>,
}

struct Captured {
    graph: CudaGraph,
    /// The graph outputs, in the arena: each replay rewrites them in place.
    outputs: Vec<CudaTensor>,
    _arena: Arc<CudaSlice<u8>>,
}

impl CudaGenericDecoder {
    /// `graph`: capture the decode step in a CUDA graph (else every step runs eagerly).
    pub fn new(package: &Package, graph: bool) -> Result<CudaGenericDecoder> {
        Ok(CudaGenericDecoder {
            session: Session::new(package, CudaBackend::new()?)?,
            use_graph: graph,
            win: None,
            stats: CudaGraphStats {
                enabled: graph,
                ..Default::default()
            },
            trace: None,
        })
    }

    /// A fresh window of `len` positions: zeroed fixed buffers, no plan yet.
    fn window(&self, len: usize) -> Result<Window> {
        let s = &self.session;
        let b = s.backend();
        let host = s.window_inputs(0, 0, len)?;
        let inputs = host
            .iter()
            .map(|(name, t)| Ok((name.clone(), b.fixed(t.dtype(), t.shape())?)))
            .collect::<Result<Vec<_>>>()?;
        let io = s.io();
        let shape = [1, io.kv_heads, len, io.head_dim];
        let past = io
            .layers
            .iter()
            .map(|_| Ok((b.fixed(io.kv_dtype, &shape)?, b.fixed(io.kv_dtype, &shape)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Window {
            len,
            inputs,
            past,
            plan: None,
            arena_bytes: None,
            graph: None,
            broken: None,
        })
    }

    /// The graph inputs of a step: the fixed buffers, by port name.
    fn step_inputs<'a>(&'a self, w: &'a Window) -> Vec<(&'a str, CudaTensor)> {
        let mut v: Vec<(&str, CudaTensor)> = w
            .inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        for (l, (k, val)) in self.session.io().layers.iter().zip(&w.past) {
            v.push((&l.past_key, k.clone()));
            v.push((&l.past_value, val.clone()));
        }
        v
    }

    /// Copies each `present` (`len + 1` positions) without its first position into `past`: one
    /// kernel for every layer's K and V.
    fn slide(&self, w: &Window, outs: &[CudaTensor]) -> Result<()> {
        let b = self.session.backend();
        let names: Vec<&str> = self.session.executor().output_names().collect();
        let find = |port: &str| -> Result<&CudaTensor> {
            names
                .iter()
                .position(|n| *n == port)
                .map(|i| &outs[i])
                .ok_or_else(|| Error::msg(format!("graph output {port:?} missing")))
        };
        let mut pairs = Vec::with_capacity(2 * w.past.len());
        for (l, (k, v)) in self.session.io().layers.iter().zip(&w.past) {
            pairs.push((k, find(&l.present_key)?));
            pairs.push((v, find(&l.present_value)?));
        }
        b.copy_into_many(&pairs, 0, 1, w.len, 2)
    }

    /// Runs the specialised step eagerly on the window's buffers, then the slide.
    fn run_eager(
        &self,
        w: &mut Window,
        trace: Option<&mut OpTrace>,
        probe: bool,
    ) -> Result<Vec<CudaTensor>> {
        let mut plan = w
            .plan
            .take()
            .ok_or_else(|| Error::msg("a step before the plan was specialised"))?;
        let outs = {
            let inputs = self.step_inputs(w);
            self.session
                .executor()
                .run_specialised(&mut plan, &inputs, trace, probe)
        };
        w.plan = Some(plan);
        let outs = outs?;
        self.slide(w, &outs)?;
        Ok(outs)
    }

    /// Captures the specialised step, the slide included, with outputs in a new arena.
    fn capture(&self, w: &mut Window) -> Result<Captured> {
        let b = self.session.backend();
        let bytes = w.arena_bytes.unwrap_or(0);
        let st = b.device().stream.clone();
        st.synchronize().map_err(cu_err("synchronize"))?;
        let arena = b.arena_begin(bytes)?;
        b.set_strict(true);
        let begun = st
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cu_err("begin capture"));
        let run = begun.and_then(|()| self.run_eager(w, None, false));
        // End the capture whatever happened, so the stream is usable again.
        let ended = st.end_capture(sys::CUgraphInstantiate_flags(0));
        b.set_strict(false);
        b.arena_end();
        let outputs = run?;
        let graph = ended
            .map_err(cu_err("end capture"))?
            .ok_or_else(|| Error::msg("cuda: stream capture produced no graph"))?;
        Ok(Captured {
            graph,
            outputs,
            _arena: arena,
        })
    }

    /// One decode step on the window's buffers (inputs already written); returns the graph
    /// outputs. Eager until the step is known to stay on the device, then captured once and
    /// replayed.
    fn step(&mut self, w: &mut Window) -> Result<Vec<CudaTensor>> {
        let exec = self.session.executor();
        let b = self.session.backend();
        if w.plan.is_none() {
            let (plan, outs) = {
                let inputs = self.step_inputs(w);
                exec.specialise(&inputs)?
            };
            w.plan = Some(plan);
            self.slide(w, &outs)?;
            return Ok(outs);
        }
        if let Some(mut t) = self.trace.take() {
            // Traced steps run eagerly: per-op times, and each op's capture status probed.
            let outs = self.run_eager(w, Some(&mut t.ops), true);
            self.trace = Some(t);
            return outs;
        }
        if self.use_graph && w.graph.is_none() && w.broken.is_none() {
            match w.arena_bytes {
                None => {
                    // Probe and measure on an eager run (this step's real run).
                    b.measure_begin();
                    let outs = self.run_eager(w, None, true);
                    let bytes = b.measure_end();
                    let outs = outs?;
                    w.arena_bytes = Some(bytes);
                    let plan = w.plan.as_ref().expect("specialised above");
                    if let Some(why) = first_host_op(exec, plan) {
                        w.broken = Some(why.clone());
                        self.stats.fallbacks += 1;
                        self.stats.fallback_reasons.push(why);
                    }
                    return Ok(outs);
                }
                Some(_) => match self.capture(w) {
                    Ok(c) => {
                        self.stats.captures += 1;
                        w.graph = Some(c);
                    }
                    Err(e) => {
                        let why = format!("capture failed: {e}");
                        w.broken = Some(why.clone());
                        self.stats.fallbacks += 1;
                        self.stats.fallback_reasons.push(why);
                    }
                },
            }
        }
        if let Some(c) = &w.graph {
            c.graph.launch().map_err(cu_err("graph launch"))?;
            self.stats.replays += 1;
            return Ok(c.outputs.clone());
        }
        self.run_eager(w, None, false)
    }

    fn decode_in(&mut self, w: &mut Window, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        let t0 = Instant::now();
        let (mut logits, cache) = self.session.forward(prompt, &self.session.empty_cache()?)?;
        let b = self.session.backend();
        // The padding must hold finite values (its attention weights are exact zeros, and
        // 0 × NaN is NaN): zeros.
        let p = cache.len;
        for ((k, v), (pk, pv)) in w.past.iter().zip(&cache.layers) {
            b.zero(k)?;
            b.zero(v)?;
            b.copy_into(k, w.len - p, pk, 0, p, 2)?;
            b.copy_into(v, w.len - p, pv, 0, p, 2)?;
        }
        drop(cache);
        let mut run = DecodeRun {
            prefill_ms: t0.elapsed().as_secs_f64() * 1e3,
            ..Default::default()
        };
        let mut filled = p;
        loop {
            let next = crate::session::argmax(&logits);
            run.generated_ids.push(next);
            if run.generated_ids.len() >= tokens {
                break;
            }
            let t = Instant::now();
            for ((_, buf), (_, host)) in w
                .inputs
                .iter()
                .zip(self.session.window_inputs(next, filled, w.len)?)
            {
                self.session.backend().write(buf, &host)?;
            }
            let outs = self.step(w)?;
            self.session.backend().check_device_errors()?;
            (logits, _) = self.session.split_outputs(&outs, w.len + 1)?;
            filled += 1;
            let elapsed = t.elapsed();
            run.step_ms.push(elapsed.as_secs_f64() * 1e3);
            if let Some(tr) = self.trace.as_mut() {
                // The first step specialises the plan: not a step like the others.
                if run.step_ms.len() > 1 {
                    tr.steps += 1;
                    tr.step_ns += elapsed.as_nanos() as u64;
                }
            }
        }
        Ok(run)
    }
}

/// The first step of `plan` that left the device on its probed run, as "node (op): why".
fn first_host_op(
    exec: &crate::exec::Executor<CudaBackend>,
    plan: &Specialised<CudaTensor>,
) -> Option<String> {
    exec.step_names()
        .zip(plan.modes())
        .find_map(|((name, op), mode)| match mode {
            StepMode::Host(why) => Some(format!(
                "node {name} ({op}) keeps the step out of a CUDA graph: {why}"
            )),
            _ => None,
        })
}

impl Decoder for CudaGenericDecoder {
    fn decode(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        if prompt.is_empty() || tokens == 0 {
            return Err(Error::msg("cuda decoder: empty prompt or zero tokens"));
        }
        let len = (prompt.len() + tokens).next_multiple_of(WINDOW_ROUND);
        let mut w = match self.win.take() {
            Some(w) if w.len == len => w,
            _ => self.window(len)?,
        };
        let run = self.decode_in(&mut w, prompt, tokens);
        self.win = Some(w);
        run
    }

    fn threads(&self) -> usize {
        1
    }

    /// Traced steps run eagerly (a graph's kernels cannot be timed one by one from the host):
    /// host time per op, and per op whether it is captured in the untraced steps' graph, folded
    /// for the window's fixed shapes, or why it leaves the device.
    fn set_trace(&mut self, on: bool) -> Result<()> {
        self.trace = on.then(StepTrace::default);
        Ok(())
    }

    fn trace(&self) -> Option<TraceReport> {
        let t = self.trace.as_ref()?;
        let mut r = self.session.report_of(t)?;
        let w = self.win.as_ref()?;
        let plan = w.plan.as_ref()?;
        let exec = self.session.executor();
        let graph = match (&w.broken, first_host_op(exec, plan)) {
            (Some(why), _) => format!("the decode step is not captured: {why}"),
            (None, Some(why)) => format!("the decode step cannot be captured: {why}"),
            (None, None) if !self.use_graph => {
                "every op stays on the device, but CUDA graphs are off (--no-cuda-graph)".into()
            }
            (None, None) => format!(
                "the decode step is one CUDA graph: {} of {} ops run each step, the rest folded for the {}-position window (traced steps ran eagerly, to time each op)",
                plan.num_steps(),
                plan.modes().len(),
                w.len
            ),
        };
        r.capture = Some(CaptureReport::new(
            graph,
            exec.step_names().zip(plan.modes()),
        ));
        Some(r)
    }

    fn device_stats(&self) -> (Option<CudaGraphStats>, Option<super::DeviceKvStats>) {
        (Some(self.stats.clone()), None)
    }
}
