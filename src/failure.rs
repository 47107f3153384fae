//! Exit codes: 2 for bad input, 1 for internal failures.

use std::fmt;

/// An error caused by the user's input (arguments or files), exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Shorthand: `Err(bad_input(...))?`.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// 2 when anything in the chain says the input is bad, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<BadInput>()
            || cause.is::<ggml_quants::QuantError>()
            || cause.is::<weights_file::ContainerError>()
            || cause.is::<weights_file::interleave::InterleaveError>()
        {
            return 2;
        }
        if let Some(e) = cause.downcast_ref::<model_sources::SourceError>() {
            return if e.is_bad_input() { 2 } else { 1 };
        }
    }
    1
}
