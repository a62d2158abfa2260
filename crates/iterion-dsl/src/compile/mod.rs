//! Compiler: line tree → [`crate::ir::Workflow`]s plus diagnostics.
//!
//! This module owns the top-level walk (which declaration a line is, name
//! clashes C041/C042/E010/E014, `group`/`use` instantiation, C006/C007) and
//! hands each part to its home: property tables and line reading
//! ([`props`]), node/schema/var/secret declarations ([`decls`]), edge lines
//! ([`edges`]), workflow assembly ([`workflow`]), graph checks ([`graph`])
//! and the `sandbox:` block ([`sandbox`]). Imports point one way (this
//! module → workflow → graph/edges/decls/sandbox → props → ctx); nothing
//! here recurses deeper than the lexer's nesting cap.

mod blocks;
mod ctx;
mod cursors;
mod decls;
mod edges;
mod graph;
mod mcp;
mod props;
mod refs;
pub(crate) mod sandbox;
mod secrets;
mod tools;
mod workflow;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::BTreeMap;

use crate::diag::{Severity, codes};
use crate::ir::{NodeKind, Pos, Schema, SecretDecl, VarDecl, Workflow};
use crate::lexer::Tok;
use crate::parser::{Line, is_ident};

pub(crate) use ctx::Ctx;
use ctx::short;
use decls::{
    NodeDecl, check_node_refs, loose_block, node_kind, node_props, read_schema, read_secrets,
    read_vars,
};
use props::{CURSOR, SUPERVISOR};
use workflow::compile_workflow;

struct Group<'a> {
    members: Vec<(NodeKind, String, &'a Line)>,
    edges: Vec<&'a Line>,
}

/// Compile a line tree.
pub(crate) fn compile(
    lines: &[Line],
    ctx: &mut Ctx<'_>,
    tool_check: &dyn Fn(&str) -> Option<String>,
    egress_check: &dyn Fn(
        Option<&iterion_core::NetworkSpec>,
        &iterion_core::net::NetRule,
    ) -> Option<String>,
) -> Vec<Workflow> {
    let mut vars: BTreeMap<String, VarDecl> = BTreeMap::new();
    let mut schemas: BTreeMap<String, Schema> = BTreeMap::new();
    let mut prompts: HashSet<String> = HashSet::new();
    let mut prompt_bodies: HashMap<String, (String, Pos)> = HashMap::new();
    let mut attachment_blocks: Vec<&[Line]> = Vec::new();
    let mut preset_blocks: Vec<&[Line]> = Vec::new();
    let mut mcp_servers: Vec<mcp::ServerSummary> = Vec::new();
    let mut cursor_defs: HashMap<String, Option<cursors::CursorDef>> = HashMap::new();
    let mut nodes: Vec<NodeDecl<'_>> = Vec::new();
    let mut workflows: Vec<&Line> = Vec::new();
    let mut secrets: Vec<SecretDecl> = Vec::new();
    let mut groups: HashMap<String, Group<'_>> = HashMap::new();
    let mut uses: Vec<(String, String, Pos)> = Vec::new();
    let mut names: HashMap<(String, String), Pos> = HashMap::new();
    let mut blocks_seen: HashMap<String, Pos> = HashMap::new();
    let mut first_decl = true;

    for line in lines {
        let toks = &line.toks;
        let pos = line.pos();
        let words: Vec<Option<&str>> = toks
            .iter()
            .map(|t| match &t.tok {
                Tok::Word(w) => Some(w.as_str()),
                _ => None,
            })
            .collect();
        let is_colon = |i: usize| toks.get(i).is_some_and(|t| t.tok == Tok::Colon);
        let kw = words.first().copied().flatten();
        let was_first = std::mem::replace(&mut first_decl, false);
        match kw {
            Some("dsl") if is_colon(1) => {
                let v = words.get(2).copied().flatten();
                if !was_first {
                    ctx.error(
                        "E041",
                        pos,
                        "the `dsl:` header must be the first declaration",
                    );
                }
                if !matches!(v, Some("1") | Some("2")) || toks.len() != 3 {
                    ctx.push(
                        codes::E040,
                        Severity::Error,
                        pos,
                        format!("unknown syntax profile `{}`", short(&toks[2..])),
                        Some("write `dsl: 2`, or omit the header for profile 1"),
                    );
                }
            }
            Some("import") => {
                ctx.error(
                    "C030",
                    pos,
                    "imports are not resolved: this file was compiled alone",
                );
            }
            Some(b @ ("vars" | "presets" | "attachments" | "secrets")) if is_colon(1) => {
                if toks.len() > 2 {
                    ctx.error(
                        codes::E002,
                        toks[2].pos,
                        format!("`{b}:` takes an indented block"),
                    );
                }
                if let Some(prev) = blocks_seen.insert(b.to_string(), pos) {
                    ctx.push(
                        codes::E014,
                        Severity::Error,
                        pos,
                        format!("duplicate `{b}:` block (first at line {})", prev.line),
                        Some("keep one block per file and merge the entries into it"),
                    );
                }
                match b {
                    "vars" => read_vars(&line.children, ctx, &mut vars),
                    "secrets" => read_secrets(&line.children, ctx, &mut secrets),
                    _ => {
                        loose_block(&line.children, ctx, b);
                        if b == "attachments" {
                            attachment_blocks.push(&line.children);
                        } else {
                            preset_blocks.push(&line.children);
                        }
                    }
                }
            }
            Some("use") => {
                // use GROUP as PREFIX [with {…}]
                match (
                    words.get(1).copied().flatten(),
                    words.get(2).copied().flatten(),
                    words.get(3).copied().flatten(),
                ) {
                    (Some(g), Some("as"), Some(p)) if is_ident(g) && is_ident(p) => {
                        uses.push((g.to_string(), p.to_string(), pos));
                    }
                    _ => ctx.error(codes::E002, pos, "expected `use GROUP as PREFIX`"),
                }
            }
            Some(k) if words.get(1).copied().flatten().is_some() => {
                let name = words
                    .get(1)
                    .copied()
                    .flatten()
                    .unwrap_or_default()
                    .to_string();
                let mut i = 2;
                // group params `(a, b)`
                if k == "group" && toks.get(2).is_some_and(|t| t.tok == Tok::LParen) {
                    while i < toks.len() && toks[i].tok != Tok::RParen {
                        i += 1;
                    }
                    i += 1;
                }
                if !is_colon(i) || toks.len() != i + 1 {
                    ctx.push(
                        codes::E002,
                        Severity::Error,
                        toks.get(i).map_or(pos, |t| t.pos),
                        format!("expected `:` at the end of the `{k} {name}` header"),
                        Some("a declaration is `KIND NAME:` followed by an indented block"),
                    );
                }
                if !is_ident(&name) {
                    ctx.error(
                        codes::E002,
                        toks[1].pos,
                        format!("`{name}` is not a valid name"),
                    );
                    continue;
                }
                let ns = match k {
                    "agent" | "judge" | "router" | "human" | "tool" | "compute" | "emit"
                    | "wait" | "await_answers" | "subbot" | "fail" | "join" => "node",
                    other => other,
                };
                if let Some(prev) = names.get(&(ns.to_string(), name.clone())) {
                    let code = match ns {
                        "node" => codes::C041,
                        "mcp_server" => codes::C024,
                        "cursor" => codes::C086,
                        _ => codes::E010,
                    };
                    ctx.push(
                        code,
                        Severity::Error,
                        toks[1].pos,
                        format!(
                            "duplicate {ns} `{name}` (first declared at line {})",
                            prev.line
                        ),
                        Some("rename one of the two declarations"),
                    );
                    continue;
                }
                names.insert((ns.to_string(), name.clone()), toks[1].pos);
                if matches!(name.as_str(), "done" | "fail")
                    && matches!(
                        k,
                        "prompt" | "schema" | "cursor" | "agent" | "judge" | "compute"
                    )
                {
                    // upstream's parser refuses these kinds by name (E011);
                    // the other node kinds reach its compiler (C042)
                    ctx.push(
                        codes::E011,
                        Severity::Error,
                        toks[1].pos,
                        format!("`{name}` is a reserved terminal target and cannot name a {k}"),
                        Some("`done` and `fail` are the terminal targets; pick a different name"),
                    );
                    continue;
                }
                if ns == "node" && (name == "done" || (name == "fail" && k != "fail")) {
                    ctx.push(
                        codes::C042,
                        Severity::Error,
                        toks[1].pos,
                        format!("`{name}` is a reserved terminal target and cannot name a node"),
                        Some("pick a different node name"),
                    );
                    continue;
                }
                match k {
                    "prompt" => {
                        let body = line.text.clone().unwrap_or((String::new(), toks[1].pos));
                        prompt_bodies.insert(name.clone(), body);
                        prompts.insert(name);
                    }
                    "schema" => {
                        let s = read_schema(&line.children, ctx);
                        schemas.insert(name, s);
                    }
                    "workflow" => workflows.push(line),
                    "group" => {
                        let mut g = Group {
                            members: Vec::new(),
                            edges: Vec::new(),
                        };
                        for m in &line.children {
                            if m.toks.iter().any(|t| t.tok == Tok::Arrow) {
                                g.edges.push(m);
                            } else if let (Some(Tok::Word(mk)), Some(Tok::Word(mn))) = (
                                m.toks.first().map(|t| &t.tok),
                                m.toks.get(1).map(|t| &t.tok),
                            ) && let Some(kind) = node_kind(mk)
                            {
                                g.members.push((kind, mn.clone(), m));
                            } else {
                                ctx.error(
                                    codes::E001,
                                    m.pos(),
                                    "expected a node or an edge in the group",
                                );
                            }
                        }
                        groups.insert(name, g);
                    }
                    "contract" => {
                        for c in &line.children {
                            let _ = ctx.prop(c, None, "contract");
                        }
                    }
                    "mcp_server" => mcp_servers.push(mcp::server(&name, line, toks[1].pos, ctx)),
                    "cursor" => {
                        let _ = ctx.props(&line.children, Some(CURSOR), "cursor");
                        let def = cursors::declaration(&name, line, toks[1].pos, ctx);
                        cursor_defs.insert(name, def);
                    }
                    "supervisor" => {
                        let _ = ctx.props(&line.children, Some(SUPERVISOR), "supervisor");
                    }
                    other => match node_kind(other) {
                        Some(kind) => {
                            let props = node_props(kind, line, ctx);
                            nodes.push(NodeDecl {
                                id: name,
                                kind,
                                pos: toks[1].pos,
                                props,
                            });
                        }
                        None => {
                            ctx.push(
                                codes::E001,
                                Severity::Error,
                                pos,
                                format!("unknown declaration `{other}`"),
                                Some("top-level declarations are vars, presets, attachments, secrets, mcp_server, prompt, schema, agent, judge, router, human, tool, compute, workflow…"),
                            );
                        }
                    },
                }
            }
            _ => {
                ctx.push(
                    codes::E001,
                    Severity::Error,
                    pos,
                    format!("unexpected `{}` at top level", short(toks)),
                    Some("a top-level line is a declaration such as `agent NAME:` or `vars:`"),
                );
            }
        }
    }

    // groups instantiated by `use`
    let mut extra_edges: Vec<(String, &Line)> = Vec::new();
    for (g, prefix, pos) in &uses {
        match groups.get(g) {
            None => ctx.error(
                codes::C116,
                *pos,
                format!("`use` references unknown group `{g}`"),
            ),
            Some(group) => {
                for (kind, name, line) in &group.members {
                    let props = node_props(*kind, line, ctx);
                    nodes.push(NodeDecl {
                        id: format!("{prefix}.{name}"),
                        kind: *kind,
                        pos: *pos,
                        props,
                    });
                }
                for e in &group.edges {
                    extra_edges.push((prefix.clone(), e));
                }
            }
        }
    }

    if workflows.is_empty() {
        let pos = lines
            .first()
            .map(Line::pos)
            .unwrap_or(Pos { line: 1, column: 1 });
        ctx.push(
            codes::C006,
            Severity::Error,
            pos,
            "no workflow declared in this file",
            Some("add a `workflow NAME:` block"),
        );
        return Vec::new();
    }
    if workflows.len() > 1 {
        for w in &workflows[1..] {
            ctx.push(
                codes::C007,
                Severity::Error,
                w.pos(),
                "more than one workflow in this file",
                Some("v1 supports one workflow per file — remove extras"),
            );
        }
    }

    // node-level checks independent of the workflow
    let default_backend = blocks::workflow_text(workflows[0], "default_backend");
    for n in &nodes {
        check_node_refs(n, &schemas, &prompts, ctx);
        tools::names(n, default_backend.as_deref(), ctx, tool_check);
    }

    let mut out = Vec::new();
    for wline in workflows {
        if let Some(w) =
            compile_workflow(wline, &nodes, &extra_edges, &vars, &schemas, &secrets, ctx)
        {
            secrets::check(&w, ctx, egress_check);
            let mut declared = attachment_blocks.clone();
            declared.push(blocks::workflow_entries(wline, "attachments"));
            let attachment_decls = blocks::attachments(&declared, &w.vars, ctx);
            let attachments: HashSet<String> = attachment_decls.keys().cloned().collect();
            let mut presets = BTreeMap::new();
            for p in &preset_blocks {
                presets.extend(blocks::presets(p, &w.vars, ctx));
            }
            let compaction = blocks::entries_json(blocks::workflow_entries(wline, "compaction"));
            blocks::node_settings(&w, Some(&compaction), ctx);
            blocks::capabilities(&w, wline, ctx);
            cursors::invocations(&w, &cursor_defs, ctx);
            mcp::playwright(&mcp_servers, &w, ctx);
            let mut w = w;
            mcp::resolve(&mut w, &mcp_servers, ctx);
            let inputs = refs::RefInputs {
                prompts: &prompt_bodies,
                attachments: &attachments,
            };
            refs::check(&w, &inputs, ctx);
            out.push(Workflow {
                prompts: prompt_bodies
                    .iter()
                    .map(|(k, (body, _))| (k.clone(), body.clone()))
                    .collect(),
                attachments: attachment_decls,
                presets,
                ..w
            });
        }
    }
    out
}

#[cfg(test)]
mod secret_tests {
    use std::path::Path;

    use crate::ir::SecretDelivery;

    #[test]
    fn secret_props_reach_the_ir() {
        let src = r#"secrets:
  API_TOKEN:
    value: "${HOST_TOKEN}"
    env: GH_TOKEN
  db_pass:
    as: file
    mount_path: "/etc/db/pass"
    optional: true

tool t:
  command: "true"

workflow w:
  entry: t
  t -> done
"#;
        let c = crate::compile_source(src, Path::new("s.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let s = &c.workflows[0].secrets;
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "API_TOKEN");
        assert_eq!(s[0].delivery, SecretDelivery::Env);
        assert_eq!(s[0].value.as_deref(), Some("${HOST_TOKEN}"));
        assert_eq!(s[0].env.as_deref(), Some("GH_TOKEN"));
        assert!(!s[0].optional);
        assert_eq!(s[1].delivery, SecretDelivery::File);
        assert_eq!(s[1].mount_path.as_deref(), Some("/etc/db/pass"));
        assert!(s[1].optional);
        assert_eq!(s[1].value, None);
    }
}

#[cfg(test)]
mod prompt_tests {
    use std::path::Path;

    #[test]
    fn prompt_bodies_reach_the_ir() {
        let src = "prompt sys:\n  You review {{vars.repo}}.\n    Keep indentation.\n\nprompt empty:\n\ntool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  t -> done\n";
        let c = crate::compile_source(src, Path::new("p.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let p = &c.workflows[0].prompts;
        assert_eq!(
            p.get("sys").map(String::as_str),
            Some("You review {{vars.repo}}.\n  Keep indentation.")
        );
        assert_eq!(p.get("empty").map(String::as_str), Some(""));
    }

    #[test]
    fn workflow_properties_reach_the_ir() {
        let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  default_backend: \"claw\"\n  interaction: none\n  t -> done\n";
        let c = crate::compile_source(src, Path::new("p.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let p = &c.workflows[0].properties;
        assert_eq!(p.get("default_backend"), Some(&serde_json::json!("claw")));
        assert_eq!(p.get("interaction"), Some(&serde_json::json!("none")));
        assert!(!p.contains_key("entry"));
    }
}
