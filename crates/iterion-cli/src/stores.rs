//! Picks the run store `ITERION_STORE` names (`docs/reference/SPEC.md` §2): a
//! `postgres://`/`postgresql://` URL → the PostgreSQL twin, anything else a
//! directory → the embedded SQLite store (default `.iterion` under the
//! current directory). A PostgreSQL URL may name its schema with
//! `?schema=NAME` (`iterion_store_postgres::url`); a bad one is bad input
//! (exit 2). `iterion run --store-dir DIR` names a directory store for
//! that run instead ([`select_dir`]): every reader of the store's location
//! goes through [`configured`], so the run, the scope its resources are
//! labelled with and the reaper agree on one store. Also turns store errors
//! into messages that say what to do. The PostgreSQL store is the cargo
//! feature `store-postgres` (`crate::backends`): a binary without it still
//! recognises a PostgreSQL URL (never a directory named `postgres:`) and
//! refuses to open it as a backend not built in (exit 2).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use iterion_core::{RunStore, StoreError};
#[cfg(feature = "store-postgres")]
use iterion_store_postgres::{StoreUrl, UrlError};

use crate::backends::Backend;
#[cfg(not(feature = "store-postgres"))]
use crate::backends::NotBuiltIn;
#[cfg(feature = "store-postgres")]
use crate::exit::UserInputError;

/// The environment variable naming the store.
pub const STORE_ENV: &str = "ITERION_STORE";

/// Where the store lives, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded store in this directory.
    Directory(PathBuf),
    /// The PostgreSQL store at this URL.
    Postgres(String),
}

impl StoreLocation {
    /// Interpret a `ITERION_STORE` value (`None`/empty → `.iterion`).
    pub fn parse(value: Option<&str>) -> StoreLocation {
        match value.map(str::trim) {
            None | Some("") => StoreLocation::Directory(PathBuf::from(".iterion")),
            Some(v) if v.starts_with("postgres://") || v.starts_with("postgresql://") => {
                StoreLocation::Postgres(v.to_owned())
            }
            Some(v) => StoreLocation::Directory(PathBuf::from(v)),
        }
    }
}

/// The store a verb's flag selected, set once before anything opens or
/// labels a store (a process serves one verb).
static SELECTED: OnceLock<StoreLocation> = OnceLock::new();

/// Make `dir` this process's store (`--store-dir`), over `ITERION_STORE`.
pub fn select_dir(dir: PathBuf) {
    // Set once by the verb's entry point; a second call cannot happen.
    let _ = SELECTED.set(StoreLocation::Directory(dir));
}

/// Where this process's store lives: `--store-dir` when given, else
/// `ITERION_STORE`.
pub fn configured() -> StoreLocation {
    match SELECTED.get() {
        Some(location) => location.clone(),
        None => StoreLocation::parse(std::env::var(STORE_ENV).ok().as_deref()),
    }
}

/// The directory of this process's store when it is a directory store,
/// absolute (the sandbox must never see it: issue 19 item 3).
pub fn store_dir() -> Option<PathBuf> {
    match configured() {
        StoreLocation::Directory(dir) => std::path::absolute(&dir).ok(),
        StoreLocation::Postgres(_) => None,
    }
}

/// Open this process's store ([`configured`]).
pub async fn open_from_env() -> anyhow::Result<Arc<dyn RunStore>> {
    open(&configured()).await
}

/// Open the store at `location`.
pub async fn open(location: &StoreLocation) -> anyhow::Result<Arc<dyn RunStore>> {
    match location {
        StoreLocation::Directory(dir) => {
            let d = dir.clone();
            let store =
                tokio::task::spawn_blocking(move || iterion_store_sqlite::SqliteStore::open(&d))
                    .await
                    .context("opening the run store")?
                    .map_err(store_error)?;
            Ok(Arc::new(store))
        }
        StoreLocation::Postgres(url) => {
            crate::backends::require(Backend::StorePostgres)?;
            open_postgres(url).await
        }
    }
}

#[cfg(feature = "store-postgres")]
async fn open_postgres(url: &str) -> anyhow::Result<Arc<dyn RunStore>> {
    let url = StoreUrl::parse(url).map_err(url_error)?;
    let store = iterion_store_postgres::PostgresStore::open(&url)
        .await
        .map_err(store_error)?;
    Ok(Arc::new(store))
}

/// Never reached (`require` refused first); total all the same.
#[cfg(not(feature = "store-postgres"))]
async fn open_postgres(url: &str) -> anyhow::Result<Arc<dyn RunStore>> {
    let _ = url;
    Err(NotBuiltIn {
        backend: Backend::StorePostgres,
    }
    .into())
}

/// A stable digest naming the store `ITERION_STORE` points at (drivers
/// label their resources with it so the reaper only judges runs its own
/// store can answer for). Never the address itself: a PostgreSQL URL may
/// carry a password, so only its password-free identity (hosts, ports,
/// database, schema) is hashed; two schemas are two stores.
pub fn scope_from_env() -> String {
    scope_of(configured())
}

/// The scope digest of one store location (see [`scope_from_env`]).
pub fn scope_of(location: StoreLocation) -> String {
    let key = match location {
        StoreLocation::Directory(dir) => {
            let abs = std::path::absolute(&dir).unwrap_or(dir);
            let abs = abs.canonicalize().unwrap_or(abs);
            format!("dir:{}", abs.display())
        }
        // An unparsable URL opens no store (every verb that labels or
        // reaps opens the store first and stops on it), so one shared,
        // password-free key is enough.
        #[cfg(feature = "store-postgres")]
        StoreLocation::Postgres(url) => StoreUrl::parse(&url).map_or_else(
            |_| "pg:invalid".to_owned(),
            |u| format!("pg:{}", u.identity()),
        ),
        // Without the store no verb opens it (each stops on opening).
        #[cfg(not(feature = "store-postgres"))]
        StoreLocation::Postgres(_) => "pg:not-built-in".to_owned(),
    };
    // FNV-1a: stable across releases, unlike std's DefaultHasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// What the user should do about a store error.
pub fn hint(e: &StoreError) -> &'static str {
    match e {
        StoreError::SchemaTooNew { .. } => {
            "this store was written by a newer iterion: upgrade iterion (never downgrade a store)"
        }
        StoreError::Corrupt { .. } => {
            "ITERION_STORE does not point at an iterion store: point it at an empty directory or at the right store"
        }
        StoreError::Unavailable { .. } => {
            "the run store cannot be reached: check that the database in ITERION_STORE is up and reachable, then retry"
        }
        StoreError::Io { .. } => {
            "check that the ITERION_STORE directory exists and is readable and writable by you"
        }
        StoreError::RunNotFound(_) => "list the runs of this store with `iterion runs`",
        StoreError::FileNotFound(_) => "list the run's files with `iterion files RUN_ID`",
        StoreError::Tampered { .. } => {
            "the stored bytes changed after the drain recorded them: treat the store as compromised (check who can write ITERION_STORE) and re-run to obtain the file again"
        }
        StoreError::UnsafePath { .. } => {
            "give the file's path relative to the run's file area, as `iterion files RUN_ID` lists it"
        }
        StoreError::Backend { .. } => "retry; if it persists, report it with the message above",
        StoreError::InvalidPayload { .. } => {
            "report it: the runtime produced an event the store cannot keep"
        }
        StoreError::InvalidCursor
        | StoreError::RunExists(_)
        | StoreError::IllegalTransition { .. }
        | StoreError::StaleTransition { .. }
        | StoreError::SeqConflict { .. }
        | StoreError::SeqGap { .. } => "retry the command",
    }
}

pub use crate::exit::StoreCliError;

/// A refused `ITERION_STORE` URL: bad input (exit 2), with its code and
/// what to do. The message never holds the URL (it may carry a password).
#[cfg(feature = "store-postgres")]
pub fn url_error(e: UrlError) -> anyhow::Error {
    let hint = match e {
        UrlError::Invalid { .. } => {
            "write ITERION_STORE as postgres://USER:PASSWORD@HOST:PORT/DATABASE[?schema=NAME]"
        }
        _ => "name one schema with ?schema=NAME, NAME matching [a-z_][a-z0-9_]{0,62}",
    };
    use iterion_core::display::printable;
    // The URL's parts it quotes (a schema name) are escaped; the lines are
    // iterion's.
    let mut message = format!("{} [{}]", printable(&e.to_string()), e.code());
    // tokio-postgres' own error only says "invalid connection string";
    // its source names the option (never the value).
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        message.push_str(&format!("\n  caused by: {}", printable(&c.to_string())));
        cause = c.source();
    }
    message.push_str(&format!("\n  hint: {hint}"));
    anyhow::Error::new(UserInputError::laid_out(message))
}

/// Wrap a store error with its code and hint.
pub fn store_error(e: StoreError) -> anyhow::Error {
    anyhow::Error::new(StoreCliError {
        code: e.code(),
        hint: hint(&e),
        error: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "store-postgres")]
    #[test]
    fn scope_names_the_store_never_its_password() {
        let pg = |url: &str| scope_of(StoreLocation::Postgres(url.to_owned()));
        let a = pg("postgres://iterion:secret-one@db:5432/runs");
        assert_eq!(a, pg("postgres://iterion:other-secret@db:5432/runs"));
        assert_ne!(a, pg("postgres://iterion:secret-one@db:5432/other"));
        assert!(!a.contains("secret") && a.len() == 16, "{a}");
        // Same store however it is spelled or authenticated…
        for same in [
            "postgresql://other:x@db:5432/runs",
            "postgres://iterion@db/runs?schema=iterion",
            "postgres://iterion@db/runs?password=secret-two&sslmode=disable",
        ] {
            assert_eq!(a, pg(same), "{same}");
        }
        // …but another schema is another store.
        assert_ne!(
            a,
            pg("postgres://iterion:secret-one@db:5432/runs?schema=team_b")
        );
        assert_ne!(
            pg("postgres://db/runs?schema=team_a"),
            pg("postgres://db/runs?schema=team_b")
        );
        // A refused URL still yields a digest (the verb stops on opening).
        assert_eq!(pg("postgres://db/runs?schema=Bad").len(), 16);
        let dir = |d: &str| scope_of(StoreLocation::Directory(PathBuf::from(d)));
        assert_eq!(dir("/nonexistent/a"), dir("/nonexistent/a"));
        assert_ne!(dir("/nonexistent/a"), dir("/nonexistent/b"));
    }

    #[test]
    fn store_env_selects_the_backend() {
        assert_eq!(
            StoreLocation::parse(None),
            StoreLocation::Directory(".iterion".into())
        );
        assert_eq!(
            StoreLocation::parse(Some("")),
            StoreLocation::Directory(".iterion".into())
        );
        assert_eq!(
            StoreLocation::parse(Some("/var/lib/iterion")),
            StoreLocation::Directory("/var/lib/iterion".into())
        );
        for url in ["postgres://u@h/db", "postgresql://u@h/db"] {
            assert_eq!(
                StoreLocation::parse(Some(url)),
                StoreLocation::Postgres(url.into())
            );
        }
    }

    #[cfg(not(feature = "store-postgres"))]
    #[tokio::test]
    async fn a_postgres_url_without_the_store_is_not_built_in() {
        let location = StoreLocation::parse(Some("postgres://iterion:hunter22@db/runs"));
        let Err(e) = open(&location).await else {
            panic!("opened a PostgreSQL store without store-postgres");
        };
        let msg = format!("{e:#}");
        assert!(
            msg.contains("store-postgres") && !msg.contains("hunter22"),
            "{msg}"
        );
        assert_eq!(crate::exit::report(Err(e)), crate::exit::Exit::BadInput);
    }

    #[cfg(feature = "store-postgres")]
    #[test]
    fn a_bad_schema_is_bad_input_without_the_password() {
        for url in [
            "postgres://iterion:hunter22@db/runs?schema=Team-A",
            "postgres://iterion:hunter22@db/runs?schema=a&schema=b",
            "postgres://iterion:hunter22@db:99999/runs?schema=a",
        ] {
            let Err(e) = StoreUrl::parse(url).map_err(url_error) else {
                panic!("{url} accepted");
            };
            assert!(e.downcast_ref::<UserInputError>().is_some(), "{e}");
            let msg = format!("{e:#}");
            assert!(msg.contains("[STORE_URL_"), "{msg}");
            assert!(msg.contains("hint:"), "{msg}");
            assert!(!msg.contains("hunter22"), "{msg}");
        }
    }

    #[test]
    fn schema_too_new_says_upgrade() {
        let e = store_error(StoreError::SchemaTooNew {
            found: 9,
            supported: 1,
        });
        let msg = e.to_string();
        assert!(msg.contains("STORE_SCHEMA_TOO_NEW"), "{msg}");
        assert!(msg.contains("upgrade iterion"), "{msg}");
    }
}
