//! Runtime ISA detection and the per-ISA kernel tables.
//!
//! [`Isa`] names a kernel tier. The CPU is probed once (cached in a
//! `OnceLock`); the environment variable [`FORCE_ENV`]
//! (`CONVERT_FORCE_ISA=scalar|avx2|avx512`) caps the tiers used, so a test
//! suite can be run once per tier on one machine. Nothing is gated on
//! `cfg(target_feature)`: one binary serves every x86-64 CPU.
//!
//! Tiers (x86-64):
//! - `scalar`: the reference kernels ([`crate::scalar`]), always available.
//! - `avx2`: AVX2 + F16C ([`crate::x86::avx2`]).
//! - `avx512`: AVX-512 F/BW/VL + VNNI (`vpdpbusd`, `vpdpwssd`)
//!   ([`crate::x86::avx512`]). A CPU with AVX-512 but without VNNI
//!   (Skylake-X) uses the `avx2` tier.
//!
//! Tiers (aarch64):
//! - `neon`: NEON + the dot-product extension (`sdot`), probed with
//!   `is_aarch64_feature_detected!("dotprod")` (`aarch64::neon`).
//! - `sme2`: `neon` plus SME2 (the CQ4 panel kernel,
//!   `aarch64::sme2`), when the OS reports SME and SME2 (Linux:
//!   `getauxval(AT_HWCAP2)` bits 23 and 37; macOS: the sysctl
//!   `hw.optional.arm.FEAT_SME2`) *and* the streaming vector length
//!   (`rdsvl`) is 64 bytes; any other length runs the `neon` tier.
//!
//! The cap compares tiers of the same architecture: `CONVERT_FORCE_ISA=neon`
//! on aarch64 leaves `scalar` and `neon`; a tier of the other architecture
//! (`neon` on x86-64, `avx2` on aarch64) or `scalar` leaves only `scalar`.

use std::sync::OnceLock;

use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::error::KernelError;
use crate::ggml::RowGroup;
use crate::panel::{CbLut, PanelBlock};

/// The environment variable that caps the ISA tier.
pub const FORCE_ENV: &str = "CONVERT_FORCE_ISA";

/// A kernel tier, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable scalar reference kernels (the definition).
    Scalar,
    /// x86-64 AVX2 + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL + VNNI.
    Avx512,
    /// aarch64 NEON + dot product (`sdot`).
    Neon,
    /// aarch64 SME2 (512-bit streaming vectors) for CQ4 panels, NEON for
    /// the rest.
    Sme2,
}

/// Every tier this build knows, lowest first within each architecture.
pub const ALL_ISAS: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sme2];

impl Isa {
    /// Lower-case name (`scalar`, `avx2`, `avx512`, `neon`, `sme2`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::Sme2 => "sme2",
        }
    }

    /// (architecture, level): 0 for the portable scalar tier, 1 for x86-64,
    /// 2 for aarch64; the level orders the tiers of one architecture.
    fn arch_level(self) -> (u8, u8) {
        match self {
            Isa::Scalar => (0, 0),
            Isa::Avx2 => (1, 1),
            Isa::Avx512 => (1, 2),
            Isa::Neon => (2, 1),
            Isa::Sme2 => (2, 2),
        }
    }

    /// Whether a [`FORCE_ENV`] cap of `cap` lets this tier run: `scalar`
    /// always; otherwise a tier of the cap's architecture at or below it.
    pub fn allowed_under(self, cap: Isa) -> bool {
        let ((a, l), (ca, cl)) = (self.arch_level(), cap.arch_level());
        a == 0 || (a == ca && l <= cl)
    }

    /// Parse a name (case-insensitive). `None` for unknown names.
    pub fn from_name(s: &str) -> Option<Isa> {
        ALL_ISAS
            .iter()
            .copied()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run the tier (ignores [`FORCE_ENV`]).
    pub fn hardware_supports(self) -> bool {
        detected().hw[self as usize]
    }

    /// Whether the tier may be used: supported by the CPU and not above the
    /// [`FORCE_ENV`] cap.
    pub fn is_available(self) -> bool {
        let d = detected();
        d.hw[self as usize] && d.cap.is_none_or(|c| self.allowed_under(c))
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

struct Detected {
    hw: [bool; ALL_ISAS.len()],
    cap: Option<Isa>,
    cap_error: Option<String>,
}

fn probe() -> [bool; ALL_ISAS.len()] {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c");
        let avx512 = cfg!(kernels_avx512)
            && avx2
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        [true, avx2, avx512, false, false]
    }
    #[cfg(target_arch = "aarch64")]
    {
        let neon = crate::aarch64::has_dotprod();
        let sme2 = neon && crate::aarch64::sme2_usable();
        [true, false, false, neon, sme2]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        [true, false, false, false, false]
    }
}

fn detected() -> &'static Detected {
    static D: OnceLock<Detected> = OnceLock::new();
    D.get_or_init(|| {
        let (cap, cap_error) = match std::env::var(FORCE_ENV) {
            Err(_) => (None, None),
            Ok(v) if v.trim().is_empty() => (None, None),
            Ok(v) => match Isa::from_name(&v) {
                Some(isa) => (Some(isa), None),
                None => (
                    None,
                    Some(format!(
                        "{FORCE_ENV}={v:?} is not one of scalar, avx2, avx512, neon, sme2 (ignored)"
                    )),
                ),
            },
        };
        Detected {
            hw: probe(),
            cap,
            cap_error,
        }
    })
}

/// The [`FORCE_ENV`] cap, if set to a valid tier.
pub fn forced() -> Option<Isa> {
    detected().cap
}

/// A message when [`FORCE_ENV`] holds an unknown value (it is then ignored).
pub fn force_error() -> Option<&'static str> {
    detected().cap_error.as_deref()
}

/// Tiers usable now ([`Isa::is_available`]), lowest first.
pub fn available() -> Vec<Isa> {
    ALL_ISAS.into_iter().filter(|i| i.is_available()).collect()
}

/// The fastest usable tier.
pub fn best() -> Isa {
    available().into_iter().max().unwrap_or(Isa::Scalar)
}

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

/// One 8-row group kernel of a ggml format: the 8 row slots of `group`
/// against the activation blocks `act`, one f32 result per slot in `out`.
///
/// The SIMD versions are `#[target_feature]` functions, hence `unsafe fn`;
/// the scalar ones coerce to the same type.
pub type GroupFn<A> = unsafe fn(&RowGroup<'_>, &[A], &mut [f32; 8]);

/// One CQ4 super-block kernel: 64 output channels of `block` against the
/// quantized activations.
pub type PanelFn = unsafe fn(&PanelBlock<'_>, &Cq4Act<'_>, &CbLut, &mut [f32; 64]);

/// The orthogonal activation transform of one tier:
/// `z_j = sum_k (x_k * recip_k) * R[k][j]` (see [`crate::panel`]).
pub type RotateFn = unsafe fn(&[f32], &[f32], &[u8], &mut [f32]);

/// The kernels of one tier. A `&Kernels` can only be obtained from
/// [`kernels`], which checks that the CPU supports the tier; that is the
/// safety argument of every call through these pointers.
#[derive(Debug)]
pub struct Kernels {
    pub(crate) isa: Isa,
    pub(crate) q8_0: GroupFn<ActQ8_0>,
    pub(crate) q5_0: GroupFn<ActQ8_0>,
    pub(crate) q4_k: GroupFn<BlockQ8K>,
    pub(crate) q5_k: GroupFn<BlockQ8K>,
    pub(crate) q6_k: GroupFn<BlockQ8K>,
    pub(crate) cq4: PanelFn,
    pub(crate) rotate: RotateFn,
}

macro_rules! safe_group {
    ($(#[$doc:meta])* $name:ident, $field:ident, $act:ty) => {
        $(#[$doc])*
        pub fn $name(&self, g: &RowGroup<'_>, act: &[$act], out: &mut [f32; 8]) {
            // SAFETY: a `Kernels` value is only handed out by `kernels()` for
            // a tier the CPU supports (Isa::is_available).
            unsafe { (self.$field)(g, act, out) }
        }
    };
}

impl Kernels {
    /// The tier of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    safe_group!(
        /// Q8_0 group kernel of this tier.
        q8_0_group, q8_0, ActQ8_0
    );
    safe_group!(
        /// Q5_0 group kernel of this tier.
        q5_0_group, q5_0, ActQ8_0
    );
    safe_group!(
        /// Q4_K group kernel of this tier.
        q4_k_group, q4_k, BlockQ8K
    );
    safe_group!(
        /// Q5_K group kernel of this tier.
        q5_k_group, q5_k, BlockQ8K
    );
    safe_group!(
        /// Q6_K group kernel of this tier.
        q6_k_group, q6_k, BlockQ8K
    );

    /// The orthogonal activation transform of this tier: `x`, `recip` and
    /// `z` hold `Kp` values, `r` the `Kp x Kp` fp16 R (LE bytes).
    pub fn orthogonal_rotate(&self, x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
        // SAFETY: a `Kernels` value is only handed out by `kernels()` for a
        // tier the CPU supports (Isa::is_available).
        unsafe { (self.rotate)(x, recip, r, z) }
    }

    /// CQ4 super-block kernel of this tier.
    pub fn cq4_superblock(
        &self,
        b: &PanelBlock<'_>,
        act: &Cq4Act<'_>,
        lut: &CbLut,
        out: &mut [f32; 64],
    ) {
        // SAFETY: a `Kernels` value is only handed out by `kernels()` for a
        // tier the CPU supports (Isa::is_available).
        unsafe { (self.cq4)(b, act, lut, out) }
    }
}

static SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    q8_0: crate::scalar::q8_0_group,
    q5_0: crate::scalar::q5_0_group,
    q4_k: crate::scalar::q4_k_group,
    q5_k: crate::scalar::q5_k_group,
    q6_k: crate::scalar::q6_k_group,
    cq4: crate::scalar::cq4_superblock,
    rotate: crate::scalar::orthogonal_rotate,
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    q8_0: crate::x86::avx2::q8_0_group,
    q5_0: crate::x86::avx2::q5_0_group,
    q4_k: crate::x86::avx2::q4_k_group,
    q5_k: crate::x86::avx2::q5_k_group,
    q6_k: crate::x86::avx2::q6_k_group,
    cq4: crate::x86::avx2::cq4_superblock,
    rotate: crate::x86::avx2::orthogonal_rotate,
};

#[cfg(all(target_arch = "x86_64", kernels_avx512))]
static AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    q8_0: crate::x86::avx512::q8_0_group,
    q5_0: crate::x86::avx512::q5_0_group,
    q4_k: crate::x86::avx512::q4_k_group,
    q5_k: crate::x86::avx512::q5_k_group,
    q6_k: crate::x86::avx512::q6_k_group,
    cq4: crate::x86::avx512::cq4_superblock,
    rotate: crate::x86::avx512::orthogonal_rotate,
};

#[cfg(target_arch = "aarch64")]
const NEON_TABLE: Kernels = Kernels {
    isa: Isa::Neon,
    q8_0: crate::aarch64::neon::q8_0_group,
    q5_0: crate::aarch64::neon::q5_0_group,
    q4_k: crate::aarch64::neon::q4_k_group,
    q5_k: crate::aarch64::neon::q5_k_group,
    q6_k: crate::aarch64::neon::q6_k_group,
    cq4: crate::aarch64::neon::cq4_superblock,
    rotate: crate::aarch64::neon::orthogonal_rotate,
};

#[cfg(target_arch = "aarch64")]
static NEON: Kernels = NEON_TABLE;

/// The `sme2` tier: the SME2 panel kernel, NEON for the rest.
#[cfg(target_arch = "aarch64")]
static SME2: Kernels = Kernels {
    isa: Isa::Sme2,
    cq4: crate::aarch64::sme2::cq4_superblock,
    ..NEON_TABLE
};

/// The kernel table of `isa`, or [`KernelError::IsaUnavailable`] when the
/// CPU lacks it or [`FORCE_ENV`] caps it away.
pub fn kernels(isa: Isa) -> Result<&'static Kernels, KernelError> {
    if !isa.is_available() {
        return Err(KernelError::IsaUnavailable(isa));
    }
    match isa {
        Isa::Scalar => Ok(&SCALAR),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Ok(&AVX2),
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
