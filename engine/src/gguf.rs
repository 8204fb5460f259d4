//! A reader for GGUF files (llama.cpp's model format, version 2 and 3): metadata key/values,
//! tensor directory, and dequantisation of F32, F16, Q8_0 and Q4_1 tensors to f32.
//!
//! Format reference: ggml's `docs/gguf.md`. Block layouts (32 elements per block):
//! Q8_0 = f16 scale `d` + 32 × i8 (`x = d·q`); Q4_1 = f16 `d`, f16 `m` + 16 bytes of nibbles
//! (low nibbles are elements 0-15, high nibbles 16-31; `x = d·q + m`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use half::f16;

use crate::error::{Error, Result};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) if *v >= 0 => Some(*v as u64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types this reader can dequantise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_1,
    Q8_0,
}

impl GgmlType {
    fn from_code(code: u32) -> Option<GgmlType> {
        Some(match code {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            _ => return None,
        })
    }

    /// (elements per block, bytes per block)
    fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 => (1, 2),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q8_0 => (32, 34),
        }
    }
}

/// One entry of the tensor directory.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` varies fastest (a PyTorch `[out, in]` weight is `[in, out]` here).
    pub dims: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// Row-major shape (slowest dim first), as numpy would show it.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }

    fn n_bytes(&self) -> usize {
        let (per, bytes) = self.ggml_type.block();
        self.numel().div_ceil(per) * bytes
    }
}

/// An open GGUF file.
#[derive(Debug)]
pub struct Gguf {
    path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    data_start: u64,
    file_len: u64,
}

struct Reader<'a> {
    file: &'a mut File,
    path: &'a Path,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>> {
        if n > 1 << 30 {
            return Err(self.err(format!("implausible length {n} (corrupt header?)")));
        }
        let mut b = vec![0u8; n];
        self.file
            .read_exact(&mut b)
            .map_err(|e| self.err(format!("truncated header: {e}")))?;
        Ok(b)
    }

    fn err(&self, m: String) -> Error {
        Error::package(self.path, m)
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.u64()? as usize;
        let b = self.bytes(n)?;
        String::from_utf8(b).map_err(|_| self.err("a string is not valid UTF-8".into()))
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        let fixed = |r: &mut Self, n: usize| r.bytes(n);
        Ok(match ty {
            0 => Value::U64(fixed(self, 1)?[0] as u64),
            1 => Value::I64(fixed(self, 1)?[0] as i8 as i64),
            2 => {
                let b = fixed(self, 2)?;
                Value::U64(u16::from_le_bytes([b[0], b[1]]) as u64)
            }
            3 => {
                let b = fixed(self, 2)?;
                Value::I64(i16::from_le_bytes([b[0], b[1]]) as i64)
            }
            4 => Value::U64(self.u32()? as u64),
            5 => Value::I64(self.u32()? as i32 as i64),
            6 => Value::F64(f32::from_bits(self.u32()?) as f64),
            7 => Value::Bool(fixed(self, 1)?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(self.err("arrays nested too deep".into()));
                }
                let ety = self.u32()?;
                let n = self.u64()? as usize;
                if n > 10_000_000 {
                    return Err(self.err(format!("implausible array length {n}")));
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            other => return Err(self.err(format!("unknown metadata value type {other}"))),
        })
    }
}

impl Gguf {
    /// Reads the header, metadata and tensor directory.
    pub fn open(path: &Path) -> Result<Gguf> {
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut r = Reader {
            file: &mut file,
            path,
        };
        let magic = r.bytes(4)?;
        if magic != b"GGUF" {
            return Err(r.err("not a GGUF file (bad magic)".into()));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(r.err(format!(
                "unsupported GGUF version {version} (2 and 3 are supported)"
            )));
        }
        let n_tensors = r.u64()?;
        let n_kv = r.u64()?;
        if n_tensors > 1_000_000 || n_kv > 1_000_000 {
            return Err(r.err("implausible header counts (corrupt file?)".into()));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let v = r.value(ty, 0)?;
            metadata.insert(key, v);
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string()?;
            let nd = r.u32()? as usize;
            if nd > 8 {
                return Err(r.err(format!("tensor {name}: {nd} dims")));
            }
            let mut dims = Vec::with_capacity(nd);
            for _ in 0..nd {
                dims.push(r.u64()? as usize);
            }
            let code = r.u32()?;
            let ggml_type = GgmlType::from_code(code).ok_or_else(|| {
                r.err(format!(
                    "tensor {name}: ggml type {code} is not supported (F32, F16, Q4_1, Q8_0 are)"
                ))
            })?;
            let offset = r.u64()?;
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        let header_end = file.stream_position().map_err(|e| Error::io(path, e))?;
        let align = metadata
            .get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(32)
            .max(1);
        let data_start = header_end.div_ceil(align) * align;
        let g = Gguf {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            data_start,
            file_len,
        };
        for t in &g.tensors {
            let end = g.data_start + t.offset + t.n_bytes() as u64;
            if end > file_len {
                return Err(Error::package(
                    path,
                    format!(
                        "tensor {} ends at byte {end} but the file has {file_len} (truncated?)",
                        t.name
                    ),
                ));
            }
        }
        Ok(g)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self, key: &str) -> Result<&Value> {
        self.metadata
            .get(key)
            .ok_or_else(|| Error::package(&self.path, format!("metadata key {key} is missing")))
    }

    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get(key)?.as_u64().ok_or_else(|| {
            Error::package(&self.path, format!("metadata key {key} is not an integer"))
        })
    }

    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.get(key)?.as_f64().ok_or_else(|| {
            Error::package(&self.path, format!("metadata key {key} is not a number"))
        })
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.get(key)?.as_str().ok_or_else(|| {
            Error::package(&self.path, format!("metadata key {key} is not a string"))
        })
    }

    /// String array metadata (tokens, merges).
    pub fn get_strings(&self, key: &str) -> Result<Vec<&str>> {
        let a = self.get(key)?.as_array().ok_or_else(|| {
            Error::package(&self.path, format!("metadata key {key} is not an array"))
        })?;
        a.iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    Error::package(&self.path, format!("metadata key {key}: not all strings"))
                })
            })
            .collect()
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads and dequantises a tensor to f32 in ggml element order.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let t = self
            .tensor(name)
            .ok_or_else(|| Error::package(&self.path, format!("tensor {name} is missing")))?;
        let mut file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let start = self.data_start + t.offset;
        let n = t.n_bytes();
        if start + n as u64 > self.file_len {
            return Err(Error::package(
                &self.path,
                format!("tensor {name} runs past the end of the file"),
            ));
        }
        file.seek(SeekFrom::Start(start))
            .map_err(|e| Error::io(&self.path, e))?;
        let mut raw = vec![0u8; n];
        file.read_exact(&mut raw)
            .map_err(|e| Error::io(&self.path, e))?;
        let mut out = dequantize(t.ggml_type, &raw);
        out.truncate(t.numel());
        Ok(out)
    }
}

/// Dequantises whole blocks of `raw`.
pub fn dequantize(ty: GgmlType, raw: &[u8]) -> Vec<f32> {
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    match ty {
        GgmlType::F32 => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        GgmlType::F16 => raw.chunks_exact(2).map(h).collect(),
        GgmlType::Q8_0 => {
            let mut out = Vec::with_capacity(raw.len() / 34 * 32);
            for block in raw.chunks_exact(34) {
                let d = h(&block[0..2]);
                out.extend(block[2..].iter().map(|&q| q as i8 as f32 * d));
            }
            out
        }
        GgmlType::Q4_1 => {
            let mut out = Vec::with_capacity(raw.len() / 20 * 32);
            for block in raw.chunks_exact(20) {
                let d = h(&block[0..2]);
                let m = h(&block[2..4]);
                let qs = &block[4..20];
                out.extend(qs.iter().map(|&q| (q & 0x0F) as f32 * d + m));
                out.extend(qs.iter().map(|&q| (q >> 4) as f32 * d + m));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_block() {
        let mut b = f16::from_f32(0.5).to_le_bytes().to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let v = dequantize(GgmlType::Q8_0, &b);
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], -8.0);
        assert_eq!(v[16], 0.0);
        assert_eq!(v[31], 7.5);
    }

    #[test]
    fn q4_1_block_low_then_high_nibbles() {
        let mut b = f16::from_f32(2.0).to_le_bytes().to_vec();
        b.extend(f16::from_f32(-1.0).to_le_bytes());
        b.extend((0..16).map(|i| (i as u8) | (((15 - i) as u8) << 4)));
        let v = dequantize(GgmlType::Q4_1, &b);
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], -1.0); // 0*2 - 1
        assert_eq!(v[15], 29.0); // 15*2 - 1
        assert_eq!(v[16], 29.0); // high nibble of byte 0 = 15
        assert_eq!(v[31], -1.0);
    }
}
