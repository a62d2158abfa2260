//! The host process of a stdio MCP server: started in its own process
//! group, with the run's marker in its environment, the provider
//! credentials taken out of it, `PR_SET_PDEATHSIG` so it dies with the
//! iterion thread that started it (a SIGKILLed iterion included), and
//! recorded in the run's process ledger so a reaper can end what is left
//! (a grandchild an `npx` started) once the run is provably over. Its
//! stderr goes to the run log, bounded. It owns the process, not the
//! protocol (rmcp speaks over its stdio).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;

use iterion_core::RunId;
use iterion_core::agent::{ProcessLedger, RunLog};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::credentials::{CLAUDE_CODE_ONLY_VARS, PROVIDER_CREDENTIAL_VARS};
use crate::env::EnvSnapshot;
use crate::error::AgentError;

/// Bytes of one server's stderr that reach the run log; the rest is
/// counted and dropped (a chatty server must not flood the store).
const STDERR_LOG_CAP: usize = 1024 * 1024;
/// Longest stderr line kept whole.
const STDERR_LINE_CAP: usize = 8 * 1024;

/// A started server process.
pub(crate) struct ServerProcess {
    pub child: Child,
    pub pid: u32,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
}

/// What a server process is started with.
pub(crate) struct Launch<'a> {
    pub run: &'a RunId,
    pub server: &'a str,
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub host_env: &'a EnvSnapshot,
    pub ledger: Option<&'a Arc<dyn ProcessLedger>>,
    pub log: &'a Arc<dyn RunLog>,
}

/// Start the server. `${VAR}` references of the command, arguments and
/// env values are expanded from the host environment first.
pub(crate) fn spawn(l: &Launch<'_>) -> Result<ServerProcess, AgentError> {
    let expand = |s: &str| l.host_env.expand(s).value;
    let spawn_err = |reason: String| AgentError::McpSpawnFailed {
        server: l.server.to_owned(),
        command: l.command.to_owned(),
        reason,
    };
    let mut cmd = tokio::process::Command::new(expand(l.command));
    cmd.args(l.args.iter().map(|a| expand(a)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: teardown and the reaper end it and what it spawned.
        .process_group(0)
        .kill_on_drop(true);
    // The operator's environment, less the model credentials: a server
    // needs its own keys (its `env:`), not the run's provider keys.
    for k in PROVIDER_CREDENTIAL_VARS.iter().chain(CLAUDE_CODE_ONLY_VARS) {
        cmd.env_remove(k);
    }
    for (k, v) in l.env {
        cmd.env(k, expand(v));
    }
    if let Some(ledger) = l.ledger {
        let (k, v) = ledger.marker(l.run);
        cmd.env(k, v);
    }
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| spawn_err(e.to_string()))?;
    let pid = child
        .id()
        .ok_or_else(|| spawn_err("the process exited at once".to_owned()))?;
    if let Some(ledger) = l.ledger
        && let Err(e) = ledger.record(l.run, l.server, pid)
    {
        // Unrecorded, it could outlive a SIGKILL unseen: do not run it.
        let _ = child.start_kill();
        return Err(spawn_err(format!(
            "cannot record the process for the reaper: {e}"
        )));
    }
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.start_kill();
        return Err(spawn_err("its stdio was not captured".to_owned()));
    };
    tokio::spawn(forward_stderr(stderr, l.server.to_owned(), l.log.clone()));
    Ok(ServerProcess {
        child,
        pid,
        stdin,
        stdout,
    })
}

/// `PR_SET_PDEATHSIG(SIGKILL)` in the child: the kernel kills the server
/// when the thread that started it dies, whatever killed iterion. Started
/// from a runtime worker thread (never a blocking-pool thread, which may
/// retire), that is the process's life.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    // Only `pre_exec` runs code between fork and exec, and it is unsafe by
    // signature; std offers no safe way to set a death signal.
    // SAFETY: the closure runs in the forked child before exec. It calls
    // prctl(2) and getppid(2) through rustix (both async-signal-safe),
    // allocates nothing and takes no lock.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: then no
            // signal will come, so do not start.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from(rustix::io::Errno::SRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut tokio::process::Command) {}

async fn forward_stderr(stderr: tokio::process::ChildStderr, server: String, log: Arc<dyn RunLog>) {
    let mut lines = tokio::io::BufReader::new(stderr);
    let mut logged = 0usize;
    let mut dropped = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match lines.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if logged >= STDERR_LOG_CAP {
                    dropped += n;
                    continue;
                }
                logged += n;
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end();
                let text: String = if text.len() > STDERR_LINE_CAP {
                    let mut end = STDERR_LINE_CAP;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    format!("{}…", &text[..end])
                } else {
                    text.to_owned()
                };
                log.line("stderr", format!("mcp server {server}: {text}"));
            }
        }
    }
    if dropped > 0 {
        log.line(
            "system",
            format!("mcp server {server}: {dropped} more bytes of stderr not logged"),
        );
    }
}

/// End a server process: its whole group, then reap it (bounded).
pub(crate) async fn stop(child: &mut Child, pid: u32) {
    #[cfg(target_os = "linux")]
    if let Some(pgid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        // The group is ours: we made it at spawn and its leader is not
        // yet reaped (its pid, hence the group id, cannot be reused).
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await;
}
