//! Packed-panel (CQ4) index math. Filled by the CQ4 issue.
