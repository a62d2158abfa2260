//! `iterion studio`: a read-only web page and JSON API over a run store.
//!
//! What a run decided is all recorded; the studio lets an operator look
//! at it: the runs (live), and per run its sandbox decision, its workflow
//! graph coloured by node state, its event timeline (live over
//! server-sent events while the run goes), node logs, the egress requests
//! that were blocked and the files it kept, downloadable. The page uses the
//! JSON API under `/api/`, whose documents have exactly the shapes of the
//! CLI's `--json` output (`iterion_core::view`, `EventRecord`).
//!
//! It owns the HTTP surface (axum over hyper 1, assets embedded, no build
//! step, no CDN), the rendering, the token rule and the graph layout. It
//! decides nothing about runs: the store comes in as an
//! `Arc<dyn RunStore>` (the CLI opens it as every store verb does), the
//! decision card reads what the run recorded, and the only workflow it
//! compiles is the run's own source, to draw it ([`source`]).
//!
//! Security, because every value it shows was written by a workflow that
//! may be hostile: run data reaches markup only escaped ([`escape`]) and
//! the script only sets `textContent`; every response carries a strict
//! Content-Security-Policy (`default-src 'none'`, scripts and styles from
//! `'self'` only, no inline script, `frame-ancestors 'none'`), `nosniff`
//! and `no-referrer`; only `GET`/`HEAD` are served (anything else is 405),
//! request heads and URIs are bounded and bodies refused; downloads are
//! attachments with a safe name, served only after their bytes match the
//! record; and the token rule of [`auth`] guards every route.

mod api;
pub mod auth;
pub mod decision;
mod download;
mod error;
pub mod escape;
pub mod graph;
mod live;
mod pages;
mod rows;
mod server;
mod settings;
pub mod source;
mod state;
pub mod timeline;

pub use auth::StudioToken;
pub use error::{StudioError, TOKEN_ENV};
pub use server::Studio;
pub use settings::{DEFAULT_PORT, StudioSettings};
