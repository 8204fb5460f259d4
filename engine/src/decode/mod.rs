//! Greedy decoders that `engine profile` times: the [`Decoder`] trait, what one decode gives
//! back ([`DecodeRun`]) and the device counters of the `engine-profile/1` report
//! ([`CudaGraphStats`], [`DeviceKvStats`]). Three implementations: [`cpu`] (exactly what `engine
//! generate` runs: `Session::generate` on the CPU backend), [`cuda_llama`] (the fused llama
//! decode path, feature `cuda`; without it a stub of the same name whose constructor fails with
//! "engine was built without the `cuda` feature") and `cuda_generic` (feature `cuda`: the
//! generic executor on the GPU, for packages the fused path does not recognise; chosen by
//! [`cuda_decoder`]).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda_generic;
#[cfg(feature = "cuda")]
pub mod cuda_llama;
/// Without the `cuda` feature, a stub of the same name whose constructor fails with one clear
/// error.
#[cfg(not(feature = "cuda"))]
#[path = "cuda_llama_stub.rs"]
pub mod cuda_llama;

use serde::{Deserialize, Serialize};

use crate::error::Result;

pub use cpu::CpuDecoder;
pub use cuda_llama::LlamaDecoder;

/// The decoder `--ep cuda` runs: the fused llama path when it recognises the package, else the
/// generic executor on the GPU (`cuda_generic`), saying why on stderr.
/// `generic` runs the generic executor even on a package the fused path recognises.
#[cfg(feature = "cuda")]
pub fn cuda_decoder(
    package: &crate::package::Package,
    graph: bool,
    generic: bool,
) -> Result<Box<dyn Decoder>> {
    let why = match cuda_llama::recognise(package) {
        Ok(_) if !generic => return Ok(Box::new(LlamaDecoder::new(package, graph)?)),
        Ok(_) => "--generic".to_string(),
        Err(why) => why.to_string(),
    };
    eprintln!("{why}\n  -> running the generic executor on the GPU");
    Ok(Box::new(cuda_generic::CudaGenericDecoder::new(
        package, graph,
    )?))
}

/// Without the `cuda` feature: the one clear error.
#[cfg(not(feature = "cuda"))]
pub fn cuda_decoder(
    package: &crate::package::Package,
    graph: bool,
    _generic: bool,
) -> Result<Box<dyn Decoder>> {
    Ok(Box::new(LlamaDecoder::new(package, graph)?))
}

/// The options of every timed decode: greedy, exactly `tokens` new tokens (no EOS stop), with
/// the KV cache.
pub(crate) fn greedy(tokens: usize) -> crate::session::GenerateOptions {
    crate::session::GenerateOptions {
        max_new_tokens: tokens,
        eos_token_ids: Vec::new(),
        use_kv_cache: true,
        sampling: Default::default(),
    }
}

/// One greedy decode of exactly `tokens` new tokens (EOS ignored), on some device.
pub trait Decoder {
    fn decode(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun>;
    fn threads(&self) -> usize;
    /// (cuda_graph, device_kv): `None` on the CPU.
    fn device_stats(&self) -> (Option<CudaGraphStats>, Option<DeviceKvStats>) {
        (None, None)
    }
    /// Turns per-op timing of the decode steps on (clearing what was collected) or off; an
    /// error where this decoder cannot time its ops.
    fn set_trace(&mut self, _on: bool) -> Result<()> {
        Err(crate::error::Error::msg(
            "--trace times the ops of the generic executor (--ep cpu, or --ep cuda on a package the fused decoder does not recognise); the fused CUDA decoder runs the step as one CUDA graph",
        ))
    }
    /// Where the traced decode steps' time went.
    fn trace(&self) -> Option<crate::session::TraceReport> {
        None
    }
}

/// What one decode of `tokens` new tokens gives back.
#[derive(Clone, Debug, Default)]
pub struct DecodeRun {
    pub generated_ids: Vec<u32>,
    pub prefill_ms: f64,
    /// Wall time of each decode step (the token out of the prefill has none).
    pub step_ms: Vec<f64>,
    /// The decoding thread's CPU time of the prefill and of each step (`crate::clock`), where
    /// it measures the whole of the work: a one-thread CPU decode. `None` and empty otherwise (a
    /// thread pool, a GPU).
    pub prefill_cpu_ms: Option<f64>,
    pub step_cpu_ms: Vec<f64>,
}

/// CUDA-graph counters of the whole profile (warm-ups included).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CudaGraphStats {
    pub enabled: bool,
    pub captures: u64,
    pub replays: u64,
    pub fallbacks: u64,
    /// Why the decode step ran eagerly, when it did (not part of the contract; extra key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_reasons: Vec<String>,
}

/// Host↔device copies made by the decode steps (the prefill's uploads excluded), whole profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceKvStats {
    pub h2d_calls: u64,
    pub h2d_bytes: u64,
    pub d2h_calls: u64,
    pub d2h_bytes: u64,
}
