//! The oracle's error type: every message says where (file, tensor, node, op) in lowercase,
//! without a trailing period.

use std::path::{Path, PathBuf};

/// Everything that can go wrong loading a package or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot decode the ONNX protobuf: {source}", path.display())]
    Decode {
        path: PathBuf,
        source: prost::DecodeError,
    },
    /// A problem with a file of the model package (model, sidecar, config, tokenizer).
    #[error("{}: {message}", path.display())]
    Package { path: PathBuf, message: String },
    #[error("{}: initializer {tensor:?}: {message}", path.display())]
    Initializer {
        path: PathBuf,
        tensor: String,
        message: String,
    },
    /// A node of a loaded graph failed.
    #[error("node {node} ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },
    /// An op failed outside a graph ([`crate::run_op`]).
    #[error("{op}: {message}")]
    Op { op: String, message: String },
    #[error("{0}")]
    Msg(String),
}

impl Error {
    pub fn msg(m: impl Into<String>) -> Error {
        Error::Msg(m.into())
    }

    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn package(path: &Path, message: impl Into<String>) -> Error {
        Error::Package {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// The message without the op prefix, so a caller can re-wrap it with the node name.
    pub(crate) fn into_message(self) -> String {
        match self {
            Error::Op { message, .. } | Error::Msg(message) => message,
            other => other.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `return Err(Error::Msg(format!(..)))`.
#[macro_export]
#[doc(hidden)]
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::error::Error::Msg(format!($($t)*)))
    };
}
