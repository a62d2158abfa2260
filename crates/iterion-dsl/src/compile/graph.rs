//! Checks over the built graph: per-source routing (C010–C012, C015,
//! C123, C124), reachability (C016) and undeclared cycles (C019). Reads IR
//! only; never sees source lines.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use iterion_core::NodeId;

use crate::diag::{Severity, codes};
use crate::ir::{Condition, Edge, Node, NodeKind, Target};

use super::ctx::Ctx;

pub(crate) fn graph_checks(
    nodes: &BTreeMap<NodeId, Node>,
    edges: &[Edge],
    entry: Option<&NodeId>,
    ctx: &mut Ctx<'_>,
) {
    // per-source checks
    let mut by_src: HashMap<&NodeId, Vec<&Edge>> = HashMap::new();
    for e in edges {
        by_src.entry(&e.from).or_default().push(e);
    }
    for (src, out) in &by_src {
        let Some(node) = nodes.get(*src) else {
            continue;
        };
        let is_router = node.kind == NodeKind::Router;
        let router_conditional = node.router_mode.as_deref() == Some("condition");
        let uncond: Vec<&&Edge> = out
            .iter()
            .filter(|e| e.condition.is_none() && !e.is_else && e.loop_bound.is_none())
            .collect();
        let elses: Vec<&&Edge> = out.iter().filter(|e| e.is_else).collect();
        let conds: Vec<&&Edge> = out.iter().filter(|e| e.condition.is_some()).collect();
        if !is_router && uncond.len() > 1 {
            ctx.push(codes::C010, Severity::Error, uncond[1].pos, format!("node `{src}` has more than one unconditional outgoing edge"), Some("keep only one default edge (plus a loop back-edge and its exhaustion exit), or use a router for fan-out"));
        }
        if elses.len() > 1 {
            ctx.error(
                codes::C123,
                elses[1].pos,
                format!("node `{src}` has more than one `else` edge"),
            );
        }
        if !elses.is_empty() && conds.is_empty() {
            ctx.error(
                codes::C015,
                elses[0].pos,
                format!("`else` edge from `{src}` has no conditional sibling"),
            );
        }
        if !elses.is_empty() && !uncond.is_empty() {
            ctx.error(
                codes::C124,
                elses[0].pos,
                format!("node `{src}` has both an `else` edge and an unconditional edge"),
            );
        }
        // duplicates
        let mut seen_fields: HashSet<(String, bool)> = HashSet::new();
        for e in &conds {
            if let Some(Condition::Field { field, negated }) = &e.condition
                && !seen_fields.insert((field.clone(), *negated))
            {
                ctx.error(
                    codes::C011,
                    e.pos,
                    format!(
                        "condition `{}{field}` appears twice on edges from `{src}`",
                        if *negated { "not " } else { "" }
                    ),
                );
            }
        }
        if !conds.is_empty() && (!is_router || router_conditional) {
            let has_fallback = out.iter().any(|e| e.condition.is_none());
            let exhaustive = seen_fields
                .iter()
                .any(|(f, n)| seen_fields.contains(&(f.clone(), !n)));
            if !has_fallback && !exhaustive {
                ctx.push(
                    codes::C012,
                    Severity::Error,
                    conds[0].pos,
                    format!(
                        "conditional edges from `{src}` are not exhaustive and have no fallback"
                    ),
                    Some("add `when not X` to complement `when X`, or add an unconditional edge"),
                );
            }
        }
    }

    // reachability (C016)
    if let Some(entry) = entry {
        let mut adj: HashMap<&NodeId, Vec<&NodeId>> = HashMap::new();
        for e in edges {
            if let Target::Node(t) = &e.to {
                adj.entry(&e.from).or_default().push(t);
            }
        }
        let mut seen: HashSet<&NodeId> = HashSet::new();
        let mut q = VecDeque::from([entry]);
        seen.insert(entry);
        while let Some(n) = q.pop_front() {
            for t in adj.get(n).into_iter().flatten() {
                if seen.insert(t) {
                    q.push_back(t);
                }
            }
        }
        for (id, n) in nodes {
            if !seen.contains(id) {
                ctx.push(
                    codes::C016,
                    Severity::Error,
                    n.pos,
                    format!("node `{id}` is unreachable from entry `{entry}`"),
                    Some("add edges to reach the node, or remove the unused declaration"),
                );
            }
        }
    }

    undeclared_cycles(nodes, edges, entry, ctx);
    router_rules(nodes, edges, ctx);
    compute_rules(nodes, ctx);
    session_rules(nodes, ctx);
}

/// A declared convergence point (`await:`) cannot continue a branch's
/// session (`inherit`, `inherit_if_available`, `fork`): which branch's?
/// Upstream C009.
fn session_rules(nodes: &BTreeMap<NodeId, Node>, ctx: &mut Ctx<'_>) {
    for (id, n) in nodes {
        let text = |k: &str| n.properties.get(k).and_then(serde_json::Value::as_str);
        if let (Some(await_mode), Some(session @ ("inherit" | "inherit_if_available" | "fork"))) =
            (text("await"), text("session"))
        {
            ctx.error(
                codes::C009,
                n.pos,
                format!("node `{id}` has `session: {session}` but `await: {await_mode}` makes it a convergence point; only fresh or artifacts_only sessions are allowed there"),
            );
        }
    }
}

/// Upstream's router rules: a `round_robin` router alternates between at
/// least two unconditional edges (C020); an `llm` router picks among at
/// least two edges (C021) that carry no `when` field (C022); the LLM
/// properties mean nothing on any other router (C023).
fn router_rules(nodes: &BTreeMap<NodeId, Node>, edges: &[Edge], ctx: &mut Ctx<'_>) {
    for (id, n) in nodes {
        if n.kind != NodeKind::Router {
            continue;
        }
        let out: Vec<&Edge> = edges.iter().filter(|e| &e.from == id).collect();
        match n.router_mode.as_deref() {
            Some("round_robin") => {
                let plain = out.iter().filter(|e| e.condition.is_none()).count();
                if plain < 2 {
                    ctx.error(
                        codes::C020,
                        n.pos,
                        format!("round_robin router `{id}` has {plain} unconditional outgoing edge(s); alternation needs at least 2"),
                    );
                }
            }
            Some("llm") => {
                for e in &out {
                    if let Some(Condition::Field { .. }) = e.condition {
                        ctx.error(
                            codes::C022,
                            e.pos,
                            format!("llm router `{id}`: an edge carries a `when` condition; an llm router picks its targets itself"),
                        );
                    }
                }
                if out.len() < 2 {
                    ctx.error(
                        codes::C021,
                        n.pos,
                        format!("llm router `{id}` has {} outgoing edge(s); it needs at least 2 to choose from", out.len()),
                    );
                }
            }
            _ => {
                for key in [
                    "model",
                    "backend",
                    "system",
                    "user",
                    "reasoning_effort",
                    "multi",
                ] {
                    let set = match n.properties.get(key) {
                        None => false,
                        Some(serde_json::Value::Bool(b)) => *b,
                        Some(_) => true,
                    };
                    if set {
                        ctx.error(
                            codes::C023,
                            n.pos,
                            format!("router `{id}`: `{key}` only applies to `mode: llm`"),
                        );
                    }
                }
            }
        }
    }
}

/// A compute node needs at least one expression (C039), each in the
/// expression language (C040), as upstream.
fn compute_rules(nodes: &BTreeMap<NodeId, Node>, ctx: &mut Ctx<'_>) {
    for (id, n) in nodes {
        if n.kind != NodeKind::Compute {
            continue;
        }
        let exprs = match n.properties.get("expr") {
            Some(serde_json::Value::Object(m)) => m,
            _ => {
                ctx.error(
                    codes::C039,
                    n.pos,
                    format!(
                        "compute `{id}` has no `expr:` block; it needs at least one expression"
                    ),
                );
                continue;
            }
        };
        if exprs.is_empty() {
            ctx.error(
                codes::C039,
                n.pos,
                format!(
                    "compute `{id}` has an empty `expr:` block; it needs at least one expression"
                ),
            );
        }
        for (key, v) in exprs {
            let Some(text) = v.as_str() else { continue };
            if let Err(err) = crate::expr::Expr::parse(text) {
                ctx.error(
                    codes::C040,
                    n.pos,
                    format!("compute `{id}` field `{key}`: invalid expression: {err}"),
                );
            }
        }
    }
}

/// C019 exactly as upstream's rule: a depth-first walk over every edge
/// (loop edges included), from the entry first and then from each source
/// in the order edges are written, reports a back-edge only when neither
/// of its ends is an end of any loop-bearing edge (`as name(N)`, or our
/// `as foreach …`). So `a→b, b→a, b→b as L(3)` passes (b bears a loop) and
/// `a→b, b→c as L(3), c→d, d→a` fails (the back-edge d→a touches no loop
/// end), both as upstream judges them. Iterative: no recursion on depth.
fn undeclared_cycles(
    nodes: &BTreeMap<NodeId, Node>,
    edges: &[Edge],
    entry: Option<&NodeId>,
    ctx: &mut Ctx<'_>,
) {
    let mut loop_ends: HashSet<&NodeId> = HashSet::new();
    let mut adj: HashMap<&NodeId, Vec<(&NodeId, &Edge)>> = HashMap::new();
    let mut sources: Vec<&NodeId> = Vec::new();
    for e in edges {
        let Target::Node(to) = &e.to else { continue };
        if e.loop_bound.is_some() || e.foreach.is_some() {
            loop_ends.insert(&e.from);
            loop_ends.insert(to);
        }
        let out = adj.entry(&e.from).or_default();
        if out.is_empty() {
            sources.push(&e.from);
        }
        out.push((to, e));
    }
    // 0 unseen, 1 on the stack, 2 done
    let mut color: HashMap<&NodeId, u8> = HashMap::new();
    let mut reported: BTreeSet<(u32, u32)> = BTreeSet::new();
    let starts = entry
        .filter(|e| nodes.contains_key(*e))
        .into_iter()
        .chain(sources.iter().copied());
    for start in starts {
        if color.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut stack: Vec<(&NodeId, usize)> = vec![(start, 0)];
        color.insert(start, 1);
        while let Some((n, idx)) = stack.last_mut() {
            let succ = adj.get(*n).map_or(&[][..], Vec::as_slice);
            if *idx < succ.len() {
                let (t, e) = succ[*idx];
                *idx += 1;
                match color.get(t).copied().unwrap_or(0) {
                    0 => {
                        color.insert(t, 1);
                        stack.push((t, 0));
                    }
                    1 if !loop_ends.contains(&e.from)
                        && !loop_ends.contains(t)
                        && reported.insert((e.pos.line, e.pos.column)) =>
                    {
                        ctx.push(
                            codes::C019,
                            Severity::Error,
                            e.pos,
                            format!(
                                "edge `{} -> {t}` closes a cycle with no declared loop",
                                e.from
                            ),
                            Some("add `as loop_name(N)` to the back-edge to bound the cycle"),
                        );
                    }
                    _ => {}
                }
            } else {
                color.insert(n, 2);
                stack.pop();
            }
        }
    }
}
