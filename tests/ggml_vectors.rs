//! Byte-exactness of `ggml_quants` against ggml's own reference vectors
//! (made by `scripts/make_ggml_vectors.py` and, for the older files, the
//! same ggml through the same call).
//!
//! `fixtures/ggml-vectors/<type>.gguf` holds 20 rows x 1024 of `input`
//! (F32), `quantized` (`ggml_quantize_chunk` of `input` with no importance
//! matrix: `quantize_row_*_ref`, for IQ4_NL `quantize_iq4_nl`) and `dequantized` (ggml's `dequantize_row_*` of `quantized`), plus
//! the row names in `vectors.row_names`. Every row must encode to ggml's
//! bytes and decode to ggml's floats, bit for bit.
//!
//! `fixtures/ggml-imatrix/<type>.gguf` holds the same `input` and, for every
//! importance matrix NAME of `imatrix.names`, `imatrix.NAME` (F32, 1024) and
//! `quantized.NAME` (`ggml_quantize_chunk` of `input` with that matrix).
//! Every row must encode to ggml's bytes with every matrix.

use std::path::{Path, PathBuf};

use ggml_quants::{
    dequantize_rows, quantize_rows, quantize_rows_imatrix, supports_encode, uses_imatrix, GgmlType,
    IMATRIX_TYPES,
};
use model_sources::gguf::{GgufFile, Value};

const ROWS: usize = 20;
const NCOLS: usize = 1024;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ggml-vectors")
}

fn imatrix_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ggml-imatrix")
}

fn strings(gguf: &GgufFile, file: &str, key: &str) -> Vec<String> {
    match gguf.get(key) {
        Some(Value::Array(_, items)) => items
            .iter()
            .map(|v| v.as_str().expect("a string").to_string())
            .collect(),
        other => panic!("{file}: {key} is {other:?}"),
    }
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
    let row_names = strings(&gguf, file, "vectors.row_names");
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

/// The first differing byte of `ours` against `ggml`, if any, as a message.
fn first_difference(ours: &[u8], ggml: &[u8], block_bytes: usize) -> Option<String> {
    ours.iter().zip(ggml).position(|(a, b)| a != b).map(|at| {
        format!(
            "differs from ggml at byte {at} (block {}): ours {:#04x}, ggml {:#04x}",
            at / block_bytes,
            ours[at],
            ggml[at]
        )
    })
}

struct ImatrixVectors {
    row_names: Vec<String>,
    input: Vec<f32>,
    /// (name, importance matrix, ggml's quantized bytes of `input`).
    cases: Vec<(String, Vec<f32>, Vec<u8>)>,
}

fn load_imatrix(ty: GgmlType) -> ImatrixVectors {
    let file = format!("{}.gguf", ty.name().to_ascii_lowercase());
    let path = imatrix_dir().join(&file);
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let row_names = strings(&gguf, &file, "vectors.row_names");
    assert_eq!(row_names.len(), ROWS, "{file}: row names");
    let tensor = |name: &str, dims: Vec<u64>, want: GgmlType| {
        let info = gguf
            .tensor(name)
            .unwrap_or_else(|| panic!("{file}: no tensor {name}"));
        assert_eq!(info.dims, dims, "{file}: {name} dims");
        assert_eq!(info.ggml_type, want, "{file}: {name} type");
        gguf.tensor_data(info).to_vec()
    };
    let input = f32s(&tensor(
        "input",
        vec![NCOLS as u64, ROWS as u64],
        GgmlType::F32,
    ));
    let cases = strings(&gguf, &file, "imatrix.names")
        .into_iter()
        .map(|name| {
            let im = f32s(&tensor(
                &format!("imatrix.{name}"),
                vec![NCOLS as u64],
                GgmlType::F32,
            ));
            let q = tensor(
                &format!("quantized.{name}"),
                vec![NCOLS as u64, ROWS as u64],
                ty,
            );
            (name, im, q)
        })
        .collect();
    ImatrixVectors {
        row_names,
        input,
        cases,
    }
}

/// The importance matrices every imatrix file must hold.
const IMATRICES: [&str; 6] = [
    "ones",
    "random",
    "heavy_zeros",
    "huge_column",
    "random_x4",
    "random_x3",
];

/// Encodes every row with every importance matrix of the type's imatrix
/// file, one row per call and all rows in one call; returns one line per
/// failing (matrix, row).
fn check_imatrix_type(ty: GgmlType) -> Vec<String> {
    let v = load_imatrix(ty);
    let names: Vec<&str> = v.cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(names, IMATRICES, "{ty}: imatrix.names");
    let row_bytes = ty.row_bytes(NCOLS as u64).expect("1024 is whole blocks") as usize;
    let mut failures = Vec::new();
    for (name, im, expected) in &v.cases {
        assert_eq!(expected.len(), ROWS * row_bytes, "{ty} {name}: bytes");
        for (r, row_name) in v.row_names.iter().enumerate() {
            let input = &v.input[r * NCOLS..(r + 1) * NCOLS];
            let want = &expected[r * row_bytes..(r + 1) * row_bytes];
            let mut bytes = vec![0u8; row_bytes];
            match quantize_rows_imatrix(ty, input, NCOLS, im, &mut bytes) {
                Err(e) => failures.push(format!("{ty} {name} row {r} ({row_name}): {e}")),
                Ok(()) => {
                    if let Some(d) = first_difference(&bytes, want, ty.type_size()) {
                        failures.push(format!("{ty} {name} row {r} ({row_name}): {d}"));
                    }
                }
            }
        }
        // All rows in one call: rows are independent.
        let mut all = vec![0u8; ROWS * row_bytes];
        match quantize_rows_imatrix(ty, &v.input, NCOLS, im, &mut all) {
            Err(e) => failures.push(format!("{ty} {name} all rows: {e}")),
            Ok(()) => {
                if all != *expected {
                    failures.push(format!("{ty} {name}: the 20-row call differs"));
                }
            }
        }
    }
    failures
}

/// Every type ggml quantizes with importance weights, against ggml's bytes
/// (one test: the failures of every type are listed together).
#[test]
fn imatrix_rows_match_ggml() {
    use GgmlType::*;
    let types = [
        Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q8_0,
    ];
    let failures: Vec<String> = types.into_iter().flat_map(check_imatrix_type).collect();
    assert!(
        failures.is_empty(),
        "{} of {} (type, imatrix, row) triples differ from ggml:\n{}",
        failures.len(),
        types.len() * IMATRICES.len() * ROWS,
        failures.join("\n")
    );
}

fn case<'a>(v: &'a ImatrixVectors, name: &str) -> &'a [u8] {
    &v.cases.iter().find(|c| c.0 == name).expect("listed").2
}

/// Facts of ggml's importance-weighted quantizers that the fixtures record
/// (and the encoder, matching them, reproduces): the imatrix files share the
/// vectors' input; scaling the matrix by 4 never changes a byte (every
/// comparison of the searches is invariant under exact power-of-two
/// scaling); scaling it by 3 does for Q4_K (rounding); even a matrix of ones
/// changes the bytes of every type that uses one (a different search runs);
/// Q8_0 ignores the matrix.
#[test]
fn imatrix_scaling_facts() {
    for ty in IMATRIX_TYPES.iter().copied().chain([GgmlType::Q8_0]) {
        let v = load_imatrix(ty);
        let plain = load(&format!("{}.gguf", ty.name().to_ascii_lowercase()));
        assert_eq!(v.row_names, plain.row_names, "{ty}: row names");
        assert!(
            v.input
                .iter()
                .zip(&plain.input)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{ty}: the imatrix file's input differs from ggml-vectors"
        );
        assert_eq!(case(&v, "random_x4"), case(&v, "random"), "{ty}: x4");
        if uses_imatrix(ty) {
            assert_ne!(case(&v, "ones"), &plain.quantized[..], "{ty}: ones");
        } else {
            for (name, _, q) in &v.cases {
                assert_eq!(q, &plain.quantized, "{ty}: {name} changed Q8_0 bytes");
            }
        }
    }
    let q4k = load_imatrix(GgmlType::Q4_K);
    let changed = case(&q4k, "random_x3")
        .iter()
        .zip(case(&q4k, "random"))
        .filter(|(a, b)| a != b)
        .count();
    assert!(changed > 0, "Q4_K: x3 gave identical bytes");
}

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
