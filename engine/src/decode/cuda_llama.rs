//! The fused llama decode path on CUDA: recognises packages built by [`crate::llama`] (`engine
//! tiny`, `engine convert`), uploads their weights once in the package's float type (rows
//! transposed to `[out, in]`; q/k/v and gate/up concatenated), and runs each token as 5 kernels
//! per layer plus embed, lm_head (with a first argmax stage) and argmax
//! (`backend/cuda/kernels/llama.cu`).
//!
//! Why not the generic executor: at SmolLM2-135M's size a step is bound by kernel count, not by
//! bandwidth. A hand-written PyTorch decode of this shape captured in one CUDA graph ran ~1000
//! small kernels at ≈ 3.5 µs each on an H200, while the f16 weights stream in ~56 µs at
//! 4.8 TB/s; so per-ONNX-node execution cannot reach the 2000 tok/s target, and fusing each
//! layer into a handful of kernels can.
//!
//! It lives in `decode/`, not `backend/`: it is a whole decoder (package geometry, KV cache,
//! timing), not a backend primitive. It uses the CUDA backend's [`Device`] (context, stream,
//! NVRTC compile and PTX cache); its kernels, `kernels/llama.cu`, stay with the backend's
//! sources, which the device compiles by module name (see `backend/cuda/mod.rs`, `SOURCES`).
//!
//! The KV cache lives on the device (`[kv_heads, capacity, head_dim]` per layer and K/V); the
//! token and position live in a device buffer that argmax updates, so a step needs no host
//! input and is captured once as a CUDA graph and replayed (the prompt is fed token by token
//! through the same step, its ids written into that buffer before each replay). Only the sampled
//! token id (4 bytes) comes back per step.
//!
//! On sm_90+ every kernel of the step is launched with programmatic dependent launch
//! ([`launch_ex`]): it loads its weight rows into registers, then waits for the previous kernel
//! (`griddepcontrol.wait`), so launch latency and weight fetch overlap the previous kernel
//! (H200, SmolLM2 f16 with graphs: 1101 -> 1217 tok/s; `ENGINE_CUDA_PDL=0` turns it off).
//!
//! What remains after the wait is the critical path of the step, so it is kept short: the
//! RMSNorm before q/k/v and gate/up is computed by each warp from the x chunks it loads for its
//! own dot products (no shared-memory staging, no block barrier), the RoPE angle is computed
//! before the wait, and the residual is read in the shadow of the staging loads. Measured on
//! the H200 in one session (SmolLM2 f16 with graphs): 1747 -> 2137 tok/s; f32 1398 -> 1647.
//! `ENGINE_CUDA_KERNEL_SRC` (see [`crate::backend::cuda::KERNEL_SRC_ENV`]) loads kernel sources
//! from a directory instead, for work on a GPU machine without a Rust toolchain.

use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::{CudaBlas, sys as cublas_sys};
use cudarc::driver::{
    CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, sys,
};

use crate::backend::cuda::{Device, cu_err};
use crate::decode::{CudaGraphStats, DecodeRun, Decoder, DeviceKvStats};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::onnx::Model;
use crate::package::Package;
use crate::tensor::Tensor;

/// Threads per block of every kernel but argmax (8 warps).
const BLOCK: u32 = 256;
const WARPS: u32 = BLOCK / 32;
/// Largest KV capacity when the package does not give its context length (`genai_config.json`'s
/// `model.context_length`, 8192 for SmolLM2). The decode attention splits the context over
/// blocks of [`BLOCK`] keys, so nothing in shared memory grows with it; positions stay far
/// inside the kernels' `int` arithmetic.
const DEFAULT_MAX_SEQ: usize = 1 << 17;
/// Largest KV capacity of the experimental persistent step, which keeps one f32 score per
/// position in shared memory (under the 48 KiB every GPU grants without opt-in).
const PERSISTENT_MAX_SEQ: usize = 8192;
/// Longest vector a kernel stages in shared memory (the GEMV inputs: hidden, heads * head_dim,
/// ffn), in floats: 40 KiB, under the 48 KiB every GPU grants without opt-in.
const MAX_STAGED: usize = 10240;
/// Most lm_head blocks: each warp then walks a few row pairs, and argmax reads one candidate per
/// block (at most one per thread of its single 1024-thread block).
const MAX_LM_BLOCKS: usize = 1024;

/// lm_head blocks for a vocabulary: two rows per warp per pass, capped at [`MAX_LM_BLOCKS`].
fn lm_blocks(vocab: usize) -> usize {
    vocab.div_ceil(2 * WARPS as usize).clamp(1, MAX_LM_BLOCKS)
}

/// One kernel argument of [`launch_ex`]: a device address, an `int` or a `float`.
#[derive(Clone, Copy, Debug)]
enum Arg {
    P(u64),
    I(i32),
    F(f32),
}

/// Launches `f` on `st` through `cuLaunchKernelEx`, with programmatic stream serialization when
/// `pdl` (sm_90+): the kernel may begin while the previous kernel on the stream still runs, and
/// waits for it with `griddepcontrol.wait` (every kernel of the step does, in `pdl_enter`,
/// before touching anything an earlier kernel wrote). The attribute carries into a captured
/// CUDA graph as programmatic edges. `smem_floats` is the dynamic shared memory in floats.
///
/// # Safety
/// `args` must match `f`'s parameter list in number, order and type, and every `Arg::P` must be
/// the address of a live device allocation of the size the kernel indexes for this geometry
/// (the kernel dereferences them on the GPU; nothing here can check it).
#[allow(clippy::too_many_arguments)]
unsafe fn launch_ex(
    st: &CudaStream,
    f: &CudaFunction,
    what: &str,
    grid: (u32, u32),
    block: u32,
    smem_floats: usize,
    pdl: bool,
    args: &[Arg],
) -> Result<()> {
    // Each argument in an 8-byte slot; a 4-byte int or float sits in the low bytes (little
    // endian), and the driver reads each parameter's own size from its slot.
    let mut slots: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::P(p) => p,
            Arg::I(i) => u64::from(i as u32),
            Arg::F(x) => u64::from(x.to_bits()),
        })
        .collect();
    let mut params: Vec<*mut std::ffi::c_void> = slots
        .iter_mut()
        .map(|v| (v as *mut u64).cast::<std::ffi::c_void>())
        .collect();
    // SAFETY: an all-zero CUlaunchAttribute is a valid (ignored) attribute; its fields are set
    // below.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid.0.max(1),
        gridDimY: grid.1.max(1),
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: (smem_floats * 4) as u32,
        hStream: st.cu_stream(),
        attrs: &mut attr,
        numAttrs: u32::from(pdl),
    };
    // SAFETY: the caller passes live device addresses sized for the kernel's geometry and an
    // argument list matching the kernel's signature in kernels/llama.cu; `params` points into
    // `slots`, both alive across the call (the driver copies the values at launch).
    unsafe {
        sys::cuLaunchKernelEx(
            &cfg,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(cu_err(&format!("kernel {what}")))
}

/// Geometry read from the package.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaShape {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub eps: f32,
    pub dtype: DType,
}

struct Layer {
    ln1: CudaSlice<f32>,
    ln2: CudaSlice<f32>,
    /// `[(heads + 2 kv_heads) * head_dim, hidden]`.
    wqkv: CudaSlice<u8>,
    /// `[hidden, heads * head_dim]`.
    wo: CudaSlice<u8>,
    /// `[2 ffn, hidden]`: gate rows then up rows.
    wgu: CudaSlice<u8>,
    /// `[hidden, ffn]`.
    wd: CudaSlice<u8>,
    kc: Option<CudaSlice<u8>>,
    vc: Option<CudaSlice<u8>>,
}

/// Mirrors `struct StepParams` in kernels/llama.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct StepParams {
    h: i32,
    nh: i32,
    kvh: i32,
    d: i32,
    f: i32,
    vocab: i32,
    layers: i32,
    cap: i32,
    eps: f32,
    scale: f32,
}

// SAFETY: `StepParams` is `repr(C)` plain data with the layout of the C struct it is passed as.
unsafe impl DeviceRepr for StepParams {}

/// The persistent one-kernel step (`step_persistent_*`): one block per SM, phases separated by a
/// grid barrier. Experimental, opt-in with `ENGINE_CUDA_PERSISTENT=1`, not the default because
/// it measured slower on the H200 (SmolLM2 f16 with graphs: 901 tok/s vs 1048 for the 5-kernel
/// path; same tokens on every golden): its 152 atomic/spin barriers per step cost more than the
/// kernel boundaries they replace. Kept as the base for a cheaper barrier (per-phase flags,
/// fewer phases). It needs every block resident at once (true when nothing else shares the GPU).
struct Persistent {
    f: CudaFunction,
    /// Per layer 8 device addresses (see the kernel).
    tab: Option<CudaSlice<u64>>,
    bar: CudaSlice<u32>,
    blocks: u32,
}

struct Kernels {
    embed: CudaFunction,
    qkv: CudaFunction,
    attention: CudaFunction,
    gemv_residual: CudaFunction,
    gate_up: CudaFunction,
    rms_gemv: CudaFunction,
    argmax: CudaFunction,
}

/// Most prompt rows one batched prefill pass takes: a longer prompt is prefilled in chunks, each
/// seeing the cache the earlier ones wrote. Bounds the scratch (f32 SmolLM2: the gate/up
/// product is 4096 x 3072 floats, 50 MB).
const PREFILL_CHUNK: usize = 4096;
/// Head sizes `kernels/prefill.cu` compiles an attention kernel for.
const PREFILL_HEAD_DIMS: &[usize] = &[16, 32, 64, 128];
/// `ENGINE_CUDA_PREFILL=step` feeds the prompt token by token through the decode step instead
/// of the batched prefill (for comparison; the default is `batched`).
pub const PREFILL_ENV: &str = "ENGINE_CUDA_PREFILL";

/// The batched prefill (`kernels/prefill.cu` and cuBLAS): the prompt as `[n, hidden]` rows
/// through each layer, its GEMMs on tensor cores for f16/bf16 (f32 accumulation and outputs),
/// causal flash attention writing nothing of size n x n.
struct Prefill {
    blas: CudaBlas,
    embed_rows: CudaFunction,
    rms_rows: CudaFunction,
    rope_kv: CudaFunction,
    silu_mul: CudaFunction,
    attention: CudaFunction,
    /// Threads per attention block: 128 (4 warps of tensor-core tiles) or 64 (one per row).
    attention_block: u32,
    bufs: Option<PrefillBufs>,
}

/// Scratch for up to `rows` prompt rows.
struct PrefillBufs {
    rows: usize,
    ids: CudaSlice<i32>,
    /// The residual stream, `[rows, hidden]`.
    x: CudaSlice<f32>,
    /// A GEMM input in the package's type: the normed rows `[rows, hidden]`, then the SwiGLU
    /// activations `[rows, ffn]`.
    xn: CudaSlice<u8>,
    /// q/k/v before RoPE, `[rows, (heads + 2 kv_heads) head_dim]`.
    qkv: CudaSlice<f32>,
    /// Rotated queries, `[rows, heads head_dim]` in the package's type.
    q: CudaSlice<u8>,
    /// Attention output, `[rows, heads head_dim]` in the package's type.
    att: CudaSlice<u8>,
    /// Gate and up, `[rows, 2 ffn]`.
    gu: CudaSlice<f32>,
}

/// The fused decoder. Not `Sync`: one decode at a time.
pub struct LlamaDecoder {
    dev: Arc<Device>,
    shape: LlamaShape,
    k: Kernels,
    layers: Vec<Layer>,
    embed: CudaSlice<u8>,
    norm: CudaSlice<f32>,
    inv_freq: CudaSlice<f32>,
    x: CudaSlice<f32>,
    q: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    act: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    /// Per lm_head block: its best logit and that logit's (lowest) index.
    cand_v: CudaSlice<f32>,
    cand_i: CudaSlice<i32>,
    /// `[token, position]`.
    state: CudaSlice<i32>,
    /// The decode attention's per-(head, split) partial outputs, maxima and sums,
    /// `heads * capacity / BLOCK * (head_dim + 2)` floats (allocated with the cache).
    split_part: Option<CudaSlice<f32>>,
    /// Per head, how many splits of the current step have finished (reset by the last).
    split_count: CudaSlice<u32>,
    /// Most positions the cache may hold: the package's context length.
    max_seq: usize,
    persistent: Option<Persistent>,
    /// The batched prefill; `None` feeds the prompt through the decode step (head size without
    /// a compiled attention kernel, or `ENGINE_CUDA_PREFILL=step`).
    prefill: Option<Prefill>,
    /// Launch with programmatic dependent launch (sm_90+, unless `ENGINE_CUDA_PDL=0`).
    pdl: bool,
    capacity: usize,
    use_graph: bool,
    graph: Option<CudaGraph>,
    /// An eager step has run since the buffers were (re)allocated: capture may begin.
    warmed: bool,
    /// Capture failed: every later step runs eagerly.
    graph_broken: bool,
    graph_stats: CudaGraphStats,
    kv_stats: DeviceKvStats,
}

impl std::fmt::Debug for LlamaDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaDecoder")
            .field("shape", &self.shape)
            .field("capacity", &self.capacity)
            .finish()
    }
}

fn not_llama(model: &Model, why: String) -> Error {
    Error::package(
        &model.path,
        format!(
            "the CUDA decoder runs llama packages made by `engine tiny` / `engine convert`: {why}"
        ),
    )
}

fn weight<'a>(model: &'a Model, name: &str, shape: &[usize]) -> Result<&'a Tensor> {
    let t = model
        .initializers
        .get(name)
        .ok_or_else(|| not_llama(model, format!("no initializer {name}")))?;
    if t.shape() != shape {
        return Err(not_llama(
            model,
            format!("{name} has shape {:?}, expected {shape:?}", t.shape()),
        ));
    }
    Ok(t)
}

/// Reads the llama geometry of a package built by [`crate::llama::build`].
pub fn recognise(package: &Package) -> Result<LlamaShape> {
    let model = &package.model;
    let embed = model
        .initializers
        .get("model.embed_tokens.weight")
        .ok_or_else(|| not_llama(model, "no initializer model.embed_tokens.weight".into()))?;
    let (vocab, hidden) = match embed.shape() {
        [v, h] => (*v, *h),
        s => return Err(not_llama(model, format!("embedding has shape {s:?}"))),
    };
    let layers = package.io.layers.len();
    let (kv_heads, head_dim) = (package.io.kv_heads, package.io.head_dim);
    let q = model
        .initializers
        .get("model.layers.0.self_attn.q_proj.weight")
        .ok_or_else(|| not_llama(model, "no q_proj weight in layer 0".into()))?;
    let qo = q.shape().get(1).copied().unwrap_or(0);
    if head_dim == 0 || !qo.is_multiple_of(head_dim) || kv_heads == 0 {
        return Err(not_llama(model, format!("q_proj shape {:?}", q.shape())));
    }
    let heads = qo / head_dim;
    let ffn = model
        .initializers
        .get("model.layers.0.mlp.gate_proj.weight")
        .and_then(|t| t.shape().get(1).copied())
        .ok_or_else(|| not_llama(model, "no gate_proj weight in layer 0".into()))?;
    let eps_node = model
        .nodes
        .iter()
        .find(|n| n.name == "/model/layers.0/input_layernorm/SimplifiedLayerNormalization")
        .ok_or_else(|| not_llama(model, "no input_layernorm node in layer 0".into()))?;
    let eps = eps_node
        .attributes
        .iter()
        .find(|a| a.name.as_deref() == Some("epsilon"))
        .and_then(|a| a.f)
        .unwrap_or(1e-5);
    let dtype = embed.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(not_llama(model, format!("weights are {dtype}")));
    }
    if !heads.is_multiple_of(kv_heads)
        || !head_dim.is_multiple_of(2)
        || head_dim > BLOCK as usize
        || !(BLOCK as usize).is_multiple_of(head_dim)
        || ffn > MAX_STAGED
        || heads * head_dim > MAX_STAGED
        || hidden > MAX_STAGED
    {
        return Err(not_llama(
            model,
            format!(
                "unsupported geometry: {heads} heads, {kv_heads} kv heads, head dim {head_dim}, hidden {hidden}, ffn {ffn}"
            ),
        ));
    }
    Ok(LlamaShape {
        vocab,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        ffn,
        eps,
        dtype,
    })
}

/// `[rows, cols]` row-major in its native element type → `[cols, rows]` bytes.
fn transposed(t: &Tensor) -> Vec<u8> {
    let (rows, cols) = (t.shape()[0], t.shape()[1]);
    let bytes = t.data().to_le_bytes();
    let es = t.dtype().size();
    let mut out = vec![0u8; bytes.len()];
    for r in 0..rows {
        for c in 0..cols {
            let src = (r * cols + c) * es;
            let dst = (c * rows + r) * es;
            out[dst..dst + es].copy_from_slice(&bytes[src..src + es]);
        }
    }
    out
}

/// The RoPE inverse frequencies the graph uses: the f32 constant multiplied by the positions in
/// `/model/rope/Mul` (taken from the graph so the GPU rotates exactly as the CPU does).
fn inv_freq(model: &Model, half: usize) -> Result<Vec<f32>> {
    let node = model
        .nodes
        .iter()
        .find(|n| n.name == "/model/rope/Mul")
        .ok_or_else(|| not_llama(model, "no /model/rope/Mul node".into()))?;
    let t = node
        .inputs
        .iter()
        .filter_map(|i| model.initializers.get(i))
        .find(|t| t.numel() == half)
        .ok_or_else(|| {
            not_llama(
                model,
                "no inverse-frequency constant in /model/rope/Mul".into(),
            )
        })?;
    Ok(t.to_f32_vec())
}

impl LlamaDecoder {
    /// Uploads the package's weights; `use_graph` captures the step in a CUDA graph.
    pub fn new(package: &Package, use_graph: bool) -> Result<LlamaDecoder> {
        let shape = recognise(package)?;
        let dev = Device::new()?;
        let model = &package.model;
        let s = &shape;
        let (h, d) = (s.hidden, s.head_dim);
        let st = &dev.stream;
        let up_f32 = |v: &[f32]| st.clone_htod(v).map_err(cu_err("upload"));
        let up = |v: &[u8]| st.clone_htod(v).map_err(cu_err("upload weights"));
        let mut layers = Vec::with_capacity(s.layers);
        for l in 0..s.layers {
            let p = |n: &str| format!("model.layers.{l}.{n}.weight");
            let ln1 = weight(model, &p("input_layernorm"), &[h])?.to_f32_vec();
            let ln2 = weight(model, &p("post_attention_layernorm"), &[h])?.to_f32_vec();
            let mut wqkv = transposed(weight(model, &p("self_attn.q_proj"), &[h, s.heads * d])?);
            wqkv.extend(transposed(weight(
                model,
                &p("self_attn.k_proj"),
                &[h, s.kv_heads * d],
            )?));
            wqkv.extend(transposed(weight(
                model,
                &p("self_attn.v_proj"),
                &[h, s.kv_heads * d],
            )?));
            let wo = transposed(weight(model, &p("self_attn.o_proj"), &[s.heads * d, h])?);
            let mut wgu = transposed(weight(model, &p("mlp.gate_proj"), &[h, s.ffn])?);
            wgu.extend(transposed(weight(model, &p("mlp.up_proj"), &[h, s.ffn])?));
            let wd = transposed(weight(model, &p("mlp.down_proj"), &[s.ffn, h])?);
            layers.push(Layer {
                ln1: up_f32(&ln1)?,
                ln2: up_f32(&ln2)?,
                wqkv: up(&wqkv)?,
                wo: up(&wo)?,
                wgu: up(&wgu)?,
                wd: up(&wd)?,
                kc: None,
                vc: None,
            });
        }
        let embed = up(&weight(model, "model.embed_tokens.weight", &[s.vocab, h])?
            .data()
            .to_le_bytes())?;
        let norm = up_f32(&weight(model, "model.norm.weight", &[h])?.to_f32_vec())?;
        let inv_freq = up_f32(&inv_freq(model, d / 2)?)?;
        let sfx = match s.dtype {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            _ => "f32",
        };
        let f = |n: &str| dev.function("llama", &format!("{n}_{sfx}"));
        let k = Kernels {
            embed: f("embed")?,
            qkv: f("rms_qkv_rope")?,
            attention: f("attention")?,
            gemv_residual: f("gemv_residual")?,
            gate_up: f("rms_gate_up")?,
            rms_gemv: f("rms_gemv")?,
            argmax: dev.function("llama", "argmax_next")?,
        };
        let prefill = match std::env::var(PREFILL_ENV).as_deref() {
            Ok("step") => None,
            Ok("batched") | Err(_) if PREFILL_HEAD_DIMS.contains(&d) => {
                let pf = |n: &str| dev.function("prefill", &format!("{n}_{sfx}"));
                let mma = s.dtype != DType::F32;
                let kind = if mma { "mma" } else { "simt" };
                Some(Prefill {
                    blas: CudaBlas::new(st.clone()).map_err(cu_err("create a cuBLAS handle"))?,
                    embed_rows: pf("embed_rows")?,
                    rms_rows: pf("rms_rows")?,
                    rope_kv: pf("rope_kv")?,
                    silu_mul: pf("silu_mul")?,
                    attention: dev
                        .function("prefill", &format!("flash_prefill_{kind}_{sfx}_d{d}"))?,
                    attention_block: if mma { 128 } else { 64 },
                    bufs: None,
                })
            }
            Ok("batched") | Err(_) => None,
            Ok(other) => {
                return Err(Error::msg(format!(
                    "{PREFILL_ENV}={other:?}: expected `batched` or `step`"
                )));
            }
        };
        let z = |n: usize| st.alloc_zeros::<f32>(n).map_err(cu_err("alloc"));
        let persistent = if std::env::var("ENGINE_CUDA_PERSISTENT").is_ok_and(|v| v == "1") {
            let sms = dev
                .ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(cu_err("read the SM count"))?;
            Some(Persistent {
                f: f("step_persistent")?,
                tab: None,
                bar: st.alloc_zeros::<u32>(2).map_err(cu_err("alloc"))?,
                blocks: sms.clamp(1, MAX_LM_BLOCKS as i32) as u32,
            })
        } else {
            None
        };
        Ok(LlamaDecoder {
            x: z(h)?,
            q: z(s.heads * d)?,
            attn: z(s.heads * d)?,
            act: z(s.ffn)?,
            logits: z(s.vocab)?,
            cand_v: z(MAX_LM_BLOCKS)?,
            cand_i: st
                .alloc_zeros::<i32>(MAX_LM_BLOCKS)
                .map_err(cu_err("alloc"))?,
            persistent,
            prefill,
            pdl: dev.arch().0 >= 9 && !std::env::var("ENGINE_CUDA_PDL").is_ok_and(|v| v == "0"),
            state: st.alloc_zeros::<i32>(2).map_err(cu_err("alloc"))?,
            split_part: None,
            split_count: st.alloc_zeros::<u32>(s.heads).map_err(cu_err("alloc"))?,
            max_seq: package
                .genai
                .as_ref()
                .and_then(|g| g.model.context_length)
                .unwrap_or(DEFAULT_MAX_SEQ)
                .min(DEFAULT_MAX_SEQ),
            shape,
            k,
            layers,
            embed,
            norm,
            inv_freq,
            capacity: 0,
            use_graph,
            graph: None,
            warmed: false,
            graph_broken: false,
            graph_stats: CudaGraphStats {
                enabled: use_graph,
                ..Default::default()
            },
            kv_stats: DeviceKvStats::default(),
            dev,
        })
    }

    pub fn shape(&self) -> &LlamaShape {
        &self.shape
    }

    /// Makes room for `tokens` positions (capacity grows in steps of 1024, up to the model's
    /// context length); a new allocation invalidates the captured graph, which bakes in buffer
    /// addresses.
    fn ensure_capacity(&mut self, tokens: usize) -> Result<()> {
        if tokens > self.max_seq {
            return Err(Error::msg(format!(
                "cuda decoder: {tokens} positions exceed the model's context length of {}",
                self.max_seq
            )));
        }
        if self.persistent.is_some() && tokens > PERSISTENT_MAX_SEQ {
            return Err(Error::msg(format!(
                "cuda decoder: the persistent step (ENGINE_CUDA_PERSISTENT=1) holds at most {PERSISTENT_MAX_SEQ} positions, not {tokens}"
            )));
        }
        if tokens <= self.capacity {
            return Ok(());
        }
        let cap = tokens.div_ceil(1024) * 1024;
        let s = &self.shape;
        let bytes = s.kv_heads * cap * s.head_dim * s.dtype.size();
        for l in &mut self.layers {
            l.kc = None;
            l.vc = None;
            l.kc = Some(
                self.dev
                    .stream
                    .alloc_zeros::<u8>(bytes)
                    .map_err(cu_err("alloc kv"))?,
            );
            l.vc = Some(
                self.dev
                    .stream
                    .alloc_zeros::<u8>(bytes)
                    .map_err(cu_err("alloc kv"))?,
            );
        }
        self.capacity = cap;
        let splits = cap / BLOCK as usize;
        self.split_part = None;
        self.split_part = Some(
            self.dev
                .stream
                .alloc_zeros::<f32>(s.heads * splits * (s.head_dim + 2))
                .map_err(cu_err("alloc attention splits"))?,
        );
        if let Some(p) = self.persistent.as_mut() {
            let st = &self.dev.stream;
            let mut tab: Vec<u64> = Vec::with_capacity(8 * self.layers.len());
            for l in &self.layers {
                let (Some(kc), Some(vc)) = (l.kc.as_ref(), l.vc.as_ref()) else {
                    return Err(Error::msg("cuda decoder: KV cache not allocated"));
                };
                tab.extend([
                    l.wqkv.device_ptr(st).0,
                    l.wo.device_ptr(st).0,
                    l.wgu.device_ptr(st).0,
                    l.wd.device_ptr(st).0,
                    l.ln1.device_ptr(st).0,
                    l.ln2.device_ptr(st).0,
                    kc.device_ptr(st).0,
                    vc.device_ptr(st).0,
                ]);
            }
            p.tab = Some(st.clone_htod(&tab).map_err(cu_err("upload layer table"))?);
        }
        self.graph = None;
        self.warmed = false;
        Ok(())
    }

    /// Enqueues one decode step on the stream (eagerly, or into a capture).
    fn launch_step(&mut self) -> Result<()> {
        let s = self.shape.clone();
        let st = self.dev.stream.clone();
        self.dev
            .ctx
            .bind_to_thread()
            .map_err(cu_err("bind context"))?;
        let (h, nh, kvh, d, f) = (
            s.hidden as i32,
            s.heads as i32,
            s.kv_heads as i32,
            s.head_dim as i32,
            s.ffn as i32,
        );
        let (vocab, cap, eps) = (s.vocab as i32, self.capacity as i32, s.eps);
        let scale = 1.0f32 / (s.head_dim as f32).sqrt();
        let grid = |n: usize| (n as u32).div_ceil(WARPS);
        let cfg = |blocks: u32, smem_floats: usize| LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: (smem_floats * 4) as u32,
        };
        let rms_smem = 32 + s.hidden;
        // Reduction, partial outputs (8 floats per thread at most), the query, the scores of
        // one split.
        let attn_smem = 32 + 8 * BLOCK as usize + s.head_dim + BLOCK as usize;
        if let Some(p) = &self.persistent {
            // The persistent step's attention keeps a score per cached position.
            let attn_smem = 32 + 8 * BLOCK as usize + s.head_dim + self.capacity;
            let Some(tab) = p.tab.as_ref() else {
                return Err(Error::msg("cuda decoder: layer table not built"));
            };
            let params = StepParams {
                h,
                nh,
                kvh,
                d,
                f,
                vocab,
                layers: s.layers as i32,
                cap,
                eps,
                scale,
            };
            let smem = rms_smem.max(attn_smem);
            // SAFETY: the table holds live device addresses of this decoder's buffers (rebuilt
            // on every KV reallocation); arguments match step_persistent_* . Memory safety does
            // not depend on residency, but progress does: this is an ordinary launch, and one
            // 256-thread block per SM is resident at once only when nothing else shares the GPU
            // (no MPS client, no other context, not a MIG slice); otherwise the grid barrier
            // waits forever. That, and its speed, is why the path is opt-in only.
            unsafe {
                st.launch_builder(&p.f)
                    .arg(&self.embed)
                    .arg(tab)
                    .arg(&self.norm)
                    .arg(&self.inv_freq)
                    .arg(&self.x)
                    .arg(&self.q)
                    .arg(&self.attn)
                    .arg(&self.act)
                    .arg(&self.logits)
                    .arg(&self.cand_v)
                    .arg(&self.cand_i)
                    .arg(&self.state)
                    .arg(&p.bar)
                    .arg(&params)
                    .launch(cfg(p.blocks, smem))
                    .map_err(cu_err("kernel step_persistent"))?;
            }
            return Ok(());
        }
        let ptr = |b: &CudaSlice<f32>| b.device_ptr(&st).0;
        let (x, q, attn, act) = (ptr(&self.x), ptr(&self.q), ptr(&self.attn), ptr(&self.act));
        let state = self.state.device_ptr(&st).0;
        let embed = self.embed.device_ptr(&st).0;
        let inv_freq = ptr(&self.inv_freq);
        let splits = (self.capacity / BLOCK as usize) as u32;
        let Some(split_part) = self.split_part.as_ref().map(ptr) else {
            return Err(Error::msg(
                "cuda decoder: attention split scratch not allocated",
            ));
        };
        let split_count = self.split_count.device_ptr(&st).0;
        let pdl = self.pdl;
        let launch =
            |f: &CudaFunction, what: &str, grid: u32, block: u32, smem: usize, a: &[Arg]| {
                // SAFETY: every call below passes its kernel's parameters in `llama.cu`'s order,
                // with addresses of this decoder's own buffers, sized for the model's geometry
                // when they were allocated (`new`/`ensure_capacity`).
                unsafe { launch_ex(&st, f, what, (grid, 1), block, smem, pdl, a) }
            };
        use Arg::{F, I, P};
        launch(
            &self.k.embed,
            "embed",
            (s.hidden as u32).div_ceil(BLOCK),
            BLOCK,
            0,
            &[P(embed), P(state), P(x), I(h)],
        )?;
        for l in &self.layers {
            let (Some(kc), Some(vc)) = (l.kc.as_ref(), l.vc.as_ref()) else {
                return Err(Error::msg("cuda decoder: KV cache not allocated"));
            };
            let (kc, vc) = (kc.device_ptr(&st).0, vc.device_ptr(&st).0);
            let (ln1, ln2) = (ptr(&l.ln1), ptr(&l.ln2));
            let w = |b: &CudaSlice<u8>| b.device_ptr(&st).0;
            launch(
                &self.k.qkv,
                "rms_qkv_rope",
                grid((s.heads + 2 * s.kv_heads) * s.head_dim / 2),
                BLOCK,
                // The RMSNorm is warp-local (`rms_dot2`): no shared memory.
                0,
                &[
                    P(x),
                    P(ln1),
                    F(eps),
                    P(w(&l.wqkv)),
                    I(h),
                    I(nh),
                    I(kvh),
                    I(d),
                    P(inv_freq),
                    P(state),
                    P(q),
                    P(kc),
                    P(vc),
                    I(cap),
                ],
            )?;
            launch(
                &self.k.attention,
                "attention",
                s.heads as u32 * splits,
                BLOCK,
                attn_smem,
                &[
                    P(q),
                    P(kc),
                    P(vc),
                    P(state),
                    I(nh),
                    I(kvh),
                    I(d),
                    I(cap),
                    F(scale),
                    P(attn),
                    P(split_part),
                    P(split_count),
                ],
            )?;
            let od = nh * d;
            launch(
                &self.k.gemv_residual,
                "gemv_residual (o_proj)",
                grid(s.hidden),
                BLOCK,
                od as usize,
                &[P(w(&l.wo)), P(attn), P(x), I(h), I(od)],
            )?;
            launch(
                &self.k.gate_up,
                "rms_gate_up",
                grid(s.ffn),
                BLOCK,
                0,
                &[P(x), P(ln2), F(eps), P(w(&l.wgu)), I(h), I(f), P(act)],
            )?;
            launch(
                &self.k.gemv_residual,
                "gemv_residual (down_proj)",
                grid(s.hidden),
                BLOCK,
                s.ffn,
                &[P(w(&l.wd)), P(act), P(x), I(h), I(f)],
            )?;
        }
        self.launch_head()
    }

    /// Enqueues the batched prefill of `ids` at positions `pos0..`: their K/V go into the cache,
    /// and the residual of the last row into `self.x` with `state = [0, last position]`, ready
    /// for [`Self::launch_head`].
    fn prefill_chunk(&mut self, ids: &[u32], pos0: usize) -> Result<()> {
        let mut pf = self
            .prefill
            .take()
            .ok_or_else(|| Error::msg("cuda decoder: no batched prefill"))?;
        let r = self.prefill_with(&mut pf, ids, pos0);
        self.prefill = Some(pf);
        r
    }

    fn prefill_with(&mut self, pf: &mut Prefill, ids: &[u32], pos0: usize) -> Result<()> {
        let s = self.shape.clone();
        let (n, d, es) = (ids.len(), s.head_dim, s.dtype.size());
        let st = self.dev.stream.clone();
        let qkv_w = (s.heads + 2 * s.kv_heads) * d;
        if pf.bufs.as_ref().is_none_or(|b| b.rows < n) {
            pf.bufs = None;
            let rows = n;
            let zf = |len: usize| st.alloc_zeros::<f32>(len).map_err(cu_err("alloc prefill"));
            let zt = |len: usize| {
                st.alloc_zeros::<u8>(len * es)
                    .map_err(cu_err("alloc prefill"))
            };
            pf.bufs = Some(PrefillBufs {
                rows,
                ids: st
                    .alloc_zeros::<i32>(rows)
                    .map_err(cu_err("alloc prefill"))?,
                x: zf(rows * s.hidden)?,
                xn: zt(rows * s.hidden.max(s.ffn))?,
                qkv: zf(rows * qkv_w)?,
                q: zt(rows * s.heads * d)?,
                att: zt(rows * s.heads * d)?,
                gu: zf(rows * 2 * s.ffn)?,
            });
        }
        let Some(b) = pf.bufs.as_mut() else {
            return Err(Error::msg("cuda decoder: prefill scratch not allocated"));
        };
        let host: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        st.memcpy_htod(&host, &mut b.ids.slice_mut(0..n))
            .map_err(cu_err("upload prompt"))?;
        let b = &*b;
        let f32p = |v: &CudaSlice<f32>| v.device_ptr(&st).0;
        let u8p = |v: &CudaSlice<u8>| v.device_ptr(&st).0;
        let (x, xn, qkv, q, att, gu) = (
            f32p(&b.x),
            u8p(&b.xn),
            f32p(&b.qkv),
            u8p(&b.q),
            u8p(&b.att),
            f32p(&b.gu),
        );
        let (h, nh, kvh, di, f) = (
            s.hidden as i32,
            s.heads as i32,
            s.kv_heads as i32,
            d as i32,
            s.ffn as i32,
        );
        let (ni, p0, cap) = (n as i32, pos0 as i32, self.capacity as i32);
        let scale = 1.0f32 / (d as f32).sqrt();
        let launch = |fun: &CudaFunction, what: &str, grid: (u32, u32), block: u32, a: &[Arg]| {
            // SAFETY: every call passes its kernel's parameters in `prefill.cu`'s order, with
            // addresses of this decoder's buffers: scratch sized for `rows >= n` rows above, the
            // cache for `capacity >= pos0 + n` positions (`ensure_capacity` before prefill).
            unsafe { launch_ex(&st, fun, what, grid, block, 0, false, a) }
        };
        let blocks = |work: usize| (work.div_ceil(BLOCK as usize) as u32, 1);
        use Arg::{F, I, P};
        launch(
            &pf.embed_rows,
            "embed_rows",
            (n as u32, 1),
            BLOCK,
            &[
                P(self.embed.device_ptr(&st).0),
                P(b.ids.device_ptr(&st).0),
                P(x),
                I(h),
                I(ni),
            ],
        )?;
        let rows_grid = ((n as u32).div_ceil(WARPS), 1);
        for l in &self.layers {
            let (Some(kc), Some(vc)) = (l.kc.as_ref(), l.vc.as_ref()) else {
                return Err(Error::msg("cuda decoder: KV cache not allocated"));
            };
            let (kc, vc) = (u8p(kc), u8p(vc));
            launch(
                &pf.rms_rows,
                "rms_rows (input_layernorm)",
                rows_grid,
                BLOCK,
                &[P(x), P(f32p(&l.ln1)), F(s.eps), I(h), I(ni), P(xn)],
            )?;
            Self::gemm(
                &pf.blas,
                s.dtype,
                u8p(&l.wqkv),
                xn,
                qkv,
                n,
                qkv_w,
                s.hidden,
                0.0,
            )?;
            launch(
                &pf.rope_kv,
                "rope_kv",
                blocks(n * (s.heads + 2 * s.kv_heads) * d / 2),
                BLOCK,
                &[
                    P(qkv),
                    P(f32p(&self.inv_freq)),
                    I(p0),
                    I(ni),
                    I(nh),
                    I(kvh),
                    I(di),
                    P(q),
                    P(kc),
                    P(vc),
                    I(cap),
                ],
            )?;
            launch(
                &pf.attention,
                "flash_prefill",
                ((n as u32).div_ceil(64), s.heads as u32),
                pf.attention_block,
                &[
                    P(q),
                    P(kc),
                    P(vc),
                    I(ni),
                    I(p0),
                    I(nh),
                    I(kvh),
                    I(cap),
                    F(scale),
                    P(att),
                ],
            )?;
            Self::gemm(
                &pf.blas,
                s.dtype,
                u8p(&l.wo),
                att,
                x,
                n,
                s.hidden,
                s.heads * d,
                1.0,
            )?;
            launch(
                &pf.rms_rows,
                "rms_rows (post_attention_layernorm)",
                rows_grid,
                BLOCK,
                &[P(x), P(f32p(&l.ln2)), F(s.eps), I(h), I(ni), P(xn)],
            )?;
            Self::gemm(
                &pf.blas,
                s.dtype,
                u8p(&l.wgu),
                xn,
                gu,
                n,
                2 * s.ffn,
                s.hidden,
                0.0,
            )?;
            launch(
                &pf.silu_mul,
                "silu_mul",
                blocks(n * s.ffn),
                BLOCK,
                &[P(gu), I(f), I(ni), P(xn)],
            )?;
            Self::gemm(
                &pf.blas,
                s.dtype,
                u8p(&l.wd),
                xn,
                x,
                n,
                s.hidden,
                s.ffn,
                1.0,
            )?;
        }
        // The last row's residual feeds the decode step's lm_head.
        let last = (n - 1) * s.hidden;
        st.memcpy_dtod(&b.x.slice(last..last + s.hidden), &mut self.x)
            .map_err(cu_err("copy the last prefill row"))?;
        self.set_state(&[0, (pos0 + n - 1) as i32])
    }

    /// `c[n, out] (f32, row-major) = beta * c + x[n, k] w[out, k]^T` with `x` and `w` in the
    /// package's float type, accumulated in f32 (tensor cores for f16/bf16; f32 stays f32: no
    /// TF32). In cuBLAS's column-major terms: `c^T[out, n] = w^T... `, i.e. `op(A) = w` read
    /// transposed with `lda = k`, `B = x^T` with `ldb = k`, `ldc = out`.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        blas: &CudaBlas,
        dtype: DType,
        w: u64,
        x: u64,
        c: u64,
        n: usize,
        out: usize,
        k: usize,
        beta: f32,
    ) -> Result<()> {
        use cublas_sys::cudaDataType::{CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
        let t = match dtype {
            DType::F16 => CUDA_R_16F,
            DType::BF16 => CUDA_R_16BF,
            _ => CUDA_R_32F,
        };
        let alpha = 1.0f32;
        let op_t = cublas_sys::cublasOperation_t::CUBLAS_OP_T;
        let op_n = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
        // SAFETY: `w` holds `out * k`, `x` at least `n * k` and `c` at least `n * out` elements of
        // the types named (this decoder's weights and prefill scratch); alpha and beta are host
        // f32 scalars (cuBLAS's default pointer mode) alive across the call.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle(),
                op_t,
                op_n,
                out as i32,
                n as i32,
                k as i32,
                (&alpha as *const f32).cast(),
                w as *const std::ffi::c_void,
                t,
                k as i32,
                x as *const std::ffi::c_void,
                t,
                k as i32,
                (&beta as *const f32).cast(),
                c as *mut std::ffi::c_void,
                CUDA_R_32F,
                out as i32,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(cu_err("cuBLAS prefill gemm"))
    }

    /// Enqueues the lm_head over the residual row `self.x` (with the first argmax stage) and the
    /// final argmax, which writes the next token to `state[0]` and advances `state[1]`: the end
    /// of a decode step and of a batched prefill.
    fn launch_head(&self) -> Result<()> {
        let s = &self.shape;
        let st = self.dev.stream.clone();
        let ptr = |b: &CudaSlice<f32>| b.device_ptr(&st).0;
        let (x, state, embed) = (
            ptr(&self.x),
            self.state.device_ptr(&st).0,
            self.embed.device_ptr(&st).0,
        );
        let (h, vocab, eps, pdl) = (s.hidden as i32, s.vocab as i32, s.eps, self.pdl);
        let rms_smem = 32 + s.hidden;
        let launch =
            |f: &CudaFunction, what: &str, grid: u32, block: u32, smem: usize, a: &[Arg]| {
                // SAFETY: as in `launch_step`: parameters in `llama.cu`'s order, addresses of
                // this decoder's own buffers sized for the model's geometry.
                unsafe { launch_ex(&st, f, what, (grid, 1), block, smem, pdl, a) }
            };
        use Arg::{F, I, P};
        let nc = lm_blocks(s.vocab) as i32;
        launch(
            &self.k.rms_gemv,
            "rms_gemv (lm_head)",
            nc as u32,
            BLOCK,
            rms_smem,
            &[
                P(x),
                P(ptr(&self.norm)),
                F(eps),
                P(embed),
                I(h),
                I(vocab),
                P(ptr(&self.logits)),
                P(ptr(&self.cand_v)),
                P(self.cand_i.device_ptr(&st).0),
            ],
        )?;
        launch(
            &self.k.argmax,
            "argmax_next",
            1,
            1024,
            0,
            &[
                P(ptr(&self.cand_v)),
                P(self.cand_i.device_ptr(&st).0),
                I(nc),
                P(state),
            ],
        )?;
        Ok(())
    }

    /// Runs one step: eagerly before warm-up, when graphs are off or broken; else replays the
    /// captured graph, capturing it first if needed (a failed capture falls back to eager, with
    /// the reason recorded).
    fn step(&mut self) -> Result<()> {
        if !self.use_graph {
            return self.launch_step();
        }
        if self.graph_broken {
            self.graph_stats.fallbacks += 1;
            return self.launch_step();
        }
        if self.graph.is_none() {
            if !self.warmed {
                self.warmed = true;
                return self.launch_step();
            }
            match self.capture() {
                Ok(g) => {
                    self.graph_stats.captures += 1;
                    self.graph = Some(g);
                }
                Err(e) => {
                    self.graph_broken = true;
                    self.graph_stats.fallbacks += 1;
                    self.graph_stats.fallback_reasons.push(e.to_string());
                    return self.launch_step();
                }
            }
        }
        if let Some(g) = &self.graph {
            g.launch().map_err(cu_err("graph launch"))?;
            self.graph_stats.replays += 1;
        }
        Ok(())
    }

    fn capture(&mut self) -> Result<CudaGraph> {
        let st = self.dev.stream.clone();
        st.synchronize().map_err(cu_err("synchronize"))?;
        st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cu_err("begin capture"))?;
        let launched = self.launch_step();
        // End the capture whatever happened, so the stream is usable again.
        let ended = st.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        ended
            .map_err(cu_err("end capture"))?
            .ok_or_else(|| Error::msg("cuda: stream capture produced no graph"))
    }

    fn set_state(&mut self, v: &[i32]) -> Result<()> {
        let mut dst = self.state.slice_mut(0..v.len());
        self.dev
            .stream
            .memcpy_htod(v, &mut dst)
            .map_err(cu_err("upload token"))
    }

    fn read_token(&mut self) -> Result<u32> {
        let mut out = [0i32; 1];
        self.dev
            .stream
            .memcpy_dtoh(&self.state.slice(0..1), &mut out)
            .map_err(cu_err("download token"))?;
        Ok(out[0] as u32)
    }

    /// Greedy decode of exactly `tokens` new tokens (no EOS stop).
    pub fn generate(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        if prompt.is_empty() || tokens == 0 {
            return Err(Error::msg("cuda decoder: empty prompt or zero tokens"));
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= self.shape.vocab) {
            return Err(Error::msg(format!(
                "token id {bad} is out of range for a vocabulary of {}",
                self.shape.vocab
            )));
        }
        self.ensure_capacity(prompt.len() + tokens)?;
        let t0 = Instant::now();
        if self.prefill.is_some() {
            for (c, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
                self.prefill_chunk(chunk, c * PREFILL_CHUNK)?;
            }
            self.launch_head()?;
        } else {
            self.set_state(&[prompt[0] as i32, 0])?;
            for (i, &t) in prompt.iter().enumerate() {
                if i > 0 {
                    self.set_state(&[t as i32])?;
                }
                self.step()?;
            }
        }
        let mut ids = vec![self.read_token()?];
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut step_ms = Vec::with_capacity(tokens);
        for _ in 1..tokens {
            let t = Instant::now();
            self.step()?;
            ids.push(self.read_token()?);
            self.kv_stats.d2h_calls += 1;
            self.kv_stats.d2h_bytes += 4;
            step_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(DecodeRun {
            generated_ids: ids,
            prefill_ms,
            step_ms,
            ..Default::default()
        })
    }

    pub fn graph_stats(&self) -> &CudaGraphStats {
        &self.graph_stats
    }
}

impl Decoder for LlamaDecoder {
    fn decode(&mut self, prompt: &[u32], tokens: usize) -> Result<DecodeRun> {
        self.generate(prompt, tokens)
    }

    fn threads(&self) -> usize {
        1
    }

    fn device_stats(&self) -> (Option<CudaGraphStats>, Option<DeviceKvStats>) {
        (Some(self.graph_stats.clone()), Some(self.kv_stats.clone()))
    }
}
