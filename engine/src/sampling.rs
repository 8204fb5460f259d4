//! Token selection: the logits-processor chain (penalties, no-repeat-ngram, temperature, top-k,
//! top-p, min-p) and the seeded [`Sampler`] that turns one position's logits into a token id.
//!
//! Wiring: build a [`Sampler`] from a [`SamplingConfig`] once per generation, keep a [`History`]
//! of prompt + generated ids, and each step call [`Sampler::next_token`] with the last-position
//! logits, then [`History::push`] the chosen id.
//!
//! Semantics (each one is pinned by a test below):
//! - **Greedy** when `temperature == 0`, or when `temperature`, `top_k`, `top_p` and `min_p` are
//!   all unset (an unset temperature is 1.0 as soon as one of those three is given). Greedy is the
//!   argmax after the penalty processors: lowest index wins ties, NaN never wins; it picks the same
//!   id as [`crate::session::argmax`] but errors where that would return a meaningless 0.
//! - **NaN** logits are treated as `-inf` (never chosen). If nothing finite or `+inf` is left
//!   after the chain, [`Sampler::next_token`] returns [`SamplingError::NoCandidates`].
//! - **Ties** at the top-k and top-p boundary: candidates are ranked by logit, then lowest index
//!   first, and the boundary cuts through that total order. So top-k keeps exactly
//!   `min(k, candidates)` ids, and `top_k = 1` and `top_p = 0` both equal greedy. (Hugging Face
//!   keeps every id tied with the k-th; the two differ only on exact ties.) Min-p is a threshold
//!   on probability, so ids tied with the cutoff are all kept.
//! - **Top-p** keeps an id when the probability mass ranked strictly above it is `< top_p`
//!   (Hugging Face's rule), and always keeps the top id; `top_p = 1` keeps everything.
//! - **Top-k** `0` means disabled (Hugging Face's convention); `k` larger than the vocabulary keeps
//!   all. **Min-p** keeps ids with `p >= min_p * p_max`; `min_p = 0` keeps all.
//! - **Repetition penalty** (CTRL / Hugging Face): every distinct id in prompt + generated has its
//!   logit divided by the penalty if positive (or zero), multiplied if negative; applied once per
//!   id however often it occurs.
//! - **Presence / frequency penalty** (OpenAI): `logit -= presence * [c > 0] + frequency * c`
//!   where `c` counts the id in the *generated* tokens only, so a long prompt does not penalise
//!   the answer for quoting it (the repetition penalty covers the prompt).
//! - **No-repeat-ngram** (Hugging Face): bans every id that would complete an n-gram already
//!   present in prompt + generated; `n = 0` is disabled, `n = 1` bans every id seen, and a
//!   history shorter than `n` bans nothing.
//! - **Seeds**: a sampling step draws exactly one `u64` from a [`ChaCha8Rng`] seeded with
//!   [`SeedableRng::seed_from_u64`] (seed 0 when unset) and walks the softmax CDF in index order.
//!   The softmax uses its own `exp` from IEEE `+`/`*` and fixed-order sums, not libm, so the same
//!   seed, config and logits give the same tokens on every machine. Greedy draws nothing.
//!
//! Ids in the history that are outside the logits' vocabulary are ignored by every processor.
//!
//! Cost per step is O(vocab) for every processor: top-k is a threshold scan with partial
//! selections (`select_nth_unstable_by`) on a small buffer, top-p a histogram of probability mass
//! plus a weighted quickselect inside one bucket, min-p a threshold on logits (no `exp`); no
//! full sort anywhere, and buffers live in the processors and the sampler, so a step allocates
//! nothing once warm.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Seed used when [`SamplingConfig::seed`] is unset: runs are reproducible by default.
pub const DEFAULT_SEED: u64 = 0;

/// Why a config was rejected or no token could be chosen.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("sampling config: {knob} = {value}: expected {expected}")]
    InvalidKnob {
        knob: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("sampling: empty logits (vocabulary of size 0)")]
    EmptyLogits,
    #[error("sampling: vocabulary of {vocab} does not fit u32 token ids")]
    VocabTooLarge { vocab: usize },
    #[error(
        "sampling: all {vocab} logits are -inf or NaN after processors [{processors}]: no token to choose"
    )]
    NoCandidates { vocab: usize, processors: String },
}

impl From<SamplingError> for crate::Error {
    fn from(e: SamplingError) -> Self {
        crate::Error::msg(e.to_string())
    }
}

/// Results of this module: config validation and token choice.
pub type Result<T, E = SamplingError> = std::result::Result<T, E>;

fn invalid(knob: &'static str, value: impl ToString, expected: &'static str) -> SamplingError {
    SamplingError::InvalidKnob {
        knob,
        value: value.to_string(),
        expected,
    }
}

/// Counts per id, updated one token at a time; `entries` keeps first-seen order so processors
/// iterate a dense slice (deterministic, no hashing in the per-step loop).
#[derive(Debug, Clone, Default)]
struct Counts {
    slot: HashMap<u32, usize>,
    entries: Vec<(u32, u32)>,
}

impl Counts {
    fn add(&mut self, id: u32) {
        match self.slot.entry(id) {
            Entry::Occupied(e) => {
                let c = &mut self.entries[*e.get()].1;
                *c = c.saturating_add(1);
            }
            Entry::Vacant(e) => {
                e.insert(self.entries.len());
                self.entries.push((id, 1));
            }
        }
    }

    fn get(&self, id: u32) -> u32 {
        self.slot.get(&id).map_or(0, |&i| self.entries[i].1)
    }
}

/// Prompt + generated token ids, with per-id counts kept incrementally by [`History::push`].
#[derive(Debug, Clone, Default)]
pub struct History {
    tokens: Vec<u32>,
    prompt_len: usize,
    all: Counts,
    generated: Counts,
}

impl History {
    /// A history holding only the prompt.
    pub fn new(prompt: &[u32]) -> History {
        let mut all = Counts::default();
        for &id in prompt {
            all.add(id);
        }
        History {
            tokens: prompt.to_vec(),
            prompt_len: prompt.len(),
            all,
            generated: Counts::default(),
        }
    }

    /// Appends one generated id.
    pub fn push(&mut self, id: u32) {
        self.tokens.push(id);
        self.all.add(id);
        self.generated.add(id);
    }

    /// Prompt followed by the generated ids.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Occurrences of `id` in prompt + generated.
    pub fn count(&self, id: u32) -> u32 {
        self.all.get(id)
    }

    /// Occurrences of `id` in the generated ids only.
    pub fn generated_count(&self, id: u32) -> u32 {
        self.generated.get(id)
    }

    /// Distinct ids of prompt + generated with their counts, in first-seen order.
    pub fn counts(&self) -> &[(u32, u32)] {
        &self.all.entries
    }

    /// Distinct generated ids with their counts, in first-seen order.
    pub fn generated_counts(&self) -> &[(u32, u32)] {
        &self.generated.entries
    }
}

/// One step of the chain: rewrites the logits in place. Filters set removed ids to `-inf`.
/// Processors may assume NaN-free logits ([`Sampler`] maps NaN to `-inf` first) but must not
/// panic on any input.
pub trait LogitsProcessor: Send {
    fn process(&mut self, logits: &mut [f32], history: &History);
    fn name(&self) -> &'static str;
}

/// Processors applied in order.
#[derive(Default)]
pub struct ProcessorChain {
    processors: Vec<Box<dyn LogitsProcessor>>,
}

impl std::fmt::Debug for ProcessorChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ProcessorChain {
    pub fn new() -> ProcessorChain {
        ProcessorChain::default()
    }

    /// Appends a processor; chainable.
    pub fn push(&mut self, p: impl LogitsProcessor + 'static) -> &mut ProcessorChain {
        self.processors.push(Box::new(p));
        self
    }

    /// The processors' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.processors.iter().map(|p| p.name()).collect()
    }

    pub fn len(&self) -> usize {
        self.processors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.processors.is_empty()
    }

    pub fn process(&mut self, logits: &mut [f32], history: &History) {
        for p in &mut self.processors {
            p.process(logits, history);
        }
    }
}

/// Rank of a candidate `(logit, id)`: higher logit first, then lower id. Candidates are never
/// NaN, so `partial_cmp` is total here (and treats -0.0 == 0.0, like the `==` in [`keep_ranked`]).
fn rank(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    b.0.partial_cmp(&a.0)
        .unwrap_or(Ordering::Equal)
        .then(a.1.cmp(&b.1))
}

/// Keeps the ids ranked at or above `last` (see [`rank`]); everything else, NaN included,
/// becomes `-inf`. One sequential pass instead of scattered writes.
fn keep_ranked(logits: &mut [f32], last: (f32, u32)) {
    let (v, id) = last;
    for (i, x) in logits.iter_mut().enumerate() {
        let keep = *x > v || (*x == v && i as u32 <= id);
        *x = if keep { *x } else { f32::NEG_INFINITY };
    }
}

/// Reductions run in this many fixed lanes: the compiler can vectorise them, and the order of
/// the additions (so the result, to the bit) is still fixed by the code, not by the machine.
const LANES: usize = 8;

/// The largest logit ignoring NaN; `-inf` when there is no candidate.
fn max_logit(logits: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            acc[j] = if c[j] > acc[j] { c[j] } else { acc[j] };
        }
    }
    acc.iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// `exp(x)` for `x <= 0` (0 below -87, for `-inf` and for NaN), from IEEE `+`, `*` and bit
/// operations only (Cephes' expf: range reduction by ln 2, degree-6 polynomial, relative error
/// about 1e-7). libm's `expf` differs between C libraries in the last bit, which could move a
/// seeded draw across a boundary; this gives the same bits everywhere, and it vectorises.
fn exp_nonpos(x: f32) -> f32 {
    // 1.5 · 2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4; // 355/512, exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    let in_range = x >= -87.0;
    let xc = if in_range { x } else { -87.0 };
    let t = xc * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n from n's bits in t, n in [-126, 0].
    let two_n = f32::from_bits((t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127)) << 23);
    if in_range { y * two_n } else { 0.0 }
}

/// Softmax weights `exp(x - max)` of every id into `w` (0 for `-inf`; with `max == +inf` the
/// `+inf` ids share all the mass).
fn softmax_weights(logits: &[f32], max: f32, w: &mut Vec<f32>) {
    w.clear();
    if max == f32::INFINITY {
        w.extend(
            logits
                .iter()
                .map(|&x| if x == f32::INFINITY { 1.0 } else { 0.0 }),
        );
    } else {
        w.resize(logits.len(), 0.0);
        for (wi, &x) in w.iter_mut().zip(logits) {
            *wi = exp_nonpos(x - max);
        }
    }
}

/// Ids per partial sum in [`chunk_sums`]: the draw walks chunks first, then ids of one chunk.
const CHUNK: usize = 64;

/// The f64 sum of every [`CHUNK`] of `w` into `sums` (lanes first, in a fixed order), and the
/// total (the chunk sums in order).
fn chunk_sums(w: &[f32], sums: &mut Vec<f64>) -> f64 {
    sums.clear();
    for c in w.chunks(CHUNK) {
        let mut acc = [0.0f64; LANES];
        let lanes = c.chunks_exact(LANES);
        let tail = lanes.remainder();
        for l in lanes {
            for j in 0..LANES {
                acc[j] += l[j] as f64;
            }
        }
        let s = acc.iter().fold(0.0, |s, &a| s + a);
        sums.push(tail.iter().fold(s, |s, &x| s + x as f64));
    }
    sums.iter().fold(0.0, |s, &c| s + c)
}

/// CTRL / Hugging Face repetition penalty over prompt + generated ids (see the module docs).
#[derive(Debug, Clone)]
pub struct RepetitionPenalty {
    penalty: f32,
}

impl RepetitionPenalty {
    /// `penalty` must be finite and > 0; 1.0 is a no-op.
    pub fn new(penalty: f32) -> Result<RepetitionPenalty> {
        if !(penalty.is_finite() && penalty > 0.0) {
            return Err(invalid(
                "repetition_penalty",
                penalty,
                "a finite number > 0 (1 = off)",
            ));
        }
        Ok(RepetitionPenalty { penalty })
    }
}

impl LogitsProcessor for RepetitionPenalty {
    fn process(&mut self, logits: &mut [f32], history: &History) {
        if self.penalty == 1.0 {
            return;
        }
        for &(id, _) in history.counts() {
            if let Some(x) = logits.get_mut(id as usize) {
                *x = if *x < 0.0 {
                    *x * self.penalty
                } else {
                    *x / self.penalty
                };
            }
        }
    }

    fn name(&self) -> &'static str {
        "repetition_penalty"
    }
}

/// OpenAI presence and frequency penalties over the generated ids (see the module docs).
#[derive(Debug, Clone)]
pub struct PresenceFrequencyPenalty {
    presence: f32,
    frequency: f32,
}

impl PresenceFrequencyPenalty {
    /// Both must be finite; negative values encourage repetition, 0 is a no-op.
    pub fn new(presence: f32, frequency: f32) -> Result<PresenceFrequencyPenalty> {
        if !presence.is_finite() {
            return Err(invalid("presence_penalty", presence, "a finite number"));
        }
        if !frequency.is_finite() {
            return Err(invalid("frequency_penalty", frequency, "a finite number"));
        }
        Ok(PresenceFrequencyPenalty {
            presence,
            frequency,
        })
    }
}

impl LogitsProcessor for PresenceFrequencyPenalty {
    fn process(&mut self, logits: &mut [f32], history: &History) {
        if self.presence == 0.0 && self.frequency == 0.0 {
            return;
        }
        for &(id, c) in history.generated_counts() {
            if let Some(x) = logits.get_mut(id as usize) {
                *x -= self.presence + self.frequency * c as f32;
            }
        }
    }

    fn name(&self) -> &'static str {
        "presence_frequency_penalty"
    }
}

/// Hugging Face no-repeat-ngram over prompt + generated ids (see the module docs).
#[derive(Debug, Clone)]
pub struct NoRepeatNgram {
    n: usize,
}

impl NoRepeatNgram {
    /// `n = 0` is a no-op.
    pub fn new(n: usize) -> NoRepeatNgram {
        NoRepeatNgram { n }
    }
}

impl LogitsProcessor for NoRepeatNgram {
    fn process(&mut self, logits: &mut [f32], history: &History) {
        let (n, t) = (self.n, history.tokens());
        if n == 0 || t.len() < n {
            return;
        }
        // The last n-1 ids; every earlier n-gram starting with them bans its last id. A scan is
        // O(history) per step, like Hugging Face's, and small next to a forward pass.
        let prefix = &t[t.len() - (n - 1)..];
        for w in t.windows(n) {
            if w[..n - 1] == *prefix
                && let Some(x) = logits.get_mut(w[n - 1] as usize)
            {
                *x = f32::NEG_INFINITY;
            }
        }
    }

    fn name(&self) -> &'static str {
        "no_repeat_ngram"
    }
}

/// Divides every logit by the temperature.
#[derive(Debug, Clone)]
pub struct Temperature {
    t: f32,
}

impl Temperature {
    /// `t` must be finite and > 0 (temperature 0 is greedy, which is the [`Sampler`]'s business).
    pub fn new(t: f32) -> Result<Temperature> {
        if !(t.is_finite() && t > 0.0) {
            return Err(invalid("temperature", t, "a finite number > 0"));
        }
        Ok(Temperature { t })
    }
}

impl LogitsProcessor for Temperature {
    fn process(&mut self, logits: &mut [f32], _: &History) {
        if self.t == 1.0 {
            return;
        }
        for x in logits {
            *x /= self.t;
        }
    }

    fn name(&self) -> &'static str {
        "temperature"
    }
}

/// Keeps the `k` best-ranked ids (ties: lowest index); `k = 0` is a no-op.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    buf: Vec<(f32, u32)>,
}

impl TopK {
    pub fn new(k: usize) -> TopK {
        TopK { k, buf: Vec::new() }
    }
}

impl LogitsProcessor for TopK {
    fn process(&mut self, logits: &mut [f32], _: &History) {
        let k = self.k;
        if k == 0 || k >= logits.len() {
            return;
        }
        // One scan with a running threshold (the k-th best so far); the buffer of contenders is
        // cut back to k by a partial selection whenever it reaches 2k. O(vocab), no sort, and
        // the scan is one compare per id once the threshold has settled.
        let buf = &mut self.buf;
        buf.clear();
        let (mut threshold, mut trimmed) = (f32::NEG_INFINITY, false);
        for (i, &x) in logits.iter().enumerate() {
            // Strict: a later id tied with the k-th ranks below it.
            if x > threshold {
                buf.push((x, i as u32));
                if buf.len() == 2 * k {
                    buf.select_nth_unstable_by(k - 1, rank);
                    buf.truncate(k);
                    threshold = buf[k - 1].0;
                    trimmed = true;
                }
            }
        }
        if buf.len() > k {
            buf.select_nth_unstable_by(k - 1, rank);
        } else if !trimmed {
            return; // at most k candidates
        }
        keep_ranked(logits, buf[k - 1]);
    }

    fn name(&self) -> &'static str {
        "top_k"
    }
}

/// Nucleus filter: keeps the best-ranked ids while the mass ranked above is `< p`.
#[derive(Debug, Clone)]
pub struct TopP {
    p: f32,
    buf: Vec<(f32, u32)>,
    weights: Vec<f32>,
    buckets: Vec<u32>,
    hist: Vec<f64>,
}

impl TopP {
    /// `p` in `[0, 1]`; 1 is a no-op, 0 keeps only the top id.
    pub fn new(p: f32) -> Result<TopP> {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid("top_p", p, "a number in [0, 1]"));
        }
        Ok(TopP {
            p,
            buf: Vec::new(),
            weights: Vec::new(),
            buckets: Vec::new(),
            hist: Vec::new(),
        })
    }
}

/// Top-p buckets ids by distance below the top logit, this many per unit of logit...
const TOP_P_BUCKETS_PER_LOGIT: f32 = 32.0;
/// ...in this many buckets; the last also holds everything further down (weight < e^-32).
const TOP_P_BUCKETS: usize = 1024;
/// Interleaved copies of the histogram, so consecutive ids landing in one bucket do not wait on
/// each other's store.
const TOP_P_COPIES: usize = 4;

/// The bucket of every logit below the top logit `max` into `out`: monotone in the logit, so an
/// id in a lower bucket outranks every id in a higher one. (NaN distances, from `+inf` ids under
/// `max == +inf`, go to the last bucket; they are the only ids with weight there.) Vectorises.
fn top_p_buckets(logits: &[f32], max: f32, out: &mut Vec<u32>) {
    const LAST: f32 = (TOP_P_BUCKETS - 1) as f32;
    const ROUND: f32 = 12_582_912.0; // as in exp_nonpos: rounds d in [0, LAST] into the low bits
    out.clear();
    out.extend(logits.iter().map(|&x| {
        let d = (max - x) * TOP_P_BUCKETS_PER_LOGIT;
        let d = if d < LAST { d } else { LAST };
        (d + ROUND).to_bits() - ROUND.to_bits()
    }));
}

impl LogitsProcessor for TopP {
    fn process(&mut self, logits: &mut [f32], _: &History) {
        if self.p >= 1.0 {
            return;
        }
        let max = max_logit(logits);
        if max == f32::NEG_INFINITY {
            return;
        }
        let w = &mut self.weights;
        softmax_weights(logits, max, w);
        // O(vocab), no sort: a histogram of mass by distance below the top finds the bucket the
        // nucleus ends in; buckets above it are in, below it out, and only that bucket's ids are
        // ranked (ids with weight 0 rank below all others and are out, as p < 1).
        let bucket = &mut self.buckets;
        top_p_buckets(logits, max, bucket);
        let hist = &mut self.hist;
        hist.clear();
        hist.resize(TOP_P_COPIES * TOP_P_BUCKETS, 0.0);
        for (i, (&b, &wi)) in bucket.iter().zip(w.iter()).enumerate() {
            if wi > 0.0 {
                hist[(i % TOP_P_COPIES) * TOP_P_BUCKETS + b as usize] += wi as f64;
            }
        }
        let mass = |b: usize| -> f64 {
            (0..TOP_P_COPIES).fold(0.0, |s, c| s + hist[c * TOP_P_BUCKETS + b])
        };
        let target = self.p as f64 * (0..TOP_P_BUCKETS).fold(0.0, |s, b| s + mass(b));
        // The first bucket whose mass, with all above it, reaches the target; `above` is the
        // mass strictly above it (< target, so its top id is always kept).
        let mut above = 0.0f64;
        let Some(edge) = (0..TOP_P_BUCKETS as u32).find(|&b| {
            let m = mass(b as usize);
            let reached = above + m >= target;
            if !reached {
                above += m;
            }
            reached
        }) else {
            return; // rounding kept the total under p · total: keep everything
        };
        let buf = &mut self.buf;
        buf.clear();
        buf.extend(
            logits
                .iter()
                .zip(bucket.iter().zip(w.iter()))
                .enumerate()
                .filter(|&(_, (_, (&b, &wi)))| b == edge && wi > 0.0)
                .map(|(i, (&x, _))| (x, i as u32)),
        );
        // Within the edge bucket the nucleus keeps its first K ids in rank order, K the first
        // j >= 1 where `above` plus the mass of the bucket's first j ids reaches the target.
        // Bisect on rank with partial selections (a weighted quickselect, O(bucket)): K is in
        // (lo, hi], `cum` = mass up to rank lo; buf[..lo] holds ranks < lo, buf[hi..] >= hi.
        let (mut lo, mut hi, mut cum) = (0, buf.len(), above);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            buf[lo..hi].select_nth_unstable_by(mid - lo, rank);
            let s_mid = buf[lo..mid]
                .iter()
                .fold(cum, |s, &(_, i)| s + w[i as usize] as f64);
            if s_mid >= target {
                hi = mid;
            } else {
                (lo, cum) = (mid, s_mid);
            }
        }
        // buf[lo] is the last id kept.
        keep_ranked(logits, buf[lo]);
    }

    fn name(&self) -> &'static str {
        "top_p"
    }
}

/// Keeps ids whose probability is at least `p` times the top probability.
#[derive(Debug, Clone)]
pub struct MinP {
    p: f32,
}

impl MinP {
    /// `p` in `[0, 1]`; 0 is a no-op, 1 keeps only the ids tied for the top.
    pub fn new(p: f32) -> Result<MinP> {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid("min_p", p, "a number in [0, 1]"));
        }
        Ok(MinP { p })
    }
}

impl LogitsProcessor for MinP {
    fn process(&mut self, logits: &mut [f32], _: &History) {
        if self.p <= 0.0 {
            return;
        }
        let max = max_logit(logits);
        if max == f32::NEG_INFINITY {
            return;
        }
        // p_i >= p · p_max  ⇔  x_i - max >= ln p: a threshold on logits, no exp per id.
        let ln_p = (self.p as f64).ln();
        if max == f32::INFINITY {
            for x in logits {
                *x = if *x == f32::INFINITY {
                    *x
                } else {
                    f32::NEG_INFINITY
                };
            }
            return;
        }
        for x in logits {
            let keep = *x as f64 - max as f64 >= ln_p;
            *x = if keep { *x } else { f32::NEG_INFINITY };
        }
    }

    fn name(&self) -> &'static str {
        "min_p"
    }
}

/// Sampling knobs; every one is optional and unset means off (see the module docs for what
/// "greedy" and each knob mean). Deserialises from e.g. `{"temperature": 0.7, "top_p": 0.9}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingConfig {
    /// 0 = greedy; unset = greedy, or 1.0 when top_k, top_p or min_p is given.
    pub temperature: Option<f32>,
    /// 0 = off.
    pub top_k: Option<usize>,
    /// In [0, 1]; 1 = off.
    pub top_p: Option<f32>,
    /// In [0, 1]; 0 = off.
    pub min_p: Option<f32>,
    /// > 0; 1 = off.
    pub repetition_penalty: Option<f32>,
    /// Finite; 0 = off.
    pub presence_penalty: Option<f32>,
    /// Finite; 0 = off.
    pub frequency_penalty: Option<f32>,
    /// 0 = off.
    pub no_repeat_ngram_size: Option<usize>,
    /// Unset = [`DEFAULT_SEED`].
    pub seed: Option<u64>,
}

impl SamplingConfig {
    /// Checks every knob; the error names the first bad one and its value.
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = self.temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(invalid(
                "temperature",
                t,
                "a finite number >= 0 (0 = greedy)",
            ));
        }
        if let Some(p) = self.top_p {
            TopP::new(p)?;
        }
        if let Some(p) = self.min_p {
            MinP::new(p)?;
        }
        if let Some(r) = self.repetition_penalty {
            RepetitionPenalty::new(r)?;
        }
        PresenceFrequencyPenalty::new(
            self.presence_penalty.unwrap_or(0.0),
            self.frequency_penalty.unwrap_or(0.0),
        )?;
        Ok(())
    }

    /// Whether tokens are chosen by argmax rather than drawn (see the module docs).
    pub fn is_greedy(&self) -> bool {
        match self.temperature {
            Some(t) => t == 0.0,
            None => self.top_k.is_none() && self.top_p.is_none() && self.min_p.is_none(),
        }
    }

    /// The validated chain in Hugging Face's order: repetition penalty → presence/frequency
    /// penalty → no-repeat-ngram → temperature → top-k → top-p → min-p. Knobs that are off add
    /// nothing; a greedy config gets only the first three (the rest cannot change the argmax).
    pub fn build_chain(&self) -> Result<ProcessorChain> {
        self.validate()?;
        let mut chain = ProcessorChain::new();
        if let Some(r) = self.repetition_penalty.filter(|&r| r != 1.0) {
            chain.push(RepetitionPenalty::new(r)?);
        }
        let (presence, frequency) = (
            self.presence_penalty.unwrap_or(0.0),
            self.frequency_penalty.unwrap_or(0.0),
        );
        if presence != 0.0 || frequency != 0.0 {
            chain.push(PresenceFrequencyPenalty::new(presence, frequency)?);
        }
        if let Some(n) = self.no_repeat_ngram_size.filter(|&n| n > 0) {
            chain.push(NoRepeatNgram::new(n));
        }
        if self.is_greedy() {
            return Ok(chain);
        }
        if let Some(t) = self.temperature.filter(|&t| t != 1.0) {
            chain.push(Temperature::new(t)?);
        }
        if let Some(k) = self.top_k.filter(|&k| k > 0) {
            chain.push(TopK::new(k));
        }
        if let Some(p) = self.top_p.filter(|&p| p < 1.0) {
            chain.push(TopP::new(p)?);
        }
        if let Some(p) = self.min_p.filter(|&p| p > 0.0) {
            chain.push(MinP::new(p)?);
        }
        Ok(chain)
    }
}

/// Owns the processor chain and the RNG; one call per generated token.
#[derive(Debug)]
pub struct Sampler {
    chain: ProcessorChain,
    greedy: bool,
    seed: u64,
    rng: ChaCha8Rng,
    weights: Vec<f32>,
    sums: Vec<f64>,
}

impl Sampler {
    /// Validates `config` and builds its chain.
    pub fn new(config: &SamplingConfig) -> Result<Sampler> {
        Ok(Sampler::from_chain(
            config.build_chain()?,
            config.is_greedy(),
            config.seed.unwrap_or(DEFAULT_SEED),
        ))
    }

    /// Plain argmax, no processors.
    pub fn greedy() -> Sampler {
        Sampler::from_chain(ProcessorChain::new(), true, DEFAULT_SEED)
    }

    /// A custom chain; `greedy` picks argmax instead of drawing.
    pub fn from_chain(chain: ProcessorChain, greedy: bool, seed: u64) -> Sampler {
        Sampler {
            chain,
            greedy,
            seed,
            // ChaCha8Rng is documented as portable (rand book, "Reproducibility"): its stream is
            // fixed by the algorithm, not the platform; seed_from_u64 expands with a fixed PCG32.
            rng: ChaCha8Rng::seed_from_u64(seed),
            weights: Vec::new(),
            sums: Vec::new(),
        }
    }

    /// Restarts the random stream from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        self.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn is_greedy(&self) -> bool {
        self.greedy
    }

    pub fn chain(&self) -> &ProcessorChain {
        &self.chain
    }

    /// Runs the chain over `logits` (rewritten in place) and picks the next id.
    pub fn next_token(&mut self, logits: &mut [f32], history: &History) -> Result<u32> {
        if logits.is_empty() {
            return Err(SamplingError::EmptyLogits);
        }
        if u32::try_from(logits.len() - 1).is_err() {
            return Err(SamplingError::VocabTooLarge {
                vocab: logits.len(),
            });
        }
        for x in logits.iter_mut() {
            *x = if x.is_nan() { f32::NEG_INFINITY } else { *x };
        }
        self.chain.process(logits, history);
        let picked = if self.greedy {
            argmax(logits)
        } else {
            // A uniform f64 in [0, 1) from the top 53 bits (rand's own recipe, spelled out so
            // the tokens depend on nothing but the ChaCha8 stream).
            let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            draw(logits, u, &mut self.weights, &mut self.sums)
        };
        picked
            .map(|i| i as u32)
            .ok_or_else(|| SamplingError::NoCandidates {
                vocab: logits.len(),
                processors: self.chain.names().join(", "),
            })
    }
}

/// First index of the largest logit; NaN never wins; `None` when nothing is above `-inf`.
/// Same choice as [`crate::session::argmax`] whenever that one has a candidate.
fn argmax(logits: &[f32]) -> Option<usize> {
    let max = max_logit(logits);
    if max == f32::NEG_INFINITY {
        return None;
    }
    logits.iter().position(|&x| x == max)
}

/// Inverse-CDF draw from softmax(logits) in index order at `u` in `[0, 1)`: find the chunk
/// whose partial sums cross `u · total`, then the id inside it.
fn draw(logits: &[f32], u: f64, w: &mut Vec<f32>, sums: &mut Vec<f64>) -> Option<usize> {
    let max = max_logit(logits);
    if max == f32::NEG_INFINITY {
        return None;
    }
    softmax_weights(logits, max, w);
    let target = u * chunk_sums(w, sums);
    let mut cum = 0.0f64;
    for (c, &s) in sums.iter().enumerate() {
        if s > 0.0 && cum + s > target {
            let base = c * CHUNK;
            let mut last = None;
            for (i, &wi) in w[base..].iter().take(CHUNK).enumerate() {
                if wi > 0.0 {
                    cum += wi as f64;
                    last = Some(base + i);
                    if cum > target {
                        break;
                    }
                }
            }
            // Within-chunk rounding can fall short of the chunk's sum: its last id with weight.
            return last;
        }
        cum += s;
    }
    // u · total rounded up to total: the last id with weight.
    w.iter().rposition(|&wi| wi > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic test logits, uniform in [lo, hi).
    fn logits(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| lo + (hi - lo) * ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32))
            .collect()
    }

    fn softmax(x: &[f32]) -> Vec<f64> {
        let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let e: Vec<f64> = x.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    }

    fn entropy(p: &[f64]) -> f64 {
        p.iter().filter(|&&q| q > 0.0).map(|&q| -q * q.ln()).sum()
    }

    /// One change to a default config.
    type Tweak<'a> = &'a dyn Fn(&mut SamplingConfig);

    fn config(f: impl FnOnce(&mut SamplingConfig)) -> SamplingConfig {
        let mut c = SamplingConfig::default();
        f(&mut c);
        c
    }

    fn sampler(f: impl FnOnce(&mut SamplingConfig)) -> Sampler {
        Sampler::new(&config(f)).unwrap()
    }

    /// Empirical frequencies of `draws` tokens from fixed logits.
    fn frequencies(s: &mut Sampler, x: &[f32], draws: usize) -> Vec<f64> {
        let h = History::new(&[]);
        let mut counts = vec![0usize; x.len()];
        for _ in 0..draws {
            let id = s.next_token(&mut x.to_vec(), &h).unwrap() as usize;
            counts[id] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    /// Each frequency within 5 binomial standard deviations (plus a hair) of its probability.
    fn assert_matches(freq: &[f64], p: &[f64], draws: usize) {
        for (i, (&f, &q)) in freq.iter().zip(p).enumerate() {
            let tol = 5.0 * (q * (1.0 - q) / draws as f64).sqrt() + 1e-3;
            assert!(
                (f - q).abs() <= tol,
                "id {i}: frequency {f} vs p {q} (tol {tol})"
            );
        }
    }

    /// Ids left above -inf after a processor.
    fn kept(x: &[f32]) -> Vec<u32> {
        (0..x.len() as u32)
            .filter(|&i| x[i as usize] > f32::NEG_INFINITY)
            .collect()
    }

    fn run(p: &mut dyn LogitsProcessor, x: &[f32], h: &History) -> Vec<f32> {
        let mut y = x.to_vec();
        p.process(&mut y, h);
        y
    }

    /// Ids sorted by (logit desc, id asc): the ranking the filters use.
    fn ranked(x: &[f32]) -> Vec<u32> {
        let mut ids: Vec<u32> = (0..x.len() as u32).collect();
        ids.sort_by(|&a, &b| x[b as usize].total_cmp(&x[a as usize]).then(a.cmp(&b)));
        ids
    }

    const DRAWS: usize = 20_000;

    // ---- greedy --------------------------------------------------------------------------------

    #[test]
    fn greedy_equals_session_argmax() {
        let mut s = sampler(|_| {});
        assert!(s.is_greedy() && s.chain().is_empty());
        let h = History::new(&[]);
        for seed in 0..200 {
            // Coarse values make ties common; sprinkle NaN, -inf and +inf.
            let mut x: Vec<f32> = logits(40, -3.0, 3.0, seed)
                .iter()
                .map(|v| v.round())
                .collect();
            x[(seed % 40) as usize] = f32::NAN;
            if seed % 3 == 0 {
                x[((seed * 7) % 40) as usize] = f32::NEG_INFINITY;
            }
            if seed % 10 == 0 {
                x[((seed * 11) % 40) as usize] = f32::INFINITY;
            }
            let want = crate::session::argmax(&x);
            assert_eq!(
                s.next_token(&mut x.clone(), &h).unwrap(),
                want,
                "seed {seed}"
            );
        }
    }

    #[test]
    fn greedy_ties_pick_lowest_index() {
        let mut s = Sampler::greedy();
        let h = History::new(&[]);
        assert_eq!(s.next_token(&mut [1.0, 5.0, 2.0, 5.0], &h).unwrap(), 1);
        assert_eq!(s.next_token(&mut [f32::NAN, 0.5, 0.5], &h).unwrap(), 1);
    }

    #[test]
    fn temperature_zero_is_greedy_and_ignores_filters() {
        let c = config(|c| {
            c.temperature = Some(0.0);
            c.top_k = Some(5);
            c.top_p = Some(0.5);
            c.min_p = Some(0.1);
            c.repetition_penalty = Some(1.3);
        });
        assert!(c.is_greedy());
        assert_eq!(c.build_chain().unwrap().names(), ["repetition_penalty"]);
        assert!(!config(|c| c.top_k = Some(5)).is_greedy());
        assert!(!config(|c| c.min_p = Some(0.1)).is_greedy());
        assert!(!config(|c| c.temperature = Some(0.7)).is_greedy());
        assert!(config(|c| c.seed = Some(3)).is_greedy());
    }

    #[test]
    fn greedy_sees_the_penalties() {
        // Token 0 would win, but it was generated twice: presence 1 + frequency 2 · 2 sinks it.
        let mut s = sampler(|c| {
            c.presence_penalty = Some(1.0);
            c.frequency_penalty = Some(2.0);
        });
        let mut h = History::new(&[]);
        h.push(0);
        h.push(0);
        assert_eq!(s.next_token(&mut [4.0, 0.0, 1.0], &h).unwrap(), 2);
    }

    // ---- edge cases ----------------------------------------------------------------------------

    #[test]
    fn no_candidates_is_an_error_not_a_panic() {
        let h = History::new(&[]);
        let all: [Tweak<'_>; 5] = [
            &|_| {},
            &|c| c.temperature = Some(1.0),
            &|c| c.top_k = Some(3),
            &|c| c.top_p = Some(0.5),
            &|c| c.min_p = Some(0.5),
        ];
        for f in all {
            let mut s = sampler(f);
            for row in [
                vec![f32::NEG_INFINITY; 5],
                vec![f32::NAN; 5],
                vec![f32::NAN, f32::NEG_INFINITY, f32::NAN],
            ] {
                let err = s.next_token(&mut row.clone(), &h).unwrap_err();
                assert!(
                    matches!(err, SamplingError::NoCandidates { vocab, .. } if vocab == row.len()),
                    "{err}"
                );
                assert!(err.to_string().contains("-inf or NaN"), "{err}");
            }
            assert_eq!(
                s.next_token(&mut [], &h).unwrap_err(),
                SamplingError::EmptyLogits
            );
        }
    }

    #[test]
    fn no_candidates_error_names_the_processors() {
        // Banning every id leaves nothing: the error says which processors ran.
        let mut s = sampler(|c| {
            c.no_repeat_ngram_size = Some(1);
            c.temperature = Some(1.0);
        });
        let err = s
            .next_token(&mut [1.0, 2.0], &History::new(&[0, 1]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sampling: all 2 logits are -inf or NaN after processors [no_repeat_ngram]: no token to choose"
        );
    }

    #[test]
    fn nan_is_never_sampled_and_inf_takes_all_mass() {
        let h = History::new(&[]);
        let mut s = sampler(|c| c.temperature = Some(1.0));
        let f = frequencies(&mut s, &[f32::NAN, 0.0, f32::NAN, 0.0], 2000);
        assert_eq!((f[0], f[2]), (0.0, 0.0));
        assert!(f[1] > 0.4 && f[3] > 0.4, "{f:?}");
        let f = frequencies(&mut s, &[0.0, f32::INFINITY, 50.0, f32::INFINITY], 2000);
        assert_eq!((f[0], f[2]), (0.0, 0.0));
        assert!(f[1] > 0.4 && f[3] > 0.4, "{f:?}");
        // A single candidate is always chosen, whatever the draw.
        for _ in 0..100 {
            let mut x = [f32::NEG_INFINITY, f32::NAN, -80.0];
            assert_eq!(s.next_token(&mut x, &h).unwrap(), 2);
        }
    }

    // ---- temperature ---------------------------------------------------------------------------

    #[test]
    fn temperature_one_matches_softmax() {
        let x = [1.0, 2.0, 0.5, -1.0, 3.0, 0.0, 2.5];
        let mut s = sampler(|c| {
            c.temperature = Some(1.0);
            c.seed = Some(7);
        });
        assert!(s.chain().is_empty(), "temperature 1 adds no processor");
        assert_matches(&frequencies(&mut s, &x, DRAWS), &softmax(&x), DRAWS);
    }

    #[test]
    fn temperature_scales_the_distribution() {
        let x = [1.0, 2.0, 0.5, -1.0, 3.0, 0.0, 2.5];
        let mut entropies = Vec::new();
        for t in [0.5f32, 1.0, 2.0] {
            let mut s = sampler(|c| c.temperature = Some(t));
            let f = frequencies(&mut s, &x, DRAWS);
            let scaled: Vec<f32> = x.iter().map(|v| v / t).collect();
            assert_matches(&f, &softmax(&scaled), DRAWS);
            entropies.push(entropy(&f));
        }
        assert!(
            entropies[0] < entropies[1] && entropies[1] < entropies[2],
            "{entropies:?}"
        );
    }

    #[test]
    fn temperature_processor_divides() {
        let h = History::new(&[]);
        let y = run(&mut Temperature::new(0.5).unwrap(), &[1.0, -3.0, 0.25], &h);
        assert_eq!(y, [2.0, -6.0, 0.5]);
        let y = run(&mut Temperature::new(4.0).unwrap(), &[1.0, -3.0, 0.25], &h);
        assert_eq!(y, [0.25, -0.75, 0.0625]);
    }

    // ---- top-k ---------------------------------------------------------------------------------

    #[test]
    fn top_k_keeps_exactly_the_k_best() {
        let h = History::new(&[]);
        for (seed, k) in [(1u64, 1usize), (2, 10), (3, 50), (4, 999)] {
            let x = logits(1000, -4.0, 4.0, seed);
            let mut want = ranked(&x)[..k].to_vec();
            want.sort();
            let y = run(&mut TopK::new(k), &x, &h);
            assert_eq!(kept(&y), want, "k {k}");
            // Kept logits are untouched.
            for &i in &want {
                assert_eq!(y[i as usize], x[i as usize]);
            }
        }
    }

    #[test]
    fn top_k_draws_stay_inside_and_follow_the_renormalised_softmax() {
        let x = logits(200, -2.0, 2.0, 11);
        let top: Vec<u32> = ranked(&x)[..8].to_vec();
        let mut s = sampler(|c| c.top_k = Some(8));
        let f = frequencies(&mut s, &x, DRAWS);
        let mut masked = vec![f32::NEG_INFINITY; x.len()];
        for &i in &top {
            masked[i as usize] = x[i as usize];
        }
        for (i, &fi) in f.iter().enumerate() {
            assert!(
                fi == 0.0 || top.contains(&(i as u32)),
                "id {i} outside top-8"
            );
        }
        assert_matches(&f, &softmax(&masked), DRAWS);
    }

    #[test]
    fn top_k_edges() {
        let h = History::new(&[]);
        let x = [0.5, 3.0, -1.0, 3.0, 3.0, f32::NEG_INFINITY];
        // k beyond the vocabulary or the candidates: all kept, bit for bit.
        assert_eq!(run(&mut TopK::new(100), &x, &h), x);
        assert_eq!(run(&mut TopK::new(5), &x, &h), x);
        // Ties at the boundary: lowest index wins.
        assert_eq!(kept(&run(&mut TopK::new(2), &x, &h)), [1, 3]);
        assert_eq!(kept(&run(&mut TopK::new(1), &x, &h)), [1]);
        // 0 is off.
        assert_eq!(run(&mut TopK::new(0), &x, &h), x);
        assert!(
            config(|c| c.top_k = Some(0))
                .build_chain()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn top_k_one_is_greedy() {
        let h = History::new(&[]);
        let mut s = sampler(|c| c.top_k = Some(1));
        for seed in 0..50 {
            let x: Vec<f32> = logits(64, -2.0, 2.0, seed)
                .iter()
                .map(|v| v.round())
                .collect();
            let id = s.next_token(&mut x.clone(), &h).unwrap();
            assert_eq!(id, crate::session::argmax(&x), "seed {seed}");
        }
    }

    // ---- top-p ---------------------------------------------------------------------------------

    /// The nucleus by definition: in rank order, keep an id while the mass above it is < p.
    fn nucleus(x: &[f32], p: f64) -> Vec<u32> {
        let probs = softmax(x);
        let mut cum = 0.0;
        let mut out = Vec::new();
        for (j, id) in ranked(x).into_iter().enumerate() {
            if j > 0 && cum >= p {
                break;
            }
            cum += probs[id as usize];
            out.push(id);
        }
        out.sort();
        out
    }

    #[test]
    fn top_p_keeps_exactly_the_nucleus() {
        let h = History::new(&[]);
        // Wide logits give small nuclei, narrow ones large ones (several search rounds).
        for (seed, spread) in [(1u64, 12.0f32), (2, 4.0), (3, 1.0)] {
            let x = logits(5000, -spread, spread, seed);
            for p in [0.05f32, 0.3, 0.7, 0.9, 0.99] {
                let want = nucleus(&x, p as f64);
                let y = run(&mut TopP::new(p).unwrap(), &x, &h);
                assert_eq!(kept(&y), want, "spread {spread} p {p}");
                for &i in &want {
                    assert_eq!(y[i as usize], x[i as usize]);
                }
            }
        }
    }

    #[test]
    fn top_p_draws_stay_inside_the_nucleus() {
        let x = logits(300, -3.0, 3.0, 5);
        let inside = nucleus(&x, 0.6);
        let mut s = sampler(|c| {
            c.top_p = Some(0.6);
            c.seed = Some(1);
        });
        let f = frequencies(&mut s, &x, DRAWS);
        let mut masked = vec![f32::NEG_INFINITY; x.len()];
        for &i in &inside {
            masked[i as usize] = x[i as usize];
        }
        for (i, &fi) in f.iter().enumerate() {
            assert!(fi == 0.0 || inside.contains(&(i as u32)), "id {i} outside");
        }
        assert_matches(&f, &softmax(&masked), DRAWS);
    }

    #[test]
    fn top_p_edges() {
        let h = History::new(&[]);
        let x = [1.0, 4.0, 4.0, -2.0, 0.0];
        // p = 0: only the top id, ties to the lowest index; equal to greedy.
        assert_eq!(kept(&run(&mut TopP::new(0.0).unwrap(), &x, &h)), [1]);
        let mut s = sampler(|c| c.top_p = Some(0.0));
        for _ in 0..50 {
            assert_eq!(s.next_token(&mut x.clone(), &h).unwrap(), 1);
        }
        // p = 1 keeps everything, even ids whose probability underflows to 0.
        let far = [0.0, -1000.0, 5.0, f32::NEG_INFINITY];
        assert_eq!(run(&mut TopP::new(1.0).unwrap(), &far, &h), far);
        assert!(
            config(|c| c.top_p = Some(1.0))
                .build_chain()
                .unwrap()
                .is_empty()
        );
        // Ties: three ids of 1/3 each; p = 0.5 keeps two of them, lowest indices first.
        let tied = [2.0, 2.0, 2.0];
        assert_eq!(kept(&run(&mut TopP::new(0.5).unwrap(), &tied, &h)), [0, 1]);
        // The nucleus ends at the first id once the mass above reaches p exactly.
        let halves = [0.0, 0.0, -f32::INFINITY];
        assert_eq!(kept(&run(&mut TopP::new(0.5).unwrap(), &halves, &h)), [0]);
    }

    // ---- min-p ---------------------------------------------------------------------------------

    #[test]
    fn min_p_keeps_exactly_the_ids_above_the_ratio() {
        let h = History::new(&[]);
        let x = logits(2000, -6.0, 6.0, 9);
        let probs = softmax(&x);
        let pmax = probs.iter().cloned().fold(0.0, f64::max);
        for mp in [0.01f32, 0.1, 0.5, 0.9] {
            let want: Vec<u32> = (0..x.len() as u32)
                .filter(|&i| probs[i as usize] >= mp as f64 * pmax)
                .collect();
            assert!(want.len() > 1 && want.len() < x.len());
            let y = run(&mut MinP::new(mp).unwrap(), &x, &h);
            assert_eq!(kept(&y), want, "min_p {mp}");
        }
    }

    #[test]
    fn min_p_draws_never_fall_below_the_floor() {
        let x = logits(300, -3.0, 3.0, 6);
        let probs = softmax(&x);
        let pmax = probs.iter().cloned().fold(0.0, f64::max);
        let mut s = sampler(|c| c.min_p = Some(0.2));
        let f = frequencies(&mut s, &x, DRAWS);
        let mut masked = x.clone();
        for (i, &fi) in f.iter().enumerate() {
            let floor = probs[i] >= 0.2 * pmax;
            assert!(fi == 0.0 || floor, "id {i} below min_p");
            if !floor {
                masked[i] = f32::NEG_INFINITY;
            }
        }
        assert_matches(&f, &softmax(&masked), DRAWS);
    }

    #[test]
    fn min_p_edges() {
        let h = History::new(&[]);
        let x = [3.0, 1.0, 3.0, -500.0];
        assert_eq!(run(&mut MinP::new(0.0).unwrap(), &x, &h), x);
        assert!(
            config(|c| c.min_p = Some(0.0))
                .build_chain()
                .unwrap()
                .is_empty()
        );
        // min_p = 1 keeps every id tied for the top.
        assert_eq!(kept(&run(&mut MinP::new(1.0).unwrap(), &x, &h)), [0, 2]);
        // The boundary: exp(-ln 4) = 1/4, so min_p = 0.25 keeps logit max - ln 4 (within float).
        let y = [0.0, -(4.0f32.ln()) + 1e-6, -(4.0f32.ln()) - 1e-4];
        assert_eq!(kept(&run(&mut MinP::new(0.25).unwrap(), &y, &h)), [0, 1]);
    }

    #[test]
    fn top_p_edge_bucket_of_ties_and_inf() {
        let h = History::new(&[]);
        // 5000 equal logits share one bucket: p = 0.25 keeps exactly the first 1250 ids (the
        // 1251st has mass 0.25 above it).
        let y = run(&mut TopP::new(0.25).unwrap(), &[1.0; 5000], &h);
        let k = kept(&y);
        assert!(k.len() == 1250 && k.iter().enumerate().all(|(i, &id)| id as usize == i));
        // Mass exactly at the target at the end of a bucket: the nucleus ends there. Id 0 holds
        // 1/2 (bucket 0), ids 1 and 2 hold 1/4 each (bucket 22); p = 0.5 keeps id 0 only.
        let half = -std::f32::consts::LN_2;
        assert_eq!(exp_nonpos(half), 0.5);
        assert_eq!(
            kept(&run(&mut TopP::new(0.5).unwrap(), &[0.0, half, half], &h)),
            [0]
        );
        // +inf ids share all the mass: 3 of them, p = 0.5 keeps the first two.
        let x = [0.0, f32::INFINITY, 1.0, f32::INFINITY, f32::INFINITY];
        assert_eq!(kept(&run(&mut TopP::new(0.5).unwrap(), &x, &h)), [1, 3]);
    }

    // ---- softmax and the draw ------------------------------------------------------------------

    #[test]
    fn exp_nonpos_is_accurate_and_monotone() {
        let (mut worst, mut prev) = (0.0f64, 0.0f32);
        for k in 0..=200_000 {
            let x = -87.0 + 87.0 * k as f32 / 200_000.0;
            let (got, want) = (exp_nonpos(x), (x as f64).exp());
            worst = worst.max(((got as f64 - want) / want).abs());
            assert!(got >= prev, "not monotone at {x}");
            prev = got;
        }
        assert!(worst < 3e-7, "max relative error {worst}");
        assert_eq!(exp_nonpos(0.0), 1.0);
        assert_eq!(exp_nonpos(-0.0), 1.0);
        for x in [-87.5, -1e30, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(exp_nonpos(x), 0.0, "{x}");
        }
    }

    #[test]
    fn draw_walks_the_cdf_in_index_order() {
        // 200 equal weights (4 chunks): u picks id floor(200 u); a boundary goes to the next id.
        let x = [0.5f32; 200];
        let (mut w, mut sums) = (Vec::new(), Vec::new());
        let mut at = |u: f64| draw(&x, u, &mut w, &mut sums).unwrap();
        assert_eq!(at(0.0), 0);
        assert_eq!(at(0.3275), 65);
        assert_eq!(at(0.5), 100);
        assert_eq!(at(0.999), 199);
        assert_eq!(at(1.0 - f64::EPSILON / 2.0), 199);
        // Ids without weight are skipped whatever u is.
        let mut y = [f32::NEG_INFINITY; 130];
        y[64] = 0.0;
        y[129] = 0.0;
        for u in [0.0, 0.49, 0.5, 0.99] {
            let id = draw(&y, u, &mut w, &mut sums).unwrap();
            assert_eq!(id, if u < 0.5 { 64 } else { 129 }, "u {u}");
        }
    }

    /// A processor that fails the test if it is handed a NaN.
    struct NoNan;
    impl LogitsProcessor for NoNan {
        fn process(&mut self, logits: &mut [f32], _: &History) {
            assert!(logits.iter().all(|x| !x.is_nan()), "processor saw NaN");
        }
        fn name(&self) -> &'static str {
            "no_nan"
        }
    }

    #[test]
    fn processors_never_see_nan() {
        for greedy in [true, false] {
            let mut chain = ProcessorChain::new();
            chain.push(NoNan);
            let mut s = Sampler::from_chain(chain, greedy, 1);
            assert_eq!(s.chain().names(), ["no_nan"]);
            let mut x = [f32::NAN, 2.0, f32::NAN];
            assert_eq!(s.next_token(&mut x, &History::new(&[])).unwrap(), 1);
            assert_eq!(x[0], f32::NEG_INFINITY);
        }
    }

    // ---- reproducibility -----------------------------------------------------------------------

    fn sequence(seed: u64, n: usize) -> Vec<u32> {
        let x = logits(50, -1.0, 1.0, 3);
        let mut s = sampler(|c| {
            c.temperature = Some(1.0);
            c.seed = Some(seed);
        });
        let h = History::new(&[]);
        (0..n)
            .map(|_| s.next_token(&mut x.clone(), &h).unwrap())
            .collect()
    }

    #[test]
    fn same_seed_same_tokens_other_seed_other_tokens() {
        assert_eq!(sequence(42, 200), sequence(42, 200));
        assert_ne!(sequence(42, 200), sequence(43, 200));
        // Unset seed is DEFAULT_SEED.
        assert_eq!(sequence(DEFAULT_SEED, 50), {
            let x = logits(50, -1.0, 1.0, 3);
            let mut s = sampler(|c| c.temperature = Some(1.0));
            let h = History::new(&[]);
            (0..50)
                .map(|_| s.next_token(&mut x.clone(), &h).unwrap())
                .collect::<Vec<_>>()
        });
        // reseed restarts the stream.
        let x = logits(50, -1.0, 1.0, 3);
        let mut s = sampler(|c| {
            c.temperature = Some(1.0);
            c.seed = Some(42);
        });
        let h = History::new(&[]);
        s.next_token(&mut x.clone(), &h).unwrap();
        s.reseed(42);
        let again: Vec<u32> = (0..20)
            .map(|_| s.next_token(&mut x.clone(), &h).unwrap())
            .collect();
        assert_eq!(again, sequence(42, 20));
    }

    #[test]
    fn seed_42_golden_sequence() {
        // Pinned: a change here means seeded runs no longer reproduce across versions/machines
        // (RNG, its seeding, the uniform recipe or the inverse-CDF walk changed).
        assert_eq!(sequence(42, 16), GOLDEN_42);
        // And it is what the definition gives: u = top 53 bits of each ChaCha8 u64, walked
        // through the f64 softmax CDF in index order.
        let probs = softmax(&logits(50, -1.0, 1.0, 3));
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let oracle: Vec<u32> = (0..16)
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let mut cum = 0.0;
                probs
                    .iter()
                    .position(|&p| {
                        cum += p;
                        cum > u
                    })
                    .unwrap() as u32
            })
            .collect();
        assert_eq!(oracle, GOLDEN_42);
    }

    const GOLDEN_42: [u32; 16] = [
        35, 47, 21, 32, 15, 10, 17, 38, 37, 13, 25, 45, 47, 30, 36, 11,
    ];

    // ---- penalties -----------------------------------------------------------------------------

    #[test]
    fn repetition_penalty_arithmetic() {
        // Prompt [0, 1], generated [1, 3]: ids 0, 1, 3 are penalised once each.
        let mut h = History::new(&[0, 1]);
        h.push(1);
        h.push(3);
        let x = [2.0, -2.0, 1.0, 0.0, 3.0];
        let y = run(&mut RepetitionPenalty::new(2.0).unwrap(), &x, &h);
        assert_eq!(y, [1.0, -4.0, 1.0, 0.0, 3.0]);
        let y = run(&mut RepetitionPenalty::new(0.5).unwrap(), &x, &h);
        assert_eq!(y, [4.0, -1.0, 1.0, 0.0, 3.0]);
        // 1.0 is a no-op and adds nothing to the chain.
        assert_eq!(run(&mut RepetitionPenalty::new(1.0).unwrap(), &x, &h), x);
        assert!(
            config(|c| c.repetition_penalty = Some(1.0))
                .build_chain()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn presence_frequency_penalty_arithmetic() {
        // Prompt [2, 2] is not counted; generated [0, 0, 1, 0]: c0 = 3, c1 = 1.
        let mut h = History::new(&[2, 2]);
        for id in [0, 0, 1, 0] {
            h.push(id);
        }
        let x = [1.0, 1.0, 1.0, 1.0];
        let mut p = PresenceFrequencyPenalty::new(0.5, 0.25).unwrap();
        // 1 - (0.5 + 0.25·3) = -0.25; 1 - (0.5 + 0.25·1) = 0.25.
        assert_eq!(run(&mut p, &x, &h), [-0.25, 0.25, 1.0, 1.0]);
        let mut p = PresenceFrequencyPenalty::new(0.5, 0.0).unwrap();
        assert_eq!(run(&mut p, &x, &h), [0.5, 0.5, 1.0, 1.0]);
        let mut p = PresenceFrequencyPenalty::new(0.0, -1.0).unwrap();
        assert_eq!(run(&mut p, &x, &h), [4.0, 2.0, 1.0, 1.0]);
        assert_eq!(
            run(
                &mut PresenceFrequencyPenalty::new(0.0, 0.0).unwrap(),
                &x,
                &h
            ),
            x
        );
        assert!(
            config(|c| {
                c.presence_penalty = Some(0.0);
                c.frequency_penalty = Some(0.0);
            })
            .build_chain()
            .unwrap()
            .is_empty()
        );
    }

    #[test]
    fn penalties_ignore_ids_outside_the_vocabulary() {
        let mut h = History::new(&[1, 900]);
        h.push(u32::MAX);
        h.push(1);
        let x = [1.0, 1.0];
        assert_eq!(
            run(&mut RepetitionPenalty::new(2.0).unwrap(), &x, &h),
            [1.0, 0.5]
        );
        let mut p = PresenceFrequencyPenalty::new(1.0, 1.0).unwrap();
        assert_eq!(run(&mut p, &x, &h), [1.0, -1.0]);
        assert_eq!(
            run(&mut NoRepeatNgram::new(1), &x, &h),
            [1.0, f32::NEG_INFINITY]
        );
    }

    // ---- no-repeat-ngram -----------------------------------------------------------------------

    fn banned(n: usize, prompt: &[u32], generated: &[u32], vocab: usize) -> Vec<u32> {
        let mut h = History::new(prompt);
        for &id in generated {
            h.push(id);
        }
        let y = run(&mut NoRepeatNgram::new(n), &vec![0.0; vocab], &h);
        (0..vocab as u32)
            .filter(|&i| y[i as usize] == f32::NEG_INFINITY)
            .collect()
    }

    #[test]
    fn no_repeat_ngram_bans_exactly_the_completions() {
        // History 5 1 5 2 5 3 | 5, prompt and generated both count.
        let (p, g) = ([5, 1, 5, 2], [5, 3, 5]);
        assert_eq!(banned(2, &p, &g, 8), [1, 2, 3]);
        assert_eq!(banned(1, &p, &g, 8), [1, 2, 3, 5]);
        // Prefix "3 5" never occurred before: nothing to ban.
        assert_eq!(banned(3, &p, &g, 8), Vec::<u32>::new());
        // 5 1 5 2 5 1 5: prefix "1 5" occurred as "1 5 2" → ban 2; "5 1 5" likewise → ban 2.
        assert_eq!(banned(3, &[5, 1, 5, 2], &[5, 1, 5], 8), [2]);
        assert_eq!(banned(4, &[5, 1, 5, 2], &[5, 1, 5], 8), [2]);
        // n-grams: 1 2 3 | 2 3 1 | 3 1 2; prefix "1 2" → ban 3.
        assert_eq!(banned(3, &[1, 2, 3, 1, 2], &[], 6), [3]);
        // Overlapping occurrences: 4 4 4 has "4 4" twice; prefix "4" bans 4.
        assert_eq!(banned(2, &[4, 4], &[4], 6), [4]);
        assert_eq!(banned(3, &[4, 4], &[4], 6), [4]);
    }

    #[test]
    fn no_repeat_ngram_short_history_is_a_no_op() {
        let t = [5, 1, 5, 2, 5, 3, 5];
        assert_eq!(banned(8, &t, &[], 8), Vec::<u32>::new());
        assert_eq!(banned(100, &t, &[], 8), Vec::<u32>::new());
        // n = len: only the whole history is an n-gram, and its prefix is not the suffix.
        assert_eq!(banned(7, &t, &[], 8), Vec::<u32>::new());
        assert_eq!(banned(2, &[], &[], 8), Vec::<u32>::new());
        assert_eq!(banned(0, &t, &[], 8), Vec::<u32>::new());
        assert!(
            config(|c| c.no_repeat_ngram_size = Some(0))
                .build_chain()
                .unwrap()
                .is_empty()
        );
    }

    // ---- history -------------------------------------------------------------------------------

    #[test]
    fn history_counts_match_a_rescan() {
        let prompt: Vec<u32> = logits(30, 0.0, 12.0, 1).iter().map(|&v| v as u32).collect();
        let mut h = History::new(&prompt);
        for (step, v) in logits(200, 0.0, 20.0, 2).into_iter().enumerate() {
            h.push(v as u32);
            if step % 17 != 0 {
                continue;
            }
            for id in 0..22u32 {
                let all = h.tokens().iter().filter(|&&t| t == id).count() as u32;
                let gen_ = h.generated().iter().filter(|&&t| t == id).count() as u32;
                assert_eq!((h.count(id), h.generated_count(id)), (all, gen_), "id {id}");
            }
        }
        assert_eq!(h.prompt(), prompt);
        assert_eq!(h.len(), 230);
        // Distinct entries in first-seen order, counts summing to the lengths.
        let first_seen: Vec<u32> = h
            .tokens()
            .iter()
            .enumerate()
            .filter(|&(i, t)| !h.tokens()[..i].contains(t))
            .map(|(_, &t)| t)
            .collect();
        assert_eq!(
            h.counts().iter().map(|&(id, _)| id).collect::<Vec<_>>(),
            first_seen
        );
        assert_eq!(
            h.counts().iter().map(|&(_, c)| c as usize).sum::<usize>(),
            230
        );
        assert_eq!(
            h.generated_counts()
                .iter()
                .map(|&(_, c)| c as usize)
                .sum::<usize>(),
            200
        );
    }

    // ---- config and chain ----------------------------------------------------------------------

    #[test]
    fn validate_names_the_knob_and_value() {
        let cases: [(Tweak<'_>, &str); 10] = [
            (&|c| c.temperature = Some(-0.5), "temperature = -0.5"),
            (&|c| c.temperature = Some(f32::NAN), "temperature = NaN"),
            (
                &|c| c.temperature = Some(f32::INFINITY),
                "temperature = inf",
            ),
            (&|c| c.top_p = Some(1.5), "top_p = 1.5"),
            (&|c| c.top_p = Some(-0.1), "top_p = -0.1"),
            (&|c| c.min_p = Some(f32::NAN), "min_p = NaN"),
            (
                &|c| c.repetition_penalty = Some(0.0),
                "repetition_penalty = 0",
            ),
            (
                &|c| c.repetition_penalty = Some(-1.0),
                "repetition_penalty = -1",
            ),
            (
                &|c| c.presence_penalty = Some(f32::NAN),
                "presence_penalty = NaN",
            ),
            (
                &|c| c.frequency_penalty = Some(f32::NEG_INFINITY),
                "frequency_penalty = -inf",
            ),
        ];
        for (f, want) in cases {
            let c = config(f);
            let err = c.validate().unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("sampling config: {want}: expected")),
                "{msg}"
            );
            assert_eq!(Sampler::new(&c).unwrap_err(), err);
        }
        assert_eq!(
            config(|c| c.top_p = Some(2.0))
                .validate()
                .unwrap_err()
                .to_string(),
            "sampling config: top_p = 2: expected a number in [0, 1]"
        );
        // The boundaries themselves are fine.
        config(|c| {
            c.temperature = Some(0.0);
            c.top_p = Some(0.0);
            c.min_p = Some(1.0);
            c.presence_penalty = Some(-2.0);
            c.top_k = Some(0);
        })
        .validate()
        .unwrap();
    }

    #[test]
    fn chain_is_in_canonical_order() {
        let c = config(|c| {
            c.min_p = Some(0.05);
            c.top_p = Some(0.9);
            c.top_k = Some(40);
            c.temperature = Some(0.8);
            c.no_repeat_ngram_size = Some(3);
            c.frequency_penalty = Some(0.1);
            c.repetition_penalty = Some(1.1);
        });
        let names = [
            "repetition_penalty",
            "presence_frequency_penalty",
            "no_repeat_ngram",
            "temperature",
            "top_k",
            "top_p",
            "min_p",
        ];
        assert_eq!(c.build_chain().unwrap().names(), names);
        assert_eq!(
            format!("{:?}", c.build_chain().unwrap()),
            format!("{names:?}")
        );
        assert!(SamplingConfig::default().build_chain().unwrap().is_empty());
    }

    #[test]
    fn full_chain_on_big_random_rows_never_fails() {
        let mut s = sampler(|c| {
            c.min_p = Some(0.05);
            c.top_p = Some(0.9);
            c.top_k = Some(40);
            c.temperature = Some(0.8);
            c.no_repeat_ngram_size = Some(3);
            c.presence_penalty = Some(0.2);
            c.frequency_penalty = Some(0.1);
            c.repetition_penalty = Some(1.1);
        });
        let mut h = History::new(&[1, 2, 3, 1, 2]);
        for step in 0..30u64 {
            let mut y = logits(49152, -8.0, 8.0, step);
            let id = s.next_token(&mut y, &h).unwrap();
            // The chain left at most 40 ids and the chosen one is among them.
            assert!(
                kept(&y).len() <= 40 && y[id as usize] > f32::NEG_INFINITY,
                "step {step}"
            );
            h.push(id);
        }
    }

    #[test]
    fn config_round_trips_through_json() {
        let c: SamplingConfig =
            serde_json::from_str(r#"{"temperature": 0.7, "top_k": 40, "seed": 9}"#).unwrap();
        assert_eq!(
            c,
            config(|c| {
                c.temperature = Some(0.7);
                c.top_k = Some(40);
                c.seed = Some(9);
            })
        );
        assert_eq!(
            serde_json::from_str::<SamplingConfig>(&serde_json::to_string(&c).unwrap()).unwrap(),
            c
        );
        assert!(serde_json::from_str::<SamplingConfig>(r#"{"top_q": 1}"#).is_err());
        assert_eq!(
            serde_json::from_str::<SamplingConfig>("{}").unwrap(),
            SamplingConfig::default()
        );
    }

    #[test]
    fn sampling_errors_convert_to_engine_errors() {
        let e: crate::Error = SamplingError::EmptyLogits.into();
        assert_eq!(
            e.to_string(),
            "sampling: empty logits (vocabulary of size 0)"
        );
    }
}
