//! [`Endpoint`]: where an engine is reached, parsed from a `DOCKER_HOST`-style
//! address. A leaf: everything that talks to an engine starts from one.

use iterion_core::DriverError;

/// Where an engine is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A unix socket path (local engine: host binds possible).
    Unix(String),
    /// `tcp://host:port` (remote engine: bindless).
    Tcp(String),
}

impl Endpoint {
    /// Parse a `DOCKER_HOST`-style address.
    pub fn parse(raw: &str) -> Result<Self, DriverError> {
        let raw = raw.trim();
        if let Some(path) = raw.strip_prefix("unix://") {
            return Ok(Self::Unix(path.to_owned()));
        }
        if raw.starts_with('/') {
            return Ok(Self::Unix(raw.to_owned()));
        }
        if let Some(rest) = raw
            .strip_prefix("tcp://")
            .or_else(|| raw.strip_prefix("http://"))
        {
            return Ok(Self::Tcp(rest.to_owned()));
        }
        Err(DriverError::Unavailable {
            reason: format!(
                "engine endpoint {raw:?} is not supported (unix:// or tcp:// only; ssh:// needs a tunnel)"
            ),
        })
    }

    /// Whether host paths can be bound (the engine shares our filesystem).
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Unix(_))
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Self::Unix(p) => format!("unix://{p}"),
            Self::Tcp(a) => format!("tcp://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert!(
            Endpoint::parse("unix:///run/x.sock")
                .expect("ok")
                .is_local()
        );
        assert!(
            !Endpoint::parse("tcp://1.2.3.4:2375")
                .expect("ok")
                .is_local()
        );
        assert!(Endpoint::parse("ssh://me@host").is_err());
    }
}
