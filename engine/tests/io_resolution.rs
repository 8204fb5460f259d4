//! The I/O-resolution contract: sidecar first, then genai_config.json, then port names;
//! ambiguity and malformed files are errors.

use std::path::Path;

use engine::package::Package;
use engine::tiny::{self, TinyConfig};
use onnx_pb as pb;
use prost::Message;

fn tiny_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    tiny::write_package(tmp.path(), 0, &TinyConfig::default()).unwrap();
    tmp
}

/// Renames graph ports (inputs, outputs and every node reference).
fn rename_ports(dir: &Path, renames: &[(&str, &str)]) {
    let path = dir.join("model.onnx");
    let mut m = pb::ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    let fix = |s: &mut String| {
        if let Some((_, to)) = renames.iter().find(|(from, _)| from == s) {
            *s = to.to_string();
        }
    };
    for v in g.input.iter_mut().chain(g.output.iter_mut()) {
        fix(v.name.as_mut().unwrap());
    }
    for n in &mut g.node {
        n.input.iter_mut().for_each(fix);
        n.output.iter_mut().for_each(fix);
    }
    std::fs::write(&path, m.encode_to_vec()).unwrap();
}

fn drop_genai(dir: &Path) {
    std::fs::remove_file(dir.join("genai_config.json")).unwrap();
}

#[test]
fn genai_config_names_the_ports() {
    let tmp = tiny_dir();
    rename_ports(tmp.path(), &[("input_ids", "tokens"), ("logits", "scores")]);
    let genai = std::fs::read_to_string(tmp.path().join("genai_config.json")).unwrap();
    let genai = genai
        .replace("\"input_ids\": \"input_ids\"", "\"input_ids\": \"tokens\"")
        .replace("\"logits\": \"logits\"", "\"logits\": \"scores\"");
    std::fs::write(tmp.path().join("genai_config.json"), genai).unwrap();
    let p = Package::open(tmp.path()).unwrap();
    assert_eq!(p.io.token_input, "tokens");
    assert_eq!(p.io.logits, "scores");
    assert_eq!(p.io.layers.len(), 2);
    assert_eq!(p.io.layers[1].present_value, "present.1.value");
    assert_eq!((p.io.kv_heads, p.io.head_dim), (2, 16));
    assert_eq!(p.eos_token_ids(), Some(vec![tiny::EOS_ID]));
}

#[test]
fn derived_from_port_names() {
    let tmp = tiny_dir();
    drop_genai(tmp.path());
    let p = Package::open(tmp.path()).unwrap();
    assert_eq!(p.io.token_input, "input_ids");
    assert_eq!(p.io.attention_mask.as_deref(), Some("attention_mask"));
    assert_eq!(p.io.position_ids.as_deref(), Some("position_ids"));
    assert_eq!(p.io.logits, "logits");
    assert_eq!(p.io.layers[0].past_key, "past_key_values.0.key");
    assert_eq!(p.io.layers[0].present_key, "present.0.key");
}

#[test]
fn derived_by_shape_when_the_name_is_unknown() {
    let tmp = tiny_dir();
    drop_genai(tmp.path());
    rename_ports(tmp.path(), &[("input_ids", "ids"), ("logits", "out")]);
    let p = Package::open(tmp.path()).unwrap();
    assert_eq!(p.io.token_input, "ids");
    assert_eq!(p.io.logits, "out");
}

#[test]
fn ambiguous_derivation_lists_candidates_and_names_the_key() {
    let tmp = tiny_dir();
    drop_genai(tmp.path());
    rename_ports(
        tmp.path(),
        &[("input_ids", "ids"), ("attention_mask", "mask")],
    );
    let msg = Package::open(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("cannot resolve io.token_input from tensor shape: 2 ports match [ids, mask]; declare io.token_input in inference_metadata.yaml"),
        "{msg}"
    );
}

#[test]
fn sidecar_resolves_the_ambiguity_and_wins_over_genai() {
    for (name, text) in [
        (
            "inference_metadata.yaml",
            "io:\n  token_input: ids\n  attention_mask: mask\neos_token_ids: [7]\n",
        ),
        (
            "inference_metadata.yml",
            "io:\n  token_input: ids\n  attention_mask: mask\neos_token_ids: [7]\n",
        ),
        (
            "inference_metadata.json",
            r#"{"io": {"token_input": "ids", "attention_mask": "mask"}, "eos_token_ids": [7]}"#,
        ),
    ] {
        let tmp = tiny_dir();
        rename_ports(
            tmp.path(),
            &[("input_ids", "ids"), ("attention_mask", "mask")],
        );
        std::fs::write(tmp.path().join(name), text).unwrap();
        // genai_config.json still says input_ids: the sidecar must win.
        let p = Package::open(tmp.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.io.token_input, "ids", "{name}");
        assert_eq!(p.io.attention_mask.as_deref(), Some("mask"), "{name}");
        assert_eq!(p.eos_token_ids(), Some(vec![7]), "{name}");
    }
}

#[test]
fn sidecar_kv_patterns() {
    let tmp = tiny_dir();
    drop_genai(tmp.path());
    let mut renames = Vec::new();
    for l in 0..2 {
        for k in ["key", "value"] {
            renames.push((
                format!("past_key_values.{l}.{k}"),
                format!("cache_in_{k}_{l}"),
            ));
            renames.push((format!("present.{l}.{k}"), format!("cache_out_{k}_{l}")));
        }
    }
    let refs: Vec<(&str, &str)> = renames
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    rename_ports(tmp.path(), &refs);
    let msg = Package::open(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("cannot resolve io.past_key")
            && msg.contains("declare io.past_key in inference_metadata.yaml"),
        "{msg}"
    );
    std::fs::write(
        tmp.path().join("inference_metadata.yaml"),
        "io:\n  past_key: cache_in_key_{layer}\n  past_value: cache_in_value_{layer}\n  present_key: cache_out_key_{layer}\n  present_value: cache_out_value_{layer}\nnum_layers: 2\n",
    )
    .unwrap();
    let p = Package::open(tmp.path()).unwrap();
    assert_eq!(p.io.layers[1].past_value, "cache_in_value_1");
    assert_eq!(p.io.layers[1].present_key, "cache_out_key_1");
}

#[test]
fn sidecar_naming_a_missing_port_is_an_error() {
    let tmp = tiny_dir();
    std::fs::write(
        tmp.path().join("inference_metadata.yaml"),
        "io:\n  logits: nope\n",
    )
    .unwrap();
    let msg = Package::open(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("io.logits from the sidecar names output \"nope\""),
        "{msg}"
    );
}

#[test]
fn malformed_sidecars_are_errors_not_absent() {
    for (name, text, want) in [
        (
            "inference_metadata.yaml",
            "io: [unclosed\n",
            "malformed sidecar",
        ),
        (
            "inference_metadata.yaml",
            "io:\n  token_inptu: input_ids\n",
            "token_inptu",
        ),
        ("inference_metadata.yml", "", "the file is empty"),
        ("inference_metadata.json", "{\"io\": ", "malformed sidecar"),
    ] {
        let tmp = tiny_dir();
        std::fs::write(tmp.path().join(name), text).unwrap();
        let msg = Package::open(tmp.path()).unwrap_err().to_string();
        assert!(msg.contains(name) && msg.contains(want), "{name}: {msg}");
    }
}

#[test]
fn malformed_genai_config_is_an_error() {
    let tmp = tiny_dir();
    std::fs::write(tmp.path().join("genai_config.json"), "{\"model\": 3}").unwrap();
    let msg = Package::open(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("genai_config.json") && msg.contains("malformed"),
        "{msg}"
    );
}
