//! The diagnostic log (`--log-level`, `ITERION_LOG_LEVEL`): the crates'
//! `tracing` records, written to stderr at the chosen level. Off unless
//! asked for, so a run's stderr stays the live view and its summary. It
//! does not own the run log (`iterion logs`), which is the store's.

use tracing_subscriber::filter::LevelFilter;

use crate::cli::{LogLevel, parse_log_level};
use crate::exit::UserInputError;

/// The variable naming the level when no flag does.
pub const LOG_LEVEL_ENV: &str = "ITERION_LOG_LEVEL";

/// The level a verb runs at: its flag, else `ITERION_LOG_LEVEL`, else off.
/// A bad variable is bad input naming it (exit 2), never ignored.
pub fn level(flag: Option<LogLevel>) -> Result<Option<LogLevel>, UserInputError> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var(LOG_LEVEL_ENV) {
        Ok(raw) if !raw.trim().is_empty() => parse_log_level(&raw)
            .map(Some)
            .map_err(|why| UserInputError::new(format!("{LOG_LEVEL_ENV}: {why}"))),
        _ => Ok(None),
    }
}

/// Install the stderr log at `level` (nothing when `None`): plain text,
/// no colour codes of its own.
pub fn install(level: Option<LogLevel>) {
    let Some(level) = level else { return };
    let filter = match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    };
    // A second install (impossible: one verb per process) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_max_level(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}
