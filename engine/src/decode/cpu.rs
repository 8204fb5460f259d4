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
        // With one thread every op runs on this one (no pool: `CpuBackend::in_pool`), so its
        // CPU time is the decode's; with a pool it would miss the workers' share.
        let one_thread = session.backend().threads() == 1;
        Ok(DecodeRun {
            generated_ids: g.generated_ids,
            prefill_ms: g.prefill_ms,
            step_ms: g.step_ms,
            prefill_cpu_ms: g.prefill_cpu_ms.filter(|_| one_thread),
            step_cpu_ms: if one_thread {
                g.step_cpu_ms
            } else {
                Vec::new()
            },
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
