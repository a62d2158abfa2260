//! Integration tests of the egress proxy: real loopback upstreams (plain
//! HTTP via hyper, TLS via tokio-rustls with an rcgen certificate), real
//! clients (raw sockets, tokio-rustls, the host's `curl`).

// Test helpers outside #[test] fns: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod auth;
mod connect;
mod curl;
mod forward;
mod hardening;
mod inspect;
mod lifecycle;
mod reflect;
