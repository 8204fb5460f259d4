//! Wall time and the calling thread's CPU time, read together: what a timed decode step or a
//! served benchmark sample reports, so the harness can time single-threaded work in CPU time.
//!
//! Why CPU time: on a virtual machine the host takes the vCPU away for stretches (steal), and
//! wall time counts them. The guest kernel accounts stolen time apart (the paravirtual steal
//! clock), so a thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) does not advance while its vCPU is
//! descheduled. Measured on a 2-vCPU KVM guest under 50 % steal: 40 runs of one fixed loop took
//! 17.9-54.9 ms of wall time and 18.0-18.7 ms of thread CPU time (harness/STATS.md, "The clock").
//!
//! Thread CPU time measures only the calling thread: it is the right number for work done on that
//! thread alone (a one-thread CPU decode, a single-threaded benchmark), never for a thread pool
//! or a GPU. [`process_cpu_ns`] lets a caller check that no other thread worked meanwhile.
//! Linux only (libc's `clock_gettime`); elsewhere the CPU clocks read `None`.
//!
//! Why libc's and not rustix's: rustix's `clock_gettime` calls the kernel's vDSO, which it finds
//! through the auxiliary vector itself, and under valgrind (which hides the vDSO from the program
//! it runs) that read faults: every callgrind count of a served benchmark died with SIGSEGV a few
//! thousand instructions into its serve loop (rustix issue #1559). glibc's `clock_gettime` uses
//! the vDSO when there is one and the system call otherwise, so it works in both.
//! `tests/clock_under_valgrind.rs` keeps it so.

use std::time::Instant;

/// CPU time of the calling thread in ns, `None` where it cannot be read.
pub fn thread_cpu_ns() -> Option<u64> {
    cpu_ns(Which::Thread)
}

/// CPU time of the whole process (all its threads) in ns, `None` where it cannot be read.
pub fn process_cpu_ns() -> Option<u64> {
    cpu_ns(Which::Process)
}

enum Which {
    Thread,
    Process,
}

#[cfg(target_os = "linux")]
fn cpu_ns(which: Which) -> Option<u64> {
    let id = match which {
        Which::Thread => libc::CLOCK_THREAD_CPUTIME_ID,
        Which::Process => libc::CLOCK_PROCESS_CPUTIME_ID,
    };
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call; `id` is a clock
    // id the kernel knows (a failure returns -1 and leaves `t` unread below).
    if unsafe { libc::clock_gettime(id, &mut t) } != 0 {
        return None;
    }
    let ns = i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    u64::try_from(ns).ok()
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns(_: Which) -> Option<u64> {
    None
}

/// A started measurement: wall time and the thread's CPU time from the same moment.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    wall: Instant,
    cpu: Option<u64>,
}

/// What a [`Stopwatch`] measured, in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lap {
    pub wall_ms: f64,
    /// The calling thread's CPU time; `None` where the clock cannot be read.
    pub cpu_ms: Option<f64>,
}

impl Stopwatch {
    pub fn start() -> Stopwatch {
        // CPU clock first, so the wall interval contains the CPU one.
        let cpu = thread_cpu_ns();
        Stopwatch {
            wall: Instant::now(),
            cpu,
        }
    }

    /// Time since [`Stopwatch::start`] on both clocks (read on the thread that started it).
    pub fn lap(&self) -> Lap {
        let wall_ms = self.wall.elapsed().as_secs_f64() * 1e3;
        let cpu_ms = match (self.cpu, thread_cpu_ns()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6),
            _ => None,
        };
        Lap { wall_ms, cpu_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU time is not wall time: a sleep advances the one and not the other, and spinning
    /// advances both. (Linux: where the clock exists at all.)
    #[test]
    #[cfg(target_os = "linux")]
    fn cpu_time_skips_a_sleep_and_counts_a_spin() {
        let w = Stopwatch::start();
        std::thread::sleep(std::time::Duration::from_millis(60));
        let slept = w.lap();
        assert!(slept.wall_ms >= 60.0, "{slept:?}");
        let cpu = slept.cpu_ms.expect("thread CPU clock on Linux");
        assert!(cpu < 20.0, "a 60 ms sleep took {cpu} ms of CPU time");

        let w = Stopwatch::start();
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed().as_millis() < 30 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spun = w.lap();
        let cpu = spun.cpu_ms.expect("thread CPU clock on Linux");
        // At least some of the 30 ms spin is CPU time even on a host that steals half of it.
        assert!(cpu > 5.0 && cpu <= spun.wall_ms + 1.0, "{spun:?}");
        let (t, p) = (thread_cpu_ns().unwrap(), process_cpu_ns().unwrap());
        assert!(p >= t, "process {p} < thread {t}");
    }
}
