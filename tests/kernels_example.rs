//! The `kernels` crate's `embed` example (crates/kernels/examples/embed.rs:
//! how an engine maps `.weights` files and runs GEMV / GEMM through the
//! public API) on bundles converted from the committed fixture models: CQ4
//! panels of both families and FP16 norms (`--bits 4`), Q4_K / Q6_K R8
//! sidecars (keep mode, a llama.cpp Q4_K_M file) and R4 / Q8_0 sidecars.
//! Every file's matrix must run on every tier here with the scalar tier's
//! bits, GEMM rows equal to GEMVs, finite outputs.

mod common;

use std::collections::BTreeSet;

use common::{convert, fixture, stderr};

#[path = "../crates/kernels/examples/embed.rs"]
#[allow(dead_code)]
mod embed;

#[test]
fn embed_example_runs_on_converted_fixture_bundles() {
    let tmp = tempfile::tempdir().unwrap();
    let mut kinds = BTreeSet::new();
    for (i, (model, opts)) in [
        (
            "models/tiny-llama-hf-bf16",
            &["--bits", "4", "--torch-dtype", "bf16"][..],
        ),
        ("models/tiny-llama-Q4_K_M.gguf", &[][..]),
        (
            "models/tiny-llama-f32.gguf",
            &["--qtype", "q8_0", "--interleave", "4"][..],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let out = tmp.path().join(format!("b{i}"));
        let mut args = vec![
            fixture(model).display().to_string(),
            out.display().to_string(),
            "--quiet".into(),
            "--no-verify".into(),
        ];
        args.extend(opts.iter().map(|s| s.to_string()));
        let o = convert(args);
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        let mut files: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".weights"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{model}: no .weights files");
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            // 17 rows: a 16-row SME2 tile plus one, 4 / 8-row runs plus a tail.
            let r = embed::check_file(&bytes, 17)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
                .unwrap_or_else(|| panic!("{}: no matrix", f.display()));
            assert!(r.ok(), "{}: {r:?}", f.display());
            assert_eq!(r.tiers.len(), kernels::available().len());
            kinds.insert(r.kind);
        }
    }
    for want in [
        "CQ4 hadamard",
        "CQ4 orthogonal",
        "F16",
        "Q4_K r8",
        "Q6_K r8",
        "Q8_0 r4",
    ] {
        assert!(kinds.contains(want), "{want} not among {kinds:?}");
    }
}
