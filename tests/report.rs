//! `convert report`'s JSON twin against its sources of truth, on the
//! README's example (the committed tiny-llama-hf-bf16 model converted with
//! `--bits 4 --torch-dtype bf16`): every manifest entry appears, in order,
//! with the manifest's shape, bytes and sha256 (and those are the files'
//! real size and hash); the totals are the manifest's sums; the verify
//! section and every tensor's per-ISA verdicts are what `convert verify
//! --json` says, on the clean bundle and on one with a corrupted file.

mod common;

use std::path::Path;

use common::{convert, fixture, manifest, stderr};
use serde_json::Value;
use sha2::{Digest, Sha256};

const MODEL: &str = "models/tiny-llama-hf-bf16";

/// `convert report BUNDLE --json ...`: (exit code, the JSON twin).
fn report(bundle: &Path, dir: &Path, source: Option<&Path>) -> (i32, Value) {
    let (html, json) = (dir.join("report.html"), dir.join("report.json"));
    let mut args = vec![
        "report".into(),
        bundle.display().to_string(),
        "-o".into(),
        html.display().to_string(),
        "--json".into(),
        json.display().to_string(),
        "--quiet".into(),
    ];
    if let Some(s) = source {
        args.extend(["--source".into(), s.display().to_string()]);
    }
    let o = convert(args);
    let code = o.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "report exit {code}: {}", stderr(&o));
    assert!(html.is_file(), "no HTML written");
    (
        code,
        serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap(),
    )
}

/// `convert verify BUNDLE --json`: (exit code, its JSON).
fn verify(bundle: &Path) -> (i32, Value) {
    let o = convert(["verify".as_ref(), bundle.as_os_str(), "--json".as_ref()]);
    let code = o.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "verify exit {code}: {}", stderr(&o));
    (code, serde_json::from_slice(&o.stdout).unwrap())
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// The report's tensors, totals and header against the bundle's manifest
/// and the files on disk.
fn check_against_manifest(bundle: &Path, r: &Value) {
    let m = manifest(bundle);
    assert_eq!(r["format"], "convert-report");
    assert_eq!(r["format_version"], 1);
    for k in ["tool", "source", "options"] {
        assert_eq!(r[k], m[k], "{k}");
    }
    let entries = m["tensors"].as_array().unwrap();
    let rows = r["tensors"].as_array().unwrap();
    assert!(!entries.is_empty());
    assert_eq!(rows.len(), entries.len(), "one row per manifest entry");
    let (mut bytes, mut weights, mut files) = (0u64, 0u64, 0usize);
    for (e, t) in entries.iter().zip(rows) {
        let name = e["tensor"].as_str().unwrap();
        for k in [
            "tensor",
            "role",
            "shape",
            "source_dtype",
            "precision",
            "layout",
            "bytes",
            "sha256",
        ] {
            assert_eq!(t[k], e[k], "{name}: {k}");
        }
        assert_eq!(t["file"], e.get("file").cloned().unwrap_or(Value::Null));
        let n: u64 = e["shape"].as_array().unwrap().iter().map(u).product();
        assert_eq!(u(&t["weights"]), n, "{name}: weights");
        let bpw = t["bpw"].as_f64().unwrap();
        assert!(
            (bpw - u(&e["bytes"]) as f64 * 8.0 / n as f64).abs() < 1e-9,
            "{name}: bpw {bpw}"
        );
        if let Some(f) = e["file"].as_str() {
            let data = std::fs::read(bundle.join(f)).unwrap();
            assert_eq!(data.len() as u64, u(&t["bytes"]), "{f}: size on disk");
            let sha: String = Sha256::digest(&data)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(t["sha256"], sha.as_str(), "{f}: sha256 of the file");
            bytes += u(&e["bytes"]);
            weights += n;
            files += 1;
        }
    }
    let s = &r["summary"];
    assert_eq!(u(&s["tensors"]), entries.len() as u64);
    assert_eq!(u(&s["tensor_files"]), files as u64);
    assert_eq!(u(&s["tensor_bytes"]), bytes);
    assert_eq!(u(&s["weights"]), weights);
    let extra: u64 = m["extra_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| u(&x["bytes"]))
        .sum();
    assert_eq!(u(&s["extra_bytes"]), extra);
    let src: u64 = m["source"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| u(&x["bytes"]))
        .sum();
    assert_eq!(u(&s["source_bytes"]), src);
    assert!((s["bpw"].as_f64().unwrap() - bytes as f64 * 8.0 / weights as f64).abs() < 1e-9);
}

/// The report's verify section and per-tensor verdicts against `convert
/// verify --json` of the same bundle.
fn check_against_verify(bundle: &Path, r: &Value, v: &Value) {
    let rv = &r["verify"];
    assert_eq!(rv["isas"], v["isas"], "ISAs");
    assert!(!v["isas"].as_array().unwrap().is_empty());
    assert_eq!(rv["activation_seed"], v["activation_seed"]);
    assert_eq!(rv["files"], v["files"], "per-file results");
    assert_eq!(rv["pass"], v["pass"]);
    assert_eq!(r["summary"]["verify_pass"], v["pass"]);
    let vfiles = v["files"].as_array().unwrap();
    let mut seen = 0;
    for t in r["tensors"].as_array().unwrap() {
        let Some(f) = t["file"].as_str() else {
            assert_eq!(t["verify"], Value::Null);
            continue;
        };
        let vf = vfiles
            .iter()
            .find(|x| x["file"] == f)
            .unwrap_or_else(|| panic!("{f}: not in verify --json"));
        seen += 1;
        assert_eq!(t["verify"]["pass"], vf["pass"], "{f}: pass");
        let mine = t["verify"]["isas"].as_array().unwrap();
        let theirs = vf["results"].as_array().unwrap();
        assert_eq!(mine.len(), theirs.len(), "{f}: ISAs run");
        for (a, b) in mine.iter().zip(theirs) {
            assert_eq!(a["isa"], b["isa"], "{f}");
            assert_eq!(a["pass"], b["pass"], "{f} {}", a["isa"]);
            assert_eq!(a["e2e_rel_l2"], b["e2e_rel_l2"], "{f} {}", a["isa"]);
        }
    }
    // The rest of what verify checked: the manifest's other files, each
    // once (hash only).
    let m = manifest(bundle);
    let extras: Vec<&str> = m["extra_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        seen + extras.len(),
        vfiles.len(),
        "verify's files: tensor files + other files"
    );
    for x in extras {
        let vf: Vec<&Value> = vfiles.iter().filter(|f| f["file"] == x).collect();
        assert_eq!(vf.len(), 1, "{x}: once in verify's files");
        assert_eq!(
            vf[0]["results"],
            serde_json::json!([]),
            "{x}: no kernel run"
        );
    }
}

#[test]
fn report_json_matches_the_manifest_and_verify_on_the_readme_example() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("example");
    let model = fixture(MODEL);
    let o = convert([
        "--bits".as_ref(),
        "4".as_ref(),
        "--torch-dtype".as_ref(),
        "bf16".as_ref(),
        model.as_os_str(),
        bundle.as_os_str(),
        "--quiet".as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The clean bundle, with the reconstruction errors.
    let (code, r) = report(&bundle, tmp.path(), Some(&model));
    assert_eq!(code, 0);
    check_against_manifest(&bundle, &r);
    let (vcode, v) = verify(&bundle);
    assert_eq!(vcode, 0);
    assert_eq!(v["pass"], true);
    check_against_verify(&bundle, &r, &v);
    let rows = r["tensors"].as_array().unwrap();
    assert_eq!(u(&r["summary"]["measured"]), rows.len() as u64);
    assert!(rows.iter().all(|t| t["error"]["max_abs"].is_number()));

    // One CQ4 file corrupted: both say which file fails, and agree.
    let m = manifest(&bundle);
    let victim = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["layout"] == "cq4_packed_panels" && e["role"] == "matmul")
        .and_then(|e| e["file"].as_str())
        .unwrap()
        .to_string();
    let path = bundle.join(&victim);
    let mut data = std::fs::read(&path).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x5a;
    std::fs::write(&path, &data).unwrap();
    let (code, r) = report(&bundle, tmp.path(), None);
    assert_eq!(code, 1, "report exits 1 when a file fails verify");
    let (vcode, v) = verify(&bundle);
    assert_eq!(vcode, 1);
    check_against_verify(&bundle, &r, &v);
    assert_eq!(r["summary"]["verify_pass"], false);
    let failed: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["verify"]["pass"] == false)
        .map(|t| t["file"].as_str().unwrap())
        .collect();
    assert_eq!(failed, [victim.as_str()]);
}
