//! ONNX-level tests of every operator in `engine::ops::SUPPORTED`: each test builds a tiny
//! `ModelProto` (usually one node), runs it through `Executor` on the CPU backend and compares
//! with values worked out by hand in the comments, or, for transcendental functions, with an f64
//! formula in this file, never with the engine's own kernels.

mod common;

use std::collections::BTreeSet;
use std::f64::consts::{LN_2, PI};

use common::*;
use engine::ops::SUPPORTED;
use engine::{DType, Data, Error, Tensor};

/// Every (domain, op_type) these tests cover; must equal `SUPPORTED`, so a new op fails here
/// until it has a test.
#[rustfmt::skip]
const COVERED: &[(&str, &str)] = &[
    ("", "Abs"), ("", "Add"), ("", "And"), ("", "ArgMax"), ("", "ArgMin"), ("", "Cast"),
    ("", "CastLike"), ("", "Ceil"), ("", "Clip"), ("", "Concat"), ("", "Constant"),
    ("", "ConstantOfShape"), ("", "Cos"), ("", "Div"), ("", "Dropout"), ("", "Elu"),
    ("", "Equal"), ("", "Erf"), ("", "Exp"), ("", "Expand"), ("", "Flatten"), ("", "Floor"),
    ("", "Gather"), ("", "Gelu"), ("", "Gemm"), ("", "Greater"), ("", "GreaterOrEqual"),
    ("", "HardSigmoid"), ("", "HardSwish"), ("", "Identity"), ("", "IsNaN"),
    ("", "LayerNormalization"), ("", "LeakyRelu"), ("", "Less"), ("", "LessOrEqual"),
    ("", "Log"), ("", "LogSoftmax"), ("", "MatMul"), ("", "Max"), ("", "Mean"), ("", "Min"),
    ("", "Mod"), ("", "Mul"), ("", "Neg"), ("", "Not"), ("", "Or"), ("", "Pow"),
    ("", "RMSNormalization"), ("", "Range"), ("", "Reciprocal"), ("", "ReduceL1"),
    ("", "ReduceL2"), ("", "ReduceLogSumExp"), ("", "ReduceMax"), ("", "ReduceMean"),
    ("", "ReduceMin"), ("", "ReduceProd"), ("", "ReduceSum"), ("", "ReduceSumSquare"),
    ("", "Relu"), ("", "Reshape"), ("", "Round"), ("", "Shape"), ("", "Sigmoid"), ("", "Sign"),
    ("", "SimplifiedLayerNormalization"), ("", "Sin"), ("", "Size"), ("", "Slice"),
    ("", "Softmax"), ("", "Softplus"), ("", "Split"), ("", "Sqrt"), ("", "Squeeze"),
    ("", "Sub"), ("", "Sum"), ("", "Tanh"), ("", "Tile"), ("", "Transpose"), ("", "Trilu"),
    ("", "Unsqueeze"), ("", "Where"), ("", "Xor"),
    ("com.microsoft", "SimplifiedLayerNormalization"),
    ("com.microsoft", "SkipSimplifiedLayerNormalization"),
];

#[test]
fn every_supported_op_is_covered() {
    let supported: BTreeSet<_> = SUPPORTED.iter().copied().collect();
    let covered: BTreeSet<_> = COVERED.iter().copied().collect();
    let untested: Vec<_> = supported.difference(&covered).collect();
    let stale: Vec<_> = covered.difference(&supported).collect();
    assert!(
        untested.is_empty(),
        "ops in SUPPORTED without a test here: {untested:?}"
    );
    assert!(
        stale.is_empty(),
        "ops tested here but not in SUPPORTED: {stale:?}"
    );
}

#[test]
fn reference_erf_matches_tables() {
    // Abramowitz & Stegun table 7.1 / any CAS: erf(0.5), erf(1), erf(2), erf(3).
    assert_close(
        &[
            erf_f64(0.5) as f32,
            erf_f64(1.0) as f32,
            erf_f64(2.0) as f32,
            erf_f64(3.0) as f32,
        ],
        &[0.520_499_9, 0.842_700_8, 0.995_322_3, 0.999_977_9],
        1e-7,
    );
    assert!((erf_f64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
    assert_eq!(erf_f64(0.0), 0.0);
    assert_eq!(erf_f64(-1.0), -erf_f64(1.0));
}

#[test]
fn assert_close_accepts_within_tolerance() {
    assert_close(
        &[1.0, 100.0, f32::NAN, f32::INFINITY],
        &[1.0 + 1e-7, 100.00005, f32::NAN, f32::INFINITY],
        F32_TOL,
    );
    assert_close(&[-0.0], &[0.0], EXACT);
}

#[test]
#[should_panic(expected = "index 1: got 2.5, want 2")]
fn assert_close_reports_index_and_values() {
    assert_close(&[1.0, 2.5], &[1.0, 2.0], 0.1);
}

#[test]
#[should_panic(expected = "index 0")]
fn assert_close_rejects_nan_for_a_number() {
    assert_close(&[f32::NAN], &[1.0], 1.0);
}

#[test]
#[should_panic(expected = "got 1 values, want 2")]
fn assert_close_rejects_length_mismatch() {
    assert_close(&[1.0], &[1.0, 2.0], 1.0);
}

// =============================================================================================
// Elementwise unary

/// An op name and its f64 reference function.
type UnaryRef = (&'static str, fn(f64) -> f64);

#[test]
fn unary_transcendental_f32_match_f64_formulas() {
    let x = [-2.5f32, -1.0, -0.25, 0.0, 0.5, 1.0, 3.0];
    let cases: &[UnaryRef] = &[
        ("Exp", f64::exp),
        ("Sigmoid", |v| 1.0 / (1.0 + (-v).exp())),
        ("Tanh", f64::tanh),
        ("Sin", f64::sin),
        ("Cos", f64::cos),
        ("Softplus", |v| v.exp().ln_1p()),
        ("Erf", erf_f64),
    ];
    for &(op, f) in cases {
        eprintln!("case {op}");
        let want: Vec<f32> = x.iter().map(|&v| f(v as f64) as f32).collect();
        let got = run1(op, vec![feed(f32t(&[7], &x))], vec![]);
        expect_f32(&got, &[7], &want, F32_TOL);
    }
    // Anchors by hand: exp(0) = 1, sigmoid(0) = 1/2, tanh(0) = sin(0) = erf(0) = 0, cos(0) = 1,
    // softplus(0) = ln 2.
    for (op, want) in [
        ("Exp", 1.0),
        ("Sigmoid", 0.5),
        ("Tanh", 0.0),
        ("Sin", 0.0),
        ("Cos", 1.0),
        ("Erf", 0.0),
    ] {
        expect_f32(
            &run1(op, vec![feed(sf32(0.0))], vec![]),
            &[],
            &[want],
            EXACT,
        );
    }
    expect_f32(
        &run1("Softplus", vec![feed(sf32(0.0))], vec![]),
        &[],
        &[LN_2 as f32],
        F32_TOL,
    );
}

#[test]
fn erf_matches_series_within_1e_6() {
    let x = [
        -3.0f32, -2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0,
    ];
    let want: Vec<f32> = x.iter().map(|&v| erf_f64(v as f64) as f32).collect();
    let got = run1("Erf", vec![feed(f32t(&[11], &x))], vec![]);
    // Absolute 1e-6 (all |erf| <= 1).
    let g = got.as_f32().unwrap();
    for i in 0..x.len() {
        assert!(
            (g[i] - want[i]).abs() <= 1e-6,
            "erf({}) = {}, want {}",
            x[i],
            g[i],
            want[i]
        );
    }
    // Far tails saturate: erf(+-10) = +-1 to f32 precision.
    expect_f32(
        &run1("Erf", vec![feed(f32t(&[2], &[10.0, -10.0]))], vec![]),
        &[2],
        &[1.0, -1.0],
        F32_TOL,
    );
}

#[test]
fn softplus_is_stable_for_large_inputs() {
    // ln(1 + e^100) = 100 + ln(1 + e^-100) = 100 to f32; ln(1 + e^-100) ~ 3.7e-44 ~ 0.
    let got = run1("Softplus", vec![feed(f32t(&[2], &[100.0, -100.0]))], vec![]);
    expect_f32(&got, &[2], &[100.0, 0.0], F32_TOL);
}

#[test]
fn log_sqrt_reciprocal_with_edge_values() {
    let got = run1(
        "Log",
        vec![feed(f32t(&[6], &[0.25, 1.0, 2.0, 10.0, 0.0, -1.0]))],
        vec![],
    );
    let want = [-2.0 * LN_2, 0.0, LN_2, 10f64.ln()].map(|v| v as f32);
    expect_f32(
        &got,
        &[6],
        &[
            want[0],
            want[1],
            want[2],
            want[3],
            f32::NEG_INFINITY,
            f32::NAN,
        ],
        F32_TOL,
    );

    let got = run1(
        "Sqrt",
        vec![feed(f32t(&[5], &[0.0, 0.25, 4.0, 2.0, -1.0]))],
        vec![],
    );
    expect_f32(
        &got,
        &[5],
        &[0.0, 0.5, 2.0, std::f32::consts::SQRT_2, f32::NAN],
        F32_TOL,
    );

    let got = run1(
        "Reciprocal",
        vec![feed(f32t(&[4], &[2.0, -4.0, 0.5, 0.0]))],
        vec![],
    );
    expect_f32(&got, &[4], &[0.5, -0.25, 2.0, f32::INFINITY], EXACT);
}

#[test]
fn exact_unary_ops_f32() {
    let x = f32t(&[2, 3], &[-2.5, -1.0, -0.0, 0.0, 0.5, 2.7]);
    let cases: &[(&str, [f32; 6])] = &[
        ("Abs", [2.5, 1.0, 0.0, 0.0, 0.5, 2.7]),
        ("Neg", [2.5, 1.0, 0.0, -0.0, -0.5, -2.7]),
        ("Floor", [-3.0, -1.0, -0.0, 0.0, 0.0, 2.0]),
        ("Ceil", [-2.0, -1.0, -0.0, 0.0, 1.0, 3.0]),
        ("Relu", [0.0, 0.0, 0.0, 0.0, 0.5, 2.7]),
        ("Sign", [-1.0, -1.0, 0.0, 0.0, 1.0, 1.0]),
    ];
    for (op, want) in cases {
        eprintln!("case {op}");
        expect_f32(
            &run1(op, vec![feed(x.clone())], vec![]),
            &[2, 3],
            want,
            EXACT,
        );
    }
}

#[test]
fn exact_unary_ops_integers() {
    let x = i64t(&[4], &[-7, 0, 3, -1]);
    for (op, want) in [
        ("Abs", [7, 0, 3, 1]),
        ("Neg", [7, 0, -3, 1]),
        ("Relu", [0, 0, 3, 0]),
        ("Sign", [-1, 0, 1, -1]),
    ] {
        eprintln!("case {op}");
        expect_i64(&run1(op, vec![feed(x.clone())], vec![]), &[4], &want);
    }
    expect_i32(
        &run1("Neg", vec![feed(i32t(&[2], &[5, -6]))], vec![]),
        &[2],
        &[-5, 6],
    );
    expect_i32(
        &run1("Abs", vec![feed(i32t(&[2], &[5, -6]))], vec![]),
        &[2],
        &[5, 6],
    );
}

#[test]
fn round_is_half_to_even() {
    let x = f32t(
        &[10],
        &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.4, 0.6, -0.6, 3.0],
    );
    let got = run1("Round", vec![feed(x)], vec![]);
    expect_f32(
        &got,
        &[10],
        &[0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, 1.0, -1.0, 3.0],
        EXACT,
    );
}

#[test]
fn isnan_and_not_produce_bool() {
    let got = run1(
        "IsNaN",
        vec![feed(f32t(&[4], &[1.0, f32::NAN, f32::INFINITY, -0.0]))],
        vec![],
    );
    expect_bool(&got, &[4], &[false, true, false, false]);
    let got = run1(
        "Not",
        vec![feed(boolt(&[2, 2], &[true, false, false, true]))],
        vec![],
    );
    expect_bool(&got, &[2, 2], &[false, true, true, false]);
}

#[test]
fn leaky_relu_elu_hard_sigmoid() {
    // LeakyRelu: alpha * x for x < 0; default alpha 0.01.
    let got = run1(
        "LeakyRelu",
        vec![feed(f32t(&[3], &[-2.0, 0.0, 3.0]))],
        vec![],
    );
    expect_f32(&got, &[3], &[-0.02, 0.0, 3.0], F32_TOL);
    let got = run1(
        "LeakyRelu",
        vec![feed(f32t(&[3], &[-2.0, -1.0, 4.0]))],
        vec![attr_f("alpha", 0.5)],
    );
    expect_f32(&got, &[3], &[-1.0, -0.5, 4.0], EXACT);

    // Elu: alpha (e^x - 1) for x < 0; default alpha 1.
    let got = run1("Elu", vec![feed(f32t(&[3], &[-1.0, 0.0, 2.0]))], vec![]);
    expect_f32(
        &got,
        &[3],
        &[((-1f64).exp() - 1.0) as f32, 0.0, 2.0],
        F32_TOL,
    );
    // x = -ln 2: 2 * (1/2 - 1) = -1.
    let got = run1(
        "Elu",
        vec![feed(f32t(&[2], &[-LN_2 as f32, 1.5]))],
        vec![attr_f("alpha", 2.0)],
    );
    expect_f32(&got, &[2], &[-1.0, 1.5], F32_TOL);

    // HardSigmoid: clamp(alpha x + beta, 0, 1); defaults alpha 0.2, beta 0.5.
    let got = run1(
        "HardSigmoid",
        vec![feed(f32t(&[5], &[-3.0, -1.0, 0.0, 1.0, 3.0]))],
        vec![],
    );
    expect_f32(&got, &[5], &[0.0, 0.3, 0.5, 0.7, 1.0], F32_TOL);
    let got = run1(
        "HardSigmoid",
        vec![feed(f32t(&[4], &[-1.0, 0.0, 1.0, 2.0]))],
        vec![attr_f("alpha", 0.5), attr_f("beta", 0.25)],
    );
    expect_f32(&got, &[4], &[0.0, 0.25, 0.75, 1.0], EXACT);
}

#[test]
fn hard_swish() {
    // x * clamp(x/6 + 1/2, 0, 1): -4 -> 0, -3 -> 0, -1 -> -1/3, 0 -> 0, 1 -> 2/3, 3 -> 3, 4 -> 4.
    let got = run1(
        "HardSwish",
        vec![feed(f32t(&[7], &[-4.0, -3.0, -1.0, 0.0, 1.0, 3.0, 4.0]))],
        vec![],
    );
    expect_f32(
        &got,
        &[7],
        &[0.0, 0.0, -1.0 / 3.0, 0.0, 2.0 / 3.0, 3.0, 4.0],
        F32_TOL,
    );
}

#[test]
fn gelu_exact_and_tanh() {
    let x = [-3.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
    let gelu = |v: f64| 0.5 * v * (1.0 + erf_f64(v / 2f64.sqrt()));
    let gelu_tanh =
        |v: f64| 0.5 * v * (1.0 + ((2.0 / PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
    let want: Vec<f32> = x.iter().map(|&v| gelu(v as f64) as f32).collect();
    // Gelu is opset 20.
    let got = run1_opset("Gelu", vec![feed(f32t(&[7], &x))], vec![], 20);
    expect_f32(&got, &[7], &want, F32_TOL);
    let got = run1_opset(
        "Gelu",
        vec![feed(f32t(&[7], &x))],
        vec![attr_s("approximate", "none")],
        20,
    );
    expect_f32(&got, &[7], &want, F32_TOL);
    // Anchor: gelu(1) = Phi(1) = 0.841344746…
    assert!((want[5] - 0.841_344_7).abs() < 1e-6);

    let want: Vec<f32> = x.iter().map(|&v| gelu_tanh(v as f64) as f32).collect();
    let got = run1_opset(
        "Gelu",
        vec![feed(f32t(&[7], &x))],
        vec![attr_s("approximate", "tanh")],
        20,
    );
    expect_f32(&got, &[7], &want, F32_TOL);
}

#[test]
fn gelu_rejects_unknown_approximation() {
    let err = run_node(
        "Gelu",
        "",
        vec![feed(sf32(1.0))],
        vec![attr_s("approximate", "fast")],
        1,
        20,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&node_name("Gelu")) && err.contains("fast"),
        "{err}"
    );
}

// =============================================================================================
// Elementwise binary

#[test]
fn add_broadcasting() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Scalar.
    let got = run1("Add", vec![feed(a.clone()), feed(sf32(10.0))], vec![]);
    expect_f32(&got, &[2, 3], &[11.0, 12.0, 13.0, 14.0, 15.0, 16.0], EXACT);
    // Scalar on the left.
    let got = run1("Add", vec![feed(sf32(10.0)), feed(a.clone())], vec![]);
    expect_f32(&got, &[2, 3], &[11.0, 12.0, 13.0, 14.0, 15.0, 16.0], EXACT);
    // Row [3] against [2, 3].
    let got = run1(
        "Add",
        vec![feed(a.clone()), feed(f32t(&[3], &[10.0, 20.0, 30.0]))],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0], EXACT);
    // Column [2, 1] against row [1, 3]: both sides broadcast.
    let got = run1(
        "Add",
        vec![
            feed(f32t(&[2, 1], &[1.0, 2.0])),
            feed(f32t(&[1, 3], &[10.0, 20.0, 30.0])),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0], EXACT);
    // [2, 1, 2] + [3, 1] -> [2, 3, 2]: out[i, j, k] = a[i, k] + b[j].
    let got = run1(
        "Add",
        vec![
            feed(f32t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0])),
            feed(f32t(&[3, 1], &[10.0, 20.0, 30.0])),
        ],
        vec![],
    );
    expect_f32(
        &got,
        &[2, 3, 2],
        &[
            11.0, 12.0, 21.0, 22.0, 31.0, 32.0, 13.0, 14.0, 23.0, 24.0, 33.0, 34.0,
        ],
        EXACT,
    );
    // Integers, one side an initializer.
    let got = run1(
        "Add",
        vec![feed(i64t(&[3], &[1, -2, 3])), init(si64(100))],
        vec![],
    );
    expect_i64(&got, &[3], &[101, 98, 103]);
}

#[test]
fn sub_mul_div_broadcasting() {
    // [[10], [20]] - [[1, 2, 3]].
    let got = run1(
        "Sub",
        vec![
            feed(f32t(&[2, 1], &[10.0, 20.0])),
            feed(f32t(&[1, 3], &[1.0, 2.0, 3.0])),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[9.0, 8.0, 7.0, 19.0, 18.0, 17.0], EXACT);
    let got = run1(
        "Sub",
        vec![feed(i64t(&[3], &[5, 0, -5])), feed(i64t(&[3], &[1, 2, 3]))],
        vec![],
    );
    expect_i64(&got, &[3], &[4, -2, -8]);

    let got = run1(
        "Mul",
        vec![
            feed(f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
            feed(f32t(&[3], &[1.0, 0.0, -1.0])),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[1.0, 0.0, -3.0, 4.0, 0.0, -6.0], EXACT);
    let got = run1(
        "Mul",
        vec![feed(i32t(&[2], &[3, -4])), feed(i32t(&[], &[5]))],
        vec![],
    );
    expect_i32(&got, &[2], &[15, -20]);

    // [[1, 2], [3, 4]] / [[2], [4]].
    let got = run1(
        "Div",
        vec![
            feed(f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
            feed(f32t(&[2, 1], &[2.0, 4.0])),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 2], &[0.5, 1.0, 0.75, 1.0], EXACT);
    let got = run1(
        "Div",
        vec![feed(f32t(&[2], &[1.0, -1.0])), feed(sf32(0.0))],
        vec![],
    );
    expect_f32(&got, &[2], &[f32::INFINITY, f32::NEG_INFINITY], EXACT);
}

#[test]
fn integer_div_truncates_toward_zero() {
    // 7/2 = 3, -7/2 = -3 (not -4), 7/-2 = -3, -7/-2 = 3, 6/3 = 2.
    let got = run1(
        "Div",
        vec![
            feed(i64t(&[5], &[7, -7, 7, -7, 6])),
            feed(i64t(&[5], &[2, 2, -2, -2, 3])),
        ],
        vec![],
    );
    expect_i64(&got, &[5], &[3, -3, -3, 3, 2]);
    // -1/2 = 0 (floor would give -1), broadcast scalar divisor.
    let got = run1(
        "Div",
        vec![feed(i32t(&[3], &[-1, 1, -5])), feed(i32t(&[], &[2]))],
        vec![],
    );
    expect_i32(&got, &[3], &[0, 0, -2]);
}

#[test]
fn integer_div_by_zero_is_an_error_not_a_panic() {
    let err = run1_err(
        "Div",
        vec![feed(i64t(&[2], &[1, 2])), feed(i64t(&[2], &[1, 0]))],
        vec![],
    );
    assert!(err.contains(&node_name("Div")), "{err}");
}

#[test]
fn pow_float_base_integer_exponent() {
    // 2^3, 3^2, (-2)^3, 4^0, 9^-1.
    let got = run1(
        "Pow",
        vec![
            feed(f32t(&[5], &[2.0, 3.0, -2.0, 4.0, 9.0])),
            feed(i64t(&[5], &[3, 2, 3, 0, -1])),
        ],
        vec![],
    );
    expect_f32(&got, &[5], &[8.0, 9.0, -8.0, 1.0, 1.0 / 9.0], F32_TOL);
    // i32 scalar exponent broadcast.
    let got = run1(
        "Pow",
        vec![
            feed(f32t(&[2, 2], &[1.0, -2.0, 0.5, 3.0])),
            feed(i32t(&[], &[2])),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 2], &[1.0, 4.0, 0.25, 9.0], F32_TOL);
    // Float exponent: square roots.
    let got = run1(
        "Pow",
        vec![feed(f32t(&[3], &[4.0, 9.0, 2.25])), feed(sf32(0.5))],
        vec![],
    );
    expect_f32(&got, &[3], &[2.0, 3.0, 1.5], F32_TOL);
    // Integer base.
    let got = run1(
        "Pow",
        vec![feed(i64t(&[3], &[2, 3, -2])), feed(i64t(&[3], &[10, 0, 3]))],
        vec![],
    );
    expect_i64(&got, &[3], &[1024, 1, -8]);
}

#[test]
fn mod_integer_and_fmod() {
    let a = i64t(&[5], &[5, -5, 5, -5, 6]);
    let b = i64t(&[5], &[3, 3, -3, -3, 3]);
    // fmod = 0: sign of the divisor (Python %): 5%3 = 2, -5%3 = 1, 5%-3 = -1, -5%-3 = -2.
    let got = run1("Mod", vec![feed(a.clone()), feed(b.clone())], vec![]);
    expect_i64(&got, &[5], &[2, 1, -1, -2, 0]);
    // fmod = 1: sign of the dividend (C fmod).
    let got = run1("Mod", vec![feed(a), feed(b)], vec![attr_i("fmod", 1)]);
    expect_i64(&got, &[5], &[2, -2, 2, -2, 0]);
    // Float fmod: 5.5 fmod 2 = 1.5, -5.5 fmod 2 = -1.5, 5.5 fmod -2 = 1.5, -5.5 fmod -2 = -1.5.
    let got = run1(
        "Mod",
        vec![
            feed(f32t(&[4], &[5.5, -5.5, 5.5, -5.5])),
            feed(f32t(&[4], &[2.0, 2.0, -2.0, -2.0])),
        ],
        vec![attr_i("fmod", 1)],
    );
    expect_f32(&got, &[4], &[1.5, -1.5, 1.5, -1.5], EXACT);
    // i32 with a broadcast scalar divisor: -7 mod 4 = 1, 7 mod 4 = 3.
    let got = run1(
        "Mod",
        vec![feed(i32t(&[2], &[-7, 7])), feed(i32t(&[], &[4]))],
        vec![],
    );
    expect_i32(&got, &[2], &[1, 3]);
}

#[test]
fn variadic_max_min_sum_mean() {
    // a [2, 1] = [[1], [5]], b [3] = [0, 3, 6], c [] = 2 -> [2, 3].
    let args = || {
        vec![
            feed(f32t(&[2, 1], &[1.0, 5.0])),
            feed(f32t(&[3], &[0.0, 3.0, 6.0])),
            feed(sf32(2.0)),
        ]
    };
    expect_f32(
        &run1("Max", args(), vec![]),
        &[2, 3],
        &[2.0, 3.0, 6.0, 5.0, 5.0, 6.0],
        EXACT,
    );
    expect_f32(
        &run1("Min", args(), vec![]),
        &[2, 3],
        &[0.0, 1.0, 1.0, 0.0, 2.0, 2.0],
        EXACT,
    );
    expect_f32(
        &run1("Sum", args(), vec![]),
        &[2, 3],
        &[3.0, 6.0, 9.0, 7.0, 10.0, 13.0],
        EXACT,
    );
    expect_f32(
        &run1("Mean", args(), vec![]),
        &[2, 3],
        &[1.0, 2.0, 3.0, 7.0 / 3.0, 10.0 / 3.0, 13.0 / 3.0],
        F32_TOL,
    );
    // One input: identity.
    let x = f32t(&[2], &[1.5, -2.0]);
    for op in ["Max", "Min", "Sum", "Mean"] {
        eprintln!("case {op}");
        expect_f32(
            &run1(op, vec![feed(x.clone())], vec![]),
            &[2],
            &[1.5, -2.0],
            EXACT,
        );
    }
    // Integers.
    let got = run1(
        "Max",
        vec![feed(i64t(&[3], &[1, 9, -3])), feed(i64t(&[3], &[4, 2, -4]))],
        vec![],
    );
    expect_i64(&got, &[3], &[4, 9, -3]);
    let got = run1(
        "Min",
        vec![feed(i64t(&[3], &[1, 9, -3])), feed(i64t(&[3], &[4, 2, -4]))],
        vec![],
    );
    expect_i64(&got, &[3], &[1, 2, -4]);
    let got = run1(
        "Sum",
        vec![
            feed(i64t(&[2], &[1, 2])),
            feed(i64t(&[2], &[10, 20])),
            feed(i64t(&[1], &[100])),
        ],
        vec![],
    );
    expect_i64(&got, &[2], &[111, 122]);
}

#[test]
fn comparisons_produce_bool_with_broadcasting() {
    // a [2, 1] = [[1], [2]] against b [3] = [1, 2, 3].
    let cases: &[(&str, [bool; 6])] = &[
        ("Equal", [true, false, false, false, true, false]),
        ("Less", [false, true, true, false, false, true]),
        ("LessOrEqual", [true, true, true, false, true, true]),
        ("Greater", [false, false, false, true, false, false]),
        ("GreaterOrEqual", [true, false, false, true, true, false]),
    ];
    for (op, want) in cases {
        eprintln!("case {op} f32");
        let got = run1(
            op,
            vec![
                feed(f32t(&[2, 1], &[1.0, 2.0])),
                feed(f32t(&[3], &[1.0, 2.0, 3.0])),
            ],
            vec![],
        );
        expect_bool(&got, &[2, 3], want);
        eprintln!("case {op} i64");
        let got = run1(
            op,
            vec![feed(i64t(&[2, 1], &[1, 2])), feed(i64t(&[3], &[1, 2, 3]))],
            vec![],
        );
        expect_bool(&got, &[2, 3], want);
    }
    let got = run1(
        "Equal",
        vec![
            feed(boolt(&[2], &[true, false])),
            feed(boolt(&[2], &[true, true])),
        ],
        vec![],
    );
    expect_bool(&got, &[2], &[true, false]);
    // NaN compares unequal to everything.
    let got = run1(
        "Equal",
        vec![
            feed(f32t(&[2], &[f32::NAN, 1.0])),
            feed(f32t(&[2], &[f32::NAN, 1.0])),
        ],
        vec![],
    );
    expect_bool(&got, &[2], &[false, true]);
}

#[test]
fn logical_ops() {
    let a = boolt(&[4], &[true, true, false, false]);
    let b = boolt(&[4], &[true, false, true, false]);
    for (op, want) in [
        ("And", [true, false, false, false]),
        ("Or", [true, true, true, false]),
        ("Xor", [false, true, true, false]),
    ] {
        eprintln!("case {op}");
        expect_bool(
            &run1(op, vec![feed(a.clone()), feed(b.clone())], vec![]),
            &[4],
            &want,
        );
        // Broadcast: [[t], [f]] op [t, f] gives the same truth table.
        let got = run1(
            op,
            vec![
                feed(boolt(&[2, 1], &[true, false])),
                feed(boolt(&[2], &[true, false])),
            ],
            vec![],
        );
        expect_bool(&got, &[2, 2], &want);
    }
}

#[test]
fn where_three_way_broadcast() {
    // cond [3] = [t, f, t], x [2, 1] = [[1], [2]], y [] = -1 -> [2, 3].
    let got = run1(
        "Where",
        vec![
            feed(boolt(&[3], &[true, false, true])),
            feed(f32t(&[2, 1], &[1.0, 2.0])),
            feed(sf32(-1.0)),
        ],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[1.0, -1.0, 1.0, 2.0, -1.0, 2.0], EXACT);
    // cond [2, 1, 1], x [3], y [1, 2, 1] -> [2, 2, 3].
    let got = run1(
        "Where",
        vec![
            feed(boolt(&[2, 1, 1], &[true, false])),
            feed(i64t(&[3], &[1, 2, 3])),
            feed(i64t(&[1, 2, 1], &[10, 20])),
        ],
        vec![],
    );
    expect_i64(
        &got,
        &[2, 2, 3],
        &[1, 2, 3, 1, 2, 3, 10, 10, 10, 20, 20, 20],
    );
}

#[test]
fn where_rejects_non_bool_condition() {
    let err = run1_err(
        "Where",
        vec![feed(f32t(&[1], &[1.0])), feed(sf32(1.0)), feed(sf32(2.0))],
        vec![],
    );
    assert!(
        err.contains(&node_name("Where")) && err.contains("bool"),
        "{err}"
    );
}

// =============================================================================================
// Cast, CastLike, Clip

fn cast(x: engine::Tensor, to: DType) -> engine::Tensor {
    run1(
        "Cast",
        vec![feed(x)],
        vec![attr_i("to", to.to_onnx() as i64)],
    )
}

#[test]
fn cast_float_int_bool() {
    let x = f32t(&[5], &[1.7, -1.7, 2.5, -0.5, 0.0]);
    // Float to int truncates toward zero.
    expect_i64(&cast(x.clone(), DType::I64), &[5], &[1, -1, 2, 0, 0]);
    expect_i32(&cast(x.clone(), DType::I32), &[5], &[1, -1, 2, 0, 0]);
    // To bool: != 0.
    expect_bool(
        &cast(x, DType::Bool),
        &[5],
        &[true, true, true, true, false],
    );
    expect_f32(
        &cast(boolt(&[3], &[true, false, true]), DType::F32),
        &[3],
        &[1.0, 0.0, 1.0],
        EXACT,
    );
    expect_i64(
        &cast(boolt(&[3], &[true, false, true]), DType::I64),
        &[3],
        &[1, 0, 1],
    );
    // 2^24 is exact in f32.
    expect_f32(
        &cast(i64t(&[3], &[-3, 0, 16_777_216]), DType::F32),
        &[3],
        &[-3.0, 0.0, 16_777_216.0],
        EXACT,
    );
    expect_i64(&cast(i32t(&[2], &[-5, 7]), DType::I64), &[2], &[-5, 7]);
    expect_i32(&cast(i64t(&[2], &[-5, 7]), DType::I32), &[2], &[-5, 7]);
    expect_i64(&cast(i64t(&[2], &[-5, 7]), DType::I64), &[2], &[-5, 7]);
    // To u8.
    let got = cast(f32t(&[2], &[0.0, 200.9]), DType::U8);
    assert_eq!(got.data(), &Data::U8(vec![0, 200]));
}

#[test]
fn cast_to_and_from_f16() {
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1.
    // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even) -> 1 + 2^-9.
    // f16(0.1) = (1 + 614/1024) / 16 = 0.0999755859375; 1e5 > 65504 overflows to +inf.
    let (u10, u11) = (2f32.powi(-10), 2f32.powi(-11));
    let x = f32t(
        &[7],
        &[1.5, -2.25, 65504.0, 1.0 + u11, 1.0 + 3.0 * u11, 0.1, 1e5],
    );
    let f16_tenth = (1.0 + 614.0 / 1024.0) / 16.0;
    let want = [
        1.5,
        -2.25,
        65504.0,
        1.0,
        1.0 + 2.0 * u10,
        f16_tenth,
        f32::INFINITY,
    ];
    let got = cast(x, DType::F16);
    expect_float(&got, DType::F16, &[7], &want, EXACT);
    // And back: exact.
    expect_f32(&cast(got, DType::F32), &[7], &want, EXACT);
    // f16 -> int truncates; int -> f16 rounds (2049 needs 12 bits: ties to even -> 2048).
    expect_i64(&cast(f16t(&[2], &[2.5, -3.75]), DType::I64), &[2], &[2, -3]);
    expect_float(
        &cast(i64t(&[3], &[3, -2048, 2049]), DType::F16),
        DType::F16,
        &[3],
        &[3.0, -2048.0, 2048.0],
        EXACT,
    );
}

#[test]
fn cast_to_and_from_bf16() {
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1; 1 + 3 * 2^-8 -> 1 + 2^-6 (even).
    // bf16(0.1): f32 0x3DCCCCCD rounds up to 0x3DCD = (1 + 77/128) / 16 = 0.10009765625.
    let u8_ = 2f32.powi(-8);
    let x = f32t(&[4], &[1.5, 1.0 + u8_, 1.0 + 3.0 * u8_, 0.1]);
    let bf16_tenth = (1.0 + 77.0 / 128.0) / 16.0;
    let want = [1.5, 1.0, 1.0 + 4.0 * u8_, bf16_tenth];
    let got = cast(x, DType::BF16);
    expect_float(&got, DType::BF16, &[4], &want, EXACT);
    expect_f32(&cast(got.clone(), DType::F32), &[4], &want, EXACT);
    // bf16 -> f16: all four are exact in f16 (0.10009765625 = (1 + 616/1024) / 16).
    expect_float(&cast(got, DType::F16), DType::F16, &[4], &want, EXACT);
    // f16 -> bf16: 1 + 2^-9 rounds to 1 (nearest of 1, 1 + 2^-7).
    let got = cast(f16t(&[2], &[1.0 + 2f32.powi(-9), -3.0]), DType::BF16);
    expect_float(&got, DType::BF16, &[2], &[1.0, -3.0], EXACT);
    expect_i64(&cast(bf16t(&[2], &[2.5, -7.0]), DType::I64), &[2], &[2, -7]);
}

#[test]
fn cast_to_unsupported_type_names_node_and_type() {
    // 11 = DOUBLE.
    let err = run1_err("Cast", vec![feed(sf32(1.0))], vec![attr_i("to", 11)]);
    assert!(
        err.contains(&node_name("Cast")) && err.contains("DOUBLE"),
        "{err}"
    );
}

#[test]
fn cast_like() {
    let got = run1(
        "CastLike",
        vec![feed(f32t(&[2], &[1.9, -1.9])), feed(i32t(&[1], &[0]))],
        vec![],
    );
    expect_i32(&got, &[2], &[1, -1]);
    let got = run1(
        "CastLike",
        vec![feed(f32t(&[2], &[0.5, 3.0])), feed(f16t(&[], &[0.0]))],
        vec![],
    );
    expect_float(&got, DType::F16, &[2], &[0.5, 3.0], EXACT);
    let got = run1(
        "CastLike",
        vec![feed(i64t(&[2], &[0, 4])), feed(boolt(&[1], &[false]))],
        vec![],
    );
    expect_bool(&got, &[2], &[false, true]);
}

#[test]
fn clip_with_inputs_and_attributes() {
    let x = || f32t(&[5], &[-3.0, -1.0, 0.0, 1.0, 3.0]);
    let got = run1(
        "Clip",
        vec![feed(x()), feed(sf32(-1.0)), feed(sf32(2.0))],
        vec![],
    );
    expect_f32(&got, &[5], &[-1.0, -1.0, 0.0, 1.0, 2.0], EXACT);
    // min omitted (empty name), max 0.5.
    let got = run1("Clip", vec![feed(x()), Arg::Skip, init(sf32(0.5))], vec![]);
    expect_f32(&got, &[5], &[-3.0, -1.0, 0.0, 0.5, 0.5], EXACT);
    // Only min.
    let got = run1("Clip", vec![feed(x()), init(sf32(0.0))], vec![]);
    expect_f32(&got, &[5], &[0.0, 0.0, 0.0, 1.0, 3.0], EXACT);
    // No bounds: identity.
    let got = run1("Clip", vec![feed(x())], vec![]);
    expect_f32(&got, &[5], &[-3.0, -1.0, 0.0, 1.0, 3.0], EXACT);
    // min > max: everything becomes max (ONNX spec).
    let got = run1(
        "Clip",
        vec![feed(x()), feed(sf32(2.0)), feed(sf32(1.0))],
        vec![],
    );
    expect_f32(&got, &[5], &[1.0, 1.0, 1.0, 1.0, 1.0], EXACT);
    // Integers.
    let got = run1(
        "Clip",
        vec![feed(i64t(&[3], &[-5, 5, 0])), feed(si64(-2)), feed(si64(2))],
        vec![],
    );
    expect_i64(&got, &[3], &[-2, 2, 0]);
    // Opset 6: bounds as attributes.
    let got = run1_opset(
        "Clip",
        vec![feed(x())],
        vec![attr_f("min", -0.5), attr_f("max", 0.5)],
        6,
    );
    expect_f32(&got, &[5], &[-0.5, -0.5, 0.0, 0.5, 0.5], EXACT);
}

// =============================================================================================
// Reductions

fn m23() -> engine::Tensor {
    f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn reduce_sum_axes_keepdims() {
    // [[1, 2, 3], [4, 5, 6]]; ReduceSum takes axes as an input since opset 13.
    let got = run1(
        "ReduceSum",
        vec![feed(m23()), init(i64t(&[1], &[-1]))],
        vec![],
    );
    expect_f32(&got, &[2, 1], &[6.0, 15.0], EXACT);
    let got = run1(
        "ReduceSum",
        vec![feed(m23()), init(i64t(&[1], &[-1]))],
        vec![attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[2], &[6.0, 15.0], EXACT);
    let got = run1(
        "ReduceSum",
        vec![feed(m23()), feed(i64t(&[1], &[0]))],
        vec![attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[3], &[5.0, 7.0, 9.0], EXACT);
    // No axes: everything.
    let got = run1("ReduceSum", vec![feed(m23())], vec![]);
    expect_f32(&got, &[1, 1], &[21.0], EXACT);
    let got = run1("ReduceSum", vec![feed(m23())], vec![attr_i("keepdims", 0)]);
    expect_f32(&got, &[], &[21.0], EXACT);
    // Opset 11: axes as an attribute.
    let got = run1_opset(
        "ReduceSum",
        vec![feed(m23())],
        vec![attr_ints("axes", &[1])],
        11,
    );
    expect_f32(&got, &[2, 1], &[6.0, 15.0], EXACT);
    // Integers.
    let got = run1(
        "ReduceSum",
        vec![feed(i64t(&[2, 2], &[1, 2, 3, 4])), init(i64t(&[1], &[0]))],
        vec![],
    );
    expect_i64(&got, &[1, 2], &[4, 6]);
}

#[test]
fn reduce_sum_multiple_negative_axes_3d() {
    // x[i, j, k] = 4i + 2j + k + 1. Summing i and k: j = 0 -> 1 + 2 + 5 + 6 = 14, j = 1 -> 22.
    let x = f32t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let got = run1(
        "ReduceSum",
        vec![feed(x.clone()), init(i64t(&[2], &[-1, -3]))],
        vec![],
    );
    expect_f32(&got, &[1, 2, 1], &[14.0, 22.0], EXACT);
    let got = run1(
        "ReduceSum",
        vec![feed(x), init(i64t(&[2], &[0, 2]))],
        vec![attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[2], &[14.0, 22.0], EXACT);
}

#[test]
fn reduce_noop_with_empty_axes() {
    // No axes and noop_with_empty_axes = 1: identity.
    let got = run1(
        "ReduceSum",
        vec![feed(m23())],
        vec![attr_i("noop_with_empty_axes", 1)],
    );
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
    // An empty axes input is "no axes" too.
    let empty = i64t(&[0], &[]);
    let got = run1(
        "ReduceSum",
        vec![feed(m23()), feed(empty.clone())],
        vec![attr_i("noop_with_empty_axes", 1)],
    );
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
    // ... and with noop_with_empty_axes = 0 it reduces everything.
    let got = run1("ReduceSum", vec![feed(m23()), feed(empty)], vec![]);
    expect_f32(&got, &[1, 1], &[21.0], EXACT);
    let got = run1_opset(
        "ReduceMax",
        vec![feed(m23())],
        vec![attr_i("noop_with_empty_axes", 1)],
        18,
    );
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
}

#[test]
fn reduce_mean_attribute_at_17_input_at_18() {
    // Row means of [[1, 2, 3], [4, 5, 6]]: 2 and 5.
    let got = run1_opset(
        "ReduceMean",
        vec![feed(m23())],
        vec![attr_ints("axes", &[1])],
        17,
    );
    expect_f32(&got, &[2, 1], &[2.0, 5.0], EXACT);
    let got = run1_opset(
        "ReduceMean",
        vec![feed(m23())],
        vec![attr_ints("axes", &[-2]), attr_i("keepdims", 0)],
        17,
    );
    expect_f32(&got, &[3], &[2.5, 3.5, 4.5], EXACT);
    let got = run1_opset(
        "ReduceMean",
        vec![feed(m23()), init(i64t(&[1], &[-1]))],
        vec![attr_i("keepdims", 0)],
        18,
    );
    expect_f32(&got, &[2], &[2.0, 5.0], EXACT);
    let got = run1_opset(
        "ReduceMean",
        vec![feed(m23())],
        vec![attr_i("keepdims", 0)],
        18,
    );
    expect_f32(&got, &[], &[3.5], EXACT);
}

#[test]
fn reduce_max_min_prod_sumsquare_l1_l2() {
    let x = || f32t(&[2, 3], &[1.0, 5.0, 3.0, 4.0, 2.0, 6.0]);
    // Opset 17: axes attributes.
    let got = run1("ReduceMax", vec![feed(x())], vec![attr_ints("axes", &[0])]);
    expect_f32(&got, &[1, 3], &[4.0, 5.0, 6.0], EXACT);
    let got = run1(
        "ReduceMin",
        vec![feed(x())],
        vec![attr_ints("axes", &[-2]), attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[3], &[1.0, 2.0, 3.0], EXACT);
    let got = run1("ReduceMax", vec![feed(x())], vec![attr_i("keepdims", 0)]);
    expect_f32(&got, &[], &[6.0], EXACT);
    // 1 * 5 * 3 = 15, 4 * 2 * 6 = 48.
    let got = run1("ReduceProd", vec![feed(x())], vec![attr_ints("axes", &[1])]);
    expect_f32(&got, &[2, 1], &[15.0, 48.0], EXACT);
    // 1 + 25 + 9 = 35, 16 + 4 + 36 = 56.
    let got = run1(
        "ReduceSumSquare",
        vec![feed(x())],
        vec![attr_ints("axes", &[1]), attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[2], &[35.0, 56.0], EXACT);
    let got = run1(
        "ReduceL1",
        vec![feed(f32t(&[2, 3], &[1.0, -2.0, 3.0, -4.0, 5.0, -6.0]))],
        vec![attr_ints("axes", &[1]), attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[2], &[6.0, 15.0], EXACT);
    // |(3, -4)| = 5, |(6, 8)| = 10.
    let got = run1(
        "ReduceL2",
        vec![feed(f32t(&[2, 2], &[3.0, -4.0, 6.0, 8.0]))],
        vec![attr_ints("axes", &[-1])],
    );
    expect_f32(&got, &[2, 1], &[5.0, 10.0], F32_TOL);
    // Opset 18: axes as an input for all of them.
    let got = run1_opset(
        "ReduceMax",
        vec![feed(x()), init(i64t(&[1], &[1]))],
        vec![attr_i("keepdims", 0)],
        18,
    );
    expect_f32(&got, &[2], &[5.0, 6.0], EXACT);
    let got = run1_opset(
        "ReduceMin",
        vec![feed(x()), feed(i64t(&[1], &[-1]))],
        vec![attr_i("keepdims", 0)],
        18,
    );
    expect_f32(&got, &[2], &[1.0, 2.0], EXACT);
    let got = run1_opset(
        "ReduceProd",
        vec![feed(x()), init(i64t(&[1], &[0]))],
        vec![],
        18,
    );
    expect_f32(&got, &[1, 3], &[4.0, 10.0, 18.0], EXACT);
    // Integers.
    let got = run1(
        "ReduceMax",
        vec![feed(i64t(&[2, 2], &[1, 2, 4, 3]))],
        vec![attr_ints("axes", &[1])],
    );
    expect_i64(&got, &[2, 1], &[2, 4]);
}

#[test]
fn reduce_log_sum_exp() {
    // log(e^0 + e^0) = ln 2, log(2 e^1) = 1 + ln 2.
    let got = run1(
        "ReduceLogSumExp",
        vec![feed(f32t(&[2, 2], &[0.0, 0.0, 1.0, 1.0]))],
        vec![attr_ints("axes", &[1])],
    );
    expect_f32(&got, &[2, 1], &[LN_2 as f32, (1.0 + LN_2) as f32], F32_TOL);
    // Stable for large values: 1000 + ln 2 (e^1000 overflows).
    let got = run1(
        "ReduceLogSumExp",
        vec![feed(f32t(&[2], &[1000.0, 1000.0]))],
        vec![attr_i("keepdims", 0)],
    );
    expect_f32(&got, &[], &[(1000.0 + LN_2) as f32], F32_TOL);
}

#[test]
fn arg_max_arg_min() {
    let x = || f32t(&[2, 3], &[1.0, 3.0, 3.0, 5.0, 0.0, 5.0]);
    // Row maxima: 3 first at 1, 5 first at 0; last occurrences at 2 and 2.
    let got = run1("ArgMax", vec![feed(x())], vec![attr_i("axis", 1)]);
    expect_i64(&got, &[2, 1], &[1, 0]);
    let got = run1(
        "ArgMax",
        vec![feed(x())],
        vec![attr_i("axis", -1), attr_i("select_last_index", 1)],
    );
    expect_i64(&got, &[2, 1], &[2, 2]);
    // Default axis 0, keepdims 1: columns (1, 5), (3, 0), (3, 5).
    let got = run1("ArgMax", vec![feed(x())], vec![]);
    expect_i64(&got, &[1, 3], &[1, 0, 1]);
    let got = run1(
        "ArgMin",
        vec![feed(x())],
        vec![attr_i("axis", 0), attr_i("keepdims", 0)],
    );
    expect_i64(&got, &[3], &[0, 1, 0]);
    // Ties for the minimum: [[2, 1, 1], [0, 4, 0]].
    let y = || f32t(&[2, 3], &[2.0, 1.0, 1.0, 0.0, 4.0, 0.0]);
    let got = run1(
        "ArgMin",
        vec![feed(y())],
        vec![attr_i("axis", -1), attr_i("keepdims", 0)],
    );
    expect_i64(&got, &[2], &[1, 0]);
    let got = run1(
        "ArgMin",
        vec![feed(y())],
        vec![
            attr_i("axis", -1),
            attr_i("keepdims", 0),
            attr_i("select_last_index", 1),
        ],
    );
    expect_i64(&got, &[2], &[2, 2]);
    // Integer input.
    let got = run1(
        "ArgMax",
        vec![feed(i64t(&[4], &[-5, 7, 7, 2]))],
        vec![attr_i("keepdims", 0)],
    );
    expect_i64(&got, &[], &[1]);
}

// =============================================================================================
// Softmax

/// [[0, ln 2, ln 5], [7, 7, 7]]: exps 1, 2, 5 (sum 8) and three equal values.
fn softmax_input() -> Vec<f32> {
    vec![0.0, LN_2 as f32, 5f64.ln() as f32, 7.0, 7.0, 7.0]
}

const SOFTMAX_WANT: [f32; 6] = [0.125, 0.25, 0.625, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0];

#[test]
fn softmax_last_axis_rows_sum_to_one() {
    for axis in [None, Some(-1), Some(1)] {
        eprintln!("case axis {axis:?}");
        let attrs = axis.map(|a| vec![attr_i("axis", a)]).unwrap_or_default();
        let got = run1(
            "Softmax",
            vec![feed(f32t(&[2, 3], &softmax_input()))],
            attrs,
        );
        expect_f32(&got, &[2, 3], &SOFTMAX_WANT, F32_TOL);
        let v = got.as_f32().unwrap();
        for row in v.chunks(3) {
            assert!(
                (row.iter().sum::<f32>() - 1.0).abs() < 1e-6,
                "row {row:?} does not sum to 1"
            );
        }
    }
    // Large inputs do not overflow (max subtracted).
    let got = run1("Softmax", vec![feed(f32t(&[2], &[1000.0, 1000.0]))], vec![]);
    expect_f32(&got, &[2], &[0.5, 0.5], F32_TOL);
}

#[test]
fn log_softmax_last_axis() {
    // ln(1/8) = -3 ln 2, ln(1/4) = -2 ln 2, ln(5/8) = ln 5 - 3 ln 2, ln(1/3).
    let want = [
        -3.0 * LN_2,
        -2.0 * LN_2,
        5f64.ln() - 3.0 * LN_2,
        -(3f64.ln()),
        -(3f64.ln()),
        -(3f64.ln()),
    ]
    .map(|v| v as f32);
    let got = run1(
        "LogSoftmax",
        vec![feed(f32t(&[2, 3], &softmax_input()))],
        vec![],
    );
    expect_f32(&got, &[2, 3], &want, F32_TOL);
    let got = run1(
        "LogSoftmax",
        vec![feed(f32t(&[2], &[1000.0, 1000.0]))],
        vec![],
    );
    expect_f32(&got, &[2], &[-LN_2 as f32, -LN_2 as f32], F32_TOL);
}

#[test]
fn softmax_axis_0_columns_sum_to_one() {
    // [[0, 1], [ln 3, 1]]: column 0 exps 1, 3 -> 1/4, 3/4; column 1 equal -> 1/2, 1/2.
    let x = f32t(&[2, 2], &[0.0, 1.0, 3f64.ln() as f32, 1.0]);
    let got = run1("Softmax", vec![feed(x.clone())], vec![attr_i("axis", 0)]);
    expect_f32(&got, &[2, 2], &[0.25, 0.5, 0.75, 0.5], F32_TOL);
    let got = run1("LogSoftmax", vec![feed(x)], vec![attr_i("axis", 0)]);
    let (q, h) = ((-2.0 * LN_2) as f32, -LN_2 as f32);
    expect_f32(
        &got,
        &[2, 2],
        &[q, h, (3f64.ln() - 2.0 * LN_2) as f32, h],
        F32_TOL,
    );
}

/// [2, 2, 2]: batch 0 all zero; batch 1 = [[0, ln 2], [ln 2, ln 4]] (exps 1, 2, 2, 4).
fn legacy_input() -> engine::Tensor {
    let (l2, l4) = (LN_2 as f32, (2.0 * LN_2) as f32);
    f32t(&[2, 2, 2], &[0.0, 0.0, 0.0, 0.0, 0.0, l2, l2, l4])
}

#[test]
fn softmax_legacy_opset_11_flattens() {
    // Opset 11, default axis 1: each batch is flattened to 4 values. Batch 1: 1/9, 2/9, 2/9, 4/9.
    let want = [
        0.25,
        0.25,
        0.25,
        0.25,
        1.0 / 9.0,
        2.0 / 9.0,
        2.0 / 9.0,
        4.0 / 9.0,
    ];
    let got = run1_opset("Softmax", vec![feed(legacy_input())], vec![], 11);
    expect_f32(&got, &[2, 2, 2], &want, F32_TOL);
    let got = run1_opset(
        "Softmax",
        vec![feed(legacy_input())],
        vec![attr_i("axis", 1)],
        11,
    );
    expect_f32(&got, &[2, 2, 2], &want, F32_TOL);
    // Opset 13, axis 1: softmax over axis 1 only. Batch 1, k = 0: (0, ln 2) -> 1/3, 2/3;
    // k = 1: (ln 2, ln 4) -> 1/3, 2/3.
    let got = run1_opset(
        "Softmax",
        vec![feed(legacy_input())],
        vec![attr_i("axis", 1)],
        13,
    );
    expect_f32(
        &got,
        &[2, 2, 2],
        &[
            0.5,
            0.5,
            0.5,
            0.5,
            1.0 / 3.0,
            1.0 / 3.0,
            2.0 / 3.0,
            2.0 / 3.0,
        ],
        F32_TOL,
    );
    // Opset 11, axis 0: all 8 values together; exps 1 x 5, 2, 2, 4 (sum 13).
    let t = 1.0 / 13.0;
    let got = run1_opset(
        "Softmax",
        vec![feed(legacy_input())],
        vec![attr_i("axis", 0)],
        11,
    );
    expect_f32(
        &got,
        &[2, 2, 2],
        &[t, t, t, t, t, 2.0 * t, 2.0 * t, 4.0 * t],
        F32_TOL,
    );
    // LogSoftmax legacy: ln of the first case.
    let want_log: Vec<f32> = want.iter().map(|&v| (v as f64).ln() as f32).collect();
    let got = run1_opset("LogSoftmax", vec![feed(legacy_input())], vec![], 11);
    expect_f32(&got, &[2, 2, 2], &want_log, F32_TOL);
}

// =============================================================================================
// MatMul, Gemm

/// A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]], A B = [[58, 64], [139, 154]].
fn mat_a() -> engine::Tensor {
    f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

fn mat_b() -> engine::Tensor {
    f32t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0])
}

const AB: [f32; 4] = [58.0, 64.0, 139.0, 154.0];

fn matmul_on(threads: usize, a: engine::Tensor, b: engine::Tensor) -> engine::Tensor {
    let mut out = run_node_threads(
        threads,
        "MatMul",
        "",
        vec![feed(a), feed(b)],
        vec![],
        1,
        OPSET,
    )
    .unwrap_or_else(|e| panic!("MatMul: {e}"));
    out.remove(0)
}

#[test]
fn matmul_2d_batched_and_1d() {
    for threads in [1, 2] {
        eprintln!("case threads {threads}");
        expect_f32(&matmul_on(threads, mat_a(), mat_b()), &[2, 2], &AB, EXACT);
        // [2, 1, 1, 2] x [3, 2, 1] -> [2, 3, 1, 1]: out[i, j] = a_i . b_j with a = (1, 2), (3, 4)
        // and b = (1, 0), (0, 1), (1, 1).
        let a = f32t(&[2, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = f32t(&[3, 2, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        expect_f32(
            &matmul_on(threads, a, b),
            &[2, 3, 1, 1],
            &[1.0, 2.0, 3.0, 3.0, 4.0, 7.0],
            EXACT,
        );
        // [2, 2, 2] x [2, 2] (B broadcast): [[1, 2], [3, 4]] B = [[1, 3], [3, 7]],
        // [[0, 1], [1, 0]] B = [[0, 1], [1, 1]] with B = [[1, 1], [0, 1]].
        let a = f32t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 1.0, 0.0]);
        let b = f32t(&[2, 2], &[1.0, 1.0, 0.0, 1.0]);
        expect_f32(
            &matmul_on(threads, a, b),
            &[2, 2, 2],
            &[1.0, 3.0, 3.0, 7.0, 0.0, 1.0, 1.0, 1.0],
            EXACT,
        );
        // 1-D x 2-D: [1, 2, 3] B = [58, 64] (shape [2]).
        expect_f32(
            &matmul_on(threads, f32t(&[3], &[1.0, 2.0, 3.0]), mat_b()),
            &[2],
            &[58.0, 64.0],
            EXACT,
        );
        // 2-D x 1-D: A [1, 0, -1] = [-2, -2].
        expect_f32(
            &matmul_on(threads, mat_a(), f32t(&[3], &[1.0, 0.0, -1.0])),
            &[2],
            &[-2.0, -2.0],
            EXACT,
        );
        // 1-D x 1-D: dot product 4 + 10 + 18 = 32, shape [].
        let got = matmul_on(
            threads,
            f32t(&[3], &[1.0, 2.0, 3.0]),
            f32t(&[3], &[4.0, 5.0, 6.0]),
        );
        expect_f32(&got, &[], &[32.0], EXACT);
        // 1-D x 3-D: [1, 1] x [[1, 2], [3, 4]] = [4, 6]; x [[5, 6], [7, 8]] = [12, 14].
        let b = f32t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        expect_f32(
            &matmul_on(threads, f32t(&[2], &[1.0, 1.0]), b),
            &[2, 2],
            &[4.0, 6.0, 12.0, 14.0],
            EXACT,
        );
        // Integers.
        let got = matmul_on(threads, i64t(&[1, 2], &[2, 3]), i64t(&[2, 1], &[4, -5]));
        expect_i64(&got, &[1, 1], &[-7]);
    }
}

#[test]
fn matmul_large_enough_to_run_in_parallel() {
    // Integer-valued data in [-3, 3]: every partial sum is an exact f32, so threads 1 and 2 must
    // agree with the schoolbook product exactly.
    for (m, k, n, batch) in [
        (96, 80, 72, 1),
        (8, 16, 8, 4),
        (1, 512, 256, 1),
        (130, 3, 5, 1),
    ] {
        let a = small_ints(batch * m * k, 1, 3);
        let b = small_ints(k * n, 2, 3);
        let mut want = Vec::with_capacity(batch * m * n);
        for i in 0..batch {
            want.extend(naive_matmul(&a[i * m * k..(i + 1) * m * k], &b, m, k, n));
        }
        let a_shape: Vec<usize> = if batch == 1 {
            vec![m, k]
        } else {
            vec![batch, m, k]
        };
        let out_shape: Vec<usize> = if batch == 1 {
            vec![m, n]
        } else {
            vec![batch, m, n]
        };
        for threads in [1, 2] {
            eprintln!("case [{batch}, {m}, {k}] x [{k}, {n}] on {threads} threads");
            let got = matmul_on(threads, f32t(&a_shape, &a), f32t(&[k, n], &b));
            expect_f32(&got, &out_shape, &want, EXACT);
        }
    }
}

fn gemm_on(threads: usize, args: Vec<Arg>, attrs: Vec<onnx_pb::AttributeProto>) -> engine::Tensor {
    let mut out = run_node_threads(threads, "Gemm", "", args, attrs, 1, OPSET)
        .unwrap_or_else(|e| panic!("Gemm: {e}"));
    out.remove(0)
}

#[test]
fn gemm_trans_alpha_beta_and_c_broadcast() {
    let at = f32t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // A transposed
    let bt = f32t(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]); // B transposed
    for threads in [1, 2] {
        eprintln!("case threads {threads}");
        // No C.
        expect_f32(
            &gemm_on(threads, vec![feed(mat_a()), feed(mat_b())], vec![]),
            &[2, 2],
            &AB,
            EXACT,
        );
        // 2 A B + 0.5 [2, 4] (row broadcast) = 2 A B + [1, 2].
        let got = gemm_on(
            threads,
            vec![feed(mat_a()), feed(mat_b()), feed(f32t(&[2], &[2.0, 4.0]))],
            vec![attr_f("alpha", 2.0), attr_f("beta", 0.5)],
        );
        expect_f32(&got, &[2, 2], &[117.0, 130.0, 279.0, 310.0], EXACT);
        // transA and transB, C a column [[1], [2]].
        let got = gemm_on(
            threads,
            vec![
                feed(at.clone()),
                feed(bt.clone()),
                init(f32t(&[2, 1], &[1.0, 2.0])),
            ],
            vec![attr_i("transA", 1), attr_i("transB", 1)],
        );
        expect_f32(&got, &[2, 2], &[59.0, 65.0, 141.0, 156.0], EXACT);
        // transA only; scalar C with beta -1: A B - 10.
        let got = gemm_on(
            threads,
            vec![feed(at.clone()), feed(mat_b()), feed(sf32(10.0))],
            vec![attr_i("transA", 1), attr_f("beta", -1.0)],
        );
        expect_f32(&got, &[2, 2], &[48.0, 54.0, 129.0, 144.0], EXACT);
        // transB only; full C with alpha 0.5: A B / 2 + 1.
        let got = gemm_on(
            threads,
            vec![
                feed(mat_a()),
                feed(bt.clone()),
                feed(f32t(&[2, 2], &[1.0, 1.0, 1.0, 1.0])),
            ],
            vec![attr_i("transB", 1), attr_f("alpha", 0.5)],
        );
        expect_f32(&got, &[2, 2], &[30.0, 33.0, 70.5, 78.0], EXACT);
    }
}

#[test]
fn gemm_large_with_trans_b_on_two_threads() {
    // Y = 2 A B^T' - C where B^T' is given transposed; exact integer arithmetic.
    let (m, k, n) = (96, 80, 72);
    let a = small_ints(m * k, 3, 2);
    let b = small_ints(k * n, 4, 2);
    let mut b_t = vec![0.0; n * k];
    for p in 0..k {
        for j in 0..n {
            b_t[j * k + p] = b[p * n + j];
        }
    }
    let c = small_ints(n, 5, 9);
    let ab = naive_matmul(&a, &b, m, k, n);
    let want: Vec<f32> = ab
        .iter()
        .enumerate()
        .map(|(i, &v)| 2.0 * v - c[i % n])
        .collect();
    for threads in [1, 2] {
        eprintln!("case threads {threads}");
        let got = gemm_on(
            threads,
            vec![
                feed(f32t(&[m, k], &a)),
                init(f32t(&[n, k], &b_t)),
                init(f32t(&[n], &c)),
            ],
            vec![
                attr_i("transB", 1),
                attr_f("alpha", 2.0),
                attr_f("beta", -1.0),
            ],
        );
        expect_f32(&got, &[m, n], &want, EXACT);
    }
}

#[test]
fn matmul_inner_dim_mismatch_names_node() {
    let err = run1_err("MatMul", vec![feed(mat_a()), feed(mat_a())], vec![]);
    assert!(
        err.contains(&node_name("MatMul")) && err.contains("[2, 3]"),
        "{err}"
    );
    let err = run1_err(
        "Gemm",
        vec![feed(f32t(&[3], &[1.0, 2.0, 3.0])), feed(mat_b())],
        vec![],
    );
    assert!(err.contains(&node_name("Gemm")), "{err}");
}

// =============================================================================================
// Gather, Reshape, Transpose, Concat

/// The executor takes its inputs by name in any order (in the graph's order it finds each at its
/// own index); a missing one and one the graph does not have are errors naming it.
#[test]
fn graph_inputs_are_matched_by_name_in_any_order() {
    let (a, b) = (f32t(&[2], &[1.0, 2.0]), f32t(&[2], &[10.0, 20.0]));
    let mut g = Graph::new(17);
    g.feed("a", a.clone())
        .feed("b", b.clone())
        .node("sub", "Sub", "", &["a", "b"], &["y"], vec![])
        .output("y");
    let want = [-9.0, -18.0];
    for feeds in [
        vec![("a", a.clone()), ("b", b.clone())],
        vec![("b", b.clone()), ("a", a.clone())],
    ] {
        expect_f32(&g.run_feeds(&feeds).unwrap()[0], &[2], &want, 0.0);
    }
    let err = g.run_feeds(&[("a", a.clone())]).unwrap_err().to_string();
    assert!(
        err.contains("graph input \"b\" was not given a value"),
        "{err}"
    );
    let err = g
        .run_feeds(&[("a", a.clone()), ("b", b.clone()), ("c", b.clone())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"c\" is not a graph input"), "{err}");
    let err = g.run_feeds(&[("a", a), ("c", b)]).unwrap_err().to_string();
    assert!(
        err.contains("graph input \"b\" was not given a value"),
        "{err}"
    );
}

/// A Transpose of the last two axes read only by a MatMul is fused into it (one step fewer,
/// the same bits); read by anything else too, or with another perm, it is left alone; an
/// error in the fused step names both nodes.
#[test]
fn transpose_into_matmul_is_fused_only_where_nothing_else_sees_it() {
    let q = iota(&[2, 1, 3]);
    let k: Vec<f32> = (0..2 * 5 * 3)
        .map(|i| ((i * 7) % 11) as f32 - 4.5)
        .collect();
    let k = f32t(&[2, 5, 3], &k);
    let graph = |perm: &[i64], also_output: bool, k: Tensor| {
        let mut g = Graph::new(17);
        g.feed("q", q.clone())
            .feed("k", k)
            .node(
                "kt",
                "Transpose",
                "",
                &["k"],
                &["k_t"],
                vec![attr_ints("perm", perm)],
            )
            .node("qk", "MatMul", "", &["q", "k_t"], &["s"], vec![])
            .output("s");
        if also_output {
            g.output("k_t");
        }
        g
    };
    let fused = graph(&[0, 2, 1], false, k.clone());
    let kept = graph(&[0, 2, 1], true, k.clone());
    assert_eq!(fused.plan_steps().unwrap(), 1);
    assert_eq!(kept.plan_steps().unwrap(), 2);
    for threads in [1, 2] {
        let a = fused.run(threads).unwrap();
        let b = kept.run(threads).unwrap();
        let bits = |t: &Tensor| {
            t.to_f32_vec()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(a[0].shape(), &[2, 1, 5]);
        assert_eq!(bits(&a[0]), bits(&b[0]), "{threads} threads");
        // Worked by hand for batch 0, key 0: q = [0, 1, 2], k[0][0] = [-4.5, 2.5, -1.5].
        assert_eq!(a[0].to_f32_vec()[0], 0.0 * -4.5 + 1.0 * 2.5 + 2.0 * -1.5);
    }
    // Another perm over three axes is a different matrix: not fused.
    let k3 = f32t(&[3, 5, 2], &(0..30).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(graph(&[2, 1, 0], false, k3).plan_steps().unwrap(), 2);
    // The fused step's error names the MatMul and the Transpose it absorbed.
    let bad = graph(&[0, 2, 1], false, f32t(&[2, 5, 4], &[0.5; 40]));
    let err = bad.run(1).unwrap_err().to_string();
    assert!(
        err.contains("qk") && err.contains("kt") && err.contains("inner dims 3 vs 4"),
        "{err}"
    );
}

#[test]
fn gather_axis_0_negative_and_scalar_indices() {
    let data = || f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Rows -1 (= 2) and 0.
    let got = run1(
        "Gather",
        vec![feed(data()), feed(i64t(&[2], &[-1, 0]))],
        vec![],
    );
    expect_f32(&got, &[2, 2], &[5.0, 6.0, 1.0, 2.0], EXACT);
    // 2-D indices: output shape [2, 2, 2].
    let got = run1(
        "Gather",
        vec![feed(data()), init(i64t(&[2, 2], &[0, 1, 1, 2]))],
        vec![],
    );
    expect_f32(
        &got,
        &[2, 2, 2],
        &[1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 6.0],
        EXACT,
    );
    // Scalar index drops the axis.
    let got = run1("Gather", vec![feed(data()), feed(si64(1))], vec![]);
    expect_f32(&got, &[2], &[3.0, 4.0], EXACT);
    // i32 indices.
    let got = run1(
        "Gather",
        vec![feed(data()), feed(i32t(&[1], &[-3]))],
        vec![],
    );
    expect_f32(&got, &[1, 2], &[1.0, 2.0], EXACT);
}

#[test]
fn gather_axis_1() {
    // [[1, 2, 3], [4, 5, 6]], columns 2 and -3 (= 0).
    let got = run1(
        "Gather",
        vec![feed(m23()), feed(i64t(&[2], &[2, -3]))],
        vec![attr_i("axis", 1)],
    );
    expect_f32(&got, &[2, 2], &[3.0, 1.0, 6.0, 4.0], EXACT);
    let got = run1(
        "Gather",
        vec![feed(m23()), feed(si64(-1))],
        vec![attr_i("axis", -1)],
    );
    expect_f32(&got, &[2], &[3.0, 6.0], EXACT);
    // i64 data (shape arithmetic).
    let got = run1(
        "Gather",
        vec![feed(i64t(&[3], &[2, 3, 4])), init(si64(0))],
        vec![],
    );
    expect_i64(&got, &[], &[2]);
}

#[test]
fn reshape_zero_minus_one_allowzero() {
    let x = || iota(&[2, 3, 4]);
    let all: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let got = run1(
        "Reshape",
        vec![feed(x()), init(i64t(&[2], &[0, -1]))],
        vec![],
    );
    expect_f32(&got, &[2, 12], &all, EXACT);
    let got = run1(
        "Reshape",
        vec![feed(x()), feed(i64t(&[2], &[-1, 2]))],
        vec![],
    );
    expect_f32(&got, &[12, 2], &all, EXACT);
    // 0 copies dim 1 (3).
    let got = run1(
        "Reshape",
        vec![feed(x()), feed(i64t(&[3], &[4, 0, 2]))],
        vec![],
    );
    expect_f32(&got, &[4, 3, 2], &all, EXACT);
    let got = run1("Reshape", vec![feed(x()), feed(i64t(&[1], &[-1]))], vec![]);
    expect_f32(&got, &[24], &all, EXACT);
    // allowzero = 1: 0 is a real zero-size dim.
    let empty = f32t(&[0, 4], &[]);
    let got = run1(
        "Reshape",
        vec![feed(empty), feed(i64t(&[2], &[4, 0]))],
        vec![attr_i("allowzero", 1)],
    );
    expect_f32(&got, &[4, 0], &[], EXACT);
    // Two -1: error naming the node.
    let err = run1_err(
        "Reshape",
        vec![feed(x()), feed(i64t(&[2], &[-1, -1]))],
        vec![],
    );
    assert!(err.contains(&node_name("Reshape")), "{err}");
}

#[test]
fn transpose_default_and_perm() {
    let got = run1("Transpose", vec![feed(m23())], vec![]);
    expect_f32(&got, &[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], EXACT);
    // Default reverses: x[0, j, k] = 3j + k -> out[k, j, 0].
    let got = run1("Transpose", vec![feed(iota(&[1, 2, 3]))], vec![]);
    expect_f32(&got, &[3, 2, 1], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0], EXACT);
    // x[i, j, k] = 4i + 2j + k, perm [2, 0, 1]: out[a, b, c] = x[b, c, a] = 4b + 2c + a.
    let got = run1(
        "Transpose",
        vec![feed(iota(&[2, 2, 2]))],
        vec![attr_ints("perm", &[2, 0, 1])],
    );
    expect_f32(
        &got,
        &[2, 2, 2],
        &[0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0],
        EXACT,
    );
    // perm [1, 0, 2] on [2, 3, 1].
    let got = run1(
        "Transpose",
        vec![feed(iota(&[2, 3, 1]))],
        vec![attr_ints("perm", &[1, 0, 2])],
    );
    expect_f32(&got, &[3, 2, 1], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0], EXACT);
}

#[test]
fn concat_negative_axis_and_empty_input() {
    // [[1], [2]] ++ [[3, 4], [5, 6]] on axis -1.
    let got = run1(
        "Concat",
        vec![
            feed(f32t(&[2, 1], &[1.0, 2.0])),
            feed(f32t(&[2, 2], &[3.0, 4.0, 5.0, 6.0])),
        ],
        vec![attr_i("axis", -1)],
    );
    expect_f32(&got, &[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0], EXACT);
    // Axis 0 with an empty middle input, i64 (shape arithmetic).
    let got = run1(
        "Concat",
        vec![
            feed(i64t(&[2], &[1, 2])),
            init(i64t(&[0], &[])),
            feed(i64t(&[1], &[3])),
        ],
        vec![attr_i("axis", 0)],
    );
    expect_i64(&got, &[3], &[1, 2, 3]);
    // Axis -2 of [1, 2] and [2, 2].
    let got = run1(
        "Concat",
        vec![feed(f32t(&[1, 2], &[1.0, 2.0])), feed(iota(&[2, 2]))],
        vec![attr_i("axis", -2)],
    );
    expect_f32(&got, &[3, 2], &[1.0, 2.0, 0.0, 1.0, 2.0, 3.0], EXACT);
}

// =============================================================================================
// Slice, Split

/// x[i, j] = 4i + j, shape [3, 4].
fn x34() -> engine::Tensor {
    iota(&[3, 4])
}

fn slice(args: Vec<Arg>) -> engine::Tensor {
    run1("Slice", args, vec![])
}

#[test]
fn slice_negative_starts_and_clamped_ends() {
    // Columns -2.. (100 clamps to 4).
    let got = slice(vec![
        feed(x34()),
        init(i64t(&[1], &[-2])),
        init(i64t(&[1], &[100])),
        init(i64t(&[1], &[1])),
    ]);
    expect_f32(&got, &[3, 2], &[2.0, 3.0, 6.0, 7.0, 10.0, 11.0], EXACT);
    // Axes omitted: starts/ends for axes 0, 1 -> rows 1..3, columns 0..-1.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[2], &[1, 0])),
        feed(i64t(&[2], &[3, -1])),
    ]);
    expect_f32(&got, &[2, 3], &[4.0, 5.0, 6.0, 8.0, 9.0, 10.0], EXACT);
    // Negative axis -2 = rows.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[1], &[1])),
        feed(i64t(&[1], &[2])),
        feed(i64t(&[1], &[-2])),
    ]);
    expect_f32(&got, &[1, 4], &[4.0, 5.0, 6.0, 7.0], EXACT);
    // Starts below -dim clamp to 0; i64::MAX ends (what exporters write for "to the end").
    let got = slice(vec![
        feed(i64t(&[4], &[5, 6, 7, 8])),
        init(i64t(&[1], &[-100])),
        init(i64t(&[1], &[i64::MAX])),
    ]);
    expect_i64(&got, &[4], &[5, 6, 7, 8]);
    // i32 starts/ends are allowed too.
    let got = slice(vec![
        feed(x34()),
        init(i32t(&[1], &[1])),
        init(i32t(&[1], &[-1])),
        init(i32t(&[1], &[1])),
    ]);
    expect_f32(&got, &[3, 2], &[1.0, 2.0, 5.0, 6.0, 9.0, 10.0], EXACT);
    // Empty result: start 3 > end 1.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[1], &[3])),
        feed(i64t(&[1], &[1])),
        feed(i64t(&[1], &[1])),
    ]);
    expect_f32(&got, &[3, 0], &[], EXACT);
}

#[test]
fn slice_steps() {
    // Step -1 from the last column to before the first (end -100 clamps to -1): reversed columns.
    let got = slice(vec![
        feed(x34()),
        init(i64t(&[1], &[-1])),
        init(i64t(&[1], &[-100])),
        init(i64t(&[1], &[1])),
        init(i64t(&[1], &[-1])),
    ]);
    expect_f32(
        &got,
        &[3, 4],
        &[3.0, 2.0, 1.0, 0.0, 7.0, 6.0, 5.0, 4.0, 11.0, 10.0, 9.0, 8.0],
        EXACT,
    );
    // i64::MIN as end, the ONNX idiom for reversing.
    let got = slice(vec![
        feed(i64t(&[3], &[1, 2, 3])),
        init(i64t(&[1], &[-1])),
        init(i64t(&[1], &[i64::MIN])),
        init(i64t(&[1], &[0])),
        init(i64t(&[1], &[-1])),
    ]);
    expect_i64(&got, &[3], &[3, 2, 1]);
    // Step 2 on both axes with axes omitted (empty name): rows 0, 2; columns 1, 3.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[2], &[0, 1])),
        feed(i64t(&[2], &[3, 4])),
        Arg::Skip,
        feed(i64t(&[2], &[2, 2])),
    ]);
    expect_f32(&got, &[2, 2], &[1.0, 3.0, 9.0, 11.0], EXACT);
    // Step -2 with a start past the end (10 clamps to 2): rows 2, 0.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[1], &[10])),
        feed(i64t(&[1], &[-10])),
        feed(i64t(&[1], &[0])),
        feed(i64t(&[1], &[-2])),
    ]);
    expect_f32(
        &got,
        &[2, 4],
        &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0],
        EXACT,
    );
    // Step 3 with an end that is not a multiple: columns 0, 3.
    let got = slice(vec![
        feed(x34()),
        feed(i64t(&[1], &[0])),
        feed(i64t(&[1], &[4])),
        feed(i64t(&[1], &[1])),
        feed(i64t(&[1], &[3])),
    ]);
    expect_f32(&got, &[3, 2], &[0.0, 3.0, 4.0, 7.0, 8.0, 11.0], EXACT);
}

#[test]
fn slice_negative_step_on_empty_axis() {
    // A zero-size axis sliced backwards is still empty; bad input must never panic.
    let got = slice(vec![
        feed(f32t(&[0, 2], &[])),
        feed(i64t(&[1], &[-1])),
        feed(i64t(&[1], &[i64::MIN])),
        feed(i64t(&[1], &[0])),
        feed(i64t(&[1], &[-1])),
    ]);
    expect_f32(&got, &[0, 2], &[], EXACT);
}

#[test]
fn split_input_equal_and_num_outputs() {
    let x6 = || f32t(&[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Split sizes as an input (opset 13+).
    let out = run_node(
        "Split",
        "",
        vec![feed(x6()), init(i64t(&[2], &[2, 4]))],
        vec![],
        2,
        13,
    )
    .unwrap();
    expect_f32(&out[0], &[2], &[1.0, 2.0], EXACT);
    expect_f32(&out[1], &[4], &[3.0, 4.0, 5.0, 6.0], EXACT);
    // Equal split by the number of outputs.
    let out = run_node("Split", "", vec![feed(x6())], vec![], 3, 13).unwrap();
    assert_eq!(out.len(), 3);
    for (i, t) in out.iter().enumerate() {
        let v = (2 * i) as f32;
        expect_f32(t, &[2], &[v + 1.0, v + 2.0], EXACT);
    }
    // Opset 18 num_outputs, uneven: 7 = 3 + 3 + 1 (ceil(7 / 3) = 3, the last chunk smaller).
    let out = run_node(
        "Split",
        "",
        vec![feed(iota(&[7]))],
        vec![attr_i("num_outputs", 3)],
        3,
        18,
    )
    .unwrap();
    expect_f32(&out[0], &[3], &[0.0, 1.0, 2.0], EXACT);
    expect_f32(&out[1], &[3], &[3.0, 4.0, 5.0], EXACT);
    expect_f32(&out[2], &[1], &[6.0], EXACT);
    // Opset 11: split attribute, negative axis on [[1, 2, 3], [4, 5, 6]].
    let out = run_node(
        "Split",
        "",
        vec![feed(m23())],
        vec![attr_i("axis", -1), attr_ints("split", &[1, 2])],
        2,
        11,
    )
    .unwrap();
    expect_f32(&out[0], &[2, 1], &[1.0, 4.0], EXACT);
    expect_f32(&out[1], &[2, 2], &[2.0, 3.0, 5.0, 6.0], EXACT);
    // Sizes that do not add up: error naming the node.
    let err = run_node(
        "Split",
        "",
        vec![feed(x6()), init(i64t(&[2], &[2, 3]))],
        vec![],
        2,
        13,
    )
    .unwrap_err();
    assert!(err.to_string().contains(&node_name("Split")), "{err}");
}

// =============================================================================================
// Squeeze, Unsqueeze, Flatten, Expand, Tile

#[test]
fn squeeze_and_unsqueeze() {
    let x = || iota(&[1, 3, 1, 2]);
    let all: Vec<f32> = (0..6).map(|i| i as f32).collect();
    // Axes input with negative axes (opset 13+).
    let got = run1(
        "Squeeze",
        vec![feed(x()), init(i64t(&[2], &[-2, 0]))],
        vec![],
    );
    expect_f32(&got, &[3, 2], &all, EXACT);
    // No axes: every 1.
    let got = run1("Squeeze", vec![feed(x())], vec![]);
    expect_f32(&got, &[3, 2], &all, EXACT);
    // Opset 11: axes attribute.
    let got = run1_opset(
        "Squeeze",
        vec![feed(x())],
        vec![attr_ints("axes", &[0])],
        11,
    );
    expect_f32(&got, &[3, 1, 2], &all, EXACT);
    // Squeezing a non-1 axis is an error.
    let err = run1_err("Squeeze", vec![feed(x()), init(i64t(&[1], &[1]))], vec![]);
    assert!(err.contains(&node_name("Squeeze")), "{err}");

    // Unsqueeze [3] at 0 and -1 (of the rank-3 output) -> [1, 3, 1].
    let got = run1(
        "Unsqueeze",
        vec![feed(iota(&[3])), init(i64t(&[2], &[0, -1]))],
        vec![],
    );
    expect_f32(&got, &[1, 3, 1], &[0.0, 1.0, 2.0], EXACT);
    // [2, 3] at -1 and 1 -> [2, 1, 3, 1].
    let got = run1(
        "Unsqueeze",
        vec![feed(iota(&[2, 3])), feed(i64t(&[2], &[-1, 1]))],
        vec![],
    );
    expect_f32(&got, &[2, 1, 3, 1], &all, EXACT);
    // Scalar -> [1].
    let got = run1(
        "Unsqueeze",
        vec![feed(si64(5)), init(i64t(&[1], &[0]))],
        vec![],
    );
    expect_i64(&got, &[1], &[5]);
    // Opset 11: axes attribute.
    let got = run1_opset(
        "Unsqueeze",
        vec![feed(iota(&[3]))],
        vec![attr_ints("axes", &[1])],
        11,
    );
    expect_f32(&got, &[3, 1], &[0.0, 1.0, 2.0], EXACT);
}

#[test]
fn flatten_axes() {
    let all: Vec<f32> = (0..24).map(|i| i as f32).collect();
    for (axis, shape) in [
        (None, [2, 12]),
        (Some(0), [1, 24]),
        (Some(-1), [6, 4]),
        (Some(3), [24, 1]),
        (Some(2), [6, 4]),
    ] {
        eprintln!("case axis {axis:?}");
        let attrs = axis.map(|a| vec![attr_i("axis", a)]).unwrap_or_default();
        expect_f32(
            &run1("Flatten", vec![feed(iota(&[2, 3, 4]))], attrs),
            &shape,
            &all,
            EXACT,
        );
    }
}

#[test]
fn expand_bidirectional() {
    // [3, 1] to [2, 1, 4] -> [2, 3, 4]: out[a, i, j] = x[i].
    let got = run1(
        "Expand",
        vec![
            feed(f32t(&[3, 1], &[1.0, 2.0, 3.0])),
            init(i64t(&[3], &[2, 1, 4])),
        ],
        vec![],
    );
    let block: Vec<f32> = [1.0f32, 2.0, 3.0].iter().flat_map(|&v| [v; 4]).collect();
    expect_f32(&got, &[2, 3, 4], &[block.clone(), block].concat(), EXACT);
    // [2, 1] to [1, 3] -> [2, 3].
    let got = run1(
        "Expand",
        vec![feed(f32t(&[2, 1], &[5.0, 6.0])), feed(i64t(&[2], &[1, 3]))],
        vec![],
    );
    expect_f32(&got, &[2, 3], &[5.0, 5.0, 5.0, 6.0, 6.0, 6.0], EXACT);
    // A shorter shape of 1 keeps the input's shape.
    let got = run1("Expand", vec![feed(m23()), feed(i64t(&[1], &[1]))], vec![]);
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
    // Scalar to [2].
    let got = run1(
        "Expand",
        vec![feed(si64(7)), feed(i64t(&[1], &[2]))],
        vec![],
    );
    expect_i64(&got, &[2], &[7, 7]);
    // Incompatible: [3] to [2].
    let err = run1_err(
        "Expand",
        vec![feed(iota(&[3])), feed(i64t(&[1], &[2]))],
        vec![],
    );
    assert!(err.contains(&node_name("Expand")), "{err}");
}

#[test]
fn tile() {
    let x = || f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let got = run1("Tile", vec![feed(x()), init(i64t(&[2], &[1, 2]))], vec![]);
    expect_f32(
        &got,
        &[2, 4],
        &[1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0],
        EXACT,
    );
    let got = run1("Tile", vec![feed(x()), feed(i64t(&[2], &[2, 1]))], vec![]);
    expect_f32(
        &got,
        &[4, 2],
        &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0],
        EXACT,
    );
    let got = run1("Tile", vec![feed(x()), feed(i64t(&[2], &[2, 2]))], vec![]);
    expect_f32(
        &got,
        &[4, 4],
        &[
            1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0,
        ],
        EXACT,
    );
    let got = run1(
        "Tile",
        vec![feed(i64t(&[2], &[1, 2])), feed(i64t(&[1], &[3]))],
        vec![],
    );
    expect_i64(&got, &[6], &[1, 2, 1, 2, 1, 2]);
    let got = run1("Tile", vec![feed(x()), feed(i64t(&[2], &[0, 1]))], vec![]);
    expect_f32(&got, &[0, 2], &[], EXACT);
}

// =============================================================================================
// Shape, Size, Constant, ConstantOfShape, Range, Trilu, Identity, Dropout

#[test]
fn shape_with_start_and_end() {
    let x = || iota(&[2, 3, 4]);
    expect_i64(&run1("Shape", vec![feed(x())], vec![]), &[3], &[2, 3, 4]);
    expect_i64(
        &run1("Shape", vec![feed(x())], vec![attr_i("start", 1)]),
        &[2],
        &[3, 4],
    );
    expect_i64(
        &run1("Shape", vec![feed(x())], vec![attr_i("end", -1)]),
        &[2],
        &[2, 3],
    );
    expect_i64(
        &run1(
            "Shape",
            vec![feed(x())],
            vec![attr_i("start", -2), attr_i("end", -1)],
        ),
        &[1],
        &[3],
    );
    // Out-of-range start/end clamp.
    expect_i64(
        &run1(
            "Shape",
            vec![feed(x())],
            vec![attr_i("start", -10), attr_i("end", 10)],
        ),
        &[3],
        &[2, 3, 4],
    );
    expect_i64(
        &run1("Shape", vec![feed(x())], vec![attr_i("start", 5)]),
        &[0],
        &[],
    );
    expect_i64(&run1("Shape", vec![feed(sf32(1.0))], vec![]), &[0], &[]);
}

#[test]
fn size() {
    expect_i64(
        &run1("Size", vec![feed(iota(&[2, 3, 4]))], vec![]),
        &[],
        &[24],
    );
    expect_i64(&run1("Size", vec![feed(sf32(1.0))], vec![]), &[], &[1]);
    expect_i64(
        &run1("Size", vec![feed(f32t(&[3, 0], &[]))], vec![]),
        &[],
        &[0],
    );
}

#[test]
fn constant_value_forms() {
    let got = run1(
        "Constant",
        vec![],
        vec![attr_t("value", &f32t(&[2], &[1.5, -2.0]))],
    );
    expect_f32(&got, &[2], &[1.5, -2.0], EXACT);
    let got = run1(
        "Constant",
        vec![],
        vec![attr_t("value", &i64t(&[2, 1], &[3, 4]))],
    );
    expect_i64(&got, &[2, 1], &[3, 4]);
    let got = run1("Constant", vec![], vec![attr_f("value_float", 3.5)]);
    expect_f32(&got, &[], &[3.5], EXACT);
    let got = run1(
        "Constant",
        vec![],
        vec![attr_floats("value_floats", &[1.0, 2.5])],
    );
    expect_f32(&got, &[2], &[1.0, 2.5], EXACT);
    let got = run1("Constant", vec![], vec![attr_i("value_int", 7)]);
    expect_i64(&got, &[], &[7]);
    let got = run1(
        "Constant",
        vec![],
        vec![attr_ints("value_ints", &[1, 2, 3])],
    );
    expect_i64(&got, &[3], &[1, 2, 3]);
    // No value: error naming the node.
    let err = run1_err("Constant", vec![], vec![]);
    assert!(err.contains(&node_name("Constant")), "{err}");
}

#[test]
fn constant_feeding_a_runtime_node() {
    // c = Constant [10, 20]; y = x + c. The Constant is folded at plan time, the Add runs.
    let mut g = Graph::new(OPSET);
    g.feed("x", f32t(&[2], &[1.0, 2.0]))
        .node(
            "c",
            "Constant",
            "",
            &[],
            &["c_out"],
            vec![attr_t("value", &f32t(&[2], &[10.0, 20.0]))],
        )
        .node("add", "Add", "", &["x", "c_out"], &["y"], vec![])
        .output("y")
        .output("c_out");
    let out = g.run(1).unwrap();
    expect_f32(&out[0], &[2], &[11.0, 22.0], EXACT);
    expect_f32(&out[1], &[2], &[10.0, 20.0], EXACT);
}

#[test]
fn shape_arithmetic_chain() {
    // Shape -> Gather(0) -> Unsqueeze -> Concat with [-1] -> Reshape: x [2, 3, 4] -> [2, 12].
    let mut g = Graph::new(OPSET);
    g.feed("x", iota(&[2, 3, 4]))
        .init("zero", &si64(0))
        .init("axes0", &i64t(&[1], &[0]))
        .init("minus1", &i64t(&[1], &[-1]))
        .node("shape", "Shape", "", &["x"], &["s"], vec![])
        .node("gather", "Gather", "", &["s", "zero"], &["d0"], vec![])
        .node("unsq", "Unsqueeze", "", &["d0", "axes0"], &["d0v"], vec![])
        .node(
            "concat",
            "Concat",
            "",
            &["d0v", "minus1"],
            &["spec"],
            vec![attr_i("axis", 0)],
        )
        .node("reshape", "Reshape", "", &["x", "spec"], &["y"], vec![])
        .output("y")
        .output("spec");
    let out = g.run(1).unwrap();
    expect_f32(
        &out[0],
        &[2, 12],
        &(0..24).map(|i| i as f32).collect::<Vec<_>>(),
        EXACT,
    );
    expect_i64(&out[1], &[2], &[2, -1]);
}

#[test]
fn constant_of_shape() {
    // Default value: f32 zeros.
    let got = run1("ConstantOfShape", vec![feed(i64t(&[2], &[2, 3]))], vec![]);
    expect_f32(&got, &[2, 3], &[0.0; 6], EXACT);
    // Given value (a one-element tensor), i64.
    let got = run1(
        "ConstantOfShape",
        vec![feed(i64t(&[2], &[2, 3]))],
        vec![attr_t("value", &i64t(&[1], &[7]))],
    );
    expect_i64(&got, &[2, 3], &[7; 6]);
    let got = run1(
        "ConstantOfShape",
        vec![init(i64t(&[1], &[3]))],
        vec![attr_t("value", &f32t(&[1], &[-1.5]))],
    );
    expect_f32(&got, &[3], &[-1.5; 3], EXACT);
    // Empty shape: a scalar.
    let got = run1(
        "ConstantOfShape",
        vec![feed(i64t(&[0], &[]))],
        vec![attr_t("value", &f32t(&[1], &[2.0]))],
    );
    expect_f32(&got, &[], &[2.0], EXACT);
    // A zero dim.
    let got = run1("ConstantOfShape", vec![feed(i64t(&[2], &[0, 3]))], vec![]);
    expect_f32(&got, &[0, 3], &[], EXACT);
}

#[test]
fn range_int_float_negative_delta() {
    let range = |s: engine::Tensor, l: engine::Tensor, d: engine::Tensor| {
        run1("Range", vec![feed(s), feed(l), feed(d)], vec![])
    };
    // ceil((10 - 1) / 3) = 3 values.
    expect_i64(&range(si64(1), si64(10), si64(3)), &[3], &[1, 4, 7]);
    // ceil((4 - 10) / -2) = 3 values.
    expect_i64(&range(si64(10), si64(4), si64(-2)), &[3], &[10, 8, 6]);
    // Empty when the limit is behind the start.
    expect_i64(&range(si64(5), si64(1), si64(1)), &[0], &[]);
    expect_f32(
        &range(sf32(0.0), sf32(1.0), sf32(0.25)),
        &[4],
        &[0.0, 0.25, 0.5, 0.75],
        EXACT,
    );
    expect_f32(
        &range(sf32(1.0), sf32(-1.0), sf32(-0.5)),
        &[4],
        &[1.0, 0.5, 0.0, -0.5],
        EXACT,
    );
    // ceil(2.5 / 1) = 3 values.
    expect_f32(
        &range(sf32(0.5), sf32(3.0), sf32(1.0)),
        &[3],
        &[0.5, 1.5, 2.5],
        EXACT,
    );
    let got = run1(
        "Range",
        vec![
            feed(i32t(&[], &[0])),
            feed(i32t(&[], &[5])),
            feed(i32t(&[], &[2])),
        ],
        vec![],
    );
    expect_i32(&got, &[3], &[0, 2, 4]);
    // Delta 0: error, not an endless loop.
    let err = run1_err(
        "Range",
        vec![feed(si64(0)), feed(si64(5)), feed(si64(0))],
        vec![],
    );
    assert!(err.contains(&node_name("Range")), "{err}");
}

#[test]
fn trilu_upper_lower_k_and_batch() {
    let x = || f32t(&[3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    // Default: upper, k = 0.
    let got = run1("Trilu", vec![feed(x())], vec![]);
    expect_f32(
        &got,
        &[3, 3],
        &[1.0, 2.0, 3.0, 0.0, 5.0, 6.0, 0.0, 0.0, 9.0],
        EXACT,
    );
    let got = run1("Trilu", vec![feed(x())], vec![attr_i("upper", 0)]);
    expect_f32(
        &got,
        &[3, 3],
        &[1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0],
        EXACT,
    );
    // k = 1 above the diagonal.
    let got = run1("Trilu", vec![feed(x()), init(si64(1))], vec![]);
    expect_f32(
        &got,
        &[3, 3],
        &[0.0, 2.0, 3.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0],
        EXACT,
    );
    // Lower, k = -1: strictly below.
    let got = run1(
        "Trilu",
        vec![feed(x()), feed(si64(-1))],
        vec![attr_i("upper", 0)],
    );
    expect_f32(
        &got,
        &[3, 3],
        &[0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 7.0, 8.0, 0.0],
        EXACT,
    );
    // Batch [2, 2, 3], lower k = 1: keep j <= i + 1 in each matrix.
    let got = run1(
        "Trilu",
        vec![
            feed(f32t(
                &[2, 2, 3],
                &(1..=12).map(|v| v as f32).collect::<Vec<_>>(),
            )),
            feed(si64(1)),
        ],
        vec![attr_i("upper", 0)],
    );
    expect_f32(
        &got,
        &[2, 2, 3],
        &[
            1.0, 2.0, 0.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.0, 10.0, 11.0, 12.0,
        ],
        EXACT,
    );
    // Non-square [3, 2], upper k = -1: keep j >= i - 1.
    let got = run1(
        "Trilu",
        vec![
            feed(f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
            feed(si64(-1)),
        ],
        vec![],
    );
    expect_f32(&got, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 0.0, 6.0], EXACT);
    // Integers (attention masks).
    let got = run1(
        "Trilu",
        vec![feed(i64t(&[2, 2], &[1, 1, 1, 1]))],
        vec![attr_i("upper", 0)],
    );
    expect_i64(&got, &[2, 2], &[1, 0, 1, 1]);
}

#[test]
fn identity_and_dropout() {
    expect_f32(
        &run1("Identity", vec![feed(m23())], vec![]),
        &[2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        EXACT,
    );
    expect_i64(
        &run1("Identity", vec![feed(i64t(&[2], &[4, 5]))], vec![]),
        &[2],
        &[4, 5],
    );
    expect_bool(
        &run1("Identity", vec![feed(boolt(&[1], &[true]))], vec![]),
        &[1],
        &[true],
    );
    // Inference Dropout is the identity, with or without a ratio.
    expect_f32(
        &run1("Dropout", vec![feed(m23())], vec![]),
        &[2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        EXACT,
    );
    let got = run1("Dropout", vec![feed(m23()), init(sf32(0.5))], vec![]);
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
    // Opset 11 ratio attribute.
    let got = run1_opset("Dropout", vec![feed(m23())], vec![attr_f("ratio", 0.3)], 11);
    expect_f32(&got, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], EXACT);
}

#[test]
fn dropout_mask_output_is_a_clear_error() {
    // The engine does not compute Dropout's mask; asking for it must say so, not return garbage.
    let err = run_node("Dropout", "", vec![feed(m23())], vec![], 2, OPSET)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&node_name("Dropout")) && err.contains("output 1"),
        "{err}"
    );
}

// =============================================================================================
// Normalisations

/// x = [[3, 4, 0, 0], [2, 2, 2, 2]]: mean squares 25/4 and 4, RMS 2.5 and 2.
fn rms_x() -> Vec<f32> {
    vec![3.0, 4.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0]
}

const RMS_SCALE: [f32; 4] = [1.0, 0.5, 2.0, -1.0];
/// x / rms * scale with epsilon 0: [1.2, 1.6, 0, 0] * scale and [1, 1, 1, 1] * scale.
const RMS_WANT: [f32; 8] = [1.2, 0.8, 0.0, -0.0, 1.0, 0.5, 2.0, -1.0];

#[test]
fn simplified_layer_norm_both_domains_and_rms_norm() {
    for (domain, op, opset) in [
        ("com.microsoft", "SimplifiedLayerNormalization", OPSET),
        ("", "SimplifiedLayerNormalization", OPSET),
        ("", "RMSNormalization", 23),
    ] {
        eprintln!("case {domain}:{op}");
        let out = run_node(
            op,
            domain,
            vec![feed(f32t(&[2, 4], &rms_x())), init(f32t(&[4], &RMS_SCALE))],
            vec![attr_f("epsilon", 0.0)],
            1,
            opset,
        )
        .unwrap();
        expect_f32(&out[0], &[2, 4], &RMS_WANT, F32_TOL);
        // epsilon matters: mean square 1 + eps 3 -> rms 2.
        let out = run_node(
            op,
            domain,
            vec![
                feed(f32t(&[1, 2], &[1.0, -1.0])),
                feed(f32t(&[2], &[1.0, 4.0])),
            ],
            vec![attr_f("epsilon", 3.0), attr_i("axis", -1)],
            1,
            opset,
        )
        .unwrap();
        expect_f32(&out[0], &[1, 2], &[0.5, -2.0], F32_TOL);
        // Default epsilon 1e-5: 1 / sqrt(1 + 1e-5).
        let out = run_node(
            op,
            domain,
            vec![feed(f32t(&[2], &[1.0, 1.0])), feed(f32t(&[2], &[1.0, 1.0]))],
            vec![],
            1,
            opset,
        )
        .unwrap();
        let v = (1.0 / (1.0 + 1e-5f64).sqrt()) as f32;
        expect_f32(&out[0], &[2], &[v, v], F32_TOL);
        // axis = 1 on [1, 2, 2]: normalise over the last two dims together: [[3, 4], [0, 0]] has
        // mean square 25/4.
        let out = run_node(
            op,
            domain,
            vec![
                feed(f32t(&[1, 2, 2], &[3.0, 4.0, 0.0, 0.0])),
                feed(f32t(&[2, 2], &[1.0, 1.0, 1.0, 1.0])),
            ],
            vec![attr_f("epsilon", 0.0), attr_i("axis", 1)],
            1,
            opset,
        )
        .unwrap();
        expect_f32(&out[0], &[1, 2, 2], &[1.2, 1.6, 0.0, 0.0], F32_TOL);
    }
}

#[test]
fn skip_simplified_layer_norm_with_bias_and_sum_output() {
    // x + skip + bias = [[3, 4, 0, 0], [2, 2, 2, 2]] (the rms_x rows).
    let x = f32t(&[1, 2, 4], &[1.0, 2.0, 0.0, -1.0, 0.0, 0.0, 2.0, 1.0]);
    let skip = f32t(&[1, 2, 4], &[1.0; 8]);
    let bias = f32t(&[4], &[1.0, 1.0, -1.0, 0.0]);
    let mut g = Graph::new(OPSET);
    g.feed("x", x.clone())
        .feed("skip", skip.clone())
        .init("gamma", &f32t(&[4], &RMS_SCALE))
        .init("bias", &bias)
        .node(
            "skipnorm",
            "SkipSimplifiedLayerNormalization",
            "com.microsoft",
            &["x", "skip", "gamma", "bias"],
            &["y", "", "", "sum"],
            vec![attr_f("epsilon", 0.0)],
        )
        .output("y")
        .output("sum");
    let out = g.run(1).unwrap();
    expect_f32(&out[0], &[1, 2, 4], &RMS_WANT, F32_TOL);
    expect_f32(&out[1], &[1, 2, 4], &rms_x(), EXACT);

    // Without bias, one output: x + skip = [[2, 3, 1, 0], [1, 1, 3, 2]]; row 0 mean square
    // (4 + 9 + 1 + 0) / 4 = 3.5, row 1 (1 + 1 + 9 + 4) / 4 = 3.75; gamma 1.
    let out = run_node(
        "SkipSimplifiedLayerNormalization",
        "com.microsoft",
        vec![feed(x), feed(skip), init(f32t(&[4], &[1.0; 4]))],
        vec![attr_f("epsilon", 0.0)],
        1,
        OPSET,
    )
    .unwrap();
    let (r0, r1) = (3.5f64.sqrt(), 3.75f64.sqrt());
    let want: Vec<f32> = [
        2.0 / r0,
        3.0 / r0,
        1.0 / r0,
        0.0,
        1.0 / r1,
        1.0 / r1,
        3.0 / r1,
        2.0 / r1,
    ]
    .iter()
    .map(|&v| v as f32)
    .collect();
    expect_f32(&out[0], &[1, 2, 4], &want, F32_TOL);
}

#[test]
fn skip_simplified_layer_norm_mean_output_is_a_clear_error() {
    let mut g = Graph::new(OPSET);
    g.feed("x", f32t(&[1, 2], &[1.0, 2.0]))
        .feed("skip", f32t(&[1, 2], &[1.0, 2.0]))
        .init("gamma", &f32t(&[2], &[1.0, 1.0]))
        .node(
            "skipnorm",
            "SkipSimplifiedLayerNormalization",
            "com.microsoft",
            &["x", "skip", "gamma"],
            &["y", "mean"],
            vec![],
        )
        .output("y")
        .output("mean");
    let err = g.run(1).unwrap_err().to_string();
    assert!(
        err.contains("skipnorm") && err.contains("output 1"),
        "{err}"
    );
}

#[test]
fn layer_normalization() {
    // Row [0, 0, 2, 2]: mean 1, variance 1 -> [-1, -1, 1, 1]. Row [-3, 3, -3, 3]: mean 0,
    // variance 9 -> [-1, 1, -1, 1]. Then * [1, 2, 3, 4] + [0.5, 0, 0, -1].
    let x = f32t(&[2, 4], &[0.0, 0.0, 2.0, 2.0, -3.0, 3.0, -3.0, 3.0]);
    let scale = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let bias = f32t(&[4], &[0.5, 0.0, 0.0, -1.0]);
    let got = run1(
        "LayerNormalization",
        vec![feed(x), init(scale), init(bias)],
        vec![attr_f("epsilon", 0.0)],
    );
    expect_f32(
        &got,
        &[2, 4],
        &[-0.5, -2.0, 3.0, 3.0, -0.5, 2.0, -3.0, 3.0],
        F32_TOL,
    );
    // No bias, default epsilon: [-1, 1] / sqrt(1 + 1e-5).
    let v = (1.0 / (1.0 + 1e-5f64).sqrt()) as f32;
    let got = run1(
        "LayerNormalization",
        vec![
            feed(f32t(&[1, 2], &[-1.0, 1.0])),
            init(f32t(&[2], &[1.0, 1.0])),
        ],
        vec![],
    );
    expect_f32(&got, &[1, 2], &[-v, v], F32_TOL);
    // axis = 1 on [1, 2, 2]: [[0, 0], [2, 2]] normalised together -> [-1, -1, 1, 1].
    let got = run1(
        "LayerNormalization",
        vec![
            feed(f32t(&[1, 2, 2], &[0.0, 0.0, 2.0, 2.0])),
            init(f32t(&[2, 2], &[1.0; 4])),
        ],
        vec![attr_i("axis", 1), attr_f("epsilon", 0.0)],
    );
    expect_f32(&got, &[1, 2, 2], &[-1.0, -1.0, 1.0, 1.0], F32_TOL);
    // f16 input stays f16.
    let got = run1(
        "LayerNormalization",
        vec![
            feed(f16t(&[1, 4], &[0.0, 0.0, 2.0, 2.0])),
            init(f16t(&[4], &[1.0, 2.0, 3.0, 4.0])),
        ],
        vec![attr_f("epsilon", 0.0)],
    );
    expect_float(&got, DType::F16, &[1, 4], &[-1.0, -2.0, 3.0, 4.0], F16_TOL);
}

// =============================================================================================
// f16 and bf16

#[test]
fn reduced_precision_add_matmul_softmax_rms_norm() {
    for (dtype, tol) in [(DType::F16, F16_TOL), (DType::BF16, BF16_TOL)] {
        eprintln!("case {dtype}");
        // Add with row broadcast.
        let a = float_t(dtype, &[2, 3], &[1.5, 2.25, -3.0, 0.1, 0.2, 0.3]);
        let b = float_t(dtype, &[3], &[1.0, 0.5, 0.25]);
        let got = run1("Add", vec![feed(a), feed(b)], vec![]);
        expect_float(
            &got,
            dtype,
            &[2, 3],
            &[2.5, 2.75, -2.75, 1.1, 0.7, 0.55],
            tol,
        );

        // MatMul: [[0.5, -1, 2], [0.25, 1.5, -0.75]] x [[1, 2], [0.5, -1], [4, 0.25]]
        // = [[0.5 - 0.5 + 8, 1 + 1 + 0.5], [0.25 + 0.75 - 3, 0.5 - 1.5 - 0.1875]].
        let a = float_t(dtype, &[2, 3], &[0.5, -1.0, 2.0, 0.25, 1.5, -0.75]);
        let b = float_t(dtype, &[3, 2], &[1.0, 2.0, 0.5, -1.0, 4.0, 0.25]);
        for threads in [1, 2] {
            let mut out = run_node_threads(
                threads,
                "MatMul",
                "",
                vec![feed(a.clone()), feed(b.clone())],
                vec![],
                1,
                OPSET,
            )
            .unwrap();
            expect_float(
                &out.remove(0),
                dtype,
                &[2, 2],
                &[8.0, 2.5, -2.0, -1.1875],
                tol,
            );
        }
        // Integer-valued products are exact in both types: A B = [[58, 64], [139, 154]].
        let got = run1(
            "MatMul",
            vec![
                feed(float_t(dtype, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
                feed(float_t(dtype, &[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0])),
            ],
            vec![],
        );
        expect_float(&got, dtype, &[2, 2], &AB, EXACT);

        let got = run1(
            "Softmax",
            vec![feed(float_t(dtype, &[2, 3], &softmax_input()))],
            vec![],
        );
        expect_float(&got, dtype, &[2, 3], &SOFTMAX_WANT, tol);

        for domain in ["com.microsoft", ""] {
            let out = run_node(
                "SimplifiedLayerNormalization",
                domain,
                vec![
                    feed(float_t(dtype, &[2, 4], &rms_x())),
                    init(float_t(dtype, &[4], &RMS_SCALE)),
                ],
                vec![attr_f("epsilon", 0.0)],
                1,
                OPSET,
            )
            .unwrap();
            expect_float(&out[0], dtype, &[2, 4], &RMS_WANT, tol);
        }
    }
}

#[test]
fn reduced_precision_arithmetic_rounds_to_nearest_even() {
    // h is half an ulp at 1 (2^-11 for f16, 2^-8 for bf16). Sums computed exactly, then rounded:
    // 1 + 3h ties between 1 + 2h (odd) and 1 + 4h (even) -> 1 + 4h; 1 + h ties -> 1;
    // 1 + 5h ties between 1 + 4h (even) and 1 + 6h -> 1 + 4h; 1 + 3.5h is nearest 1 + 4h.
    // Truncation would give 1 + 2h, 1, 1 + 4h, 1 + 2h.
    for (dtype, h) in [(DType::F16, 2f32.powi(-11)), (DType::BF16, 2f32.powi(-8))] {
        eprintln!("case {dtype}");
        let ones = float_t(dtype, &[4], &[1.0; 4]);
        let small = float_t(dtype, &[4], &[3.0 * h, h, 5.0 * h, 3.5 * h]);
        let got = run1("Add", vec![feed(ones), feed(small)], vec![]);
        expect_float(
            &got,
            dtype,
            &[4],
            &[1.0 + 4.0 * h, 1.0, 1.0 + 4.0 * h, 1.0 + 4.0 * h],
            EXACT,
        );
    }
}

#[test]
fn reduced_precision_clip_and_where_keep_the_type() {
    let got = run1(
        "Clip",
        vec![
            feed(f16t(&[3], &[-2.0, 0.5, 2.0])),
            feed(f16t(&[], &[-1.0])),
            feed(f16t(&[], &[1.0])),
        ],
        vec![],
    );
    expect_float(&got, DType::F16, &[3], &[-1.0, 0.5, 1.0], EXACT);
    let got = run1(
        "Where",
        vec![
            feed(boolt(&[2], &[true, false])),
            feed(bf16t(&[2], &[1.5, 2.5])),
            feed(bf16t(&[], &[-4.0])),
        ],
        vec![],
    );
    expect_float(&got, DType::BF16, &[2], &[1.5, -4.0], EXACT);
}

#[test]
fn reduced_precision_gelu_and_casts_round_trip() {
    let x = [-1.0f32, 0.0, 0.5, 2.0];
    let gelu = |v: f64| 0.5 * v * (1.0 + erf_f64(v / 2f64.sqrt()));
    let want: Vec<f32> = x.iter().map(|&v| gelu(v as f64) as f32).collect();
    for (dtype, tol) in [(DType::F16, F16_TOL), (DType::BF16, BF16_TOL)] {
        eprintln!("case {dtype}");
        let got = run1_opset("Gelu", vec![feed(float_t(dtype, &[4], &x))], vec![], 20);
        expect_float(&got, dtype, &[4], &want, tol);
    }
}

// =============================================================================================
// Errors through the executor

#[test]
fn unsupported_ops_are_listed_together() {
    let mut g = Graph::new(OPSET);
    g.feed("x", f32t(&[2], &[1.0, 2.0]))
        .node("a", "FancyOp", "", &["x"], &["y"], vec![])
        .node("b", "Relu", "", &["y"], &["z"], vec![])
        .node("c", "Mystery", "com.example", &["z"], &["w"], vec![])
        .node("d", "FancyOp", "", &["w"], &["v"], vec![])
        .output("v");
    let err = g.run(1).unwrap_err();
    match &err {
        Error::Unsupported { ops, .. } => assert_eq!(
            ops,
            &[
                ("".to_string(), "FancyOp".to_string()),
                ("com.example".to_string(), "Mystery".to_string())
            ]
        ),
        other => panic!("expected Error::Unsupported, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("(ai.onnx, FancyOp)") && msg.contains("(com.example, Mystery)"),
        "{msg}"
    );
    assert_eq!(msg.matches("FancyOp").count(), 1, "listed once: {msg}");
    // A known op in an unknown domain is unsupported too.
    let err = run_node(
        "Relu",
        "com.example",
        vec![feed(sf32(1.0))],
        vec![],
        1,
        OPSET,
    )
    .unwrap_err();
    assert!(err.to_string().contains("(com.example, Relu)"), "{err}");
}

#[test]
fn broadcast_mismatch_names_node_and_shapes() {
    let mut g = Graph::new(OPSET);
    g.feed("a", iota(&[2, 3]))
        .feed("b", iota(&[4]))
        .node("/model/bad_add", "Add", "", &["a", "b"], &["y"], vec![])
        .output("y");
    let err = g.run(1).unwrap_err().to_string();
    assert!(err.contains("/model/bad_add"), "{err}");
    assert!(err.contains("[2, 3]") && err.contains("[4]"), "{err}");
    // Also for Where.
    let err = run1_err(
        "Where",
        vec![
            feed(boolt(&[2], &[true, false])),
            feed(iota(&[3])),
            feed(sf32(0.0)),
        ],
        vec![],
    );
    assert!(
        err.contains(&node_name("Where")) && err.contains("[2]") && err.contains("[3]"),
        "{err}"
    );
}

#[test]
fn gather_index_out_of_range_names_node() {
    let data = iota(&[3, 2]);
    for bad in [3, -4] {
        eprintln!("case index {bad}");
        // At run time.
        let mut g = Graph::new(OPSET);
        g.feed("data", data.clone())
            .feed("idx", i64t(&[1], &[bad]))
            .node(
                "/embed/Gather",
                "Gather",
                "",
                &["data", "idx"],
                &["y"],
                vec![],
            )
            .output("y");
        let err = g.run(1).unwrap_err().to_string();
        assert!(
            err.contains("/embed/Gather") && err.contains(&bad.to_string()),
            "{err}"
        );
        // While constant folding at plan time.
        let mut g = Graph::new(OPSET);
        g.init("data", &data)
            .init("idx", &i64t(&[1], &[bad]))
            .node(
                "/embed/Gather",
                "Gather",
                "",
                &["data", "idx"],
                &["y"],
                vec![],
            )
            .output("y");
        let err = g.run(1).unwrap_err().to_string();
        assert!(err.contains("/embed/Gather"), "{err}");
    }
}

#[test]
fn mixed_dtypes_are_an_error() {
    let err = run1_err("Add", vec![feed(sf32(1.0)), feed(si64(1))], vec![]);
    assert!(
        err.contains(&node_name("Add")) && err.contains("f32") && err.contains("i64"),
        "{err}"
    );
}
