//! `iterion runs`, `events`, `logs` (land with the store issue).

use crate::cli::{EventsArgs, LogsArgs, RunsArgs};
use crate::exit::Exit;

/// `iterion runs`.
pub async fn runs(args: RunsArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion runs` is not implemented yet")
}

/// `iterion events`.
pub async fn events(args: EventsArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion events` is not implemented yet")
}

/// `iterion logs`.
pub async fn logs(args: LogsArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion logs` is not implemented yet")
}
