//! AVX-512 intrinsics and target features are stable from Rust 1.89; the
//! workspace MSRV is 1.88. Compile the `avx512` tier only when the compiler
//! has them (cfg `kernels_avx512`); older compilers get a crate whose
//! `avx512` tier reports "not available".

use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(kernels_avx512)");
    println!("cargo:rerun-if-env-changed=RUSTC");
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let minor = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            // "rustc 1.95.0 (...)"
            let ver = v.split_whitespace().nth(1)?.to_string();
            let mut parts = ver.split('.');
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            (major == 1).then_some(minor)
        });
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo:rustc-cfg=kernels_avx512");
    }
}
