//! Running one revision's `engine` and `oracle` binaries (processes, never linked: invariant 1):
//! `engine profile --json`, `oracle decode --json`, `engine tiny`, `engine fetch smollm2`, and
//! the client of `engine profile --serve` ([`ProfileServer`]: the paired e2e rounds ask both
//! sides' serving processes for decodes in turn). A tool
//! that fails is a value ([`ToolFailure`], with its last lines of stderr), and a CUDA request that
//! fails because there is no usable GPU is told apart from a crash ([`cuda_unavailable`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::contract::{OracleDecode, Profile, parse_oracle, parse_profile};
use crate::build::{LOG_TAIL_LINES, tail};
use crate::measure::serve::Server;
use crate::vocab::{Device, Dtype, ProcessFailure};

/// A tool run that did not give a result.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFailure {
    pub failure: ProcessFailure,
    /// Set when the failure means "cannot run here" (no CUDA device, engine built without CUDA,
    /// model not provisioned) rather than "broken": the check is ⏭, not ⛔.
    pub not_run: Option<String>,
}

impl ToolFailure {
    fn new(message: String, log_tail: Vec<String>) -> ToolFailure {
        ToolFailure {
            failure: ProcessFailure::new(message, log_tail),
            not_run: None,
        }
    }
}

/// One revision's binaries.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    pub engine: PathBuf,
    pub oracle: PathBuf,
    /// How long one call (or one serving engine's session) may take (`deadlines.e2e_s`).
    pub deadline: std::time::Duration,
}

/// What to profile.
#[derive(Clone, Debug)]
pub struct ProfileRequest<'a> {
    pub model: &'a Path,
    pub device: Device,
    pub dtype: Dtype,
    pub prompt: Prompt<'a>,
    pub tokens: u32,
    pub warmups: u32,
    pub runs: u32,
    pub decode_skip: u32,
    pub threads: u32,
}

#[derive(Clone, Copy, Debug)]
pub enum Prompt<'a> {
    Ids(&'a [u32]),
    Text(&'a str),
}

impl Prompt<'_> {
    fn args(&self) -> Vec<String> {
        match self {
            Prompt::Ids(ids) => vec![
                "--prompt-ids".into(),
                ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            ],
            Prompt::Text(t) => vec!["--prompt".into(), t.to_string()],
        }
    }
}

/// The `engine profile` arguments shared by every call (for the report's method section).
pub fn profile_settings(warmups: u32, runs: u32, decode_skip: u32, threads: u32) -> Vec<String> {
    vec![
        "--warmups".into(),
        warmups.to_string(),
        "--runs".into(),
        runs.to_string(),
        "--decode-skip".into(),
        decode_skip.to_string(),
        "--threads".into(),
        threads.to_string(),
    ]
}

/// The `engine profile` arguments of a request (no output flag).
fn profile_args(req: &ProfileRequest<'_>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "profile".into(),
        "--model".into(),
        req.model.display().to_string(),
        "--ep".into(),
        req.device.name().into(),
        "--dtype".into(),
        req.dtype.name().into(),
    ];
    args.extend(req.prompt.args());
    args.extend(["--tokens".into(), req.tokens.to_string()]);
    args.extend(profile_settings(
        req.warmups,
        req.runs,
        req.decode_skip,
        req.threads,
    ));
    args
}

/// Runs `exe args`, returning stdout; a non-zero exit is a failure with stderr's last lines, and
/// a run past `deadline` is killed and says so.
fn run(exe: &Path, args: &[String], deadline: std::time::Duration) -> Result<String, ToolFailure> {
    let (out, timed_out) = crate::process::output(Command::new(exe).args(args), deadline)
        .map_err(|e| ToolFailure::new(format!("cannot run {}: {e}", exe.display()), Vec::new()))?;
    let stderr: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect();
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sub = args.first().cloned().unwrap_or_default();
    if timed_out {
        return Err(ToolFailure::new(
            crate::process::timed_out(&format!("`{name} {sub}`"), deadline, "e2e_s"),
            tail(&stderr, LOG_TAIL_LINES),
        ));
    }
    if !out.status.success() {
        let last = stderr
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .cloned()
            .unwrap_or_default();
        return Err(ToolFailure::new(
            format!("`{name} {sub}` exited with {}: {last}", out.status),
            tail(&stderr, LOG_TAIL_LINES),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a failed CUDA request's error output says "no usable CUDA here" (⏭) rather than a
/// failure of the engine (⛔), and why. Matches the engine's own messages (`engine was built
/// without the `cuda` feature`, the driver / device errors of its CUDA backend) and the usual
/// CUDA error names.
pub fn cuda_unavailable(output: &str) -> Option<String> {
    let l = output.to_lowercase();
    if l.contains("without the `cuda` feature") || l.contains("without cuda") {
        return Some("engine built without the cuda feature".into());
    }
    // Exact phrases only: the engine's `check_available` messages and the driver's "no device"
    // codes. Broader words ("libcuda", CUDA_ERROR_NOT_FOUND) also appear in real failures (a
    // backtrace through libcuda.so, a kernel missing from a module), which must stay ⛔.
    const NO_DEVICE: [&str; 8] = [
        "(libcuda.so) was not found",
        "(libnvrtc.so) was not found",
        "(libcublas.so) was not found",
        "cuda: cannot initialise the driver",
        "no cuda device found",
        "no cuda-capable device",
        "cuda_error_no_device",
        "cuda_error_insufficient_driver",
    ];
    if NO_DEVICE.iter().any(|p| l.contains(p)) {
        let line = output
            .lines()
            .rev()
            .find(|x| {
                let x = x.to_lowercase();
                NO_DEVICE.iter().any(|p| x.contains(p))
            })
            .unwrap_or_default()
            .trim()
            .trim_start_matches("error: ");
        return Some(format!("no usable CUDA device ({line})"));
    }
    None
}

/// Prefix of `engine profile --serve`'s protocol lines (engine/src/profile.rs, `serve`).
pub const PROFILE_SERVE_PREFIX: &str = "engine-profile-serve";

/// One timed decode answered by `engine profile --serve`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct ServedRun {
    pub prefill_ms: f64,
    pub ms_per_step: f64,
    pub generated_ids: Vec<u32>,
    /// The same two times in the decoding thread's CPU time, from engines that report it (a
    /// one-thread CPU decode; `measure::clock`).
    #[serde(default)]
    pub cpu_prefill_ms: Option<f64>,
    #[serde(default)]
    pub cpu_ms_per_step: Option<f64>,
}

/// A running `engine profile --serve`: the model loaded, decoding on request.
pub struct ProfileServer {
    server: Server,
    cuda: bool,
}

/// A failure of a served profile, classified as for a plain call (no usable CUDA: ⏭).
fn served_failure(cuda: bool, message: String, log_tail: Vec<String>) -> ToolFailure {
    let mut f = ToolFailure::new(message, log_tail);
    if cuda {
        let all = format!("{}\n{}", f.failure.message, f.failure.log_tail.join("\n"));
        f.not_run = cuda_unavailable(&all);
    }
    f
}

impl ProfileServer {
    /// Waits for `ready` (the model is loaded and warmed up).
    fn ready(mut self) -> Result<ProfileServer, ToolFailure> {
        let message = match self.server.next_line().as_deref() {
            Some("ready") => return Ok(self),
            None => format!(
                "`{} profile --serve` ended before it was ready",
                self.server.exe()
            ),
            Some(l) => format!(
                "`{} profile --serve`: expected `{PROFILE_SERVE_PREFIX} ready`, got `{l}`",
                self.server.exe()
            ),
        };
        Err(self.fail(message))
    }

    /// One timed decode; an error leaves the server to [`ProfileServer::fail`].
    pub fn run(&mut self) -> Result<ServedRun, String> {
        let exe = self.server.exe().to_string();
        self.server.send("run")?;
        let line = self
            .server
            .next_line()
            .ok_or_else(|| format!("`{exe} profile --serve` ended during a run"))?;
        let json = line.strip_prefix("run ").ok_or_else(|| {
            format!(
                "`{exe} profile --serve`: expected `{PROFILE_SERVE_PREFIX} run {{…}}`, got `{line}`"
            )
        })?;
        let r: ServedRun = serde_json::from_str(json)
            .map_err(|e| format!("`{exe} profile --serve`: bad run answer: {e}"))?;
        let ok = |x: f64| x.is_finite() && x > 0.0;
        let ok_cpu = |x: Option<f64>| x.is_none_or(|x| x.is_finite() && x >= 0.0);
        if !ok(r.ms_per_step)
            || !ok(r.prefill_ms)
            || !ok_cpu(r.cpu_ms_per_step)
            || !ok_cpu(r.cpu_prefill_ms)
        {
            return Err(format!("`{exe} profile --serve`: bad times in {json}"));
        }
        Ok(r)
    }

    /// Ends a server after a failed request: the failure with its output tail.
    pub fn fail(self, message: String) -> ToolFailure {
        let cuda = self.cuda;
        let message = self.server.timed_out().unwrap_or(message);
        let tail = self.server.abort();
        served_failure(cuda, message, tail)
    }

    /// Ends the requests: the `engine-profile/1` report of the served runs.
    pub fn finish(mut self) -> Result<Profile, ToolFailure> {
        self.server.close();
        let exe = self.server.exe().to_string();
        let report = match self.server.next_line() {
            Some(l) => match l.strip_prefix("done ") {
                Some(json) => parse_profile(json),
                None => Err(format!(
                    "`{exe} profile --serve`: expected `{PROFILE_SERVE_PREFIX} done {{…}}`, got `{l}`"
                )),
            },
            None => Err(format!("`{exe} profile --serve` gave no final report")),
        };
        let cuda = self.cuda;
        match (report, self.server.finish()) {
            (Ok(p), Ok(())) => Ok(p),
            (Err(e), Ok(())) => Err(served_failure(cuda, e, Vec::new())),
            (_, Err((message, log_tail))) => Err(served_failure(
                cuda,
                format!("`{exe} profile --serve`: {message}"),
                log_tail,
            )),
        }
    }
}

impl Tools {
    /// Whether this revision's `engine profile` can serve (`--serve`, engine/src/profile.rs);
    /// older revisions are timed one process per call.
    pub fn can_serve_profile(&self) -> bool {
        run(
            &self.engine,
            &["profile".into(), "--help".into()],
            crate::process::LIST_DEADLINE,
        )
        .is_ok_and(|out| out.contains("--serve"))
    }

    /// `engine profile … --serve`, started on CPU `cpu` when given, once it is ready.
    pub fn profile_server(
        &self,
        req: &ProfileRequest<'_>,
        cpu: Option<usize>,
    ) -> Result<ProfileServer, ToolFailure> {
        let mut cmd = Command::new(&self.engine);
        cmd.args(profile_args(req)).arg("--serve");
        let cuda = req.device == Device::Cuda;
        let server = Server::spawn(
            cmd,
            PROFILE_SERVE_PREFIX,
            cpu,
            Some((self.deadline, "e2e_s")),
        )
        .map_err(|e| served_failure(cuda, e, Vec::new()))?;
        ProfileServer { server, cuda }.ready()
    }

    /// `engine profile … --json`.
    pub fn profile(&self, req: &ProfileRequest<'_>) -> Result<Profile, ToolFailure> {
        let mut args = profile_args(req);
        args.push("--json".into());
        let out = run(&self.engine, &args, self.deadline).map_err(|mut f| {
            if req.device == Device::Cuda {
                let all = format!("{}\n{}", f.failure.message, f.failure.log_tail.join("\n"));
                f.not_run = cuda_unavailable(&all);
            }
            f
        })?;
        parse_profile(&out).map_err(|e| ToolFailure::new(e, tail_of(&out)))
    }

    /// `oracle decode … --json`.
    pub fn oracle(
        &self,
        model: &Path,
        prompt: Prompt<'_>,
        tokens: u32,
    ) -> Result<OracleDecode, ToolFailure> {
        let mut args: Vec<String> = vec![
            "decode".into(),
            "--model".into(),
            model.display().to_string(),
        ];
        args.extend(prompt.args());
        args.extend(["--tokens".into(), tokens.to_string(), "--json".into()]);
        let out = run(&self.oracle, &args, self.deadline)?;
        parse_oracle(&out).map_err(|e| ToolFailure::new(e, tail_of(&out)))
    }

    /// `engine tiny --seed S --out DIR`.
    pub fn tiny(&self, seed: u64, out: &Path) -> Result<(), ToolFailure> {
        let _ = std::fs::remove_dir_all(out);
        run(
            &self.engine,
            &[
                "tiny".into(),
                "--seed".into(),
                seed.to_string(),
                "--out".into(),
                out.display().to_string(),
            ],
            self.deadline,
        )
        .map(|_| ())
    }

    /// `engine fetch smollm2`: provisions (or finds) the SmolLM2 packages; returns the f32 and
    /// f16 package directories it prints. A failure is "not provisioned" (⏭) with the fix.
    pub fn fetch_smollm2(&self) -> Result<(PathBuf, PathBuf), ToolFailure> {
        let not_provisioned = |why: String, log_tail: Vec<String>| ToolFailure {
            failure: ProcessFailure::new(why.clone(), log_tail),
            not_run: Some(format!(
                "model {} not provisioned: {why} (run `engine fetch smollm2`)",
                crate::config::MODEL_SMOLLM2
            )),
        };
        let out = run(
            &self.engine,
            &["fetch".into(), "smollm2".into()],
            self.deadline,
        )
        .map_err(|f| not_provisioned(f.failure.message, f.failure.log_tail))?;
        let dirs: Vec<PathBuf> = out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect();
        match dirs.as_slice() {
            [f32, f16, ..] if f32.join("model.onnx").is_file() => Ok((f32.clone(), f16.clone())),
            _ => Err(not_provisioned(
                format!("`engine fetch smollm2` printed no package directory: {out:?}"),
                Vec::new(),
            )),
        }
    }
}

fn tail_of(out: &str) -> Vec<String> {
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    tail(&lines, LOG_TAIL_LINES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `engine profile` and `oracle decode` that never answer are killed at `deadlines.e2e_s`;
    /// the failure names the call and the setting and keeps what they wrote to stderr.
    #[test]
    fn a_hung_profile_or_oracle_is_killed_at_its_deadline() {
        let dir = tempfile::TempDir::new().unwrap();
        let hang = "#!/bin/sh\n[ $# -eq 0 ] && exit 0\necho \"loading $1\" >&2\nsleep 600\n";
        let tools = Tools {
            engine: crate::process::test_script(&dir.path().join("engine"), hang),
            oracle: crate::process::test_script(&dir.path().join("oracle"), hang),
            deadline: std::time::Duration::from_secs(1),
        };
        let model = dir.path().join("model");
        let req = ProfileRequest {
            model: &model,
            device: Device::Cpu,
            dtype: Dtype::F32,
            prompt: Prompt::Ids(&[1, 2]),
            tokens: 4,
            warmups: 0,
            runs: 1,
            decode_skip: 0,
            threads: 1,
        };
        let start = std::time::Instant::now();
        let f = tools.profile(&req).unwrap_err();
        assert!(
            f.failure
                .message
                .starts_with("`engine profile` timed out after 1 s")
                && f.failure.message.contains("e2e_s"),
            "{}",
            f.failure.message
        );
        assert_eq!(f.failure.log_tail, ["loading profile"]);
        assert_eq!(f.not_run, None);
        let f = tools.oracle(&model, Prompt::Ids(&[1]), 4).unwrap_err();
        assert!(
            f.failure
                .message
                .starts_with("`oracle decode` timed out after 1 s"),
            "{}",
            f.failure.message
        );
        assert_eq!(f.failure.log_tail, ["loading decode"]);
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn cuda_errors_are_told_apart_from_crashes() {
        let stub = "error: engine was built without the `cuda` feature (rebuild with `cargo build --release -p engine --features cuda`)";
        assert_eq!(
            cuda_unavailable(stub).as_deref(),
            Some("engine built without the cuda feature")
        );
        let r = cuda_unavailable("loading\nerror: CUDA driver init failed: CUDA_ERROR_NO_DEVICE\n")
            .unwrap();
        assert!(
            r.starts_with("no usable CUDA device (CUDA driver init failed"),
            "{r}"
        );
        // The engine's own messages (engine/src/backend/cuda/mod.rs, check_available).
        for msg in [
            "error: cuda: the NVIDIA driver library (libcuda.so) was not found: is an NVIDIA driver installed?",
            "error: cuda: the NVRTC library (libnvrtc.so) was not found: install the CUDA runtime compiler or add it to LD_LIBRARY_PATH",
            "error: cuda: the cuBLAS library (libcublas.so) was not found: install cuBLAS or add it to LD_LIBRARY_PATH",
            "error: cuda: cannot initialise the driver: DriverError(CUDA_ERROR_UNKNOWN)",
            "error: cuda: no CUDA device found",
        ] {
            let r = cuda_unavailable(msg).unwrap_or_else(|| panic!("{msg}"));
            assert!(r.starts_with("no usable CUDA device (cuda: "), "{r}");
        }
        assert_eq!(
            cuda_unavailable("error: node /x (MatMul): inner dims 3 vs 4"),
            None
        );
        assert_eq!(
            cuda_unavailable("error: cuda: kernel rms_norm_f32 launch failed"),
            None
        );
        assert_eq!(
            cuda_unavailable("thread 'main' panicked at src/cuda.rs"),
            None
        );
        // A kernel missing from a module (a head that renamed one) is a failure, not ⏭.
        assert_eq!(
            cuda_unavailable(
                "error: cuda: kernel rms_qkv_rope_f32 not found in module llama: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not found\")"
            ),
            None
        );
        assert_eq!(
            cuda_unavailable(
                "   3: cuLaunchKernel\n             at /usr/lib/x86_64-linux-gnu/libcuda.so.1"
            ),
            None
        );
    }
}
