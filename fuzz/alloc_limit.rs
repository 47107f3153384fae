//! A global allocator for the fuzz binaries that aborts when the bytes
//! live at once would exceed [`LIMIT`] (1 GiB), so that libFuzzer reports
//! the input as a crash.
//!
//! libFuzzer's own `-malloc_limit_mb` works only through a sanitizer's
//! malloc hooks, and these binaries are built without a sanitizer (stable
//! Rust has none): without this, a huge `calloc` would succeed lazily and
//! be caught (later, if at all) only by `-rss_limit_mb` once its pages are
//! touched. Not used by the corpus replay test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most bytes live at once.
pub const LIMIT: usize = 1 << 30;

/// [`System`] with a limit on live bytes.
pub struct Limited;

static LIVE: AtomicUsize = AtomicUsize::new(0);

fn reserve(size: usize) {
    let before = LIVE.fetch_add(size, Ordering::Relaxed);
    if before.saturating_add(size) > LIMIT {
        // No allocation from here on: a fixed message, then abort.
        let _ = std::io::stderr().write_all(
            b"==alloc_limit== the fuzz target asked for more than 1 GiB of live memory (malloc limit)\n",
        );
        std::process::abort();
    }
}

fn release(size: usize) {
    LIVE.fetch_sub(size, Ordering::Relaxed);
}

// SAFETY: every call forwards to `System` with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        reserve(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        reserve(layout.size());
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        release(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            reserve(new_size - layout.size());
        }
        // SAFETY: as for `alloc`; `ptr` was allocated by `System` with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > layout.size() {
                release(new_size - layout.size());
            }
        } else if new_size < layout.size() {
            release(layout.size() - new_size);
        }
        p
    }
}
