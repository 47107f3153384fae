//! libFuzzer target: see `fuzz/targets.rs` (gguf).
#![no_main]

#[path = "../alloc_limit.rs"]
mod alloc_limit;
#[path = "../targets.rs"]
mod targets;

#[global_allocator]
static ALLOC: alloc_limit::Limited = alloc_limit::Limited;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::gguf(data));
