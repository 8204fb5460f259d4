//! The CUDA backend (feature `cuda`).

pub use super_stub::*;

#[path = "../cuda_stub.rs"]
mod super_stub;
