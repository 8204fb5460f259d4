//! The CPU decoder: exactly what `engine generate` runs (`Session::generate` on the CPU backend,
//! paged KV cache, greedy), behind the [`Decoder`] trait.

use super::{DecodeRun, Decoder};
use crate::backend::cpu::CpuBackend;
use crate::error::Result;
use crate::package::Package;
use crate::session::Session;

/// The CPU path: exactly what `engine generate` runs (paged KV cache, greedy).
pub struct CpuDecoder {
    session: Session<CpuBackend>,
}

impl CpuDecoder {
    /// A session over `package` on a CPU backend of `threads` threads (0 = all cores).
    pub fn new(package: &Package, threads: usize) -> Result<CpuDecoder> {
        Ok(CpuDecoder {
            session: Session::new(package, CpuBackend::new(threads)?)?,
        })
    }
}

impl Decoder for CpuDecoder {
    fn decode(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        let opts = super::greedy(tokens);
        let session = &self.session;
        let g = session
            .backend()
            .in_pool(|| session.generate(prompt, &opts, false))?;
        Ok(DecodeRun {
            generated_ids: g.generated_ids,
            prefill_ms: g.prefill_ms,
            step_ms: g.step_ms,
        })
    }

    fn threads(&self) -> usize {
        self.session.backend().threads()
    }

    fn set_trace(&mut self, on: bool) -> Result<()> {
        self.session.set_trace(on);
        Ok(())
    }

    fn trace(&self) -> Option<crate::session::TraceReport> {
        self.session.trace_report()
    }
}
