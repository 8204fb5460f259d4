//! Which clock a paired round of a single-threaded row is timed in: the measured thread's CPU
//! time where both sides report it and nothing says it misses part of the work, wall time
//! otherwise (harness/STATS.md, "The clock").
//!
//! Why: on a VM the host takes the vCPU away (steal), and wall time counts those stretches
//! while the guest kernel leaves them out of a thread's CPU time. Under 50 % steal on this
//! project's 2-vCPU CI machines, one fixed loop took 17.9-54.9 ms of wall time and 18.0-18.7 ms of
//! thread CPU time; the tiny model's decode-step rows had per-round sd of 15-25 % in wall time.
//!
//! What CPU time cannot see, and the checks that fall back to wall time for a round:
//! - work on other threads: a benchmark sample also carries the process's CPU time, and one more
//!   than 1 % (plus 50 µs) above the thread's means another thread worked;
//! - waiting off the CPU (a sleep, blocking I/O, a lock) that a PR adds or removes: under steal
//!   both sides spend time off the CPU at random, so a side that waits more is told apart by
//!   consistency: a sign test over the sample pairs of the difference in the share of wall time
//!   spent off the CPU (either direction, p < 0.01 on each side) together with a median
//!   difference of more than 1 % of the wall time. Either direction, because the measurers pass
//!   the two sides in the round's order (AB or BA), not as base and head.
//!
//! Multi-threaded rows (`affinity.multi_threaded`), multi-thread end-to-end decodes and GPU
//! decodes are always timed in wall time: one thread's CPU time is not their cost.

use statrs::distribution::{Binomial, DiscreteCDF};

/// One sample on the clocks its process reported, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    pub wall: f64,
    /// The measured thread's CPU time over the same interval.
    pub thread_cpu: Option<f64>,
    /// The whole process's CPU time over the same interval, where reported (benchmarks).
    pub process_cpu: Option<f64>,
}

/// Why a round was timed in wall time although CPU time was allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WallBecause {
    /// A side did not report CPU time for every sample (a revision before the CPU clock, or a
    /// platform without it).
    NotReported,
    /// Another thread of a side's process worked during its samples.
    OtherThreads,
    /// One side spent consistently more of its time off the CPU than the other.
    WaitsDiffer,
}

/// The clock for a round with these samples (pairs `a[i]`, `b[i]`: the two sides in either
/// order), given whether CPU time is allowed for the row at all.
pub fn choose(a: &[Timing], b: &[Timing], allowed: bool) -> Result<(), WallBecause> {
    if !allowed {
        return Err(WallBecause::NotReported);
    }
    let all = || a.iter().chain(b);
    // A CPU time of 0 (or one a revision's executable got wrong) would make a ratio infinite:
    // such a round is timed in wall time, which the protocol requires to be positive.
    if a.is_empty() || all().any(|t| t.thread_cpu.is_none_or(|c| c <= 0.0 || !c.is_finite())) {
        return Err(WallBecause::NotReported);
    }
    let other_threads = all().any(|t| match (t.thread_cpu, t.process_cpu) {
        (Some(th), Some(p)) => p > th * 1.01 + 50e3,
        _ => false,
    });
    if other_threads {
        return Err(WallBecause::OtherThreads);
    }
    if waits_more(a, b) || waits_more(b, a) {
        return Err(WallBecause::WaitsDiffer);
    }
    Ok(())
}

/// The share of a sample's wall time spent off the CPU.
fn off_share(t: &Timing) -> f64 {
    match t.thread_cpu {
        Some(c) if t.wall > 0.0 => ((t.wall - c) / t.wall).max(0.0),
        _ => 0.0,
    }
}

/// Whether `b`'s off-CPU share is higher than `a`'s in significantly many pairs (one-sided sign
/// test, p < 0.01) and by more than 1 % of the wall time in the median pair.
fn waits_more(a: &[Timing], b: &[Timing]) -> bool {
    let d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| off_share(y) - off_share(x))
        .collect();
    let n = d.len() as u64;
    if n == 0 {
        return false;
    }
    let k = d.iter().filter(|&&x| x > 0.0).count() as u64;
    // P(X ≥ k) for X ~ Binomial(n, 1/2).
    let p = match Binomial::new(0.5, n) {
        Ok(b) if k > 0 => 1.0 - b.cdf(k - 1),
        Ok(_) => 1.0,
        Err(_) => return false,
    };
    let mut sorted = d.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    p < 0.01 && median > 0.01
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(wall: f64, cpu: f64) -> Timing {
        Timing {
            wall,
            thread_cpu: Some(cpu),
            process_cpu: Some(cpu),
        }
    }

    #[test]
    fn cpu_time_when_both_report_it_and_nothing_is_off() {
        // Steal on both sides at random: off-CPU shares of 0-50 %, in no consistent direction.
        let base: Vec<Timing> = (0..20)
            .map(|i| t(1e6 * (1.0 + (i % 3) as f64 * 0.4), 1e6))
            .collect();
        let head: Vec<Timing> = (0..20)
            .map(|i| t(1.1e6 * (1.0 + ((i + 1) % 3) as f64 * 0.4), 1.1e6))
            .collect();
        assert_eq!(choose(&base, &head, true), Ok(()));
        assert_eq!(
            choose(&base, &head, false),
            Err(WallBecause::NotReported),
            "not allowed for the row"
        );
    }

    #[test]
    fn wall_time_when_a_side_lacks_cpu_time() {
        let base = vec![t(1e6, 1e6); 10];
        let mut head = base.clone();
        head[3].thread_cpu = None;
        assert_eq!(choose(&base, &head, true), Err(WallBecause::NotReported));
        assert_eq!(choose(&[], &[], true), Err(WallBecause::NotReported));
        head[3].thread_cpu = Some(0.0);
        assert_eq!(
            choose(&base, &head, true),
            Err(WallBecause::NotReported),
            "zero"
        );
    }

    #[test]
    fn wall_time_when_another_thread_worked() {
        let base = vec![t(1e6, 1e6); 10];
        let mut head = base.clone();
        head[0].process_cpu = Some(1.2e6);
        assert_eq!(choose(&base, &head, true), Err(WallBecause::OtherThreads));
        // Within the allowance: the clocks are read a few hundred ns apart.
        head[0].process_cpu = Some(1.005e6);
        assert_eq!(choose(&base, &head, true), Ok(()));
    }

    /// A head that sleeps 5 % of each sample takes no more CPU time, only more wall time: CPU
    /// time would hide it, so the round falls back to wall time, in either order of the sides.
    #[test]
    fn wall_time_when_the_head_waits_off_the_cpu() {
        let base = vec![t(1e6, 1e6); 12];
        let head = vec![t(1.05e6, 1e6); 12];
        assert_eq!(choose(&base, &head, true), Err(WallBecause::WaitsDiffer));
        // The sides come in the round's order (AB or BA): the same whichever is first.
        assert_eq!(choose(&head, &base, true), Err(WallBecause::WaitsDiffer));
        // Too few pairs to tell, or too small a difference: CPU time.
        assert_eq!(choose(&base[..5], &head[..5], true), Ok(()));
        let slight = vec![t(1.005e6, 1e6); 12];
        assert_eq!(choose(&base, &slight, true), Ok(()));
    }
}
