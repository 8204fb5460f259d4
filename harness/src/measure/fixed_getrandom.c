/* A `getrandom` that answers every call with the next bytes of one fixed stream.
 *
 * The harness preloads it (LD_PRELOAD) into the process whose instructions valgrind counts, and
 * into no other: a benchmark's count must not depend on what its process drew at random when it
 * started. The `tokenizers` crate's hash maps take their seeds from ahash, which draws them once
 * per process through the `getrandom` crate; that crate (0.3) looks the C library's
 * `getrandom` up with `dlsym(RTLD_DEFAULT, ...)`, and so does Rust's standard library for its
 * `HashMap` keys, so a preloaded definition answers both. With random seeds the count of
 * `tokenization/decode` moved by up to 0.3 % from process to process (harness/STATS.md,
 * "Instruction counts"; harness/src/measure/instructions.rs).
 *
 * The stream is SplitMix64 from a fixed start, one 64-bit word per 8 bytes asked for. Each call
 * reserves its words with one atomic add, so a call's bytes are one run of the stream even when
 * threads call at once (which thread gets which run then depends on their order). Both sides of a
 * comparison run with the same stream, so their counts differ by code alone. A process that
 * calls the system call itself (not through the C library's function) still gets real random
 * bytes; nothing in the benchmarks' dependency tree was seen to.
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

static uint64_t counter = 0x5eed5eed5eed5eedull;

static const uint64_t GOLDEN = 0x9e3779b97f4a7c15ull;

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
    (void)flags;
    unsigned char *p = buf;
    uint64_t words = (len + 7) / 8;
    uint64_t base = __atomic_fetch_add(&counter, words * GOLDEN, __ATOMIC_RELAXED);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mix(base + (i / 8 + 1) * GOLDEN);
        for (size_t j = 0; j < 8 && i + j < len; j++) {
            p[i + j] = (unsigned char)(w >> (8 * j));
        }
    }
    return (ssize_t)len;
}
