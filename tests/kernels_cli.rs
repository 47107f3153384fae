//! `convert verify` end to end: every fixture conversion verifies on every
//! ISA; corrupting one byte of a sidecar block scale, a CQ4 panel or its
//! folded norms fails verification naming the file, with and without the
//! sha256 check; bad arguments exit 2.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{convert, fixture, manifest, stderr};
use sha2::{Digest, Sha256};
use weights_file::WeightsFile;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn verify(path: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["verify".to_string(), path.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    convert(args)
}

fn convert_to(model: &str, out: &Path, opts: &[&str]) {
    let mut args = vec![
        fixture(model).display().to_string(),
        out.display().to_string(),
    ];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push("--quiet".into());
    let o = convert(args);
    assert!(o.status.success(), "{model} {opts:?}: {}", stderr(&o));
}

/// Tensor files of a bundle (manifest order).
fn tensor_files(dir: &Path) -> Vec<String> {
    manifest(dir)["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["file"].as_str().map(String::from))
        .collect()
}

/// Verify passes; returns the JSON report.
fn verify_passes(dir: &Path) -> serde_json::Value {
    let o = verify(dir, &["--json"]);
    assert!(
        o.status.success(),
        "{}: {}{}",
        dir.display(),
        stdout(&o),
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pass"], true);
    v
}

#[test]
fn every_fixture_conversion_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cases: Vec<(&str, Vec<&str>)> = vec![
        // keep mode: the quantized GGUFs get R8 sidecars of their own types
        ("models/tiny-llama-Q8_0.gguf", vec![]),
        ("models/tiny-llama-Q5_0.gguf", vec![]),
        ("models/tiny-llama-Q4_K_M.gguf", vec![]),
        ("models/tiny-llama-Q5_K_M.gguf", vec![]),
        ("models/tiny-llama-Q6_K.gguf", vec![]),
        ("models/tiny-llama-Q4_K_M.gguf", vec!["--interleave", "4"]),
        (
            "models/tiny-llama-hf-bf16",
            vec!["--qtype", "q4_k", "--torch-dtype", "bf16"],
        ),
        ("models/tiny-llama-hf-bf16", vec!["--plain"]),
        ("models/tiny-llama-f32.gguf", vec!["--plain"]),
    ];
    for q in [
        "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q2_k", "q3_k", "iq4_nl",
        "iq4_xs",
    ] {
        cases.push(("models/tiny-llama-f32.gguf", vec!["--qtype", q]));
    }
    // CQ4 packed panels (Hadamard matmuls, orthogonal embedding / lm_head)
    // from every fixture model, and mixed with kept ggml sidecars.
    for model in common::MODELS {
        cases.push((model, vec!["--bits", "4", "--layout", "source"]));
        cases.push((model, vec!["--bits", "4"]));
    }
    cases.push((
        "models/tiny-llama-Q4_K_M.gguf",
        vec!["--bits", "4", "--layout", "source", "--keep-quant"],
    ));
    let isas = kernels::available();
    for (i, (model, opts)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("b{i}"));
        convert_to(model, &out, opts);
        let files = tensor_files(&out);
        assert!(!files.is_empty(), "{model} {opts:?}: no tensor files");
        let v = verify_passes(&out);
        let reported: Vec<&serde_json::Value> = v["files"].as_array().unwrap().iter().collect();
        for f in &files {
            let r = reported
                .iter()
                .find(|r| r["file"] == f.as_str())
                .unwrap_or_else(|| panic!("{f} not in the report"));
            assert_eq!(r["sha256"], "ok", "{f}");
            let results = r["results"].as_array().unwrap();
            let plain = r["kind"].as_str().unwrap().starts_with("F");
            assert_eq!(results.len(), if plain { 1 } else { isas.len() }, "{f}");
            for x in results {
                assert_eq!(x["pass"], true, "{f}: {x}");
                // The M > 1 case ran and matched the GEMV on this tier.
                assert_eq!(x["gemm_identical"], true, "{f}: {x}");
                if x["isa"] != "scalar" {
                    assert_eq!(x["identical_to_scalar"], true, "{f}: {x}");
                }
            }
        }
        if opts.contains(&"--bits") && !opts.contains(&"--keep-quant") {
            let orth: Vec<_> = reported
                .iter()
                .filter(|r| r["kind"] == "CQ4 orthogonal")
                .collect();
            assert!(!orth.is_empty(), "{model} {opts:?}: no orthogonal CQ4 file");
            for r in orth {
                assert_eq!(r["embedding"]["pass"], true, "{r}");
            }
        }
        // The table form passes too.
        let o = verify(&out, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("all passed"));
    }
}

/// Offset of the data region of a container file.
fn data_offset(path: &Path) -> usize {
    let b = std::fs::read(path).unwrap();
    WeightsFile::parse(&b).unwrap().layout.data_offset as usize
}

fn set_byte(path: &Path, at: usize, f: impl FnOnce(u8) -> u8) {
    let mut b = std::fs::read(path).unwrap();
    b[at] = f(b[at]);
    std::fs::write(path, b).unwrap();
}

/// Verification fails (exit 1), naming `file` and `why` on stderr.
fn fails_naming(dir: &Path, extra: &[&str], file: &str, why: &str) {
    let o = verify(dir, extra);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{extra:?}: {e}");
    assert!(e.contains(file), "{extra:?}: {e}");
    assert!(e.contains(why), "{extra:?}: expected {why:?} in {e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn a_corrupt_sidecar_block_scale_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    convert_to("models/tiny-llama-Q8_0.gguf", &out, &[]);
    let file = tensor_files(&out)[3].clone();
    let path = out.join(&file);
    // The high byte of the first block's fp16 d: 0x7E makes it a NaN.
    set_byte(&path, data_offset(&path) + 1, |_| 0x7E);
    fails_naming(&out, &[], &file, "sha256 mismatch");
    fails_naming(&out, &["--no-hash"], &file, "not finite");
    // Single-file mode has no hash and still fails on the numbers.
    let o = verify(&path, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_changed_quant_byte_fails_the_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    convert_to("models/tiny-llama-Q4_K_M.gguf", &out, &[]);
    let file = tensor_files(&out)[0].clone();
    let path = out.join(&file);
    set_byte(&path, data_offset(&path) + 100, |b| b ^ 0x11);
    fails_naming(&out, &[], &file, "sha256 mismatch");
}

// ------------------------------------------------------------ CQ4 bundles

/// A bundle of CQ4 panel files written through the `cq4` API with shapes the
/// fixture models do not have: a Hadamard matmul weight with N = 100 (not a
/// multiple of 64, so super-block 1 has padded channels) and an orthogonal
/// token embedding, with a manifest.
fn cq4_bundle(dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let bundle = cq4::Bundle::new(cq4::DEFAULT_SEED);
    let mut entries = Vec::new();
    let mut names = Vec::new();
    for (tensor, role, family, n, k) in [
        (
            "blk.0.ffn_up.weight",
            "matmul",
            cq4::Family::Hadamard,
            100usize,
            256usize,
        ),
        (
            "token_embd.weight",
            "token_embedding",
            cq4::Family::Orthogonal,
            96,
            128,
        ),
    ] {
        let enc = bundle.encoder(family, n, k).unwrap();
        let mut rng = cq4::rng::SplitMix64::new(n as u64);
        let mut w64 = vec![0f64; n * k];
        cq4::rng::fill_gaussian(&mut rng, &mut w64);
        let w: Vec<f32> = w64.iter().map(|&v| (v * 0.02) as f32).collect();
        let (panels, norms) = enc.encode_tensor(&w).unwrap();
        let blob = enc.scales_blob(&norms).unwrap();
        let mut bytes = weights_file::write::prefix(&enc.header(), &blob).unwrap();
        bytes.extend_from_slice(&panels);
        let file = format!("{tensor}.cq4p.weights");
        std::fs::write(dir.join(&file), &bytes).unwrap();
        entries.push(serde_json::json!({
            "tensor": tensor, "role": role, "shape": [n, k], "source_dtype": "F32",
            "file": file, "precision": "CQ4", "layout": "cq4_packed_panels",
            "bytes": bytes.len(), "sha256": hex(&Sha256::digest(&bytes)),
        }));
        names.push(file);
    }
    let m = serde_json::json!({
        "format": "convert-bundle", "format_version": 1,
        "tool": {"name": "convert", "version": "test"},
        "source": {"kind": "gguf", "tied_embeddings": false, "files": []},
        "options": {"mode": "cq4"},
        "tensors": entries,
        "extra_files": [],
    });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&m).unwrap(),
    )
    .unwrap();
    names
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cq4_regions(path: &Path) -> (usize, weights_file::panel::ScalesLayout, usize) {
    let b = std::fs::read(path).unwrap();
    let f = WeightsFile::parse(&b).unwrap();
    let h = f.header();
    let fam = h.rotation_family().expect("a CQ4 packed-panel file");
    let g = weights_file::panel::PanelGeometry::new(h.dims[0] as usize, h.dims[1] as usize, 128)
        .unwrap();
    (
        f.layout.scales_offset as usize,
        g.scales_layout(fam),
        f.layout.data_offset as usize,
    )
}

#[test]
fn cq4_bundles_verify_with_embedding_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cq4");
    let files = cq4_bundle(&dir);
    let v = verify_passes(&dir);
    let emb = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"] == files[1].as_str())
        .unwrap();
    assert_eq!(emb["kind"], "CQ4 orthogonal");
    assert_eq!(emb["embedding"]["pass"], true, "{emb}");
    let o = verify(&dir, &[]);
    assert!(stdout(&o).contains("embed"), "{}", stdout(&o));
    // One file, one ISA.
    let o = verify(&dir.join(&files[0]), &["--isa", "scalar"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_corrupt_folded_norm_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cq4");
    let files = cq4_bundle(&dir);
    let path = dir.join(&files[0]);
    let (so, layout, _) = cq4_regions(&path);
    // The exponent byte of channel 3's folded norm (fp32 LE, byte 3).
    set_byte(&path, so + layout.folded.offset + 4 * 3 + 3, |b| b ^ 0x40);
    fails_naming(&dir, &[], &files[0], "sha256 mismatch");
    fails_naming(&dir, &["--no-hash"], &files[0], "folded norm");
}

#[test]
fn a_corrupt_panel_byte_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cq4");
    let files = cq4_bundle(&dir);
    let path = dir.join(&files[0]);
    let (_, _, data) = cq4_regions(&path);
    // N = 100: super-block 1 holds rows 64..100 and padding 100..128. A
    // nibble of padded channel 110 (c = 46) in its first kg-block is
    // visible without the hash (padding must be index 0).
    let ng = 2;
    set_byte(&path, data + (ng * 32) * 128 + 2 * 46, |b| b ^ 0x30);
    fails_naming(&dir, &[], &files[0], "sha256 mismatch");
    fails_naming(&dir, &["--no-hash"], &files[0], "padded channels");
}

#[test]
fn a_corrupt_norm_fails_without_the_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cq4");
    let files = cq4_bundle(&dir);
    let path = dir.join(&files[1]);
    let (so, layout, _) = cq4_regions(&path);
    // High byte of row 0's fp16 norm -> 0x7C..: infinite.
    set_byte(&path, so + layout.norms.offset + 1, |b| b | 0x7C);
    fails_naming(&dir, &["--no-hash"], &files[1], "not finite");
}

// ------------------------------------------------------------ arguments

#[test]
fn bad_arguments_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cq4");
    cq4_bundle(&dir);
    // Tiers this CPU lacks (x86: neon, sme2; aarch64: avx2, avx512, and
    // sme2 without SME2) and a name that is no tier at all.
    let missing: Vec<&str> = kernels::dispatch::ALL_ISAS
        .into_iter()
        .filter(|i| !i.hardware_supports())
        .map(|i| i.name())
        .chain(["avx9000"])
        .collect();
    assert!(missing.len() >= 3, "{missing:?}");
    for isa in missing {
        let o = verify(&dir, &["--isa", isa]);
        assert_eq!(o.status.code(), Some(2), "{isa}: {}", stderr(&o));
        assert!(stderr(&o).contains(isa), "{}", stderr(&o));
    }
    let o = verify(&tmp.path().join("missing"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = verify(&empty, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn forced_isa_caps_the_tiers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("cq4");
    cq4_bundle(&dir);
    let run = |force: &str, extra: &[&str]| {
        let mut args = vec![
            "verify".to_string(),
            dir.display().to_string(),
            "--json".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        std::process::Command::new(env!("CARGO_BIN_EXE_convert"))
            .args(args)
            .env("CONVERT_FORCE_ISA", force)
            .output()
            .unwrap()
    };
    let o = run("scalar", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["isas"], serde_json::json!(["scalar"]));
    if kernels::Isa::Avx2.hardware_supports() {
        let o = run("scalar", &["--isa", "avx2"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("CONVERT_FORCE_ISA"), "{}", stderr(&o));
    }
    let o = run("bogus", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
