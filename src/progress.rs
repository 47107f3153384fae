//! Progress bars on stderr: shown only when stderr is a terminal and the
//! command is not `--quiet`, so pipelines and logs never get bar frames.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether a bar would be drawn.
pub fn visible(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar of `total` `unit`s (`files`, `tensors`), the current item as its
/// message; hidden unless [`visible`].
pub fn bar(total: u64, unit: &str, quiet: bool) -> ProgressBar {
    let target = if visible(quiet) {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(Some(total), target);
    let template = format!("  [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} {{msg}}");
    pb.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_the_bar() {
        assert!(!visible(true));
        assert!(bar(3, "files", true).is_hidden());
    }
}
