//! `convert`: a thin binary over the workspace crates. Parses arguments,
//! runs the conversion or a subcommand, prints, and picks the exit code.

mod cli;
mod convert;
mod failure;
mod inspect;
mod manifest;
mod output;
mod panels;
mod sidecar;
mod verify;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        Some(cli::Command::Inspect(args)) => inspect::run(&args),
        Some(cli::Command::Verify(args)) => verify::run(&args),
        None => convert::run(&cli.convert),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the whole context chain, outermost first.
            eprintln!("error: {err:#}");
            ExitCode::from(failure::exit_code(&err))
        }
    }
}
