//! `convert`: a thin binary over the workspace crates. Parses arguments,
//! runs the conversion or a subcommand, prints, and picks the exit code.

mod cli;
mod convert;
mod engine;
mod extra;
mod failure;
mod importance;
mod inspect;
mod manifest;
mod materialize;
mod merge;
mod mixture;
mod options;
mod outdir;
mod plan;
mod progress;
mod qdq;
mod report;
mod shard;
mod shell;
mod signals;
mod verify;
mod writers;

use std::io::Write as _;
use std::path::Path;
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
        Some(cli::Command::Report(args)) => report_command(&args),
        Some(cli::Command::Completions(args)) => print_bytes(&shell::completions(args.shell)),
        Some(cli::Command::Man) => shell::man_page()
            .map_err(anyhow::Error::from)
            .and_then(|m| print_bytes(&m)),
        None => convert::run(&cli.convert).and_then(|()| match &cli.convert.report {
            // The bundle is committed: a failing report leaves it in place.
            Some(file) => {
                let out = cli.convert.output.as_deref().unwrap_or(Path::new("."));
                let req = report::Request {
                    bundle: out,
                    source: cli.convert.input.as_deref(),
                    perplexity: None,
                    isa: cli::IsaArg::All,
                    quiet: cli.convert.quiet || cli.convert.json,
                };
                let w = report::write(&req, file, None)?;
                if !cli.convert.quiet && !cli.convert.json {
                    eprintln!("  report: {}", w.html.display());
                }
                Ok(())
            }
            None => Ok(()),
        }),
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

/// `convert report`: write the files, say where they are.
fn report_command(args: &cli::ReportArgs) -> anyhow::Result<()> {
    let req = report::Request {
        bundle: &args.bundle,
        source: args.source.as_deref(),
        perplexity: args.perplexity_json.as_deref(),
        isa: args.isa,
        quiet: args.quiet,
    };
    let w = report::write(&req, &args.output, args.json.as_deref())?;
    if w.failed_files > 0 {
        return Err(anyhow::anyhow!(
            "verification failed: {} files (the report {} shows which)",
            w.failed_files,
            w.html.display()
        ));
    }
    if !args.quiet {
        let json = w
            .json
            .map(|j| format!(" and {}", j.display()))
            .unwrap_or_default();
        eprintln!("report: {}{json}", w.html.display());
    }
    Ok(())
}

/// Generated text (completions, man page) to stdout.
fn print_bytes(b: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(b).and_then(|()| out.flush())?;
    Ok(())
}
