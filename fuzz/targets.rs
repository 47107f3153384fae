//! The bodies of the fuzz targets, shared by the libFuzzer binaries
//! (`fuzz/fuzz_targets/*.rs`) and the corpus replay test of the main suite
//! (`tests/fuzz_corpus.rs`), both of which include this file with
//! `#[path]`. One copy of the code means the test replays exactly what the
//! fuzzer ran.
//!
//! Each function takes arbitrary bytes and must return without panicking,
//! whatever they are. Besides "no panic", each one asserts the invariants
//! its parser promises when it accepts a file (every tensor's bytes lie in
//! the file, and so on): a parser that accepts a file it should reject is a
//! bug even when nothing crashes yet.

#![allow(dead_code)]

use std::path::PathBuf;

use ggml_quants::{Dtype, GgmlType, TorchDtype};

/// Longest row the GGUF target decodes (keeps one run fast whatever the
/// header claims; the row's bytes are in the file anyway).
const MAX_DECODE_COLS: u64 = 1 << 16;

/// GGUF: `model_sources::gguf::parse`, then for every tensor the dtype
/// mapping and a decode of its first row.
pub fn gguf(data: &[u8]) {
    let Ok(h) = model_sources::gguf::parse(data) else {
        return;
    };
    assert!(h.version == 2 || h.version == 3);
    assert!(h.alignment.is_power_of_two());
    assert_eq!(h.data_offset % h.alignment, 0);
    for (_, v) in &h.metadata {
        let _ = v.value_type().name();
        let _ = v.as_u64();
        let _ = v.to_json();
    }
    for t in &h.tensors {
        let dtype = Dtype::of_ggml(t.ggml_type);
        let _ = dtype.to_string();
        let _ = (dtype.is_float(), dtype.ggml());
        assert_eq!(t.shape().len(), t.dims.len());
        let n = t.n_elements();
        // parse() promises the data lies in the file.
        let start = h.data_offset.checked_add(t.offset).expect("tensor start");
        let end = start.checked_add(t.n_bytes).expect("tensor end");
        assert!(end <= data.len() as u64, "tensor '{}' past the end", t.name);
        let bytes = &data[start as usize..end as usize];
        let ncols = t.dims[0];
        if n == 0 || ncols > MAX_DECODE_COLS || !ggml_quants::supports_decode(t.ggml_type) {
            continue;
        }
        let row = t.ggml_type.row_bytes(ncols).expect("row bytes") as usize;
        let mut out = vec![0f32; ncols as usize];
        let _ = ggml_quants::materialize_rows(
            t.ggml_type,
            &bytes[..row],
            ncols as usize,
            TorchDtype::Float16,
            &mut out,
        );
    }
}

/// One safetensors file: `model_sources::safetensors_file::parse`.
pub fn safetensors(data: &[u8]) {
    let Ok(h) = model_sources::safetensors_file::parse(data) else {
        return;
    };
    // parse() promises the tensors tile the data region exactly.
    let mut end = h.data_offset;
    for t in &h.tensors {
        assert_eq!(
            t.offset, end,
            "tensor '{}' is not where the last ended",
            t.name
        );
        end = t.offset + t.n_bytes;
        let _ = &data[t.offset as usize..end as usize];
        let _ = t.dtype.to_string();
        if let Some(g) = t.dtype.ggml() {
            assert!(matches!(g, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16));
        }
    }
    assert_eq!(end, data.len() as u64);
}

/// The separator between the files of a [`hf_folder`] input.
pub const HF_SEPARATOR: &[u8] = b"\n--\n";

/// Names the parts of a [`hf_folder`] input are written to, in order, when
/// the input has an index (the second part is not empty).
pub const HF_SHARDED: [&str; 4] = [
    "config.json",
    "model.safetensors.index.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
];

/// Every name [`hf_folder`] may write (the rest are removed between runs).
const HF_NAMES: [&str; 5] = [
    "config.json",
    "model.safetensors.index.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors",
];

/// The folder this thread writes [`hf_folder`] inputs to: one per process
/// and thread, created once and reused by every run. It is under
/// `/dev/shm` when that exists: on ext4, rewriting files thousands of times
/// a second makes the run wait for the disk (about 5 ms a run instead of
/// 0.1 ms in memory).
fn hf_dir() -> PathBuf {
    thread_local! {
        static DIR: PathBuf = {
            let tid = format!("{:?}", std::thread::current().id());
            let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
            let shm = std::path::Path::new("/dev/shm");
            let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
            let d = base.join(format!(
                "convert-fuzz-hf-{}-{tid}",
                std::process::id()
            ));
            std::fs::create_dir_all(&d).expect("create the fuzz folder");
            d
        };
    }
    DIR.with(PathBuf::clone)
}

/// Remove this thread's [`hf_folder`] folder (the replay test calls it at
/// the end; the fuzzer leaves its folder in the temp dir).
pub fn hf_cleanup() {
    let _ = std::fs::remove_dir_all(hf_dir());
}

/// Split a [`hf_folder`] input into its files: `(name, bytes)`. Parts are
/// separated by [`HF_SEPARATOR`]: config.json, the index, then one or two
/// shards. With an empty index part there is no index and the third part
/// is `model.safetensors`. Missing parts are files that do not exist.
pub fn hf_files(data: &[u8]) -> Vec<(&'static str, &[u8])> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while parts.len() < 3 {
        match rest
            .windows(HF_SEPARATOR.len())
            .position(|w| w == HF_SEPARATOR)
        {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + HF_SEPARATOR.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    let sharded = parts.get(1).is_some_and(|p| !p.is_empty());
    let mut files = Vec::new();
    for (i, p) in parts.into_iter().enumerate() {
        let name = match (i, sharded) {
            (1, false) => continue,
            (2, false) => "model.safetensors",
            (3, false) => continue,
            _ => HF_SHARDED[i],
        };
        files.push((name, p));
    }
    files
}

/// A Hugging Face folder: the input split by [`hf_files`] is written into
/// a reused temp folder, then `model_sources::Catalogue::open` reads it.
pub fn hf_folder(data: &[u8]) {
    let dir = hf_dir();
    let files = hf_files(data);
    for name in HF_NAMES {
        if !files.iter().any(|(n, _)| *n == name) {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    for (name, bytes) in &files {
        // A new file rather than a truncated old one (ext4 flushes those).
        let _ = std::fs::remove_file(dir.join(name));
        std::fs::write(dir.join(name), bytes).expect("write a fuzz input file");
    }
    let Ok(cat) = model_sources::Catalogue::open(&dir) else {
        return;
    };
    assert!(!cat.files.is_empty());
    for t in &cat.tensors {
        // Catalogue::data slices the map: it must be in bounds.
        assert_eq!(cat.data(t).len() as u64, t.n_bytes);
        let _ = (t.n_elements(), t.ncols(), t.nrows(), t.role.as_str());
    }
    let _ = cat.total_bytes();
}

/// A `.weights` container: `weights_file::WeightsFile::parse` on a 64-byte
/// aligned copy, then on success the per-file verification `convert
/// verify` runs (`kernel_check::check::check_container`, scalar tier).
pub fn weights(data: &[u8]) {
    let buf = kernels::aligned::AlignedBytes::copy_of(data);
    let bytes = buf.as_slice();
    let Ok(f) = weights_file::WeightsFile::parse(bytes) else {
        return;
    };
    // parse() promises the regions lie in the file.
    let _ = (f.header_bytes(), f.scales(), f.data());
    let fc = kernel_check::check::check_container(bytes, &[kernels::Isa::Scalar]);
    let _ = fc.pass();
}
