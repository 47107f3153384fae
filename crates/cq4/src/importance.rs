//! Data-free importance (FORMAT.md §CQ4.17): an estimate of every matmul's
//! mean squared input per column, made from the model's own weights, with no
//! calibration text.
//!
//! The estimate propagates a per-channel variance through the decoder as if
//! every input coordinate of a matmul were independent: the residual stream
//! starts with the token embedding's mean square per channel; an RMS norm
//! with multiplier `γ` turns a variance `r` into `γ² r / mean(r)`; a matmul
//! `W` turns input variances `x` into output variances `sum_k W[i][k]² x_k`;
//! attention passes each value row's variance to the output projection's
//! columns of its heads; the gated MLP's product `act(g) * u` gets
//! `v_u * v_g / (1 + v_g)` (SiLU and GELU are about `g / 2` for small and
//! `g` for large `g`); each block's output adds to the residual variance
//! (after its post-norm, if the architecture has one). Measured on
//! SmolLM2-135M with llama.cpp's perplexity, AWQ input scales from this
//! estimate recover most of what a real importance matrix gives (see
//! docs/QUALITY.md); the residual stream's outlier channels, which dominate
//! a real importance matrix, come out of the propagation.
//!
//! Everything is f64; every sum is sequential in the order stated in
//! FORMAT.md §CQ4.17 (rows in order, columns in order), so the estimate is
//! the same on every machine and an independent implementation reproduces
//! it (`scripts/reference_encoder.py`). Only ratios between columns of one
//! tensor matter to the input scales of §CQ4.16.

use std::fmt;

use rayon::prelude::*;

/// A tensor the estimate reads, by its place in the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The token embedding, `[vocab][hidden]`.
    TokenEmbedding,
    /// Layer `l`'s norm before attention (`attn_norm` / `input_layernorm`).
    AttnNorm(usize),
    /// Layer `l`'s value projection, `[n_kv * head_dim][hidden]`.
    AttnV(usize),
    /// Layer `l`'s attention output projection, `[hidden][n_head * head_dim]`.
    AttnOutput(usize),
    /// Layer `l`'s norm after attention, before the residual add (Gemma 3).
    PostAttnNorm(usize),
    /// Layer `l`'s norm before the MLP (`ffn_norm`).
    FfnNorm(usize),
    /// Layer `l`'s gate projection, `[ffn][hidden]`.
    FfnGate(usize),
    /// Layer `l`'s up projection, `[ffn][hidden]`.
    FfnUp(usize),
    /// Layer `l`'s down projection, `[hidden][ffn]`.
    FfnDown(usize),
    /// Layer `l`'s norm after the MLP, before the residual add (Gemma 3).
    PostFfwNorm(usize),
    /// The final norm before the output projection.
    OutputNorm,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// What the estimate needs to know of the architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Decoder layers.
    pub n_layer: usize,
    /// Attention (query) heads.
    pub n_head: usize,
    /// Key/value heads (`n_head` without grouped-query attention).
    pub n_kv_head: usize,
    /// The embedding is multiplied by `sqrt(hidden)` (Gemma): the residual
    /// stream starts at `hidden` times the embedding's mean square.
    pub embedding_scaled: bool,
    /// The architecture has post-norms (Gemma 3: `post_attention_norm`,
    /// `post_ffw_norm`).
    pub post_norms: bool,
}

/// Where the estimate reads the model. `vector` returns a norm's effective
/// multipliers (what the model multiplies by: Gemma's `1 + w` for a Hugging
/// Face checkpoint); `matrix` streams a matrix's rows in order, whole rows,
/// to `each` (any number of rows per call) and returns its `(rows, cols)`.
/// Either returns `Ok(None)` when the model has no such tensor.
pub trait Source {
    /// The source's error (bad input, I/O).
    type Error;
    /// A 1-D tensor's values.
    fn vector(&mut self, part: Part) -> Result<Option<Vec<f32>>, Self::Error>;
    /// A 2-D tensor's rows, streamed.
    fn matrix(
        &mut self,
        part: Part,
        each: &mut dyn FnMut(&[f32], usize),
    ) -> Result<Option<(usize, usize)>, Self::Error>;
}

/// The estimate: per layer the mean square input per column of its
/// attention projections (q, k, v share it), its output projection, its
/// gate / up projections and its down projection; and of the output
/// projection (lm_head, or the tied token embedding).
#[derive(Debug, Clone, PartialEq)]
pub struct Importance {
    /// One entry per layer.
    pub layers: Vec<LayerImportance>,
    /// The output projection's input (`hidden` values).
    pub output: Vec<f64>,
    /// The token embedding's column sums of squares `sum_rows f64(x)^2`,
    /// rows in order (`hidden` values): the AWQ column sums of §CQ4.16 of
    /// the embedding as read (a caller converting it unchanged need not
    /// read it again for them).
    pub embedding_column_sums: Vec<f64>,
}

/// One layer's part of [`Importance`].
#[derive(Debug, Clone, PartialEq)]
pub struct LayerImportance {
    /// Input of attn_q / attn_k / attn_v (`hidden`).
    pub attn_in: Vec<f64>,
    /// Input of attn_output (`n_head * head_dim`).
    pub attn_output_in: Vec<f64>,
    /// Input of ffn_gate / ffn_up (`hidden`).
    pub ffn_in: Vec<f64>,
    /// Input of ffn_down (`ffn`).
    pub ffn_down_in: Vec<f64>,
}

/// Why no estimate was made (the conversion goes on without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The model lacks a tensor the estimate reads.
    Missing(Part),
    /// A tensor's shape does not fit the others.
    Shape(Part, String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Missing(p) => write!(f, "no tensor for {p}"),
            Skip::Shape(p, why) => write!(f, "{p}: {why}"),
        }
    }
}

/// `sum_{i} x_i` sequential, divided by the count (0 for an empty slice).
fn mean(x: &[f64]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let mut s = 0.0;
    for &v in x {
        s += v;
    }
    s / x.len() as f64
}

/// `γ_j² * r_j / mean(r)` (an RMS norm's output variance): `g = f64(γ_j)`,
/// `(g * g) * (r_j / m)`. A zero mean gives zeros.
fn normed(gamma: &[f32], r: &[f64]) -> Vec<f64> {
    let m = mean(r);
    gamma
        .iter()
        .zip(r)
        .map(|(&g, &v)| {
            let g = g as f64;
            if m > 0.0 {
                (g * g) * (v / m)
            } else {
                0.0
            }
        })
        .collect()
}

/// Blocks of [`crate::simd::ENERGY_ROWS`] rows per rayon task.
const PAR_ENERGY_BLOCKS: usize = 16;

/// Row energies `out_i = sum_k W[i][k]² x_k` (sequential in `k`,
/// `w = f64(W[i][k])`, `(w * w) * x_k`), appended per streamed row.
struct RowEnergies<'x> {
    x: &'x [f64],
    out: Vec<f64>,
    bad: bool,
}

impl RowEnergies<'_> {
    fn push(&mut self, rows: &[f32], k: usize) {
        if k == 0 || k != self.x.len() || !rows.len().is_multiple_of(k) {
            self.bad = true;
            return;
        }
        // Sixteen rows at a time (on the vector tiers, four chains of four
        // lanes): independent chains, each still its row's sum in `k`
        // order (one chain alone waits on each add). The last block's
        // missing rows repeat its first row and their sums are dropped.
        // The blocks are independent: they run on rayon's threads, and
        // their sums are put back in row order.
        const E: usize = crate::simd::ENERGY_ROWS;
        let isa = crate::simd::EncodeIsa::best();
        let x = self.x;
        let block = |block: &[f32]| {
            let m = block.len() / k;
            let r: [&[f32]; E] = std::array::from_fn(|i| {
                let i = if i < m { i } else { 0 };
                &block[i * k..(i + 1) * k]
            });
            (m, crate::simd::row_energies(isa, &r, x))
        };
        let sums: Vec<(usize, [f64; E])> = rows
            .par_chunks(E * k)
            .with_min_len(PAR_ENERGY_BLOCKS)
            .map(block)
            .collect();
        for (m, e) in &sums {
            self.out.extend_from_slice(&e[..*m]);
        }
    }
}

/// Reads a vector of `len` values or says why not.
fn vector<S: Source>(
    src: &mut S,
    part: Part,
    len: usize,
) -> Result<Result<Vec<f32>, Skip>, S::Error> {
    Ok(match src.vector(part)? {
        None => Err(Skip::Missing(part)),
        Some(v) if v.len() != len => Err(Skip::Shape(
            part,
            format!("{} values, expected {len}", v.len()),
        )),
        Some(v) => Ok(v),
    })
}

/// The row energies of a matrix whose columns match `x` (or why not).
fn energies<S: Source>(
    src: &mut S,
    part: Part,
    x: &[f64],
) -> Result<Result<Vec<f64>, Skip>, S::Error> {
    let mut re = RowEnergies {
        x,
        out: Vec::new(),
        bad: false,
    };
    let dims = src.matrix(part, &mut |rows, k| re.push(rows, k))?;
    Ok(match dims {
        None => Err(Skip::Missing(part)),
        Some((_, k)) if k != x.len() => Err(Skip::Shape(
            part,
            format!("{k} columns, expected {}", x.len()),
        )),
        Some((n, _)) if re.bad || re.out.len() != n => {
            Err(Skip::Shape(part, "rows not streamed whole".into()))
        }
        Some(_) => Ok(re.out),
    })
}

/// A block's output variance added to the residual `r`: with a post-norm,
/// `γ_i² * add_i / mean(add)` (the norm's output), else `add_i`.
fn residual_add(r: &mut [f64], add: &[f64], post: Option<&[f32]>) {
    match post {
        Some(g) => {
            let n = normed(g, add);
            for (v, a) in r.iter_mut().zip(n) {
                *v += a;
            }
        }
        None => {
            for (v, &a) in r.iter_mut().zip(add) {
                *v += a;
            }
        }
    }
}

/// Make the estimate (FORMAT.md §CQ4.17). `Ok(Err(skip))` when the model
/// does not have what it needs; errors are the source's.
pub fn estimate<S: Source>(
    src: &mut S,
    shape: &Shape,
) -> Result<Result<Importance, Skip>, S::Error> {
    macro_rules! need {
        ($e:expr) => {
            match $e? {
                Ok(v) => v,
                Err(skip) => return Ok(Err(skip)),
            }
        };
    }
    // The residual stream: mean square per channel of the embedding rows.
    let mut sums: Vec<f64> = Vec::new();
    let mut vocab = 0usize;
    let mut bad = false;
    let dims = src.matrix(Part::TokenEmbedding, &mut |rows, h| {
        if sums.is_empty() {
            sums = vec![0.0; h];
        }
        if h == 0 || h != sums.len() || !rows.len().is_multiple_of(h) {
            bad = true;
            return;
        }
        // Row after row, each column's sum in row order (every tier alike).
        crate::simd::par_column_squares(crate::simd::EncodeIsa::best(), &mut sums, rows);
        vocab += rows.len() / h;
    })?;
    let (v_rows, hidden) = match dims {
        None => return Ok(Err(Skip::Missing(Part::TokenEmbedding))),
        Some(d) => d,
    };
    if hidden == 0 || v_rows == 0 || bad || vocab != v_rows || sums.len() != hidden {
        return Ok(Err(Skip::Shape(
            Part::TokenEmbedding,
            "empty, or rows not streamed whole".into(),
        )));
    }
    let scale = if shape.embedding_scaled {
        hidden as f64
    } else {
        1.0
    };
    let mut r: Vec<f64> = sums.iter().map(|&s| (s / v_rows as f64) * scale).collect();

    let mut layers = Vec::with_capacity(shape.n_layer);
    for l in 0..shape.n_layer {
        let ga = need!(vector(src, Part::AttnNorm(l), hidden));
        let attn_in = normed(&ga, &r);
        let vv = need!(energies(src, Part::AttnV(l), &attn_in));
        if shape.n_kv_head == 0
            || shape.n_head == 0
            || !shape.n_head.is_multiple_of(shape.n_kv_head)
            || !vv.len().is_multiple_of(shape.n_kv_head)
        {
            return Ok(Err(Skip::Shape(
                Part::AttnV(l),
                format!(
                    "{} rows for {} key/value heads of {} heads",
                    vv.len(),
                    shape.n_kv_head,
                    shape.n_head
                ),
            )));
        }
        let dv = vv.len() / shape.n_kv_head;
        let rep = shape.n_head / shape.n_kv_head;
        let mut attn_output_in = Vec::with_capacity(shape.n_head * dv);
        for h in 0..shape.n_head {
            let kv = h / rep;
            attn_output_in.extend_from_slice(&vv[kv * dv..(kv + 1) * dv]);
        }
        let add = need!(energies(src, Part::AttnOutput(l), &attn_output_in));
        if add.len() != hidden {
            return Ok(Err(Skip::Shape(
                Part::AttnOutput(l),
                format!("{} rows, expected {hidden}", add.len()),
            )));
        }
        let post = if shape.post_norms {
            Some(need!(vector(src, Part::PostAttnNorm(l), hidden)))
        } else {
            None
        };
        residual_add(&mut r, &add, post.as_deref());

        let gf = need!(vector(src, Part::FfnNorm(l), hidden));
        let ffn_in = normed(&gf, &r);
        let vg = need!(energies(src, Part::FfnGate(l), &ffn_in));
        let vu = need!(energies(src, Part::FfnUp(l), &ffn_in));
        if vg.len() != vu.len() {
            return Ok(Err(Skip::Shape(
                Part::FfnUp(l),
                format!("{} rows, gate has {}", vu.len(), vg.len()),
            )));
        }
        let ffn_down_in: Vec<f64> = vu
            .iter()
            .zip(&vg)
            .map(|(&u, &g)| (u * g) / (1.0 + g))
            .collect();
        let add = need!(energies(src, Part::FfnDown(l), &ffn_down_in));
        if add.len() != hidden {
            return Ok(Err(Skip::Shape(
                Part::FfnDown(l),
                format!("{} rows, expected {hidden}", add.len()),
            )));
        }
        let post = if shape.post_norms {
            Some(need!(vector(src, Part::PostFfwNorm(l), hidden)))
        } else {
            None
        };
        residual_add(&mut r, &add, post.as_deref());
        layers.push(LayerImportance {
            attn_in,
            attn_output_in,
            ffn_in,
            ffn_down_in,
        });
    }
    let go = need!(vector(src, Part::OutputNorm, hidden));
    let output = normed(&go, &r);
    Ok(Ok(Importance {
        layers,
        output,
        embedding_column_sums: sums,
    }))
}

/// f32 importance values for [`crate::awq::input_exponents`] (which takes
/// llama.cpp's f32 imatrix values): `f32(a)` with RNE; values that are not
/// finite and positive in f32 (overflow, underflow to 0) stay as rounded and
/// are then left out by the exponent rule.
pub fn to_f32(a: &[f64]) -> Vec<f32> {
    a.iter().map(|&v| v as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A model held in memory.
    struct Mem {
        vectors: HashMap<Part, Vec<f32>>,
        matrices: HashMap<Part, (usize, usize, Vec<f32>)>,
        chunk_rows: usize,
    }

    impl Source for Mem {
        type Error = ();
        fn vector(&mut self, part: Part) -> Result<Option<Vec<f32>>, ()> {
            Ok(self.vectors.get(&part).cloned())
        }
        fn matrix(
            &mut self,
            part: Part,
            each: &mut dyn FnMut(&[f32], usize),
        ) -> Result<Option<(usize, usize)>, ()> {
            let Some((n, k, w)) = self.matrices.get(&part) else {
                return Ok(None);
            };
            for c in w.chunks(self.chunk_rows * k) {
                each(c, *k);
            }
            Ok(Some((*n, *k)))
        }
    }

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    fn model(hidden: usize, heads: usize, kv: usize, dh: usize, ffn: usize, chunk: usize) -> Mem {
        let mut s = 7u64;
        let mut m = Mem {
            vectors: HashMap::new(),
            matrices: HashMap::new(),
            chunk_rows: chunk,
        };
        let mat = |m: &mut Mem, p: Part, n: usize, k: usize, s: &mut u64| {
            let w: Vec<f32> = (0..n * k).map(|_| lcg(s)).collect();
            m.matrices.insert(p, (n, k, w));
        };
        mat(&mut m, Part::TokenEmbedding, 50, hidden, &mut s);
        for l in 0..2 {
            mat(&mut m, Part::AttnV(l), kv * dh, hidden, &mut s);
            mat(&mut m, Part::AttnOutput(l), hidden, heads * dh, &mut s);
            mat(&mut m, Part::FfnGate(l), ffn, hidden, &mut s);
            mat(&mut m, Part::FfnUp(l), ffn, hidden, &mut s);
            mat(&mut m, Part::FfnDown(l), hidden, ffn, &mut s);
            for p in [Part::AttnNorm(l), Part::FfnNorm(l)] {
                let g: Vec<f32> = (0..hidden).map(|_| 1.0 + lcg(&mut s)).collect();
                m.vectors.insert(p, g);
            }
        }
        let g: Vec<f32> = (0..hidden).map(|_| 1.0 + lcg(&mut s)).collect();
        m.vectors.insert(Part::OutputNorm, g);
        m
    }

    fn shape(heads: usize, kv: usize) -> Shape {
        Shape {
            n_layer: 2,
            n_head: heads,
            n_kv_head: kv,
            embedding_scaled: false,
            post_norms: false,
        }
    }

    /// The estimate written out naively, straight from the formulas, with
    /// whole matrices in hand: the streamed implementation must agree bit for
    /// bit (same operations, same order).
    fn naive(m: &Mem, sh: &Shape) -> Importance {
        let e = &m.matrices[&Part::TokenEmbedding];
        let (v, h) = (e.0, e.1);
        let mut r = vec![0.0f64; h];
        for row in e.2.chunks_exact(h).take(v) {
            for (rj, &x) in r.iter_mut().zip(row) {
                let x = x as f64;
                *rj += x * x;
            }
        }
        let embedding_column_sums = r.clone();
        let mut r: Vec<f64> = r.iter().map(|s| (s / v as f64) * 1.0).collect();
        let mv = |p: Part, x: &[f64]| -> Vec<f64> {
            let (n, k, w) = &m.matrices[&p];
            (0..*n)
                .map(|i| {
                    let mut s = 0.0;
                    for kk in 0..*k {
                        let a = w[i * k + kk] as f64;
                        s += (a * a) * x[kk];
                    }
                    s
                })
                .collect()
        };
        let nm = |g: &[f32], r: &[f64]| -> Vec<f64> {
            let mut s = 0.0;
            for x in r {
                s += x;
            }
            let mu = s / r.len() as f64;
            g.iter()
                .zip(r)
                .map(|(&g, &x)| (g as f64 * g as f64) * (x / mu))
                .collect()
        };
        let mut layers = vec![];
        for l in 0..sh.n_layer {
            let a = nm(&m.vectors[&Part::AttnNorm(l)], &r);
            let vv = mv(Part::AttnV(l), &a);
            let dv = vv.len() / sh.n_kv_head;
            let rep = sh.n_head / sh.n_kv_head;
            let ao: Vec<f64> = (0..sh.n_head * dv)
                .map(|c| vv[(c / dv / rep) * dv + c % dv])
                .collect();
            for (x, y) in r.iter_mut().zip(mv(Part::AttnOutput(l), &ao)) {
                *x += y;
            }
            let f = nm(&m.vectors[&Part::FfnNorm(l)], &r);
            let g = mv(Part::FfnGate(l), &f);
            let u = mv(Part::FfnUp(l), &f);
            let d: Vec<f64> = u.iter().zip(&g).map(|(u, g)| (u * g) / (1.0 + g)).collect();
            for (x, y) in r.iter_mut().zip(mv(Part::FfnDown(l), &d)) {
                *x += y;
            }
            layers.push(LayerImportance {
                attn_in: a,
                attn_output_in: ao,
                ffn_in: f,
                ffn_down_in: d,
            });
        }
        Importance {
            output: nm(&m.vectors[&Part::OutputNorm], &r),
            layers,
            embedding_column_sums,
        }
    }

    #[test]
    fn streamed_estimate_equals_the_formulas_for_any_chunking() {
        for chunk in [1, 3, 64] {
            let mut m = model(16, 4, 2, 4, 24, chunk);
            let sh = shape(4, 2);
            let got = estimate(&mut m, &sh).unwrap().unwrap();
            assert_eq!(got, naive(&m, &sh), "chunk of {chunk} rows");
        }
    }

    #[test]
    fn grouped_query_heads_share_their_value_rows() {
        let mut m = model(16, 4, 2, 4, 24, 5);
        let got = estimate(&mut m, &shape(4, 2)).unwrap().unwrap();
        let ao = &got.layers[0].attn_output_in;
        assert_eq!(ao.len(), 16);
        // heads 0, 1 read kv head 0; heads 2, 3 kv head 1.
        assert_eq!(ao[0..4], ao[4..8]);
        assert_eq!(ao[8..12], ao[12..16]);
        assert_ne!(ao[0..4], ao[8..12]);
    }

    #[test]
    fn a_loud_residual_channel_is_important_downstream() {
        // Channel 3 of the embedding is 20x louder: every normed input of
        // layer 0 sees it as the largest.
        let mut m = model(16, 4, 4, 4, 24, 7);
        let e = m.matrices.get_mut(&Part::TokenEmbedding).unwrap();
        for row in e.2.chunks_exact_mut(16) {
            row[3] *= 20.0;
        }
        let got = estimate(&mut m, &shape(4, 4)).unwrap().unwrap();
        let a = &got.layers[0].attn_in;
        let max = a.iter().cloned().fold(0.0, f64::max);
        assert_eq!(a[3], max);
        assert!(a[3] > 50.0 * got.layers[0].attn_in[0]);
    }

    #[test]
    fn missing_or_misshapen_tensors_skip_the_estimate() {
        let mut m = model(16, 4, 2, 4, 24, 5);
        m.matrices.remove(&Part::FfnUp(1));
        assert_eq!(
            estimate(&mut m, &shape(4, 2)).unwrap(),
            Err(Skip::Missing(Part::FfnUp(1)))
        );
        let mut m = model(16, 4, 2, 4, 24, 5);
        m.vectors.insert(Part::FfnNorm(0), vec![1.0; 15]);
        assert!(matches!(
            estimate(&mut m, &shape(4, 2)).unwrap(),
            Err(Skip::Shape(Part::FfnNorm(0), _))
        ));
        // 3 kv heads do not divide 4 heads.
        let mut m = model(16, 4, 2, 4, 24, 5);
        assert!(matches!(
            estimate(&mut m, &shape(4, 3)).unwrap(),
            Err(Skip::Shape(Part::AttnV(0), _))
        ));
        let mut m = model(16, 4, 2, 4, 24, 5);
        let mut sh = shape(4, 2);
        sh.post_norms = true;
        assert_eq!(
            estimate(&mut m, &sh).unwrap(),
            Err(Skip::Missing(Part::PostAttnNorm(0)))
        );
    }
}
