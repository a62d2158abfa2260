//! `iterion validate` (lands with its issue).

use crate::cli::ValidateArgs;
use crate::exit::Exit;

/// Entry point of the verb.
pub async fn run(args: ValidateArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion validate` is not implemented yet")
}
