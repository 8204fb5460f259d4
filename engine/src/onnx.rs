//! ONNX model loading: decodes `model.onnx` with prost, reads initializers (inline and external
//! data) into host tensors, and checks the graph's wiring. Also the inverse for writers
//! (`tensor_to_proto`), used by the tests' graph builder (`tests/common`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use half::{bf16, f16};
use onnx_pb as pb;
use prost::Message;

use crate::dtype::{DType, onnx_type_name};
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor};

/// One dimension of a declared graph port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    Named(String),
    Unknown,
}

/// A declared graph input or output.
#[derive(Clone, Debug)]
pub struct Port {
    pub name: String,
    /// `None` when the element type is missing or not one the engine stores.
    pub dtype: Option<DType>,
    pub onnx_type: i32,
    /// `None` when the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

/// A graph node as stored in the file.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name, or a generated `#index (op_type)` when the file has none.
    pub name: String,
    pub op_type: String,
    /// `""` for the default ONNX domain (`ai.onnx` is normalised to `""`).
    pub domain: String,
    /// Empty strings mark omitted optional inputs/outputs.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<pb::AttributeProto>,
}

/// A loaded model: graph structure plus host initializers.
#[derive(Clone, Debug)]
pub struct Model {
    pub path: PathBuf,
    /// Opset of the default domain.
    pub opset: i64,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub nodes: Vec<Node>,
    /// By name, in name order: what iterates over them (the executor uploads and packs every
    /// constant at load) does so in the same order in every process, so a loaded model leaves
    /// the same heap behind. (A `HashMap`'s order follows the process's random hash keys; a heap
    /// left in another state sends glibc's malloc down other paths later, which is what moved
    /// one-thread benchmarks' instruction counts between processes: harness/eval/noise/README.md.)
    pub initializers: BTreeMap<String, Tensor>,
    /// External data files the initializers reference (relative to the model), sorted, unique.
    pub external_files: Vec<String>,
}

impl Model {
    /// Loads `path` (an `.onnx` file); external data files are resolved next to it.
    pub fn load(path: &Path) -> Result<Model> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let proto = pb::ModelProto::decode(bytes.as_slice()).map_err(|source| Error::Decode {
            path: path.to_path_buf(),
            source,
        })?;
        Model::from_proto(proto, path)
    }

    /// Builds a model from a decoded proto; `path` locates external data and names errors.
    pub fn from_proto(proto: pb::ModelProto, path: &Path) -> Result<Model> {
        let graph = proto.graph.ok_or_else(|| {
            Error::package(path, "model has no graph (truncated or not an ONNX model)")
        })?;
        let opset = proto
            .opset_import
            .iter()
            .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
            .and_then(|o| o.version)
            .unwrap_or(21);
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut externals = ExternalFiles::new(dir);
        let mut initializers = BTreeMap::new();
        for t in &graph.initializer {
            let name = t.name.clone().unwrap_or_default();
            let tensor =
                tensor_from_proto(t, &mut externals).map_err(|message| Error::Initializer {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    message,
                })?;
            initializers.insert(name, tensor);
        }
        if let Some(s) = graph.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .and_then(|v| v.name.clone())
                .unwrap_or_default();
            return Err(Error::Initializer {
                path: path.to_path_buf(),
                tensor: name,
                message: "sparse initializers are not supported".into(),
            });
        }
        let inputs = graph
            .input
            .iter()
            .filter(|v| !initializers.contains_key(v.name()))
            .map(port_from_proto)
            .collect();
        let outputs: Vec<Port> = graph.output.iter().map(port_from_proto).collect();
        let nodes: Vec<Node> = graph
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| Node {
                name: match n.name.as_deref() {
                    Some(s) if !s.is_empty() => s.to_string(),
                    _ => format!("#{i}"),
                },
                op_type: n.op_type().to_string(),
                domain: match n.domain() {
                    "ai.onnx" => String::new(),
                    d => d.to_string(),
                },
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                attributes: n.attribute.clone(),
            })
            .collect();
        let mut external_files: Vec<String> = externals.open.into_keys().collect();
        external_files.sort();
        let model = Model {
            path: path.to_path_buf(),
            opset,
            inputs,
            outputs,
            nodes,
            initializers,
            external_files,
        };
        model.check_wiring()?;
        Ok(model)
    }

    /// Every node input must come from a graph input, an initializer or an earlier-or-later node
    /// output; every graph output must be produced.
    fn check_wiring(&self) -> Result<()> {
        let mut known: HashSet<&str> = self.inputs.iter().map(|p| p.name.as_str()).collect();
        known.extend(self.initializers.keys().map(String::as_str));
        for n in &self.nodes {
            known.extend(
                n.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
        }
        for n in &self.nodes {
            for inp in n.inputs.iter().filter(|i| !i.is_empty()) {
                if !known.contains(inp.as_str()) {
                    return Err(Error::Node {
                        node: n.name.clone(),
                        op: n.op_type.clone(),
                        message: format!(
                            "input {inp:?} is not produced by any node, graph input or initializer (dangling edge)"
                        ),
                    });
                }
            }
        }
        for o in &self.outputs {
            if !known.contains(o.name.as_str()) {
                return Err(Error::package(
                    &self.path,
                    format!("graph output {:?} is not produced by any node", o.name),
                ));
            }
        }
        Ok(())
    }

    /// Looks up a declared input port.
    pub fn input(&self, name: &str) -> Option<&Port> {
        self.inputs.iter().find(|p| p.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&Port> {
        self.outputs.iter().find(|p| p.name == name)
    }

    /// The model hash recorded in goldens and reports: sha256 over the `.onnx` file followed by
    /// every external data file it references, in sorted file-name order.
    pub fn sha256(&self) -> Result<String> {
        use sha2::{Digest, Sha256};
        use std::io::Read;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let files = std::iter::once(self.path.clone())
            .chain(self.external_files.iter().map(|f| dir.join(f)));
        for path in files {
            let mut f = File::open(&path).map_err(|e| Error::io(&path, e))?;
            loop {
                let n = f.read(&mut buf).map_err(|e| Error::io(&path, e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
        }
        Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
    }
}

fn port_from_proto(v: &pb::ValueInfoProto) -> Port {
    let (onnx_type, shape) = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(pb::type_proto::Value::TensorType(t)) => {
            let shape = t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) if *v >= 0 => {
                            Dim::Fixed(*v as usize)
                        }
                        Some(pb::tensor_shape_proto::dimension::Value::DimParam(p)) => {
                            Dim::Named(p.clone())
                        }
                        _ => Dim::Unknown,
                    })
                    .collect()
            });
            (t.elem_type.unwrap_or(0), shape)
        }
        _ => (0, None),
    };
    Port {
        name: v.name().to_string(),
        dtype: DType::from_onnx(onnx_type),
        onnx_type,
        shape,
    }
}

/// Opens external data files lazily, relative to the model directory.
struct ExternalFiles {
    dir: PathBuf,
    open: HashMap<String, (File, u64)>,
}

impl ExternalFiles {
    fn new(dir: &Path) -> ExternalFiles {
        ExternalFiles {
            dir: dir.to_path_buf(),
            open: HashMap::new(),
        }
    }

    fn read(
        &mut self,
        location: &str,
        offset: u64,
        length: Option<u64>,
        need: u64,
    ) -> Result<Vec<u8>, String> {
        let rel = Path::new(location);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!(
                "external data location {location:?} must be a relative path inside the model directory"
            ));
        }
        if !self.open.contains_key(location) {
            let path = self.dir.join(rel);
            let file = File::open(&path).map_err(|e| {
                format!(
                    "external data file {} cannot be opened: {e}",
                    path.display()
                )
            })?;
            let len = file
                .metadata()
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            self.open.insert(location.to_string(), (file, len));
        }
        let (file, file_len) = self
            .open
            .get_mut(location)
            .ok_or("external file vanished")?;
        let length = length.unwrap_or(need);
        if length != need {
            return Err(format!(
                "external data length {length} does not match the {need} bytes its shape and type need"
            ));
        }
        if offset.checked_add(length).is_none_or(|end| end > *file_len) {
            return Err(format!(
                "external data file {location:?} is too short: need bytes {offset}..{} but the file has {file_len}",
                offset.saturating_add(length)
            ));
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| format!("{location}: {e}"))?;
        let mut buf = vec![0u8; length as usize];
        file.read_exact(&mut buf)
            .map_err(|e| format!("{location}: {e}"))?;
        Ok(buf)
    }
}

/// Decodes a `TensorProto` (initializer or Constant value). Errors are plain messages; the caller
/// adds the tensor and file name.
fn tensor_from_proto(t: &pb::TensorProto, ext: &mut ExternalFiles) -> Result<Tensor, String> {
    let code = t.data_type.unwrap_or(0);
    let dtype = DType::from_onnx(code)
        .ok_or_else(|| format!("unsupported data type {}", onnx_type_name(code)))?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(format!("negative dimension {d} in shape {:?}", t.dims));
        }
        shape.push(d as usize);
    }
    let numel = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {:?} overflows", t.dims))?;
    let need = numel
        .checked_mul(dtype.size())
        .ok_or_else(|| format!("shape {:?} overflows", t.dims))?;
    let data = if t.data_location == Some(pb::tensor_proto::DataLocation::External as i32) {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value();
            let parse = |what: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("external data {what} {v:?} is not a number"))
            };
            match kv.key() {
                "location" => location = Some(v.to_string()),
                "offset" => offset = parse("offset")?,
                "length" => length = Some(parse("length")?),
                _ => {}
            }
        }
        let location = location.ok_or("external data has no location")?;
        let bytes = ext.read(&location, offset, length, need as u64)?;
        Data::from_le_bytes(dtype, &bytes)
    } else if let Some(raw) = &t.raw_data {
        if raw.len() != need {
            return Err(format!(
                "raw data has {} bytes but shape {:?} of {dtype} needs {need}",
                raw.len(),
                t.dims
            ));
        }
        Data::from_le_bytes(dtype, raw)
    } else {
        let data = match dtype {
            DType::F32 => Data::F32(t.float_data.clone()),
            DType::I64 => Data::I64(t.int64_data.clone()),
            DType::I32 => Data::I32(t.int32_data.clone()),
            DType::U8 => Data::U8(t.int32_data.iter().map(|&x| x as u8).collect()),
            DType::Bool => Data::Bool(t.int32_data.iter().map(|&x| x != 0).collect()),
            DType::F16 => Data::F16(
                t.int32_data
                    .iter()
                    .map(|&x| f16::from_bits(x as u16))
                    .collect(),
            ),
            DType::BF16 => Data::BF16(
                t.int32_data
                    .iter()
                    .map(|&x| bf16::from_bits(x as u16))
                    .collect(),
            ),
        };
        if data.len() != numel {
            return Err(format!(
                "has {} stored elements but shape {:?} needs {numel}",
                data.len(),
                t.dims
            ));
        }
        data
    };
    Tensor::new(shape, data).map_err(|e| e.to_string())
}

/// Decodes a tensor attribute (e.g. `Constant.value`) that cannot have external data.
pub fn attribute_tensor(t: &pb::TensorProto, model_dir: &Path) -> Result<Tensor, String> {
    tensor_from_proto(t, &mut ExternalFiles::new(model_dir))
}

/// Encodes a host tensor as an inline (`raw_data`) `TensorProto`.
pub fn tensor_to_proto(name: &str, t: &Tensor) -> pb::TensorProto {
    pb::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().to_onnx()),
        raw_data: Some(t.data().to_le_bytes()),
        ..Default::default()
    }
}
