//! Op-level checks through the public `run_op` entry point, with values worked out by hand:
//! attributes vs inputs, opset-dependent defaults, multi-output ops, and coverage of every
//! (domain, op) in `SUPPORTED`.

use oracles::ops::SUPPORTED;
use oracles::{DType, OTensor, run_op};

use onnx_pb as pb;

fn f(shape: &[usize], v: &[f32]) -> Option<OTensor> {
    Some(OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap())
}

fn i(shape: &[usize], v: &[i64]) -> Option<OTensor> {
    Some(OTensor::from_i64(shape.to_vec(), v.to_vec()).unwrap())
}

fn int_attr(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(2),
        i: Some(v),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(7),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn float_attr(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(1),
        f: Some(v),
        ..Default::default()
    }
}

/// Runs a default-domain op at opset 17 and returns its first output.
fn run1(op: &str, attrs: &[pb::AttributeProto], inputs: &[Option<OTensor>]) -> OTensor {
    run_op(op, "", attrs, inputs, 1, 17)
        .unwrap()
        .remove(0)
        .unwrap()
}

#[test]
fn mat_mul_by_hand() {
    // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
    let y = run1(
        "MatMul",
        &[],
        &[
            f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            f(&[2, 2], &[5.0, 6.0, 7.0, 8.0]),
        ],
    );
    assert_eq!(
        (y.shape.clone(), y.f32s().unwrap()),
        (vec![2, 2], &[19.0f32, 22.0, 43.0, 50.0][..])
    );
    let err = run_op(
        "MatMul",
        "",
        &[],
        &[f(&[2, 3], &[0.0; 6]), f(&[2, 3], &[0.0; 6])],
        1,
        17,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MatMul: inner dims 3 vs 2 (shapes [2, 3] and [2, 3])"
    );
}

#[test]
fn softmax_axis_default_depends_on_opset() {
    let x = f(&[2, 2], &[0.0, 0.0, 0.0, 0.0]);
    // Opset 13+: default axis -1, each row sums to one.
    let y = run_op("Softmax", "", &[], std::slice::from_ref(&x), 1, 13)
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(y.f32s().unwrap(), &[0.5; 4]);
    // Opset 11: default axis 1 with the 2-D coercion: same here. With axis 0 the whole tensor.
    let z = run_op("Softmax", "", &[int_attr("axis", 0)], &[x], 1, 11)
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(z.f32s().unwrap(), &[0.25; 4]);
}

#[test]
fn rms_norm_in_both_domains() {
    // Row [1, 3]: mean square 5, y = x / sqrt(5) * scale.
    let inputs = [f(&[1, 2], &[1.0, 3.0]), f(&[2], &[2.0, 1.0])];
    let attrs = [float_attr("epsilon", 0.0)];
    let r = 1.0 / 5f64.sqrt();
    let want = [(1.0 * r * 2.0) as f32, (3.0 * r * 1.0) as f32];
    for domain in ["", "com.microsoft"] {
        let out = run_op(
            "SimplifiedLayerNormalization",
            domain,
            &attrs,
            &inputs,
            1,
            17,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().f32s().unwrap(), &want);
    }
    let y = run1("RMSNormalization", &attrs, &inputs);
    assert_eq!(y.f32s().unwrap(), &want);
}

#[test]
fn skip_simplified_layer_normalization_fourth_output_is_the_sum() {
    let inputs = [
        f(&[1, 2], &[1.0, 1.0]),
        f(&[1, 2], &[2.0, 3.0]),
        f(&[2], &[1.0, 1.0]),
        f(&[2], &[0.0, 1.0]),
    ];
    let out = run_op(
        "SkipSimplifiedLayerNormalization",
        "com.microsoft",
        &[float_attr("epsilon", 0.0)],
        &inputs,
        4,
        17,
    )
    .unwrap();
    assert_eq!(out.len(), 4);
    assert!(
        out[1].is_none(),
        "mean is not defined for the simplified form"
    );
    assert_eq!(out[3].as_ref().unwrap().f32s().unwrap(), &[3.0, 5.0]);
    let r = 1.0 / 17f64.sqrt();
    assert_eq!(
        out[0].as_ref().unwrap().f32s().unwrap(),
        &[(3.0 * r) as f32, (5.0 * r) as f32]
    );
    // Not in the default domain.
    assert!(run_op("SkipSimplifiedLayerNormalization", "", &[], &inputs, 4, 17).is_err());
}

#[test]
fn slice_from_inputs_with_negative_axes_and_steps() {
    let x = f(&[2, 4], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    // Last axis from the end backwards, step -2: columns 3, 1.
    let y = run1(
        "Slice",
        &[],
        &[
            x.clone(),
            i(&[1], &[-1]),
            i(&[1], &[-100]),
            i(&[1], &[-1]),
            i(&[1], &[-2]),
        ],
    );
    assert_eq!(
        (y.shape.clone(), y.f32s().unwrap()),
        (vec![2, 2], &[3.0f32, 1.0, 7.0, 5.0][..])
    );
    // Omitted axes/steps: axis 0, clamped end.
    let z = run1(
        "Slice",
        &[],
        &[x.clone(), i(&[1], &[1]), i(&[1], &[i64::MAX])],
    );
    assert_eq!(z.f32s().unwrap(), &[4.0, 5.0, 6.0, 7.0]);
    let attr_form = run_op("Slice", "", &[ints_attr("starts", &[0])], &[x], 1, 17).unwrap_err();
    assert!(attr_form.to_string().contains("Slice-1"), "{attr_form}");
}

#[test]
fn gather_embedding_rows() {
    let table = f(&[3, 2], &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    let y = run1("Gather", &[], &[table.clone(), i(&[1, 2], &[2, 0])]);
    assert_eq!(
        (y.shape.clone(), y.f32s().unwrap()),
        (vec![1, 2, 2], &[2.0f32, 2.5, 0.0, 0.5][..])
    );
    let i32_idx = Some(OTensor::from_i32(vec![1], vec![-1]).unwrap());
    assert_eq!(
        run1("Gather", &[], &[table.clone(), i32_idx])
            .f32s()
            .unwrap(),
        &[2.0, 2.5]
    );
    assert!(run_op("Gather", "", &[], &[table, i(&[1], &[3])], 1, 17).is_err());
}

#[test]
fn broadcasting_binary_ops() {
    // [2, 1, 3] - [2, 1] -> [2, 2, 3]
    let a = f(&[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f(&[2, 1], &[1.0, 10.0]);
    let y = run1("Sub", &[], &[a, b]);
    assert_eq!(y.shape, vec![2, 2, 3]);
    assert_eq!(
        y.f32s().unwrap(),
        &[
            0.0, 1.0, 2.0, -9.0, -8.0, -7.0, 3.0, 4.0, 5.0, -6.0, -5.0, -4.0
        ]
    );
    let mask = run1(
        "Greater",
        &[],
        &[i(&[3], &[0, 1, 2]), i(&[3, 1], &[0, 1, 2])],
    );
    assert_eq!(
        mask.bools().unwrap(),
        &[false, true, true, false, false, true, false, false, false]
    );
    let w = run1("Where", &[], &[Some(mask), f(&[], &[-1.0]), f(&[], &[0.0])]);
    assert_eq!(
        w.f32s().unwrap(),
        &[0.0, -1.0, -1.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0]
    );
}

#[test]
fn split_num_outputs_and_input_sizes() {
    let x = f(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let out = run_op(
        "Split",
        "",
        &[int_attr("num_outputs", 2)],
        std::slice::from_ref(&x),
        2,
        18,
    )
    .unwrap();
    let lens: Vec<usize> = out.iter().map(|t| t.as_ref().unwrap().shape[0]).collect();
    assert_eq!(lens, [3, 2]);
    let out = run_op("Split", "", &[], &[x, i(&[3], &[1, 1, 3])], 3, 13).unwrap();
    assert_eq!(out[2].as_ref().unwrap().f32s().unwrap(), &[2.0, 3.0, 4.0]);
}

#[test]
fn reduce_axes_attribute_or_input() {
    let x = f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let by_attr = run1(
        "ReduceSum",
        &[ints_attr("axes", &[0]), int_attr("keepdims", 0)],
        std::slice::from_ref(&x),
    );
    let by_input = run1(
        "ReduceSum",
        &[int_attr("keepdims", 0)],
        &[x.clone(), i(&[1], &[0])],
    );
    assert_eq!(by_attr.f32s().unwrap(), &[4.0, 6.0]);
    assert_eq!(by_attr, by_input);
    let all = run1("ReduceMean", &[], &[x]);
    assert_eq!(
        (all.shape.clone(), all.f32s().unwrap()),
        (vec![1, 1], &[2.5f32][..])
    );
}

#[test]
fn range_trilu_cast_constant() {
    let r = run1("Range", &[], &[i(&[], &[2]), i(&[], &[7]), i(&[], &[2])]);
    assert_eq!(r.i64s().unwrap(), &[2, 4, 6]);
    let t = run1(
        "Trilu",
        &[int_attr("upper", 0)],
        &[f(&[2, 2], &[1.0; 4]), i(&[], &[0])],
    );
    assert_eq!(t.f32s().unwrap(), &[1.0, 0.0, 1.0, 1.0]);
    let c = run1("Cast", &[int_attr("to", 6)], &[f(&[2], &[2.9, -2.9])]);
    assert_eq!(
        (c.dtype(), c.i64s().unwrap()),
        (DType::I32, &[2i64, -2][..])
    );
    let k = run1("Constant", &[ints_attr("value_ints", &[3, 4])], &[]);
    assert_eq!(k.i64s().unwrap(), &[3, 4]);
}

#[test]
fn every_supported_op_is_dispatched() {
    // With no inputs every op must fail on its inputs or attributes — never for lack of an
    // implementation.
    for &(domain, op) in SUPPORTED {
        if let Err(e) = run_op(op, domain, &[], &[], 1, 17) {
            let msg = e.to_string();
            assert!(
                !msg.contains("no implementation") && !msg.contains("unsupported op"),
                "{domain}::{op}: {msg}"
            );
        }
    }
    let err = run_op("Conv", "", &[], &[], 1, 17).unwrap_err();
    assert_eq!(err.to_string(), "Conv: unsupported op ai.onnx::Conv");
}
