//! Greedy decoding with the KV cache on the oracle's graph runner: [`Oracle`] (a loaded package),
//! [`Oracle::forward`] (one graph run: ids on top of a cache), [`Oracle::decode`] (prefill, then
//! one token per step, recording the top-5 logits of every step) and the `oracle-decode/1` JSON.
//!
//! Stop rule: after `n_tokens` generated tokens, or as soon as a generated id is one of the
//! package's end-of-sequence ids (that id is kept in the output), whichever comes first — the
//! same rule as the engine's greedy generation, so the two produce comparable sequences.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::load::Model;
use crate::package::{self, IoNames};
use crate::tensor::{DType, Data, OTensor};
use crate::text::{Tokenizer, TokenizerConfig};

/// JSON schema name of [`Decode::to_json`].
pub const SCHEMA: &str = "oracle-decode/1";

/// How many (id, logit) pairs a step records.
pub const TOP_K: usize = 5;

/// Per-layer (key, value) `[1, kv_heads, len, head_dim]`.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub layers: Vec<(OTensor, OTensor)>,
    pub len: usize,
}

/// One decode step: the top logits, best first (ties: lower id first).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub top: Vec<(u32, f32)>,
    /// `top1 - top2` in f64 from the f32 logits (exact); infinite when the vocabulary has one entry.
    pub margin: f64,
}

/// The result of [`Oracle::decode`].
#[derive(Clone, Debug)]
pub struct Decode {
    pub model_sha256: String,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// One per generated token (step 0 is the prefill).
    pub steps: Vec<Step>,
    pub stopped_on_eos: bool,
    /// The full logits of the last step (empty when nothing was generated).
    pub last_logits: Vec<f32>,
}

#[derive(Serialize)]
struct JsonStep<'a> {
    top: &'a [(u32, f32)],
}

#[derive(Serialize)]
struct JsonDecode<'a> {
    schema: &'static str,
    model_sha256: &'a str,
    prompt_ids: &'a [u32],
    generated_ids: &'a [u32],
    steps: Vec<JsonStep<'a>>,
}

impl Decode {
    /// The `oracle-decode/1` document (keys in contract order).
    pub fn to_json(&self) -> String {
        let doc = JsonDecode {
            schema: SCHEMA,
            model_sha256: &self.model_sha256,
            prompt_ids: &self.prompt_ids,
            generated_ids: &self.generated_ids,
            steps: self
                .steps
                .iter()
                .map(|s| JsonStep { top: &s.top })
                .collect(),
        };
        // Plain data (strings, integers, finite floats): serialisation cannot fail.
        serde_json::to_string(&doc).unwrap_or_default()
    }
}

/// The `k` largest logits, sorted by value descending then id ascending. NaN is an error.
pub fn top_k(logits: &[f32], k: usize) -> Result<Vec<(u32, f32)>> {
    if let Some(i) = logits.iter().position(|v| v.is_nan()) {
        return Err(Error::msg(format!("logit {i} is NaN")));
    }
    let mut all: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as u32, v))
        .collect();
    // No NaN is left, so `partial_cmp` is total here (and -0 ties with +0).
    all.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.0.cmp(&b.0))
    });
    all.truncate(k);
    Ok(all)
}

/// A loaded model package, ready to decode.
#[derive(Debug)]
pub struct Oracle {
    dir: PathBuf,
    graph: Graph,
    io: IoNames,
    eos_ids: Vec<u32>,
    model_sha256: String,
    /// Graph inputs declared i32 (ids, mask and positions are i64 otherwise).
    i32_inputs: Vec<String>,
}

impl Oracle {
    /// Opens a package directory: sidecar and genai config, the model (`genai_config.json`'s
    /// `decoder.filename`, default `model.onnx`), I/O resolution, end-of-sequence ids.
    pub fn open(dir: &Path) -> Result<Oracle> {
        if !dir.is_dir() {
            return Err(Error::package(
                dir,
                "model package directory does not exist",
            ));
        }
        let sidecar = package::read_sidecar(dir)?;
        let genai = package::read_genai(dir)?;
        let file = genai
            .as_ref()
            .and_then(|g| g.model.decoder.filename.clone())
            .unwrap_or_else(|| "model.onnx".into());
        let model_path = dir.join(&file);
        if !model_path.is_file() {
            return Err(Error::package(
                &model_path,
                "model file not found in the package",
            ));
        }
        let model = Model::load(&model_path)?;
        let model_sha256 = package::model_sha256(&model_path, &model.external_files)?;
        let sidecar_name = sidecar
            .as_ref()
            .and_then(|(p, _)| p.file_name())
            .map_or("inference_metadata.yaml".to_string(), |n| {
                n.to_string_lossy().into_owned()
            });
        let io = package::resolve_io(
            &model.inputs,
            &model.outputs,
            sidecar.as_ref().map(|(_, s)| s),
            genai.as_ref(),
            &sidecar_name,
        )
        .map_err(|m| Error::package(&model_path, m))?;
        let i32_inputs = model
            .inputs
            .iter()
            .filter(|p| p.elem_type == DType::I32.to_onnx())
            .map(|p| p.name.clone())
            .collect();
        let graph = Graph::new(model)?;
        let eos_ids = match package::eos_from_configs(
            sidecar.as_ref().map(|(_, s)| s),
            genai.as_ref(),
            &dir.join("genai_config.json"),
        )? {
            Some(ids) => ids,
            None => {
                // Last resort: tokenizer_config.json's eos_token, looked up in tokenizer.json.
                let config = TokenizerConfig::read(dir)?;
                match config.eos_token {
                    Some(token) if dir.join("tokenizer.json").is_file() => Tokenizer::open(dir)?
                        .token_to_id(&token)
                        .into_iter()
                        .collect(),
                    _ => Vec::new(),
                }
            }
        };
        Ok(Oracle {
            dir: dir.to_path_buf(),
            graph,
            io,
            eos_ids,
            model_sha256,
            i32_inputs,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn io(&self) -> &IoNames {
        &self.io
    }

    /// Ids that end generation (kept in the output).
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The package hash: sha256 over the model file then its external data files (sorted).
    pub fn model_sha256(&self) -> &str {
        &self.model_sha256
    }

    /// A cache with no positions (`[1, kv_heads, 0, head_dim]` per layer).
    pub fn empty_cache(&self) -> Result<KvCache> {
        let empty = OTensor::new(
            vec![1, self.io.kv_heads, 0, self.io.head_dim],
            self.io.kv_dtype,
            Data::F32(vec![]),
        )?;
        Ok(KvCache {
            layers: vec![(empty.clone(), empty); self.io.layers.len()],
            len: 0,
        })
    }

    /// An integer graph input in its declared type.
    fn int_input(&self, name: &str, shape: Vec<usize>, values: Vec<i64>) -> Result<OTensor> {
        let dtype = if self.i32_inputs.iter().any(|n| n == name) {
            DType::I32
        } else {
            DType::I64
        };
        OTensor::new(shape, dtype, Data::I64(values))
    }

    /// Runs `ids` (batch 1) on top of `past`: attention mask all ones over `past.len + ids.len()`
    /// positions, position ids `past.len..past.len + ids.len()`. Returns the last position's
    /// logits and the new cache.
    pub fn forward(&self, ids: &[u32], past: &KvCache) -> Result<(Vec<f32>, KvCache)> {
        if ids.is_empty() {
            return Err(Error::msg("forward needs at least one token"));
        }
        if past.layers.len() != self.io.layers.len() {
            return Err(Error::msg(format!(
                "the cache has {} layers, the model {}",
                past.layers.len(),
                self.io.layers.len()
            )));
        }
        let (s, total) = (ids.len(), past.len + ids.len());
        let mut feeds = HashMap::new();
        let ids64 = ids.iter().map(|&i| i as i64).collect();
        feeds.insert(
            self.io.token_input.clone(),
            self.int_input(&self.io.token_input, vec![1, s], ids64)?,
        );
        if let Some(name) = &self.io.attention_mask {
            feeds.insert(
                name.clone(),
                self.int_input(name, vec![1, total], vec![1; total])?,
            );
        }
        if let Some(name) = &self.io.position_ids {
            let pos = (past.len..total).map(|p| p as i64).collect();
            feeds.insert(name.clone(), self.int_input(name, vec![1, s], pos)?);
        }
        for (names, (k, v)) in self.io.layers.iter().zip(&past.layers) {
            feeds.insert(names.past_key.clone(), k.clone());
            feeds.insert(names.past_value.clone(), v.clone());
        }
        let mut outs = self.graph.run(feeds)?;
        let mut take = |name: &str| {
            outs.remove(name)
                .ok_or_else(|| Error::msg(format!("graph output {name:?} is missing")))
        };
        let logits = take(&self.io.logits)?;
        let vocab = match logits.shape.last() {
            Some(&v) if v > 0 && logits.numel() % v == 0 && logits.numel() >= v => v,
            _ => {
                return Err(Error::msg(format!(
                    "logits output {} has shape {:?}",
                    self.io.logits, logits.shape
                )));
            }
        };
        let all = logits.f32s()?;
        let last = all[all.len() - vocab..].to_vec();
        let mut layers = Vec::with_capacity(self.io.layers.len());
        for names in &self.io.layers {
            let (k, v) = (take(&names.present_key)?, take(&names.present_value)?);
            for (t, n) in [(&k, &names.present_key), (&v, &names.present_value)] {
                if t.rank() != 4 || t.shape[2] != total {
                    return Err(Error::msg(format!(
                        "output {n} has shape {:?}; expected [1, {}, {total}, {}]",
                        t.shape, self.io.kv_heads, self.io.head_dim
                    )));
                }
            }
            layers.push((k, v));
        }
        Ok((last, KvCache { layers, len: total }))
    }

    /// Greedy decoding with the KV cache: prefill `prompt_ids`, then one token per step, until
    /// `n_tokens` tokens are generated or an end-of-sequence id is generated (kept).
    pub fn decode(&self, prompt_ids: &[u32], n_tokens: usize) -> Result<Decode> {
        if prompt_ids.is_empty() {
            return Err(Error::msg("the prompt has no tokens"));
        }
        let mut out = Decode {
            model_sha256: self.model_sha256.clone(),
            prompt_ids: prompt_ids.to_vec(),
            generated_ids: Vec::new(),
            steps: Vec::new(),
            stopped_on_eos: false,
            last_logits: Vec::new(),
        };
        if n_tokens == 0 {
            return Ok(out);
        }
        let (mut logits, mut cache) = self.forward(prompt_ids, &self.empty_cache()?)?;
        loop {
            let step = out.steps.len();
            let top = top_k(&logits, TOP_K).map_err(|e| Error::msg(format!("step {step}: {e}")))?;
            let margin = match top.as_slice() {
                [a, b, ..] => a.1 as f64 - b.1 as f64,
                _ => f64::INFINITY,
            };
            let next = top
                .first()
                .ok_or_else(|| Error::msg("the logits are empty"))?
                .0;
            out.steps.push(Step { top, margin });
            out.generated_ids.push(next);
            if self.eos_ids.contains(&next) {
                out.stopped_on_eos = true;
                break;
            }
            if out.generated_ids.len() >= n_tokens {
                break;
            }
            (logits, cache) = self.forward(&[next], &cache)?;
        }
        out.last_logits = logits;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_sorts_by_logit_then_id() {
        let top = top_k(&[1.0, 3.0, 3.0, -1.0, 2.0, 0.5, 3.0], 5).unwrap();
        assert_eq!(top, vec![(1, 3.0), (2, 3.0), (6, 3.0), (4, 2.0), (0, 1.0)]);
        assert_eq!(top_k(&[1.0, 2.0], 5).unwrap().len(), 2);
        assert!(top_k(&[1.0, f32::NAN], 5).is_err());
    }
}
