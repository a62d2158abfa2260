//! `store_conformance!` mounted on [`iterion_store_postgres::PostgresStore`],
//! one fresh schema per test.

use crate::support::{fresh, open};

iterion_testkit::store_conformance!(fresh: fresh(), open: open);
