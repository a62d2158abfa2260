//! The driver seam: [`Driver`] prepares and starts one sandbox per run;
//! [`SandboxRun`] is the live handle every node execs into.
//!
//! Optional upstream interfaces (Builder, WorkspaceExporter, …) are
//! capability flags plus methods that return [`DriverError::Unsupported`],
//! so the runtime asks [`Driver::capabilities`] instead of probing types.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use crate::boxed::BoxError;
use crate::boxed::ByteStream;
use crate::capabilities::Capabilities;
use crate::id::RunId;
use crate::plan::LaunchPlan;

/// Which driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverName {
    /// Docker Engine.
    Docker,
    /// Podman's Docker-compatible API.
    Podman,
    /// Kubernetes sibling pods.
    Kubernetes,
    /// Host passthrough (never for an active mode).
    Noop,
}

impl DriverName {
    /// The lower-case name used in events and `doctor`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Podman => "podman",
            Self::Kubernetes => "kubernetes",
            Self::Noop => "noop",
        }
    }
}

/// An event's `driver` compared with the word it is written as
/// (`driver == "kubernetes"`), as the tests of the stores and drivers do.
impl PartialEq<str> for DriverName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl fmt::Display for DriverName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-run facts a driver needs at build/start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The run (appears in every label and resource name).
    pub run_id: RunId,
    /// Friendly name (workflow name), for the `iterion.io/run-name` label.
    pub run_name: Option<String>,
    /// Absolute host path of the workspace.
    pub host_workspace: String,
    /// Upper bound of the run, when a budget says so.
    pub max_duration: Option<Duration>,
}

/// The output of [`Driver::prepare`]: the plan, validated, with the image
/// known to be present. Passing it to another driver is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The driver that prepared it.
    pub driver: DriverName,
    /// The validated plan (after a build, `image` is the built tag).
    pub plan: LaunchPlan,
}

/// Something a driver reports while it works (pull progress, build lines,
/// the commands it issues). Implemented by the runtime, which turns these
/// into run-log lines and events.
pub trait DriverObserver: Send + Sync {
    /// A line for the run log.
    fn log(&self, stream: OutputStream, line: &str);
    /// Progress of a slow step.
    fn progress(&self, progress: Progress);
}

/// An observer that drops everything (tests, doctor).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullObserver;

impl DriverObserver for NullObserver {
    fn log(&self, _stream: OutputStream, _line: &str) {}
    fn progress(&self, _progress: Progress) {}
}

/// Progress of a slow driver step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Progress {
    /// Image pull.
    Pull {
        /// Image reference.
        image: String,
        /// Engine status text ("Downloading", "Pull complete"…).
        status: String,
        /// Bytes done, when known.
        current: Option<u64>,
        /// Bytes total, when known.
        total: Option<u64>,
    },
    /// One line of build output.
    Build {
        /// The line.
        line: String,
    },
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A line the driver itself wrote (commands it issued).
    System,
}

impl OutputStream {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::System => "system",
        }
    }
}

/// A chunk of exec output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Which stream.
    pub stream: OutputStream,
    /// The bytes.
    pub data: Bytes,
}

/// One command to run in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// Program and arguments (no shell unless argv says so).
    pub argv: Vec<String>,
    /// Extra environment for this call (appended; empty values honoured).
    pub env: BTreeMap<String, String>,
    /// Working directory; default = the container workspace.
    pub workdir: Option<String>,
    /// User override.
    pub user: Option<String>,
    /// Attach stdin (write with [`ExecSession::write_stdin`]).
    pub attach_stdin: bool,
    /// Keep stdin open even before the caller writes (interactive CLIs).
    pub keep_stdin_open: bool,
}

impl ExecRequest {
    /// A request for `argv`.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }
}

/// Variable marking every process of one exec (inherited by children), so
/// a driver whose exec stream cannot kill what it started (the Engine API's
/// attach, the Kubernetes exec WebSocket: closing either leaves the process
/// running) can find the whole tree and signal it.
pub const EXEC_MARKER_ENV: &str = "ITERION_EXEC_ID";

/// Run as `sh -c EXEC_KILL_SCRIPT iterion-kill ITERION_EXEC_ID=<marker>` in
/// the sandbox: finds the marked processes (same uid as the exec: reading
/// another uid's environ would need CAP_SYS_PTRACE), TERMs them, waits up
/// to ~1 s, then KILLs what is left. Zombies have an empty environ and are
/// skipped. Needs only a POSIX shell, `tr` and `grep`.
pub const EXEC_KILL_SCRIPT: &str = r#"m="$1"
scan() { for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$m"; then echo "$p"; fi; done; }
pids=$(scan); [ -z "$pids" ] && exit 0
kill -TERM $pids 2>/dev/null
i=0; while [ $i -lt 10 ]; do pids=$(scan); [ -z "$pids" ] && exit 0; sleep 0.1; i=$((i+1)); done
kill -KILL $pids 2>/dev/null; exit 0"#;

/// A running exec. Output is pulled chunk by chunk so nothing is buffered
/// unboundedly; the exit code is data, not an error.
#[async_trait]
pub trait ExecSession: Send {
    /// Next output chunk; `None` once both streams are closed.
    async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>>;
    /// Write to the process's stdin.
    async fn write_stdin(&mut self, data: Bytes) -> Result<(), DriverError>;
    /// Close stdin (EOF).
    async fn close_stdin(&mut self) -> Result<(), DriverError>;
    /// Kill the process inside the sandbox (and its process group).
    async fn kill(&mut self) -> Result<(), DriverError>;
    /// Exit code, once output is drained.
    async fn wait(&mut self) -> Result<i64, DriverError>;
}

/// Bounds on what [`collect_output`] keeps in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of stdout kept (head); the rest is counted, not kept.
    pub stdout: usize,
    /// Bytes of stderr kept (tail).
    pub stderr_tail: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            stdout: 16 * 1024 * 1024,
            stderr_tail: 64 * 1024,
        }
    }
}

/// What a finished exec produced, bounded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// Exit code (non-zero is not an error).
    pub exit_code: i64,
    /// Head of stdout, at most `OutputLimits::stdout` bytes.
    pub stdout: Vec<u8>,
    /// Tail of stderr, at most `OutputLimits::stderr_tail` bytes.
    pub stderr_tail: Vec<u8>,
    /// Total stdout bytes seen.
    pub stdout_total: u64,
    /// Total stderr bytes seen.
    pub stderr_total: u64,
}

impl ExecOutput {
    /// Whether stdout was cut.
    pub fn stdout_truncated(&self) -> bool {
        self.stdout_total > self.stdout.len() as u64
    }
}

/// Drain a session, keeping bounded buffers and handing every chunk to
/// `on_chunk` (which streams it into the run log).
pub async fn collect_output(
    session: &mut dyn ExecSession,
    limits: OutputLimits,
    on_chunk: &mut (dyn FnMut(&OutputChunk) + Send),
) -> Result<ExecOutput, DriverError> {
    let mut out = ExecOutput::default();
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk?;
        on_chunk(&chunk);
        match chunk.stream {
            OutputStream::Stdout => {
                out.stdout_total += chunk.data.len() as u64;
                let room = limits.stdout.saturating_sub(out.stdout.len());
                out.stdout
                    .extend_from_slice(&chunk.data[..room.min(chunk.data.len())]);
            }
            OutputStream::Stderr | OutputStream::System => {
                out.stderr_total += chunk.data.len() as u64;
                out.stderr_tail.extend_from_slice(&chunk.data);
                if out.stderr_tail.len() > limits.stderr_tail {
                    let cut = out.stderr_tail.len() - limits.stderr_tail;
                    out.stderr_tail.drain(..cut);
                }
            }
        }
    }
    out.exit_code = session.wait().await?;
    Ok(out)
}

/// The live sandbox of one run.
#[async_trait]
pub trait SandboxRun: Send + Sync {
    /// Which driver runs it.
    fn driver(&self) -> DriverName;
    /// Container (or pod) id/name.
    fn container(&self) -> &str;
    /// Container workspace (default workdir).
    fn workdir(&self) -> &str;
    /// The host name or address the container reaches the run's egress
    /// proxy at, when the run has one (the runtime builds each exec's own
    /// proxy URL from it). `None`: no proxy, or a driver that cannot say.
    fn egress_host(&self) -> Option<&str> {
        None
    }
    /// Whether the plan's egress CA ([`crate::LaunchPlan::egress_ca`]) was
    /// placed at creation, read-only at
    /// [`crate::plan::EGRESS_TRUST_CA`], in a writable
    /// [`crate::plan::EGRESS_TRUST_DIR`] (a Kubernetes pod: projected from
    /// the per-run Secret, beside an emptyDir). The runtime then adds only
    /// the bundle, as the sandbox's own user, and leaves the image's system
    /// bundle alone (a non-root pod cannot replace it). `false`: the
    /// runtime installs everything after start (Docker, Podman).
    fn egress_ca_placed(&self) -> bool {
        false
    }
    /// Start a command.
    async fn exec(&self, request: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError>;
    /// A tar stream of one container path (for drains and workspace export).
    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError>;
    /// The entry names of one container directory (never `.` or `..`; raw
    /// bytes, untrusted). A drain needs it to export a directory piece by
    /// piece once a member too large to read was met (a tar stream cannot
    /// skip a member without reading it). Unsupported by default.
    async fn list_dir(&self, container_path: &str) -> Result<Vec<Vec<u8>>, DriverError> {
        let _ = container_path;
        Err(DriverError::Unsupported {
            driver: self.driver(),
            feature: "directory listing",
        })
    }
    /// A tar stream copied into the container under `container_dir`.
    async fn import(&self, container_dir: &str, archive: ByteStream) -> Result<(), DriverError>;
    /// Whether the sandbox still exists and runs.
    async fn is_alive(&self) -> Result<bool, DriverError>;
    /// Stop and remove everything this run created. Idempotent; "already
    /// gone" is success.
    async fn cleanup(&self) -> Result<(), DriverError>;
    /// The limits of the plan this sandbox runs without, and why (an
    /// engine whose storage cannot bound the writable layer): the runtime
    /// reports each, never silently.
    fn unenforced_limits(&self) -> Vec<UnenforcedLimit> {
        Vec::new()
    }
}

/// A limit of the plan a sandbox runs without.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnenforcedLimit {
    /// Which limit (`writable_layer`, `run_files`).
    pub limit: String,
    /// Why the engine or host could not enforce it.
    pub reason: String,
}

/// Splits exec output into lines per stream for the run log, masking the
/// given secret values (a post_create that echoes `$HTTPS_PROXY` must not
/// put the proxy token in the log) with the one redactor,
/// [`crate::redact::Redactor`]: the value as written, case-changed,
/// base64, url-safe base64, hex, and split over two lines of one stream,
/// exactly as the runtime masks a node's log (issue 31 #9).
#[derive(Debug)]
pub struct LineSplitter {
    out: Vec<u8>,
    err: Vec<u8>,
    /// One masker per stream: a value split over two lines of one stream
    /// is masked on both.
    masks: [crate::redact::LineRedactor<()>; 2],
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::redacting(Vec::new())
    }
}

impl LineSplitter {
    /// A splitter masking each of `secrets` (empty values ignored) as
    /// [`crate::redact::REDACTED`].
    pub fn redacting(secrets: Vec<String>) -> Self {
        let redactor = crate::redact::Redactor::new(secrets);
        Self {
            out: Vec::new(),
            err: Vec::new(),
            masks: [redactor.lines(), redactor.lines()],
        }
    }

    fn slot(stream: OutputStream) -> usize {
        match stream {
            OutputStream::Stdout => 0,
            _ => 1,
        }
    }

    fn emit(&mut self, stream: OutputStream, raw: &[u8], sink: &mut dyn FnMut(OutputStream, &str)) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let ready = self.masks[Self::slot(stream)].push(raw, ());
        for (line, ()) in ready {
            sink(stream, &String::from_utf8_lossy(&line));
        }
    }

    /// Add a chunk of `stream`; every complete line goes to `sink` (a line
    /// a secret may still continue into is held until the next one shows
    /// it does not).
    pub fn push(
        &mut self,
        stream: OutputStream,
        data: &[u8],
        sink: &mut dyn FnMut(OutputStream, &str),
    ) {
        let mut buf = std::mem::take(match stream {
            OutputStream::Stdout => &mut self.out,
            _ => &mut self.err,
        });
        buf.extend_from_slice(data);
        let mut start = 0;
        while let Some(pos) = buf[start..].iter().position(|b| *b == b'\n') {
            self.emit(stream, &buf[start..start + pos], sink);
            start += pos + 1;
        }
        buf.drain(..start);
        // A line longer than 64 KiB is emitted in pieces rather than held.
        if buf.len() > 64 * 1024 {
            self.emit(stream, &buf, sink);
            buf.clear();
        }
        *match stream {
            OutputStream::Stdout => &mut self.out,
            _ => &mut self.err,
        } = buf;
    }

    /// Emit what is left of both streams (a last line without newline, and
    /// lines held back by the masker).
    pub fn flush(&mut self, sink: &mut dyn FnMut(OutputStream, &str)) {
        let out = std::mem::take(&mut self.out);
        let err = std::mem::take(&mut self.err);
        if !out.is_empty() {
            self.emit(OutputStream::Stdout, &out, sink);
        }
        if !err.is_empty() {
            self.emit(OutputStream::Stderr, &err, sink);
        }
        for (slot, stream) in [(0, OutputStream::Stdout), (1, OutputStream::Stderr)] {
            for (line, ()) in self.masks[slot].finish() {
                sink(stream, &String::from_utf8_lossy(&line));
            }
        }
    }
}

/// Variable bounding a sandbox's post-create commands (upstream #719/#823,
/// every driver): a Go duration; empty, invalid or zero ⇒
/// [`DEFAULT_POST_CREATE_TIMEOUT`], as for every sandbox bound (facts §4).
/// Past it the start fails `SANDBOX_SETUP_TIMEOUT`.
pub const POST_CREATE_TIMEOUT_ENV: &str = "ITERION_SANDBOX_POST_CREATE_TIMEOUT";
/// Default post-create bound (upstream: 30m).
pub const DEFAULT_POST_CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The post-create bound `env` sets ([`POST_CREATE_TIMEOUT_ENV`]).
pub fn post_create_timeout(env: &BTreeMap<String, String>) -> Duration {
    env.get(POST_CREATE_TIMEOUT_ENV)
        .and_then(|raw| crate::duration::parse_go_duration(raw.trim()))
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_POST_CREATE_TIMEOUT)
}

/// Variable bounding the copy of a copy-based workspace into its sandbox
/// (every driver): a Go duration; empty, invalid or zero ⇒
/// [`DEFAULT_WORKSPACE_COPY_TIMEOUT`]. Past it the start fails
/// `SANDBOX_SETUP_TIMEOUT`.
pub const WORKSPACE_COPY_TIMEOUT_ENV: &str = "ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT";
/// Default bound of the workspace copy.
pub const DEFAULT_WORKSPACE_COPY_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The workspace-copy bound `env` sets ([`WORKSPACE_COPY_TIMEOUT_ENV`]).
pub fn workspace_copy_timeout(env: &BTreeMap<String, String>) -> Duration {
    env.get(WORKSPACE_COPY_TIMEOUT_ENV)
        .and_then(|raw| crate::duration::parse_go_duration(raw.trim()))
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_WORKSPACE_COPY_TIMEOUT)
}

/// How long `post_create` may take: the bound, and the driver's timer that
/// fires when it has passed (this crate has no clock: the driver's runtime
/// does, e.g. `tokio::time::sleep(timeout)`).
pub struct PostCreateBound<T> {
    /// The bound, for the error.
    pub timeout: Duration,
    /// Completes once `timeout` has passed.
    pub expiry: T,
}

/// Run `post_create` once through `sh -c`, streaming its output line by
/// line to `observer` with `secrets` masked; a non-zero exit is
/// [`DriverError::PostCreateFailed`] with the last 4 KiB of output, a
/// bound that expires first is [`DriverError::PhaseTimeout`]. On any error
/// the caller removes the sandbox, which ends what the commands left
/// running.
pub async fn post_create<T: std::future::Future<Output = ()>>(
    run: &dyn SandboxRun,
    snippet: &str,
    observer: &dyn DriverObserver,
    secrets: Vec<String>,
    bound: PostCreateBound<T>,
) -> Result<(), DriverError> {
    let expired = || DriverError::PhaseTimeout {
        phase: "post_create",
        timeout: bound.timeout,
        variable: POST_CREATE_TIMEOUT_ENV,
    };
    let mut expiry = std::pin::pin!(bound.expiry);
    let mut lines = LineSplitter::redacting(secrets);
    let work = async {
        let mut session = run.exec(ExecRequest::new(["sh", "-c", snippet])).await?;
        let mut on_chunk = |chunk: &OutputChunk| {
            lines.push(chunk.stream, &chunk.data, &mut |stream, line| {
                observer.log(stream, line)
            });
        };
        collect_output(
            session.as_mut(),
            OutputLimits {
                stdout: 4096,
                stderr_tail: 4096,
            },
            &mut on_chunk,
        )
        .await
    };
    let raced = before(work, expiry.as_mut()).await;
    // What it printed before it ended (or was cut short) reaches the log.
    lines.flush(&mut |stream, line| observer.log(stream, line));
    let out = raced.ok_or_else(expired)??;
    if out.exit_code != 0 {
        let mut tail = String::from_utf8_lossy(&out.stdout).into_owned();
        tail.push_str(&String::from_utf8_lossy(&out.stderr_tail));
        let mut cut = tail.len().saturating_sub(4096);
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        return Err(DriverError::PostCreateFailed {
            exit_code: out.exit_code,
            output_tail: tail[cut..].to_owned(),
        });
    }
    Ok(())
}

/// `work`'s output, or `None` once `expiry` completes first. Hand-written
/// (a dozen lines) because this crate depends on no async runtime or
/// futures combinator crate.
async fn before<W: std::future::Future>(
    work: W,
    mut expiry: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Option<W::Output> {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = work.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        expiry.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// A resource a driver created and labelled (`iterion.io/managed=true`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedResource {
    /// Container, network or volume.
    pub kind: ResourceKind,
    /// Engine id.
    pub id: String,
    /// Name.
    pub name: String,
    /// The `iterion.io/run-id` label (empty when missing).
    pub run_id: String,
    /// The process that created it, when the driver labelled one: lets the
    /// reaper keep a live run's resources that its own store does not know
    /// (another store on the same engine is not "confirmed absent").
    #[serde(default)]
    pub owner: Option<crate::id::RunOwner>,
}

/// Kinds of managed resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A container / pod.
    Container,
    /// A per-run network (a Kubernetes NetworkPolicy too: it is what
    /// confines the pod's network).
    Network,
    /// A per-run volume.
    Volume,
    /// A per-run directory on the host (state dir, file-secret dir): not a
    /// driver's, but judged by the same reaper predicate.
    HostDir,
    /// A per-run Kubernetes Secret (file secrets, the proxy endpoint).
    Secret,
}

/// What an engine said about itself (doctor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// Driver name derived from the engine's answer.
    pub driver: DriverName,
    /// Where it was reached.
    pub endpoint: String,
    /// Engine version.
    pub version: String,
    /// API version in use.
    pub api_version: String,
    /// Whether binds of host paths work (local engine).
    pub local: bool,
}

/// What of the host an engine owns and how it maps container users
/// (issue 19): the policy never binds these paths into a sandbox, and
/// decides who a sandbox runs as from the mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFootprint {
    /// The engine's socket and data root on this host (absolute paths).
    pub paths: Vec<String>,
    /// How container uids map to host uids.
    pub uid_mapping: UidMapping,
}

/// How an engine maps container uids to host uids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UidMapping {
    /// Container uid N is host uid N (a rootful engine without user
    /// namespaces): container root writes host-root files on a bind. The
    /// default, because it is the worst case.
    #[default]
    Identity,
    /// The daemon runs every container in a user namespace (dockerd
    /// `userns-remap`): container root is an unprivileged host uid.
    Remapped,
    /// A rootless engine: container root is the engine's own user.
    Rootless,
}

impl UidMapping {
    /// Whether container uid 0 is host uid 0.
    pub fn root_is_host_root(self) -> bool {
        self == Self::Identity
    }

    /// Stable name (doctor, events).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Remapped => "userns-remap",
            Self::Rootless => "rootless",
        }
    }
}

/// Where a run's egress proxy listens, as its driver decides (seed step
/// 15: "the bind pair is the driver's"): the one address its sandbox can
/// reach, never every address of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressBinding {
    /// The address the proxy binds (its port is the OS's choice).
    pub address: std::net::IpAddr,
    /// The address may not be configured on this host yet (a Podman
    /// network's gateway appears with its bridge, at the first container
    /// start): the proxy binds it with `IP_FREEBIND`.
    pub not_yet_configured: bool,
    /// The per-run network created for it, when one was. A run that never
    /// reaches [`Driver::start`] removes it through
    /// [`Driver::remove_managed`]; once started, the run's cleanup does.
    pub network: Option<String>,
}

impl EgressBinding {
    /// Loopback: the binding of a driver whose sandbox shares this host's
    /// network stack.
    pub fn loopback() -> Self {
        Self {
            address: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            not_yet_configured: false,
            network: None,
        }
    }
}

/// A sandbox driver.
#[async_trait]
pub trait Driver: Send + Sync {
    /// Which driver.
    fn name(&self) -> DriverName;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Validate the plan and do the slow IO (image inspect, pull). Starts
    /// nothing; the result is discardable.
    async fn prepare(
        &self,
        plan: &LaunchPlan,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError>;
    /// Build the plan's image (`build:`); the result names the built tag.
    async fn build(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        let _ = (prepared, info, observer);
        Err(DriverError::Unsupported {
            driver: self.name(),
            feature: "build",
        })
    }
    /// Where the run's egress proxy must listen, creating first what
    /// confinement needs (with `enforce`, the per-run network whose gateway
    /// the proxy binds). Called before the proxy starts, so before
    /// [`Driver::prepare`]. The default, loopback, suits a driver whose
    /// sandbox shares the host's network stack.
    async fn egress_binding(
        &self,
        info: &RunInfo,
        enforce: bool,
    ) -> Result<EgressBinding, DriverError> {
        let _ = (info, enforce);
        Ok(EgressBinding::loopback())
    }
    /// Start the one long-lived sandbox of the run. On error nothing is
    /// left behind.
    async fn start(
        &self,
        prepared: Prepared,
        info: &RunInfo,
        observer: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError>;
    /// Engine facts, bounded in time.
    async fn ping(&self) -> Result<EngineInfo, DriverError>;
    /// The host paths this engine owns and how it maps users (asked of the
    /// engine once, then remembered). A driver that binds no host path
    /// keeps the default.
    async fn host_footprint(&self) -> HostFootprint {
        HostFootprint::default()
    }
    /// Whether an image is present locally (no pull).
    async fn image_present(&self, image: &str) -> Result<bool, DriverError>;
    /// Every resource this driver created, across runs.
    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError>;
    /// Remove one managed resource ("already gone" is success).
    async fn remove_managed(&self, resource: &ManagedResource) -> Result<(), DriverError>;
}

/// Errors of the driver seam, each with a stable [`DriverError::code`].
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// No engine reachable / the driver cannot run on this host.
    #[error("sandbox driver unavailable: {reason}")]
    Unavailable {
        /// What was tried and what failed.
        reason: String,
    },
    /// The driver lacks a capability.
    #[error("the {driver} driver does not support {feature}")]
    Unsupported {
        /// Driver.
        driver: DriverName,
        /// Missing feature.
        feature: &'static str,
    },
    /// The plan violates a guard.
    #[error("sandbox spec refused: {reason}")]
    SpecRefused {
        /// Which guard and which value.
        reason: String,
    },
    /// The host-root guard the plan asks for (issue 19 item 4) could not
    /// be applied or was not in effect: refused, never run unguarded.
    #[error("sandbox host-root guard unavailable: {reason}")]
    GuardUnavailable {
        /// What the engine refused or the sandbox showed.
        reason: String,
    },
    /// A prepared spec from another driver.
    #[error("prepared spec belongs to the {actual} driver, not {expected}")]
    ForeignPrepared {
        /// This driver.
        expected: DriverName,
        /// The driver that prepared it.
        actual: DriverName,
    },
    /// The image is missing and cannot be pulled.
    #[error("image {image} is not available: {reason}")]
    ImageUnavailable {
        /// Image reference.
        image: String,
        /// Why.
        reason: String,
    },
    /// A bounded phase stalled.
    #[error("sandbox {phase} timed out after {}s (raise {variable})", timeout.as_secs())]
    PhaseTimeout {
        /// Which phase.
        phase: &'static str,
        /// The bound.
        timeout: Duration,
        /// The variable that sets the bound.
        variable: &'static str,
    },
    /// The sandbox could not be placed.
    #[error("sandbox could not be placed: {reason}")]
    Capacity {
        /// Evidence.
        reason: String,
    },
    /// `build:` failed.
    #[error("sandbox image build failed: {stderr_tail}")]
    BuildFailed {
        /// Last ≤ 4 KiB of build output.
        stderr_tail: String,
    },
    /// post_create exited non-zero.
    #[error("post_create exited with {exit_code}: {output_tail}")]
    PostCreateFailed {
        /// Exit code.
        exit_code: i64,
        /// Tail of its output.
        output_tail: String,
    },
    /// The container is gone (killed, removed, engine restarted).
    #[error("sandbox container {container} is gone")]
    ContainerGone {
        /// Container id/name.
        container: String,
    },
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The engine refused or failed an operation.
    #[error("{operation} failed: {source}")]
    Engine {
        /// The API operation.
        operation: &'static str,
        /// The client error.
        #[source]
        source: BoxError,
    },
    /// Local IO failed.
    #[error("{operation}: {source}")]
    Io {
        /// What was being done.
        operation: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}

impl DriverError {
    /// Stable code for users and scripts.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "SANDBOX_DRIVER_UNAVAILABLE",
            Self::Unsupported { .. } => "SANDBOX_UNSUPPORTED",
            Self::SpecRefused { .. } => "SANDBOX_SPEC_REFUSED",
            Self::GuardUnavailable { .. } => "SANDBOX_GUARD_UNAVAILABLE",
            Self::ForeignPrepared { .. } => "SANDBOX_FOREIGN_PREPARED",
            Self::ImageUnavailable { .. } => "SANDBOX_IMAGE_UNAVAILABLE",
            Self::PhaseTimeout { .. } => "SANDBOX_SETUP_TIMEOUT",
            Self::Capacity { .. } => "SANDBOX_CAPACITY",
            Self::BuildFailed { .. } => "SANDBOX_BUILD_FAILED",
            Self::PostCreateFailed { .. } => "SANDBOX_POST_CREATE_FAILED",
            Self::ContainerGone { .. } => "SANDBOX_CONTAINER_GONE",
            Self::Cancelled => "CANCELLED",
            Self::Engine { .. } => "SANDBOX_ENGINE_ERROR",
            Self::Io { .. } => "SANDBOX_IO_ERROR",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    struct Scripted(VecDeque<OutputChunk>, i64);

    #[async_trait]
    impl ExecSession for Scripted {
        async fn next_chunk(&mut self) -> Option<Result<OutputChunk, DriverError>> {
            self.0.pop_front().map(Ok)
        }
        async fn write_stdin(&mut self, _data: Bytes) -> Result<(), DriverError> {
            Ok(())
        }
        async fn close_stdin(&mut self) -> Result<(), DriverError> {
            Ok(())
        }
        async fn kill(&mut self) -> Result<(), DriverError> {
            Ok(())
        }
        async fn wait(&mut self) -> Result<i64, DriverError> {
            Ok(self.1)
        }
    }

    fn chunk(stream: OutputStream, s: &str) -> OutputChunk {
        OutputChunk {
            stream,
            data: Bytes::copy_from_slice(s.as_bytes()),
        }
    }

    #[test]
    fn collect_bounds_both_streams() {
        let mut s = Scripted(
            VecDeque::from(vec![
                chunk(OutputStream::Stdout, "hello "),
                chunk(OutputStream::Stderr, "aaaa"),
                chunk(OutputStream::Stdout, "world"),
                chunk(OutputStream::Stderr, "bbbb"),
            ]),
            3,
        );
        let mut seen = 0;
        let limits = OutputLimits {
            stdout: 8,
            stderr_tail: 5,
        };
        let mut count = |_: &OutputChunk| seen += 1;
        let out =
            futures_executor_block_on(collect_output(&mut s, limits, &mut count)).expect("collect");
        assert_eq!(seen, 4);
        assert_eq!(out.exit_code, 3);
        assert_eq!(out.stdout, b"hello wo");
        assert!(out.stdout_truncated());
        assert_eq!(out.stderr_tail, b"abbbb");
        assert_eq!(out.stderr_total, 8);
    }

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

    /// The driver path masks the same forms as the node log (issue 31 #9):
    /// base64, url-safe base64, hex, upper case, and a value split over
    /// two lines, which exact matching let through.
    #[test]
    fn driver_lines_mask_encoded_forms_like_node_logs() {
        use base64::Engine as _;
        let secret = "pr0xy-t0ken-5ecret+/?";
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        let hexed = hex::encode(secret);
        let (head, tail) = secret.split_at(9);
        let printed = format!(
            "b64 {b64}\nurl {url}\nhex {hexed}\nup {}\n{head}\n{tail}\n",
            secret.to_uppercase()
        );
        let mut s = LineSplitter::redacting(vec![secret.to_owned()]);
        let mut got = Vec::new();
        let mut sink = |_: OutputStream, l: &str| got.push(l.to_owned());
        // Fed a byte at a time: chunk boundaries change nothing.
        for b in printed.as_bytes() {
            s.push(OutputStream::Stdout, std::slice::from_ref(b), &mut sink);
        }
        s.flush(&mut sink);
        let all = got.join("\n");
        for form in [
            secret,
            &b64,
            &url,
            &hexed,
            &secret.to_uppercase(),
            head,
            tail,
        ] {
            assert!(!all.contains(form), "{form:?} left in {all:?}");
        }
        // The same text through the node-log path reads the same.
        let node = crate::redact::Redactor::new([secret]).redact(&printed);
        assert_eq!(format!("{all}\n"), node);
    }

    /// Minimal executor so core stays free of a runtime dependency.
    #[test]
    fn before_yields_the_work_or_none_once_expired() {
        let mut never = std::pin::pin!(std::future::pending::<()>());
        assert_eq!(
            futures_executor_block_on(before(async { 7 }, never.as_mut())),
            Some(7)
        );
        let expired = std::pin::pin!(std::future::ready(()));
        assert_eq!(
            futures_executor_block_on(before(std::future::pending::<i32>(), expired)),
            None
        );
    }

    #[test]
    fn post_create_timeout_is_a_go_duration_else_the_default() {
        let env = |v: &str| BTreeMap::from([(POST_CREATE_TIMEOUT_ENV.to_owned(), v.to_owned())]);
        assert_eq!(
            post_create_timeout(&BTreeMap::new()),
            DEFAULT_POST_CREATE_TIMEOUT
        );
        assert_eq!(DEFAULT_POST_CREATE_TIMEOUT, Duration::from_secs(1800));
        assert_eq!(post_create_timeout(&env(" 90s ")), Duration::from_secs(90));
        assert_eq!(
            post_create_timeout(&env("1h30m")),
            Duration::from_secs(5400)
        );
        for bad in ["", "soon", "0s", "-5m", "10"] {
            assert_eq!(
                post_create_timeout(&env(bad)),
                DEFAULT_POST_CREATE_TIMEOUT,
                "{bad:?}"
            );
        }
    }

    fn futures_executor_block_on<F: std::future::Future>(fut: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        let mut fut = std::pin::pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }
}
