//! A host process behind the same [`ExecSession`] seam a sandbox exec
//! has, so an unsandboxed run (the `claude` CLI on the host, a runner
//! driven directly in tests and benches) goes through the very code path
//! of a sandboxed one, minus the container.
//!
//! The child gets exactly the environment it is given (`env_clear`): a
//! host process must not inherit the operator's whole shell — only what
//! the caller decided to pass, like an exec's env.

use std::collections::BTreeMap;
use std::process::Stdio;

use async_trait::async_trait;
use bytes::Bytes;
use iterion_core::{DriverError, ExecSession, OutputChunk, OutputStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

/// One host process with piped stdio.
pub struct HostProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    output: mpsc::Receiver<OutputChunk>,
}

impl std::fmt::Debug for HostProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostProcess")
            .field("pid", &self.child.id())
            .finish_non_exhaustive()
    }
}

impl HostProcess {
    /// Start `argv` in `workdir` with exactly `env`.
    pub fn spawn(
        argv: &[String],
        env: &BTreeMap<String, String>,
        workdir: &std::path::Path,
    ) -> Result<Self, std::io::Error> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let (tx, rx) = mpsc::channel(64);
        if let Some(out) = child.stdout.take() {
            tokio::spawn(pump(out, OutputStream::Stdout, tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(pump(err, OutputStream::Stderr, tx));
        }
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            output: rx,
        })
    }
}

async fn pump(
    mut r: impl tokio::io::AsyncRead + Unpin,
    stream: OutputStream,
    tx: mpsc::Sender<OutputChunk>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = OutputChunk {
                    stream,
                    data: Bytes::copy_from_slice(&buf[..n]),
                };
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn io_err(operation: &str) -> impl FnOnce(std::io::Error) -> DriverError + '_ {
    move |source| DriverError::Io {
        operation: operation.to_owned(),
        source,
    }
}

#[async_trait]
impl ExecSession for HostProcess {
    async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>> {
        self.output.recv().await.map(Ok)
    }

    async fn write_stdin(&mut self, data: Bytes) -> Result<(), DriverError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| DriverError::Io {
            operation: "write stdin".to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin closed"),
        })?;
        stdin
            .write_all(&data)
            .await
            .map_err(io_err("write stdin"))?;
        stdin.flush().await.map_err(io_err("flush stdin"))
    }

    async fn close_stdin(&mut self) -> Result<(), DriverError> {
        if let Some(mut s) = self.stdin.take() {
            s.shutdown().await.map_err(io_err("close stdin"))?;
        }
        Ok(())
    }

    async fn kill(&mut self) -> Result<(), DriverError> {
        self.stdin = None;
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            #[cfg(target_os = "linux")]
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
        match self.child.start_kill() {
            Ok(()) => Ok(()),
            // Already exited.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
            Err(e) => Err(io_err("kill")(e)),
        }
    }

    async fn wait(&mut self) -> Result<i64, DriverError> {
        while self.output.recv().await.is_some() {}
        let status = self.child.wait().await.map_err(io_err("wait"))?;
        Ok(status.code().map_or(-1, i64::from))
    }
}
