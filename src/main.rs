//! The `cairn` command-line tool.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) if cli::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let style = cli::output::Style::stderr();
            eprintln!("{} {}", style.red("error:"), cli::describe(&e));
            cli::exit_code_for(&e)
        }
    }
}
