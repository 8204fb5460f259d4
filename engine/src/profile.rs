//! `engine profile`: timed greedy decodes of one prompt through a [`Decoder`] (`crate::decode`),
//! measured and rendered per the contract `engine-profile/1`, written out in ARCHITECTURE.md
//! (Contracts). The harness reads this JSON from whichever revision it gates, so the field names
//! and meanings here are binding.
//!
//! Each run prefills the prompt and then decodes exactly `tokens` new tokens greedily, ignoring
//! end-of-sequence ids (so every run does the same work). The first token comes out of the
//! prefill; the remaining `tokens - 1` are decode steps, of which the first `decode_skip` are
//! excluded from timing (warm-up of caches, graph capture). `warmups` whole runs are made and
//! discarded before the `runs` timed ones.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::decode::{CpuDecoder, Decoder};
pub use crate::decode::{CudaGraphStats, DeviceKvStats};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::package::Package;
use crate::text::TextCodec;

/// The schema tag of the JSON output.
pub const SCHEMA: &str = "engine-profile/1";

/// Execution provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ep {
    Cpu,
    Cuda,
}

impl Ep {
    pub fn parse(s: &str) -> Option<Ep> {
        match s {
            "cpu" => Some(Ep::Cpu),
            "cuda" => Some(Ep::Cuda),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Ep::Cpu => "cpu",
            Ep::Cuda => "cuda",
        }
    }
}

/// The prompt, as text (tokenized with the package's tokenizer, no chat template) or as ids.
#[derive(Clone, Debug)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// A resolved profile request.
#[derive(Clone, Debug)]
pub struct ProfileOptions {
    pub model: PathBuf,
    pub ep: Ep,
    /// The float type asked for; `None` means the package's own. It must equal the package's
    /// (packages are converted per dtype, see `engine convert --dtype`).
    pub dtype: Option<DType>,
    pub prompt: Prompt,
    pub tokens: usize,
    pub warmups: usize,
    pub runs: usize,
    pub decode_skip: usize,
    /// CPU threads (0 = all cores).
    pub threads: usize,
    /// CUDA only: capture the decode step in a CUDA graph (false: eager launches).
    pub cuda_graph: bool,
    /// CUDA only: the generic executor even on a package the fused decode path recognises.
    pub generic: bool,
    /// Time every op of the timed runs' decode steps (the generic executor only, on the CPU or,
    /// as host time per op, on CUDA; see [`render_trace`]).
    pub trace: bool,
}

/// One timed run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunTiming {
    pub ms_per_step: f64,
    pub tok_s: f64,
}

/// The `engine-profile/1` report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProfileReport {
    pub schema: String,
    pub model: String,
    /// sha256 over `model.onnx` followed by its external data files in sorted name order: the
    /// same package hash the goldens and `oracle decode` record, so the harness can match them.
    pub model_sha256: String,
    pub ep: String,
    pub dtype: String,
    pub threads: usize,
    pub layers: usize,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Median over the timed runs.
    pub prefill_ms: f64,
    pub runs: Vec<RunTiming>,
    pub median_ms_per_step: f64,
    pub median_tok_s: f64,
    pub cuda_graph: Option<CudaGraphStats>,
    pub device_kv: Option<DeviceKvStats>,
}

/// The float type of a package: the element type of its KV-cache ports (packages made by
/// `engine tiny` / `engine convert` use one float type for weights, activations, KV and logits).
pub fn package_dtype(package: &Package) -> DType {
    package.io.kv_dtype
}

/// Checks `--dtype` against the package's float type.
pub fn check_dtype(package: &Package, want: Option<DType>) -> Result<DType> {
    let have = package_dtype(package);
    match want {
        Some(w) if w != have => Err(Error::package(
            &package.dir,
            format!(
                "--dtype {w} does not match the package's dtype {have}: packages are converted per dtype (engine convert --dtype {w}); point --model at the {w} package"
            ),
        )),
        _ => Ok(have),
    }
}

/// Median of a non-empty slice (mean of the two middle values for an even count).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A loaded model ready to decode the prompt again and again: what `profile` and `serve` share.
pub struct Profiler {
    opts: ProfileOptions,
    runner: Box<dyn Decoder>,
    prompt_ids: Vec<u32>,
    model_sha256: String,
    dtype: DType,
    layers: usize,
    /// The tokens of the first timed run: every later run must equal them.
    generated_ids: Option<Vec<u32>>,
    runs: Vec<RunTiming>,
    prefills: Vec<f64>,
}

/// One timed decode: its prefill, the mean of its timed decode steps, its tokens; and the same
/// two times in the decoding thread's CPU time where that is the whole decode's (a one-thread
/// CPU decode: `DecodeRun::step_cpu_ms`), which does not count time the host stole from the
/// vCPU (`crate::clock`). The harness times one-thread rows with them when both revisions give
/// them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ServedRun {
    pub prefill_ms: f64,
    pub ms_per_step: f64,
    pub generated_ids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_prefill_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms_per_step: Option<f64>,
}

impl Profiler {
    /// Checks the options, loads the package and the decoder, and makes the warm-up runs.
    pub fn open(opts: &ProfileOptions) -> Result<Profiler> {
        if opts.tokens < 2 {
            return Err(Error::msg(
                "--tokens must be at least 2 (the first token comes out of the prefill; steps are timed after it)",
            ));
        }
        if opts.decode_skip >= opts.tokens - 1 {
            return Err(Error::msg(format!(
                "--decode-skip {} leaves no timed step: {} tokens make {} decode steps",
                opts.decode_skip,
                opts.tokens,
                opts.tokens - 1
            )));
        }
        // Fail on a CUDA request before the (slow) package load and hash.
        if opts.ep == Ep::Cuda {
            crate::backend::cuda::check_available()?;
        }
        let package = Package::open(&opts.model)?;
        let dtype = check_dtype(&package, opts.dtype)?;
        let prompt_ids = match &opts.prompt {
            Prompt::Ids(ids) => ids.clone(),
            Prompt::Text(t) => TextCodec::open(&opts.model)?.encode(t)?,
        };
        if prompt_ids.is_empty() {
            return Err(Error::msg("the prompt encodes to no tokens"));
        }
        let model_sha256 = package.model.sha256()?;
        let layers = package.io.layers.len();
        let mut runner: Box<dyn Decoder> = match opts.ep {
            Ep::Cpu => Box::new(CpuDecoder::new(&package, opts.threads)?),
            Ep::Cuda => crate::decode::cuda_decoder(&package, opts.cuda_graph, opts.generic)?,
        };
        for _ in 0..opts.warmups {
            runner.decode(&prompt_ids, opts.tokens)?;
        }
        if opts.trace {
            runner.set_trace(true)?;
        }
        Ok(Profiler {
            opts: opts.clone(),
            runner,
            prompt_ids,
            model_sha256,
            dtype,
            layers,
            generated_ids: None,
            runs: Vec::new(),
            prefills: Vec::new(),
        })
    }

    /// One timed decode of the prompt, kept for the report.
    pub fn run_once(&mut self) -> Result<ServedRun> {
        let r = self.runs.len();
        let tokens = self.opts.tokens;
        let run = self.runner.decode(&self.prompt_ids, tokens)?;
        if run.generated_ids.len() != tokens || run.step_ms.len() != tokens - 1 {
            return Err(Error::msg(format!(
                "run {r}: made {} tokens in {} steps, expected {tokens} tokens",
                run.generated_ids.len(),
                run.step_ms.len(),
            )));
        }
        // Greedy decoding is deterministic: different tokens between runs is a bug to report.
        match &self.generated_ids {
            Some(first) if *first != run.generated_ids => {
                return Err(Error::msg(format!(
                    "run {r} generated different tokens than run 0: {:?} vs {:?}",
                    run.generated_ids, first
                )));
            }
            Some(_) => {}
            None => self.generated_ids = Some(run.generated_ids.clone()),
        }
        let timed = &run.step_ms[self.opts.decode_skip..];
        let ms_per_step = timed.iter().sum::<f64>() / timed.len() as f64;
        self.runs.push(RunTiming {
            ms_per_step,
            tok_s: if ms_per_step > 0.0 {
                1e3 / ms_per_step
            } else {
                0.0
            },
        });
        self.prefills.push(run.prefill_ms);
        let cpu_ms_per_step = (run.step_cpu_ms.len() == run.step_ms.len()).then(|| {
            let timed = &run.step_cpu_ms[self.opts.decode_skip..];
            timed.iter().sum::<f64>() / timed.len() as f64
        });
        Ok(ServedRun {
            prefill_ms: run.prefill_ms,
            ms_per_step,
            generated_ids: run.generated_ids,
            cpu_prefill_ms: run.prefill_cpu_ms,
            cpu_ms_per_step,
        })
    }

    /// Where the timed runs' decode steps went, op type by op type (with `trace` on).
    pub fn trace(&self) -> Option<crate::session::TraceReport> {
        self.runner.trace()
    }

    /// The `engine-profile/1` report of the timed runs so far.
    pub fn report(&self) -> ProfileReport {
        let (cuda_graph, device_kv) = self.runner.device_stats();
        let runs = &self.runs;
        ProfileReport {
            schema: SCHEMA.into(),
            model: self.opts.model.display().to_string(),
            model_sha256: self.model_sha256.clone(),
            ep: self.opts.ep.name().into(),
            dtype: self.dtype.name().into(),
            threads: self.runner.threads(),
            layers: self.layers,
            prompt_ids: self.prompt_ids.clone(),
            generated_ids: self.generated_ids.clone().unwrap_or_default(),
            prefill_ms: median(&self.prefills),
            median_ms_per_step: median(&runs.iter().map(|r| r.ms_per_step).collect::<Vec<_>>()),
            median_tok_s: median(&runs.iter().map(|r| r.tok_s).collect::<Vec<_>>()),
            runs: runs.clone(),
            cuda_graph,
            device_kv,
        }
    }
}

/// Runs the profile: `warmups` untimed runs, then `runs` timed ones.
pub fn profile(opts: &ProfileOptions) -> Result<ProfileReport> {
    Ok(profile_traced(opts)?.0)
}

/// [`profile`], with the op trace of the timed runs when `opts.trace` asks for it.
pub fn profile_traced(
    opts: &ProfileOptions,
) -> Result<(ProfileReport, Option<crate::session::TraceReport>)> {
    if opts.runs == 0 {
        return Err(Error::msg("--runs must be at least 1"));
    }
    let mut p = Profiler::open(opts)?;
    for _ in 0..opts.runs {
        p.run_once()?;
    }
    Ok((p.report(), p.trace()))
}

/// The op trace as text: per op type, nodes, mean milliseconds per decode step and share of
/// the step, then what the step spent outside the graph's ops. Times come from one clock read
/// around each op, so they include the op's own dispatch and thread hand-offs.
pub fn render_trace(t: &crate::session::TraceReport) -> String {
    let mut s = format!(
        "trace: {} decode steps, {:.3} ms/step\n  {:<30} {:>6} {:>10} {:>7}\n",
        t.steps, t.ms_per_step, "op", "nodes", "ms/step", "share"
    );
    let share = |ms: f64| {
        if t.ms_per_step > 0.0 {
            100.0 * ms / t.ms_per_step
        } else {
            0.0
        }
    };
    for o in &t.ops {
        s += &format!(
            "  {:<30} {:>6} {:>10.3} {:>6.1}%\n",
            o.op_type,
            o.nodes,
            o.ms_per_run,
            share(o.ms_per_run)
        );
    }
    s += &format!(
        "  {:<30} {:>6} {:>10.3} {:>6.1}%\n",
        "(outside the ops)",
        "",
        t.outside_ms_per_step,
        share(t.outside_ms_per_step)
    );
    if !t.slowest_other.is_empty() {
        s += "  slowest nodes other than MatMul (ms/step):\n";
        for (name, op, ms) in &t.slowest_other {
            s += &format!("    {ms:>8.4}  {op:<20} {name}\n");
        }
    }
    if let Some(c) = &t.capture {
        s += &format!(
            "capture: {}\n  {:<30} {:>8} {:>7} {:>6}\n",
            c.graph, "op", "captured", "folded", "host"
        );
        for o in &c.ops {
            s += &format!(
                "  {:<30} {:>8} {:>7} {:>6}\n",
                o.op_type,
                o.captured,
                o.folded,
                o.host.len()
            );
        }
        for o in &c.ops {
            for (node, why) in &o.host {
                s += &format!("  not captured: {node} ({}): {why}\n", o.op_type);
            }
        }
    }
    s
}

/// Prefix of every line `engine profile --serve` writes to stdout.
pub const SERVE_PREFIX: &str = "engine-profile-serve";

/// `engine profile --serve`: the model stays loaded and decodes on request, so the harness can
/// alternate two revisions' engines request by request (paired, as its micro-benchmarks are)
/// instead of timing one whole process per side. Protocol (lines; `runs` is not used):
///
/// ```text
/// engine  -> harness   engine-profile-serve ready          (after loading and the warm-ups)
/// harness -> engine    run                                  one timed decode of the prompt
/// engine  -> harness   engine-profile-serve run {"prefill_ms":…,"ms_per_step":…,"generated_ids":[…],
///                                                    "cpu_prefill_ms":…,"cpu_ms_per_step":…}
/// …                                                         until stdin closes, then:
/// engine  -> harness   engine-profile-serve done {engine-profile/1 report of the served runs}
/// ```
/// Any other request line is an error; an error ends the process with it on stderr (exit 1).
pub fn serve(
    opts: &ProfileOptions,
    input: impl std::io::BufRead,
    mut out: impl std::io::Write,
) -> Result<()> {
    let mut p = Profiler::open(opts)?;
    let io = |e: std::io::Error| Error::msg(format!("engine profile --serve: {e}"));
    writeln!(out, "{SERVE_PREFIX} ready").map_err(io)?;
    out.flush().map_err(io)?;
    for line in input.lines() {
        let line = line.map_err(io)?;
        if line.trim() != "run" {
            return Err(Error::msg(format!(
                "engine profile --serve: expected `run`, got {line:?}"
            )));
        }
        let r = p.run_once()?;
        let json = serde_json::to_string(&r).map_err(|e| Error::msg(e.to_string()))?;
        writeln!(out, "{SERVE_PREFIX} run {json}").map_err(io)?;
        out.flush().map_err(io)?;
    }
    let json = serde_json::to_string(&p.report()).map_err(|e| Error::msg(e.to_string()))?;
    writeln!(out, "{SERVE_PREFIX} done {json}").map_err(io)?;
    out.flush().map_err(io)
}

/// Human-readable rendering (the default output of `engine profile`).
pub fn render_text(r: &ProfileReport) -> String {
    let mut s = String::new();
    let tok: Vec<f64> = r.runs.iter().map(|x| x.tok_s).collect();
    let (lo, hi) = tok
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    s += &format!("model: {} (sha256 {})\n", r.model, r.model_sha256);
    s += &format!(
        "ep: {}, dtype: {}, threads: {}, layers: {}\n",
        r.ep, r.dtype, r.threads, r.layers
    );
    s += &format!(
        "prompt: {} tokens, generated: {} tokens {:?}\n",
        r.prompt_ids.len(),
        r.generated_ids.len(),
        r.generated_ids
    );
    s += &format!("prefill: {:.3} ms\n", r.prefill_ms);
    s += &format!(
        "throughput: {:.1} tok/s, {:.3} ms/step (median of {} runs; {:.1} … {:.1} tok/s)\n",
        r.median_tok_s,
        r.median_ms_per_step,
        r.runs.len(),
        lo,
        hi
    );
    if let Some(g) = &r.cuda_graph {
        s += &format!(
            "cuda_graph: enabled={} captures={} replays={} fallbacks={}\n",
            g.enabled, g.captures, g.replays, g.fallbacks
        );
        for reason in &g.fallback_reasons {
            s += &format!("  fallback: {reason}\n");
        }
    }
    if let Some(k) = &r.device_kv {
        s += &format!(
            "device_kv: h2d {} calls / {} B, d2h {} calls / {} B\n",
            k.h2d_calls, k.h2d_bytes, k.d2h_calls, k.d2h_bytes
        );
    }
    s
}

/// Parses `--prompt-ids`: comma- or space-separated token ids.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| Error::msg(format!("--prompt-ids: {t:?} is not a token id")))
        })
        .collect()
}
