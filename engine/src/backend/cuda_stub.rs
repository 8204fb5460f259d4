//! Stand-in for the CUDA backend when the `cuda` feature is off: the same names, each failing
//! with one clear error instead of the code being absent (invariant 3: CUDA is optional).

use crate::error::{Error, Result};
use crate::package::Package;
use crate::profile::{DecodeRun, Decoder};

/// The error every CUDA entry point gives in a build without the feature.
pub const NOT_BUILT: &str = "engine was built without the `cuda` feature (rebuild with `cargo build --release -p engine --features cuda`)";

/// Always fails: this build has no CUDA code.
pub fn check_available() -> Result<()> {
    Err(Error::msg(NOT_BUILT))
}

/// The fused llama decoder of CUDA builds; never constructed here.
#[derive(Debug)]
pub struct LlamaDecoder(());

impl LlamaDecoder {
    pub fn new(_package: &Package, _cuda_graph: bool) -> Result<LlamaDecoder> {
        Err(Error::msg(NOT_BUILT))
    }
}

impl Decoder for LlamaDecoder {
    fn decode(&mut self, _prompt: &[u32], _tokens: usize) -> Result<DecodeRun> {
        Err(Error::msg(NOT_BUILT))
    }

    fn threads(&self) -> usize {
        0
    }
}

/// The CUDA backend of CUDA builds; never constructed here.
#[derive(Debug)]
pub struct CudaBackend(());

impl CudaBackend {
    pub fn new() -> Result<CudaBackend> {
        Err(Error::msg(NOT_BUILT))
    }
}
