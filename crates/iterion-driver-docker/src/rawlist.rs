//! Container listing over a plain HTTP/1.0 request.
//!
//! Why: Podman 4.3 reports a killed container's state as `stopped`, which
//! bollard's typed `ContainerSummary` refuses to deserialize, so the typed
//! list fails for the whole engine exactly when orphans exist. This reads
//! only the fields the reaper needs (id, names, labels).

use std::collections::HashMap;

use iterion_core::DriverError;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::driver::{Endpoint, MANAGED_LABEL};

/// The fields of one listed container.
#[derive(Debug, Deserialize)]
pub(crate) struct ListedContainer {
    #[serde(rename = "Id", default)]
    pub(crate) id: String,
    #[serde(rename = "Names", default)]
    pub(crate) names: Vec<String>,
    #[serde(rename = "Labels", default)]
    pub(crate) labels: Option<HashMap<String, String>>,
}

fn failed(reason: String) -> DriverError {
    DriverError::Engine {
        operation: "list containers",
        source: reason.into(),
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
) -> Result<Vec<u8>, DriverError> {
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: engine\r\nAccept: application/json\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut raw = Vec::new();
    // Bounded: a listing larger than 64 MiB is not a listing.
    (&mut stream)
        .take(64 << 20)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(raw)
}

/// `GET /containers/json?all=1` filtered on the managed label.
pub(crate) async fn managed_containers(
    endpoint: &Endpoint,
) -> Result<Vec<ListedContainer>, DriverError> {
    // {"label":["iterion.io/managed=true"]}, percent-encoded.
    let filters = format!(
        "%7B%22label%22%3A%5B%22{}%3Dtrue%22%5D%7D",
        MANAGED_LABEL.replace('/', "%2F")
    );
    let path = format!("/v1.41/containers/json?all=1&filters={filters}");
    let raw = match endpoint {
        Endpoint::Unix(sock) => {
            let s = tokio::net::UnixStream::connect(sock)
                .await
                .map_err(|e| failed(format!("{sock}: {e}")))?;
            exchange(s, &path).await?
        }
        Endpoint::Tcp(addr) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| failed(format!("{addr}: {e}")))?;
            exchange(s, &path).await?
        }
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| failed("malformed HTTP answer".to_owned()))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status_ok = head
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("200"));
    let body = &raw[split + 4..];
    if !status_ok {
        return Err(failed(format!(
            "{}: {}",
            head.lines().next().unwrap_or_default(),
            String::from_utf8_lossy(body)
        )));
    }
    serde_json::from_slice(body).map_err(|e| failed(e.to_string()))
}
