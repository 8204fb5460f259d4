//! The CUDA tests (`tests/cuda.rs`) exist only in builds with the `cuda` feature. This canary
//! covers the other builds: it says visibly (with `--nocapture`) that CUDA was not tested, and
//! under `REQUIRE_CUDA=1` it fails, so a GPU job whose build lost the feature cannot pass by
//! having no CUDA test to run.

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_canary_without_the_feature() {
    let required = std::env::var("REQUIRE_CUDA").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "REQUIRE_CUDA=1 but this test binary was built without the `cuda` feature \
         (run `cargo test -p engine --features cuda`)"
    );
    println!("skipped: no CUDA device (engine built without the `cuda` feature)");
}
