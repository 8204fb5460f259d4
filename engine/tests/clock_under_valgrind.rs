//! The CPU clocks read under valgrind (`src/clock.rs`): the harness counts a served benchmark's
//! instructions with callgrind, and the serve loop reads these clocks on every sample. With
//! rustix's vDSO-based `clock_gettime` every such count died with SIGSEGV. This test runs itself
//! again under `valgrind --tool=none` and reads both clocks there. valgrind is required, never
//! skipped (`tools/valgrind.sh` installs it; `.ci/run` runs that first).

use std::process::Command;

const CHILD: &str = "ENGINE_CLOCK_UNDER_VALGRIND_CHILD";

#[test]
#[cfg(target_os = "linux")]
fn the_cpu_clocks_read_under_valgrind() {
    if std::env::var_os(CHILD).is_some() {
        let (t, p) = (
            engine::clock::thread_cpu_ns().expect("thread CPU clock"),
            engine::clock::process_cpu_ns().expect("process CPU clock"),
        );
        println!("clocks: thread {t} process {p}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("valgrind")
        .args(["--tool=none", "--quiet"])
        .arg(&exe)
        .args([
            "--exact",
            "the_cpu_clocks_read_under_valgrind",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run valgrind (tools/valgrind.sh installs it): {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "under valgrind: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("clocks: thread "), "{stdout}\n{stderr}");
}
