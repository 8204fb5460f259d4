//! `oracles`: the independent fp32 reference the gate compares the engine against.
//!
//! Skeleton: the reference ops and graph runner land with the oracle/goldens issue. By invariant 2
//! this crate depends on `onnx-pb` only, never on `engine`.
