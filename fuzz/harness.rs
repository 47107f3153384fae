//! What every libFuzzer binary shares (`fuzz/fuzz_targets/*.rs` declare this
//! module and call one function of `targets`): the target bodies and the
//! 1 GiB live-allocation limit installed as the global allocator.

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "targets.rs"]
pub mod targets;

#[global_allocator]
static ALLOC: alloc_limit::Limited = alloc_limit::Limited;
