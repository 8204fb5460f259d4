//! The generic executor on the GPU (feature `cuda`): `Session::generate` on [`CudaBackend`], for
//! any package the fused llama path (`cuda_llama`) does not recognise, such as a standard-op
//! export (`goldens/export_standard_onnx.py`). Every op runs as its own kernel (MatMul on
//! cuBLAS) and integer and shape ops on host copies; the KV cache stays on the device between
//! steps (each step's `present` is the next `past`; only its new position is copied into the
//! host pages). The shapes grow every step, so the step is not captured as a CUDA graph: the
//! report says so (`cuda_graph.enabled = false` with the reason), rather than counting a
//! fallback per step.

use super::{CudaGraphStats, DecodeRun, Decoder};
use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use crate::package::Package;
use crate::session::Session;

/// Why this path has no CUDA graph (in the profile's `cuda_graph.fallback_reasons`).
pub const NO_GRAPH: &str = "generic executor on CudaBackend: ops run one by one with host-side \
     shape ops and shapes that grow every step; no CUDA graph";

pub struct CudaGenericDecoder {
    session: Session<CudaBackend>,
}

impl CudaGenericDecoder {
    pub fn new(package: &Package) -> Result<CudaGenericDecoder> {
        Ok(CudaGenericDecoder {
            session: Session::new(package, CudaBackend::new()?)?,
        })
    }
}

impl Decoder for CudaGenericDecoder {
    fn decode(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        let opts = super::greedy(tokens);
        let g = self.session.generate(prompt, &opts, false)?;
        Ok(DecodeRun {
            generated_ids: g.generated_ids,
            prefill_ms: g.prefill_ms,
            step_ms: g.step_ms,
        })
    }

    fn threads(&self) -> usize {
        1
    }

    /// Host time per op: on this path the step is bound by the host (launches, shape ops that
    /// copy their inputs back, allocations), so where the host spends it is the profile; a
    /// kernel's own GPU time shows only where an op waits for the device.
    fn set_trace(&mut self, on: bool) -> Result<()> {
        self.session.set_trace(on);
        Ok(())
    }

    fn trace(&self) -> Option<crate::session::TraceReport> {
        self.session.trace_report()
    }

    fn device_stats(&self) -> (Option<CudaGraphStats>, Option<super::DeviceKvStats>) {
        (
            Some(CudaGraphStats {
                enabled: false,
                fallback_reasons: vec![NO_GRAPH.to_string()],
                ..Default::default()
            }),
            None,
        )
    }
}
