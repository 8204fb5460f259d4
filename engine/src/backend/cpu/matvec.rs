//! The decode step's matrix-vector product `y = x · W` (`x` of `k` values, `W` row-major
//! `[k, n]`, `y` of `n`), f32, with the SIMD path chosen at run time.
//!
//! Why not `gemm` for `m = 1`: a decode step is 84 % such products on SmolLM2-135M (one thread,
//! 64 tokens), and through `gemm` they streamed the weights at 2.4-8.5 GB/s (the `[576, 192]`
//! projections slowest), while one core of the 2-vCPU CI machine pulls about 20 GB/s. A product
//! with one row is bound by reading `W` once: the kernel streams it row after row, four rows at
//! a time (four sequential streams for the prefetchers), and adds `x[i] · W[i, j..j+8]` into
//! `y[j..j+8]` with fused multiply-adds, so `y` (at most 49152 floats for the vocabulary
//! projection) is loaded and stored once per four rows of `W`. That kernel serves products
//! whose right operand is not a constant. Constant weights are packed once at load into
//! [`Panels`] (16 columns × all rows, contiguous): with several threads each takes blocks of
//! columns, and a block of the row-major layout is a short piece of every row while a block of
//! panels is a few streams; the panel kernel reads [`STREAMS`] panels at once and keeps their
//! sums in registers over all rows (no `y` traffic). With one 64-column panel at a time the AMD
//! EPYC VM decoded 10-20 % faster than on the row-major kernel; six 16-column panels at a time
//! decoded 41-43 % faster than one 64-column panel on the Intel Xeon VM.
//!
//! f16 weights ([`matvec_f16`]) are widened to f32 in registers with F16C and summed in f32.
//!
//! Dispatch: one generic AVX2 + FMA + F16C kernel for both (`x86::matvec_avx2`) when the CPU
//! has them (`is_x86_feature_detected!`, checked once), else a
//! portable loop of the same shape that the compiler vectorises for the baseline target. Each
//! `y[j]` is summed over `i` in the same order either way (rows in groups of four, then the
//! rest), with one rounding per multiply-add on the FMA path and two on the portable one.

use half::f16;

/// `y := x · W` for `W` a row-major `[k, n]` block with row stride `ldw ≥ n` (a block of
/// columns of a wider matrix: row `i` is `w[i * ldw .. i * ldw + n]`), `x` of `k` values and `y`
/// of `n` (overwritten).
///
/// # Panics
/// When a slice is shorter than that.
pub fn matvec_f32(x: &[f32], (w, ldw): (&[f32], usize), k: usize, n: usize, y: &mut [f32]) {
    assert!(ldw >= n && x.len() >= k && y.len() >= n);
    assert!(k == 0 || n == 0 || w.len() >= (k - 1) * ldw + n);
    let y = &mut y[..n];
    if k == 0 || n == 0 {
        y.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        y.fill(0.0);
        // SAFETY: the CPU has AVX2, FMA and F16C (checked); the slice lengths were checked.
        unsafe { x86::matvec_avx2(x, w, ldw, k, n, y) };
        return;
    }
    matvec_f32_portable(x, w, ldw, k, n, y);
}

/// `y := x · W` as [`matvec_f32`] for f16 operands: the weights are widened to f32 in registers
/// (F16C, eight at a time) rather than converted ahead, every product is summed in f32, and
/// each `y[j]` is rounded to f16 once at the end. Half the bytes of an f32 weight to stream.
///
/// # Panics
/// When a slice is shorter than [`matvec_f32`] requires.
pub fn matvec_f16(x: &[f16], (w, ldw): (&[f16], usize), k: usize, n: usize, y: &mut [f16]) {
    assert!(ldw >= n && x.len() >= k && y.len() >= n);
    assert!(k == 0 || n == 0 || w.len() >= (k - 1) * ldw + n);
    let xf: Vec<f32> = x[..k].iter().map(|v| v.to_f32()).collect();
    let mut acc = vec![0f32; n];
    if k > 0 && n > 0 {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked); the slice lengths were checked.
            unsafe { x86::matvec_avx2(&xf, w, ldw, k, n, &mut acc) };
            for (o, a) in y[..n].iter_mut().zip(&acc) {
                *o = f16::from_f32(*a);
            }
            return;
        }
        matvec_f16_portable(&xf, w, ldw, k, n, &mut acc);
    }
    for (o, a) in y[..n].iter_mut().zip(&acc) {
        *o = f16::from_f32(*a);
    }
}

/// Columns per panel of a packed weight ([`Panels`]): two AVX registers of f32 sums.
pub(crate) const PANEL: usize = 16;

/// Panels the kernel reads at once ([`x86::panels_avx2`]): `STREAMS` sequential streams of
/// memory in flight instead of one, twelve registers of sums. A decode step is bound by how
/// fast a core pulls the weights from memory, and on a VM whose memory latency is high that
/// depends on the reads in flight more than on the bytes: on the Intel Xeon VM (5-17 GB/s per
/// core within one session) a read loop over 1, 2 and 4 interleaved streams pulled 6.9, 8.7 and 8.9 GB/s on one
/// thread and 10.9, 14.5 and 15.6 GB/s on two. SmolLM2 decode, two threads, each layout against
/// the next in one interleaved run (`goldens/speed/streams/`): one 64-column panel (before) →
/// three of 32 columns +24 % → six of 16 +15 % more; four of 32 (16 registers: spills), two of
/// 32, eight of 16 (spills), four of 16 and twelve of 8 were 0.90-1.00 of the layout they were
/// measured against. One thread: three of 32 +24 %, six of 16 a further +17 %.
pub(crate) const STREAMS: usize = 6;

/// A constant `[k, n]` weight re-laid, once at load, in the order the decode step reads it:
/// column panels of [`PANEL`] columns, each panel's `k` rows of `PANEL` values contiguous (the
/// last panel padded with zeros). A block of whole panels is then one sequential stream, so the
/// threads of a product each read one contiguous range however the columns are shared out (a
/// block of columns of the row-major layout is a short piece of every row: on the CI machine
/// two threads streamed 5 % more with contiguous halves than with half-rows, and narrower
/// blocks were slower still), and the kernel keeps a panel's 16 sums in registers for all `k`
/// rows instead of loading and storing `y` every four rows.
///
/// Each output is still summed over `i` in order, with one rounding per multiply-add on the
/// FMA path, and without AVX2 each panel goes through the row-major portable kernels (a panel is
/// a row-major `[k, PANEL]` block): either way the same bits as [`matvec_f32`] / [`matvec_f16`] on
/// the row-major weight, so packing never changes a product.
pub struct Panels {
    k: usize,
    n: usize,
    data: PanelData,
}

enum PanelData {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl crate::tensor::Prepared for Panels {}

impl std::fmt::Debug for Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Panels([{}, {}] in {} panels)",
            self.k,
            self.n,
            self.panels()
        )
    }
}

fn pack<T: Copy + Default>(w: &[T], k: usize, n: usize) -> Vec<T> {
    let panels = n.div_ceil(PANEL);
    let mut out = vec![T::default(); panels * k * PANEL];
    for (p, panel) in out.chunks_exact_mut(k * PANEL).enumerate() {
        let (c0, c1) = (p * PANEL, ((p + 1) * PANEL).min(n));
        for (i, row) in panel.chunks_exact_mut(PANEL).enumerate() {
            row[..c1 - c0].copy_from_slice(&w[i * n + c0..i * n + c1]);
        }
    }
    out
}

impl Panels {
    /// Packs a row-major `[k, n]` f32 weight.
    pub fn f32(w: &[f32], k: usize, n: usize) -> Panels {
        assert_eq!(w.len(), k * n);
        Panels {
            k,
            n,
            data: PanelData::F32(pack(w, k, n)),
        }
    }

    /// Packs a row-major `[k, n]` f16 weight.
    pub fn f16(w: &[f16], k: usize, n: usize) -> Panels {
        assert_eq!(w.len(), k * n);
        Panels {
            k,
            n,
            data: PanelData::F16(pack(w, k, n)),
        }
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// `y := x · W[:, columns of panels p0..p1]` in f32 (`x` of `k` values; `y` holds the
    /// columns of those panels that exist, `min(p1 * PANEL, n) - p0 * PANEL` of them).
    ///
    /// # Panics
    /// When the panels or the slices are out of range.
    pub fn matvec(&self, x: &[f32], (p0, p1): (usize, usize), y: &mut [f32]) {
        let (k, n) = (self.k, self.n);
        assert!(p0 <= p1 && p1 <= self.panels() && x.len() >= k);
        let cols = (p1 * PANEL).min(n).saturating_sub(p0 * PANEL);
        assert_eq!(y.len(), cols);
        let span = p0 * k * PANEL..p1 * k * PANEL;
        match &self.data {
            PanelData::F32(w) => panel_blocks(x, &w[span], k, y),
            PanelData::F16(w) => panel_blocks(x, &w[span], k, y),
        }
    }
}

/// `y` from whole panels `w` (each `k * PANEL` values), in panel order.
fn panel_blocks<T: Widen>(x: &[f32], w: &[T], k: usize, y: &mut [f32]) {
    if k == 0 {
        y.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // STREAMS panels at a time, then those left (fewer than STREAMS) one by one.
        let group = k * PANEL * STREAMS;
        let (mut w, mut y) = (w, y);
        while w.len() >= group {
            let (ours, rest) = y.split_at_mut(y.len().min(PANEL * STREAMS));
            // SAFETY: the CPU has AVX2, FMA and F16C (checked); `w` starts with STREAMS panels
            // of k rows of PANEL values, and `ours` holds at most their columns.
            unsafe { x86::panels_avx2::<T, STREAMS>(x, &w[..group], k, ours) };
            (w, y) = (&w[group..], rest);
        }
        for (panel, out) in w.chunks_exact(k * PANEL).zip(y.chunks_mut(PANEL)) {
            // SAFETY: as above, one panel.
            unsafe { x86::panels_avx2::<T, 1>(x, panel, k, out) };
        }
        return;
    }
    for (panel, out) in w.chunks_exact(k * PANEL).zip(y.chunks_mut(PANEL)) {
        // A panel is a row-major `[k, PANEL]` block: the row-major kernel without AVX2 sums its
        // columns in the same order as on the unpacked weight.
        T::portable(x, panel, PANEL, k, out);
    }
}

/// A weight element the kernels widen to f32: one at a time, or (AVX) eight into one vector.
pub trait Widen: Copy {
    fn widen(self) -> f32;
    /// The row-major kernel without AVX2: `y := x · W` for the `[k, y.len()]` block `w` with
    /// row stride `ldw`, summed as [`matvec_f32`] / [`matvec_f16`] sum there.
    fn portable(x: &[f32], w: &[Self], ldw: usize, k: usize, y: &mut [f32]);
    /// # Safety
    /// `p` points to 8 readable values; the caller runs with AVX (and F16C for f16).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl Widen for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    fn portable(x: &[f32], w: &[f32], ldw: usize, k: usize, y: &mut [f32]) {
        matvec_f32_portable(x, w, ldw, k, y.len(), y);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller's contract.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl Widen for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn portable(x: &[f32], w: &[f16], ldw: usize, k: usize, y: &mut [f32]) {
        y.fill(0.0);
        matvec_f16_portable(x, w, ldw, k, y.len(), y);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract; f16 is a transparent u16, so eight of them are one
        // 128-bit load.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}

/// AVX2, FMA and F16C, checked once. One kernel serves f32 and f16, so it asks for all three
/// (every x86 CPU with AVX2 also has F16C, which came a generation earlier).
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

/// The f16 kernel without AVX2: `acc += x · W`, one fused multiply-add per weight, row order.
fn matvec_f16_portable(x: &[f32], w: &[f16], ldw: usize, k: usize, n: usize, acc: &mut [f32]) {
    let row = |i: usize| &w[i * ldw..i * ldw + n];
    for (i, &a) in x[..k].iter().enumerate() {
        for (o, v) in acc.iter_mut().zip(row(i)) {
            *o = a.mul_add(v.to_f32(), *o);
        }
    }
}

fn matvec_f32_portable(x: &[f32], w: &[f32], ldw: usize, k: usize, n: usize, y: &mut [f32]) {
    y.fill(0.0);
    let row = |i: usize| &w[i * ldw..i * ldw + n];
    let mut i = 0;
    while i + 4 <= k {
        let (a, b, c, d) = (x[i], x[i + 1], x[i + 2], x[i + 3]);
        let (r0, r1, r2, r3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
        for ((((o, &w0), &w1), &w2), &w3) in y.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3) {
            *o += a * w0 + b * w1 + c * w2 + d * w3;
        }
        i += 4;
    }
    while i < k {
        let a = x[i];
        for (o, &w0) in y.iter_mut().zip(row(i)) {
            *o += a * w0;
        }
        i += 1;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Widen;
    use std::arch::x86_64::*;

    /// `acc += x · W` (W a `[k, n]` block with row stride `ldw`): rows four at a time, eight
    /// columns per fused multiply-add.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `k, n ≥ 1`, `x.len() >= k`,
    /// `w.len() >= (k - 1) * ldw + n`, `acc.len() == n`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn matvec_avx2<T: Widen>(
        x: &[f32],
        w: &[T],
        ldw: usize,
        k: usize,
        n: usize,
        acc: &mut [f32],
    ) {
        let yp = acc.as_mut_ptr();
        let wp = w.as_ptr();
        let n8 = n - n % 8;
        let mut i = 0;
        while i + 4 <= k {
            let (a, b, c, d) = (x[i], x[i + 1], x[i + 2], x[i + 3]);
            // SAFETY (this block): rows i..i+4 of W are in bounds (i + 3 < k and
            // w.len() >= (k - 1) * ldw + n), and every j + 8 <= n8 <= n indexes inside a row's
            // n values and inside acc.
            unsafe {
                let (va, vb, vc, vd) = (
                    _mm256_set1_ps(a),
                    _mm256_set1_ps(b),
                    _mm256_set1_ps(c),
                    _mm256_set1_ps(d),
                );
                let r0 = wp.add(i * ldw);
                let (r1, r2, r3) = (r0.add(ldw), r0.add(2 * ldw), r0.add(3 * ldw));
                let mut j = 0;
                while j < n8 {
                    let mut s = _mm256_loadu_ps(yp.add(j));
                    s = _mm256_fmadd_ps(va, T::load8(r0.add(j)), s);
                    s = _mm256_fmadd_ps(vb, T::load8(r1.add(j)), s);
                    s = _mm256_fmadd_ps(vc, T::load8(r2.add(j)), s);
                    s = _mm256_fmadd_ps(vd, T::load8(r3.add(j)), s);
                    _mm256_storeu_ps(yp.add(j), s);
                    j += 8;
                }
                for j in n8..n {
                    let mut s = *yp.add(j);
                    s = a.mul_add((*r0.add(j)).widen(), s);
                    s = b.mul_add((*r1.add(j)).widen(), s);
                    s = c.mul_add((*r2.add(j)).widen(), s);
                    s = d.mul_add((*r3.add(j)).widen(), s);
                    *yp.add(j) = s;
                }
            }
            i += 4;
        }
        while i < k {
            let a = x[i];
            // SAFETY: row i is in bounds (i < k); j + 8 <= n8 <= n.
            unsafe {
                let va = _mm256_set1_ps(a);
                let r0 = wp.add(i * ldw);
                let mut j = 0;
                while j < n8 {
                    let s = _mm256_fmadd_ps(va, T::load8(r0.add(j)), _mm256_loadu_ps(yp.add(j)));
                    _mm256_storeu_ps(yp.add(j), s);
                    j += 8;
                }
                for j in n8..n {
                    *yp.add(j) = a.mul_add((*r0.add(j)).widen(), *yp.add(j));
                }
            }
            i += 1;
        }
    }

    /// `S` consecutive panels at once: `out[p·PANEL + j] = Σ_i x[i] · panel_p[i][j]`, the
    /// `S · PANEL` sums kept in registers over all `k` rows, one fused multiply-add per row in
    /// row order (so the bits of one panel at a time, and of the row-major kernel). Reading the
    /// `S` panels row by row keeps `S` sequential streams in flight.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `k ≥ 1`, `x.len() >= k`,
    /// `panels.len() == S * k * PANEL`, `out.len() <= S * PANEL`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn panels_avx2<T: Widen, const S: usize>(
        x: &[f32],
        panels: &[T],
        k: usize,
        out: &mut [f32],
    ) {
        const P: usize = super::PANEL;
        debug_assert_eq!(panels.len(), S * k * P);
        let wp = panels.as_ptr();
        let mut acc = [[_mm256_setzero_ps(); P / 8]; S];
        for (i, &xi) in x[..k].iter().enumerate() {
            let v = _mm256_set1_ps(xi);
            for (s, acc) in acc.iter_mut().enumerate() {
                // SAFETY: row i of panel s is panels[(s * k + i) * P ..][..P], in bounds for
                // i < k and s < S.
                let row = unsafe { wp.add((s * k + i) * P) };
                for (j, a) in acc.iter_mut().enumerate() {
                    // SAFETY: 8 * j + 8 <= P values of the row.
                    *a = _mm256_fmadd_ps(v, unsafe { T::load8(row.add(8 * j)) }, *a);
                }
            }
        }
        let mut all = [[0f32; P]; S];
        for (sums, acc) in all.iter_mut().zip(&acc) {
            for (j, a) in acc.iter().enumerate() {
                // SAFETY: sums holds P = 8 * (P / 8) floats.
                unsafe { _mm256_storeu_ps(sums.as_mut_ptr().add(8 * j), *a) };
            }
        }
        let n = out.len();
        out.copy_from_slice(&all.as_flattened()[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The f64 reference, and the worst error of `got` against it relative to the sum of |terms|.
    fn check(x: &[f32], (w, ldw): (&[f32], usize), k: usize, n: usize, got: &[f32]) {
        for j in 0..n {
            let (mut want, mut mag) = (0f64, 0f64);
            for i in 0..k {
                let t = f64::from(x[i]) * f64::from(w[i * ldw + j]);
                want += t;
                mag += t.abs();
            }
            let err = (f64::from(got[j]) - want).abs();
            assert!(
                err <= 1e-6 * mag.max(1e-30) * (k as f64).sqrt() + 1e-30,
                "k {k} n {n} j {j}: {} vs {want} (|terms| {mag})",
                got[j]
            );
        }
    }

    #[test]
    fn matches_the_f64_reference_for_every_remainder() {
        for (k, n) in [
            (1, 1),
            (3, 7),
            (4, 8),
            (5, 9),
            (7, 17),
            (64, 64),
            (576, 192),
            (9, 1000),
            (130, 33),
        ] {
            let (x, w) = (data(k, 1 + k as u64), data(k * n, 2 + n as u64));
            let mut y = vec![f32::NAN; n];
            matvec_f32(&x, (&w, n), k, n, &mut y);
            check(&x, (&w, n), k, n, &y);
            let mut p = vec![f32::NAN; n];
            matvec_f32_portable(&x, &w, n, k, n, &mut p);
            check(&x, (&w, n), k, n, &p);
            // A block of columns of the same matrix (row stride n, width n / 2 from column n / 3).
            let (c0, width) = (n / 3, n / 2);
            if width > 0 {
                let mut b = vec![f32::NAN; width];
                matvec_f32(&x, (&w[c0..], n), k, width, &mut b);
                check(&x, (&w[c0..], n), k, width, &b);
            }
        }
    }

    #[test]
    fn f16_is_the_f32_sum_of_the_widened_values_rounded_once() {
        for (k, n) in [(1, 1), (5, 9), (7, 17), (64, 64), (576, 192), (130, 33)] {
            let x: Vec<f16> = data(k, 3 + k as u64)
                .into_iter()
                .map(f16::from_f32)
                .collect();
            let w: Vec<f16> = data(k * n, 4 + n as u64)
                .into_iter()
                .map(f16::from_f32)
                .collect();
            let mut y = vec![f16::NAN; n];
            matvec_f16(&x, (&w, n), k, n, &mut y);
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let wf: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
            let mut want = vec![0f32; n];
            matvec_f32(&xf, (&wf, n), k, n, &mut want);
            for j in 0..n {
                // Both sum the same f32 products; the f16 result is that sum rounded once
                // (f32 summation order may differ in the last f32 bits, far below f16's).
                let (got, exp) = (y[j].to_f32(), f16::from_f32(want[j]).to_f32());
                assert!(
                    (got - exp).abs() <= exp.abs() * 1e-3 + 1e-6,
                    "k {k} n {n} j {j}: {got} vs {exp}"
                );
            }
        }
    }

    /// The packed kernel gives the bits of the row-major one, for any block of panels.
    #[test]
    fn panels_give_the_row_major_kernels_bits_for_any_block_of_panels() {
        for (k, n) in [
            (1, 64),
            (5, 64),
            (7, 130),
            (64, 200),
            (576, 192),
            (33, 1000),
        ] {
            let x = data(k, 3 * k as u64);
            let w = data(k * n, 5 * n as u64);
            let mut want = vec![0f32; n];
            matvec_f32(&x, (&w, n), k, n, &mut want);
            let p = Panels::f32(&w, k, n);
            assert_eq!((p.k(), p.n(), p.panels()), (k, n, n.div_ceil(PANEL)));
            // Whole groups of STREAMS panels, a group and a remainder, single panels.
            let mid = (1, p.panels().min(1 + STREAMS + 2));
            for (p0, p1) in [(0, p.panels()), (0, 1), mid, (p.panels() - 1, p.panels())] {
                let c0 = p0 * PANEL;
                let mut got = vec![0f32; (p1 * PANEL).min(n) - c0];
                p.matvec(&x, (p0, p1), &mut got);
                assert_eq!(
                    got,
                    want[c0..c0 + got.len()],
                    "k {k} n {n} panels {p0}..{p1}"
                );
            }
            let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let mut want = vec![f16::ZERO; n];
            matvec_f16(&xh, (&wh, n), k, n, &mut want);
            let xf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
            let mut got = vec![0f32; n];
            Panels::f16(&wh, k, n).matvec(&xf, (0, n.div_ceil(PANEL)), &mut got);
            let got: Vec<f16> = got.into_iter().map(f16::from_f32).collect();
            assert_eq!(got, want, "f16 k {k} n {n}");
        }
    }

    /// Without AVX2 the panels are summed by the row-major portable kernels, so the bits still
    /// match the unpacked weight's (and a product stays the same on any thread count).
    #[test]
    fn portable_panels_give_the_portable_row_major_bits() {
        let (k, n) = (37, 150);
        let x = data(k, 21);
        let w = data(k * n, 22);
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let (pf, ph) = (pack(&w, k, n), pack(&wh, k, n));
        for p in 0..n.div_ceil(PANEL) {
            let (c0, cols) = (p * PANEL, PANEL.min(n - p * PANEL));
            let panel = p * k * PANEL..(p + 1) * k * PANEL;
            let (mut got, mut want) = (vec![0f32; cols], vec![0f32; cols]);
            <f32 as Widen>::portable(&x, &pf[panel.clone()], PANEL, k, &mut got);
            matvec_f32_portable(&x, &w[c0..], n, k, cols, &mut want);
            assert_eq!(got, want, "f32 panel {p}");
            <f16 as Widen>::portable(&x, &ph[panel], PANEL, k, &mut got);
            want.fill(0.0);
            matvec_f16_portable(&x, &wh[c0..], n, k, cols, &mut want);
            assert_eq!(got, want, "f16 panel {p}");
        }
    }

    #[test]
    fn k_zero_gives_zeros() {
        let mut y = vec![f32::NAN; 5];
        matvec_f32(&[], (&[], 5), 0, 5, &mut y);
        assert_eq!(y, [0.0; 5]);
        let mut h = vec![f16::NAN; 3];
        matvec_f16(&[], (&[], 3), 0, 3, &mut h);
        assert!(h.iter().all(|v| v.to_f32() == 0.0));
    }
}
