//! `oracles`: the independent, naive fp32 reference the gate compares the engine against.
//!
//! It loads an ONNX model package with its own loader ([`load`]), runs the graph node by node
//! with its own runner ([`graph`]) and one plain function per ONNX op ([`ops`], named like the op
//! in snake_case), and greedily decodes with the KV cache ([`decode`]) to produce the
//! `oracle-decode/1` JSON (the contract is written out in ARCHITECTURE.md, Contracts).
//! Everything is written to be obviously right rather than fast: plain loops, f64 accumulation
//! in reductions, matmul, softmax and normalisations.
//!
//! The oracle shares no code with the engine: it depends on `onnx-pb` (the generated protobuf
//! types) and general crates only, so an engine bug cannot hide in shared code (ARCHITECTURE.md,
//! Invariants).

pub mod compare;
pub mod decode;
pub mod error;
pub mod graph;
pub mod load;
pub mod ops;
pub mod package;
pub mod tensor;
pub mod text;

pub use decode::{Decode, KvCache, Oracle, Step};
pub use error::{Error, Result};
pub use ops::run_op;
pub use tensor::{DType, Data, OTensor};
