//! `bash` and `run_command`: a shell command run with its output bounded
//! (both streams, one cap), its process group killed on timeout or
//! cancellation, and the provider credentials scrubbed from its
//! environment.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::context::{TRUNCATED_MARK, ToolContext, str_arg};

/// Bytes of combined bash output kept (upstream `maxOutputSize`).
pub const BASH_OUTPUT_CAP: usize = 10_000;
/// Default bound of one bash call (upstream `DefaultBashTimeout`);
/// `CLAW_BASH_TIMEOUT` overrides it.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(30);

// ---- bash ---------------------------------------------------------------

pub(super) async fn bash(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let command = str_arg(input, "bash", "command")?;
    let (code, out) = run_bounded(shell_command(command), ctx, "bash", BASH_OUTPUT_CAP).await?;
    match code {
        Some(0) => Ok(out),
        Some(code) => Err(format!("{out}\ncommand exited with code {code}")),
        None => Err(format!("{out}\ncommand killed by a signal")),
    }
}

pub(super) async fn run_command(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let command = str_arg(input, "run_command", "command")?;
    let (code, out) =
        run_bounded(shell_command(command), ctx, "run_command", BASH_OUTPUT_CAP).await?;
    Ok(json!({"exit_code": code.unwrap_or(-1), "output": out}).to_string())
}

/// `bash -c command` as upstream; a bare image (busybox) has only sh.
fn shell_command(command: &str) -> tokio::process::Command {
    let shell = ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/bin/sh");
    let mut cmd = tokio::process::Command::new(shell);
    cmd.arg("-c").arg(command);
    cmd
}

/// Run `cmd` in the workdir with stdout and stderr combined and bounded to
/// `cap` bytes, killed (its whole process group) on the bash bound or the
/// node's cancellation. `Ok((exit code, output))`, the code `None` when a
/// signal ended it.
pub(super) async fn run_bounded(
    mut cmd: tokio::process::Command,
    ctx: &ToolContext,
    tool: &str,
    cap: usize,
) -> Result<(Option<i32>, String), String> {
    let (reader, writer) = std::io::pipe().map_err(|e| format!("{tool}: pipe: {e}"))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| format!("{tool}: pipe: {e}"))?;
    cmd.current_dir(&ctx.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        // A fresh process group: a timeout or a cancel reaches grandchildren.
        .process_group(0)
        .kill_on_drop(true);
    for name in &ctx.scrub_env {
        cmd.env_remove(name);
    }
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{tool}: cannot start {program}: {e}"))?;
    // The command's pipe ends now live only in the child (and its children).
    drop(cmd);
    let pgid = child.id();
    let collector = tokio::task::spawn_blocking(move || read_bounded(reader, cap));
    let bound = ctx.bash_timeout;
    let waited = tokio::select! {
        status = child.wait() => Some(status),
        () = sleep_opt(bound) => None,
        () = ctx.cancel.cancelled() => None,
    };
    let status = match waited {
        Some(s) => s.map_err(|e| format!("{tool}: wait: {e}"))?,
        None => {
            kill_group(pgid);
            let _ = child.wait().await;
            let out = finish_collect(collector).await;
            if ctx.cancel.is_cancelled() {
                return Err(format!("{out}\ncommand cancelled"));
            }
            let secs = bound.map_or(0, |d| d.as_secs());
            return Err(format!(
                "{out}\ncommand timed out after {secs}s (raise it with CLAW_BASH_TIMEOUT)"
            ));
        }
    };
    let out = finish_collect(collector).await;
    Ok((status.code(), out))
}

async fn sleep_opt(bound: Option<Duration>) {
    match bound {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(target_os = "linux")]
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

#[cfg(not(target_os = "linux"))]
fn kill_group(_pid: Option<u32>) {}

/// Keep the first `cap` bytes, drain the rest as it arrives (the bound
/// holds while the command runs), mark a cut.
fn read_bounded(mut reader: std::io::PipeReader, cap: usize) -> String {
    let mut kept = Vec::with_capacity(4096);
    let mut buf = [0u8; 16 * 1024];
    let mut truncated = false;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut out = String::from_utf8_lossy(&kept).into_owned();
    if truncated {
        out.push_str(TRUNCATED_MARK);
    }
    out
}

/// A background job that keeps the pipe open must not wedge the call
/// (upstream `WaitDelay`): after the shell exits, wait 2 s at most.
async fn finish_collect(collector: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(Duration::from_secs(2), collector).await {
        Ok(Ok(out)) => out,
        Ok(Err(_)) => String::new(),
        Err(_) => "[output unavailable: a background process kept the output open]".to_owned(),
    }
}

// ---- files --------------------------------------------------------------
