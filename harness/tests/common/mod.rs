//! The throwaway criterion crate the end-to-end test (`compare_e2e`: compare, calibrate and the
//! pre-push hook) commits into its fixture repository: three benches `work/{slow,fast,same}/x`
//! whose cost is set by constants in `src/lib.rs`. They also serve paired samples, as the
//! engine's benches do, so the comparisons run paired, and their instructions are counted.
#![allow(dead_code)]

pub const CARGO_TOML: &str = r#"[package]
name = "fixture"
version = "0.1.0"
edition = "2021"
publish = false

[workspace]

[dev-dependencies]
criterion = { version = "0.8", default-features = false, features = ["cargo_bench_support"] }

[[bench]]
name = "work"
harness = false

[profile.release]
debug = false
"#;

pub const BENCH: &str = r#"use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::io::{BufRead, Write};

/// The harness's serve protocol (paired sampling), inline, under the same module path as
/// engine/benches/common/group.rs: the harness counts instructions inside
/// `*common::group::serve*`.
mod common {
    pub mod group {
        use super::super::*;

        #[inline(never)]
        pub fn serve(id: &str, n: u64) -> ! {
            let mut out = std::io::stdout();
            writeln!(out, "harness-serve ready {id}").unwrap();
            out.flush().unwrap();
            for line in std::io::stdin().lock().lines() {
                let iters: u64 = line.unwrap().trim().parse().unwrap();
                let t = std::time::Instant::now();
                for _ in 0..iters {
                    black_box(fixture::spin(black_box(n)));
                }
                writeln!(out, "harness-serve {iters} {}", t.elapsed().as_nanos()).unwrap();
                out.flush().unwrap();
            }
            std::process::exit(0)
        }
    }
}
use common::group::serve;

fn work(c: &mut Criterion) {
    let serving = std::env::var("HARNESS_BENCH_SERVE").ok();
    let mut g = c.benchmark_group("work");
    for (name, n) in [("slow", fixture::SLOW), ("fast", fixture::FAST), ("same", fixture::SAME)] {
        match &serving {
            Some(id) if *id == format!("work/{name}/x") => serve(id, n),
            Some(_) => {}
            None => {
                g.bench_function(BenchmarkId::new(name, "x"), |b| {
                    b.iter(|| fixture::spin(black_box(n)))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, work);
criterion_main!(benches);
"#;

/// [`BENCH`] with the serve loop of engine/benches/common/group.rs since 2026-12-04: each request
/// in a function of its own, `one_request`, after which callgrind writes its counts out, so the
/// harness counts the samples of one process apart (harness/src/measure/instructions.rs).
/// [`BENCH`] has none, and is counted the older way, a process per sample.
pub fn bench_per_request() -> String {
    let old = BENCH
        .split_once("        #[inline(never)]\n        pub fn serve")
        .expect("BENCH has a serve function")
        .0;
    let rest = BENCH
        .split_once("            std::process::exit(0)\n        }\n")
        .expect("BENCH's serve ends with exit")
        .1;
    format!("{old}{PER_REQUEST}{rest}")
}

const PER_REQUEST: &str = r#"        #[inline(never)]
        pub fn serve(id: &str, n: u64) -> ! {
            let mut out = std::io::stdout();
            writeln!(out, "harness-serve ready {id}").unwrap();
            out.flush().unwrap();
            let mut input = std::io::stdin().lock();
            while one_request(&mut input, &mut out, n) {}
            std::process::exit(0)
        }

        #[inline(never)]
        fn one_request(input: &mut impl BufRead, out: &mut std::io::Stdout, n: u64) -> bool {
            let mut line = String::new();
            if input.read_line(&mut line).unwrap() == 0 {
                return false;
            }
            let iters: u64 = line.trim().parse().unwrap();
            let t = std::time::Instant::now();
            for _ in 0..iters {
                black_box(fixture::spin(black_box(n)));
            }
            writeln!(out, "harness-serve {iters} {}", t.elapsed().as_nanos()).unwrap();
            out.flush().unwrap();
            true
        }
"#;

pub fn lib_rs(slow: u64, fast: u64, same: u64) -> String {
    format!(
        r#"pub const SLOW: u64 = {slow};
pub const FAST: u64 = {fast};
pub const SAME: u64 = {same};

/// `n` dependent multiply-adds: time proportional to n, not optimised away.
pub fn spin(n: u64) -> u64 {{
    let mut x = 1u64;
    for i in 0..n {{
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }}
    x
}}
"#
    )
}
