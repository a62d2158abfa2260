//! Integration tests of the Kubernetes driver, in the three layers the
//! issue asks for (no API server can be installed on these machines, so
//! none of them is a real cluster; each module says what it does not prove):
//!
//! - `golden`: every rendered object, pinned field by field in JSON files
//!   that `scripts/test.sh` also validates against the official OpenAPI
//!   schemas of two Kubernetes versions (`scripts/k8s-validate.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod golden;
mod support;
