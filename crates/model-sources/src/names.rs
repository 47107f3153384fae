//! Tensor names that can safely become parts of output file names.

use crate::error::ErrorKind;

/// Reject names that are empty, contain control characters, NUL, path
/// separators used as traversal (`../`, `..\`), or are absolute paths.
///
/// Plain `/` inside a name is allowed (some checkpoints use it as a
/// separator); the binary replaces it when it builds file names.
pub fn check_tensor_name(name: &str) -> Result<(), ErrorKind> {
    let bad = name.is_empty()
        || name.len() > 4096
        || name.chars().any(|c| c.is_control())
        || name.starts_with('/')
        || name.starts_with('\\')
        || name
            .split(['/', '\\'])
            .any(|part| part == ".." || part == ".");
    if bad {
        Err(ErrorKind::UnsafeName(name.to_string()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_traversal_and_controls() {
        for bad in [
            "",
            "../x",
            "a/../b",
            "a\\..\\b",
            "/etc/passwd",
            "a\nb",
            "a\0b",
            ".",
        ] {
            assert!(check_tensor_name(bad).is_err(), "{bad:?}");
        }
        for good in [
            "blk.0.attn_q.weight",
            "model.layers.1.mlp.down_proj.weight",
            "a..b",
            "x/y",
        ] {
            assert!(check_tensor_name(good).is_ok(), "{good:?}");
        }
    }
}
