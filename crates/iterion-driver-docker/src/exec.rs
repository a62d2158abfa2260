//! [`DockerExec`]: one exec over the attach stream. Output is pulled chunk
//! by chunk; stdin is the upgraded connection's write half; `kill` finds
//! every process of the exec by an env marker and signals it from a second
//! exec, because closing the HTTP stream leaves the process running.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use iterion_core::{DriverError, ExecSession, OutputChunk, OutputStream};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::container::Container;

/// Variable marking every process of one exec (inherited by children).
pub(crate) const EXEC_MARKER_ENV: &str = "ITERION_EXEC_ID";

/// Finds the marked processes (same uid as the exec: reading another
/// uid's environ would need CAP_SYS_PTRACE), TERMs them, waits up to ~1 s,
/// then KILLs what is left. Zombies have an empty environ and are skipped.
const KILL_SCRIPT: &str = r#"m="$1"
scan() { for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$m"; then echo "$p"; fi; done; }
pids=$(scan); [ -z "$pids" ] && exit 0
kill -TERM $pids 2>/dev/null
i=0; while [ $i -lt 10 ]; do pids=$(scan); [ -z "$pids" ] && exit 0; sleep 0.1; i=$((i+1)); done
kill -KILL $pids 2>/dev/null; exit 0"#;

pub(crate) fn new_marker() -> String {
    let bytes: [u8; 8] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// A running exec.
pub struct DockerExec {
    target: Container,
    id: String,
    marker: String,
    user: Option<String>,
    output: Output,
    input: Option<Input>,
    done: bool,
}

impl std::fmt::Debug for DockerExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerExec")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl DockerExec {
    pub(crate) async fn start(
        target: Container,
        id: String,
        marker: String,
        user: Option<String>,
        stdin: bool,
    ) -> Result<Box<dyn ExecSession>, DriverError> {
        let started = target
            .client()
            .start_exec(
                &id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| target.map_err("start exec", e))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(DriverError::Engine {
                operation: "start exec",
                source: "engine detached an attached exec".into(),
            });
        };
        Ok(Box::new(Self {
            target,
            id,
            marker,
            user,
            output,
            input: stdin.then_some(input),
            done: false,
        }))
    }
}

#[async_trait]
impl ExecSession for DockerExec {
    async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>> {
        if self.done {
            return None;
        }
        loop {
            match self.output.next().await {
                None => {
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(crate::engine::engine_err("read exec output")(e)));
                }
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    return Some(Ok(OutputChunk {
                        stream: OutputStream::Stdout,
                        data: message,
                    }));
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    return Some(Ok(OutputChunk {
                        stream: OutputStream::Stderr,
                        data: message,
                    }));
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
            }
        }
    }

    async fn write_stdin(&mut self, data: Bytes) -> Result<(), DriverError> {
        let input = self.input.as_mut().ok_or_else(|| DriverError::Io {
            operation: "write exec stdin".to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "stdin not attached or closed",
            ),
        })?;
        input
            .write_all(&data)
            .await
            .map_err(|source| DriverError::Io {
                operation: "write exec stdin".to_owned(),
                source,
            })?;
        input.flush().await.map_err(|source| DriverError::Io {
            operation: "flush exec stdin".to_owned(),
            source,
        })
    }

    async fn close_stdin(&mut self) -> Result<(), DriverError> {
        if let Some(mut input) = self.input.take() {
            // Half-close: the engine turns it into EOF on the process's stdin.
            input.shutdown().await.map_err(|source| DriverError::Io {
                operation: "close exec stdin".to_owned(),
                source,
            })?;
        }
        Ok(())
    }

    async fn kill(&mut self) -> Result<(), DriverError> {
        let pattern = format!("{EXEC_MARKER_ENV}={}", self.marker);
        let options = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![
                "sh".to_owned(),
                "-c".to_owned(),
                KILL_SCRIPT.to_owned(),
                "iterion-kill".to_owned(),
                pattern,
            ]),
            user: self.user.clone(),
            ..CreateExecOptions::default()
        };
        let docker = self.target.client();
        let created = docker
            .create_exec(self.target.name.as_str(), options)
            .await
            .map_err(|e| self.target.map_err("create kill exec", e))?;
        let started = docker
            .start_exec(&created.id, None)
            .await
            .map_err(|e| self.target.map_err("start kill exec", e))?;
        if let StartExecResults::Attached { mut output, .. } = started {
            while output.next().await.is_some() {}
        }
        self.input = None;
        Ok(())
    }

    async fn wait(&mut self) -> Result<i64, DriverError> {
        while !self.done {
            if let Some(Err(e)) = self.next_chunk().await {
                return Err(e);
            }
        }
        // The engine may still report the exec as running for a moment
        // after the stream closes.
        let mut delay = Duration::from_millis(2);
        for _ in 0..200 {
            let inspect = self
                .target
                .client()
                .inspect_exec(&self.id)
                .await
                .map_err(|e| self.target.map_err("inspect exec", e))?;
            if inspect.running != Some(true) {
                return inspect.exit_code.ok_or_else(|| DriverError::ContainerGone {
                    container: self.target.name.clone(),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(100));
        }
        Err(DriverError::Engine {
            operation: "inspect exec",
            source: "exec still running after its output closed".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::driver::LineSplitter;

    #[test]
    fn lines_split_per_stream_and_redact() {
        let mut s = LineSplitter::redacting(vec!["tok".to_owned()]);
        let mut got = Vec::new();
        let mut sink = |st: OutputStream, l: &str| got.push((st, l.to_owned()));
        s.push(OutputStream::Stdout, b"a\nb", &mut sink);
        s.push(OutputStream::Stderr, b"x tok\n", &mut sink);
        s.push(OutputStream::Stdout, b"c\n", &mut sink);
        s.flush(&mut sink);
        assert_eq!(
            got,
            vec![
                (OutputStream::Stdout, "a".to_owned()),
                // Held until its stream ends: a masked form may still be
                // under way at the end of the line (streams are not
                // ordered against each other).
                (OutputStream::Stdout, "bc".to_owned()),
                (OutputStream::Stderr, "x [REDACTED]".to_owned()),
            ]
        );
    }
}
