//! Typed reads of ONNX node attributes. An attribute that is present but holds the wrong kind of
//! value is an error naming it, never silently the default.

use onnx_pb as pb;

use crate::bail;
use crate::error::Result;

pub fn find<'a>(attrs: &'a [pb::AttributeProto], name: &str) -> Option<&'a pb::AttributeProto> {
    attrs.iter().find(|a| a.name() == name)
}

pub fn has(attrs: &[pb::AttributeProto], name: &str) -> bool {
    find(attrs, name).is_some()
}

pub fn int(attrs: &[pb::AttributeProto], name: &str) -> Result<Option<i64>> {
    match find(attrs, name) {
        None => Ok(None),
        Some(a) => match a.i {
            Some(v) => Ok(Some(v)),
            None => bail!("attribute {name} must be an int"),
        },
    }
}

pub fn int_or(attrs: &[pb::AttributeProto], name: &str, default: i64) -> Result<i64> {
    Ok(int(attrs, name)?.unwrap_or(default))
}

pub fn bool_or(attrs: &[pb::AttributeProto], name: &str, default: bool) -> Result<bool> {
    Ok(int(attrs, name)?.map_or(default, |v| v != 0))
}

pub fn float_or(attrs: &[pb::AttributeProto], name: &str, default: f32) -> Result<f32> {
    match find(attrs, name) {
        None => Ok(default),
        Some(a) => match a.f {
            Some(v) => Ok(v),
            None => bail!("attribute {name} must be a float"),
        },
    }
}

/// A list-of-ints attribute (an empty list is `Some(vec![])`).
pub fn ints(attrs: &[pb::AttributeProto], name: &str) -> Option<Vec<i64>> {
    find(attrs, name).map(|a| a.ints.clone())
}

pub fn floats(attrs: &[pb::AttributeProto], name: &str) -> Option<Vec<f32>> {
    find(attrs, name).map(|a| a.floats.clone())
}

pub fn string(attrs: &[pb::AttributeProto], name: &str) -> Result<Option<String>> {
    match find(attrs, name) {
        None => Ok(None),
        Some(a) => match &a.s {
            Some(s) => Ok(Some(String::from_utf8_lossy(s).into_owned())),
            None => bail!("attribute {name} must be a string"),
        },
    }
}
