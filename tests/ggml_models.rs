//! Re-encoding the f32 tiny model reproduces llama.cpp's quantized models
//! tensor by tensor, byte for byte.
//!
//! `fixtures/models/tiny-llama-{Q8_0,Q5_0,Q4_K_M,Q5_K_M,Q6_K}.gguf` were
//! written by `llama_model_quantize` (no importance matrix) from
//! `tiny-llama-f32.gguf`. For every tensor of a quantized model whose type is
//! one `ggml_quants` encodes for the converter (Q8_0, Q5_0, Q4_K, Q5_K,
//! Q6_K), quantizing the same-named f32 tensor must give llama.cpp's bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ggml_quants::{dequantize_rows, quantize_rows, GgmlType};
use model_sources::gguf::GgufFile;

const CHECKED_TYPES: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models")
}

fn open(name: &str) -> GgufFile {
    let path = models_dir().join(name);
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks one quantized model; returns how many tensors of each type were
/// byte-identical. Panics with every mismatch listed.
fn check_model(file: &str) -> BTreeMap<GgmlType, usize> {
    let source = open("tiny-llama-f32.gguf");
    let quantized = open(file);
    let mut matched = BTreeMap::new();
    let mut failures = Vec::new();
    for info in quantized.tensors() {
        let ty = info.ggml_type;
        if !CHECKED_TYPES.contains(&ty) {
            continue;
        }
        let Some(src_info) = source.tensor(&info.name) else {
            failures.push(format!("{}: not in the f32 model", info.name));
            continue;
        };
        assert_eq!(src_info.ggml_type, GgmlType::F32, "{}", info.name);
        assert_eq!(src_info.dims, info.dims, "{}: dims", info.name);
        let ncols = info.dims[0] as usize;
        let values = f32s(source.tensor_data(src_info));
        let expected = quantized.tensor_data(info);
        let mut ours = vec![0u8; expected.len()];
        match quantize_rows(ty, &values, ncols, &mut ours) {
            Err(e) => failures.push(format!("{} ({ty}): {e}", info.name)),
            Ok(()) if ours != expected => {
                let at = ours
                    .iter()
                    .zip(expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let row_bytes = ty.row_bytes(ncols as u64).unwrap_or(1) as usize;
                failures.push(format!(
                    "{} ({ty}, dims {:?}): first differing byte {at} (row {}, block {})",
                    info.name,
                    info.dims,
                    at / row_bytes,
                    (at % row_bytes) / ty.type_size()
                ));
            }
            Ok(()) => {
                // And llama.cpp's bytes decode without error to the same
                // number of finite values.
                let mut back = vec![0.0f32; values.len()];
                dequantize_rows(ty, expected, ncols, &mut back).unwrap();
                assert!(back.iter().all(|v| v.is_finite()), "{}", info.name);
                *matched.entry(ty).or_insert(0) += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{file}: {} tensors differ from llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
    matched
}

#[test]
fn q8_0_model_is_byte_exact() {
    let m = check_model("tiny-llama-Q8_0.gguf");
    assert!(m.get(&GgmlType::Q8_0).copied().unwrap_or(0) > 0, "{m:?}");
}

#[test]
fn q5_0_model_is_byte_exact() {
    let m = check_model("tiny-llama-Q5_0.gguf");
    assert!(m.get(&GgmlType::Q5_0).copied().unwrap_or(0) > 0, "{m:?}");
    assert!(m.get(&GgmlType::Q6_K).copied().unwrap_or(0) > 0, "{m:?}");
}

#[test]
fn q4_k_m_model_is_byte_exact() {
    let m = check_model("tiny-llama-Q4_K_M.gguf");
    assert!(m.get(&GgmlType::Q4_K).copied().unwrap_or(0) > 0, "{m:?}");
    assert!(m.get(&GgmlType::Q6_K).copied().unwrap_or(0) > 0, "{m:?}");
}

#[test]
fn q5_k_m_model_is_byte_exact() {
    let m = check_model("tiny-llama-Q5_K_M.gguf");
    assert!(m.get(&GgmlType::Q5_K).copied().unwrap_or(0) > 0, "{m:?}");
    assert!(m.get(&GgmlType::Q6_K).copied().unwrap_or(0) > 0, "{m:?}");
}

#[test]
fn q6_k_model_is_byte_exact() {
    let m = check_model("tiny-llama-Q6_K.gguf");
    assert!(m.get(&GgmlType::Q6_K).copied().unwrap_or(0) > 0, "{m:?}");
}

/// Every 2-D tensor of the quantized models is of a checked type, so the
/// tests above cover every quantized tensor (the rest are f32 norms).
#[test]
fn every_quantized_tensor_is_covered() {
    for file in [
        "tiny-llama-Q8_0.gguf",
        "tiny-llama-Q5_0.gguf",
        "tiny-llama-Q4_K_M.gguf",
        "tiny-llama-Q5_K_M.gguf",
        "tiny-llama-Q6_K.gguf",
    ] {
        let model = open(file);
        for info in model.tensors() {
            assert!(
                CHECKED_TYPES.contains(&info.ggml_type) || info.ggml_type == GgmlType::F32,
                "{file}: {} is {}",
                info.name,
                info.ggml_type
            );
        }
    }
}
