//! Regenerates `onnx-pb/src/onnx.rs` from `onnx-pb/proto/onnx.proto` with prost-build and a vendored
//! protoc. Run from the repository root: `cargo run --manifest-path onnx-pb/gen/Cargo.toml`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let proto = root.join("proto/onnx.proto");
    let out = root.join("src");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    config.out_dir(&out);
    config.compile_protos(&[&proto], &[root.join("proto")])?;
    println!("wrote {}", out.join("onnx.rs").display());
    Ok(())
}
