//! The paged KV-cache allocator (`engine::kv_cache::PagePool`) with SmolLM2's KV geometry
//! (30 layers, 3 KV heads, head dim 64, f32, 16-token pages). Ids:
//! - `kv_cache/alloc_dealloc_pages/512_tokens`: a sequence grows to 512 tokens page by page
//!   (32 pages) and is freed, on a warm pool (throughput: pages);
//! - `kv_cache/append_gather_step/256_tokens`: one decode step's cache traffic at 256 tokens of
//!   context: append the new token's k/v rows of every layer, gather every layer's dense past
//!   (throughput: tokens of context gathered).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::DType;
use engine::kv_cache::{KvLayout, PagePool, PoolConfig};

mod common;

const LAYOUT: KvLayout = KvLayout {
    layers: 30,
    kv_heads: 3,
    head_dim: 64,
    dtype: DType::F32,
};
const PAGE_TOKENS: usize = 16;

fn pool() -> PagePool {
    PagePool::new(
        LAYOUT,
        PoolConfig {
            page_tokens: PAGE_TOKENS,
            initial_pages: 64,
            grow_pages: 16,
            max_pages: 4096,
        },
    )
    .expect("pool")
}

fn kv_cache(c: &mut Criterion) {
    let mut g = common::group(c, "kv_cache");

    let tokens = 512;
    let mut p = pool();
    g.throughput(Throughput::Elements((tokens / PAGE_TOKENS) as u64));
    g.bench("alloc_dealloc_pages", format!("{tokens}_tokens"), || {
        let s = p.alloc_sequence().expect("sequence");
        for n in (PAGE_TOKENS..=tokens).step_by(PAGE_TOKENS) {
            p.reserve(s, black_box(n)).expect("reserve");
        }
        p.free_sequence(s).expect("free")
    });

    let context = 256;
    let mut p = pool();
    let s = p.alloc_sequence().expect("sequence");
    let shape = [1, LAYOUT.kv_heads, context + 1, LAYOUT.head_dim];
    let present: Vec<_> = (0..LAYOUT.layers)
        .map(|l| {
            (
                common::tensor(DType::F32, &shape, 2 * l as u64),
                common::tensor(DType::F32, &shape, 2 * l as u64 + 1),
            )
        })
        .collect();
    let refs: Vec<_> = present.iter().map(|(k, v)| (k, v)).collect();
    p.append(s, &refs, 0..context).expect("prefill");
    g.throughput(Throughput::Elements(context as u64));
    g.bench("append_gather_step", format!("{context}_tokens"), || {
        // Append token `context`, gather all layers, then drop the token again so every
        // iteration sees the same length.
        p.append(s, &refs, context..context + 1).expect("append");
        let mut bytes = 0usize;
        for l in 0..LAYOUT.layers {
            let (k, v) = p.gather(s, l).expect("gather");
            bytes += k.numel() + v.numel();
        }
        p.truncate(s, context).expect("truncate");
        bytes
    });
    g.finish();
}

criterion_group!(benches, kv_cache);
criterion_main!(benches);
