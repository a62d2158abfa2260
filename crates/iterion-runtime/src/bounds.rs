//! Run and node bounds (issue 19 #6): a tool node's `timeout:`, the
//! workflow's `budget:` keys that need no model (`max_duration`,
//! `max_iterations`) and `iterion run --timeout`, turned into deadlines the
//! engine's cancellation tokens obey and into typed failures (`TIMEOUT`,
//! `BUDGET_EXCEEDED`, upstream's names) with their events.
//!
//! It owns what each bound means and how it ends a run. It does not run
//! nodes: the engine executes under the token a [`Watchdog`] hands it, so a
//! bound that fires stops the exec exactly like a cancellation does (the
//! driver kills the exec's processes inside the sandbox) and the teardown
//! still removes the sandbox. The agents' token and cost budgets
//! (`max_tokens`, `max_cost_usd`) are theirs to meter: their executor
//! reports usage through [`RunBounds::charge`], which applies the same
//! failure and event.
//!
//! It also says when a command died of the sandbox's memory limit
//! ([`memory_limit_hit`]): the kernel's OOM kill is that bound's
//! enforcement, and reads like any SIGKILL unless someone asks the cgroup.
//!
//! Budget checks are hard, not upstream's soft 90 % pre-check: a node past
//! `max_iterations` never starts, and `max_duration` is a deadline, not a
//! check between nodes (a single node outliving the budget is stopped).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::duration::parse_go_duration;
use iterion_core::store::Failure;
use iterion_core::{DriverName, EventKind, ExecRequest, FailureCode, NodeId, SandboxRun};
use iterion_dsl::ir;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A bound that cannot be read. Refused at admission, before anything
/// starts: a bound silently ignored is the attack of issue 19 #6.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    /// A node's `timeout:` is not a positive Go duration.
    #[error("node {node}: timeout {value} is not a positive duration (90s, 10m, 1h30m)")]
    BadTimeout {
        /// The node.
        node: NodeId,
        /// The value as written.
        value: String,
    },
    /// A `budget:` entry is not what its key needs.
    #[error("budget.{key}: {value} is not {expected}")]
    BadBudget {
        /// The budget key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
}

impl BoundsError {
    /// Stable code (the admission code of the refused run).
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadTimeout { .. } => "bad_timeout",
            Self::BadBudget { .. } => "bad_budget",
        }
    }
}

/// One bound, as it ends a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    /// `iterion run --timeout`.
    RunTimeout(Duration),
    /// `budget.max_duration`.
    MaxDuration(Duration),
    /// A tool node's `timeout:`.
    NodeTimeout {
        /// The node.
        node: NodeId,
        /// Its timeout.
        after: Duration,
    },
    /// `budget.max_iterations`: node executions of the run.
    MaxIterations(u64),
    /// An agent's token or cost budget (reported through
    /// [`RunBounds::charge`]).
    Usage {
        /// `tokens` or `cost_usd`.
        dimension: &'static str,
        /// Used so far.
        used: f64,
        /// The budget.
        limit: f64,
    },
}

impl Bound {
    /// The run's failure.
    pub fn failure(&self) -> Failure {
        let (code, message) = match self {
            Self::RunTimeout(d) => (
                FailureCode::Timeout,
                format!("the run exceeded --timeout {}", human(*d)),
            ),
            Self::NodeTimeout { node, after } => (
                FailureCode::Timeout,
                format!(
                    "node {node} exceeded its timeout of {}; its processes were killed",
                    human(*after)
                ),
            ),
            Self::MaxDuration(d) => (
                FailureCode::BudgetExceeded,
                format!("budget exceeded: max_duration {}", human(*d)),
            ),
            Self::MaxIterations(n) => (
                FailureCode::BudgetExceeded,
                format!("budget exceeded: max_iterations {n} (node executions)"),
            ),
            Self::Usage {
                dimension,
                used,
                limit,
            } => (
                FailureCode::BudgetExceeded,
                format!("budget exceeded: {dimension} {used} of {limit}"),
            ),
        };
        Failure::new(code, message)
    }

    /// The `budget_exceeded` event of a budget bound (timeouts have none:
    /// their failure says it).
    pub fn event(&self, elapsed: Duration) -> Option<EventKind> {
        let (dimension, used, limit) = match self {
            Self::RunTimeout(_) | Self::NodeTimeout { .. } => return None,
            Self::MaxDuration(d) => ("duration", millis(elapsed), millis(*d)),
            Self::MaxIterations(n) => ("iterations", *n as f64 + 1.0, *n as f64),
            Self::Usage {
                dimension,
                used,
                limit,
            } => (*dimension, *used, *limit),
        };
        Some(EventKind::BudgetExceeded {
            dimension: dimension.to_owned(),
            used,
            limit,
        })
    }
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64
}

/// `2s`, `1.5s`, `3m`, as an operator wrote it back.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{}ms", ms),
    }
}

/// Every bound of one run, read from the workflow and the CLI.
#[derive(Debug, Clone)]
pub struct RunBounds {
    /// The run's deadline (the earlier of `--timeout` and `max_duration`)
    /// and the bound it enforces.
    deadline: Option<(Duration, Bound)>,
    max_iterations: Option<u64>,
    node_timeouts: BTreeMap<NodeId, Duration>,
    usage_limits: BTreeMap<&'static str, f64>,
    usage: Arc<Mutex<BTreeMap<&'static str, f64>>>,
    executed: u64,
    started: Instant,
}

/// A positive duration, or the written value for the error.
fn positive_duration(v: &Value) -> Result<Duration, String> {
    match v {
        Value::String(s) => parse_go_duration(s)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{s:?}")),
        other => Err(other.to_string()),
    }
}

impl RunBounds {
    /// Read the bounds of `workflow` and `--timeout`. A bound that is
    /// written but unreadable (or zero) is an error, never ignored.
    pub fn from_workflow(
        workflow: &ir::Workflow,
        cli_timeout: Option<Duration>,
    ) -> Result<Self, BoundsError> {
        let budget = &workflow.budget;
        let max_duration = budget
            .get("max_duration")
            .map(|v| {
                positive_duration(v).map_err(|value| BoundsError::BadBudget {
                    key: "max_duration",
                    value,
                    expected: "a positive duration (90s, 10m, 1h30m)",
                })
            })
            .transpose()?;
        let count = |key: &'static str| {
            budget
                .get(key)
                .map(|v| {
                    v.as_u64()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| BoundsError::BadBudget {
                            key,
                            value: v.to_string(),
                            expected: "a positive whole number",
                        })
                })
                .transpose()
        };
        let max_iterations = count("max_iterations")?;
        let mut usage_limits = BTreeMap::new();
        if let Some(n) = count("max_tokens")? {
            usage_limits.insert("tokens", n as f64);
        }
        if let Some(v) = budget.get("max_cost_usd") {
            let cost = v
                .as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| BoundsError::BadBudget {
                    key: "max_cost_usd",
                    value: v.to_string(),
                    expected: "a non-negative amount",
                })?;
            usage_limits.insert("cost_usd", cost);
        }
        let mut node_timeouts = BTreeMap::new();
        // A tool's `timeout:` (other kinds' timeouts mean other things:
        // a `wait` stops waiting; their executors arm them).
        for node in workflow
            .nodes
            .values()
            .filter(|n| n.kind == ir::NodeKind::Tool)
        {
            if let Some(v) = node.properties.get("timeout") {
                let after = positive_duration(v).map_err(|value| BoundsError::BadTimeout {
                    node: node.id.clone(),
                    value,
                })?;
                node_timeouts.insert(node.id.clone(), after);
            }
        }
        let deadline = match (cli_timeout, max_duration) {
            (Some(t), Some(d)) if d < t => Some((d, Bound::MaxDuration(d))),
            (Some(t), _) => Some((t, Bound::RunTimeout(t))),
            (None, Some(d)) => Some((d, Bound::MaxDuration(d))),
            (None, None) => None,
        };
        Ok(Self {
            deadline,
            max_iterations,
            node_timeouts,
            usage_limits,
            usage: Arc::default(),
            executed: 0,
            started: Instant::now(),
        })
    }

    /// Arm the run's deadline under `cancel`: the returned watchdog's token
    /// is cancelled by `cancel` or when the deadline passes, whichever
    /// comes first. The clock starts here.
    pub fn arm_run(&mut self, cancel: &CancellationToken) -> Watchdog {
        self.started = Instant::now();
        Watchdog::arm(cancel, self.deadline.clone())
    }

    /// Count one node execution; the one past `max_iterations` is refused
    /// before it starts.
    pub fn admit_node(&mut self) -> Result<(), Bound> {
        if let Some(max) = self.max_iterations
            && self.executed >= max
        {
            return Err(Bound::MaxIterations(max));
        }
        self.executed += 1;
        Ok(())
    }

    /// Arm `node`'s `timeout:` under `parent` (the run's token, or its
    /// branch's; a node without one gets a watchdog that only follows it).
    pub fn arm_node(&self, node: &NodeId, parent: &CancellationToken) -> Watchdog {
        let deadline = self.node_timeouts.get(node).map(|after| {
            (
                *after,
                Bound::NodeTimeout {
                    node: node.clone(),
                    after: *after,
                },
            )
        });
        Watchdog::arm(parent, deadline)
    }

    /// The hook of the agents' budgets: add `amount` to `dimension`
    /// (`tokens` or `cost_usd`); past its budget, the bound to stop on.
    pub fn charge(&self, dimension: &'static str, amount: f64) -> Result<(), Bound> {
        let Some(limit) = self.usage_limits.get(dimension).copied() else {
            return Ok(());
        };
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let used = usage.entry(dimension).or_insert(0.0);
        *used += amount;
        if *used > limit {
            return Err(Bound::Usage {
                dimension,
                used: *used,
                limit,
            });
        }
        Ok(())
    }

    /// Time since the run's clock started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Why a run stopped on `watchdog`'s token: the bound that fired, or a
    /// plain cancellation (the user's, a signal).
    pub fn stop_failure(&self, watchdog: &Watchdog) -> (Failure, Option<EventKind>) {
        match watchdog.fired() {
            Some(bound) => (bound.failure(), bound.event(self.elapsed())),
            None => (Failure::new(FailureCode::Cancelled, "run cancelled"), None),
        }
    }
}

/// Exit status of a command the kernel SIGKILLed (128 + 9), which is how
/// the memory limit's OOM kill ends a command.
pub const KILLED: i64 = 137;

/// Reads the OOM-kill counter and the limit of the sandbox's own memory
/// cgroup (v1 `memory.oom_control` / `memory.limit_in_bytes`, v2
/// `memory.events` / `memory.max`); `/sys/fs/cgroup` is read-only inside.
const OOM_PROBE: &str = "for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do [ -r \"$f\" ] && cat \"$f\"; done; for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max; do [ -r \"$f\" ] && echo \"limit $(cat \"$f\")\"; done; exit 0";

/// After a command died of SIGKILL in a live sandbox: whether the memory
/// limit did it, as the `sandbox_limit_reached` event to emit. `None` on
/// the host (the cgroup there is the host's, not a bound of the run), when
/// the counter says no, or when it cannot be read (no guess).
pub async fn memory_limit_hit(run: &dyn SandboxRun) -> Option<EventKind> {
    if run.driver() == DriverName::Noop {
        return None;
    }
    let probe = async {
        let mut session = run
            .exec(ExecRequest::new(["sh", "-c", OOM_PROBE]))
            .await
            .ok()?;
        let limits = OutputLimits {
            stdout: 4096,
            stderr_tail: 0,
        };
        collect_output(session.as_mut(), limits, &mut |_| {})
            .await
            .ok()
    };
    let out = tokio::time::timeout(Duration::from_secs(10), probe)
        .await
        .ok()
        .flatten()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .find_map(|v| v.trim().parse::<u64>().ok())
    };
    let kills = field("oom_kill ").filter(|n| *n > 0)?;
    // v1 reports "no limit" as a huge number; v2 as "max" (unparsed: None).
    let bound = field("limit ").filter(|b| *b < (1 << 62));
    Some(EventKind::SandboxLimitReached {
        limit: "memory".to_owned(),
        bound,
        detail: format!(
            "the kernel killed a process of the sandbox at its memory limit ({kills} OOM kill(s) so far)"
        ),
    })
}

/// A cancellation token that a deadline also cancels, and which bound (if
/// any) did. Dropping it disarms the deadline.
#[derive(Debug)]
pub struct Watchdog {
    token: CancellationToken,
    fired: Arc<Mutex<Option<Bound>>>,
    timer: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// A watchdog that only follows `parent` (a run refused before its
    /// bounds could be read).
    pub fn unarmed(parent: &CancellationToken) -> Self {
        Self::arm(parent, None)
    }

    fn arm(parent: &CancellationToken, deadline: Option<(Duration, Bound)>) -> Self {
        let token = parent.child_token();
        let fired = Arc::new(Mutex::new(None));
        let timer = deadline.map(|(after, bound)| {
            let token = token.clone();
            let fired = Arc::clone(&fired);
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(after) => {
                        // Recorded before the cancel, so whoever wakes on
                        // the token reads the cause.
                        if !token.is_cancelled() {
                            *fired.lock().unwrap_or_else(|p| p.into_inner()) = Some(bound);
                            token.cancel();
                        }
                    }
                    () = token.cancelled() => {}
                }
            })
        });
        Self {
            token,
            fired,
            timer,
        }
    }

    /// The token work under this bound obeys.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The bound that cancelled the token, if one did.
    pub fn fired(&self) -> Option<Bound> {
        self.fired.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(t) = self.timer.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workflow(budget: &[(&str, Value)], timeouts: &[(&str, Value)]) -> ir::Workflow {
        let mut nodes = BTreeMap::new();
        for (id, t) in timeouts {
            nodes.insert(
                NodeId::new(*id),
                ir::Node {
                    id: NodeId::new(*id),
                    kind: ir::NodeKind::Tool,
                    tool: Some(ir::ToolSpec::Command("true".into())),
                    router_mode: None,
                    input: None,
                    output: None,
                    sandbox: None,
                    properties: BTreeMap::from([("timeout".to_owned(), t.clone())]),
                    mcp_servers: Default::default(),
                    pos: ir::Pos::default(),
                },
            );
        }
        ir::Workflow {
            name: "w".into(),
            entry: NodeId::new("a"),
            nodes,
            edges: Vec::new(),
            vars: BTreeMap::new(),
            schemas: BTreeMap::new(),
            sandbox: None,
            worktree: None,
            budget: budget
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            secrets: Vec::new(),
            prompts: BTreeMap::new(),
            properties: BTreeMap::new(),
            mcp_servers: BTreeMap::new(),
            attachments: Default::default(),
            presets: Default::default(),
            pos: ir::Pos::default(),
        }
    }

    #[test]
    fn unreadable_bounds_are_refused_never_ignored() {
        let cases: Vec<(ir::Workflow, &str)> = vec![
            (
                workflow(&[("max_duration", json!("3 seconds"))], &[]),
                "bad_budget",
            ),
            (
                workflow(&[("max_duration", json!("0s"))], &[]),
                "bad_budget",
            ),
            (workflow(&[("max_duration", json!(3))], &[]), "bad_budget"),
            (workflow(&[("max_iterations", json!(0))], &[]), "bad_budget"),
            (
                workflow(&[("max_iterations", json!(-2))], &[]),
                "bad_budget",
            ),
            (
                workflow(&[("max_cost_usd", json!(-1.0))], &[]),
                "bad_budget",
            ),
            (workflow(&[], &[("a", json!("2"))]), "bad_timeout"),
            (workflow(&[], &[("a", json!("-2s"))]), "bad_timeout"),
            (workflow(&[], &[("a", json!(true))]), "bad_timeout"),
        ];
        for (wf, code) in cases {
            let err = RunBounds::from_workflow(&wf, None).expect_err(code);
            assert_eq!(err.code(), code, "{err}");
        }
    }

    #[test]
    fn the_earlier_of_timeout_and_max_duration_is_the_deadline() {
        let wf = workflow(&[("max_duration", json!("3s"))], &[]);
        let b = RunBounds::from_workflow(&wf, Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            b.deadline.unwrap().1,
            Bound::MaxDuration(Duration::from_secs(3))
        );
        let b = RunBounds::from_workflow(&wf, Some(Duration::from_secs(1))).unwrap();
        assert_eq!(
            b.deadline.unwrap().1,
            Bound::RunTimeout(Duration::from_secs(1))
        );
        let b = RunBounds::from_workflow(&workflow(&[], &[]), None).unwrap();
        assert!(b.deadline.is_none());
    }

    #[test]
    fn failures_carry_upstream_codes() {
        let t = Bound::NodeTimeout {
            node: NodeId::new("slow"),
            after: Duration::from_secs(2),
        };
        assert_eq!(t.failure().code, FailureCode::Timeout);
        assert!(t.failure().message.contains("slow"));
        assert!(t.failure().message.contains("2s"));
        assert!(t.event(Duration::ZERO).is_none());
        let d = Bound::MaxDuration(Duration::from_millis(3500));
        assert_eq!(d.failure().code, FailureCode::BudgetExceeded);
        assert!(
            d.failure().message.contains("3500ms"),
            "{}",
            d.failure().message
        );
        assert_eq!(
            d.event(Duration::from_secs(4)),
            Some(EventKind::BudgetExceeded {
                dimension: "duration".into(),
                used: 4000.0,
                limit: 3500.0
            })
        );
        assert_eq!(
            Bound::RunTimeout(Duration::from_secs(60)).failure().code,
            FailureCode::Timeout
        );
    }

    #[test]
    fn max_iterations_refuses_the_node_past_the_budget() {
        let wf = workflow(&[("max_iterations", json!(2))], &[]);
        let mut b = RunBounds::from_workflow(&wf, None).unwrap();
        assert!(b.admit_node().is_ok());
        assert!(b.admit_node().is_ok());
        assert_eq!(b.admit_node(), Err(Bound::MaxIterations(2)));
    }

    #[test]
    fn charge_is_the_agents_hook() {
        let wf = workflow(
            &[("max_tokens", json!(100)), ("max_cost_usd", json!(0.5))],
            &[],
        );
        let b = RunBounds::from_workflow(&wf, None).unwrap();
        assert!(b.charge("tokens", 60.0).is_ok());
        let err = b.charge("tokens", 60.0).unwrap_err();
        assert_eq!(err.failure().code, FailureCode::BudgetExceeded);
        assert!(b.charge("cost_usd", 0.5).is_ok());
        assert!(b.charge("cost_usd", 0.01).is_err());
        // A dimension without a budget is never a failure.
        let free = RunBounds::from_workflow(&workflow(&[], &[]), None).unwrap();
        assert!(free.charge("tokens", 1e12).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_deadline_cancels_its_token_and_names_itself() {
        let wf = workflow(&[], &[("slow", json!("2s"))]);
        let mut b = RunBounds::from_workflow(&wf, None).unwrap();
        let user = CancellationToken::new();
        let run = b.arm_run(&user);
        let node = b.arm_node(&NodeId::new("slow"), run.token());
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert!(!node.token().is_cancelled());
        tokio::time::sleep(Duration::from_millis(200)).await;
        node.token().cancelled().await;
        assert!(matches!(node.fired(), Some(Bound::NodeTimeout { .. })));
        assert!(!run.token().is_cancelled(), "a node bound stops the node");
        let other = b.arm_node(&NodeId::new("fast"), run.token());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!other.token().is_cancelled(), "no timeout: no deadline");
        assert_eq!(b.stop_failure(&run).0.code, FailureCode::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn the_run_deadline_reaches_every_node_and_a_user_cancel_is_not_a_bound() {
        let wf = workflow(&[("max_duration", json!("3s"))], &[]);
        let mut b = RunBounds::from_workflow(&wf, None).unwrap();
        let user = CancellationToken::new();
        let run = b.arm_run(&user);
        let node = b.arm_node(&NodeId::new("a"), run.token());
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(node.token().is_cancelled());
        assert!(node.fired().is_none(), "the node's own bound did not fire");
        let (failure, event) = b.stop_failure(&run);
        assert_eq!(failure.code, FailureCode::BudgetExceeded);
        assert!(matches!(event, Some(EventKind::BudgetExceeded { .. })));

        let mut b = RunBounds::from_workflow(&wf, None).unwrap();
        let user = CancellationToken::new();
        let run = b.arm_run(&user);
        user.cancel();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(run.token().is_cancelled());
        assert_eq!(b.stop_failure(&run).0.code, FailureCode::Cancelled);
    }
}
