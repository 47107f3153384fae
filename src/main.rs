//! `convert`: a thin binary over the workspace crates. Parses arguments,
//! runs the conversion or a subcommand, prints, and picks the exit code.

mod cli;
mod convert;
mod engine;
mod extra;
mod failure;
mod inspect;
mod manifest;
mod materialize;
mod merge;
mod mixture;
mod options;
mod outdir;
mod plan;
mod qdq;
mod shard;
mod signals;
mod verify;
mod writers;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version: print as clap formats them.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // A usage error: one line like every other error, exit 2.
            let text = e.render().to_string();
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let msg = lines.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("error: {}", failure::one_line(msg));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Some(cli::Command::Inspect(args)) => inspect::run(&args),
        Some(cli::Command::Verify(args)) => verify::run(&args),
        Some(cli::Command::Qdq(args)) => qdq::run(&args),
        Some(cli::Command::Merge(args)) => merge::run(&args),
        None => convert::run(&cli.convert),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the whole context chain, outermost first, with
            // anything from file contents that could break the line escaped.
            eprintln!("error: {}", failure::one_line(&format!("{err:#}")));
            ExitCode::from(failure::exit_code(&err))
        }
    }
}
