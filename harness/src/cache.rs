//! The cache layout: one directory per repository under the cache root
//! (`$HARNESS_CACHE_DIR`, else the XDG cache), holding the slots (`worktrees/{base,head}`), the
//! persistent target dir both slots build into (`target/shared`), each side's copy of its
//! end-to-end binaries (`bins/{base,head,working-tree}`), run scratch (`runs/`), the last run's outputs
//! (`last-run/`, `last-e2e/`), the calibration profiles (`profiles/<host fingerprint>.json`) and
//! the instruction counts (`instructions/`, keyed by valgrind, executable bytes and benchmark).

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

/// The persistent cargo target dir both slots build into: `<cache>/target/shared`. One dir, so
/// the dependencies, most of a build from nothing, are compiled once for both revisions (on the
/// 2-vCPU CI machine each slot's cold bench build took 5.3-6.6 min in a dir of its own). The two
/// slots' own packages stay apart: they live at different paths (`worktrees/base`,
/// `worktrees/head`), cargo's package id includes the path, and every artifact's file name
/// carries a hash of it, so a bench executable (`release/deps/<name>-<hash>`, the path cargo
/// reports) is each side's own. Only the uplifted binaries (`release/engine`, `release/oracle`)
/// share one name: [`bin_dir`] keeps each side's copy of those.
pub fn shared_target_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("target").join("shared")
}

/// Where a build's end-to-end binaries are copied right after it (`<cache>/bins/<name>`), since
/// the next build in the shared target dir writes the same `release/engine`.
pub fn bin_dir(cache_dir: &Path, name: &str) -> PathBuf {
    cache_dir.join("bins").join(name)
}

/// Removes the per-side target dirs of the layout before the shared one (`target/base`,
/// `target/head`: several GB each that nothing reads any more); returns the ones removed.
pub fn remove_old_target_dirs(cache_dir: &Path) -> Vec<PathBuf> {
    [Side::Base, Side::Head]
        .iter()
        .map(|s| cache_dir.join("target").join(s.name()))
        .filter(|d| d.is_dir() && std::fs::remove_dir_all(d).is_ok())
        .collect()
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
    Ok(Some((profile, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_slots_share_one_target_dir_and_the_old_per_side_dirs_go() {
        let d = tempfile::TempDir::new().unwrap();
        let c = d.path();
        assert_eq!(shared_target_dir(c), c.join("target").join("shared"));
        assert_ne!(bin_dir(c, "base"), bin_dir(c, "head"));
        for s in ["base", "head", "shared"] {
            std::fs::create_dir_all(c.join("target").join(s).join("release")).unwrap();
        }
        let mut gone = remove_old_target_dirs(c);
        gone.sort();
        assert_eq!(gone, [c.join("target/base"), c.join("target/head")]);
        assert!(shared_target_dir(c).join("release").is_dir());
        assert!(remove_old_target_dirs(c).is_empty());
    }
}
