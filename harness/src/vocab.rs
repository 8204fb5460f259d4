//! The gate's vocabulary, shared by every stage: the two sides of a comparison ([`Side`]) and a
//! value per side ([`PerSide`]), the device and float type of an end-to-end check ([`Device`],
//! [`Dtype`]), the stage a failure happened in ([`Stage`]), and the one failure of a child
//! process ([`ProcessFailure`]) that building, measuring and the end-to-end tools all return.
//!
//! These are typed so that a typo cannot change a verdict (`Side::Base` decides "could not run",
//! `Side::Head` "failed"); serde writes them as the same lowercase words the `harness-results/1`
//! files always held (`"base"`, `"head"`, `"build"`, `"run"`, `"cpu"`, `"f16"`, …).

use std::fmt;

use serde::{Deserialize, Serialize};

/// One side of a comparison: the base revision or the PR's head.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Base,
    Head,
}

impl Side {
    /// Both sides, base first.
    pub const BOTH: [Side; 2] = [Side::Base, Side::Head];

    /// The word in file names, slot names and JSON: `base`, `head`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Head => "head",
        }
    }

    /// The word the reports use for it: `base`, `PR`.
    pub fn word(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Head => "PR",
        }
    }

    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Base => Side::Head,
            Side::Head => Side::Base,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value for each side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerSide<T> {
    pub base: T,
    pub head: T,
}

impl<T> PerSide<T> {
    pub fn new(base: T, head: T) -> PerSide<T> {
        PerSide { base, head }
    }

    /// Builds each side's value from the side.
    pub fn from_fn(mut f: impl FnMut(Side) -> T) -> PerSide<T> {
        let base = f(Side::Base);
        PerSide {
            base,
            head: f(Side::Head),
        }
    }

    pub fn get(&self, side: Side) -> &T {
        match side {
            Side::Base => &self.base,
            Side::Head => &self.head,
        }
    }

    pub fn get_mut(&mut self, side: Side) -> &mut T {
        match side {
            Side::Base => &mut self.base,
            Side::Head => &mut self.head,
        }
    }

    pub fn map<U>(self, mut f: impl FnMut(Side, T) -> U) -> PerSide<U> {
        let base = f(Side::Base, self.base);
        PerSide {
            base,
            head: f(Side::Head, self.head),
        }
    }

    pub fn as_ref(&self) -> PerSide<&T> {
        PerSide {
            base: &self.base,
            head: &self.head,
        }
    }

    /// `(side, value)`, base first.
    pub fn iter(&self) -> impl Iterator<Item = (Side, &T)> {
        [(Side::Base, &self.base), (Side::Head, &self.head)].into_iter()
    }
}

impl<T> std::ops::Index<Side> for PerSide<T> {
    type Output = T;
    fn index(&self, side: Side) -> &T {
        self.get(side)
    }
}

impl<T> std::ops::IndexMut<Side> for PerSide<T> {
    fn index_mut(&mut self, side: Side) -> &mut T {
        self.get_mut(side)
    }
}

/// Where an end-to-end check runs (`engine profile --ep`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// The float type of an end-to-end check (`engine profile --dtype`; it selects the package).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    F32,
    F16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
        }
    }
}

/// What a side failed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Building its bench executables or binaries.
    Build,
    /// Running them.
    Run,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Build => "build",
            Stage::Run => "run",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A child process (cargo, a bench executable, `engine`, `oracle`) that failed: what went wrong,
/// and the last lines of its output, which the report shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFailure {
    pub message: String,
    pub log_tail: Vec<String>,
}

impl ProcessFailure {
    pub fn new(message: impl Into<String>, log_tail: Vec<String>) -> ProcessFailure {
        ProcessFailure {
            message: message.into(),
            log_tail,
        }
    }

    /// A failure with no output to show (the process could not be started, a file was missing).
    pub fn bare(message: impl Into<String>) -> ProcessFailure {
        ProcessFailure::new(message, Vec::new())
    }
}

impl fmt::Display for ProcessFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_stages_devices_and_dtypes_keep_their_words_in_json() {
        // The `harness-results/1` files hold these words; renaming a variant must not change them.
        let words = serde_json::to_string(&(
            Side::Base,
            Side::Head,
            Stage::Build,
            Stage::Run,
            Device::Cpu,
            Device::Cuda,
            Dtype::F32,
            Dtype::F16,
        ))
        .unwrap();
        assert_eq!(
            words,
            r#"["base","head","build","run","cpu","cuda","f32","f16"]"#
        );
        for s in Side::BOTH {
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.name())
            );
        }
    }

    #[test]
    fn a_per_side_value_is_indexed_by_side() {
        let mut p = PerSide::from_fn(|s| s.name().len());
        p[Side::Head] += 10;
        assert_eq!((p[Side::Base], p.head), (4, 14));
        let names: Vec<_> = p.iter().map(|(s, _)| s.word()).collect();
        assert_eq!(names, ["base", "PR"]);
        assert_eq!(Side::Base.other(), Side::Head);
    }
}
