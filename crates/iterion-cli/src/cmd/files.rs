//! `iterion files` (lands with its issue).

use crate::cli::FilesArgs;
use crate::exit::Exit;

/// Entry point of the verb.
pub async fn run(args: FilesArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion files` is not implemented yet")
}
