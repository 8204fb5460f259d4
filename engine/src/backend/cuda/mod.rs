//! The CUDA device (feature `cuda`): driver, NVRTC and cuBLAS are loaded at run time through
//! cudarc (`dynamic-loading`), so this builds with no CUDA installed and a missing library is an
//! error, not a panic (cudarc panics on a missing library: [`check_available`] looks first).
//! Kernels live in `kernels/*.cu` (plus the shared `common.cuh`), embedded with `include_str!`,
//! compiled by NVRTC for the live GPU's compute capability on first use and cached on disk under
//! the engine cache dir, keyed by a hash of source + arch + NVRTC version. Every source is
//! preceded by the op-code `#define`s of [`op_codes`], the one definition of the codes the host
//! passes to `kernels/ops.cu`.
//!
//! - [`backend`]: [`CudaBackend`], the generic `Backend` primitives on the GPU.
//! - [`Device`]: one GPU's context and stream and its compiled kernel modules, also used by the
//!   fused llama decoder (`crate::decode::cuda_llama`).

pub mod backend;
mod op_codes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::{CompileOptions, Ptx};

pub use backend::CudaBackend;

use crate::error::{Error, Result};

/// The shared header prepended to every kernel source.
const COMMON: &str = include_str!("kernels/common.cuh");

/// Every kernel source, by module name. `llama` holds the kernels of the fused llama decoder
/// (`crate::decode::cuda_llama`); it stays here, with the backend's own sources, because what
/// compiles it is this module's: the shared `common.cuh` and op-code prelude, the NVRTC
/// compile, the PTX disk cache and the `ENGINE_CUDA_KERNEL_SRC` override all look a module up by
/// name in this table. The backend only compiles it; nothing here knows its kernels.
pub(crate) const SOURCES: &[(&str, &str)] = &[
    ("llama", include_str!("kernels/llama.cu")),
    ("ops", include_str!("kernels/ops.cu")),
    ("prefill", include_str!("kernels/prefill.cu")),
];

/// Checks that the driver, NVRTC and cuBLAS libraries load and that a GPU is present, before any
/// cudarc call that would panic without them.
pub fn check_available() -> Result<()> {
    // SAFETY: `is_culib_present` only tries to dlopen the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::msg(
            "cuda: the NVIDIA driver library (libcuda.so) was not found: is an NVIDIA driver installed?",
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::msg(
            "cuda: the NVRTC library (libnvrtc.so) was not found: install the CUDA runtime compiler or add it to LD_LIBRARY_PATH",
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(Error::msg(
            "cuda: the cuBLAS library (libcublas.so) was not found: install cuBLAS or add it to LD_LIBRARY_PATH",
        ));
    }
    let n = CudaContext::device_count()
        .map_err(|e| Error::msg(format!("cuda: cannot initialise the driver: {e:?}")))?;
    if n < 1 {
        return Err(Error::msg("cuda: no CUDA device found"));
    }
    Ok(())
}

/// True when [`check_available`] passes (for tests that skip without a GPU).
pub fn is_available() -> bool {
    check_available().is_ok()
}

/// A CUDA error as an engine error, saying what was being done.
pub(crate) fn cu_err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::msg(format!("cuda: {what}: {e:?}"))
}

/// One GPU: its context, the one stream all work goes on, and the loaded kernel modules.
pub struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    arch: (i32, i32),
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("arch", &self.arch).finish()
    }
}

impl Device {
    /// Opens GPU 0 after [`check_available`].
    pub fn new() -> Result<Arc<Device>> {
        check_available()?;
        let ctx = CudaContext::new(0).map_err(cu_err("cannot open device 0"))?;
        // One stream does all the work, so cudarc's cross-stream events are not needed; they
        // would also make launches uncapturable in a CUDA graph.
        // SAFETY: no other stream of this context is ever used.
        unsafe { ctx.disable_event_tracking() };
        let arch = ctx
            .compute_capability()
            .map_err(cu_err("cannot read the compute capability"))?;
        // A stream of our own: the legacy default stream cannot be captured into a CUDA graph.
        let stream = ctx.new_stream().map_err(cu_err("cannot create a stream"))?;
        Ok(Arc::new(Device {
            ctx,
            stream,
            arch,
            modules: Mutex::new(HashMap::new()),
        }))
    }

    /// Compute capability (major, minor).
    pub fn arch(&self) -> (i32, i32) {
        self.arch
    }

    /// A kernel of module `module` (compiled and loaded on first use).
    pub(crate) fn function(&self, module: &'static str, name: &str) -> Result<CudaFunction> {
        let m = {
            let mut mods = self
                .modules
                .lock()
                .map_err(|_| Error::msg("cuda: module cache lock poisoned"))?;
            match mods.get(module) {
                Some(m) => m.clone(),
                None => {
                    let ptx = self.compile(module)?;
                    let m = self
                        .ctx
                        .load_module(ptx)
                        .map_err(cu_err(&format!("cannot load module {module}")))?;
                    mods.insert(module, m.clone());
                    m
                }
            }
        };
        m.load_function(name).map_err(cu_err(&format!(
            "kernel {name} not found in module {module}"
        )))
    }

    /// PTX of `module` for this GPU: from the disk cache, else NVRTC (the log goes into the
    /// error). The cache key hashes the full source, the target arch and the NVRTC version, so
    /// an edited kernel or another toolkit never reuses stale code.
    fn compile(&self, module: &str) -> Result<Ptx> {
        use sha2::{Digest, Sha256};
        let full = kernel_source(module)?;
        let (mut vmaj, mut vmin) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints; NVRTC presence was checked in `new`.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut vmaj, &mut vmin) };
        let arch = format!("compute_{}{}", self.arch.0, self.arch.1);
        let mut h = Sha256::new();
        h.update(full.as_bytes());
        h.update(arch.as_bytes());
        h.update(format!("nvrtc {vmaj}.{vmin}").as_bytes());
        let key: String = h.finalize()[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = kernel_cache_dir();
        let path = dir.join(format!("{module}-{arch}-{key}.ptx"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Ok(Ptx::from_src(text));
        }
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(
            &full,
            CompileOptions {
                options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()],
                name: Some(format!("{module}.cu")),
                ..Default::default()
            },
        )
        .map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => Error::msg(format!(
                "cuda: NVRTC failed to compile kernels/{module}.cu for {arch}:\n{}",
                log.to_string_lossy()
            )),
            other => Error::msg(format!("cuda: NVRTC on kernels/{module}.cu: {other:?}")),
        })?;
        let text = ptx.to_src();
        // A failed cache write only costs a recompile next time: not an error.
        if std::fs::create_dir_all(&dir).is_ok() {
            let tmp = dir.join(format!(".{module}-{key}.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, &text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
        Ok(Ptx::from_src(text))
    }
}

/// Environment variable naming a directory whose `common.cuh` and `<module>.cu` replace the
/// sources built into the binary: kernel work on a GPU machine without a Rust toolchain (edit,
/// rerun; the PTX cache key hashes the source). Launch geometry and parameter lists stay the
/// binary's, so an edited kernel must keep its signature.
pub const KERNEL_SRC_ENV: &str = "ENGINE_CUDA_KERNEL_SRC";

/// The full source NVRTC compiles for `module`: the op-code defines ([`op_codes::prelude`]), the
/// shared header, then the module. The defines come from the binary with overridden sources too.
fn kernel_source(module: &str) -> Result<String> {
    let prelude = op_codes::prelude();
    let builtin = SOURCES
        .iter()
        .find(|(n, _)| *n == module)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::msg(format!("cuda: no kernel module {module}")))?;
    let Some(dir) = std::env::var_os(KERNEL_SRC_ENV).filter(|d| !d.is_empty()) else {
        return Ok(format!("{prelude}\n{COMMON}\n{builtin}"));
    };
    let dir = PathBuf::from(dir);
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|e| {
            Error::msg(format!(
                "cuda: {KERNEL_SRC_ENV}: cannot read {}: {e}",
                p.display()
            ))
        })
    };
    Ok(format!(
        "{prelude}\n{}\n{}",
        read("common.cuh")?,
        read(&format!("{module}.cu"))?
    ))
}

/// Where compiled kernels are cached: `<engine cache dir>/cuda-kernels`.
pub fn kernel_cache_dir() -> PathBuf {
    crate::cache::cache_dir().join("cuda-kernels")
}
