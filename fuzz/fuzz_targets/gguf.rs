//! libFuzzer target: see `fuzz/targets.rs` (gguf).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::targets::gguf(data));
