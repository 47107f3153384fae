//! `--bits 4` end to end: CQ4 packed-panel bundles of every fixture model,
//! determinism, the fp16 policy, qdq of written files, and SQNR against
//! llama.cpp's Q4_K on the same weights.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_source_identity, convert, fixture, folder_contents, manifest, stderr, MODELS};
use ggml_quants::TorchDtype;
use model_sources::Catalogue;
use weights_file::{flags, WeightsFile};

fn family_of(h: &weights_file::Header) -> cq4::Family {
    h.rotation_family().expect("a CQ4 packed-panel file")
}

fn run(model: &str, out: &Path, extra: &[&str]) {
    let mut args: Vec<std::ffi::OsString> = vec![
        fixture(model).into(),
        out.into(),
        "-q".into(),
        "--bits".into(),
        "4".into(),
        "--layout".into(),
        "source".into(),
    ];
    args.extend(extra.iter().map(Into::into));
    let o = convert(&args);
    assert!(o.status.success(), "{model} {extra:?}: {}", stderr(&o));
}

fn materialize(cat: &Catalogue, name: &str, dtype: TorchDtype) -> Vec<f32> {
    let t = cat.get(name).unwrap();
    let mut v = vec![0f32; t.n_elements() as usize];
    ggml_quants::materialize_rows(
        t.dtype.ggml().unwrap(),
        cat.data(t),
        t.ncols() as usize,
        dtype,
        &mut v,
    )
    .unwrap();
    v
}

#[test]
fn every_fixture_model_gets_panels_of_both_families() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, model) in MODELS.iter().enumerate() {
        let out = tmp.path().join(format!("m{i}"));
        run(model, &out, &["--torch-dtype", "bf16"]);
        let m = manifest(&out);
        let mut fams = [0, 0];
        for e in m["tensors"].as_array().unwrap() {
            let file = e["file"].as_str().expect("--bits 4 writes every tensor");
            let bytes = std::fs::read(out.join(file)).unwrap();
            let f = WeightsFile::parse(&bytes).unwrap();
            let h = f.header();
            match e["role"].as_str().unwrap() {
                "matmul" | "token_embedding" | "output" => {
                    assert_eq!(e["layout"], "cq4_packed_panels", "{file}");
                    assert!(h.flags & flags::PACKED_PANELS != 0, "{file}");
                    let fam = family_of(&h);
                    let orth = matches!(e["role"].as_str(), Some("token_embedding" | "output"));
                    assert_eq!(fam == cq4::Family::Orthogonal, orth, "{file}");
                    fams[orth as usize] += 1;
                    // Parses (every region validated) and dequantizes.
                    let view = cq4::PanelTensorView::parse(
                        fam,
                        h.dims[0] as usize,
                        h.dims[1] as usize,
                        f.scales(),
                        f.data(),
                    )
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
                    assert_eq!(view.qdq().unwrap().len() as u64, h.dims[0] * h.dims[1]);
                }
                _ => assert_eq!(e["layout"], "row_major", "{file}"),
            }
        }
        assert_eq!(fams, [14, 2], "{model}");
        // Every tensor's `source_sha256` (a CQ4 matrix's hashed by its own
        // encode pass, chunk by chunk, or sixteen at a time beside the jobs
        // where AVX-512 runs) is the sha256 of its source bytes.
        assert_source_identity(&fixture(model), &out);
    }
}

/// The tiny F32 llama converted with the defaults into `dir/o`, and its
/// source catalogue.
fn convert_tiny_f32(dir: &Path) -> (PathBuf, Catalogue) {
    let out = dir.join("o");
    run("models/tiny-llama-f32.gguf", &out, &[]);
    let src = Catalogue::open(&fixture("models/tiny-llama-f32.gguf")).unwrap();
    (out, src)
}

#[test]
fn qdq_of_written_files_equals_the_quantizers_own_dequantization() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, src) = convert_tiny_f32(tmp.path());
    let bundle = cq4::Bundle::new(cq4::DEFAULT_SEED);
    for name in [
        "blk.0.attn_q.weight",
        "blk.1.ffn_down.weight",
        "token_embd.weight",
        "output.weight",
    ] {
        let t = src.get(name).unwrap();
        let (n, k) = (t.shape[0] as usize, t.shape[1] as usize);
        let bytes = std::fs::read(out.join(format!("{name}.cq4p.weights"))).unwrap();
        let f = WeightsFile::parse(&bytes).unwrap();
        let fam = family_of(&f.header());
        let from_file =
            cq4::qdq(fam, n, f.header().dims[1] as usize, f.scales(), f.data()).unwrap();
        // Quantize again through the library and dequantize with the encoder.
        let enc = bundle.encoder(fam, n, k).unwrap();
        let w = materialize(&src, name, TorchDtype::Float32);
        let (panels, norms) = enc.encode_tensor(&w).unwrap();
        assert_eq!(panels, f.data(), "{name}: panels");
        let mut own = vec![0f32; n * enc.kp()];
        enc.dequantize_superblocks(0, &panels, &norms, &mut own)
            .unwrap();
        assert!(
            own.iter()
                .zip(&from_file)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: qdq of the file differs from the quantizer's dequantization"
        );
    }
}

#[test]
fn cq4_conversion_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    for model in ["models/tiny-llama-hf-bf16", "models/tiny-llama-Q4_K_M.gguf"] {
        let mut folders = Vec::new();
        for (j, threads) in ["1", "2", "2"].iter().enumerate() {
            let out = tmp.path().join(format!("{}-{j}", model.replace('/', "_")));
            run(
                model,
                &out,
                &["--threads", threads, "--torch-dtype", "bfloat16"],
            );
            folders.push(folder_contents(&out));
        }
        assert_eq!(folders[0], folders[1], "{model}: --threads 1 vs 2");
        assert_eq!(folders[1], folders[2], "{model}: two runs");
    }
    // Another seed gives other rotations.
    let a = tmp.path().join("seed");
    run("models/tiny-llama-f32.gguf", &a, &["--seed", "7"]);
    let b = tmp.path().join("default");
    run("models/tiny-llama-f32.gguf", &b, &[]);
    let fa = std::fs::read(a.join("blk.0.attn_q.weight.cq4p.weights")).unwrap();
    let fb = std::fs::read(b.join("blk.0.attn_q.weight.cq4p.weights")).unwrap();
    assert_ne!(fa, fb);
}

#[test]
fn float16_fails_on_the_bf16_folder_bf16_and_f32_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("f16");
    let o = convert([
        fixture("models/tiny-llama-hf-bf16").into_os_string(),
        out.clone().into(),
        "-q".into(),
        "--bits".into(),
        "4".into(),
        "--torch-dtype".into(),
        "float16".into(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("model.layers.1.mlp.down_proj.weight"), "{err}");
    assert!(!out.exists());
    for dt in ["bfloat16", "float32"] {
        run(
            "models/tiny-llama-hf-bf16",
            &tmp.path().join(dt),
            &["--torch-dtype", dt],
        );
    }
}

#[test]
fn keep_quant_keeps_ggml_tensors_as_sidecars() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("k");
    run("models/tiny-llama-Q4_K_M.gguf", &out, &["--keep-quant"]);
    let m = manifest(&out);
    let layouts: Vec<&str> = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["layout"].as_str().unwrap())
        .collect();
    assert_eq!(layouts.iter().filter(|l| **l == "ggml_r8").count(), 16);
    assert_eq!(layouts.iter().filter(|l| **l == "row_major").count(), 5);
    let o = convert(["--bits", "3", "a", "b"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("possible values: 4"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

fn sqnr_db(reference: &[f32], approx: &[f32]) -> f64 {
    let (mut s, mut e) = (0f64, 0f64);
    for (&r, &a) in reference.iter().zip(approx) {
        s += f64::from(r) * f64::from(r);
        e += (f64::from(r) - f64::from(a)).powi(2);
    }
    10.0 * (s / e).log10()
}

/// Per-tensor reconstruction SQNR of CQ4 (this tool) and of llama.cpp's
/// Q4_K (the Q4_K_M fixture) against the f32 weights. Run with
/// `--nocapture` to see the table (README and the issue note quote it).
#[test]
fn sqnr_against_llama_cpp_q4_k() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, src) = convert_tiny_f32(tmp.path());
    let q4 = Catalogue::open(&fixture("models/tiny-llama-Q4_K_M.gguf")).unwrap();
    let m = manifest(&out);
    let mut rows = Vec::new();
    for e in m["tensors"].as_array().unwrap() {
        if e["layout"] != "cq4_packed_panels" {
            continue;
        }
        let name = e["tensor"].as_str().unwrap();
        let w = materialize(&src, name, TorchDtype::Float32);
        let bytes = std::fs::read(out.join(e["file"].as_str().unwrap())).unwrap();
        let f = WeightsFile::parse(&bytes).unwrap();
        let h = f.header();
        let (n, kp) = (h.dims[0] as usize, h.dims[1] as usize);
        let k = w.len() / n;
        let full = cq4::qdq(family_of(&h), n, kp, f.scales(), f.data()).unwrap();
        let cq: Vec<f32> = (0..n)
            .flat_map(|r| full[r * kp..r * kp + k].to_vec())
            .collect();
        let t = q4.get(name).unwrap();
        let qk = materialize(&q4, name, TorchDtype::Float32);
        let cq_db = sqnr_db(&w, &cq);
        let qk_db = sqnr_db(&w, &qk);
        rows.push((name.to_string(), t.dtype, cq_db, qk_db));
    }
    println!(
        "{:<26} {:>9} {:>12} {:>12}",
        "tensor", "Q4_K_M as", "CQ4 SQNR dB", "llama.cpp dB"
    );
    for (name, ty, a, b) in &rows {
        println!("{name:<26} {:>9} {a:>12.2} {b:>12.2}", ty.to_string());
    }
    let mean = |f: fn(&(String, ggml_quants::Dtype, f64, f64)) -> f64| {
        rows.iter().map(f).sum::<f64>() / rows.len() as f64
    };
    println!(
        "mean: CQ4 {:.2} dB, llama.cpp Q4_K_M {:.2} dB",
        mean(|r| r.2),
        mean(|r| r.3)
    );
    assert_eq!(rows.len(), 16);
    // 4-bit codebook quantization after rotation: ~19-21 dB on these weights;
    // a broken rotation or codebook falls far below.
    for (name, _, a, _) in &rows {
        assert!(*a > 17.0, "{name}: CQ4 SQNR {a:.2} dB");
    }
}

/// `--bits 4 --imatrix` (FORMAT.md §CQ4.16) on the tiny llama3 with its own
/// `llama-imatrix` matrix: every Hadamard file the manifest lists as
/// scaled differs from the unscaled run and stores `input_scale = 2^e`,
/// `recip = 2^-e` (powers of two from 1/8 to 8, 1 in the padding) with as
/// many non-unit columns as the manifest says; every other file is
/// byte-identical; and `qdq` (which divides by `input_scale`) reconstructs
/// the source about as well as without scales.
#[test]
fn imatrix_input_scales_are_stored_and_undone_by_qdq() {
    let tmp = tempfile::tempdir().unwrap();
    let model = "models/tiny-llama3.gguf";
    let im_path = fixture("imatrix/tiny-llama3.imatrix.gguf");
    let (plain, awq) = (tmp.path().join("p"), tmp.path().join("a"));
    run(model, &plain, &[]);
    run(model, &awq, &["--imatrix", im_path.to_str().unwrap()]);
    let im = model_sources::imatrix::read(&im_path).unwrap();
    let src = Catalogue::open(&fixture(model)).unwrap();
    let m = manifest(&awq);
    let (mut err_plain, mut err_awq, mut scaled) = (0f64, 0f64, 0);
    for t in m["tensors"].as_array().unwrap() {
        let name = t["tensor"].as_str().unwrap();
        let Some(file) = t["file"].as_str() else {
            continue;
        };
        let (a_bytes, p_bytes) = (
            std::fs::read(awq.join(file)).unwrap(),
            std::fs::read(plain.join(file)).unwrap(),
        );
        let cols = &t["details"]["input_scales"]["scaled_columns"];
        if cols.as_u64().unwrap_or(0) == 0 {
            assert_eq!(a_bytes, p_bytes, "{name}: no scaled column, same bytes");
            continue;
        }
        scaled += 1;
        assert_ne!(a_bytes, p_bytes, "{name}");
        assert_eq!(t["details"]["family"], "hadamard", "{name}");
        let (n, k) = (
            t["shape"][0].as_u64().unwrap() as usize,
            t["shape"][1].as_u64().unwrap() as usize,
        );
        let f = WeightsFile::parse(&a_bytes).unwrap();
        let view = weights_file::PanelView::from_file(&f).unwrap();
        let kp = f.header().dims[1] as usize;
        let mut nonunit = 0;
        for j in 0..kp {
            let (s, r) = (view.input_scale(j), view.recip(j));
            let e = (s >> 10) as i32 - 15;
            assert!(
                s & 0x3FF == 0 && (-3..=3).contains(&e),
                "{name} col {j}: {s:#06x}"
            );
            assert_eq!(r, ((15 - e) as u16) << 10, "{name} col {j}: recip of 2^{e}");
            assert!(j < k || e == 0, "{name}: padded column {j} scaled");
            nonunit += (e != 0) as u64;
        }
        assert_eq!(Some(nonunit), cols.as_u64(), "{name}: scaled_columns");
        let a = im
            .for_tensor(name, k, 1)
            .unwrap()
            .expect("an imatrix entry");
        let w = materialize(&src, name, TorchDtype::Float32);
        for (bytes, acc) in [(&a_bytes, &mut err_awq), (&p_bytes, &mut err_plain)] {
            let f = WeightsFile::parse(bytes).unwrap();
            let q = cq4::qdq(cq4::Family::Hadamard, n, kp, f.scales(), f.data()).unwrap();
            for r in 0..n {
                for j in 0..k {
                    let d = (w[r * k + j] - q[r * kp + j]) as f64;
                    *acc += a[j] as f64 * d * d;
                }
            }
        }
    }
    assert!(scaled >= 5, "only {scaled} tensors scaled");
    // This tiny model's random weights and near-flat importance make the
    // scales' effect small either way (the error reduction is proven on
    // strongly varying importance in crates/cq4/tests/quantize.rs, and on
    // a real model in docs/QUALITY.md); here both runs must reconstruct W.
    eprintln!(
        "importance-weighted error: {err_awq:.6e} with input scales, {err_plain:.6e} without"
    );
    assert!(err_awq < 1.1 * err_plain, "{err_awq} vs {err_plain}");
}

/// A one-entry Hessian file (`module` -> the `k x k` matrix `h`).
fn hessian_file(path: &Path, module: &str, k: usize, h: impl Fn(usize, usize) -> f32) {
    let header = format!(
        r#"{{"{module}":{{"dtype":"F32","shape":[{k},{k}],"data_offsets":[0,{}]}}}}"#,
        4 * k * k
    );
    let mut b = common::safetensors_bytes(&header, 0);
    for i in 0..k {
        for j in 0..k {
            b.extend_from_slice(&h(i, j).to_le_bytes());
        }
    }
    std::fs::write(path, b).unwrap();
}

/// `--hessians` (FORMAT.md §CQ4.18) with the committed Hessians of the
/// tiny llama3 (made by `scripts/hessians`): every matmul with an entry is
/// marked GPTQ in manifest.json and in the engine's conversion manifest
/// (with its calibration sample count), its input scales come from the
/// entry's diagonal, the bytes are deterministic; the embeddings have
/// none. (The bytes of GPTQ itself are checked by scripts/reference_check
/// against the independent encoder on matrices of several groups.)
#[test]
fn hessians_mark_gptq_and_feed_the_input_scales() {
    let tmp = tempfile::tempdir().unwrap();
    let hs = fixture("hessians/tiny-llama3/hessians.safetensors");
    let hs = hs.to_str().unwrap();
    let model = "models/tiny-llama3.gguf";
    common::assert_deterministic(tmp.path(), model, &["--bits", "4", "--hessians", hs]);
    let out = tmp.path().join("engine");
    let o = convert([
        fixture(model).as_os_str(),
        out.as_os_str(),
        "--bits".as_ref(),
        "4".as_ref(),
        "--hessians".as_ref(),
        hs.as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out);
    let mut gptq = 0;
    for t in m["tensors"].as_array().unwrap() {
        let d = &t["details"];
        let name = t["tensor"].as_str().unwrap();
        if d["gptq"].is_object() {
            gptq += 1;
            assert_eq!(d["gptq"]["samples"], 8, "{name}");
            assert_eq!(d["input_scales"]["from"], "hessians", "{name}");
        } else if t["layout"] == "cq4_packed_panels" {
            assert_eq!(
                d["family"], "orthogonal",
                "{name}: only embeddings lack GPTQ"
            );
        }
    }
    assert_eq!(gptq, 14);
    let conv: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("conversion_manifest.json")).unwrap())
            .unwrap();
    let used: Vec<_> = conv
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["gptq_used"] == true)
        .collect();
    assert_eq!(used.len(), 14);
    for r in used {
        assert_eq!(r["hessian_samples"], 8);
        assert!(r["hessian_missing_reason"].is_null());
    }
    assert_eq!(m["options"]["hessians"]["entries"], 14);
}

/// Hessians that cannot be used are bad input (exit 2), named on one line
/// with the tensor and the file, and nothing is written.
#[test]
fn unusable_hessians_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("models/tiny-llama3.gguf");
    let module = "model.layers.0.mlp.down_proj";
    for (name, k, h, says) in [
        (
            "width",
            64,
            &(|i: usize, j: usize| (i == j) as u8 as f32) as &dyn Fn(usize, usize) -> f32,
            "is 64 x 64, the matrix has 128 input columns",
        ),
        (
            "negative",
            128,
            &|i: usize, j: usize| -((i == j) as u8 as f32),
            "positive definite",
        ),
        (
            "nan",
            128,
            &|i: usize, _| if i == 3 { f32::NAN } else { 1.0 },
            "not finite",
        ),
    ] {
        let p = tmp.path().join(format!("{name}.safetensors"));
        hessian_file(&p, module, k, h);
        let out = tmp.path().join(format!("out-{name}"));
        let o = convert([
            model.as_os_str(),
            out.as_os_str(),
            "--bits".as_ref(),
            "4".as_ref(),
            "--hessians".as_ref(),
            p.as_os_str(),
        ]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {e}");
        let line = e
            .lines()
            .find(|l| l.contains(says))
            .unwrap_or_else(|| panic!("{name}: {e}"));
        assert!(
            line.contains("blk.0.ffn_down") && line.contains(&format!("{name}.safetensors")),
            "{line}"
        );
        assert!(!out.exists(), "{name}: no output folder");
    }
    // Without --bits: a usage error.
    let o = convert([
        model.as_os_str(),
        tmp.path().join("x").as_os_str(),
        "--hessians".as_ref(),
        tmp.path().join("width.safetensors").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// F32 rows are read in place from the mapped source when 4-byte aligned
/// and decoded into a copy when not: both give the same CQ4 file, byte for
/// byte (two safetensors files whose one matrix, two 16 MiB chunks long,
/// starts at file offsets 0 and 2 mod 4; only the manifests' source digests
/// differ). The same with the engine's Gemma 3 `x 16` on `up_proj` (an
/// affine map: when aligned, deferred to the encoder and the AWQ column
/// sums, which map each super-block's rows in cache; after decoding the
/// copy when not), which must give other bytes than without it.
#[test]
fn f32_rows_read_in_place_and_copied_give_the_same_file() {
    let tmp = tempfile::tempdir().unwrap();
    // Deterministic values of magnitude ~0.02, a few exactly 0.
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let (rows, cols) = (8320usize, 512usize);
    let vals: Vec<f32> = (0..rows * cols)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 97 == 0 {
                0.0
            } else {
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
            }
        })
        .collect();
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut outs = Vec::new();
    for (name, rem, gemma) in [
        ("aligned", 0usize, false),
        ("unaligned", 2, false),
        ("gemma-aligned", 0, true),
        ("gemma-unaligned", 2, true),
    ] {
        let mut h = format!(
            r#"{{"model.layers.0.mlp.up_proj.weight":{{"dtype":"F32","shape":[{rows},{cols}],"data_offsets":[0,{}]}}}}"#,
            data.len()
        );
        while (8 + h.len()) % 4 != rem {
            h.push(' ');
        }
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let mut file = (h.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(h.as_bytes());
        file.extend_from_slice(&data);
        let src = dir.join("model.safetensors");
        std::fs::write(&src, file).unwrap();
        if gemma {
            std::fs::write(dir.join("config.json"), r#"{"model_type":"gemma3_text"}"#).unwrap();
        }
        let src = if gemma { dir.clone() } else { src };
        let view = model_sources::mmap::MappedFile::open(&dir.join("model.safetensors")).unwrap();
        let at = 8 + h.len();
        assert_eq!(
            model_sources::mmap::f32_le_view(&view.bytes()[at..at + data.len()]).is_some(),
            rem == 0 && cfg!(target_endian = "little"),
            "{name}"
        );
        let out = tmp.path().join(format!("{name}-out"));
        let o = convert([
            src.as_os_str(),
            out.as_os_str(),
            "-q".as_ref(),
            "--bits".as_ref(),
            "4".as_ref(),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        outs.push(
            folder_contents(&out)
                .into_iter()
                .filter(|(f, _)| f != "manifest.json")
                .collect::<Vec<_>>(),
        );
    }
    assert!(data.len() as u64 > convert_chunk_bytes());
    assert!(outs[0].iter().any(|(f, _)| f.ends_with(".cq4p.weights")));
    assert!(outs[0] == outs[1], "the two conversions differ");
    assert!(outs[2] == outs[3], "the two Gemma 3 conversions differ");
    assert!(outs[0] != outs[2], "the Gemma 3 x 16 changed nothing");
}

/// The converter's materialization chunk (src/materialize.rs `CHUNK_BYTES`).
fn convert_chunk_bytes() -> u64 {
    16 << 20
}

/// `--torch-dtype float16` on an F32 matrix of several decode pieces (its
/// rows are decoded on several threads, 1 MiB of values each): the error
/// counts every overflow and names the first one in row order, wherever
/// the pieces put them.
#[test]
fn float16_overflow_is_reported_at_its_row_across_decode_pieces() {
    use common::{gguf_bytes, TInfo};
    let tmp = tempfile::tempdir().unwrap();
    let (rows, cols) = (600usize, 1024usize);
    let mut w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
        .collect();
    // Pieces are 256 rows of 1024 values: one overflow in the second
    // piece, the first in row order; two in the third.
    w[400 * cols + 7] = 1.0e6;
    w[500 * cols + 3] = -2.0e6;
    w[599 * cols + 1023] = 7.0e5;
    let infos = [TInfo::f32(
        "blk.0.ffn_down.weight",
        &[cols as u64, rows as u64],
        0,
    )];
    let mut b = gguf_bytes(3, 1, 1, &[("general.architecture", "llama")], &infos, 0);
    b.extend(w.iter().flat_map(|v| v.to_le_bytes()));
    let path = tmp.path().join("overflow.gguf");
    std::fs::write(&path, b).unwrap();
    let out = tmp.path().join("out");
    let o = convert([
        path.into_os_string(),
        out.clone().into(),
        "-q".into(),
        "--bits".into(),
        "4".into(),
        "--layout".into(),
        "source".into(),
        "--torch-dtype".into(),
        "float16".into(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("blk.0.ffn_down.weight")
            && err.contains(
                "3 values are beyond the float16 range (first: 1000000 at row 400, column 7)"
            ),
        "{err}"
    );
    assert!(!out.exists());
}
