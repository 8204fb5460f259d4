//! Stand-in for the fused llama decoder when the `cuda` feature is off: the same name, failing
//! with one clear error instead of the code being absent (the `cuda` feature is optional: without
//! it everything builds, runs and tests on the CPU).

use super::{DecodeRun, Decoder};
use crate::backend::cuda::NOT_BUILT;
use crate::error::{Error, Result};
use crate::package::Package;

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
