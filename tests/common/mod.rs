//! Helpers shared by the integration tests: paths, running the binary, and
//! a tiny GGUF / safetensors byte builder for crafting malformed inputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The project root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path under fixtures/.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// The fixture models a conversion test runs on.
pub const MODELS: &[&str] = &[
    "models/tiny-llama-f32.gguf",
    "models/tiny-llama-Q8_0.gguf",
    "models/tiny-llama-Q5_0.gguf",
    "models/tiny-llama-Q4_K_M.gguf",
    "models/tiny-llama-Q5_K_M.gguf",
    "models/tiny-llama-Q6_K.gguf",
    "models/tiny-llama-hf-bf16",
];

/// Run the `convert` binary.
pub fn convert<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_convert"))
        .args(args)
        .output()
        .expect("run convert")
}

/// `convert INPUT OUT -q OPTS...` (a conversion, quiet).
pub fn convert_into(input: &Path, out: &Path, opts: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec![input.as_os_str(), out.as_os_str(), "-q".as_ref()];
    args.extend(opts.iter().map(|o| std::ffi::OsStr::new(*o)));
    convert(args)
}

/// A new empty folder `parent/name`.
pub fn new_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every regular file under `dir` (relative name, bytes), sorted.
pub fn folder_contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A GGUF tensor info for [`gguf_bytes`].
pub struct TInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: u32,
    pub offset: u64,
}

impl TInfo {
    pub fn f32(name: &str, dims: &[u64], offset: u64) -> Self {
        TInfo {
            name: name.into(),
            dims: dims.to_vec(),
            ty: 0,
            offset,
        }
    }
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// A GGUF file: header with explicit counts (which may lie), string
/// key/values, tensor infos, padding to 32, then `data_len` bytes of data.
pub fn gguf_bytes(
    version: u32,
    n_tensors: u64,
    n_kv: u64,
    kvs: &[(&str, &str)],
    tensors: &[TInfo],
    data_len: usize,
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut b, k);
        b.extend_from_slice(&8u32.to_le_bytes());
        put_str(&mut b, v);
    }
    for t in tensors {
        put_str(&mut b, &t.name);
        b.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&t.ty.to_le_bytes());
        b.extend_from_slice(&t.offset.to_le_bytes());
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend((0..data_len).map(|i| (i % 251) as u8));
    b
}

/// A well-formed GGUF with two f32 tensors of 4x8 (128 bytes each).
pub fn good_gguf() -> Vec<u8> {
    gguf_bytes(
        3,
        2,
        1,
        &[("general.architecture", "llama")],
        &[
            TInfo::f32("blk.0.attn_q.weight", &[8, 4], 0),
            TInfo::f32("blk.0.attn_k.weight", &[8, 4], 128),
        ],
        256,
    )
}

/// A safetensors file from a raw JSON header and data.
pub fn safetensors_bytes(header: &str, data_len: usize) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(header.len() as u64).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend(std::iter::repeat_n(0u8, data_len));
    b
}

/// A bundle's manifest.json as JSON.
pub fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// The manifest entry of `tensor`.
pub fn entry<'m>(manifest: &'m serde_json::Value, tensor: &str) -> &'m serde_json::Value {
    manifest["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tensor"] == tensor)
        .unwrap_or_else(|| panic!("no manifest entry for {tensor}"))
}

/// Converting `model` with `opts` gives byte-identical folders with
/// `--threads 1`, `--threads 2` and a second `--threads 2` run.
pub fn assert_deterministic(tmp: &Path, model: &str, opts: &[&str]) {
    let mut folders = Vec::new();
    for (j, threads) in ["1", "2", "2"].iter().enumerate() {
        let out = tmp.join(format!("{}-{}-{j}", model.replace('/', "_"), opts.join("")));
        let mut all = vec!["--threads", threads];
        all.extend_from_slice(opts);
        let o = convert_into(&fixture(model), &out, &all);
        assert!(o.status.success(), "{model} {opts:?}: {}", stderr(&o));
        folders.push(folder_contents(&out));
    }
    assert_eq!(folders[0], folders[1], "{model} {opts:?}: --threads 1 vs 2");
    assert_eq!(folders[1], folders[2], "{model} {opts:?}: two runs");
}

/// Each source file's digest (docs/FORMAT.md §source digest), computed here
/// from the catalogue's tensor ranges: sha256 of the tag, of the bytes no
/// tensor covers (in file order) and of each tensor's bytes (catalogue
/// order). Keyed by the file's name as the manifest spells it (`names`).
pub fn source_digests(model: &Path) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let cat = model_sources::Catalogue::open(model).unwrap();
    (0..cat.files.len())
        .map(|f| {
            let bytes = cat.files[f].bytes();
            let mut covered = vec![false; bytes.len()];
            let mut tensor_hashes = Vec::new();
            for t in cat.tensors.iter().filter(|t| t.file == f) {
                let (s, e) = (t.offset as usize, (t.offset + t.n_bytes) as usize);
                covered[s..e].iter_mut().for_each(|c| *c = true);
                tensor_hashes.extend(Sha256::digest(&bytes[s..e]));
            }
            let rest: Vec<u8> = bytes
                .iter()
                .zip(&covered)
                .filter(|(_, c)| !**c)
                .map(|(b, _)| *b)
                .collect();
            let mut h = Sha256::new();
            h.update(b"convert source digest v1\n");
            h.update(Sha256::digest(&rest));
            h.update(&tensor_hashes);
            h.finalize().iter().map(|b| format!("{b:02x}")).collect()
        })
        .collect()
}

/// The manifest of `out` records `model`'s digests (computed here) and each
/// tensor's `source_sha256` (the sha256 of its bytes in the source).
pub fn assert_source_identity(model: &Path, out: &Path) {
    use sha2::{Digest, Sha256};
    let m = manifest(out);
    let want = source_digests(model);
    let files = m["source"]["files"].as_array().unwrap();
    assert_eq!(files.len(), want.len());
    for (f, w) in files.iter().zip(&want) {
        assert_eq!(f["digest"].as_str().unwrap(), w, "digest of {}", f["name"]);
    }
    let cat = model_sources::Catalogue::open(model).unwrap();
    for (e, t) in m["tensors"].as_array().unwrap().iter().zip(&cat.tensors) {
        let sha: String = Sha256::digest(cat.data(t))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(e["source_sha256"].as_str().unwrap(), sha, "{}", t.name);
    }
}
