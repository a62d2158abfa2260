//! `iterion run` (lands with its issue).

use crate::cli::RunArgs;
use crate::exit::Exit;

/// Entry point of the verb.
pub async fn run(args: RunArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion run` is not implemented yet")
}
