//! The machine the gate measures on: CPU, cores, OS, kernel, rustc, memory, load averages, and
//! the fingerprint that keys calibration profiles (what makes timings comparable: CPU model,
//! core count, memory, OS — not the kernel patch level or rustc, which calibrations survive);
//! the CUDA probe ([`cuda_unavailable`], overridden by [`ASSUME_CUDA_ENV`]); and [`lost_time`],
//! the share of a spinning thread's time the host takes, probed before and after the rounds.

use std::process::Command;

use sha2::{Digest, Sha256};

use crate::results::{HostInfo, LostTime};

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

/// Seconds of each probe that `compare` and `noise` take before and after the rounds.
pub const PROBE_S: f64 = 2.0;

/// A gap between two clock reads at least this long counts as time taken from the thread. A
/// read costs tens of ns; a timer interrupt a few µs. 50 µs is past both, and short enough to
/// catch a hypervisor's descheduling of the vCPU.
pub const GAP_NS: u64 = 50_000;

/// Spins for `seconds` on `cpu` (pinned, where given and possible), reading the monotonic clock,
/// and adds up the gaps of at least [`GAP_NS`]: the time the host took from a thread that wanted
/// the CPU all along (other processes, interrupts, or a hypervisor running other guests on the
/// vCPU's core). A benchmark on that CPU loses the same share, in bursts, which shows in its
/// rounds as samples far above their round's median (the noise report's `tail`). The kernel's
/// steal counter covers only part of it (on this project's Firecracker VMs a probe lost 2-10 %
/// while steal read 0-1 %; harness/eval/noise/README.md), so the probe measures it directly.
pub fn lost_time(when: &str, cpu: Option<usize>, seconds: f64) -> LostTime {
    let steal_before = cpu.and_then(cpu_steal);
    let (lost_ns, gaps, longest_ns, wall_ns) = std::thread::scope(|s| {
        s.spawn(|| {
            #[cfg(target_os = "linux")]
            if let Some(c) = cpu {
                let mut set = rustix::thread::CpuSet::new();
                set.set(c);
                // Best effort: unpinned, the probe still measures what the scheduler gives it.
                let _ = rustix::thread::sched_setaffinity(None, &set);
            }
            let start = std::time::Instant::now();
            let end = std::time::Duration::from_secs_f64(seconds.max(0.0));
            let (mut lost, mut gaps, mut longest) = (0u64, 0u64, 0u64);
            let mut prev = start.elapsed();
            loop {
                let now = start.elapsed();
                let gap = (now - prev).as_nanos() as u64;
                if gap >= GAP_NS {
                    lost += gap;
                    gaps += 1;
                    longest = longest.max(gap);
                }
                prev = now;
                if now >= end {
                    break (lost, gaps, longest, now.as_nanos() as u64);
                }
            }
        })
        .join()
        .unwrap_or((0, 0, 0, 0))
    });
    let steal = match (steal_before, cpu.and_then(cpu_steal)) {
        (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => Some((s1 - s0) as f64 / (t1 - t0) as f64),
        _ => None,
    };
    LostTime {
        when: when.to_string(),
        cpu,
        seconds: wall_ns as f64 / 1e9,
        lost: if wall_ns > 0 {
            lost_ns as f64 / wall_ns as f64
        } else {
            0.0
        },
        gaps,
        longest_ms: longest_ns as f64 / 1e6,
        steal,
    }
}

/// (steal, total) jiffies of `cpu` from `/proc/stat`.
fn cpu_steal(cpu: usize) -> Option<(u64, u64)> {
    parse_cpu_steal(&std::fs::read_to_string("/proc/stat").ok()?, cpu)
}

fn parse_cpu_steal(stat: &str, cpu: usize) -> Option<(u64, u64)> {
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() == 8).then(|| (v[7], v.iter().sum()))
}

/// One line for a report: "before the rounds: 8.1 % of a spinning thread's 2 s on CPU 1 lost in
/// 412 gaps ≥ 50 µs (longest 1.49 ms; the kernel's steal counter 0.3 %)".
pub fn describe_lost(l: &LostTime) -> String {
    let on = l.cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default();
    let steal = l
        .steal
        .map(|s| format!("; the kernel's steal counter {:.1} %", s * 100.0))
        .unwrap_or_default();
    format!(
        "{}: {:.1} % of a spinning thread's {:.0} s{on} lost in {} gaps ≥ {} µs (longest {:.2} ms{steal})",
        l.when,
        l.lost * 100.0,
        l.seconds,
        l.gaps,
        GAP_NS / 1000,
        l.longest_ms
    )
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

#[cfg(test)]
mod lost_time_tests {
    use super::*;

    #[test]
    fn steal_is_read_from_the_cpus_own_line() {
        let stat = "cpu  10 0 10 100 0 0 0 9 0 0\n\
                    cpu0 5 0 5 50 0 0 0 2 0 0\n\
                    cpu1 5 0 5 50 0 0 0 7 0 0\n\
                    cpu10 1 1 1 1 1 1 1 1 0 0\n";
        assert_eq!(parse_cpu_steal(stat, 1), Some((7, 67)));
        assert_eq!(parse_cpu_steal(stat, 0), Some((2, 62)));
        assert_eq!(parse_cpu_steal(stat, 10), Some((1, 8)));
        assert_eq!(parse_cpu_steal(stat, 2), None);
        assert_eq!(parse_cpu_steal("cpu1 5 0 5\n", 1), None, "a short line");
    }

    #[test]
    fn a_probe_sharing_its_cpu_with_a_spinner_loses_time() {
        // Pinned with a busy thread on the same CPU, the scheduler takes the probe off it for
        // slices of milliseconds: about half of its time is lost, in gaps.
        #[cfg(target_os = "linux")]
        {
            let allowed = rustix::thread::sched_getaffinity(None).unwrap();
            let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
                .find(|&c| allowed.is_set(c))
                .unwrap();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let l = std::thread::scope(|s| {
                s.spawn(|| {
                    let mut set = rustix::thread::CpuSet::new();
                    set.set(cpu);
                    rustix::thread::sched_setaffinity(None, &set).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
                let l = lost_time("test", Some(cpu), 0.5);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                l
            });
            assert!(l.seconds >= 0.5, "{l:?}");
            assert!(
                l.lost > 0.2 && l.gaps > 0 && l.longest_ms > 0.05,
                "sharing its CPU with a spinner, the probe must lose time: {l:?}"
            );
            assert!(describe_lost(&l).contains(&format!("on CPU {cpu}")));
        }
    }
}
