//! The workflow graph as an SVG, laid out on the server from the compiled
//! workflow (`iterion_dsl::ir`), its nodes coloured by the state the run's
//! events give them.
//!
//! The layout is a plain layered (Sugiyama-style) one, written here
//! because no maintained Rust crate lays out and renders a small graph to
//! SVG without a C dependency (graphviz) or a JavaScript runtime: back
//! edges are found by a depth-first walk from the entry (so loops do not
//! make layers), each node sits on the layer of its longest path from the
//! entry, and a few barycentre sweeps order each layer to cut crossings.
//! Everything is a function of the workflow's own order (nodes by id,
//! edges in source order), so the same workflow always draws the same
//! picture. Every label is escaped ([`crate::escape`]).
//!
//! It owns the layout and the drawing; which state a node is in is
//! [`node_states`]'s, from the events' envelope only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use iterion_core::EventRecord;
use iterion_dsl::ir::{self, Condition, Target};
use serde::Serialize;

use crate::escape::{attr, clip, text};

/// What the events say about one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Not reached (yet).
    Pending,
    /// Started, not ended.
    Running,
    /// Its last execution finished.
    Finished,
    /// Its last execution failed.
    Failed,
    /// Waiting on a human's answers.
    Paused,
}

impl NodeState {
    /// The snake_case spelling (the CSS class suffix).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::Paused => "paused",
        }
    }

    /// Fill and stroke, as presentation attributes so the SVG reads right
    /// on its own (`/api/runs/ID/graph.svg`); the page's stylesheet wins
    /// over them when the state changes live.
    fn colours(self) -> (&'static str, &'static str) {
        match self {
            Self::Pending => ("#f4f5f7", "#9aa3ad"),
            Self::Running => ("#dbeafe", "#2563eb"),
            Self::Finished => ("#dcfce7", "#16a34a"),
            Self::Failed => ("#fee2e2", "#dc2626"),
            Self::Paused => ("#fef9c3", "#ca8a04"),
        }
    }
}

/// The node an event moves, and where to: `node_started` runs it,
/// `node_finished`/`node_failed` end it, `human_input_requested` pauses it.
pub fn node_transition(e: &EventRecord) -> Option<(&str, NodeState)> {
    let node = e.node_id.as_ref()?.as_str();
    let state = match e.kind.as_str() {
        "node_started" => NodeState::Running,
        "node_finished" => NodeState::Finished,
        "node_failed" => NodeState::Failed,
        "human_input_requested" => NodeState::Paused,
        _ => return None,
    };
    Some((node, state))
}

/// Every node's latest state after `events`.
pub fn node_states<'e>(
    events: impl IntoIterator<Item = &'e EventRecord>,
) -> BTreeMap<String, NodeState> {
    let mut states = BTreeMap::new();
    for e in events {
        if let Some((node, state)) = node_transition(e) {
            states.insert(node.to_owned(), state);
        }
    }
    states
}

const NODE_W: i64 = 176;
const NODE_H: i64 = 48;
const GAP_X: i64 = 36;
const GAP_Y: i64 = 64;
const MARGIN: i64 = 24;
const LOOP_LANE: i64 = 22;

#[derive(Debug)]
enum VertexKind<'w> {
    Node(&'w ir::Node),
    Done,
    Fail,
}

#[derive(Debug)]
struct Vertex<'w> {
    id: String,
    kind: VertexKind<'w>,
}

#[derive(Debug)]
struct GraphEdge {
    from: usize,
    to: usize,
    label: Option<String>,
    back: bool,
}

/// A laid-out workflow, ready to draw.
#[derive(Debug)]
pub struct Layout<'w> {
    vertices: Vec<Vertex<'w>>,
    edges: Vec<GraphEdge>,
    /// (layer, position in layer) per vertex.
    place: Vec<(usize, usize)>,
    layers: Vec<Vec<usize>>,
}

/// Lay `workflow` out.
pub fn layout(workflow: &ir::Workflow) -> Layout<'_> {
    let mut vertices: Vec<Vertex<'_>> = workflow
        .nodes
        .values()
        .map(|n| Vertex {
            id: n.id.to_string(),
            kind: VertexKind::Node(n),
        })
        .collect();
    let index: BTreeMap<&str, usize> = workflow
        .nodes
        .keys()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    fn terminal<'w>(kind: VertexKind<'w>, id: &str, vertices: &mut Vec<Vertex<'w>>) -> usize {
        vertices.push(Vertex {
            id: id.to_owned(),
            kind,
        });
        vertices.len() - 1
    }
    let (mut done, mut fail) = (None, None);
    let mut edges = Vec::new();
    for e in &workflow.edges {
        let Some(&from) = index.get(e.from.as_str()) else {
            continue;
        };
        let to = match &e.to {
            Target::Node(n) => match index.get(n.as_str()) {
                Some(&i) => i,
                None => continue,
            },
            Target::Done => {
                *done.get_or_insert_with(|| terminal(VertexKind::Done, "done", &mut vertices))
            }
            Target::Fail => {
                *fail.get_or_insert_with(|| terminal(VertexKind::Fail, "fail", &mut vertices))
            }
        };
        edges.push(GraphEdge {
            from,
            to,
            label: edge_label(e),
            back: false,
        });
    }
    let entry = index.get(workflow.entry.as_str()).copied().unwrap_or(0);
    let order = mark_back_edges(vertices.len(), entry, &mut edges);
    let layer = layers_of(vertices.len(), &order, &edges);
    let depth = layer.iter().max().map_or(0, |m| m + 1);
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); depth];
    // First placement: the walk's order (reverse post-order), so a chain
    // reads in the order it runs.
    for &v in &order {
        layers[layer[v]].push(v);
    }
    let mut place = vec![(0, 0); vertices.len()];
    let refresh = |layers: &Vec<Vec<usize>>, place: &mut Vec<(usize, usize)>| {
        for (l, row) in layers.iter().enumerate() {
            for (p, &v) in row.iter().enumerate() {
                place[v] = (l, p);
            }
        }
    };
    refresh(&layers, &mut place);
    for sweep in 0..4 {
        let downward = sweep % 2 == 0;
        for row in layers.iter_mut() {
            let mut keyed: Vec<(f64, usize, usize)> = row
                .iter()
                .map(|&v| {
                    let neighbours: Vec<f64> = edges
                        .iter()
                        .filter(|e| !e.back)
                        .filter_map(|e| match downward {
                            true if e.to == v => Some(place[e.from].1 as f64),
                            false if e.from == v => Some(place[e.to].1 as f64),
                            _ => None,
                        })
                        .collect();
                    let bary = if neighbours.is_empty() {
                        place[v].1 as f64
                    } else {
                        neighbours.iter().sum::<f64>() / neighbours.len() as f64
                    };
                    (bary, place[v].1, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            *row = keyed.into_iter().map(|(_, _, v)| v).collect();
        }
        refresh(&layers, &mut place);
    }
    Layout {
        vertices,
        edges,
        place,
        layers,
    }
}

/// A depth-first walk from `entry` (then from every vertex it did not
/// reach, in order), marking each edge that closes a cycle; returns the
/// reverse post-order, a topological order of the remaining edges. An
/// explicit stack: a generated workflow may be deep.
fn mark_back_edges(n: usize, entry: usize, edges: &mut [GraphEdge]) -> Vec<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let mut out_edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in edges.iter().enumerate() {
        out_edges[e.from].push(i);
    }
    let mut mark = vec![Mark::New; n];
    let mut post = Vec::with_capacity(n);
    let roots = std::iter::once(entry).chain(0..n);
    for root in roots {
        if n == 0 || mark[root] != Mark::New {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        mark[root] = Mark::OnStack;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&ei) = out_edges[v].get(*next) {
                *next += 1;
                let to = edges[ei].to;
                match mark[to] {
                    Mark::New => {
                        mark[to] = Mark::OnStack;
                        stack.push((to, 0));
                    }
                    Mark::OnStack => edges[ei].back = true,
                    Mark::Done => {}
                }
            } else {
                mark[v] = Mark::Done;
                post.push(v);
                stack.pop();
            }
        }
    }
    post.reverse();
    post
}

/// Longest-path layer of each vertex over the forward edges, in
/// topological `order`.
fn layers_of(n: usize, order: &[usize], edges: &[GraphEdge]) -> Vec<usize> {
    let mut layer = vec![0usize; n];
    for &v in order {
        for e in edges.iter().filter(|e| !e.back && e.from == v) {
            layer[e.to] = layer[e.to].max(layer[v] + 1);
        }
    }
    layer
}

fn edge_label(e: &ir::Edge) -> Option<String> {
    let mut parts = Vec::new();
    match &e.condition {
        Some(Condition::Field { field, negated }) => parts.push(if *negated {
            format!("when not {field}")
        } else {
            format!("when {field}")
        }),
        Some(Condition::Expr(x)) => parts.push(format!("when {}", clip(x, 24))),
        None if e.is_else => parts.push("else".to_owned()),
        None => {}
    }
    if let Some(l) = &e.loop_bound {
        parts.push(if l.unbounded {
            format!("as {}(unbounded)", l.name)
        } else {
            format!("as {}({})", l.name, l.max)
        });
    }
    if let Some(f) = &e.foreach {
        parts.push(format!("foreach {}", f.name));
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// Where a terminal vertex stands: `done` is reached when the run
/// finished, `fail` when the workflow routed there.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Terminals {
    /// The run finished.
    pub done: bool,
    /// The run failed through a `fail` edge.
    pub fail: bool,
}

impl Layout<'_> {
    /// The SVG document, nodes coloured by `states`.
    pub fn svg(&self, states: &BTreeMap<String, NodeState>, terminals: Terminals) -> String {
        let widest = self.layers.iter().map(Vec::len).max().unwrap_or(0) as i64;
        let loops = self.edges.iter().filter(|e| e.back).count() as i64;
        let body_w = (widest * (NODE_W + GAP_X) - GAP_X).max(NODE_W);
        let width = MARGIN * 2 + body_w + if loops > 0 { 24 + loops * LOOP_LANE } else { 0 };
        let height = MARGIN * 2 + (self.layers.len() as i64 * (NODE_H + GAP_Y) - GAP_Y).max(NODE_H);
        let pos = |v: usize| -> (i64, i64) {
            let (l, p) = self.place[v];
            let row = self.layers[l].len() as i64;
            let row_w = row * (NODE_W + GAP_X) - GAP_X;
            let x0 = MARGIN + (body_w - row_w) / 2;
            (
                x0 + p as i64 * (NODE_W + GAP_X),
                MARGIN + l as i64 * (NODE_H + GAP_Y),
            )
        };
        let mut s = String::new();
        let _ = write!(
            s,
            r##"<svg xmlns="http://www.w3.org/2000/svg" class="graph" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="workflow graph"><defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#64748b"/></marker></defs><g class="edges">"##
        );
        let mut lane = 0i64;
        for e in &self.edges {
            let (fx, fy) = pos(e.from);
            let (tx, ty) = pos(e.to);
            let (d, lx, ly) = if e.back {
                lane += 1;
                let x1 = fx + NODE_W;
                let y1 = fy + NODE_H / 2;
                let x2 = tx + NODE_W;
                let y2 = ty + NODE_H / 2;
                let out = MARGIN + body_w + 12 + lane * LOOP_LANE;
                (
                    format!("M{x1},{y1} C{out},{y1} {out},{y2} {x2},{y2}"),
                    out - 4,
                    (y1 + y2) / 2,
                )
            } else {
                let x1 = fx + NODE_W / 2;
                let y1 = fy + NODE_H;
                let x2 = tx + NODE_W / 2;
                let y2 = ty;
                let dy = ((y2 - y1) / 2).max(16);
                (
                    format!("M{x1},{y1} C{x1},{} {x2},{} {x2},{y2}", y1 + dy, y2 - dy),
                    (x1 + x2) / 2,
                    (y1 + y2) / 2 + 4,
                )
            };
            let class = if e.back { "edge back" } else { "edge" };
            let dash = if e.back {
                r#" stroke-dasharray="5 4""#
            } else {
                ""
            };
            let _ = write!(
                s,
                r##"<path class="{class}" d="{d}" fill="none" stroke="#64748b" stroke-width="1.4"{dash} marker-end="url(#arrow)"/>"##
            );
            if let Some(label) = &e.label {
                let _ = write!(
                    s,
                    r##"<text class="edge-label" x="{lx}" y="{ly}" text-anchor="middle" font-family="sans-serif" font-size="11" fill="#334155">{}</text>"##,
                    text(label)
                );
            }
        }
        s.push_str(r#"</g><g class="nodes">"#);
        for (v, vertex) in self.vertices.iter().enumerate() {
            let (x, y) = pos(v);
            let (kind, state, node_attr) = match vertex.kind {
                VertexKind::Node(n) => (
                    n.kind.as_str(),
                    states
                        .get(vertex.id.as_str())
                        .copied()
                        .unwrap_or(NodeState::Pending),
                    format!(r#" data-node="{}" tabindex="0""#, attr(&vertex.id)),
                ),
                VertexKind::Done => (
                    "end",
                    if terminals.done {
                        NodeState::Finished
                    } else {
                        NodeState::Pending
                    },
                    r#" data-terminal="done""#.to_owned(),
                ),
                VertexKind::Fail => (
                    "end",
                    if terminals.fail {
                        NodeState::Failed
                    } else {
                        NodeState::Pending
                    },
                    r#" data-terminal="fail""#.to_owned(),
                ),
            };
            let (fill, stroke) = state.colours();
            let rx = if matches!(vertex.kind, VertexKind::Node(_)) {
                8
            } else {
                NODE_H / 2
            };
            let cx = x + NODE_W / 2;
            let _ = write!(
                s,
                r##"<g class="node state-{st}"{node_attr}><title>{title}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="{rx}" fill="{fill}" stroke="{stroke}" stroke-width="1.6"/><text class="node-label" x="{cx}" y="{ly}" text-anchor="middle" font-family="sans-serif" font-size="13" fill="#0f172a">{label}</text><text class="node-kind" x="{cx}" y="{ky}" text-anchor="middle" font-family="sans-serif" font-size="10" fill="#475569">{kind} · <tspan class="node-state">{st}</tspan></text></g>"##,
                st = state.as_str(),
                title = text(&format!("{} ({kind})", vertex.id)),
                label = text(&clip(&vertex.id, 20)),
                ly = y + 21,
                ky = y + 37,
            );
        }
        s.push_str("</g></svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use iterion_core::{NodeId, RunId};
    use serde_json::json;

    use super::*;

    fn compile(src: &str) -> ir::Workflow {
        let c = iterion_dsl::compile_source(src, Path::new("t.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        c.workflows.into_iter().next().expect("a workflow")
    }

    const LOOPY: &str = r#"
schema v:
  ok: bool

tool build:
  command: "echo '{\"ok\": true}'"
  output: v

tool test:
  command: "echo '{\"ok\": true}'"
  output: v

tool ship:
  command: "echo shipped"

workflow ci:
  entry: build
  build -> test
  test -> ship when ok
  test -> build when not ok as retry(3)
  ship -> done
"#;

    #[test]
    fn layers_follow_the_run_and_loops_go_back() {
        let wf = compile(LOOPY);
        let l = layout(&wf);
        let layer_of = |id: &str| {
            let v = l.vertices.iter().position(|v| v.id == id).expect(id);
            l.place[v].0
        };
        assert_eq!(layer_of("build"), 0);
        assert_eq!(layer_of("test"), 1);
        assert_eq!(layer_of("ship"), 2);
        assert_eq!(layer_of("done"), 3);
        assert_eq!(l.edges.iter().filter(|e| e.back).count(), 1);
        let back = l.edges.iter().find(|e| e.back).expect("the retry edge");
        assert_eq!(back.label.as_deref(), Some("when not ok · as retry(3)"));
    }

    #[test]
    fn the_drawing_is_deterministic_and_coloured_by_state() {
        let wf = compile(LOOPY);
        let mut states = BTreeMap::new();
        states.insert("build".to_owned(), NodeState::Finished);
        states.insert("test".to_owned(), NodeState::Failed);
        let a = layout(&wf).svg(&states, Terminals::default());
        let b = layout(&wf).svg(&states, Terminals::default());
        assert_eq!(a, b);
        assert!(
            a.contains(r#"class="node state-finished" data-node="build""#),
            "{a}"
        );
        assert!(
            a.contains(r#"class="node state-failed" data-node="test""#),
            "{a}"
        );
        assert!(
            a.contains(r#"class="node state-pending" data-node="ship""#),
            "{a}"
        );
        assert!(a.contains("stroke-dasharray"), "the loop is dashed");
    }

    #[test]
    fn states_come_from_the_last_event_of_each_node() {
        let run = RunId::parse("r1").expect("id");
        let ev = |seq, kind: &str, node: &str| EventRecord {
            seq,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: kind.into(),
            run_id: run.clone(),
            node_id: Some(NodeId::new(node)),
            data: json!({}),
        };
        let events = [
            ev(1, "node_started", "a"),
            ev(2, "node_failed", "a"),
            ev(3, "node_started", "a"),
            ev(4, "node_finished", "a"),
            ev(5, "node_started", "b"),
            ev(6, "network_blocked", "b"),
        ];
        let s = node_states(&events);
        assert_eq!(s["a"], NodeState::Finished);
        assert_eq!(s["b"], NodeState::Running);
    }

    #[test]
    fn labels_are_escaped() {
        let mut wf = compile(LOOPY);
        let mut node = wf.nodes.remove(&NodeId::new("ship")).expect("ship");
        let evil = NodeId::new("<img src=x onerror=alert(1)>");
        node.id = evil.clone();
        wf.nodes.insert(evil.clone(), node);
        for e in &mut wf.edges {
            if e.from.as_str() == "ship" {
                e.from = evil.clone();
            }
            if e.to == Target::Node(NodeId::new("ship")) {
                e.to = Target::Node(evil.clone());
            }
        }
        let svg = layout(&wf).svg(&BTreeMap::new(), Terminals::default());
        assert!(!svg.contains("<img"), "{svg}");
        assert!(svg.contains("&lt;img src=x onerror=alert(1)&gt;"), "{svg}");
    }
}
