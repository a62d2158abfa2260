//! The store's handle: a pool of connections whose `search_path` is the
//! store's schema (created and migrated on open), the wake-up of in-process
//! followers, and why a compare-and-set matched no row.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::watch;
use tokio_postgres::NoTls;

use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::{RunStore, StoreError};

use crate::rows::{classify, pool_err};
use crate::schema;
use crate::url::{self, StoreUrl, UrlError};

/// How long to wait for a connection (pool or network) before `Unavailable`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL run store. Cheap to clone.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    pub(crate) describe: String,
    pub(crate) changed: std::sync::Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl PostgresStore {
    /// Connect to `url` (`postgres://…`, see [`url`] for its `schema=`
    /// parameter), using `schema` when given (a URL naming a different one
    /// is refused), else the URL's, else [`DEFAULT_SCHEMA`]; creates and
    /// migrates the schema as needed.
    pub async fn connect(url: &str, schema: Option<&str>) -> Result<PostgresStore, StoreError> {
        let url = StoreUrl::parse_with(url, schema).map_err(|e| match e {
            UrlError::Invalid { source } => StoreError::Unavailable {
                reason: "ITERION_STORE is not a valid PostgreSQL URL".to_owned(),
                source: Some(Box::new(source)),
            },
            other => StoreError::Corrupt {
                location: "ITERION_STORE".to_owned(),
                reason: other.to_string(),
            },
        })?;
        Self::open(&url).await
    }

    /// Connect to a parsed store URL, creating and migrating its schema as
    /// needed.
    pub async fn open(url: &StoreUrl) -> Result<PostgresStore, StoreError> {
        let schema = url.schema();
        if !url::valid_schema(schema) {
            return Err(StoreError::Corrupt {
                location: format!("schema {schema:?}"),
                reason: "a schema name is [a-z_][a-z0-9_]{0,62}".to_owned(),
            });
        }
        let mut config = url.config().clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // Every pooled connection resolves unqualified names in our schema.
        // Appended to the URL's own `options=` (not replacing them): the
        // last `-c` of a setting wins, so the schema is always ours.
        let options = match config.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} -c search_path={schema}"),
            _ => format!("-c search_path={schema}"),
        };
        config.options(options);
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(s) => s.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect();
        let describe = format!(
            "postgres store at {}:{}/{} schema {schema}",
            hosts.join(","),
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_dbname().unwrap_or("")
        );
        let mgr = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(16)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT * 2))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Unavailable {
                reason: "cannot build the PostgreSQL pool".to_owned(),
                source: Some(Box::new(e)),
            })?;
        let mut client = pool.get().await.map_err(pool_err)?;
        schema::prepare(&mut client, schema, &describe).await?;
        drop(client);
        let (changed, _) = watch::channel(0);
        Ok(PostgresStore {
            pool,
            describe,
            changed: std::sync::Arc::new(changed),
        })
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    pub(crate) fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Why a compare-and-set on run `id` matched no row: the run is gone,
    /// or it moved since the caller read it.
    pub(crate) async fn stale(
        &self,
        id: &RunId,
        expected_status: RunStatus,
        expected_revision: Option<u64>,
    ) -> StoreError {
        match self.load_run(id).await {
            Err(e) => e,
            Ok(None) => StoreError::RunNotFound(id.clone()),
            Ok(Some(current)) => StoreError::StaleTransition {
                run: id.clone(),
                expected_status,
                expected_revision,
                actual_status: current.status,
                actual_revision: current.revision,
            },
        }
    }

    pub(crate) async fn run_exists(&self, run: &RunId) -> Result<bool, StoreError> {
        let c = self.client().await?;
        let row = c
            .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&run.as_str()])
            .await
            .map_err(|e| classify(e, "load run"))?;
        Ok(row.is_some())
    }
}
