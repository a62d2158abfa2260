//! [`DockerRun`]: the live container of one run — exec, tar in/out,
//! liveness and idempotent cleanup of the container, its network and its
//! per-run volumes.

use std::time::Duration;

use async_trait::async_trait;
use bollard::exec::CreateExecOptions;
use bollard::query_parameters::{
    RemoveContainerOptions, RemoveVolumeOptions, StopContainerOptions, UploadToContainerOptions,
};
use futures_util::StreamExt;
use iterion_core::{ByteStream, DriverError, DriverName, ExecRequest, ExecSession, SandboxRun};

use crate::container::Container;
use crate::engine::{Engine, engine_err, message_of, status_of};
use crate::exec::{DockerExec, EXEC_MARKER_ENV};

/// Bound of one directory listing (a drain's piecewise export).
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// Bytes of one listing kept; a longer one fails (never a partial list).
const LIST_LIMIT: usize = 8 * 1024 * 1024;

/// Grace given to the container on cleanup (facts §5.3: `stop --time`).
const STOP_GRACE_SECS: i32 = 2;

/// Everything a run created, for cleanup.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunResources {
    pub(crate) container: Option<String>,
    pub(crate) network: Option<String>,
    pub(crate) bridge: Option<String>,
    /// The run whose nftables tables were installed (removed at cleanup).
    pub(crate) firewall_run: Option<String>,
    pub(crate) volumes: Vec<String>,
    /// Limits of the plan the engine could not apply.
    pub(crate) unenforced: Vec<iterion_core::driver::UnenforcedLimit>,
    /// Where the container reaches the egress proxy (its network's
    /// gateway when confined, `host.docker.internal` otherwise).
    pub(crate) proxy_host: Option<String>,
}

/// The live sandbox of one run.
#[derive(Debug, Clone)]
pub struct DockerRun {
    target: Container,
    res: RunResources,
    workdir: String,
}

impl DockerRun {
    pub(crate) fn new(engine: Engine, res: RunResources, workdir: String) -> Self {
        let name = res.container.clone().unwrap_or_default();
        Self {
            target: Container { engine, name },
            res,
            workdir,
        }
    }

    /// Per-run named volumes (bindless read-back storage).
    pub fn volumes(&self) -> &[String] {
        &self.res.volumes
    }

    /// The per-run internal network, when egress is enforced.
    pub fn network(&self) -> Option<&str> {
        self.res.network.as_deref()
    }

    fn report(&self, line: &str) {
        self.target.engine.report(line);
    }
}

#[async_trait]
impl SandboxRun for DockerRun {
    fn driver(&self) -> DriverName {
        self.target.engine.name
    }

    fn container(&self) -> &str {
        &self.target.name
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    fn egress_host(&self) -> Option<&str> {
        self.res.proxy_host.as_deref()
    }

    async fn exec(&self, request: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        if request.argv.is_empty() {
            return Err(DriverError::SpecRefused {
                reason: "exec with an empty argv".to_owned(),
            });
        }
        let marker = crate::exec::new_marker();
        let mut env: Vec<String> = request
            .env
            .iter()
            .filter(|(k, _)| valid_env_name(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        // Every process of this exec inherits the marker; kill() finds the
        // whole tree by it (closing the stream alone kills nothing).
        env.push(format!("{EXEC_MARKER_ENV}={marker}"));
        let stdin = request.attach_stdin || request.keep_stdin_open;
        let options = CreateExecOptions {
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            env: Some(env),
            cmd: Some(request.argv.clone()),
            user: request.user.clone(),
            working_dir: Some(
                request
                    .workdir
                    .clone()
                    .unwrap_or_else(|| self.workdir.clone()),
            ),
            privileged: Some(false),
            ..CreateExecOptions::default()
        };
        let created = self
            .target
            .engine
            .docker
            .create_exec(&self.target.name, options)
            .await
            .map_err(|e| self.target.map_err("create exec", e))?;
        DockerExec::start(self.target.clone(), created.id, marker, request.user, stdin).await
    }

    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError> {
        // Inspect first so a vanished container is a typed error, not a
        // broken stream; a stopped one still serves its filesystem.
        self.target
            .engine
            .docker
            .inspect_container(&self.target.name, None)
            .await
            .map_err(|e| self.target.map_err("inspect container", e))?;
        let path = format!(
            "/v1.41/containers/{}/archive?path={}",
            self.target.name,
            crate::rawlist::encode_query(container_path)
        );
        let fetched = crate::rawlist::get_stream(&self.target.engine.endpoint, &path).await;
        // The container may go between the inspect and the archive request
        // (removed under the run, or reaped): that is `container_gone`, not a
        // broken archive, whatever status the engine chose to say it with.
        if !matches!(fetched, Ok(crate::rawlist::Streamed::Ok(..)))
            && self.target.removed_or_removing().await
        {
            return Err(self.target.gone());
        }
        let stream = match fetched {
            Ok(crate::rawlist::Streamed::Ok(stream, stat)) => {
                // Podman's archive of a path that is a symlink is the file
                // it points to (Docker's is the link itself): a drain or a
                // workspace export asking for one entry would store what a
                // planted link names. The engine's own stat of the path
                // says it is a link: answer as Docker does, the link alone.
                if let Some(target) = stat.as_deref().and_then(link_target) {
                    drop(stream);
                    return Ok(link_archive(container_path, &target));
                }
                stream
            }
            Ok(crate::rawlist::Streamed::Status(404, body)) => {
                return Err(DriverError::Io {
                    operation: format!("export {container_path}"),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, body),
                });
            }
            Ok(crate::rawlist::Streamed::Status(code, body)) => {
                return Err(DriverError::Engine {
                    operation: "download archive",
                    source: format!("status {code}: {body}").into(),
                });
            }
            Err(source) => {
                return Err(DriverError::Io {
                    operation: format!("export {container_path}"),
                    source,
                });
            }
        };
        let basename = container_path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        Ok(crate::tarfix::reroot(stream, basename))
    }

    async fn list_dir(&self, container_path: &str) -> Result<Vec<Vec<u8>>, DriverError> {
        // POSIX sh built-ins only (globs, `[`, `printf`): no find, ls or
        // stat in the image is needed. NUL-separated, hidden names included.
        const LIST: &str = r#"cd -- "$1" || exit 3
for f in * .[!.]* ..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
done"#;
        let mut request = ExecRequest::new(["sh", "-c", LIST, "sh", container_path]);
        request.user = Some("0".to_owned());
        let listing = async {
            let mut session = self.exec(request).await?;
            iterion_core::driver::collect_output(
                session.as_mut(),
                iterion_core::driver::OutputLimits {
                    stdout: LIST_LIMIT,
                    stderr_tail: 1024,
                },
                &mut |_| {},
            )
            .await
        };
        let out = tokio::time::timeout(LIST_TIMEOUT, listing)
            .await
            .map_err(|_| DriverError::Io {
                operation: format!("list {container_path}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {}s", LIST_TIMEOUT.as_secs()),
                ),
            })??;
        if out.exit_code != 0 || out.stdout_truncated() {
            return Err(DriverError::Engine {
                operation: "list directory",
                source: format!(
                    "listing {container_path} exited {} ({} bytes): {}",
                    out.exit_code,
                    out.stdout_total,
                    String::from_utf8_lossy(&out.stderr_tail).trim()
                )
                .into(),
            });
        }
        Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty() && *n != b"." && *n != b"..")
            .map(<[u8]>::to_vec)
            .collect())
    }

    async fn import(&self, container_dir: &str, archive: ByteStream) -> Result<(), DriverError> {
        self.target
            .engine
            .docker
            .upload_to_container(
                &self.target.name,
                Some(UploadToContainerOptions {
                    path: container_dir.to_owned(),
                    ..UploadToContainerOptions::default()
                }),
                bollard::body_try_stream(archive),
            )
            .await
            .map_err(|e| self.target.map_err("upload archive", e))
    }

    async fn is_alive(&self) -> Result<bool, DriverError> {
        match self
            .target
            .engine
            .docker
            .inspect_container(&self.target.name, None)
            .await
        {
            Ok(c) => Ok(c.state.and_then(|s| s.running).unwrap_or(false)),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(engine_err("inspect container")(e)),
        }
    }

    fn unenforced_limits(&self) -> Vec<iterion_core::driver::UnenforcedLimit> {
        self.res.unenforced.clone()
    }

    async fn cleanup(&self) -> Result<(), DriverError> {
        let docker = &self.target.engine.docker;
        // Best effort throughout, but a container still there is reported
        // (after the rest is released), so `sandbox_cleanup` never says ok
        // for a sandbox a dead daemon kept (found by the dead-daemon e2e).
        let mut container_left: Option<String> = None;
        if let Some(name) = &self.res.container {
            let stop = docker.stop_container(
                name,
                Some(StopContainerOptions {
                    t: Some(STOP_GRACE_SECS),
                    signal: None,
                }),
            );
            match tokio::time::timeout(Duration::from_secs(10), stop).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if matches!(status_of(&e), Some(304 | 404)) => {}
                Ok(Err(e)) => self.report(&format!("stop {name}: {}", message_of(&e))),
                Err(_) => self.report(&format!("stop {name}: timed out, removing by force")),
            }
            let remove = docker.remove_container(
                name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                }),
            );
            let failed = match tokio::time::timeout(Duration::from_secs(10), remove).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) if status_of(&e) == Some(404) => None,
                Ok(Err(e)) => Some(message_of(&e)),
                Err(_) => Some("timed out".to_owned()),
            };
            if let Some(why) = failed {
                self.report(&format!("remove {name}: {why}"));
                container_left = Some(why);
            }
        }
        if let Some(run) = &self.res.firewall_run
            && let Err(e) = crate::firewall::release(run).await
        {
            self.report(&format!("release the firewall tables of run {run}: {e}"));
        }
        if let Some(net) = &self.res.network {
            match docker.remove_network(net).await {
                Ok(()) => {}
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => self.report(&format!("remove network {net}: {}", message_of(&e))),
            }
        }
        for vol in &self.res.volumes {
            // A container removed by someone else may still be on its way
            // out when this cleanup runs (the exec ends at the kill, the
            // removal completes later): its volumes answer 409 "in use" for
            // that moment. Retried briefly, bounded, so they are not leaked.
            let mut attempts = 0;
            loop {
                attempts += 1;
                match docker
                    .remove_volume(vol, Some(RemoveVolumeOptions { force: true }))
                    .await
                {
                    Ok(()) => break,
                    Err(e) if status_of(&e) == Some(404) => break,
                    Err(e) if status_of(&e) == Some(409) && attempts < 20 => {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => {
                        self.report(&format!("remove volume {vol}: {}", message_of(&e)));
                        break;
                    }
                }
            }
        }
        match container_left {
            None => Ok(()),
            Some(why) => Err(DriverError::Engine {
                operation: "remove container",
                source: why.into(),
            }),
        }
    }
}

/// The link target in an `X-Docker-Container-Path-Stat` value (base64 of
/// `{"name","size","mode","mtime","linkTarget"}`), when the path is a link.
/// Docker and Podman 4.3 both set the mode's symlink bit for a link.
fn link_target(stat: &str) -> Option<String> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(stat.trim())
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(stat.trim()))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    // Go's `os.ModeSymlink` bit: Podman fills `linkTarget` with the
    // resolved path of every entry, links or not; the mode tells.
    const MODE_SYMLINK: u64 = 1 << 27;
    let mode = v.get("mode").and_then(serde_json::Value::as_u64)?;
    if mode & MODE_SYMLINK == 0 {
        return None;
    }
    v.get("linkTarget")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// A one-member archive: `basename(path)` as a symlink to `target`.
fn link_archive(container_path: &str, target: &str) -> ByteStream {
    let base = container_path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    header.set_mode(0o777);
    let built = builder
        .append_link(&mut header, &base, target)
        .and_then(|()| builder.into_inner());
    let item = built.map(bytes::Bytes::from);
    Box::pin(futures_util::stream::iter([item]))
}

/// POSIX-ish env names only; anything else is skipped (facts §5.3).
fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != EXEC_MARKER_ENV
}

/// Read an export stream to its end (tests and callers that only need bytes).
pub async fn drain_len(mut stream: ByteStream) -> Result<u64, std::io::Error> {
    let mut n = 0u64;
    while let Some(chunk) = stream.next().await {
        n += chunk?.len() as u64;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_path_the_engine_says_is_a_link_is_answered_as_the_link() {
        // Podman 4.3's stat header for `ln -s /etc/passwd passwd_link`.
        let stat = "eyJuYW1lIjoicGFzc3dkIiwic2l6ZSI6MTEsIm1vZGUiOjEzNDIxODIzOSwibXRpbWUiOiIyMDI2LTEyLTAxVDE4OjQyOjA4LjI3NTU0MDc5N1oiLCJpc0RpciI6ZmFsc2UsImxpbmtUYXJnZXQiOiIvZXRjL3Bhc3N3ZCJ9";
        assert_eq!(link_target(stat).as_deref(), Some("/etc/passwd"));
        // Plain entries: Docker leaves `linkTarget` empty, Podman names
        // the entry's own path there; neither has the symlink mode bit.
        let plain = "eyJuYW1lIjoiZiIsInNpemUiOjMsIm1vZGUiOjQyMCwibXRpbWUiOiIyMDI2LTEyLTAxVDE4OjQyOjA4WiIsImxpbmtUYXJnZXQiOiIifQ==";
        assert_eq!(link_target(plain), None);
        let podman_dir = "eyJuYW1lIjoidyIsInNpemUiOjQwOTYsIm1vZGUiOjIxNDc0ODQxNDEsIm10aW1lIjoiMjAyNi0xMi0wMVQxODo0NjoxMy4yMTE1Mzk4ODRaIiwiaXNEaXIiOnRydWUsImxpbmtUYXJnZXQiOiIvdyJ9";
        assert_eq!(link_target(podman_dir), None);
        assert_eq!(link_target("not base64"), None);
        let bytes = drain_bytes(link_archive("/w/passwd_link", "/etc/passwd")).await;
        let mut ar = tar::Archive::new(bytes.as_slice());
        let e = ar
            .entries()
            .expect("entries")
            .next()
            .expect("one")
            .expect("entry");
        assert!(e.header().entry_type().is_symlink());
        assert_eq!(e.path().expect("path").to_str(), Some("passwd_link"));
        assert_eq!(
            e.link_name()
                .expect("link")
                .as_deref()
                .and_then(|p| p.to_str()),
            Some("/etc/passwd")
        );
    }

    async fn drain_bytes(mut s: ByteStream) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c.expect("chunk"));
        }
        out
    }
}
