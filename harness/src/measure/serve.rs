//! Paired sampling: one benchmark measured on both sides at once, sample by sample (the client
//! side of the serve protocol).
//!
//! Both sides' bench executables are started with `HARNESS_BENCH_SERVE=<id>` and serve timed
//! samples of that benchmark over stdin/stdout (the protocol is in
//! `engine/benches/common/group.rs`). The harness asks them in turn, ABBA ABBA …, so the two
//! sides' samples are interleaved about `measurement / sample_size` apart (60 ms at the default
//! settings) instead of a whole criterion run (about a second) apart. On this machine that is
//! the difference that matters: its speed drifts on a scale of a second, and the per-round sd of
//! the A/A log ratio falls from about 0.11 with criterion runs to about 0.03 this way
//! (harness/STATS.md, "Paired sampling"; `harness/eval/paired.py`).
//!
//! One side waits on its stdin while the other measures, so a multi-threaded benchmark still has
//! the machine to itself. The samples are kept with `sampling_mode` "paired"; each side's number
//! for the round (shown in the report) is the lower quartile of its samples, as for a criterion
//! run, and the round's log ratio, which the decision uses, is the mean of the even and odd
//! pairs' medians, which cancels the switch effect (the median over all pairs below 6 pairs and
//! for the warm layout: `stats::paired_log_ratio`, [`SAMPLING_MODE`]).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::clock::Timing;
use super::criterion::Measured;
use crate::build::{LOG_TAIL_LINES, tail};
use crate::config::PairSettings;
use crate::results::{RawSample, THREAD_CPU, Throughput};
use crate::vocab::ProcessFailure;

/// The environment variable that makes a bench executable serve one benchmark.
pub const SERVE_ENV: &str = "HARNESS_BENCH_SERVE";
const PREFIX: &str = "harness-serve";
/// `RawSample::sampling_mode` of paired samples: sample `i` of base and of head were taken back
/// to back in the order F S S F F S …, so in each pair one side's sample follows a switch, and
/// the round's log ratio is the mean of the even and odd pairs' medians
/// (`stats::paired_log_ratio` with [`PairLayout::SwitchAlternates`]).
pub const SAMPLING_MODE: &str = "paired";
/// `RawSample::sampling_mode` of paired end-to-end decodes (e2e/mod.rs): requests in turn as
/// above, but each side's first request after the other's is run and not kept, so no kept
/// sample follows a switch and the round's log ratio is the median over all pairs
/// ([`PairLayout::Warm`]).
pub const SAMPLING_MODE_WARM: &str = "paired_warm";

pub use crate::stats::PairLayout;

/// How a sample mode's pairs were taken, `None` when they were not paired.
pub fn pair_layout(mode: &str) -> Option<PairLayout> {
    match mode {
        SAMPLING_MODE => Some(PairLayout::SwitchAlternates),
        SAMPLING_MODE_WARM => Some(PairLayout::Warm),
        _ => None,
    }
}

/// What went wrong, and on which of the two executables (index into the `exes` given).
#[derive(Clone, Debug, PartialEq)]
pub struct PairFailure {
    pub which: usize,
    pub failure: ProcessFailure,
}

/// One serving process: a line protocol over its stdin and stdout, each of its lines starting
/// with `prefix` (other lines are kept for the failure tail). Also the end-to-end stage's
/// `engine profile --serve` client (`crate::e2e`).
pub struct Server {
    exe: String,
    prefix: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Every stdout line that was not a protocol answer (for the failure tail).
    other: Vec<String>,
    stderr: Option<std::thread::JoinHandle<Vec<String>>>,
    /// Kills the process when it outlives its deadline, and the `deadlines.` key that set it.
    watch: Option<(crate::process::Deadline, &'static str)>,
}

impl Server {
    /// Starts `exe` serving benchmark `id`, on CPU `cpu` only when given (`super::affinity`),
    /// killed after `deadline` (`deadlines.bench_s`).
    fn start(
        exe: &Path,
        id: &str,
        cpu: Option<usize>,
        deadline: std::time::Duration,
    ) -> Result<Server, String> {
        // `--list`: an executable that does not know the protocol lists its benchmarks and
        // exits instead of running them all; one that does ignores its arguments.
        let mut cmd = Command::new(exe);
        cmd.args(["--bench", "--list"])
            .env(SERVE_ENV, id)
            .current_dir(exe.parent().unwrap_or(Path::new(".")));
        Server::spawn(cmd, PREFIX, cpu, Some((deadline, "bench_s")))
    }

    /// Starts `cmd` (pinned to `cpu` when given) with piped stdin, stdout and stderr; with
    /// `deadline` (a limit and the `deadlines.` key it comes from), killed once it has run that
    /// long ([`Server::timed_out`] then says so).
    pub fn spawn(
        mut cmd: Command,
        prefix: &'static str,
        cpu: Option<usize>,
        deadline: Option<(std::time::Duration, &'static str)>,
    ) -> Result<Server, String> {
        super::affinity::apply(&mut cmd, cpu);
        crate::process::own_group(&mut cmd);
        let exe = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {exe}: {e}"))?;
        let watch =
            deadline.map(|(limit, key)| (crate::process::Deadline::watch(&child, limit), key));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let stderr = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        Ok(Server {
            exe,
            prefix,
            child,
            stdin,
            stdout,
            other: Vec::new(),
            stderr: Some(stderr),
            watch,
        })
    }

    /// "… timed out after N s …" when the deadline killed the process: what a failure of this
    /// server is reported as, whatever the protocol saw (an early end of output).
    pub fn timed_out(&self) -> Option<String> {
        self.watch
            .as_ref()
            .filter(|(w, _)| w.fired())
            .map(|(w, key)| w.message(&self.exe, key))
    }

    /// The executable, for messages.
    pub fn exe(&self) -> &str {
        &self.exe
    }

    /// The next protocol line, after the prefix and its space; `None` at end of output.
    pub fn next_line(&mut self) -> Option<String> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let l = line.trim_end();
            match l.strip_prefix(self.prefix) {
                Some(rest) if rest.starts_with(' ') => return Some(rest[1..].to_string()),
                _ => self.other.push(l.to_string()),
            }
        }
    }

    /// Writes one request line; an error says the process stopped reading.
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let sent = self
            .stdin
            .as_mut()
            .map(|s| writeln!(s, "{line}").and_then(|_| s.flush()));
        if matches!(sent, Some(Ok(()))) {
            Ok(())
        } else {
            Err(format!("{} stopped reading requests", self.exe))
        }
    }

    /// Closes stdin (the end of requests) without waiting.
    pub fn close(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for `ready <id> [bytes|elements <n>]`; returns the announced throughput. The id
    /// is matched whole (ids may hold spaces), the throughput is what follows it.
    fn ready(&mut self, id: &str) -> Result<Option<Throughput>, String> {
        let Some(line) = self.next_line() else {
            return Err(format!("{} did not serve benchmark {id}", self.exe));
        };
        let rest = line
            .strip_prefix("ready ")
            .and_then(|r| r.strip_prefix(id))
            .filter(|r| r.is_empty() || r.starts_with(' '));
        let Some(rest) = rest else {
            return Err(format!(
                "{}: expected `{PREFIX} ready {id}`, got `{PREFIX} {line}`",
                self.exe
            ));
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        Ok(match words[..] {
            ["bytes", n] => n.parse().ok().map(Throughput::Bytes),
            ["elements", n] => n.parse().ok().map(Throughput::Elements),
            _ => None,
        })
    }

    /// Runs `n` iterations; their total time in ns, on every clock the executable reports
    /// (`<n> <wall ns> [<thread cpu ns> <process cpu ns>]`).
    fn sample(&mut self, n: u64) -> Result<Timing, String> {
        self.send(&n.to_string())
            .map_err(|_| format!("{} stopped reading samples", self.exe))?;
        let Some(line) = self.next_line() else {
            return Err(format!(
                "{} ended during a sample of {n} iterations",
                self.exe
            ));
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let time = |w: &str, positive: bool| match w.parse::<f64>() {
            Ok(ns) if ns.is_finite() && (ns > 0.0 || !positive && ns >= 0.0) => Ok(ns),
            _ => Err(format!("{}: bad sample time `{w}`", self.exe)),
        };
        match words[..] {
            [got, ns] if got.parse::<u64>() == Ok(n) => Ok(Timing {
                wall: time(ns, true)?,
                ..Timing::default()
            }),
            [got, ns, thread, process] if got.parse::<u64>() == Ok(n) => Ok(Timing {
                wall: time(ns, true)?,
                thread_cpu: Some(time(thread, false)?),
                process_cpu: Some(time(process, false)?),
            }),
            _ => Err(format!(
                "{}: expected `{PREFIX} {n} <ns> [<thread cpu ns> <process cpu ns>]`, got `{PREFIX} {line}`",
                self.exe
            )),
        }
    }

    /// Closes stdin and waits; an unsuccessful exit is an error.
    pub fn finish(mut self) -> Result<(), (String, Vec<String>)> {
        drop(self.stdin.take());
        let status = self.child.wait();
        let log = self.log();
        if let Some(m) = self.timed_out() {
            return Err((m, log));
        }
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err((format!("{} exited with {s}", self.exe), log)),
            Err(e) => Err((format!("{}: {e}", self.exe), log)),
        }
    }

    /// Kills the process (after a failure) and returns its output tail.
    pub fn abort(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }

    fn log(&mut self) -> Vec<String> {
        // Drain what is left of stdout so the stderr thread's pipe is not the only one open.
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        let mut lines = std::mem::take(&mut self.other);
        lines.extend(rest.lines().map(String::from));
        if let Some(h) = self.stderr.take() {
            lines.extend(h.join().unwrap_or_default());
        }
        tail(&lines, LOG_TAIL_LINES)
    }
}

/// Measures benchmark `id` on `exes[0]` and `exes[1]` (in that order first: the round's order),
/// paired sample by sample, both on CPU `cpu` when given, with `settings.processes` pairs of
/// processes one after the other (the samples split between them; odd pairs start the other
/// side first). Returns each executable's samples, stamped with `round`.
pub fn measure_pair(
    exes: [&Path; 2],
    id: &str,
    settings: &PairSettings,
    round: u32,
    cpu: Option<usize>,
) -> Result<[Measured; 2], PairFailure> {
    let k = settings.processes.max(1);
    let mut throughput = None;
    let mut iters: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut times: [Vec<Timing>; 2] = [Vec::new(), Vec::new()];
    for (j, samples) in process_shares(settings.samples, k).into_iter().enumerate() {
        // This pair's share of the samples and of the measurement time.
        if samples == 0 {
            continue;
        }
        let per_pair = PairSettings {
            samples,
            measurement: settings.measurement.mul_f64(f64::from(samples)) / settings.samples.max(1),
            ..*settings
        };
        let swap = j % 2 == 1;
        let order = if swap { [exes[1], exes[0]] } else { exes };
        let (t, n, ts) = measure_one_pair(order, id, &per_pair, cpu).map_err(|mut f| {
            if swap {
                f.which = 1 - f.which;
            }
            f
        })?;
        throughput = throughput.or(t);
        let [a, b] = ts;
        let (a, b) = if swap { (b, a) } else { (a, b) };
        for (side, ts) in [(0, a), (1, b)] {
            iters[side].extend(std::iter::repeat_n(n as f64, ts.len()));
            times[side].extend(ts);
        }
    }
    let [ia, ib] = iters;
    let [a, b] = times;
    let cpu = super::clock::choose(&a, &b, settings.cpu_clock).is_ok();
    let measured = |iters: Vec<f64>, times: Vec<Timing>| Measured {
        id: id.to_string(),
        throughput,
        sample: clocked_sample(round, SAMPLING_MODE, iters, &times, cpu),
    };
    Ok([measured(ia, a), measured(ib, b)])
}

/// A round's samples of one side in the chosen clock: thread CPU time (`cpu`, with the wall
/// times kept beside) or wall time.
pub fn clocked_sample(
    round: u32,
    mode: &str,
    iters: Vec<f64>,
    times: &[Timing],
    cpu: bool,
) -> RawSample {
    let wall: Vec<f64> = times.iter().map(|t| t.wall).collect();
    let thread: Option<Vec<f64>> = times.iter().map(|t| t.thread_cpu).collect();
    match thread.filter(|_| cpu) {
        Some(times_ns) => RawSample {
            round,
            sampling_mode: mode.into(),
            iters,
            times_ns,
            clock: Some(THREAD_CPU.into()),
            wall_ns: wall,
            others_cores: None,
        },
        None => RawSample {
            round,
            sampling_mode: mode.into(),
            iters,
            times_ns: wall,
            ..RawSample::default()
        },
    }
}

/// How `samples` sample pairs are split over `k` pairs of processes: about evenly, with every
/// pair of processes starting at an offset of its own index's parity. Pair `j` starts the other
/// side first when `j` is odd, so with those offsets the sample pairs of the whole round keep the
/// one-process layout: in even-indexed pairs the second side's sample follows a switch, in odd
/// ones the first side's, which is what `stats::paired_log_ratio`'s two classes rely on.
fn process_shares(samples: u32, k: u32) -> Vec<u32> {
    let k = k.max(1);
    let mut offsets = vec![0u32];
    for j in 1..k {
        let prev = *offsets.last().expect("non-empty");
        let mut x = ((u64::from(samples) * u64::from(j) + u64::from(k) / 2) / u64::from(k)) as u32;
        if x % 2 != j % 2 {
            x = if x > prev { x - 1 } else { x + 1 };
        }
        offsets.push(x.clamp(prev, samples));
    }
    offsets.push(samples);
    offsets.windows(2).map(|w| w[1] - w[0]).collect()
}

/// What one pair of processes gave: the announced throughput, the iterations per sample and
/// each side's sample times.
type OnePair = (Option<Throughput>, u64, [Vec<Timing>; 2]);

/// One pair of processes: started, warmed up, sampled ABBA, finished. Returns the announced
/// throughput, the iterations per sample and each side's sample times.
fn measure_one_pair(
    exes: [&Path; 2],
    id: &str,
    settings: &PairSettings,
    cpu: Option<usize>,
) -> Result<OnePair, PairFailure> {
    let mut servers: Vec<Server> = Vec::with_capacity(2);
    let mut throughput = None;
    for (which, exe) in exes.iter().enumerate() {
        let started = match Server::start(exe, id, cpu, settings.deadline) {
            Ok(mut s) => match s.ready(id) {
                Ok(t) => {
                    throughput = throughput.or(t);
                    Ok(s)
                }
                Err(message) => Err((s.timed_out().unwrap_or(message), s.abort())),
            },
            Err(message) => Err((message, Vec::new())),
        };
        match started {
            Ok(s) => servers.push(s),
            Err((message, log_tail)) => {
                for s in servers {
                    s.abort();
                }
                return Err(PairFailure {
                    which,
                    failure: ProcessFailure::new(message, log_tail),
                });
            }
        }
    }
    let result = sample_pair(&mut servers, settings);
    let mut servers = servers.into_iter();
    let (first, second) = (servers.next().expect("two"), servers.next().expect("two"));
    let (n, times) = match result {
        Ok(r) => r,
        Err((which, message)) => {
            let message = [&first, &second][which].timed_out().unwrap_or(message);
            let tails = [first.abort(), second.abort()];
            return Err(PairFailure {
                which,
                failure: ProcessFailure::new(message, tails[which].clone()),
            });
        }
    };
    // Both are waited for (no process is left behind); the first failure is reported.
    let finished = [first.finish(), second.finish()];
    for (which, f) in finished.into_iter().enumerate() {
        if let Err((message, log_tail)) = f {
            return Err(PairFailure {
                which,
                failure: ProcessFailure::new(message, log_tail),
            });
        }
    }
    Ok((throughput, n, times))
}

/// The iteration count every sample ran and each side's sample times (ns).
type Sampled = (u64, [Vec<Timing>; 2]);

/// Warm-up of each side in turn (iteration counts doubling until `warm_up` is spent), then
/// `samples` samples per side in the order ABBA ABBA …, each sized from the slower side's
/// warm-up so one sample takes about `measurement / samples`.
fn sample_pair(servers: &mut [Server], s: &PairSettings) -> Result<Sampled, (usize, String)> {
    let mut per_iter = [0f64; 2];
    for (which, server) in servers.iter_mut().enumerate() {
        let (mut n, mut spent) = (1u64, 0f64);
        while spent < s.warm_up.as_secs_f64() * 1e9 {
            let t = server.sample(n).map_err(|e| (which, e))?.wall;
            spent += t;
            per_iter[which] = t / n as f64;
            n = n.saturating_mul(2);
        }
    }
    let n = sample_iters(s, per_iter[0].max(per_iter[1]));
    let mut times: [Vec<Timing>; 2] = [Vec::new(), Vec::new()];
    for i in 0..s.samples {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let t = servers[which].sample(n).map_err(|e| (which, e))?;
            times[which].push(t);
        }
    }
    Ok((n, times))
}

/// Iterations per sample so one takes about `measurement / samples` at `ns_per_iter`.
pub fn sample_iters(s: &PairSettings, ns_per_iter: f64) -> u64 {
    let target = s.measurement.as_secs_f64() * 1e9 / f64::from(s.samples.max(1));
    if ns_per_iter.is_finite() && ns_per_iter > 0.0 {
        ((target / ns_per_iter).round() as u64).max(1)
    } else {
        1
    }
}

/// Whether `exe` serves benchmark `id` (started with stdin closed: a serving executable says
/// `ready` and exits). Executables built before paired sampling existed list their benchmarks
/// instead, print no `ready`, and are measured with criterion runs.
pub fn serves(exe: &Path, id: &str) -> bool {
    let Ok(mut s) = Server::start(exe, id, None, crate::process::LIST_DEADLINE) else {
        return false;
    };
    drop(s.stdin.take());
    let ok = s.ready(id).is_ok();
    s.abort();
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const ID: &str = "g/f/p";

    /// A serving executable as a shell script: `ns` per iteration, its name appended to `log`
    /// on every sample. `serve: false` gives one that predates the protocol.
    fn script(dir: &Path, name: &str, ns: u64, serve: bool, log: &Path) -> std::path::PathBuf {
        let body = if serve {
            format!(
                "[ \"$HARNESS_BENCH_SERVE\" = {ID} ] || exit 0\n\
                 echo 'Gnuplot not found, using plotters backend'\n\
                 echo 'harness-serve ready {ID} elements 7'\n\
                 while read n; do echo {name} >> '{log}'; echo \"harness-serve $n $((n * {ns}))\"; done\n",
                log = log.display()
            )
        } else {
            format!("echo '{ID}: benchmark'\n")
        };
        executable(&dir.join(name), &format!("#!/bin/sh\n{body}"))
    }

    fn executable(p: &Path, text: &str) -> std::path::PathBuf {
        crate::process::test_script(p, text)
    }

    fn settings() -> PairSettings {
        PairSettings {
            warm_up: Duration::from_micros(5),
            measurement: Duration::from_millis(1),
            samples: 4,
            processes: 1,
            deadline: Duration::from_secs(60),
            cpu_clock: false,
        }
    }

    /// An executable that also reports CPU time: `cpu` ns of its thread's and `process` ns of
    /// its process's per iteration, `wall` ns of wall time.
    fn cpu_script(dir: &Path, name: &str, wall: u64, cpu: u64, process: u64) -> std::path::PathBuf {
        let body = format!(
            "echo 'harness-serve ready {ID}'
             while read n; do echo \"harness-serve $n $((n * {wall})) $((n * {cpu})) $((n * {process}))\"; done
"
        );
        executable(&dir.join(name), &format!("#!/bin/sh\n{body}"))
    }

    /// With CPU time allowed and reported by both, the round keeps it (and the wall times
    /// beside it); not allowed, or another thread at work, or one side without it: wall time.
    #[test]
    fn a_round_keeps_thread_cpu_time_only_when_allowed_reported_and_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Wall 3000 ns per iteration (the host stole two thirds), CPU 1000 / 1100.
        let a = cpu_script(dir.path(), "A", 3000, 1000, 1000);
        let b = cpu_script(dir.path(), "B", 3000, 1100, 1100);
        let on = PairSettings {
            cpu_clock: true,
            ..settings()
        };
        let [ma, mb] = measure_pair([&a, &b], ID, &on, 0, None).unwrap();
        let n = ma.sample.iters[0];
        assert_eq!(ma.sample.times_ns, vec![1000.0 * n; 4]);
        assert_eq!(mb.sample.times_ns, vec![1100.0 * n; 4]);
        assert_eq!(ma.sample.clock.as_deref(), Some(THREAD_CPU));
        assert_eq!(ma.sample.wall_ns, vec![3000.0 * n; 4]);

        let [ma, _] = measure_pair([&a, &b], ID, &settings(), 0, None).unwrap();
        assert_eq!(ma.sample.times_ns, vec![3000.0 * n; 4], "not allowed: wall");
        assert_eq!(ma.sample.clock, None);
        assert!(ma.sample.wall_ns.is_empty());

        let busy = cpu_script(dir.path(), "C", 3000, 1000, 2000);
        let [ma, _] = measure_pair([&a, &busy], ID, &on, 0, None).unwrap();
        assert_eq!(ma.sample.clock, None, "another thread worked: wall");

        let log = dir.path().join("log");
        let old = script(dir.path(), "D", 1000, true, &log);
        let [ma, md] = measure_pair([&a, &old], ID, &on, 0, None).unwrap();
        assert_eq!(
            (ma.sample.clock, md.sample.clock),
            (None, None),
            "one side without it"
        );
        let bad = executable(
            &dir.path().join("E"),
            &format!(
                "#!/bin/sh\necho 'harness-serve ready {ID}'\nwhile read n; do echo \"harness-serve $n 5 x 5\"; done\n"
            ),
        );
        let e = measure_pair([&a, &bad], ID, &on, 0, None).unwrap_err();
        assert!(e.failure.message.contains("bad sample time `x`"), "{e:?}");
    }

    #[test]
    fn samples_alternate_abba_after_each_sides_warm_up_and_keep_each_sides_times() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let a = script(dir.path(), "A", 1000, true, &log);
        let b = script(dir.path(), "B", 2000, true, &log);
        let [ma, mb] = measure_pair([&a, &b], ID, &settings(), 3, None).unwrap();
        // Warm-up until 5 µs: A takes 1 + 2 + 4 iterations (7 µs), B 1 + 2 (6 µs).
        let order: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(
            order.join(""),
            ["AAA", "BB", "ABBAABBA"].concat(),
            "warm-up of A, then of B, then ABBA ABBA"
        );
        // 1 ms / 4 samples at the slower side's 2 µs per iteration: 125 iterations a sample.
        assert_eq!(ma.sample.iters, vec![125.0; 4]);
        assert_eq!(ma.sample.times_ns, vec![125_000.0; 4]);
        assert_eq!(mb.sample.times_ns, vec![250_000.0; 4]);
        assert_eq!(ma.sample.sampling_mode, "paired");
        assert_eq!(mb.sample.round, 3);
        assert_eq!(ma.throughput, Some(Throughput::Elements(7)));
        assert_eq!(ma.id, ID);
    }

    #[test]
    fn process_shares_keep_the_switch_layout_of_one_process_pair() {
        assert_eq!(process_shares(10, 1), [10]);
        assert_eq!(process_shares(10, 2), [5, 5]);
        assert_eq!(process_shares(20, 2), [9, 11]);
        assert_eq!(process_shares(12, 3), [3, 5, 4]);
        assert_eq!(process_shares(2, 3), [1, 1, 0]);
        for samples in 1..40u32 {
            for k in 1..6u32 {
                let shares = process_shares(samples, k);
                assert_eq!(shares.iter().sum::<u32>(), samples);
                // Which side (0 = the round's first) follows a switch in each sample pair, as
                // measure_pair and sample_pair order them: after the warm-ups (the pair's first
                // side, then its second) both do; after that the pair's second side in its even
                // local pairs, its first in odd ones; odd process pairs swap the sides.
                let mut after_switch = Vec::new();
                for (j, &n) in shares.iter().enumerate() {
                    let swap = j % 2 == 1;
                    for i in 0..n {
                        let local = if i == 0 {
                            2
                        } else if i % 2 == 0 {
                            1
                        } else {
                            0
                        };
                        after_switch.push(match (local, swap) {
                            (2, _) => 2,
                            (l, false) => l,
                            (l, true) => 1 - l,
                        });
                    }
                }
                let even_ok = after_switch.iter().step_by(2).all(|&x| x != 0);
                let odd_ok = after_switch.iter().skip(1).step_by(2).all(|&x| x != 1);
                let enough = shares.iter().all(|&n| n > 0) || samples < 2 * k;
                assert!(
                    (even_ok && odd_ok) || samples < 2 * k,
                    "{samples} / {k}: {shares:?} {after_switch:?}"
                );
                assert!(enough, "{samples} / {k}: {shares:?}");
            }
        }
    }

    #[test]
    fn two_process_pairs_split_the_samples_and_the_second_starts_the_other_side_first() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let a = script(dir.path(), "A", 1000, true, &log);
        let b = script(dir.path(), "B", 2000, true, &log);
        let s = PairSettings {
            processes: 2,
            ..settings()
        };
        let [ma, mb] = measure_pair([&a, &b], ID, &s, 0, None).unwrap();
        let order: String = std::fs::read_to_string(&log).unwrap().lines().collect();
        // Pair 1: warm-up A, B, then AB; pair 2: warm-up B, A, then BAABBA (process_shares:
        // the second pair starts at an odd sample index, its first side being B).
        assert_eq!(order, ["AAA", "BB", "AB", "BB", "AAA", "BAABBA"].concat());
        assert_eq!(ma.sample.times_ns.len(), 4);
        assert_eq!(mb.sample.times_ns.len(), 4);
        // Each pair's samples are half the measurement: 0.5 ms / 2 at 2 µs per iteration.
        assert_eq!(ma.sample.iters, vec![125.0; 4]);
        assert_eq!(mb.sample.times_ns, vec![250_000.0; 4]);
    }

    #[test]
    fn an_executable_that_does_not_serve_fails_the_pair_and_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let a = script(dir.path(), "A", 1000, true, &log);
        let old = script(dir.path(), "old", 1000, false, &log);
        let e = measure_pair([&a, &old], ID, &settings(), 0, None).unwrap_err();
        assert_eq!(e.which, 1);
        assert!(
            e.failure.message.contains("did not serve benchmark g/f/p"),
            "{e:?}"
        );
        assert!(
            e.failure.message.contains(&old.display().to_string()),
            "{e:?}"
        );
        assert!(!log.exists(), "A was never asked for a sample");
        assert!(serves(&a, ID));
        assert!(!serves(&old, ID));
        assert!(!serves(&a, "g/f/other"), "a benchmark it does not have");
        assert!(!serves(&dir.path().join("missing"), ID));
    }

    #[test]
    fn an_executable_that_dies_mid_sample_is_an_error_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let a = script(dir.path(), "A", 1000, true, &log);
        let dies = executable(
            &dir.path().join("dies"),
            &format!(
                "#!/bin/sh\necho 'harness-serve ready {ID}'\nread n\n\
                 echo \"thread 'main' panicked at boom\" >&2\nexit 101\n"
            ),
        );
        let e = measure_pair([&a, &dies], ID, &settings(), 0, None).unwrap_err();
        assert_eq!(e.which, 1);
        assert!(e.failure.message.contains("ended during a sample"), "{e:?}");
        assert!(
            e.failure.log_tail.iter().any(|l| l.contains("boom")),
            "{e:?}"
        );
    }

    #[test]
    fn an_executable_that_hangs_is_killed_at_its_deadline_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let a = script(dir.path(), "A", 1000, true, &log);
        // Ready, then never answers a sample (a benchmark stuck in a loop).
        let hangs = executable(
            &dir.path().join("hangs"),
            &format!(
                "#!/bin/sh\necho 'harness-serve ready {ID}'\necho 'warming up' >&2\n\
                 read n || exit 0\nexec sleep 1000\n"
            ),
        );
        let s = PairSettings {
            deadline: Duration::from_secs(2),
            ..settings()
        };
        let start = std::time::Instant::now();
        let e = measure_pair([&a, &hangs], ID, &s, 0, None).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(e.which, 1);
        assert!(
            e.failure.message.contains("timed out after 2 s")
                && e.failure.message.contains("deadlines.bench_s"),
            "{e:?}"
        );
        assert!(
            e.failure.log_tail.iter().any(|l| l.contains("warming up")),
            "{e:?}"
        );
    }

    #[test]
    fn ready_matches_the_whole_id_and_reads_the_throughput_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let says = |name: &str, line: &str| {
            executable(
                &dir.path().join(name),
                &format!("#!/bin/sh\necho '{line}'\n"),
            )
        };
        let ok = says("ok", "harness-serve ready g/a b/p bytes 64");
        let mut s = Server::start(&ok, "g/a b/p", None, Duration::from_secs(60)).unwrap();
        assert_eq!(s.ready("g/a b/p"), Ok(Some(Throughput::Bytes(64))));
        s.abort();
        let longer = says("longer", "harness-serve ready g/a b/px");
        let mut s = Server::start(&longer, "g/a b/p", None, Duration::from_secs(60)).unwrap();
        let e = s.ready("g/a b/p").unwrap_err();
        assert!(e.contains("expected `harness-serve ready g/a b/p`"), "{e}");
        s.abort();
    }

    #[test]
    fn a_sample_lasts_about_measurement_over_samples() {
        let s = settings();
        assert_eq!(sample_iters(&s, 1000.0), 250);
        assert_eq!(sample_iters(&s, 1e9), 1, "at least one iteration");
        assert_eq!(sample_iters(&s, f64::NAN), 1);
    }
}
