//! Scale-out (issue 16, docs/SCALE_OUT.md): `--shard I/N` + `convert merge`
//! give the single run's bundle byte for byte; merge refuses missing,
//! duplicated and mismatched shards (exit 2, naming them, no manifest);
//! `--resume` rewrites exactly the files of changed tensors.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;

/// (model, options): GGUF and Hugging Face sources, keep mode and --bits 4.
const CASES: &[(&str, &[&str])] = &[
    ("models/tiny-llama-Q8_0.gguf", &[]),
    ("models/tiny-llama-hf-bf16", &["--qtype", "q4_0"]),
    ("models/tiny-llama3.gguf", &["--bits", "4"]),
    ("models/tiny-llama3-hf", &["--bits", "4"]),
];

fn single(tmp: &Path, model: &str, opts: &[&str], name: &str) -> PathBuf {
    let out = tmp.join(name);
    let o = convert_into(&fixture(model), &out, opts);
    assert!(o.status.success(), "{model} {opts:?}: {}", stderr(&o));
    out
}

fn run_shard(model: &str, opts: &[&str], out: &Path, i: usize, n: usize) -> std::process::Output {
    let spec = format!("{i}/{n}");
    let mut all = opts.to_vec();
    all.extend(["--shard", spec.as_str()]);
    convert_into(&fixture(model), out, &all)
}

fn shard_ok(model: &str, opts: &[&str], out: &Path, i: usize, n: usize) {
    let o = run_shard(model, opts, out, i, n);
    assert!(
        o.status.success(),
        "{model} {opts:?} {i}/{n}: {}",
        stderr(&o)
    );
}

fn merge(out: &Path) -> std::process::Output {
    convert(["merge".as_ref(), out.as_os_str(), "-q".as_ref()])
}

#[test]
fn merged_shards_equal_a_single_run_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    for (c, (model, opts)) in CASES.iter().enumerate() {
        let one = single(tmp.path(), model, opts, &format!("single-{c}"));
        assert_source_identity(&fixture(model), &one);
        let want = folder_contents(&one);
        assert!(want.iter().any(|(n, _)| n == "manifest.json"));
        for n in [1, 2, 3, 7] {
            let out = tmp.path().join(format!("sharded-{c}-{n}"));
            // In reverse order: the order the shards finish in is free.
            for i in (0..n).rev() {
                shard_ok(model, opts, &out, i, n);
            }
            let partials = std::fs::read_dir(&out)
                .unwrap()
                .filter(|e| {
                    let n = e.as_ref().unwrap().file_name();
                    n.to_string_lossy().starts_with("manifest.shard-")
                })
                .count();
            assert_eq!(
                partials, n,
                "{model} {opts:?}: one partial manifest per shard"
            );
            assert!(!out.join("manifest.json").exists());
            let o = merge(&out);
            assert!(o.status.success(), "{model} {opts:?} N={n}: {}", stderr(&o));
            let got = folder_contents(&out);
            assert_eq!(
                got.iter().map(|f| &f.0).collect::<Vec<_>>(),
                want.iter().map(|f| &f.0).collect::<Vec<_>>(),
                "{model} {opts:?} N={n}: file names"
            );
            for (g, w) in got.iter().zip(&want) {
                assert!(g.1 == w.1, "{model} {opts:?} N={n}: {} differs", g.0);
            }
        }
    }
}

#[test]
fn shards_run_at_once_into_one_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, opts) = CASES[3];
    let want = folder_contents(&single(tmp.path(), model, opts, "single"));
    let out = tmp.path().join("at-once");
    let n = 5;
    let children: Vec<std::process::Child> = (0..n)
        .map(|i| {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_convert"));
            c.arg(fixture(model)).arg(&out).arg("-q").args(opts);
            c.args(["--shard", &format!("{i}/{n}"), "--threads", "1"]);
            c.stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = merge(&out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(folder_contents(&out) == want, "concurrent shards differ");
}

/// The partition is balanced by estimated cost: 3 shards of the --bits 4
/// model each get a third of the estimate, within 5 %, and together every
/// tensor and file.
#[test]
fn dry_run_shows_a_cost_balanced_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never-written");
    let o = convert_into(
        &fixture("models/tiny-llama3-hf"),
        &out,
        &["--bits", "4", "--dry-run", "--json", "--shard", "0/3"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.exists(), "--dry-run wrote {}", out.display());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shards = j["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 3);
    let loads: Vec<f64> = shards
        .iter()
        .map(|s| s["estimated_cpu_s"].as_f64().unwrap())
        .collect();
    let total = j["estimated_cpu_s"].as_f64().unwrap();
    assert!((loads.iter().sum::<f64>() - total).abs() < 1e-9 * total.max(1.0));
    let max = loads.iter().cloned().fold(0.0, f64::max);
    // Many small items: LPT evens the estimates out to a few percent.
    assert!(max < total / 3.0 * 1.05, "{loads:?}");
    let tensors: u64 = shards.iter().map(|s| s["tensors"].as_u64().unwrap()).sum();
    assert_eq!(tensors, j["tensors"].as_u64().unwrap());
    let files: u64 = shards.iter().map(|s| s["files"].as_u64().unwrap()).sum();
    // Every file but the manifest and the three engine manifests (merge's).
    assert_eq!(files + 4, j["files"].as_u64().unwrap());
}

/// Three shards of the GGUF in keep mode into `out`, all but `skip`.
fn shards_except(out: &Path, skip: Option<usize>) {
    let (model, opts) = CASES[0];
    for i in (0..3).filter(|&i| Some(i) != skip) {
        shard_ok(model, opts, out, i, 3);
    }
}

fn assert_refused(out: &Path, names: &[&str]) {
    let before = folder_contents(out);
    let o = merge(out);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    for n in names {
        assert!(e.contains(n), "the error does not name {n}: {e}");
    }
    assert!(
        !out.join("manifest.json").exists(),
        "merge wrote a manifest: {e}"
    );
    assert_eq!(
        folder_contents(out),
        before,
        "merge changed the folder: {e}"
    );
}

#[test]
fn merge_refuses_a_missing_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    shards_except(&out, Some(1));
    assert_refused(&out, &["1/3", "manifest.shard-1-of-3.json"]);
    // Once it is there, the merge goes through.
    shard_ok(CASES[0].0, CASES[0].1, &out, 1, 3);
    assert!(merge(&out).status.success());
    assert!(out.join("manifest.json").is_file());
}

#[test]
fn merge_refuses_a_duplicated_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    shards_except(&out, None);
    std::fs::copy(
        out.join("manifest.shard-2-of-3.json"),
        out.join("manifest.shard-2-of-3.again.json"),
    )
    .unwrap();
    assert_refused(&out, &["manifest.shard-2-of-3.again.json", "2/3"]);
}

#[test]
fn merge_refuses_shards_of_another_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    shards_except(&out, None);
    // A leftover of an attempt with N = 2 (its files are this bundle's).
    shard_ok(CASES[0].0, CASES[0].1, &out, 1, 2);
    assert_refused(&out, &["manifest.shard-1-of-2.json", "number of shards"]);
}

#[test]
fn merge_refuses_a_shard_with_other_options() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    let model = "models/tiny-llama3-hf";
    shard_ok(model, &["--bits", "4"], &out, 0, 2);
    // Another seed changes every CQ4 file: the other shard is not of the
    // same conversion.
    shard_ok(model, &["--bits", "4", "--seed", "7"], &out, 1, 2);
    assert_refused(
        &out,
        &["shard 1/2", "manifest.shard-1-of-2.json", "options"],
    );
}

#[test]
fn merge_refuses_a_damaged_shard_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    shards_except(&out, None);
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.shard-0-of-3.json")).unwrap())
            .unwrap();
    let file = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["file"].as_str())
        .unwrap()
        .to_string();
    let p = out.join(&file);
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    assert_refused(&out, &[&file, "shard 0/3", "sha256"]);
    std::fs::remove_file(&p).unwrap();
    assert_refused(&out, &[&file, "missing"]);
}

#[test]
fn a_shard_never_replaces_files_it_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, opts) = CASES[0];
    // A file of the user's that is no file of the bundle.
    let out = tmp.path().join("a");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    let o = run_shard(model, opts, &out, 0, 2);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("notes.txt"));
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"mine");
    // A file with the name of one this shard writes, that no shard wrote.
    let out = tmp.path().join("b");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("token_embd.weight.q8_0.r8.weights"), b"mine").unwrap();
    let refused = (0..2).filter(|&i| {
        let o = run_shard(model, opts, &out, i, 2);
        !o.status.success()
    });
    assert_eq!(
        refused.count(),
        1,
        "exactly the shard that writes it refuses"
    );
    assert_eq!(
        std::fs::read(out.join("token_embd.weight.q8_0.r8.weights")).unwrap(),
        b"mine"
    );
    // A finished bundle is no place for shards.
    let done = single(tmp.path(), model, opts, "done");
    let o = run_shard(model, opts, &done, 0, 2);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A rerun of a shard (a requeued task) replaces its own files.
    let out = tmp.path().join("c");
    shard_ok(model, opts, &out, 0, 2);
    shard_ok(model, opts, &out, 0, 2);
    shard_ok(model, opts, &out, 1, 2);
    assert!(merge(&out).status.success());
}

#[test]
fn shard_argument_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x");
    for bad in ["3/3", "1", "a/2", "0/0", "-1/2"] {
        let o = convert_into(&fixture(CASES[0].0), &out, &["--shard", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{bad}");
    }
    assert!(!out.exists());
    let o = convert_into(&fixture(CASES[0].0), &out, &["--shard", "0/2", "--resume"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Inode of every tensor file of a bundle (by file name).
fn inodes(dir: &Path) -> BTreeMap<String, u64> {
    let m = manifest(dir);
    m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["file"].as_str())
        .map(|f| (f.to_string(), std::fs::metadata(dir.join(f)).unwrap().ino()))
        .collect()
}

/// A copy of folder `src` (regular files only).
fn copy_folder(src: &Path, dst: &Path) {
    std::fs::create_dir(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// Change the first two bytes of tensor `name` in a safetensors file to
/// bf16 0.5.
fn change_tensor(file: &Path, name: &str) {
    let mut b = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let h: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let start = h[name]["data_offsets"][0].as_u64().unwrap() as usize + 8 + n;
    let new = if b[start..start + 2] == [0x00, 0x3f] {
        [0x80, 0x3e]
    } else {
        [0x00, 0x3f]
    };
    b[start..start + 2].copy_from_slice(&new);
    std::fs::write(file, b).unwrap();
}

/// File -> the importance sha256 of its CQ4 input scales, for every
/// manifest entry that has them.
fn importance_shas(m: &serde_json::Value) -> BTreeMap<String, String> {
    m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let sha = e["details"]["input_scales"]["importance_sha256"].as_str()?;
            Some((e["file"].as_str()?.to_string(), sha.to_string()))
        })
        .collect()
}

fn resume(model: &Path, out: &Path, opts: &[&str]) -> serde_json::Value {
    let mut all = opts.to_vec();
    all.extend(["--resume", "--json"]);
    let o = convert_into(model, out, &all);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn resume_rewrites_exactly_the_changed_tensors_files() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, opts, tensor) in [
        (
            "models/tiny-llama3-hf",
            &["--bits", "4"][..],
            "model.layers.1.mlp.down_proj.weight",
        ),
        (
            "models/tiny-llama3-hf",
            &["--bits", "4", "--input-scales", "none"][..],
            "model.layers.1.mlp.down_proj.weight",
        ),
        (
            "models/tiny-llama-hf-bf16",
            &["--qtype", "q8_0"][..],
            "model.layers.0.self_attn.q_proj.weight",
        ),
    ] {
        let tag = format!("{}{}", model.replace('/', "_"), opts.len());
        let src = tmp.path().join(format!("src-{tag}"));
        copy_folder(&fixture(model), &src);
        let out = tmp.path().join(format!("out-{tag}"));
        let o = convert_into(&src, &out, opts);
        assert!(o.status.success(), "{}", stderr(&o));
        let before = inodes(&out);
        let importance_before = importance_shas(&manifest(&out));

        // Nothing changed: every file is kept.
        let j = resume(&src, &out, opts);
        assert_eq!(j["reused_files"].as_u64().unwrap() as usize, before.len());
        assert_eq!(inodes(&out), before);
        // The human summary says so too.
        let mut human: Vec<&std::ffi::OsStr> = vec![src.as_os_str(), out.as_os_str()];
        human.extend(opts.iter().chain(&["--resume"]).map(std::ffi::OsStr::new));
        let o = convert(human);
        assert!(o.status.success(), "{}", stderr(&o));
        let said = format!("({} kept from the previous run, 0 converted)", before.len());
        assert!(stderr(&o).contains(&said), "{}", stderr(&o));

        // One tensor changed: exactly its file is written again, and the
        // files whose input scales (FORMAT.md §CQ4.17: estimated from every
        // layer's weights downstream of the embedding) changed with it.
        change_tensor(&src.join("model.safetensors"), tensor);
        let j = resume(&src, &out, opts);
        let after = inodes(&out);
        let rewritten: Vec<&String> = after
            .iter()
            .filter(|(f, ino)| before.get(*f) != Some(ino))
            .map(|(f, _)| f)
            .collect();
        let m = manifest(&out);
        let entry = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["tensor"] == tensor || e["hf_name"] == tensor)
            .unwrap();
        let importance_after = importance_shas(&m);
        let mut want: Vec<&str> = importance_after
            .iter()
            .filter(|(f, sha)| importance_before.get(*f) != Some(sha))
            .map(|(f, _)| f.as_str())
            .chain([entry["file"].as_str().unwrap()])
            .collect();
        want.sort();
        want.dedup();
        if !opts.contains(&"--bits") || opts.contains(&"none") {
            assert!(importance_after.is_empty(), "{model}: no input scales");
        } else {
            // The changed down_proj of the last layer feeds the final norm:
            // the tied lm_head's estimate moves, the earlier layers' do not.
            assert_eq!(want.len(), 2, "{model}: {want:?}");
        }
        assert_eq!(rewritten, want, "{model}");
        assert_eq!(
            j["reused_files"].as_u64().unwrap() as usize,
            before.len() - want.len()
        );
        // And the result is a fresh run's, byte for byte.
        let fresh = tmp.path().join(format!("fresh-{tag}"));
        let o = convert_into(&src, &fresh, opts);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            folder_contents(&fresh) == folder_contents(&out),
            "{model}: resume != fresh"
        );

        // Other options: nothing can be kept.
        let mut other = opts.to_vec();
        if opts.contains(&"--bits") {
            other.extend(["--seed", "9"]);
        } else {
            other.extend(["--interleave", "4"]);
        }
        let j = resume(&src, &out, &other);
        assert_eq!(j["reused_files"], 0, "{model}");

        // A kept file that was damaged is written again.
        let j = resume(&src, &out, opts);
        assert_eq!(j["reused_files"], 0, "{model}: the files of other options");
        let victim = after.keys().next().unwrap().clone();
        let p = out.join(&victim);
        let mut b = std::fs::read(&p).unwrap();
        b[100] ^= 0xff;
        std::fs::write(&p, &b).unwrap();
        let j = resume(&src, &out, opts);
        assert_eq!(
            j["reused_files"].as_u64().unwrap() as usize,
            before.len() - 1
        );
        assert!(
            folder_contents(&fresh) == folder_contents(&out),
            "{model}: repaired"
        );
    }
}
