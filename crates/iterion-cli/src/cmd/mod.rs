//! One module per verb; each is a short function that builds what it needs
//! and renders the outcome.

mod cancel;
mod cloud;
mod files;
pub(crate) mod guard_probe;
mod launch;
mod launch_inputs;
#[cfg(feature = "driver-k8s")]
mod manifests;
mod resume;
mod run;
mod runner;
mod sandbox;
mod store_views;
mod studio;
mod submit;
mod validate;

use crate::cli::{Cli, Command, SandboxCommand};
use crate::exit::Exit;

/// Run the selected verb.
pub async fn dispatch(cli: Cli) -> anyhow::Result<Exit> {
    match cli.command {
        Command::Validate(args) => validate::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Resume(args) => resume::run(args).await,
        Command::Runs(args) => store_views::runs(args).await,
        Command::Events(args) => store_views::events(args).await,
        Command::Logs(args) => store_views::logs(args).await,
        Command::Files(args) => files::run(args).await,
        Command::Studio(args) => studio::run(args).await,
        Command::Sandbox(SandboxCommand::Doctor(args)) => sandbox::doctor(args).await,
        Command::Sandbox(SandboxCommand::Reap(args)) => sandbox::reap(args).await,
        #[cfg(feature = "driver-k8s")]
        Command::Sandbox(SandboxCommand::Manifests(args)) => manifests::run(args).await,
        #[cfg(not(feature = "driver-k8s"))]
        Command::Sandbox(SandboxCommand::Manifests(_)) => Err(crate::backends::NotBuiltIn {
            backend: crate::backends::Backend::DriverK8s,
        }
        .into()),
        Command::Submit(args) => submit::run(args).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Cancel(args) => cancel::run(args).await,
        Command::ClawRunner => Ok(claw_runner().await),
        Command::GuardProbe => Ok(guard_probe::run()),
    }
}

/// `iterion __claw-runner`: the in-box runner; its exit codes map onto the
/// table (a protocol failure is bad input).
async fn claw_runner() -> Exit {
    use iterion_agent::runner::inbox::{exit, serve_stdio};
    match serve_stdio().await {
        exit::OK => Exit::Success,
        exit::PROTOCOL => Exit::BadInput,
        _ => Exit::Failure,
    }
}
