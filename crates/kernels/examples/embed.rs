//! How an engine embeds `kernels`: map `.weights` files written by
//! `convert`, view each as a matrix, run GEMV and GEMM on every tier this
//! CPU has, and print shapes, timings and the first outputs.
//!
//! ```text
//! cargo run --release -p kernels --example embed -- PATH [M]
//! ```
//!
//! `PATH` is one `.weights` file or a bundle folder (every `*.weights` in
//! it, sorted by name); `M` (default 16) is the GEMM's row count. For each
//! matrix: `y = W x` and `Y = X W^T` with `X` of `M` pseudo-random rows, on
//! every available tier, checking what the API promises: every tier gives
//! the scalar tier's bits, and row `i` of the GEMM is the GEMV of row `i`.
//! Exit status 1 if any check fails (`tests/kernels_example.rs` runs this
//! program's [`check_file`] on bundles converted from the committed
//! fixture models).

use std::path::{Path, PathBuf};
use std::time::Instant;

use kernels::weights_file::WeightsFile;
use kernels::{Exec, Gemv, GgmlExperts, Isa, KernelError, Matrix, Workspace};

/// What one tier did on one matrix.
#[derive(Debug, Clone)]
pub struct TierRun {
    /// The tier.
    pub isa: Isa,
    /// Seconds of one GEMV and of one GEMM (best of a few calls).
    pub gemv_s: f64,
    /// Seconds of one `M`-row GEMM.
    pub gemm_s: f64,
    /// Every output finite.
    pub finite: bool,
    /// GEMV and GEMM bits equal the scalar tier's.
    pub same_as_scalar: bool,
    /// Row `i` of the GEMM equals the GEMV of row `i`, every row.
    pub gemm_rows_are_gemvs: bool,
    /// The first outputs of the GEMV.
    pub head: Vec<f32>,
}

/// One file's result.
#[derive(Debug, Clone)]
pub struct FileRun {
    /// What it holds (`Q4_K r8`, `CQ4 hadamard`, `FP16`, ...).
    pub kind: String,
    /// `N x K` as the kernels see it (`K` is `Kp` for CQ4).
    pub rows: usize,
    /// Input columns.
    pub cols: usize,
    /// Weight bytes a call streams.
    pub weight_bytes: usize,
    /// One entry per available tier, scalar first.
    pub tiers: Vec<TierRun>,
}

impl FileRun {
    /// Every tier finite, identical to scalar, GEMM rows equal GEMVs.
    pub fn ok(&self) -> bool {
        self.tiers
            .iter()
            .all(|t| t.finite && t.same_as_scalar && t.gemm_rows_are_gemvs)
    }
}

/// `n` pseudo-random activations in [-1, 1) (SplitMix64 of `seed`).
fn activations(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Best of three calls of `f`, in seconds.
fn best_of(mut f: impl FnMut() -> Result<(), KernelError>) -> Result<f64, KernelError> {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// GEMV and an `m`-row GEMM of `w` on every available tier.
fn run_matrix(kind: String, w: &dyn Gemv, m: usize) -> Result<FileRun, KernelError> {
    let (n, k) = (w.rows(), w.cols());
    let x: Vec<f32> = activations(1, m * k);
    let mut ws = Workspace::new();
    let mut tiers: Vec<TierRun> = Vec::new();
    let mut scalar: Option<(Vec<u32>, Vec<u32>)> = None;
    let mut isas = kernels::available();
    isas.sort();
    for isa in isas {
        let exec = Exec::new(isa, true);
        let mut y = vec![0f32; n];
        let gemv_s = best_of(|| w.gemv(&x[..k], &mut y, &mut ws, exec))?;
        let mut ys = vec![0f32; m * n];
        let gemm_s = best_of(|| w.gemm(m, &x, &mut ys, &mut ws, exec))?;
        // Row i of Y against the GEMV of row i of X.
        let mut rows_ok = true;
        for (xr, yr) in x.chunks_exact(k).zip(ys.chunks_exact(n)) {
            let mut yi = vec![0f32; n];
            w.gemv(xr, &mut yi, &mut ws, exec)?;
            rows_ok &= bits(&yi) == bits(yr);
        }
        let same = match &scalar {
            None => {
                scalar = Some((bits(&y), bits(&ys)));
                true
            }
            Some((sy, sys)) => *sy == bits(&y) && *sys == bits(&ys),
        };
        tiers.push(TierRun {
            isa,
            gemv_s,
            gemm_s,
            finite: y.iter().chain(&ys).all(|v| v.is_finite()),
            same_as_scalar: same,
            gemm_rows_are_gemvs: rows_ok,
            head: y.iter().take(4).copied().collect(),
        });
    }
    Ok(FileRun {
        kind,
        rows: n,
        cols: k,
        weight_bytes: w.weight_bytes(),
        tiers,
    })
}

/// Run one container's bytes: `Ok(None)` for a file that holds no matrix
/// (a raw integer / bool tensor); a 3-D expert sidecar runs its expert 0.
pub fn check_file(bytes: &[u8], m: usize) -> Result<Option<FileRun>, KernelError> {
    let f = WeightsFile::parse(bytes).map_err(|e| KernelError::Container(e.to_string()))?;
    if matches!(
        f.header().precision(),
        Some(kernels::weights_file::Precision::Raw(_))
    ) {
        return Ok(None);
    }
    if f.header().ndim == 3 {
        let ex = GgmlExperts::from_file(&f)?;
        let e0 = ex.expert(0)?;
        let kind = format!(
            "{} {} (expert 0 of {})",
            ex.format().ggml_type(),
            ex.layout().name(),
            ex.experts()
        );
        return run_matrix(kind, &e0, m).map(Some);
    }
    let matrix = Matrix::parse(bytes)?;
    run_matrix(matrix.kind(), matrix.as_gemv(), m).map(Some)
}

/// The `.weights` files of `path` (itself, or a folder's, sorted).
fn weights_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.to_string_lossy().ends_with(".weights"))
            .collect();
        v.sort();
        Ok(v)
    } else {
        Ok(vec![path.to_path_buf()])
    }
}

fn print_run(name: &str, r: &FileRun, m: usize) {
    println!(
        "{name}: {}, {} x {}, {:.1} KiB",
        r.kind,
        r.rows,
        r.cols,
        r.weight_bytes as f64 / 1024.0
    );
    for t in &r.tiers {
        let flops = 2.0 * (r.rows * r.cols) as f64;
        println!(
            "  {:<6} gemv {:>9.3} ms ({:>6.2} GF/s)  gemm M={m} {:>9.3} ms ({:>6.2} GF/s)  \
             same as scalar: {}  gemm rows = gemvs: {}  y[..4] = {:?}",
            t.isa.name(),
            t.gemv_s * 1e3,
            flops / t.gemv_s / 1e9,
            t.gemm_s * 1e3,
            m as f64 * flops / t.gemm_s / 1e9,
            yes(t.same_as_scalar),
            yes(t.gemm_rows_are_gemvs),
            t.head
        );
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: embed PATH [M]   (a .weights file or a bundle folder)");
        std::process::exit(2);
    };
    let m: usize = match args.next().map(|s| s.parse()) {
        None => 16,
        Some(Ok(m)) if m >= 1 => m,
        _ => {
            eprintln!("embed: M must be a positive integer");
            std::process::exit(2);
        }
    };
    let files = match weights_files(Path::new(&path)) {
        Ok(f) if !f.is_empty() => f,
        Ok(_) => {
            eprintln!("embed: no .weights files in {path}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("embed: {path}: {e}");
            std::process::exit(2);
        }
    };
    println!("tiers available here: {:?}", kernels::available());
    let mut failed = false;
    for file in files {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mapped = std::fs::File::open(&file).and_then(|f| {
            // SAFETY: a read-only private map; the file must not be
            // truncated or written while this program runs (as for any
            // engine that maps its weights).
            unsafe { memmap2::Mmap::map(&f) }
        });
        let map = match mapped {
            Ok(map) => map,
            Err(e) => {
                println!("{name}: cannot map: {e}");
                failed = true;
                continue;
            }
        };
        match check_file(&map, m) {
            Ok(Some(r)) => {
                print_run(&name, &r, m);
                failed |= !r.ok();
            }
            Ok(None) => println!("{name}: no matrix (a raw tensor file)"),
            Err(e) => {
                println!("{name}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
