//! iterion-driver-noop: the host-passthrough driver, for runs that are not
//! sandboxed.
//!
//! It owns running a command on the host, in the workspace, with the host
//! environment plus the plan's and the request's, in its own process group
//! so a kill takes the whole tree; and tar import/export of host paths. It
//! does not decide when it may be used: an active mode never falls through
//! to it (seed "Guards that refuse", `Factory.DriverForSpec`), which is the
//! policy's job (`iterion-sandbox`, which holds no driver). It creates no
//! engine resource, so its reaper view is empty and its cleanup removes
//! nothing; its sandbox is the workspace directory, so a workspace removed
//! from outside is a sandbox gone. It offers no capability (no image, no
//! user switch, no drain): `driver_conformance!` reads that and checks the
//! host behaviour instead of a container's.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use iterion_core::driver::{EngineInfo, ManagedResource, RunInfo};
use iterion_core::plan::MountOrigin;
use iterion_core::{
    ByteStream, Capabilities, Driver, DriverError, DriverName, DriverObserver, ExecRequest,
    ExecSession, LaunchPlan, OutputChunk, OutputStream, Prepared, SandboxRun,
};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// Size of one read from a child's pipe (one [`OutputChunk`] at most).
const CHUNK_SIZE: usize = 64 * 1024;
/// Chunks buffered between the pipe readers and the consumer: the bound is
/// what keeps a command printing 100 MB from growing memory (backpressure
/// reaches the child through the pipe).
const CHUNK_QUEUE: usize = 8;

/// Host passthrough driver.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopDriver;

impl NoopDriver {
    /// The driver.
    pub fn new() -> Self {
        Self
    }

    /// The live handle of a host "sandbox" rooted at `workspace`, without
    /// going through prepare/start (the runtime's host booter uses this).
    pub fn host_run(workspace: impl Into<PathBuf>) -> NoopRun {
        NoopRun {
            workdir: workspace.into().to_string_lossy().into_owned(),
            env: BTreeMap::new(),
        }
    }
}

#[async_trait]
impl Driver for NoopDriver {
    fn name(&self) -> DriverName {
        DriverName::Noop
    }

    fn capabilities(&self) -> Capabilities {
        // No capability: nothing is contained, mounted or drained. `import`
        // and `export` still work on host paths (the runtime writes script
        // files with them), but `archive_in` stays false because the flag
        // promises copy-into-a-container semantics the policy relies on.
        Capabilities::default()
    }

    async fn prepare(
        &self,
        plan: &LaunchPlan,
        _observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        // Seed "Guards that refuse": the noop file-secret gate is a hard
        // error, because the mount is the secrets' only delivery channel.
        if plan
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::SecretFile)
        {
            return Err(DriverError::SpecRefused {
                reason: "file secrets require a real sandbox driver; the noop driver has no \
                         mount to deliver them"
                    .into(),
            });
        }
        Ok(Prepared {
            driver: DriverName::Noop,
            plan: plan.clone(),
        })
    }

    async fn start(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        _observer: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError> {
        if prepared.driver != DriverName::Noop {
            return Err(DriverError::ForeignPrepared {
                expected: DriverName::Noop,
                actual: prepared.driver,
            });
        }
        // The plan's variables are the sandbox's environment, under each
        // request's own (as a container's env is under an exec's).
        let mut run = Self::host_run(&info.host_workspace);
        run.env = prepared.plan.env;
        Ok(Box::new(run))
    }

    async fn ping(&self) -> Result<EngineInfo, DriverError> {
        Ok(EngineInfo {
            driver: DriverName::Noop,
            endpoint: "host".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            api_version: String::new(),
            local: true,
        })
    }

    async fn image_present(&self, _image: &str) -> Result<bool, DriverError> {
        Err(DriverError::Unsupported {
            driver: DriverName::Noop,
            feature: "images",
        })
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        Ok(Vec::new())
    }

    async fn remove_managed(&self, _resource: &ManagedResource) -> Result<(), DriverError> {
        Ok(())
    }
}

/// The host "sandbox" of one run: the workspace directory.
#[derive(Debug, Clone)]
pub struct NoopRun {
    workdir: String,
    /// The plan's variables (empty for the runtime's host booter, which
    /// passes each exec its own).
    env: BTreeMap<String, String>,
}

fn io_err(operation: impl Into<String>) -> impl FnOnce(std::io::Error) -> DriverError {
    let operation = operation.into();
    move |source| DriverError::Io { operation, source }
}

/// Kill a whole process group. The group id is the child's pid
/// (`process_group(0)`); Linux never hands out a pid that is still in use
/// as a group id, so the signal cannot reach an unrelated process.
fn kill_group(pgid: u32) -> std::io::Result<()> {
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    // pgid > 1: never "every process" nor init.
    let pid = i32::try_from(pgid)
        .ok()
        .filter(|p| *p > 1)
        .and_then(Pid::from_raw)
        .ok_or_else(invalid)?;
    match kill_process_group(pid, Signal::KILL) {
        Ok(()) => Ok(()),
        // Already gone: the goal of a kill.
        Err(e) if e == Errno::SRCH => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[async_trait]
impl SandboxRun for NoopRun {
    fn driver(&self) -> DriverName {
        DriverName::Noop
    }

    fn container(&self) -> &str {
        "host"
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    async fn exec(&self, request: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        if request.user.is_some() {
            return Err(DriverError::Unsupported {
                driver: DriverName::Noop,
                feature: "exec as another user",
            });
        }
        let Some((program, args)) = request.argv.split_first() else {
            return Err(DriverError::SpecRefused {
                reason: "empty argv".into(),
            });
        };
        // The workspace is this sandbox: once it is gone (removed from
        // outside), an exec meets what a killed container's would.
        if !Path::new(&self.workdir).is_dir() {
            return Err(DriverError::ContainerGone {
                container: self.workdir.clone(),
            });
        }
        let workdir = request.workdir.as_deref().unwrap_or(&self.workdir);
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(workdir)
            .envs(&self.env)
            .envs(&request.env)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if request.attach_stdin || request.keep_stdin_open {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = cmd.spawn().map_err(io_err(format!("spawn {program}")))?;
        let pgid = child.id();
        let (tx, rx) = mpsc::channel(CHUNK_QUEUE);
        let mut open = 0;
        if let Some(out) = child.stdout.take() {
            tokio::spawn(pump(out, OutputStream::Stdout, tx.clone()));
            open += 1;
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(pump(err, OutputStream::Stderr, tx.clone()));
            open += 1;
        }
        drop(tx);
        let stdin = child.stdin.take();
        Ok(Box::new(NoopSession {
            child,
            pgid,
            stdin,
            rx,
            open,
            exit: None,
        }))
    }

    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError> {
        let src = PathBuf::from(container_path);
        let spool = tokio::task::spawn_blocking(move || -> Result<std::fs::File, DriverError> {
            let mut file = tempfile::tempfile().map_err(io_err("create export spool"))?;
            {
                let mut builder = tar::Builder::new(&mut file);
                // Symlinks are archived as links, never followed out of the
                // exported tree.
                builder.follow_symlinks(false);
                let name = src
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("."));
                let meta = std::fs::symlink_metadata(&src)
                    .map_err(io_err(format!("stat {}", src.display())))?;
                if meta.is_dir() {
                    builder
                        .append_dir_all(&name, &src)
                        .map_err(io_err(format!("archive {}", src.display())))?;
                } else {
                    builder
                        .append_path_with_name(&src, &name)
                        .map_err(io_err(format!("archive {}", src.display())))?;
                }
                builder.finish().map_err(io_err("finish export archive"))?;
            }
            use std::io::Seek;
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(io_err("rewind export spool"))?;
            Ok(file)
        })
        .await
        .map_err(|e| DriverError::Io {
            operation: "export task".into(),
            source: std::io::Error::other(e),
        })??;
        let reader = tokio::fs::File::from_std(spool);
        Ok(Box::pin(tokio_util::io::ReaderStream::new(reader)))
    }

    async fn import(&self, container_dir: &str, archive: ByteStream) -> Result<(), DriverError> {
        let dst = PathBuf::from(container_dir);
        if !dst.is_absolute() || dst.components().any(|c| c == Component::ParentDir) {
            return Err(DriverError::SpecRefused {
                reason: format!("import target {container_dir:?} must be absolute without '..'"),
            });
        }
        // Spool to an anonymous file so the unpacker (blocking) never holds
        // the whole archive in memory.
        let spool = tempfile::tempfile().map_err(io_err("create import spool"))?;
        let mut spool = tokio::fs::File::from_std(spool);
        let mut archive = archive;
        while let Some(chunk) = archive.next().await {
            let chunk = chunk.map_err(io_err("read import archive"))?;
            spool
                .write_all(&chunk)
                .await
                .map_err(io_err("spool import archive"))?;
        }
        spool
            .flush()
            .await
            .map_err(io_err("spool import archive"))?;
        let mut spool = spool.into_std().await;
        tokio::task::spawn_blocking(move || unpack_confined(&mut spool, &dst))
            .await
            .map_err(|e| DriverError::Io {
                operation: "import task".into(),
                source: std::io::Error::other(e),
            })?
    }

    async fn is_alive(&self) -> Result<bool, DriverError> {
        Ok(Path::new(&self.workdir).is_dir())
    }

    async fn cleanup(&self) -> Result<(), DriverError> {
        Ok(())
    }
}

/// Unpack into `dst`; `tar::Entry::unpack_in` refuses entries that would
/// land outside `dst` (absolute names, `..`, paths through symlinks).
fn unpack_confined(spool: &mut std::fs::File, dst: &Path) -> Result<(), DriverError> {
    use std::io::Seek;
    spool
        .seek(std::io::SeekFrom::Start(0))
        .map_err(io_err("rewind import spool"))?;
    std::fs::create_dir_all(dst).map_err(io_err(format!("create {}", dst.display())))?;
    let mut ar = tar::Archive::new(spool);
    ar.set_preserve_permissions(true);
    ar.set_overwrite(true);
    let entries = ar.entries().map_err(io_err("read import archive"))?;
    for entry in entries {
        let mut entry = entry.map_err(io_err("read import entry"))?;
        let name = entry
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let inside = entry
            .unpack_in(dst)
            .map_err(io_err(format!("unpack {name}")))?;
        if !inside {
            return Err(DriverError::SpecRefused {
                reason: format!("archive entry {name:?} would leave {}", dst.display()),
            });
        }
    }
    Ok(())
}

async fn pump<R>(
    mut reader: R,
    stream: OutputStream,
    tx: mpsc::Sender<Result<OutputChunk, DriverError>>,
) where
    R: AsyncRead + Unpin,
{
    let mut buf = vec![0u8; CHUNK_SIZE];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                let chunk = OutputChunk {
                    stream,
                    data: Bytes::copy_from_slice(&buf[..n]),
                };
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx
                    .send(Err(DriverError::Io {
                        operation: format!("read {}", stream.as_str()),
                        source: e,
                    }))
                    .await;
                return;
            }
        }
    }
}

/// One host process (and its group).
struct NoopSession {
    child: Child,
    pgid: Option<u32>,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Result<OutputChunk, DriverError>>,
    open: usize,
    exit: Option<i64>,
}

#[async_trait]
impl ExecSession for NoopSession {
    async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>> {
        if self.open == 0 {
            return None;
        }
        self.rx.recv().await
    }

    async fn write_stdin(&mut self, data: Bytes) -> Result<(), DriverError> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(DriverError::Unsupported {
                driver: DriverName::Noop,
                feature: "stdin on a request without attach_stdin",
            });
        };
        stdin.write_all(&data).await.map_err(io_err("write stdin"))
    }

    async fn close_stdin(&mut self) -> Result<(), DriverError> {
        if let Some(mut stdin) = self.stdin.take() {
            stdin.shutdown().await.map_err(io_err("close stdin"))?;
        }
        Ok(())
    }

    async fn kill(&mut self) -> Result<(), DriverError> {
        self.stdin = None;
        if let Some(pgid) = self.pgid {
            kill_group(pgid).map_err(io_err("kill process group"))?;
        }
        // Reap the leader so no zombie stays behind.
        let status = self.child.wait().await.map_err(io_err("wait after kill"))?;
        self.exit = Some(exit_code(status));
        Ok(())
    }

    async fn wait(&mut self) -> Result<i64, DriverError> {
        if let Some(code) = self.exit {
            return Ok(code);
        }
        self.stdin = None;
        let status = self.child.wait().await.map_err(io_err("wait"))?;
        let code = exit_code(status);
        self.exit = Some(code);
        Ok(code)
    }
}

impl Drop for NoopSession {
    fn drop(&mut self) {
        // A session dropped before its process ended (a cancelled node, a
        // panicking caller) must not leave the tree running on the host.
        if self.exit.is_none()
            && let Some(pgid) = self.pgid
            && let Err(e) = kill_group(pgid)
        {
            tracing::warn!(pgid, error = %e, "could not kill process group of a dropped exec");
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> i64 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => i64::from(code),
        // Shell convention: 128 + signal number.
        (None, Some(sig)) => 128 + i64::from(sig),
        (None, None) => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::driver::{OutputLimits, collect_output};

    #[tokio::test]
    async fn runs_in_workspace_with_env_and_stdin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = NoopDriver::host_run(dir.path());
        let mut req = ExecRequest::new(["sh", "-c", "pwd; printf %s \"$FOO\"; cat; exit 3"]);
        req.env.insert("FOO".into(), "bar".into());
        req.attach_stdin = true;
        let mut s = run.exec(req).await.expect("exec");
        s.write_stdin(Bytes::from_static(b"-in"))
            .await
            .expect("stdin");
        s.close_stdin().await.expect("close");
        let out = collect_output(s.as_mut(), OutputLimits::default(), &mut |_| {})
            .await
            .expect("collect");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let canon = dir.path().canonicalize().expect("canon");
        assert_eq!(text, format!("{}\nbar-in", canon.display()));
        assert_eq!(out.exit_code, 3);
    }

    #[tokio::test]
    async fn kill_takes_the_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = NoopDriver::host_run(dir.path());
        let mut s = run
            .exec(ExecRequest::new(["sh", "-c", "sleep 100 & echo $!; wait"]))
            .await
            .expect("exec");
        let first = s.next_chunk().await.expect("chunk").expect("ok");
        let pid: i32 = String::from_utf8_lossy(&first.data)
            .trim()
            .parse()
            .expect("pid");
        s.kill().await.expect("kill");
        // The grandchild was in the group: SIGKILL is delivered
        // asynchronously, so wait (bounded) until it is gone or a zombie
        // awaiting its reaper; a sleep 100 would outlive the bound.
        let mut stat = String::new();
        for _ in 0..500 {
            stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the grandchild survived the group kill: {stat}");
    }

    #[tokio::test]
    async fn import_then_export_round_trips_and_refuses_escape() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = NoopDriver::host_run(dir.path());
        let mut tar_bytes = Vec::new();
        {
            let mut b = tar::Builder::new(&mut tar_bytes);
            let mut h = tar::Header::new_gnu();
            h.set_size(5);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "x/hello.txt", &b"hello"[..])
                .expect("append");
            b.finish().expect("finish");
        }
        let stream: ByteStream = Box::pin(futures_util::stream::iter([Ok(Bytes::from(tar_bytes))]));
        let target = dir.path().join("in");
        run.import(target.to_str().expect("utf8"), stream)
            .await
            .expect("import");
        assert_eq!(
            std::fs::read_to_string(target.join("x/hello.txt")).expect("read"),
            "hello"
        );
        let mut exported = Vec::new();
        let mut st = run
            .export(target.join("x").to_str().expect("utf8"))
            .await
            .expect("export");
        while let Some(c) = st.next().await {
            exported.extend_from_slice(&c.expect("chunk"));
        }
        let mut ar = tar::Archive::new(&exported[..]);
        let names: Vec<String> = ar
            .entries()
            .expect("entries")
            .map(|e| e.expect("e").path().expect("p").display().to_string())
            .collect();
        assert!(names.iter().any(|n| n == "x/hello.txt"), "{names:?}");
        assert!(
            run.import("relative", Box::pin(futures_util::stream::empty()))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn prepare_refuses_file_secrets() {
        let mut plan = LaunchPlan::default();
        plan.mounts.push(iterion_core::Mount {
            kind: iterion_core::MountKind::Bind,
            source: Some("/tmp/s".into()),
            target: "/run/iterion/secrets/s".into(),
            readonly: true,
            size: None,
            origin: MountOrigin::SecretFile,
        });
        let err = NoopDriver
            .prepare(&plan, &iterion_core::driver::NullObserver)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), "SANDBOX_SPEC_REFUSED");
    }
}
