//! The executor's pattern fusions (`exec/fuse.rs`, `ops/fused.rs`): which node runs become one
//! step, which do not, and that a fused plan computes what the unfused plan computes: bit for
//! bit on the CPU (it runs the same nodes inside the step), and on CUDA
//! (`ENGINE_TEST_BACKEND=cuda`, a build with `--features cuda`) with each fused step as one
//! kernel whose result is the nodes' (bit for bit, the RMS norm's mean aside, which sums in
//! another order), counted so a silent fall-back to the nodes fails the test.

mod common;

use common::{F16_TOL, Graph, Ran, attr_i, attr_ints, float_t};
use engine::exec::ExecOptions;
use engine::{DType, Tensor};

/// Deterministic values in [-2, 2).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    common::rand_vals(n, seed, -2.0, 2.0)
}

fn on_cuda() -> bool {
    std::env::var("ENGINE_TEST_BACKEND").is_ok_and(|v| v == "cuda")
}

fn i64s(v: &[i64]) -> Tensor {
    common::i64t(&[v.len()], v)
}

/// Runs `g` with fusion on and off; returns (fused, unfused).
fn both(g: &Graph) -> (Ran, Ran) {
    let on = g
        .run_options(1, ExecOptions::default())
        .expect("fused plan runs");
    let off = g
        .run_options(
            1,
            ExecOptions {
                fuse_patterns: false,
            },
        )
        .expect("unfused plan runs");
    (on, off)
}

/// Output `i` of both runs: identical bits, or (`tol`, CUDA's RMS norm) within `tol`.
#[track_caller]
fn same(on: &Ran, off: &Ran, i: usize, what: &str, tol: f32) {
    let (a, b) = (&on.outputs[i], &off.outputs[i]);
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: types");
    let (x, y) = (a.to_f32_vec(), b.to_f32_vec());
    if tol == 0.0 {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&x), bits(&y), "{what}: fused {x:?} vs nodes {y:?}");
    } else {
        common::assert_close(&x, &y, tol);
    }
}

/// Every spelling the matchers accept, in one graph: RMS norm as Mul(x, x) with the axis as
/// an attribute and as Pow(x, 2) with eps and the weight first; rotate-half RoPE from two
/// Slices (cos/sin broadcast over heads) and from an equal Split with the operands swapped;
/// SwiGLU's gate with Sigmoid first; attention's softmax of scaled scores plus a mask that
/// broadcasts over heads, the scale first.
fn patterns(dtype: DType, opset: i64) -> Graph {
    let (b, h, s, d) = (1, 2, 3, 8);
    let x = float_t(dtype, &[b, h, s, d], &vals(b * h * s * d, 1));
    let w = float_t(dtype, &[d], &vals(d, 2));
    let cos = float_t(dtype, &[1, 1, s, d], &vals(s * d, 3));
    let sin = float_t(dtype, &[1, 1, s, d], &vals(s * d, 4));
    let gate = float_t(dtype, &[1, s, 16], &vals(s * 16, 5));
    let up = float_t(dtype, &[1, s, 16], &vals(s * 16, 6));
    let scores = float_t(dtype, &[1, h, s, 5], &vals(h * s * 5, 15));
    let mut mask = vec![0.0f32; s * 5];
    for (i, m) in mask.iter_mut().enumerate() {
        if i % 5 > i / 5 + 2 {
            *m = -3.0e38;
        }
    }
    let mask = float_t(dtype, &[1, 1, s, 5], &mask);
    let mut g = Graph::new(opset);
    g.feed("x", x)
        .feed("cos", cos)
        .feed("sin", sin)
        .feed("gate", gate)
        .feed("up", up)
        .feed("scores", scores)
        .feed("mask", mask)
        .init("scale", &float_t(dtype, &[1], &[0.125]))
        .init("w", &w)
        .init("eps", &float_t(dtype, &[], &[1e-5]))
        .init("two", &float_t(dtype, &[], &[2.0]))
        .init("lo", &i64s(&[0]))
        .init("mid", &i64s(&[4]))
        .init("hi", &i64s(&[i64::MAX]))
        .init("ax3", &i64s(&[3]))
        .init("axm1", &i64s(&[-1]));
    let mean = |g: &mut Graph, name: &str, x: &str, out: &str, axis: i64| {
        if opset >= 18 {
            g.node(
                name,
                "ReduceMean",
                "",
                &[x, if axis < 0 { "axm1" } else { "ax3" }],
                &[out],
                vec![attr_i("keepdims", 1)],
            );
        } else {
            g.node(
                name,
                "ReduceMean",
                "",
                &[x],
                &[out],
                vec![attr_ints("axes", &[axis]), attr_i("keepdims", 1)],
            );
        }
    };
    // RMS norm, Mul form.
    g.node("r1/sq", "Mul", "", &["x", "x"], &["r1_sq"], vec![]);
    mean(&mut g, "r1/mean", "r1_sq", "r1_m", -1);
    g.node("r1/add", "Add", "", &["r1_m", "eps"], &["r1_v"], vec![])
        .node("r1/sqrt", "Sqrt", "", &["r1_v"], &["r1_r"], vec![])
        .node("r1/div", "Div", "", &["x", "r1_r"], &["r1_n"], vec![])
        .node("r1/scale", "Mul", "", &["r1_n", "w"], &["rms1"], vec![]);
    // RMS norm, Pow form, operands swapped.
    g.node("r2/pow", "Pow", "", &["x", "two"], &["r2_sq"], vec![]);
    mean(&mut g, "r2/mean", "r2_sq", "r2_m", 3);
    g.node("r2/add", "Add", "", &["eps", "r2_m"], &["r2_v"], vec![])
        .node("r2/sqrt", "Sqrt", "", &["r2_v"], &["r2_r"], vec![])
        .node("r2/div", "Div", "", &["x", "r2_r"], &["r2_n"], vec![])
        .node("r2/scale", "Mul", "", &["w", "r2_n"], &["rms2"], vec![]);
    // RoPE from Slices.
    g.node(
        "q/x1",
        "Slice",
        "",
        &["x", "lo", "mid", "ax3"],
        &["q_x1"],
        vec![],
    )
    .node(
        "q/x2",
        "Slice",
        "",
        &["x", "mid", "hi", "ax3"],
        &["q_x2"],
        vec![],
    )
    .node("q/neg", "Neg", "", &["q_x2"], &["q_neg"], vec![])
    .node(
        "q/cat",
        "Concat",
        "",
        &["q_neg", "q_x1"],
        &["q_rh"],
        vec![attr_i("axis", -1)],
    )
    .node("q/xcos", "Mul", "", &["x", "cos"], &["q_a"], vec![])
    .node("q/rsin", "Mul", "", &["sin", "q_rh"], &["q_b"], vec![])
    .node("q/add", "Add", "", &["q_b", "q_a"], &["rot1"], vec![]);
    // RoPE from an equal Split.
    let split_attrs = if opset >= 18 {
        vec![attr_i("axis", -1), attr_i("num_outputs", 2)]
    } else {
        vec![attr_i("axis", -1)]
    };
    g.node(
        "k/split",
        "Split",
        "",
        &["x"],
        &["k_x1", "k_x2"],
        split_attrs,
    )
    .node("k/neg", "Neg", "", &["k_x2"], &["k_neg"], vec![])
    .node(
        "k/cat",
        "Concat",
        "",
        &["k_neg", "k_x1"],
        &["k_rh"],
        vec![attr_i("axis", 3)],
    )
    .node("k/xcos", "Mul", "", &["cos", "x"], &["k_a"], vec![])
    .node("k/rsin", "Mul", "", &["k_rh", "sin"], &["k_b"], vec![])
    .node("k/add", "Add", "", &["k_a", "k_b"], &["rot2"], vec![]);
    // SwiGLU's gate.
    g.node("mlp/sig", "Sigmoid", "", &["gate"], &["m_s"], vec![])
        .node("mlp/silu", "Mul", "", &["m_s", "gate"], &["m_silu"], vec![])
        .node("mlp/act", "Mul", "", &["up", "m_silu"], &["silu"], vec![]);
    // Attention's softmax.
    g.node(
        "attn/scale",
        "Mul",
        "",
        &["scale", "scores"],
        &["a_s"],
        vec![],
    )
    .node("attn/mask", "Add", "", &["a_s", "mask"], &["a_m"], vec![])
    .node(
        "attn/softmax",
        "Softmax",
        "",
        &["a_m"],
        &["attn"],
        vec![attr_i("axis", -1)],
    );
    for o in ["rms1", "rms2", "rot1", "rot2", "silu", "attn"] {
        g.output(o);
    }
    g
}

#[test]
fn every_spelling_of_each_pattern_fuses_and_computes_the_same() {
    for opset in [17, 18] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (on, off) = both(&patterns(dtype, opset));
            let what = format!("opset {opset} {dtype}");
            // 6 + 6 (RMS), 7 (RoPE from Slices), 6 (from Split), 3 (gate), 3 (softmax) nodes:
            // one step each.
            assert_eq!(
                off.steps - on.steps,
                5 + 5 + 6 + 5 + 2 + 2,
                "{what}: steps {} → {}",
                off.steps,
                on.steps
            );
            let rms_tol = if on_cuda() && dtype == DType::F32 {
                1e-6
            } else if on_cuda() {
                F16_TOL
            } else {
                0.0
            };
            same(&on, &off, 0, &format!("{what} rms (Mul)"), rms_tol);
            same(&on, &off, 1, &format!("{what} rms (Pow)"), rms_tol);
            same(&on, &off, 2, &format!("{what} rope (Slice)"), 0.0);
            same(&on, &off, 3, &format!("{what} rope (Split)"), 0.0);
            same(&on, &off, 4, &format!("{what} gate"), 0.0);
            same(&on, &off, 5, &format!("{what} softmax"), 0.0);
            let want = if on_cuda() { 6 } else { 0 };
            assert_eq!(
                on.fused_kernels, want,
                "{what}: fused steps run as one kernel"
            );
            assert_eq!(
                off.fused_kernels, 0,
                "{what}: the unfused plan has no fused step"
            );
        }
    }
}

/// Runs that look like a pattern but are not one stay as they are.
#[test]
fn near_misses_are_not_fused() {
    let (s, d) = (3, 8);
    let mut g = Graph::new(17);
    g.feed("x", float_t(DType::F32, &[1, 1, s, d], &vals(s * d, 7)))
        .feed("cos", float_t(DType::F32, &[1, 1, s, d], &vals(s * d, 8)))
        .feed("sin", float_t(DType::F32, &[1, 1, s, d], &vals(s * d, 9)))
        .feed("u", float_t(DType::F32, &[1, s, d], &vals(s * d, 10)))
        .feed("v", float_t(DType::F32, &[1, s, d], &vals(s * d, 11)))
        .init("w", &float_t(DType::F32, &[d], &vals(d, 12)))
        .init("eps", &float_t(DType::F32, &[], &[1e-5]));
    // An RMS norm whose root-mean-square is also a graph output: its nodes must stay.
    g.node("r/sq", "Mul", "", &["x", "x"], &["r_sq"], vec![])
        .node(
            "r/mean",
            "ReduceMean",
            "",
            &["r_sq"],
            &["r_m"],
            vec![attr_ints("axes", &[-1]), attr_i("keepdims", 1)],
        )
        .node("r/add", "Add", "", &["r_m", "eps"], &["r_v"], vec![])
        .node("r/sqrt", "Sqrt", "", &["r_v"], &["r_r"], vec![])
        .node("r/div", "Div", "", &["x", "r_r"], &["r_n"], vec![])
        .node("r/scale", "Mul", "", &["r_n", "w"], &["rms"], vec![]);
    // Halves concatenated the other way round: not rotate-half.
    g.node(
        "q/split",
        "Split",
        "",
        &["x"],
        &["q_x1", "q_x2"],
        vec![attr_i("axis", -1)],
    )
    .node("q/neg", "Neg", "", &["q_x2"], &["q_neg"], vec![])
    .node(
        "q/cat",
        "Concat",
        "",
        &["q_x1", "q_neg"],
        &["q_rh"],
        vec![attr_i("axis", -1)],
    )
    .node("q/xcos", "Mul", "", &["x", "cos"], &["q_a"], vec![])
    .node("q/rsin", "Mul", "", &["q_rh", "sin"], &["q_b"], vec![])
    .node("q/add", "Add", "", &["q_a", "q_b"], &["rot"], vec![]);
    // A gate whose Sigmoid reads the other operand.
    g.node("m/sig", "Sigmoid", "", &["v"], &["m_s"], vec![])
        .node("m/silu", "Mul", "", &["u", "m_s"], &["m_silu"], vec![])
        .node("m/act", "Mul", "", &["m_silu", "v"], &["gate"], vec![]);
    for o in ["rms", "r_r", "rot", "gate"] {
        g.output(o);
    }
    let (on, off) = both(&g);
    assert_eq!(on.steps, off.steps, "nothing may fuse");
    for i in 0..4 {
        same(&on, &off, i, &format!("output {i}"), 0.0);
    }
    assert_eq!(on.fused_kernels, 0);
}

/// The matchers read the nodes' structure; whether the computation is the kernel's is decided
/// at run time. An RMS norm over the *first* axis matches the pattern (one step), but the
/// kernel normalises the last axis: the step must run its nodes. On the CPU every fused step
/// runs its nodes, so the values agree there whatever the check does; on CUDA this fails if
/// the check lets the kernel run (wrong values, and a kernel counted).
#[test]
fn a_fused_step_whose_shapes_do_not_fit_its_kernel_runs_its_nodes() {
    let mut g = Graph::new(17);
    g.feed("x", float_t(DType::F32, &[8, 8], &vals(64, 13)))
        .init("w", &float_t(DType::F32, &[8], &vals(8, 14)))
        .init("eps", &float_t(DType::F32, &[], &[1e-5]))
        .node("r/sq", "Mul", "", &["x", "x"], &["r_sq"], vec![])
        .node(
            "r/mean",
            "ReduceMean",
            "",
            &["r_sq"],
            &["r_m"],
            vec![attr_ints("axes", &[0]), attr_i("keepdims", 1)],
        )
        .node("r/add", "Add", "", &["r_m", "eps"], &["r_v"], vec![])
        .node("r/sqrt", "Sqrt", "", &["r_v"], &["r_r"], vec![])
        .node("r/div", "Div", "", &["x", "r_r"], &["r_n"], vec![])
        .node("r/scale", "Mul", "", &["r_n", "w"], &["y"], vec![])
        .output("y");
    let (on, off) = both(&g);
    assert_eq!(off.steps - on.steps, 5, "the pattern is one step");
    same(&on, &off, 0, "rms over axis 0", 0.0);
    assert_eq!(
        on.fused_kernels, 0,
        "no kernel for a norm over the first axis"
    );
}

/// An RMS norm spelt out (as `patterns` writes it) over `x`; output `out`.
fn rms_nodes(g: &mut Graph, p: &str, x: &str, out: &str) {
    let n = |s: &str| format!("{p}_{s}");
    let (sq, m, v, r, q) = (n("sq"), n("m"), n("v"), n("r"), n("n"));
    g.node(&format!("{p}/sq"), "Mul", "", &[x, x], &[&sq], vec![])
        .node(
            &format!("{p}/mean"),
            "ReduceMean",
            "",
            &[&sq],
            &[&m],
            vec![attr_ints("axes", &[-1]), attr_i("keepdims", 1)],
        )
        .node(&format!("{p}/add"), "Add", "", &[&m, "eps"], &[&v], vec![])
        .node(&format!("{p}/sqrt"), "Sqrt", "", &[&v], &[&r], vec![])
        .node(&format!("{p}/div"), "Div", "", &[x, &r], &[&q], vec![])
        .node(&format!("{p}/scale"), "Mul", "", &[&q, "w"], &[out], vec![]);
}

/// Grouped-query attention's repeat of `kv` (`[1, 2, 5, 8]` → 4 heads) as exporters write it,
/// Unsqueeze at `axis` then Expand by `expand` then Reshape to 4 heads; output `out`.
fn repeat_heads(g: &mut Graph, p: &str, kv: &str, axis: &str, expand: &str, out: &str) {
    let (u, e) = (format!("{p}_u"), format!("{p}_e"));
    g.node(
        &format!("{p}/unsq"),
        "Unsqueeze",
        "",
        &[kv, axis],
        &[&u],
        vec![],
    )
    .node(
        &format!("{p}/expand"),
        "Expand",
        "",
        &[&u, expand],
        &[&e],
        vec![],
    )
    .node(
        &format!("{p}/gqa"),
        "Reshape",
        "",
        &[&e, "heads4"],
        &[out],
        vec![],
    );
}

/// The residual Add joins the RMS norm after it (the step outputs the sum too, read later by
/// the next residual and as a graph output); grouped-query attention's Unsqueeze/Expand/Reshape
/// of K (read through a Transpose) and of V join the MatMul that reads them. Near misses: a sum
/// also read *before* the norm ends keeps its Add (the norm alone fuses); heads repeated as
/// blocks (Unsqueeze at axis 1: `Tile`'s order, not GQA's) match but must run their nodes; a
/// sum that only the norm reads keeps its Add (an output nobody reads would never be freed).
#[test]
fn residual_norms_and_grouped_query_matmuls_fuse() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let (h, g_, s, t, d) = (4, 2, 2, 5, 8);
        let mut g = Graph::new(17);
        g.feed("a", float_t(dtype, &[1, s, d], &vals(s * d, 21)))
            .feed("b", float_t(dtype, &[1, s, d], &vals(s * d, 22)))
            .feed("q", float_t(dtype, &[1, h, s, d], &vals(h * s * d, 23)))
            .feed("p", float_t(dtype, &[1, h, s, t], &vals(h * s * t, 24)))
            .feed("k", float_t(dtype, &[1, g_, t, d], &vals(g_ * t * d, 25)))
            .feed("v", float_t(dtype, &[1, g_, t, d], &vals(g_ * t * d, 26)))
            .init("w", &float_t(dtype, &[d], &vals(d, 27)))
            .init("eps", &float_t(dtype, &[], &[1e-5]))
            .init("ax1", &i64s(&[1]))
            .init("ax2", &i64s(&[2]))
            .init("rep", &i64s(&[1, 1, 2, 1, 1]))
            .init("blocks", &i64s(&[1, 2, 1, 1, 1]))
            .init("heads4", &i64s(&[1, 4, -1, d as i64]));
        // Residual Add then a norm; the sum read again after it.
        g.node("res1", "Add", "", &["a", "b"], &["sum"], vec![]);
        rms_nodes(&mut g, "n1", "sum", "y");
        g.node("res2", "Add", "", &["sum", "y"], &["res"], vec![]);
        // The sum read between the Add and the norm's end: the Add stays.
        g.node("res3", "Add", "", &["b", "a"], &["sum2"], vec![])
            .node("peek", "Neg", "", &["sum2"], &["peek"], vec![]);
        rms_nodes(&mut g, "n2", "sum2", "y2");
        // A sum only the norm reads: the step would output a value nobody frees; the Add stays.
        g.node("res4", "Add", "", &["a", "a"], &["sum3"], vec![]);
        rms_nodes(&mut g, "n3", "sum3", "y3");
        // GQA: q · repeat(k)ᵀ and p · repeat(v).
        repeat_heads(&mut g, "krep", "k", "ax2", "rep", "kr");
        g.node(
            "kT",
            "Transpose",
            "",
            &["kr"],
            &["kt"],
            vec![attr_ints("perm", &[0, 1, 3, 2])],
        )
        .node("scores", "MatMul", "", &["q", "kt"], &["scores"], vec![]);
        repeat_heads(&mut g, "vrep", "v", "ax2", "rep", "vr");
        g.node("ctx", "MatMul", "", &["p", "vr"], &["ctx"], vec![]);
        // Heads repeated as blocks.
        repeat_heads(&mut g, "vtile", "v", "ax1", "blocks", "vt");
        g.node("tiled", "MatMul", "", &["p", "vt"], &["tiled"], vec![]);
        for o in [
            "y", "sum", "res", "y2", "peek", "scores", "ctx", "tiled", "y3",
        ] {
            g.output(o);
        }
        let (on, off) = both(&g);
        let what = format!("{dtype}");
        // Add + norm: 7 nodes → 1; the second and third norms alone: 6 → 1 each; the Transpose
        // into its MatMul (both plans) and 3 + 3 + 3 repeat nodes into their MatMuls.
        assert_eq!(
            off.steps - on.steps,
            6 + 5 + 5 + 3 + 3 + 3,
            "{what}: steps {} → {}",
            off.steps,
            on.steps
        );
        let cuda_tol = match dtype {
            DType::F32 => 1e-5,
            _ => F16_TOL,
        };
        let tol = |t: f32| if on_cuda() { t } else { 0.0 };
        same(&on, &off, 0, &format!("{what} add + rms"), tol(cuda_tol));
        same(&on, &off, 1, &format!("{what} the sum"), 0.0);
        same(
            &on,
            &off,
            2,
            &format!("{what} the sum read later"),
            tol(cuda_tol),
        );
        same(
            &on,
            &off,
            3,
            &format!("{what} rms of a peeked sum"),
            tol(cuda_tol),
        );
        same(&on, &off, 4, &format!("{what} the peek"), 0.0);
        same(
            &on,
            &off,
            5,
            &format!("{what} q · repeat(k)ᵀ"),
            tol(cuda_tol),
        );
        same(
            &on,
            &off,
            6,
            &format!("{what} p · repeat(v)"),
            tol(cuda_tol),
        );
        same(&on, &off, 7, &format!("{what} p · tile(v)"), tol(cuda_tol));
        same(
            &on,
            &off,
            8,
            &format!("{what} rms of an unread sum"),
            tol(cuda_tol),
        );
        // Add + norm, two norms, two GQA MatMuls; the tiled one runs its nodes.
        let want = if on_cuda() { 5 } else { 0 };
        assert_eq!(on.fused_kernels, want, "{what}: fused kernels");
    }
}
