//! Sidecar bundles: unpack to exactly the source tensors, `--qtype` gives
//! llama.cpp's bytes, determinism, and bad input.

mod common;

use std::path::Path;

use common::{
    assert_deterministic, convert, convert_into, fixture, gguf_bytes, manifest, stderr, TInfo,
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
            // Every tensor that stays in the source is listed with the source's hash.
            let m = manifest(&out);
            let src_sha = m["source"]["files"][0]["sha256"].clone();
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
