//! The paged KV-cache allocator: one host arena of fixed-size pages, a LIFO free list and a page
//! table per sequence, so a sequence's keys and values grow page by page and freeing a sequence
//! returns its pages for the next one. Backend-agnostic; the decode session
//! ([`crate::session::Session::generate`]) writes each step's new key/value rows here and gathers
//! the next step's dense `past` inputs from the pages.
//!
//! A page holds `page_tokens` token slots of every layer, key and value, laid out
//! `[layers, 2 (key, value), kv_heads, page_tokens, head_dim]`: one head's slots are contiguous, so
//! appending a run of tokens and gathering a head are one copy per (page, head), and a dense
//! `[1, kv_heads, len, head_dim]` tensor is built by appending those runs in order. Elements are
//! stored in the model's KV dtype (f32, f16 or bf16) and copied bit for bit, never converted.
//!
//! **Invariants:** a page is free, loose (taken by [`PagePool::alloc_page`]) or owned by exactly
//! one sequence; a sequence of `len` tokens owns exactly `ceil(len / page_tokens)` pages (a new
//! page is taken only when the last one is full); the arena only grows, by `grow_pages` at a time,
//! never past `max_pages`, and only when the free list is empty. Bad ids and shapes are errors,
//! never panics.

use std::fmt;
use std::ops::Range;

use half::{bf16, f16};

use crate::dtype::DType;
use crate::tensor::{Data, Tensor};

/// Tokens per page when the caller does not say (the decode session uses it).
pub const DEFAULT_PAGE_TOKENS: usize = 16;

/// The most pages a pool can index ([`PageId`] is a `u32`).
pub const MAX_PAGES: usize = u32::MAX as usize;

/// What a KV-cache row is made of: the model's `past`/`present` port geometry and element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// f32, f16 or bf16.
    pub dtype: DType,
}

/// Page size and growth policy of a [`PagePool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Token slots per page (at least 1).
    pub page_tokens: usize,
    /// Pages allocated up front.
    pub initial_pages: usize,
    /// Pages added when the free list is empty (0: the pool never grows past `initial_pages`).
    pub grow_pages: usize,
    /// Hard cap on the arena, in pages; taking a page beyond it is [`KvCacheError::Exhausted`].
    pub max_pages: usize,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            page_tokens: DEFAULT_PAGE_TOKENS,
            initial_pages: 0,
            grow_pages: 16,
            max_pages: 4096,
        }
    }
}

/// A page of a [`PagePool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId(u32);

impl PageId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A sequence of a [`PagePool`]. Ids are never reused: a freed id stays invalid even after its
/// slot is recycled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SequenceId {
    slot: u32,
    serial: u64,
}

impl fmt::Display for SequenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.serial)
    }
}

/// A snapshot of a pool's occupancy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub page_tokens: usize,
    /// Pages in the arena (free or in use).
    pub total_pages: usize,
    pub free_pages: usize,
    pub in_use_pages: usize,
    /// Most pages ever in use at once.
    pub high_water_pages: usize,
    pub max_pages: usize,
    pub live_sequences: usize,
}

/// What can go wrong in a [`PagePool`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvCacheError {
    #[error("kv page pool: page_tokens must be at least 1")]
    ZeroPageTokens,
    #[error("kv page pool: initial_pages {initial_pages} exceeds max_pages {max_pages}")]
    InitialAboveMax {
        initial_pages: usize,
        max_pages: usize,
    },
    #[error("kv page pool: cannot store {dtype} (f32, f16 or bf16 only)")]
    UnsupportedDtype { dtype: DType },
    #[error(
        "kv page pool: {pages} pages of {page_tokens} tokens × {row_elems} elements do not fit in memory"
    )]
    TooLarge {
        pages: usize,
        page_tokens: usize,
        row_elems: usize,
    },
    #[error("kv page pool: max_pages {max_pages} is above the {limit} pages a pool can index")]
    MaxPagesAboveLimit { max_pages: usize, limit: usize },
    #[error("kv page pool: more than {limit} live sequences")]
    TooManySequences { limit: usize },
    #[error("kv page pool exhausted: all {max_pages} pages ({page_tokens} tokens each) are in use")]
    Exhausted {
        max_pages: usize,
        page_tokens: usize,
    },
    #[error("kv truncate: sequence {id} has {len} tokens, cannot keep {keep}")]
    TruncateBeyondEnd {
        id: SequenceId,
        len: usize,
        keep: usize,
    },
    #[error("kv sequence {id} is not live (never allocated here or already freed)")]
    UnknownSequence { id: SequenceId },
    #[error("kv page {page} does not exist (the pool has {total} pages)")]
    UnknownPage { page: PageId, total: usize },
    #[error("kv page {page} is not allocated (double free?)")]
    PageNotAllocated { page: PageId },
    #[error("kv page {page} belongs to a sequence: free the sequence instead")]
    PageOwnedBySequence { page: PageId },
    #[error("kv layer {layer} out of range (the pool has {layers} layers)")]
    LayerOutOfRange { layer: usize, layers: usize },
    #[error("kv append: got {got} layers of (key, value), the pool has {expected}")]
    LayerCount { expected: usize, got: usize },
    #[error("kv append: layer {layer} {port} is {got}; the pool stores {expected}")]
    DtypeMismatch {
        layer: usize,
        port: &'static str,
        expected: DType,
        got: DType,
    },
    #[error(
        "kv append: layer {layer} {port} has shape {got:?}; expected [1, {kv_heads}, seq, {head_dim}]"
    )]
    ShapeMismatch {
        layer: usize,
        port: &'static str,
        got: Vec<usize>,
        kv_heads: usize,
        head_dim: usize,
    },
    #[error(
        "kv append: token positions {start}..{end} out of range for layer {layer} {port} with {available} positions"
    )]
    TokenRange {
        layer: usize,
        port: &'static str,
        start: usize,
        end: usize,
        available: usize,
    },
}

impl From<KvCacheError> for crate::error::Error {
    fn from(e: KvCacheError) -> crate::error::Error {
        crate::error::Error::msg(e.to_string())
    }
}

type Result<T, E = KvCacheError> = std::result::Result<T, E>;

/// The page arena, in the pool's element type.
enum Arena {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageState {
    Free,
    /// Taken by `alloc_page`, owned by the caller.
    Loose,
    Sequence,
}

struct Sequence {
    pages: Vec<PageId>,
    len: usize,
}

struct Slot {
    serial: u64,
    seq: Option<Sequence>,
}

/// Where one (layer, key/value, head) block of slots sits inside a page.
#[derive(Clone, Copy)]
struct Geometry {
    kv_heads: usize,
    head_dim: usize,
    page_tokens: usize,
    page_elems: usize,
}

impl Geometry {
    /// Offset of page `page`'s slot 0 of (`layer`, `kv`, `head`) in the arena.
    fn block(&self, page: PageId, layer: usize, kv: usize, head: usize) -> usize {
        page.index() * self.page_elems
            + ((layer * 2 + kv) * self.kv_heads + head) * self.page_tokens * self.head_dim
    }
}

/// A pool of fixed-size KV pages shared by any number of sequences.
pub struct PagePool {
    layout: KvLayout,
    config: PoolConfig,
    geo: Geometry,
    arena: Arena,
    state: Vec<PageState>,
    /// LIFO: the most recently freed page is taken first.
    free: Vec<PageId>,
    high_water: usize,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    next_serial: u64,
    live: usize,
}

impl fmt::Debug for PagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagePool")
            .field("layout", &self.layout)
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl PagePool {
    /// A pool of `config.initial_pages` zeroed pages; errors on a config it cannot honour.
    pub fn new(layout: KvLayout, config: PoolConfig) -> Result<PagePool> {
        if config.page_tokens == 0 {
            return Err(KvCacheError::ZeroPageTokens);
        }
        if config.initial_pages > config.max_pages {
            return Err(KvCacheError::InitialAboveMax {
                initial_pages: config.initial_pages,
                max_pages: config.max_pages,
            });
        }
        let row_elems = layout
            .layers
            .checked_mul(2)
            .and_then(|n| n.checked_mul(layout.kv_heads))
            .and_then(|n| n.checked_mul(layout.head_dim));
        let page_elems = row_elems.and_then(|r| r.checked_mul(config.page_tokens));
        let page_elems = page_elems.ok_or(KvCacheError::TooLarge {
            pages: 1,
            page_tokens: config.page_tokens,
            row_elems: row_elems.unwrap_or(usize::MAX),
        })?;
        if config.max_pages > MAX_PAGES {
            return Err(KvCacheError::MaxPagesAboveLimit {
                max_pages: config.max_pages,
                limit: MAX_PAGES,
            });
        }
        let arena = match layout.dtype {
            DType::F32 => Arena::F32(Vec::new()),
            DType::F16 => Arena::F16(Vec::new()),
            DType::BF16 => Arena::BF16(Vec::new()),
            dtype => return Err(KvCacheError::UnsupportedDtype { dtype }),
        };
        let mut pool = PagePool {
            layout,
            config,
            geo: Geometry {
                kv_heads: layout.kv_heads,
                head_dim: layout.head_dim,
                page_tokens: config.page_tokens,
                page_elems,
            },
            arena,
            state: Vec::new(),
            free: Vec::new(),
            high_water: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            next_serial: 0,
            live: 0,
        };
        pool.add_pages(config.initial_pages)?;
        Ok(pool)
    }

    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    pub fn stats(&self) -> PoolStats {
        let total = self.state.len();
        PoolStats {
            page_tokens: self.config.page_tokens,
            total_pages: total,
            free_pages: self.free.len(),
            in_use_pages: total - self.free.len(),
            high_water_pages: self.high_water,
            max_pages: self.config.max_pages,
            live_sequences: self.live,
        }
    }

    /// Appends `n` zeroed pages to the arena and the free list (lowest id on top).
    fn add_pages(&mut self, n: usize) -> Result<()> {
        let old = self.state.len();
        let new = old + n;
        // At most 4 bytes an element: keep the arena's byte size within `isize::MAX`.
        let elems = new
            .checked_mul(self.geo.page_elems)
            .filter(|&e| e <= isize::MAX as usize / 4)
            .ok_or(KvCacheError::TooLarge {
                pages: new,
                page_tokens: self.config.page_tokens,
                row_elems: self.geo.page_elems / self.config.page_tokens,
            })?;
        match &mut self.arena {
            Arena::F32(a) => a.resize(elems, 0.0),
            Arena::F16(a) => a.resize(elems, f16::ZERO),
            Arena::BF16(a) => a.resize(elems, bf16::ZERO),
        }
        self.state.resize(new, PageState::Free);
        // `new <= max_pages <= MAX_PAGES`, checked in `new`.
        self.free.extend((old..new).rev().map(|p| PageId(p as u32)));
        Ok(())
    }

    /// Takes a page off the free list, growing the arena by a chunk when it is empty.
    fn take_page(&mut self, state: PageState) -> Result<PageId> {
        if self.free.is_empty() {
            let total = self.state.len();
            let room = self.config.max_pages - total;
            let grow = self.config.grow_pages.min(room);
            if grow == 0 {
                return Err(KvCacheError::Exhausted {
                    max_pages: if self.config.grow_pages == 0 {
                        total
                    } else {
                        self.config.max_pages
                    },
                    page_tokens: self.config.page_tokens,
                });
            }
            self.add_pages(grow)?;
        }
        let page = self.free.pop().expect("the free list was just refilled");
        self.state[page.index()] = state;
        self.high_water = self.high_water.max(self.state.len() - self.free.len());
        Ok(page)
    }

    fn release_page(&mut self, page: PageId) {
        self.state[page.index()] = PageState::Free;
        self.free.push(page);
    }

    /// Takes one page for the caller (not zeroed: it holds whatever its last owner wrote).
    pub fn alloc_page(&mut self) -> Result<PageId> {
        self.take_page(PageState::Loose)
    }

    /// Returns a page taken by [`PagePool::alloc_page`].
    pub fn free_page(&mut self, page: PageId) -> Result<()> {
        match self.state.get(page.index()) {
            None => Err(KvCacheError::UnknownPage {
                page,
                total: self.state.len(),
            }),
            Some(PageState::Free) => Err(KvCacheError::PageNotAllocated { page }),
            Some(PageState::Sequence) => Err(KvCacheError::PageOwnedBySequence { page }),
            Some(PageState::Loose) => {
                self.release_page(page);
                Ok(())
            }
        }
    }

    /// A new, empty sequence (it owns no page until tokens are appended or reserved).
    pub fn alloc_sequence(&mut self) -> Result<SequenceId> {
        let serial = self.next_serial;
        self.next_serial += 1;
        let seq = Some(Sequence {
            pages: Vec::new(),
            len: 0,
        });
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Slot { serial, seq };
                slot
            }
            None => {
                let slot = u32::try_from(self.slots.len()).map_err(|_| {
                    KvCacheError::TooManySequences {
                        limit: u32::MAX as usize,
                    }
                })?;
                self.slots.push(Slot { serial, seq });
                slot
            }
        };
        self.live += 1;
        Ok(SequenceId { slot, serial })
    }

    fn seq(&self, id: SequenceId) -> Result<&Sequence> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.serial == id.serial)
            .and_then(|s| s.seq.as_ref())
            .ok_or(KvCacheError::UnknownSequence { id })
    }

    fn seq_mut(&mut self, id: SequenceId) -> Result<&mut Sequence> {
        self.slots
            .get_mut(id.slot as usize)
            .filter(|s| s.serial == id.serial)
            .and_then(|s| s.seq.as_mut())
            .ok_or(KvCacheError::UnknownSequence { id })
    }

    /// Frees a sequence and returns its pages to the pool; returns how many it had.
    pub fn free_sequence(&mut self, id: SequenceId) -> Result<usize> {
        self.seq(id)?;
        let slot = &mut self.slots[id.slot as usize];
        let seq = slot.seq.take().expect("checked live above");
        self.free_slots.push(id.slot);
        self.live -= 1;
        // Reversed, so the sequence's first page is the next one taken.
        for &page in seq.pages.iter().rev() {
            self.release_page(page);
        }
        Ok(seq.pages.len())
    }

    /// Keeps the first `keep` tokens of a sequence (rolling back rejected or re-generated
    /// tokens) and returns the pages past them to the pool; returns how many pages were freed.
    pub fn truncate(&mut self, id: SequenceId, keep: usize) -> Result<usize> {
        let page_tokens = self.config.page_tokens;
        let seq = self.seq_mut(id)?;
        if keep > seq.len {
            return Err(KvCacheError::TruncateBeyondEnd {
                id,
                len: seq.len,
                keep,
            });
        }
        seq.len = keep;
        let freed = seq.pages.split_off(keep.div_ceil(page_tokens));
        for &page in freed.iter().rev() {
            self.release_page(page);
        }
        Ok(freed.len())
    }

    /// Tokens stored for a sequence.
    pub fn len(&self, id: SequenceId) -> Result<usize> {
        Ok(self.seq(id)?.len)
    }

    /// A sequence's page table, in token order.
    pub fn pages(&self, id: SequenceId) -> Result<&[PageId]> {
        Ok(&self.seq(id)?.pages)
    }

    /// Makes room for `n_tokens` more tokens after the sequence's current length, taking pages as
    /// needed. All or nothing: on error the sequence and the free list are as before (the arena
    /// may have grown).
    pub fn reserve(&mut self, id: SequenceId, n_tokens: usize) -> Result<()> {
        let seq = self.seq(id)?;
        let want = (seq.len + n_tokens).div_ceil(self.config.page_tokens);
        let need = want.saturating_sub(seq.pages.len());
        if need == 0 {
            return Ok(());
        }
        let mut taken = Vec::with_capacity(need);
        for _ in 0..need {
            match self.take_page(PageState::Sequence) {
                Ok(p) => taken.push(p),
                Err(e) => {
                    for &p in taken.iter().rev() {
                        self.release_page(p);
                    }
                    return Err(e);
                }
            }
        }
        self.seq_mut(id)?.pages.extend(taken);
        Ok(())
    }

    /// Appends token positions `tokens` of per-layer `(key, value)` tensors of shape
    /// `[1, kv_heads, seq, head_dim]` (a graph's `present` outputs, say: then `tokens` is the new
    /// positions only) to the end of the sequence. All or nothing: shapes, dtypes and the page
    /// budget are checked before anything is written.
    pub fn append(
        &mut self,
        id: SequenceId,
        kv: &[(&Tensor, &Tensor)],
        tokens: Range<usize>,
    ) -> Result<()> {
        self.seq(id)?;
        if kv.len() != self.layout.layers {
            return Err(KvCacheError::LayerCount {
                expected: self.layout.layers,
                got: kv.len(),
            });
        }
        for (layer, &(k, v)) in kv.iter().enumerate() {
            self.check_input(layer, "key", k, &tokens)?;
            self.check_input(layer, "value", v, &tokens)?;
        }
        let n = tokens.end.saturating_sub(tokens.start);
        if n == 0 {
            return Ok(());
        }
        self.reserve(id, n)?;
        let geo = self.geo;
        let seq = self
            .slots
            .get_mut(id.slot as usize)
            .and_then(|s| s.seq.as_mut())
            .ok_or(KvCacheError::UnknownSequence { id })?;
        for (layer, &(k, v)) in kv.iter().enumerate() {
            for (kvi, t) in [k, v].into_iter().enumerate() {
                let at = Block { layer, kv: kvi };
                let src_len = t.shape()[2];
                match (&mut self.arena, t.data()) {
                    (Arena::F32(a), Data::F32(s)) => {
                        write_rows(&geo, a, s, src_len, &tokens, at, &seq.pages, seq.len)
                    }
                    (Arena::F16(a), Data::F16(s)) => {
                        write_rows(&geo, a, s, src_len, &tokens, at, &seq.pages, seq.len)
                    }
                    (Arena::BF16(a), Data::BF16(s)) => {
                        write_rows(&geo, a, s, src_len, &tokens, at, &seq.pages, seq.len)
                    }
                    _ => unreachable!("dtypes checked above"),
                }
            }
        }
        seq.len += n;
        Ok(())
    }

    fn check_input(
        &self,
        layer: usize,
        port: &'static str,
        t: &Tensor,
        tokens: &Range<usize>,
    ) -> Result<()> {
        let l = &self.layout;
        if t.dtype() != l.dtype {
            return Err(KvCacheError::DtypeMismatch {
                layer,
                port,
                expected: l.dtype,
                got: t.dtype(),
            });
        }
        let s = t.shape();
        if s.len() != 4 || s[0] != 1 || s[1] != l.kv_heads || s[3] != l.head_dim {
            return Err(KvCacheError::ShapeMismatch {
                layer,
                port,
                got: s.to_vec(),
                kv_heads: l.kv_heads,
                head_dim: l.head_dim,
            });
        }
        if tokens.start > tokens.end || tokens.end > s[2] {
            return Err(KvCacheError::TokenRange {
                layer,
                port,
                start: tokens.start,
                end: tokens.end,
                available: s[2],
            });
        }
        Ok(())
    }

    /// One layer's (key, value) of a sequence as dense host tensors `[1, kv_heads, len, head_dim]`
    /// in the pool's dtype, ready to feed a graph's `past` inputs.
    pub fn gather(&self, id: SequenceId, layer: usize) -> Result<(Tensor, Tensor)> {
        let seq = self.seq(id)?;
        if layer >= self.layout.layers {
            return Err(KvCacheError::LayerOutOfRange {
                layer,
                layers: self.layout.layers,
            });
        }
        let shape = vec![1, self.layout.kv_heads, seq.len, self.layout.head_dim];
        let one = |kv| {
            let at = Block { layer, kv };
            let data = match &self.arena {
                Arena::F32(a) => Data::F32(read_rows(&self.geo, a, at, &seq.pages, seq.len)),
                Arena::F16(a) => Data::F16(read_rows(&self.geo, a, at, &seq.pages, seq.len)),
                Arena::BF16(a) => Data::BF16(read_rows(&self.geo, a, at, &seq.pages, seq.len)),
            };
            Tensor::from_parts(shape.clone(), data)
        };
        Ok((one(0), one(1)))
    }
}

/// Which (layer, key = 0 / value = 1) a copy touches.
#[derive(Clone, Copy)]
struct Block {
    layer: usize,
    kv: usize,
}

/// Copies source positions `tokens` of `src` (`[1, kv_heads, src_len, head_dim]`) to sequence
/// positions `dst_start..` of `pages`: one contiguous run per (head, page).
fn write_rows<T: Copy>(
    geo: &Geometry,
    arena: &mut [T],
    src: &[T],
    src_len: usize,
    tokens: &Range<usize>,
    at: Block,
    pages: &[PageId],
    dst_start: usize,
) {
    let (d, pt) = (geo.head_dim, geo.page_tokens);
    for h in 0..geo.kv_heads {
        let (mut t, mut pos) = (tokens.start, dst_start);
        while t < tokens.end {
            let slot = pos % pt;
            let n = (pt - slot).min(tokens.end - t);
            let dst = geo.block(pages[pos / pt], at.layer, at.kv, h) + slot * d;
            let from = (h * src_len + t) * d;
            arena[dst..dst + n * d].copy_from_slice(&src[from..from + n * d]);
            t += n;
            pos += n;
        }
    }
}

/// The first `len` positions of `pages` as a dense `[kv_heads, len, head_dim]` run: heads outer,
/// pages inner, which is exactly row-major order, so the output is built by appending.
fn read_rows<T: Copy>(
    geo: &Geometry,
    arena: &[T],
    at: Block,
    pages: &[PageId],
    len: usize,
) -> Vec<T> {
    let (d, pt) = (geo.head_dim, geo.page_tokens);
    let mut out = Vec::with_capacity(geo.kv_heads * len * d);
    for h in 0..geo.kv_heads {
        for (j, &page) in pages.iter().enumerate() {
            let n = len.saturating_sub(j * pt).min(pt);
            let from = geo.block(page, at.layer, at.kv, h);
            out.extend_from_slice(&arena[from..from + n * d]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: a tiny seeded generator, so every run of the random tests is the same.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const LAYOUT: KvLayout = KvLayout {
        layers: 2,
        kv_heads: 3,
        head_dim: 4,
        dtype: DType::F32,
    };

    fn pool(page_tokens: usize, initial: usize, grow: usize, max: usize) -> PagePool {
        PagePool::new(
            LAYOUT,
            PoolConfig {
                page_tokens,
                initial_pages: initial,
                grow_pages: grow,
                max_pages: max,
            },
        )
        .unwrap()
    }

    /// The element every test writes at (sequence tag, layer, key/value, head, position, dim):
    /// a hash of the coordinates cut to 24 bits (exact in f32), so a row copied to or from the
    /// wrong place shows up as a different value.
    fn value(tag: usize, layer: usize, kv: usize, h: usize, pos: usize, d: usize) -> f32 {
        let mut r = Rng(0);
        for x in [tag, layer, kv, h, pos, d] {
            r.0 = r.next() ^ x as u64;
        }
        (r.next() >> 40) as f32
    }

    /// Per-layer `present`-like tensors of `pad + n` positions whose positions `pad..pad + n`
    /// hold sequence positions `first..first + n` (the first `pad` positions are junk).
    fn source(tag: usize, pad: usize, first: usize, n: usize) -> Vec<(Tensor, Tensor)> {
        let t = pad + n;
        (0..LAYOUT.layers)
            .map(|layer| {
                let one = |kv| {
                    let mut v = Vec::new();
                    for h in 0..3 {
                        for i in 0..t {
                            for d in 0..4 {
                                v.push(if i < pad {
                                    -1.0
                                } else {
                                    value(tag, layer, kv, h, first + i - pad, d)
                                });
                            }
                        }
                    }
                    Tensor::f32(&[1, 3, t, 4], v).unwrap()
                };
                (one(0), one(1))
            })
            .collect()
    }

    fn refs(src: &[(Tensor, Tensor)]) -> Vec<(&Tensor, &Tensor)> {
        src.iter().map(|(k, v)| (k, v)).collect()
    }

    fn append(pool: &mut PagePool, id: SequenceId, tag: usize, pad: usize, n: usize) {
        let first = pool.len(id).unwrap();
        let src = source(tag, pad, first, n);
        pool.append(id, &refs(&src), pad..pad + n).unwrap();
    }

    /// Gathers every layer and checks it against [`value`] position by position.
    fn check(pool: &PagePool, id: SequenceId, tag: usize) {
        let len = pool.len(id).unwrap();
        for layer in 0..LAYOUT.layers {
            let (k, v) = pool.gather(id, layer).unwrap();
            for (kv, t) in [k, v].iter().enumerate() {
                assert_eq!(t.shape(), &[1, 3, len, 4]);
                let got = t.as_f32().unwrap();
                let mut want = Vec::new();
                for h in 0..3 {
                    for pos in 0..len {
                        for d in 0..4 {
                            want.push(value(tag, layer, kv, h, pos, d));
                        }
                    }
                }
                assert_eq!(got, &want[..], "tag {tag} layer {layer} kv {kv} len {len}");
            }
        }
    }

    #[test]
    fn random_cycles_leak_no_pages_and_keep_contents() {
        for page_tokens in [1, 3, 16] {
            let mut rng = Rng(page_tokens as u64);
            let mut p = pool(page_tokens, 0, 4, 100_000);
            let mut live: Vec<(SequenceId, usize)> = Vec::new();
            let mut next_tag = 0;
            for step in 0..3000 {
                match rng.below(4) {
                    0 if live.len() < 8 => {
                        live.push((p.alloc_sequence().unwrap(), next_tag));
                        next_tag += 1;
                    }
                    1 if !live.is_empty() => {
                        let (id, tag) = live[rng.below(live.len())];
                        let n = 1 + rng.below(20);
                        let pad = if rng.below(2) == 0 { 0 } else { rng.below(5) };
                        append(&mut p, id, tag, pad, n);
                    }
                    2 if !live.is_empty() => {
                        let (id, tag) = live.swap_remove(rng.below(live.len()));
                        check(&p, id, tag);
                        let len = p.len(id).unwrap();
                        assert_eq!(p.free_sequence(id).unwrap(), len.div_ceil(page_tokens));
                    }
                    _ if !live.is_empty() => {
                        let (id, tag) = live[rng.below(live.len())];
                        check(&p, id, tag);
                    }
                    _ => {}
                }
                // Every page in use is owned by a live sequence, and a sequence owns exactly
                // ceil(len / page_tokens) pages: a new page only when the last one is full.
                let owned: usize = live
                    .iter()
                    .map(|&(id, _)| {
                        let pages = p.pages(id).unwrap().len();
                        assert_eq!(pages, p.len(id).unwrap().div_ceil(page_tokens));
                        pages
                    })
                    .sum();
                let s = p.stats();
                assert_eq!(
                    s.in_use_pages, owned,
                    "page size {page_tokens}, step {step}"
                );
                assert_eq!(s.free_pages + s.in_use_pages, s.total_pages);
                assert_eq!(s.live_sequences, live.len());
            }
            for (id, _) in live.drain(..) {
                p.free_sequence(id).unwrap();
            }
            let s = p.stats();
            assert_eq!(s.free_pages, s.total_pages, "page size {page_tokens}: leak");
            assert_eq!(s.in_use_pages, 0);
            assert_eq!(s.live_sequences, 0);
            assert!(s.high_water_pages > 0 && s.high_water_pages <= s.total_pages);
        }
    }

    #[test]
    fn gather_returns_what_was_appended_across_page_boundaries() {
        for page_tokens in [1, 3, 16] {
            let mut p = pool(page_tokens, 0, 2, 1000);
            let id = p.alloc_sequence().unwrap();
            assert_eq!(p.gather(id, 0).unwrap().0.shape(), &[1, 3, 0, 4]);
            // Uneven chunks straddle page ends; pads mimic the session's `present` outputs.
            for (n, pad) in [(1, 0), (2, 1), (5, 0), (16, 8), (7, 3), (1, 40)] {
                append(&mut p, id, 7, pad, n);
                check(&p, id, 7);
            }
            assert_eq!(p.len(id).unwrap(), 32);
            assert_eq!(p.pages(id).unwrap().len(), 32usize.div_ceil(page_tokens));
        }
    }

    #[test]
    fn sequences_sharing_a_pool_do_not_overwrite_each_other() {
        let mut p = pool(3, 0, 1, 100);
        let a = p.alloc_sequence().unwrap();
        let b = p.alloc_sequence().unwrap();
        for n in [2, 4, 1, 5] {
            append(&mut p, a, 1, 0, n);
            append(&mut p, b, 2, 1, n + 1);
        }
        check(&p, a, 1);
        check(&p, b, 2);
        p.free_sequence(a).unwrap();
        let c = p.alloc_sequence().unwrap();
        append(&mut p, c, 3, 0, 12);
        check(&p, b, 2);
        check(&p, c, 3);
    }

    #[test]
    fn freed_pages_are_reused_and_steady_usage_does_not_grow_the_pool() {
        let mut p = pool(3, 0, 1, 1000);
        let mut total = None;
        for cycle in 0..500 {
            let a = p.alloc_sequence().unwrap();
            let b = p.alloc_sequence().unwrap();
            append(&mut p, a, 0, 0, 10); // 4 pages
            append(&mut p, b, 1, 0, 5); // 2 pages
            assert_eq!(p.stats().in_use_pages, 6);
            p.free_sequence(a).unwrap();
            p.free_sequence(b).unwrap();
            let s = p.stats();
            assert_eq!(
                *total.get_or_insert(s.total_pages),
                s.total_pages,
                "cycle {cycle}"
            );
            assert_eq!(s.free_pages, s.total_pages);
        }
        assert_eq!(p.stats().total_pages, 6);
        assert_eq!(p.stats().high_water_pages, 6);

        // LIFO: the page freed last is the page taken next.
        let x = p.alloc_page().unwrap();
        let y = p.alloc_page().unwrap();
        assert_ne!(x, y);
        p.free_page(x).unwrap();
        assert_eq!(p.alloc_page().unwrap(), x);
        // A freed sequence's pages go to the next sequence, first page first.
        let s = p.alloc_sequence().unwrap();
        p.reserve(s, 6).unwrap();
        let pages = p.pages(s).unwrap().to_vec();
        p.free_sequence(s).unwrap();
        let t = p.alloc_sequence().unwrap();
        p.reserve(t, 6).unwrap();
        assert_eq!(p.pages(t).unwrap(), &pages[..]);
    }

    #[test]
    fn alloc_and_free_pages_stay_balanced_over_many_cycles() {
        let mut p = pool(16, 4, 4, 64);
        let mut rng = Rng(42);
        let mut held = Vec::new();
        for _ in 0..10_000 {
            if held.len() < 64 && (held.is_empty() || rng.below(2) == 0) {
                held.push(p.alloc_page().unwrap());
            } else {
                let page = held.swap_remove(rng.below(held.len()));
                p.free_page(page).unwrap();
            }
            assert_eq!(p.stats().in_use_pages, held.len());
        }
        for page in held.drain(..) {
            p.free_page(page).unwrap();
        }
        let s = p.stats();
        assert_eq!((s.free_pages, s.in_use_pages), (s.total_pages, 0));
    }

    #[test]
    fn pool_grows_by_chunks_up_to_the_cap_then_errors_naming_it() {
        let mut p = pool(2, 2, 3, 7);
        assert_eq!(p.stats().total_pages, 2);
        let mut totals = Vec::new();
        for _ in 0..7 {
            p.alloc_page().unwrap();
            totals.push(p.stats().total_pages);
        }
        assert_eq!(totals, [2, 2, 5, 5, 5, 7, 7]);
        let err = p.alloc_page().unwrap_err();
        assert_eq!(
            err,
            KvCacheError::Exhausted {
                max_pages: 7,
                page_tokens: 2
            }
        );
        assert!(err.to_string().contains("all 7 pages"), "{err}");

        // grow_pages 0: a fixed pool of initial_pages.
        let mut fixed = pool(2, 1, 0, 100);
        fixed.alloc_page().unwrap();
        let err = fixed.alloc_page().unwrap_err();
        assert!(err.to_string().contains("all 1 pages"), "{err}");
    }

    #[test]
    fn truncate_keeps_a_prefix_and_returns_the_pages_past_it() {
        let layout = KvLayout {
            layers: 1,
            kv_heads: 1,
            head_dim: 2,
            dtype: DType::F32,
        };
        let cfg = PoolConfig {
            page_tokens: 3,
            initial_pages: 0,
            grow_pages: 1,
            max_pages: 16,
        };
        let mut p = PagePool::new(layout, cfg).unwrap();
        let s = p.alloc_sequence().unwrap();
        let k = Tensor::f32(&[1, 1, 7, 2], (0..14).map(|x| x as f32).collect()).unwrap();
        let v = Tensor::f32(&[1, 1, 7, 2], (100..114).map(|x| x as f32).collect()).unwrap();
        p.append(s, &[(&k, &v)], 0..7).unwrap();
        assert_eq!(p.pages(s).unwrap().len(), 3);
        assert_eq!(p.truncate(s, 4).unwrap(), 1);
        assert_eq!(p.len(s).unwrap(), 4);
        assert_eq!(p.pages(s).unwrap().len(), 2);
        let (gk, gv) = p.gather(s, 0).unwrap();
        assert_eq!(
            gk.to_f32_vec(),
            (0..8).map(|x| x as f32).collect::<Vec<_>>()
        );
        assert_eq!(
            gv.to_f32_vec(),
            (100..108).map(|x| x as f32).collect::<Vec<_>>()
        );
        // Appending again after a truncate overwrites the rolled-back positions.
        p.append(s, &[(&k, &v)], 4..7).unwrap();
        assert_eq!(p.gather(s, 0).unwrap().0.to_f32_vec(), k.to_f32_vec());
        let e = p.truncate(s, 8).unwrap_err().to_string();
        assert!(e.contains("has 7 tokens, cannot keep 8"), "{e}");
        assert_eq!(p.truncate(s, 0).unwrap(), 3);
        assert_eq!(p.stats().free_pages, p.stats().total_pages);
    }

    #[test]
    fn a_failed_append_changes_nothing() {
        let mut p = pool(3, 0, 1, 2);
        let a = p.alloc_sequence().unwrap();
        append(&mut p, a, 0, 0, 5);
        let before = p.stats();
        let src = source(0, 0, 5, 4);
        let err = p.append(a, &refs(&src), 0..4).unwrap_err();
        assert!(matches!(err, KvCacheError::Exhausted { max_pages: 2, .. }));
        assert_eq!(p.len(a).unwrap(), 5);
        assert_eq!(p.stats(), before);
        check(&p, a, 0);
        // The one free slot left in the last page still takes a token.
        append(&mut p, a, 0, 0, 1);
        check(&p, a, 0);
        // A second sequence gets pages once the first is freed.
        let b = p.alloc_sequence().unwrap();
        assert!(p.reserve(b, 1).is_err());
        p.free_sequence(a).unwrap();
        append(&mut p, b, 1, 0, 6);
        check(&p, b, 1);
    }

    #[test]
    fn unknown_and_freed_sequence_ids_are_errors() {
        let mut p = pool(4, 0, 1, 10);
        let a = p.alloc_sequence().unwrap();
        append(&mut p, a, 0, 0, 3);
        p.free_sequence(a).unwrap();
        let src = source(0, 0, 0, 1);
        let unknown = KvCacheError::UnknownSequence { id: a };
        assert_eq!(p.len(a).unwrap_err(), unknown);
        assert_eq!(p.pages(a).unwrap_err(), unknown);
        assert_eq!(p.gather(a, 0).unwrap_err(), unknown);
        assert_eq!(p.reserve(a, 1).unwrap_err(), unknown);
        assert_eq!(p.append(a, &refs(&src), 0..1).unwrap_err(), unknown);
        assert_eq!(p.free_sequence(a).unwrap_err(), unknown);
        assert!(unknown.to_string().contains("not live"), "{unknown}");
        // The slot is recycled, the old id stays dead.
        let b = p.alloc_sequence().unwrap();
        assert_eq!(b.slot, a.slot);
        assert_eq!(p.len(a).unwrap_err(), unknown);
        assert_eq!(p.len(b).unwrap(), 0);
        // An id this pool never handed out.
        let other = SequenceId { slot: 9, serial: 9 };
        assert_eq!(
            p.len(other).unwrap_err(),
            KvCacheError::UnknownSequence { id: other }
        );
    }

    #[test]
    fn bad_pages_are_errors() {
        let mut p = pool(4, 0, 1, 10);
        let x = p.alloc_page().unwrap();
        p.free_page(x).unwrap();
        assert_eq!(
            p.free_page(x).unwrap_err(),
            KvCacheError::PageNotAllocated { page: x }
        );
        assert_eq!(
            p.free_page(PageId(99)).unwrap_err(),
            KvCacheError::UnknownPage {
                page: PageId(99),
                total: 1
            }
        );
        let s = p.alloc_sequence().unwrap();
        p.reserve(s, 1).unwrap();
        let owned = p.pages(s).unwrap()[0];
        assert_eq!(
            p.free_page(owned).unwrap_err(),
            KvCacheError::PageOwnedBySequence { page: owned }
        );
        assert_eq!(p.pages(s).unwrap(), &[owned]);
    }

    #[test]
    fn bad_appends_and_gathers_are_errors() {
        let mut p = pool(4, 0, 1, 10);
        let s = p.alloc_sequence().unwrap();
        let src = source(0, 0, 0, 2);
        let err = p.append(s, &refs(&src[..1]), 0..2).unwrap_err();
        assert_eq!(
            err,
            KvCacheError::LayerCount {
                expected: 2,
                got: 1
            }
        );
        let err = p.append(s, &refs(&src), 1..3).unwrap_err();
        assert!(matches!(
            err,
            KvCacheError::TokenRange {
                end: 3,
                available: 2,
                ..
            }
        ));
        let narrow = Tensor::f32(&[1, 2, 2, 4], vec![0.0; 16]).unwrap();
        let mut bad = refs(&src);
        bad[1].1 = &narrow;
        let err = p.append(s, &bad, 0..2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv append: layer 1 value has shape [1, 2, 2, 4]; expected [1, 3, seq, 4]"
        );
        assert_eq!(p.len(s).unwrap(), 0);
        assert_eq!(p.stats().in_use_pages, 0);
        assert_eq!(
            p.gather(s, 2).unwrap_err(),
            KvCacheError::LayerOutOfRange {
                layer: 2,
                layers: 2
            }
        );
        // An empty range is a no-op.
        p.append(s, &refs(&src), 1..1).unwrap();
        assert_eq!((p.len(s).unwrap(), p.stats().in_use_pages), (0, 0));
    }

    #[test]
    fn half_precision_pools_store_elements_bit_for_bit() {
        for dtype in [DType::F16, DType::BF16] {
            let layout = KvLayout {
                layers: 1,
                kv_heads: 2,
                head_dim: 3,
                dtype,
            };
            let config = PoolConfig {
                page_tokens: 3,
                ..PoolConfig::default()
            };
            let mut p = PagePool::new(layout, config).unwrap();
            let s = p.alloc_sequence().unwrap();
            let vals = |n: usize, base: f32| -> Vec<f32> {
                (0..n).map(|i| base + i as f32 * 0.1 - 1.7).collect()
            };
            let half_tensor = |n_tok: usize, v: Vec<f32>| {
                let data = match dtype {
                    DType::F16 => Data::F16(v.into_iter().map(f16::from_f32).collect()),
                    _ => Data::BF16(v.into_iter().map(bf16::from_f32).collect()),
                };
                Tensor::new(vec![1, 2, n_tok, 3], data).unwrap()
            };
            // Two appends of 4 and 1 tokens: 5 tokens over 2 pages.
            let k1 = half_tensor(4, vals(24, 0.0));
            let v1 = half_tensor(4, vals(24, 50.0));
            p.append(s, &[(&k1, &v1)], 0..4).unwrap();
            let k2 = half_tensor(1, vals(6, 100.0));
            let v2 = half_tensor(1, vals(6, 200.0));
            p.append(s, &[(&k2, &v2)], 0..1).unwrap();
            let (k, v) = p.gather(s, 0).unwrap();
            assert_eq!(k.dtype(), dtype);
            assert_eq!(k.shape(), &[1, 2, 5, 3]);
            // Expected: per head, the 4 first-append rows then the 1 second-append row.
            let expect = |a: &Tensor, b: &Tensor| -> Vec<u8> {
                let (a, b) = (a.data().to_le_bytes(), b.data().to_le_bytes());
                let (ra, rb) = (4 * 3 * 2, 3 * 2); // bytes per head
                let mut out = Vec::new();
                for h in 0..2 {
                    out.extend_from_slice(&a[h * ra..(h + 1) * ra]);
                    out.extend_from_slice(&b[h * rb..(h + 1) * rb]);
                }
                out
            };
            assert_eq!(k.data().to_le_bytes(), expect(&k1, &k2), "{dtype} key");
            assert_eq!(v.data().to_le_bytes(), expect(&v1, &v2), "{dtype} value");

            // No silent conversion: an f32 tensor is refused, naming both types.
            let f = Tensor::f32(&[1, 2, 1, 3], vec![0.5; 6]).unwrap();
            let err = p.append(s, &[(&f, &f)], 0..1).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("kv append: layer 0 key is f32; the pool stores {dtype}")
            );
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        let cfg = |page_tokens, initial_pages, max_pages| PoolConfig {
            page_tokens,
            initial_pages,
            grow_pages: 1,
            max_pages,
        };
        assert_eq!(
            PagePool::new(LAYOUT, cfg(0, 0, 10)).unwrap_err(),
            KvCacheError::ZeroPageTokens
        );
        assert_eq!(
            PagePool::new(LAYOUT, cfg(4, 11, 10)).unwrap_err(),
            KvCacheError::InitialAboveMax {
                initial_pages: 11,
                max_pages: 10
            }
        );
        let ints = KvLayout {
            dtype: DType::I64,
            ..LAYOUT
        };
        let err = PagePool::new(ints, cfg(4, 0, 10)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv page pool: cannot store i64 (f32, f16 or bf16 only)"
        );
        let huge = KvLayout {
            kv_heads: usize::MAX / 2,
            ..LAYOUT
        };
        assert!(matches!(
            PagePool::new(huge, cfg(4, 0, 10)).unwrap_err(),
            KvCacheError::TooLarge { .. }
        ));
        assert_eq!(
            PagePool::new(LAYOUT, cfg(4, 0, MAX_PAGES + 1)).unwrap_err(),
            KvCacheError::MaxPagesAboveLimit {
                max_pages: MAX_PAGES + 1,
                limit: MAX_PAGES
            }
        );
        // A cap the arena could never reach is fine until growth gets there.
        let wide = KvLayout {
            kv_heads: 1 << 30,
            head_dim: 1 << 30,
            ..LAYOUT
        };
        let mut p = PagePool::new(wide, cfg(1, 0, MAX_PAGES)).unwrap();
        let s = p.alloc_sequence().unwrap();
        let err = p.reserve(s, 1).unwrap_err();
        assert!(err.to_string().contains("do not fit in memory"), "{err}");
        assert_eq!(p.stats().total_pages, 0);
    }
}
