//! The linker wrapper on a real build: a throwaway crate built by real cargo and rustc through
//! `harness __link` (the wrapper `harness::placement::wrapper` installs), then linked again from
//! the recipe it kept. Without a seed the relink is the executable byte for byte (the recipe is
//! the whole link); with one, the same program in another function order (other bytes, the same
//! output), the same bytes again for the same seed, other bytes for another seed. The binary
//! cargo uplifts out of `deps/` finds the same recipe. An executable
//! linked again outside the wrapper makes its recipe stale, and that is an error naming it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::placement::{Recipe, cargo_env, supported, wrapper};

const MAIN_RS: &str = r#"
#[inline(never)] fn a(x: u64) -> u64 { x.wrapping_mul(6364136223846793005).rotate_left(7) }
#[inline(never)] fn b(x: u64) -> u64 { a(x) ^ (x >> 3) }
#[inline(never)] fn c(x: u64) -> u64 { b(x).wrapping_add(a(x ^ 0xdead)) }
#[inline(never)] fn d(x: u64) -> u64 { c(x) % 1_000_003 }
fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut acc = 0u64;
    for i in 0..n { acc = acc.wrapping_add(d(i)).wrapping_add(c(acc)); }
    println!("{acc}");
}
"#;

fn run(exe: &Path) -> String {
    let out = Command::new(exe).arg("1000").output().unwrap();
    assert!(out.status.success(), "{} failed", exe.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_recipe_links_the_executable_again_exactly_and_in_other_orders() {
    if !supported() {
        // Only x86_64 Linux links through lld, which the recipe's check asks for; the harness's
        // CI runs there, so this branch is not how CI passes.
        eprintln!("placement relinks need x86_64-unknown-linux-gnu");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"placed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/main.rs"), MAIN_RS).unwrap();
    let target = dir.path().join("target");
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let w = wrapper(&target, &ws, &harness).expect("a wrapper on x86_64 Linux");
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&ws)
        .args(["build", "--release", "-q"])
        .env("CARGO_TARGET_DIR", &target)
        .envs(cargo_env(&w))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = std::fs::read_dir(target.join("release/deps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .is_some_and(|n| n.starts_with("placed-") && !n.contains('.'))
        })
        .expect("the executable in deps");
    let recipe = Recipe::of(&exe).unwrap_or_else(|e| panic!("{e}"));
    // The codegen units rustc deleted after the link are the recipe's own now.
    assert!(
        recipe.args.iter().any(|a| a.contains(".placement/objs/")),
        "{:?}",
        recipe.args
    );
    // The uplifted `release/placed` (a hard link of the `deps` executable, what the e2e checks
    // run as `release/engine`) finds the same recipe.
    assert_eq!(
        Recipe::of(&target.join("release/placed")).unwrap_or_else(|e| panic!("{e}")),
        recipe
    );
    let limit = Duration::from_secs(120);
    let same = dir.path().join("same");
    recipe.link(None, &same, limit).unwrap();
    assert!(
        std::fs::read(&same).unwrap() == std::fs::read(&exe).unwrap(),
        "a relink without a seed differs from cargo's link"
    );
    let expected = run(&exe);
    let mut orders = Vec::new();
    for (name, seed) in [("s1", 1), ("s1-again", 1), ("s2", 2)] {
        let p = dir.path().join(name);
        recipe.link(Some(seed), &p, limit).unwrap();
        assert_eq!(
            run(&p),
            expected,
            "seed {seed} changed what the program does"
        );
        orders.push(std::fs::read(&p).unwrap());
    }
    assert_eq!(orders[0], orders[1], "one seed, one order");
    assert_ne!(orders[0], orders[2], "two seeds, one order");
    // The executable written again behind the wrapper's back (the same bytes, so only the
    // modification time tells): its recipe no longer describes it.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::copy(&same, &exe).unwrap();
    assert_eq!(std::fs::metadata(&exe).unwrap().len(), recipe.exe_len);
    let err = Recipe::of(&exe).unwrap_err();
    assert!(err.contains("older than the executable"), "{err}");
    assert!(err.contains(exe.to_str().unwrap()), "{err}");
}
