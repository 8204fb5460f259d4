//! The shape of `harness/src`: its modules' dependencies point one way (no import cycles); and
//! of the engine's bottom layers: its low-level modules and backends import nothing above them
//! (`upward_imports`, on the same import reader).
//!
//! The pipeline (vocabulary → stats → config → results → git/build → measure → gate → e2e →
//! report → post/actions → commands) is only readable while no stage calls back into a later
//! one. This test reads every `src/**/*.rs` file (test modules cut off: they may use fixtures
//! from anywhere), collects the `crate::…`, `super::…` and `self::…` paths of its non-test code,
//! resolves each to the file module that defines the name (following a directory module's
//! `pub use child::…` re-exports), and fails on a cycle:
//! - between top-level modules (`stats` → `results` → `stats`), each directory module collapsed
//!   into one node;
//! - between the files of one directory module (`stats/decide.rs` ↔ `stats/profile.rs`), its
//!   `mod.rs` body counting as one more file.
//!
//! A parent's `mod child;` and `pub use child::…` lines are the directory's facade, not
//! dependencies. Hand-written on purpose: the tools that draw Rust module graphs
//! (`cargo-modules`) need rust-analyzer's whole build (minutes on 2 cores) and a nightly-free
//! install in CI; this reads the import lines, which is all the rule is about.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file module: its path from the crate root (`["stats", "decide"]`; `[]` is `lib.rs`).
type ModPath = Vec<String>;

struct Module {
    /// Whether it is a directory module's `mod.rs` (its `super` is its parent's parent).
    is_dir: bool,
    /// Non-test source, comments removed.
    code: String,
    /// The whole file, for its `#[cfg(test)] mod x;` declarations.
    raw: String,
}

fn strip_comments(src: &str) -> String {
    // Line comments (doc comments included) and block comments; string literals are kept as
    // they are (a `crate::` inside a string is rare enough and would only add an edge).
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    let mut in_str = false;
    while i < b.len() {
        if depth > 0 {
            if b[i..].starts_with(b"*/") {
                depth -= 1;
                i += 2;
            } else if b[i..].starts_with(b"/*") {
                depth += 1;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if in_str {
            if b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            out.push(b[i] as char);
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            depth = 1;
            i += 2;
        } else {
            if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
                in_str = true;
            }
            // Multi-byte UTF-8 only occurs in strings and comments, both handled above or kept
            // byte-wise; push the char boundary-safe way.
            let ch_len = utf8_len(b[i]);
            out.push_str(std::str::from_utf8(&b[i..i + ch_len]).unwrap_or(" "));
            i += ch_len;
        }
    }
    out
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// The code before the file's `#[cfg(test)] mod tests` (test code may reach anywhere).
fn non_test(src: &str) -> &str {
    let mut search = 0;
    while let Some(p) = src[search..].find("#[cfg(test)]") {
        let at = search + p;
        let rest = src[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod tests") {
            return &src[..at];
        }
        search = at + 1;
    }
    src
}

fn load(src_dir: &Path) -> BTreeMap<ModPath, Module> {
    let mut mods = BTreeMap::new();
    let mut stack = vec![src_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(src_dir).unwrap().to_path_buf();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            let last = parts.pop().unwrap();
            let is_dir = last == "mod";
            if last == "main" && parts.is_empty() {
                continue; // the binary: its own crate
            }
            let is_root = last == "lib" && parts.is_empty();
            if !is_dir && !is_root {
                parts.push(last);
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            let code = strip_comments(non_test(&text));
            mods.insert(
                parts,
                Module {
                    is_dir,
                    code,
                    raw: text,
                },
            );
        }
    }
    // Modules declared under `#[cfg(test)]` (`#[cfg(test)] mod fixtures;`) are test code.
    let test_only: Vec<ModPath> = mods
        .iter()
        .flat_map(|(mp, m)| {
            let mut found = Vec::new();
            let mut rest = m.raw.as_str();
            while let Some(p) = rest.find("#[cfg(test)]") {
                rest = &rest[p + "#[cfg(test)]".len()..];
                let decl = rest.trim_start();
                let decl = decl.strip_prefix("pub ").unwrap_or(decl);
                if let Some(after) = decl.strip_prefix("mod ")
                    && let Some(end) = after.find(';')
                    && !after[..end].contains('{')
                {
                    let mut child = mp.clone();
                    child.push(after[..end].trim().to_string());
                    found.push(child);
                }
            }
            found
        })
        .collect();
    for t in test_only {
        mods.remove(&t);
    }
    mods
}

/// Every path a piece of code names from `crate::`, `super::` or `self::`, with `use` groups
/// (`crate::{a, b::{c, d}}`) expanded; each as (anchor, segments).
fn paths(code: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    for anchor in ["crate", "super", "self"] {
        let pat = format!("{anchor}::");
        let mut from = 0;
        while let Some(p) = code[from..].find(&pat) {
            let at = from + p;
            from = at + pat.len();
            // Whole word only (`some_crate::` is not `crate::`), and not `super::` after `super::`
            // (handled by the first match of the chain).
            if at > 0
                && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b':')
            {
                continue;
            }
            let anchor: &'static str = match anchor {
                "crate" => "crate",
                "super" => "super",
                _ => "self",
            };
            let mut prefix = Vec::new();
            let mut i = from;
            // `super::super::x`
            while anchor == "super" && code[i..].starts_with("super::") {
                prefix.push("super".to_string());
                i += "super::".len();
            }
            expand(code, &mut i, prefix, &mut |p| out.push((anchor, p)));
        }
    }
    out
}

/// Reads one path (or a `{…}` group of paths) at `*i`, calling `emit` with each full path.
fn expand(code: &str, i: &mut usize, prefix: Vec<String>, emit: &mut dyn FnMut(Vec<String>)) {
    let b = code.as_bytes();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(i);
    if *i < b.len() && b[*i] == b'{' {
        *i += 1;
        loop {
            skip_ws(i);
            if *i >= b.len() {
                return;
            }
            if b[*i] == b'}' {
                *i += 1;
                return;
            }
            if b[*i] == b',' {
                *i += 1;
                continue;
            }
            let before = *i;
            expand(code, i, prefix.clone(), emit);
            // `as alias` or anything unexpected: skip to the next separator.
            while *i < b.len() && b[*i] != b',' && b[*i] != b'}' {
                *i += 1;
            }
            if *i == before {
                *i += 1;
            }
        }
    }
    let mut path = prefix;
    loop {
        let start = *i;
        while *i < b.len() && (b[*i].is_ascii_alphanumeric() || b[*i] == b'_') {
            *i += 1;
        }
        if *i == start {
            break;
        }
        path.push(code[start..*i].to_string());
        if code[*i..].starts_with("::") {
            *i += 2;
            if *i < b.len() && b[*i] == b'{' {
                expand(code, i, path, emit);
                return;
            }
        } else {
            break;
        }
    }
    if !path.is_empty() {
        emit(path);
    }
}

/// `pub use child::…` re-exports of a directory module: name → child module.
fn reexports(mods: &BTreeMap<ModPath, Module>) -> BTreeMap<(ModPath, String), ModPath> {
    let mut map = BTreeMap::new();
    for (mp, m) in mods {
        let mut from = 0;
        while let Some(p) = m.code[from..].find("pub use ") {
            let mut i = from + p + "pub use ".len();
            from = i;
            let mut found = Vec::new();
            expand(&m.code, &mut i, Vec::new(), &mut |p| found.push(p));
            for path in found {
                let mut child = mp.clone();
                let mut segs = path.as_slice();
                if segs.first().map(String::as_str) == Some("self") {
                    segs = &segs[1..];
                }
                // The longest prefix of `segs` that is a module under `mp`.
                let mut k = 0;
                while k < segs.len() {
                    let mut next = child.clone();
                    next.push(segs[k].clone());
                    if mods.contains_key(&next) {
                        child = next;
                        k += 1;
                    } else {
                        break;
                    }
                }
                if child != *mp
                    && let Some(name) = segs.last()
                {
                    map.insert((mp.clone(), name.clone()), child);
                }
            }
        }
    }
    map
}

fn resolve(
    mods: &BTreeMap<ModPath, Module>,
    reexp: &BTreeMap<(ModPath, String), ModPath>,
    from: &ModPath,
    anchor: &str,
    segs: &[String],
) -> Option<ModPath> {
    let mut cur: ModPath = match anchor {
        "crate" => Vec::new(),
        "self" => from.clone(),
        _ => {
            // The file module's parent; a `mod.rs` is its directory's module, so the same rule.
            let mut p = from.clone();
            p.pop()?;
            p
        }
    };
    let mut segs = segs;
    while segs.first().map(String::as_str) == Some("super") {
        cur.pop()?;
        segs = &segs[1..];
    }
    for s in segs {
        let mut next = cur.clone();
        next.push(s.clone());
        if mods.contains_key(&next) {
            cur = next;
            continue;
        }
        // A name re-exported by a directory module resolves to the child defining it.
        while let Some(child) = reexp.get(&(cur.clone(), s.clone())) {
            cur = child.clone();
        }
        break;
    }
    Some(cur)
}

/// Module → the modules its non-test code uses (self-edges and parent ↔ child facade edges
/// left out).
fn graph(src_dir: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = load(src_dir);
    let reexp = reexports(&mods);
    let mut g: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (mp, m) in &mods {
        let mut facade_free = String::new();
        for line in m.code.lines() {
            let t = line.trim_start();
            let is_facade =
                m.is_dir && (t.starts_with("pub use ") || t.starts_with("pub(crate) use "));
            if !is_facade {
                facade_free.push_str(line);
            }
            facade_free.push('\n');
        }
        let deps = g.entry(mp.clone()).or_default();
        for (anchor, segs) in paths(&facade_free) {
            if let Some(to) = resolve(&mods, &reexp, mp, anchor, &segs)
                && to != *mp
                && !to.is_empty()
                && mods.contains_key(&to)
            {
                deps.insert(to);
            }
        }
    }
    g
}

/// The strongly connected components of `g` with more than one node: every set of modules
/// that reach each other (a cycle runs through each), members sorted.
fn tangles<N: Ord + Clone>(g: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    let reach = |from: &N| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<N, BTreeSet<N>> = g.keys().map(|n| (n.clone(), reach(n))).collect();
    let mut out: Vec<Vec<N>> = Vec::new();
    let mut placed = BTreeSet::new();
    for n in g.keys() {
        if placed.contains(n) || !reaches[n].contains(n) {
            continue;
        }
        let comp: Vec<N> = reaches[n]
            .iter()
            .filter(|m| reaches.get(*m).is_some_and(|r| r.contains(n)))
            .cloned()
            .collect();
        placed.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

fn name(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

/// Every cycle the rule forbids, one line each (empty: the shape holds).
fn cycles(src_dir: &Path) -> Vec<String> {
    let g = graph(src_dir);
    let mut found = Vec::new();
    // Top level: every module collapsed to its first segment.
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &g {
        let Some(f) = from.first() else { continue };
        let set = top.entry(f.clone()).or_default();
        for to in tos {
            if to[0] != *f {
                set.insert(to[0].clone());
            }
        }
    }
    for c in tangles(&top) {
        found.push(format!(
            "top-level modules: {{{}}} reach each other",
            c.join(", ")
        ));
    }
    // Within each directory module: its files (children collapsed to one level below it).
    let dirs: BTreeSet<ModPath> = g
        .keys()
        .filter(|p| p.len() > 1)
        .map(|p| p[..p.len() - 1].to_vec())
        .collect();
    for dir in dirs {
        let level = dir.len() + 1;
        let mut sub: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        let inside = |p: &ModPath| p.len() >= dir.len() && p[..dir.len()] == dir[..];
        for (from, tos) in &g {
            if !inside(from) {
                continue;
            }
            let f: ModPath = from[..from.len().min(level)].to_vec();
            let set = sub.entry(f.clone()).or_default();
            for to in tos.iter().filter(|t| inside(t)) {
                let t: ModPath = to[..to.len().min(level)].to_vec();
                if t != f {
                    set.insert(t);
                }
            }
        }
        for c in tangles(&sub) {
            let names: Vec<String> = c.iter().map(name).collect();
            found.push(format!(
                "files of {}: {{{}}} reach each other",
                name(&dir),
                names.join(", ")
            ));
        }
    }
    found
}

#[test]
fn harness_modules_depend_on_each_other_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&src);
    assert!(
        found.is_empty(),
        "import cycles between harness modules (make the later stage depend on the earlier \
         one, never back):\n{}",
        found.join("\n")
    );
}

/// Writes `text` to `root/rel`, making its folders: the scratch crates of the tests below.
fn write_file(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The engine's bottom layers (ARCHITECTURE.md, invariant 6, and `engine/src/lib.rs`): the
/// low-level modules import only each other, and `backend/` only them and itself, so neither
/// learns about ONNX, graphs or sessions, and the backends sit on the tensor, never the other
/// way round. The engine is a separate crate; its source is read here because this test already
/// reads import lines (the engine's tests link the engine, which this rule is not about).
const ENGINE_LOW: [&str; 5] = ["tensor", "dtype", "error", "cache", "clock"];

/// Every import of `src_dir`'s low-level modules and backends that reaches above them, one line
/// each (empty: the layers hold).
fn upward_imports(src_dir: &Path) -> Vec<String> {
    let allowed = |from: &str| -> Vec<&str> {
        match from {
            "backend" => ENGINE_LOW.iter().copied().chain(["backend"]).collect(),
            f if ENGINE_LOW.contains(&f) => ENGINE_LOW.to_vec(),
            _ => Vec::new(),
        }
    };
    let mut found = Vec::new();
    for (from, tos) in graph(src_dir) {
        let Some(f) = from.first() else { continue };
        let ok = allowed(f);
        if ok.is_empty() {
            continue;
        }
        for to in tos.iter().filter(|to| !ok.contains(&to[0].as_str())) {
            found.push(format!("{} imports {}", name(&from), name(to)));
        }
    }
    found
}

#[test]
fn engine_low_level_modules_and_backends_import_nothing_above_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    assert!(
        src.join("backend").is_dir(),
        "no engine source at {}",
        src.display()
    );
    let found = upward_imports(&src);
    assert!(
        found.is_empty(),
        "engine layers broken (a low-level module or a backend depends on something above it; \
         hand it what it needs from below, or move the type down):\n{}",
        found.join("\n")
    );
}

#[test]
fn an_upward_engine_import_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| write_file(src, rel, text);
    write(
        "lib.rs",
        "pub mod backend;\npub mod ops;\npub mod tensor;\npub mod dtype;\n",
    );
    write("dtype.rs", "pub enum DType {}\n");
    write(
        "tensor.rs",
        "use crate::dtype::DType;\npub struct Tensor(DType);\n",
    );
    write(
        "backend/mod.rs",
        "pub mod cpu;\npub use cpu::Panels;\npub trait Backend {}\n",
    );
    write(
        "backend/cpu.rs",
        "use crate::tensor::Tensor;\npub struct Panels;\npub fn f(_: &Tensor) {}\n",
    );
    write("ops.rs", "use crate::backend::Backend;\n");
    assert_eq!(upward_imports(src), Vec::<String>::new());

    // The tensor reaching up into a backend (through its facade).
    write(
        "tensor.rs",
        "use crate::backend::Panels;\npub struct Tensor(Option<Panels>);\n",
    );
    assert_eq!(upward_imports(src), vec!["tensor imports backend::cpu"]);

    // A backend reaching up into the op layer; test code may.
    write("tensor.rs", "pub struct Tensor;\n");
    write(
        "backend/cpu.rs",
        "pub struct Panels;\npub fn f(_: &crate::ops::Op) {}\n#[cfg(test)]\nmod tests {\n    use crate::ops;\n}\n",
    );
    assert_eq!(upward_imports(src), vec!["backend::cpu imports ops"]);
}

/// The check has teeth: a scratch copy of a small crate with a cycle put in is caught, at both
/// levels, and the same crate without it passes.
#[test]
fn a_cycle_put_back_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| write_file(src, rel, text);
    write("lib.rs", "pub mod stats;\npub mod results;\n");
    write(
        "stats/mod.rs",
        "mod decide;\nmod profile;\npub use decide::analyze;\npub use profile::NoiseProfile;\n",
    );
    write("stats/profile.rs", "pub struct NoiseProfile;\n");
    write(
        "stats/decide.rs",
        "use super::NoiseProfile;\npub fn analyze(_: &NoiseProfile) {}\n",
    );
    write(
        "results.rs",
        "use crate::stats::{self, analyze};\n// crate::nothing in a comment\npub fn f() {}\n",
    );
    assert_eq!(cycles(src), Vec::<String>::new());

    // Top level: stats calls back into results.
    write(
        "stats/profile.rs",
        "pub struct NoiseProfile(crate::results::Row);\n",
    );
    write(
        "results.rs",
        "use crate::stats::{self, analyze};\npub struct Row;\n",
    );
    let found = cycles(src);
    assert!(
        found
            .iter()
            .any(|c| c.starts_with("top-level modules:") && c.contains("results")),
        "{found:?}"
    );

    // Within stats: profile uses decide (through the facade), decide uses profile.
    write(
        "stats/profile.rs",
        "use super::analyze;\npub struct NoiseProfile;\n",
    );
    write("results.rs", "pub struct Row;\n");
    let found = cycles(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("files of stats:"), "{found:?}");
    assert!(found[0].contains("stats::decide") && found[0].contains("stats::profile"));

    // Test modules are free to use anything.
    write(
        "stats/profile.rs",
        "pub struct NoiseProfile;\n#[cfg(test)]\nmod tests {\n    use super::super::analyze;\n}\n",
    );
    assert_eq!(cycles(src), Vec::<String>::new());
    // And so are modules declared for tests only.
    write(
        "stats/mod.rs",
        "mod decide;\nmod profile;\n#[cfg(test)]\nmod sim;\npub use decide::analyze;\npub use profile::NoiseProfile;\n",
    );
    write("stats/sim.rs", "use crate::results::Row;\n");
    write(
        "results.rs",
        "use crate::stats::analyze;\npub struct Row;\n",
    );
    assert_eq!(cycles(src), Vec::<String>::new());
}

/// `cargo test -p harness --test module_graph -- --ignored --nocapture`: the module graph, one
/// line per module, for finding which import closes a cycle.
#[test]
#[ignore]
fn print_the_module_graph() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (from, tos) in graph(&src) {
        let tos: Vec<String> = tos.iter().map(name).collect();
        println!("{} → {}", name(&from), tos.join(", "));
    }
}
