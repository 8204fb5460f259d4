//! Differential property tests: every op in [`engine::ops::REGISTRY`], in every dtype the engine
//! supports for it, on generated shapes (ranks 0-4, zero-size dims included), attributes and
//! data, run as a one-node model through `Executor` on the CPU backend and compared with the
//! independent fp32 oracle (`oracles::run_op`, which shares no kernel code with the engine)
//! under a named tolerance tier.
//!
//! Each property draws one input set per case and runs every op of its family on it, so every op
//! sees every case. A failure names the op, dtypes, shapes, attributes, the first bad element
//! and the tier; proptest then prints the shrunk input. `PROPTEST_CASES=n` runs more cases.
//!
//! ONNX-allowed dtypes the engine rejects are pinned by `onnx_allowed_dtypes_the_engine_rejects`;
//! disagreements found while writing these tests are pinned by `#[ignore]`d tests at the end
//! (`cargo test -p engine --test differential -- --ignored` shows them failing).

mod common;

use std::collections::BTreeSet;

use common::{Graph, attr_f, attr_floats, attr_i, attr_ints, attr_s, attr_t, float_t, node_name};
use engine::ops::REGISTRY;
use engine::{DType, Data, Tensor};
use onnx_pb as pb;
use oracles::OTensor;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

// =============================================================================================
// Tolerance tiers

/// A named tolerance: `|got - want| <= abs + rel * max(|want|, scale)`, where `scale` is an
/// optional per-element magnitude bound of the computation (for MatMul/Gemm the same product on
/// `|A|`, `|B|`, `|C|`: a dot product's rounding error scales with the sum of `|a_i b_i|`, not
/// with its possibly cancelled result). NaN matches any NaN; an infinity only itself. A tier
/// with `rel == abs == 0` is [`EXACT`]: the bits must be equal.
#[derive(Clone, Copy, Debug)]
struct Tier {
    name: &'static str,
    rel: f64,
    abs: f64,
}

/// Copies and selections (layout ops, Where, Gather, Max/Min), integer and bool results, casts,
/// and IEEE-exact float arithmetic: `+ - * /`, sqrt, fmod, floor/ceil/round, comparisons. The
/// engine computes one correctly rounded f32 operation (then rounds to f16/bf16); the oracle
/// computes in f64 and rounds to f32 (then to f16/bf16). For these operations both are the
/// correctly rounded result (f64 carries more than 2 * 24 + 2 bits), so the bits must agree,
/// sign of zero included.
const EXACT: Tier = Tier {
    name: "EXACT",
    rel: 0.0,
    abs: 0.0,
};
/// One f32 libm function (exp, tanh, pow, …) against f64 rounded once: a few ulps (f32 ulp is
/// 2^-23 ≈ 1.2e-7 relative), plus 1e-7 absolute for results that cancel to near zero in an f32
/// intermediate (`HardSigmoid`'s `alpha * x + beta` ≈ 0, ulp(0.5) ≈ 6e-8).
const F32_CLOSE: Tier = Tier {
    name: "F32_CLOSE",
    rel: 1e-6,
    abs: 1e-7,
};
/// Several f32 roundings: reductions, softmax (f32 sums of exps), matmul/gemm (f32 dot products;
/// with `scale` = the product on absolute values, error ≲ k * 2^-24 * scale, k ≤ 33 here),
/// normalisations (f32 mean / variance / divide), composites (Gelu, HardSwish, Mean of 3), while
/// the oracle accumulates in f64 and rounds once.
const F32_APPROX: Tier = Tier {
    name: "F32_APPROX",
    rel: 1e-5,
    abs: 1e-6,
};
/// f16 results of one function: the engine rounds its f32 result to f16, the oracle rounds its
/// f64 result to f32 then f16; the two differ by at most one f16 ulp (2^-10 relative below
/// every power of two, hence 1e-3), or one subnormal step (2^-24 ≈ 6e-8) near zero.
const F16: Tier = Tier {
    name: "F16",
    rel: 1e-3,
    abs: 6e-8,
};
/// f16 results of composites the engine evaluates op by op, rounding to f16 after each step
/// (Gelu, HardSwish, Mean, Gemm's alpha/beta, Sum of 3) or with f32 accumulators: two ulps
/// relative plus one ulp at 1.0 (2^-10) absolute, for a step that cancels (`1 + erf(x)` near
/// x = -3 keeps only the rounding error of the erf).
const F16_APPROX: Tier = Tier {
    name: "F16_APPROX",
    rel: 2e-3,
    abs: 1e-3,
};
/// bf16 results of one function: one bf16 ulp (8 significant bits: 2^-7 ≈ 7.8e-3 relative).
/// bf16 has f32's exponent range, so the absolute floor only covers f32 intermediates that
/// cancel to near zero, as in [`F32_CLOSE`].
const BF16: Tier = Tier {
    name: "BF16",
    rel: 8e-3,
    abs: 1e-7,
};
/// bf16 composites and accumulations, as [`F16_APPROX`] for 8 significant bits: two ulps
/// relative plus one ulp at 1.0 (2^-7) absolute.
const BF16_APPROX: Tier = Tier {
    name: "BF16_APPROX",
    rel: 1.6e-2,
    abs: 8e-3,
};

impl Tier {
    fn accepts(&self, got: f32, want: f32, scale: f32) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if self.rel == 0.0 && self.abs == 0.0 {
            return got.to_bits() == want.to_bits();
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        (got as f64 - want as f64).abs() <= self.allowed(want, scale)
    }

    fn allowed(&self, want: f32, scale: f32) -> f64 {
        self.abs + self.rel * (want.abs() as f64).max(scale.abs() as f64)
    }
}

/// How an op rounds; with the output dtype this picks the tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prec {
    /// Copies, selections and correctly rounded arithmetic: [`EXACT`].
    Exact,
    /// One elementwise function: [`F32_CLOSE`], [`F16`], [`BF16`].
    Close,
    /// Several roundings or accumulation: [`F32_APPROX`], [`F16_APPROX`], [`BF16_APPROX`].
    Approx,
}

/// The tier for an output of `dtype` computed with precision `prec`. Integer and bool outputs
/// are always exact.
fn tier(dtype: DType, prec: Prec) -> Tier {
    match (prec, dtype) {
        (Prec::Exact, _) => EXACT,
        (Prec::Close, DType::F32) => F32_CLOSE,
        (Prec::Approx, DType::F32) => F32_APPROX,
        (Prec::Close, DType::F16) => F16,
        (Prec::Approx, DType::F16) => F16_APPROX,
        (Prec::Close, DType::BF16) => BF16,
        (Prec::Approx, DType::BF16) => BF16_APPROX,
        _ => EXACT,
    }
}

// =============================================================================================
// Tensors and the engine ↔ oracle bridge

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const INTS: [DType; 3] = [DType::I64, DType::I32, DType::U8];
const ALL: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
];

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// An integer tensor of `dtype`, values wrapped into it.
fn int_t(dtype: DType, shape: &[usize], v: &[i64]) -> Tensor {
    let data = match dtype {
        DType::I64 => Data::I64(v.to_vec()),
        DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
        DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
        other => panic!("int_t: {other} is not an integer type"),
    };
    Tensor::new(shape.to_vec(), data).expect("int tensor")
}

fn bool_t(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::new(shape.to_vec(), Data::Bool(v.to_vec())).expect("bool tensor")
}

/// A 1-D i64 tensor (shape-like inputs: axes, starts, repeats …).
fn i64s(v: &[i64]) -> Tensor {
    Tensor::i64(&[v.len()], v.to_vec()).expect("i64 tensor")
}

/// A tensor of any dtype from generated f32 values: float types round to nearest, integer types
/// take `round(4 v)` (so -6..6 becomes -24..24, wrapped for u8), bool takes `v > 0`.
fn any_t(dtype: DType, shape: &[usize], v: &[f32]) -> Tensor {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => float_t(dtype, shape, v),
        DType::Bool => bool_t(shape, &v.iter().map(|&x| x > 0.0).collect::<Vec<_>>()),
        _ => int_t(
            dtype,
            shape,
            &v.iter()
                .map(|&x| (4.0 * x).round() as i64)
                .collect::<Vec<_>>(),
        ),
    }
}

/// The same tensor as the oracle holds it.
fn to_oracle(t: &Tensor) -> OTensor {
    use oracles::{DType as O, Data as D};
    let (dtype, data) = match t.data() {
        Data::F32(v) => (O::F32, D::F32(v.clone())),
        Data::F16(v) => (O::F16, D::F32(v.iter().map(|x| x.to_f32()).collect())),
        Data::BF16(v) => (O::BF16, D::F32(v.iter().map(|x| x.to_f32()).collect())),
        Data::I64(v) => (O::I64, D::I64(v.clone())),
        Data::I32(v) => (O::I32, D::I64(v.iter().map(|&x| x as i64).collect())),
        Data::U8(v) => (O::U8, D::I64(v.iter().map(|&x| x as i64).collect())),
        Data::Bool(v) => (O::Bool, D::Bool(v.clone())),
    };
    OTensor::new(t.shape().to_vec(), dtype, data).expect("engine tensors convert to the oracle's")
}

/// `dtype[shape]`, with the values when there are few.
fn show(t: &Tensor) -> String {
    let head = format!("{}{:?}", t.dtype(), t.shape());
    if t.numel() > 16 {
        return head;
    }
    match t.data() {
        Data::I64(_) | Data::I32(_) | Data::U8(_) => {
            format!("{head} {:?}", t.to_i64_vec().unwrap_or_default())
        }
        Data::Bool(v) => format!("{head} {v:?}"),
        _ => format!("{head} {:?}", t.to_f32_vec()),
    }
}

fn show_attr(a: &pb::AttributeProto) -> String {
    let name = a.name();
    if let Some(t) = &a.t {
        return format!("{name}=<tensor type {} dims {:?}>", t.data_type(), t.dims);
    }
    if let Some(s) = &a.s {
        return format!("{name}={:?}", String::from_utf8_lossy(s));
    }
    if !a.ints.is_empty() || a.r#type() == pb::attribute_proto::AttributeType::Ints {
        return format!("{name}={:?}", a.ints);
    }
    if !a.floats.is_empty() || a.r#type() == pb::attribute_proto::AttributeType::Floats {
        return format!("{name}={:?}", a.floats);
    }
    match (a.i, a.f) {
        (Some(i), _) => format!("{name}={i}"),
        (_, Some(f)) => format!("{name}={f}"),
        _ => format!("{name}=?"),
    }
}

/// Row-major multi-index of flat index `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (a, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[a] = i % d;
            i /= d;
        }
    }
    idx
}

// =============================================================================================
// One differential case

/// The operator a [`Case`] runs. Cases name it only through the constants of [`covered_ops!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpId {
    domain: &'static str,
    op_type: &'static str,
}

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.domain.is_empty() {
            f.write_str(self.op_type)
        } else {
            write!(f, "{}::{}", self.domain, self.op_type)
        }
    }
}

/// Declares one [`OpId`] constant per `NAME = (domain, op_type)` line, each denied `dead_code`
/// (every listed op must be run by some case), and `COVERED`, the same list as pairs.
macro_rules! covered_ops {
    ($($(#[$doc:meta])* $name:ident = ($domain:literal, $op_type:literal),)*) => {
        $(
            $(#[$doc])*
            #[deny(dead_code)]
            const $name: OpId = OpId { domain: $domain, op_type: $op_type };
        )*
        /// Every (domain, op_type) some case runs.
        const COVERED: &[(&str, &str)] = &[$(($domain, $op_type)),*];
    };
}

/// A single-node model and how to compare its outputs.
#[derive(Clone, Debug)]
struct Case {
    op: &'static str,
    domain: &'static str,
    opset: i64,
    attrs: Vec<pb::AttributeProto>,
    /// `None` is an omitted optional input (empty name).
    inputs: Vec<Option<Tensor>>,
    /// The output ports to compare; the others are left unnamed.
    outputs: Vec<usize>,
    prec: Prec,
    /// Per-element magnitude for the tolerance of output 0 (see [`Tier`]).
    scale: Option<Vec<f32>>,
    threads: usize,
}

/// Default-domain opset of most cases (Split's `num_outputs`, Reduce* axes as inputs).
const OPSET: i64 = 18;

impl Case {
    fn new(op: OpId, inputs: Vec<Tensor>) -> Case {
        Case {
            op: op.op_type,
            domain: op.domain,
            opset: OPSET,
            attrs: Vec::new(),
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![0],
            prec: Prec::Exact,
            scale: None,
            threads: 1,
        }
    }

    /// Appends an optional input (`None`: omitted).
    fn input(mut self, t: Option<Tensor>) -> Case {
        self.inputs.push(t);
        self
    }

    fn attr(mut self, a: pb::AttributeProto) -> Case {
        self.attrs.push(a);
        self
    }

    fn attrs(mut self, a: impl IntoIterator<Item = pb::AttributeProto>) -> Case {
        self.attrs.extend(a);
        self
    }

    fn opset(mut self, opset: i64) -> Case {
        self.opset = opset;
        self
    }

    fn outputs(mut self, outputs: impl IntoIterator<Item = usize>) -> Case {
        self.outputs = outputs.into_iter().collect();
        self
    }

    fn prec(mut self, prec: Prec) -> Case {
        self.prec = prec;
        self
    }

    fn scale(mut self, scale: Vec<f32>) -> Case {
        self.scale = Some(scale);
        self
    }

    fn threads(mut self, threads: usize) -> Case {
        self.threads = threads;
        self
    }

    fn n_outputs(&self) -> usize {
        self.outputs.iter().max().map_or(1, |m| m + 1)
    }

    fn describe(&self) -> String {
        let domain = if self.domain.is_empty() {
            String::new()
        } else {
            format!("{}::", self.domain)
        };
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|t| t.as_ref().map_or("(omitted)".to_string(), show))
            .collect();
        let attrs: Vec<String> = self.attrs.iter().map(show_attr).collect();
        format!(
            "{domain}{} (opset {})\n  inputs: {}\n  attrs: {{{}}}",
            self.op,
            self.opset,
            inputs.join(", "),
            attrs.join(", ")
        )
    }

    fn run_engine(&self) -> engine::Result<Vec<Tensor>> {
        let mut g = Graph::new(self.opset);
        let mut names = Vec::with_capacity(self.inputs.len());
        for (i, t) in self.inputs.iter().enumerate() {
            match t {
                Some(t) => {
                    let name = format!("in{i}");
                    g.feed(&name, t.clone());
                    names.push(name);
                }
                None => names.push(String::new()),
            }
        }
        let outs: Vec<String> = (0..self.n_outputs())
            .map(|i| {
                if self.outputs.contains(&i) {
                    format!("out{i}")
                } else {
                    String::new()
                }
            })
            .collect();
        let ins: Vec<&str> = names.iter().map(String::as_str).collect();
        let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
        g.node(
            &node_name(self.op),
            self.op,
            self.domain,
            &ins,
            &out_refs,
            self.attrs.clone(),
        );
        for &i in &self.outputs {
            g.output(&format!("out{i}"));
        }
        g.run(self.threads)
    }

    fn run_oracle(&self) -> oracles::Result<Vec<Option<OTensor>>> {
        let inputs: Vec<Option<OTensor>> = self
            .inputs
            .iter()
            .map(|t| t.as_ref().map(to_oracle))
            .collect();
        oracles::run_op(
            self.op,
            self.domain,
            &self.attrs,
            &inputs,
            self.n_outputs(),
            self.opset,
        )
    }

    /// Runs the engine and the oracle and compares every listed output.
    fn check(&self) -> Result<(), TestCaseError> {
        let fail = |msg: String| Err(TestCaseError::fail(format!("{msg}\n{}", self.describe())));
        match (self.run_engine(), self.run_oracle()) {
            (Ok(got), Ok(want)) => {
                for (k, &port) in self.outputs.iter().enumerate() {
                    let Some(w) = want.get(port).and_then(Option::as_ref) else {
                        return fail(format!("the oracle computes no output {port}"));
                    };
                    if let Err(msg) = self.compare(port, &got[k], w) {
                        return fail(msg);
                    }
                }
                Ok(())
            }
            (Err(e), Ok(_)) => fail(format!("the engine fails where the oracle runs: {e}")),
            (Ok(got), Err(e)) => fail(format!(
                "the oracle fails ({e}) where the engine gives {:?}",
                got.iter().map(show).collect::<Vec<_>>()
            )),
            (Err(e), Err(o)) => fail(format!(
                "both reject a generated case (a generator bug):\n  engine: {e}\n  oracle: {o}"
            )),
        }
    }

    fn compare(&self, port: usize, got: &Tensor, want: &OTensor) -> Result<(), String> {
        let what = format!("output {port}");
        if got.dtype().to_onnx() != want.dtype().to_onnx() {
            return Err(format!(
                "{what}: dtype {} (engine) vs {} (oracle)",
                got.dtype(),
                want.dtype()
            ));
        }
        if got.shape() != want.shape.as_slice() {
            return Err(format!(
                "{what}: shape {:?} (engine) vs {:?} (oracle)",
                got.shape(),
                want.shape
            ));
        }
        let shape = got.shape();
        let tier = tier(got.dtype(), self.prec);
        match got.data() {
            Data::Bool(g) => {
                let w = want.bools().map_err(|e| e.to_string())?;
                if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
                    return Err(format!(
                        "{what} index {i} {:?}: engine {}, oracle {} (tier EXACT)\n  \
                         engine: {g:?}\n  oracle: {w:?}",
                        unravel(i, shape),
                        g[i],
                        w[i]
                    ));
                }
            }
            Data::I64(_) | Data::I32(_) | Data::U8(_) => {
                let g = got.to_i64_vec().map_err(|e| e.to_string())?;
                let w = want.i64s().map_err(|e| e.to_string())?;
                if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
                    return Err(format!(
                        "{what} index {i} {:?}: engine {}, oracle {} (tier EXACT){}",
                        unravel(i, shape),
                        g[i],
                        w[i],
                        if g.len() <= 64 {
                            format!("\n  engine: {g:?}\n  oracle: {w:?}")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
            _ => {
                let g = got.to_f32_vec();
                let w = want.f32s().map_err(|e| e.to_string())?;
                let scale = |i: usize| {
                    self.scale
                        .as_ref()
                        .filter(|_| port == 0)
                        .map_or(0.0, |s| s[i])
                };
                if let Some(i) = (0..g.len()).find(|&i| !tier.accepts(g[i], w[i], scale(i))) {
                    return Err(format!(
                        "{what} index {i} {:?}: engine {:e}, oracle {:e}, |diff| {:e} > \
                         allowed {:e} (tier {}: rel {:e}, abs {:e}, scale {:e}){}",
                        unravel(i, shape),
                        g[i],
                        w[i],
                        (g[i] as f64 - w[i] as f64).abs(),
                        tier.allowed(w[i], scale(i)),
                        tier.name,
                        tier.rel,
                        tier.abs,
                        scale(i),
                        if g.len() <= 64 {
                            format!("\n  engine: {g:?}\n  oracle: {w:?}")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
        Ok(())
    }
}

// =============================================================================================
// Strategies

const MAX_RANK: usize = 4;
const MAX_DIM: usize = 5;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    ProptestConfig {
        cases,
        // Shrunk failures are reported in the test output; no regression files in the tree.
        failure_persistence: None,
        // Each case runs a whole op family, so shrinking needs more than the default 4 * cases
        // steps to reach a minimal input; it only runs on failure. PROPTEST_MAX_SHRINK_ITERS
        // bounds it where each step is slow (the suite on the GPU).
        max_shrink_iters: std::env::var("PROPTEST_MAX_SHRINK_ITERS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(4096),
        ..ProptestConfig::default()
    }
}

/// A dim in `0..=max`, zero about one time in twelve.
fn dim(max: usize) -> BoxedStrategy<usize> {
    prop_oneof![1 => Just(0usize), 11 => 1..=max].boxed()
}

fn shape_r(min_rank: usize, max_rank: usize) -> BoxedStrategy<Vec<usize>> {
    (min_rank..=max_rank)
        .prop_flat_map(|r| vec(dim(MAX_DIM), r))
        .boxed()
}

fn shape() -> BoxedStrategy<Vec<usize>> {
    shape_r(0, MAX_RANK)
}

/// A shape where size-1 dims are common (Squeeze, Expand).
fn shape_with_ones(min_rank: usize) -> BoxedStrategy<Vec<usize>> {
    (min_rank..=MAX_RANK)
        .prop_flat_map(|r| vec(prop_oneof![2 => Just(1usize), 3 => dim(MAX_DIM)], r))
        .boxed()
}

/// Where generated floats come from.
#[derive(Clone, Copy, Debug)]
enum Dom {
    /// [-6, 6], a third of them multiples of 0.5 (ties for Round, equal pairs for comparisons,
    /// ArgMax ties), and zeros of both signs.
    Any,
    /// As `Any`, plus NaN and ±inf one time in twelve (elementwise ops and casts).
    Special,
    /// [-1, 1] (MatMul/Gemm operands).
    Unit,
}

fn elem(dom: Dom) -> BoxedStrategy<f32> {
    match dom {
        Dom::Any => prop_oneof![
            6 => -6.0f32..6.0,
            3 => (-12i32..=12).prop_map(|i| i as f32 * 0.5),
            1 => select(vec![0.0f32, -0.0]),
        ]
        .boxed(),
        Dom::Special => prop_oneof![
            11 => elem(Dom::Any),
            1 => select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
        ]
        .boxed(),
        Dom::Unit => prop_oneof![
            8 => -1.0f32..1.0,
            1 => (-4i32..=4).prop_map(|i| i as f32 * 0.25),
        ]
        .boxed(),
    }
}

/// A generated tensor: shape and f32 values, turned into each dtype under test by [`any_t`].
#[derive(Clone, Debug)]
struct Vals {
    shape: Vec<usize>,
    v: Vec<f32>,
}

impl Vals {
    fn t(&self, dtype: DType) -> Tensor {
        any_t(dtype, &self.shape, &self.v)
    }

    fn map(&self, f: impl Fn(f32) -> f32) -> Vals {
        Vals {
            shape: self.shape.clone(),
            v: self.v.iter().map(|&x| f(x)).collect(),
        }
    }

    fn rank(&self) -> usize {
        self.shape.len()
    }
}

fn vals_of(shape: Vec<usize>, dom: Dom) -> BoxedStrategy<Vals> {
    vec(elem(dom), numel(&shape))
        .prop_map(move |v| Vals {
            shape: shape.clone(),
            v,
        })
        .boxed()
}

fn vals(shape: BoxedStrategy<Vec<usize>>, dom: Dom) -> BoxedStrategy<Vals> {
    shape.prop_flat_map(move |s| vals_of(s, dom)).boxed()
}

/// A shape that broadcasts to `full`: some leading dims dropped, some dims set to 1.
fn bcast_from(full: Vec<usize>) -> BoxedStrategy<Vec<usize>> {
    let r = full.len();
    (
        prop_oneof![3 => Just(0usize), 1 => 0..=r],
        vec(proptest::bool::weighted(0.3), r),
    )
        .prop_map(move |(drop, ones)| {
            full.iter()
                .zip(&ones)
                .skip(drop)
                .map(|(&d, &one)| if one { 1 } else { d })
                .collect()
        })
        .boxed()
}

/// Three tensors whose shapes broadcast together (each derived from one full shape).
fn bcast3(dom: Dom) -> BoxedStrategy<(Vals, Vals, Vals)> {
    shape()
        .prop_flat_map(move |full| {
            (
                bcast_from(full.clone()).prop_flat_map(move |s| vals_of(s, dom)),
                bcast_from(full.clone()).prop_flat_map(move |s| vals_of(s, dom)),
                bcast_from(full).prop_flat_map(move |s| vals_of(s, dom)),
            )
        })
        .boxed()
}

/// An axis of a rank-`r` tensor (`r >= 1`), negative half the time.
fn axis_of(r: usize) -> BoxedStrategy<i64> {
    let r = r as i64;
    (-r..r).boxed()
}

/// A subset of the axes of rank `r`, shuffled, each negative at random.
fn axes_subset(r: usize) -> BoxedStrategy<Vec<i64>> {
    (vec(any::<bool>(), r), vec(any::<bool>(), r))
        .prop_flat_map(move |(keep, neg)| {
            let axes: Vec<i64> = (0..r)
                .filter(|&a| keep[a])
                .map(|a| {
                    if neg[a] {
                        a as i64 - r as i64
                    } else {
                        a as i64
                    }
                })
                .collect();
            Just(axes).prop_shuffle()
        })
        .boxed()
}

/// i64 values: small ones mostly, sometimes any value or an extreme (wrap-around).
fn int_elem() -> BoxedStrategy<i64> {
    prop_oneof![
        8 => -20i64..=20,
        1 => any::<i64>(),
        1 => select(vec![i64::MIN, i64::MAX, -1, 0, 1, i32::MIN as i64, 255, 256]),
    ]
    .boxed()
}

/// Three broadcast-compatible integer tensors.
fn int_bcast3() -> BoxedStrategy<[(Vec<usize>, Vec<i64>); 3]> {
    shape()
        .prop_flat_map(|full| {
            let one = |full: Vec<usize>| {
                bcast_from(full).prop_flat_map(|s| {
                    let n = numel(&s);
                    (Just(s), vec(int_elem(), n))
                })
            };
            [one(full.clone()), one(full.clone()), one(full)]
        })
        .boxed()
}

// =============================================================================================
// Elementwise unary

/// Every float unary op on `x` (and `|x|` for Sqrt and Log).
fn unary_float(dtype: DType, x: &Vals, alpha: f32, beta: f32) -> Result<(), TestCaseError> {
    use Prec::*;
    let t = x.t(dtype);
    let pos = x.map(f32::abs).t(dtype);
    for (op, prec) in [
        (ABS, Exact),
        (NEG, Exact),
        (FLOOR, Exact),
        (CEIL, Exact),
        (ROUND, Exact),
        (SIGN, Exact),
        (RELU, Exact),
        (RECIPROCAL, Exact),
        (IDENTITY, Exact),
        (DROPOUT, Exact),
        (IS_NAN, Exact),
        (EXP, Close),
        (SIGMOID, Close),
        (TANH, Close),
        (COS, Close),
        (SIN, Close),
        (ERF, Close),
        (SOFTPLUS, Close),
        (HARD_SWISH, Approx),
    ] {
        Case::new(op, vec![t.clone()]).prec(prec).check()?;
    }
    Case::new(SQRT, vec![pos.clone()]).check()?;
    Case::new(LOG, vec![pos]).prec(Close).check()?;
    // alpha * x is one correctly rounded product in both.
    Case::new(LEAKY_RELU, vec![t.clone()])
        .attr(attr_f("alpha", alpha))
        .check()?;
    Case::new(ELU, vec![t.clone()])
        .attr(attr_f("alpha", alpha))
        .prec(Close)
        .check()?;
    Case::new(HARD_SIGMOID, vec![t.clone()])
        .attrs([attr_f("alpha", alpha), attr_f("beta", beta)])
        .prec(Close)
        .check()?;
    for approximate in [None, Some("none"), Some("tanh")] {
        Case::new(GELU, vec![t.clone()])
            .attrs(approximate.map(|a| attr_s("approximate", a)))
            .opset(20)
            .prec(Approx)
            .check()?;
    }
    Ok(())
}

/// The integer unary ops (Neg only for signed types), Not on bool.
fn unary_int(dtype: DType, x: &[i64], shape: &[usize]) -> Result<(), TestCaseError> {
    let t = int_t(dtype, shape, x);
    for op in [ABS, NEG, SIGN, RELU, IDENTITY] {
        if op == NEG && dtype == DType::U8 {
            continue;
        }
        Case::new(op, vec![t.clone()]).check()?;
    }
    let b = bool_t(shape, &x.iter().map(|&v| v % 2 != 0).collect::<Vec<_>>());
    Case::new(NOT, vec![b]).check()
}

fn unary_input() -> BoxedStrategy<(Vals, f32, f32)> {
    (
        vals(shape(), Dom::Special),
        prop_oneof![Just(0.01f32), Just(0.2), 0.0f32..2.0],
        prop_oneof![Just(0.5f32), -1.0f32..1.0],
    )
        .boxed()
}

fn int_input() -> BoxedStrategy<(Vec<usize>, Vec<i64>)> {
    shape()
        .prop_flat_map(|s| {
            let n = numel(&s);
            (Just(s), vec(int_elem(), n))
        })
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unary_f32((x, alpha, beta) in unary_input()) {
        unary_float(DType::F32, &x, alpha, beta)?;
    }

    #[test]
    fn unary_f16((x, alpha, beta) in unary_input()) {
        unary_float(DType::F16, &x, alpha, beta)?;
    }

    #[test]
    fn unary_bf16((x, alpha, beta) in unary_input()) {
        unary_float(DType::BF16, &x, alpha, beta)?;
    }

    #[test]
    fn unary_integer_and_bool((shape, x) in int_input()) {
        for dtype in INTS {
            unary_int(dtype, &x, &shape)?;
        }
    }
}

// =============================================================================================
// Elementwise binary, variadic, Where

/// Every float binary op on `a`, `b` (and `c` for the 3-input variadics and Where's condition).
fn binary_float(dtype: DType, a: &Vals, b: &Vals, c: &Vals) -> Result<(), TestCaseError> {
    use Prec::*;
    let (ta, tb, tc) = (a.t(dtype), b.t(dtype), c.t(dtype));
    for (op, prec) in [
        (ADD, Exact),
        (SUB, Exact),
        (MUL, Exact),
        (DIV, Exact),
        (MAX, Exact),
        (MIN, Exact),
        (SUM, Exact),
        (MEAN, Close),
        (EQUAL, Exact),
        (LESS, Exact),
        (LESS_OR_EQUAL, Exact),
        (GREATER, Exact),
        (GREATER_OR_EQUAL, Exact),
    ] {
        Case::new(op, vec![ta.clone(), tb.clone()])
            .prec(prec)
            .check()?;
    }
    for fmod in [0, 1] {
        Case::new(MOD, vec![ta.clone(), tb.clone()])
            .attr(attr_i("fmod", fmod))
            .check()?;
    }
    // Pow on a non-negative base, exponent in [-3, 3]; also with an i64 exponent (cast to the
    // base's type first).
    let base = a.map(f32::abs).t(dtype);
    Case::new(POW, vec![base.clone(), b.map(|v| v / 2.0).t(dtype)])
        .prec(Close)
        .check()?;
    Case::new(
        POW,
        vec![base, b.map(|v| (v / 2.0).round() / 4.0).t(DType::I64)],
    )
    .prec(Close)
    .check()?;
    // Variadic: three inputs fold with a rounding per step in the engine (Sum, Mean) but are
    // summed in f64 by the oracle; one input is the identity.
    // A rounded partial sum that later cancels leaves half an ulp of the partial sum, so the
    // tolerance scales with the same op on absolute values.
    let three = [Some(&ta), Some(&tb), Some(&tc)];
    for (op, prec) in [(SUM, Approx), (MEAN, Approx), (MAX, Exact), (MIN, Exact)] {
        let mut case = Case::new(op, vec![ta.clone(), tb.clone(), tc.clone()]).prec(prec);
        if prec == Approx {
            case = case.scale(magnitude(op.op_type, &three, &[]));
        }
        case.check()?;
        Case::new(op, vec![ta.clone()]).check()?;
    }
    let cond = c.t(DType::Bool);
    Case::new(WHERE, vec![cond, ta, tb]).check()
}

/// Every integer binary op on `a`, `b` (divisors with zeros replaced by 1), `c`.
fn binary_int(dtype: DType, [a, b, c]: &[(Vec<usize>, Vec<i64>); 3]) -> Result<(), TestCaseError> {
    let (ta, tb, tc) = (
        int_t(dtype, &a.0, &a.1),
        int_t(dtype, &b.0, &b.1),
        int_t(dtype, &c.0, &c.1),
    );
    for op in [
        ADD,
        SUB,
        MUL,
        MAX,
        MIN,
        SUM,
        MEAN,
        POW,
        EQUAL,
        LESS,
        LESS_OR_EQUAL,
        GREATER,
        GREATER_OR_EQUAL,
    ] {
        Case::new(op, vec![ta.clone(), tb.clone()]).check()?;
    }
    // A divisor that wraps to 0 in `dtype` is replaced by 1 (integer division by zero is an
    // error in both; see `integer_division_by_zero_is_an_error_in_both`).
    let nz: Vec<i64> = int_t(dtype, &b.0, &b.1)
        .to_i64_vec()
        .unwrap()
        .iter()
        .map(|&v| if v == 0 { 1 } else { v })
        .collect();
    let divisor = int_t(dtype, &b.0, &nz);
    Case::new(DIV, vec![ta.clone(), divisor.clone()]).check()?;
    for fmod in [0, 1] {
        Case::new(MOD, vec![ta.clone(), divisor.clone()])
            .attr(attr_i("fmod", fmod))
            .check()?;
    }
    for op in [SUM, MEAN, MAX, MIN] {
        Case::new(op, vec![ta.clone(), tb.clone(), tc.clone()]).check()?;
    }
    let cond = bool_t(&c.0, &c.1.iter().map(|&v| v > 0).collect::<Vec<_>>());
    Case::new(WHERE, vec![cond, ta, tb]).check()
}

/// And / Or / Xor / Equal / Where on bools.
fn binary_bool([a, b, c]: &[(Vec<usize>, Vec<i64>); 3]) -> Result<(), TestCaseError> {
    let t = |(s, v): &(Vec<usize>, Vec<i64>)| {
        bool_t(s, &v.iter().map(|&x| x % 2 != 0).collect::<Vec<_>>())
    };
    let (ta, tb, tc) = (t(a), t(b), t(c));
    for op in [AND, OR, XOR, EQUAL] {
        Case::new(op, vec![ta.clone(), tb.clone()]).check()?;
    }
    Case::new(WHERE, vec![tc, ta, tb]).check()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn binary_f32((a, b, c) in bcast3(Dom::Special)) {
        binary_float(DType::F32, &a, &b, &c)?;
    }

    #[test]
    fn binary_f16((a, b, c) in bcast3(Dom::Special)) {
        binary_float(DType::F16, &a, &b, &c)?;
    }

    #[test]
    fn binary_bf16((a, b, c) in bcast3(Dom::Special)) {
        binary_float(DType::BF16, &a, &b, &c)?;
    }

    #[test]
    fn binary_integer_and_bool(abc in int_bcast3()) {
        for dtype in INTS {
            binary_int(dtype, &abc)?;
        }
        binary_bool(&abc)?;
    }
}

// =============================================================================================
// Cast, CastLike, Clip

fn cast_input() -> BoxedStrategy<(Vals, Vec<i64>)> {
    shape()
        .prop_flat_map(|s| {
            let n = numel(&s);
            (
                vec(
                    prop_oneof![4 => elem(Dom::Special), 1 => -300.0f32..300.0],
                    n,
                )
                .prop_map(move |v| Vals {
                    shape: s.clone(),
                    v,
                }),
                vec(int_elem(), n),
            )
        })
        .boxed()
}

/// Clip's input and bounds: each bound a scalar, present or omitted, possibly crossed.
fn clip_input() -> BoxedStrategy<(Vals, Option<f32>, Option<f32>)> {
    (
        vals(shape(), Dom::Any),
        proptest::option::of(-6.0f32..6.0),
        proptest::option::of(-6.0f32..6.0),
    )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// Every (from, to) pair of the seven dtypes, as Cast and as CastLike.
    #[test]
    fn cast_all_dtype_pairs((x, ints) in cast_input()) {
        for from in ALL {
            let t = if INTS.contains(&from) {
                int_t(from, &x.shape, &ints)
            } else {
                x.t(from)
            };
            for to in ALL {
                Case::new(CAST, vec![t.clone()])
                    .attr(attr_i("to", to.to_onnx() as i64))
                    .check()?;
                Case::new(CAST_LIKE, vec![t.clone(), any_t(to, &[], &[1.0])]).check()?;
            }
        }
    }

    /// Clip with bounds as inputs (opset 13) for every numeric dtype, and as attributes
    /// (opset 6) for f32.
    #[test]
    fn clip_all_dtypes((x, lo, hi) in clip_input()) {
        for dtype in FLOATS.iter().chain(&INTS) {
            let bound = |v: Option<f32>| v.map(|v| any_t(*dtype, &[], &[v]));
            Case::new(CLIP, vec![x.t(*dtype)])
                .input(bound(lo))
                .input(bound(hi))
                .opset(13)
                .check()?;
        }
        Case::new(CLIP, vec![x.t(DType::F32)])
            .attrs(lo.map(|v| attr_f("min", v)))
            .attrs(hi.map(|v| attr_f("max", v)))
            .opset(6)
            .check()?;
    }
}

// =============================================================================================
// Reductions, ArgMax / ArgMin, Softmax

const REDUCE_OPS: [OpId; 9] = [
    REDUCE_SUM,
    REDUCE_MEAN,
    REDUCE_MAX,
    REDUCE_MIN,
    REDUCE_PROD,
    REDUCE_SUM_SQUARE,
    REDUCE_L1,
    REDUCE_L2,
    REDUCE_LOG_SUM_EXP,
];

#[derive(Clone, Debug)]
struct ReduceInput {
    x: Vals,
    /// `None`: the axes input is omitted.
    axes: Option<Vec<i64>>,
    keepdims: bool,
    noop_with_empty_axes: bool,
}

fn reduce_input() -> BoxedStrategy<ReduceInput> {
    vals(shape(), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (
                Just(x),
                proptest::option::weighted(0.8, axes_subset(r)),
                any::<bool>(),
                proptest::bool::weighted(0.2),
            )
        })
        .prop_map(|(x, axes, keepdims, noop_with_empty_axes)| ReduceInput {
            x,
            axes,
            keepdims,
            noop_with_empty_axes,
        })
        .boxed()
}

fn reductions(dtype: DType, r: &ReduceInput) -> Result<(), TestCaseError> {
    for op in REDUCE_OPS {
        if !dtype.is_float() && matches!(op, REDUCE_L2 | REDUCE_LOG_SUM_EXP) {
            continue; // see onnx_allowed_dtypes_the_engine_rejects
        }
        // ONNX allows u8 for ReduceMax / ReduceMin only (see
        // pinned_integer_reduce_mean_wraps_the_sum_in_the_oracle_only for the rest).
        if dtype == DType::U8 && !matches!(op, REDUCE_MAX | REDUCE_MIN) {
            continue;
        }
        // Products of up to 625 values stay finite in [0.25, 1.75] (integers: 1..7).
        let x = if op == REDUCE_PROD {
            r.x.map(|v| 1.0 + v / 8.0)
        } else {
            r.x.clone()
        };
        let prec = if matches!(op, REDUCE_MAX | REDUCE_MIN) {
            Prec::Exact
        } else {
            Prec::Approx
        };
        Case::new(op, vec![x.t(dtype)])
            .input(r.axes.as_deref().map(i64s))
            .attrs([
                attr_i("keepdims", r.keepdims as i64),
                attr_i("noop_with_empty_axes", r.noop_with_empty_axes as i64),
            ])
            .prec(prec)
            .check()?;
    }
    Ok(())
}

#[derive(Clone, Debug)]
struct AxisInput {
    x: Vals,
    axis: i64,
    keepdims: bool,
    select_last: bool,
}

/// A tensor of rank >= 1 whose `axis` is not empty (ArgMax needs an element; Softmax is
/// indifferent), with the flags ArgMax takes.
fn axis_input() -> BoxedStrategy<AxisInput> {
    shape_r(1, MAX_RANK)
        .prop_flat_map(|s| (Just(s.clone()), axis_of(s.len())))
        .prop_flat_map(|(mut s, axis)| {
            let a = if axis < 0 {
                axis + s.len() as i64
            } else {
                axis
            } as usize;
            s[a] = s[a].max(1);
            (
                vals_of(s, Dom::Any),
                Just(axis),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(x, axis, keepdims, select_last)| AxisInput {
            x,
            axis,
            keepdims,
            select_last,
        })
        .boxed()
}

fn arg_extremes(dtype: DType, a: &AxisInput) -> Result<(), TestCaseError> {
    for op in [ARG_MAX, ARG_MIN] {
        Case::new(op, vec![a.x.t(dtype)])
            .attrs([
                attr_i("axis", a.axis),
                attr_i("keepdims", a.keepdims as i64),
                attr_i("select_last_index", a.select_last as i64),
            ])
            .check()?;
    }
    Ok(())
}

/// Softmax / LogSoftmax along `axis` (opset 13), and over the 2-D coercion at `axis` (opset 11).
fn softmaxes(dtype: DType, a: &AxisInput) -> Result<(), TestCaseError> {
    for op in [SOFTMAX, LOG_SOFTMAX] {
        for opset in [13, 11] {
            Case::new(op, vec![a.x.t(dtype)])
                .attr(attr_i("axis", a.axis))
                .opset(opset)
                .prec(Prec::Approx)
                .check()?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reduce_f32(r in reduce_input()) {
        reductions(DType::F32, &r)?;
    }

    #[test]
    fn reduce_f16(r in reduce_input()) {
        reductions(DType::F16, &r)?;
    }

    #[test]
    fn reduce_bf16(r in reduce_input()) {
        reductions(DType::BF16, &r)?;
    }

    #[test]
    fn reduce_integer(r in reduce_input()) {
        for dtype in INTS {
            reductions(dtype, &r)?;
        }
    }

    #[test]
    fn arg_max_min_all_numeric_dtypes(a in axis_input()) {
        for dtype in FLOATS.iter().chain(&INTS) {
            arg_extremes(*dtype, &a)?;
        }
    }

    #[test]
    fn softmax_f32(a in axis_input()) {
        softmaxes(DType::F32, &a)?;
    }

    #[test]
    fn softmax_f16(a in axis_input()) {
        softmaxes(DType::F16, &a)?;
    }

    #[test]
    fn softmax_bf16(a in axis_input()) {
        softmaxes(DType::BF16, &a)?;
    }
}

// =============================================================================================
// Layout: every op in all seven dtypes

/// Runs `make(dtype)` for each of the seven dtypes.
fn all_dtypes(make: impl Fn(DType) -> Case) -> Result<(), TestCaseError> {
    for dtype in ALL {
        make(dtype).check()?;
    }
    Ok(())
}

/// Reshape's input, spec and `allowzero`: the spec is the input's dims shuffled, with size-1
/// dims inserted and neighbours merged, some dims written as 0 (copy) and one as -1 (infer).
fn reshape_input() -> BoxedStrategy<(Vals, Vec<i64>, bool)> {
    vals(shape(), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (
                Just(x.shape.clone()).prop_shuffle(),
                vec(0u8..4, r + 1),
                vec(any::<bool>(), r + 2),
                any::<usize>(),
                any::<bool>(),
                Just(x),
            )
        })
        .prop_map(|(dims, plan, copy, infer_at, allowzero, x)| {
            let mut t: Vec<usize> = Vec::new();
            for (i, &d) in dims.iter().enumerate() {
                match plan[i] {
                    1 if !t.is_empty() => *t.last_mut().unwrap() *= d,
                    2 => t.extend([1, d]),
                    _ => t.push(d),
                }
            }
            if plan[dims.len()] == 3 {
                t.push(1);
            }
            // With allowzero = 0 a 0 copies the input dim, so a zero-size target needs it set.
            let allowzero = allowzero || numel(&x.shape) == 0;
            let mut spec: Vec<i64> = t.iter().map(|&d| d as i64).collect();
            for i in 0..spec.len().min(x.rank()) {
                if !allowzero && copy[i] && t[i] == x.shape[i] {
                    spec[i] = 0;
                }
            }
            if !t.is_empty() {
                let j = infer_at % t.len();
                let others: usize = t
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != j)
                    .map(|(_, &d)| d)
                    .product();
                if others != 0 {
                    spec[j] = -1;
                }
            }
            (x, spec, allowzero)
        })
        .boxed()
}

/// Transpose's input and perm (`None`: default, reversed). Half the shapes are rank 3-4 with no
/// size-1 dims, so that the kernel cannot collapse the perm to fewer than three dims.
fn transpose_input() -> BoxedStrategy<(Vals, Option<Vec<i64>>)> {
    let uncollapsible = (3..=MAX_RANK).prop_flat_map(|r| vec(2..=MAX_DIM, r));
    vals(prop_oneof![shape(), uncollapsible].boxed(), Dom::Any)
        .prop_flat_map(|x| {
            let perm: Vec<i64> = (0..x.rank() as i64).collect();
            (
                Just(x),
                proptest::option::weighted(0.8, Just(perm).prop_shuffle()),
            )
        })
        .boxed()
}

/// 1-3 tensors equal in every dim but `axis`.
fn concat_input() -> BoxedStrategy<(Vec<Vals>, i64)> {
    shape_r(1, MAX_RANK)
        .prop_flat_map(|s| (Just(s.clone()), axis_of(s.len()), vec(dim(4), 1..=3)))
        .prop_flat_map(|(s, axis, sizes)| {
            let a = if axis < 0 {
                axis + s.len() as i64
            } else {
                axis
            } as usize;
            let parts: Vec<BoxedStrategy<Vals>> = sizes
                .iter()
                .map(|&d| {
                    let mut p = s.clone();
                    p[a] = d;
                    vals_of(p, Dom::Any)
                })
                .collect();
            (parts, Just(axis))
        })
        .boxed()
}

#[derive(Clone, Debug)]
struct SliceInput {
    x: Vals,
    starts: Vec<i64>,
    ends: Vec<i64>,
    /// `None`: omitted (axes 0, 1, … in order).
    axes: Option<Vec<i64>>,
    /// `None`: omitted (all 1).
    steps: Option<Vec<i64>>,
}

/// A slice bound for a dim of size `d`: in or just outside `-d-2..=d+2`, or an extreme.
fn bound(d: usize) -> BoxedStrategy<i64> {
    let d = d as i64;
    prop_oneof![
        8 => -d - 2..=d + 2,
        1 => select(vec![i64::MIN, i64::MAX, -(1 << 40), 1 << 40]),
    ]
    .boxed()
}

fn slice_input() -> BoxedStrategy<SliceInput> {
    vals(shape_r(1, MAX_RANK), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), axes_subset(r), any::<bool>(), any::<bool>())
        })
        .prop_flat_map(|(x, axes, give_axes, give_steps)| {
            // Without the axes input the axes are 0..k in order.
            let axes: Vec<i64> = if give_axes {
                axes
            } else {
                (0..axes.len() as i64).collect()
            };
            let norm = |a: i64| if a < 0 { a + x.rank() as i64 } else { a } as usize;
            let dims: Vec<usize> = axes.iter().map(|&a| x.shape[norm(a)]).collect();
            let k = axes.len();
            (
                Just(x),
                dims.iter().map(|&d| bound(d)).collect::<Vec<_>>(),
                dims.iter().map(|&d| bound(d)).collect::<Vec<_>>(),
                Just(axes),
                Just(give_axes),
                vec(prop_oneof![-3i64..=-1, 1i64..=3], k),
                Just(give_steps),
            )
        })
        .prop_map(
            |(x, starts, ends, axes, give_axes, steps, give_steps)| SliceInput {
                x,
                starts,
                ends,
                axes: give_axes.then_some(axes),
                steps: give_steps.then_some(steps),
            },
        )
        .boxed()
}

#[derive(Clone, Debug)]
enum SplitMode {
    /// The `split` input.
    Sizes(Vec<i64>),
    /// The `num_outputs` attribute (opset 18).
    NumOutputs(usize),
    /// Neither: equal parts, as many as the node's outputs (opset 13).
    Outputs(usize),
}

fn split_input() -> BoxedStrategy<(Vals, i64, SplitMode)> {
    vals(shape_r(1, MAX_RANK), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), axis_of(r))
        })
        .prop_flat_map(|(x, axis)| {
            let a = if axis < 0 {
                axis + x.rank() as i64
            } else {
                axis
            } as usize;
            let d = x.shape[a];
            let mode = prop_oneof![
                vec(0..=d, 0..=3).prop_map(move |mut cuts| {
                    cuts.push(0);
                    cuts.push(d);
                    cuts.sort_unstable();
                    SplitMode::Sizes(cuts.windows(2).map(|w| (w[1] - w[0]) as i64).collect())
                }),
                (1..=d.max(1)).prop_map(SplitMode::NumOutputs),
                (1..=d.clamp(1, 3)).prop_map(SplitMode::Outputs),
            ];
            (Just(x), Just(axis), mode)
        })
        .boxed()
}

/// Squeeze's input and axes (a shuffled, sometimes negative subset of its size-1 axes).
fn squeeze_input() -> BoxedStrategy<(Vals, Option<Vec<i64>>)> {
    vals(shape_with_ones(0), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            let ones: Vec<usize> = (0..r).filter(|&a| x.shape[a] == 1).collect();
            let n = ones.len();
            (
                Just(x),
                proptest::option::weighted(
                    0.8,
                    (vec(any::<bool>(), n), vec(any::<bool>(), n)).prop_flat_map(
                        move |(keep, neg)| {
                            let axes: Vec<i64> = ones
                                .iter()
                                .enumerate()
                                .filter(|&(i, _)| keep[i])
                                .map(|(i, &a)| {
                                    if neg[i] {
                                        a as i64 - r as i64
                                    } else {
                                        a as i64
                                    }
                                })
                                .collect();
                            Just(axes).prop_shuffle()
                        },
                    ),
                ),
            )
        })
        .boxed()
}

/// Unsqueeze's input and 1-3 new axes of the output rank, shuffled, sometimes negative.
fn unsqueeze_input() -> BoxedStrategy<(Vals, Vec<i64>)> {
    vals(shape_r(0, 3), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), 1..=3usize).prop_flat_map(move |(x, k)| {
                let out = r + k;
                (
                    Just(x),
                    proptest::sample::subsequence((0..out).collect::<Vec<_>>(), k),
                    vec(any::<bool>(), k),
                )
                    .prop_flat_map(move |(x, axes, neg)| {
                        let axes: Vec<i64> = axes
                            .iter()
                            .zip(&neg)
                            .map(|(&a, &n)| if n { a as i64 - out as i64 } else { a as i64 })
                            .collect();
                        (Just(x), Just(axes).prop_shuffle())
                    })
            })
        })
        .boxed()
}

fn flatten_input() -> BoxedStrategy<(Vals, i64)> {
    vals(shape(), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank() as i64;
            (Just(x), -r..=r)
        })
        .boxed()
}

/// Expand's input and a target: extra leading dims, size-1 dims grown (to 0 too), other dims kept
/// or written as 1.
fn expand_input() -> BoxedStrategy<(Vals, Vec<i64>)> {
    vals(shape_with_ones(0), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (
                Just(x),
                vec(1i64..=3, 0..=2),
                vec(prop_oneof![3 => 1i64..=3, 1 => Just(0i64)], r),
                vec(any::<bool>(), r),
            )
        })
        .prop_map(|(x, lead, grow, keep)| {
            let mut target = lead;
            for (a, &d) in x.shape.iter().enumerate() {
                target.push(match (d, keep[a]) {
                    (1, _) => grow[a],
                    (d, true) => d as i64,
                    (_, false) => 1,
                });
            }
            (x, target)
        })
        .boxed()
}

fn tile_input() -> BoxedStrategy<(Vals, Vec<i64>)> {
    vals(shape(), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), vec(prop_oneof![1 => Just(0i64), 6 => 1i64..=3], r))
        })
        .boxed()
}

/// Gather's data, axis, and indices (i64 or i32, any shape of rank 0-2, negative half the time).
fn gather_input() -> BoxedStrategy<(Vals, i64, Tensor)> {
    vals(shape_r(1, MAX_RANK), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), axis_of(r), shape_r(0, 2), any::<bool>())
        })
        .prop_flat_map(|(x, axis, mut ishape, wide)| {
            let a = if axis < 0 {
                axis + x.rank() as i64
            } else {
                axis
            } as usize;
            let d = x.shape[a] as i64;
            if d == 0 {
                ishape = vec![0];
            }
            let n = numel(&ishape);
            let idx = vec(
                if d == 0 {
                    (0..1i64).boxed()
                } else {
                    (-d..d).boxed()
                },
                n,
            )
            .prop_map(move |v| int_t(if wide { DType::I64 } else { DType::I32 }, &ishape, &v));
            (Just(x), Just(axis), idx)
        })
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reshape_all_dtypes((x, spec, allowzero) in reshape_input()) {
        all_dtypes(|dt| {
            Case::new(RESHAPE, vec![x.t(dt), i64s(&spec)])
                .attr(attr_i("allowzero", allowzero as i64))
        })?;
    }

    #[test]
    fn transpose_all_dtypes((x, perm) in transpose_input()) {
        all_dtypes(|dt| {
            Case::new(TRANSPOSE, vec![x.t(dt)])
                .attrs(perm.as_deref().map(|p| attr_ints("perm", p)))
        })?;
    }

    #[test]
    fn concat_all_dtypes((parts, axis) in concat_input()) {
        all_dtypes(|dt| {
            Case::new(CONCAT, parts.iter().map(|p| p.t(dt)).collect()).attr(attr_i("axis", axis))
        })?;
    }

    #[test]
    fn slice_all_dtypes(s in slice_input()) {
        all_dtypes(|dt| {
            Case::new(SLICE, vec![s.x.t(dt), i64s(&s.starts), i64s(&s.ends)])
                .input(s.axes.as_deref().map(i64s))
                .input(s.steps.as_deref().map(i64s))
        })?;
    }

    #[test]
    fn split_all_dtypes((x, axis, mode) in split_input()) {
        all_dtypes(|dt| {
            let case = Case::new(SPLIT, vec![x.t(dt)]).attr(attr_i("axis", axis));
            match &mode {
                SplitMode::Sizes(s) => case.input(Some(i64s(s))).outputs(0..s.len()),
                SplitMode::NumOutputs(n) => {
                    case.attr(attr_i("num_outputs", *n as i64)).outputs(0..*n)
                }
                SplitMode::Outputs(n) => case.opset(13).outputs(0..*n),
            }
        })?;
    }

    #[test]
    fn squeeze_unsqueeze_flatten_all_dtypes(
        (sx, saxes) in squeeze_input(),
        (ux, uaxes) in unsqueeze_input(),
        (fx, faxis) in flatten_input(),
    ) {
        all_dtypes(|dt| Case::new(SQUEEZE, vec![sx.t(dt)]).input(saxes.as_deref().map(i64s)))?;
        all_dtypes(|dt| Case::new(UNSQUEEZE, vec![ux.t(dt), i64s(&uaxes)]))?;
        all_dtypes(|dt| Case::new(FLATTEN, vec![fx.t(dt)]).attr(attr_i("axis", faxis)))?;
    }

    #[test]
    fn expand_tile_all_dtypes((ex, target) in expand_input(), (tx, reps) in tile_input()) {
        all_dtypes(|dt| Case::new(EXPAND, vec![ex.t(dt), i64s(&target)]))?;
        all_dtypes(|dt| Case::new(TILE, vec![tx.t(dt), i64s(&reps)]))?;
    }

    #[test]
    fn gather_all_dtypes((x, axis, idx) in gather_input()) {
        all_dtypes(|dt| {
            Case::new(GATHER, vec![x.t(dt), idx.clone()]).attr(attr_i("axis", axis))
        })?;
    }

    /// Shape (with start/end, opset 15+), Size and Identity of every dtype.
    #[test]
    fn shape_size_identity_all_dtypes(
        x in vals(shape(), Dom::Any),
        start in proptest::option::of(-6i64..=6),
        end in proptest::option::of(-6i64..=6),
    ) {
        all_dtypes(|dt| {
            Case::new(SHAPE, vec![x.t(dt)])
                .attrs(start.map(|s| attr_i("start", s)))
                .attrs(end.map(|e| attr_i("end", e)))
        })?;
        all_dtypes(|dt| Case::new(SIZE, vec![x.t(dt)]))?;
        all_dtypes(|dt| Case::new(IDENTITY, vec![x.t(dt)]))?;
    }

    /// Where with a broadcast condition, for every dtype of x and y.
    #[test]
    fn where_all_dtypes((c, x, y) in bcast3(Dom::Any)) {
        all_dtypes(|dt| Case::new(WHERE, vec![c.t(DType::Bool), x.t(dt), y.t(dt)]))?;
    }
}

// =============================================================================================
// MatMul and Gemm

/// A matmul dim: 0, small, or large enough (up to 33) for gemm's blocked kernels and tails.
fn mm_dim() -> BoxedStrategy<usize> {
    prop_oneof![1 => Just(0usize), 4 => 1usize..=4, 4 => 5usize..=33].boxed()
}

/// MatMul operands: `[batch_a.., m, k] x [batch_b.., k, n]` with broadcast batch dims, either
/// side sometimes 1-D (`[k]`).
fn matmul_input() -> BoxedStrategy<(Vals, Vals)> {
    (
        mm_dim(),
        mm_dim(),
        mm_dim(),
        shape_r(0, 2),
        proptest::bool::weighted(0.15),
        proptest::bool::weighted(0.15),
    )
        .prop_flat_map(|(m, k, n, batch, a_1d, b_1d)| {
            (
                bcast_from(batch.clone()),
                bcast_from(batch),
                Just((m, k, n, a_1d, b_1d)),
            )
        })
        .prop_flat_map(|(ba, bb, (m, k, n, a_1d, b_1d))| {
            let a = if a_1d {
                vec![k]
            } else {
                [ba, vec![m, k]].concat()
            };
            let b = if b_1d {
                vec![k]
            } else {
                [bb, vec![k, n]].concat()
            };
            (vals_of(a, Dom::Unit), vals_of(b, Dom::Unit))
        })
        .boxed()
}

#[derive(Clone, Debug)]
struct GemmInput {
    a: Vals,
    b: Vals,
    c: Option<Vals>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
}

fn gemm_input() -> BoxedStrategy<GemmInput> {
    let coef =
        || prop_oneof![2 => Just(1.0f32), 1 => Just(0.5f32), 1 => Just(-1.5f32), 1 => -2.0f32..2.0];
    (
        mm_dim(),
        mm_dim(),
        mm_dim(),
        any::<bool>(),
        any::<bool>(),
        coef(),
        coef(),
        0..7usize,
    )
        .prop_flat_map(|(m, k, n, trans_a, trans_b, alpha, beta, c_kind)| {
            let a = if trans_a { vec![k, m] } else { vec![m, k] };
            let b = if trans_b { vec![n, k] } else { vec![k, n] };
            let c = match c_kind {
                0 => None,
                1 => Some(vec![]),
                2 => Some(vec![n]),
                3 => Some(vec![1, n]),
                4 => Some(vec![m, 1]),
                5 => Some(vec![1, 1]),
                _ => Some(vec![m, n]),
            };
            (
                vals_of(a, Dom::Unit),
                vals_of(b, Dom::Unit),
                match c {
                    Some(s) => vals_of(s, Dom::Unit).prop_map(Some).boxed(),
                    None => Just(None).boxed(),
                },
                Just((alpha, beta, trans_a, trans_b)),
            )
        })
        .prop_map(|(a, b, c, (alpha, beta, trans_a, trans_b))| GemmInput {
            a,
            b,
            c,
            alpha,
            beta,
            trans_a,
            trans_b,
        })
        .boxed()
}

/// The oracle's op on the absolute values of `inputs` (as f32): the magnitude that bounds the
/// rounding error of a dot product.
fn magnitude(op: &str, inputs: &[Option<&Tensor>], attrs: &[pb::AttributeProto]) -> Vec<f32> {
    let abs: Vec<Option<OTensor>> = inputs
        .iter()
        .map(|t| {
            t.map(|t| {
                OTensor::from_f32(
                    t.shape().to_vec(),
                    t.to_f32_vec().iter().map(|v| v.abs()).collect(),
                )
                .expect("f32 tensor")
            })
        })
        .collect();
    let out = oracles::run_op(op, "", attrs, &abs, 1, OPSET).expect("magnitude of a valid case");
    out[0]
        .as_ref()
        .expect("one output")
        .f32s()
        .expect("f32")
        .to_vec()
}

fn matmul(dtype: DType, a: &Vals, b: &Vals, threads: usize) -> Result<(), TestCaseError> {
    // Integer operands are round(4 v) for v in [-1, 1]: -4..=4 (wrapping is covered by the
    // elementwise tests).
    let (ta, tb) = (a.t(dtype), b.t(dtype));
    let mut case = Case::new(MAT_MUL, vec![ta.clone(), tb.clone()]).threads(threads);
    if dtype.is_float() {
        case = case
            .prec(Prec::Approx)
            .scale(magnitude("MatMul", &[Some(&ta), Some(&tb)], &[]));
    }
    case.check()
}

fn gemm(dtype: DType, g: &GemmInput) -> Result<(), TestCaseError> {
    let (a, b) = (g.a.t(dtype), g.b.t(dtype));
    let c = g.c.as_ref().map(|c| c.t(dtype));
    let attrs = |alpha: f32, beta: f32| {
        vec![
            attr_f("alpha", alpha),
            attr_f("beta", beta),
            attr_i("transA", g.trans_a as i64),
            attr_i("transB", g.trans_b as i64),
        ]
    };
    let scale = magnitude(
        "Gemm",
        &[Some(&a), Some(&b), c.as_ref()],
        &attrs(g.alpha.abs(), g.beta.abs()),
    );
    Case::new(GEMM, vec![a, b])
        .input(c)
        .attrs(attrs(g.alpha, g.beta))
        .opset(13)
        .prec(Prec::Approx)
        .scale(scale)
        .check()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn matmul_f32((a, b) in matmul_input(), threads in 1usize..=2) {
        matmul(DType::F32, &a, &b, threads)?;
    }

    #[test]
    fn matmul_f16((a, b) in matmul_input(), threads in 1usize..=2) {
        matmul(DType::F16, &a, &b, threads)?;
    }

    #[test]
    fn matmul_bf16((a, b) in matmul_input(), threads in 1usize..=2) {
        matmul(DType::BF16, &a, &b, threads)?;
    }

    #[test]
    fn matmul_integer((a, b) in matmul_input()) {
        for dtype in [DType::I64, DType::I32] {
            matmul(dtype, &a, &b, 1)?;
        }
    }

    #[test]
    fn gemm_f32(g in gemm_input()) {
        gemm(DType::F32, &g)?;
    }

    #[test]
    fn gemm_f16(g in gemm_input()) {
        gemm(DType::F16, &g)?;
    }

    #[test]
    fn gemm_bf16(g in gemm_input()) {
        gemm(DType::BF16, &g)?;
    }
}

// =============================================================================================
// Normalisations

#[derive(Clone, Debug)]
struct NormInput {
    x: Vals,
    axis: i64,
    /// Broadcasts to `x.shape[axis..]`.
    scale: Vals,
    bias: Option<Vals>,
    eps: f32,
}

fn norm_input() -> BoxedStrategy<NormInput> {
    vals(shape_r(1, MAX_RANK), Dom::Any)
        .prop_flat_map(|x| {
            let r = x.rank();
            (Just(x), axis_of(r))
        })
        .prop_flat_map(|(x, axis)| {
            let a = if axis < 0 {
                axis + x.rank() as i64
            } else {
                axis
            } as usize;
            let tail = x.shape[a..].to_vec();
            let param = move || {
                bcast_from(tail.clone())
                    .prop_flat_map(|s| vals_of(s, Dom::Any))
                    .prop_map(|v| v.map(|x| x / 3.0))
            };
            (
                Just(x),
                Just(axis),
                param(),
                proptest::option::of(param()),
                select(vec![1e-5f32, 1e-6, 1e-3, 0.5]),
            )
        })
        .prop_map(|(x, axis, scale, bias, eps)| NormInput {
            x,
            axis,
            scale,
            bias,
            eps,
        })
        .boxed()
}

#[derive(Clone, Debug)]
struct SkipNormInput {
    x: Vals,
    /// Broadcasts to `x`'s shape.
    skip: Vals,
    gamma: Vals,
    bias: Option<Vals>,
    eps: f32,
}

fn skip_norm_input() -> BoxedStrategy<SkipNormInput> {
    vals(shape_r(1, 3), Dom::Any)
        .prop_flat_map(|x| {
            let hidden = vec![*x.shape.last().unwrap()];
            (
                bcast_from(x.shape.clone()).prop_flat_map(|s| vals_of(s, Dom::Any)),
                vals_of(hidden.clone(), Dom::Any),
                proptest::option::of(vals_of(hidden, Dom::Any)),
                select(vec![1e-5f32, 1e-6, 0.5]),
                Just(x),
            )
        })
        .prop_map(|(skip, gamma, bias, eps, x)| SkipNormInput {
            x,
            skip,
            gamma,
            bias,
            eps,
        })
        .boxed()
}

/// `tail`-shaped values of a parameter that broadcasts to `tail` (the oracle's Expand).
fn expanded(param: &Tensor, tail: &[usize]) -> Vec<f32> {
    let spec: Vec<i64> = tail.iter().map(|&d| d as i64).collect();
    let out = oracles::run_op(
        "Expand",
        "",
        &[],
        &[Some(to_oracle(param)), Some(to_oracle(&i64s(&spec)))],
        1,
        OPSET,
    )
    .expect("parameter broadcasts to the normalised dims");
    out[0]
        .as_ref()
        .expect("one output")
        .f32s()
        .expect("float")
        .to_vec()
}

/// LayerNormalization's per-element error magnitude `|scale| (|x| + |mean|) / sqrt(var + eps) +
/// |bias|`, from f64 row statistics: the f32 engine's `x - mean` carries an ulp of `|x|` or
/// `|mean|`, amplified by `1 / std`, which is large when a row's spread is below `sqrt(eps)`.
fn layer_norm_magnitude(
    x: &Tensor,
    axis: usize,
    scale: &Tensor,
    bias: Option<&Tensor>,
    eps: f32,
) -> Vec<f32> {
    let tail = &x.shape()[axis..];
    let n = numel(tail);
    let s = expanded(scale, tail);
    let b = bias.map_or(vec![0.0; n], |b| expanded(b, tail));
    let v = x.to_f32_vec();
    let mut out = Vec::with_capacity(v.len());
    for row in v.chunks(n.max(1)) {
        let mean = row.iter().map(|&a| a as f64).sum::<f64>() / n as f64;
        let var = row.iter().map(|&a| (a as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for (j, &a) in row.iter().enumerate() {
            let m = (s[j].abs() as f64) * (a.abs() as f64 + mean.abs()) * inv + b[j].abs() as f64;
            out.push(m as f32);
        }
    }
    out
}

fn norms(dtype: DType, n: &NormInput, s: &SkipNormInput) -> Result<(), TestCaseError> {
    let (x, scale) = (n.x.t(dtype), n.scale.t(dtype));
    let bias = n.bias.as_ref().map(|b| b.t(dtype));
    let attrs = [attr_i("axis", n.axis), attr_f("epsilon", n.eps)];
    let axis = if n.axis < 0 {
        n.axis + n.x.rank() as i64
    } else {
        n.axis
    } as usize;
    Case::new(LAYER_NORMALIZATION, vec![x.clone(), scale.clone()])
        .input(bias.clone())
        .attrs(attrs.clone())
        .opset(17)
        .prec(Prec::Approx)
        .scale(layer_norm_magnitude(&x, axis, &scale, bias.as_ref(), n.eps))
        .check()?;
    for (op, opset) in [
        (SIMPLIFIED_LAYER_NORMALIZATION, 17),
        (MS_SIMPLIFIED_LAYER_NORMALIZATION, 17),
        (RMS_NORMALIZATION, 23),
    ] {
        Case::new(op, vec![x.clone(), scale.clone()])
            .attrs(attrs.clone())
            .opset(opset)
            .prec(Prec::Approx)
            .check()?;
    }
    Case::new(
        MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION,
        vec![s.x.t(dtype), s.skip.t(dtype), s.gamma.t(dtype)],
    )
    .input(s.bias.as_ref().map(|b| b.t(dtype)))
    .attr(attr_f("epsilon", s.eps))
    .outputs([0, 3])
    .prec(Prec::Approx)
    .check()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn norms_f32(n in norm_input(), s in skip_norm_input()) {
        norms(DType::F32, &n, &s)?;
    }

    #[test]
    fn norms_f16(n in norm_input(), s in skip_norm_input()) {
        norms(DType::F16, &n, &s)?;
    }

    #[test]
    fn norms_bf16(n in norm_input(), s in skip_norm_input()) {
        norms(DType::BF16, &n, &s)?;
    }
}

// =============================================================================================
// Generators: Range, ConstantOfShape, Constant, Trilu

/// Float Range: start in [-10, 10], delta ±[0.25, 3], limit up to 20 steps away either side.
fn range_f32() -> BoxedStrategy<(f32, f32, f32)> {
    (
        -10.0f32..10.0,
        prop_oneof![
            0.25f32..3.0,
            -3.0f32..-0.25,
            select(vec![1.0f32, -1.0, 0.5])
        ],
        -5.0f32..20.0,
    )
        .prop_map(|(start, delta, steps)| (start, start + delta * steps, delta))
        .boxed()
}

/// Integer Range: start in -100..100, delta in ±1..5, limit up to 20 steps away either side.
fn range_int() -> BoxedStrategy<(i64, i64, i64)> {
    (
        -100i64..100,
        prop_oneof![1i64..=5, -5i64..=-1],
        -5i64..=20,
        -2i64..=2,
    )
        .prop_map(|(start, delta, steps, off)| (start, start + delta * steps + off, delta))
        .boxed()
}

fn trilu_input() -> BoxedStrategy<(Vals, Option<i64>, bool)> {
    (
        vals(shape_r(2, MAX_RANK), Dom::Any),
        proptest::option::of(-7i64..=7),
        any::<bool>(),
    )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// Range in f32, i64 and i32 (ONNX's types) and in f16 / bf16 (the engine's too; it rounds
    /// f64 values straight to f16, the oracle through f32, so one ulp apart at worst).
    #[test]
    fn range_all_numeric_dtypes((fs, fl, fd) in range_f32(), (is, il, id) in range_int()) {
        for dtype in FLOATS {
            let s = |v: f32| float_t(dtype, &[], &[v]);
            let prec = if dtype == DType::F32 { Prec::Exact } else { Prec::Close };
            Case::new(RANGE, vec![s(fs), s(fl), s(fd)]).prec(prec).check()?;
        }
        for dtype in [DType::I64, DType::I32] {
            let s = |v: i64| int_t(dtype, &[], &[v]);
            Case::new(RANGE, vec![s(is), s(il), s(id)]).check()?;
        }
    }

    /// ConstantOfShape with the default value and a one-element value of every dtype.
    #[test]
    fn constant_of_shape_all_dtypes(dims in vec(dim(4), 0..=3), v in elem(Dom::Any)) {
        let spec: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        Case::new(CONSTANT_OF_SHAPE, vec![i64s(&spec)]).check()?;
        all_dtypes(|dt| {
            Case::new(CONSTANT_OF_SHAPE, vec![i64s(&spec)])
                .attr(attr_t("value", &any_t(dt, &[1], &[v])))
        })?;
    }

    /// Constant from a `value` tensor of every dtype and from value_float(s) / value_int(s).
    #[test]
    fn constant_all_forms(x in vals(shape(), Dom::Any), ints in vec(int_elem(), 0..=5)) {
        all_dtypes(|dt| Case::new(CONSTANT, vec![]).attr(attr_t("value", &x.t(dt))))?;
        let first = x.v.first().copied().unwrap_or(0.5);
        Case::new(CONSTANT, vec![]).attr(attr_f("value_float", first)).check()?;
        Case::new(CONSTANT, vec![]).attr(attr_floats("value_floats", &x.v)).check()?;
        let first_int = ints.first().copied().unwrap_or(7);
        Case::new(CONSTANT, vec![]).attr(attr_i("value_int", first_int)).check()?;
        Case::new(CONSTANT, vec![]).attr(attr_ints("value_ints", &ints)).check()?;
    }

    #[test]
    fn trilu_all_dtypes((x, k, upper) in trilu_input()) {
        all_dtypes(|dt| {
            Case::new(TRILU, vec![x.t(dt)])
                .input(k.map(Tensor::scalar_i64))
                .attr(attr_i("upper", upper as i64))
                .opset(14)
        })?;
    }
}

// =============================================================================================
// Coverage, unsupported dtypes, and pinned disagreements

// Every (domain, op_type) the properties above run, each as the constant its cases are built
// from (`Case::new(ADD, …)`): `covered_ops!` makes one `#[deny(dead_code)]` constant per entry
// and `COVERED` from the same list, so an entry that no case uses does not compile, and
// `every_supported_op_has_a_property` compares the list with the engine's registry: a new op
// fails there until it has a property.
covered_ops! {
    // unary_*: float ops; unary_integer_and_bool: Abs Neg Sign Relu Identity Not.
    ABS = ("", "Abs"),
    NEG = ("", "Neg"),
    FLOOR = ("", "Floor"),
    CEIL = ("", "Ceil"),
    ROUND = ("", "Round"),
    SIGN = ("", "Sign"),
    RELU = ("", "Relu"),
    RECIPROCAL = ("", "Reciprocal"),
    IDENTITY = ("", "Identity"),
    DROPOUT = ("", "Dropout"),
    IS_NAN = ("", "IsNaN"),
    EXP = ("", "Exp"),
    SIGMOID = ("", "Sigmoid"),
    TANH = ("", "Tanh"),
    COS = ("", "Cos"),
    SIN = ("", "Sin"),
    ERF = ("", "Erf"),
    SOFTPLUS = ("", "Softplus"),
    HARD_SWISH = ("", "HardSwish"),
    SQRT = ("", "Sqrt"),
    LOG = ("", "Log"),
    LEAKY_RELU = ("", "LeakyRelu"),
    ELU = ("", "Elu"),
    HARD_SIGMOID = ("", "HardSigmoid"),
    GELU = ("", "Gelu"),
    NOT = ("", "Not"),
    // binary_*, where_all_dtypes.
    ADD = ("", "Add"),
    SUB = ("", "Sub"),
    MUL = ("", "Mul"),
    DIV = ("", "Div"),
    POW = ("", "Pow"),
    MOD = ("", "Mod"),
    MAX = ("", "Max"),
    MIN = ("", "Min"),
    SUM = ("", "Sum"),
    MEAN = ("", "Mean"),
    EQUAL = ("", "Equal"),
    LESS = ("", "Less"),
    LESS_OR_EQUAL = ("", "LessOrEqual"),
    GREATER = ("", "Greater"),
    GREATER_OR_EQUAL = ("", "GreaterOrEqual"),
    AND = ("", "And"),
    OR = ("", "Or"),
    XOR = ("", "Xor"),
    WHERE = ("", "Where"),
    // cast_all_dtype_pairs, clip_all_dtypes.
    CAST = ("", "Cast"),
    CAST_LIKE = ("", "CastLike"),
    CLIP = ("", "Clip"),
    // reduce_*, arg_max_min_all_numeric_dtypes, softmax_*.
    REDUCE_SUM = ("", "ReduceSum"),
    REDUCE_MEAN = ("", "ReduceMean"),
    REDUCE_MAX = ("", "ReduceMax"),
    REDUCE_MIN = ("", "ReduceMin"),
    REDUCE_PROD = ("", "ReduceProd"),
    REDUCE_SUM_SQUARE = ("", "ReduceSumSquare"),
    REDUCE_L1 = ("", "ReduceL1"),
    REDUCE_L2 = ("", "ReduceL2"),
    REDUCE_LOG_SUM_EXP = ("", "ReduceLogSumExp"),
    ARG_MAX = ("", "ArgMax"),
    ARG_MIN = ("", "ArgMin"),
    SOFTMAX = ("", "Softmax"),
    LOG_SOFTMAX = ("", "LogSoftmax"),
    // Layout.
    RESHAPE = ("", "Reshape"),
    TRANSPOSE = ("", "Transpose"),
    CONCAT = ("", "Concat"),
    SLICE = ("", "Slice"),
    SPLIT = ("", "Split"),
    SQUEEZE = ("", "Squeeze"),
    UNSQUEEZE = ("", "Unsqueeze"),
    FLATTEN = ("", "Flatten"),
    EXPAND = ("", "Expand"),
    TILE = ("", "Tile"),
    GATHER = ("", "Gather"),
    SHAPE = ("", "Shape"),
    SIZE = ("", "Size"),
    // MatMul / Gemm.
    MAT_MUL = ("", "MatMul"),
    GEMM = ("", "Gemm"),
    // Normalisations.
    LAYER_NORMALIZATION = ("", "LayerNormalization"),
    SIMPLIFIED_LAYER_NORMALIZATION = ("", "SimplifiedLayerNormalization"),
    RMS_NORMALIZATION = ("", "RMSNormalization"),
    MS_SIMPLIFIED_LAYER_NORMALIZATION = ("com.microsoft", "SimplifiedLayerNormalization"),
    MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION = ("com.microsoft", "SkipSimplifiedLayerNormalization"),
    // Generators.
    RANGE = ("", "Range"),
    CONSTANT_OF_SHAPE = ("", "ConstantOfShape"),
    CONSTANT = ("", "Constant"),
    TRILU = ("", "Trilu"),
}

#[test]
fn every_supported_op_has_a_property() {
    let registry: BTreeSet<_> = REGISTRY.iter().map(|e| (e.domain, e.op_type)).collect();
    let covered: BTreeSet<_> = COVERED.iter().copied().collect();
    let missing: Vec<_> = registry.difference(&covered).collect();
    let stale: Vec<_> = covered.difference(&registry).collect();
    assert!(
        missing.is_empty(),
        "ops in the engine's registry without a property: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "ops covered here but not in the engine's registry: {stale:?}"
    );
}

/// The tiers themselves: NaN matches NaN, EXACT is bitwise (sign of zero too), the relative
/// and absolute parts and the scale widen the band as documented.
#[test]
fn tiers_accept_and_reject_as_documented() {
    assert!(EXACT.accepts(f32::NAN, -f32::NAN, 0.0));
    assert!(!EXACT.accepts(f32::NAN, 1.0, 0.0));
    assert!(!EXACT.accepts(0.0, -0.0, 0.0));
    assert!(!EXACT.accepts(1.0, 1.0 + f32::EPSILON, 0.0));
    assert!(F32_CLOSE.accepts(1.0, 1.0 + 8.0 * f32::EPSILON, 0.0));
    assert!(!F32_CLOSE.accepts(1.0, 1.0 + 1e-5, 0.0));
    assert!(!F32_CLOSE.accepts(f32::INFINITY, f32::MAX, 0.0));
    assert!(F32_APPROX.accepts(1e-3, 1e-3 + 5e-7, 0.0));
    assert!(!F32_APPROX.accepts(0.0, 1e-4, 0.0));
    assert!(
        F32_APPROX.accepts(0.0, 1e-4, 20.0),
        "the scale widens the band"
    );
    // One f16 ulp at the top of a binade passes, two do not.
    let (w, up1, up2) = (2047.0f32 / 1024.0, 2.0f32, 2.0 + 2.0 / 1024.0);
    assert!(F16.accepts(up1, w, 0.0));
    assert!(!F16.accepts(up2, w, 0.0));
    assert!(BF16.accepts(1.0 + 1.0 / 128.0, 1.0, 0.0));
    assert!(!BF16.accepts(1.0 + 3.0 / 128.0, 1.0, 0.0));
    assert!(F16_APPROX.accepts(9e-4, 0.0, 0.0) && !F16_APPROX.accepts(2e-3, 0.0, 0.0));
    assert!(BF16_APPROX.accepts(7e-3, 0.0, 0.0) && !BF16_APPROX.accepts(1.6e-2, 0.0, 0.0));
}

/// The comparison reports op, index, both values and the tier.
#[test]
fn a_disagreement_names_op_index_values_and_tier() {
    let case = Case::new(ADD, vec![float_t(DType::F32, &[2], &[1.0, 2.0])]);
    let want = OTensor::from_f32(vec![2], vec![1.0, 2.5]).unwrap();
    let got = float_t(DType::F32, &[2], &[1.0, 2.0]);
    let msg = case.compare(0, &got, &want).unwrap_err();
    assert!(
        msg.contains("index 1 [1]: engine 2e0, oracle 2.5e0"),
        "{msg}"
    );
    assert!(msg.contains("tier EXACT"), "{msg}");
}

/// ONNX allows these (op, dtype) pairs but the engine (and the oracle) reject them; pinned here
/// so that support shows up as a failure to update, not silently.
#[test]
fn onnx_allowed_dtypes_the_engine_rejects() {
    let x = int_t(DType::I64, &[2], &[3, -4]);
    for (op, opset, want) in [
        // ReduceL2-18 / ReduceLogSumExp-18: T includes int32, int64, uint32, uint64.
        (REDUCE_L2, 18, "ReduceL2: unsupported dtype i64"),
        (
            REDUCE_LOG_SUM_EXP,
            18,
            "ReduceLogSumExp: unsupported dtype i64",
        ),
        // Erf-13: T includes every integer type.
        (ERF, 13, "Erf: unsupported dtype i64"),
    ] {
        let case = Case::new(op, vec![x.clone()]).opset(opset);
        let err = case.run_engine().expect_err(op.op_type).to_string();
        assert!(err.contains(want), "{op}: {err}");
        assert!(
            case.run_oracle().is_err(),
            "{op}: the oracle rejects it too"
        );
    }
    // Gemm-13: T includes int32, int64; the engine runs it, the oracle does not.
    let a = int_t(DType::I64, &[1, 2], &[1, 2]);
    let b = int_t(DType::I64, &[2, 1], &[3, 4]);
    let case = Case::new(GEMM, vec![a, b]).opset(13);
    let got = case.run_engine().expect("engine integer Gemm");
    assert_eq!(got[0].to_i64_vec().unwrap(), [11]);
    let err = case
        .run_oracle()
        .expect_err("oracle integer Gemm")
        .to_string();
    assert!(err.contains("float inputs only"), "{err}");
}

/// Division by zero in integers is an error in both (ONNX leaves it undefined).
#[test]
fn integer_division_by_zero_is_an_error_in_both() {
    for op in [DIV, MOD] {
        let case = Case::new(
            op,
            vec![
                int_t(DType::I64, &[2], &[7, 8]),
                int_t(DType::I64, &[2], &[2, 0]),
            ],
        );
        let err = case.run_engine().expect_err(op.op_type).to_string();
        assert!(err.contains("division by zero"), "{err}");
        assert!(case.run_oracle().is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// Disagreements found by the properties above, pinned at the oracle's answer. Three were engine
// bugs, now fixed (rank-0 reductions, ArgMax/ArgMin and Range on large integers) and their tests
// run normally. Two remain `#[ignore]`d, each with its reason: integer ReduceMean overflow (the
// oracle wraps the sum; the engine follows the ONNX reference, so the oracle is to change) and
// norms of rows above 1.8e19 (f32 intermediates overflow in the engine's LayerNormalization
// decomposition). The properties do not generate those inputs (u8 sums, rows above 1e19).

/// ReduceSumSquare / ReduceL1 / ReduceL2 of a rank-0 tensor over all axes (axes omitted,
/// noop_with_empty_axes = 0) must square / take the absolute value (numpy `sum(square(x))` of
/// a scalar); the engine's backend returns the input unchanged when the axis list is empty.
#[test]
fn pinned_reduce_of_a_scalar_applies_square_and_abs() {
    let mut failures = Vec::new();
    for dtype in [DType::F32, DType::I64] {
        for op in [REDUCE_SUM_SQUARE, REDUCE_L1, REDUCE_L2] {
            if dtype == DType::I64 && op == REDUCE_L2 {
                continue;
            }
            let x = any_t(dtype, &[], &[-1.5]);
            if let Err(e) = Case::new(op, vec![x]).check() {
                failures.push(e.to_string());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Integer ReduceMean whose sum overflows the element type: the oracle wraps the sum into the
/// type before dividing (its comment: "as integer ReduceMean in onnxruntime"); the engine sums
/// in i64 and divides first (as the ONNX reference's `np.mean(..).astype(dtype)`). For i32
/// [MAX, MAX] the engine gives MAX, the oracle -1; for u8 (not an ONNX ReduceMean type)
/// [200, 100] the engine gives 150, the oracle 22.
#[test]
#[ignore = "engine and oracle disagree on integer ReduceMean when the sum overflows"]
fn pinned_integer_reduce_mean_wraps_the_sum_in_the_oracle_only() {
    let mut failures = Vec::new();
    for (dtype, v) in [
        (DType::I32, [i32::MAX as i64, i32::MAX as i64]),
        (DType::U8, [200, 100]),
    ] {
        if let Err(e) = Case::new(REDUCE_MEAN, vec![int_t(dtype, &[2], &v)]).check() {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// ArgMax / ArgMin compare integers exactly in the oracle; the engine converts i64 to f64 and
/// i32 to f32 first, so neighbours above 2^53 (i64) or 2^24 (i32) tie and the first index wins.
#[test]
fn pinned_arg_max_of_large_integers_is_exact() {
    let mut failures = Vec::new();
    for (dtype, base) in [(DType::I64, 1i64 << 53), (DType::I32, 1i64 << 24)] {
        for (op, v) in [(ARG_MAX, [base, base + 1]), (ARG_MIN, [base + 1, base])] {
            if let Err(e) = Case::new(op, vec![int_t(dtype, &[2], &v)]).check() {
                failures.push(e.to_string());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Integer Range is exact in the oracle (i128 step count, i64 values); the engine reads start,
/// limit and delta as f64, so values above 2^53 are rounded: `Range(2^53 + 1, 2^53 + 4, 1)` is
/// `[2^53 + 1, 2^53 + 2, 2^53 + 3]` in the oracle and 4 values from 2^53 in the engine.
#[test]
fn pinned_integer_range_is_exact_above_2_pow_53() {
    let s = |v: i64| Tensor::scalar_i64(v);
    let base = 1i64 << 53;
    Case::new(RANGE, vec![s(base + 1), s(base + 4), s(1)])
        .check()
        .unwrap();
}

/// Normalising rows whose squares overflow f32 (|x| above ~1.8e19): the oracle works in f64 and
/// gives `x / rms(x) * scale` (here `[1, -1] * scale`); the engine rounds the mean square (RMS
/// norms) or forms `d * d` (LayerNormalization) in f32, gets inf, and outputs zeros.
#[test]
#[ignore = "engine disagrees with the oracle: norms of rows with |x| > 1.8e19 give 0"]
fn pinned_norms_of_huge_rows_do_not_overflow() {
    let x = float_t(DType::F32, &[2], &[1e20, -1e20]);
    let scale = float_t(DType::F32, &[2], &[2.0, 3.0]);
    let mut failures = Vec::new();
    for op in [RMS_NORMALIZATION, LAYER_NORMALIZATION] {
        let case = Case::new(op, vec![x.clone(), scale.clone()])
            .opset(23)
            .prec(Prec::Approx);
        if let Err(e) = case.check() {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
