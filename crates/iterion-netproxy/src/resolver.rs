//! Host-side name resolution for the proxy. Injected so tests can map a
//! name to a hostile address (metadata, loopback) without touching DNS.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// Resolves a canonical host name to the addresses the proxy may dial.
#[async_trait::async_trait]
pub trait Resolver: Send + Sync + 'static {
    /// All addresses of `host` on `port`. An empty list is treated as failure.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// A fixed name → addresses table; unknown names fail to resolve.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    table: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Map `host` (canonical form) to `addrs`.
    pub fn with(mut self, host: &str, addrs: &[IpAddr]) -> Self {
        self.table.insert(host.to_owned(), addrs.to_vec());
        self
    }
}

#[async_trait::async_trait]
impl Resolver for StaticResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.table
            .get(host)
            .map(|a| a.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host}: not in table")))
    }
}
