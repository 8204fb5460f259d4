//! Bad model input: every case must give an error that names the problem (and the file, tensor
//! or node), never a panic.

use std::path::Path;

use engine::onnx::Model;
use engine::package::Package;
use engine::tiny::{self, TinyConfig};
use engine::{CpuBackend, exec::Executor};
use onnx_pb as pb;
use prost::Message;

fn tiny_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    tiny::write_package(tmp.path(), 0, &TinyConfig::default()).unwrap();
    tmp
}

fn read_proto(dir: &Path) -> pb::ModelProto {
    pb::ModelProto::decode(std::fs::read(dir.join("model.onnx")).unwrap().as_slice()).unwrap()
}

fn write_proto(dir: &Path, m: &pb::ModelProto) {
    std::fs::write(dir.join("model.onnx"), m.encode_to_vec()).unwrap();
}

fn load_err(dir: &Path) -> String {
    let e = Model::load(&dir.join("model.onnx")).expect_err("loading must fail");
    e.to_string()
}

fn graph(m: &mut pb::ModelProto) -> &mut pb::GraphProto {
    m.graph.as_mut().unwrap()
}

#[test]
fn truncated_model_file() {
    let tmp = tiny_dir();
    let path = tmp.path().join("model.onnx");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("model.onnx") && msg.contains("truncated or corrupt protobuf"),
        "{msg}"
    );
}

#[test]
fn missing_external_data_file() {
    let tmp = tiny_dir();
    std::fs::remove_file(tmp.path().join("model.onnx.data")).unwrap();
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("initializer model.embed_tokens.weight"),
        "{msg}"
    );
    assert!(msg.contains("model.onnx.data cannot be opened"), "{msg}");
}

#[test]
fn short_external_data_file() {
    let tmp = tiny_dir();
    let data = tmp.path().join("model.onnx.data");
    let len = std::fs::metadata(&data).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    f.set_len(len - 100).unwrap();
    let msg = load_err(tmp.path());
    assert!(msg.contains("initializer model.norm.weight"), "{msg}");
    assert!(msg.contains("too short"), "{msg}");
}

#[test]
fn external_data_outside_the_model_directory() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    graph(&mut m)
        .initializer
        .iter_mut()
        .find(|t| t.external_data.len() == 3)
        .unwrap()
        .external_data[0]
        .value = Some("../../etc/passwd".into());
    write_proto(tmp.path(), &m);
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("must be a relative path inside the model directory"),
        "{msg}"
    );
}

#[test]
fn unknown_initializer_dtype() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    graph(&mut m).initializer.push(pb::TensorProto {
        name: Some("doubles".into()),
        dims: vec![2],
        data_type: Some(11),
        double_data: vec![1.0, 2.0],
        ..Default::default()
    });
    write_proto(tmp.path(), &m);
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("initializer doubles") && msg.contains("unsupported data type DOUBLE (11)"),
        "{msg}"
    );
}

#[test]
fn raw_data_shorter_than_its_shape() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    graph(&mut m).initializer.push(pb::TensorProto {
        name: Some("short_raw".into()),
        dims: vec![4],
        data_type: Some(1),
        raw_data: Some(vec![0; 12]),
        ..Default::default()
    });
    write_proto(tmp.path(), &m);
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("initializer short_raw") && msg.contains("raw data has 12 bytes"),
        "{msg}"
    );
}

#[test]
fn dangling_node_input() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    let node = graph(&mut m)
        .node
        .iter_mut()
        .find(|n| n.name() == "/model/layers.1/attn/q_proj/MatMul")
        .unwrap();
    node.input[1] = "no_such_weight".into();
    write_proto(tmp.path(), &m);
    let msg = load_err(tmp.path());
    assert!(
        msg.contains("node /model/layers.1/attn/q_proj/MatMul (MatMul)"),
        "{msg}"
    );
    assert!(msg.contains("\"no_such_weight\" is not produced"), "{msg}");
}

#[test]
fn every_unsupported_op_in_one_error() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    for (n, (domain, op)) in graph(&mut m).node.iter_mut().zip([
        ("", "FancyAttention"),
        ("com.example", "Magic"),
        ("", "FancyAttention"),
    ]) {
        n.domain = Some(domain.into());
        n.op_type = Some(op.into());
    }
    write_proto(tmp.path(), &m);
    let model = Model::load(&tmp.path().join("model.onnx")).unwrap();
    let msg = Executor::new(&model, CpuBackend::new(1).unwrap())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unsupported operators"), "{msg}");
    assert!(
        msg.contains("(ai.onnx, FancyAttention)") && msg.contains("(com.example, Magic)"),
        "{msg}"
    );
    assert_eq!(
        msg.matches("FancyAttention").count(),
        1,
        "each op listed once: {msg}"
    );
}

#[test]
fn invalid_attribute_names_the_node() {
    let tmp = tiny_dir();
    let mut m = read_proto(tmp.path());
    let node = graph(&mut m)
        .node
        .iter_mut()
        .find(|n| n.op_type() == "Cast")
        .unwrap();
    node.attribute[0].i = Some(8); // STRING
    let name = node.name().to_string();
    write_proto(tmp.path(), &m);
    let model = Model::load(&tmp.path().join("model.onnx")).unwrap();
    let msg = Executor::new(&model, CpuBackend::new(1).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!("node {name} (Cast)")) && msg.contains("cannot cast to STRING (8)"),
        "{msg}"
    );
}

#[test]
fn package_without_model_file() {
    let tmp = tiny_dir();
    std::fs::remove_file(tmp.path().join("model.onnx")).unwrap();
    let msg = Package::open(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("model.onnx") && msg.contains("model file not found"),
        "{msg}"
    );
    let msg = Package::open(&tmp.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("does not exist"), "{msg}");
}

#[test]
fn not_an_onnx_file_at_all() {
    let tmp = tiny_dir();
    std::fs::write(
        tmp.path().join("model.onnx"),
        b"this is a text file, not protobuf",
    )
    .unwrap();
    let msg = load_err(tmp.path());
    assert!(msg.contains("model.onnx"), "{msg}");
}
