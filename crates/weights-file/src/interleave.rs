//! Row-interleave (R4 / R8) index math. Filled by the sidecar issue.
