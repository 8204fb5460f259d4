//! The LLaMA-style decoder graph shared by `engine tiny` and `engine convert`: RMSNorm, RoPE from
//! `position_ids` (rotate-half layout, computed in f32), grouped-query attention over a
//! past/present KV cache, SwiGLU MLP, tied embeddings. Built as an ONNX `ModelProto` with weights
//! in an external data file, in f32 or f16 (weights, activations, KV cache and logits alike).
//!
//! Ports: `input_ids`, `attention_mask`, `position_ids` (i64), `past_key_values.N.{key,value}`
//! in; `logits`, `present.N.{key,value}` out — the names onnxruntime-genai and optimum use.

use half::f16;
use onnx_pb as pb;
use prost::Message;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Geometry and numerics of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaSpec {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rope_theta: f64,
    pub eps: f32,
    /// F32 or F16.
    pub dtype: DType,
    /// Spell the post-attention RMSNorm in primitive ops (Pow, ReduceMean, Add, Sqrt, Div, Mul), as
    /// torch.onnx exports it, instead of `SimplifiedLayerNormalization`.
    pub decomposed_mlp_norm: bool,
}

/// Supplies weights by name, row-major, in ONNX layout (projection weights are `[in, out]`).
/// Called in a fixed order (see [`build`]), so a seeded generator can serve them.
pub trait Weights {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>>;
}

struct GraphBuilder {
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    data: Vec<u8>,
    data_file: String,
    counter: usize,
    /// Float type of weights and activations.
    dtype: DType,
}

fn attr_int(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(2),
        i: Some(v),
        ..Default::default()
    }
}

fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(7),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn attr_float(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(1),
        f: Some(v),
        ..Default::default()
    }
}

impl GraphBuilder {
    /// Adds a node with one output named `{name}/output_0`; returns the output name.
    fn op(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[&str],
        attrs: Vec<pb::AttributeProto>,
    ) -> String {
        let out = format!("{name}/output_0");
        self.op_multi(name, op, inputs, &[&out], attrs);
        out
    }

    fn op_multi(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<pb::AttributeProto>,
    ) {
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

    /// A weight stored in the external data file (64-byte aligned), in the graph's float type.
    fn weight(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        while !self.data.len().is_multiple_of(64) {
            self.data.push(0);
        }
        let offset = self.data.len();
        match self.dtype {
            DType::F16 => {
                for v in values {
                    self.data
                        .extend_from_slice(&f16::from_f32(*v).to_le_bytes());
                }
            }
            _ => {
                for v in values {
                    self.data.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        let kv = |k: &str, v: String| pb::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        self.initializers.push(pb::TensorProto {
            name: Some(name.into()),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(self.dtype.to_onnx()),
            data_location: Some(pb::tensor_proto::DataLocation::External as i32),
            external_data: vec![
                kv("location", self.data_file.clone()),
                kv("offset", offset.to_string()),
                kv("length", (values.len() * self.dtype.size()).to_string()),
            ],
            ..Default::default()
        });
        name.to_string()
    }

    /// A small inline constant initializer named `const_{kind}_{n}`: `raw` is its
    /// little-endian data, `len` its element count (a rank-0 tensor when `scalar`).
    fn constant(
        &mut self,
        kind: &str,
        dtype: DType,
        raw: Vec<u8>,
        len: usize,
        scalar: bool,
    ) -> String {
        self.counter += 1;
        let name = format!("const_{kind}_{}", self.counter);
        self.initializers.push(pb::TensorProto {
            name: Some(name.clone()),
            dims: if scalar { vec![] } else { vec![len as i64] },
            data_type: Some(dtype.to_onnx()),
            raw_data: Some(raw),
            ..Default::default()
        });
        name
    }

    fn const_i64(&mut self, values: &[i64], scalar: bool) -> String {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant("i64", DType::I64, raw, values.len(), scalar)
    }

    /// A float constant in the graph's float type.
    fn const_float(&mut self, values: &[f32], scalar: bool) -> String {
        match self.dtype {
            DType::F16 => {
                let raw = values
                    .iter()
                    .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                    .collect();
                self.constant("f16", DType::F16, raw, values.len(), scalar)
            }
            _ => self.const_f32(values, scalar),
        }
    }

    fn const_f32(&mut self, values: &[f32], scalar: bool) -> String {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant("f32", DType::F32, raw, values.len(), scalar)
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

/// Builds the ONNX model; returns (model bytes, external data bytes for `model.onnx.data`).
pub fn build(spec: &LlamaSpec, weights: &mut dyn Weights) -> Result<(Vec<u8>, Vec<u8>)> {
    if !matches!(spec.dtype, DType::F32 | DType::F16) {
        return Err(Error::msg(format!(
            "decoder graphs are built in f32 or f16, not {}",
            spec.dtype
        )));
    }
    if spec.kv_heads == 0
        || !spec.heads.is_multiple_of(spec.kv_heads)
        || !spec.head_dim.is_multiple_of(2)
    {
        return Err(Error::msg(format!("invalid decoder geometry {spec:?}")));
    }
    let (h, d, nh, kvh, f) = (
        spec.hidden,
        spec.head_dim,
        spec.heads,
        spec.kv_heads,
        spec.ffn,
    );
    let mut g = GraphBuilder {
        nodes: Vec::new(),
        initializers: Vec::new(),
        data: Vec::new(),
        data_file: "model.onnx.data".into(),
        counter: 0,
        dtype: spec.dtype,
    };
    let mut weight = |g: &mut GraphBuilder, name: String, shape: &[usize]| -> Result<String> {
        let values = weights.take(&name, shape)?;
        if values.len() != shape.iter().product::<usize>() {
            return Err(Error::msg(format!(
                "weight {name}: got {} values for shape {shape:?}",
                values.len()
            )));
        }
        Ok(g.weight(&name, shape, &values))
    };

    let embed = weight(&mut g, "model.embed_tokens.weight".into(), &[spec.vocab, h])?;
    let x0 = g.op(
        "/model/embed_tokens/Gather",
        "Gather",
        &[&embed, "input_ids"],
        vec![attr_int("axis", 0)],
    );

    // Positions and the attention bias [B, 1, S, T]: future keys and padding are masked.
    let one = g.const_i64(&[1], true);
    let zero = g.const_i64(&[0], true);
    let ids_shape = g.op("/model/mask/Shape_ids", "Shape", &["input_ids"], vec![]);
    let s = g.op(
        "/model/mask/Gather_S",
        "Gather",
        &[&ids_shape, &one],
        vec![attr_int("axis", 0)],
    );
    let mask_shape = g.op(
        "/model/mask/Shape_mask",
        "Shape",
        &["attention_mask"],
        vec![],
    );
    let t = g.op(
        "/model/mask/Gather_T",
        "Gather",
        &[&mask_shape, &one],
        vec![attr_int("axis", 0)],
    );
    let p = g.op("/model/mask/Sub_P", "Sub", &[&t, &s], vec![]);
    let q_pos = g.op("/model/mask/Range_q", "Range", &[&p, &t, &one], vec![]);
    let k_pos = g.op("/model/mask/Range_k", "Range", &[&zero, &t, &one], vec![]);
    let axes1 = g.const_i64(&[1], false);
    let q_col = g.op(
        "/model/mask/Unsqueeze_q",
        "Unsqueeze",
        &[&q_pos, &axes1],
        vec![],
    );
    let future = g.op("/model/mask/Greater", "Greater", &[&k_pos, &q_col], vec![]);
    let pad = g.op(
        "/model/mask/Equal_pad",
        "Equal",
        &["attention_mask", &zero],
        vec![],
    );
    let axes12 = g.const_i64(&[1, 2], false);
    let pad4 = g.op(
        "/model/mask/Unsqueeze_pad",
        "Unsqueeze",
        &[&pad, &axes12],
        vec![],
    );
    let masked = g.op("/model/mask/Or", "Or", &[&future, &pad4], vec![]);
    // The most negative finite value of the float type: exp() of it underflows to exactly 0.
    let lowest = if spec.dtype == DType::F16 {
        f16::MIN.to_f32()
    } else {
        f32::MIN
    };
    let neg = g.const_float(&[lowest], true);
    let zero_f = g.const_float(&[0.0], true);
    let bias = g.op(
        "/model/mask/Where",
        "Where",
        &[&masked, &neg, &zero_f],
        vec![],
    );

    // RoPE tables (rotate-half layout): cos/sin [B, 1, S, D].
    let inv_freq: Vec<f32> = (0..d / 2)
        .map(|i| (1.0 / spec.rope_theta.powf(2.0 * i as f64 / d as f64)) as f32)
        .collect();
    let inv_freq = g.const_f32(&inv_freq, false);
    let pos_f = g.op(
        "/model/rope/Cast",
        "Cast",
        &["position_ids"],
        vec![attr_int("to", 1)],
    );
    let axes2 = g.const_i64(&[2], false);
    let pos3 = g.op(
        "/model/rope/Unsqueeze",
        "Unsqueeze",
        &[&pos_f, &axes2],
        vec![],
    );
    let freqs = g.op("/model/rope/Mul", "Mul", &[&pos3, &inv_freq], vec![]);
    let emb = g.op(
        "/model/rope/Concat",
        "Concat",
        &[&freqs, &freqs],
        vec![attr_int("axis", -1)],
    );
    let cos3 = g.op("/model/rope/Cos", "Cos", &[&emb], vec![]);
    let sin3 = g.op("/model/rope/Sin", "Sin", &[&emb], vec![]);
    let (cos3, sin3) = if spec.dtype == DType::F32 {
        (cos3, sin3)
    } else {
        let to = attr_int("to", spec.dtype.to_onnx() as i64);
        (
            g.op("/model/rope/Cast_cos", "Cast", &[&cos3], vec![to.clone()]),
            g.op("/model/rope/Cast_sin", "Cast", &[&sin3], vec![to]),
        )
    };
    let cos = g.op(
        "/model/rope/Unsqueeze_cos",
        "Unsqueeze",
        &[&cos3, &axes1],
        vec![],
    );
    let sin = g.op(
        "/model/rope/Unsqueeze_sin",
        "Unsqueeze",
        &[&sin3, &axes1],
        vec![],
    );
    let half_split = g.const_i64(&[(d / 2) as i64, (d / 2) as i64], false);

    let rope = |g: &mut GraphBuilder, prefix: &str, x: &str| -> String {
        let (x1, x2) = (format!("{prefix}/Split/x1"), format!("{prefix}/Split/x2"));
        g.op_multi(
            &format!("{prefix}/Split"),
            "Split",
            &[x, &half_split],
            &[&x1, &x2],
            vec![attr_int("axis", -1)],
        );
        let nx2 = g.op(&format!("{prefix}/Neg"), "Neg", &[&x2], vec![]);
        let rot = g.op(
            &format!("{prefix}/Concat"),
            "Concat",
            &[&nx2, &x1],
            vec![attr_int("axis", -1)],
        );
        let a = g.op(&format!("{prefix}/Mul_cos"), "Mul", &[x, &cos], vec![]);
        let b = g.op(&format!("{prefix}/Mul_sin"), "Mul", &[&rot, &sin], vec![]);
        g.op(&format!("{prefix}/Add"), "Add", &[&a, &b], vec![])
    };

    let split_heads = |g: &mut GraphBuilder, prefix: &str, x: &str, heads: usize| -> String {
        let spec = g.const_i64(&[0, 0, heads as i64, d as i64], false);
        let r = g.op(&format!("{prefix}/Reshape"), "Reshape", &[x, &spec], vec![]);
        g.op(
            &format!("{prefix}/Transpose"),
            "Transpose",
            &[&r],
            vec![attr_ints("perm", &[0, 2, 1, 3])],
        )
    };

    let eps = spec.eps;
    let group = (nh / kvh) as i64;
    let mut x = x0;
    for l in 0..spec.layers {
        let pre = format!("/model/layers.{l}");
        let ln1 = weight(
            &mut g,
            format!("model.layers.{l}.input_layernorm.weight"),
            &[h],
        )?;
        let hn = g.op(
            &format!("{pre}/input_layernorm/SimplifiedLayerNormalization"),
            "SimplifiedLayerNormalization",
            &[&x, &ln1],
            vec![attr_int("axis", -1), attr_float("epsilon", eps)],
        );
        let wq = weight(
            &mut g,
            format!("model.layers.{l}.self_attn.q_proj.weight"),
            &[h, nh * d],
        )?;
        let wk = weight(
            &mut g,
            format!("model.layers.{l}.self_attn.k_proj.weight"),
            &[h, kvh * d],
        )?;
        let wv = weight(
            &mut g,
            format!("model.layers.{l}.self_attn.v_proj.weight"),
            &[h, kvh * d],
        )?;
        let wo = weight(
            &mut g,
            format!("model.layers.{l}.self_attn.o_proj.weight"),
            &[nh * d, h],
        )?;
        let q = g.op(
            &format!("{pre}/attn/q_proj/MatMul"),
            "MatMul",
            &[&hn, &wq],
            vec![],
        );
        let k = g.op(
            &format!("{pre}/attn/k_proj/MatMul"),
            "MatMul",
            &[&hn, &wk],
            vec![],
        );
        let v = g.op(
            &format!("{pre}/attn/v_proj/MatMul"),
            "MatMul",
            &[&hn, &wv],
            vec![],
        );
        let q = split_heads(&mut g, &format!("{pre}/attn/q"), &q, nh);
        let k = split_heads(&mut g, &format!("{pre}/attn/k"), &k, kvh);
        let v = split_heads(&mut g, &format!("{pre}/attn/v"), &v, kvh);
        let q = rope(&mut g, &format!("{pre}/attn/q_rope"), &q);
        let k = rope(&mut g, &format!("{pre}/attn/k_rope"), &k);
        let present_k = format!("present.{l}.key");
        let present_v = format!("present.{l}.value");
        g.op_multi(
            &format!("{pre}/attn/k_cache/Concat"),
            "Concat",
            &[&format!("past_key_values.{l}.key"), &k],
            &[&present_k],
            vec![attr_int("axis", 2)],
        );
        g.op_multi(
            &format!("{pre}/attn/v_cache/Concat"),
            "Concat",
            &[&format!("past_key_values.{l}.value"), &v],
            &[&present_v],
            vec![attr_int("axis", 2)],
        );
        // GQA: repeat each KV head `group` times — keys with Expand, values with Tile.
        let rep_shape = g.const_i64(&[1, 1, group, 1, 1], false);
        let heads_spec = g.const_i64(&[0, nh as i64, -1, d as i64], false);
        let ku = g.op(
            &format!("{pre}/attn/k_rep/Unsqueeze"),
            "Unsqueeze",
            &[&present_k, &axes2],
            vec![],
        );
        let ke = g.op(
            &format!("{pre}/attn/k_rep/Expand"),
            "Expand",
            &[&ku, &rep_shape],
            vec![],
        );
        let k_rep = g.op(
            &format!("{pre}/attn/k_rep/Reshape"),
            "Reshape",
            &[&ke, &heads_spec],
            vec![],
        );
        let vu = g.op(
            &format!("{pre}/attn/v_rep/Unsqueeze"),
            "Unsqueeze",
            &[&present_v, &axes2],
            vec![],
        );
        let vt = g.op(
            &format!("{pre}/attn/v_rep/Tile"),
            "Tile",
            &[&vu, &rep_shape],
            vec![],
        );
        let v_rep = g.op(
            &format!("{pre}/attn/v_rep/Reshape"),
            "Reshape",
            &[&vt, &heads_spec],
            vec![],
        );
        let kt = g.op(
            &format!("{pre}/attn/Transpose_k"),
            "Transpose",
            &[&k_rep],
            vec![attr_ints("perm", &[0, 1, 3, 2])],
        );
        let scores = g.op(
            &format!("{pre}/attn/MatMul_qk"),
            "MatMul",
            &[&q, &kt],
            vec![],
        );
        let inv_sqrt_d = g.const_float(&[1.0 / (d as f32).sqrt()], true);
        let scores = g.op(
            &format!("{pre}/attn/Mul_scale"),
            "Mul",
            &[&scores, &inv_sqrt_d],
            vec![],
        );
        let scores = g.op(
            &format!("{pre}/attn/Add_mask"),
            "Add",
            &[&scores, &bias],
            vec![],
        );
        let probs = g.op(
            &format!("{pre}/attn/Softmax"),
            "Softmax",
            &[&scores],
            vec![attr_int("axis", -1)],
        );
        let o = g.op(
            &format!("{pre}/attn/MatMul_pv"),
            "MatMul",
            &[&probs, &v_rep],
            vec![],
        );
        let o = g.op(
            &format!("{pre}/attn/Transpose_o"),
            "Transpose",
            &[&o],
            vec![attr_ints("perm", &[0, 2, 1, 3])],
        );
        let merge_spec = g.const_i64(&[0, 0, h as i64], false);
        let o = g.op(
            &format!("{pre}/attn/Reshape_o"),
            "Reshape",
            &[&o, &merge_spec],
            vec![],
        );
        let o = g.op(
            &format!("{pre}/attn/o_proj/MatMul"),
            "MatMul",
            &[&o, &wo],
            vec![],
        );
        x = g.op(&format!("{pre}/Add_attn"), "Add", &[&x, &o], vec![]);

        let ln2 = weight(
            &mut g,
            format!("model.layers.{l}.post_attention_layernorm.weight"),
            &[h],
        )?;
        let hn2 = if spec.decomposed_mlp_norm {
            // RMSNorm spelled out in primitive ops (as torch.onnx exports it).
            let two = g.const_float(&[2.0], true);
            let eps_c = g.const_float(&[eps], true);
            let sq = g.op(
                &format!("{pre}/post_attention_layernorm/Pow"),
                "Pow",
                &[&x, &two],
                vec![],
            );
            let var = g.op(
                &format!("{pre}/post_attention_layernorm/ReduceMean"),
                "ReduceMean",
                &[&sq],
                vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
            );
            let var = g.op(
                &format!("{pre}/post_attention_layernorm/Add"),
                "Add",
                &[&var, &eps_c],
                vec![],
            );
            let std = g.op(
                &format!("{pre}/post_attention_layernorm/Sqrt"),
                "Sqrt",
                &[&var],
                vec![],
            );
            let xn = g.op(
                &format!("{pre}/post_attention_layernorm/Div"),
                "Div",
                &[&x, &std],
                vec![],
            );
            g.op(
                &format!("{pre}/post_attention_layernorm/Mul"),
                "Mul",
                &[&xn, &ln2],
                vec![],
            )
        } else {
            g.op(
                &format!("{pre}/post_attention_layernorm/SimplifiedLayerNormalization"),
                "SimplifiedLayerNormalization",
                &[&x, &ln2],
                vec![attr_int("axis", -1), attr_float("epsilon", eps)],
            )
        };

        let wg = weight(
            &mut g,
            format!("model.layers.{l}.mlp.gate_proj.weight"),
            &[h, f],
        )?;
        let wu = weight(
            &mut g,
            format!("model.layers.{l}.mlp.up_proj.weight"),
            &[h, f],
        )?;
        let wd = weight(
            &mut g,
            format!("model.layers.{l}.mlp.down_proj.weight"),
            &[f, h],
        )?;
        let gt = g.op(
            &format!("{pre}/mlp/gate_proj/MatMul"),
            "MatMul",
            &[&hn2, &wg],
            vec![],
        );
        let up = g.op(
            &format!("{pre}/mlp/up_proj/MatMul"),
            "MatMul",
            &[&hn2, &wu],
            vec![],
        );
        let sg = g.op(&format!("{pre}/mlp/act/Sigmoid"), "Sigmoid", &[&gt], vec![]);
        let act = g.op(&format!("{pre}/mlp/act/Mul"), "Mul", &[&gt, &sg], vec![]);
        let m = g.op(&format!("{pre}/mlp/Mul"), "Mul", &[&act, &up], vec![]);
        let down = g.op(
            &format!("{pre}/mlp/down_proj/MatMul"),
            "MatMul",
            &[&m, &wd],
            vec![],
        );
        x = g.op(&format!("{pre}/Add_mlp"), "Add", &[&x, &down], vec![]);
    }
    let lnf = weight(&mut g, "model.norm.weight".into(), &[h])?;
    let hf = g.op(
        "/model/norm/SimplifiedLayerNormalization",
        "SimplifiedLayerNormalization",
        &[&x, &lnf],
        vec![attr_int("axis", -1), attr_float("epsilon", eps)],
    );
    let et = g.op(
        "/lm_head/Transpose",
        "Transpose",
        &[&embed],
        vec![attr_ints("perm", &[1, 0])],
    );
    g.op_multi(
        "/lm_head/MatMul",
        "MatMul",
        &[&hf, &et],
        &["logits"],
        vec![],
    );

    let (b, sq, tot, past) = (
        Err("batch_size"),
        Err("sequence_length"),
        Err("total_sequence_length"),
        Err("past_sequence_length"),
    );
    let mut inputs = vec![
        value_info("input_ids", 7, &[b, sq]),
        value_info("attention_mask", 7, &[b, tot]),
        value_info("position_ids", 7, &[b, sq]),
    ];
    let ft = spec.dtype.to_onnx();
    let mut outputs = vec![value_info("logits", ft, &[b, sq, Ok(spec.vocab)])];
    for l in 0..spec.layers {
        for kind in ["key", "value"] {
            inputs.push(value_info(
                &format!("past_key_values.{l}.{kind}"),
                ft,
                &[b, Ok(kvh), past, Ok(d)],
            ));
            outputs.push(value_info(
                &format!("present.{l}.{kind}"),
                ft,
                &[b, Ok(kvh), tot, Ok(d)],
            ));
        }
    }
    let model = pb::ModelProto {
        ir_version: Some(8),
        producer_name: Some("engine".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
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
    Ok((model.encode_to_vec(), g.data))
}
