//! The twelve ggml weight formats: one [`GgmlFormat`] implementation each,
//! holding the scalar reference arithmetic of one block (the definition the
//! SIMD paths reproduce bit for bit).
//!
//! # Definition of one block's contribution
//!
//! For a weight block `w` and its activation block `a` (same 32 or 256
//! columns) the integer parts are exact in i32 (the bounds below hold for
//! *any* block bytes, so hostile files cannot overflow them):
//!
//! | format | act | integer parts | f32 contribution `c` |
//! |---|---|---|---|
//! | Q8_0 | Q8_0 | `S = sum q_i a_i` | `S * (d_w * d_a)` |
//! | Q4_0 | Q8_0 | `S = sum (v_i - 8) a_i` | `S * (d_w * d_a)` |
//! | Q4_1 | Q8_0 | `S = sum v_i a_i`, `M = sum a_i` | `S * (d * d_a) + M * (m * d_a)` |
//! | Q5_0 | Q8_0 | `S = sum (v_i - 16) a_i` | `S * (d_w * d_a)` |
//! | Q5_1 | Q8_0 | `S = sum v_i a_i`, `M = sum a_i` | `S * (d * d_a) + M * (m * d_a)` |
//! | Q4_K | Q8_K | `S = sum_j sc_j sum_{i in j} v_i a_i`, `M = sum_j m_j (bsum_2j + bsum_2j+1)` | `S * (d * d_a) - M * (dmin * d_a)` |
//! | Q5_K | Q8_K | as Q4_K with 5-bit `v` | as Q4_K |
//! | Q6_K | Q8_K | `S = sum_j sc_j sum_{i in j} (v_i - 32) a_i` (16 sub-blocks) | `S * (d * d_a)` |
//! | Q2_K | Q8_K | `S = sum_j sc_j sum_{i in j} v_i a_i`, `M = sum_j m_j bsum_j` (16 sub-blocks of 16, 4-bit `sc`, `m`) | `S * (d * d_a) - M * (dmin * d_a)` |
//! | Q3_K | Q8_K | `S = sum_j sc_j sum_{i in j} v_i a_i` (16 sub-blocks, signed 6-bit `sc`, `v` in -4..=3) | `S * (d * d_a)` |
//! | IQ4_NL | Q8_0 | `S = sum L[v_i] a_i` (`L` = ggml's `kvalues_iq4nl`) | `S * (d_w * d_a)` |
//! | IQ4_XS | Q8_K | `S = sum_j (ls_j - 32) sum_{i in j} L[v_i] a_i` (8 sub-blocks of 32) | `S * (d * d_a)` |
//!
//! Q4_1 and Q5_1 are served by the mins form `S * (d * d_a) - M * (dmin * d_a)` with
//! `dmin = -m`: negation is exact and rounding to nearest is symmetric, so
//! `x - M * ((-m) * d_a)` and `x + M * (m * d_a)` are the same f32 bit for
//! bit; the SIMD kernels flip the sign of `m` and subtract, exactly as the
//! scalar reference does.
//!
//! `S`, `M` are converted with `as f32` (round to nearest even, what
//! `cvtdq2ps` does), each product is one f32 multiplication in the order
//! written (parenthesized first), no FMA. A row's result is
//! `y = (((0 + c_0) + c_1) + ...) + c_{nb-1}`, sequential over the row's
//! blocks in column order. Bounds: |S| < 2^28 for IQ4_XS (`32 * 127 * 127 *
//! 256`), < 2^27 for Q6_K (`128 * 32 * 127 * 256`), < 2^26 for Q5_K, < 2^25
//! for the others.

use ggml_quants::GgmlType;

use crate::act::{quantize_q8_0, quantize_q8_k, ActQ8_0, BlockQ8K};
use crate::act_isa::{quantize_q8_0_isa, quantize_q8_k_isa};
use crate::blocks::{
    iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, Iq4NlView,
    Iq4XsView, Q2KView, Q3KView, Q4KView, Q4_0View, Q4_1View, Q5KView, Q5_0View, Q5_1View, Q6KView,
    Q8_0View,
};
use crate::error::KernelError;
use crate::isa::Isa;
use crate::table::{GroupFn, GroupGemmFn, Kernels};

/// An activation block type (Q8_0 for the legacy formats, Q8_K for the
/// k-quants): how `x` is quantized and what each quant stands for.
pub trait ActBlock: Copy + Default + Send + Sync + 'static {
    /// Activations per block.
    const QK: usize;
    /// Quantize `x` (`QK * out.len()` values) into blocks.
    fn quantize(x: &[f32], out: &mut [Self]) -> Result<(), KernelError>;
    /// [`ActBlock::quantize`] with the quantizer of tier `isa` (the same
    /// bytes; `isa` must be available).
    fn quantize_isa(isa: Isa, x: &[f32], out: &mut [Self]) -> Result<(), KernelError> {
        let _ = isa;
        Self::quantize(x, out)
    }
    /// The block scale `d_a` (as the kernels multiply with it).
    fn d(&self) -> f32;
    /// Quant `i`.
    fn q(&self, i: usize) -> i8;
    /// Value of activation `i` (`d_a * q_i`, exact in f64).
    fn value(&self, i: usize) -> f64 {
        f64::from(self.d()) * f64::from(self.q(i))
    }
    /// The largest `|d_a * q_i - x_i|` the quantizer can leave (round to
    /// nearest, plus the rounding of its scale).
    fn tolerance(&self) -> f64;
}

/// Unit roundoff of f32.
const U32: f64 = 1.0 / (1u64 << 24) as f64;

impl ActBlock for ActQ8_0 {
    const QK: usize = 32;
    fn quantize(x: &[f32], out: &mut [Self]) -> Result<(), KernelError> {
        quantize_q8_0(x, out)
    }
    fn quantize_isa(isa: Isa, x: &[f32], out: &mut [Self]) -> Result<(), KernelError> {
        quantize_q8_0_isa(isa, x, out)
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn q(&self, i: usize) -> i8 {
        self.qs[i]
    }
    /// ggml's Q8_0 quantizer: `d = amax / 127` (f32), `q = round(x * (1 /
    /// d))`, `d` stored as fp16. `|q - x / d| <= 0.5 + 255u` (two f32
    /// roundings of a value below 128), and `|fp16(d) - d|` is at most
    /// `2^-11 |d|` (normal) or `2^-25` (subnormal), times `|q| <= 127.5`.
    fn tolerance(&self) -> f64 {
        let d = f64::from(self.d).abs();
        let d_err = (d * (1.0 / 2048.0)).max(1.0 / (1u64 << 25) as f64) * 1.0005;
        (d + d_err) * (0.5 + 255.0 * U32) + 127.5 * d_err
    }
}

impl ActBlock for BlockQ8K {
    const QK: usize = 256;
    fn quantize(x: &[f32], out: &mut [Self]) -> Result<(), KernelError> {
        quantize_q8_k(x, out)
    }
    fn quantize_isa(isa: Isa, x: &[f32], out: &mut [Self]) -> Result<(), KernelError> {
        quantize_q8_k_isa(isa, x, out)
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn q(&self, i: usize) -> i8 {
        self.qs[i]
    }
    /// ggml's Q8_K quantizer: `iscale = -127 / max`, `q = nearest_int(iscale
    /// * x)`, `d = 1 / iscale` (all f32): `|q - x iscale| <= 0.5 + 127u` and
    /// `|d iscale - 1| <= u` with `|x| <= 127 |d| (1 + u)`.
    fn tolerance(&self) -> f64 {
        f64::from(self.d).abs() * (0.5 + 260.0 * U32)
    }
}

/// One ggml block format and its activation type.
pub trait GgmlFormat: Copy + Send + Sync + 'static {
    /// The ggml type.
    const TYPE: GgmlType;
    /// Weights per block.
    const QK: usize;
    /// Bytes per block.
    const BYTES: usize;
    /// The activation block type (Q8_0 or Q8_K).
    type Act: ActBlock;
    /// Blocks carry mins (`dmin`, `M`): Q4_1, Q5_1 (`dmin = -m`), Q2_K, Q4_K, Q5_K.
    const HAS_MINS: bool;
    /// The exact integer parts `(S, M)` of one block (`M = 0` for formats
    /// without mins). `w` holds at least one block.
    fn block_ints(w: &[u8], a: &Self::Act) -> (i32, i32);
    /// The block's `(d, dmin)` (`dmin = 0` for formats without mins).
    fn block_scales(w: &[u8]) -> (f32, f32);
    /// This format's group kernel in a tier's table.
    fn kernel(k: &Kernels) -> GroupFn<Self::Act>;
    /// This format's multi-row (GEMM) group kernel in a tier's table, if
    /// the tier has one (otherwise the GEMM runs [`GgmlFormat::kernel`]
    /// once per activation row).
    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<Self::Act>>;

    /// The f32 contribution of one block (see the module table): `S * (d *
    /// d_a)`, minus `M * (dmin * d_a)` for formats with mins.
    fn block_contrib(w: &[u8], a: &Self::Act) -> f32 {
        let (s, m) = Self::block_ints(w, a);
        let (d, dmin) = Self::block_scales(w);
        if Self::HAS_MINS {
            s as f32 * (d * a.d()) - m as f32 * (dmin * a.d())
        } else {
            s as f32 * (d * a.d())
        }
    }

    /// The two products of the contribution before the kernel rounds them,
    /// in f64: `(S * d * d_a, M * dmin * d_a)`. Their magnitudes bound the
    /// kernel's rounding error (the `kernel-check` crate).
    fn block_terms(w: &[u8], a: &Self::Act) -> (f64, f64) {
        let (s, m) = Self::block_ints(w, a);
        let (d, dmin) = Self::block_scales(w);
        let da = f64::from(a.d());
        (
            f64::from(s) * f64::from(d) * da,
            f64::from(m) * f64::from(dmin) * da,
        )
    }
}

/// Marker: Q8_0 weights.
#[derive(Debug, Clone, Copy)]
pub struct Q8_0;
/// Marker: Q4_0 weights.
#[derive(Debug, Clone, Copy)]
pub struct Q4_0;
/// Marker: Q4_1 weights.
#[derive(Debug, Clone, Copy)]
pub struct Q4_1;
/// Marker: Q5_0 weights.
#[derive(Debug, Clone, Copy)]
pub struct Q5_0;
/// Marker: Q5_1 weights.
#[derive(Debug, Clone, Copy)]
pub struct Q5_1;
/// Marker: Q4_K weights.
#[derive(Debug, Clone, Copy)]
pub struct Q4K;
/// Marker: Q5_K weights.
#[derive(Debug, Clone, Copy)]
pub struct Q5K;
/// Marker: Q6_K weights.
#[derive(Debug, Clone, Copy)]
pub struct Q6K;
/// Marker: Q2_K weights.
#[derive(Debug, Clone, Copy)]
pub struct Q2K;
/// Marker: Q3_K weights.
#[derive(Debug, Clone, Copy)]
pub struct Q3K;
/// Marker: IQ4_NL weights.
#[derive(Debug, Clone, Copy)]
pub struct Iq4Nl;
/// Marker: IQ4_XS weights.
#[derive(Debug, Clone, Copy)]
pub struct Iq4Xs;

fn view<'a, T>(w: &'a [u8], f: impl FnOnce(&'a [u8]) -> Option<T>) -> T {
    // Callers (RowGroup::block) always pass whole blocks.
    f(w).expect("a whole weight block")
}

impl GgmlFormat for Q8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const QK: usize = q8_0::QK;
    const BYTES: usize = q8_0::BYTES;
    type Act = ActQ8_0;
    const HAS_MINS: bool = false;

    fn block_ints(w: &[u8], a: &ActQ8_0) -> (i32, i32) {
        let w = view(w, Q8_0View::new);
        let mut s = 0i32;
        for i in 0..32 {
            s += w.q(i) * a.qs[i] as i32;
        }
        (s, 0)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        (view(w, Q8_0View::new).d(), 0.0)
    }

    fn kernel(k: &Kernels) -> GroupFn<ActQ8_0> {
        k.q8_0
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<ActQ8_0>> {
        k.gemm.q8_0
    }
}

/// Q4_0 / Q5_0: `S = sum (v_i - offset) a_i`, no mins.
macro_rules! offset_format {
    ($fmt:ident, $ty:ident, $blk:ident, $view:ident, $offset:expr) => {
        impl GgmlFormat for $fmt {
            const TYPE: GgmlType = GgmlType::$ty;
            const QK: usize = $blk::QK;
            const BYTES: usize = $blk::BYTES;
            type Act = ActQ8_0;
            const HAS_MINS: bool = false;

            fn block_ints(w: &[u8], a: &ActQ8_0) -> (i32, i32) {
                let w = view(w, $view::new);
                let mut s = 0i32;
                for i in 0..32 {
                    s += (w.v(i) - $offset) * a.qs[i] as i32;
                }
                (s, 0)
            }

            fn block_scales(w: &[u8]) -> (f32, f32) {
                (view(w, $view::new).d(), 0.0)
            }

            fn kernel(k: &Kernels) -> GroupFn<ActQ8_0> {
                k.$blk
            }

            fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<ActQ8_0>> {
                k.gemm.$blk
            }
        }
    };
}

/// Q4_1 / Q5_1: `S = sum v_i a_i`, `M = sum a_i` (the weight is `d v + m`);
/// scales `(d, -m)`: the min enters with a plus sign (module docs).
macro_rules! min_format {
    ($fmt:ident, $ty:ident, $blk:ident, $view:ident) => {
        impl GgmlFormat for $fmt {
            const TYPE: GgmlType = GgmlType::$ty;
            const QK: usize = $blk::QK;
            const BYTES: usize = $blk::BYTES;
            type Act = ActQ8_0;
            const HAS_MINS: bool = true;

            fn block_ints(w: &[u8], a: &ActQ8_0) -> (i32, i32) {
                let w = view(w, $view::new);
                let (mut s, mut m) = (0i32, 0i32);
                for i in 0..32 {
                    s += w.v(i) * a.qs[i] as i32;
                    m += a.qs[i] as i32;
                }
                (s, m)
            }

            fn block_scales(w: &[u8]) -> (f32, f32) {
                let v = view(w, $view::new);
                (v.d(), -v.m())
            }

            fn kernel(k: &Kernels) -> GroupFn<ActQ8_0> {
                k.$blk
            }

            fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<ActQ8_0>> {
                k.gemm.$blk
            }
        }
    };
}

offset_format!(Q4_0, Q4_0, q4_0, Q4_0View, 8);
offset_format!(Q5_0, Q5_0, q5_0, Q5_0View, 16);
min_format!(Q4_1, Q4_1, q4_1, Q4_1View);
min_format!(Q5_1, Q5_1, q5_1, Q5_1View);

/// `(S, M)` of a Q4_K / Q5_K block: 8 sub-blocks of 32 with 6-bit scales
/// and mins; `sub(j)` the unsigned values of sub-block `j`'s 32 weights.
/// (Integer sums: exact in any order; whole sub-blocks at a time so that
/// the dot products vectorize.)
#[inline(always)]
fn k4_ints(
    (sc, m): ([u8; 8], [u8; 8]),
    sub: impl Fn(usize) -> [u8; 32],
    a: &BlockQ8K,
) -> (i32, i32) {
    let (mut s, mut mm) = (0i32, 0i32);
    for j in 0..8 {
        let v = sub(j);
        let mut dot = 0i32;
        for (&vi, &ai) in v.iter().zip(&a.qs[32 * j..32 * j + 32]) {
            dot += i32::from(vi) * i32::from(ai);
        }
        s += sc[j] as i32 * dot;
        mm += m[j] as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32);
    }
    (s, mm)
}

impl GgmlFormat for Q4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const QK: usize = q4_k::QK;
    const BYTES: usize = q4_k::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = true;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Q4KView::new);
        k4_ints(w.scales_mins(), |j| w.sub_block(j), a)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        let v = view(w, Q4KView::new);
        (v.d(), v.dmin())
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.q4_k
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.q4_k
    }
}

impl GgmlFormat for Q5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const QK: usize = q5_k::QK;
    const BYTES: usize = q5_k::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = true;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Q5KView::new);
        k4_ints(w.scales_mins(), |j| w.sub_block(j), a)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        let v = view(w, Q5KView::new);
        (v.d(), v.dmin())
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.q5_k
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.q5_k
    }
}

impl GgmlFormat for Q6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const QK: usize = q6_k::QK;
    const BYTES: usize = q6_k::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = false;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Q6KView::new);
        let mut s = 0i32;
        for j in 0..16 {
            let v = w.sub_block(j);
            let mut dot = 0i32;
            for (&vi, &ai) in v.iter().zip(&a.qs[16 * j..16 * j + 16]) {
                dot += (i32::from(vi) - 32) * i32::from(ai);
            }
            s += w.scale(j) * dot;
        }
        (s, 0)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        (view(w, Q6KView::new).d(), 0.0)
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.q6_k
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.q6_k
    }
}

impl GgmlFormat for Iq4Nl {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const QK: usize = iq4_nl::QK;
    const BYTES: usize = iq4_nl::BYTES;
    type Act = ActQ8_0;
    const HAS_MINS: bool = false;

    fn block_ints(w: &[u8], a: &ActQ8_0) -> (i32, i32) {
        let w = view(w, Iq4NlView::new);
        let mut s = 0i32;
        for i in 0..32 {
            s += w.level(i) * a.qs[i] as i32;
        }
        (s, 0)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        (view(w, Iq4NlView::new).d(), 0.0)
    }

    fn kernel(k: &Kernels) -> GroupFn<ActQ8_0> {
        k.iq4_nl
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<ActQ8_0>> {
        k.gemm.iq4_nl
    }
}

impl GgmlFormat for Iq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const QK: usize = iq4_xs::QK;
    const BYTES: usize = iq4_xs::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = false;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Iq4XsView::new);
        let sc = w.scales();
        let mut s = 0i32;
        for (j, &scj) in sc.iter().enumerate() {
            let mut dot = 0i32;
            for i in 32 * j..32 * j + 32 {
                dot += w.level(i) * a.qs[i] as i32;
            }
            s += scj as i32 * dot;
        }
        (s, 0)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        (view(w, Iq4XsView::new).d(), 0.0)
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.iq4_xs
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.iq4_xs
    }
}

impl GgmlFormat for Q2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const QK: usize = q2_k::QK;
    const BYTES: usize = q2_k::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = true;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Q2KView::new);
        let (mut s, mut m) = (0i32, 0i32);
        for j in 0..16 {
            let mut dot = 0i32;
            for i in 16 * j..16 * j + 16 {
                dot += w.v(i) * a.qs[i] as i32;
            }
            s += w.scale(j) * dot;
            m += w.min(j) * a.bsums[j] as i32;
        }
        (s, m)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        let v = view(w, Q2KView::new);
        (v.d(), v.dmin())
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.q2_k
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.q2_k
    }
}

impl GgmlFormat for Q3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const QK: usize = q3_k::QK;
    const BYTES: usize = q3_k::BYTES;
    type Act = BlockQ8K;
    const HAS_MINS: bool = false;

    fn block_ints(w: &[u8], a: &BlockQ8K) -> (i32, i32) {
        let w = view(w, Q3KView::new);
        let sc = w.scales();
        let mut s = 0i32;
        for (j, &scj) in sc.iter().enumerate() {
            let mut dot = 0i32;
            for i in 16 * j..16 * j + 16 {
                dot += w.v(i) * a.qs[i] as i32;
            }
            s += scj as i32 * dot;
        }
        (s, 0)
    }

    fn block_scales(w: &[u8]) -> (f32, f32) {
        (view(w, Q3KView::new).d(), 0.0)
    }

    fn kernel(k: &Kernels) -> GroupFn<BlockQ8K> {
        k.q3_k
    }

    fn gemm_kernel(k: &Kernels) -> Option<GroupGemmFn<BlockQ8K>> {
        k.gemm.q3_k
    }
}
