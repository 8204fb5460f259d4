//! `engine`: a native ONNX decoder inference engine.
//!
//! Layers, bottom up: [`tensor`] (host tensors) → [`backend`] (the primitive trait and the CPU
//! kernels) → [`ops`] (ONNX op semantics lowered onto backend primitives) → [`graph`] (model
//! loading and the executor) → [`package`] (model directories and I/O resolution) →
//! [`session`] (prefill + KV-cache decode) → the `engine` binary.

pub mod backend;
pub mod dtype;
pub mod error;
pub mod tensor;

pub use backend::Backend;
pub use backend::cpu::CpuBackend;
pub use dtype::DType;
pub use error::{Error, Result};
pub use tensor::{Data, Tensor};
