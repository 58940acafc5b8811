//! `bookie-clusters`: the operator CLI of the bookie-clusters REST API (a thin
//! shell over [`bkswitch_cli::cli`]).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use bkswitch_cli::cli::{run_with, write_error, Cli, CliError, RunOptions, EXIT_FAILURE};
use clap::Parser;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let options = RunOptions {
        progress_bars: std::io::stderr().is_terminal(),
    };
    let mut stdout = std::io::stdout().lock();
    let result = runtime.block_on(run_with(cli, &mut stdout, options));
    let flushed = stdout.flush().map_err(CliError::from);
    match result.and(flushed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = write_error(&e, &mut std::io::stderr().lock());
            ExitCode::from(e.exit_code())
        }
    }
}
