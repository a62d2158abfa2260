//! Tool nodes: a command (`bash -c`, or `sh -c` when the sandbox has no
//! bash) or a script file run by its interpreter, exec'd into the run's
//! sandbox with bounded output; stdout becomes the node's output (facts
//! §2.6, §5.6). A command that is the bare name of a built-in tool the
//! agent runner knows (`privacy_filter`, `read_file`, …) runs that
//! built-in with the node's input instead (`agents::run_builtin`).
//!
//! It does not choose the next node (the walker does) nor decide where
//! the exec runs (the booter did).

use bytes::Bytes;
use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::{ByteStream, ExecRequest, FailureCode, OutputChunk, OutputStream};
use iterion_dsl::ir::{self, ToolSpec};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::bounds;
use crate::events::{NodeLog, NodeLogBounds};
use crate::exec::{NodeError, RunCx};
use crate::progress::FrameId;
use crate::routing;
use crate::template::{self, Scope};
use iterion_core::redact::TailRedactor;

/// Output limits of the engine's own probes (`command -v bash`, `mkdir`).
const PROBE_LIMITS: OutputLimits = OutputLimits {
    stdout: 4096,
    stderr_tail: 4096,
};

impl RunCx<'_> {
    /// `bash` when the sandbox has it, else `sh` (probed once per run,
    /// whichever branch asks first).
    async fn shell(&self, cancel: &CancellationToken) -> Result<&'static str, NodeError> {
        self.shell
            .get_or_try_init(|| async {
                let out = self
                    .probe(ExecRequest::new(["sh", "-c", "command -v bash"]), cancel)
                    .await?;
                Ok(if out.exit_code == 0 { "bash" } else { "sh" })
            })
            .await
            .copied()
    }

    /// `mkdir -p` the script directory once (an archive import needs its
    /// target to exist).
    async fn scratch_ready(&self, cancel: &CancellationToken) -> Result<(), NodeError> {
        let dir = self.booted.scratch_dir();
        self.scratch
            .get_or_try_init(|| async {
                let out = self
                    .probe(ExecRequest::new(["mkdir", "-p", "--", dir]), cancel)
                    .await?;
                if out.exit_code != 0 {
                    return Err(NodeError::Failed {
                        code: FailureCode::NodeFailed,
                        exit_code: Some(out.exit_code),
                        error: format!("cannot create the script directory {dir}"),
                        stderr_tail: String::from_utf8_lossy(&out.stderr_tail).into_owned(),
                    });
                }
                Ok(())
            })
            .await
            .copied()
    }

    async fn probe(
        &self,
        request: ExecRequest,
        cancel: &CancellationToken,
    ) -> Result<iterion_core::driver::ExecOutput, NodeError> {
        let mut session = self
            .booted
            .run()
            .exec(request)
            .await
            .map_err(NodeError::driver)?;
        let mut ignore = |_: &OutputChunk| {};
        let done = tokio::select! {
            r = collect_output(session.as_mut(), PROBE_LIMITS, &mut ignore) => Some(r),
            () = cancel.cancelled() => None,
        };
        let Some(done) = done else {
            let _ = session.kill().await;
            return Err(NodeError::Cancelled);
        };
        done.map_err(NodeError::driver)
    }

    /// Run a tool node under its `timeout:` (issue 19 #6); its exit code
    /// and parsed output. A node deadline kills the exec exactly as a
    /// cancellation does.
    pub(crate) async fn run_tool(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        scope: &Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<(i64, Value), NodeError> {
        let watch = self.arm_node(&node.id, cancel);
        let done = match self.builtin_of(node) {
            Some(tool) => self
                .run_builtin(frame, node, tool, scope, watch.token())
                .await
                .map(|output| (0, output)),
            None => self.exec_tool(frame, node, scope, watch.token()).await,
        };
        match done {
            Err(NodeError::Cancelled) => Err(match watch.fired() {
                Some(bound) => NodeError::Bound(bound),
                None => NodeError::Cancelled,
            }),
            done => done,
        }
    }

    async fn exec_tool(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        scope: &Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<(i64, Value), NodeError> {
        let Some(tool) = &node.tool else {
            return Err(NodeError::failed(
                FailureCode::NodeFailed,
                "node has no command",
            ));
        };
        let argv = match tool {
            ToolSpec::Command(command) => {
                let rendered = template::render_command(command, scope)
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                let shell = self.shell(cancel).await?;
                vec![shell.to_owned(), "-c".to_owned(), rendered]
            }
            ToolSpec::Script { script, language } => {
                let rendered = template::render_script(script, scope)
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                if language.is_empty()
                    || !language
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
                {
                    return Err(NodeError::failed(
                        FailureCode::NodeFailed,
                        format!("script language {language:?} is not an interpreter name"),
                    ));
                }
                self.scratch_ready(cancel).await?;
                let n = self
                    .scripts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                let name = format!("{}-{n}.script", node.id);
                let archive = one_file_tar(&name, rendered.as_bytes())
                    .map_err(|e| NodeError::failed(FailureCode::NodeFailed, e.to_string()))?;
                let stream: ByteStream =
                    Box::pin(futures_util::stream::iter([Ok::<_, std::io::Error>(
                        Bytes::from(archive),
                    )]));
                let dir = self.booted.scratch_dir();
                self.booted
                    .run()
                    .import(dir, stream)
                    .await
                    .map_err(NodeError::driver)?;
                let path = format!("{}/{name}", dir.trim_end_matches('/'));
                vec![language.clone(), path]
            }
        };
        let mut request = ExecRequest::new(argv);
        request.env = self.exec_env(&node.id);
        let exec_started = std::time::Instant::now();
        let mut session = self
            .booted
            .run()
            .exec(request)
            .await
            .map_err(NodeError::driver)?;
        let secrets = self.booted.secrets();
        let mut log = NodeLog::new(
            &node.id,
            self.events.clone(),
            NodeLogBounds {
                bytes: self.settings.node_log_cap,
                rows: self.settings.node_log_rows,
                max_line: self.settings.max_log_line,
            },
        )
        .with_redactor(secrets.redactor.clone());
        let limits = OutputLimits {
            stdout: self.settings.stdout_keep,
            stderr_tail: self.settings.stderr_tail,
        };
        // With secrets, the stderr tail is cut from the masked stream, never
        // from raw bytes (a raw tail starting inside a secret would show
        // the rest of it).
        let mut masked_tail = (!secrets.redactor.is_empty()).then(|| {
            TailRedactor::new(
                &secrets.redactor,
                self.settings.stderr_tail,
                self.settings.max_log_line,
            )
        });
        let collected = {
            let mut on_chunk = |c: &OutputChunk| {
                if let (Some(t), OutputStream::Stderr) = (&mut masked_tail, c.stream) {
                    t.push(&c.data);
                }
                log.push(c);
            };
            tokio::select! {
                r = collect_output(session.as_mut(), limits, &mut on_chunk) => Some(r),
                () = cancel.cancelled() => None,
            }
        };
        let Some(collected) = collected else {
            if let Err(e) = session.kill().await {
                tracing::warn!(node = %node.id, frame = %frame, error = %e,
                    "kill of a cancelled exec failed");
            }
            log.finish();
            return Err(NodeError::Cancelled);
        };
        log.finish();
        // `--log-level debug`: the exec call, whole (start to exit).
        tracing::debug!(
            container = %self.booted.run().container(),
            node = %node.id,
            call = "exec",
            elapsed_ms = exec_started.elapsed().as_millis() as u64,
            exit_code = collected.as_ref().map_or(-1, |o| o.exit_code),
            "driver call"
        );
        let out = collected.map_err(NodeError::driver)?;
        let stderr_tail = match masked_tail {
            Some(t) => t.finish(),
            None => String::from_utf8_lossy(&out.stderr_tail).into_owned(),
        };
        if out.exit_code != 0 {
            // A container killed under a running command ends the exec with
            // the kill's status (137), which reads like the command's own
            // failure. The sandbox is gone, not the node wrong: SANDBOX_LOST
            // (infrastructure, resumable), never NODE_FAILED.
            if sandbox_stopped(self.booted.run().as_ref(), out.exit_code).await {
                return Err(NodeError::Failed {
                    code: FailureCode::SandboxLost,
                    exit_code: Some(out.exit_code),
                    error: format!(
                        "the sandbox {} stopped under the command (exit {})",
                        self.booted.run().container(),
                        out.exit_code
                    ),
                    stderr_tail,
                });
            }
            let mut error = format!("command exited with {}", out.exit_code);
            if out.exit_code == bounds::KILLED
                && let Some(event) = bounds::memory_limit_hit(self.booted.run().as_ref()).await
            {
                self.emit_node(frame, &node.id, event);
                error.push_str(": killed at the sandbox's memory limit (ITERION_SANDBOX_MEMORY)");
            }
            return Err(NodeError::Failed {
                code: FailureCode::NodeFailed,
                exit_code: Some(out.exit_code),
                error,
                stderr_tail,
            });
        }
        // Node output becomes event data (`node_finished.output`): a secret
        // value the command printed is masked before it is parsed.
        let stdout: std::borrow::Cow<'_, [u8]> = match secrets.redactor.is_empty() {
            true => std::borrow::Cow::Borrowed(&out.stdout),
            false => std::borrow::Cow::Owned(
                secrets
                    .redactor
                    .redact(&String::from_utf8_lossy(&out.stdout))
                    .into_bytes(),
            ),
        };
        let output = routing::parse_output(&stdout, out.stdout_truncated());
        let output = self
            .tool_output(frame, node, output)
            .map_err(|error| NodeError::Failed {
                code: FailureCode::NodeFailed,
                exit_code: Some(out.exit_code),
                error,
                stderr_tail,
            })?;
        Ok((out.exit_code, output))
    }

    /// A tool node's output against its `output:` schema. Upstream never
    /// checks it (`pkg/runtime/helpers.go` `validateNodeOutput` is off
    /// outside its tests), so a mismatch is a `node_output_schema_mismatch`
    /// warning and the output goes on as parsed — unless
    /// `ITERION_STRICT_TOOL_OUTPUTS=1`, where the node fails.
    pub(crate) fn tool_output(
        &self,
        frame: &FrameId,
        node: &ir::Node,
        output: serde_json::Map<String, Value>,
    ) -> Result<Value, String> {
        let schema = node
            .output
            .as_ref()
            .and_then(|n| self.workflow.schemas.get(n));
        let errors: Vec<String> = routing::output_errors(&output, schema)
            .iter()
            .map(ToString::to_string)
            .collect();
        if errors.is_empty() {
            return Ok(Value::Object(output));
        }
        let schema = node.output.clone().unwrap_or_default();
        let strict = self.settings.strict_tool_outputs;
        self.emit_node(
            frame,
            &node.id,
            iterion_core::EventKind::NodeOutputSchemaMismatch {
                node: node.id.to_string(),
                schema: schema.clone(),
                errors: errors.clone(),
                strict,
            },
        );
        if strict {
            return Err(format!(
                "output does not match schema {schema}: {} (ITERION_STRICT_TOOL_OUTPUTS=1)",
                errors.join("; ")
            ));
        }
        Ok(Value::Object(output))
    }
}

/// Whether the sandbox stopped under a command that exited `exit_code`.
/// A signal death (> 128) may be seen before the engine has recorded the
/// container's exit (the exec's stream closes first; Podman answers errors
/// while it removes one), so it is re-checked a few times, bounded; any other
/// status is checked once. Still alive or still unknown at the end: the
/// node's own failure (no guess).
async fn sandbox_stopped(run: &dyn iterion_core::SandboxRun, exit_code: i64) -> bool {
    let checks = if exit_code > 128 { 10 } else { 1 };
    for i in 0..checks {
        if matches!(run.is_alive().await, Ok(false)) {
            return true;
        }
        if i + 1 < checks {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    false
}

fn one_file_tar(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut builder = tar::Builder::new(&mut out);
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o700);
        header.set_cksum();
        builder.append_data(&mut header, name, content)?;
        builder.finish()?;
    }
    Ok(out)
}
