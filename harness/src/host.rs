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

/// CPU time, in the kernel's clock ticks, on the CPUs this process may use: `busy` (not idle:
/// user, nice, system, irq, softirq from `/proc/stat`; iowait and the hypervisor's steal are
/// not another process's work), `total` (every field, steal included) and `own`, this process's
/// and its live descendants' (utime, stime, and cutime, cstime: what their waited-for children
/// used; a child reaped between two readings moves from its own line into its parent's
/// `cutime`, so the sum stays whole). Two readings give the CPU that other processes used in
/// between ([`others_cores`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuReading {
    pub busy: u64,
    pub total: u64,
    pub cpus: u32,
    pub own: u64,
}

/// A reading now; `None` where `/proc` cannot be read (not Linux).
pub fn cpu_reading() -> Option<CpuReading> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let (busy, total, cpus) = parse_cpu_times(&stat, &allowed_cpus())?;
    Some(CpuReading {
        busy,
        total,
        cpus,
        own: own_ticks(std::process::id())?,
    })
}

/// How many cores other processes kept busy between two readings, on average: their busy
/// ticks over the ticks one CPU had. 1.0 on a 2-CPU machine is one CPU's worth taken from a
/// benchmark that wants both. Slightly negative values are the ticks' sampling error
/// (`/proc/stat` counts whole ticks, the processes' times are exact).
pub fn others_cores(before: &CpuReading, after: &CpuReading) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    if total == 0 || after.cpus == 0 {
        return None;
    }
    let busy = after.busy.checked_sub(before.busy)? as f64;
    let own = after.own as f64 - before.own as f64;
    Some((busy - own) / (total as f64 / f64::from(after.cpus)))
}

/// The CPUs this process may use (all that `/proc/stat` lists where the set cannot be read).
fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    if let Ok(set) = rustix::thread::sched_getaffinity(None) {
        return (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect();
    }
    Vec::new()
}

/// (busy, total, CPUs counted) over the `cpuN` lines of `allowed` (every `cpuN` line when
/// `allowed` is empty).
fn parse_cpu_times(stat: &str, allowed: &[usize]) -> Option<(u64, u64, u32)> {
    let (mut busy, mut total, mut cpus) = (0u64, 0u64, 0u32);
    for (n, v) in cpu_lines(stat) {
        if !allowed.is_empty() && !allowed.contains(&n) {
            continue;
        }
        let v = v?;
        let [user, nice, system, _idle, _iowait, irq, softirq, _steal] = v;
        busy += user + nice + system + irq + softirq;
        total += v.iter().sum::<u64>();
        cpus += 1;
    }
    (cpus > 0).then_some((busy, total, cpus))
}

/// The `cpuN` lines of `/proc/stat` (not the summary line): N and its first eight fields, user
/// nice system idle iowait irq softirq steal (guest and guest_nice are already in user and
/// nice), `None` for a line cut short.
fn cpu_lines(stat: &str) -> impl Iterator<Item = (usize, Option<[u64; 8]>)> + '_ {
    stat.lines().filter_map(|line| {
        let mut f = line.split_whitespace();
        let n = f.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
        let v: Option<Vec<u64>> = f.take(8).map(|x| x.parse().ok()).collect();
        Some((n, v.and_then(|v| <[u64; 8]>::try_from(v).ok())))
    })
}

/// (parent pid, utime + stime + cutime + cstime) from one `/proc/<pid>/stat`; the command name
/// in parentheses may hold spaces and parentheses, so fields are counted after the last ')'.
fn parse_proc_stat(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    let ppid = f.get(1)?.parse().ok()?;
    let mut ticks = 0u64;
    for i in 11..=14 {
        // cutime and cstime are signed in the kernel's format; never negative in practice.
        ticks += f.get(i)?.parse::<i64>().ok()?.max(0) as u64;
    }
    Some((ppid, ticks))
}

/// CPU ticks of process `root` and all its live descendants, each with its reaped children's.
fn own_ticks(root: u32) -> Option<u64> {
    let mut procs: Vec<(u32, u32, u64)> = Vec::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A process that exits between the listing and the read is skipped: its time is in
        // its parent's cutime once reaped, but missing from this reading if the parent's line
        // was read first. The gate reads when none of its measured processes is running.
        if let Some((ppid, t)) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| parse_proc_stat(&s))
        {
            procs.push((pid, ppid, t));
        }
    }
    Some(tree_ticks(&procs, root))
}

/// The ticks of `root` and every process descending from it in `procs` (pid, ppid, ticks).
fn tree_ticks(procs: &[(u32, u32, u64)], root: u32) -> u64 {
    let mut inside = vec![root];
    let mut sum = 0u64;
    let mut i = 0;
    while i < inside.len() {
        let p = inside[i];
        for &(pid, ppid, t) in procs {
            if pid == p {
                sum += t;
            } else if ppid == p && !inside.contains(&pid) {
                inside.push(pid);
            }
        }
        i += 1;
    }
    sum
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
    let v = cpu_lines(stat).find(|(n, _)| *n == cpu)?.1?;
    Some((v[7], v.iter().sum()))
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
mod cpu_reading_tests {
    use super::*;

    #[test]
    fn cpu_times_count_the_allowed_cpus_and_leave_out_idle_iowait_and_steal() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  30 3 30 300 30 3 3 30 5 0\n\
                    cpu0 10 1 10 100 10 1 1 10 5 0\n\
                    cpu1 20 2 20 200 20 2 2 20 0 0\n\
                    intr 12345 0 0\n";
        assert_eq!(parse_cpu_times(stat, &[1]), Some((46, 286, 1)));
        assert_eq!(parse_cpu_times(stat, &[]), Some((69, 429, 2)));
        assert_eq!(parse_cpu_times(stat, &[0, 1]), Some((69, 429, 2)));
        assert_eq!(parse_cpu_times(stat, &[2]), None, "no allowed CPU listed");
        assert_eq!(parse_cpu_times("cpu0 1 2 3\n", &[]), None, "a short line");
    }

    #[test]
    fn a_process_line_is_read_after_its_last_parenthesis() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime …
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194304 100 0 0 0 7 3 20 1 20 0 1 0";
        assert_eq!(parse_proc_stat(line), Some((17, 31)));
        assert_eq!(parse_proc_stat("4242 (x) S 17 1 2"), None, "cut short");
    }

    #[test]
    fn a_tree_sums_its_root_and_every_descendant_but_nothing_else() {
        // 1 ─ 10 ─ 11 ─ 12, 1 ─ 20; a process listed before its parent still counts.
        let procs = [
            (12, 11, 5),
            (1, 0, 1000),
            (10, 1, 100),
            (11, 10, 10),
            (20, 1, 2000),
        ];
        assert_eq!(tree_ticks(&procs, 10), 115);
        assert_eq!(tree_ticks(&procs, 11), 15);
        assert_eq!(tree_ticks(&procs, 20), 2000);
        assert_eq!(tree_ticks(&procs, 99), 0);
    }

    #[test]
    fn others_are_the_busy_ticks_not_ours_over_one_cpus_ticks() {
        let a = CpuReading {
            busy: 1000,
            total: 4000,
            cpus: 2,
            own: 300,
        };
        // 200 ticks per CPU passed; 250 busy, 50 of them ours: one core's worth of others.
        let b = CpuReading {
            busy: 1250,
            total: 4400,
            cpus: 2,
            own: 350,
        };
        assert_eq!(others_cores(&a, &b), Some(1.0));
        assert_eq!(others_cores(&a, &a), None, "no time passed");
        assert_eq!(others_cores(&b, &a), None, "readings swapped");
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
