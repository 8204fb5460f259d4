//! `engine`: a native ONNX decoder inference engine.
//!
//! Layers, bottom up: [`tensor`], [`dtype`], [`error`], [`cache`] and [`clock`] (low level: they
//! import nothing above them) → [`backend`] (the primitive trait, the CPU kernels, the CUDA
//! device; it imports only the low-level modules) → [`onnx`] (model loading) → [`ops`] (ONNX op
//! semantics lowered onto backend primitives, one file per op family, one registry of supported
//! ops) → [`exec`] (planning and running a graph) → [`package`] (model directories and I/O
//! resolution) → [`session`] (prefill + KV-cache decode over the [`kv_cache`] page pool),
//! [`sampling`] (the logits-processor chain and the seeded sampler that picks each token) and
//! [`text`] (tokenizer, chat template) → [`decode`] (the greedy decoders `engine profile` times:
//! the CPU session, the fused CUDA llama decoder and the generic executor on CUDA) → [`profile`]
//! and the `engine` binary. [`bandwidth`] (the host's read-bandwidth probe) sits on
//! `backend::cpu`. [`tiny`] builds the deterministic test model; [`llama`], [`gguf`] and
//! [`convert`] build and provision real ones. The `pub mod` lines below are alphabetical; this
//! list is the order.

pub mod backend;
pub mod bandwidth;
pub mod cache;
pub mod clock;
pub mod convert;
pub mod decode;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod gguf;
pub mod kv_cache;
pub mod llama;
pub mod onnx;
pub mod ops;
pub mod package;
pub mod profile;
pub mod sampling;
pub mod session;
pub mod tensor;
pub mod text;
pub mod tiny;

pub use backend::Backend;
pub use backend::cpu::CpuBackend;
pub use dtype::DType;
pub use error::{Error, Result};
pub use tensor::{Data, Tensor};

/// Hex sha256 of a file.
pub fn sha256_file(path: &std::path::Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
