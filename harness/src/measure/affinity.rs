//! CPU affinity of the measured processes: with `affinity.pin: one_cpu`, both sides' processes of
//! a single-threaded benchmark run on one CPU, the same one. The same split (single-threaded or
//! not) says which rows may be timed in thread CPU time (`affinity.clock`, `measure::clock`).
//!
//! Why, as measured when it was introduced: the engine's CPU backend then ran a matmul on its
//! rayon pool even with one thread (`pool.install`: the calling thread handed the work to the
//! pool's worker and slept until it was done), so each call was two cross-thread wake-ups. (It
//! now runs one-thread work on the caller, `CpuBackend::in_pool`; the pinning stayed, and the
//! full-suite A/A figures since are with it.) On this 2-vCPU VM a wake-up of a thread
//! on the *other*, idle vCPU costs tens of µs (the idle vCPU has to be woken by the hypervisor),
//! one on the same vCPU a plain context switch. Where the scheduler happened to place a
//! process's two threads then decided its speed for its whole life: in the full-suite A/A
//! before this (`harness/eval/results/aa-resolution/full-2/`) the second process of each pair
//! ran `matmul/f32_t1/1x256x256` at ~80 µs against the first's ~13 µs, round after round, a
//! per-round sd of the A/A log ratio of 1.22 (`decode/tiny_tokens_per_second/32_tokens` 1.87).
//! Both processes on CPU 1, measured back to back by the same driver on the same executable:
//! 1.63 → 0.008 (the `harness noise` runs in `harness/eval/results/noise/` have the figures).
//!
//! Multi-threaded benchmarks (`affinity.multi_threaded`) keep every CPU: pinned, their threads
//! would share one CPU and measure something else. The CPU chosen is the last one the harness
//! itself may use: on Linux, CPU 0 is the usual target of device interrupts and timers.

use std::process::Command;

use crate::config::{AffinityConfig, Clock, Pin};

/// Where each measured process may run.
#[derive(Clone, Debug, Default)]
pub struct Affinity {
    /// The CPU single-threaded processes are pinned to; `None`: no pinning.
    cpu: Option<usize>,
    multi_threaded: Vec<regex_lite::Regex>,
    /// `affinity.clock: wall`: never time in CPU time.
    wall_only: bool,
}

impl Affinity {
    /// No pinning: the scheduler places every process.
    pub fn off() -> Affinity {
        Affinity::default()
    }

    /// From `affinity:` (its regexes were validated when the file was loaded; one that does not
    /// compile here is skipped, so the benchmark it names is not pinned). `pin: one_cpu` on a
    /// machine where the harness may use a single CPU only pins nothing: there is nothing to
    /// choose.
    pub fn from_config(c: &AffinityConfig) -> Affinity {
        let cpu = match c.pin {
            Pin::Off => None,
            Pin::OneCpu => last_allowed_cpu(),
        };
        Affinity {
            cpu,
            multi_threaded: c
                .multi_threaded
                .iter()
                .filter_map(|r| regex_lite::Regex::new(r).ok())
                .collect(),
            wall_only: c.clock == Clock::Wall,
        }
    }

    /// A fixed CPU for single-threaded work (tests, and `harness noise` variants).
    pub fn on_cpu(cpu: usize, multi_threaded: &[&str]) -> Affinity {
        Affinity {
            cpu: Some(cpu),
            multi_threaded: multi_threaded
                .iter()
                .filter_map(|r| regex_lite::Regex::new(r).ok())
                .collect(),
            wall_only: false,
        }
    }

    /// Whether benchmark `id` may be timed in its thread's CPU time (single-threaded, and
    /// `affinity.clock` allows it).
    pub fn cpu_clock_for_bench(&self, id: &str) -> bool {
        !self.wall_only && !self.is_multi_threaded(id)
    }

    /// Whether a process running `threads` threads may be timed in its thread's CPU time.
    pub fn cpu_clock_for_threads(&self, threads: u32) -> bool {
        !self.wall_only && threads == 1
    }

    /// Whether `affinity.multi_threaded` names benchmark `id` (it runs on more than one thread).
    pub fn is_multi_threaded(&self, id: &str) -> bool {
        self.multi_threaded.iter().any(|r| r.is_match(id))
    }

    /// The CPU benchmark `id` is pinned to, or `None` (multi-threaded, or pinning off).
    pub fn cpu_for_bench(&self, id: &str) -> Option<usize> {
        self.cpu.filter(|_| !self.is_multi_threaded(id))
    }

    /// The CPU a process running `threads` threads is pinned to (only one-thread ones are).
    pub fn cpu_for_threads(&self, threads: u32) -> Option<usize> {
        self.cpu.filter(|_| threads == 1)
    }

    /// For `Method`: what this run did, in words (where the processes ran, then the clock).
    pub fn describe(&self) -> String {
        let clock = if self.wall_only {
            "wall time"
        } else {
            "single-threaded rows in thread CPU time where both sides report it, else wall time"
        };
        format!("{}; {clock}", self.describe_pinning())
    }

    fn describe_pinning(&self) -> String {
        match self.cpu {
            None => "not pinned: the scheduler placed every process".into(),
            Some(cpu) if self.multi_threaded.is_empty() => {
                format!("both sides of every benchmark pinned to CPU {cpu}")
            }
            Some(cpu) => format!(
                "both sides of each single-threaded benchmark pinned to CPU {cpu}; \
                 benchmarks matching {} not pinned",
                self.multi_threaded
                    .iter()
                    .map(|r| format!("`{}`", r.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The highest-numbered CPU in this process's affinity mask, when it holds more than one.
fn last_allowed_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let set = rustix::thread::sched_getaffinity(None).ok()?;
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect();
        (cpus.len() > 1).then(|| *cpus.last().expect("more than one"))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Makes `cmd`'s process (and every thread it starts) run on `cpu` only. `None` leaves it as is.
/// Where affinity cannot be set (not Linux) this does nothing: the run is then measured as with
/// `pin: off`, which `Method` cannot tell apart, so `from_config` never picks a CPU there.
pub fn apply(cmd: &mut Command, cpu: Option<usize>) {
    #[cfg(target_os = "linux")]
    if let Some(cpu) = cpu {
        use std::os::unix::process::CommandExt;
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        // SAFETY: runs in the forked child before exec; `sched_setaffinity` is a plain system
        // call (async-signal-safe), and `set` was built before the fork, so nothing allocates.
        unsafe {
            cmd.pre_exec(move || {
                rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (cmd, cpu);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_threaded_benchmarks_and_threads_are_never_pinned() {
        let a = Affinity::on_cpu(1, &["_t([2-9]|[1-9][0-9]+)/"]);
        assert_eq!(a.cpu_for_bench("matmul/f32_t1/1x256x256"), Some(1));
        assert_eq!(a.cpu_for_bench("matmul/f32_t2/1x256x256"), None);
        assert_eq!(a.cpu_for_bench("matmul/f32_t16/1x256x256"), None);
        assert_eq!(a.cpu_for_bench("add/f32/small"), Some(1));
        assert_eq!(a.cpu_for_threads(1), Some(1));
        assert_eq!(a.cpu_for_threads(2), None);
        assert_eq!(Affinity::off().cpu_for_bench("add/f32/small"), None);
        assert!(a.describe().contains("pinned to CPU 1"), "{}", a.describe());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_child_runs_on_that_cpu_only() {
        let Some(cpu) = last_allowed_cpu() else {
            eprintln!("one CPU only: nothing to pin to");
            return;
        };
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        apply(&mut cmd, Some(cpu));
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim(), format!("Cpus_allowed_list:\t{cpu}"), "{text}");
        let mut free = Command::new("sh");
        free.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        apply(&mut free, None);
        let text = String::from_utf8_lossy(&free.output().unwrap().stdout).to_string();
        assert_ne!(text.trim(), format!("Cpus_allowed_list:\t{cpu}"), "{text}");
    }
}
