//! The store's `postgres://` URL: the libpq-style URL tokio-postgres reads,
//! plus one parameter of our own, `schema=NAME`, naming the schema that
//! holds the store (default [`DEFAULT_SCHEMA`]). It owns parsing
//! and validating that parameter, taking it out before tokio-postgres sees
//! the URL (it refuses unknown parameters), and the store's password-free
//! identity; it does not connect.

/// Default schema when the caller names none.
pub const DEFAULT_SCHEMA: &str = "iterion";

/// Why an `ITERION_STORE` URL was refused. Never carries the URL itself:
/// it may hold a password.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    /// `schema=` is not `[a-z_][a-z0-9_]{0,62}`.
    #[error(
        "ITERION_STORE schema {shown:?} is not a valid schema name: use [a-z_][a-z0-9_]{{0,62}} (lowercase letters, digits, underscore; not starting with a digit)"
    )]
    InvalidSchema {
        /// The refused value, cut to 70 characters.
        shown: String,
    },
    /// `schema=` appears more than once.
    #[error("ITERION_STORE names a schema more than once: give one `schema=` parameter")]
    DuplicateSchema,
    /// The URL's `schema=` and the caller's schema differ.
    #[error("ITERION_STORE names schema {in_url:?} but the caller asked for {asked:?}")]
    ConflictingSchema {
        /// The URL's.
        in_url: String,
        /// The caller's.
        asked: String,
    },
    /// tokio-postgres refused the rest of the URL.
    #[error("ITERION_STORE is not a valid PostgreSQL URL")]
    Invalid {
        /// tokio-postgres' reason (names an option, never a value).
        #[source]
        source: tokio_postgres::Error,
    },
}

impl UrlError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSchema { .. } => "STORE_URL_INVALID_SCHEMA",
            Self::DuplicateSchema => "STORE_URL_DUPLICATE_SCHEMA",
            Self::ConflictingSchema { .. } => "STORE_URL_CONFLICTING_SCHEMA",
            Self::Invalid { .. } => "STORE_URL_INVALID",
        }
    }
}

/// Schema names: `[a-z_][a-z0-9_]{0,62}`, so they never need quoting
/// beyond [`crate::rows::ident`] and never exceed PostgreSQL's 63-byte limit.
pub fn valid_schema(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn check_schema(name: &str) -> Result<String, UrlError> {
    if valid_schema(name) {
        Ok(name.to_owned())
    } else {
        Err(UrlError::InvalidSchema {
            shown: name.chars().take(70).collect(),
        })
    }
}

/// A parsed store URL. Holds the password (tokio-postgres needs it) but
/// never shows it: `Debug` prints [`StoreUrl::identity`].
#[derive(Clone)]
pub struct StoreUrl {
    config: tokio_postgres::Config,
    schema: String,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({})", self.identity())
    }
}

impl StoreUrl {
    /// Parse a `postgres://`/`postgresql://` URL, taking out `schema=`.
    pub fn parse(url: &str) -> Result<StoreUrl, UrlError> {
        Self::parse_with(url, None)
    }

    /// As [`StoreUrl::parse`], with a schema from the caller; a URL
    /// naming a different one is refused rather than silently overridden.
    pub fn parse_with(url: &str, schema: Option<&str>) -> Result<StoreUrl, UrlError> {
        let (rest, in_url) = split_schema(url)?;
        let schema = match (in_url, schema) {
            (Some(u), Some(a)) if u != a => {
                return Err(UrlError::ConflictingSchema {
                    in_url: u,
                    asked: a.chars().take(70).collect(),
                });
            }
            (Some(u), _) => u,
            (None, Some(a)) => check_schema(a)?,
            (None, None) => DEFAULT_SCHEMA.to_owned(),
        };
        let config = rest
            .parse::<tokio_postgres::Config>()
            .map_err(|source| UrlError::Invalid { source })?;
        Ok(StoreUrl { config, schema })
    }

    /// The schema holding the store.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The connection settings, without `schema=` (holds the password).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// What makes two URLs the same store: hosts, ports, database and
    /// schema. Never the user or password (both can change while the
    /// store stays the same, and a password must not leak into labels),
    /// nor connection knobs (`sslmode`, timeouts, …).
    pub fn identity(&self) -> String {
        let ports = self.config.get_ports();
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match h {
                    tokio_postgres::config::Host::Tcp(s) => format!("{s}:{port}"),
                    tokio_postgres::config::Host::Unix(p) => format!("{}:{port}", p.display()),
                }
            })
            .collect();
        format!(
            "postgres://{}/{}?schema={}",
            hosts.join(","),
            self.config.get_dbname().unwrap_or(""),
            self.schema
        )
    }
}

/// Take `schema=` out of `url`'s query, following tokio-postgres' reading
/// of the URL (credentials end at the first `@`, the query starts at the
/// next `?`, parameters split on `&`, a key ends at its first `=`).
fn split_schema(url: &str) -> Result<(String, Option<String>), UrlError> {
    let body_start = ["postgres://", "postgresql://"]
        .iter()
        .find(|p| url.starts_with(*p))
        .map_or(0, |p| p.len());
    let after_creds = url[body_start..]
        .find('@')
        .map_or(body_start, |at| body_start + at + 1);
    let Some(q) = url[after_creds..].find('?').map(|q| after_creds + q) else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut kept: Vec<&str> = Vec::new();
    for param in url[q + 1..].split('&') {
        match param.split_once('=') {
            Some(("schema", value)) => {
                if schema.is_some() {
                    return Err(UrlError::DuplicateSchema);
                }
                schema = Some(check_schema(value)?);
            }
            _ => kept.push(param),
        }
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "s3cret-pw";

    #[test]
    fn schema_is_taken_out_of_the_query() {
        let cases = [
            (
                "postgres://u:p@h/db?schema=runs_a",
                "postgres://u:p@h/db",
                "runs_a",
            ),
            (
                "postgresql://u@h:6543/db?sslmode=disable&schema=_x9&connect_timeout=3",
                "postgresql://u@h:6543/db?sslmode=disable&connect_timeout=3",
                "_x9",
            ),
            (
                "postgres://h/db?schema=a&application_name=x",
                "postgres://h/db?application_name=x",
                "a",
            ),
            ("postgres://h/db", "postgres://h/db", DEFAULT_SCHEMA),
            (
                "postgres://h/db?sslmode=disable",
                "postgres://h/db?sslmode=disable",
                DEFAULT_SCHEMA,
            ),
            // A `?` inside the credentials is not the query.
            (
                "postgres://u:p?q@h/db?schema=s",
                "postgres://u:p?q@h/db",
                "s",
            ),
        ];
        for (url, rest, schema) in cases {
            let (r, s) = split_schema(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(r, rest, "{url}");
            assert_eq!(s.as_deref().unwrap_or(DEFAULT_SCHEMA), schema, "{url}");
            let parsed = StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(parsed.schema(), schema);
        }
        let longest = "a".repeat(63);
        let url = format!("postgres://h/db?schema={longest}");
        assert_eq!(
            StoreUrl::parse(&url).map(|u| u.schema().len()).ok(),
            Some(63)
        );
    }

    #[test]
    fn invalid_schemas_are_refused_before_any_sql() {
        for bad in [
            "",
            "Runs",
            "9runs",
            "runs-a",
            "runs a",
            "runs%20a",
            "a;DROP SCHEMA public",
            "\"x\"",
            "é",
            &"a".repeat(64),
        ] {
            let url = format!("postgres://iterion:{PW}@h/db?schema={bad}");
            let err = StoreUrl::parse(&url).expect_err(bad);
            assert_eq!(err.code(), "STORE_URL_INVALID_SCHEMA", "{bad}: {err}");
            assert!(!err.to_string().contains(PW), "{err}");
        }
        let err = StoreUrl::parse("postgres://h/db?schema=a&schema=b").expect_err("dup");
        assert_eq!(err.code(), "STORE_URL_DUPLICATE_SCHEMA");
        let err =
            StoreUrl::parse_with("postgres://h/db?schema=a", Some("b")).expect_err("conflict");
        assert_eq!(err.code(), "STORE_URL_CONFLICTING_SCHEMA");
        assert_eq!(
            StoreUrl::parse_with("postgres://h/db?schema=a", Some("a"))
                .map(|u| u.schema().to_owned())
                .ok()
                .as_deref(),
            Some("a")
        );
        let err = StoreUrl::parse_with("postgres://h/db", Some("A")).expect_err("caller");
        assert_eq!(err.code(), "STORE_URL_INVALID_SCHEMA");
    }

    #[test]
    fn no_message_or_identity_shows_the_password() {
        let urls = [
            format!("postgres://iterion:{PW}@h/db?schema=a"),
            format!("postgres://iterion@h/db?password={PW}&schema=a"),
            format!("postgres://iterion:{PW}@h:70000/db?schema=a"),
            format!("postgres://iterion:{PW}@h/db?nonsense={PW}"),
            format!("postgres://iterion:{PW}@h/db?schema=a&schema=a"),
        ];
        for url in &urls {
            match StoreUrl::parse(url) {
                Ok(u) => {
                    assert!(!u.identity().contains(PW), "{}", u.identity());
                    assert!(!format!("{u:?}").contains(PW), "{u:?}");
                }
                Err(e) => {
                    let mut chain = e.to_string();
                    let mut src = std::error::Error::source(&e);
                    while let Some(s) = src {
                        chain.push_str(&s.to_string());
                        src = s.source();
                    }
                    assert!(!chain.contains(PW), "{chain}");
                }
            }
        }
    }

    #[test]
    fn identity_is_hosts_database_and_schema() {
        let id = |url: &str| StoreUrl::parse(url).map(|u| u.identity()).ok();
        let base = id("postgres://a:one@db:5432/runs");
        assert_eq!(
            base.as_deref(),
            Some("postgres://db:5432/runs?schema=iterion")
        );
        for same in [
            "postgresql://b:two@db/runs",
            "postgres://a@db:5432/runs?schema=iterion",
            "postgres://db/runs?sslmode=disable&password=three",
        ] {
            assert_eq!(id(same), base, "{same}");
        }
        for other in [
            "postgres://db/runs?schema=other",
            "postgres://db/other",
            "postgres://db:5433/runs",
            "postgres://db2/runs",
        ] {
            assert_ne!(id(other), base, "{other}");
        }
    }
}
