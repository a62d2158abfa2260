//! What the PostgreSQL store does with a database it did not write: a
//! schema holding someone else's tables, a schema version newer than this
//! binary, a URL that is not one, a server that does not answer.

use iterion_core::RunStore as _;
use iterion_store_postgres::{PostgresStore, schema};

use crate::support::{SchemaGuard, schema_name, url};

async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL at ITERION_TEST_POSTGRES_URL does not answer: run scripts/test.sh");
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn a_foreign_schema_is_refused() {
    let s = schema_name();
    let _guard = SchemaGuard {
        url: url(),
        schema: s.clone(),
    };
    admin()
        .await
        .batch_execute(&format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.bookmarks (url TEXT);"
        ))
        .await
        .expect("foreign schema");
    let err = PostgresStore::connect(&url(), Some(&s))
        .await
        .expect_err("foreign schema opened");
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
    assert!(err.to_string().contains("not an iterion store"), "{err}");
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_upgrade_advice() {
    let s = schema_name();
    let _guard = SchemaGuard {
        url: url(),
        schema: s.clone(),
    };
    drop(
        PostgresStore::connect(&url(), Some(&s))
            .await
            .expect("create"),
    );
    admin()
        .await
        .execute(
            &format!("INSERT INTO {s}.schema_version (version) VALUES ($1)"),
            &[&(schema::SUPPORTED_VERSION + 1)],
        )
        .await
        .expect("bump");
    let err = PostgresStore::connect(&url(), Some(&s))
        .await
        .expect_err("newer schema opened");
    match &err {
        iterion_core::StoreError::SchemaTooNew { found, supported } => {
            assert_eq!(*found, schema::SUPPORTED_VERSION + 1);
            assert_eq!(*supported, schema::SUPPORTED_VERSION);
        }
        other => panic!("expected SchemaTooNew, got {other}"),
    }
    assert!(err.to_string().contains("upgrade iterion"));
}

#[tokio::test]
async fn migrating_twice_concurrently_is_one_migration() {
    let s = schema_name();
    let _guard = SchemaGuard {
        url: url(),
        schema: s.clone(),
    };
    let u = url();
    let (a, b) = tokio::join!(
        PostgresStore::connect(&u, Some(&s)),
        PostgresStore::connect(&u, Some(&s))
    );
    a.expect("first");
    b.expect("second");
    let n: i64 = admin()
        .await
        .query_one(&format!("SELECT count(*) FROM {s}.schema_version"), &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, schema::SUPPORTED_VERSION);
}

#[tokio::test]
async fn bad_urls_and_dead_servers_are_unavailable() {
    let err = PostgresStore::connect("postgres://x:y@[not a host", None)
        .await
        .expect_err("bad url");
    assert_eq!(err.code(), "STORE_UNAVAILABLE", "{err}");
    // Port 1 on loopback: nothing listens there.
    let err = PostgresStore::connect("postgres://iterion:pw@127.0.0.1:1/db", None)
        .await
        .expect_err("dead server");
    assert_eq!(err.code(), "STORE_UNAVAILABLE", "{err}");
    assert!(err.is_transient());
    assert!(
        !err.to_string().contains("pw"),
        "no secret in the message: {err}"
    );
    let err = PostgresStore::connect(&url(), Some("Robert'); DROP TABLE students;--"))
        .await
        .expect_err("bad schema name");
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
}

#[tokio::test]
async fn the_urls_schema_parameter_names_the_store_and_keeps_url_options() {
    let s = schema_name();
    let _guard = SchemaGuard {
        url: url(),
        schema: s.clone(),
    };
    let base = url();
    let sep = if base.contains('?') { '&' } else { '?' };
    // The URL's own `options=` survive; our search_path is appended last.
    let u = format!(
        "{base}{sep}options=-c%20search_path%3Dpublic%20-c%20statement_timeout%3D60000&schema={s}"
    );
    let store = PostgresStore::connect(&u, None).await.expect("connect");
    assert!(store.describe().contains(&s), "{}", store.describe());
    let runs = store
        .list_runs(Default::default())
        .await
        .expect("list runs in the URL's schema");
    assert!(runs.items.is_empty());
    let n: i64 = admin()
        .await
        .query_one(&format!("SELECT count(*) FROM {s}.schema_version"), &[])
        .await
        .expect("the URL's schema holds the store")
        .get(0);
    assert_eq!(n, schema::SUPPORTED_VERSION);
    // …and really reach the server: one it refuses fails the connection.
    let refused = format!("{base}{sep}options=-c%20no_such_setting%3D1&schema={s}");
    let err = PostgresStore::connect(&refused, None)
        .await
        .expect_err("URL options= were dropped");
    assert!(!err.to_string().contains("iterion-test"), "{err}");
    // The caller's schema may not silently override the URL's.
    let err = PostgresStore::connect(&u, Some("t_other"))
        .await
        .expect_err("conflicting schemas accepted");
    assert_eq!(err.code(), "STORE_CORRUPT", "{err}");
    assert!(!err.to_string().contains("iterion-test"), "{err}");
}
