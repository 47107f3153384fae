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
        let neon = crate::aarch64::probe::has_dotprod();
        let sme2 = neon && crate::aarch64::probe::sme2_usable();
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
