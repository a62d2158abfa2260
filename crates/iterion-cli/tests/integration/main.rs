//! End-to-end tests of the `iterion` binary against the real engines
//! (dockerd and Podman, started by `scripts/test.sh`) and the real stores.
//! A missing backend fails the test; nothing skips.

mod egress_e2e;
mod readback_e2e;
mod run_e2e;
mod support;
