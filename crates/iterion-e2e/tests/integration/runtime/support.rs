//! Builders for hand-made IR workflows and a harness around the engine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use iterion_core::store::LogLine;
use iterion_core::{EventRecord, NodeId, RunId, RunStore, Trust};
use iterion_dsl::ir::*;
use iterion_runtime::{
    Admitted, BootContext, BootError, Booted, Engine, HostBooter, RunOptions, RunOutcome,
    SandboxBooter, SandboxFlags,
};
use tokio_util::sync::CancellationToken;

/// Compile `.iter` source; any error diagnostic fails the test.
pub fn compile(source: &str) -> Workflow {
    let compiled = iterion_dsl::compile_source(source, std::path::Path::new("test.iter"));
    assert!(
        !compiled.has_errors(),
        "{}",
        compiled
            .diagnostics
            .iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    compiled.workflows.into_iter().next().expect("a workflow")
}

/// Wait (bounded, far below any test sleep) until `pid` is gone or a
/// zombie awaiting its reaper — SIGKILL lands asynchronously — and fail if
/// it is still running.
pub async fn assert_process_gone(pid: u32) {
    let mut stat = String::new();
    for _ in 0..500 {
        stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("process {pid} survived: {stat}");
}

/// The embedded SQLite store in a fresh directory (kept alive by the
/// returned guard).
pub fn store() -> (Arc<dyn RunStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = iterion_store_sqlite::SqliteStore::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

pub fn tool(id: &str, command: &str, output: Option<&str>) -> Node {
    Node {
        id: NodeId::new(id),
        kind: NodeKind::Tool,
        tool: Some(ToolSpec::Command(command.into())),
        router_mode: None,
        input: None,
        output: output.map(Into::into),
        sandbox: None,
        properties: BTreeMap::new(),
        mcp_servers: Vec::new(),
        pos: Pos::default(),
    }
}

pub fn edge(from: &str, to: &str) -> Edge {
    Edge {
        from: NodeId::new(from),
        to: match to {
            "done" => Target::Done,
            "fail" => Target::Fail,
            n => Target::Node(NodeId::new(n)),
        },
        condition: None,
        loop_bound: None,
        with: BTreeMap::new(),
        is_else: false,
        foreach: None,
        pos: Pos::default(),
    }
}

pub fn when(mut e: Edge, field: &str, negated: bool) -> Edge {
    e.condition = Some(Condition::Field {
        field: field.into(),
        negated,
    });
    e
}

pub fn schema(fields: &[(&str, FieldType)]) -> Schema {
    Schema {
        fields: fields
            .iter()
            .map(|(n, t)| Field {
                name: (*n).into(),
                ty: *t,
                enum_values: Vec::new(),
            })
            .collect(),
    }
}

pub fn workflow(entry: &str, nodes: Vec<Node>, edges: Vec<Edge>) -> Workflow {
    Workflow {
        name: "test".into(),
        entry: NodeId::new(entry),
        nodes: nodes.into_iter().map(|n| (n.id.clone(), n)).collect(),
        edges,
        vars: BTreeMap::new(),
        schemas: BTreeMap::new(),
        sandbox: None,
        worktree: None,
        budget: BTreeMap::new(),
        secrets: Vec::new(),
        prompts: BTreeMap::new(),
        properties: BTreeMap::new(),
        mcp_servers: BTreeMap::new(),
        attachments: Default::default(),
        presets: Default::default(),
        pos: Pos::default(),
    }
}

/// A booter that counts boots and teardowns around the host booter.
#[derive(Default)]
pub struct CountingBooter {
    pub host: HostBooter,
    pub boots: AtomicUsize,
    pub teardowns: AtomicUsize,
}

#[async_trait]
impl SandboxBooter for CountingBooter {
    async fn boot(&self, ctx: &BootContext<'_>, admitted: Admitted) -> Result<Booted, BootError> {
        self.boots.fetch_add(1, Ordering::SeqCst);
        self.host.boot(ctx, admitted).await
    }
    async fn teardown(&self, booted: Booted, ctx: &BootContext<'_>) -> Result<(), BootError> {
        self.teardowns.fetch_add(1, Ordering::SeqCst);
        self.host.teardown(booted, ctx).await
    }
}

pub struct Harness {
    pub store: Arc<dyn RunStore>,
    pub booter: Arc<CountingBooter>,
    pub engine: Engine,
    pub workspace: tempfile::TempDir,
    _store_dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Self {
        let (store, store_dir) = store();
        let booter = Arc::new(CountingBooter::default());
        let engine = Engine::new(Arc::clone(&store), booter.clone());
        Self {
            store,
            booter,
            engine,
            workspace: tempfile::tempdir().unwrap(),
            _store_dir: store_dir,
        }
    }

    /// The same harness whose engine runs agent nodes through `runner`.
    pub fn with_agents(mut self, runner: Arc<dyn iterion_core::agent::AgentRunner>) -> Self {
        self.engine = Engine::new(Arc::clone(&self.store), self.booter.clone()).with_agents(runner);
        self
    }

    pub fn options(&self, wf: Workflow) -> RunOptions {
        RunOptions {
            file: "test.iter".into(),
            workflow: wf,
            vars: BTreeMap::new(),
            trust: Trust::Trusted,
            run_id: RunId::generate(),
            workspace: PathBuf::from(self.workspace.path()),
            flags: SandboxFlags::default(),
            source_sha256: None,
            launch_settings: serde_json::Map::new(),
            attachments: Vec::new(),
            timeout: None,
            worktree: None,
        }
    }

    pub async fn run(&self, wf: Workflow) -> RunOutcome {
        self.run_with(self.options(wf), CancellationToken::new())
            .await
    }

    pub async fn run_with(&self, options: RunOptions, cancel: CancellationToken) -> RunOutcome {
        self.engine.run(options, cancel).await.expect("engine run")
    }

    pub async fn events(&self, run: &RunId) -> Vec<EventRecord> {
        self.store.events_after(run, 0, 0).await.unwrap()
    }

    /// Event kinds in order, without the progress checkpoints.
    pub async fn kinds(&self, run: &RunId) -> Vec<String> {
        self.events(run)
            .await
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| k != "run_checkpoint")
            .collect()
    }

    /// The persisted progress steps, in order.
    pub async fn checkpoints(&self, run: &RunId) -> Vec<iterion_runtime::progress::ProgressStep> {
        self.events(run)
            .await
            .into_iter()
            .filter(|e| e.kind == "run_checkpoint")
            .map(|e| {
                assert_eq!(e.data["version"], 1);
                serde_json::from_value(e.data["step"].clone()).unwrap()
            })
            .collect()
    }

    /// Events of one kind, in order.
    pub async fn of_kind(&self, run: &RunId, kind: &str) -> Vec<EventRecord> {
        self.events(run)
            .await
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect()
    }

    pub async fn logs(&self, run: &RunId) -> Vec<LogLine> {
        self.store.logs_after(run, 0, 0).await.unwrap()
    }
}

/// Spawn a watcher that reads the pid a node writes to `file` (once it
/// exists) and, when `trigger` is given, cancels it then.
pub fn pid_watcher(
    file: PathBuf,
    trigger: Option<CancellationToken>,
) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        loop {
            if let Ok(s) = std::fs::read_to_string(&file)
                && let Ok(pid) = s.trim().parse::<u32>()
            {
                if let Some(t) = &trigger {
                    t.cancel();
                }
                return pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
}
