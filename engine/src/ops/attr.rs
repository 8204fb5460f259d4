//! Typed access to ONNX node attributes, with errors that name the attribute.

use onnx_pb as pb;

use crate::onnx::Node;

fn find<'a>(node: &'a Node, name: &str) -> Option<&'a pb::AttributeProto> {
    node.attributes.iter().find(|a| a.name() == name)
}

pub fn has(node: &Node, name: &str) -> bool {
    find(node, name).is_some()
}

pub fn int(node: &Node, name: &str) -> Option<i64> {
    find(node, name).and_then(|a| a.i)
}

pub fn int_or(node: &Node, name: &str, default: i64) -> i64 {
    int(node, name).unwrap_or(default)
}

pub fn float_or(node: &Node, name: &str, default: f32) -> f32 {
    find(node, name).and_then(|a| a.f).unwrap_or(default)
}

pub fn ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    find(node, name).map(|a| a.ints.clone())
}

pub fn floats(node: &Node, name: &str) -> Option<Vec<f32>> {
    find(node, name).map(|a| a.floats.clone())
}

pub fn string(node: &Node, name: &str) -> Option<String> {
    find(node, name)
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

pub fn tensor<'a>(node: &'a Node, name: &str) -> Option<&'a pb::TensorProto> {
    find(node, name).and_then(|a| a.t.as_ref())
}
