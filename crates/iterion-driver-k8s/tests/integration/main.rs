//! Integration tests of the Kubernetes driver, in the three layers the
//! issue asks for (no API server can be installed on these machines, so
//! none of them is a real cluster; each module says what it does not prove):
//!
//! - `golden`: every rendered object, pinned field by field in JSON files
//!   that `scripts/test.sh` also validates against the official OpenAPI
//!   schemas of two Kubernetes versions (`scripts/k8s-validate.sh`);
//! - `api`: the API conversation, against a scripted API server on
//!   loopback (`scripted`) that checks every request's method, path and
//!   body in order and answers with Kubernetes response bodies;
//! - `podman`: realism, the rendered Pod played by `podman kube play` on
//!   the shared test Podman; `podman_drain` drains it with the runtime's
//!   real `iterion_readback::drain`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod api;
mod golden;
mod podman;
mod podman_drain;
mod scripted;
mod support;
