//! Model package files and the oracle's own (simple) version of the I/O-resolution contract
//! (ARCHITECTURE.md, Contracts): for every I/O key, the sidecar `inference_metadata.{yaml,yml,json}` (`io.*`, layer
//! patterns with `{layer}`) first, then `genai_config.json` (`model.decoder.inputs/outputs`,
//! patterns with `%d`), then the conventional port names (`input_ids`, `attention_mask`,
//! `position_ids`, `logits`, `past_key_values.N.key/value`, `present.N.key/value`). Also the
//! end-of-sequence ids and the package hash.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::load::Port;
use crate::tensor::DType;

/// Sidecar names, in lookup order.
pub const SIDECAR_NAMES: [&str; 3] = [
    "inference_metadata.yaml",
    "inference_metadata.yml",
    "inference_metadata.json",
];

/// `inference_metadata.{yaml,yml,json}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    #[serde(default)]
    pub io: SidecarIo,
    #[serde(default)]
    pub eos_token_ids: Option<Vec<u32>>,
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

/// The parts of `genai_config.json` the oracle reads (everything else is ignored).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Genai {
    #[serde(default)]
    pub model: GenaiModel,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiModel {
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub decoder: GenaiDecoder,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenaiDecoder {
    #[serde(default)]
    pub filename: Option<String>,
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

/// Reads the first sidecar that exists. One that exists but does not parse is an error.
pub fn read_sidecar(dir: &Path) -> Result<Option<(PathBuf, Sidecar)>> {
    for name in SIDECAR_NAMES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let parsed: std::result::Result<Sidecar, String> = if name.ends_with(".json") {
            serde_json::from_str(&text).map_err(|e| e.to_string())
        } else if text.trim().is_empty() {
            Err("the file is empty".into())
        } else {
            serde_saphyr::from_str(&text).map_err(|e| e.to_string())
        };
        return match parsed {
            Ok(s) => Ok(Some((path, s))),
            Err(e) => Err(Error::package(&path, format!("malformed sidecar: {e}"))),
        };
    }
    Ok(None)
}

/// Reads `genai_config.json` if present.
pub fn read_genai(dir: &Path) -> Result<Option<Genai>> {
    let path = dir.join("genai_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::package(&path, format!("malformed genai_config.json: {e}")))
}

/// Names of one layer's KV ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerNames {
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
}

/// The resolved decoder I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoNames {
    pub token_input: String,
    pub attention_mask: Option<String>,
    pub position_ids: Option<String>,
    pub logits: String,
    pub layers: Vec<LayerNames>,
    /// KV heads, head size and element type of the cache (`[batch, kv_heads, seq, head_dim]`).
    pub kv_heads: usize,
    pub head_dim: usize,
    pub kv_dtype: DType,
}

/// Resolves the decoder I/O (pure: tested without files). `sidecar_name` is used in advice.
pub fn resolve_io(
    inputs: &[Port],
    outputs: &[Port],
    sidecar: Option<&Sidecar>,
    genai: Option<&Genai>,
    sidecar_name: &str,
) -> std::result::Result<IoNames, String> {
    let s = sidecar.map(|s| s.io.clone()).unwrap_or_default();
    let d = genai.map(|g| g.model.decoder.clone()).unwrap_or_default();
    let has = |ports: &[Port], name: &str| ports.iter().any(|p| p.name == name);
    let all = |ports: &[Port]| {
        ports
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };

    // A single port: explicit (sidecar, then genai) must exist; the default may be absent.
    let port = |key: &str,
                ports: &[Port],
                side: &Option<String>,
                genai_name: &Option<String>,
                default: &str,
                required: bool| {
        let (name, from) = match (side, genai_name) {
            (Some(n), _) => (n.clone(), Some(sidecar_name)),
            (None, Some(n)) => (n.clone(), Some("genai_config.json")),
            _ => (default.to_string(), None),
        };
        if has(ports, &name) {
            return Ok(Some(name));
        }
        match from {
            Some(from) => Err(format!(
                "io.{key} from {from} names port {name:?}, which the graph does not have (ports: {})",
                all(ports)
            )),
            None if required => Err(format!(
                "cannot resolve io.{key}: the graph has no port {name:?} (ports: {}); declare io.{key} in {sidecar_name}",
                all(ports)
            )),
            None => Ok(None),
        }
    };
    let token_input = port(
        "token_input",
        inputs,
        &s.token_input,
        &d.inputs.input_ids,
        "input_ids",
        true,
    )?;
    let attention_mask = port(
        "attention_mask",
        inputs,
        &s.attention_mask,
        &d.inputs.attention_mask,
        "attention_mask",
        false,
    )?;
    let position_ids = port(
        "position_ids",
        inputs,
        &s.position_ids,
        &d.inputs.position_ids,
        "position_ids",
        false,
    )?;
    let logits = port(
        "logits",
        outputs,
        &s.logits,
        &d.outputs.logits,
        "logits",
        true,
    )?;

    // Layer patterns, normalised to `{}` for the layer index.
    let pattern = |key: &str,
                   ports: &[Port],
                   side: &Option<String>,
                   genai_name: &Option<String>,
                   default: &str| {
        let p = match (side, genai_name) {
            (Some(p), _) => p.replace("{layer}", "{}"),
            (None, Some(p)) => p.replace("%d", "{}"),
            _ => default.to_string(),
        };
        let n = (0..)
            .take_while(|i| has(ports, &p.replace("{}", &i.to_string())))
            .count();
        if n == 0 {
            return Err(format!(
                "cannot resolve io.{key}: no port matches {:?} (ports: {}); declare io.{key} in {sidecar_name}",
                p.replace("{}", "N"),
                all(ports)
            ));
        }
        Ok((p, n))
    };
    let (pk, n) = pattern(
        "past_key",
        inputs,
        &s.past_key,
        &d.inputs.past_key_names,
        "past_key_values.{}.key",
    )?;
    let (pv, nv) = pattern(
        "past_value",
        inputs,
        &s.past_value,
        &d.inputs.past_value_names,
        "past_key_values.{}.value",
    )?;
    let (ok, nk) = pattern(
        "present_key",
        outputs,
        &s.present_key,
        &d.outputs.present_key_names,
        "present.{}.key",
    )?;
    let (ov, no) = pattern(
        "present_value",
        outputs,
        &s.present_value,
        &d.outputs.present_value_names,
        "present.{}.value",
    )?;
    if [nv, nk, no] != [n; 3] {
        return Err(format!(
            "the KV port patterns disagree on the layer count: past key {n}, past value {nv}, present key {nk}, present value {no}"
        ));
    }
    if let Some(declared) = sidecar.and_then(|s| s.num_layers)
        && declared != n
    {
        return Err(format!(
            "num_layers is {declared} in {sidecar_name} but the graph has {n} KV layers"
        ));
    }
    let layers = (0..n)
        .map(|i| {
            let at = |p: &str| p.replace("{}", &i.to_string());
            LayerNames {
                past_key: at(&pk),
                past_value: at(&pv),
                present_key: at(&ok),
                present_value: at(&ov),
            }
        })
        .collect::<Vec<_>>();

    // Cache geometry from the first past-key port, else genai_config.
    let first = inputs
        .iter()
        .find(|p| p.name == layers[0].past_key)
        .ok_or("past key port vanished")?;
    let fixed = |i: usize| {
        first
            .dims
            .as_ref()
            .and_then(|d| d.get(i).copied().flatten())
    };
    let kv_heads = fixed(1).or(d.num_key_value_heads).ok_or_else(|| {
        format!("cannot tell the KV head count: port {} has no fixed dim 1 and genai_config.json gives no num_key_value_heads", first.name)
    })?;
    let head_dim = fixed(3).or(d.head_size).ok_or_else(|| {
        format!("cannot tell the head size: port {} has no fixed dim 3 and genai_config.json gives no head_size", first.name)
    })?;
    let kv_dtype = match DType::from_onnx(first.elem_type) {
        Some(t) if t.is_float() => t,
        None if first.elem_type == 0 => DType::F32,
        _ => {
            return Err(format!(
                "past key port {} must be a float tensor",
                first.name
            ));
        }
    };
    Ok(IoNames {
        token_input: token_input.ok_or("token input vanished")?,
        attention_mask,
        position_ids,
        logits: logits.ok_or("logits vanished")?,
        layers,
        kv_heads,
        head_dim,
        kv_dtype,
    })
}

/// End-of-sequence ids: the sidecar's `eos_token_ids`, else genai_config's `model.eos_token_id`
/// (a number or a list), else `None` (the caller may then ask the tokenizer config).
pub fn eos_from_configs(
    sidecar: Option<&Sidecar>,
    genai: Option<&Genai>,
    genai_path: &Path,
) -> Result<Option<Vec<u32>>> {
    if let Some(ids) = sidecar.and_then(|s| s.eos_token_ids.clone()) {
        return Ok(Some(ids));
    }
    let bad = || {
        Error::package(
            genai_path,
            "model.eos_token_id must be a token id or a list of token ids",
        )
    };
    let as_id = |v: &serde_json::Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
    match genai.and_then(|g| g.model.eos_token_id.as_ref()) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|v| as_id(v).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(v) => as_id(v).map(|i| Some(vec![i])).ok_or_else(bad),
    }
}

/// The package hash recorded in `oracle-decode/1` (and by the engine and the goldens): sha256 over
/// the model file followed by every external data file its initializers reference, in sorted
/// file-name order (`external_files` relative to the model's directory).
pub fn model_sha256(model_path: &Path, external_files: &[String]) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let dir = model_path.parent().unwrap_or(Path::new("."));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let files =
        std::iter::once(model_path.to_path_buf()).chain(external_files.iter().map(|f| dir.join(f)));
    for path in files {
        let mut f = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::io(&path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: &str, elem: i32, dims: Option<Vec<Option<usize>>>) -> Port {
        Port {
            name: name.into(),
            elem_type: elem,
            dims,
        }
    }

    fn llama_ports(prefix_in: &str, prefix_out: &str) -> (Vec<Port>, Vec<Port>) {
        let kv = Some(vec![None, Some(2), None, Some(8)]);
        let mut ins = vec![port("input_ids", 7, None), port("attention_mask", 7, None)];
        let mut outs = vec![port("logits", 1, None)];
        for l in 0..2 {
            ins.push(port(&format!("{prefix_in}{l}.key"), 1, kv.clone()));
            ins.push(port(&format!("{prefix_in}{l}.value"), 1, kv.clone()));
            outs.push(port(&format!("{prefix_out}{l}.key"), 1, kv.clone()));
            outs.push(port(&format!("{prefix_out}{l}.value"), 1, kv.clone()));
        }
        (ins, outs)
    }

    #[test]
    fn default_names_resolve() {
        let (ins, outs) = llama_ports("past_key_values.", "present.");
        let io = resolve_io(&ins, &outs, None, None, "inference_metadata.yaml").unwrap();
        assert_eq!(io.token_input, "input_ids");
        assert_eq!(io.attention_mask.as_deref(), Some("attention_mask"));
        assert_eq!(io.position_ids, None, "optional and absent");
        assert_eq!(io.layers.len(), 2);
        assert_eq!(io.layers[1].present_value, "present.1.value");
        assert_eq!((io.kv_heads, io.head_dim, io.kv_dtype), (2, 8, DType::F32));
    }

    #[test]
    fn sidecar_beats_genai_beats_defaults() {
        let (ins, outs) = llama_ports("cache_in.", "cache_out.");
        let err = resolve_io(&ins, &outs, None, None, "inference_metadata.yaml").unwrap_err();
        assert!(
            err.contains("declare io.past_key in inference_metadata.yaml"),
            "{err}"
        );
        let genai: Genai = serde_json::from_value(serde_json::json!({"model": {"decoder": {
            "inputs": {"past_key_names": "cache_in.%d.key", "past_value_names": "cache_in.%d.value"},
            "outputs": {"present_key_names": "cache_out.%d.key", "present_value_names": "cache_out.%d.value"}}}}))
        .unwrap();
        let io = resolve_io(&ins, &outs, None, Some(&genai), "x").unwrap();
        assert_eq!(io.layers[0].past_key, "cache_in.0.key");
        let side: Sidecar =
            serde_saphyr::from_str("io:\n  past_key: \"cache_in.{layer}.value\"\n  logits: nope\n")
                .unwrap();
        let err = resolve_io(
            &ins,
            &outs,
            Some(&side),
            Some(&genai),
            "inference_metadata.yaml",
        )
        .unwrap_err();
        assert!(
            err.contains("io.logits from inference_metadata.yaml"),
            "{err}"
        );
    }

    #[test]
    fn eos_ids_from_configs() {
        let g: Genai =
            serde_json::from_value(serde_json::json!({"model": {"eos_token_id": [2, 7]}})).unwrap();
        assert_eq!(
            eos_from_configs(None, Some(&g), Path::new("g")).unwrap(),
            Some(vec![2, 7])
        );
        let s = Sidecar {
            eos_token_ids: Some(vec![9]),
            ..Default::default()
        };
        assert_eq!(
            eos_from_configs(Some(&s), Some(&g), Path::new("g")).unwrap(),
            Some(vec![9])
        );
        let bad: Genai =
            serde_json::from_value(serde_json::json!({"model": {"eos_token_id": "x"}})).unwrap();
        assert!(eos_from_configs(None, Some(&bad), Path::new("g")).is_err());
    }
}
