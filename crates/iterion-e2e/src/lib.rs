//! iterion-e2e: the tests and benches that cross backends — one library
//! crate (the drain, the run engine) against the real Docker/Podman driver
//! and the real stores — so that no library crate's dev-dependencies name
//! another backend (issue 16 item 4). The code is under `tests/` (one
//! integration binary, a module per crate under test) and `benches/`; this
//! library is empty.
