//! Workflow assembly: the `workflow NAME:` block's own properties, IR nodes
//! and edges from the declarations, entry (C008), name resolution of edge
//! ends (C001), condition fields (C013/C014), the sandbox opt-out and gated
//! backend warnings (C128, C136), the bounds the runtime enforces (C321);
//! then hands the built graph to
//! [`super::graph`].

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::BTreeMap;

use iterion_core::NodeId;
use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::{
    Condition, Edge, FieldType, Node, NodeKind, Pos, Schema, SecretDecl, Target, ToolSpec, VarDecl,
    Workflow,
};
use crate::lexer::{STok, Tok};
use crate::parser::{Line, PValue};

use super::ctx::Ctx;
use super::decls::{NodeDecl, read_secrets, read_vars};
use super::edges::{EdgeLine, edge_positions, parse_edge};
use super::graph::graph_checks;
use super::props::{BUDGET, WORKFLOW, block_json};
use super::sandbox;

/// C321: a bound the runtime enforces must be a positive Go duration
/// (`iterion_core::duration`, the one parser of every iterion duration).
fn check_duration(ctx: &mut Ctx<'_>, pos: Pos, what: &str, v: &PValue) {
    let ok = v
        .text()
        .and_then(iterion_core::duration::parse_go_duration)
        .is_some_and(|d| !d.is_zero());
    if !ok {
        ctx.push(
            codes::C321,
            Severity::Error,
            pos,
            format!("{what} must be a positive duration"),
            Some("write it as a Go duration: \"90s\", \"10m\", \"1h30m\", \"250ms\""),
        );
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn compile_workflow(
    wline: &Line,
    nodes: &[NodeDecl<'_>],
    extra_edges: &[(String, &Line)],
    file_vars: &BTreeMap<String, VarDecl>,
    schemas: &BTreeMap<String, Schema>,
    file_secrets: &[SecretDecl],
    ctx: &mut Ctx<'_>,
) -> Option<Workflow> {
    let name = match wline.toks.get(1).map(|t| &t.tok) {
        Some(Tok::Word(n)) => n.clone(),
        _ => return None,
    };
    let wpos = wline.pos();
    let mut vars = file_vars.clone();
    let mut secrets = file_secrets.to_vec();
    let mut entry: Option<(String, Pos)> = None;
    let mut worktree = None;
    let mut budget = BTreeMap::new();
    let mut sandbox_decl = None;
    let mut edge_lines: Vec<EdgeLine> = Vec::new();
    let mut budget_iterations: Option<i64> = None;
    let mut properties: BTreeMap<String, Value> = BTreeMap::new();
    let mut seen: HashMap<String, Pos> = HashMap::new();

    for l in &wline.children {
        if l.toks.iter().any(|t| t.tok == Tok::Arrow) {
            if let Some(e) = parse_edge(l, None, ctx) {
                edge_lines.push(e);
            }
            continue;
        }
        let Some(p) = ctx.prop(l, Some(WORKFLOW), "workflow") else {
            continue;
        };
        if let Some(prev) = seen.insert(p.key.clone(), p.pos) {
            ctx.error(
                codes::E010,
                p.pos,
                format!(
                    "duplicate property `{}` (first at line {})",
                    p.key, prev.line
                ),
            );
            continue;
        }
        match p.key.as_str() {
            "vars" => read_vars(&l.children, ctx, &mut vars),
            "secrets" => read_secrets(&l.children, ctx, &mut secrets),
            "entry" => match p.value.as_ref().and_then(PValue::text) {
                Some(e) => entry = Some((e.to_string(), p.value_pos)),
                None => ctx.error(codes::E002, p.value_pos, "`entry` expects a node name"),
            },
            "worktree" => worktree = p.text().map(str::to_owned),
            "budget" => {
                for b in ctx.props(&l.children, Some(BUDGET), "budget") {
                    if let Some(v) = &b.value {
                        if b.key == "max_iterations" {
                            budget_iterations = v.int();
                        }
                        if b.key == "max_cost_usd"
                            && let Some(PValue::Word(w)) = &b.value
                            && w.parse::<f64>().is_ok_and(|f| f < 0.0 || !f.is_finite())
                        {
                            ctx.error(
                                "C046",
                                b.value_pos,
                                "budget.max_cost_usd must be a non-negative finite amount",
                            );
                        }
                        if b.key == "max_duration" {
                            check_duration(ctx, b.value_pos, "budget.max_duration", v);
                        }
                        budget.insert(b.key.clone(), v.to_json());
                    }
                }
            }
            "sandbox" => {
                sandbox_decl = sandbox::read(&p, ctx, true);
            }
            "mcp" => {
                let _ = ctx.props(&l.children, Some(super::mcp::MCP_CONFIG), "mcp");
                // Resolved against the declared servers by `mcp::resolve`.
                properties.insert(p.key.clone(), block_json(&l.children));
            }
            "attachments" | "resources" | "compaction" => {
                let _ = ctx.props(&l.children, None, &p.key);
            }
            _ => {
                if let Some(v) = &p.value {
                    properties.insert(p.key.clone(), v.to_json());
                }
            }
        }
    }
    for (prefix, l) in extra_edges {
        if let Some(e) = parse_edge(l, Some(prefix), ctx) {
            edge_lines.push(e);
        }
    }

    let wf_opts_out = sandbox_decl
        .as_ref()
        .is_some_and(|d: &crate::ir::SandboxDecl| d.spec.mode == iterion_core::Mode::None);
    if let Some(d) = &sandbox_decl
        && d.spec.mode == iterion_core::Mode::None
    {
        ctx.push(
            codes::C128,
            Severity::Warning,
            d.pos,
            format!("workflow `{name}` opts out of the sandbox: every command runs on the host with its credentials"),
            Some("remove `sandbox: none` to run sandboxed; keep the opt-out only if the flow needs the host"),
        );
    }

    // nodes
    let mut ir_nodes: BTreeMap<NodeId, Node> = BTreeMap::new();
    let mut out_schema: HashMap<&str, Option<&str>> = HashMap::new();
    for n in nodes {
        let mut properties = BTreeMap::new();
        let mut node_sandbox = None;
        for p in &n.props {
            if p.key == "sandbox" {
                node_sandbox = sandbox::read(p, ctx, false);
                if let Some(d) = &node_sandbox
                    && d.spec.mode == iterion_core::Mode::None
                {
                    let msg = if wf_opts_out {
                        format!(
                            "node `{}` declares `sandbox: none`; the workflow already opts out",
                            n.id
                        )
                    } else {
                        format!(
                            "node-level `sandbox: none` on `{}` is not honoured: every node shares the run's one sandbox",
                            n.id
                        )
                    };
                    ctx.push(codes::C128, Severity::Warning, d.pos, msg, Some("declare `sandbox: none` on the workflow to opt the whole run out, or remove the node-level block"));
                }
                continue;
            }
            let v = match &p.value {
                Some(v) => v.to_json(),
                None => block_json(&p.line.children),
            };
            properties.insert(p.key.clone(), v);
        }
        if n.kind == NodeKind::Tool
            && let Some(p) = n.get("timeout")
            && let Some(v) = &p.value
        {
            check_duration(ctx, p.value_pos, &format!("`{}` timeout", n.id), v);
        }
        let tool = if n.kind == NodeKind::Tool {
            if let Some(c) = n.text("command") {
                Some(ToolSpec::Command(c.to_string()))
            } else {
                n.text("script").map(|s| ToolSpec::Script {
                    script: s.to_string(),
                    language: n.text("language").unwrap_or("sh").to_string(),
                })
            }
        } else {
            None
        };
        let output = n
            .get("output")
            .and_then(|p| p.value.as_ref())
            .and_then(PValue::ident);
        out_schema.insert(n.id.as_str(), output);
        ir_nodes.insert(
            NodeId::new(n.id.clone()),
            Node {
                id: NodeId::new(n.id.clone()),
                kind: n.kind,
                tool,
                router_mode: if n.kind == NodeKind::Router {
                    Some(n.text("mode").unwrap_or("fan_out_all").to_string())
                } else {
                    None
                },
                input: n
                    .get("input")
                    .and_then(|p| p.value.as_ref())
                    .and_then(PValue::ident)
                    .map(str::to_owned),
                output: output.map(str::to_owned),
                sandbox: node_sandbox,
                properties,
                mcp_servers: Vec::new(),
                pos: n.pos,
            },
        );
    }

    // C136: permission-gated nodes that need a host-side run
    if !wf_opts_out {
        for n in nodes {
            let perm = n.text("permission");
            let has_ask_rules = n.get("ask").is_some();
            let node_out = ir_nodes
                .get(&NodeId::new(n.id.clone()))
                .and_then(|x| x.sandbox.as_ref())
                .is_some_and(|d| d.spec.mode == iterion_core::Mode::None);
            if node_out || !matches!(n.kind, NodeKind::Agent | NodeKind::Judge) {
                continue;
            }
            let mut backends: Vec<String> =
                n.text("backend").map(str::to_owned).into_iter().collect();
            if let Some(fb) = n.get("fallbacks") {
                for route in &fb.line.children {
                    for r in &route.children {
                        if let [
                            STok {
                                tok: Tok::Word(k), ..
                            },
                            STok {
                                tok: Tok::Colon, ..
                            },
                            STok {
                                tok: Tok::Str(b, _) | Tok::Word(b),
                                ..
                            },
                        ] = r.toks.as_slice()
                            && k == "backend"
                        {
                            backends.push(b.clone());
                        }
                    }
                }
            }
            let gated = matches!(perm, Some("ask" | "deny"));
            let ask_capable = perm == Some("ask") || has_ask_rules;
            for b in backends {
                let hit = (gated && (b == "grok" || b == "kimi")) || (ask_capable && b == "claw");
                if hit {
                    ctx.push(
                        codes::C136,
                        Severity::Warning,
                        n.pos,
                        format!("node `{}` routes a permission gate to `{b}`, which needs a host-side run; under the default sandbox it is refused at execution", n.id),
                        Some("declare `sandbox: none` on the workflow (or the node), launch with `--sandbox none`, or use a deny-shaped policy on claw"),
                    );
                    break;
                }
            }
        }
    }

    let known: HashSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();

    // entry
    let entry_id = match &entry {
        None => {
            ctx.push(
                codes::C008,
                Severity::Error,
                wpos,
                format!("workflow `{name}` has no `entry:`"),
                Some("add `entry: NODE` naming the first node"),
            );
            None
        }
        Some((e, p)) => {
            if known.contains(e.as_str()) {
                Some(NodeId::new(e.clone()))
            } else {
                ctx.push(
                    codes::C008,
                    Severity::Error,
                    *p,
                    format!("entry node `{e}` is not declared"),
                    Some("fix the entry name or declare the node"),
                );
                None
            }
        }
    };

    // edges
    let mut edges: Vec<Edge> = Vec::new();
    let mut loops: HashMap<String, (u32, Pos)> = HashMap::new();
    for e in &edge_lines {
        let mut ok = true;
        for (n, p) in &e.chain[..e.chain.len() - 1] {
            if n == "done" || n == "fail" {
                ctx.error(
                    codes::E002,
                    *p,
                    format!("`{n}` is a terminal target and cannot start an edge"),
                );
                ok = false;
            } else if !known.contains(n.as_str()) {
                ctx.push(
                    codes::C001,
                    Severity::Error,
                    *p,
                    format!("unknown node `{n}`"),
                    Some("declare the node or fix the name"),
                );
                ok = false;
            }
        }
        if let Some((n, p)) = e.chain.last()
            && n != "done"
            && n != "fail"
            && !known.contains(n.as_str())
        {
            ctx.push(
                codes::C001,
                Severity::Error,
                *p,
                format!("unknown node `{n}`"),
                Some("declare the node or fix the name"),
            );
            ok = false;
        }
        if let Some((lb, p, no_fuel)) = &e.loop_bound {
            if *no_fuel && budget_iterations.is_none() {
                ctx.push(codes::C097, Severity::Error, *p, format!("unbounded loop `{}` has no fuel ceiling", lb.name), Some("add a per-loop fuel (`as name(unbounded 200)`) or a workflow `budget.max_iterations`"));
            }
            match loops.get(&lb.name) {
                Some((m, _)) if *m != lb.max => {
                    ctx.error(
                        codes::C005,
                        *p,
                        format!("loop `{}` is declared with different bounds", lb.name),
                    );
                }
                _ => {
                    loops.insert(lb.name.clone(), (lb.max, *p));
                }
            }
        }
        if !ok {
            continue;
        }
        let n = e.chain.len();
        for (k, pair) in e.chain.windows(2).enumerate() {
            let last = k + 2 == n;
            let to = match pair[1].0.as_str() {
                "done" => Target::Done,
                "fail" => Target::Fail,
                other => Target::Node(NodeId::new(other)),
            };
            edges.push(Edge {
                from: NodeId::new(pair[0].0.clone()),
                to,
                condition: if last {
                    e.cond.as_ref().map(|c| c.0.clone())
                } else {
                    None
                },
                loop_bound: if last {
                    e.loop_bound.as_ref().map(|l| l.0.clone())
                } else {
                    None
                },
                with: if last {
                    e.with.clone()
                } else {
                    BTreeMap::new()
                },
                is_else: last && e.is_else,
                foreach: if last { e.foreach.clone() } else { None },
                pos: if k == 0 { e.pos } else { pair[0].1 },
            });
        }
    }

    // condition fields (C013/C014), with `not_x` accepted as `not x`
    for (e, line) in edges.iter_mut().zip(edge_positions(&edge_lines)) {
        let Some(Condition::Field { field, negated }) = &mut e.condition else {
            continue;
        };
        let Some(Some(sname)) = out_schema.get(e.from.as_str()) else {
            continue;
        };
        let Some(schema) = schemas.get(*sname) else {
            continue;
        };
        let find = |f: &str| schema.fields.iter().find(|x| x.name == f);
        let fpos = line.unwrap_or(e.pos);
        match find(field) {
            Some(f) if f.ty == FieldType::Bool => {}
            Some(f) => ctx.push(
                codes::C013,
                Severity::Error,
                fpos,
                format!(
                    "condition field `{}` of `{sname}` is {}, not bool",
                    f.name,
                    f.ty.word()
                ),
                Some("change the schema field to `bool`"),
            ),
            None => {
                if let Some(base) = field.strip_prefix("not_")
                    && find(base).is_some_and(|f| f.ty == FieldType::Bool)
                {
                    *field = base.to_string();
                    *negated = !*negated;
                } else {
                    ctx.push(
                        codes::C014,
                        Severity::Error,
                        fpos,
                        format!("condition field `{field}` not found in output schema `{sname}`"),
                        Some("add the field to the schema or fix the field name"),
                    );
                }
            }
        }
    }

    graph_checks(&ir_nodes, &edges, entry_id.as_ref(), ctx);

    Some(Workflow {
        name,
        entry: entry_id.unwrap_or_else(|| NodeId::new("")),
        nodes: ir_nodes,
        edges,
        vars,
        schemas: schemas.clone(),
        sandbox: sandbox_decl,
        worktree,
        budget,
        secrets,
        prompts: BTreeMap::new(),
        properties,
        mcp_servers: BTreeMap::new(),
        attachments: Default::default(),
        presets: Default::default(),
        pos: wpos,
    })
}
