//! Engine calls made over plain HTTP/1.0 instead of bollard.
//!
//! Ping — why: see [`ping`].
//!
//! Container listing — why: Podman 4.3 reports a killed container's state
//! as `stopped`, which bollard's typed `ContainerSummary` refuses to
//! deserialize, so the typed list fails for the whole engine exactly when
//! orphans exist. This reads only the fields the reaper needs.
//!
//! Archive download — why: bollard's body stream moved a 200 MB export at
//! ~0.8× `docker cp` (benches/engine.rs); reading the socket with a 256 KiB
//! buffer matches it. HTTP/1.0 means no chunked encoding: the body is
//! everything until the engine closes the connection.

use std::collections::HashMap;

use iterion_core::DriverError;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use iterion_core::ByteStream;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::endpoint::Endpoint;
use crate::labels::MANAGED_LABEL;

const READ_BUFFER: usize = 256 * 1024;

trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Conn for T {}

async fn connect(endpoint: &Endpoint) -> std::io::Result<Box<dyn Conn>> {
    Ok(match endpoint {
        Endpoint::Unix(sock) => Box::new(tokio::net::UnixStream::connect(sock).await?),
        Endpoint::Tcp(addr) => Box::new(tokio::net::TcpStream::connect(addr).await?),
    })
}

/// Percent-encode a query value (RFC 3986 unreserved kept).
pub(crate) fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a streamed GET answered.
pub(crate) enum Streamed {
    /// 200: the body, and the engine's stat of the path
    /// (`X-Docker-Container-Path-Stat`, base64 JSON) when it sent one.
    Ok(ByteStream, Option<String>),
    /// Any other status, with the (bounded) body text.
    Status(u16, String),
}

/// `GET path` whose body is streamed in 256 KiB reads.
pub(crate) async fn get_stream(endpoint: &Endpoint, path: &str) -> std::io::Result<Streamed> {
    let mut conn = connect(endpoint).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: engine\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut reader = BufReader::with_capacity(READ_BUFFER, conn);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).await?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("malformed status line {status_line:?}")))?;
    let mut path_stat = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("x-docker-container-path-stat")
        {
            path_stat = Some(value.trim().to_owned());
        }
    }
    if status != 200 {
        let mut body = Vec::new();
        (&mut reader).take(64 * 1024).read_to_end(&mut body).await?;
        return Ok(Streamed::Status(
            status,
            String::from_utf8_lossy(&body).trim().to_owned(),
        ));
    }
    Ok(Streamed::Ok(
        Box::pin(tokio_util::io::ReaderStream::with_capacity(
            reader,
            READ_BUFFER,
        )),
        path_stat,
    ))
}

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

/// The host interface of a Podman network (libpod API: the compat
/// inspect does not carry it), for the firewall rules.
pub(crate) async fn podman_interface(
    endpoint: &Endpoint,
    net: &str,
) -> Result<String, DriverError> {
    #[derive(Deserialize)]
    struct LibpodNetwork {
        #[serde(default)]
        network_interface: String,
    }
    let path = format!("/v4.0.0/libpod/networks/{}/json", encode_query(net));
    let body = get_json(endpoint, &path).await?;
    let n: LibpodNetwork = serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))?;
    match n.network_interface.is_empty() {
        true => Err(failed(format!("podman network {net} has no interface"))),
        false => Ok(n.network_interface),
    }
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
    let body = get_json(endpoint, &path).await?;
    serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))
}

/// `GET path` over HTTP/1.0; the body of a 200.
async fn get_json(endpoint: &Endpoint, path: &str) -> Result<Vec<u8>, DriverError> {
    let (head, body) = get(endpoint, path).await.map_err(failed)?;
    let status_ok = head
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("200"));
    if !status_ok {
        return Err(failed(format!(
            "{}: {}",
            head.lines().next().unwrap_or_default(),
            String::from_utf8_lossy(&body)
        )));
    }
    Ok(body)
}

/// `GET path` over HTTP/1.0: the head (status line and headers) and body.
async fn get(endpoint: &Endpoint, path: &str) -> Result<(String, Vec<u8>), String> {
    let raw = match endpoint {
        Endpoint::Unix(sock) => {
            let s = tokio::net::UnixStream::connect(sock)
                .await
                .map_err(|e| format!("{sock}: {e}"))?;
            exchange(s, path).await.map_err(|e| e.to_string())?
        }
        Endpoint::Tcp(addr) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            exchange(s, path).await.map_err(|e| e.to_string())?
        }
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "malformed HTTP answer".to_owned())?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    Ok((head, raw[split + 4..].to_vec()))
}

/// Whether the engine's storage driver can bound a container's writable
/// layer (`--storage-opt size`), from `GET /info`: `Ok(detail)` when it
/// can (overlay on xfs still needs the `pquota` mount option, which the
/// engine does not report: said in the detail), `Err(reason)` when not.
pub(crate) async fn writable_layer_support(endpoint: &Endpoint) -> Result<String, String> {
    #[derive(Deserialize)]
    struct Info {
        #[serde(rename = "Driver", default)]
        driver: String,
        #[serde(rename = "DriverStatus", default)]
        status: Option<Vec<Vec<String>>>,
    }
    let body = get_json(endpoint, "/v1.41/info")
        .await
        .map_err(|e| format!("cannot ask the engine: {e}"))?;
    let info: Info = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let backing = info
        .status
        .unwrap_or_default()
        .into_iter()
        .find(|kv| kv.first().map(String::as_str) == Some("Backing Filesystem"))
        .and_then(|kv| kv.get(1).cloned())
        .unwrap_or_else(|| "unknown".to_owned());
    match (info.driver.as_str(), backing.as_str()) {
        ("btrfs" | "zfs" | "devicemapper", _) => Ok(format!("{} enforces a size", info.driver)),
        ("overlay" | "overlay2", "xfs") => Ok(format!(
            "{} on xfs: enforced if the filesystem is mounted with pquota (else each run says so)",
            info.driver
        )),
        (driver, fs) => Err(format!(
            "{driver} on {fs} cannot enforce a size (needs overlay on xfs with pquota, btrfs or zfs)"
        )),
    }
}

/// Who answered `GET /_ping`, from its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pinged {
    /// Podman's compat API (it sends `Libpod-Api-Version`).
    pub(crate) podman: bool,
    /// The engine's version (`Server: Docker/20.10.24 (linux)`,
    /// `Libpod/4.3.1 (linux)`), empty when not said.
    pub(crate) version: String,
}

/// `GET /_ping`: liveness plus which engine it is. Why not `/version`:
/// Podman 4.3 builds that answer by querying its runtime binaries and took
/// 2.3 s (over the 3 s probe bound) on a loaded two-core host, so a
/// healthy engine read as "no engine" and `auto` runs fell back to the
/// host; `/_ping` answers in milliseconds with the same facts in headers.
pub(crate) async fn ping(endpoint: &Endpoint) -> Result<Pinged, String> {
    let (head, body) = get(endpoint, "/_ping").await?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(parse_ping_head(&head))
}

fn parse_ping_head(head: &str) -> Pinged {
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let server = header("Server").unwrap_or_default();
    let version = server
        .split_whitespace()
        .next()
        .and_then(|s| s.split_once('/'))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default();
    Pinged {
        podman: header("Libpod-Api-Version").is_some() || server.starts_with("Libpod"),
        version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_heads_name_the_engine() {
        let docker = "HTTP/1.0 200 OK\r\nApi-Version: 1.41\r\nServer: Docker/20.10.24+dfsg1 (linux)\r\nOstype: linux";
        assert_eq!(
            parse_ping_head(docker),
            Pinged {
                podman: false,
                version: "20.10.24+dfsg1".into()
            }
        );
        let podman = "HTTP/1.0 200 OK\r\nApi-Version: 1.41\r\nLibpod-Api-Version: 4.3.1\r\nServer: Libpod/4.3.1 (linux)";
        assert_eq!(
            parse_ping_head(podman),
            Pinged {
                podman: true,
                version: "4.3.1".into()
            }
        );
        assert_eq!(parse_ping_head("HTTP/1.0 200 OK").version, "");
    }
}
