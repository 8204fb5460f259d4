//! A benchmark group that either criterion measures (`cargo bench`, the harness's criterion
//! rounds) or that **serves timed samples of one benchmark** to the harness (paired rounds).
//!
//! Paired rounds (harness/STATS.md, "Paired sampling") need base and head to alternate sample by
//! sample: this machine's speed drifts on a scale of a second, so two measurements of the same
//! code one second apart differ by about 11 % (sd of the log ratio), 60 ms apart by about 3 %.
//! Criterion cannot alternate two processes, so under `HARNESS_BENCH_SERVE=<full id>` the bench
//! executable does not run criterion at all: it builds its inputs as usual, and at the benchmark
//! with that id it serves this protocol on stdin/stdout, then exits:
//!
//! ```text
//! exe  -> harness   harness-serve ready <id> [bytes|elements <per iteration>]
//! harness -> exe    <n>                  run n iterations, timed as criterion's `iter` does
//! exe  -> harness   harness-serve <n> <elapsed ns> [<thread cpu ns> <process cpu ns>]
//! …                                      until stdin closes: the process exits 0
//! ```
//!
//! The two optional fields are the same interval in CPU time (`engine::clock`): of the serving
//! thread, and of the whole process. On a VM whose host steals the vCPU, thread CPU time leaves
//! the stolen time out where wall time counts it; the harness uses it for a single-threaded
//! benchmark when both sides send it and the process's CPU time shows no other thread worked
//! (harness/STATS.md, "The clock"). Where the CPU clocks cannot be read, only the wall time.
//!
//! Both processes of a pair stay alive for the whole benchmark; the one not being asked is blocked
//! on its stdin, so it takes no CPU from the one measuring. A process that reaches the end of its
//! groups without meeting the id prints nothing and exits: the harness reports the id as missing.
//! Ids are criterion's (`group/function/parameter`), so both modes name benchmarks alike.

use std::fmt::Display;
use std::hint::black_box;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use engine::clock::{process_cpu_ns, thread_cpu_ns};

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, Throughput};

/// The environment variable that selects serve mode and names the benchmark to serve.
pub const SERVE_ENV: &str = "HARNESS_BENCH_SERVE";
/// Prefix of every protocol line the executable writes (criterion may write other lines).
pub const PREFIX: &str = "harness-serve";

/// A criterion benchmark group, or in serve mode the lookout for the one benchmark to serve.
pub struct Group<'a> {
    name: String,
    mode: Mode<'a>,
    /// The throughput set last, announced when serving (criterion writes it to its own files).
    throughput: Option<Throughput>,
}

enum Mode<'a> {
    Criterion(BenchmarkGroup<'a, WallTime>),
    Serve(String),
}

/// `c.benchmark_group(name)`, or in serve mode a group that criterion never sees.
pub fn group<'a>(c: &'a mut Criterion, name: &str) -> Group<'a> {
    let mode = match std::env::var(SERVE_ENV) {
        Ok(id) => Mode::Serve(id),
        Err(_) => Mode::Criterion(c.benchmark_group(name)),
    };
    Group {
        name: name.to_string(),
        mode,
        throughput: None,
    }
}

impl Group<'_> {
    /// The throughput of the benchmarks added next.
    pub fn throughput(&mut self, t: Throughput) {
        if let Mode::Criterion(g) = &mut self.mode {
            g.throughput(t.clone());
        }
        self.throughput = Some(t);
    }

    /// Whether this process can reach a benchmark of this group whose function name satisfies
    /// `function`: always under criterion; when serving, only if the served id is
    /// `<group>/<function>/…` with such a function. A bench skips building what only unreachable
    /// benchmarks use, above all a multi-threaded backend: its pool's threads, started beside the
    /// served benchmark, allocate by timing and leave the main thread's heap in one of several
    /// states, so glibc's malloc takes other paths in the loop and a one-thread benchmark's
    /// instruction count differs from process to process (`matvec/f32/576x1536` by 0.13 % in
    /// two processes of one A/A when the two-thread matmul backend was built before it;
    /// harness/eval/noise/README.md).
    pub fn reaches(&self, function: impl Fn(&str) -> bool) -> bool {
        match &self.mode {
            Mode::Criterion(_) => true,
            Mode::Serve(id) => id
                .strip_prefix(self.name.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.split('/').next())
                .is_some_and(function),
        }
    }

    /// What `ready` says after the id: the throughput per iteration, when it is one the harness
    /// reports.
    fn announce(&self) -> String {
        match self.throughput {
            Some(Throughput::Bytes(n) | Throughput::BytesDecimal(n)) => format!(" bytes {n}"),
            Some(Throughput::Elements(n)) => format!(" elements {n}"),
            _ => String::new(),
        }
    }

    /// Benchmark `routine` as `group/function/parameter` (criterion's `iter`).
    pub fn bench<O>(
        &mut self,
        function: impl Display,
        parameter: impl Display,
        mut routine: impl FnMut() -> O,
    ) {
        let announce = self.announce();
        match &mut self.mode {
            Mode::Criterion(g) => {
                g.bench_function(BenchmarkId::new(function.to_string(), parameter), |b| {
                    b.iter(&mut routine)
                });
            }
            Mode::Serve(id) => {
                if *id == format!("{}/{function}/{parameter}", self.name) {
                    serve(&format!("{id}{announce}"), |n| {
                        let mut t = Timed::default();
                        let start = Mark::start();
                        for _ in 0..n {
                            black_box(routine());
                        }
                        t.add(&start, &Mark::end());
                        t
                    });
                }
            }
        }
    }

    /// Benchmark `routine` on a fresh input from `setup` each iteration, built right before that
    /// iteration and not timed (criterion's `iter_batched_ref` with `BatchSize::PerIteration`;
    /// when serving, each iteration timed on its own the same way).
    ///
    /// One input per batch, so an input is as warm when its iteration starts as it would be in a
    /// decode step (the logits come straight from the LM head) at every sample size. With
    /// criterion's `SmallInput` (a tenth of a sample's iterations per batch) the inputs' cache
    /// state followed the sample's iteration count: a 192 KiB logits clone per input, one to five
    /// per batch in the gate's short samples (still in L2 when used) and up to 34 (6.5 MiB, gone
    /// to memory) in criterion's 1 s samples. A patch that adds a pass over the logits measured
    /// +19 % in short samples and +2 % in long ones on the same two executables
    /// (harness/eval/corpus/README.md, finding 9). The price is two clock marks per iteration
    /// (well under 1 µs, against 20-300 µs for the sampling rows), the same on both sides.
    pub fn bench_with_setup<I, O>(
        &mut self,
        function: impl Display,
        parameter: impl Display,
        mut setup: impl FnMut() -> I,
        mut routine: impl FnMut(&mut I) -> O,
    ) {
        let announce = self.announce();
        match &mut self.mode {
            Mode::Criterion(g) => {
                g.bench_function(BenchmarkId::new(function.to_string(), parameter), |b| {
                    b.iter_batched_ref(&mut setup, &mut routine, BatchSize::PerIteration)
                });
            }
            Mode::Serve(id) => {
                if *id == format!("{}/{function}/{parameter}", self.name) {
                    serve(&format!("{id}{announce}"), |n| {
                        let mut t = Timed::default();
                        for _ in 0..n {
                            let mut input = setup();
                            let start = Mark::start();
                            let output = routine(black_box(&mut input));
                            t.add(&start, &Mark::end());
                            // Dropped untimed, as criterion drops a batch's outputs.
                            black_box(output);
                        }
                        t
                    });
                }
            }
        }
    }

    pub fn finish(self) {
        if let Mode::Criterion(g) = self.mode {
            g.finish();
        }
    }
}

/// Serves timed samples of one benchmark until stdin closes, then exits the process (the other
/// groups' inputs are never built). A line that is not an iteration count ends it with an error.
/// Never inlined: the harness counts instructions inside this function by its name
/// (`valgrind --tool=callgrind --toggle-collect=*common::group::serve*`,
/// harness/src/measure/instructions.rs).
#[inline(never)]
fn serve(ready: &str, mut run: impl FnMut(u64) -> Timed) -> ! {
    let mut out = std::io::stdout().lock();
    write_line(&mut out, format!("ready {ready}"));
    let mut input = std::io::stdin().lock();
    while one_request(&mut input, &mut out, &mut run) {}
    std::process::exit(0);
}

/// Reads one request, runs it and answers; `false` at the end of input. Never inlined, and
/// with no closure inside (a closure's name would begin with this one's): the harness has
/// callgrind write its counts out each time this returns (`--dump-after=*common::group::one_request*`),
/// so one process counts several samples apart. Its name must not match the `serve` pattern above,
/// which toggles collection on each entry and exit.
#[inline(never)]
fn one_request(
    input: &mut impl BufRead,
    out: &mut std::io::StdoutLock,
    run: &mut impl FnMut(u64) -> Timed,
) -> bool {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => return false,
        Ok(_) => {}
    }
    let n: u64 = match line.trim().parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!(
                "{PREFIX}: expected an iteration count, got {:?}",
                line.trim_end()
            );
            std::process::exit(2);
        }
    };
    let t = run(n);
    let cpu = match (t.thread_cpu, t.process_cpu) {
        (Some(a), Some(b)) => format!(" {a} {b}"),
        _ => String::new(),
    };
    write_line(out, format!("{n} {}{cpu}", t.wall.as_nanos()));
    true
}

/// One protocol line; a closed stdout (the harness has gone) ends the process.
fn write_line(out: &mut std::io::StdoutLock, line: String) {
    if writeln!(out, "{PREFIX} {line}")
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// One instant on the three clocks a sample reports. The CPU clocks are read inside the wall
/// interval ([`Mark::start`], [`Mark::end`]), so a sample's CPU time is never longer than its
/// wall time.
struct Mark {
    wall: Instant,
    thread_cpu: Option<u64>,
    process_cpu: Option<u64>,
}

impl Mark {
    /// Wall clock first, then the CPU clocks.
    fn start() -> Mark {
        let wall = Instant::now();
        Mark {
            wall,
            thread_cpu: thread_cpu_ns(),
            process_cpu: process_cpu_ns(),
        }
    }

    /// The CPU clocks first, then the wall clock.
    fn end() -> Mark {
        let (process_cpu, thread_cpu) = (process_cpu_ns(), thread_cpu_ns());
        Mark {
            wall: Instant::now(),
            thread_cpu,
            process_cpu,
        }
    }
}

/// A sample's timed intervals added up on each clock (`None`: a CPU clock could not be read).
struct Timed {
    wall: Duration,
    thread_cpu: Option<u64>,
    process_cpu: Option<u64>,
}

impl Default for Timed {
    fn default() -> Timed {
        Timed {
            wall: Duration::ZERO,
            thread_cpu: Some(0),
            process_cpu: Some(0),
        }
    }
}

impl Timed {
    fn add(&mut self, start: &Mark, end: &Mark) {
        let span =
            |sum: Option<u64>, a: Option<u64>, b: Option<u64>| Some(sum? + b?.checked_sub(a?)?);
        self.wall += end.wall.duration_since(start.wall);
        self.thread_cpu = span(self.thread_cpu, start.thread_cpu, end.thread_cpu);
        self.process_cpu = span(self.process_cpu, start.process_cpu, end.process_cpu);
    }
}
