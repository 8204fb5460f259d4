//! Tokenizer encode and decode through `engine::text::TextCodec` (the `tokenizers` crate with the
//! package's `tokenizer.json`). Ids: `tokenization/{encode,decode}/{tokenizer}`, where the
//! tokenizer is `smollm2` when SmolLM2 is provisioned in the cache (`engine fetch smollm2`) and
//! otherwise `tiny`, the test model's tokenizer, with a note on stderr; the ids differ so a
//! base/head comparison never mixes the two. Throughput: bytes of text for encode, tokens for
//! decode.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::DType;
use engine::convert::{cache_dir, smollm2_dir};
use engine::text::TextCodec;
use engine::tiny::{TinyConfig, write_package};

/// About 1 KiB of mixed prose, digits, punctuation and non-ASCII text.
const TEXT: &str = "The quick brown fox jumps over the lazy dog. In 2024, roughly 8,100,000,000 \
people lived on Earth; 56% of them in cities. Café au lait costs €3.50 in Paris and ¥480 in \
Tokyo (東京), while a Zürich espresso is CHF 4.20. \"Tokenizers split text into pieces,\" she \
said, \"and every byte must survive the round trip.\" Meanwhile, the compiler reported: \
error[E0382]: borrow of moved value: `config` at src/main.rs:42:17. Numbers like 3.14159, \
2.71828 and 1.41421 appear in math; dates like 2026-11-29 and times like 23:59:59 appear in \
logs. Emoji 🚀✨ and accents (naïve, façade, résumé) test the byte-level fallback. A long \
sentence follows to exercise merges: internationalization, responsibilities, \
counterintuitively, electroencephalography, uncharacteristically, and so on, and so forth, \
until the paragraph ends with a question: what is the capital of France? Paris, of course.";

fn tokenizer() -> (TextCodec, &'static str, Option<tempfile::TempDir>) {
    let dir = smollm2_dir(&cache_dir(), DType::F32);
    if dir.join("tokenizer.json").is_file()
        && let Ok(codec) = TextCodec::open(&dir)
    {
        return (codec, "smollm2", None);
    }
    eprintln!(
        "note: SmolLM2 is not provisioned in {} (run `engine fetch smollm2`); benchmarking the \
         tiny model's tokenizer instead (ids end in /tiny)",
        dir.display()
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    write_package(tmp.path(), 0, &TinyConfig::default()).expect("tiny package");
    let codec = TextCodec::open(tmp.path()).expect("tiny tokenizer");
    (codec, "tiny", Some(tmp))
}

fn tokenization(c: &mut Criterion) {
    // Loaded on a thread of its own, so the loading's allocations land in another of glibc's
    // malloc arenas: the tokenizer's hash maps are seeded per process, and the order of its
    // allocations with them, which left the main thread's heap in a different state in each
    // process and moved the timed loop's instruction count by up to 0.6 % (as in
    // benches/decode.rs; harness/eval/noise/README.md).
    let (codec, name, _keep) = std::thread::spawn(tokenizer)
        .join()
        .expect("load the tokenizer");
    let ids = codec.encode(TEXT).expect("encode");
    let mut g = common::group(c, "tokenization");
    g.throughput(Throughput::Bytes(TEXT.len() as u64));
    g.bench("encode", name, || {
        codec.encode(black_box(TEXT)).expect("encode")
    });
    g.throughput(Throughput::Elements(ids.len() as u64));
    g.bench("decode", name, || {
        codec.decode(black_box(&ids)).expect("decode")
    });
    g.finish();
}

criterion_group!(benches, tokenization);
criterion_main!(benches);
