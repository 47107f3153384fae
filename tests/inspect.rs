//! Golden output of `convert inspect` (insta snapshots in tests/snapshots/).

mod common;

use std::process::Command;

use common::fixture;

fn run_in(dir: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_convert"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn inspect_plain_files_and_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("models/tiny-llama-f32.gguf");
    run_in(
        tmp.path(),
        &[model.to_str().unwrap(), "out", "-q", "--plain"],
    );
    run_in(
        tmp.path(),
        &[
            fixture("models/tiny-llama-Q4_K_M.gguf").to_str().unwrap(),
            "keep",
            "-q",
        ],
    );
    insta::assert_snapshot!(
        "plain_fp16_text",
        run_in(
            tmp.path(),
            &["inspect", "out/blk.0.ffn_down.weight.weights"]
        )
    );
    insta::assert_snapshot!(
        "plain_fp16_json",
        run_in(
            tmp.path(),
            &["inspect", "--json", "out/output_norm.weight.weights"]
        )
    );
    insta::assert_snapshot!("bundle_text", run_in(tmp.path(), &["inspect", "out"]));
    insta::assert_snapshot!(
        "sidecar_text",
        run_in(
            tmp.path(),
            &["inspect", "keep/blk.1.ffn_down.weight.q6_k.r8.weights"]
        )
    );
    insta::assert_snapshot!("keep_bundle_text", run_in(tmp.path(), &["inspect", "keep"]));
    run_in(
        tmp.path(),
        &[
            model.to_str().unwrap(),
            "cq4",
            "-q",
            "--bits",
            "4",
            "--layout",
            "source",
        ],
    );
    insta::assert_snapshot!(
        "cq4_hadamard_text",
        run_in(
            tmp.path(),
            &["inspect", "cq4/blk.0.ffn_down.weight.cq4p.weights"]
        )
    );
    insta::assert_snapshot!(
        "cq4_orthogonal_json",
        run_in(
            tmp.path(),
            &["inspect", "--json", "cq4/token_embd.weight.cq4p.weights"]
        )
    );
}
