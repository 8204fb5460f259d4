//! Shared helpers for the ONNX-level op tests: a tiny `ModelProto` builder that runs graphs
//! through [`Executor`] on the CPU backend, tensor constructors, typed expectations with named
//! tolerance tiers, and f64 reference formulas for functions `std` lacks (erf).

#![allow(dead_code)]

use std::path::Path;

use engine::exec::{ExecOptions, Executor};
use engine::onnx::{Model, tensor_to_proto};
use engine::{CpuBackend, DType, Data, Result, Tensor};
use half::{bf16, f16};
use onnx_pb as pb;

/// Exact arithmetic (integer-valued sums and products, copies, casts of representable values):
/// results must be equal (up to the sign of zero).
pub const EXACT: f32 = 0.0;
/// f32 transcendental functions and normalisations, relative to `max(1, |want|)`: ~8 ulps.
pub const F32_TOL: f32 = 1e-6;
/// f16 results: 11 significant bits, one rounding is at most 2^-11 ≈ 4.9e-4 relative; a
/// composite op rounds a few times.
pub const F16_TOL: f32 = 2e-3;
/// bf16 results: 8 significant bits, one rounding is at most 2^-8 ≈ 3.9e-3 relative.
pub const BF16_TOL: f32 = 1.6e-2;

/// Default-domain opset most tests use.
pub const OPSET: i64 = 17;

/// The path models are "loaded" from (only names errors; nothing is read).
const MODEL_PATH: &str = "onnx_ops_test.onnx";

/// Compares element by element: `|got - want| <= tol * max(1, |want|)`; NaN matches NaN and
/// infinities must match exactly. Reports the first bad index with both values.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "got {} values, want {}: got {got:?}, want {want:?}",
        got.len(),
        want.len()
    );
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * w.abs().max(1.0)
        };
        assert!(
            ok,
            "index {i}: got {g}, want {w} (tolerance {tol})\n  got:  {got:?}\n  want: {want:?}"
        );
    }
}

/// `n` deterministic values in `[lo, hi)` (an LCG, the same on every machine).
pub fn rand_vals(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tensors

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::f32(shape, v.to_vec()).expect("f32 tensor")
}

pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::i64(shape, v.to_vec()).expect("i64 tensor")
}

pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), Data::I32(v.to_vec())).expect("i32 tensor")
}

pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::new(shape.to_vec(), Data::Bool(v.to_vec())).expect("bool tensor")
}

/// An f16 tensor of the nearest f16 values of `v`.
pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(
        shape.to_vec(),
        Data::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
    )
    .expect("f16 tensor")
}

/// A bf16 tensor of the nearest bf16 values of `v`.
pub fn bf16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(
        shape.to_vec(),
        Data::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
    )
    .expect("bf16 tensor")
}

/// A float tensor of `dtype` (f32, f16 or bf16).
pub fn float_t(dtype: DType, shape: &[usize], v: &[f32]) -> Tensor {
    match dtype {
        DType::F32 => f32t(shape, v),
        DType::F16 => f16t(shape, v),
        DType::BF16 => bf16t(shape, v),
        other => panic!("float_t: {other} is not a float type"),
    }
}

pub fn sf32(v: f32) -> Tensor {
    f32t(&[], &[v])
}

pub fn si64(v: i64) -> Tensor {
    Tensor::scalar_i64(v)
}

/// `0, 1, 2, …` as f32 in `shape`.
pub fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    f32t(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
}

// ---------------------------------------------------------------------------------------------
// Expectations

#[track_caller]
pub fn expect_f32(t: &Tensor, shape: &[usize], want: &[f32], tol: f32) {
    expect_float(t, DType::F32, shape, want, tol);
}

/// Checks dtype and shape, then compares the values (converted to f32) with [`assert_close`].
#[track_caller]
pub fn expect_float(t: &Tensor, dtype: DType, shape: &[usize], want: &[f32], tol: f32) {
    assert_eq!(t.dtype(), dtype, "dtype of {t:?}");
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    assert_close(&t.to_f32_vec(), want, tol);
}

#[track_caller]
pub fn expect_i64(t: &Tensor, shape: &[usize], want: &[i64]) {
    assert_eq!(t.dtype(), DType::I64, "dtype of {t:?}");
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    assert_eq!(t.as_i64().expect("i64 data"), want);
}

#[track_caller]
pub fn expect_i32(t: &Tensor, shape: &[usize], want: &[i32]) {
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    match t.data() {
        Data::I32(v) => assert_eq!(v, want),
        other => panic!("expected i32 data, got {}", other.dtype()),
    }
}

#[track_caller]
pub fn expect_bool(t: &Tensor, shape: &[usize], want: &[bool]) {
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    match t.data() {
        Data::Bool(v) => assert_eq!(v, want),
        other => panic!("expected bool data, got {}", other.dtype()),
    }
}

// ---------------------------------------------------------------------------------------------
// Attributes

fn attr(name: &str, ty: pb::attribute_proto::AttributeType) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

pub fn attr_i(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        i: Some(v),
        ..attr(name, pb::attribute_proto::AttributeType::Int)
    }
}

pub fn attr_f(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        f: Some(v),
        ..attr(name, pb::attribute_proto::AttributeType::Float)
    }
}

pub fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        ints: v.to_vec(),
        ..attr(name, pb::attribute_proto::AttributeType::Ints)
    }
}

pub fn attr_floats(name: &str, v: &[f32]) -> pb::AttributeProto {
    pb::AttributeProto {
        floats: v.to_vec(),
        ..attr(name, pb::attribute_proto::AttributeType::Floats)
    }
}

pub fn attr_s(name: &str, v: &str) -> pb::AttributeProto {
    pb::AttributeProto {
        s: Some(v.as_bytes().to_vec()),
        ..attr(name, pb::attribute_proto::AttributeType::String)
    }
}

pub fn attr_t(name: &str, t: &Tensor) -> pb::AttributeProto {
    pb::AttributeProto {
        t: Some(tensor_to_proto(name, t)),
        ..attr(name, pb::attribute_proto::AttributeType::Tensor)
    }
}

// ---------------------------------------------------------------------------------------------
// Graphs

/// A graph input declared with the tensor's type and fixed shape, or (no tensor) a bare name.
fn value_info(name: &str, t: Option<&Tensor>) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value};
    let r#type = t.map(|t| pb::TypeProto {
        value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
            elem_type: Some(t.dtype().to_onnx()),
            shape: Some(pb::TensorShapeProto {
                dim: t
                    .shape()
                    .iter()
                    .map(|&d| Dimension {
                        value: Some(Value::DimValue(d as i64)),
                        ..Default::default()
                    })
                    .collect(),
            }),
        })),
        ..Default::default()
    });
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type,
        ..Default::default()
    }
}

/// A hand-assembled ONNX graph plus the values to feed its inputs.
pub struct Graph {
    opset: i64,
    nodes: Vec<pb::NodeProto>,
    inputs: Vec<pb::ValueInfoProto>,
    initializers: Vec<pb::TensorProto>,
    outputs: Vec<pb::ValueInfoProto>,
    feeds: Vec<(String, Tensor)>,
}

impl Graph {
    pub fn new(opset: i64) -> Graph {
        Graph {
            opset,
            nodes: Vec::new(),
            inputs: Vec::new(),
            initializers: Vec::new(),
            outputs: Vec::new(),
            feeds: Vec::new(),
        }
    }

    /// A graph input (declared as a `ValueInfoProto`) fed with `t` at run time.
    pub fn feed(&mut self, name: &str, t: Tensor) -> &mut Graph {
        self.inputs.push(value_info(name, Some(&t)));
        self.feeds.push((name.to_string(), t));
        self
    }

    /// An initializer (constant-folded by the executor).
    pub fn init(&mut self, name: &str, t: &Tensor) -> &mut Graph {
        self.initializers.push(tensor_to_proto(name, t));
        self
    }

    /// A node; empty names in `inputs`/`outputs` mark omitted optional ports.
    pub fn node(
        &mut self,
        name: &str,
        op_type: &str,
        domain: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<pb::AttributeProto>,
    ) -> &mut Graph {
        self.nodes.push(pb::NodeProto {
            name: Some(name.into()),
            op_type: Some(op_type.into()),
            domain: Some(domain.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
        self
    }

    pub fn output(&mut self, name: &str) -> &mut Graph {
        self.outputs.push(value_info(name, None));
        self
    }

    pub fn proto(&self) -> pb::ModelProto {
        let opset = |domain: &str, version: i64| pb::OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(version),
        };
        pb::ModelProto {
            ir_version: Some(8),
            producer_name: Some("onnx_ops test".into()),
            opset_import: vec![opset("", self.opset), opset("com.microsoft", 1)],
            graph: Some(pb::GraphProto {
                name: Some("test".into()),
                node: self.nodes.clone(),
                initializer: self.initializers.clone(),
                input: self.inputs.clone(),
                output: self.outputs.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Steps of the CPU executor's plan after folding and fusion.
    #[allow(dead_code)]
    pub fn plan_steps(&self) -> Result<usize> {
        let model = Model::from_proto(self.proto(), Path::new(MODEL_PATH))?;
        Ok(Executor::new(&model, CpuBackend::new(1)?)?.num_steps())
    }

    /// Runs the graph on one CPU thread with `feeds` given as they are (order, extras, gaps):
    /// what `Executor::run` makes of its caller's input list.
    #[allow(dead_code)]
    pub fn run_feeds(&self, feeds: &[(&str, Tensor)]) -> Result<Vec<Tensor>> {
        let model = Model::from_proto(self.proto(), Path::new(MODEL_PATH))?;
        Executor::new(&model, CpuBackend::new(1)?)?.run(feeds)
    }

    /// Loads, plans (parse + constant folding + fusion) and runs the graph on
    /// `CpuBackend::new(threads)`; returns the graph outputs in declaration order. With
    /// `ENGINE_TEST_BACKEND=cuda` (a build with `--features cuda`) it runs on the GPU's
    /// `CudaBackend` instead, so the differential suite checks every op × dtype on CUDA against
    /// the oracle; no GPU is then an error, never a skip.
    pub fn run(&self, threads: usize) -> Result<Vec<Tensor>> {
        Ok(self.run_options(threads, ExecOptions::default())?.outputs)
    }

    /// [`Graph::run`] with the plan built under `options`; also says what the plan was.
    pub fn run_options(&self, threads: usize, options: ExecOptions) -> Result<Ran> {
        let model = Model::from_proto(self.proto(), Path::new(MODEL_PATH))?;
        let feeds: Vec<(&str, Tensor)> = self
            .feeds
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        if std::env::var("ENGINE_TEST_BACKEND").is_ok_and(|v| v == "cuda") {
            #[cfg(feature = "cuda")]
            {
                use engine::backend::Backend;
                let cuda = engine::backend::cuda::CudaBackend::new()?;
                let exec = Executor::with_options(&model, cuda, options)?;
                let be = exec.backend();
                let up = feeds
                    .iter()
                    .map(|(n, t)| Ok((*n, be.upload(t)?)))
                    .collect::<Result<Vec<_>>>()?;
                let before = be.fused_kernels();
                let outputs = exec
                    .run(&up)?
                    .iter()
                    .map(|t| be.download(t))
                    .collect::<Result<_>>()?;
                return Ok(Ran {
                    outputs,
                    steps: exec.num_steps(),
                    fused_kernels: be.fused_kernels() - before,
                });
            }
            #[cfg(not(feature = "cuda"))]
            return Err(engine::Error::msg(
                "ENGINE_TEST_BACKEND=cuda needs a build with --features cuda",
            ));
        }
        let exec = Executor::with_options(&model, CpuBackend::new(threads)?, options)?;
        Ok(Ran {
            outputs: exec.run(&feeds)?,
            steps: exec.num_steps(),
            fused_kernels: 0,
        })
    }
}

/// What [`Graph::run_options`] ran.
pub struct Ran {
    pub outputs: Vec<Tensor>,
    /// Steps of the plan after folding and fusion.
    #[allow(dead_code)]
    pub steps: usize,
    /// Fused steps the backend ran as one kernel (always 0 on the CPU, which has none).
    #[allow(dead_code)]
    pub fused_kernels: u64,
}

/// One node input.
pub enum Arg {
    /// A graph input, fed at run time.
    Feed(Tensor),
    /// An initializer (constant-folded).
    Init(Tensor),
    /// An omitted optional input (empty name).
    Skip,
}

pub fn feed(t: Tensor) -> Arg {
    Arg::Feed(t)
}

pub fn init(t: Tensor) -> Arg {
    Arg::Init(t)
}

/// The name single-node graphs give their node (errors name it).
pub fn node_name(op_type: &str) -> String {
    format!("test/{op_type}")
}

/// Builds a one-node model (inputs `in0, in1, …`, outputs `out0, out1, …`, all graph outputs)
/// and runs it on one CPU thread.
pub fn run_node(
    op_type: &str,
    domain: &str,
    args: Vec<Arg>,
    attrs: Vec<pb::AttributeProto>,
    n_outputs: usize,
    opset: i64,
) -> Result<Vec<Tensor>> {
    run_node_threads(1, op_type, domain, args, attrs, n_outputs, opset)
}

/// [`run_node`] on a CPU backend with `threads` workers.
pub fn run_node_threads(
    threads: usize,
    op_type: &str,
    domain: &str,
    args: Vec<Arg>,
    attrs: Vec<pb::AttributeProto>,
    n_outputs: usize,
    opset: i64,
) -> Result<Vec<Tensor>> {
    let mut g = Graph::new(opset);
    let mut names = Vec::with_capacity(args.len());
    for (i, a) in args.into_iter().enumerate() {
        let name = format!("in{i}");
        match a {
            Arg::Feed(t) => {
                g.feed(&name, t);
                names.push(name);
            }
            Arg::Init(t) => {
                g.init(&name, &t);
                names.push(name);
            }
            Arg::Skip => names.push(String::new()),
        }
    }
    let outs: Vec<String> = (0..n_outputs).map(|i| format!("out{i}")).collect();
    let ins: Vec<&str> = names.iter().map(String::as_str).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    g.node(&node_name(op_type), op_type, domain, &ins, &out_refs, attrs);
    for o in &outs {
        g.output(o);
    }
    g.run(threads)
}

/// One default-domain node, one output, opset [`OPSET`]; panics with the op name on error.
#[track_caller]
pub fn run1(op_type: &str, args: Vec<Arg>, attrs: Vec<pb::AttributeProto>) -> Tensor {
    run1_opset(op_type, args, attrs, OPSET)
}

#[track_caller]
pub fn run1_opset(
    op_type: &str,
    args: Vec<Arg>,
    attrs: Vec<pb::AttributeProto>,
    opset: i64,
) -> Tensor {
    let mut out =
        run_node(op_type, "", args, attrs, 1, opset).unwrap_or_else(|e| panic!("{op_type}: {e}"));
    assert_eq!(out.len(), 1);
    out.remove(0)
}

/// The error of running a one-output default-domain node (panics if it succeeds).
#[track_caller]
pub fn run1_err(op_type: &str, args: Vec<Arg>, attrs: Vec<pb::AttributeProto>) -> String {
    match run_node(op_type, "", args, attrs, 1, OPSET) {
        Ok(out) => panic!("{op_type}: expected an error, got {out:?}"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// References

/// erf by its Maclaurin series `2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))`, in f64. For
/// |x| <= 3 the largest term is ~170, so cancellation costs under 3 of f64's ~16 digits, and the
/// terms are below 1e-20 by n = 80.
pub fn erf_f64(x: f64) -> f64 {
    assert!(x.abs() <= 3.0, "erf_f64 is only accurate for |x| <= 3");
    let mut term = x; // (-1)^n x^(2n+1) / n!
    let mut sum = x;
    for n in 1..80 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * std::f64::consts::FRAC_2_SQRT_PI
}

/// Row-major `[m, k] x [k, n]` by the schoolbook triple loop, accumulating in f64.
pub fn naive_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for p in 0..k {
                acc += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
            out[i * n + j] = acc as f32;
        }
    }
    out
}

/// Small integer-valued test data in -`span`..=`span` (exact in every float type and sum).
pub fn small_ints(n: usize, seed: usize, span: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13 + 3) % (2 * span + 1)) as f32 - span as f32)
        .collect()
}
