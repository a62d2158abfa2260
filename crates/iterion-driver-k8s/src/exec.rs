//! [`KubeExec`]: one command over the API's exec WebSocket
//! (`v5.channel.k8s.io`: stdin, stdout, stderr and a status channel that
//! carries the exit code; kube-rs speaks it).
//!
//! The exec API takes only an argv: no environment, no working directory,
//! no user. Putting variables in the argv (`env K=V cmd`, as upstream's
//! kubectl driver did) would write secret values into the request URL —
//! which API servers log and audit — and into the process table. So every
//! exec runs a fixed launcher ([`LAUNCHER`]) that reads the variables from
//! stdin as a header, exports them, marks the process for [`ExecSession::kill`]
//! (the exec stream cannot kill what it started: closing it leaves the
//! process running), changes to the working directory and `exec`s the
//! command, with stdin either handed on or replaced by `/dev/null`. Only
//! the command and the working directory travel in the URL, as they do in
//! the Engine API's exec.
//!
//! Header format: one `NAME=VALUE` line per variable, then an empty line.
//! In a value, `\` is written `\\` and a newline `\n`, which `printf '%b'`
//! turns back into the bytes (no other escape can occur, because every
//! backslash is doubled).

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use iterion_core::driver::{EXEC_KILL_SCRIPT, EXEC_MARKER_ENV};
use iterion_core::{DriverError, ExecSession, OutputChunk, OutputStream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Api;
use kube::api::{AttachParams, AttachedProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt, SimplexStream, WriteHalf};
use tokio::sync::mpsc;

use crate::error::K8sError;
use crate::manifest::CONTAINER;

/// `sh -c LAUNCHER iterion-exec <marker> <workdir> <stdin 0|1> <argv…>`.
pub(crate) const LAUNCHER: &str = r#"m=$1; d=$2; s=$3; shift 3
while IFS= read -r l; do
  [ -z "$l" ] && break
  k=${l%%=*}; v=$(printf '%b' "${l#*=}"; printf x); export "$k=${v%x}"
done
export ITERION_EXEC_ID="$m"
cd "$d" || { echo "iterion-exec: cannot enter $d" >&2; exit 126; }
if [ "$s" = 1 ]; then exec "$@"; else exec "$@" </dev/null; fi"#;

/// Buffer of each stream between the WebSocket task and the reader.
const STREAM_BUF: usize = 64 * 1024;

/// The launcher's argv for `argv` in `workdir`.
pub(crate) fn launcher_argv(
    marker: &str,
    workdir: &str,
    stdin: bool,
    argv: &[String],
) -> Vec<String> {
    let mut out = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        LAUNCHER.to_owned(),
        "iterion-exec".to_owned(),
        marker.to_owned(),
        workdir.to_owned(),
        if stdin { "1" } else { "0" }.to_owned(),
    ];
    out.extend(argv.iter().cloned());
    out
}

/// The environment header (see the module doc). Names must already be
/// valid variable names.
pub(crate) fn env_header(env: &BTreeMap<String, String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in env {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        for b in v.bytes() {
            match b {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                _ => out.push(b),
            }
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// POSIX variable names only, and never the kill marker (a caller must not
/// be able to make its process unkillable or another exec's target).
pub(crate) fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != EXEC_MARKER_ENV
}

/// A fresh marker for one exec.
pub(crate) fn new_marker() -> String {
    let bytes: [u8; 8] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The exit code a finished exec's status (channel 3) reports.
pub(crate) fn exit_code(status: &Status) -> Result<i64, String> {
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode")
        && let Some(code) = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref()?.parse::<i64>().ok())
    {
        return Ok(code);
    }
    Err(match (&status.message, &status.reason) {
        (Some(m), _) if !m.is_empty() => m.clone(),
        (_, r) => format!("exec failed ({})", r.as_deref().unwrap_or("no reason")),
    })
}

/// Whether an API error on exec means the pod (or its container) is gone:
/// 404, or a 400 saying it is not running any more (evicted, completed).
pub(crate) fn pod_gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 404
                || (s.code == 400
                    && (s.message.contains("not running")
                        || s.message.contains("completed pod")
                        || s.message.contains("not found")
                        || s.message.contains("not valid for pod")))
        }
        _ => false,
    }
}

/// What the output task sends.
type Chunk = Result<OutputChunk, DriverError>;

/// A running exec.
pub struct KubeExec {
    pods: Api<Pod>,
    pod: String,
    marker: String,
    process: Option<AttachedProcess>,
    stdin: Option<WriteHalf<SimplexStream>>,
    stdin_wanted: bool,
    output: mpsc::Receiver<Chunk>,
    done: bool,
    exit: Option<i64>,
}

impl std::fmt::Debug for KubeExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExec")
            .field("pod", &self.pod)
            .field("marker", &self.marker)
            .finish_non_exhaustive()
    }
}

impl KubeExec {
    /// Start `argv` in the pod through the launcher.
    pub(crate) async fn start(
        pods: Api<Pod>,
        pod: &str,
        workdir: &str,
        argv: &[String],
        env: &BTreeMap<String, String>,
        stdin_wanted: bool,
    ) -> Result<Self, DriverError> {
        let marker = new_marker();
        let params = AttachParams {
            container: Some(CONTAINER.to_owned()),
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
            max_stdin_buf_size: Some(STREAM_BUF),
            max_stdout_buf_size: Some(STREAM_BUF),
            max_stderr_buf_size: Some(STREAM_BUF),
        };
        let command = launcher_argv(&marker, workdir, stdin_wanted, argv);
        let mut process = pods.exec(pod, command, &params).await.map_err(|e| {
            if pod_gone(&e) {
                K8sError::PodGone {
                    pod: pod.to_owned(),
                    reason: e.to_string(),
                }
            } else {
                K8sError::Api {
                    operation: "exec",
                    source: e,
                }
            }
        })?;
        let mut stdin = process.stdin();
        let header = env_header(env);
        if let Some(w) = stdin.as_mut() {
            w.write_all(&header)
                .await
                .map_err(|source| DriverError::Io {
                    operation: "write exec environment".to_owned(),
                    source,
                })?;
        }
        let (tx, rx) = mpsc::channel::<Chunk>(16);
        let pod_name = pod.to_owned();
        for (reader, stream) in [
            (process.stdout(), OutputStream::Stdout),
            (process.stderr(), OutputStream::Stderr),
        ] {
            let Some(mut reader) = reader else { continue };
            let tx = tx.clone();
            let pod_name = pod_name.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; STREAM_BUF];
                loop {
                    match reader.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => {
                            let chunk = OutputChunk {
                                stream,
                                data: Bytes::copy_from_slice(&buf[..n]),
                            };
                            if tx.send(Ok(chunk)).await.is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            let _ = tx
                                .send(Err(K8sError::Exec {
                                    pod: pod_name.clone(),
                                    reason: format!("reading {}: {e}", stream.as_str()),
                                }
                                .into()))
                                .await;
                            break;
                        }
                    }
                }
            });
        }
        Ok(Self {
            pods,
            pod: pod.to_owned(),
            marker,
            process: Some(process),
            stdin,
            stdin_wanted,
            output: rx,
            done: false,
            exit: None,
        })
    }

    /// After the stream: the pod's state decides between "gone" and a
    /// broken stream.
    async fn no_status(&self, why: String) -> DriverError {
        match self.pods.get_opt(&self.pod).await {
            Ok(None) => K8sError::PodGone {
                pod: self.pod.clone(),
                reason: why,
            }
            .into(),
            Ok(Some(p))
                if p.metadata.deletion_timestamp.is_some()
                    || p.status
                        .as_ref()
                        .and_then(|s| s.phase.as_deref())
                        .is_some_and(|ph| ph != "Running") =>
            {
                K8sError::PodGone {
                    pod: self.pod.clone(),
                    reason: why,
                }
                .into()
            }
            _ => K8sError::Exec {
                pod: self.pod.clone(),
                reason: why,
            }
            .into(),
        }
    }
}

#[async_trait]
impl ExecSession for KubeExec {
    async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>> {
        if self.done {
            return None;
        }
        match self.output.recv().await {
            Some(item) => Some(item),
            None => {
                self.done = true;
                None
            }
        }
    }

    async fn write_stdin(&mut self, data: Bytes) -> Result<(), DriverError> {
        let broken = || DriverError::Io {
            operation: "write exec stdin".to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "stdin not attached or closed",
            ),
        };
        if !self.stdin_wanted {
            return Err(broken());
        }
        let w = self.stdin.as_mut().ok_or_else(broken)?;
        w.write_all(&data).await.map_err(|source| DriverError::Io {
            operation: "write exec stdin".to_owned(),
            source,
        })
    }

    async fn close_stdin(&mut self) -> Result<(), DriverError> {
        if self.stdin_wanted
            && let Some(mut w) = self.stdin.take()
        {
            // kube-rs turns the end of this pipe into the v5 CLOSE signal
            // for stdin, which the process sees as EOF.
            w.shutdown().await.map_err(|source| DriverError::Io {
                operation: "close exec stdin".to_owned(),
                source,
            })?;
        }
        Ok(())
    }

    async fn kill(&mut self) -> Result<(), DriverError> {
        let pattern = format!("{EXEC_MARKER_ENV}={}", self.marker);
        let argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            EXEC_KILL_SCRIPT.to_owned(),
            "iterion-kill".to_owned(),
            pattern,
        ];
        let params = AttachParams {
            container: Some(CONTAINER.to_owned()),
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
            ..AttachParams::default()
        };
        let mut killer = self
            .pods
            .exec(&self.pod, argv, &params)
            .await
            .map_err(|e| {
                DriverError::from(if pod_gone(&e) {
                    K8sError::PodGone {
                        pod: self.pod.clone(),
                        reason: e.to_string(),
                    }
                } else {
                    K8sError::Api {
                        operation: "exec kill",
                        source: e,
                    }
                })
            })?;
        if let Some(status) = killer.take_status() {
            let _ = status.await;
        }
        let _ = killer.join().await;
        self.stdin = None;
        Ok(())
    }

    async fn wait(&mut self) -> Result<i64, DriverError> {
        if let Some(code) = self.exit {
            return Ok(code);
        }
        while !self.done {
            if let Some(Err(e)) = self.next_chunk().await {
                return Err(e);
            }
        }
        let Some(mut process) = self.process.take() else {
            return Err(K8sError::Exec {
                pod: self.pod.clone(),
                reason: "the exit status was already consumed".to_owned(),
            }
            .into());
        };
        let status = match process.take_status() {
            Some(fut) => fut.await,
            None => None,
        };
        self.stdin = None;
        let joined = process.join().await;
        let code = match status {
            Some(s) => exit_code(&s).map_err(|reason| {
                DriverError::from(K8sError::Exec {
                    pod: self.pod.clone(),
                    reason,
                })
            })?,
            None => {
                let why = match joined {
                    Err(e) => format!("the exec stream broke: {e}"),
                    Ok(()) => "the exec stream ended without an exit status".to_owned(),
                };
                return Err(self.no_status(why).await);
            }
        };
        self.exit = Some(code);
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_escapes_only_backslash_and_newline() {
        let env = BTreeMap::from([
            ("A".to_owned(), "x y".to_owned()),
            ("B".to_owned(), "line1\nline2\\n%s\r".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ]);
        assert_eq!(
            String::from_utf8(env_header(&env)).expect("utf8"),
            "A=x y\nB=line1\\nline2\\\\n%s\r\nEMPTY=\n\n"
        );
        assert_eq!(env_header(&BTreeMap::new()), b"\n");
    }

    #[test]
    fn env_names() {
        assert!(valid_env_name("PATH"));
        assert!(valid_env_name("_x1"));
        for bad in ["", "1A", "A-B", "A=B", EXEC_MARKER_ENV] {
            assert!(!valid_env_name(bad), "{bad}");
        }
    }

    #[test]
    fn exit_codes_from_status() {
        let parse = |v: serde_json::Value| -> Status { serde_json::from_value(v).expect("status") };
        assert_eq!(
            exit_code(&parse(
                serde_json::json!({"metadata": {}, "status": "Success"})
            )),
            Ok(0)
        );
        let nonzero = parse(serde_json::json!({
            "metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}
        }));
        assert_eq!(exit_code(&nonzero), Ok(3));
        let internal = parse(serde_json::json!({
            "metadata": {}, "status": "Failure",
            "message": "exec: \"sh\": executable file not found in $PATH", "reason": "InternalError"
        }));
        assert!(
            exit_code(&internal)
                .expect_err("error")
                .contains("executable")
        );
    }
}
