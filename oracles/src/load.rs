//! Loading `model.onnx`: decodes the `ModelProto` with prost and reads every initializer, inline
//! (`raw_data` or the typed fields) or from external data files next to the model, into
//! [`OTensor`]s. f16/bf16 values are widened to f32; i32/u8 are kept as i64 with their type tag.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use onnx_pb as pb;
use prost::Message;

use crate::error::{Error, Result};
use crate::tensor::{DType, Data, OTensor, checked_numel, onnx_type_name};

/// A declared graph input or output.
#[derive(Clone, Debug)]
pub struct Port {
    pub name: String,
    /// ONNX element type code (0 when not declared).
    pub elem_type: i32,
    /// Declared dims: `Some(n)` for a fixed size, `None` for a symbolic or unknown one; `None`
    /// overall when the rank is not declared.
    pub dims: Option<Vec<Option<usize>>>,
}

/// A graph node as stored in the file.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name, or `#index` when the file gives none.
    pub name: String,
    pub op_type: String,
    /// `""` for the default domain (`ai.onnx` is normalised to `""`).
    pub domain: String,
    /// Empty strings are omitted optional inputs / outputs.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<pb::AttributeProto>,
}

/// A decoded model: ports, nodes in file order, initializers.
#[derive(Clone, Debug)]
pub struct Model {
    pub path: PathBuf,
    /// Opset of the default domain.
    pub opset: i64,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub nodes: Vec<Node>,
    pub initializers: HashMap<String, OTensor>,
    /// External data files the initializers were read from, sorted by name.
    pub external_files: Vec<String>,
}

impl Model {
    /// Reads and decodes `path`; external data files are looked up in its directory.
    pub fn load(path: &Path) -> Result<Model> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let proto = pb::ModelProto::decode(bytes.as_slice()).map_err(|source| Error::Decode {
            path: path.to_path_buf(),
            source,
        })?;
        Model::from_proto(&proto, path)
    }

    /// Builds a model from a decoded proto; `path` names errors and locates external data.
    pub fn from_proto(proto: &pb::ModelProto, path: &Path) -> Result<Model> {
        let graph = proto.graph.as_ref().ok_or_else(|| {
            Error::package(
                path,
                "the model has no graph (truncated or not an ONNX model)",
            )
        })?;
        let opset = proto
            .opset_import
            .iter()
            .find(|o| matches!(o.domain(), "" | "ai.onnx"))
            .and_then(|o| o.version)
            .ok_or_else(|| Error::package(path, "the model imports no default-domain opset"))?;
        if let Some(s) = graph.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name().to_string())
                .unwrap_or_default();
            return Err(Error::Initializer {
                path: path.to_path_buf(),
                tensor: name,
                message: "sparse initializers are not supported".into(),
            });
        }
        let mut external = ExternalData::new(path.parent().unwrap_or(Path::new(".")));
        let mut initializers = HashMap::new();
        for t in &graph.initializer {
            let tensor = tensor_from_proto(t, Some(&mut external)).map_err(|message| {
                Error::Initializer {
                    path: path.to_path_buf(),
                    tensor: t.name().to_string(),
                    message,
                }
            })?;
            initializers.insert(t.name().to_string(), tensor);
        }
        let inputs = graph
            .input
            .iter()
            .filter(|v| !initializers.contains_key(v.name()))
            .map(port_from_proto)
            .collect();
        let outputs = graph.output.iter().map(port_from_proto).collect();
        let nodes = graph
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| Node {
                name: if n.name().is_empty() {
                    format!("#{i}")
                } else {
                    n.name().to_string()
                },
                op_type: n.op_type().to_string(),
                domain: if n.domain() == "ai.onnx" {
                    String::new()
                } else {
                    n.domain().to_string()
                },
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                attributes: n.attribute.clone(),
            })
            .collect();
        let mut external_files: Vec<String> = external.files.into_keys().collect();
        external_files.sort();
        Ok(Model {
            path: path.to_path_buf(),
            opset,
            inputs,
            outputs,
            nodes,
            initializers,
            external_files,
        })
    }
}

fn port_from_proto(v: &pb::ValueInfoProto) -> Port {
    use pb::tensor_shape_proto::dimension::Value as Dim;
    let (elem_type, dims) = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(pb::type_proto::Value::TensorType(t)) => {
            let dims = t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match d.value {
                        Some(Dim::DimValue(n)) if n >= 0 => Some(n as usize),
                        _ => None,
                    })
                    .collect()
            });
            (t.elem_type(), dims)
        }
        _ => (0, None),
    };
    Port {
        name: v.name().to_string(),
        elem_type,
        dims,
    }
}

/// External data files, opened on first use, confined to the model directory.
pub struct ExternalData {
    dir: PathBuf,
    files: HashMap<String, File>,
}

impl ExternalData {
    pub fn new(dir: &Path) -> ExternalData {
        ExternalData {
            dir: dir.to_path_buf(),
            files: HashMap::new(),
        }
    }

    /// Reads `length` bytes at `offset` of `location`.
    fn read(&mut self, location: &str, offset: u64, length: u64) -> Result<Vec<u8>, String> {
        let rel = Path::new(location);
        if location.is_empty()
            || rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "external data location {location:?} must be a relative path inside the model directory"
            ));
        }
        let path = self.dir.join(rel);
        if !self.files.contains_key(location) {
            let f = File::open(&path)
                .map_err(|e| format!("cannot open external data file {}: {e}", path.display()))?;
            self.files.insert(location.to_string(), f);
        }
        let Some(file) = self.files.get_mut(location) else {
            return Err(format!("external data file {} vanished", path.display()));
        };
        let file_len = file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        let end = offset.checked_add(length).filter(|&e| e <= file_len).ok_or_else(|| {
            format!(
                "external data file {} has {file_len} bytes; bytes {offset}..{} are out of range",
                path.display(),
                offset.saturating_add(length)
            )
        })?;
        let mut buf = vec![0u8; (end - offset) as usize];
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        file.read_exact(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(buf)
    }
}

/// Bytes per element in ONNX's little-endian raw encoding.
fn elem_size(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::F16 | DType::BF16 => 2,
        DType::I64 => 8,
        DType::U8 | DType::Bool => 1,
    }
}

/// Decodes little-endian raw bytes (`bytes.len()` is a multiple of the element size).
fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Data {
    let chunks = |n: usize| bytes.chunks_exact(n);
    match dtype {
        DType::F32 => Data::F32(
            chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::F16 => Data::F32(
            chunks(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        DType::BF16 => Data::F32(
            chunks(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        DType::I64 => Data::I64(
            chunks(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        DType::I32 => Data::I64(
            chunks(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
        ),
        DType::U8 => Data::I64(bytes.iter().map(|&b| b as i64).collect()),
        DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
    }
}

/// Decodes a `TensorProto` (an initializer or an attribute value). `external` is where external
/// data is read from; `None` makes external data an error. Errors are plain messages: the caller
/// adds the tensor and file.
pub fn tensor_from_proto(
    t: &pb::TensorProto,
    external: Option<&mut ExternalData>,
) -> Result<OTensor, String> {
    let code = t.data_type();
    let dtype = DType::from_onnx(code)
        .ok_or_else(|| format!("unsupported data type {}", onnx_type_name(code)))?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(format!("negative dimension in shape {:?}", t.dims));
        }
        shape.push(d as usize);
    }
    let numel = checked_numel(&shape).map_err(|e| e.to_string())?;
    let nbytes = numel
        .checked_mul(elem_size(dtype))
        .ok_or_else(|| format!("shape {:?} is too large", t.dims))?;
    let data = if t.data_location() == pb::tensor_proto::DataLocation::External {
        let (mut location, mut offset, mut length) = (None, 0u64, None);
        for kv in &t.external_data {
            let number = |what: &str| {
                kv.value()
                    .parse::<u64>()
                    .map_err(|_| format!("external data {what} {:?} is not a number", kv.value()))
            };
            match kv.key() {
                "location" => location = Some(kv.value().to_string()),
                "offset" => offset = number("offset")?,
                "length" => length = Some(number("length")?),
                _ => {}
            }
        }
        let location = location.ok_or("external data has no location")?;
        if let Some(len) = length
            && len != nbytes as u64
        {
            return Err(format!(
                "external data length {len} is not the {nbytes} bytes that shape {:?} of {dtype} needs",
                t.dims
            ));
        }
        let ext = external.ok_or("external data is not allowed here (no model directory)")?;
        from_le_bytes(dtype, &ext.read(&location, offset, nbytes as u64)?)
    } else if let Some(raw) = &t.raw_data {
        if raw.len() != nbytes {
            return Err(format!(
                "raw data has {} bytes but shape {:?} of {dtype} needs {nbytes}",
                raw.len(),
                t.dims
            ));
        }
        from_le_bytes(dtype, raw)
    } else {
        match dtype {
            DType::F32 => Data::F32(t.float_data.clone()),
            DType::I64 => Data::I64(t.int64_data.clone()),
            DType::I32 => Data::I64(t.int32_data.iter().map(|&x| x as i64).collect()),
            DType::U8 => Data::I64(t.int32_data.iter().map(|&x| x as u8 as i64).collect()),
            DType::Bool => Data::Bool(t.int32_data.iter().map(|&x| x != 0).collect()),
            DType::F16 => Data::F32(
                t.int32_data
                    .iter()
                    .map(|&x| half::f16::from_bits(x as u16).to_f32())
                    .collect(),
            ),
            DType::BF16 => Data::F32(
                t.int32_data
                    .iter()
                    .map(|&x| half::bf16::from_bits(x as u16).to_f32())
                    .collect(),
            ),
        }
    };
    if data.len() != numel {
        return Err(format!(
            "has {} stored values but shape {:?} needs {numel}",
            data.len(),
            t.dims
        ));
    }
    OTensor::new(shape, dtype, data).map_err(|e| e.to_string())
}
