//! Replays every committed fuzz input through the fuzz targets' own code
//! (`fuzz/targets.rs`, included below as the libFuzzer binaries include
//! it), so the suite exercises the seed corpora and every regression input
//! without the fuzzer: a fixed crash stays fixed.
//!
//! Inputs: `fuzz/corpus/<target>/*` (seeds, `fuzz/make_seeds.py`) and
//! `fuzz/regressions/<target>/*` (minimized crashes found by `scripts/fuzz`).

#[path = "../fuzz/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(fuzz.join(kind).join(target)) else {
            continue;
        };
        for e in dir {
            let p = e.unwrap().path();
            if p.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Runs `body` on every input of `target`; a panic names the input.
fn replay(target: &str, body: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no corpus for fuzz target {target}");
    let mut seed_bytes = 0;
    for p in &files {
        let data = std::fs::read(p).unwrap();
        if p.parent().unwrap().parent().unwrap().ends_with("corpus") {
            seed_bytes += data.len();
        }
        let r = std::panic::catch_unwind(|| body(&data));
        assert!(
            r.is_ok(),
            "fuzz target {target} panicked on {}",
            p.display()
        );
    }
    assert!(
        seed_bytes < 200_000,
        "the {target} seed corpus is {seed_bytes} bytes: keep it under 200 KB"
    );
}

#[test]
fn gguf_corpus() {
    replay("gguf", targets::gguf);
}

#[test]
fn safetensors_corpus() {
    replay("safetensors", targets::safetensors);
}

#[test]
fn hf_folder_corpus() {
    replay("hf_folder", targets::hf_folder);
    targets::hf_cleanup();
}

#[test]
fn weights_corpus() {
    replay("weights", targets::weights);
}

/// The seeds reach the parsers' success paths, not only their errors.
#[test]
fn seeds_are_accepted() {
    let ok = |target: &str, name: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target)
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let g = ok("gguf", "shrunk-tiny-llama-Q4_K_M.gguf");
    assert!(model_sources::gguf::parse(&g).is_ok());
    let s = ok("safetensors", "every-dtype.safetensors");
    assert!(model_sources::safetensors_file::parse(&s).is_ok());
    let w = ok("weights", "tiny-cq4-lm_head.weight.cq4p.weights");
    let a = kernels::aligned::AlignedBytes::copy_of(&w);
    assert!(kernel_check::check::check_container(a.as_slice(), &[kernels::Isa::Scalar]).pass());
    for (seed, n_files) in [("single", 1), ("sharded", 2)] {
        let input = ok("hf_folder", seed);
        let files = targets::hf_files(&input);
        if seed == "sharded" {
            let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, targets::HF_SHARDED);
        }
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let cat = model_sources::Catalogue::open(dir.path())
            .unwrap_or_else(|e| panic!("hf_folder seed {seed}: {e}"));
        assert_eq!(cat.files.len(), n_files, "{seed}");
    }
}
