//! The kernel tables of every tier this build has, and how a GEMV runs
//! ([`Exec`]). ISA detection and the `CONVERT_FORCE_ISA` cap are in
//! [`crate::isa`] (re-exported here).

use crate::error::KernelError;
pub use crate::isa::{available, best, force_error, forced, Isa, ALL_ISAS, FORCE_ENV};
pub use crate::table::{
    GemmKernels, GroupFn, GroupGemmFn, Kernels, PanelFn, PanelGemmFn, RotateFn,
};

/// How to run a GEMV: which tier, and whether to split rows over the
/// current rayon pool (results never depend on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exec {
    /// The kernel tier.
    pub isa: Isa,
    /// Split output rows into tasks on the current rayon pool.
    pub parallel: bool,
}

impl Exec {
    /// `isa`, parallel or not.
    pub fn new(isa: Isa, parallel: bool) -> Self {
        Exec { isa, parallel }
    }

    /// The fastest usable tier, parallel.
    pub fn best() -> Self {
        Exec::new(best(), true)
    }
}

/// Rows per parallel task: a multiple of `unit`, about 4 tasks per rayon
/// thread (all rows in one task when not parallel).
pub(crate) fn rows_per_task(n: usize, unit: usize, parallel: bool) -> usize {
    if !parallel {
        return n.max(1);
    }
    let tasks = 4 * rayon::current_num_threads();
    n.div_ceil(tasks).div_ceil(unit).max(1) * unit
}

/// Run `task(first_row, rows)` over `y` split into chunks of a multiple of
/// `unit` rows ([`rows_per_task`]), in parallel when `exec.parallel`. A
/// row's value never depends on the split.
pub(crate) fn split_rows(
    y: &mut [f32],
    unit: usize,
    exec: Exec,
    task: impl Fn(usize, &mut [f32]) + Sync,
) {
    use rayon::prelude::*;
    let per_task = rows_per_task(y.len(), unit, exec.parallel);
    if per_task >= y.len() {
        task(0, y);
    } else {
        y.par_chunks_mut(per_task)
            .enumerate()
            .for_each(|(t, ys)| task(t * per_task, ys));
    }
}

static SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    q8_0: crate::scalar::q8_0_group,
    q4_0: crate::scalar::q4_0_group,
    q4_1: crate::scalar::q4_1_group,
    q5_0: crate::scalar::q5_0_group,
    q5_1: crate::scalar::q5_1_group,
    q4_k: crate::scalar::q4_k_group,
    q5_k: crate::scalar::q5_k_group,
    q6_k: crate::scalar::q6_k_group,
    q2_k: crate::scalar::q2_k_group,
    q3_k: crate::scalar::q3_k_group,
    iq4_nl: crate::scalar::iq4_nl_group,
    iq4_xs: crate::scalar::iq4_xs_group,
    cq4: crate::scalar::cq4_superblock,
    rotate: crate::scalar::orthogonal_rotate,
    gemm: GemmKernels::NONE,
};

#[cfg(target_arch = "x86_64")]
const AVX2_TABLE: Kernels = Kernels {
    isa: Isa::Avx2,
    q8_0: crate::x86::avx2::q8_0_group,
    q4_0: crate::x86::avx2::q4_0_group,
    q4_1: crate::x86::avx2::q4_1_group,
    q5_0: crate::x86::avx2::q5_0_group,
    q5_1: crate::x86::avx2::q5_1_group,
    q4_k: crate::x86::avx2::q4_k_group,
    q5_k: crate::x86::avx2::q5_k_group,
    q6_k: crate::x86::avx2::q6_k_group,
    q2_k: crate::x86::avx2::q2_k_group,
    q3_k: crate::x86::avx2::q3_k_group,
    iq4_nl: crate::x86::avx2::iq4_nl_group,
    iq4_xs: crate::x86::avx2::iq4_xs_group,
    cq4: crate::x86::avx2::cq4_superblock,
    rotate: crate::x86::avx2::orthogonal_rotate,
    gemm: GemmKernels {
        q8_0: Some(crate::x86::avx2_gemm::q8_0_gemm),
        q4_0: Some(crate::x86::avx2_gemm::q4_0_gemm),
        q4_1: Some(crate::x86::avx2_gemm::q4_1_gemm),
        q5_0: Some(crate::x86::avx2_gemm::q5_0_gemm),
        q5_1: Some(crate::x86::avx2_gemm::q5_1_gemm),
        q4_k: Some(crate::x86::avx2_gemm::q4_k_gemm),
        q5_k: Some(crate::x86::avx2_gemm::q5_k_gemm),
        q6_k: Some(crate::x86::avx2_gemm::q6_k_gemm),
        q2_k: Some(crate::x86::avx2_gemm::q2_k_gemm),
        q3_k: Some(crate::x86::avx2_gemm::q3_k_gemm),
        iq4_nl: Some(crate::x86::avx2_gemm::iq4_nl_gemm),
        iq4_xs: Some(crate::x86::avx2_gemm::iq4_xs_gemm),
        cq4: Some(crate::x86::avx2_gemm::cq4_superblock_gemm),
    },
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernels = AVX2_TABLE;

/// The `avx2` tier on CPUs that split 256-bit operations
/// ([`crate::x86::halves`]): the same table with the 128-bit variants.
#[cfg(target_arch = "x86_64")]
static AVX2_HALVES: Kernels = Kernels {
    q8_0: crate::x86::avx2::q8_0_group_h,
    q4_k: crate::x86::avx2::q4_k_group_h,
    q6_k: crate::x86::avx2::q6_k_group_h,
    ..AVX2_TABLE
};

#[cfg(all(target_arch = "x86_64", kernels_avx512))]
const AVX512_TABLE: Kernels = Kernels {
    isa: Isa::Avx512,
    q8_0: crate::x86::avx512::q8_0_group,
    q4_0: crate::x86::avx512::q4_0_group,
    q4_1: crate::x86::avx512::q4_1_group,
    q5_0: crate::x86::avx512::q5_0_group,
    q5_1: crate::x86::avx512::q5_1_group,
    q4_k: crate::x86::avx512::q4_k_group,
    q5_k: crate::x86::avx512::q5_k_group,
    q6_k: crate::x86::avx512::q6_k_group,
    q2_k: crate::x86::avx512::q2_k_group,
    q3_k: crate::x86::avx512::q3_k_group,
    iq4_nl: crate::x86::avx512::iq4_nl_group,
    iq4_xs: crate::x86::avx512::iq4_xs_group,
    cq4: crate::x86::avx512::cq4_superblock,
    rotate: crate::x86::avx512::orthogonal_rotate,
    // Q4_0, Q4_K, Q6_K: the `avx2` multi-row kernels (the tier is only
    // available where AVX2 and F16C are; every tier gives the same bits),
    // 1.05 - 1.49x this tier's GEMV per row on the AVX-512 Xeon of
    // BENCHMARKS.md session 18; Q8_0 measured level, the others not yet.
    gemm: GemmKernels {
        q4_0: AVX2_TABLE.gemm.q4_0,
        q4_k: AVX2_TABLE.gemm.q4_k,
        q6_k: AVX2_TABLE.gemm.q6_k,
        cq4: Some(crate::x86::avx512_gemm::cq4_superblock_gemm),
        ..GemmKernels::NONE
    },
};

#[cfg(all(target_arch = "x86_64", kernels_avx512))]
static AVX512: Kernels = AVX512_TABLE;

/// The `avx512` tier on CPUs that also have GFNI: the same table with the
/// Q6_K kernel that assembles its values with affine byte transforms.
#[cfg(all(target_arch = "x86_64", kernels_avx512))]
static AVX512_GFNI: Kernels = Kernels {
    q6_k: crate::x86::avx512::q6_k_group_gfni,
    ..AVX512_TABLE
};

#[cfg(target_arch = "aarch64")]
const NEON_TABLE: Kernels = Kernels {
    isa: Isa::Neon,
    q8_0: crate::aarch64::neon::q8_0_group,
    q4_0: crate::aarch64::neon::q4_0_group,
    q4_1: crate::aarch64::neon::q4_1_group,
    q5_0: crate::aarch64::neon::q5_0_group,
    q5_1: crate::aarch64::neon::q5_1_group,
    q4_k: crate::aarch64::neon::q4_k_group,
    q5_k: crate::aarch64::neon::q5_k_group,
    q6_k: crate::aarch64::neon::q6_k_group,
    q2_k: crate::aarch64::neon::q2_k_group,
    q3_k: crate::aarch64::neon::q3_k_group,
    iq4_nl: crate::aarch64::neon::iq4_nl_group,
    iq4_xs: crate::aarch64::neon::iq4_xs_group,
    cq4: crate::aarch64::neon::cq4_superblock,
    rotate: crate::aarch64::neon::orthogonal_rotate,
    gemm: GemmKernels {
        q8_0: Some(crate::aarch64::neon_gemm::q8_0_gemm),
        q4_0: Some(crate::aarch64::neon_gemm::q4_0_gemm),
        q4_1: Some(crate::aarch64::neon_gemm::q4_1_gemm),
        q5_0: Some(crate::aarch64::neon_gemm::q5_0_gemm),
        q5_1: Some(crate::aarch64::neon_gemm::q5_1_gemm),
        q4_k: Some(crate::aarch64::neon_gemm::q4_k_gemm),
        q5_k: Some(crate::aarch64::neon_gemm::q5_k_gemm),
        q6_k: Some(crate::aarch64::neon_gemm::q6_k_gemm),
        q2_k: Some(crate::aarch64::neon_gemm::q2_k_gemm),
        q3_k: Some(crate::aarch64::neon_gemm::q3_k_gemm),
        iq4_nl: Some(crate::aarch64::neon_gemm::iq4_nl_gemm),
        iq4_xs: Some(crate::aarch64::neon_gemm::iq4_xs_gemm),
        cq4: Some(crate::aarch64::neon_gemm::cq4_superblock_gemm),
    },
};

#[cfg(target_arch = "aarch64")]
static NEON: Kernels = NEON_TABLE;

/// The `sme2` tier: the SME2 panel kernel, NEON for the rest.
#[cfg(target_arch = "aarch64")]
static SME2: Kernels = Kernels {
    isa: Isa::Sme2,
    cq4: crate::aarch64::sme2::cq4_superblock,
    gemm: GemmKernels {
        cq4: Some(crate::aarch64::sme2_gemm::cq4_superblock_gemm),
        ..NEON_TABLE.gemm
    },
    ..NEON_TABLE
};

/// Both tables of the `avx2` tier, the 256-bit one first, when the CPU has
/// it (for tests and benchmarks that compare them; [`kernels`] picks one
/// with [`crate::x86::halves`]).
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub fn avx2_variants() -> Vec<&'static Kernels> {
    if Isa::Avx2.is_available() {
        vec![&AVX2, &AVX2_HALVES]
    } else {
        Vec::new()
    }
}

/// Both tables of the `avx512` tier, the one without GFNI first, when the
/// CPU has the tier (the GFNI one only with GFNI), for tests and
/// benchmarks that compare them ([`kernels`] picks the GFNI one when it
/// can).
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub fn avx512_variants() -> Vec<&'static Kernels> {
    #[cfg(kernels_avx512)]
    if Isa::Avx512.is_available() {
        return if crate::x86::has_gfni() {
            vec![&AVX512, &AVX512_GFNI]
        } else {
            vec![&AVX512]
        };
    }
    Vec::new()
}

/// The kernel table of `isa`, or [`KernelError::IsaUnavailable`] when the
/// CPU lacks it or [`FORCE_ENV`] caps it away.
pub fn kernels(isa: Isa) -> Result<&'static Kernels, KernelError> {
    if !isa.is_available() {
        return Err(KernelError::IsaUnavailable(isa));
    }
    match isa {
        Isa::Scalar => Ok(&SCALAR),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if crate::x86::halves() => Ok(&AVX2_HALVES),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Ok(&AVX2),
        #[cfg(all(target_arch = "x86_64", kernels_avx512))]
        Isa::Avx512 if crate::x86::has_gfni() => Ok(&AVX512_GFNI),
        #[cfg(all(target_arch = "x86_64", kernels_avx512))]
        Isa::Avx512 => Ok(&AVX512),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Ok(&NEON),
        #[cfg(target_arch = "aarch64")]
        Isa::Sme2 => Ok(&SME2),
        #[allow(unreachable_patterns)]
        _ => Err(KernelError::IsaUnavailable(isa)),
    }
}
