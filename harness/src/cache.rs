//! The cache layout: one directory per repository under the cache root
//! (`$HARNESS_CACHE_DIR`, else the XDG cache), holding the slots (`worktrees/{base,head}`), the
//! persistent target dirs (`target/{base,head}`), run scratch (`runs/`), the last run's outputs
//! (`last-run/`, `last-e2e/`), the calibration profiles (`profiles/<host fingerprint>.json`) and
//! the instruction counts (`instructions/`, keyed by method, valgrind, the preloaded
//! `getrandom`, executable bytes, benchmark and iterations; the fixed `getrandom` library lives
//! beside them, `measure/instructions.rs`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::results::HostInfo;
use crate::stats::NoiseProfile;
use crate::vocab::Side;

/// Which calibration profile to use.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileChoice {
    /// The profile in the cache whose fingerprint matches this host, if any.
    Auto,
    /// This file (an error if it does not exist or does not match the host).
    File(PathBuf),
    /// None: thresholds from the within-run spread.
    Off,
}

/// The per-repository cache dir under `root`: `<root>/<repo name>-<hash of its path>`.
pub fn repo_cache_dir(root: &Path, repo_root: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let canon = repo_root
        .canonicalize()
        .unwrap_or_else(|_| repo_root.to_path_buf());
    let h = Sha256::digest(canon.to_string_lossy().as_bytes());
    let name = canon
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    root.join(format!(
        "{name}-{}",
        h.iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// The cache root: `$HARNESS_CACHE_DIR`, else `$XDG_CACHE_HOME/decoder-gate/harness`, else
/// `~/.cache/decoder-gate/harness`.
pub fn default_cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("HARNESS_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("decoder-gate").join("harness")
}

/// A side's persistent cargo target dir: `<cache>/target/{base,head}`.
///
/// **Invariant: one target dir per side, never shared.** Cargo names a workspace member's
/// artifacts by a hash of its path *relative to the workspace root*, so the two slots (two
/// worktrees of one repository) produce the same file names (`release/deps/kernels-<hash>`):
/// in one shared dir the head's build replaced the base's bench executables (tried on
/// 2026-12-03 to compile the dependencies once; base and head then ran the same binary). The
/// price is the dependencies built twice from empty caches (5.3-6.6 min per slot on the 2-vCPU
/// CI machine).
pub fn slot_target_dir(cache_dir: &Path, side: Side) -> PathBuf {
    cache_dir.join("target").join(side.name())
}

pub fn profile_path(cache_dir: &Path, fingerprint: &str) -> PathBuf {
    cache_dir
        .join("profiles")
        .join(format!("{fingerprint}.json"))
}

pub fn load_profile(
    choice: &ProfileChoice,
    cache_dir: &Path,
    host: &HostInfo,
    placement_sampled: bool,
) -> anyhow::Result<Option<(NoiseProfile, PathBuf)>> {
    let path = match choice {
        ProfileChoice::Off => return Ok(None),
        ProfileChoice::Auto => {
            let p = profile_path(cache_dir, &host.fingerprint);
            if !p.is_file() {
                return Ok(None);
            }
            p
        }
        ProfileChoice::File(p) => p.clone(),
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read calibration profile {}", path.display()))?;
    let profile = NoiseProfile::from_json(&text)
        .with_context(|| format!("calibration profile {}", path.display()))?;
    if !profile.matches(&host.fingerprint) {
        if matches!(choice, ProfileChoice::File(_)) {
            bail!(
                "calibration profile {} was made on another host (fingerprint {}, this host {}); run `harness calibrate` here",
                path.display(),
                profile.fingerprint,
                host.fingerprint
            );
        }
        return Ok(None);
    }
    // A profile measures the noise of one way of measuring: with placement sampled or not.
    if profile.placement_sampled != placement_sampled {
        let (was, is) = match placement_sampled {
            true => ("without", "samples"),
            false => ("with", "does not sample"),
        };
        if matches!(choice, ProfileChoice::File(_)) {
            bail!(
                "calibration profile {} was calibrated {was} placement sampling, and this run {is} \
                 it (placement.sample in harness.yaml); run `harness calibrate` again",
                path.display()
            );
        }
        return Ok(None);
    }
    Ok(Some((profile, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of this host saved where `auto` looks, sampled or not.
    fn saved(dir: &Path, host: &HostInfo, sampled: bool) -> PathBuf {
        let mut p = NoiseProfile::from_aa_trials(&host.fingerprint, 0.0, &[]);
        p.placement_sampled = sampled;
        let path = profile_path(dir, &host.fingerprint);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, p.to_json()).unwrap();
        path
    }

    #[test]
    fn a_profile_is_used_only_by_runs_that_measure_placement_as_it_was_calibrated() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostInfo {
            fingerprint: "fp".into(),
            ..HostInfo::default()
        };
        for calibrated in [true, false] {
            let path = saved(dir.path(), &host, calibrated);
            let file = ProfileChoice::File(path.clone());
            // The same way of measuring: used, from `auto` and from a named file.
            for choice in [&ProfileChoice::Auto, &file] {
                let (p, at) = load_profile(choice, dir.path(), &host, calibrated)
                    .unwrap()
                    .expect("a matching profile is used");
                assert_eq!((p.placement_sampled, at), (calibrated, path.clone()));
            }
            // The other way: `auto` measures without it, a named file is an error saying why.
            assert!(
                load_profile(&ProfileChoice::Auto, dir.path(), &host, !calibrated)
                    .unwrap()
                    .is_none()
            );
            let e = load_profile(&file, dir.path(), &host, !calibrated)
                .unwrap_err()
                .to_string();
            let was = if calibrated { "with" } else { "without" };
            assert!(
                e.contains(&path.display().to_string())
                    && e.contains(&format!("calibrated {was} placement sampling")),
                "{e}"
            );
        }
    }
}
