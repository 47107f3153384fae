//! libFuzzer target: see `fuzz/targets.rs` (hf_folder).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::targets::hf_folder(data));
