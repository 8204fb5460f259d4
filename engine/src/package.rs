//! Model packages (a directory: `model.onnx` + external data, `genai_config.json`,
//! `tokenizer.json`, `tokenizer_config.json`, optional `inference_metadata.{yaml,yml,json}`) and
//! the I/O-resolution contract (written out in ARCHITECTURE.md, Contracts): which graph port is
//! the token input, the logits, each layer's past/present key and value.
//!
//! Each I/O key is resolved from the sidecar first, else from `genai_config.json`, else derived
//! from the graph's port names (and, for the token input and logits, their types). A derivation
//! that matches several ports is an error listing them and naming the key to declare. A sidecar
//! or config that exists but does not parse is an error, never treated as absent.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::onnx::{Dim, Model, Port};

/// Sidecar file names, in lookup order.
pub const SIDECAR_NAMES: [&str; 3] = [
    "inference_metadata.yaml",
    "inference_metadata.yml",
    "inference_metadata.json",
];

/// `inference_metadata.{yaml,yml,json}`. Patterns use `{layer}` for the layer index.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    #[serde(default)]
    pub io: SidecarIo,
    /// Token ids that end generation (overrides genai_config / tokenizer_config).
    #[serde(default)]
    pub eos_token_ids: Option<Vec<u32>>,
    /// Number of decoder layers (else counted from the KV ports).
    #[serde(default)]
    pub num_layers: Option<usize>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarIo {
    pub token_input: Option<String>,
    pub attention_mask: Option<String>,
    pub position_ids: Option<String>,
    pub logits: Option<String>,
    pub past_key: Option<String>,
    pub past_value: Option<String>,
    pub present_key: Option<String>,
    pub present_value: Option<String>,
}

/// The parts of onnxruntime-genai's `genai_config.json` the engine reads. Patterns use `%d`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiConfig {
    pub model: GenaiModel,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiModel {
    #[serde(default)]
    pub eos_token_id: Option<OneOrMany>,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub context_length: Option<usize>,
    #[serde(default)]
    pub vocab_size: Option<usize>,
    #[serde(default)]
    pub decoder: GenaiDecoder,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            OneOrMany::One(v) => vec![*v],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiDecoder {
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub num_hidden_layers: Option<usize>,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_size: Option<usize>,
    #[serde(default)]
    pub inputs: GenaiInputs,
    #[serde(default)]
    pub outputs: GenaiOutputs,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiInputs {
    pub input_ids: Option<String>,
    pub attention_mask: Option<String>,
    pub position_ids: Option<String>,
    pub past_key_names: Option<String>,
    pub past_value_names: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiOutputs {
    pub logits: Option<String>,
    pub present_key_names: Option<String>,
    pub present_value_names: Option<String>,
}

/// One layer's KV-cache ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerIo {
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
}

/// The resolved I/O of a decoder graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoMap {
    pub token_input: String,
    pub attention_mask: Option<String>,
    pub position_ids: Option<String>,
    pub logits: String,
    pub layers: Vec<LayerIo>,
    /// KV heads and head size, from the past-key port's shape `[batch, heads, seq, head_dim]`.
    pub kv_heads: usize,
    pub head_dim: usize,
    pub kv_dtype: DType,
}

/// A model directory with its graph loaded and I/O resolved.
#[derive(Debug)]
pub struct Package {
    pub dir: PathBuf,
    pub model: Model,
    pub io: IoMap,
    pub genai: Option<GenaiConfig>,
    pub sidecar: Option<Sidecar>,
}

impl Package {
    /// Opens `dir`: reads the sidecar and genai config (if present), loads the model, resolves I/O.
    pub fn open(dir: &Path) -> Result<Package> {
        if !dir.is_dir() {
            return Err(Error::package(
                dir,
                "model package directory does not exist",
            ));
        }
        let sidecar = read_sidecar(dir)?;
        let genai = read_genai(dir)?;
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
        let sidecar_name = sidecar
            .as_ref()
            .map(|(n, _)| n.as_str())
            .unwrap_or("inference_metadata.yaml");
        let io = resolve_io(
            &model.inputs,
            &model.outputs,
            sidecar.as_ref().map(|(_, s)| s),
            genai.as_ref(),
            sidecar_name,
        )
        .map_err(|e| Error::package(&model_path, e))?;
        Ok(Package {
            dir: dir.to_path_buf(),
            model,
            io,
            genai,
            sidecar: sidecar.map(|(_, s)| s),
        })
    }

    /// End-of-sequence ids from the sidecar, else genai_config (tokenizer_config is consulted by
    /// the tokenizer layer).
    pub fn eos_token_ids(&self) -> Option<Vec<u32>> {
        if let Some(ids) = self.sidecar.as_ref().and_then(|s| s.eos_token_ids.clone()) {
            return Some(ids);
        }
        self.genai
            .as_ref()
            .and_then(|g| g.model.eos_token_id.as_ref())
            .map(OneOrMany::to_vec)
    }

    pub fn tokenizer_path(&self) -> PathBuf {
        self.dir.join("tokenizer.json")
    }
}

/// Reads the first sidecar that exists; a sidecar that exists but does not parse is an error.
pub fn read_sidecar(dir: &Path) -> Result<Option<(String, Sidecar)>> {
    for name in SIDECAR_NAMES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let parsed: Sidecar = if name.ends_with(".json") {
            serde_json::from_str(&text)
                .map_err(|e| Error::package(&path, format!("malformed sidecar: {e}")))?
        } else if text.trim().is_empty() {
            return Err(Error::package(
                &path,
                "malformed sidecar: the file is empty",
            ));
        } else {
            serde_saphyr::from_str(&text)
                .map_err(|e| Error::package(&path, format!("malformed sidecar: {e}")))?
        };
        return Ok(Some((name.to_string(), parsed)));
    }
    Ok(None)
}

pub fn read_genai(dir: &Path) -> Result<Option<GenaiConfig>> {
    let path = dir.join("genai_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::package(&path, format!("malformed genai_config.json: {e}")))
}

/// Port-name templates tried when deriving the KV ports; `{}` is the layer index.
const PAST_KEY: &[&str] = &[
    "past_key_values.{}.key",
    "past.{}.key",
    "past_key.{}",
    "past_key_{}",
    "past_key_values_{}_key",
];
const PAST_VALUE: &[&str] = &[
    "past_key_values.{}.value",
    "past.{}.value",
    "past_value.{}",
    "past_value_{}",
    "past_key_values_{}_value",
];
const PRESENT_KEY: &[&str] = &[
    "present.{}.key",
    "present_key_values.{}.key",
    "present_key.{}",
    "present_key_{}",
    "present_{}_key",
];
const PRESENT_VALUE: &[&str] = &[
    "present.{}.value",
    "present_key_values.{}.value",
    "present_value.{}",
    "present_value_{}",
    "present_{}_value",
];

/// Resolves every I/O key (pure: tested without files).
pub fn resolve_io(
    inputs: &[Port],
    outputs: &[Port],
    sidecar: Option<&Sidecar>,
    genai: Option<&GenaiConfig>,
    sidecar_name: &str,
) -> std::result::Result<IoMap, String> {
    let sio = sidecar.map(|s| s.io.clone()).unwrap_or_default();
    let gin = genai
        .map(|g| g.model.decoder.inputs.clone())
        .unwrap_or_default();
    let gout = genai
        .map(|g| g.model.decoder.outputs.clone())
        .unwrap_or_default();
    let declare = |key: &str| format!("declare io.{key} in {sidecar_name}");
    // The port a key names explicitly: the sidecar first, then genai_config.json. `None` when
    // neither declares it (then it is derived); an error when the named port does not exist.
    let declared = |s: &Option<String>, g: &Option<String>, kind: &str, key: &str| {
        let (name, from) = match (s, g) {
            (Some(n), _) => (n, "the sidecar"),
            (None, Some(n)) => (n, "genai_config.json"),
            (None, None) => return Ok(None),
        };
        let ports = if kind == "input" { inputs } else { outputs };
        if ports.iter().any(|p| &p.name == name) {
            Ok(Some(name.clone()))
        } else {
            Err(format!(
                "io.{key} from {from} names {kind} {name:?}, which the graph does not have (graph {kind}s: {})",
                list(ports.iter().map(|p| p.name.as_str()))
            ))
        }
    };
    let by_name = |ports: &[Port], name: &str| {
        ports
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.name.clone())
    };

    // Layer patterns: explicit (sidecar `{layer}`, genai `%d`) or derived.
    let pattern = |s: &Option<String>, g: &Option<String>| -> Option<(String, &'static str)> {
        s.as_ref()
            .map(|p| (p.replace("{layer}", "{}"), "the sidecar"))
            .or_else(|| {
                g.as_ref()
                    .map(|p| (p.replace("%d", "{}"), "genai_config.json"))
            })
    };
    let kv = |explicit: Option<(String, &str)>, templates: &[&str], ports: &[Port], key: &str| {
        match explicit {
            Some((p, from)) => {
                let n = count_layers(ports, &p);
                if n == 0 {
                    Err(format!(
                        "io.{key} pattern {p:?} from {from} matches no graph port"
                    ))
                } else {
                    Ok(p)
                }
            }
            None => {
                let hits: Vec<&&str> = templates
                    .iter()
                    .filter(|t| count_layers(ports, t) > 0)
                    .collect();
                match hits.as_slice() {
                    [one] => Ok(one.to_string()),
                    [] => Err(format!(
                        "cannot resolve io.{key}: no port matches a known KV naming ({}); {}",
                        templates.join(", ").replace("{}", "N"),
                        declare(key)
                    )),
                    many => Err(format!(
                        "cannot resolve io.{key} from port names: {} patterns match [{}]; {}",
                        many.len(),
                        many.iter()
                            .map(|t| t.replace("{}", "N"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        declare(key)
                    )),
                }
            }
        }
    };
    let pk = kv(
        pattern(&sio.past_key, &gin.past_key_names),
        PAST_KEY,
        inputs,
        "past_key",
    )?;
    let pv = kv(
        pattern(&sio.past_value, &gin.past_value_names),
        PAST_VALUE,
        inputs,
        "past_value",
    )?;
    let ok = kv(
        pattern(&sio.present_key, &gout.present_key_names),
        PRESENT_KEY,
        outputs,
        "present_key",
    )?;
    let ov = kv(
        pattern(&sio.present_value, &gout.present_value_names),
        PRESENT_VALUE,
        outputs,
        "present_value",
    )?;
    let n_layers = count_layers(inputs, &pk);
    for (p, ports, key) in [
        (&pv, inputs, "past_value"),
        (&ok, outputs, "present_key"),
        (&ov, outputs, "present_value"),
    ] {
        let n = count_layers(ports, p);
        if n != n_layers {
            return Err(format!(
                "io.{key} pattern {:?} matches {n} layers but io.past_key matches {n_layers}",
                p.replace("{}", "N")
            ));
        }
    }
    if let Some(declared) = sidecar.and_then(|s| s.num_layers)
        && declared != n_layers
    {
        return Err(format!(
            "num_layers is {declared} in {sidecar_name} but the graph has {n_layers} KV layers"
        ));
    }
    let layers: Vec<LayerIo> = (0..n_layers)
        .map(|i| LayerIo {
            past_key: pk.replace("{}", &i.to_string()),
            past_value: pv.replace("{}", &i.to_string()),
            present_key: ok.replace("{}", &i.to_string()),
            present_value: ov.replace("{}", &i.to_string()),
        })
        .collect();
    let kv_names: Vec<&str> = layers
        .iter()
        .flat_map(|l| {
            [
                l.past_key.as_str(),
                l.past_value.as_str(),
                l.present_key.as_str(),
                l.present_value.as_str(),
            ]
        })
        .collect();

    let mask = declared(
        &sio.attention_mask,
        &gin.attention_mask,
        "input",
        "attention_mask",
    )?
    .or_else(|| by_name(inputs, "attention_mask"));
    let position = declared(
        &sio.position_ids,
        &gin.position_ids,
        "input",
        "position_ids",
    )?
    .or_else(|| by_name(inputs, "position_ids"));
    let token_input = match declared(&sio.token_input, &gin.input_ids, "input", "token_input")? {
        Some(n) => n,
        None => match inputs.iter().find(|p| p.name == "input_ids") {
            Some(p) => p.name.clone(),
            None => {
                // By tensor shape: integer inputs of rank 2 not already claimed.
                let cands: Vec<&str> = inputs
                    .iter()
                    .filter(|p| !kv_names.contains(&p.name.as_str()))
                    .filter(|p| {
                        Some(&p.name) != position.as_ref() && Some(&p.name) != mask.as_ref()
                    })
                    .filter(|p| matches!(p.dtype, Some(DType::I64 | DType::I32)))
                    .filter(|p| p.shape.as_ref().is_none_or(|s| s.len() == 2))
                    .map(|p| p.name.as_str())
                    .collect();
                match cands.as_slice() {
                    [one] => one.to_string(),
                    [] => {
                        return Err(format!(
                            "cannot resolve io.token_input: no integer input of rank 2; {}",
                            declare("token_input")
                        ));
                    }
                    many => {
                        return Err(format!(
                            "cannot resolve io.token_input from tensor shape: {} ports match [{}]; {}",
                            many.len(),
                            many.join(", "),
                            declare("token_input")
                        ));
                    }
                }
            }
        },
    };
    let logits = match declared(&sio.logits, &gout.logits, "output", "logits")? {
        Some(n) => n,
        None => match outputs.iter().find(|p| p.name == "logits") {
            Some(p) => p.name.clone(),
            None => {
                let cands: Vec<&str> = outputs
                    .iter()
                    .filter(|p| !kv_names.contains(&p.name.as_str()))
                    .filter(|p| p.dtype.is_some_and(DType::is_float))
                    .filter(|p| p.shape.as_ref().is_none_or(|s| s.len() == 3))
                    .map(|p| p.name.as_str())
                    .collect();
                match cands.as_slice() {
                    [one] => one.to_string(),
                    [] => {
                        return Err(format!(
                            "cannot resolve io.logits: no float output of rank 3; {}",
                            declare("logits")
                        ));
                    }
                    many => {
                        return Err(format!(
                            "cannot resolve io.logits from tensor shape: {} ports match [{}]; {}",
                            many.len(),
                            many.join(", "),
                            declare("logits")
                        ));
                    }
                }
            }
        },
    };

    // KV geometry from the first past-key port: [batch, kv_heads, past_seq, head_dim].
    let first = layers.first().ok_or("the graph has no KV-cache ports")?;
    let port = inputs
        .iter()
        .find(|p| p.name == first.past_key)
        .ok_or("past key port vanished")?;
    let fixed = |i: usize| match port.shape.as_ref().and_then(|s| s.get(i)) {
        Some(Dim::Fixed(d)) => Some(*d),
        _ => None,
    };
    let decoder = genai.map(|g| &g.model.decoder);
    let kv_heads = fixed(1).or(decoder.and_then(|d| d.num_key_value_heads)).ok_or_else(|| {
        format!("cannot tell the KV head count: port {} has no fixed dim 1 and genai_config.json gives no num_key_value_heads", port.name)
    })?;
    let head_dim = fixed(3).or(decoder.and_then(|d| d.head_size)).ok_or_else(|| {
        format!("cannot tell the head size: port {} has no fixed dim 3 and genai_config.json gives no head_size", port.name)
    })?;
    let kv_dtype = port
        .dtype
        .filter(|d| d.is_float())
        .ok_or_else(|| format!("past key port {} must be f32, f16 or bf16", port.name))?;

    Ok(IoMap {
        token_input,
        attention_mask: mask,
        position_ids: position,
        logits,
        layers,
        kv_heads,
        head_dim,
        kv_dtype,
    })
}

/// Number of consecutive layers 0, 1, … for which `template` (with `{}`) names a port.
fn count_layers(ports: &[Port], template: &str) -> usize {
    if !template.contains("{}") {
        return 0;
    }
    (0..)
        .take_while(|i| {
            ports
                .iter()
                .any(|p| p.name == template.replace("{}", &i.to_string()))
        })
        .count()
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}
