//! The machine the gate measures on: CPU, cores, OS, kernel, rustc, memory, load averages, and
//! the fingerprint that keys calibration profiles (what makes timings comparable: CPU model,
//! core count, memory, OS — not the kernel patch level or rustc, which calibrations survive).

use std::process::Command;

use sha2::{Digest, Sha256};

use crate::results::HostInfo;

/// Collects host facts (Linux `/proc`; elsewhere "unknown" where a fact is unavailable).
pub fn collect() -> HostInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let rustc = crate::process::output(
        Command::new("rustc").arg("-V"),
        std::time::Duration::from_secs(60),
    )
    .ok()
    .map(|(o, _)| o)
    .filter(|o| o.status.success())
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .unwrap_or_else(|| "unknown".into());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / (1024.0 * 1024.0))
        .unwrap_or(0.0);
    let mut h = HostInfo {
        cpu,
        cores,
        os,
        kernel,
        rustc,
        mem_gib,
        fingerprint: String::new(),
    };
    h.fingerprint = fingerprint(&h);
    h
}

/// 16 hex digits of sha256 over CPU model, cores, memory (whole GiB) and OS.
pub fn fingerprint(h: &HostInfo) -> String {
    let key = format!("{}|{}|{:.0}|{}", h.cpu, h.cores, h.mem_gib.round(), h.os);
    let d = Sha256::digest(key.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The 1, 5 and 15 minute load averages (zeros where unavailable).
pub fn load_avg() -> [f64; 3] {
    let t = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = t
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
}

/// Where an NVIDIA driver shows itself: the kernel module's version file and control device on
/// Linux, the paravirtual GPU device under WSL2.
pub const CUDA_DRIVER_PATHS: [&str; 3] =
    ["/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg"];

/// Set to 1 to skip the driver probe and always try the CUDA checks (a GPU setup the probe does
/// not know).
pub const ASSUME_CUDA_ENV: &str = "HARNESS_ASSUME_CUDA";

/// Why this host cannot run CUDA at all, or None when it may. A cheap probe taken before any
/// CUDA build: on a machine without an NVIDIA driver the harness neither compiles the engine's
/// `cuda` feature nor runs CUDA checks, and reports them ⏭ with this reason (never as passed;
/// `--require-cuda` makes that an error). Where a driver is found, the engine itself decides.
pub fn cuda_unavailable() -> Option<String> {
    if std::env::var(ASSUME_CUDA_ENV).is_ok_and(|v| v == "1") {
        return None;
    }
    cuda_unavailable_given(&CUDA_DRIVER_PATHS.map(std::path::Path::new))
}

fn cuda_unavailable_given(paths: &[&std::path::Path]) -> Option<String> {
    if paths.iter().any(|p| p.exists()) {
        return None;
    }
    Some(format!(
        "no CUDA device: no NVIDIA driver on this host (none of {})",
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuda_probe_needs_one_driver_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("version");
        let b = dir.path().join("nvidiactl");
        let why = cuda_unavailable_given(&[&a, &b]).unwrap();
        assert!(
            why.contains("no NVIDIA driver") && why.contains("nvidiactl"),
            "{why}"
        );
        std::fs::write(&b, "").unwrap();
        assert_eq!(cuda_unavailable_given(&[&a, &b]), None);
    }

    #[test]
    fn fingerprint_ignores_kernel_and_rustc_but_not_cpu_or_cores() {
        let a = HostInfo {
            cpu: "Xeon".into(),
            cores: 2,
            os: "Debian 12".into(),
            kernel: "6.1".into(),
            rustc: "rustc 1.95".into(),
            mem_gib: 23.4,
            fingerprint: String::new(),
        };
        let mut b = a.clone();
        b.kernel = "6.2".into();
        b.rustc = "rustc 1.96".into();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let mut c = a.clone();
        c.cores = 4;
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert_eq!(fingerprint(&a).len(), 16);
    }

    #[test]
    fn collects_something_for_this_host() {
        let h = collect();
        assert!(h.cores >= 1);
        assert!(!h.cpu.is_empty() && !h.os.is_empty());
        assert_eq!(h.fingerprint, fingerprint(&h));
    }
}
