//! Sidecar bundles: unpack to exactly the source tensors, `--qtype` gives
//! llama.cpp's bytes, determinism, and bad input.

mod common;

use std::path::Path;

use common::{
    assert_deterministic, assert_source_identity, convert, convert_into, fixture, gguf_bytes,
    manifest, stderr, TInfo,
};
use model_sources::Catalogue;
use weights_file::{interleave, WeightsFile};

/// Unpack every sidecar of `out` and compare with `reference`'s tensor of
/// the same name (or `rename(name)`); returns how many were compared.
fn unpack_and_compare(out: &Path, reference: &Catalogue, rename: impl Fn(&str) -> String) -> usize {
    let m = manifest(out);
    let mut n = 0;
    for e in m["tensors"].as_array().unwrap() {
        let Some(file) = e["file"].as_str() else {
            assert_eq!(e["layout"], "source");
            continue;
        };
        let bytes = std::fs::read(out.join(file)).unwrap();
        let f = WeightsFile::parse(&bytes).unwrap();
        let h = f.header();
        let factor = h.interleave().expect("a sidecar").factor();
        assert_eq!(f.layout.data_offset % 64, 0, "{file}: data aligned to 64");
        let name = rename(e["tensor"].as_str().unwrap());
        let t = reference
            .get(&name)
            .unwrap_or_else(|| panic!("{name} not in reference"));
        let src = reference.data(t);
        let rows = h.dims[0] as usize;
        let row_bytes = src.len() / rows;
        let block_bytes = t.dtype.ggml().unwrap().type_size();
        let mut un = vec![0u8; src.len()];
        interleave::unpack(f.data(), rows, row_bytes, block_bytes, factor, &mut un).unwrap();
        assert!(un == src, "{file}: unpacked bytes differ from {name}");
        if rows >= factor && row_bytes > block_bytes {
            assert!(f.data() != src, "{file}: data was interleaved");
        }
        n += 1;
    }
    n
}

#[test]
fn sidecar_folders_unpack_to_the_source_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    for model in ["Q8_0", "Q5_0", "Q4_K_M", "Q5_K_M", "Q6_K"] {
        let path = fixture(&format!("models/tiny-llama-{model}.gguf"));
        let src = Catalogue::open(&path).unwrap();
        for factor in ["4", "8"] {
            let out = tmp.path().join(format!("{model}-{factor}"));
            let o = convert_into(&path, &out, &["--interleave", factor]);
            assert!(o.status.success(), "{model}: {}", stderr(&o));
            let n = unpack_and_compare(&out, &src, str::to_string);
            assert_eq!(n, 16, "{model} R{factor}: every 2-D tensor has a sidecar");
            // The source's digest and every tensor's hash are recorded, and
            // every tensor that stays in the source is listed with the digest.
            assert_source_identity(&path, &out);
            let m = manifest(&out);
            let src_sha = m["source"]["files"][0]["digest"].clone();
            for e in m["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["layout"] == "source")
            {
                assert_eq!(e["sha256"], src_sha);
                assert_eq!(e["source_file"], format!("tiny-llama-{model}.gguf"));
            }
        }
    }
}

/// A GGUF of the f32 tiny model with every 2-D tensor quantized to `ty`
/// by `ggml_quants::quantize_rows` (ggml-exact: `tests/ggml_vectors.rs`),
/// the rest kept f32: a stand-in for a llama.cpp-made file of a type no
/// committed fixture has.
fn quantized_gguf(ty: ggml_quants::GgmlType) -> Vec<u8> {
    let src = Catalogue::open(&fixture("models/tiny-llama-f32.gguf")).unwrap();
    let (mut infos, mut data) = (Vec::new(), Vec::new());
    for t in &src.tensors {
        let bytes = src.data(t);
        let (code, payload) = if t.shape.len() == 2 {
            let x: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let k = t.shape[1] as usize;
            let mut q = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
            ggml_quants::quantize_rows(ty, &x, k, &mut q).unwrap();
            (ty.id(), q)
        } else {
            (0, bytes.to_vec())
        };
        while data.len() % 32 != 0 {
            data.push(0);
        }
        infos.push(TInfo {
            name: t.name.clone(),
            dims: t.shape.iter().rev().copied().collect(),
            ty: code,
            offset: data.len() as u64,
        });
        data.extend_from_slice(&payload);
    }
    let kvs = [("general.architecture", "llama")];
    let mut b = gguf_bytes(3, infos.len() as u64, 1, &kvs, &infos, 0);
    b.extend_from_slice(&data);
    b
}

/// Keep mode on Q4_0 / Q4_1 / Q5_1 / Q2_K / Q3_K / IQ4_NL / IQ4_XS sources: every 2-D
/// tensor gets an R4 / R8 sidecar that unpacks to the source bytes (the run
/// verifies itself on every tier), and `--qtype` of the same type from the
/// f32 model writes the very same bytes.
#[test]
fn legacy_low_bit_k_and_iq4_sources_get_sidecars() {
    use ggml_quants::GgmlType;
    let tmp = tempfile::tempdir().unwrap();
    for (ty, q) in [
        (GgmlType::Q4_0, "q4_0"),
        (GgmlType::Q4_1, "q4_1"),
        (GgmlType::Q5_1, "q5_1"),
        (GgmlType::Q2_K, "q2_k"),
        (GgmlType::Q3_K, "q3_k"),
        (GgmlType::IQ4_NL, "iq4_nl"),
        (GgmlType::IQ4_XS, "iq4_xs"),
    ] {
        let path = tmp.path().join(format!("tiny-llama-{ty}.gguf"));
        std::fs::write(&path, quantized_gguf(ty)).unwrap();
        let src = Catalogue::open(&path).unwrap();
        let mats = src.tensors.iter().filter(|t| t.shape.len() == 2).count();
        assert_eq!(mats, 16);
        for factor in ["4", "8"] {
            let out = tmp.path().join(format!("{q}-r{factor}"));
            let o = convert_into(&path, &out, &["--interleave", factor]);
            assert!(o.status.success(), "{ty} R{factor}: {}", stderr(&o));
            let n = unpack_and_compare(&out, &src, str::to_string);
            assert_eq!(n, mats, "{ty} R{factor}: every 2-D tensor has a sidecar");
        }
        let out = tmp.path().join(format!("{q}-qtype"));
        let f32_model = fixture("models/tiny-llama-f32.gguf");
        let o = convert_into(&f32_model, &out, &["--qtype", q]);
        assert!(o.status.success(), "--qtype {q}: {}", stderr(&o));
        assert_eq!(unpack_and_compare(&out, &src, str::to_string), mats, "{q}");
    }
}

#[test]
fn qtype_from_f32_gives_llama_cpp_bytes() {
    // llama.cpp's Q8_0 and pure Q6_K files quantize every 2-D tensor to that
    // type with the reference quantizers: --qtype must give the same bytes.
    let tmp = tempfile::tempdir().unwrap();
    let f32_model = fixture("models/tiny-llama-f32.gguf");
    for (q, model) in [("q8_0", "Q8_0"), ("q6_k", "Q6_K")] {
        let out = tmp.path().join(q);
        let o = convert_into(&f32_model, &out, &["--qtype", q]);
        assert!(o.status.success(), "{q}: {}", stderr(&o));
        let reference =
            Catalogue::open(&fixture(&format!("models/tiny-llama-{model}.gguf"))).unwrap();
        assert_eq!(
            unpack_and_compare(&out, &reference, str::to_string),
            16,
            "{q}"
        );
    }
}

#[test]
fn sidecar_conversion_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, extra) in [
        ("models/tiny-llama-Q4_K_M.gguf", vec![]),
        (
            "models/tiny-llama-hf-bf16",
            vec!["--qtype", "q4_k", "--torch-dtype", "bf16"],
        ),
        (
            "models/tiny-llama-f32.gguf",
            vec!["--qtype", "q5_k", "--interleave", "4"],
        ),
    ] {
        assert_deterministic(tmp.path(), model, &extra);
    }
}

#[test]
fn bad_sidecar_inputs_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, bytes: Vec<u8>, extra: &[&str], needle: &str| {
        let input = tmp.path().join(name);
        std::fs::write(&input, bytes).unwrap();
        let out = tmp.path().join(format!("{name}.out"));
        let mut args: Vec<std::ffi::OsString> = vec![input.into(), out.clone().into(), "-q".into()];
        args.extend(extra.iter().map(Into::into));
        let o = convert(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: want {needle:?} in {err}");
        assert!(!out.exists(), "{name}: output left behind");
    };
    let q8 = |dims: &[u64], data: usize| {
        gguf_bytes(
            3,
            1,
            0,
            &[],
            &[TInfo {
                name: "blk.0.attn_q.weight".into(),
                dims: dims.to_vec(),
                ty: 8,
                offset: 0,
            }],
            data,
        )
    };
    // Row length not a multiple of the 32-weight block.
    run(
        "width.gguf",
        q8(&[48, 4], 4 * 34 * 2),
        &[],
        "not a multiple of the Q8_0 block size 32",
    );
    // Truncated block region: 4 rows of one Q8_0 block need 136 bytes.
    run(
        "trunc.gguf",
        q8(&[32, 4], 100),
        &[],
        "beyond the end of the file",
    );
    // --qtype on a float tensor whose width does not fit the block size.
    let f32_48 = gguf_bytes(
        3,
        1,
        0,
        &[],
        &[TInfo::f32("blk.0.attn_q.weight", &[48, 4], 0)],
        48 * 4 * 4,
    );
    run(
        "qtype.gguf",
        f32_48,
        &["--qtype", "q4_k"],
        "not a multiple of the Q4_K block size 256",
    );
}

/// `--qtype TYPE --imatrix FILE` into a fresh folder of `tmp`.
fn with_imatrix(tmp: &Path, model: &str, q: &str, imatrix: &str) -> std::path::PathBuf {
    let out = tmp.join(format!("{q}-{}", imatrix.replace('/', "_")));
    let im = fixture(imatrix);
    let o = convert_into(
        &fixture(model),
        &out,
        &["--qtype", q, "--imatrix", im.to_str().unwrap()],
    );
    assert!(o.status.success(), "{model} {q} {imatrix}: {}", stderr(&o));
    out
}

#[test]
fn imatrix_quantization_gives_llama_quantize_bytes() {
    // fixtures/imatrix/ (scripts/make_imatrix_fixtures): llama-imatrix's
    // own files (GGUF and legacy .dat) for tiny-llama3, a synthetic one for
    // tiny-llama-f32 (K-quants need 256-wide rows), and what
    // `llama-quantize --pure --imatrix` made with each.
    let tmp = tempfile::tempdir().unwrap();
    for (model, q, imatrix, reference) in [
        (
            "models/tiny-llama3.gguf",
            "q5_0",
            "imatrix/tiny-llama3.imatrix.gguf",
            "imatrix/tiny-llama3-Q5_0-imatrix.gguf",
        ),
        (
            "models/tiny-llama3.gguf",
            "q5_0",
            "imatrix/tiny-llama3.imatrix.dat",
            "imatrix/tiny-llama3-Q5_0-imatrix-dat.gguf",
        ),
        (
            "models/tiny-llama-f32.gguf",
            "q4_k",
            "imatrix/tiny-llama-f32.imatrix.gguf",
            "imatrix/tiny-llama-f32-Q4_K-imatrix.gguf",
        ),
    ] {
        let out = with_imatrix(tmp.path(), model, q, imatrix);
        let r = Catalogue::open(&fixture(reference)).unwrap();
        assert_eq!(
            unpack_and_compare(&out, &r, str::to_string),
            16,
            "{imatrix}"
        );
        // token_embd and output have no entry (llama-imatrix never
        // collects them): quantized without, as llama-quantize does.
        let m = manifest(&out);
        let used = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["details"]["importance_matrix"] == true)
            .count();
        assert_eq!(used, 14, "{imatrix}");
        assert_eq!(m["options"]["imatrix"]["entries"], 14);
    }
    // The importance matrix changes the bytes (so the comparison above
    // could fail): plain --qtype q5_0 differs from llama-quantize --imatrix.
    let plain = tmp.path().join("plain");
    let o = convert_into(
        &fixture("models/tiny-llama3.gguf"),
        &plain,
        &["--qtype", "q5_0"],
    );
    assert!(o.status.success());
    let f = "blk.0.ffn_down.weight.q5_0.r8.weights";
    let with = tmp
        .path()
        .join("q5_0-imatrix_tiny-llama3.imatrix.gguf")
        .join(f);
    assert_ne!(
        std::fs::read(plain.join(f)).unwrap(),
        std::fs::read(with).unwrap()
    );
}

#[test]
fn bad_imatrix_inputs_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("models/tiny-llama3.gguf");
    let run = |name: &str, opts: &[&str]| {
        let out = tmp.path().join(name);
        let o = convert_into(&model, &out, opts);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(!out.exists(), "{name}: nothing written");
        stderr(&o)
    };
    let im = fixture("imatrix/tiny-llama3.imatrix.gguf");
    let im = im.to_str().unwrap();
    // Needs --qtype or --bits 4.
    run("no-qtype", &["--imatrix", im]);
    // Another model's matrix: its rows are wider.
    let other = fixture("imatrix/tiny-llama-f32.imatrix.gguf");
    let e = run(
        "shape",
        &["--qtype", "q5_0", "--imatrix", other.to_str().unwrap()],
    );
    assert!(e.contains("blk.0.") && e.contains("needs 128"), "{e}");
    let e = run(
        "shape-cq4",
        &["--bits", "4", "--imatrix", other.to_str().unwrap()],
    );
    assert!(e.contains("blk.0.") && e.contains("needs 128"), "{e}");
    // Not an importance matrix (a model GGUF; random bytes).
    let e = run(
        "model",
        &["--qtype", "q5_0", "--imatrix", model.to_str().unwrap()],
    );
    assert!(e.contains("imatrix"), "{e}");
    let junk = tmp.path().join("junk.dat");
    std::fs::write(&junk, [7u8; 100]).unwrap();
    run(
        "junk",
        &["--qtype", "q5_0", "--imatrix", junk.to_str().unwrap()],
    );
    run(
        "missing",
        &["--qtype", "q5_0", "--imatrix", "/nonexistent/m.gguf"],
    );
}

#[test]
fn llama_cpp_mixtures_give_llama_quantize_bytes() {
    // tiny-llama-Q4_K_M / Q5_K_M.gguf are llama.cpp's own mixtures of the
    // f32 model (output, blk.1.attn_v and blk.1.ffn_down in Q6_K): the same
    // types and the same bytes, tensor for tensor.
    let tmp = tempfile::tempdir().unwrap();
    for (q, model) in [("q4_k_m", "Q4_K_M"), ("q5_k_m", "Q5_K_M")] {
        let out = tmp.path().join(q);
        let o = convert_into(
            &fixture("models/tiny-llama-f32.gguf"),
            &out,
            &["--qtype", q],
        );
        assert!(o.status.success(), "{q}: {}", stderr(&o));
        let reference =
            Catalogue::open(&fixture(&format!("models/tiny-llama-{model}.gguf"))).unwrap();
        assert_eq!(
            unpack_and_compare(&out, &reference, str::to_string),
            16,
            "{q}"
        );
        let m = manifest(&out);
        let q6: Vec<&str> = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["precision"] == "Q6_K")
            .map(|e| e["tensor"].as_str().unwrap())
            .collect();
        assert_eq!(
            q6,
            [
                "output.weight",
                "blk.1.attn_v.weight",
                "blk.1.ffn_down.weight"
            ],
            "{q}"
        );
        assert_eq!(m["options"]["qtype"], model);
    }
}

#[test]
fn tensor_type_overrides_the_mixture_and_keeps_the_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let o = convert_into(
        &fixture("models/tiny-llama-f32.gguf"),
        &out,
        &[
            "--qtype",
            "q4_k_m",
            "--tensor-type",
            "ATTN_V=q8_0",
            "--tensor-type",
            "blk\\.0\\.ffn_(up|gate)=q6_k",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out);
    let ty = |n: &str| {
        common::entry(&m, n)["precision"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(ty("blk.0.attn_v.weight"), "Q8_0");
    assert_eq!(
        ty("blk.1.attn_v.weight"),
        "Q8_0",
        "the rule beats the mixture"
    );
    assert_eq!(ty("blk.0.ffn_up.weight"), "Q6_K");
    assert_eq!(ty("blk.1.ffn_up.weight"), "Q4_K");
    assert_eq!(ty("output.weight"), "Q6_K");
    // tiny-llama3's rows are 128 wide: Q4_K falls back to Q5_0 and Q6_K to
    // Q8_0, as llama.cpp does.
    let out = tmp.path().join("fallback");
    let o = convert_into(
        &fixture("models/tiny-llama3.gguf"),
        &out,
        &["--qtype", "q4_k_m"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out);
    let ty = |n: &str| {
        common::entry(&m, n)["precision"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(ty("blk.0.attn_q.weight"), "Q5_0");
    assert_eq!(ty("output.weight"), "Q8_0");
    // Bad rules.
    for bad in ["attn_v", "attn_v=iq2_xxs", "(=q8_0"] {
        let out = tmp.path().join("bad");
        let o = convert_into(
            &fixture("models/tiny-llama-f32.gguf"),
            &out,
            &["--qtype", "q4_k_m", "--tensor-type", bad],
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--tensor-type"),
            "{bad}: {}",
            stderr(&o)
        );
    }
}

/// `--bits 4 --layout source --tensor-type` mixes other types into a CQ4
/// bundle: on the f32 model, `token_embd=q8_0` and `ffn_down=q8_0` give
/// sidecars that unpack to exactly llama.cpp's Q8_0 bytes of those tensors
/// (the Q8_0 fixture, made by llama-quantize), `attn_v=f16` plain FP16 files
/// of the source values, every other matrix CQ4 panels; the options record
/// the rules. The engine layout and keep mode without --qtype refuse them.
#[test]
fn cq4_tensor_type_mixes_llama_cpp_sidecars_and_fp16() {
    let tmp = tempfile::tempdir().unwrap();
    let f32_model = fixture("models/tiny-llama-f32.gguf");
    let out = tmp.path().join("mix");
    let rules = ["token_embd=q8_0", "ffn_down=q8_0", "attn_v=f16"];
    let mut opts = vec!["--bits", "4", "--layout", "source"];
    for r in &rules {
        opts.extend(["--tensor-type", r]);
    }
    let o = convert_into(&f32_model, &out, &opts);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out);
    assert_eq!(
        m["options"]["tensor_type"],
        serde_json::json!(["token_embd=Q8_0", "ffn_down=Q8_0", "attn_v=F16"])
    );
    let q8 = Catalogue::open(&fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let src = Catalogue::open(&f32_model).unwrap();
    let mut layouts = std::collections::BTreeMap::new();
    for e in m["tensors"].as_array().unwrap() {
        let name = e["tensor"].as_str().unwrap();
        let layout = e["layout"].as_str().unwrap();
        let bytes = std::fs::read(out.join(e["file"].as_str().unwrap())).unwrap();
        let f = WeightsFile::parse(&bytes).unwrap();
        let want = if name.contains("token_embd") || name.contains("ffn_down") {
            let t = q8.get(name).unwrap();
            let (reference, rows) = (q8.data(t), t.shape[0] as usize);
            let mut un = vec![0u8; reference.len()];
            let row_bytes = reference.len() / rows;
            interleave::unpack(f.data(), rows, row_bytes, 34, 8, &mut un).unwrap();
            assert!(un == reference, "{name}: not llama.cpp's Q8_0 bytes");
            "ggml_r8"
        } else if name.contains("attn_v") {
            let t = src.get(name).unwrap();
            let fp16: Vec<u8> = src
                .data(t)
                .chunks_exact(4)
                .flat_map(|b| {
                    half::f16::from_f32(f32::from_le_bytes(b.try_into().unwrap())).to_le_bytes()
                })
                .collect();
            assert!(f.data() == fp16, "{name}: not the FP16 source values");
            "row_major"
        } else if e["shape"].as_array().unwrap().len() == 2 {
            "cq4_packed_panels"
        } else {
            "row_major"
        };
        assert_eq!(layout, want, "{name}");
        *layouts.entry(layout.to_string()).or_insert(0) += 1;
    }
    assert_eq!(layouts["ggml_r8"], 3, "{layouts:?}");
    assert_eq!(layouts["cq4_packed_panels"], 11, "{layouts:?}");
    for bad in [
        // The engine layout reads CQ4 and FP16 only.
        vec!["--bits", "4", "--tensor-type", "attn_v=q8_0"],
        vec!["--tensor-type", "attn_v=q8_0"],
        vec![
            "--bits",
            "4",
            "--layout",
            "source",
            "--tensor-type",
            "attn_v=iq2_xxs",
        ],
    ] {
        let o = convert_into(&f32_model, &tmp.path().join("bad"), &bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
}

/// Tensors keep mode cannot serve stay in the source, and the manifest,
/// the plan and `inspect` say why: a 2-D IQ2_XXS matrix ("IQ2_XXS: no
/// sidecar kernel"), a 3-D float expert tensor, a 1-D norm.
#[test]
fn tensors_without_sidecars_are_listed_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    // IQ2_XXS (id 16): 66 bytes per 256; Q8_0 (id 8): 34 bytes per 32.
    let infos = [
        TInfo {
            name: "blk.0.attn_q.weight".into(),
            dims: vec![256, 8],
            ty: 16,
            offset: 0,
        },
        // A float expert tensor: --qtype quantizes 2-D matrices only
        // (quantized experts get expert sidecars: tests/moe.rs).
        TInfo::f32("blk.0.ffn_gate_exps.weight", &[32, 8, 2], 544),
        TInfo::f32("blk.0.attn_norm.weight", &[256], 2592),
    ];
    let kvs = [("general.architecture", "llama")];
    let input = tmp.path().join("mixed.gguf");
    std::fs::write(&input, gguf_bytes(3, 3, 1, &kvs, &infos, 3616)).unwrap();
    let out = tmp.path().join("out");
    let o = convert_into(&input, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out);
    let reason = |name: &str| -> String {
        let e = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["tensor"] == name)
            .unwrap_or_else(|| panic!("{name} not in the manifest"));
        assert_eq!(e["layout"], "source", "{name}");
        e["details"]["reason"].as_str().unwrap().to_string()
    };
    assert_eq!(reason("blk.0.attn_q.weight"), "IQ2_XXS: no sidecar kernel");
    assert!(reason("blk.0.ffn_gate_exps.weight").starts_with("3-D float expert tensor"));
    assert!(reason("blk.0.attn_norm.weight").starts_with("1-D"));
    let o = convert(&["inspect".into(), input.clone().into_os_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("blk.0.attn_q.weight"))
        .unwrap();
    assert!(
        line.ends_with("stays: IQ2_XXS: no sidecar kernel"),
        "{line}"
    );
}

/// Keep mode hashes each tensor beside its sidecar as it writes it (two
/// messages at once): the manifest's `source_sha256` is the sha256 of the
/// tensor's bytes (computed here) also for a matrix whose last rows are not
/// a whole group (13 rows: 1 plain tail row in R4, 5 in R8), and the
/// sidecars still unpack to the source bytes.
#[test]
fn sidecar_source_hashes_cover_the_tail_rows() {
    use ggml_quants::GgmlType;
    let tmp = tempfile::tempdir().unwrap();
    let k = 64usize;
    let mut data = Vec::new();
    let mut infos = Vec::new();
    for (name, rows) in [
        ("blk.0.attn_v.weight", 13usize),
        ("blk.0.attn_output.weight", 16),
    ] {
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
            .collect();
        let mut q = vec![0u8; rows * k / 32 * 34];
        ggml_quants::quantize_rows(GgmlType::Q8_0, &x, k, &mut q).unwrap();
        while data.len() % 32 != 0 {
            data.push(0);
        }
        infos.push(TInfo {
            name: name.into(),
            dims: vec![k as u64, rows as u64],
            ty: GgmlType::Q8_0.id(),
            offset: data.len() as u64,
        });
        data.extend_from_slice(&q);
    }
    let kvs = [("general.architecture", "llama")];
    let mut b = gguf_bytes(3, infos.len() as u64, 1, &kvs, &infos, 0);
    b.extend_from_slice(&data);
    let path = tmp.path().join("tail-rows.gguf");
    std::fs::write(&path, b).unwrap();
    let src = Catalogue::open(&path).unwrap();
    for factor in ["4", "8"] {
        let out = tmp.path().join(format!("out-{factor}"));
        let o = convert_into(&path, &out, &["--interleave", factor]);
        assert!(o.status.success(), "R{factor}: {}", stderr(&o));
        assert_eq!(
            unpack_and_compare(&out, &src, str::to_string),
            2,
            "R{factor}"
        );
        assert_source_identity(&path, &out);
    }
}

/// Keep mode hashes its sidecars and their source tensors sixteen at a
/// time where the CPU has AVX-512 (`sha256x2::update_many`), else two at a
/// time, as under `CONVERT_FORCE_ISA=avx2` here; `--bits 4` hashes the
/// sources under 64 MiB sixteen at a time there, else each beside its
/// encoder: the bundle is the same either way, every file's manifest
/// `sha256` is the sha256 of its bytes and every tensor's `source_sha256`
/// that of its source bytes (both computed here with the `sha2` crate).
#[test]
fn sidecar_hashes_are_sha256_with_and_without_sixteen_lanes() {
    use sha2::{Digest, Sha256};
    let tmp = tempfile::tempdir().unwrap();
    for (model, extra) in [
        ("models/tiny-llama-Q4_K_M.gguf", &[][..]),
        ("models/tiny-llama-Q8_0.gguf", &[][..]),
        ("models/tiny-llama-f32.gguf", &["--bits", "4"][..]),
    ] {
        let mut folders = Vec::new();
        for cap in [None, Some("avx2")] {
            let out = tmp.path().join(format!(
                "{}-{}",
                model.replace('/', "_"),
                cap.unwrap_or("native")
            ));
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_convert"));
            cmd.arg(fixture(model))
                .arg(&out)
                .args(["-q", "--threads", "2"])
                .args(extra);
            if let Some(c) = cap {
                cmd.env("CONVERT_FORCE_ISA", c);
            }
            let o = cmd.output().unwrap();
            assert!(o.status.success(), "{model} {cap:?}: {}", stderr(&o));
            assert_source_identity(&fixture(model), &out);
            let m = manifest(&out);
            let mut files = 0;
            for e in m["tensors"].as_array().unwrap() {
                let Some(f) = e["file"].as_str() else {
                    continue;
                };
                let sha: String = Sha256::digest(std::fs::read(out.join(f)).unwrap())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(e["sha256"].as_str().unwrap(), sha, "{model} {cap:?}: {f}");
                files += 1;
            }
            assert!(files >= 16, "{model}: {files} files");
            folders.push(common::folder_contents(&out));
        }
        assert_eq!(folders[0], folders[1], "{model}: sixteen lanes vs two");
    }
    eprintln!(
        "sixteen messages at once on this CPU: {}",
        sha256x2::many_supported()
    );
}
