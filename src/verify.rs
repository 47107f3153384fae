//! `convert verify`: filled by the kernels issue.

use anyhow::Result;

use crate::cli::VerifyArgs;
use crate::failure::bad_input;

pub fn run(args: &VerifyArgs) -> Result<()> {
    Err(bad_input(format!(
        "{}: verify is not implemented yet",
        args.path.display()
    )))
}
