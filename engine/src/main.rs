//! The `engine` command line: `tiny` builds the deterministic test package, `convert` and `fetch`
//! provision a real one (GGUF → package), `generate` decodes a prompt, `profile` times decodes
//! (`engine-profile/1`), `bandwidth` probes the host's read bandwidth. Glue only: the work lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use engine::package::Package;
use engine::sampling::SamplingConfig;
use engine::session::{GenerateOptions, Session};
use engine::text::TextCodec;
use engine::{CpuBackend, DType, convert, profile, tiny};

#[derive(Parser)]
#[command(name = "engine", version, about = "Native ONNX decoder inference")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Token selection and logits processing (default: greedy). Applied in the order penalties →
/// no-repeat-ngram → temperature → top-k → top-p → min-p.
#[derive(clap::Args, Debug)]
struct SamplingArgs {
    /// Softmax temperature; 0 = greedy (default: greedy, or 1.0 when a top-k/top-p/min-p is given).
    #[arg(long)]
    temperature: Option<f32>,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches p (1 = off).
    #[arg(long)]
    top_p: Option<f32>,
    /// Keep tokens with probability at least min_p × the top token's (0 = off).
    #[arg(long)]
    min_p: Option<f32>,
    /// Divide positive / multiply negative logits of tokens already seen (1 = off).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Subtract from the logits of tokens already generated (0 = off).
    #[arg(long)]
    presence_penalty: Option<f32>,
    /// Subtract this × the count of each token already generated (0 = off).
    #[arg(long)]
    frequency_penalty: Option<f32>,
    /// Never repeat an n-gram of this size (0 = off).
    #[arg(long)]
    no_repeat_ngram: Option<usize>,
    /// Seed of the sampler's random stream (reproducible on every machine; default 0).
    #[arg(long)]
    seed: Option<u64>,
}

impl SamplingArgs {
    fn config(&self) -> SamplingConfig {
        SamplingConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            no_repeat_ngram_size: self.no_repeat_ngram,
            seed: self.seed,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Write the tiny deterministic LLaMA-style test model package.
    Tiny {
        /// Seed of the weights (same seed, byte-identical files).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output directory (created if needed).
        #[arg(long)]
        out: PathBuf,
    },
    /// Convert a llama GGUF (SmolLM2-135M-Instruct) into a model package.
    Convert {
        /// The GGUF file.
        #[arg(long)]
        gguf: PathBuf,
        /// Output package directory (replaced when complete).
        #[arg(long)]
        out: PathBuf,
        /// Float type of weights and activations: f32 or f16.
        #[arg(long, default_value = "f32")]
        dtype: String,
    },
    /// Provision a real model into the cache (download, verify sha256, convert); a no-op when done.
    Fetch {
        /// Which model: smollm2 (SmolLM2-135M-Instruct).
        model: String,
        /// Cache directory (default: $ENGINE_CACHE_DIR, else ~/.cache/decoder-gate).
        #[arg(long)]
        cache: Option<PathBuf>,
    },
    /// Greedy-decode a prompt and print the text, the ids and the speed.
    Generate {
        /// Model package directory.
        #[arg(long)]
        model: PathBuf,
        /// Prompt text.
        #[arg(long)]
        prompt: String,
        /// Wrap the prompt in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// Maximum number of new tokens.
        #[arg(long, default_value_t = 32)]
        max_tokens: usize,
        /// CPU threads (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Recompute the whole sequence every step instead of using the KV cache.
        #[arg(long)]
        no_kv_cache: bool,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Do not stop on end-of-sequence ids (always generate --max-tokens; for timing).
        #[arg(long)]
        ignore_eos: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure how fast the CPU streams memory (read-only, STREAM-like): the ceiling of a
    /// decode step, which reads every weight once.
    Bandwidth {
        /// Threads (0 = all cores).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Buffer size in MiB (far above the last-level cache to measure memory).
        #[arg(long, default_value_t = 1024)]
        mib: usize,
        /// Timed passes (after one untimed).
        #[arg(long, default_value_t = 10)]
        passes: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Time greedy decodes of a prompt (contract `engine-profile/1` with --json).
    Profile {
        /// Model package directory.
        #[arg(long)]
        model: PathBuf,
        /// Execution provider: cpu or cuda.
        #[arg(long, default_value = "cpu")]
        ep: String,
        /// Float type: f32 or f16; must be the package's (default: the package's).
        #[arg(long)]
        dtype: Option<String>,
        /// Prompt text (no chat template).
        #[arg(
            long,
            conflicts_with = "prompt_ids",
            required_unless_present = "prompt_ids"
        )]
        prompt: Option<String>,
        /// Prompt token ids, comma-separated.
        #[arg(long)]
        prompt_ids: Option<String>,
        /// New tokens per run (end-of-sequence ids are ignored).
        #[arg(long, default_value_t = 128)]
        tokens: usize,
        /// Untimed runs before the timed ones.
        #[arg(long, default_value_t = 1)]
        warmups: usize,
        /// Timed runs.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Decode steps at the start of each run excluded from timing.
        #[arg(long, default_value_t = 0)]
        decode_skip: usize,
        /// CPU threads (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// CUDA: launch the decode step eagerly instead of replaying a captured CUDA graph.
        #[arg(long)]
        no_cuda_graph: bool,
        /// CUDA: decode with the generic executor (any ONNX decoder) even on a package the
        /// fused llama path recognises.
        #[arg(long)]
        generic: bool,
        /// Print the `engine-profile/1` JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Keep the model loaded and decode on request (one `run` line on stdin each), for the
        /// harness's paired end-to-end rounds; --runs is not used (see `profile::serve`).
        #[arg(long)]
        serve: bool,
        /// Time every op of the timed runs' decode steps and print where a step goes, per op
        /// type (text output only; the generic executor, on the CPU or on CUDA, where it is
        /// host time per op).
        #[arg(long, conflicts_with_all = ["json", "serve"])]
        trace: bool,
    },
}

/// mimalloc, for the weights' pages: it takes memory from the OS in 2 MiB-aligned regions and
/// asks for transparent huge pages there, so the 540 MB of an f32 SmolLM2 live on 2 MiB pages
/// (`AnonHugePages` 634 MB against 0 with glibc's allocator, whose per-tensor mappings are not
/// 2 MiB-aligned and most tensors are smaller than 2 MiB). A decode step streams every weight
/// once, and on the CI machine's Xeon a read stream over 512 MiB ran 7-9 % faster on huge pages
/// than on 4 KiB ones (fewer TLB misses; one and two threads, mapped with and without
/// `MADV_HUGEPAGE`). Its share of the decode speed-up is inside the before/after runs of
/// `goldens/speed/`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Profile {
            model,
            ep,
            dtype,
            prompt,
            prompt_ids,
            tokens,
            warmups,
            runs,
            decode_skip,
            threads,
            no_cuda_graph,
            generic,
            json,
            serve,
            trace,
        } => {
            let ep = profile::Ep::parse(&ep)
                .with_context(|| format!("--ep must be cpu or cuda, got {ep:?}"))?;
            let dtype = match dtype.as_deref() {
                None => None,
                Some(s) => match DType::parse_float(s) {
                    Some(d @ (DType::F32 | DType::F16)) => Some(d),
                    _ => anyhow::bail!("--dtype must be f32 or f16, got {s:?}"),
                },
            };
            let prompt = match (prompt, prompt_ids) {
                (_, Some(ids)) => profile::Prompt::Ids(profile::parse_ids(&ids)?),
                (Some(text), None) => profile::Prompt::Text(text),
                (None, None) => anyhow::bail!("give --prompt or --prompt-ids"),
            };
            let opts = profile::ProfileOptions {
                model,
                ep,
                dtype,
                prompt,
                tokens,
                warmups,
                runs,
                decode_skip,
                threads,
                cuda_graph: !no_cuda_graph,
                generic,
                trace,
            };
            if serve {
                profile::serve(&opts, std::io::stdin().lock(), std::io::stdout().lock())?;
                return Ok(());
            }
            let (report, op_trace) = profile::profile_traced(&opts)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", profile::render_text(&report));
            }
            if let Some(t) = &op_trace {
                print!("{}", profile::render_trace(t));
            }
        }
        Command::Bandwidth {
            threads,
            mib,
            passes,
            json,
        } => {
            let b = engine::bandwidth::probe(threads, mib.saturating_mul(1 << 20), passes);
            if json {
                println!("{}", serde_json::to_string(&b)?);
            } else {
                println!(
                    "read bandwidth: {:.2} GB/s median of {} passes, {} thread(s), {} MiB",
                    b.median_gb_s,
                    b.passes_gb_s.len(),
                    b.threads,
                    b.bytes >> 20
                );
            }
        }
        Command::Tiny { seed, out } => {
            tiny::write_package(&out, seed, &tiny::TinyConfig::default())
                .with_context(|| format!("cannot write the tiny model to {}", out.display()))?;
            println!("wrote tiny model (seed {seed}) to {}", out.display());
        }
        Command::Convert { gguf, out, dtype } => {
            let dtype = match DType::parse_float(&dtype) {
                Some(d @ (DType::F32 | DType::F16)) => d,
                _ => anyhow::bail!("--dtype must be f32 or f16, got {dtype:?}"),
            };
            convert::convert(&gguf, &out, dtype)
                .with_context(|| format!("cannot convert {}", gguf.display()))?;
            println!("wrote {dtype} package to {}", out.display());
        }
        Command::Fetch { model, cache } => {
            if model != "smollm2" {
                anyhow::bail!("unknown model {model:?}: the one fetchable model is smollm2");
            }
            let cache = cache.unwrap_or_else(convert::cache_dir);
            let f = convert::fetch_smollm2(&cache)?;
            if !f.changed {
                eprintln!("already provisioned");
            }
            println!("{}", f.f32_dir.display());
            println!("{}", f.f16_dir.display());
        }
        Command::Generate {
            model,
            prompt,
            chat,
            max_tokens,
            threads,
            no_kv_cache,
            sampling,
            ignore_eos,
            json,
        } => {
            let sampling = sampling.config();
            sampling
                .validate()
                .map_err(|e| anyhow::anyhow!("{e} (see `engine generate --help`)"))?;
            let package = Package::open(&model)?;
            let codec = TextCodec::open(&model)?;
            let text = if chat {
                codec.apply_chat_template(&prompt)?
            } else {
                prompt
            };
            let ids = codec.encode(&text)?;
            if ids.is_empty() {
                anyhow::bail!("the prompt encodes to no tokens");
            }
            // Byte-level vocabularies can lack some byte symbols (SmolLM2's lacks 21, e.g. 0x04):
            // the tokenizer then drops those bytes, exactly as upstream does. Say so.
            if codec.decode(&ids)? != text {
                eprintln!(
                    "warning: the prompt contains characters this tokenizer cannot represent; they were dropped (as the upstream tokenizer does)"
                );
            }
            let eos = if ignore_eos {
                Vec::new()
            } else {
                package
                    .eos_token_ids()
                    .or_else(|| codec.eos_token_id().map(|i| vec![i]))
                    .unwrap_or_default()
            };
            let session = Session::new(&package, CpuBackend::new(threads)?)?;
            let opts = GenerateOptions {
                max_new_tokens: max_tokens,
                eos_token_ids: eos,
                use_kv_cache: !no_kv_cache,
                sampling,
            };
            let t0 = Instant::now();
            let g = session
                .backend()
                .in_pool(|| session.generate(&ids, &opts, false))?;
            let total_s = t0.elapsed().as_secs_f64();
            let decode_ms: f64 = g.step_ms.iter().sum();
            let tok_s = if decode_ms > 0.0 {
                g.step_ms.len() as f64 / (decode_ms / 1e3)
            } else {
                0.0
            };
            let out_text = codec.decode(&g.generated_ids)?;
            if json {
                let v = serde_json::json!({
                    "prompt_ids": g.prompt_ids,
                    "generated_ids": g.generated_ids,
                    "text": out_text,
                    "prefill_ms": g.prefill_ms,
                    "decode_tok_s": tok_s,
                    "threads": session.backend().threads(),
                    "stopped_on_eos": g.stopped_on_eos,
                });
                println!("{v}");
            } else {
                println!("{out_text}");
                println!("prompt ids: {:?}", g.prompt_ids);
                println!("generated ids: {:?}", g.generated_ids);
                println!(
                    "{} prompt tokens, {} new tokens{}; prefill {:.1} ms, decode {tok_s:.1} tok/s, total {:.3} s",
                    g.prompt_ids.len(),
                    g.generated_ids.len(),
                    if g.stopped_on_eos {
                        " (stopped on eos)"
                    } else {
                        ""
                    },
                    g.prefill_ms,
                    total_s
                );
            }
        }
    }
    Ok(())
}
