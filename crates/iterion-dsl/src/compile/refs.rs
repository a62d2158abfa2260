//! Template references (`{{namespace.path}}`) checked against the built
//! workflow, as upstream's validator does: where they are read (prompt
//! bodies of the nodes that use them, tool commands and scripts, edge
//! `with` values, compute expressions), whether they parse (C004), and
//! whether what they name exists — node (C029), output field (C031, or the
//! C032 warning when the node has no output schema), variable (C033),
//! input field (C034), artifact (C035), attachment (C053, C054) — runs
//! before the consumer (C036), and whether `outputs.X.history` names a node
//! on a loop edge (C017). Owns no rendering: the engine's template
//! module does that at run time.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::VecDeque;

use iterion_core::NodeId;
use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::{Pos, Target, ToolSpec, Workflow};

use super::ctx::Ctx;

/// One `{{…}}` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateRef {
    pub namespace: String,
    pub path: Vec<String>,
    pub raw: String,
}

/// Namespaces a template may read (upstream `parseRef`).
const NAMESPACES: &[&str] = &[
    "vars",
    "input",
    "outputs",
    "artifacts",
    "attachments",
    "loop",
    "run",
];

/// Sub-fields of an attachment reference.
const ATTACHMENT_FIELDS: &[&str] = &["path", "url", "mime", "size", "sha256"];

/// Every `{{…}}` of `text`, or why one is malformed.
pub(crate) fn parse_refs(text: &str) -> Result<Vec<TemplateRef>, String> {
    let mut out = Vec::new();
    if !text.contains("{{") {
        return Ok(out);
    }
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!(
                "unterminated template expression at `{}`",
                clip(&rest[start..])
            ));
        };
        let inner = &after[..end];
        if inner.contains("{{") {
            return Err(format!(
                "nested template expression at `{}`: `{{{{` may not appear inside an open template",
                clip(&rest[start..start + 4 + end])
            ));
        }
        let raw = format!("{{{{{inner}}}}}");
        let expr = inner.trim();
        let expr = expr.strip_prefix('!').map_or(expr, str::trim);
        let mut parts = expr.split('.');
        let namespace = parts.next().unwrap_or_default().to_owned();
        let path: Vec<String> = parts.map(str::to_owned).collect();
        if path.is_empty() {
            return Err(format!(
                "invalid reference `{}`: expected namespace.path",
                clip(&raw)
            ));
        }
        if !NAMESPACES.contains(&namespace.as_str()) {
            return Err(format!(
                "unknown reference namespace `{}` in `{}`",
                clip(&namespace),
                clip(&raw)
            ));
        }
        out.push(TemplateRef {
            namespace,
            path,
            raw,
        });
        rest = &after[end + 2..];
    }
    Ok(out)
}

fn clip(s: &str) -> String {
    crate::diag::clip(s.to_owned(), 60)
}

/// Where a reference is read, rendered only when a diagnostic names it
/// (a workflow of thousands of nodes has no reason to format a location
/// per site it checks).
enum Loc<'w> {
    /// A prompt body, as read by a node.
    Prompt { name: &'w str, node: &'w NodeId },
    /// An inline prompt property of a node.
    Inline { node: &'w NodeId, key: &'static str },
    /// A tool node's command or script.
    Tool {
        node: &'w NodeId,
        what: &'static str,
    },
    /// A `with` value of an edge (`to` absent: the history check's short form).
    With {
        from: &'w NodeId,
        to: Option<&'w Target>,
        key: &'w str,
    },
}

impl std::fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loc::Prompt { name, node } => write!(f, "prompt `{name}` (node `{node}`)"),
            Loc::Inline { node, key } => write!(f, "node `{node}` {key}"),
            Loc::Tool { node, what } => write!(f, "tool node `{node}` {what}"),
            Loc::With { from, to, key } => {
                let to = match to {
                    None => "…",
                    Some(Target::Node(n)) => n.as_str(),
                    Some(Target::Done) => "done",
                    Some(Target::Fail) => "fail",
                };
                write!(f, "edge {from} -> {to}, with `{key}`")
            }
        }
    }
}

/// Where a reference is read.
struct Site<'w> {
    consumer: &'w NodeId,
    location: Loc<'w>,
    /// A `with` value: the source node itself has finished.
    include_self: bool,
    pos: Pos,
}

/// What the checks need besides the workflow.
pub(crate) struct RefInputs<'a> {
    /// Prompt bodies by name, with where each is declared.
    pub prompts: &'a HashMap<String, (String, Pos)>,
    /// Declared attachments.
    pub attachments: &'a HashSet<String>,
}

/// The references of one site, or C004 when one is malformed.
fn read<'w>(text: &str, site: Site<'w>, ctx: &mut Ctx<'_>) -> Option<(Site<'w>, Vec<TemplateRef>)> {
    match parse_refs(text) {
        Ok(refs) if refs.is_empty() => None,
        Ok(refs) => Some((site, refs)),
        Err(why) => {
            ctx.error(codes::C004, site.pos, format!("{}: {why}", site.location));
            None
        }
    }
}

/// `outputs.X.history` reads the iterations of a loop: X must be an end of
/// a loop edge (upstream C017; every prompt body and `with` value, used or
/// not, as upstream walks them).
fn history_refs(w: &Workflow, inputs: &RefInputs<'_>, ctx: &mut Ctx<'_>) {
    let loop_nodes: HashSet<&NodeId> = w
        .edges
        .iter()
        .filter(|e| e.loop_bound.is_some())
        .flat_map(|e| {
            std::iter::once(&e.from).chain(match &e.to {
                Target::Node(n) => Some(n),
                _ => None,
            })
        })
        .collect();
    enum At<'w> {
        Prompt(&'w str),
        With(Loc<'w>),
    }
    impl std::fmt::Display for At<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                At::Prompt(name) => write!(f, "prompt `{name}`"),
                At::With(loc) => loc.fmt(f),
            }
        }
    }
    let mut texts: Vec<(&str, Pos, At<'_>)> = inputs
        .prompts
        .iter()
        .map(|(name, (body, pos))| (body.as_str(), *pos, At::Prompt(name)))
        .collect();
    texts.sort_by_key(|(_, pos, _)| (pos.line, pos.column));
    for e in &w.edges {
        for (key, value) in &e.with {
            let at = At::With(Loc::With {
                from: &e.from,
                to: None,
                key,
            });
            texts.push((value, e.pos, at));
        }
    }
    for (text, pos, location) in texts {
        for r in parse_refs(text).unwrap_or_default() {
            if r.namespace == "outputs"
                && r.path.len() >= 2
                && r.path.last().is_some_and(|l| l == "history")
            {
                let node = NodeId::new(r.path[0].clone());
                if w.nodes.contains_key(&node) && !loop_nodes.contains(&node) {
                    ctx.error(
                        codes::C017,
                        pos,
                        format!(
                            "{location}: reference {} reads `.history` of `{node}`, which is on no loop edge",
                            r.raw
                        ),
                    );
                }
            }
        }
    }
}

/// Check every template reference of `w` (upstream `validateTemplateRefs`).
pub(crate) fn check(w: &Workflow, inputs: &RefInputs<'_>, ctx: &mut Ctx<'_>) {
    history_refs(w, inputs, ctx);
    let mut sites: Vec<(Site<'_>, Vec<TemplateRef>)> = Vec::new();
    // prompt bodies, once per consuming node (a bad body reported once)
    let mut reported_prompts: HashSet<&str> = HashSet::new();
    for (id, node) in &w.nodes {
        for key in ["system", "user", "instructions", "interaction_prompt"] {
            let Some(Value::String(name)) = node.properties.get(key) else {
                continue;
            };
            let (text, pos, location) = match inputs.prompts.get(name) {
                Some((body, pos)) => (body.as_str(), *pos, Loc::Prompt { name, node: id }),
                // an inline prompt
                None => (name.as_str(), node.pos, Loc::Inline { node: id, key }),
            };
            if parse_refs(text).is_err() && !reported_prompts.insert(name.as_str()) {
                continue;
            }
            let site = Site {
                consumer: id,
                location,
                include_self: false,
                pos,
            };
            if let Some(s) = read(text, site, ctx) {
                sites.push(s);
            }
        }
        let tool_text = match &node.tool {
            Some(ToolSpec::Command(c)) => Some(("command", c.as_str())),
            Some(ToolSpec::Script { script, .. }) => Some(("script", script.as_str())),
            None => None,
        };
        if let Some((what, text)) = tool_text {
            let site = Site {
                consumer: id,
                location: Loc::Tool { node: id, what },
                include_self: false,
                pos: node.pos,
            };
            if let Some(s) = read(text, site, ctx) {
                sites.push(s);
            }
        }
    }
    for e in &w.edges {
        for (key, value) in &e.with {
            let site = Site {
                consumer: &e.from,
                location: Loc::With {
                    from: &e.from,
                    to: Some(&e.to),
                    key,
                },
                include_self: true,
                pos: e.pos,
            };
            if let Some(s) = read(value, site, ctx) {
                sites.push(s);
            }
        }
    }
    if sites.is_empty() {
        return;
    }
    let mut preds = Predecessors::new(w);
    let producers: HashMap<&str, &NodeId> = w
        .nodes
        .iter()
        .filter_map(|(id, n)| match n.properties.get("publish") {
            Some(Value::String(p)) => Some((p.as_str(), id)),
            _ => None,
        })
        .collect();
    for (site, refs) in &sites {
        for r in refs {
            check_one(w, site, r, &mut preds, &producers, inputs, ctx);
        }
    }
}

fn check_one<'w>(
    w: &'w Workflow,
    site: &Site<'w>,
    r: &TemplateRef,
    preds: &mut Predecessors<'w>,
    producers: &HashMap<&str, &NodeId>,
    inputs: &RefInputs<'_>,
    ctx: &mut Ctx<'_>,
) {
    let loc = &site.location;
    let raw = &r.raw;
    let first = r.path[0].as_str();
    match r.namespace.as_str() {
        "outputs" => {
            let target = NodeId::new(first);
            let Some(node) = w.nodes.get(&target) else {
                ctx.error(
                    codes::C029,
                    site.pos,
                    format!("{loc}: reference {raw} targets unknown node `{first}`"),
                );
                return;
            };
            let before = preds.of(site.consumer).contains(&target)
                || (site.include_self && &target == site.consumer);
            if !before {
                ctx.error(
                    codes::C036,
                    site.pos,
                    format!(
                        "{loc}: reference {raw} targets node `{first}`, which does not run before `{}`",
                        site.consumer
                    ),
                );
                return;
            }
            let Some(field) = r.path.get(1) else { return };
            // `.history` is the loop's (upstream C017); `_x` fields are
            // injected by the runtime
            if field == "history" || field.starts_with('_') {
                return;
            }
            match node.output.as_deref() {
                None => ctx.push(
                    codes::C032,
                    Severity::Warning,
                    site.pos,
                    format!(
                        "{loc}: reference {raw} reads field `{field}` of node `{first}`, which has no output schema; it cannot be checked"
                    ),
                    None,
                ),
                Some(schema) => {
                    if let Some(s) = w.schemas.get(schema)
                        && !s.fields.iter().any(|f| &f.name == field)
                    {
                        ctx.error(
                            codes::C031,
                            site.pos,
                            format!(
                                "{loc}: reference {raw} reads field `{field}`, not in output schema `{schema}` of node `{first}`"
                            ),
                        );
                    }
                }
            }
        }
        "vars" if !w.vars.contains_key(first) => ctx.error(
            codes::C033,
            site.pos,
            format!("{loc}: reference {raw} targets undeclared variable `{first}`"),
        ),
        "input" => {
            let schema = w
                .nodes
                .get(site.consumer)
                .and_then(|n| n.input.as_deref())
                .and_then(|s| w.schemas.get(s).map(|x| (s, x)));
            if let Some((name, s)) = schema
                && !s.fields.iter().any(|f| f.name == first)
            {
                ctx.error(
                    codes::C034,
                    site.pos,
                    format!(
                        "{loc}: reference {raw} reads field `{first}`, not in input schema `{name}` of node `{}`",
                        site.consumer
                    ),
                );
            }
        }
        "artifacts" => match producers.get(first) {
            None => ctx.error(
                codes::C035,
                site.pos,
                format!(
                    "{loc}: reference {raw} targets artifact `{first}`, which no node publishes"
                ),
            ),
            Some(producer) => {
                let before = preds.of(site.consumer).contains(*producer)
                    || (site.include_self && *producer == site.consumer);
                if !before {
                    ctx.error(
                        codes::C036,
                        site.pos,
                        format!(
                            "{loc}: reference {raw} targets artifact `{first}` published by `{producer}`, which does not run before `{}`",
                            site.consumer
                        ),
                    );
                }
            }
        },
        "attachments" => {
            if !inputs.attachments.contains(first) {
                ctx.error(
                    codes::C053,
                    site.pos,
                    format!("{loc}: reference {raw} targets undeclared attachment `{first}`"),
                );
            } else if let Some(sub) = r.path.get(1)
                && !ATTACHMENT_FIELDS.contains(&sub.as_str())
            {
                ctx.error(
                    codes::C054,
                    site.pos,
                    format!(
                        "{loc}: reference {raw} uses unknown sub-field `{sub}` (one of: {})",
                        ATTACHMENT_FIELDS.join(", ")
                    ),
                );
            }
        }
        _ => {}
    }
}

/// Nodes that can run before each node: reverse reachability over every
/// edge (loop edges included), a loop edge's target counting as its own
/// predecessor. Computed per consumer on demand, then kept.
struct Predecessors<'w> {
    rev: HashMap<&'w NodeId, Vec<&'w NodeId>>,
    loop_targets: HashSet<&'w NodeId>,
    memo: HashMap<&'w NodeId, HashSet<NodeId>>,
}

impl<'w> Predecessors<'w> {
    fn new(w: &'w Workflow) -> Self {
        let mut rev: HashMap<&NodeId, Vec<&NodeId>> = HashMap::new();
        let mut loop_targets = HashSet::new();
        for e in &w.edges {
            if let Target::Node(to) = &e.to {
                rev.entry(to).or_default().push(&e.from);
                if e.loop_bound.is_some() {
                    loop_targets.insert(to);
                }
            }
        }
        Self {
            rev,
            loop_targets,
            memo: HashMap::new(),
        }
    }

    fn of(&mut self, node: &'w NodeId) -> &HashSet<NodeId> {
        let rev = &self.rev;
        let loop_targets = &self.loop_targets;
        self.memo.entry(node).or_insert_with(|| {
            let mut seen: HashSet<NodeId> = HashSet::new();
            let mut queue: VecDeque<&NodeId> =
                rev.get(node).into_iter().flatten().copied().collect();
            while let Some(p) = queue.pop_front() {
                if p == node || !seen.insert(p.clone()) {
                    continue;
                }
                queue.extend(rev.get(p).into_iter().flatten().copied());
            }
            if loop_targets.contains(node) {
                seen.insert(node.clone());
            }
            seen
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_refs;

    #[test]
    fn refs_parse_as_upstream() {
        let r = parse_refs("a {{ outputs.x.ok }} b {{!input.cmd}}").expect("refs");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].namespace, "outputs");
        assert_eq!(r[0].path, ["x", "ok"]);
        assert_eq!(r[1].namespace, "input");
        for bad in [
            "{{ outputs.x",
            "{{ a{{b}} }}",
            "{{ vars }}",
            "{{ env.HOME }}",
        ] {
            assert!(parse_refs(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_refs("no templates, ${HOME}").expect("none"), []);
    }
}
