//! `iterion`: the thin binary. Parses flags, dispatches to one verb, maps
//! the outcome to the exit-code table of [`exit`].

mod backends;
mod cli;
mod cmd;
mod drivers;
mod exit;
mod fdlimit;
mod logging;
mod prompt;
mod render;
mod stores;
mod workflow;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    // The guard probe runs inside a sandbox before anything else may:
    // no log, no async runtime, no file descriptor limit to raise.
    if matches!(cli.command, cli::Command::GuardProbe) {
        return cmd::guard_probe::run().into();
    }
    fdlimit::raise_nofile();
    let flag = match &cli.command {
        cli::Command::Run(args) => args.log_level,
        cli::Command::Resume(args) => args.log_level,
        _ => None,
    };
    // Every verb gets the log, before it does anything (issue 16 item 5).
    match logging::settings(flag, |name| std::env::var(name).ok()) {
        Ok(settings) => logging::install(settings),
        Err(e) => return exit::report(Err(e.into())).into(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return exit::Exit::Failure.into();
        }
    };
    let outcome = runtime.block_on(cmd::dispatch(cli));
    exit::report(outcome).into()
}
