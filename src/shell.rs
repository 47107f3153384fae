//! `convert completions SHELL` and `convert man`: generated from the clap
//! definitions in `cli`, so they never drift from the real arguments.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, ShellArg};

/// The completion script of `shell` for the `convert` binary.
pub fn completions(shell: ShellArg) -> Vec<u8> {
    let shell = match shell {
        ShellArg::Bash => Shell::Bash,
        ShellArg::Zsh => Shell::Zsh,
        ShellArg::Fish => Shell::Fish,
    };
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "convert", &mut out);
    out
}

/// The man page convert(1) in roff.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_every_subcommand() {
        for sh in [ShellArg::Bash, ShellArg::Zsh, ShellArg::Fish] {
            let s = String::from_utf8(completions(sh)).unwrap();
            for sub in ["inspect", "verify", "qdq", "report", "completions", "man"] {
                assert!(s.contains(sub), "{sh:?} lacks {sub}");
            }
            // fish spells long options `-l torch-dtype`.
            assert!(s.contains("torch-dtype"), "{sh:?}");
        }
    }

    #[test]
    fn man_page_is_roff_with_the_options() {
        let m = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(
            m.starts_with(".ie \\n(.g .ds Aq") || m.contains(".TH convert"),
            "{}",
            &m[..80]
        );
        assert!(m.contains(".TH convert"));
        assert!(m.contains("torch\\-dtype"), "options are documented");
        assert!(m.contains("report"), "subcommands are listed");
    }
}
