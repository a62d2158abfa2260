//! `iterion sandbox doctor` and `iterion sandbox reap` (land with their issues).

use crate::cli::{DoctorArgs, ReapArgs};
use crate::exit::Exit;

/// `iterion sandbox doctor`.
pub async fn doctor(args: DoctorArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion sandbox doctor` is not implemented yet")
}

/// `iterion sandbox reap`.
pub async fn reap(args: ReapArgs) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`iterion sandbox reap` is not implemented yet")
}
