//! The Hadamard family's quantizer (FORMAT.md §CQ4.7.1) on [`LANES`]
//! groups at once: lane `l` of every `[f64; LANES]` belongs to one
//! (row, group) item, so every step of the contract (the sequential sum of
//! squares included) runs per lane in exactly its documented order while
//! the lanes fill a vector register. Portable code: the `simd` module
//! compiles the same body again with AVX2 enabled (Rust never contracts
//! `a * b + c` into an FMA or reassociates, so the values are the same).
//!
//! The indices come from the norm search (§CQ4.7.3) alone: its candidate
//! `g = 1` compares with `m_i * 1 = m_i`, i.e. it is §7.1's rule, so §7.1
//! is not computed separately.

use crate::codebook::LEVELS;
use crate::hadamard::{sqrt128, HadamardRotation, FIXED_MAGIC, HADAMARD_N};

/// Items per batch (f64 lanes of one AVX2 register).
pub(crate) const LANES: usize = 4;

/// A batch: `x[i][l]` = value `i` of item `l`'s group, as f64.
pub(crate) type Batch = [[f64; LANES]; HADAMARD_N];

/// The batch's indices: `idx[j][l]` for column `j` of item `l`.
pub(crate) type BatchIdx = [[u8; LANES]; HADAMARD_N];

/// Per-encoder constants of the batch quantizer.
#[derive(Debug, Clone)]
pub(crate) struct HadamardQuant {
    left: [f64; HADAMARD_N],
    /// For output column `j`: `perm[j]` and `right[perm[j]]`.
    pub(crate) perm: [usize; HADAMARD_N],
    pub(crate) right: [f64; HADAMARD_N],
    /// The norm search's thresholds and codebook values (§CQ4.4, §CQ4.7.3).
    search: SearchTable,
    norm_floor: f64,
}

/// Scale candidates of the norm search (§CQ4.7.3): `g_t = (16 + t) / 20`,
/// `t = 0..9`, i.e. 0.80, 0.85, ..., 1.20 (`g_4 = 1` exactly).
pub const SCALE_CANDIDATES: usize = 9;

/// `g_t` of [`SCALE_CANDIDATES`].
pub fn scale_candidate(t: usize) -> f64 {
    (16 + t) as f64 / 20.0
}

/// Candidate slots of a [`SearchTable`] row: [`SCALE_CANDIDATES`] padded
/// to a whole number of 4-lane vectors (the extra slots hold 0 and are never
/// read back).
const TW: usize = 12;
const _: () = assert!(TW >= SCALE_CANDIDATES && TW.is_multiple_of(4));

/// A [`SearchTable`] row: one value per candidate slot, as `TW / 4`
/// vectors of 4 (the layout the accumulation loop vectorizes).
pub(crate) type Row = [[f64; 4]; TW / 4];

/// The candidate with `g = 1` (§7.1's thresholds).
const PLAIN: usize = 4;
const _: () = assert!(16 + PLAIN == 20);

/// Thresholds of all candidates together.
const ALL_THRESHOLDS: usize = SCALE_CANDIDATES * (LEVELS - 1);
const _: () = assert!(ALL_THRESHOLDS < 256);

/// Buckets of [`SearchTable::position`]'s starting points.
pub(crate) const BUCKETS: usize = 4096;

/// Thresholds the vector tiers compare from a bucket's start (at least
/// [`SearchTable::steps`]: checked when a table is made).
pub(crate) const SCAN: usize = 4;

/// The norm search's lookup structure. `thr` holds the distinct values of
/// the thresholds `m_i * g_t` of every candidate (the same f64 products the
/// contract compares with), sorted, then `+inf`. A value `r` has position
/// `q = #{k : thr[k] < r}`, and for every candidate `t` its index
/// `#{i : m_i * g_t < r}` is `idx[q][t]` (a threshold is below `r` exactly
/// when its value is one of the `q` smallest), its codebook value
/// `cb[q][t]` and that value's square `cb2[q][t]` (the f64 product `c * c`
/// the contract rounds).
#[derive(Debug, Clone)]
pub(crate) struct SearchTable {
    pub(crate) thr: Vec<f64>,
    idx: Vec<[u8; SCALE_CANDIDATES]>,
    pub(crate) cb: Vec<Row>,
    pub(crate) cb2: Vec<Row>,
    /// `start[b] = #{k : thr[k] < lo_b - w}` for bucket `b = [lo_b, lo_b + w)`,
    /// `lo_b = -range + b * w`: a lower bound of the position of every value
    /// the bucket computation sends to `b` (it errs by far less than `w`).
    pub(crate) start: Vec<u8>,
    /// Scan steps from `start[b]` that reach the position of every value
    /// sent to any bucket `b` (the most distinct thresholds in
    /// `[lo_b - w, lo_b + 2 w)`; in the last bucket, up to `+inf`).
    pub(crate) steps: usize,
    pub(crate) range: f64,
    pub(crate) inv_w: f64,
}

impl SearchTable {
    pub(crate) fn new(cb: &[f64; LEVELS], mid: &[f64; LEVELS - 1]) -> Self {
        let per: Vec<[f64; LEVELS - 1]> = (0..SCALE_CANDIDATES)
            .map(|t| {
                let g = scale_candidate(t);
                mid.map(|m| m * g)
            })
            .collect();
        let mut thr: Vec<f64> = per.iter().flatten().copied().collect();
        thr.sort_by(f64::total_cmp);
        // Distinct values (-0.0 and 0.0 are one: `<` does not tell them apart).
        thr.dedup_by(|a, b| a == b);
        let distinct = thr.len();
        let idx: Vec<[u8; SCALE_CANDIDATES]> = (0..=distinct)
            .map(|q| {
                std::array::from_fn(|t| match q {
                    0 => 0,
                    _ => per[t].iter().filter(|&&x| x <= thr[q - 1]).count() as u8,
                })
            })
            .collect();
        let row = |f: &dyn Fn(f64) -> f64| -> Vec<Row> {
            idx.iter()
                .map(|ix| {
                    let mut c = [[0.0f64; 4]; TW / 4];
                    for (t, &q) in ix.iter().enumerate() {
                        c[t / 4][t % 4] = f(cb[q as usize]);
                    }
                    c
                })
                .collect()
        };
        let cbt = row(&|c| c);
        let cb2 = row(&|c| c * c);
        let range = 1.25 * thr.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let w = 2.0 * range / BUCKETS as f64;
        let below = |x: f64| thr.partition_point(|&t| t < x);
        let start: Vec<u8> = (0..BUCKETS)
            .map(|b| below(-range + b as f64 * w - w) as u8)
            .collect();
        let steps = (0..BUCKETS)
            .map(|b| {
                let hi = if b + 1 == BUCKETS {
                    f64::INFINITY
                } else {
                    -range + b as f64 * w + 2.0 * w
                };
                below(hi) - start[b] as usize
            })
            .max()
            .unwrap_or(0);
        // `+inf` past the end: `position` reads `steps` values from any
        // start, the vector tiers [`SCAN`] (counting more than `steps` adds
        // nothing: every threshold past them is above the bucket's values).
        thr.resize(distinct + steps.max(SCAN), f64::INFINITY);
        SearchTable {
            thr,
            idx,
            cb: cbt,
            cb2,
            start,
            steps,
            range,
            inv_w: 1.0 / w,
        }
    }

    /// `#{k : thr[k] < r}`: the bucket's lower bound `s` plus how many of
    /// the `steps` thresholds from `s` on are below `r` (they are sorted,
    /// so these are the ones between `s` and the position; `thr` ends in
    /// `steps` copies of `+inf`). Branch-free and exact for every `r`;
    /// values outside the buckets start from the first or the last one.
    #[inline(always)]
    fn position(&self, r: f64) -> usize {
        let t = (r + self.range) * self.inv_w;
        // A 32-bit truncation of 0 <= t < BUCKETS, a select of the first or
        // the last bucket otherwise (and of the last for NaN).
        let b = if t >= 0.0 && t < BUCKETS as f64 {
            t as i32 as usize
        } else if t < 0.0 {
            0
        } else {
            BUCKETS - 1
        };
        let s = self.start[b.min(BUCKETS - 1)] as usize;
        let mut k = s;
        for t in &self.thr[s..s + self.steps] {
            k += usize::from(*t < r);
        }
        k
    }
}

/// The rotated values `r_j = (right_j * h_{perm_j}) / sqrt(128)` of a batch
/// (`rot[j][l]`, in output-column order) and each one's [`SearchTable`]
/// position (`pos[j][l]`).
pub(crate) type Rotated = [[f64; LANES]; HADAMARD_N];
/// See [`Rotated`].
pub(crate) type Positions = [[u8; LANES]; HADAMARD_N];

/// The norm search's sums of lane `l` (portable; the reference of the
/// tiers): for every candidate slot `t`, `num[t] = sum_j r_j * c_jt` and
/// `den[t] = sum_j c_jt * c_jt`, each product rounded, then added, in `j`
/// order. Every slot is an independent sequence of the contract's
/// roundings, so the slots may advance side by side in any vector width.
#[inline(always)]
pub(crate) fn sums(st: &SearchTable, rot: &Rotated, pos: &Positions, l: usize) -> (Row, Row) {
    let mut num = [[0.0f64; 4]; TW / 4];
    let mut den = [[0.0f64; 4]; TW / 4];
    for (rj, pj) in rot.iter().zip(pos) {
        let r = rj[l];
        let q = pj[l] as usize;
        let (c, c2) = (&st.cb[q], &st.cb2[q]);
        for v in 0..TW / 4 {
            for i in 0..4 {
                num[v][i] += r * c[v][i];
                den[v][i] += c2[v][i];
            }
        }
    }
    (num, den)
}

/// Every value's [`SearchTable::position`] (portable; the reference of
/// the tiers).
#[inline(always)]
pub(crate) fn positions(st: &SearchTable, rot: &Rotated, pos: &mut Positions) {
    for (d, r) in pos.iter_mut().zip(rot) {
        for l in 0..LANES {
            d[l] = st.position(r[l]) as u8;
        }
    }
}

impl HadamardQuant {
    pub(crate) fn new(
        h: &HadamardRotation,
        cb: &[f64; LEVELS],
        mid: &[f64; LEVELS - 1],
        norm_floor: f64,
    ) -> Self {
        let mut perm = [0usize; HADAMARD_N];
        let mut right = [0.0f64; HADAMARD_N];
        for j in 0..HADAMARD_N {
            perm[j] = h.perm[j] as usize;
            right[j] = h.right[perm[j]] as f64;
        }
        HadamardQuant {
            left: h.left.map(|x| x as f64),
            perm,
            right,
            search: SearchTable::new(cb, mid),
            norm_floor,
        }
    }

    /// Quantize one batch in place: returns each item's norm `nu` (the
    /// clamped norm times the chosen scale, §CQ4.7.3) and writes
    /// `idx[j][l]` (the index of column `j` of item `l`).
    #[inline(always)]
    pub(crate) fn batch(&self, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
        let norm = self.transform(x);
        let s = self.refine(x, idx, positions, sums);
        std::array::from_fn(|l| norm[l] * s[l])
    }

    /// §CQ4.7.3, per lane, from `x` = `h`: for each scale candidate `g`,
    /// the indices of `rot / g` (thresholds `m_i * g`) and their
    /// least-squares scale `num / den`; the candidate with the largest
    /// `num * num / den` wins (the first on ties; none with `num <= 0`:
    /// then the indices of `g = 1`, which are §7.1's since `m_i * 1 = m_i`,
    /// and scale 1). Writes the winner's indices and returns its scale.
    ///
    /// How (the values are the contract's): every candidate's index of a
    /// value `r` is a function of `p = #{thresholds of all candidates < r}`
    /// ([`SearchTable`]), so each value costs one position and one row of
    /// codebook values; the candidates' `num` / `den` then advance side by
    /// side (one vector over `t`), each still sequential in `j` with the
    /// contract's roundings (`r * c` rounded, then added; `c * c` likewise).
    #[inline(always)]
    pub(crate) fn refine(
        &self,
        x: &Batch,
        idx: &mut BatchIdx,
        positions: impl Fn(&SearchTable, &Rotated, &mut Positions),
        sums: impl Fn(&SearchTable, &Rotated, &Positions, usize) -> (Row, Row),
    ) -> [f64; LANES] {
        let s128 = sqrt128();
        let st = &self.search;
        // The rotated values of every lane at once (one vector over the
        // lanes), then their positions.
        let mut rot: Rotated = [[0.0; LANES]; HADAMARD_N];
        for ((d, &p), &r) in rot.iter_mut().zip(&self.perm).zip(&self.right) {
            for l in 0..LANES {
                d[l] = (r * x[p][l]) / s128;
            }
        }
        let mut pos: Positions = [[0; LANES]; HADAMARD_N];
        positions(st, &rot, &mut pos);
        let mut scale = [1.0f64; LANES];
        for l in 0..LANES {
            let (num, den) = sums(st, &rot, &pos, l);
            let mut best_score = f64::NEG_INFINITY;
            let mut best = PLAIN;
            for t in 0..SCALE_CANDIDATES {
                let (n, d) = (num[t / 4][t % 4], den[t / 4][t % 4]);
                if n > 0.0 {
                    let score = (n * n) / d;
                    if score > best_score {
                        best_score = score;
                        best = t;
                        scale[l] = n / d;
                    }
                }
            }
            for (d, p) in idx.iter_mut().zip(&pos) {
                d[l] = st.idx[p[l] as usize][best];
            }
        }
        scale
    }

    /// The norms, and `x` replaced by `h = FWHT(left * uf)` per lane.
    #[inline(always)]
    pub(crate) fn transform(&self, x: &mut Batch) -> [f64; LANES] {
        // ss = sum v_i * v_i, sequential in i (per lane).
        let mut ss = [0.0f64; LANES];
        for v in x.iter() {
            for l in 0..LANES {
                ss[l] += v[l] * v[l];
            }
        }
        let norm = ss.map(|s| s.sqrt().max(self.norm_floor));
        // a_i = left[i] * ((v_i / norm + MAGIC) - MAGIC).
        for (v, &s) in x.iter_mut().zip(&self.left) {
            for l in 0..LANES {
                v[l] = s * ((v[l] / norm[l] + FIXED_MAGIC) - FIXED_MAGIC);
            }
        }
        // FWHT (exact, §CQ4.11, so the butterflies may run in any order),
        // lane-wise, in registers three stages at a time: h = 1, 2, 4 on
        // each run of 8 rows, h = 8, 16, 32 on each 8 rows 8 apart, then
        // h = 64 (one pass over the batch each, not one per stage).
        const _: () = assert!(HADAMARD_N == 128);
        for b in (0..HADAMARD_N).step_by(8) {
            butterflies8(x, b, 1);
        }
        for b in (0..HADAMARD_N).step_by(64) {
            for o in 0..8 {
                butterflies8(x, b + o, 8);
            }
        }
        let (lo, hi) = x.split_at_mut(HADAMARD_N / 2);
        for (a, b) in lo.iter_mut().zip(hi) {
            for l in 0..LANES {
                (a[l], b[l]) = (a[l] + b[l], a[l] - b[l]);
            }
        }
        norm
    }
}

/// The FWHT stages `h = s, 2s, 4s` on the 8 rows `x[b + s j]`, `j = 0..8`
/// (each row a vector of lanes), held in registers.
#[inline(always)]
fn butterflies8(x: &mut Batch, b: usize, s: usize) {
    let mut v: [[f64; LANES]; 8] = std::array::from_fn(|j| x[b + s * j]);
    for h in [1, 2, 4] {
        for i in (0..8).step_by(2 * h) {
            for t in i..i + h {
                let (a, c) = (v[t], v[t + h]);
                for l in 0..LANES {
                    v[t][l] = a[l] + c[l];
                    v[t + h][l] = a[l] - c[l];
                }
            }
        }
    }
    for (j, r) in v.into_iter().enumerate() {
        x[b + s * j] = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::lloyd_max;

    /// The table answers the contract's question (`#{i : m_i * g_t < r}`
    /// for every candidate, by direct count) for values on, just beside,
    /// between and far outside every threshold, and for a dense sweep; its
    /// rows hold each candidate's codebook value and the f64 square of it.
    #[test]
    fn search_table_positions_give_each_candidates_index() {
        for d in [128usize, 640] {
            let cb = lloyd_max(d).unwrap();
            let st = SearchTable::new(&cb.values, &cb.midpoints);
            let distinct = st.idx.len() - 1;
            assert!(st.thr[distinct..].iter().all(|&x| x == f64::INFINITY));
            assert!(st.thr.len() >= distinct + st.steps.max(1));
            assert!(st.thr[..distinct].windows(2).all(|w| w[0] < w[1]));
            // The vector tiers scan SCAN thresholds (more steps: the portable scan).
            assert!(st.steps >= 1 && st.steps <= SCAN, "steps {}", st.steps);
            let mut probes: Vec<f64> = vec![
                0.0,
                -0.0,
                1.0,
                -1.0,
                1e300,
                -1e300,
                f64::MIN_POSITIVE,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ];
            for &x in &st.thr[..distinct] {
                probes.extend([x, x.next_up(), x.next_down(), 2.0 * x, x / 2.0]);
            }
            probes.extend((-40000..=40000).map(|i| i as f64 * 1e-5));
            for r in probes {
                let q = st.position(r);
                assert_eq!(
                    q,
                    st.thr.iter().filter(|&&x| x < r).count(),
                    "position of {r:e}"
                );
                for t in 0..SCALE_CANDIDATES {
                    let g = scale_candidate(t);
                    let want = cb.midpoints.iter().filter(|&&m| m * g < r).count();
                    assert_eq!(st.idx[q][t] as usize, want, "candidate {t}, r = {r:e}");
                    let c = cb.values[want];
                    assert_eq!(st.cb[q][t / 4][t % 4], c);
                    assert_eq!(st.cb2[q][t / 4][t % 4], c * c);
                }
            }
        }
    }
}
