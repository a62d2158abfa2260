//! MCP declarations as upstream checks them: an `mcp_server` block (its
//! properties, `transport:` word E020, the transport's required and
//! forbidden fields C025, the `auth:` block's properties E012 and its
//! oauth2 requirements C038), a Playwright server under a sandbox whose
//! image ships no browser (C060), and the `mcp:` (servers a node or the
//! workflow uses) and `memory:` sub-blocks' properties (E012). Owns no
//! reference resolution between nodes and servers.

use std::collections::BTreeMap;

use iterion_core::agent::{McpOAuth, McpServerSpec, McpTransport};
use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::{NodeKind, Pos, Workflow};
use crate::parser::{Line, PValue};

use super::ctx::Ctx;
use super::props::{K, MCP_SERVER, Prop};

const MCP_AUTH: &[(&str, K)] = &[
    ("type", K::S),
    ("auth_url", K::S),
    ("token_url", K::S),
    ("revoke_url", K::S),
    ("client_id", K::S),
    ("scopes", K::L),
];

/// The `mcp:` block of a node or of the workflow.
pub(crate) const MCP_CONFIG: &[(&str, K)] = &[
    ("autoload_project", K::B),
    ("inherit", K::B),
    ("servers", K::L),
    ("disable", K::L),
];

/// The `memory:` block of an agent or judge.
pub(crate) const MEMORY: &[(&str, K)] = &[
    ("enabled", K::B),
    ("scope", K::S),
    ("autoload", K::L),
    ("read", K::B),
    ("write", K::B),
    ("pre_compact_inject", K::B),
];

/// An `http(s)://host…` URL (upstream `validateHTTPURL`).
fn http_url(u: &str) -> bool {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or_default();
        !host.is_empty() && !host.starts_with(':')
    })
}

/// What the workflow-level checks need of a declared server.
pub(crate) struct ServerSummary {
    name: String,
    pos: Pos,
    /// The server as the launcher reaches it (`None` when its block is
    /// invalid: a diagnostic already says why).
    spec: Option<McpServerSpec>,
    /// Looks like the Playwright MCP package (upstream's signature:
    /// a `playwright-mcp`/`playwright_mcp` command, or `npx @playwright/mcp`).
    playwright: bool,
}

/// C060: a Playwright MCP server needs a browser-capable sandbox image when
/// the workflow runs sandboxed (a host run uses the operator's browser).
pub(crate) fn playwright(servers: &[ServerSummary], w: &crate::ir::Workflow, ctx: &mut Ctx<'_>) {
    let Some(sb) = w.sandbox.as_ref().filter(|s| s.spec.mode.is_active()) else {
        return;
    };
    let image = sb.spec.image.as_deref().unwrap_or_default();
    let lower = image.to_ascii_lowercase();
    if lower.contains("sandbox-browser") || lower.contains("sandbox-full-browser") {
        return;
    }
    for s in servers.iter().filter(|s| s.playwright) {
        ctx.error(
            codes::C060,
            s.pos,
            format!(
                "mcp_server `{}`: Playwright MCP needs a sandbox image that bundles Chromium (an `…sandbox-browser` image); the workflow's sandbox image is `{image}`",
                s.name
            ),
        );
    }
}

/// The workflow's declared servers into the IR, and each agent's and
/// judge's active servers (upstream `resolveWorkflowActiveServers` then
/// `resolveNodeActiveServers`): the workflow's `servers:` minus its
/// `disable:`, inherited unless the node says `inherit: false`, plus the
/// node's `servers:`, minus its `disable:`. A name no `mcp_server` block
/// declares is C323. (Upstream also merges a project `.mcp.json`; this
/// engine does not: a file of the workspace would choose host processes.)
pub(crate) fn resolve(w: &mut Workflow, servers: &[ServerSummary], ctx: &mut Ctx<'_>) {
    w.mcp_servers = servers
        .iter()
        .filter_map(|s| s.spec.clone().map(|spec| (s.name.clone(), spec)))
        .collect();
    let declared = |n: &str| servers.iter().any(|s| s.name == n);
    let list = |block: Option<&Value>, key: &str| -> Vec<String> {
        block
            .and_then(|b| b.get(key))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut unknown: Vec<(String, Pos, String)> = Vec::new();
    let wf_block = w.properties.get("mcp").cloned();
    let mut wf_active: Vec<String> = Vec::new();
    for name in list(wf_block.as_ref(), "servers") {
        if !declared(&name) {
            unknown.push((format!("workflow `{}`", w.name), w.pos, name));
        } else if !wf_active.contains(&name) {
            wf_active.push(name);
        }
    }
    for name in list(wf_block.as_ref(), "disable") {
        if !declared(&name) {
            unknown.push((format!("workflow `{}`", w.name), w.pos, name.clone()));
        }
        wf_active.retain(|n| n != &name);
    }
    for node in w.nodes.values_mut() {
        if !matches!(node.kind, NodeKind::Agent | NodeKind::Judge) {
            continue;
        }
        let block = node.properties.get("mcp");
        let inherit = block
            .and_then(|b| b.get("inherit"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let mut active = if inherit {
            wf_active.clone()
        } else {
            Vec::new()
        };
        for name in list(block, "servers") {
            if !declared(&name) {
                unknown.push((format!("`{}`", node.id), node.pos, name));
            } else if !active.contains(&name) {
                active.push(name);
            }
        }
        for name in list(block, "disable") {
            if !declared(&name) {
                unknown.push((format!("`{}`", node.id), node.pos, name.clone()));
            }
            active.retain(|n| n != &name);
        }
        node.mcp_servers = active;
    }
    for (who, pos, name) in unknown {
        ctx.push(
            codes::C323,
            Severity::Error,
            pos,
            format!("{who}: unknown MCP server `{name}`"),
            Some("declare it with an `mcp_server NAME:` block, or fix the name"),
        );
    }
}

/// An `auth: type: oauth2` block as the runner reads it (`None` for
/// anything C038 refuses).
fn oauth_of(auth: Option<&Prop<'_>>) -> Option<McpOAuth> {
    let a = super::props::block_json(&auth?.line.children);
    let s = |k: &str| {
        a.get(k)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    if s("type").as_deref() != Some("oauth2") {
        return None;
    }
    Some(McpOAuth {
        auth_url: s("auth_url")?,
        token_url: s("token_url")?,
        revoke_url: s("revoke_url"),
        client_id: s("client_id")?,
        scopes: a
            .get("scopes")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Check one `mcp_server NAME:` block.
pub(crate) fn server(name: &str, line: &Line, pos: Pos, ctx: &mut Ctx<'_>) -> ServerSummary {
    let props = ctx.props(&line.children, Some(MCP_SERVER), "mcp_server");
    let get = |k: &str| props.iter().find(|p| p.key == k);
    let text = |k: &str| get(k).and_then(Prop::text).filter(|t| !t.is_empty());
    let command = text("command").unwrap_or_default().to_ascii_lowercase();
    let npx_playwright = command == "npx"
        && matches!(get("args").and_then(|p| p.value.as_ref()), Some(PValue::List(l))
            if l.iter().any(|(a, _)| a.text().is_some_and(|t| t.to_ascii_lowercase().contains("@playwright/mcp"))));
    let strings = |k: &str| -> Vec<String> {
        match get(k).and_then(|p| p.value.as_ref()) {
            Some(PValue::List(l)) => l
                .iter()
                .filter_map(|(v, _)| v.text().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let map = |k: &str| -> BTreeMap<String, String> {
        let Some(p) = get(k) else {
            return BTreeMap::new();
        };
        // Inline `{K: "v"}` or an indented block of `K: "v"` lines.
        let json = match &p.value {
            Some(v) => v.to_json(),
            None => super::props::block_json(&p.line.children),
        };
        json.as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| v.as_str().map(|t| (k.clone(), t.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let transport = match (
        get("transport").and_then(Prop::text),
        text("command"),
        text("url"),
    ) {
        (Some("stdio"), Some(command), None) => Some(McpTransport::Stdio {
            command: command.to_owned(),
            args: strings("args"),
            env: map("env"),
        }),
        (Some("http" | "sse"), None, Some(url)) => Some(McpTransport::Http {
            url: url.to_owned(),
            headers: map("headers"),
            auth: oauth_of(get("auth")),
        }),
        _ => None,
    };
    let summary = ServerSummary {
        name: name.to_owned(),
        pos,
        spec: transport.map(|transport| McpServerSpec {
            name: name.to_owned(),
            transport,
        }),
        playwright: command.contains("playwright-mcp")
            || command.contains("playwright_mcp")
            || npx_playwright,
    };
    let transport = get("transport").and_then(Prop::text);
    let c025 = |ctx: &mut Ctx<'_>, msg: String| {
        ctx.error(codes::C025, pos, format!("mcp_server `{name}` {msg}"));
    };
    match transport {
        Some("stdio") => {
            if text("command").is_none() {
                c025(ctx, "with transport stdio must set `command`".into());
            }
            if text("url").is_some() {
                c025(ctx, "with transport stdio cannot set `url`".into());
            }
        }
        Some(t @ ("http" | "sse")) => {
            if text("url").is_none() {
                c025(ctx, format!("with transport {t} must set `url`"));
            }
            if text("command").is_some() {
                c025(ctx, format!("with transport {t} cannot set `command`"));
            }
            if matches!(get("args").and_then(|p| p.value.as_ref()), Some(PValue::List(l)) if !l.is_empty())
            {
                c025(ctx, format!("with transport {t} cannot set `args`"));
            }
        }
        Some(other) => {
            let at = get("transport").map_or(pos, |p| p.value_pos);
            ctx.push(
                codes::E020,
                Severity::Error,
                at,
                format!("invalid MCP transport `{other}`"),
                Some("use stdio, http or sse"),
            );
        }
        None => c025(
            ctx,
            "must set a supported `transport` (stdio, http or sse)".into(),
        ),
    }
    if let Some(auth) = get("auth") {
        let a = ctx.props(&auth.line.children, Some(MCP_AUTH), "mcp_server auth");
        let at = |k: &str| {
            a.iter()
                .find(|p| p.key == k)
                .and_then(Prop::text)
                .filter(|t| !t.is_empty())
        };
        let c038 = |ctx: &mut Ctx<'_>, msg: String| {
            ctx.error(codes::C038, auth.pos, format!("mcp_server `{name}`: {msg}"));
        };
        match at("type") {
            None => c038(ctx, "the auth block has no `type`".into()),
            Some(t) if t != "oauth2" => c038(
                ctx,
                format!("auth type `{t}` is not supported (only oauth2 is)"),
            ),
            Some(_) => {
                for key in ["auth_url", "token_url"] {
                    match at(key) {
                        None => c038(ctx, format!("oauth2 auth requires `{key}`")),
                        Some(u) if !http_url(u) => {
                            c038(ctx, format!("`{key}` `{u}` is not an http(s) URL"));
                        }
                        Some(_) => {}
                    }
                }
                if let Some(u) = at("revoke_url")
                    && !http_url(u)
                {
                    c038(ctx, format!("`revoke_url` `{u}` is not an http(s) URL"));
                }
                if at("client_id").is_none() {
                    c038(ctx, "oauth2 auth requires `client_id`".into());
                }
            }
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::http_url;
    use iterion_core::agent::McpTransport;

    #[test]
    fn servers_and_active_sets_reach_the_ir() {
        let src = r#"mcp_server fs:
  transport: stdio
  command: "npx"
  args: ["-y", "server-filesystem", "/data"]
  env:
    LOG: "debug"

mcp_server web:
  transport: http
  url: "https://mcp.example.com/mcp"
  headers:
    Authorization: "Bearer ${TOKEN}"

agent a:
  model: "anthropic/claude-sonnet-4-6"

agent b:
  model: "anthropic/claude-sonnet-4-6"
  mcp:
    inherit: false
    servers: [web]

judge c:
  model: "anthropic/claude-sonnet-4-6"
  mcp:
    disable: [fs]

workflow w:
  mcp:
    servers: [fs]
  entry: a
  a -> b
  b -> c
  c -> done
"#;
        let c = crate::compile_source(src, std::path::Path::new("m.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let w = &c.workflows[0];
        assert_eq!(w.mcp_servers.len(), 2);
        match &w.mcp_servers["fs"].transport {
            McpTransport::Stdio { command, args, env } => {
                assert_eq!(command, "npx");
                assert_eq!(args, &["-y", "server-filesystem", "/data"]);
                assert_eq!(env["LOG"], "debug");
            }
            other => panic!("{other:?}"),
        }
        match &w.mcp_servers["web"].transport {
            McpTransport::Http { url, headers, .. } => {
                assert_eq!(url, "https://mcp.example.com/mcp");
                assert_eq!(headers["Authorization"], "Bearer ${TOKEN}");
            }
            other => panic!("{other:?}"),
        }
        let active = |n: &str| w.nodes[&iterion_core::NodeId::new(n)].mcp_servers.clone();
        assert_eq!(active("a"), ["fs"]);
        assert_eq!(active("b"), ["web"]);
        assert!(active("c").is_empty());
    }

    #[test]
    fn an_unknown_server_is_c323() {
        let src = "agent a:\n  model: \"anthropic/x\"\n  mcp:\n    servers: [ghost]\n\nworkflow w:\n  entry: a\n  a -> done\n";
        let c = crate::compile_source(src, std::path::Path::new("m.iter"));
        let d: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C323").collect();
        assert_eq!(d.len(), 1, "{:?}", c.diagnostics);
        assert!(d[0].message.contains("`ghost`"), "{}", d[0].message);
    }

    #[test]
    fn urls_as_upstream() {
        assert!(http_url("https://github.com/login/oauth/authorize"));
        assert!(http_url("http://localhost:8080/token"));
        for bad in [
            "htps://x",
            "https://",
            "github.com/x",
            "https:///path",
            "ftp://x",
        ] {
            assert!(!http_url(bad), "{bad}");
        }
    }
}
