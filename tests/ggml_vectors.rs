//! Byte-exactness of `ggml_quants` against ggml's own reference vectors.
//!
//! `fixtures/ggml-vectors/<type>.gguf` holds 20 rows x 1024 of `input`
//! (F32), `quantized` (`ggml_quantize_chunk` of `input` with no importance
//! matrix: `quantize_row_*_ref`, for IQ4_NL `quantize_iq4_nl`) and
//! `dequantized` (ggml's `dequantize_row_*` of `quantized`), plus the row
//! names in `vectors.row_names`. Every row must encode to ggml's bytes and
//! decode to ggml's floats, bit for bit.

use std::path::{Path, PathBuf};

use ggml_quants::{dequantize_rows, quantize_rows, supports_encode, GgmlType};
use model_sources::gguf::{GgufFile, Value};

const ROWS: usize = 20;
const NCOLS: usize = 1024;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ggml-vectors")
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

struct Vectors {
    row_names: Vec<String>,
    input: Vec<f32>,
    quantized_type: GgmlType,
    quantized: Vec<u8>,
    dequantized: Vec<f32>,
}

fn load(file: &str) -> Vectors {
    let path = vectors_dir().join(file);
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let row_names = match gguf.get("vectors.row_names") {
        Some(Value::Array(_, items)) => items
            .iter()
            .map(|v| v.as_str().expect("row name is a string").to_string())
            .collect::<Vec<_>>(),
        other => panic!("{file}: vectors.row_names is {other:?}"),
    };
    assert_eq!(row_names.len(), ROWS, "{file}: row names");
    let tensor = |name: &str| {
        let info = gguf
            .tensor(name)
            .unwrap_or_else(|| panic!("{file}: no tensor {name}"));
        assert_eq!(
            info.dims,
            vec![NCOLS as u64, ROWS as u64],
            "{file}: {name} dims"
        );
        (info.ggml_type, gguf.tensor_data(info).to_vec())
    };
    let (input_type, input) = tensor("input");
    let (quantized_type, quantized) = tensor("quantized");
    let (dequantized_type, dequantized) = tensor("dequantized");
    assert_eq!(input_type, GgmlType::F32);
    assert_eq!(dequantized_type, GgmlType::F32);
    Vectors {
        row_names,
        input: f32s(&input),
        quantized_type,
        quantized,
        dequantized: f32s(&dequantized),
    }
}

/// Checks every row of one type and returns one line per failing row.
fn check_type(file: &str, ty: GgmlType) -> Vec<String> {
    let v = load(file);
    assert_eq!(v.quantized_type, ty, "{file}: type of `quantized`");
    let row_bytes = ty.row_bytes(NCOLS as u64).expect("1024 is whole blocks") as usize;
    assert_eq!(
        v.quantized.len(),
        ROWS * row_bytes,
        "{file}: quantized bytes"
    );
    let mut failures = Vec::new();
    for (r, name) in v.row_names.iter().enumerate() {
        let input = &v.input[r * NCOLS..(r + 1) * NCOLS];
        let expected_bytes = &v.quantized[r * row_bytes..(r + 1) * row_bytes];
        let expected_floats = &v.dequantized[r * NCOLS..(r + 1) * NCOLS];

        if supports_encode(ty) {
            let mut bytes = vec![0u8; row_bytes];
            match quantize_rows(ty, input, NCOLS, &mut bytes) {
                Err(e) => failures.push(format!("{ty} row {r} ({name}): encode failed: {e}")),
                Ok(()) => {
                    if let Some(at) = bytes.iter().zip(expected_bytes).position(|(a, b)| a != b) {
                        failures.push(format!(
                            "{ty} row {r} ({name}): encode differs from ggml at byte {at} \
                             (block {}): ours {:#04x}, ggml {:#04x}",
                            at / ty.type_size(),
                            bytes[at],
                            expected_bytes[at]
                        ));
                    }
                }
            }
        }

        let mut floats = vec![0.0f32; NCOLS];
        match dequantize_rows(ty, expected_bytes, NCOLS, &mut floats) {
            Err(e) => failures.push(format!("{ty} row {r} ({name}): decode failed: {e}")),
            Ok(()) => {
                if let Some(at) = floats
                    .iter()
                    .zip(expected_floats)
                    .position(|(a, b)| a.to_bits() != b.to_bits())
                {
                    failures.push(format!(
                        "{ty} row {r} ({name}): decode differs from ggml at value {at}: ours {:e} ({:#010x}), ggml {:e} ({:#010x})",
                        floats[at],
                        floats[at].to_bits(),
                        expected_floats[at],
                        expected_floats[at].to_bits()
                    ));
                }
            }
        }
    }
    failures
}

macro_rules! vector_test {
    ($name:ident, $file:literal, $ty:expr) => {
        #[test]
        fn $name() {
            let failures = check_type($file, $ty);
            assert!(
                failures.is_empty(),
                "{} of {} rows x (encode, decode) differ from ggml:\n{}",
                failures.len(),
                ROWS,
                failures.join("\n")
            );
        }
    };
}

vector_test!(q8_0_rows_match_ggml, "q8_0.gguf", GgmlType::Q8_0);
vector_test!(q5_0_rows_match_ggml, "q5_0.gguf", GgmlType::Q5_0);
vector_test!(q4_k_rows_match_ggml, "q4_k.gguf", GgmlType::Q4_K);
vector_test!(q5_k_rows_match_ggml, "q5_k.gguf", GgmlType::Q5_K);
vector_test!(q6_k_rows_match_ggml, "q6_k.gguf", GgmlType::Q6_K);
vector_test!(q4_0_rows_match_ggml, "q4_0.gguf", GgmlType::Q4_0);
vector_test!(q4_1_rows_match_ggml, "q4_1.gguf", GgmlType::Q4_1);
vector_test!(q5_1_rows_match_ggml, "q5_1.gguf", GgmlType::Q5_1);
vector_test!(f16_rows_match_ggml, "f16.gguf", GgmlType::F16);
vector_test!(bf16_rows_match_ggml, "bf16.gguf", GgmlType::BF16);
vector_test!(q2_k_rows_match_ggml, "q2_k.gguf", GgmlType::Q2_K);
vector_test!(q3_k_rows_match_ggml, "q3_k.gguf", GgmlType::Q3_K);
vector_test!(iq4_nl_rows_match_ggml, "iq4_nl.gguf", GgmlType::IQ4_NL);
vector_test!(iq4_xs_rows_match_ggml, "iq4_xs.gguf", GgmlType::IQ4_XS);

/// The types the converter must encode are all covered by the vectors above.
#[test]
fn required_encoders_are_supported() {
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        assert!(supports_encode(ty), "{ty}");
    }
}
