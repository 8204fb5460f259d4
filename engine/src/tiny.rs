//! `engine tiny`: a small deterministic LLaMA-style decoder package built from a seed — RMSNorm,
//! RoPE from `position_ids`, grouped-query attention with a past/present KV cache, SwiGLU, tied
//! embeddings — plus its own byte-level BPE tokenizer learned from a built-in corpus.
//!
//! Everything is computed with integer PRNG arithmetic and exact f32 scaling, and written with
//! sorted keys, so the same seed gives byte-identical files on any machine.

use std::collections::BTreeMap;
use std::path::Path;

use onnx_pb as pb;
use prost::Message;
use serde_json::json;

use crate::error::{Error, Result};
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
        TinyConfig { vocab: 512, hidden: 64, layers: 2, heads: 4, kv_heads: 2, ffn: 128, rope_theta: 10000.0, eps: 1e-5 }
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
        let symbols: Vec<String> = word.bytes().map(|b| table[b as usize].to_string()).collect();
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
        let Some(((a, b), _)) = counts.iter().fold(None, |best: Option<((&str, &str), usize)>, (k, &c)| {
            match best {
                Some((_, bc)) if bc >= c => best,
                _ => Some((*k, c)),
            }
        }) else {
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
    let special: Vec<(u32, String)> =
        SPECIAL_TOKENS.iter().enumerate().map(|(i, s)| (i as u32, s.to_string())).collect();
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

/// Accumulates nodes and initializers; weights go to an external data file.
struct GraphBuilder {
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    data: Vec<u8>,
    data_file: String,
    counter: usize,
}

fn attr_int(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto { name: Some(name.into()), r#type: Some(2), i: Some(v), ..Default::default() }
}

fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto { name: Some(name.into()), r#type: Some(7), ints: v.to_vec(), ..Default::default() }
}

fn attr_float(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto { name: Some(name.into()), r#type: Some(1), f: Some(v), ..Default::default() }
}

impl GraphBuilder {
    /// Adds a node with one output named `{name}/output_0`; returns the output name.
    fn op(&mut self, name: &str, op: &str, inputs: &[&str], attrs: Vec<pb::AttributeProto>) -> String {
        let out = format!("{name}/output_0");
        self.op_multi(name, op, inputs, &[&out], attrs);
        out
    }

    fn op_multi(&mut self, name: &str, op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<pb::AttributeProto>) {
        self.nodes.push(pb::NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            domain: Some(String::new()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// An f32 weight stored in the external data file (64-byte aligned).
    fn weight(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        while self.data.len() % 64 != 0 {
            self.data.push(0);
        }
        let offset = self.data.len();
        for v in values {
            self.data.extend_from_slice(&v.to_le_bytes());
        }
        let kv = |k: &str, v: String| pb::StringStringEntryProto { key: Some(k.into()), value: Some(v) };
        self.initializers.push(pb::TensorProto {
            name: Some(name.into()),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(1),
            data_location: Some(pb::tensor_proto::DataLocation::External as i32),
            external_data: vec![
                kv("location", self.data_file.clone()),
                kv("offset", offset.to_string()),
                kv("length", (values.len() * 4).to_string()),
            ],
            ..Default::default()
        });
        name.to_string()
    }

    /// A small inline constant initializer.
    fn const_i64(&mut self, values: &[i64], scalar: bool) -> String {
        self.counter += 1;
        let name = format!("const_i64_{}", self.counter);
        self.initializers.push(pb::TensorProto {
            name: Some(name.clone()),
            dims: if scalar { vec![] } else { vec![values.len() as i64] },
            data_type: Some(7),
            raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ..Default::default()
        });
        name
    }

    fn const_f32(&mut self, values: &[f32], scalar: bool) -> String {
        self.counter += 1;
        let name = format!("const_f32_{}", self.counter);
        self.initializers.push(pb::TensorProto {
            name: Some(name.clone()),
            dims: if scalar { vec![] } else { vec![values.len() as i64] },
            data_type: Some(1),
            raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ..Default::default()
        });
        name
    }
}

fn value_info(name: &str, elem: i32, dims: &[Result<usize, &str>]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value as DV};
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(match d {
                                Ok(v) => DV::DimValue(*v as i64),
                                Err(p) => DV::DimParam(p.to_string()),
                            }),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Builds the ONNX model; returns (model bytes, external data bytes).
fn build_model(cfg: &TinyConfig, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut rng = Rng(seed);
    let (h, d, nh, kvh, f) = (cfg.hidden, cfg.head_dim(), cfg.heads, cfg.kv_heads, cfg.ffn);
    let mut g = GraphBuilder {
        nodes: Vec::new(),
        initializers: Vec::new(),
        data: Vec::new(),
        data_file: "model.onnx.data".into(),
        counter: 0,
    };
    let scale = |fan_in: usize| (3.0 / fan_in as f32).sqrt();

    let embed_values = rng.vec(cfg.vocab * h, 1.0);
    let embed = g.weight("model.embed_tokens.weight", &[cfg.vocab, h], &embed_values);
    let x0 = g.op("/model/embed_tokens/Gather", "Gather", &[&embed, "input_ids"], vec![attr_int("axis", 0)]);

    // Positions and the attention bias [B, 1, S, T]: future keys and padding are masked.
    let one = g.const_i64(&[1], true);
    let zero = g.const_i64(&[0], true);
    let ids_shape = g.op("/model/mask/Shape_ids", "Shape", &["input_ids"], vec![]);
    let s = g.op("/model/mask/Gather_S", "Gather", &[&ids_shape, &one], vec![attr_int("axis", 0)]);
    let mask_shape = g.op("/model/mask/Shape_mask", "Shape", &["attention_mask"], vec![]);
    let t = g.op("/model/mask/Gather_T", "Gather", &[&mask_shape, &one], vec![attr_int("axis", 0)]);
    let p = g.op("/model/mask/Sub_P", "Sub", &[&t, &s], vec![]);
    let q_pos = g.op("/model/mask/Range_q", "Range", &[&p, &t, &one], vec![]);
    let k_pos = g.op("/model/mask/Range_k", "Range", &[&zero, &t, &one], vec![]);
    let axes1 = g.const_i64(&[1], false);
    let q_col = g.op("/model/mask/Unsqueeze_q", "Unsqueeze", &[&q_pos, &axes1], vec![]);
    let future = g.op("/model/mask/Greater", "Greater", &[&k_pos, &q_col], vec![]);
    let pad = g.op("/model/mask/Equal_pad", "Equal", &["attention_mask", &zero], vec![]);
    let axes12 = g.const_i64(&[1, 2], false);
    let pad4 = g.op("/model/mask/Unsqueeze_pad", "Unsqueeze", &[&pad, &axes12], vec![]);
    let masked = g.op("/model/mask/Or", "Or", &[&future, &pad4], vec![]);
    let neg = g.const_f32(&[f32::MIN], true);
    let zero_f = g.const_f32(&[0.0], true);
    let bias = g.op("/model/mask/Where", "Where", &[&masked, &neg, &zero_f], vec![]);

    // RoPE tables (rotate-half layout): cos/sin [B, 1, S, D].
    let inv_freq: Vec<f32> =
        (0..d / 2).map(|i| (1.0 / cfg.rope_theta.powf(2.0 * i as f64 / d as f64)) as f32).collect();
    let inv_freq = g.const_f32(&inv_freq, false);
    let pos_f = g.op("/model/rope/Cast", "Cast", &["position_ids"], vec![attr_int("to", 1)]);
    let axes2 = g.const_i64(&[2], false);
    let pos3 = g.op("/model/rope/Unsqueeze", "Unsqueeze", &[&pos_f, &axes2], vec![]);
    let freqs = g.op("/model/rope/Mul", "Mul", &[&pos3, &inv_freq], vec![]);
    let emb = g.op("/model/rope/Concat", "Concat", &[&freqs, &freqs], vec![attr_int("axis", -1)]);
    let cos3 = g.op("/model/rope/Cos", "Cos", &[&emb], vec![]);
    let sin3 = g.op("/model/rope/Sin", "Sin", &[&emb], vec![]);
    let cos = g.op("/model/rope/Unsqueeze_cos", "Unsqueeze", &[&cos3, &axes1], vec![]);
    let sin = g.op("/model/rope/Unsqueeze_sin", "Unsqueeze", &[&sin3, &axes1], vec![]);
    let half_split = g.const_i64(&[(d / 2) as i64, (d / 2) as i64], false);

    let rope = |g: &mut GraphBuilder, prefix: &str, x: &str| -> String {
        let (x1, x2) = (format!("{prefix}/Split/x1"), format!("{prefix}/Split/x2"));
        g.op_multi(&format!("{prefix}/Split"), "Split", &[x, &half_split], &[&x1, &x2], vec![attr_int("axis", -1)]);
        let nx2 = g.op(&format!("{prefix}/Neg"), "Neg", &[&x2], vec![]);
        let rot = g.op(&format!("{prefix}/Concat"), "Concat", &[&nx2, &x1], vec![attr_int("axis", -1)]);
        let a = g.op(&format!("{prefix}/Mul_cos"), "Mul", &[x, &cos], vec![]);
        let b = g.op(&format!("{prefix}/Mul_sin"), "Mul", &[&rot, &sin], vec![]);
        g.op(&format!("{prefix}/Add"), "Add", &[&a, &b], vec![])
    };

    let split_heads = |g: &mut GraphBuilder, prefix: &str, x: &str, heads: usize| -> String {
        let spec = g.const_i64(&[0, 0, heads as i64, d as i64], false);
        let r = g.op(&format!("{prefix}/Reshape"), "Reshape", &[x, &spec], vec![]);
        g.op(&format!("{prefix}/Transpose"), "Transpose", &[&r], vec![attr_ints("perm", &[0, 2, 1, 3])])
    };

    let eps = cfg.eps;
    let group = (nh / kvh) as i64;
    let mut x = x0;
    for l in 0..cfg.layers {
        let pre = format!("/model/layers.{l}");
        let ln1 = g.weight(&format!("model.layers.{l}.input_layernorm.weight"), &[h], &rng.vec(h, 0.1).iter().map(|v| 1.0 + v).collect::<Vec<_>>());
        let hn = g.op(&format!("{pre}/input_layernorm/SimplifiedLayerNormalization"), "SimplifiedLayerNormalization", &[&x, &ln1], vec![attr_int("axis", -1), attr_float("epsilon", eps)]);
        let wq = g.weight(&format!("model.layers.{l}.self_attn.q_proj.weight"), &[h, nh * d], &rng.vec(h * nh * d, scale(h)));
        let wk = g.weight(&format!("model.layers.{l}.self_attn.k_proj.weight"), &[h, kvh * d], &rng.vec(h * kvh * d, scale(h)));
        let wv = g.weight(&format!("model.layers.{l}.self_attn.v_proj.weight"), &[h, kvh * d], &rng.vec(h * kvh * d, scale(h)));
        let wo = g.weight(&format!("model.layers.{l}.self_attn.o_proj.weight"), &[nh * d, h], &rng.vec(nh * d * h, 4.0 * scale(nh * d)));
        let q = g.op(&format!("{pre}/attn/q_proj/MatMul"), "MatMul", &[&hn, &wq], vec![]);
        let k = g.op(&format!("{pre}/attn/k_proj/MatMul"), "MatMul", &[&hn, &wk], vec![]);
        let v = g.op(&format!("{pre}/attn/v_proj/MatMul"), "MatMul", &[&hn, &wv], vec![]);
        let q = split_heads(&mut g, &format!("{pre}/attn/q"), &q, nh);
        let k = split_heads(&mut g, &format!("{pre}/attn/k"), &k, kvh);
        let v = split_heads(&mut g, &format!("{pre}/attn/v"), &v, kvh);
        let q = rope(&mut g, &format!("{pre}/attn/q_rope"), &q);
        let k = rope(&mut g, &format!("{pre}/attn/k_rope"), &k);
        let present_k = format!("present.{l}.key");
        let present_v = format!("present.{l}.value");
        g.op_multi(&format!("{pre}/attn/k_cache/Concat"), "Concat", &[&format!("past_key_values.{l}.key"), &k], &[&present_k], vec![attr_int("axis", 2)]);
        g.op_multi(&format!("{pre}/attn/v_cache/Concat"), "Concat", &[&format!("past_key_values.{l}.value"), &v], &[&present_v], vec![attr_int("axis", 2)]);
        // GQA: repeat each KV head `group` times — keys with Expand, values with Tile.
        let rep_shape = g.const_i64(&[1, 1, group, 1, 1], false);
        let heads_spec = g.const_i64(&[0, nh as i64, -1, d as i64], false);
        let ku = g.op(&format!("{pre}/attn/k_rep/Unsqueeze"), "Unsqueeze", &[&present_k, &axes2], vec![]);
        let ke = g.op(&format!("{pre}/attn/k_rep/Expand"), "Expand", &[&ku, &rep_shape], vec![]);
        let k_rep = g.op(&format!("{pre}/attn/k_rep/Reshape"), "Reshape", &[&ke, &heads_spec], vec![]);
        let vu = g.op(&format!("{pre}/attn/v_rep/Unsqueeze"), "Unsqueeze", &[&present_v, &axes2], vec![]);
        let vt = g.op(&format!("{pre}/attn/v_rep/Tile"), "Tile", &[&vu, &rep_shape], vec![]);
        let v_rep = g.op(&format!("{pre}/attn/v_rep/Reshape"), "Reshape", &[&vt, &heads_spec], vec![]);
        let kt = g.op(&format!("{pre}/attn/Transpose_k"), "Transpose", &[&k_rep], vec![attr_ints("perm", &[0, 1, 3, 2])]);
        let scores = g.op(&format!("{pre}/attn/MatMul_qk"), "MatMul", &[&q, &kt], vec![]);
        let inv_sqrt_d = g.const_f32(&[1.0 / (d as f32).sqrt()], true);
        let scores = g.op(&format!("{pre}/attn/Mul_scale"), "Mul", &[&scores, &inv_sqrt_d], vec![]);
        let scores = g.op(&format!("{pre}/attn/Add_mask"), "Add", &[&scores, &bias], vec![]);
        let probs = g.op(&format!("{pre}/attn/Softmax"), "Softmax", &[&scores], vec![attr_int("axis", -1)]);
        let o = g.op(&format!("{pre}/attn/MatMul_pv"), "MatMul", &[&probs, &v_rep], vec![]);
        let o = g.op(&format!("{pre}/attn/Transpose_o"), "Transpose", &[&o], vec![attr_ints("perm", &[0, 2, 1, 3])]);
        let merge_spec = g.const_i64(&[0, 0, h as i64], false);
        let o = g.op(&format!("{pre}/attn/Reshape_o"), "Reshape", &[&o, &merge_spec], vec![]);
        let o = g.op(&format!("{pre}/attn/o_proj/MatMul"), "MatMul", &[&o, &wo], vec![]);
        x = g.op(&format!("{pre}/Add_attn"), "Add", &[&x, &o], vec![]);

        // RMSNorm spelled out in primitive ops (as torch.onnx exports it).
        let ln2 = g.weight(&format!("model.layers.{l}.post_attention_layernorm.weight"), &[h], &rng.vec(h, 0.1).iter().map(|v| 1.0 + v).collect::<Vec<_>>());
        let two = g.const_f32(&[2.0], true);
        let eps_c = g.const_f32(&[eps], true);
        let sq = g.op(&format!("{pre}/post_attention_layernorm/Pow"), "Pow", &[&x, &two], vec![]);
        let var = g.op(&format!("{pre}/post_attention_layernorm/ReduceMean"), "ReduceMean", &[&sq], vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)]);
        let var = g.op(&format!("{pre}/post_attention_layernorm/Add"), "Add", &[&var, &eps_c], vec![]);
        let std = g.op(&format!("{pre}/post_attention_layernorm/Sqrt"), "Sqrt", &[&var], vec![]);
        let xn = g.op(&format!("{pre}/post_attention_layernorm/Div"), "Div", &[&x, &std], vec![]);
        let hn2 = g.op(&format!("{pre}/post_attention_layernorm/Mul"), "Mul", &[&xn, &ln2], vec![]);

        let wg = g.weight(&format!("model.layers.{l}.mlp.gate_proj.weight"), &[h, f], &rng.vec(h * f, scale(h)));
        let wu = g.weight(&format!("model.layers.{l}.mlp.up_proj.weight"), &[h, f], &rng.vec(h * f, scale(h)));
        let wd = g.weight(&format!("model.layers.{l}.mlp.down_proj.weight"), &[f, h], &rng.vec(f * h, 4.0 * scale(f)));
        let gt = g.op(&format!("{pre}/mlp/gate_proj/MatMul"), "MatMul", &[&hn2, &wg], vec![]);
        let up = g.op(&format!("{pre}/mlp/up_proj/MatMul"), "MatMul", &[&hn2, &wu], vec![]);
        let sg = g.op(&format!("{pre}/mlp/act/Sigmoid"), "Sigmoid", &[&gt], vec![]);
        let act = g.op(&format!("{pre}/mlp/act/Mul"), "Mul", &[&gt, &sg], vec![]);
        let m = g.op(&format!("{pre}/mlp/Mul"), "Mul", &[&act, &up], vec![]);
        let down = g.op(&format!("{pre}/mlp/down_proj/MatMul"), "MatMul", &[&m, &wd], vec![]);
        x = g.op(&format!("{pre}/Add_mlp"), "Add", &[&x, &down], vec![]);
    }
    let lnf = g.weight("model.norm.weight", &[h], &rng.vec(h, 0.1).iter().map(|v| 1.0 + v).collect::<Vec<_>>());
    let hf = g.op("/model/norm/SimplifiedLayerNormalization", "SimplifiedLayerNormalization", &[&x, &lnf], vec![attr_int("axis", -1), attr_float("epsilon", eps)]);
    let et = g.op("/lm_head/Transpose", "Transpose", &[&embed], vec![attr_ints("perm", &[1, 0])]);
    g.op_multi("/lm_head/MatMul", "MatMul", &[&hf, &et], &["logits"], vec![]);

    let (b, sq, tot, past) = (Err("batch_size"), Err("sequence_length"), Err("total_sequence_length"), Err("past_sequence_length"));
    let mut inputs = vec![
        value_info("input_ids", 7, &[b, sq]),
        value_info("attention_mask", 7, &[b, tot]),
        value_info("position_ids", 7, &[b, sq]),
    ];
    let mut outputs = vec![value_info("logits", 1, &[b, sq, Ok(cfg.vocab)])];
    for l in 0..cfg.layers {
        for kind in ["key", "value"] {
            inputs.push(value_info(&format!("past_key_values.{l}.{kind}"), 1, &[b, Ok(kvh), past, Ok(d)]));
            outputs.push(value_info(&format!("present.{l}.{kind}"), 1, &[b, Ok(kvh), tot, Ok(d)]));
        }
    }
    let model = pb::ModelProto {
        ir_version: Some(8),
        producer_name: Some("engine tiny".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        opset_import: vec![pb::OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(pb::GraphProto {
            name: Some("tiny_llama".into()),
            node: g.nodes,
            initializer: g.initializers,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    (model.encode_to_vec(), g.data)
}

/// Writes the whole package into `out` (created if needed; existing package files are replaced).
pub fn write_package(out: &Path, seed: u64, cfg: &TinyConfig) -> Result<()> {
    if cfg.hidden % cfg.heads != 0 || cfg.heads % cfg.kv_heads != 0 || cfg.head_dim() % 2 != 0 {
        return Err(Error::msg(format!("invalid tiny config {cfg:?}")));
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let (model, data) = build_model(cfg, seed);
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
    let pretty = |v: &serde_json::Value| format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default());
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("model.onnx", model),
        ("model.onnx.data", data),
        ("genai_config.json", pretty(&genai).into_bytes()),
        ("tokenizer.json", tokenizer(cfg.vocab).into_bytes()),
        ("tokenizer_config.json", pretty(&tokenizer_config).into_bytes()),
    ];
    for (name, bytes) in files {
        let path = out.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}
