//! The JSON contracts (ARCHITECTURE.md, "Contracts") the harness reads from each revision's binaries and tree:
//! `engine-profile/1` (`engine profile --json`), `oracle-decode/1` (`oracle decode --json`) and
//! `golden/1` (`goldens/<model>/<case>.json`). Only the fields the gate uses are declared; unknown
//! fields are ignored, so a revision may add fields without breaking the gate.

use serde::Deserialize;

use crate::results::CudaGraphCounters;

pub const PROFILE_SCHEMA: &str = "engine-profile/1";
pub const ORACLE_SCHEMA: &str = "oracle-decode/1";
pub const GOLDEN_SCHEMA: &str = "golden/1";

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RunTiming {
    pub ms_per_step: f64,
    #[serde(default)]
    pub tok_s: f64,
}

/// `engine profile --json`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Profile {
    pub schema: String,
    #[serde(default)]
    pub model_sha256: String,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    #[serde(default)]
    pub prefill_ms: f64,
    pub runs: Vec<RunTiming>,
    #[serde(default)]
    pub median_ms_per_step: f64,
    #[serde(default)]
    pub cuda_graph: Option<CudaGraphCounters>,
}

/// One step's top tokens `[id, logit]`, best first.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct StepTop {
    pub top: Vec<(u32, f32)>,
}

/// `oracle decode --json`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OracleDecode {
    pub schema: String,
    #[serde(default)]
    pub model_sha256: String,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    #[serde(default)]
    pub steps: Vec<StepTop>,
}

/// `goldens/<model>/<case>.json`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Golden {
    pub schema: String,
    #[serde(default)]
    pub model_sha256: String,
    pub prompt_ids: Vec<u32>,
    pub max_new_tokens: u32,
    pub generated_ids: Vec<u32>,
    #[serde(default)]
    pub steps: Vec<StepTop>,
}

/// The JSON object of a tool's stdout: the whole output, else its last line that parses (a tool
/// may print progress lines before it).
fn json_of<T: serde::de::DeserializeOwned>(stdout: &str) -> Result<T, String> {
    let whole = serde_json::from_str::<T>(stdout.trim());
    match whole {
        Ok(v) => Ok(v),
        Err(e) => stdout
            .lines()
            .rev()
            .filter(|l| l.trim_start().starts_with('{'))
            .find_map(|l| serde_json::from_str::<T>(l).ok())
            .ok_or_else(|| format!("not valid JSON: {e}")),
    }
}

fn check_schema(what: &str, got: &str, want: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: schema {got:?}, expected {want:?}"))
    }
}

pub fn parse_profile(stdout: &str) -> Result<Profile, String> {
    let p: Profile = json_of(stdout).map_err(|e| format!("engine profile --json: {e}"))?;
    check_schema("engine profile --json", &p.schema, PROFILE_SCHEMA)?;
    if p.runs.is_empty() {
        return Err("engine profile --json: no timed runs".into());
    }
    if let Some(r) = p
        .runs
        .iter()
        .find(|r| !(r.ms_per_step.is_finite() && r.ms_per_step > 0.0))
    {
        return Err(format!(
            "engine profile --json: invalid ms_per_step {}",
            r.ms_per_step
        ));
    }
    Ok(p)
}

pub fn parse_oracle(stdout: &str) -> Result<OracleDecode, String> {
    let o: OracleDecode = json_of(stdout).map_err(|e| format!("oracle decode --json: {e}"))?;
    check_schema("oracle decode --json", &o.schema, ORACLE_SCHEMA)?;
    Ok(o)
}

pub fn parse_golden(text: &str, path: &std::path::Path) -> Result<Golden, String> {
    let g: Golden =
        serde_json::from_str(text).map_err(|e| format!("{}: not a golden: {e}", path.display()))?;
    check_schema(&path.display().to_string(), &g.schema, GOLDEN_SCHEMA)?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"{"schema":"engine-profile/1","model":"m","model_sha256":"ab","ep":"cuda","dtype":"f32","threads":2,
 "layers":30,"prompt_ids":[1,2],"generated_ids":[3,4],"prefill_ms":1.9,
 "runs":[{"ms_per_step":0.61,"tok_s":1639.3}],"median_ms_per_step":0.61,"median_tok_s":1639.3,
 "cuda_graph":{"enabled":true,"captures":1,"replays":120,"fallbacks":0,"fallback_reasons":[]},
 "device_kv":{"h2d_calls":0,"h2d_bytes":0,"d2h_calls":0,"d2h_bytes":0}}"#;

    #[test]
    fn the_design_example_parses() {
        let p = parse_profile(PROFILE).unwrap();
        assert_eq!(p.generated_ids, [3, 4]);
        assert_eq!(p.cuda_graph.unwrap().captures, 1);
        let cpu = PROFILE.replace(
            r#""cuda_graph":{"enabled":true,"captures":1,"replays":120,"fallbacks":0,"fallback_reasons":[]}"#,
            r#""cuda_graph":null"#,
        );
        assert_eq!(parse_profile(&cpu).unwrap().cuda_graph, None);
        let with_progress = format!("loading…\n{}\n", PROFILE.replace('\n', ""));
        assert!(parse_profile(&with_progress).is_ok());
    }

    #[test]
    fn wrong_schema_or_garbage_is_an_error_naming_the_tool() {
        let e =
            parse_profile(&PROFILE.replace("engine-profile/1", "engine-profile/2")).unwrap_err();
        assert!(e.contains("engine-profile/2"), "{e}");
        let e = parse_profile("Segmentation fault").unwrap_err();
        assert!(e.starts_with("engine profile --json"), "{e}");
        let e = parse_profile(&PROFILE.replace("0.61,\"tok_s\"", "0,\"tok_s\"")).unwrap_err();
        assert!(e.contains("ms_per_step"), "{e}");
        let e = parse_oracle("{}").unwrap_err();
        assert!(e.starts_with("oracle decode --json"), "{e}");
    }
}
