//! The engine's error type. Messages are lowercase and say where: file, node, op, port.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a valid ONNX model (truncated or corrupt protobuf): {source}", path.display())]
    Decode {
        path: PathBuf,
        #[source]
        source: prost::DecodeError,
    },
    #[error("{}: initializer {tensor}: {message}", path.display())]
    Initializer {
        path: PathBuf,
        tensor: String,
        message: String,
    },
    #[error("node {node} ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },
    #[error("{}: unsupported operators (domain, op_type): {}", path.display(), list_ops(ops))]
    Unsupported {
        path: PathBuf,
        ops: Vec<(String, String)>,
    },
    #[error("{}: {message}", path.display())]
    Package { path: PathBuf, message: String },
    #[error("{0}")]
    Msg(String),
}

fn list_ops(ops: &[(String, String)]) -> String {
    ops.iter()
        .map(|(d, o)| format!("({}, {o})", if d.is_empty() { "ai.onnx" } else { d }))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    pub fn msg(m: impl Into<String>) -> Error {
        Error::Msg(m.into())
    }

    pub fn package(path: impl Into<PathBuf>, message: impl Into<String>) -> Error {
        Error::Package {
            path: path.into(),
            message: message.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for op kernels: `bail!("...")` returns an [`Error::Msg`].
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::msg(format!($($arg)*))) };
}
