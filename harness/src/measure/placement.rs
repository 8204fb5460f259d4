//! Which executable a round runs: the one cargo built, or, when placement is sampled, that
//! executable linked again in a function order of the round's own (`crate::placement`).
//!
//! Round `r` links side `base` with seed `2r + 1` and `head` with `2r + 2`: every round of a
//! run, first pass, noise and confirmation rounds alike, measures both sides in placements drawn
//! afresh and apart from each other (an A/A run too: its two sides are the same code in two
//! orders). A round's difference then holds the placement effect as one more source of spread,
//! and the interval over rounds covers it, where one link per side would turn it into a bias the
//! rounds cannot see. The seeds are fixed, so a run can be repeated exactly. The rounds make a
//! round's relinks before it measures anything (`Measurer::begin_round`; a relink is lld on
//! every CPU and a file synced to disk, not something to fall between two timed benchmarks), both
//! sides of a target together. A relink lives for its round: the previous round's is removed when
//! the next is made, so a run holds one executable per side and target at a time (about 6 MB
//! stripped for this repository's benches, 0.2 s to link on the 2-vCPU VM).
//!
//! Both sides of a round are always measured the same way: if either side's relink fails, the
//! round measures both sides' built executables, and sampling stops for the rest of the run with
//! the reason in its description ([`Placement::describe`], recorded in the run's method).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::placement::Recipe;
use crate::vocab::Side;

/// The seed of `side`'s function order in round `round`.
pub fn seed(side: Side, round: u32) -> u64 {
    2 * u64::from(round) + 1 + u64::from(side == Side::Head)
}

/// Placement sampling over a run (or none).
pub struct Placement {
    /// Recipes by built executable, when sampling.
    recipes: BTreeMap<PathBuf, Recipe>,
    /// Where the relinks go.
    dir: PathBuf,
    deadline: Duration,
    /// The relink in use per side and bench target: its round and path.
    current: BTreeMap<(Side, String), (u32, PathBuf)>,
    /// Why placement is not sampled (None: it is).
    off: Option<String>,
    /// Why sampling stopped during the run.
    stopped: Option<String>,
    /// Relinks made and their wall times.
    link_s: Vec<f64>,
}

impl Placement {
    /// No sampling: every round runs the built executables; `why` for the run's method.
    pub fn off(why: impl Into<String>) -> Placement {
        Placement {
            recipes: BTreeMap::new(),
            dir: PathBuf::new(),
            deadline: Duration::ZERO,
            current: BTreeMap::new(),
            off: Some(why.into()),
            stopped: None,
            link_s: Vec::new(),
        }
    }

    /// Sampling when `sample` (`placement.sample` for the run's suite, or a noise setup's), else
    /// off saying so.
    pub fn new<'a>(
        sample: bool,
        exes: impl IntoIterator<Item = &'a Path>,
        dir: &Path,
        deadline: Duration,
    ) -> Placement {
        if sample {
            Placement::sample(exes, dir, deadline)
        } else {
            Placement::off("placement.sample is off")
        }
    }

    /// Sampling for `exes` (both sides' built executables), relinking into `dir` within
    /// `deadline` per link; off, with the first reason, when any executable has no usable recipe.
    pub fn sample<'a>(
        exes: impl IntoIterator<Item = &'a Path>,
        dir: &Path,
        deadline: Duration,
    ) -> Placement {
        if !crate::placement::supported() {
            return Placement::off(format!(
                "this host's target ({}) is not linked by lld",
                env!("HARNESS_HOST_TARGET")
            ));
        }
        let mut recipes = BTreeMap::new();
        for exe in exes {
            match Recipe::of(exe) {
                Ok(r) => {
                    recipes.insert(exe.to_path_buf(), r);
                }
                Err(e) => return Placement::off(e),
            }
        }
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Placement::off(format!("cannot create {}: {e}", dir.display()));
        }
        Placement {
            recipes,
            dir: dir.to_path_buf(),
            deadline,
            current: BTreeMap::new(),
            off: None,
            stopped: None,
            link_s: Vec::new(),
        }
    }

    /// Whether rounds run relinks.
    pub fn sampling(&self) -> bool {
        self.off.is_none() && self.stopped.is_none()
    }

    /// The executables round `round` runs for `target`, one per entry of `sides` (each with its
    /// built executable): relinks in the round's orders, made on first use, or the built ones
    /// for all when placement is not sampled or a relink fails (then sampling stops).
    pub fn exes(&mut self, target: &str, sides: &[(Side, &Path)], round: u32) -> Vec<PathBuf> {
        let built = || sides.iter().map(|(_, p)| p.to_path_buf()).collect();
        if !self.sampling() {
            return built();
        }
        let mut out = Vec::with_capacity(sides.len());
        for &(side, exe) in sides {
            match self.relink(target, side, exe, round) {
                Ok(p) => out.push(p),
                Err(e) => {
                    self.stopped = Some(format!("stopped in round {}: {e}", round + 1));
                    self.clear();
                    return built();
                }
            }
        }
        out
    }

    fn relink(
        &mut self,
        target: &str,
        side: Side,
        exe: &Path,
        round: u32,
    ) -> Result<PathBuf, String> {
        let key = (side, target.to_string());
        if let Some((r, p)) = self.current.get(&key)
            && *r == round
        {
            return Ok(p.clone());
        }
        if let Some((_, old)) = self.current.remove(&key) {
            let _ = std::fs::remove_file(old);
        }
        let recipe = self
            .recipes
            .get(exe)
            .ok_or_else(|| format!("no link recipe for {}", exe.display()))?;
        let s = seed(side, round);
        let out = self
            .dir
            .join(format!("{}-{}-s{s}", side.name(), file_part(target)));
        let t = Instant::now();
        recipe.link(Some(s), &out, self.deadline).map_err(|f| {
            let mut m = format!("{} {target}: {}", side.name(), f.message);
            if let Some(l) = f.log_tail.last() {
                m.push_str(": ");
                m.push_str(l);
            }
            m
        })?;
        self.link_s.push(t.elapsed().as_secs_f64());
        self.current.insert(key, (round, out.clone()));
        Ok(out)
    }

    /// Removes every relink (the run's end, or sampling stopped).
    pub fn clear(&mut self) {
        for (_, (_, p)) in std::mem::take(&mut self.current) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// One line for the run's method: sampled or not, why not, relinks and their median time.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.off {
            return format!("not sampled: every round ran the executables cargo built ({why})");
        }
        let mut s = String::from(
            "sampled: each round linked both sides' executables again in function orders of its \
             own (lld --shuffle-sections, seeds 2r+1 base and 2r+2 head)",
        );
        if !self.link_s.is_empty() {
            let mut t = self.link_s.clone();
            t.sort_by(f64::total_cmp);
            s.push_str(&format!(
                "; {} relinks, median {:.1} s, {:.0} s in all",
                t.len(),
                t[t.len() / 2],
                t.iter().sum::<f64>()
            ));
        }
        if let Some(stop) = &self.stopped {
            s.push_str(&format!(
                "; {stop}, the rest of the run measured the built executables"
            ));
        }
        s
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A bench target's name as part of a file name (target names are cargo identifiers; anything
/// else becomes `_`).
fn file_part(target: &str) -> String {
    target
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_between_sides_and_rounds() {
        let mut seen = std::collections::BTreeSet::new();
        for r in 0..50 {
            for side in Side::BOTH {
                assert!(
                    seen.insert(seed(side, r)),
                    "seed of {side:?} round {r} repeats"
                );
            }
        }
        assert_eq!(seed(Side::Base, 0), 1);
        assert_eq!(seed(Side::Head, 0), 2);
    }

    #[test]
    fn off_runs_the_built_executables_and_says_why() {
        let mut p = Placement::off("placement.sample is false");
        let (a, b) = (Path::new("/t/a"), Path::new("/t/b"));
        assert_eq!(
            p.exes("kernels", &[(Side::Base, a), (Side::Head, b)], 3),
            vec![a.to_path_buf(), b.to_path_buf()]
        );
        assert!(!p.sampling());
        assert!(
            p.describe().contains("placement.sample is false"),
            "{}",
            p.describe()
        );
    }

    /// A built executable with a recipe whose "linker" is `sh -c SCRIPT` (SCRIPT sees the
    /// relink's `-o OUT` as `$3 $4`): `cp` makes a working relink, `exit 1` a failing one.
    fn fake_build(dir: &Path, name: &str, script: &str) -> PathBuf {
        let deps = dir.join("deps");
        std::fs::create_dir_all(deps.join(format!("{name}.placement"))).unwrap();
        let exe = deps.join(name);
        std::fs::write(&exe, name.as_bytes()).unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let mtime = meta
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        let recipe = serde_json::json!({
            "program": "sh",
            "args": ["-c", script, "sh", exe.to_str().unwrap(), "-fuse-ld=lld"],
            "path": std::env::var("PATH").unwrap_or_default(),
            "exe_len": meta.len(),
            "exe_mtime_ns": mtime,
        });
        std::fs::write(
            deps.join(format!("{name}.placement/recipe.json")),
            recipe.to_string(),
        )
        .unwrap();
        exe
    }

    #[test]
    fn rounds_run_relinks_made_once_per_round_and_removed_with_the_next() {
        if !crate::placement::supported() {
            return;
        }
        let dir = tempfile::TempDir::new().unwrap();
        let base = fake_build(&dir.path().join("b"), "k-01", r#"cp "$1" "$4""#);
        let head = fake_build(&dir.path().join("h"), "k-01", r#"cp "$1" "$4""#);
        let relinks = dir.path().join("relinks");
        let mut p = Placement::sample(
            [base.as_path(), head.as_path()],
            &relinks,
            Duration::from_secs(60),
        );
        assert!(p.sampling(), "{}", p.describe());
        let sides = [(Side::Base, base.as_path()), (Side::Head, head.as_path())];
        let r0 = p.exes("kernels", &sides, 0);
        assert_eq!(
            r0,
            [
                relinks.join("base-kernels-s1"),
                relinks.join("head-kernels-s2")
            ]
        );
        assert_eq!(
            std::fs::read(&r0[1]).unwrap(),
            b"k-01",
            "the head's own recipe"
        );
        // Asked again in the same round (the other side, or the next benchmark): no new link.
        assert_eq!(p.exes("kernels", &sides[1..], 0), [r0[1].clone()]);
        let r3 = p.exes("kernels", &sides, 3);
        assert_eq!(
            r3,
            [
                relinks.join("base-kernels-s7"),
                relinks.join("head-kernels-s8")
            ]
        );
        assert!(
            !r0[0].exists() && !r0[1].exists(),
            "round 0's relinks outlived it"
        );
        assert!(p.describe().contains("4 relinks"), "{}", p.describe());
        drop(p);
        assert!(!r3[0].exists(), "the run's last relinks outlived it");
    }

    #[test]
    fn a_failed_relink_measures_both_sides_as_built_from_then_on() {
        if !crate::placement::supported() {
            return;
        }
        let dir = tempfile::TempDir::new().unwrap();
        let base = fake_build(&dir.path().join("b"), "k-01", r#"cp "$1" "$4""#);
        let head = fake_build(
            &dir.path().join("h"),
            "k-01",
            "echo no space left >&2; exit 1",
        );
        let relinks = dir.path().join("relinks");
        let mut p = Placement::sample(
            [base.as_path(), head.as_path()],
            &relinks,
            Duration::from_secs(60),
        );
        let sides = [(Side::Base, base.as_path()), (Side::Head, head.as_path())];
        // The base's relink succeeded before the head's failed: both sides run as built, and the
        // base's relink is gone.
        assert_eq!(p.exes("kernels", &sides, 2), [base.clone(), head.clone()]);
        assert!(!relinks.join("base-kernels-s5").exists());
        assert!(!p.sampling());
        assert_eq!(
            p.exes("kernels", &sides[..1], 3),
            std::slice::from_ref(&base)
        );
        let d = p.describe();
        assert!(
            d.contains("stopped in round 3") && d.contains("no space left"),
            "{d}"
        );
    }

    #[test]
    fn an_executable_without_a_recipe_turns_sampling_off_naming_it() {
        let dir = tempfile::TempDir::new().unwrap();
        let exe = dir.path().join("kernels-01");
        std::fs::write(&exe, b"x").unwrap();
        let p = Placement::sample(
            [exe.as_path()],
            &dir.path().join("relinks"),
            Duration::from_secs(60),
        );
        assert!(!p.sampling());
        if crate::placement::supported() {
            assert!(
                p.describe().contains("kernels-01 has no link recipe"),
                "{}",
                p.describe()
            );
        }
    }
}
