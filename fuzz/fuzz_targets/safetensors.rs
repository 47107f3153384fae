//! libFuzzer target: see `fuzz/targets.rs` (safetensors).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::targets::safetensors(data));
