//! `--perplexity-json`: end-to-end perplexity figures shown in a report.
//!
//! Schema `convert-perplexity` version 1 (one object per row of a
//! perplexity table such as `scripts/quality`'s; the script does not write
//! this file yet, README "Reports"):
//!
//! ```json
//! { "format": "convert-perplexity", "format_version": 1,
//!   "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "text": "Alice's Adventures in Wonderland",
//!   "chunks": 12, "ctx": 512,
//!   "rows": [ { "row": "float", "file_type": "F32", "size_mib": 513.2, "bpw": 32.0,
//!               "ppl": 19.45, "ppl_err": 0.61, "what": "..." } ] }
//! ```
//!
//! `format`, `format_version` and `rows` with `row` and `ppl` are required;
//! everything else is optional (shown when present). Unknown keys are
//! ignored.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::failure::bad_input;

/// The `format` value.
pub const FORMAT: &str = "convert-perplexity";

/// A perplexity table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Perplexity {
    /// [`FORMAT`].
    pub format: String,
    /// 1.
    pub format_version: u32,
    /// The model measured.
    #[serde(default)]
    pub model: Option<String>,
    /// The text it was measured on.
    #[serde(default)]
    pub text: Option<String>,
    /// Chunks scored.
    #[serde(default)]
    pub chunks: Option<u64>,
    /// Tokens per chunk.
    #[serde(default)]
    pub ctx: Option<u64>,
    /// One row per measured file.
    pub rows: Vec<Row>,
}

/// One measured file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Its name (`float`, `Q4_K_M`, `CQ4-engine`, ...).
    pub row: String,
    /// File type.
    #[serde(default)]
    pub file_type: Option<String>,
    /// Size in MiB.
    #[serde(default)]
    pub size_mib: Option<f64>,
    /// Bits per weight.
    #[serde(default)]
    pub bpw: Option<f64>,
    /// Perplexity.
    pub ppl: f64,
    /// Its standard error.
    #[serde(default)]
    pub ppl_err: Option<f64>,
    /// What the row is.
    #[serde(default)]
    pub what: Option<String>,
}

/// Parse and check a `--perplexity-json` file (bad input naming the file
/// and row on any problem).
pub fn read(path: &Path) -> Result<Perplexity> {
    let bytes = model_sources::mmap::read_regular(path, 64 << 20)
        .map_err(|e| bad_input(format!("--perplexity-json {}: {e}", path.display())))?;
    parse(&bytes).map_err(|why| bad_input(format!("--perplexity-json {}: {why}", path.display())))
}

/// [`read`] on bytes; the error says what is wrong.
pub fn parse(bytes: &[u8]) -> std::result::Result<Perplexity, String> {
    let p: Perplexity =
        serde_json::from_slice(bytes).map_err(|e| format!("not a {FORMAT} file: {e}"))?;
    if p.format != FORMAT || p.format_version != 1 {
        return Err(format!(
            "format {:?} version {}: expected {FORMAT:?} version 1",
            p.format, p.format_version
        ));
    }
    for r in &p.rows {
        let finite = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v >= 0.0);
        if !(r.ppl.is_finite() && r.ppl > 0.0) {
            return Err(format!(
                "row '{}': ppl {} is not a positive number",
                r.row, r.ppl
            ));
        }
        if !(finite(r.ppl_err) && finite(r.size_mib) && finite(r.bpw)) {
            return Err(format!("row '{}': a negative or non-finite number", r.row));
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_schema_and_refuses_the_rest() {
        let ok = br#"{"format":"convert-perplexity","format_version":1,"rows":[{"row":"float","ppl":19.45,"extra":1}]}"#;
        let p = parse(ok).unwrap();
        assert_eq!(p.rows.len(), 1);
        assert_eq!(p.rows[0].ppl, 19.45);
        let bad_format = br#"{"format":"x","format_version":1,"rows":[]}"#;
        assert!(parse(bad_format).unwrap_err().contains("expected"));
        let bad_ppl =
            br#"{"format":"convert-perplexity","format_version":1,"rows":[{"row":"q","ppl":-1}]}"#;
        assert!(parse(bad_ppl).unwrap_err().contains("row 'q'"));
        assert!(parse(b"[1,2]").is_err());
    }
}
