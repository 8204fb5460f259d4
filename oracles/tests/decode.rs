//! End to end on hand-built packages (no engine involved): a "successor" decoder whose logits
//! depend only on the current token (token t predicts t + 1 mod V with logit 10, every other id j
//! gets j / 10), with a one-layer KV cache that just stores the embeddings. Checks greedy tokens,
//! top-5 and margins, EOS stop, the cache length, the JSON contract, sidecar I/O names, external
//! data, and the `oracle` binary.

use std::path::Path;
use std::process::Command;

use onnx_pb as pb;
use oracles::Oracle;
use prost::Message;
use sha2::{Digest, Sha256};

const V: usize = 6;

/// Port names of one package flavour.
struct Names {
    ids: &'static str,
    mask: &'static str,
    past_k: &'static str,
    past_v: &'static str,
    present_k: &'static str,
    present_v: &'static str,
    logits: &'static str,
}

const DEFAULT: Names = Names {
    ids: "input_ids",
    mask: "attention_mask",
    past_k: "past_key_values.0.key",
    past_v: "past_key_values.0.value",
    present_k: "present.0.key",
    present_v: "present.0.value",
    logits: "logits",
};

const CUSTOM: Names = Names {
    ids: "tokens",
    mask: "mask",
    past_k: "cache_in_k_0",
    past_v: "cache_in_v_0",
    present_k: "cache_out_k_0",
    present_v: "cache_out_v_0",
    logits: "scores",
};

fn value_info(name: &str, elem: i32, dims: &[Option<i64>]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value as DV};
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => DV::DimValue(*v),
                None => DV::DimParam("n".into()),
            }),
            ..Default::default()
        })
        .collect();
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        name: Some(format!("/{op}_{}", outputs[0])),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

/// Writes the successor model; `W` goes to an external data file.
fn write_package(
    dir: &Path,
    names: &Names,
    genai: Option<serde_json::Value>,
    sidecar: Option<&str>,
) {
    std::fs::create_dir_all(dir).unwrap();
    let eye: Vec<f32> = (0..V * V)
        .map(|e| if e / V == e % V { 1.0 } else { 0.0 })
        .collect();
    let w: Vec<f32> = (0..V * V)
        .map(|e| {
            if (e / V + 1) % V == e % V {
                10.0
            } else {
                (e % V) as f32 / 10.0
            }
        })
        .collect();
    let data: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("model.onnx.data"), &data).unwrap();
    let kv = |k: &str, v: String| pb::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let initializers = vec![
        pb::TensorProto {
            name: Some("E".into()),
            dims: vec![V as i64, V as i64],
            data_type: Some(1),
            float_data: eye,
            ..Default::default()
        },
        pb::TensorProto {
            name: Some("W".into()),
            dims: vec![V as i64, V as i64],
            data_type: Some(1),
            data_location: Some(pb::tensor_proto::DataLocation::External as i32),
            external_data: vec![
                kv("location", "model.onnx.data".into()),
                kv("length", data.len().to_string()),
            ],
            ..Default::default()
        },
        pb::TensorProto {
            name: Some("axes1".into()),
            dims: vec![1],
            data_type: Some(7),
            int64_data: vec![1],
            ..Default::default()
        },
    ];
    let axis = |v: i64| pb::AttributeProto {
        name: Some("axis".into()),
        r#type: Some(2),
        i: Some(v),
        ..Default::default()
    };
    let nodes = vec![
        node("Gather", &["E", names.ids], &["emb"], vec![axis(0)]),
        node("Unsqueeze", &["emb", "axes1"], &["emb4"], vec![]),
        node(
            "Concat",
            &[names.past_k, "emb4"],
            &[names.present_k],
            vec![axis(2)],
        ),
        node(
            "Concat",
            &[names.past_v, "emb4"],
            &[names.present_v],
            vec![axis(2)],
        ),
        node("MatMul", &["emb", "W"], &[names.logits], vec![]),
    ];
    let kv_dims = [Some(1), Some(1), None, Some(V as i64)];
    let model = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(pb::GraphProto {
            name: Some("successor".into()),
            node: nodes,
            initializer: initializers,
            input: vec![
                value_info(names.ids, 7, &[Some(1), None]),
                value_info(names.mask, 7, &[Some(1), None]),
                value_info(names.past_k, 1, &kv_dims),
                value_info(names.past_v, 1, &kv_dims),
            ],
            output: vec![
                value_info(names.logits, 1, &[Some(1), None, Some(V as i64)]),
                value_info(names.present_k, 1, &kv_dims),
                value_info(names.present_v, 1, &kv_dims),
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    std::fs::write(dir.join("model.onnx"), model.encode_to_vec()).unwrap();
    if let Some(g) = genai {
        std::fs::write(dir.join("genai_config.json"), g.to_string()).unwrap();
    }
    if let Some(s) = sidecar {
        std::fs::write(dir.join("inference_metadata.yaml"), s).unwrap();
    }
}

/// sha256 of `model.onnx` followed by `model.onnx.data` (the package hash of the goldens).
fn package_sha256(dir: &Path) -> String {
    let mut h = Sha256::new();
    h.update(std::fs::read(dir.join("model.onnx")).unwrap());
    h.update(std::fs::read(dir.join("model.onnx.data")).unwrap());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn greedy_decode_with_top5_and_margins() {
    let tmp = tempfile::tempdir().unwrap();
    write_package(tmp.path(), &DEFAULT, None, None);
    let oracle = Oracle::open(tmp.path()).unwrap();
    assert!(oracle.eos_token_ids().is_empty());
    let d = oracle.decode(&[4, 0], 8).unwrap();
    // The last prompt token is 0: 1, 2, 3, 4, 5, 0, 1, 2.
    assert_eq!(d.generated_ids, [1, 2, 3, 4, 5, 0, 1, 2]);
    assert!(!d.stopped_on_eos);
    assert_eq!(d.model_sha256, package_sha256(tmp.path()));
    // After token 0: id 1 (10.0), then the rest by j / 10 descending.
    assert_eq!(
        d.steps[0].top,
        vec![(1, 10.0), (5, 0.5), (4, 0.4), (3, 0.3), (2, 0.2)]
    );
    assert_eq!(d.steps[0].margin, 10.0 - 0.5f32 as f64);
    // After token 5: id 0 (10.0), then 5, 4, 3, 2 (token 5's own id keeps its 0.5).
    assert_eq!(
        d.steps[5].top,
        vec![(0, 10.0), (5, 0.5), (4, 0.4), (3, 0.3), (2, 0.2)]
    );
    assert_eq!(d.last_logits.len(), V);
    assert_eq!(
        d.to_json(),
        format!(
            "{{\"schema\":\"oracle-decode/1\",\"model_sha256\":\"{}\",\"prompt_ids\":[4,0],\"generated_ids\":[1,2,3,4,5,0,1,2],\"steps\":[{}]}}",
            d.model_sha256,
            d.steps
                .iter()
                .map(|s| format!(
                    "{{\"top\":[{}]}}",
                    s.top
                        .iter()
                        .map(|(i, l)| format!("[{i},{l:?}]"))
                        .collect::<Vec<_>>()
                        .join(",")
                ))
                .collect::<Vec<_>>()
                .join(",")
        )
    );
    assert!(
        d.to_json()
            .contains("[[1,10.0],[5,0.5],[4,0.4],[3,0.3],[2,0.2]]")
    );
}

#[test]
fn kv_cache_grows_one_position_per_step() {
    let tmp = tempfile::tempdir().unwrap();
    write_package(tmp.path(), &DEFAULT, None, None);
    let oracle = Oracle::open(tmp.path()).unwrap();
    let (logits, cache) = oracle
        .forward(&[2, 3, 1], &oracle.empty_cache().unwrap())
        .unwrap();
    assert_eq!(cache.len, 3);
    assert_eq!(cache.layers[0].0.shape, vec![1, 1, 3, V]);
    assert_eq!(
        logits[2], 10.0,
        "last position is token 1, which predicts 2"
    );
    let (_, cache) = oracle.forward(&[2], &cache).unwrap();
    assert_eq!(cache.layers[0].1.shape, vec![1, 1, 4, V]);
    // The cached embeddings are the one-hot rows of the tokens fed so far.
    let k = cache.layers[0].0.f32s().unwrap();
    let hot: Vec<usize> = k
        .chunks(V)
        .map(|row| row.iter().position(|&v| v == 1.0).unwrap())
        .collect();
    assert_eq!(hot, [2, 3, 1, 2]);
}

#[test]
fn stops_on_eos_from_genai_config_and_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    write_package(
        tmp.path(),
        &DEFAULT,
        Some(serde_json::json!({"model": {"eos_token_id": [3]}})),
        None,
    );
    let oracle = Oracle::open(tmp.path()).unwrap();
    assert_eq!(oracle.eos_token_ids(), [3]);
    let d = oracle.decode(&[0], 10).unwrap();
    assert_eq!(d.generated_ids, [1, 2, 3]);
    assert!(d.stopped_on_eos);
    assert_eq!(d.steps.len(), 3);
    assert!(oracle.decode(&[0], 0).unwrap().generated_ids.is_empty());
    assert!(oracle.decode(&[], 3).is_err());
}

#[test]
fn sidecar_and_genai_name_the_ports() {
    let tmp = tempfile::tempdir().unwrap();
    let genai = serde_json::json!({"model": {"decoder": {
        "inputs": {"input_ids": "tokens", "attention_mask": "mask",
                   "past_key_names": "cache_in_k_%d", "past_value_names": "cache_in_v_%d"},
        "outputs": {"logits": "scores", "present_key_names": "cache_out_k_%d", "present_value_names": "cache_out_v_%d"}}}});
    write_package(tmp.path(), &CUSTOM, Some(genai), None);
    let d = Oracle::open(tmp.path()).unwrap().decode(&[3], 3).unwrap();
    assert_eq!(d.generated_ids, [4, 5, 0]);

    // Sidecar only (no genai_config): `{layer}` patterns, with eos ids.
    let tmp2 = tempfile::tempdir().unwrap();
    let sidecar = "io:\n  token_input: tokens\n  attention_mask: mask\n  logits: scores\n  past_key: \"cache_in_k_{layer}\"\n  past_value: \"cache_in_v_{layer}\"\n  present_key: \"cache_out_k_{layer}\"\n  present_value: \"cache_out_v_{layer}\"\neos_token_ids: [5]\nnum_layers: 1\n";
    write_package(tmp2.path(), &CUSTOM, None, Some(sidecar));
    let d = Oracle::open(tmp2.path()).unwrap().decode(&[3], 10).unwrap();
    assert_eq!(d.generated_ids, [4, 5]);

    // Without either, the error says which key to declare.
    let tmp3 = tempfile::tempdir().unwrap();
    write_package(tmp3.path(), &CUSTOM, None, None);
    let err = Oracle::open(tmp3.path()).unwrap_err().to_string();
    assert!(
        err.contains("declare io.token_input in inference_metadata.yaml"),
        "{err}"
    );
    // A malformed sidecar is an error, not "absent".
    std::fs::write(tmp3.path().join("inference_metadata.yaml"), "io: [unclosed").unwrap();
    let err = Oracle::open(tmp3.path()).unwrap_err().to_string();
    assert!(err.contains("malformed sidecar"), "{err}");
}

#[test]
fn broken_packages_give_errors_that_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    write_package(tmp.path(), &DEFAULT, None, None);
    // External data shorter than the tensor needs.
    std::fs::write(tmp.path().join("model.onnx.data"), [0u8; 8]).unwrap();
    let err = Oracle::open(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.onnx: initializer \"W\"") && err.contains("out of range"),
        "{err}"
    );
    std::fs::write(tmp.path().join("model.onnx"), b"not a protobuf at all").unwrap();
    let err = Oracle::open(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.onnx: cannot decode the ONNX protobuf"),
        "{err}"
    );
    let err = Oracle::open(&tmp.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn oracle_binary_prints_the_contract_json() {
    let tmp = tempfile::tempdir().unwrap();
    write_package(tmp.path(), &DEFAULT, None, None);
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["decode", "--model"])
        .arg(tmp.path())
        .args(["--prompt-ids", "2,5", "--tokens", "3", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "oracle-decode/1");
    assert_eq!(v["model_sha256"], package_sha256(tmp.path()));
    assert_eq!(v["prompt_ids"], serde_json::json!([2, 5]));
    assert_eq!(v["generated_ids"], serde_json::json!([0, 1, 2]));
    assert_eq!(v["steps"].as_array().unwrap().len(), 3);
    assert_eq!(v["steps"][0]["top"][0], serde_json::json!([0, 10.0]));
    assert_eq!(
        v.as_object().unwrap().len(),
        5,
        "exactly the contract's keys"
    );

    // Errors: one line on stderr, exit status 1.
    let bad = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(["decode", "--model"])
        .arg(tmp.path())
        .args(["--prompt-ids", "2,x", "--tokens", "3", "--json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: --prompt-ids \"2,x\""), "{err}");
    let missing = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args([
            "decode",
            "--model",
            "/nonexistent/pkg",
            "--prompt-ids",
            "1",
            "--tokens",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("cannot open model package /nonexistent/pkg")
    );
}
