//! The `oracle` command line (glue only). `oracle decode --model DIR (--prompt TEXT | --prompt-ids
//! 1,2,3) --tokens N [--chat] [--json]` greedily decodes with the fp32 reference and prints the
//! `oracle-decode/1` JSON (contract written out in ARCHITECTURE.md, Contracts) or, without
//! `--json`, a human summary.
//! Errors: the whole chain on one line on stderr, exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use oracles::Oracle;
use oracles::text::{Tokenizer, TokenizerConfig};

#[derive(Parser)]
#[command(
    name = "oracle",
    version,
    about = "Independent fp32 reference decoder (the engine's correctness oracle)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Greedy-decode a prompt with the KV cache and report the top-5 logits of every step.
    Decode(DecodeArgs),
}

#[derive(Args)]
struct DecodeArgs {
    /// Model package directory.
    #[arg(long)]
    model: PathBuf,
    /// Prompt text (tokenized with the package's tokenizer.json, no special tokens added).
    #[arg(
        long,
        conflicts_with = "prompt_ids",
        required_unless_present = "prompt_ids"
    )]
    prompt: Option<String>,
    /// Prompt token ids, comma separated (e.g. 504,3575,282).
    #[arg(long)]
    prompt_ids: Option<String>,
    /// Number of tokens to generate (fewer if an end-of-sequence id is generated first).
    #[arg(long)]
    tokens: usize,
    /// Wrap the prompt text in the model's ChatML chat template.
    #[arg(long)]
    chat: bool,
    /// Print the oracle-decode/1 JSON instead of a human summary.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Decode(args) => decode(args),
    }
}

/// The prompt, resolved to token ids before any model work starts.
fn prompt_ids(args: &DecodeArgs) -> Result<Vec<u32>> {
    let ids = match (&args.prompt, &args.prompt_ids) {
        (Some(text), None) => {
            let text = if args.chat {
                TokenizerConfig::read(&args.model)?.apply_chat_template(text)?
            } else {
                text.clone()
            };
            Tokenizer::open(&args.model)?.encode(&text)?
        }
        (None, Some(list)) => {
            if args.chat {
                bail!("--chat needs --prompt (text), not --prompt-ids");
            }
            list.split(',')
                .map(|s| s.trim().parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| {
                    format!("--prompt-ids {list:?} is not a comma-separated list of token ids")
                })?
        }
        _ => bail!("give exactly one of --prompt and --prompt-ids"),
    };
    if ids.is_empty() {
        bail!("the prompt has no tokens");
    }
    Ok(ids)
}

fn decode(args: DecodeArgs) -> Result<()> {
    let ids = prompt_ids(&args)?;
    let t0 = Instant::now();
    let oracle = Oracle::open(&args.model)
        .with_context(|| format!("cannot open model package {}", args.model.display()))?;
    let load_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let d = oracle
        .decode(&ids, args.tokens)
        .context("oracle decode failed")?;
    let decode_s = t1.elapsed().as_secs_f64();
    if args.json {
        println!("{}", d.to_json());
        return Ok(());
    }
    let text = Tokenizer::open(&args.model)
        .and_then(|t| t.decode(&d.generated_ids))
        .ok();
    if let Some(text) = text {
        println!("{text}");
    }
    println!("model sha256: {}", d.model_sha256);
    println!("prompt ids: {:?}", d.prompt_ids);
    println!("generated ids: {:?}", d.generated_ids);
    for (i, s) in d.steps.iter().enumerate() {
        let top: Vec<String> = s.top.iter().map(|(id, l)| format!("{id}:{l}")).collect();
        println!("step {i:>3}: margin {:.6}  top {}", s.margin, top.join(" "));
    }
    println!(
        "{} prompt tokens, {} new tokens{}; load {load_s:.2} s, decode {decode_s:.2} s",
        d.prompt_ids.len(),
        d.generated_ids.len(),
        if d.stopped_on_eos {
            " (stopped on eos)"
        } else {
            ""
        }
    );
    Ok(())
}
