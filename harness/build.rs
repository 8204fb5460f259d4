//! Builds `src/measure/fixed_getrandom.c` into a shared library that the harness carries in its
//! binary and preloads into the processes valgrind counts (src/measure/instructions.rs says
//! why). The `cc` crate finds the C compiler cargo's linker already needs on Linux; elsewhere
//! (no valgrind to count with) nothing is built.

fn main() {
    // The target the harness is built for, which `cargo bench` in a slot builds for too: its
    // linker variable (src/placement.rs).
    println!(
        "cargo:rustc-env=HARNESS_HOST_TARGET={}",
        std::env::var("TARGET").expect("TARGET")
    );
    const SRC: &str = "src/measure/fixed_getrandom.c";
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rustc-check-cfg=cfg(fixed_getrandom)");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"))
        .join("libfixed_getrandom.so");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-Wall", "-Wextra", "-o"])
        .arg(&out)
        .arg(SRC)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler on {SRC}: {e}"));
    assert!(status.success(), "the C compiler failed on {SRC}: {status}");
    println!("cargo:rustc-cfg=fixed_getrandom");
}
