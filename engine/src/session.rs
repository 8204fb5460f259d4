//! The decode session: prefill the prompt, then one graph run per new token with the past/present
//! KV cache fed back; token selection by [`crate::sampling`] (greedy unless configured); stop on
//! an end-of-sequence id or the token limit.
//! [`Session::generate`] keeps the cache in a [`crate::kv_cache::PagePool`]: after each run only
//! the new positions of the `present` outputs are written into the sequence's pages. The next
//! run's `past` inputs are that run's own `present` outputs, which hold exactly what gathering
//! the pages would give (`the_pages_hold_what_each_step_reads_next` checks it bit for bit), so
//! a step does not copy the whole cache back out of the pages ([`KvCache`] is that dense
//! per-step view, and what [`Session::forward`] takes and returns; [`Session::gather_cache`]
//! rebuilds it from the pages). A no-cache mode recomputes the whole sequence every
//! step (the reference the cached path is tested against).

use crate::clock::Stopwatch;

use crate::backend::{Backend, SliceDim};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::{ExecOptions, Executor, OpTime, OpTrace};
use crate::kv_cache::{DEFAULT_PAGE_TOKENS, KvLayout, MAX_PAGES, PagePool, PoolConfig, SequenceId};
use crate::package::{IoMap, Package};
use crate::sampling::{History, Sampler, SamplingConfig};
use crate::tensor::{Data, Tensor};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// Ids that stop generation (the stop id is kept in the output).
    pub eos_token_ids: Vec<u32>,
    /// false: recompute the full sequence every step instead of using the KV cache.
    pub use_kv_cache: bool,
    /// Token selection: the default is greedy; see [`crate::sampling`].
    pub sampling: SamplingConfig,
}

/// The result of a generation.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Full last-position logits of every step (step 0 is the prefill), when asked for.
    pub logits: Vec<Vec<f32>>,
    pub prefill_ms: f64,
    /// Wall time of each decode step after the prefill.
    pub step_ms: Vec<f64>,
    /// The calling thread's CPU time of the prefill and of each step (`crate::clock`): `None`
    /// and empty where that clock cannot be read. Only the work done on this thread.
    pub prefill_cpu_ms: Option<f64>,
    pub step_cpu_ms: Vec<f64>,
    pub stopped_on_eos: bool,
}

/// The dense KV cache of one step: per layer (key, value), `[1, kv_heads, seq, head_dim]`.
pub struct KvCache<B: Backend> {
    pub layers: Vec<(B::Tensor, B::Tensor)>,
    pub len: usize,
}

/// Pages the decode path's pool grows by (128 tokens at [`DEFAULT_PAGE_TOKENS`]).
pub const KV_GROW_PAGES: usize = 8;

/// A model package bound to a backend.
pub struct Session<B: Backend> {
    exec: Executor<B>,
    io: IoMap,
    /// Graph inputs declared as i32 (token ids, mask and positions are i64 otherwise).
    i32_inputs: Vec<String>,
    /// Per-op wall time of the decode steps of [`Session::generate`], while tracing is on.
    trace: std::sync::Mutex<Option<StepTrace>>,
}

/// What tracing collects over decode steps (the prefill is not traced).
#[derive(Clone, Debug, Default)]
pub(crate) struct StepTrace {
    pub(crate) ops: OpTrace,
    pub(crate) steps: u64,
    /// Whole decode steps: the graph run plus the KV cache's store after it.
    pub(crate) step_ns: u64,
}

/// Where the traced decode steps' time went.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceReport {
    pub steps: u64,
    /// Mean wall time of one decode step, milliseconds.
    pub ms_per_step: f64,
    /// Per op type, mean milliseconds per step, largest first.
    pub ops: Vec<OpTime>,
    /// The rest of the step: new KV positions stored into the pages, inputs built, values freed.
    pub outside_ms_per_step: f64,
    /// The slowest nodes other than MatMul: (name, op type, mean ms per step).
    pub slowest_other: Vec<(String, String, f64)>,
    /// On a device: how the step's ops run with respect to a CUDA graph.
    pub capture: Option<CaptureReport>,
}

/// How a device decode step's ops run with respect to a CUDA graph (`engine profile --trace`).
#[derive(Clone, Debug, PartialEq)]
pub struct CaptureReport {
    /// The step as a whole: captured and replayed, or why not.
    pub graph: String,
    /// Per op type, in plan order of first appearance.
    pub ops: Vec<OpCapture>,
}

/// One op type's nodes in a [`CaptureReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct OpCapture {
    pub op_type: String,
    /// Computed once for the step's fixed shapes (shape arithmetic): not in the step at all.
    pub folded: usize,
    /// Device work only: in the graph.
    pub captured: usize,
    /// Work that leaves the device, which keeps the step out of a graph: (node, why).
    pub host: Vec<(String, String)>,
}

impl CaptureReport {
    /// Per op type from a specialised plan's step modes.
    pub fn new<'a>(
        graph: String,
        steps: impl Iterator<Item = ((&'a str, &'a str), &'a crate::exec::StepMode)>,
    ) -> CaptureReport {
        use crate::exec::StepMode;
        let mut ops: Vec<OpCapture> = Vec::new();
        for ((name, op_type), mode) in steps {
            let i = match ops.iter().position(|o| o.op_type == op_type) {
                Some(i) => i,
                None => {
                    ops.push(OpCapture {
                        op_type: op_type.to_string(),
                        folded: 0,
                        captured: 0,
                        host: Vec::new(),
                    });
                    ops.len() - 1
                }
            };
            match mode {
                StepMode::Folded => ops[i].folded += 1,
                StepMode::Device => ops[i].captured += 1,
                StepMode::Host(why) => ops[i].host.push((name.to_string(), why.clone())),
            }
        }
        CaptureReport { graph, ops }
    }
}

impl<B: Backend> std::fmt::Debug for Session<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("exec", &self.exec)
            .field("io", &self.io)
            .finish()
    }
}

impl<B: Backend> Session<B> {
    pub fn new(package: &Package, backend: B) -> Result<Session<B>> {
        Self::with_options(package, backend, ExecOptions::default())
    }

    /// [`Session::new`] with the executor's plan built under `options`.
    pub fn with_options(package: &Package, backend: B, options: ExecOptions) -> Result<Session<B>> {
        let exec = Executor::with_options(&package.model, backend, options)?;
        let i32_inputs = package
            .model
            .inputs
            .iter()
            .filter(|p| p.dtype == Some(DType::I32))
            .map(|p| p.name.clone())
            .collect();
        Ok(Session {
            exec,
            io: package.io.clone(),
            i32_inputs,
            trace: Default::default(),
        })
    }

    /// Turns per-op timing of [`Session::generate`]'s decode steps on (clearing what was
    /// collected) or off.
    pub fn set_trace(&self, on: bool) {
        *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = on.then(StepTrace::default);
    }

    /// What tracing has collected so far; `None` when it is off or no step ran.
    pub fn trace_report(&self) -> Option<TraceReport> {
        let guard = self.trace.lock().unwrap_or_else(|e| e.into_inner());
        self.report_of(guard.as_ref()?)
    }

    /// The report of `t`; `None` when no step was traced.
    pub(crate) fn report_of(&self, t: &StepTrace) -> Option<TraceReport> {
        if t.steps == 0 {
            return None;
        }
        let ops = self.exec.op_times(&t.ops);
        let ms_per_step = t.step_ns as f64 / 1e6 / t.steps as f64;
        let in_ops: f64 = ops.iter().map(|o| o.ms_per_run).sum();
        let slowest_other = self
            .exec
            .node_times(&t.ops)
            .into_iter()
            .filter(|(_, op, _)| op != "MatMul")
            .take(10)
            .collect();
        Some(TraceReport {
            steps: t.steps,
            ms_per_step,
            ops,
            outside_ms_per_step: ms_per_step - in_ops,
            slowest_other,
            capture: None,
        })
    }

    pub fn io(&self) -> &IoMap {
        &self.io
    }

    pub fn backend(&self) -> &B {
        self.exec.backend()
    }

    /// The geometry and element type of this model's KV cache.
    pub fn kv_layout(&self) -> KvLayout {
        KvLayout {
            layers: self.io.layers.len(),
            kv_heads: self.io.kv_heads,
            head_dim: self.io.head_dim,
            dtype: self.io.kv_dtype,
        }
    }

    /// A page pool for one sequence of at most `max_tokens` tokens: it starts empty, grows by
    /// [`KV_GROW_PAGES`] pages and is capped at what `max_tokens` needs.
    pub fn page_pool(&self, max_tokens: usize) -> Result<PagePool> {
        let page_tokens = DEFAULT_PAGE_TOKENS;
        Ok(PagePool::new(
            self.kv_layout(),
            PoolConfig {
                page_tokens,
                initial_pages: 0,
                grow_pages: KV_GROW_PAGES,
                max_pages: max_tokens.div_ceil(page_tokens).min(MAX_PAGES),
            },
        )?)
    }

    /// Writes positions `from..present.len` of a step's `present` cache into `seq`'s pages. Only
    /// those positions leave the device: each tensor is sliced to them there first (a decode
    /// step's one position per layer, not the whole cache, on a GPU backend).
    pub fn store_present(
        &self,
        pool: &mut PagePool,
        seq: SequenceId,
        present: &KvCache<B>,
        from: usize,
    ) -> Result<()> {
        let b = self.exec.backend();
        // Sliced only when every tensor is the `[1, kv_heads, len, head_dim]` the pool checks;
        // anything else goes whole, for `PagePool::append` to reject with its own error.
        let fits = |t: &B::Tensor| {
            let s = b.shape(t);
            s.len() == 4 && s[2] == present.len && from <= s[2]
        };
        let slice = from > 0 && present.layers.iter().all(|(k, v)| fits(k) && fits(v));
        let new = |t: &B::Tensor| -> Result<Tensor> {
            if !slice {
                return b.download(t);
            }
            let dims: Vec<SliceDim> = b
                .shape(t)
                .iter()
                .enumerate()
                .map(|(axis, &n)| SliceDim {
                    start: if axis == 2 { from } else { 0 },
                    step: 1,
                    len: if axis == 2 { n - from } else { n },
                })
                .collect();
            b.download(&b.slice(t, &dims)?)
        };
        let host = present
            .layers
            .iter()
            .map(|(k, v)| Ok((new(k)?, new(v)?)))
            .collect::<Result<Vec<_>>>()?;
        let kv: Vec<_> = host.iter().map(|(k, v)| (k, v)).collect();
        let tokens = if slice {
            0..present.len - from
        } else {
            from..present.len
        };
        Ok(pool.append(seq, &kv, tokens)?)
    }

    /// The dense cache of `seq`, gathered from its pages, for the next [`Session::forward`].
    pub fn gather_cache(&self, pool: &PagePool, seq: SequenceId) -> Result<KvCache<B>> {
        let b = self.exec.backend();
        let layers = (0..self.io.layers.len())
            .map(|l| {
                let (k, v) = pool.gather(seq, l)?;
                Ok((b.upload(&k)?, b.upload(&v)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            layers,
            len: pool.len(seq)?,
        })
    }

    /// An empty cache (`seq = 0`).
    pub fn empty_cache(&self) -> Result<KvCache<B>> {
        let b = self.exec.backend();
        let empty = b.upload(&Tensor::zeros(
            self.io.kv_dtype,
            &[1, self.io.kv_heads, 0, self.io.head_dim],
        ))?;
        Ok(KvCache {
            layers: vec![(empty.clone(), empty); self.io.layers.len()],
            len: 0,
        })
    }

    /// Runs `ids` on top of `cache`; returns the last position's logits (f32, host) and the new
    /// cache.
    pub fn forward(&self, ids: &[u32], cache: &KvCache<B>) -> Result<(Vec<f32>, KvCache<B>)> {
        self.forward_traced(ids, cache, None)
    }

    /// [`Session::forward`], timing each op into `trace` when given.
    fn forward_traced(
        &self,
        ids: &[u32],
        cache: &KvCache<B>,
        trace: Option<&mut OpTrace>,
    ) -> Result<(Vec<f32>, KvCache<B>)> {
        if ids.is_empty() {
            return Err(Error::msg("forward needs at least one token"));
        }
        let b = self.exec.backend();
        let s = ids.len();
        let total = cache.len + s;
        let mut inputs: Vec<(&str, B::Tensor)> = Vec::with_capacity(3 + 2 * cache.layers.len());
        let ids64: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        inputs.push((
            &self.io.token_input,
            b.upload(&self.int_input(&self.io.token_input, vec![1, s], ids64)?)?,
        ));
        if let Some(name) = &self.io.attention_mask {
            inputs.push((
                name,
                b.upload(&self.int_input(name, vec![1, total], vec![1; total])?)?,
            ));
        }
        if let Some(name) = &self.io.position_ids {
            let pos: Vec<i64> = (cache.len..total).map(|p| p as i64).collect();
            inputs.push((name, b.upload(&self.int_input(name, vec![1, s], pos)?)?));
        }
        for (l, (k, v)) in self.io.layers.iter().zip(&cache.layers) {
            inputs.push((&l.past_key, k.clone()));
            inputs.push((&l.past_value, v.clone()));
        }
        let outs = self.exec.run_traced(&inputs, trace)?;
        self.split_outputs(&outs, total)
    }

    /// The executor (plans, specialisation, per-op names): the CUDA generic decoder drives it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn executor(&self) -> &Executor<B> {
        &self.exec
    }

    /// The cache `cache` left-padded to `window` positions: zeros before its `cache.len`
    /// positions, which the attention mask of [`Session::window_inputs`] hides.
    pub fn pad_to_window(&self, cache: &KvCache<B>, window: usize) -> Result<KvCache<B>> {
        if cache.len > window {
            return Err(Error::msg(format!(
                "a cache of {} positions does not fit a window of {window}",
                cache.len
            )));
        }
        let b = self.exec.backend();
        let pad = b.upload(&Tensor::zeros(
            self.io.kv_dtype,
            &[1, self.io.kv_heads, window - cache.len, self.io.head_dim],
        ))?;
        let layers = cache
            .layers
            .iter()
            .map(|(k, v)| Ok((b.concat(&[&pad, k], 2)?, b.concat(&[&pad, v], 2)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            layers,
            len: window,
        })
    }

    /// The host inputs of one decode step in a window of `window` cache positions of which the
    /// last `filled` hold the sequence (the rest is padding): the token, the attention mask
    /// (`window + 1` entries: 0 over the padding, 1 over the sequence and the new token) and
    /// the new token's position (`filled`), as (port, value) in that order. The graph must
    /// build its causal mask in the cache's frame (query i of s at key T − s + i), as
    /// `crate::llama` and transformers do; a mask built from `position_ids` would let the
    /// token see the padding's slots as the future.
    pub fn window_inputs(
        &self,
        token: u32,
        filled: usize,
        window: usize,
    ) -> Result<Vec<(String, Tensor)>> {
        let (Some(mask), Some(pos)) = (&self.io.attention_mask, &self.io.position_ids) else {
            return Err(Error::msg(
                "a fixed-window decode needs the graph's attention_mask and position_ids inputs (to mask the padding and give true positions)",
            ));
        };
        if filled > window {
            return Err(Error::msg(format!(
                "{filled} cached positions do not fit a window of {window}"
            )));
        }
        let mut m = vec![0i64; window - filled];
        m.resize(window + 1, 1);
        Ok(vec![
            (
                self.io.token_input.clone(),
                self.int_input(&self.io.token_input, vec![1, 1], vec![token as i64])?,
            ),
            (mask.clone(), self.int_input(mask, vec![1, window + 1], m)?),
            (
                pos.clone(),
                self.int_input(pos, vec![1, 1], vec![filled as i64])?,
            ),
        ])
    }

    /// Splits a step's outputs into the last position's logits (host) and the `present` cache,
    /// checking that every present has `total` positions.
    pub(crate) fn split_outputs(
        &self,
        outs: &[B::Tensor],
        total: usize,
    ) -> Result<(Vec<f32>, KvCache<B>)> {
        let b = self.exec.backend();
        let names: std::collections::HashMap<&str, usize> = self
            .exec
            .output_names()
            .enumerate()
            .map(|(i, n)| (n, i))
            .collect();
        let get = |name: &str| -> Result<&B::Tensor> {
            names
                .get(name)
                .map(|&i| &outs[i])
                .ok_or_else(|| Error::msg(format!("graph output {name:?} missing")))
        };
        let logits = b.download(get(&self.io.logits)?)?;
        let shape = logits.shape().to_vec();
        let vocab = *shape
            .last()
            .ok_or_else(|| Error::msg("logits output is a scalar"))?;
        if vocab == 0 || logits.numel() % vocab != 0 {
            return Err(Error::msg(format!("logits output has shape {shape:?}")));
        }
        let all = logits.to_f32_vec();
        let last = all[all.len() - vocab..].to_vec();
        let mut layers = Vec::with_capacity(self.io.layers.len());
        for l in &self.io.layers {
            let k = get(&l.present_key)?.clone();
            let v = get(&l.present_value)?.clone();
            let ks = b.shape(&k);
            if ks.len() != 4 || ks[2] != total {
                return Err(Error::msg(format!(
                    "output {} has shape {ks:?}; expected [1, {}, {total}, {}]",
                    l.present_key, self.io.kv_heads, self.io.head_dim
                )));
            }
            layers.push((k, v));
        }
        Ok((last, KvCache { layers, len: total }))
    }

    /// Greedy (or sampled) generation with the KV cache held at one fixed length, `window`
    /// positions, left-padded: every decode step has the same input shapes, so it runs a plan
    /// specialised once on them ([`Executor::specialise`]: the shape arithmetic is computed
    /// once) and, on a device, is the same work every step. After each step the `present`
    /// without its first position is the next `past`. Gives the tokens [`Session::generate`]
    /// gives (the padding's attention weights are exact zeros); `window` must hold the prompt
    /// and every new token.
    pub fn generate_window(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        window: usize,
        keep_logits: bool,
    ) -> Result<Generation> {
        if !opts.use_kv_cache {
            return Err(Error::msg("a fixed-window decode always uses the KV cache"));
        }
        if prompt.len() + opts.max_new_tokens > window {
            return Err(Error::msg(format!(
                "a window of {window} positions cannot hold a prompt of {} and {} new tokens",
                prompt.len(),
                opts.max_new_tokens
            )));
        }
        let mut out = Generation {
            prompt_ids: prompt.to_vec(),
            ..Default::default()
        };
        if opts.max_new_tokens == 0 {
            return Ok(out);
        }
        let b = self.exec.backend();
        let mut sampler = Sampler::new(&opts.sampling)?;
        let mut history = History::new(prompt);
        let mut trace = self.trace.lock().unwrap_or_else(|e| e.into_inner()).take();
        let t0 = Stopwatch::start();
        let (mut logits, cache) = self.forward(prompt, &self.empty_cache()?)?;
        let mut filled = cache.len;
        let mut past = self.pad_to_window(&cache, window)?;
        drop(cache);
        let lap = t0.lap();
        (out.prefill_ms, out.prefill_cpu_ms) = (lap.wall_ms, lap.cpu_ms);
        let mut plan = None;
        while let Some(next) = next_token(
            &mut sampler,
            &mut logits,
            &mut history,
            &mut out,
            opts,
            keep_logits,
        )? {
            let t = Stopwatch::start();
            let host = self.window_inputs(next, filled, window)?;
            let mut inputs: Vec<(&str, B::Tensor)> = Vec::with_capacity(3 + 2 * past.layers.len());
            for (name, v) in &host {
                inputs.push((name, b.upload(v)?));
            }
            for (l, (k, v)) in self.io.layers.iter().zip(&past.layers) {
                inputs.push((&l.past_key, k.clone()));
                inputs.push((&l.past_value, v.clone()));
            }
            let outs = match &mut plan {
                None => {
                    let (p, outs) = self.exec.specialise(&inputs)?;
                    plan = Some(p);
                    outs
                }
                Some(p) => self.exec.run_specialised(
                    p,
                    &inputs,
                    trace.as_mut().map(|t| &mut t.ops),
                    false,
                )?,
            };
            drop(inputs);
            let present;
            (logits, present) = self.split_outputs(&outs, window + 1)?;
            let keep = |t: &B::Tensor| -> Result<B::Tensor> {
                let dims: Vec<SliceDim> = b
                    .shape(t)
                    .iter()
                    .enumerate()
                    .map(|(axis, &n)| SliceDim {
                        start: usize::from(axis == 2),
                        step: 1,
                        len: if axis == 2 { n - 1 } else { n },
                    })
                    .collect();
                b.slice(t, &dims)
            };
            past = KvCache {
                layers: present
                    .layers
                    .iter()
                    .map(|(k, v)| Ok((keep(k)?, keep(v)?)))
                    .collect::<Result<Vec<_>>>()?,
                len: window,
            };
            filled += 1;
            let lap = t.lap();
            out.step_ms.push(lap.wall_ms);
            out.step_cpu_ms.extend(lap.cpu_ms);
            if let Some(tr) = trace.as_mut().filter(|_| out.step_ms.len() > 1) {
                tr.steps += 1;
                tr.step_ns += (lap.wall_ms * 1e6) as u64;
            }
        }
        if trace.is_some() {
            *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = trace;
        }
        Ok(out)
    }

    /// An integer input in the port's declared type (i64 unless it says i32).
    fn int_input(&self, name: &str, shape: Vec<usize>, v: Vec<i64>) -> Result<Tensor> {
        if self.i32_inputs.iter().any(|n| n == name) {
            Tensor::new(shape, Data::I32(v.into_iter().map(|x| x as i32).collect()))
        } else {
            Tensor::new(shape, Data::I64(v))
        }
    }

    /// Greedy generation. `keep_logits` stores each step's full logits in the result.
    pub fn generate(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        keep_logits: bool,
    ) -> Result<Generation> {
        let mut out = Generation {
            prompt_ids: prompt.to_vec(),
            ..Default::default()
        };
        if opts.max_new_tokens == 0 {
            return Ok(out);
        }
        let mut sampler = Sampler::new(&opts.sampling)?;
        let mut history = History::new(prompt);
        // Taken out for the run (so the lock is not held across it) and put back after.
        let mut trace = self.trace.lock().unwrap_or_else(|e| e.into_inner()).take();
        let t0 = Stopwatch::start();
        let (mut logits, cache) = self.forward(prompt, &self.empty_cache()?)?;
        // KV-cache mode: the pages get every new position; the dense view of the last run is the
        // next run's past (the pages' gather would copy the same values out again).
        let mut paged = None;
        if opts.use_kv_cache {
            let mut pool = self.page_pool(prompt.len() + opts.max_new_tokens)?;
            let seq = pool.alloc_sequence()?;
            self.store_present(&mut pool, seq, &cache, 0)?;
            paged = Some((pool, seq, cache));
        } else {
            drop(cache);
        }
        let lap = t0.lap();
        (out.prefill_ms, out.prefill_cpu_ms) = (lap.wall_ms, lap.cpu_ms);
        while let Some(next) = next_token(
            &mut sampler,
            &mut logits,
            &mut history,
            &mut out,
            opts,
            keep_logits,
        )? {
            let t = Stopwatch::start();
            if let Some((pool, seq, past)) = &mut paged {
                let present;
                (logits, present) =
                    self.forward_traced(&[next], past, trace.as_mut().map(|t| &mut t.ops))?;
                self.store_present(pool, *seq, &present, past.len)?;
                *past = present;
            } else {
                let mut all = prompt.to_vec();
                all.extend(&out.generated_ids);
                (logits, _) = self.forward(&all, &self.empty_cache()?)?;
            }
            let lap = t.lap();
            out.step_ms.push(lap.wall_ms);
            out.step_cpu_ms.extend(lap.cpu_ms);
            if let Some(tr) = trace.as_mut().filter(|_| paged.is_some()) {
                tr.steps += 1;
                tr.step_ns += (lap.wall_ms * 1e6) as u64;
            }
        }
        if trace.is_some() {
            *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = trace;
        }
        if let Some((mut pool, seq, _)) = paged {
            pool.free_sequence(seq)?;
        }
        Ok(out)
    }
}

/// Picks the next token from `logits` into `out` and `history`; `None` when generation stops
/// there (an end-of-sequence id, or the token limit reached).
fn next_token(
    sampler: &mut Sampler,
    logits: &mut [f32],
    history: &mut History,
    out: &mut Generation,
    opts: &GenerateOptions,
    keep_logits: bool,
) -> Result<Option<u32>> {
    // The processors write into the logits: keep the model's own when asked for them.
    let raw = keep_logits.then(|| logits.to_vec());
    let next = sampler.next_token(logits, history)?;
    out.logits.extend(raw);
    history.push(next);
    out.generated_ids.push(next);
    if opts.eos_token_ids.contains(&next) {
        out.stopped_on_eos = true;
        return Ok(None);
    }
    if out.generated_ids.len() >= opts.max_new_tokens {
        return Ok(None);
    }
    Ok(Some(next))
}

/// Index of the largest value; the lowest index wins ties; NaN never wins.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &x) in v.iter().enumerate() {
        if x > best_v {
            best = i;
            best_v = x;
        }
    }
    best as u32
}
