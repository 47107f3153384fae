//! The `convert` binary end to end: every fixture model converts and
//! inspects, runs are byte-identical, bad input exits 2 with one line and
//! leaves nothing behind.

mod common;

use std::path::Path;

use common::{
    assert_deterministic, convert, convert_into, entry, fixture, folder_contents, gguf_bytes,
    good_gguf, manifest, safetensors_bytes, stderr, TInfo, MODELS,
};

#[test]
fn every_fixture_model_converts_and_inspects() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, model) in MODELS.iter().enumerate() {
        let out = tmp.path().join(format!("out{i}"));
        let o = convert([
            fixture(model).as_os_str(),
            out.as_os_str(),
            "--quiet".as_ref(),
        ]);
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(m["tensors"].as_array().unwrap().len(), 21, "{model}");
        let o = convert(["inspect".as_ref(), out.as_os_str()]);
        assert!(o.status.success(), "{model}: inspect: {}", stderr(&o));
        // Every file listed in the manifest inspects, and its hash matches.
        for e in m["tensors"].as_array().unwrap() {
            let Some(file) = e["file"].as_str() else {
                continue;
            };
            let path = out.join(file);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len() as u64, e["bytes"].as_u64().unwrap());
            let o = convert(["inspect".as_ref(), path.as_os_str(), "--json".as_ref()]);
            assert!(o.status.success(), "{file}: {}", stderr(&o));
        }
    }
}

#[test]
fn conversion_is_deterministic_across_runs_and_threads() {
    let tmp = tempfile::tempdir().unwrap();
    for model in [
        "models/tiny-llama-f32.gguf",
        "models/tiny-llama-hf-bf16",
        "models/tiny-llama-Q4_K_M.gguf",
    ] {
        assert_deterministic(tmp.path(), model, &["--torch-dtype", "bf16", "--plain"]);
    }
}

#[test]
fn float16_fails_naming_the_tensor_bf16_and_f32_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("models/tiny-llama-hf-bf16");
    let out = tmp.path().join("f16");
    let o = convert_into(&model, &out, &["--torch-dtype", "float16"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("model.layers.1.mlp.down_proj.weight"), "{err}");
    assert!(err.contains("8 values"), "{err}");
    assert!(!out.exists(), "nothing left behind");
    for dt in ["bfloat16", "float32"] {
        let out = tmp.path().join(dt);
        let o = convert_into(&model, &out, &["--plain", "--torch-dtype", dt]);
        assert!(o.status.success(), "{dt}: {}", stderr(&o));
        // The out-of-fp16 tensor is stored as FP32, not inf.
        let m = manifest(&out);
        let e = entry(&m, "model.layers.1.mlp.down_proj.weight");
        assert_eq!(e["precision"], "FP32", "{dt}");
    }
}

#[test]
fn output_folder_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("models/tiny-llama-f32.gguf");
    let out = tmp.path().join("o");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"x").unwrap();
    let o = convert([model.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    assert_eq!(o.status.code(), Some(2), "non-empty needs --force");
    assert!(stderr(&o).contains("--force"));
    let o = convert_into(&model, &out, &["--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.join("keep.txt").exists(),
        "--force keeps files that are not ours"
    );
    // The output may never be the input's folder.
    let hf = tmp.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("models/tiny-llama-hf-bf16").join(f), hf.join(f)).unwrap();
    }
    let o = convert_into(&hf, &hf, &["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(folder_contents(&hf).len(), 2, "input folder untouched");
}

/// Run a conversion of `bytes` (as `name`) and expect exit 2, one error line
/// containing `needle`, and no output.
fn expect_bad(name: &str, bytes: &[u8], needle: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join(name);
    std::fs::write(&input, bytes).unwrap();
    let out = tmp.path().join("out");
    let o = convert([input.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{name}: {err}");
    assert_eq!(err.lines().count(), 1, "{name}: one line: {err}");
    assert!(err.starts_with("error: "), "{name}: {err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "{name}: want {needle:?} in {err}"
    );
    assert!(!out.exists(), "{name}: output left behind");
}

fn expect_bad_folder(dir: &Path, needle: &str) {
    let out = dir.parent().unwrap().join("out");
    let o = convert([dir.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "want {needle:?} in {err}");
    assert!(!out.exists());
}

#[test]
fn good_crafted_gguf_converts() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("good.gguf");
    std::fs::write(&input, good_gguf()).unwrap();
    let o = convert([
        input.as_os_str(),
        tmp.path().join("out").as_os_str(),
        "-q".as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn bad_gguf_inputs_exit_2() {
    let good = good_gguf();
    expect_bad("trunc_header.gguf", &good[..20], "truncated");
    expect_bad(
        "trunc_data.gguf",
        &good[..good.len() - 10],
        "beyond the end of the file",
    );
    let t = |name: &str, dims: &[u64], ty: u32, offset: u64| TInfo {
        name: name.into(),
        dims: dims.to_vec(),
        ty,
        offset,
    };
    let one = |ti: TInfo| gguf_bytes(3, 1, 0, &[], &[ti], 256);
    // (file, tensor name, dims, ggml type id, data offset, what the error says)
    type Case<'a> = (&'a str, &'a str, &'a [u64], u32, u64, &'a str);
    let cases: [Case; 9] = [
        (
            "offset.gguf",
            "a.weight",
            &[8, 4],
            0,
            1 << 40,
            "beyond the end",
        ),
        ("size.gguf", "a.weight", &[8, 4000], 0, 0, "beyond the end"),
        (
            "overflow.gguf",
            "a.weight",
            &[1 << 40, 1 << 40],
            0,
            0,
            "overflow",
        ),
        (
            "type.gguf",
            "a.weight",
            &[8, 4],
            99,
            0,
            "unknown ggml type id 99",
        ),
        (
            "removed_type.gguf",
            "a.weight",
            &[8, 4],
            4,
            0,
            "unknown ggml type id 4",
        ),
        (
            "traversal.gguf",
            "../evil.weight",
            &[8, 4],
            0,
            0,
            "not allowed",
        ),
        ("control.gguf", "a\nb", &[8, 4], 0, 0, "not allowed"),
        (
            "ndims.gguf",
            "a.weight",
            &[1, 1, 1, 1, 1],
            0,
            0,
            "dimensions",
        ),
        ("blocks.gguf", "a.weight", &[33, 1], 8, 0, "not a multiple"),
    ];
    for (file, name, dims, ty, offset, needle) in cases {
        expect_bad(file, &one(t(name, dims, ty, offset)), needle);
    }
    let two = |second: &str, offset: u64| {
        let ts = [
            TInfo::f32("a.weight", &[8, 4], 0),
            TInfo::f32(second, &[8, 4], offset),
        ];
        gguf_bytes(3, 2, 0, &[], &ts, 256)
    };
    expect_bad("dup.gguf", &two("a.weight", 128), "duplicate tensor name");
    expect_bad("overlap.gguf", &two("b.weight", 96), "overlaps");
    expect_bad(
        "tensors.gguf",
        &gguf_bytes(3, 1 << 60, 0, &[], &[], 0),
        "absurd tensor count",
    );
    expect_bad(
        "kvs.gguf",
        &gguf_bytes(3, 0, 1 << 60, &[], &[], 0),
        "absurd metadata key/value count",
    );
    expect_bad(
        "dupkey.gguf",
        &gguf_bytes(3, 0, 2, &[("k", "a"), ("k", "b")], &[], 0),
        "duplicate metadata key",
    );
    expect_bad(
        "version.gguf",
        &gguf_bytes(1, 0, 0, &[], &[], 0),
        "version 1",
    );
    let mut long_str = gguf_bytes(3, 0, 1, &[("k", "v")], &[], 0);
    long_str[24..32].copy_from_slice(&(1u64 << 50).to_le_bytes());
    expect_bad("longstr.gguf", &long_str, "exceeds");
    expect_bad("empty.gguf", b"", "neither GGUF");
}

#[test]
fn bad_safetensors_inputs_exit_2_naming_the_tensor() {
    let mut beyond = Vec::new();
    beyond.extend_from_slice(&(1u64 << 40).to_le_bytes());
    beyond.extend_from_slice(b"{}");
    expect_bad("beyond.safetensors", &beyond, "exceeds");
    let cases = [
        (
            "overlap",
            r#"{"a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}}"#,
            24,
            "tensor 'b.weight': its data at 8 overlaps",
        ),
        (
            "dtype",
            r#"{"a.weight":{"dtype":"Q9","shape":[2],"data_offsets":[0,16]}}"#,
            16,
            "tensor 'a.weight': unknown dtype \"Q9\"",
        ),
        (
            "trav",
            r#"{"../a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
            "not allowed",
        ),
        (
            "short",
            r#"{"a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#,
            8,
            "tensor 'a.weight': data ends at 16, beyond",
        ),
        (
            "size",
            r#"{"a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}}"#,
            16,
            "tensor 'a.weight': data_offsets [0, 16] span 16 bytes",
        ),
    ];
    for (name, header, data, needle) in cases {
        let file = format!("{name}.safetensors");
        expect_bad(&file, &safetensors_bytes(header, data), needle);
    }
}

#[test]
fn bad_hf_folders_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    expect_bad_folder(&dir, "config.json is missing");
    std::fs::write(dir.join("config.json"), b"{}").unwrap();
    expect_bad_folder(&dir, "no model.safetensors");
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        br#"{"weight_map":{"a.weight":"../x.safetensors"}}"#,
    )
    .unwrap();
    expect_bad_folder(&dir, "not a plain file name");
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        br#"{"weight_map":{"a.weight":"s1.safetensors","b.weight":"s1.safetensors"}}"#,
    )
    .unwrap();
    let h = r#"{"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    std::fs::write(dir.join("s1.safetensors"), safetensors_bytes(h, 8)).unwrap();
    expect_bad_folder(
        &dir,
        "'b.weight' is listed in s1.safetensors but not stored there",
    );
}

#[test]
fn bad_container_files_exit_2_in_inspect() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let o = convert_into(&fixture("models/tiny-llama-f32.gguf"), &out, &["--plain"]);
    assert!(o.status.success());
    let good = std::fs::read(out.join("blk.0.attn_q.weight.weights")).unwrap();
    let check = |name: &str, bytes: Vec<u8>, needle: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let o = convert(["inspect".as_ref(), p.as_os_str()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: want {needle:?} in {err}");
    };
    let mut b = good.clone();
    b[..4].copy_from_slice(b"XXXX");
    check("magic.weights", b, "bad magic");
    let mut b = good.clone();
    b[52..60].copy_from_slice(&12345u64.to_le_bytes());
    check("data_bytes.weights", b, "data_bytes is 12345");
    let mut b = good.clone();
    b[8..12].copy_from_slice(&48u32.to_le_bytes());
    check("align.weights", b, "alignment 48");
    let mut b = good.clone();
    b[8..12].copy_from_slice(&64u32.to_le_bytes());
    check("misaligned.weights", b, "regions end at");
    check(
        "short.weights",
        good[..40].to_vec(),
        "shorter than the 84-byte header",
    );
}
