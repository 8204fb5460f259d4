//! Element types the engine stores and computes in, and their mapping to ONNX `DataType` codes.

use std::fmt;

/// An element type of a [`crate::Tensor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
    I32,
    U8,
    Bool,
}

impl DType {
    /// Maps an ONNX `TensorProto.DataType` code; `None` for types the engine does not store.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            16 => DType::BF16,
            _ => return None,
        })
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn to_onnx(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::BF16 => 16,
        }
    }

    /// Size of one element in ONNX's raw little-endian encoding.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// Parses `f32`, `f16`, `bf16` (and the ONNX-style spellings `float`, `float16`, `bfloat16`).
    pub fn parse_float(s: &str) -> Option<DType> {
        match s {
            "f32" | "float" | "float32" | "fp32" => Some(DType::F32),
            "f16" | "float16" | "fp16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }
}

/// Human name of an ONNX data type code, for error messages about types we do not support.
pub fn onnx_type_name(code: i32) -> String {
    match onnx_pb::tensor_proto::DataType::try_from(code) {
        Ok(t) => format!("{} ({code})", t.as_str_name()),
        Err(_) => format!("unknown ({code})"),
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
