//! Integration tests of the egress proxy: real loopback upstreams (plain
//! HTTP via hyper, TLS via tokio-rustls with an rcgen certificate), real
//! clients (raw sockets, tokio-rustls, the host's `curl`).

mod support;

mod auth;
mod connect;
mod curl;
mod forward;
mod lifecycle;
