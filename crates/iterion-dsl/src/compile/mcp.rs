//! MCP declarations as upstream checks them: an `mcp_server` block (its
//! properties, `transport:` word E020, the transport's required and
//! forbidden fields C025, the `auth:` block's properties E012 and its
//! oauth2 requirements C038), a Playwright server under a sandbox whose
//! image ships no browser (C060), and the `mcp:` (servers a node or the
//! workflow uses) and `memory:` sub-blocks' properties (E012). Owns no
//! reference resolution between nodes and servers.

use crate::diag::{Severity, codes};
use crate::ir::Pos;
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

/// Check one `mcp_server NAME:` block.
pub(crate) fn server(name: &str, line: &Line, pos: Pos, ctx: &mut Ctx<'_>) -> ServerSummary {
    let props = ctx.props(&line.children, Some(MCP_SERVER), "mcp_server");
    let get = |k: &str| props.iter().find(|p| p.key == k);
    let text = |k: &str| get(k).and_then(Prop::text).filter(|t| !t.is_empty());
    let command = text("command").unwrap_or_default().to_ascii_lowercase();
    let npx_playwright = command == "npx"
        && matches!(get("args").and_then(|p| p.value.as_ref()), Some(PValue::List(l))
            if l.iter().any(|(a, _)| a.text().is_some_and(|t| t.to_ascii_lowercase().contains("@playwright/mcp"))));
    let summary = ServerSummary {
        name: name.to_owned(),
        pos,
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
