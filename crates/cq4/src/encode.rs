//! The quantizer: [`Bundle`] (per-bundle rotations and codebooks) and
//! [`PanelEncoder`] (one tensor, streamed in whole 64-row super-blocks).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use weights_file::panel::{PanelGeometry, SUPER_BLOCK};
use weights_file::Header;

use crate::codebook::{self, cb_scale_of, codebook_i8, index_of, Codebook, LEVELS};
use crate::decode::{decode_rows, Decoder, RtSource};
use crate::error::Cq4Error;
use crate::gptq::Gptq;
use crate::hadamard::{unrotate_group, HadamardRotation, FIXED_MAGIC, HADAMARD_N};
use crate::hadamard_quant::{Batch, BatchIdx, HadamardQuant, LANES};
use crate::orthogonal::OrthogonalRotation;
use crate::simd::{
    self, APack, Buckets, EncodeIsa, KB, MR, NR, TABLE_BUCKETS, TABLE_TAIL, UNCERTAIN,
};
use weights_file::fp16::{f16_bits_to_f32, f16_bits_to_f64, f64_to_f16_bits};
use weights_file::panel::RotationFamily as Family;
use weights_file::panel_view::GROUP as GROUP_SIZE;

/// Smallest stored row/group norm before fp16 rounding (the clamp).
pub const NORM_FLOOR: f64 = 1e-8;

/// Per-bundle state: the seed, the Hadamard parameters, and caches of
/// codebooks (per dimension) and orthogonal rotations (per `Kp`).
///
/// Caches are filled without holding a lock during computation (two threads
/// may compute the same entry; the results are identical and the first
/// stored wins), so a `Bundle` is safe to use from inside rayon tasks.
#[derive(Debug)]
pub struct Bundle {
    seed: u64,
    hadamard: HadamardRotation,
    codebooks: Mutex<BTreeMap<usize, Arc<Codebook>>>,
    rotations: Mutex<BTreeMap<usize, Arc<OrthogonalRotation>>>,
}

fn cached<T>(
    map: &Mutex<BTreeMap<usize, Arc<T>>>,
    key: usize,
    make: impl FnOnce() -> Result<T, Cq4Error>,
) -> Result<Arc<T>, Cq4Error> {
    if let Some(v) = map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(v.clone());
    }
    let v = Arc::new(make()?);
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    Ok(m.entry(key).or_insert(v).clone())
}

/// `Kp`: `k` padded to whole groups (an `n x k` tensor's error when it
/// does not fit).
fn padded_width(n: usize, k: usize) -> Result<usize, Cq4Error> {
    k.checked_next_multiple_of(GROUP_SIZE)
        .ok_or(Cq4Error::TooLarge { n, k })
}

impl Bundle {
    /// A bundle for `seed` (the CLI's `--seed`; default [`crate::rng::DEFAULT_SEED`]).
    pub fn new(seed: u64) -> Self {
        Bundle {
            seed,
            hadamard: HadamardRotation::from_seed(seed),
            codebooks: Mutex::new(BTreeMap::new()),
            rotations: Mutex::new(BTreeMap::new()),
        }
    }

    /// The bundle seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The Hadamard parameters shared by every Hadamard tensor of the bundle.
    pub fn hadamard(&self) -> &HadamardRotation {
        &self.hadamard
    }

    /// The canonical codebook for dimension `d` (cached).
    pub fn codebook(&self, d: usize) -> Result<Arc<Codebook>, Cq4Error> {
        cached(&self.codebooks, d, || codebook::lloyd_max(d))
    }

    /// The orthogonal rotation of width `kp` (cached; `O(kp^3)` the first time).
    pub fn orthogonal(&self, kp: usize) -> Result<Arc<OrthogonalRotation>, Cq4Error> {
        cached(&self.rotations, kp, || {
            OrthogonalRotation::new(self.seed, kp)
        })
    }

    /// What every encoder of `family` at padded width `kp` shares, from
    /// the cache: the codebook and, for the orthogonal family, the rotation.
    #[allow(clippy::type_complexity)]
    fn shared(
        &self,
        family: Family,
        kp: usize,
    ) -> Result<(Arc<Codebook>, Option<Arc<OrthogonalRotation>>), Cq4Error> {
        Ok(match family {
            Family::Hadamard => (self.codebook(HADAMARD_N)?, None),
            Family::Orthogonal => {
                // Independent: side by side (the rotation's QR is the long one).
                let (cb, rot) = rayon::join(|| self.codebook(kp), || self.orthogonal(kp));
                (cb?, Some(rot?))
            }
        })
    }

    /// Makes what [`Bundle::encoder`] takes from the cache for tensors of
    /// `k` columns (unpadded) of `family`: the codebook, and the rotation
    /// of the orthogonal family (`O(kp^3)`), so that a caller can make them
    /// beside other work before its encoders start. Errors are those the
    /// encoder would give; nothing is cached then.
    pub fn prepare(&self, family: Family, k: usize) -> Result<(), Cq4Error> {
        if k == 0 {
            return Ok(());
        }
        self.shared(family, padded_width(0, k)?).map(|_| ())
    }

    /// An encoder for an `n x k` tensor (`k` unpadded) of `family`.
    pub fn encoder(&self, family: Family, n: usize, k: usize) -> Result<PanelEncoder, Cq4Error> {
        if n == 0 || k == 0 {
            return Err(Cq4Error::EmptyTensor { n, k });
        }
        let kp = padded_width(n, k)?;
        let geometry = PanelGeometry::new(n, kp, GROUP_SIZE)?;
        let (codebook, orth) = self.shared(family, kp)?;
        let max_abs = codebook.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let (cb_factor, stored_bits) = match family {
            Family::Hadamard => {
                let f = max_abs / 127.0;
                let mut bits = [0u16; LEVELS];
                for (b, &v) in bits.iter_mut().zip(&codebook.values) {
                    *b = f64_to_f16_bits(v / f);
                }
                (f, bits)
            }
            Family::Orthogonal => (1.0, codebook.bits),
        };
        let mut stored32 = [0f32; LEVELS];
        let mut stored64 = [0f64; LEVELS];
        for i in 0..LEVELS {
            stored32[i] = f16_bits_to_f32(stored_bits[i]);
            stored64[i] = f16_bits_to_f64(stored_bits[i]);
        }
        let cb_scale = cb_scale_of(&stored32);
        let filter_bound = orth
            .as_ref()
            .map(|r| filter_bound(kp, r.max_col_norm))
            .unwrap_or(0.0);
        let decoder = Decoder {
            family,
            geometry,
            codebook: stored64,
            input_scale: vec![1.0; kp],
            hadamard: self.hadamard.clone(),
            rt: match &orth {
                Some(r) => RtSource::Shared(r.clone()),
                None => RtSource::None,
            },
        };
        let table = DecisionTable::new(&codebook.midpoints, filter_bound);
        let hquant = HadamardQuant::new(
            &self.hadamard,
            &codebook.values,
            &codebook.midpoints,
            NORM_FLOOR,
        );
        Ok(PanelEncoder {
            family,
            k,
            geometry,
            codebook,
            cb_factor,
            stored_bits,
            cb_scale,
            hadamard: self.hadamard.clone(),
            orth,
            filter_bound,
            table,
            decoder,
            fallbacks: AtomicU64::new(0),
            input_scale: None,
            gptq: None,
            isa: EncodeIsa::best(),
            hquant,
        })
    }
}

/// Rigorous bound on |f32-filter estimate - exact inner product| (see
/// `orthogonal_superblock`). `u` is the f32 unit roundoff.
fn filter_bound(kp: usize, max_col_norm: f64) -> f64 {
    let u = 2f64.powi(-24);
    let u64 = 2f64.powi(-53);
    let gb = KB as f64 * u / (1.0 - KB as f64 * u);
    let nb = (kp / KB) as f64;
    let gnb = nb * u64 / (1.0 - nb * u64);
    let block = gb * (1.0 + u) + u;
    let coef = block + gnb * (1.0 + block);
    // ||uf||_2 <= 1 + (rounding of norm and division, < 1e-9) + sqrt(Kp) * 2^-29.
    let unorm = 1.0 + 1e-6 + (kp as f64).sqrt() * 2f64.powi(-29);
    1.01 * coef * unorm * max_col_norm
}

/// Per-task scratch buffers of the orthogonal kernel (reused across super-blocks).
#[derive(Default)]
struct Scratch {
    /// Each row's clamped norm (orthogonal family).
    norm: Vec<f64>,
    apack: Vec<APack>,
    /// One super-block's rows times the input scales.
    scaled: Vec<f32>,
    /// The `uf` rows (f64, `k` each) of the exact fallback, made at a row's
    /// first fallback in the super-block (`uf_made[c]`); only grown.
    uf: Vec<f64>,
    uf_made: Vec<bool>,
}

/// A lookup table that decides most orthogonal-family indices from the f32
/// estimate alone. Bucket `b` covers `[x_b, x_{b+1})`, `x_b = -range + b*w`;
/// its entry is the index `#{i : m_i < x}` shared by every `x` in
/// `[x_b - e - w/100, x_{b+1} + e + w/100]`, or `UNCERTAIN` if a threshold lies
/// in that widened interval. (`w/100` covers the rounding of the bucket
/// computation, which is below 1e-11 buckets.)
struct DecisionTable {
    range: f64,
    inv_w: f64,
    table: Vec<u8>,
}

impl std::fmt::Debug for DecisionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionTable")
            .field("range", &self.range)
            .field("buckets", &self.table.len())
            .finish()
    }
}

impl DecisionTable {
    fn new(mid: &[f64; LEVELS - 1], e: f64) -> Self {
        let range = 4.0 * mid.iter().fold(0.0f64, |a, m| a.max(m.abs()));
        let w = 2.0 * range / TABLE_BUCKETS as f64;
        let slack = e + w / 100.0;
        let mut table: Vec<u8> = (0..TABLE_BUCKETS)
            .map(|b| {
                let lo = -range + b as f64 * w - slack;
                let hi = -range + (b + 1) as f64 * w + slack;
                if mid.iter().any(|&m| m >= lo && m <= hi) {
                    UNCERTAIN
                } else {
                    index_of(mid, lo)
                }
            })
            .collect();
        // The entry of every estimate outside the buckets (and of NaN),
        // and the padding of the gathers.
        table.extend([UNCERTAIN; TABLE_TAIL]);
        DecisionTable {
            range,
            inv_w: 1.0 / w,
            table,
        }
    }

    fn buckets(&self) -> Buckets<'_> {
        Buckets {
            table: &self.table,
            range: self.range,
            inv_w: self.inv_w,
        }
    }

    /// The index of every value within the filter bound of `est`, or
    /// [`UNCERTAIN`] if the table does not know it.
    #[cfg(test)]
    fn lookup(&self, est: f64) -> u8 {
        self.buckets().lookup(est)
    }

    /// The lookups of a tile row's `NR` estimates on `isa`, and the mask of
    /// those it does not know (bit `q` for column `q`).
    #[inline(always)]
    fn lookup_row(&self, isa: EncodeIsa, est: &[f64; NR]) -> (simd::Nibbles, u32) {
        simd::lookup_row(isa, self.buckets(), est)
    }
}

/// The quantizer for one tensor. Cheap to share across threads.
pub struct PanelEncoder {
    family: Family,
    k: usize,
    geometry: PanelGeometry,
    codebook: Arc<Codebook>,
    cb_factor: f64,
    stored_bits: [u16; LEVELS],
    cb_scale: f32,
    hadamard: HadamardRotation,
    orth: Option<Arc<OrthogonalRotation>>,
    filter_bound: f64,
    table: DecisionTable,
    decoder: Decoder,
    fallbacks: AtomicU64,
    /// Input scales `2^e_j` per column (`k` values), when set
    /// ([`PanelEncoder::with_input_exponents`]).
    input_scale: Option<Vec<f32>>,
    isa: EncodeIsa,
    hquant: HadamardQuant,
    /// GPTQ gains (Hadamard family, [`PanelEncoder::with_gptq`]).
    gptq: Option<Arc<Gptq>>,
}

impl std::fmt::Debug for PanelEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelEncoder")
            .field("family", &self.family)
            .field("n", &self.geometry.n())
            .field("k", &self.k)
            .field("kp", &self.geometry.k())
            .field("codebook_d", &self.codebook.d)
            .field("cb_factor", &self.cb_factor)
            .field("cb_scale", &self.cb_scale)
            .field("filter_bound", &self.filter_bound)
            .field("exact_fallbacks", &self.exact_fallbacks())
            .field("isa", &self.isa)
            .finish_non_exhaustive()
    }
}

// A panel's columns are whole column quads of one 128-column group.
const _: () = assert!(GROUP_SIZE.is_multiple_of(NR) && NR.is_multiple_of(4));

/// Group `g`'s indices of lane `l` of a batch, for channel `c` of a
/// super-block's panel (FORMAT.md §CQ4.9: two nibbles per byte, four
/// columns per channel per 128-byte block).
#[inline]
fn put_group(panel: &mut [u8], g: usize, c: usize, idx: &BatchIdx, l: usize) {
    for (kg, q) in idx.chunks_exact(4).enumerate() {
        let byte = (g * (GROUP_SIZE / 4) + kg) * 128 + 2 * c;
        panel[byte] = q[0][l] | (q[1][l] << 4);
        panel[byte + 1] = q[2][l] | (q[3][l] << 4);
    }
}

/// The fp16 bits of `2^e` for `-14 <= e <= 15` (a normal fp16).
fn pow2_f16_bits(e: i32) -> u16 {
    debug_assert!((-14..=15).contains(&e));
    ((e + 15) as u16) << 10
}

/// Norm of `v` (sequential sum of squares, sqrt, clamped to [`NORM_FLOOR`]).
#[inline]
fn clamped_norm(v: &[f64]) -> f64 {
    let mut ss = 0.0f64;
    for &x in v {
        ss += x * x;
    }
    ss.sqrt().max(NORM_FLOOR)
}

/// `u = x / norm` rounded to the 2^-28 grid.
#[inline(always)]
fn fixed(x: f64, norm: f64) -> f64 {
    (x / norm + FIXED_MAGIC) - FIXED_MAGIC
}

impl PanelEncoder {
    /// The rotation family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The panel geometry: `n = N`, `k = Kp`, `gs = 128`.
    pub fn geometry(&self) -> PanelGeometry {
        self.geometry
    }

    /// Unpadded input columns `K` (row length expected by the encoder).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Padded input columns `Kp` (a multiple of 128; the file's `dims[1]`).
    pub fn kp(&self) -> usize {
        self.geometry.k()
    }

    /// The canonical (unscaled) codebook used for index decisions.
    pub fn codebook(&self) -> &Codebook {
        &self.codebook
    }

    /// `cb_factor`: stored norms are `fp16(norm * cb_factor)` and the stored
    /// codebook is `fp16(c / cb_factor)` (Hadamard: `max|c| / 127`; orthogonal: 1).
    pub fn cb_factor(&self) -> f64 {
        self.cb_factor
    }

    /// The stored codebook (fp16 bits), as written to the scales blob.
    pub fn stored_codebook(&self) -> [u16; LEVELS] {
        self.stored_bits
    }

    /// `cb_scale = max(max|stored cb| / 127, 1e-10)` in f32.
    pub fn cb_scale(&self) -> f32 {
        self.cb_scale
    }

    /// The int8 codebook the kernels use.
    pub fn cb_i8(&self) -> [i8; LEVELS] {
        let mut s = [0f32; LEVELS];
        for (d, &b) in s.iter_mut().zip(&self.stored_bits) {
            *d = f16_bits_to_f32(b);
        }
        codebook_i8(&s, self.cb_scale)
    }

    /// Diagnostics: how many orthogonal-family coordinates so far were
    /// decided by the exact f64 sum because the f32 estimate was within the
    /// error bound of a midpoint (the bytes are the same either way).
    pub fn exact_fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// The tier of the orthogonal family's f32 filter tile (default:
    /// [`EncodeIsa::best`]). The bytes do not depend on it.
    pub fn isa(&self) -> EncodeIsa {
        self.isa
    }

    /// This encoder with the filter tile on `isa`, or `None` if this CPU
    /// cannot run that tier (for tier tests and benchmarks).
    pub fn with_isa(mut self, isa: EncodeIsa) -> Option<Self> {
        isa.supported().then(|| {
            self.isa = isa;
            self
        })
    }

    /// The filter's proven bound on |f32 estimate - exact rotated value|.
    pub fn filter_bound(&self) -> f64 {
        self.filter_bound
    }

    /// The orthogonal rotation (orthogonal family only).
    pub fn orthogonal(&self) -> Option<&OrthogonalRotation> {
        self.orth.as_deref()
    }

    /// The container header for this tensor (`scales_bytes` from the layout).
    pub fn header(&self) -> Header {
        Header::panels(&self.geometry, self.family)
    }

    /// Validate a chunk and return its row count.
    fn check_chunk(
        &self,
        first_row: usize,
        rows_len: usize,
        panels_len: usize,
        norms_len: Option<usize>,
    ) -> Result<usize, Cq4Error> {
        let g = &self.geometry;
        let n = g.n();
        if !first_row.is_multiple_of(SUPER_BLOCK) || first_row >= n {
            return Err(Cq4Error::BadChunk {
                first_row,
                rows: rows_len / self.k.max(1),
                n,
            });
        }
        if !rows_len.is_multiple_of(self.k) || rows_len == 0 {
            return Err(Cq4Error::BufferLength {
                what: "rows (a whole number of rows of K values)",
                expected: self.k,
                got: rows_len,
            });
        }
        let nrows = rows_len / self.k;
        let end = first_row.checked_add(nrows).ok_or(Cq4Error::BadChunk {
            first_row,
            rows: nrows,
            n,
        })?;
        if end > n || (!nrows.is_multiple_of(SUPER_BLOCK) && end != n) {
            return Err(Cq4Error::BadChunk {
                first_row,
                rows: nrows,
                n,
            });
        }
        let nsb = nrows.div_ceil(SUPER_BLOCK);
        let want = nsb * g.superblock_bytes();
        if panels_len != want {
            return Err(Cq4Error::BufferLength {
                what: "panels_out",
                expected: want,
                got: panels_len,
            });
        }
        if let Some(len) = norms_len {
            let want = nrows * g.num_groups();
            if len != want {
                return Err(Cq4Error::BufferLength {
                    what: "norms",
                    expected: want,
                    got: len,
                });
            }
        }
        Ok(nrows)
    }

    /// Quantize rows `first_row..first_row + rows.len() / K` (row-major f32,
    /// `K` unpadded values per row). `first_row` must be a multiple of 64 and
    /// the chunk must be whole super-blocks, except that the last chunk of the
    /// tensor ends at `N`. Writes the chunk's panels (`ceil(rows/64)`
    /// super-blocks; padded rows are nibble 0) and its stored norms
    /// (`rows x num_groups` fp16 bits). Super-blocks are processed in
    /// parallel; the bytes do not depend on the thread count. On error the
    /// output buffers hold unspecified bytes; the reported error is the one
    /// of the lowest failing row.
    pub fn encode_superblocks(
        &self,
        first_row: usize,
        rows: &[f32],
        panels_out: &mut [u8],
        norms_out: &mut [u16],
    ) -> Result<(), Cq4Error> {
        self.encode_with(
            first_row,
            rows,
            None::<&fn(&[f32], &mut Vec<f32>)>,
            panels_out,
            norms_out,
        )
    }

    /// [`PanelEncoder::encode_superblocks`] of the rows that `map` makes of
    /// `rows`: `map(src, out)` appends to `out` one value per value of `src`
    /// (e.g. an engine's affine transform of the source values). The same
    /// bytes as mapping every row first and encoding the result, errors
    /// included. Each super-block's rows are mapped as they are encoded, in
    /// cache: the mapped chunk never exists in memory whole. A `map` that
    /// appends a different number of values is an error
    /// ([`Cq4Error::BufferLength`]).
    pub fn encode_superblocks_mapped(
        &self,
        first_row: usize,
        rows: &[f32],
        map: impl Fn(&[f32], &mut Vec<f32>) + Sync,
        panels_out: &mut [u8],
        norms_out: &mut [u16],
    ) -> Result<(), Cq4Error> {
        self.encode_with(first_row, rows, Some(&map), panels_out, norms_out)
    }

    fn encode_with<M: Fn(&[f32], &mut Vec<f32>) + Sync>(
        &self,
        first_row: usize,
        rows: &[f32],
        map: Option<&M>,
        panels_out: &mut [u8],
        norms_out: &mut [u16],
    ) -> Result<(), Cq4Error> {
        let nrows = self.check_chunk(
            first_row,
            rows.len(),
            panels_out.len(),
            Some(norms_out.len()),
        )?;
        let k = self.k;
        let ng = self.geometry.num_groups();
        let sbb = self.geometry.superblock_bytes();
        let results: Vec<Result<(), Cq4Error>> =
            rows.par_chunks(SUPER_BLOCK * k)
                .zip(panels_out.par_chunks_mut(sbb))
                .zip(norms_out.par_chunks_mut(SUPER_BLOCK * ng))
                .enumerate()
                .map_init(
                    Scratch::default,
                    |scratch, (s, ((sb_rows, panel), norms))| {
                        let row0 = first_row + s * SUPER_BLOCK;
                        let cnt = sb_rows.len() / k;
                        let mut scaled = std::mem::take(&mut scratch.scaled);
                        // The map first, then the input scales (each
                        // rounded to f32, as if done in that order before).
                        let sb_rows = match (map, &self.input_scale) {
                            (Some(m), scales) => {
                                scaled.clear();
                                m(sb_rows, &mut scaled);
                                if scaled.len() != sb_rows.len() {
                                    return Err(Cq4Error::BufferLength {
                                        what: "mapped rows",
                                        expected: sb_rows.len(),
                                        got: scaled.len(),
                                    });
                                }
                                if let Some(sc) = scales {
                                    for row in scaled.chunks_exact_mut(k) {
                                        row.iter_mut().zip(sc).for_each(|(x, &s)| *x *= s);
                                    }
                                }
                                &scaled[..]
                            }
                            (None, Some(sc)) => {
                                scaled.clear();
                                for row in sb_rows.chunks_exact(k) {
                                    scaled.extend(row.iter().zip(sc).map(|(&x, &s)| x * s));
                                }
                                &scaled[..]
                            }
                            (None, None) => sb_rows,
                        };
                        debug_assert!(cnt <= nrows);
                        panel.fill(0);
                        let r = match (self.family, &self.gptq) {
                            (Family::Hadamard, Some(gq)) => {
                                self.hadamard_superblock_gptq(gq, row0, sb_rows, cnt, panel, norms)
                            }
                            (Family::Hadamard, None) => {
                                self.hadamard_superblock(row0, sb_rows, cnt, panel, norms)
                            }
                            (Family::Orthogonal, _) => self
                                .orthogonal_superblock(scratch, row0, sb_rows, cnt, panel, norms),
                        };
                        scratch.scaled = scaled;
                        r
                    },
                )
                .collect();
        results.into_iter().collect()
    }

    fn check_finite(&self, row: usize, values: &[f32]) -> Result<(), Cq4Error> {
        // A branch-free scan first (vectorized), the position only on error.
        if simd::all_finite(self.isa, values) {
            return Ok(());
        }
        match values.iter().position(|x| !x.is_finite()) {
            Some(col) => Err(Cq4Error::NonFinite { row, col }),
            None => Ok(()),
        }
    }

    fn stored_norm(&self, row: usize, group: usize, norm: f64) -> Result<u16, Cq4Error> {
        let bits = f64_to_f16_bits(norm * self.cb_factor);
        if bits & 0x7FFF >= 0x7C00 {
            return Err(Cq4Error::NormOverflow { row, group, norm });
        }
        Ok(bits)
    }

    /// Hadamard family: the (row, group) items of the super-block in order,
    /// [`LANES`] at a time through the batch quantizer (§CQ4.7.1 per lane).
    /// Errors are reported in item order (a row's non-finite value before
    /// its groups' norms), as a row-by-row loop would.
    fn hadamard_superblock(
        &self,
        row0: usize,
        rows: &[f32],
        cnt: usize,
        panel: &mut [u8],
        norms: &mut [u16],
    ) -> Result<(), Cq4Error> {
        let k = self.k;
        let ng = self.geometry.num_groups();
        let items = cnt * ng;
        let mut x: Batch = [[0.0; LANES]; HADAMARD_N];
        let mut idx: BatchIdx = [[0; LANES]; HADAMARD_N];
        for it0 in (0..items).step_by(LANES) {
            let m = (items - it0).min(LANES);
            // Missing items of the last batch are zero groups (dropped).
            let src: [&[f32]; LANES] = std::array::from_fn(|l| {
                if l < m {
                    let (c, g) = ((it0 + l) / ng, (it0 + l) % ng);
                    let lo = c * k + g * HADAMARD_N;
                    &rows[lo..c * k + ((g + 1) * HADAMARD_N).min(k)]
                } else {
                    &[]
                }
            });
            simd::gather_batch(self.isa, src, &mut x);
            let norm = simd::hadamard_batch(self.isa, &self.hquant, &mut x, &mut idx);
            for (l, &nu) in norm.iter().enumerate().take(m) {
                let (c, g) = ((it0 + l) / ng, (it0 + l) % ng);
                if g == 0 {
                    self.check_finite(row0 + c, &rows[c * k..(c + 1) * k])?;
                }
                put_group(panel, g, c, &idx, l);
                norms[c * ng + g] = self.stored_norm(row0 + c, g, nu)?;
            }
        }
        Ok(())
    }

    /// Hadamard family with GPTQ (§CQ4.18): the super-block's rows as f64
    /// working rows; group by group, the rows' items through the batch
    /// quantizer ([`LANES`] rows at a time, each exactly §7.1/§7.3 on the
    /// working values), then each row's reconstruction with the stored
    /// norm and the int8 codebook, and its error carried into the row's
    /// later columns. Errors: the lowest row's first.
    fn hadamard_superblock_gptq(
        &self,
        gq: &Gptq,
        row0: usize,
        rows: &[f32],
        cnt: usize,
        panel: &mut [u8],
        norms: &mut [u16],
    ) -> Result<(), Cq4Error> {
        let (k, kp) = (self.k, self.kp());
        let ng = self.geometry.num_groups();
        for c in 0..cnt {
            self.check_finite(row0 + c, &rows[c * k..(c + 1) * k])?;
        }
        let mut work = vec![0.0f64; cnt * kp];
        for (w, r) in work.chunks_exact_mut(kp).zip(rows.chunks_exact(k)) {
            for (d, &x) in w.iter_mut().zip(r) {
                *d = x as f64;
            }
        }
        let cbi8 = self.cb_i8();
        let mut failed: Option<(usize, Cq4Error)> = None;
        let mut x: Batch = [[0.0; LANES]; HADAMARD_N];
        let mut idx: BatchIdx = [[0; LANES]; HADAMARD_N];
        for g in 0..ng {
            let lo = g * HADAMARD_N;
            for c0 in (0..cnt).step_by(LANES) {
                let m = (cnt - c0).min(LANES);
                for l in 0..LANES {
                    for (i, v) in x.iter_mut().enumerate() {
                        v[l] = if l < m {
                            work[(c0 + l) * kp + lo + i]
                        } else {
                            0.0
                        };
                    }
                }
                let norm = simd::hadamard_batch(self.isa, &self.hquant, &mut x, &mut idx);
                for l in 0..m {
                    let c = c0 + l;
                    put_group(panel, g, c, &idx, l);
                    let bits = match self.stored_norm(row0 + c, g, norm[l]) {
                        Ok(b) => b,
                        Err(e) => {
                            if failed.as_ref().is_none_or(|(r, _)| c < *r) {
                                failed = Some((c, e));
                            }
                            0
                        }
                    };
                    norms[c * ng + g] = bits;
                    if g + 1 == ng {
                        continue;
                    }
                    let mut q = [0u8; HADAMARD_N];
                    for (d, s) in q.iter_mut().zip(idx.iter()) {
                        *d = s[l];
                    }
                    let rec = self.reconstruct(&cbi8, &q, bits);
                    let row = &mut work[c * kp..(c + 1) * kp];
                    let (head, rest) = row.split_at_mut(lo + HADAMARD_N);
                    let mut err = [0.0f64; HADAMARD_N];
                    for ((e, &v), &r) in err.iter_mut().zip(&head[lo..]).zip(&rec) {
                        *e = v - r;
                    }
                    gq.update(g, &err, rest);
                }
            }
        }
        match failed {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// One Hadamard group as the kernels compute it (§CQ4.18 step 6): the
    /// int8 codebook (`cb_scale` is 1 for this family) through the inverse
    /// rotation, times the stored norm, in the scaled coordinates.
    fn reconstruct(
        &self,
        cbi8: &[i8; LEVELS],
        q: &[u8; HADAMARD_N],
        nrm_bits: u16,
    ) -> [f64; HADAMARD_N] {
        let y: [f64; HADAMARD_N] = std::array::from_fn(|j| cbi8[q[j] as usize] as f64);
        unrotate_group(&self.hadamard, &y, f16_bits_to_f64(nrm_bits))
    }

    /// Orthogonal family. For each row: `norm` over all `Kp` values, `uf` on
    /// the 2^-28 grid, `rotated_j = sum_k uf_k * R[k][j]` (exact in f64, see the
    /// contract). Implementation: an f32 estimate (products and sums in f32
    /// within blocks of `KB` columns, blocks summed in f64) whose distance to
    /// the exact value is provably below `filter_bound`; when a midpoint lies
    /// within that distance the exact f64 sum decides.
    fn orthogonal_superblock(
        &self,
        scratch: &mut Scratch,
        row0: usize,
        rows: &[f32],
        cnt: usize,
        panel: &mut [u8],
        norms: &mut [u16],
    ) -> Result<(), Cq4Error> {
        let Some(rot) = self.orth.as_deref() else {
            return Err(Cq4Error::BadRotation(
                "orthogonal encoder without a rotation",
            ));
        };
        let k = self.k;
        let kp = self.kp();
        let ng = self.geometry.num_groups();
        let mid = &self.codebook.midpoints;
        let nrb = cnt.div_ceil(MR);
        // The filter's input: uf of MR rows as f32, packed [rb][k][MR],
        // every entry written (padding columns and missing rows 0), so the
        // buffer is only grown, never cleared. The exact path of a rare
        // fallback recomputes its row's uf (the same `fixed` of the same
        // values) from `rows` and `norm`.
        let Scratch {
            norm,
            apack,
            uf,
            uf_made,
            ..
        } = scratch;
        uf_made.clear();
        uf_made.resize(cnt, false);
        if uf.len() < cnt * k {
            uf.resize(cnt * k, 0.0);
        }
        norm.clear();
        norm.resize(cnt, 0.0);
        if apack.len() < nrb * kp {
            apack.resize(nrb * kp, [0.0f32; MR]);
        }
        for rb in 0..nrb {
            let c0 = rb * MR;
            let m = (cnt - c0).min(MR);
            // Norms of the MR rows together: each row's sum of squares is
            // sequential as the contract says; the MR independent chains
            // overlap (a missing last row repeats the first, then is dropped).
            let rr: [&[f32]; MR] =
                std::array::from_fn(|r| &rows[(c0 + r % m) * k..(c0 + r % m + 1) * k]);
            let ss = simd::sum_squares(self.isa, &rr);
            let mut nr = [1.0f64; MR];
            for r in 0..m {
                let c = c0 + r;
                // Row order of errors: this row's values, then its norm.
                self.check_finite(row0 + c, rr[r])?;
                nr[r] = ss[r].sqrt().max(NORM_FLOOR);
                norm[c] = nr[r];
                let bits = self.stored_norm(row0 + c, 0, nr[r])?;
                norms[c * ng..(c + 1) * ng].fill(bits);
            }
            let ap = &mut apack[rb * kp..(rb + 1) * kp];
            let (head, pad) = ap.split_at_mut(k);
            simd::pack_fixed(self.isa, &rr, &nr, head);
            if m < MR {
                // Missing rows (they repeat a row above): 0.
                head.iter_mut().for_each(|a| a[m..].fill(0.0));
            }
            // Padding columns are 0 (= fixed(0, norm)).
            pad.fill([0.0f32; MR]);
        }
        let e = self.filter_bound;
        let padded = codebook::padded_thresholds(mid);
        let mut fallbacks = 0u64;
        let (bpanels, _) = rot.packed.as_slice().as_chunks::<NR>();
        let panels: Vec<&[simd::BRow]> = bpanels.chunks_exact(kp).collect();
        // The decisions of tile `rb` (its MR rows) against panel `p`.
        let mut decide = |rb: usize, p: usize, acc: &simd::Tile| {
            // The panel's NR columns are NR / 4 column quads of one group.
            let j0 = p * NR;
            let quad0 = (j0 / GROUP_SIZE) * (GROUP_SIZE / 4) + (j0 % GROUP_SIZE) / 4;
            for (r, accr) in acc.iter().enumerate() {
                let c = rb * MR + r;
                if c >= cnt {
                    break;
                }
                let (mut nib, mut unsure) = self.table.lookup_row(self.isa, accr);
                while unsure != 0 {
                    let q = unsure.trailing_zeros() as usize;
                    unsure &= unsure - 1;
                    let (i, sure) = filter_decision(&padded, accr[q], e);
                    let i = if sure {
                        i
                    } else {
                        fallbacks += 1;
                        let j = j0 + q;
                        let ufc = &mut uf[c * k..(c + 1) * k];
                        if !uf_made[c] {
                            simd::fixed_row(self.isa, &rows[c * k..(c + 1) * k], norm[c], ufc);
                            uf_made[c] = true;
                        }
                        index_of(
                            mid,
                            simd::exact_dot(self.isa, ufc, &rot.rt32[j * kp..j * kp + k]),
                        )
                    };
                    simd::set_nibble(&mut nib, q, i);
                }
                for (t, pair) in nib.chunks_exact(2).enumerate() {
                    let byte = (quad0 + t) * 128 + 2 * c;
                    panel[byte..byte + 2].copy_from_slice(pair);
                }
            }
        };
        // Panels outermost: a pass's panels are read from L2 or L3 once
        // per super-block and stay near while every row group of the
        // super-block (its `uf`, 160 KB at Kp = 640, in L2) runs against
        // them. (Row groups outermost streamed all of R, 1.6 MB at Kp = 640,
        // once per row group: from L3 on a core with a 1.25 MB L2.)
        let (tn, pn) = simd::grid_shape(self.isa);
        for p0 in (0..panels.len()).step_by(pn) {
            let pc = pn.min(panels.len() - p0);
            for rb0 in (0..nrb).step_by(tn) {
                let tc = tn.min(nrb - rb0);
                let pass = GridPass {
                    isa: self.isa,
                    apack,
                    kp,
                    rb0,
                    panels: &panels[p0..p0 + pc],
                    p0,
                };
                pass.run(tc, &mut decide);
            }
        }
        self.fallbacks.fetch_add(fallbacks, Ordering::Relaxed);
        Ok(())
    }

    /// The exact orthogonal-family rotated coordinates of one row (for tests
    /// and the reference path): `uf @ R` summed sequentially over `k` in f64.
    pub fn orthogonal_reference_indices(&self, row: &[f32]) -> Result<Vec<u8>, Cq4Error> {
        let rot = self
            .orth
            .as_deref()
            .ok_or(Cq4Error::BadRotation("not an orthogonal encoder"))?;
        if row.len() != self.k {
            return Err(Cq4Error::BufferLength {
                what: "row",
                expected: self.k,
                got: row.len(),
            });
        }
        let kp = self.kp();
        let mut v = vec![0.0f64; kp];
        for (d, &x) in v.iter_mut().zip(row) {
            *d = x as f64;
        }
        let norm = clamped_norm(&v);
        let uf: Vec<f64> = v.iter().map(|&x| fixed(x, norm)).collect();
        Ok((0..kp)
            .map(|j| {
                index_of(
                    &self.codebook.midpoints,
                    exact_dot(&uf, &rot.rt32[j * kp..(j + 1) * kp]),
                )
            })
            .collect())
    }

    /// Quantize column `j` as `W[., j] * 2^exps[j]` and store the input
    /// scales `2^exps[j]` and their reciprocals (FORMAT.md §CQ4.16; the
    /// exponents of an importance matrix come from [`crate::awq`]). `exps`
    /// has `K` entries in `-MAX_EXPONENT..=MAX_EXPONENT`; padded columns keep
    /// scale 1. All zeros gives the bytes of an encoder without scales.
    pub fn with_input_exponents(mut self, exps: &[i8]) -> Result<Self, Cq4Error> {
        if exps.len() != self.k {
            return Err(Cq4Error::BufferLength {
                what: "input exponents",
                expected: self.k,
                got: exps.len(),
            });
        }
        if let Some(&e) = exps.iter().find(|e| e.abs() > crate::awq::MAX_EXPONENT) {
            return Err(Cq4Error::InputExponent { e });
        }
        let scale: Vec<f32> = exps.iter().map(|&e| (e as f32).exp2()).collect();
        for (d, &s) in self.decoder.input_scale.iter_mut().zip(&scale) {
            *d = s as f64;
        }
        self.input_scale = exps.iter().any(|&e| e != 0).then_some(scale);
        Ok(self)
    }

    /// The `Kp` input exponents stored in the file (0 where no scale is set
    /// and for padded columns).
    pub fn input_exponents(&self) -> Vec<i8> {
        let mut e = vec![0i8; self.kp()];
        if let Some(sc) = &self.input_scale {
            for (d, &s) in e.iter_mut().zip(sc) {
                // `s = 2^e` exactly, |e| <= 3: its biased f32 exponent minus 127.
                *d = (((s.to_bits() >> 23) & 0xFF) as i32 - 127) as i8;
            }
        }
        e
    }

    /// This encoder with GPTQ (FORMAT.md §CQ4.18; Hadamard family only):
    /// each row's groups are quantized in order and each group's error is
    /// compensated in the row's later columns with `gptq`'s gains, which
    /// must have been made for this tensor's `K` and the exponents of
    /// [`Self::with_input_exponents`] (set those first).
    pub fn with_gptq(mut self, gptq: Arc<Gptq>) -> Result<Self, Cq4Error> {
        if self.family != Family::Hadamard {
            return Err(Cq4Error::BadRotation(
                "GPTQ is defined for the Hadamard family only",
            ));
        }
        if gptq.kp() != self.kp() {
            return Err(Cq4Error::BufferLength {
                what: "GPTQ gains (Kp columns)",
                expected: self.kp(),
                got: gptq.kp(),
            });
        }
        self.gptq = Some(gptq);
        Ok(self)
    }

    /// Whether GPTQ is on.
    pub fn has_gptq(&self) -> bool {
        self.gptq.is_some()
    }

    /// The whole `N x K` tensor (row-major f32) in one call: its panels and
    /// its `N x num_groups` stored norms, exactly what
    /// [`Self::encode_superblocks`] writes for one chunk of every row. For
    /// tensors that fit in memory twice; writers stream chunks instead.
    pub fn encode_tensor(&self, w: &[f32]) -> Result<(Vec<u8>, Vec<u16>), Cq4Error> {
        let g = &self.geometry;
        let mut panels = vec![0u8; g.data_bytes()];
        let mut norms = vec![0u16; g.n() * g.num_groups()];
        self.encode_superblocks(0, w, &mut panels, &mut norms)?;
        Ok((panels, norms))
    }

    /// The scales blob for the whole tensor, given all `N x num_groups`
    /// stored norms (the concatenation of every chunk's `norms_out`).
    pub fn scales_blob(&self, norms: &[u16]) -> Result<Vec<u8>, Cq4Error> {
        let g = &self.geometry;
        let ng = g.num_groups();
        if norms.len() != g.n() * ng {
            return Err(Cq4Error::BufferLength {
                what: "norms",
                expected: g.n() * ng,
                got: norms.len(),
            });
        }
        let layout = g.scales_layout(self.family);
        let mut out = Vec::with_capacity(layout.scales_bytes);
        for b in self.stored_bits {
            out.extend_from_slice(&b.to_le_bytes());
        }
        // input_scale = 2^e (1.0 without input scales), recip =
        // fp16(min(1 / max(2^e, 1e-8), 65504)) = 2^-e: both exact.
        let exps = self.input_exponents();
        for e in exps
            .iter()
            .map(|&e| e as i32)
            .chain(exps.iter().map(|&e| -(e as i32)))
        {
            out.extend_from_slice(&pow2_f16_bits(e).to_le_bytes());
        }
        for &b in norms {
            out.extend_from_slice(&b.to_le_bytes());
        }
        out.resize(out.len() + layout.pad.len, 0);
        for sb in 0..g.sb64() {
            for grp in 0..ng {
                for c in 0..SUPER_BLOCK {
                    let n = sb * SUPER_BLOCK + c;
                    let f = if n < g.n() {
                        f16_bits_to_f32(norms[n * ng + grp]) * self.cb_scale
                    } else {
                        0.0
                    };
                    out.extend_from_slice(&f.to_le_bytes());
                }
            }
        }
        match &self.orth {
            None => {
                out.extend(self.hadamard.left.iter().map(|&s| s as u8));
                out.extend(self.hadamard.right.iter().map(|&s| s as u8));
                for p in self.hadamard.perm {
                    out.extend_from_slice(&p.to_le_bytes());
                }
            }
            Some(rot) => {
                for &b in rot.r_bits() {
                    out.extend_from_slice(&b.to_le_bytes());
                }
                for b in rot.rt_bits() {
                    out.extend_from_slice(&b.to_le_bytes());
                }
            }
        }
        if out.len() != layout.scales_bytes {
            return Err(Cq4Error::BufferLength {
                what: "scales blob (internal)",
                expected: layout.scales_bytes,
                got: out.len(),
            });
        }
        Ok(out)
    }

    /// Dequantize a chunk the encoder produced (same chunk rules as
    /// [`Self::encode_superblocks`]): `out` is `rows x Kp` f32. This is the
    /// very function `PanelTensorView::dequantize_rows` runs on a
    /// parsed file.
    pub fn dequantize_superblocks(
        &self,
        first_row: usize,
        panels: &[u8],
        norms: &[u16],
        out: &mut [f32],
    ) -> Result<(), Cq4Error> {
        let kp = self.kp();
        if !out.len().is_multiple_of(kp) {
            return Err(Cq4Error::BufferLength {
                what: "out (rows x Kp)",
                expected: kp,
                got: out.len(),
            });
        }
        let nrows = out.len() / kp;
        // Reuse the chunk validation with the unpadded row length.
        self.check_chunk(first_row, nrows * self.k, panels.len(), Some(norms.len()))?;
        decode_rows(&self.decoder, panels, norms, nrows, out);
        Ok(())
    }
}

/// One [`simd::grid`] pass's operands: the tiles from `rb0` of `apack`
/// (`kp` packed values each) against `panels`, the panels from `p0`.
struct GridPass<'a> {
    isa: EncodeIsa,
    apack: &'a [APack],
    kp: usize,
    rb0: usize,
    panels: &'a [&'a [simd::BRow]],
    p0: usize,
}

impl GridPass<'_> {
    /// `tc` tiles against the panels in one pass, each result handed to
    /// `decide` with its tile and panel. `tc` and `panels.len()` are at
    /// most 4 and 3.
    fn run(&self, tc: usize, decide: &mut impl FnMut(usize, usize, &simd::Tile)) {
        assert!((1..=4).contains(&tc) && (1..=3).contains(&self.panels.len()));
        match tc {
            4 => self.by_panels::<4>(decide),
            3 => self.by_panels::<3>(decide),
            2 => self.by_panels::<2>(decide),
            _ => self.by_panels::<1>(decide),
        }
    }

    fn by_panels<const T: usize>(&self, decide: &mut impl FnMut(usize, usize, &simd::Tile)) {
        match self.panels.len() {
            3 => self.fixed::<T, 3>(decide),
            2 => self.fixed::<T, 2>(decide),
            _ => self.fixed::<T, 1>(decide),
        }
    }

    fn fixed<const T: usize, const P: usize>(
        &self,
        decide: &mut impl FnMut(usize, usize, &simd::Tile),
    ) {
        let (kp, rb0) = (self.kp, self.rb0);
        let a = std::array::from_fn(|t| &self.apack[(rb0 + t) * kp..(rb0 + t + 1) * kp]);
        let b = std::array::from_fn(|p| self.panels[p]);
        for (t, row) in simd::grid::<T, P>(self.isa, a, b).iter().enumerate() {
            for (p, tile) in row.iter().enumerate() {
                decide(rb0 + t, self.p0 + p, tile);
            }
        }
    }
}

/// For an estimate `est` within `e` of the exact value: its index
/// `#{i : m_i < est}`, and whether no threshold lies in `[est - e, est + e]`
/// (then the exact value has the same index).
#[inline(always)]
fn filter_decision(padded: &[f64; LEVELS + 1], est: f64, e: f64) -> (u8, bool) {
    let idx = codebook::index_bsearch(padded, est);
    let sure = padded[idx] < est - e && padded[idx + 1] > est + e;
    (idx as u8, sure)
}

/// `sum_k u[k] * r[k]` in f64 (the portable reference of
/// [`simd::exact_dot`]).
#[inline]
fn exact_dot(u: &[f64], r: &[f32]) -> f64 {
    simd::scalar_exact_dot(u, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prepare` leaves in the cache what the encoders then take (the same
    /// codebook and rotation, not new ones), and fails where the encoder
    /// fails: an orthogonal width over the limit.
    #[test]
    fn prepare_fills_the_cache_the_encoders_read() {
        let b = Bundle::new(crate::rng::DEFAULT_SEED);
        b.prepare(Family::Orthogonal, 600).unwrap();
        b.prepare(Family::Hadamard, 600).unwrap();
        assert_eq!(
            b.rotations.lock().unwrap().keys().collect::<Vec<_>>(),
            [&640]
        );
        assert_eq!(
            b.codebooks.lock().unwrap().keys().collect::<Vec<_>>(),
            [&HADAMARD_N, &640]
        );
        let cached = b.orthogonal(640).unwrap();
        let enc = b.encoder(Family::Orthogonal, 3, 600).unwrap();
        assert!(std::ptr::eq(enc.orthogonal().unwrap(), &*cached));
        let k = crate::orthogonal::MAX_ORTHOGONAL_KP + 1;
        assert!(b.prepare(Family::Orthogonal, k).is_err());
        assert!(b.encoder(Family::Orthogonal, 1, k).is_err());
        b.prepare(Family::Orthogonal, 0).unwrap();
    }

    /// Every tier's estimate is within the proven bound of the exact value
    /// (the property the filter's safety rests on), on Gaussian rows and on
    /// rows equal to a column of R (all products of one sign: the largest
    /// `sum |uf_k R[k][j]|`, where the bound is least slack).
    #[test]
    fn every_tier_estimate_is_within_the_bound() {
        use crate::rng::{fill_gaussian, SplitMix64, DEFAULT_SEED};
        for kp in [128usize, 640] {
            let rot = OrthogonalRotation::new(DEFAULT_SEED, kp).unwrap();
            let e = filter_bound(kp, rot.max_col_norm);
            let mut rows: Vec<Vec<f64>> = vec![];
            let mut g = vec![0.0f64; kp];
            for s in 0..6u64 {
                fill_gaussian(&mut SplitMix64::new(s), &mut g);
                rows.push(g.clone());
            }
            for j in [0usize, 1, kp / 2, kp - 1] {
                rows.push(
                    rot.rt32[j * kp..(j + 1) * kp]
                        .iter()
                        .map(|&x| x as f64)
                        .collect(),
                );
                rows.push(
                    rot.rt32[j * kp..(j + 1) * kp]
                        .iter()
                        .map(|&x| x.abs() as f64)
                        .collect(),
                );
            }
            let ufs: Vec<Vec<f64>> = rows
                .iter()
                .map(|v| {
                    let norm = clamped_norm(v);
                    v.iter().map(|&x| fixed(x, norm)).collect()
                })
                .collect();
            let (bpanels, _) = rot.packed.as_slice().as_chunks::<NR>();
            for t in simd::EncodeIsa::available() {
                let mut worst = 0.0f64;
                for rb in ufs.chunks(MR) {
                    let mut apack = vec![[0.0f32; MR]; kp];
                    for (r, uf) in rb.iter().enumerate() {
                        for (d, &x) in apack.iter_mut().zip(uf) {
                            d[r] = x as f32;
                        }
                    }
                    let panels: Vec<&[simd::BRow]> = bpanels.chunks_exact(kp).collect();
                    for (p, &bpanel) in panels.iter().enumerate() {
                        let est = simd::tile(t, &apack, bpanel);
                        let sc = simd::scalar_tile(&apack, bpanel);
                        // Tiles in one grid pass are the tiles, bit for bit
                        // (the others: the rows in other orders; the
                        // panels: this one and the next two, wrapping).
                        let perm = |o: [usize; MR]| -> Vec<APack> {
                            apack.iter().map(|x| o.map(|i| x[i])).collect()
                        };
                        let others = [perm([3, 2, 1, 0]), perm([1, 2, 3, 0]), perm([2, 0, 3, 1])];
                        let near = |d: usize| panels[(p + d) % panels.len()];
                        let singles: Vec<[simd::Tile; 3]> =
                            [&apack, &others[0], &others[1], &others[2]]
                                .iter()
                                .map(|x| [0, 1, 2].map(|d| simd::tile(t, x, near(d))))
                                .collect();
                        let bits = |x: &simd::Tile| x.map(|row| row.map(f64::to_bits));
                        let check = |name: &str, got: &simd::Tile, want: &simd::Tile| {
                            assert_eq!(bits(got), bits(want), "{t:?} kp {kp} panel {p} {name}")
                        };
                        // Four tiles of one panel (the scalar and NEON tiers' pass).
                        let four = simd::grid::<4, 1>(
                            t,
                            [&apack, &others[0], &others[1], &others[2]],
                            [bpanel],
                        );
                        for (i, want) in singles.iter().enumerate() {
                            check("4x1", &four[i][0], &want[0]);
                        }
                        // Three tiles of one panel (the AVX2 tier's pass).
                        let three =
                            simd::grid::<3, 1>(t, [&others[1], &apack, &others[0]], [bpanel]);
                        for (got, i) in three.iter().zip([2, 0, 1]) {
                            check("3x1", &got[0], &singles[i][0]);
                        }
                        // Two tiles of three panels (the AVX-512 tier's pass),
                        // and its remainders.
                        let six =
                            simd::grid::<2, 3>(t, [&others[2], &apack], [bpanel, near(1), near(2)]);
                        for (got, i) in six.iter().zip([3, 0]) {
                            for d in 0..3 {
                                check("2x3", &got[d], &singles[i][d]);
                            }
                        }
                        let two = simd::grid::<1, 2>(t, [&others[0]], [bpanel, near(1)]);
                        check("1x2", &two[0][0], &singles[1][0]);
                        check("1x2", &two[0][1], &singles[1][1]);
                        for (r, uf) in rb.iter().enumerate() {
                            for q in 0..NR {
                                let j = p * NR + q;
                                let exact = exact_dot(uf, &rot.rt32[j * kp..(j + 1) * kp]);
                                let d = (est[r][q] - exact).abs();
                                assert!(
                                    d <= e,
                                    "{t:?} kp {kp} col {j}: |{} - {exact}| > {e}",
                                    est[r][q]
                                );
                                assert!((sc[r][q] - exact).abs() <= e);
                                worst = worst.max(d / e);
                            }
                        }
                    }
                }
                eprintln!(
                    "{} kp {kp}: max |estimate - exact| = {worst:.4} E (E = {e:.3e})",
                    t.name()
                );
            }
        }
    }

    #[test]
    fn decision_table_is_sound() {
        for d in [128usize, 640, 2048] {
            let cb = codebook::lloyd_max(d).unwrap();
            let m = cb.midpoints;
            let e = 4e-6;
            let t = DecisionTable::new(&m, e);
            let known = t.table.iter().filter(|&&v| v != UNCERTAIN).count();
            assert!(known > TABLE_BUCKETS * 9 / 10, "d={d}: {known}");
            // Outside the buckets (and NaN) nothing is known.
            for x in [
                -t.range - 1e-9,
                t.range * (1.0 + 1e-12),
                1e300,
                -1e300,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
            ] {
                assert_eq!(t.lookup(x), UNCERTAIN, "d={d} x={x}");
            }
            let mut probes = vec![];
            for &x in &m {
                for k in -400..=400 {
                    probes.push(x + k as f64 * 1e-7);
                }
            }
            for i in 0..100_000 {
                probes.push((i as f64 - 50_000.0) * 1e-5);
            }
            // Every tier's row lookups are the scalar lookups, also at the
            // bucket edges, outside the buckets and for NaN.
            let mut rows = probes.clone();
            let w = 1.0 / t.inv_w;
            for b in [
                0usize,
                1,
                2,
                TABLE_BUCKETS / 2,
                TABLE_BUCKETS - 1,
                TABLE_BUCKETS,
            ] {
                let x = -t.range + b as f64 * w;
                rows.extend([x, x.next_up(), x.next_down(), x + w / 2.0]);
            }
            rows.extend([-t.range - w, -t.range - w / 2.0, t.range + w, 1e300, -1e300]);
            rows.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -0.0, 0.0]);
            while !rows.len().is_multiple_of(NR) {
                rows.push(0.0);
            }
            for isa in simd::EncodeIsa::available() {
                for row in rows.as_chunks::<NR>().0 {
                    let (nib, unsure) = t.lookup_row(isa, row);
                    for q in 0..NR {
                        let want = t.lookup(row[q]);
                        assert_eq!(unsure >> q & 1 == 1, want == UNCERTAIN);
                        if want != UNCERTAIN {
                            let got = (nib[q / 2] >> (4 * (q % 2))) & 15;
                            assert_eq!(got, want, "{isa:?} d={d} x={}", row[q]);
                        }
                    }
                }
            }
            for &x in &probes {
                let i = t.lookup(x);
                if i != UNCERTAIN {
                    // Every value within e of x has index i.
                    assert_eq!(index_of(&m, x - e), i, "d={d} x={x}");
                    assert_eq!(index_of(&m, x + e), i, "d={d} x={x}");
                    assert_eq!(index_of(&m, x), i, "d={d} x={x}");
                }
            }
        }
    }

    #[test]
    fn filter_decision_agrees_with_index_rule() {
        let cb = codebook::lloyd_max(640).unwrap();
        let m = cb.midpoints;
        let padded = codebook::padded_thresholds(&m);
        let mut probes = vec![-1.0, 1.0, 0.0, -0.0];
        for &t in &m {
            probes.extend([
                t,
                t.next_up(),
                t.next_down(),
                t + 2e-6,
                t - 2e-6,
                t + 5e-7,
                t - 5e-7,
            ]);
        }
        for i in 0..2000 {
            probes.push((i as f64 - 1000.0) * 2e-4);
        }
        let e = 1e-6;
        for &x in &probes {
            let (idx, sure) = filter_decision(&padded, x, e);
            assert_eq!(idx, index_of(&m, x), "{x}");
            let dist = m.iter().fold(f64::INFINITY, |d, &t| d.min((t - x).abs()));
            if dist < 0.99 * e {
                assert!(!sure, "{x}");
            }
            if dist > 1.01 * e {
                assert!(sure, "{x}");
            }
            if sure {
                // Every value within e has the same index.
                assert_eq!(index_of(&m, x - e), idx);
                assert_eq!(index_of(&m, x + e), idx);
            }
        }
    }

    /// Every tier's exact dot product of a row's `uf` with a column of R
    /// is the sequential f64 sum the contract defines, bit for bit: Gaussian,
    /// sparse and one-sign rows against every column of a 640-wide R, and
    /// lengths that leave tails.
    #[test]
    fn every_tier_exact_dot_is_the_sequential_sum() {
        let kp = 640;
        let rot = OrthogonalRotation::new(crate::rng::DEFAULT_SEED, kp).unwrap();
        let mut g = vec![0.0f64; kp];
        let mut rows: Vec<Vec<f32>> = vec![];
        for s in 0..3u64 {
            crate::rng::fill_gaussian(&mut crate::rng::SplitMix64::new(s), &mut g);
            rows.push(g.iter().map(|&x| x as f32).collect());
        }
        rows.push(rows[0].iter().map(|x| x.abs()).collect());
        rows.push(
            (0..kp)
                .map(|i| if i % 37 == 0 { 1.0 } else { 0.0 })
                .collect(),
        );
        for isa in simd::EncodeIsa::available() {
            for x in &rows {
                for len in [kp, 637, 17, 3] {
                    let x = &x[..len];
                    let n = x
                        .iter()
                        .map(|&v| (v as f64) * (v as f64))
                        .sum::<f64>()
                        .sqrt();
                    let mut uf = vec![0.0f64; len];
                    simd::scalar_fixed_row(x, n, &mut uf);
                    for j in 0..kp {
                        let r = &rot.rt32[j * kp..j * kp + len];
                        let mut seq = 0.0f64;
                        for (&a, &b) in uf.iter().zip(r) {
                            seq += a * b as f64;
                        }
                        let got = simd::exact_dot(isa, &uf, r);
                        assert_eq!(got.to_bits(), seq.to_bits(), "{isa:?} len {len} column {j}");
                    }
                }
            }
        }
    }
}
