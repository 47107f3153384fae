//! GEMV throughput in GB/s of weight bytes streamed, per layout and shape,
//! 1 and 2 threads, beside the machine's read bandwidth measured here (an
//! f32 sum over a buffer several times larger than the L3 cache).
//!
//! "Cold" numbers (the headline): each timed pass runs the GEMV over enough
//! distinct copies of the matrix to exceed `COLD_BYTES`, so the weights come
//! from DRAM as in LLM decoding. "Hot": the same matrix over and over (it
//! may sit in L2/L3), which shows the kernel's compute ceiling, beside the
//! rate at which a buffer of the matrix's size can be read over and over
//! (the same f32 sum, same threads): where the matrix sits in L3 that rate
//! caps every kernel, ours and ggml's.
//!
//! Then the GEMM table (`Y[M x N] = X[M x K] W^T`, hot): GF/s (`2 M N K`
//! per call) of [`Gemv::gemm`] (the multi-row kernels) against `M`
//! separate GEMVs, M = 1 / 16 / 64 (same bits by construction), per tier
//! and thread count ([`gemm_table`]).
//!
//! `cargo bench -p kernels --bench gemv`. Environment:
//! - `GEMV_BENCH_QUICK=1`: short passes;
//! - `GEMV_BENCH_ISA=avx2`: the tier (default: the best);
//! - `GEMV_BENCH_ONLY_GEMM=1`: only the GEMM table;
//! - `GEMV_BENCH_NO_GEMM=1`: no GEMM table;
//! - `GEMV_BENCH_KERNEL=1`: only the group kernels on L1-resident data
//!   (records `kernel LAYOUT K GBs`);
//! - `GEMV_BENCH_HOT_ONLY=1`: only the hot GEMV cells, no GEMM table;
//! - `GEMV_BENCH_OUTSIDE=1`: each GEMV call enters the rayon pool from the
//!   main thread (default: the timing loop runs on a pool thread, which
//!   makes the calls, as ggml's bench thread is its pool's worker 0);
//! - `GEMV_BENCH_SHAPE=NxK,..`: only those shapes;
//! - `GEMV_BENCH_LAYOUT=A,B`: only the layouts whose name contains one of
//!   the comma-separated strings;
//! - `GEMV_BENCH_THREADS=1,2`: the thread counts (GEMV default 1 and 2,
//!   GEMM default 2);
//! - GEMM table only: `GEMV_BENCH_GEMM_ISAS=scalar,avx2` (default: the
//!   tier), `GEMV_BENCH_M=16,64`, `GEMV_BENCH_CLOCK=thread` (1-thread
//!   cells timed by the thread's CPU time: a loaded machine's waits are
//!   not charged);
//! - `GEMV_BENCH_GGML_PEER=PROG`: for every ggml-layout cell, start
//!   `PROG --serve` (scripts/ggml-bench/ggml_mulmat.c) on the same type
//!   and shape and run the cold passes paired: one of ours, one of ggml's
//!   (first side swapped every pair), each side's best pass kept and the
//!   median ratio of the pairs ([`paired_cold`]);
//! - `GEMV_BENCH_TSV=FILE`: also append every cell to FILE as
//!   tab-separated records, read by `scripts/bench-gemv-vs-ggml`:
//!   `gemv LAYOUT N K THREADS HOT COLD BW HOT_BW [GGML_COLD PAIR_RATIO]`,
//!   `gemm LAYOUT N K M THREADS GEMM_GFs GEMVS_GFs ISA` and
//!   `kernel LAYOUT K GBs`.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use cq4::rng::{fill_gaussian, SplitMix64};
use ggml_quants::quantize_rows;
use kernels::aligned::{Aligned, AlignedBytes};
use kernels::{
    Exec, Gemv, GgmlMatrix, Isa, PanelMatrix, QuantFormat, RotationFamily as Family, RowLayout,
    Workspace,
};
use weights_file::interleave;
use weights_file::panel::{PanelGeometry, RotationRegions};

/// Working set of the cold passes (the reported L3 of the bench machine is
/// 480 MiB; this is over 3x that).
const COLD_BYTES: usize = 1536 << 20;

/// The least time a cell is measured over, whatever its pass count: a hot
/// 2048x2048 pass takes ~50 us, so 200 passes were a 10 ms window, and on
/// this 2-vCPU guest a window that short sometimes ran every pass at the
/// one-thread rate (2-thread cells at exactly their 1-thread GB/s, in ours
/// and ggml's alike; docs/BENCHMARKS.md, session 15).
const MIN_WINDOW: Duration = Duration::from_millis(250);

fn quick() -> bool {
    std::env::var_os("GEMV_BENCH_QUICK").is_some()
}

/// `GEMV_BENCH_OUTSIDE=1`: GEMV calls from outside the thread pool
/// ([`Runner::timed`]).
fn outside() -> bool {
    std::env::var_os("GEMV_BENCH_OUTSIDE").is_some()
}

/// `GEMV_BENCH_HOT_ONLY=1`: hot cells only (no cold copies, no bandwidth
/// probe; the cold and bandwidth columns read 0).
fn hot_only() -> bool {
    std::env::var_os("GEMV_BENCH_HOT_ONLY").is_some()
}

fn gaussian(seed: u64, n: usize) -> Vec<f32> {
    let mut v = vec![0f64; n];
    fill_gaussian(&mut SplitMix64::new(seed), &mut v);
    v.into_iter().map(|x| x as f32).collect()
}

/// Appends one tab-separated record to `$GEMV_BENCH_TSV`, if set.
fn tsv(fields: &[String]) {
    if let Some(path) = std::env::var_os("GEMV_BENCH_TSV") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("GEMV_BENCH_TSV: cannot open");
        writeln!(f, "{}", fields.join("\t")).expect("GEMV_BENCH_TSV: cannot write");
    }
}

/// A pool of `threads` rayon threads (1: run on the caller, not parallel).
struct Runner {
    pool: Option<rayon::ThreadPool>,
}

impl Runner {
    fn new(threads: usize) -> Self {
        Runner {
            pool: (threads > 1).then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
            }),
        }
    }

    fn run<R: Send>(&self, f: impl FnOnce(bool) -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(|| f(true)),
            None => f(false),
        }
    }

    /// A timing loop `f` whose GEMV calls ([`Runner::call`]) are made from
    /// a thread of the pool, as in an engine that runs its decode loop on
    /// its pool (and as ggml's own threadpool runs its graphs with the
    /// calling thread as worker 0); with `GEMV_BENCH_OUTSIDE=1` from the
    /// main thread instead, each call entering the pool anew.
    fn timed<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) if !outside() => p.install(f),
            _ => f(),
        }
    }

    /// One GEMV call inside [`Runner::timed`].
    fn call<R: Send>(&self, f: impl FnOnce(bool) -> R + Send) -> R {
        match &self.pool {
            Some(p) if outside() => p.install(|| f(true)),
            Some(_) => f(true),
            None => f(false),
        }
    }
}

/// Best pass throughput (GB/s) of `pass`, which streams `bytes`: other
/// processes on the machine can only slow a pass down, so the best pass is
/// the least disturbed estimate of what the machine can do.
fn measure(bytes: usize, mut pass: impl FnMut()) -> f64 {
    measure_for(bytes, budget(), &mut pass)
}

/// How long [`measure`] times one cell's passes.
fn budget() -> Duration {
    if quick() {
        Duration::from_millis(300)
    } else {
        Duration::from_millis(1500)
    }
}

/// Whether a timing loop started at `start` takes another pass after `n`:
/// at least 3 passes and [`MIN_WINDOW`], then until `budget` or 200.
fn more_passes(n: usize, start: Instant, budget: Duration) -> bool {
    n < 3 || start.elapsed() < MIN_WINDOW || (start.elapsed() < budget && n < 200)
}

fn measure_for(bytes: usize, budget: Duration, pass: &mut dyn FnMut()) -> f64 {
    let start = Instant::now();
    best_rate(bytes, budget, pass, &|| start.elapsed().as_secs_f64())
}

/// CPU seconds this thread has run (`CLOCK_THREAD_CPUTIME_ID`): time spent
/// waiting for a core is not counted.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + 1e-9 * ts.tv_nsec as f64
}

/// [`measure_for`] timed by this thread's CPU time (for single-threaded
/// passes on a shared machine: a pass preempted by other processes is not
/// charged for the wait; cache and memory interference still count).
fn measure_cpu(bytes: usize, budget: Duration, pass: &mut dyn FnMut()) -> f64 {
    best_rate(bytes, budget, pass, &thread_cpu_seconds)
}

/// The best GB/s of `pass` (which streams `bytes`) with each pass timed by
/// `clock` (seconds): a warm-up (page faults, caches), then at least 3
/// passes and [`MIN_WINDOW`] of wall time, until `budget` or 200 passes.
fn best_rate(
    bytes: usize,
    budget: Duration,
    pass: &mut dyn FnMut(),
    clock: &dyn Fn() -> f64,
) -> f64 {
    pass();
    let start = Instant::now();
    let mut best = 0f64;
    let mut n = 0;
    while more_passes(n, start, budget) {
        let t = clock();
        pass();
        best = best.max(bytes as f64 / (clock() - t) / 1e9);
        n += 1;
    }
    best
}

/// `GEMV_BENCH_CLOCK=thread`: single-threaded GEMM cells are timed by the
/// thread's CPU time ([`measure_cpu`]) instead of the wall clock.
fn thread_clock() -> bool {
    std::env::var("GEMV_BENCH_CLOCK").is_ok_and(|c| c == "thread")
}

/// The read-bandwidth probe: an f32 sum over `COLD_BYTES`, starting on a
/// cache line like the matrices it stands beside ([`Aligned`]): a
/// `Vec<f32>` of this size starts 16 bytes into a page (the allocator's
/// header), and every 64-byte load of the sum then spans two lines, which
/// read 12 - 14 % slower from DRAM at one thread on the Zen 5 guest
/// (session 27; a C sum at offset 0 against 16).
struct Bandwidth {
    buf: Aligned<f32>,
}

impl Bandwidth {
    fn new() -> Self {
        Self::of(COLD_BYTES)
    }

    /// A probe over `bytes` (rounded down to whole f32): with the size of
    /// a matrix, summed over and over, the rate at which the cache level
    /// holding it can be read (the ceiling of that matrix's hot cells).
    fn of(bytes: usize) -> Self {
        let mut buf = Aligned::zeroed(bytes / 4);
        for (i, v) in buf.as_mut_slice().iter_mut().enumerate() {
            *v = (i % 7) as f32;
        }
        Bandwidth { buf }
    }

    /// Best-pass GB/s of the sum with `threads` threads.
    fn measure(&self, runner: &Runner, threads: usize, budget: Duration) -> f64 {
        let buf = self.buf.as_slice();
        let n = buf.len();
        measure_for(n * 4, budget, &mut || {
            let total: f32 = runner.run(|par| {
                if par {
                    use rayon::prelude::*;
                    // (Whole lines per thread: every part starts aligned.)
                    buf.par_chunks(n.div_ceil(threads).next_multiple_of(16))
                        .map(probe_sum)
                        .sum()
                } else {
                    probe_sum(buf)
                }
            });
            black_box(total);
        })
    }
}

/// The probe's sum: 32 independent f32 chains, in the widest vectors of
/// the x86 tiers where the CPU has them (a 128-bit sum falls below the L2
/// and L3 read rates of a recent core; the probe must not be the limit).
fn probe_sum(s: &[f32]) -> f32 {
    #[inline(always)]
    fn body(s: &[f32]) -> f32 {
        let mut acc = [0f32; 32];
        let (chunks, rest) = s.as_chunks::<32>();
        for c in chunks {
            for (a, v) in acc.iter_mut().zip(c) {
                *a += v;
            }
        }
        acc.iter().sum::<f32>() + rest.iter().sum::<f32>()
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(s: &[f32]) -> f32 {
            body(s)
        }
        #[target_feature(enable = "avx512f")]
        fn avx512(s: &[f32]) -> f32 {
            body(s)
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            return unsafe { avx512(s) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected just above.
            return unsafe { avx2(s) };
        }
    }
    body(s)
}

/// ggml's `mul_mat` on the same type and shape in another process
/// (`ggml_mulmat --serve`), one cold pass per request: its copies are set
/// up once, and between requests it waits on its input, idle.
struct GgmlPeer {
    child: std::process::Child,
    to: std::process::ChildStdin,
    from: std::io::BufReader<std::process::ChildStdout>,
    /// Weight bytes of one of its cold passes.
    bytes: f64,
}

impl GgmlPeer {
    /// The peer for `format` at `n x k` on `threads`, if
    /// `GEMV_BENCH_GGML_PEER` names the program.
    fn start(format: QuantFormat, n: usize, k: usize, threads: &[usize]) -> Option<Self> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let prog = std::env::var_os("GEMV_BENCH_GGML_PEER")?;
        let threads = threads
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut child = Command::new(&prog)
            .args(["--serve", "--types", &format.ggml_type().to_string()])
            .args(["--shapes", &format!("{n}x{k}"), "--threads", &threads])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("GEMV_BENCH_GGML_PEER: cannot start");
        let to = child.stdin.take().expect("piped stdin");
        let mut from = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let bytes = loop {
            line.clear();
            if from
                .read_line(&mut line)
                .expect("GEMV_BENCH_GGML_PEER: read")
                == 0
            {
                break None;
            }
            if let Some(b) = line.trim_end().strip_prefix("ready\t") {
                break Some(b.parse().expect("GEMV_BENCH_GGML_PEER: ready BYTES"));
            }
        };
        match bytes {
            Some(bytes) => Some(GgmlPeer {
                child,
                to,
                from,
                bytes,
            }),
            None => {
                let _ = child.wait();
                panic!("GEMV_BENCH_GGML_PEER: ended before it was ready");
            }
        }
    }

    /// Seconds of one cold pass on `threads` threads.
    fn cold_pass(&mut self, threads: usize) -> f64 {
        use std::io::BufRead;
        writeln!(self.to, "cold {threads}").expect("GEMV_BENCH_GGML_PEER: write");
        self.to.flush().expect("GEMV_BENCH_GGML_PEER: write");
        let mut line = String::new();
        self.from
            .read_line(&mut line)
            .expect("GEMV_BENCH_GGML_PEER: read");
        line.trim().parse().expect("GEMV_BENCH_GGML_PEER: seconds")
    }
}

impl Drop for GgmlPeer {
    fn drop(&mut self) {
        let _ = writeln!(self.to, "quit");
        let _ = self.to.flush();
        let _ = self.child.wait();
    }
}

/// Cold GB/s of ours (`pass` streams `bytes`) and of `peer` on `threads`
/// threads, their passes alternating (ours first in even pairs, ggml's in
/// odd ones): each side's best pass, and the median over the pairs of
/// ours / ggml's (each pair's two passes ran within ~0.1 s of each other,
/// so the median shows the ratio across the host's rates in the window,
/// where the best passes show it at the fastest). A warm-up of each, then
/// pairs as [`more_passes`] says, over twice [`measure`]'s budget (two
/// sides). After each of our passes the bench sleeps 2 ms (as the peer
/// does after each of its own) so neither side's idle pool threads spin
/// into the other's pass.
fn paired_cold(
    bytes: usize,
    pass: &mut dyn FnMut(),
    peer: &mut GgmlPeer,
    threads: usize,
) -> PairedCold {
    let budget = 2 * budget();
    let pause = Duration::from_millis(2);
    let mut ours = || {
        let t = Instant::now();
        pass();
        let s = t.elapsed().as_secs_f64();
        std::thread::sleep(pause);
        bytes as f64 / s / 1e9
    };
    ours();
    peer.cold_pass(threads);
    let start = Instant::now();
    let (mut best_ours, mut best_ggml) = (0f64, 0f64);
    let mut ratios = Vec::new();
    let mut n = 0;
    while more_passes(n, start, budget) {
        let mut theirs = || peer.bytes / peer.cold_pass(threads) / 1e9;
        let (a, b) = if n % 2 == 0 {
            let a = ours();
            (a, theirs())
        } else {
            let b = theirs();
            (ours(), b)
        };
        best_ours = best_ours.max(a);
        best_ggml = best_ggml.max(b);
        ratios.push(a / b);
        n += 1;
    }
    ratios.sort_by(f64::total_cmp);
    let m = ratios.len();
    PairedCold {
        ours: best_ours,
        ggml: best_ggml,
        median_ratio: (ratios[(m - 1) / 2] + ratios[m / 2]) / 2.0,
    }
}

/// What [`paired_cold`] measured.
struct PairedCold {
    /// Our best cold pass, GB/s.
    ours: f64,
    /// ggml's best cold pass in the same window, GB/s.
    ggml: f64,
    /// The median over the pairs of ours / ggml's.
    median_ratio: f64,
}

/// One cell: hot and cold GEMV GB/s, the read bandwidth measured right
/// before and after the cold run with the same thread count (best of
/// both), and the hot read rate of a buffer of the matrix's size
/// ([`Bandwidth::of`], right after the hot run); with a peer, ggml's cold
/// GB/s measured in the same window ([`paired_cold`]).
#[derive(Clone, Copy)]
struct Cell {
    hot: f64,
    cold: f64,
    bw: f64,
    hot_bw: f64,
    /// With a peer: ggml's best cold pass in the same window and the
    /// median pair ratio ([`PairedCold`]).
    ggml_cold: Option<(f64, f64)>,
}

/// Plain ggml bytes of an `n x k` matrix: 64 quantized Gaussian rows tiled.
fn ggml_bytes(format: QuantFormat, n: usize, k: usize) -> Vec<u8> {
    let ty = format.ggml_type();
    let rb = k / ty.block_size() * ty.type_size();
    let rows = 64.min(n);
    let w: Vec<f32> = gaussian(1, rows * k).iter().map(|v| v * 0.05).collect();
    let mut tile = vec![0u8; rows * rb];
    quantize_rows(ty, &w, k, &mut tile).unwrap();
    let mut out = Vec::with_capacity(n * rb);
    while out.len() < n * rb {
        let take = (n * rb - out.len()).min(tile.len());
        out.extend_from_slice(&tile[..take]);
    }
    out
}

/// A synthetic panel tensor (random indices, plausible norms, the real
/// Hadamard parameters / an arbitrary fp16 R): (scales blob, panels).
fn panel_bytes(family: Family, n: usize, kp: usize) -> (Vec<u8>, Vec<u8>) {
    let g = PanelGeometry::new(n, kp, 128).unwrap();
    let l = g.scales_layout(family);
    let bundle = cq4::Bundle::new(cq4::DEFAULT_SEED);
    let enc = bundle.encoder(Family::Hadamard, 64, 128).unwrap();
    let mut blob = vec![0u8; l.scales_bytes];
    for (i, b) in enc.stored_codebook().iter().enumerate() {
        blob[l.codebook.offset + 2 * i..][..2].copy_from_slice(&b.to_le_bytes());
    }
    for r in [l.input_scale, l.recip] {
        for c in blob[r.range()].chunks_exact_mut(2) {
            c.copy_from_slice(&0x3C00u16.to_le_bytes());
        }
    }
    for c in blob[l.norms.range()].chunks_exact_mut(2) {
        c.copy_from_slice(&0x2000u16.to_le_bytes());
    }
    for c in blob[l.folded.range()].chunks_exact_mut(4) {
        c.copy_from_slice(&0.0078125f32.to_le_bytes());
    }
    match l.rotation {
        RotationRegions::Hadamard { left, right, perm } => {
            let h = bundle.hadamard();
            for i in 0..128 {
                blob[left.offset + i] = h.left[i] as u8;
                blob[right.offset + i] = h.right[i] as u8;
                blob[perm.offset + 4 * i..][..4].copy_from_slice(&h.perm[i].to_le_bytes());
            }
        }
        RotationRegions::Orthogonal { r, r_t } => {
            let mut rng = SplitMix64::new(3);
            for reg in [r, r_t] {
                for c in blob[reg.range()].chunks_exact_mut(2) {
                    // small random fp16 values
                    let h = 0x2000u16 | (rng.next_u64() as u16 & 0x83FF);
                    c.copy_from_slice(&h.to_le_bytes());
                }
            }
        }
    }
    let mut rng = SplitMix64::new(4);
    let panels: Vec<u8> = (0..g.data_bytes())
        .map(|_| (rng.next_u64() >> 32) as u8)
        .collect();
    (blob, panels)
}

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Panel(Family),
    Ggml(QuantFormat, RowLayout),
}

impl Layout {
    fn name(self) -> String {
        match self {
            Layout::Panel(Family::Hadamard) => "CQ4 panels (Hadamard)".into(),
            Layout::Panel(Family::Orthogonal) => "CQ4 panels (orthogonal)".into(),
            Layout::Ggml(f, l) => format!("{} {}", f.ggml_type(), l.name()),
        }
    }
}

/// One [`Cell`] per thread count for `layout` at `n x k`, or `None` when the
/// shape does not fit the format.
fn bench_case(
    bwp: &Bandwidth,
    layout: Layout,
    n: usize,
    k: usize,
    isa: Isa,
    threads: &[usize],
) -> Option<Vec<Cell>> {
    // Each copy is a whole tensor: data (and for CQ4 its own scales blob,
    // whose folded norms the kernel streams too).
    let mut storage: Vec<(Vec<u8>, AlignedBytes)> = Vec::new();
    let mut peer = None;
    match layout {
        Layout::Ggml(f, l) => {
            if !k.is_multiple_of(f.block_weights()) {
                return None;
            }
            let plain = ggml_bytes(f, n, k);
            let data = match l {
                RowLayout::RowMajor => plain,
                RowLayout::Interleaved(fac) => {
                    let bb = f.block_bytes();
                    let mut out = vec![0u8; plain.len()];
                    interleave::repack(&plain, n, plain.len() / n, bb, fac, &mut out).unwrap();
                    out
                }
            };
            let copies = if hot_only() {
                1
            } else {
                peer = GgmlPeer::start(f, n, k, threads);
                COLD_BYTES.div_ceil(data.len()).max(2)
            };
            for _ in 0..copies {
                storage.push((Vec::new(), AlignedBytes::copy_of(&data)));
            }
        }
        Layout::Panel(fam) => {
            // The orthogonal family serves token embeddings and lm_head
            // (N = vocabulary >> K): its activation transform costs K^2 per
            // call, which only pays off there.
            if !k.is_multiple_of(128) || (fam == Family::Orthogonal && n < 16 * k) {
                return None;
            }
            let (b, panels) = panel_bytes(fam, n, k);
            let copies = if hot_only() {
                1
            } else {
                COLD_BYTES.div_ceil(panels.len() + b.len()).max(2)
            };
            for _ in 0..copies {
                storage.push((b.clone(), AlignedBytes::copy_of(&panels)));
            }
        }
    }
    let mats: Vec<Box<dyn Gemv + '_>> = storage
        .iter()
        .map(|(blob, d)| -> Box<dyn Gemv> {
            match layout {
                Layout::Ggml(f, l) => Box::new(GgmlMatrix::new(f, l, n, k, d.as_slice()).unwrap()),
                Layout::Panel(fam) => Box::new(PanelMatrix::new(
                    kernels::PanelView::parse(fam, n, k, blob, d.as_slice()).unwrap(),
                )),
            }
        })
        .collect();
    let x = gaussian(9, k);
    let mut y = vec![0f32; n];
    let mut ws = Workspace::new();
    let bytes = mats[0].weight_bytes();
    let hot_probe = Bandwidth::of(bytes);
    let short = Duration::from_millis(if quick() { 200 } else { 600 });
    let mut out = Vec::new();
    for &t in threads {
        let runner = Runner::new(t);
        let one = |m: &dyn Gemv, y: &mut Vec<f32>, ws: &mut Workspace| {
            runner.call(|par| m.gemv(&x, y, ws, Exec::new(isa, par)).unwrap());
            black_box(&y);
        };
        let hot = runner.timed(|| measure(bytes, || one(mats[0].as_ref(), &mut y, &mut ws)));
        let hot_bw = hot_probe.measure(&runner, t, short);
        if hot_only() {
            out.push(Cell {
                hot,
                cold: 0.0,
                bw: 0.0,
                hot_bw,
                ggml_cold: None,
            });
            continue;
        }
        let before = bwp.measure(&runner, t, short);
        let mut cold_pass = || {
            for m in &mats {
                one(m.as_ref(), &mut y, &mut ws);
            }
        };
        let (cold, ggml_cold) = match peer.as_mut() {
            Some(p) => {
                let c = runner.timed(|| paired_cold(bytes * mats.len(), &mut cold_pass, p, t));
                (c.ours, Some((c.ggml, c.median_ratio)))
            }
            None => (
                runner.timed(|| measure(bytes * mats.len(), &mut cold_pass)),
                None,
            ),
        };
        let after = bwp.measure(&runner, t, short);
        out.push(Cell {
            hot,
            cold,
            bw: before.max(after),
            hot_bw,
            ggml_cold,
        });
    }
    Some(out)
}

/// `GEMV_BENCH_SHAPE=NxK[,NxK..]` if set (any N, K), else `default`.
fn shapes_from_env(default: &[(usize, usize)]) -> Vec<(usize, usize)> {
    std::env::var("GEMV_BENCH_SHAPE")
        .ok()
        .and_then(|f| {
            f.split(',')
                .map(|s| {
                    let (n, k) = s.split_once('x')?;
                    Some((n.parse().ok()?, k.parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()
        })
        .unwrap_or_else(|| default.to_vec())
}

/// Whether `GEMV_BENCH_LAYOUT` (comma-separated parts of layout names)
/// selects `layout` (everything when unset).
fn layout_wanted(layout: Layout) -> bool {
    std::env::var("GEMV_BENCH_LAYOUT")
        .ok()
        .is_none_or(|f| f.split(',').any(|p| layout.name().contains(p)))
}

fn main() {
    // Ignore the arguments cargo passes (`--bench`).
    let isa = std::env::var("GEMV_BENCH_ISA")
        .ok()
        .and_then(|s| Isa::from_name(&s))
        .filter(|i| i.is_available())
        .unwrap_or_else(kernels::best);
    if std::env::var_os("GEMV_BENCH_ONLY_GEMM").is_some() {
        gemm_table(isa);
        return;
    }
    if std::env::var_os("GEMV_BENCH_KERNEL").is_some() {
        kernel_table(isa);
        return;
    }
    let threads: Vec<usize> = match std::env::var("GEMV_BENCH_THREADS") {
        Ok(s) => s
            .split(',')
            .map(|t| t.parse().expect("GEMV_BENCH_THREADS"))
            .collect(),
        Err(_) => vec![1, 2],
    };
    let bwp = if hot_only() {
        Bandwidth::of(0)
    } else {
        Bandwidth::new()
    };
    let bw: Vec<f64> = threads
        .iter()
        .map(|&t| {
            if hot_only() {
                0.0
            } else {
                bwp.measure(&Runner::new(t), t, Duration::from_millis(1500))
            }
        })
        .collect();
    println!("ISA: {isa}; available: {:?}", kernels::available());
    #[cfg(target_arch = "x86_64")]
    println!(
        "R8 prefetch: {:?} (KERNELS_R8_PREFETCH=l1|l2 overrides); plain rows and R4: {:?} \
         (KERNELS_ROW_PREFETCH=linear|rows overrides)",
        kernels::x86::r8_prefetch(),
        kernels::x86::row_prefetch()
    );
    let per_thread = |v: &mut dyn Iterator<Item = f64>| -> String {
        v.map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" / ")
    };
    let thread_names = threads
        .iter()
        .map(|t| format!("{t} thr"))
        .collect::<Vec<_>>()
        .join(" / ");
    println!(
        "read bandwidth (f32 sum over {} MiB) at start, {thread_names}: {} GB/s",
        COLD_BYTES >> 20,
        per_thread(&mut bw.iter().copied())
    );
    let shapes = shapes_from_env(&[(2048, 2048), (8192, 2048), (2048, 8192), (262144, 640)]);
    let mut layouts = vec![
        Layout::Panel(Family::Hadamard),
        Layout::Panel(Family::Orthogonal),
    ];
    for f in [
        QuantFormat::Q8_0,
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q4K,
        QuantFormat::Q6K,
        QuantFormat::Q2K,
        QuantFormat::Q3K,
    ] {
        layouts.push(Layout::Ggml(f, RowLayout::RowMajor));
        layouts.push(Layout::Ggml(f, RowLayout::Interleaved(4)));
        layouts.push(Layout::Ggml(f, RowLayout::Interleaved(8)));
    }
    type Cells = Vec<Option<Vec<Cell>>>;
    let mut rows: Vec<(String, Cells)> = Vec::new();
    for layout in layouts {
        if !layout_wanted(layout) {
            continue;
        }
        let cells: Cells = shapes
            .iter()
            .map(|&(n, k)| {
                let c = bench_case(&bwp, layout, n, k, isa, &threads);
                for (t, r) in threads.iter().zip(c.iter().flatten()) {
                    let mut rec = vec![
                        "gemv".into(),
                        layout.name(),
                        n.to_string(),
                        k.to_string(),
                        t.to_string(),
                        format!("{:.2}", r.hot),
                        format!("{:.2}", r.cold),
                        format!("{:.2}", r.bw),
                        format!("{:.2}", r.hot_bw),
                    ];
                    if let Some((g, m)) = r.ggml_cold {
                        rec.extend([format!("{g:.2}"), format!("{m:.3}")]);
                    }
                    tsv(&rec);
                }
                c
            })
            .collect();
        eprintln!("done: {}", layout.name());
        rows.push((layout.name(), cells));
    }
    let header = |title: &str| {
        println!();
        println!("{title}");
        println!();
        print!("| layout |");
        for (n, k) in &shapes {
            print!(" {n}x{k} |");
        }
        println!();
        print!("|---|");
        for _ in &shapes {
            print!("---|");
        }
        println!();
    };
    if !hot_only() {
        header(&format!(
            "cold GB/s of weight bytes: {thread_names}, the read bandwidth with the most \
             threads measured right before/after that run, and that GEMV as % of it"
        ));
        for (name, cells) in &rows {
            print!("| {name} |");
            for c in cells {
                match c {
                    None => print!(" - |"),
                    Some(r) => {
                        let last = r[r.len() - 1];
                        print!(
                            " {} of {:.1} ({:.0}%) |",
                            per_thread(&mut r.iter().map(|c| c.cold)),
                            last.bw,
                            100.0 * last.cold / last.bw
                        );
                    }
                }
            }
            println!();
        }
    }
    header(&format!(
        "hot GB/s (the same matrix over and over): {thread_names}, [the read rate of \
         a buffer of the matrix's size summed over and over, same threads]"
    ));
    for (name, cells) in &rows {
        print!("| {name} |");
        for c in cells {
            match c {
                None => print!(" - |"),
                Some(r) => print!(
                    " {} [{}] |",
                    per_thread(&mut r.iter().map(|c| c.hot)),
                    per_thread(&mut r.iter().map(|c| c.hot_bw))
                ),
            }
        }
        println!();
    }
    if hot_only() || std::env::var_os("GEMV_BENCH_NO_GEMM").is_some() {
        return;
    }
    gemm_table(isa);
}

/// A comma-separated list from the environment variable `var`, each item
/// parsed, or `default` when it is unset (or does not parse).
fn list_env<T: std::str::FromStr>(var: &str, default: Vec<T>) -> Vec<T> {
    std::env::var(var)
        .ok()
        .and_then(|v| v.split(',').map(|m| m.trim().parse().ok()).collect())
        .unwrap_or(default)
}

/// The GEMM table: GF/s (`2 M N K` per call) of `Gemv::gemm` and of `M`
/// separate GEMVs (the GEMV path), hot, per tier (`GEMV_BENCH_GEMM_ISAS`,
/// default: the bench's tier), thread count (`GEMV_BENCH_THREADS`, default
/// 2), shape (`GEMV_BENCH_SHAPE`, default the engine's 1024x1024 and the
/// issue's 2048x2048, 8192x2048, 2048x8192) and `M` (`GEMV_BENCH_M`,
/// default 1, 16, 64). One-thread cells are timed by the thread's CPU
/// clock with `GEMV_BENCH_CLOCK=thread`.
fn gemm_table(isa: Isa) {
    let isas: Vec<Isa> = list_env::<String>("GEMV_BENCH_GEMM_ISAS", vec![isa.name().into()])
        .iter()
        .filter_map(|n| Isa::from_name(n))
        .filter(|i| i.is_available())
        .collect();
    let threads: Vec<usize> = list_env("GEMV_BENCH_THREADS", vec![2]);
    let shapes = shapes_from_env(&[(1024, 1024), (2048, 2048), (8192, 2048), (2048, 8192)]);
    let ms: Vec<usize> = list_env("GEMV_BENCH_M", vec![1, 16, 64]);
    let clock = if thread_clock() {
        "1-thread cells by thread CPU time"
    } else {
        "wall clock"
    };
    println!();
    println!(
        "GEMM GF/s (2 M N K per call), hot, best pass ({clock}): Gemv::gemm / M separate GEMVs"
    );
    println!();
    print!("| layout | tier | threads | NxK |");
    for m in &ms {
        print!(" M={m} |");
    }
    println!();
    println!("|---|---|---|---|{}", "---|".repeat(ms.len()));
    let layouts: Vec<Layout> = [
        Layout::Panel(Family::Hadamard),
        Layout::Ggml(QuantFormat::Q8_0, RowLayout::Interleaved(8)),
        Layout::Ggml(QuantFormat::Q4_0, RowLayout::Interleaved(8)),
        Layout::Ggml(QuantFormat::Q4_0, RowLayout::RowMajor),
        Layout::Ggml(QuantFormat::Q4K, RowLayout::Interleaved(8)),
        Layout::Ggml(QuantFormat::Q4K, RowLayout::RowMajor),
        Layout::Ggml(QuantFormat::Q6K, RowLayout::Interleaved(8)),
    ]
    .into_iter()
    .filter(|l| layout_wanted(*l))
    .collect();
    for layout in layouts {
        for &(n, k) in &shapes {
            let Some((blob, data)) = gemm_matrix_bytes(layout, n, k) else {
                continue;
            };
            let mat: Box<dyn Gemv> = match layout {
                Layout::Ggml(f, l) => {
                    Box::new(GgmlMatrix::new(f, l, n, k, data.as_slice()).unwrap())
                }
                Layout::Panel(fam) => Box::new(PanelMatrix::new(
                    kernels::PanelView::parse(fam, n, k, &blob, data.as_slice()).unwrap(),
                )),
            };
            for &tier in &isas {
                for &t in &threads {
                    gemm_row(mat.as_ref(), layout, tier, t, &ms);
                }
            }
        }
    }
}

/// `GEMV_BENCH_KERNEL=1`: the group kernels alone, on one 8-row group of
/// K = 2048 (plain and R8; 9 - 17 KiB, L1/L2-resident), called over and
/// over on one thread: GB/s of weight bytes and core-clock-free ns per
/// 8-row block step, the compute ceiling without the driver, the
/// activation quantization or memory.
fn kernel_table(isa: Isa) {
    use kernels::act::{quantize_q8_0, quantize_q8_k, ActQ8_0, BlockQ8K};
    let k = 2048;
    let x = gaussian(5, k);
    let mut a0 = vec![ActQ8_0::default(); k / 32];
    let mut ak = vec![BlockQ8K::default(); k / 256];
    quantize_q8_0(&x, &mut a0).unwrap();
    quantize_q8_k(&x, &mut ak).unwrap();
    let kern = kernels::dispatch::kernels(isa).unwrap();
    // The tier's other table too (avx2: 256-bit vs 128-bit halves; avx512:
    // without vs with GFNI), printed only: the records are of the table this CPU runs.
    let other: Option<&kernels::dispatch::Kernels> = match isa {
        Isa::Avx2 => kernels::dispatch::avx2_variants()
            .into_iter()
            .find(|t| !std::ptr::eq(*t, kern)),
        Isa::Avx512 => kernels::dispatch::avx512_variants()
            .into_iter()
            .find(|t| !std::ptr::eq(*t, kern)),
        _ => None,
    };
    let filter = std::env::var("GEMV_BENCH_LAYOUT").ok();
    println!("kernel only, {isa}, 8 rows x K = {k}, GB/s (ns per 8-row block step)");
    for f in [
        QuantFormat::Q8_0,
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q4K,
        QuantFormat::Q6K,
    ] {
        for l in [RowLayout::RowMajor, RowLayout::Interleaved(8)] {
            let name = Layout::Ggml(f, l).name();
            if filter
                .as_ref()
                .is_some_and(|fl| !fl.split(',').any(|p| name.contains(p)))
            {
                continue;
            }
            let plain = ggml_bytes(f, 8, k);
            let data = match l {
                RowLayout::RowMajor => plain.clone(),
                RowLayout::Interleaved(fac) => {
                    let mut out = vec![0u8; plain.len()];
                    interleave::repack(&plain, 8, plain.len() / 8, f.block_bytes(), fac, &mut out)
                        .unwrap();
                    out
                }
            };
            let data = AlignedBytes::copy_of(&data);
            let m = GgmlMatrix::new(f, l, 8, k, data.as_slice()).unwrap();
            let g = m.group_at(0);
            let mut out = [0f32; 8];
            let reps = 64;
            let time = |k: &kernels::dispatch::Kernels, out: &mut [f32; 8]| {
                measure(data.as_slice().len() * reps, || {
                    for _ in 0..reps {
                        match f {
                            QuantFormat::Q8_0 => k.q8_0_group(&g, &a0, out),
                            QuantFormat::Q4_0 => k.q4_0_group(&g, &a0, out),
                            QuantFormat::Q4_1 => k.q4_1_group(&g, &a0, out),
                            QuantFormat::Q4K => k.q4_k_group(&g, &ak, out),
                            _ => k.q6_k_group(&g, &ak, out),
                        }
                        black_box(&out);
                    }
                })
            };
            let rate = time(kern, &mut out);
            let alt = other.map(|o| time(o, &mut out));
            let steps = m.blocks_per_row() as f64;
            let ns = data.as_slice().len() as f64 / rate / steps;
            match alt {
                Some(a) => {
                    println!("| {name} | {rate:.1} ({ns:.1} ns) | the other {isa} table: {a:.1} |")
                }
                None => println!("| {name} | {rate:.1} ({ns:.1} ns) |"),
            }
            tsv(&["kernel".into(), name, k.to_string(), format!("{rate:.2}")]);
        }
    }
}

/// The bytes of an `n x k` matrix in `layout` for the GEMM table: (scales
/// blob, data), or `None` when the shape does not fit the format.
fn gemm_matrix_bytes(layout: Layout, n: usize, k: usize) -> Option<(Vec<u8>, AlignedBytes)> {
    match layout {
        Layout::Panel(fam) => {
            if !k.is_multiple_of(128) {
                return None;
            }
            let (b, p) = panel_bytes(fam, n, k);
            Some((b, AlignedBytes::copy_of(&p)))
        }
        Layout::Ggml(f, l) => {
            if !k.is_multiple_of(f.block_weights()) {
                return None;
            }
            let plain = ggml_bytes(f, n, k);
            let d = match l {
                RowLayout::RowMajor => plain,
                RowLayout::Interleaved(fac) => {
                    let mut out = vec![0u8; plain.len()];
                    interleave::repack(&plain, n, plain.len() / n, f.block_bytes(), fac, &mut out)
                        .unwrap();
                    out
                }
            };
            Some((Vec::new(), AlignedBytes::copy_of(&d)))
        }
    }
}

/// One row of the GEMM table: every `M` of `ms` on `isa` with `threads`.
fn gemm_row(mat: &dyn Gemv, layout: Layout, isa: Isa, threads: usize, ms: &[usize]) {
    let (n, k) = (mat.rows(), mat.cols());
    let runner = Runner::new(threads);
    print!("| {} | {isa} | {threads} | {n}x{k} |", layout.name());
    for &m in ms {
        let x = gaussian(11, m * k);
        let mut y = vec![0f32; m * n];
        let mut ws = Workspace::new();
        let flops = 2 * m * n * k;
        // `measure_*` report "GB/s" of the unit count given: given flops,
        // they report GF/s.
        let timer = |units: usize, pass: &mut dyn FnMut()| {
            let budget = Duration::from_millis(if quick() { 300 } else { 1500 });
            if threads == 1 && thread_clock() {
                measure_cpu(units, budget, pass)
            } else {
                measure_for(units, budget, pass)
            }
        };
        let gemm = timer(flops, &mut || {
            runner.run(|par| {
                mat.gemm(m, &x, &mut y, &mut ws, Exec::new(isa, par))
                    .unwrap()
            });
            black_box(&y);
        });
        let gemvs = timer(flops, &mut || {
            runner.run(|par| {
                for (xr, yr) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
                    mat.gemv(xr, yr, &mut ws, Exec::new(isa, par)).unwrap();
                }
            });
            black_box(&y);
        });
        print!(" {gemm:.1} / {gemvs:.1} |");
        tsv(&[
            "gemm".into(),
            layout.name(),
            n.to_string(),
            k.to_string(),
            m.to_string(),
            threads.to_string(),
            format!("{gemm:.2}"),
            format!("{gemvs:.2}"),
            isa.name().into(),
        ]);
    }
    println!();
}
