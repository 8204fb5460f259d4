//! Stand-in for the CUDA backend when the `cuda` feature is off: the same names, each failing
//! with one clear error instead of the code being absent (the `cuda` feature is optional:
//! without it everything builds, runs and tests on the CPU).

use crate::error::{Error, Result};

/// The error every CUDA entry point gives in a build without the feature.
pub const NOT_BUILT: &str = "engine was built without the `cuda` feature (rebuild with `cargo build --release -p engine --features cuda`)";

/// Always fails: this build has no CUDA code.
pub fn check_available() -> Result<()> {
    Err(Error::msg(NOT_BUILT))
}

/// The CUDA backend of CUDA builds; never constructed here.
#[derive(Debug)]
pub struct CudaBackend(());

impl CudaBackend {
    pub fn new() -> Result<CudaBackend> {
        Err(Error::msg(NOT_BUILT))
    }
}
