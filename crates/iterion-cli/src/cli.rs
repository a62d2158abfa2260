//! Flags and verbs, exactly as `docs/reference/SPEC.md` §2 names them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run AI-agent workflows, each inside its own per-run sandbox.
#[derive(Debug, Parser)]
#[command(name = "iterion", version, about, propagate_version = true)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub command: Command,
}

/// Verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and compile workflows; print diagnostics.
    Validate(ValidateArgs),
    /// Execute a workflow run inside its sandbox.
    Run(RunArgs),
    /// Continue a paused, failed or interrupted run from its stored state.
    Resume(ResumeArgs),
    /// List runs in the store.
    Runs(RunsArgs),
    /// Print a run's events in order.
    Events(EventsArgs),
    /// Print a run's log.
    Logs(LogsArgs),
    /// List or fetch a run's drained files.
    Files(FilesArgs),
    /// Sandbox diagnostics and maintenance.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Cloud mode: queue a run on NATS JetStream for the runners.
    Submit(SubmitArgs),
    /// Cloud mode: take queued runs with a lease and execute them.
    Runner(RunnerArgs),
    /// Cancel a queued or running run (local or cloud).
    Cancel(CancelArgs),
    /// Serve a read-only web page over the run store.
    Studio(StudioArgs),
    /// Internal: run one claw node inside the sandbox, over stdio.
    #[command(name = "__claw-runner", hide = true)]
    ClawRunner,
    /// Internal: report the sandbox's confinement for the host-root guard.
    #[command(name = "__guard-probe", hide = true)]
    GuardProbe,
}

/// `iterion validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Workflow files (`.iter` / `.bot`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `--sandbox` values a CLI may express (`inline` cannot be).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxFlag {
    /// Devcontainer or default image; yields to a workflow `image:`/`build:`.
    Auto,
    /// No sandbox, whatever the workflow says.
    None,
}

/// `--sandbox-host-state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostStateFlag {
    /// Bind host state.
    Auto,
    /// Bind none.
    None,
}

/// `--trust` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrustFlag {
    /// The operator's own workspace.
    Trusted,
    /// Must run in a container or not at all.
    Untrusted,
}

/// `iterion run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Workflow file.
    pub file: PathBuf,
    /// Workflow variable, `K=V` (repeatable).
    #[arg(long = "var", value_name = "K=V")]
    pub vars: Vec<String>,
    /// Sandbox override (tier 1).
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxFlag>,
    /// Image for `auto` when the repo has no devcontainer.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// host_state override.
    #[arg(long, value_enum)]
    pub sandbox_host_state: Option<HostStateFlag>,
    /// Trust level of the workspace.
    #[arg(long, value_enum, default_value = "trusted")]
    pub trust: TrustFlag,
    /// Print `{"run_id","status","failure_code"}` at the end.
    #[arg(long)]
    pub json: bool,
    /// Bound of the whole run (`90s`, `10m`, `1h30m`); past it the running
    /// command is killed and the run fails with TIMEOUT.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,
    /// Explicit run id (`[a-z0-9][a-z0-9_-]{0,62}`); an id the store already
    /// holds is refused. Default: a fresh time-ordered id.
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    pub run_id: Option<iterion_core::RunId>,
    /// Directory store for this run, over `ITERION_STORE`.
    #[arg(long, value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// Diagnostic log on stderr (error, warn, info, debug, trace), over
    /// `ITERION_LOG_LEVEL`.
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_level)]
    pub log_level: Option<LogLevel>,
    /// Never ask on the terminal: a human node pauses the run
    /// (`paused_waiting_human`) for `iterion resume`.
    #[arg(long)]
    pub no_interactive: bool,
    // attachments and presets
    /// Attach a file to the run, `NAME=PATH` (repeatable): NAME is declared
    /// in the workflow's `attachments:`; the file is stored with the run and
    /// read by nodes as `{{attachments.NAME}}`.
    #[arg(long = "attach", value_name = "NAME=PATH")]
    pub attach: Vec<String>,
    /// Apply the workflow's named preset (`presets:`) before `--var`.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    // ---- `worktree: auto` (upstream's four flags; ignored otherwise) ----
    /// Where the run's commits are merged at the end: `current` (or empty,
    /// the default) = the branch checked out when the run started, `none` =
    /// no merge (the run's branch only), or a branch name (it must be the
    /// checked-out branch then).
    #[arg(long, value_name = "BRANCH", value_parser = parse_merge_into)]
    pub merge_into: Option<iterion_runtime::worktree::MergeInto>,
    /// The branch the run's commits are kept on (default
    /// `iterion/run/<run-id>`; a taken name gets a `-N` suffix).
    #[arg(long, value_name = "NAME", value_parser = parse_branch_name)]
    pub branch_name: Option<String>,
    /// How the commits land on the merge target: `squash` (default, one
    /// commit) or `merge` (fast-forward only, history kept).
    #[arg(long, value_enum, value_name = "STRATEGY")]
    pub merge_strategy: Option<MergeStrategyFlag>,
    /// Merge at the end of the run (`--auto-merge=false`: the branch only,
    /// the merge left to you).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub auto_merge: bool,
}

/// `--merge-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MergeStrategyFlag {
    /// One commit on the target.
    Squash,
    /// Fast-forward only.
    Merge,
}

fn parse_merge_into(raw: &str) -> Result<iterion_runtime::worktree::MergeInto, String> {
    raw.parse()
}

fn parse_branch_name(raw: &str) -> Result<String, String> {
    iterion_runtime::worktree::validate_branch_name(raw).map(|()| raw.to_owned())
}

/// `iterion resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue.
    #[arg(long, value_name = "ID")]
    pub run_id: String,
    /// An answer of the paused human node, `FIELD=VALUE` (repeatable; wins
    /// over the file).
    #[arg(long = "answer", value_name = "K=V")]
    pub answers: Vec<String>,
    /// A JSON object of answers.
    #[arg(long, value_name = "FILE")]
    pub answers_file: Option<PathBuf>,
    /// Resume even though the workflow source changed since the run began.
    #[arg(long)]
    pub force: bool,
    /// Print `{"run_id","status","failure_code"}` at the end.
    #[arg(long)]
    pub json: bool,
    /// Never ask on the terminal: a human node pauses the run again.
    #[arg(long)]
    pub no_interactive: bool,
    /// Directory store holding the run, over `ITERION_STORE`.
    #[arg(long, value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// Diagnostic log on stderr (error, warn, info, debug, trace), over
    /// `ITERION_LOG_LEVEL`.
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_level)]
    pub log_level: Option<LogLevel>,
}

/// `iterion submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Workflow file.
    pub file: PathBuf,
    /// Workflow variable, `K=V` (repeatable).
    #[arg(long = "var", value_name = "K=V")]
    pub vars: Vec<String>,
    /// Sandbox override (tier 1), recorded for the runner.
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxFlag>,
    /// Image for `auto` when the repo has no devcontainer.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// host_state override.
    #[arg(long, value_enum)]
    pub sandbox_host_state: Option<HostStateFlag>,
    /// Trust level of the run.
    #[arg(long, value_enum, default_value = "trusted")]
    pub trust: TrustFlag,
    /// Bound of the whole run, applied by the runner.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,
    /// Explicit run id: submitting the same id with the same workflow and
    /// variables again is the same run; with others it is refused.
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    pub run_id: Option<iterion_core::RunId>,
    /// Print `{"run_id","status"}`.
    #[arg(long)]
    pub json: bool,
}

/// `iterion runner`.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Runs executed at once by this runner (over
    /// `ITERION_RUNNER_CONCURRENCY`; default 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: Option<u16>,
}

/// `iterion cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run.
    #[arg(value_parser = parse_run_id)]
    pub run_id: iterion_core::RunId,
    /// Print `{"run_id","status"}`.
    #[arg(long)]
    pub json: bool,
}

/// `--run-id`: a valid run id, else bad input (exit 2).
fn parse_run_id(raw: &str) -> Result<iterion_core::RunId, String> {
    iterion_core::RunId::parse(raw).map_err(|e| e.to_string())
}

/// The levels of the diagnostic log (upstream's five words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Progress of the run's machinery.
    Info,
    /// Engine calls and decisions in detail.
    Debug,
    /// Everything.
    Trace,
}

/// `--log-level` / `ITERION_LOG_LEVEL`: one of the five words, any case.
pub fn parse_log_level(raw: &str) -> Result<LogLevel, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "error" => Ok(LogLevel::Error),
        "warn" | "warning" => Ok(LogLevel::Warn),
        "info" => Ok(LogLevel::Info),
        "debug" => Ok(LogLevel::Debug),
        "trace" => Ok(LogLevel::Trace),
        _ => Err(format!(
            "{raw:?} is not a log level (error, warn, info, debug, trace)"
        )),
    }
}

/// `--timeout`: a positive Go duration (the spelling of every iterion
/// duration); anything else is bad input (exit 2).
fn parse_timeout(raw: &str) -> Result<std::time::Duration, String> {
    iterion_core::duration::parse_go_duration(raw)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{raw:?} is not a positive duration (90s, 10m, 1h30m)"))
}

/// `iterion runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `iterion events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Run id.
    pub run_id: String,
    /// JSON Lines, one event per line.
    #[arg(long)]
    pub json: bool,
    /// Keep printing new events until the run ends.
    #[arg(long)]
    pub follow: bool,
}

/// `iterion logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Run id.
    pub run_id: String,
    /// Keep printing new lines until the run ends.
    #[arg(long)]
    pub follow: bool,
}

/// `iterion files`.
#[derive(Debug, Args)]
pub struct FilesArgs {
    /// Run id.
    pub run_id: String,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Fetch one file by its run-relative path.
    #[arg(long, value_name = "PATH")]
    pub get: Option<String>,
    /// Where to write the fetched file (default: stdout).
    #[arg(short = 'o', long = "output", value_name = "OUT", requires = "get")]
    pub output: Option<PathBuf>,
}

/// `iterion studio`.
#[derive(Debug, Args)]
pub struct StudioArgs {
    /// Listen address; anything but loopback needs `ITERION_STUDIO_TOKEN`.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4891")]
    pub addr: std::net::SocketAddr,
    /// Open the page in the desktop's browser.
    #[arg(long)]
    pub open: bool,
}

/// `iterion sandbox …`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Host kind, runtimes, selected driver, capabilities; `--strict` runs the check battery.
    Doctor(DoctorArgs),
    /// One pass of the orphan reaper over every available driver.
    Reap(ReapArgs),
    /// The Kubernetes objects a run of FILE would create (a `v1` List); nothing applied.
    Manifests(ManifestsArgs),
}

/// `-o` of `iterion sandbox manifests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestFormat {
    /// YAML, as `kubectl -o yaml`.
    Yaml,
    /// JSON, as `kubectl -o json`.
    Json,
}

/// `iterion sandbox manifests`.
#[derive(Debug, Args)]
pub struct ManifestsArgs {
    /// Workflow file.
    pub file: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: ManifestFormat,
}

/// `--target` of the strict doctor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetFlag {
    /// Detect from the environment.
    Auto,
    /// A local host.
    Local,
    /// A cloud (Kubernetes) host.
    Cloud,
}

/// `iterion sandbox doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Resolve the exact spec a run would use and run the check battery.
    #[arg(long)]
    pub strict: bool,
    /// Workflow to resolve (with `--strict`).
    #[arg(requires = "strict")]
    pub file: Option<PathBuf>,
    /// Host kind to check for.
    #[arg(long, value_enum, requires = "strict")]
    pub target: Option<TargetFlag>,
    /// Same as `iterion run --sandbox`.
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxFlag>,
    /// Same as `iterion run --sandbox-default-image`.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// Same as `iterion run --sandbox-host-state`.
    #[arg(long, value_enum)]
    pub sandbox_host_state: Option<HostStateFlag>,
    /// Same as `iterion run --trust` (with `--strict`): the bind verdicts
    /// of an untrusted run.
    #[arg(long, value_enum, requires = "strict")]
    pub trust: Option<TrustFlag>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `iterion sandbox reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// Report what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}
