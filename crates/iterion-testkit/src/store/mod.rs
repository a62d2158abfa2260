//! `store_conformance!`: the one suite every [`RunStore`] backend runs.
//!
//! The macro mounts one `#[tokio::test]` per check; each check is a plain
//! async function here taking a [`StoreFixture`], so a failure points at the
//! contract clause, not at a backend. A backend supplies two things: a
//! `fresh` async expression building an isolated, empty store (its own
//! directory or schema) and an `open` closure reopening a store from its
//! [`StoreFixture::locator`] — used for second connections and by the
//! killed-writer child process, which re-executes the test binary with
//! [`WRITER_ENV`] set. The mounting crate needs `tokio` (the checks are
//! `#[tokio::test]`s) and must not set `harness = false` on that test.
//!
//! ```ignore
//! iterion_testkit::store_conformance!(
//!     fresh: async { /* -> StoreFixture */ },
//!     open: |locator: String| async move { /* -> Result<Arc<dyn RunStore>, StoreError> */ },
//! );
//! ```

// Test code: a failed expectation is the assertion.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub use iterion_core::{RunStore, StoreError};

pub use self::fixture::{BoxFuture, Keepalive, OpenFn, StoreFixture, WRITER_ENV, WRITER_RUN_ENV};

/// Mount the conformance suite. See the module docs.
#[macro_export]
macro_rules! store_conformance {
    (fresh: $fresh:expr, open: $open:expr $(,)?) => {
        fn __store_conformance_open() -> $crate::store::OpenFn {
            ::std::sync::Arc::new(move |locator: String| {
                let fut = ($open)(locator);
                ::std::boxed::Box::pin(fut)
                    as $crate::store::BoxFuture<
                        'static,
                        ::std::result::Result<
                            ::std::sync::Arc<dyn $crate::store::RunStore>,
                            $crate::store::StoreError,
                        >,
                    >
            })
        }
        $crate::store_conformance!(@checks $fresh;
            runs_create_and_load,
            runs_transition_cas,
            runs_reopen_claims_the_run,
            runs_submit_records_the_submission,
            runs_claim_is_compare_and_set,
            runs_failure_and_admission,
            runs_pagination_is_stable,
            events_append_and_read,
            events_idempotent_at_seq,
            events_payloads_round_trip,
            events_gapless_under_concurrency,
            events_follow_until_terminal,
            logs_append_read_follow,
            files_put_list_get,
            files_cap_keeps_nothing,
            files_paths_are_confined,
            files_failed_stream_keeps_nothing,
            drain_record_round_trip,
            attachments_put_list_get,
            attachments_cap_and_failed_stream_keep_nothing,
            attachments_unknown_run_or_name,
            unknown_run_is_not_found,
        );

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn store_conformance_killed_writer_loses_nothing_acknowledged() {
            let fx = $fresh.await;
            let child = concat!(module_path!(), "::store_conformance_writer_child");
            $crate::store::killed_writer_loses_nothing_acknowledged(
                &fx,
                __store_conformance_open(),
                child,
            )
            .await;
        }

        /// Not a check: the child process of the killed-writer check. Does
        /// nothing unless the parent set the writer env var.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn store_conformance_writer_child() {
            $crate::store::writer_child(__store_conformance_open()).await;
        }
    };
    (@checks $fresh:expr; $($name:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let fx = $fresh.await;
                $crate::store::$name(&fx, __store_conformance_open()).await;
            }
        )*
    };
}

mod attachments;
mod events;
mod files;
mod fixture;
mod queued;
mod runs;
mod writer;

pub use self::attachments::*;
pub use self::events::*;
pub use self::files::*;
pub use self::queued::*;
pub use self::runs::*;
pub use self::writer::*;
