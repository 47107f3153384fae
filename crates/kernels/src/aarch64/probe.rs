//! What the aarch64 CPU and OS offer: the dot-product extension, SME2 and
//! its streaming vector length. A leaf module ([`crate::isa`] probes with it).

use core::arch::asm;

/// The streaming vector length (bytes) the SME2 kernel is written for.
pub const SVL_BYTES: usize = 64;

/// Whether the dot-product extension is present (the `neon` tier).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// Whether the OS reports SME2 (and SME). Linux / Android:
/// `getauxval(AT_HWCAP2)` bits 37 (SME2) and 23 (SME); macOS: the sysctl
/// `hw.optional.arm.FEAT_SME2`; elsewhere: no.
pub(crate) fn os_reports_sme2() -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        extern "C" {
            fn getauxval(t: core::ffi::c_ulong) -> core::ffi::c_ulong;
        }
        const AT_HWCAP2: core::ffi::c_ulong = 26;
        const HWCAP2_SME: u64 = 1 << 23;
        const HWCAP2_SME2: u64 = 1 << 37;
        // SAFETY: getauxval (glibc >= 2.16, musl, bionic) only reads the
        // auxiliary vector; it returns 0 for a missing entry.
        let hw2 = unsafe { getauxval(AT_HWCAP2) } as u64;
        hw2 & HWCAP2_SME != 0 && hw2 & HWCAP2_SME2 != 0
    }
    #[cfg(target_os = "macos")]
    {
        extern "C" {
            fn sysctlbyname(
                name: *const core::ffi::c_char,
                oldp: *mut core::ffi::c_void,
                oldlenp: *mut usize,
                newp: *mut core::ffi::c_void,
                newlen: usize,
            ) -> core::ffi::c_int;
        }
        let mut v: i32 = 0;
        let mut len = core::mem::size_of::<i32>();
        // SAFETY: a NUL-terminated name, `oldp` points to `len` writable
        // bytes, no new value is set.
        let rc = unsafe {
            sysctlbyname(
                c"hw.optional.arm.FEAT_SME2".as_ptr(),
                (&mut v as *mut i32).cast(),
                &mut len,
                core::ptr::null_mut(),
                0,
            )
        };
        rc == 0 && v == 1
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
    {
        false
    }
}

/// The streaming vector length in bytes (`rdsvl`).
///
/// # Safety
/// The CPU must implement SME ([`os_reports_sme2`]); otherwise `rdsvl` is
/// an undefined instruction.
pub(crate) unsafe fn streaming_vector_bytes() -> usize {
    let svl: usize;
    // SAFETY: the caller guarantees SME; `rdsvl` runs in non-streaming mode
    // too and only writes the named register.
    unsafe {
        asm!(
            ".arch_extension sme",
            "rdsvl {0}, #1",
            out(reg) svl,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    svl
}

/// Whether the `sme2` tier can run: dot product, SME2 reported by the OS,
/// and a 64-byte (512-bit) streaming vector length, the one the SME2 kernel
/// is written for (Apple M4). Any other length falls back to `neon`.
pub(crate) fn sme2_usable() -> bool {
    // SAFETY: rdsvl only runs after the OS reported SME (and SME2).
    has_dotprod() && os_reports_sme2() && unsafe { streaming_vector_bytes() } == SVL_BYTES
}
