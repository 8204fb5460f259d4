//! `engine tiny`: a small deterministic LLaMA-style decoder package built from a seed — RMSNorm,
//! RoPE from `position_ids`, grouped-query attention with a past/present KV cache, SwiGLU, tied
//! embeddings — plus its own byte-level BPE tokenizer learned from a built-in corpus.
//!
//! Everything is computed with integer PRNG arithmetic and exact f32 scaling, and written with
//! sorted keys, so the same seed gives byte-identical files on any machine.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::llama::{self, LlamaSpec, Weights};
use crate::text::{bpe_tokenizer_json, byte_to_unicode};

/// Shape of the tiny model.
#[derive(Clone, Debug)]
pub struct TinyConfig {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
    pub rope_theta: f64,
    pub eps: f32,
}

impl Default for TinyConfig {
    fn default() -> Self {
        TinyConfig {
            vocab: 512,
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            ffn: 128,
            rope_theta: 10000.0,
            eps: 1e-5,
        }
    }
}

impl TinyConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// Special tokens, as in SmolLM2: `<|im_end|>` ends a turn and generation.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const EOS_ID: u32 = 2;

/// The chat template written to `tokenizer_config.json` (ChatML with a default system turn).
pub const CHAT_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a tiny test model.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Text the tokenizer's merges are learned from.
const CORPUS: &str = "The capital of France is Paris. The capital of Italy is Rome. \
The quick brown fox jumps over the lazy dog. Once upon a time there was a small model that \
learned to write stories about the sea, the sky and the stars. It counted one, two, three, four, \
five, six, seven, eight, nine and ten. Numbers like 12, 345 and 2024 are split into digits. \
Hello, world! How are you today? I am fine, thank you. Where is the station? The station is \
near the river, between the market and the old church. In the morning the children walk to \
school; in the evening they read books, play games and help their parents with dinner. \
Water boils at one hundred degrees. The sun rises in the east and sets in the west. \
A decoder reads tokens, attends to the past and predicts the next token. \
Caf\u{e9}, na\u{ef}ve, \u{fc}ber, \u{4e16}\u{754c}, \u{43f}\u{440}\u{438}\u{432}\u{435}\u{442} and emoji \u{1f642} are text too.";

/// SplitMix64: a tiny, portable PRNG (integer arithmetic only).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), exactly representable (24 random bits).
    fn uniform(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        (bits as f32) * (2.0 / 16_777_216.0) - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// Learns `n_merges` byte-level BPE merges from [`CORPUS`]: most frequent adjacent pair first,
/// ties broken by the lexicographically smallest pair (deterministic).
fn learn_merges(n_merges: usize) -> Vec<(String, String)> {
    let table = byte_to_unicode();
    // Words: a run of letters (with one leading space), a single digit, or one other char.
    let mut words: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    let chars: Vec<char> = CORPUS.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        if chars[i] == ' ' && i + 1 < chars.len() && chars[i + 1].is_alphabetic() {
            i += 1;
        }
        if chars[i].is_alphabetic() {
            while i < chars.len() && chars[i].is_alphabetic() {
                i += 1;
            }
        } else {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let symbols: Vec<String> = word
            .bytes()
            .map(|b| table[b as usize].to_string())
            .collect();
        *words.entry(symbols).or_default() += 1;
    }
    let mut words: Vec<(Vec<String>, usize)> = words.into_iter().collect();
    let mut merges = Vec::with_capacity(n_merges);
    while merges.len() < n_merges {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (w, c) in &words {
            for p in w.windows(2) {
                *counts.entry((p[0].as_str(), p[1].as_str())).or_default() += c;
            }
        }
        // BTreeMap iterates pairs in order, so the first maximum is the smallest pair.
        let Some(((a, b), _)) = counts.iter().fold(
            None,
            |best: Option<((&str, &str), usize)>, (k, &c)| match best {
                Some((_, bc)) if bc >= c => best,
                _ => Some((*k, c)),
            },
        ) else {
            break;
        };
        let (a, b) = (a.to_string(), b.to_string());
        let merged = format!("{a}{b}");
        for (w, _) in &mut words {
            let mut j = 0;
            while j + 1 < w.len() {
                if w[j] == a && w[j + 1] == b {
                    w[j] = merged.clone();
                    w.remove(j + 1);
                }
                j += 1;
            }
        }
        merges.push((a, b));
    }
    merges
}

/// Builds the tokenizer: specials at 0-2, the 256 byte symbols at 3-258, then merges.
fn tokenizer(vocab_size: usize) -> String {
    let table = byte_to_unicode();
    let mut vocab: BTreeMap<String, u32> = BTreeMap::new();
    let special: Vec<(u32, String)> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(i, s)| (i as u32, s.to_string()))
        .collect();
    for (id, s) in &special {
        vocab.insert(s.clone(), *id);
    }
    for c in table {
        let id = vocab.len() as u32;
        vocab.insert(c.to_string(), id);
    }
    let mut merges = Vec::new();
    for (a, b) in learn_merges(vocab_size.saturating_sub(vocab.len()) * 2) {
        if vocab.len() >= vocab_size {
            break;
        }
        let merged = format!("{a}{b}");
        if !vocab.contains_key(&merged) {
            let id = vocab.len() as u32;
            vocab.insert(merged, id);
            merges.push((a, b));
        }
    }
    bpe_tokenizer_json(&vocab, &merges, &special, true)
}

/// Serves the tiny model's weights from the seeded generator, in [`llama::build`]'s order.
struct RandomWeights(Rng);

impl Weights for RandomWeights {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let n: usize = shape.iter().product();
        // Uniform(-a, a) has variance a²/3: a = sqrt(3 / fan_in) keeps activations at unit scale.
        // The residual-branch outputs get 4x that so the tied embedding of the last input token
        // does not dominate the logits (a random model would otherwise echo its input).
        let fan_in = shape[0] as f32;
        let unit = (3.0 / fan_in).sqrt();
        Ok(
            if name.ends_with("norm.weight") || name.ends_with("layernorm.weight") {
                self.0.vec(n, 0.1).into_iter().map(|v| 1.0 + v).collect()
            } else if name == "model.embed_tokens.weight" {
                self.0.vec(n, 1.0)
            } else if name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight") {
                self.0.vec(n, 4.0 * unit)
            } else {
                self.0.vec(n, unit)
            },
        )
    }
}

impl TinyConfig {
    /// The decoder spec of this config (f32, MLP norm spelled out in primitive ops).
    pub fn spec(&self) -> LlamaSpec {
        LlamaSpec {
            vocab: self.vocab,
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim(),
            ffn: self.ffn,
            rope_theta: self.rope_theta,
            eps: self.eps,
            dtype: DType::F32,
            decomposed_mlp_norm: true,
        }
    }
}

/// Writes the whole package into `out` (created if needed; existing package files are replaced).
pub fn write_package(out: &Path, seed: u64, cfg: &TinyConfig) -> Result<()> {
    if cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
        return Err(Error::msg(format!("invalid tiny config {cfg:?}")));
    }
    let (model, data) = llama::build(&cfg.spec(), &mut RandomWeights(Rng(seed)))?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let d = cfg.head_dim();
    let genai = json!({
        "model": {
            "bos_token_id": null,
            "context_length": 2048,
            "eos_token_id": EOS_ID,
            "pad_token_id": EOS_ID,
            "type": "llama",
            "vocab_size": cfg.vocab,
            "decoder": {
                "filename": "model.onnx",
                "head_size": d,
                "hidden_size": cfg.hidden,
                "num_attention_heads": cfg.heads,
                "num_hidden_layers": cfg.layers,
                "num_key_value_heads": cfg.kv_heads,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value"
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value"
                }
            }
        },
        "search": {"do_sample": false, "max_length": 2048},
        "tiny": {"seed": seed, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.eps, "intermediate_size": cfg.ffn}
    });
    let tokenizer_config = json!({
        "add_bos_token": false,
        "bos_token": null,
        "chat_template": CHAT_TEMPLATE,
        "eos_token": SPECIAL_TOKENS[EOS_ID as usize],
        "model_max_length": 2048,
        "pad_token": SPECIAL_TOKENS[EOS_ID as usize],
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": null
    });
    let pretty = |v: &serde_json::Value| {
        format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default())
    };
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("model.onnx", model),
        ("model.onnx.data", data),
        ("genai_config.json", pretty(&genai).into_bytes()),
        ("tokenizer.json", tokenizer(cfg.vocab).into_bytes()),
        (
            "tokenizer_config.json",
            pretty(&tokenizer_config).into_bytes(),
        ),
    ];
    for (name, bytes) in files {
        let path = out.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}
