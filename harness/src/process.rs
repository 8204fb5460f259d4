//! Child processes under deadlines: a hung build, benchmark or decode is killed and reported,
//! and the run goes on. A leaf module (no other module of the crate), so every stage can use it.
//!
//! [`Deadline::watch`] starts a watchdog thread for one spawned child; if the guard is still
//! alive after the limit, the watchdog sends `SIGKILL` to the child and to its process group and
//! marks the guard [`fired`](Deadline::fired). The code that owns the child needs no change to
//! its blocking reads: the kill closes the pipes, so a read returns end-of-file, a `wait`
//! returns, and the caller, seeing `fired()`, reports "timed out after N s"
//! ([`Deadline::message`]) with the output tail it already collects instead of "ended early".
//! Dropping the guard (the child was waited for) stops the watchdog.
//!
//! Every child starts as the leader of a process group of its own ([`own_group`]), and the
//! whole group is killed: a child's own children (cargo's compilers, a shell's `sleep`, anything
//! a pull request's benchmark starts) hold the pipes the harness reads, and killing the child
//! alone would leave the harness waiting on them. The price: Ctrl-C in a terminal reaches the
//! harness only; a serving benchmark then exits at the end of its stdin, and a criterion run,
//! decode or build the harness was waiting for runs on to its end (into the harness's cache).
//!
//! The child is signalled through a pidfd opened when the watch starts, before anyone can have
//! reaped it: a pidfd names that process and no other, so a child that exited and was reaped just
//! as the limit passed is not confused with a new process that got its pid, and `fired()` is
//! true only when the kill reached the child itself. The group is signalled only after that kill
//! succeeded (the leader, still unreaped, keeps the group id from being reused). Where
//! `pidfd_open` is not available (gVisor sandboxes, kernels before 5.3) the pid is signalled,
//! which is exact except in the instant between the owner's `wait` and the guard's drop.
//!
//! Deadlines are enforced on Linux (the CI and GPU runners); elsewhere the watchdog only waits.
//!
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A listing (`--list`), a probe (`--help`, a serve probe) or a version query takes well under a
/// second: a fixed minute, not a setting.
pub const LIST_DEADLINE: Duration = Duration::from_secs(60);

/// Makes the child `cmd` will start the leader of a process group of its own, so that its
/// deadline kills everything it started (see the module docs).
pub fn own_group(cmd: &mut Command) -> &mut Command {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        cmd.process_group(0);
    }
    cmd
}

/// A running watchdog for one child process; dropping it stops the watchdog.
pub struct Deadline {
    limit: Duration,
    fired: Arc<AtomicBool>,
    /// Dropped to stop the watchdog (the thread's `recv_timeout` sees the disconnect).
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Deadline {
    /// Watches `child` (started with [`own_group`]): `SIGKILL` to it and its process group once
    /// `limit` has passed with this guard still alive.
    pub fn watch(child: &Child, limit: Duration) -> Deadline {
        let pid = child.id();
        let target = Target::open(pid);
        let fired = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let flag = Arc::clone(&fired);
        let thread = std::thread::Builder::new()
            .name(format!("deadline-{pid}"))
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit)
                    && target.kill()
                {
                    flag.store(true, Ordering::SeqCst);
                }
            })
            .ok();
        Deadline {
            limit,
            fired,
            stop: Some(stop),
            thread,
        }
    }

    /// Whether the limit passed and the child was killed.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// `{what} timed out after N s ({setting} in harness.yaml)`.
    pub fn message(&self, what: &str, setting: &str) -> String {
        timed_out(what, self.limit, setting)
    }
}

/// `cmd.output()` within `limit`: stdin from /dev/null, stdout and stderr captured; the `bool`
/// says the child was killed at the deadline (its output is what it wrote until then).
pub fn output(cmd: &mut Command, limit: Duration) -> std::io::Result<(Output, bool)> {
    let child = own_group(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let watch = Deadline::watch(&child, limit);
    let out = child.wait_with_output()?;
    Ok((out, watch.fired()))
}

/// The process a watchdog kills: a pidfd of the child (Linux), opened while it cannot have been
/// reaped yet.
struct Target {
    pid: u32,
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
}

impl Target {
    fn open(pid: u32) -> Target {
        Target {
            pid,
            #[cfg(target_os = "linux")]
            fd: rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            }),
        }
    }

    /// `SIGKILL` to the child, then to its process group; whether the child was killed (false:
    /// it had already exited and been reaped, or nothing could be signalled).
    fn kill(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            use rustix::process::{Pid, Signal, kill_process_group, pidfd_send_signal};
            let Some(pid) = Pid::from_raw(self.pid as i32) else {
                return false;
            };
            let killed = match &self.fd {
                Some(fd) => pidfd_send_signal(fd, Signal::KILL).is_ok(),
                // No pidfd here (a kernel before 5.3, or a sandbox without it): by pid, which
                // the owner has not reaped while the guard lives, save for the instant between
                // its `wait` and the guard's drop.
                None => rustix::process::kill_process(pid, Signal::KILL).is_ok(),
            };
            if killed {
                let _ = kill_process_group(pid, Signal::KILL);
            }
            killed
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = self.pid;
            false
        }
    }
}

/// The one wording of a timeout, for every kind of child.
pub fn timed_out(what: &str, limit: Duration, setting: &str) -> String {
    let s = limit.as_secs_f64();
    let s = if s >= 10.0 {
        format!("{s:.0}")
    } else {
        // One decimal, none when it is a whole number: "0.3 s", "5 s".
        format!("{}", (s * 10.0).round() / 10.0)
    };
    format!("{what} timed out after {s} s and was killed (deadlines.{setting} in harness.yaml)")
}

impl Drop for Deadline {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes an executable script for a test, and returns once it can be run: while another test
/// thread forks, the child briefly holds this thread's write descriptor, and exec fails with
/// ETXTBSY ("Text file busy") until it has exec'd itself. A first successful run (no arguments,
/// stdin at EOF: the script must end at once then) means no such child is left, and none can
/// appear after the descriptor is closed.
#[cfg(test)]
pub(crate) fn test_script(p: &std::path::Path, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    for _ in 0..200 {
        match Command::new(p).stdin(Stdio::null()).output() {
            Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(5)),
            _ => break,
        }
    }
    p.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_hung_child_is_killed_at_its_deadline() {
        // The shell waits for its own child, which holds the pipe too.
        let mut child = own_group(Command::new("sh").args(["-c", "sleep 30; echo never"]))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let d = Deadline::watch(&child, Duration::from_millis(300));
        // The owner's blocking read ends when the watchdog kills the child.
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        let status = child.wait().unwrap();
        assert!(d.fired());
        assert!(!status.success());
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(d.message("x", "bench_s").contains("timed out after 0.3 s"));
    }

    #[test]
    fn output_within_a_deadline() {
        let (out, fired) = output(Command::new("echo").arg("hi"), Duration::from_secs(30)).unwrap();
        assert_eq!((out.stdout.as_slice(), fired), (b"hi\n".as_slice(), false));
        let start = Instant::now();
        let (out, fired) = output(
            Command::new("sh").args(["-c", "echo early; exec sleep 30"]),
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(fired && !out.status.success());
        assert_eq!(out.stdout, b"early\n");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_reaped_child_is_never_reported_killed() {
        let mut child = own_group(&mut Command::new("true")).spawn().unwrap();
        let d = Deadline::watch(&child, Duration::from_millis(200));
        // Exits and is reaped before the limit; the guard outlives the limit (the window in which
        // a kill by pid could hit a stranger).
        assert!(child.wait().unwrap().success());
        std::thread::sleep(Duration::from_millis(500));
        assert!(!d.fired());
    }

    #[test]
    fn a_child_that_finishes_in_time_is_left_alone() {
        let mut child = own_group(&mut Command::new("true")).spawn().unwrap();
        let d = Deadline::watch(&child, Duration::from_secs(30));
        assert!(child.wait().unwrap().success());
        let start = Instant::now();
        drop(d);
        // The watchdog stops at once instead of sleeping out its limit.
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
