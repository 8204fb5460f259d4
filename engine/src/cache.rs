//! The engine's cache directory: provisioned model packages (`engine fetch`, under `models/`)
//! and compiled CUDA kernels (under `cuda-kernels/`). Low level (no engine imports), so that the
//! backends may use it too.

use std::path::PathBuf;

/// Environment variable that overrides the cache directory.
pub const CACHE_ENV: &str = "ENGINE_CACHE_DIR";

/// The cache directory: `$ENGINE_CACHE_DIR`, else `$XDG_CACHE_HOME/decoder-gate`, else
/// `$HOME/.cache/decoder-gate`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("decoder-gate");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("decoder-gate")
}
