//! libFuzzer target: see `fuzz/targets.rs` (hf_folder).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::hf_folder(data));
