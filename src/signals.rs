//! SIGINT / SIGTERM / SIGHUP: remove what the run has written and exit
//! with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM).
//!
//! A dedicated thread waits for the signals (the `signal-hook` crate's
//! iterator: the handler itself only writes to a pipe, everything else runs
//! on that thread) and calls [`crate::outdir::interrupt`], which waits for a
//! swap in progress, removes the staging folder and exits.

use std::sync::OnceLock;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

static INSTALLED: OnceLock<()> = OnceLock::new();

/// Start the signal thread (once per process).
pub fn install() -> Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                crate::outdir::interrupt(sig);
            }
        })
        .context("cannot start the signal thread")?;
    let _ = INSTALLED.set(());
    Ok(())
}
