//! The diagnostic log (`--log-level`, `ITERION_LOG_LEVEL`,
//! `ITERION_LOG_FORMAT`): the crates' `tracing` records, written to stderr.
//! Installed for every verb before it runs, at `warn` unless asked
//! otherwise, so a library's warning (a failed teardown, a dropped event)
//! is never lost; a run's stderr otherwise stays its live view and summary.
//! It does not own the run log (`iterion logs`), which is the store's.

use tracing_subscriber::filter::LevelFilter;

use crate::cli::{LogLevel, parse_log_level};
use crate::exit::UserInputError;

/// The variable naming the level when no flag does.
pub const LOG_LEVEL_ENV: &str = "ITERION_LOG_LEVEL";
/// The variable naming the format (upstream's: `human` or `json`).
pub const LOG_FORMAT_ENV: &str = "ITERION_LOG_FORMAT";

/// The level when neither the flag nor the variable says (issue 16 item 5).
pub const DEFAULT_LEVEL: LogLevel = LogLevel::Warn;

/// How a record is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One plain line per record (no colour codes).
    #[default]
    Human,
    /// One JSON object per line (for log shippers, as upstream).
    Json,
}

/// `ITERION_LOG_FORMAT`: `human` or `json`, any case (upstream lower-cases).
pub fn parse_log_format(raw: &str) -> Result<LogFormat, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "human" => Ok(LogFormat::Human),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{raw:?} is not a log format (human, json)")),
    }
}

/// What the log of one process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// The most verbose level written.
    pub level: LogLevel,
    /// The record format.
    pub format: LogFormat,
}

/// The settings a verb runs with: its flag, else `ITERION_LOG_LEVEL`, else
/// [`DEFAULT_LEVEL`]; `ITERION_LOG_FORMAT`, else human. An empty variable
/// is unset; a bad one is bad input naming it (exit 2), never ignored.
pub fn settings(
    flag: Option<LogLevel>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<LogSettings, UserInputError> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let level = match (flag, set(LOG_LEVEL_ENV)) {
        (Some(level), _) => level,
        (None, Some(raw)) => parse_log_level(&raw)
            .map_err(|why| UserInputError::new(format!("{LOG_LEVEL_ENV}: {why}")))?,
        (None, None) => DEFAULT_LEVEL,
    };
    let format = match set(LOG_FORMAT_ENV) {
        Some(raw) => parse_log_format(&raw)
            .map_err(|why| UserInputError::new(format!("{LOG_FORMAT_ENV}: {why}")))?,
        None => LogFormat::Human,
    };
    Ok(LogSettings { level, format })
}

/// Install the stderr log.
pub fn install(settings: LogSettings) {
    let filter = match settings.level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    };
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // iterion's own records at the level asked; the libraries under it
    // (the HTTP stacks, the engines' clients) stay at `warn` below
    // `trace`, so `--log-level debug` shows the run, not their wire.
    let targets = tracing_subscriber::filter::Targets::new()
        .with_default(dependency_level(filter))
        .with_target("iterion", filter);
    let builder = tracing_subscriber::fmt()
        .with_max_level(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr);
    // A second install (impossible: one verb per process) keeps the first.
    let _ = match settings.format {
        LogFormat::Human => builder.finish().with(targets).try_init(),
        LogFormat::Json => builder.json().finish().with(targets).try_init(),
    };
}

/// The level of records from outside iterion's crates.
fn dependency_level(filter: LevelFilter) -> LevelFilter {
    if filter == LevelFilter::TRACE {
        filter
    } else {
        filter.min(LevelFilter::WARN)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn with(vars: &[(&str, &str)], flag: Option<LogLevel>) -> Result<LogSettings, String> {
        let map: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        settings(flag, |k| map.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_flag_and_variables() {
        let default = LogSettings {
            level: LogLevel::Warn,
            format: LogFormat::Human,
        };
        assert_eq!(with(&[], None), Ok(default));
        assert_eq!(
            with(&[(LOG_LEVEL_ENV, " "), (LOG_FORMAT_ENV, "")], None),
            Ok(default)
        );
        assert_eq!(
            with(&[(LOG_LEVEL_ENV, "DEBUG"), (LOG_FORMAT_ENV, "JSON")], None),
            Ok(LogSettings {
                level: LogLevel::Debug,
                format: LogFormat::Json
            })
        );
        // The flag wins over the variable, even a bad one.
        assert_eq!(
            with(&[(LOG_LEVEL_ENV, "chatty")], Some(LogLevel::Error)).map(|s| s.level),
            Ok(LogLevel::Error)
        );
        let bad = with(&[(LOG_FORMAT_ENV, "xml")], None).unwrap_err();
        assert!(bad.contains(LOG_FORMAT_ENV) && bad.contains("xml"), "{bad}");
        let bad = with(&[(LOG_LEVEL_ENV, "verbose")], None).unwrap_err();
        assert!(bad.contains(LOG_LEVEL_ENV), "{bad}");
    }
}
