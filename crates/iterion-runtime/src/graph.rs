//! What the shape of a workflow's graph means for execution, read once
//! per run: where the branches of a fan-out meet again (the join), which
//! nodes a loop spans (so its counter resets when the loop is entered
//! afresh), whether parallel branches would race on the workspace, and
//! how many branches may run at once.
//!
//! Pure functions over the IR; the walker (`walk.rs`) asks, never the
//! other way round. Upstream reference: `pkg/runtime/fan_out.go`
//! (`findConvergencePoint`, `validateWorkspaceSafety`) and the loop
//! bodies/entries of `pkg/dsl/ir`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use iterion_core::NodeId;
use iterion_core::agent::READ_ONLY_TOOLS;
use iterion_dsl::ir::{Edge, Node, NodeKind, Target, Workflow};
use serde_json::Value;

/// How a join treats its branches (`await:` on the join node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwaitMode {
    /// Every branch must succeed; the first failure cancels the others.
    WaitAll,
    /// Failed branches are tolerated and reported to the join.
    BestEffort,
}

impl AwaitMode {
    /// The DSL spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitAll => "wait_all",
            Self::BestEffort => "best_effort",
        }
    }
}

/// The nodes one `as NAME(N)` loop spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopShape {
    /// Targets of the loop's back-edges (where an iteration starts).
    pub entries: BTreeSet<NodeId>,
    /// Nodes on a cycle through one of its back-edges.
    pub body: BTreeSet<NodeId>,
}

/// The graph facts of one workflow.
#[derive(Debug)]
pub struct GraphInfo<'w> {
    workflow: &'w Workflow,
    /// Distinct sources of the edges into each node.
    sources: BTreeMap<&'w NodeId, BTreeSet<&'w NodeId>>,
    loops: BTreeMap<&'w str, LoopShape>,
}

impl<'w> GraphInfo<'w> {
    /// Read `workflow`'s graph.
    pub fn new(workflow: &'w Workflow) -> Self {
        let mut sources: BTreeMap<&NodeId, BTreeSet<&NodeId>> = BTreeMap::new();
        for e in &workflow.edges {
            if let Target::Node(t) = &e.to {
                sources.entry(t).or_default().insert(&e.from);
            }
        }
        let mut loops: BTreeMap<&str, LoopShape> = BTreeMap::new();
        for e in &workflow.edges {
            let (Some(bound), Target::Node(t)) = (&e.loop_bound, &e.to) else {
                continue;
            };
            loops
                .entry(bound.name.as_str())
                .or_default()
                .entries
                .insert(t.clone());
        }
        let names: Vec<&str> = loops.keys().copied().collect();
        for name in names {
            let back: Vec<&Edge> = workflow
                .edges
                .iter()
                .filter(|e| e.loop_bound.as_ref().is_some_and(|b| b.name == name))
                .collect();
            let starts: Vec<&NodeId> = back
                .iter()
                .filter_map(|e| match &e.to {
                    Target::Node(t) => Some(t),
                    _ => None,
                })
                .collect();
            let forward = reachable(workflow, &starts, false, name);
            let ends: Vec<&NodeId> = back.iter().map(|e| &e.from).collect();
            let backward = reachable(workflow, &ends, true, name);
            if let Some(shape) = loops.get_mut(name) {
                shape.body = forward.intersection(&backward).cloned().collect();
            }
        }
        Self {
            workflow,
            sources,
            loops,
        }
    }

    /// The workflow read.
    pub fn workflow(&self) -> &'w Workflow {
        self.workflow
    }

    /// The declared join strategy of a node: `await:` (or a legacy `join`
    /// node's `strategy:`), `None` when it declares none.
    pub fn declared_await(&self, node: &NodeId) -> Option<AwaitMode> {
        let n = self.workflow.nodes.get(node)?;
        let key = if n.kind == NodeKind::Join {
            "strategy"
        } else {
            "await"
        };
        match n.properties.get(key).and_then(Value::as_str) {
            Some("wait_all") => Some(AwaitMode::WaitAll),
            Some("best_effort") => Some(AwaitMode::BestEffort),
            // A legacy join without a strategy waits for everything.
            _ if n.kind == NodeKind::Join => Some(AwaitMode::WaitAll),
            _ => None,
        }
    }

    /// The strategy a join applies: its declaration, else `wait_all`
    /// (upstream's default).
    pub fn await_mode(&self, node: &NodeId) -> AwaitMode {
        self.declared_await(node).unwrap_or(AwaitMode::WaitAll)
    }

    /// Whether branches may meet at `node`: it declares `await:` or has
    /// edges from two or more distinct nodes.
    pub fn is_convergence(&self, node: &NodeId) -> bool {
        self.declared_await(node).is_some() || self.sources.get(node).is_some_and(|s| s.len() > 1)
    }

    /// Where the branches starting at `starts` (forked at `router`) meet
    /// again: among the convergence nodes reachable from at least two of
    /// them (or from the one), the one the most branches reach, then the
    /// nearest (smallest longest distance), then the first by name.
    /// `None` when they never meet (each runs to `done`).
    ///
    /// Upstream takes the first convergence node of a breadth-first walk
    /// from the first branch, which stops a nested fan-out's branches at
    /// the inner join instead of the outer one; requiring the node to be
    /// reached from several branches fixes that without changing the
    /// simple shapes.
    pub fn convergence(&self, router: &NodeId, starts: &[&NodeId]) -> Option<NodeId> {
        let mut reach: BTreeMap<&NodeId, Vec<usize>> = BTreeMap::new();
        for start in starts {
            for (node, dist) in distances(self.workflow, start, router) {
                reach.entry(node).or_default().push(dist);
            }
        }
        let needed = starts.len().min(2);
        reach
            .into_iter()
            .filter(|(n, d)| d.len() >= needed && *n != router && self.is_convergence(n))
            .map(|(n, d)| {
                let longest = d.iter().copied().max().unwrap_or(0);
                let total: usize = d.iter().sum();
                (std::cmp::Reverse(d.len()), longest, total, n)
            })
            .min()
            .map(|(_, _, _, n)| n.clone())
    }

    /// Loops whose counter restarts when `edge` is taken: a plain edge
    /// into a loop's entry from outside its body begins a fresh instance
    /// of the loop (upstream `selectEdgeRS`).
    pub fn loop_resets(&self, edge: &Edge) -> Vec<&'w str> {
        let Target::Node(to) = &edge.to else {
            return Vec::new();
        };
        if edge.loop_bound.is_some() {
            return Vec::new();
        }
        self.loops
            .iter()
            .filter(|(_, shape)| shape.entries.contains(to) && !shape.body.contains(&edge.from))
            .map(|(name, _)| *name)
            .collect()
    }

    /// Every declared `as NAME(N)` loop with its bound.
    pub fn loop_maxima(&self) -> impl Iterator<Item = (&'w str, u32)> + '_ {
        let workflow = self.workflow;
        self.loops.keys().filter_map(move |name| {
            workflow
                .edges
                .iter()
                .find_map(|e| e.loop_bound.as_ref().filter(|b| b.name == *name))
                .map(|b| (*name, b.max))
        })
    }

    /// The shape of a loop, when the workflow declares it.
    pub fn loop_shape(&self, name: &str) -> Option<&LoopShape> {
        self.loops.get(name)
    }

    /// `budget: max_parallel_branches` (a positive integer), when set.
    pub fn max_parallel_branches(&self) -> Option<usize> {
        self.workflow
            .budget
            .get("max_parallel_branches")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
    }

    /// The branch starts among `starts` whose nodes, up to `join`, may
    /// write the workspace (upstream's workspace safety: at most one such
    /// branch may run in parallel with others).
    pub fn mutating_branches(&self, starts: &[&NodeId], join: Option<&NodeId>) -> Vec<NodeId> {
        starts
            .iter()
            .filter(|s| self.branch_mutates(s, join))
            .map(|s| (*s).clone())
            .collect()
    }

    fn branch_mutates(&self, start: &NodeId, join: Option<&NodeId>) -> bool {
        let mut seen: BTreeSet<&NodeId> = BTreeSet::new();
        let mut queue = VecDeque::from([start]);
        while let Some(id) = queue.pop_front() {
            if !seen.insert(id) || Some(id) == join {
                continue;
            }
            let Some(node) = self.workflow.nodes.get(id) else {
                continue;
            };
            if node.kind == NodeKind::Fail {
                continue;
            }
            if is_mutating(node) {
                return true;
            }
            for e in self.workflow.edges_from(id) {
                if let Target::Node(t) = &e.to {
                    queue.push_back(t);
                }
            }
        }
        false
    }
}

/// Whether a node may write the workspace. A tool node does unless it
/// says `parallel_safe: true`; an agent or judge does when it has a tool
/// outside the read-only set, unless it says `readonly: true`.
pub fn is_mutating(node: &Node) -> bool {
    let flag = |k: &str| node.properties.get(k).and_then(Value::as_bool) == Some(true);
    match node.kind {
        NodeKind::Tool => !flag("parallel_safe"),
        NodeKind::Agent | NodeKind::Judge => {
            !flag("readonly")
                && node
                    .properties
                    .get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|tools| {
                        tools
                            .iter()
                            .any(|t| t.as_str().is_none_or(|t| !READ_ONLY_TOOLS.contains(&t)))
                    })
        }
        _ => false,
    }
}

/// Nodes reachable from `starts` (included), along edges or against them,
/// never through another loop's back-edge (an outer loop's cycle is not
/// part of an inner loop's body).
fn reachable(
    workflow: &Workflow,
    starts: &[&NodeId],
    reverse: bool,
    own_loop: &str,
) -> BTreeSet<NodeId> {
    let mut seen: BTreeSet<NodeId> = BTreeSet::new();
    let mut queue: VecDeque<NodeId> = starts.iter().map(|s| (*s).clone()).collect();
    while let Some(n) = queue.pop_front() {
        if !seen.insert(n.clone()) {
            continue;
        }
        for e in &workflow.edges {
            let Target::Node(t) = &e.to else { continue };
            if e.loop_bound.as_ref().is_some_and(|b| b.name != own_loop) {
                continue;
            }
            let next = match (reverse, e.from == n, t == &n) {
                (false, true, _) => t,
                (true, _, true) => &e.from,
                _ => continue,
            };
            if !seen.contains(next) {
                queue.push_back(next.clone());
            }
        }
    }
    seen
}

/// Breadth-first distances from `start`, never walking through `stop`.
fn distances<'w>(
    workflow: &'w Workflow,
    start: &'w NodeId,
    stop: &NodeId,
) -> BTreeMap<&'w NodeId, usize> {
    let mut dist: BTreeMap<&NodeId, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([(start, 0usize)]);
    while let Some((n, d)) = queue.pop_front() {
        if dist.contains_key(n) {
            continue;
        }
        dist.insert(n, d);
        if n == stop {
            continue;
        }
        for e in workflow.edges_from(n) {
            if let Target::Node(t) = &e.to
                && !dist.contains_key(t)
            {
                queue.push_back((t, d + 1));
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_dsl::ir::{LoopBound, Pos};

    fn node(id: &str, kind: NodeKind, props: &[(&str, Value)]) -> Node {
        Node {
            id: NodeId::new(id),
            kind,
            tool: None,
            router_mode: None,
            input: None,
            output: None,
            sandbox: None,
            properties: props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            mcp_servers: Vec::new(),
            pos: Pos::default(),
        }
    }

    fn tool(id: &str) -> Node {
        node(id, NodeKind::Tool, &[])
    }

    fn edge(from: &str, to: &str) -> Edge {
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

    fn looped(from: &str, to: &str, name: &str) -> Edge {
        let mut e = edge(from, to);
        e.loop_bound = Some(LoopBound {
            name: name.into(),
            max: 3,
            unbounded: false,
        });
        e
    }

    fn wf(nodes: Vec<Node>, edges: Vec<Edge>) -> Workflow {
        Workflow {
            name: "w".into(),
            entry: nodes[0].id.clone(),
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
            mcp_servers: Default::default(),
            attachments: Default::default(),
            presets: Default::default(),
            pos: Pos::default(),
        }
    }

    fn id(s: &str) -> NodeId {
        NodeId::new(s)
    }

    #[test]
    fn two_branches_meet_at_their_common_node() {
        // upstream TestFindConvergencePoint_TwoBranchesMeetAtNode
        let w = wf(
            vec![
                node("r", NodeKind::Router, &[]),
                tool("a"),
                tool("b"),
                tool("j"),
            ],
            vec![
                edge("r", "a"),
                edge("r", "b"),
                edge("a", "j"),
                edge("b", "j"),
                edge("j", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        assert_eq!(
            g.convergence(&id("r"), &[&id("a"), &id("b")]),
            Some(id("j"))
        );
    }

    #[test]
    fn branches_going_to_done_never_meet() {
        let w = wf(
            vec![node("r", NodeKind::Router, &[]), tool("a"), tool("b")],
            vec![
                edge("r", "a"),
                edge("r", "b"),
                edge("a", "done"),
                edge("b", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        assert_eq!(g.convergence(&id("r"), &[&id("a"), &id("b")]), None);
    }

    #[test]
    fn an_inner_join_is_not_the_outer_join() {
        // r -> a -> r2 -> {a1, a2} -> j2 -> j ; r -> b -> j
        let w = wf(
            vec![
                node("r", NodeKind::Router, &[]),
                tool("a"),
                node("r2", NodeKind::Router, &[]),
                tool("a1"),
                tool("a2"),
                tool("j2"),
                tool("b"),
                tool("j"),
            ],
            vec![
                edge("r", "a"),
                edge("r", "b"),
                edge("a", "r2"),
                edge("r2", "a1"),
                edge("r2", "a2"),
                edge("a1", "j2"),
                edge("a2", "j2"),
                edge("j2", "j"),
                edge("b", "j"),
                edge("j", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        assert_eq!(
            g.convergence(&id("r"), &[&id("a"), &id("b")]),
            Some(id("j"))
        );
        assert_eq!(
            g.convergence(&id("r2"), &[&id("a1"), &id("a2")]),
            Some(id("j2"))
        );
    }

    #[test]
    fn a_declared_await_is_a_join_even_with_one_source() {
        let w = wf(
            vec![
                tool("s"),
                tool("work"),
                node("gather", NodeKind::Tool, &[("await", "wait_all".into())]),
            ],
            vec![
                edge("s", "work"),
                edge("work", "gather"),
                edge("gather", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        assert_eq!(g.convergence(&id("s"), &[&id("work")]), Some(id("gather")));
        assert_eq!(g.await_mode(&id("gather")), AwaitMode::WaitAll);
        assert_eq!(g.declared_await(&id("work")), None);
    }

    #[test]
    fn an_outer_loop_back_to_the_router_keeps_the_nearest_join() {
        let w = wf(
            vec![
                node("r", NodeKind::Router, &[]),
                tool("a"),
                tool("b"),
                tool("j"),
                tool("check"),
            ],
            vec![
                edge("r", "a"),
                edge("r", "b"),
                edge("a", "j"),
                edge("b", "j"),
                edge("j", "check"),
                looped("check", "r", "again"),
                edge("check", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        assert_eq!(
            g.convergence(&id("r"), &[&id("a"), &id("b")]),
            Some(id("j"))
        );
    }

    #[test]
    fn loop_bodies_and_resets() {
        // entry -> fix -> verify -(loop)-> fix ; verify -> outer -(loop2)-> entry
        let w = wf(
            vec![tool("entry"), tool("fix"), tool("verify"), tool("outer")],
            vec![
                edge("entry", "fix"),
                edge("fix", "verify"),
                looped("verify", "fix", "retry"),
                edge("verify", "outer"),
                looped("outer", "entry", "again"),
            ],
        );
        let g = GraphInfo::new(&w);
        let retry = g.loop_shape("retry").unwrap();
        assert_eq!(retry.entries, BTreeSet::from([id("fix")]));
        assert_eq!(retry.body, BTreeSet::from([id("fix"), id("verify")]));
        let again = g.loop_shape("again").unwrap();
        assert_eq!(again.body.len(), 4);
        // entry -> fix enters `retry` from outside its body: reset.
        assert_eq!(g.loop_resets(&w.edges[0]), ["retry"]);
        // fix -> verify stays inside; the back-edge itself never resets.
        assert!(g.loop_resets(&w.edges[1]).is_empty());
        assert!(g.loop_resets(&w.edges[2]).is_empty());
    }

    #[test]
    fn mutation_rules() {
        // upstream fan_out_internal_test: tools mutate, readonly agents and
        // agents with read-only tools do not.
        assert!(is_mutating(&tool("t")));
        assert!(!is_mutating(&node(
            "t",
            NodeKind::Tool,
            &[("parallel_safe", true.into())]
        )));
        let agent = |tools: Value, ro: bool| {
            node(
                "a",
                NodeKind::Agent,
                &[("tools", tools), ("readonly", ro.into())],
            )
        };
        assert!(is_mutating(&agent(serde_json::json!(["bash"]), false)));
        assert!(!is_mutating(&agent(serde_json::json!(["bash"]), true)));
        assert!(!is_mutating(&agent(
            serde_json::json!(["read_file", "grep"]),
            false
        )));
        assert!(!is_mutating(&node("a", NodeKind::Agent, &[])));
        let mut judge = agent(serde_json::json!(["write_file"]), false);
        judge.kind = NodeKind::Judge;
        assert!(is_mutating(&judge));
        assert!(!is_mutating(&node("r", NodeKind::Router, &[])));
    }

    #[test]
    fn workspace_safety_looks_past_intermediate_joins() {
        // upstream TestBranchContainsMutation_DetectsMutationBetween…
        let w = wf(
            vec![
                node("r", NodeKind::Router, &[]),
                node("a", NodeKind::Agent, &[]),
                node("ja", NodeKind::Agent, &[("await", "wait_all".into())]),
                tool("muta"),
                node("b", NodeKind::Agent, &[]),
                node("g", NodeKind::Agent, &[("await", "wait_all".into())]),
            ],
            vec![
                edge("r", "a"),
                edge("r", "b"),
                edge("a", "ja"),
                edge("ja", "muta"),
                edge("muta", "g"),
                edge("b", "g"),
                edge("g", "done"),
            ],
        );
        let g = GraphInfo::new(&w);
        let join = g.convergence(&id("r"), &[&id("a"), &id("b")]);
        assert_eq!(join, Some(id("g")));
        assert_eq!(
            g.mutating_branches(&[&id("a"), &id("b")], join.as_ref()),
            [id("a")]
        );
    }
}
