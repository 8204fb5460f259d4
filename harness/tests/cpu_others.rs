//! `host::others_cores` on this machine: a spinning process outside the harness's process tree
//! counts as another process's work, one inside it (a child not yet reaped, or reaped between
//! the readings) does not. Its own test binary, so no other test's processes run beside it;
//! one test, so its cases do not overlap each other.

use std::process::{Command, Stdio};
use std::time::Duration;

use harness::host::{cpu_reading, others_cores};

/// Others' cores over `secs` seconds.
fn others_over(secs: f64) -> f64 {
    let a = cpu_reading().expect("/proc readable");
    std::thread::sleep(Duration::from_secs_f64(secs));
    let b = cpu_reading().expect("/proc readable");
    others_cores(&a, &b).expect("time passed")
}

const SPIN: &str = "while :; do :; done";

#[test]
fn a_spinner_outside_the_tree_is_another_process_and_one_inside_is_not() {
    if cpu_reading().is_none() {
        // Not Linux: nothing to read, and the gate records no others' CPU there.
        return;
    }
    // What a reading costs (a scan of /proc), printed for the docs' figure.
    let t = std::time::Instant::now();
    for _ in 0..20 {
        cpu_reading().unwrap();
    }
    eprintln!(
        "one reading: {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / 20.0
    );
    // What the machine does without us: the bounds below are relative to it.
    let quiet = others_over(1.0);
    // Our own child, spinning, then reaped within the second reading's interval.
    let mut child = Command::new("sh")
        .args(["-c", SPIN])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let a = cpu_reading().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mid = cpu_reading().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let b = cpu_reading().unwrap();
    let live = others_cores(&a, &mid).unwrap();
    let reaped = others_cores(&a, &b).unwrap();

    // An orphan: its parent shell exits at once, so it is no longer our descendant. `timeout`
    // bounds it should this test die before killing it.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("timeout 20 sh -c '{SPIN}' >/dev/null 2>&1 & echo $!"),
        ])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!pid.is_empty(), "no pid: {out:?}");
    std::thread::sleep(Duration::from_millis(200));
    let orphan = others_over(1.5);
    let _ = Command::new("kill").arg(&pid).status();

    eprintln!(
        "others: alone {quiet:.2}, own live child {live:.2}, reaped {reaped:.2}, orphan \
         {orphan:.2} cores"
    );
    assert!(
        live < quiet + 0.5,
        "a spinning child of ours counted as another process's work: {live:.2} cores"
    );
    assert!(
        reaped < quiet + 0.5,
        "a child reaped between the readings counted as another process's work: {reaped:.2}"
    );
    assert!(
        orphan > quiet + 0.5,
        "a spinner outside our tree was not seen: {orphan:.2} cores"
    );
}
