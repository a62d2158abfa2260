//! The per-run MCP listener (seed step 18): how a `claude_code` node —
//! a CLI inside the container — uses the run's MCP servers, which stay on
//! the host. One HTTP listener per run, bound on the run's gateway (the
//! address the driver gave the proxy; the firewall admits its port for
//! that run only), serves each server at `/mcp/<server>` as a
//! streamable-HTTP MCP endpoint (rmcp's server) whose tools are the
//! hub's: `tools/list` starts the server lazily like any node, `tools/call`
//! is the hub's call.
//!
//! Every request carries `Authorization: Bearer <token>`; a token is
//! minted per node (a [`Grant`]), names the tools that node may call (its
//! `tools:` under its policy), and is revoked when the node ends. The CLI
//! gets the token through its exec env (`ITERION_MCP_TOKEN`, expanded by
//! the CLI inside `--mcp-config`): never argv, logs or events. A token is
//! compared in constant time; a request without a valid one is 401.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use iterion_core::agent::McpServerSpec;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::McpHub;
use super::gateway::{Body, accept_loop, bearer, bind, mint, status};
pub use super::gateway::{GATEWAY_HOST, GatewayGuard};

/// The env variable the CLI reads its token from.
pub const TOKEN_ENV: &str = "ITERION_MCP_TOKEN";

type Service = StreamableHttpService<HubServer, LocalSessionManager>;

/// One node's access: the servers and the tools (qualified names) it may
/// call, and one MCP endpoint per server.
struct Grant {
    token: String,
    services: HashMap<String, Service>,
}

/// A run's listener.
pub struct RunGateway {
    port: u16,
    bind: IpAddr,
    hub: Arc<McpHub>,
    grants: Mutex<Vec<Grant>>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for RunGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunGateway")
            .field("port", &self.port)
            .field("bind", &self.bind)
            .finish_non_exhaustive()
    }
}

impl RunGateway {
    /// Bind on `address` (`freebind`: it may not exist yet) and serve.
    pub async fn start(
        hub: Arc<McpHub>,
        address: IpAddr,
        freebind: bool,
    ) -> std::io::Result<(Arc<Self>, GatewayGuard)> {
        let listener = bind(SocketAddr::new(address, 0), freebind)?;
        let port = listener.local_addr()?.port();
        let cancel = CancellationToken::new();
        let gw = Arc::new(Self {
            port,
            bind: address,
            hub,
            grants: Mutex::new(Vec::new()),
            cancel: cancel.clone(),
        });
        let served = gw.clone();
        tokio::spawn(accept_loop(listener, cancel.clone(), move |req| {
            let gw = served.clone();
            async move { handle(&gw, req).await }
        }));
        Ok((gw, GatewayGuard::new(cancel)))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Mint a token for a node allowed `tools` (qualified `mcp.<s>.<t>`)
    /// of `servers`. The caller revokes it when the node ends.
    pub fn grant(&self, servers: &[McpServerSpec], tools: &[String]) -> String {
        let token = mint();
        let allowed: Arc<Vec<String>> = Arc::new(tools.to_vec());
        let hosts = [
            GATEWAY_HOST.to_owned(),
            self.bind.to_string(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let services = servers
            .iter()
            .map(|spec| {
                let handler = HubServer {
                    hub: self.hub.clone(),
                    spec: spec.clone(),
                    allowed: allowed.clone(),
                };
                let mut config =
                    StreamableHttpServerConfig::default().with_allowed_hosts(hosts.clone());
                config.cancellation_token = self.cancel.child_token();
                let service = StreamableHttpService::new(
                    move || Ok(handler.clone()),
                    Arc::new(LocalSessionManager::default()),
                    config,
                );
                (spec.name.clone(), service)
            })
            .collect();
        if let Ok(mut g) = self.grants.lock() {
            g.push(Grant {
                token: token.clone(),
                services,
            });
        }
        token
    }

    /// Revoke a node's token.
    pub fn revoke(&self, token: &str) {
        if let Ok(mut g) = self.grants.lock() {
            g.retain(|x| x.token != token);
        }
    }

    /// The `--mcp-config` document of `servers`: each server's endpoint,
    /// its bearer header spelt as the CLI's `${ITERION_MCP_TOKEN}`
    /// expansion (no token in argv).
    /// `host` is how the CLI reaches the listener: [`GATEWAY_HOST`] from a
    /// container, the bound address from the host.
    pub fn cli_config(&self, servers: &[McpServerSpec], host: &str) -> Value {
        let mut map = serde_json::Map::new();
        for s in servers {
            map.insert(
                s.name.clone(),
                serde_json::json!({
                    "type": "http",
                    "url": format!("http://{host}:{}/mcp/{}", self.port, s.name),
                    "headers": {"Authorization": format!("Bearer ${{{TOKEN_ENV}}}")},
                }),
            );
        }
        serde_json::json!({ "mcpServers": map })
    }

    fn service_for(&self, token: &str, server: &str) -> Option<Service> {
        let grants = self.grants.lock().ok()?;
        // Every grant is compared, in constant time each.
        let mut found = None;
        for g in grants.iter() {
            let same: bool = g.token.as_bytes().ct_eq(token.as_bytes()).into();
            if same {
                found = g.services.get(server).cloned();
            }
        }
        found
    }
}

async fn handle(
    gw: &RunGateway,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<Body> {
    let Some(token) = bearer(&req) else {
        return status(401, "missing bearer token\n");
    };
    let Some(server) = req.uri().path().strip_prefix("/mcp/").map(str::to_owned) else {
        return status(404, "not found\n");
    };
    match gw.service_for(&token, &server) {
        Some(service) => service.handle(req).await,
        None => status(401, "not allowed\n"),
    }
}

/// One server of the hub as an MCP endpoint, for one grant.
#[derive(Clone)]
struct HubServer {
    hub: Arc<McpHub>,
    spec: McpServerSpec,
    /// Qualified names the grant's node may call.
    allowed: Arc<Vec<String>>,
}

impl HubServer {
    fn allows(&self, tool: &str) -> bool {
        let q = format!("mcp.{}.{tool}", self.spec.name);
        self.allowed.iter().any(|a| a == &q)
    }
}

impl rmcp::ServerHandler for HubServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        self.hub
            .ensure(std::slice::from_ref(&self.spec))
            .await
            .map_err(|e| rmcp::ErrorData::internal_error(format!("{e} ({})", e.code()), None))?;
        let tools = self
            .hub
            .tools(&self.spec.name)
            .into_iter()
            .filter(|t| self.allows(&t.name))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let tool = request.name.to_string();
        if !self.allows(&tool) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "mcp.{}.{tool} is not allowed for this node",
                self.spec.name
            ))])
            .into());
        }
        let input = Value::Object(request.arguments.unwrap_or_default());
        // The server's answer as it gave it (a tool with an output schema
        // owes its structured content to the CLI).
        let result = match self.hub.call_raw(&self.spec.name, &tool, &input).await {
            Ok(r) => r,
            Err(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvSnapshot;
    use crate::http::{HttpSettings, ResolverMode};
    use iterion_core::RunId;
    use iterion_core::agent::McpTransport;

    #[tokio::test]
    async fn only_a_granted_token_reaches_only_its_servers() {
        let hub = Arc::new(McpHub::new(
            RunId::generate(),
            EnvSnapshot::new(),
            None,
            Arc::new(super::super::NoLog),
        ));
        let spec = |name: &str| McpServerSpec {
            name: name.to_owned(),
            transport: McpTransport::Stdio {
                command: "/nonexistent".to_owned(),
                args: Vec::new(),
                env: Default::default(),
            },
        };
        let (gw, guard) = RunGateway::start(hub, IpAddr::from([127, 0, 0, 1]), false)
            .await
            .expect("listener");
        let token = gw.grant(&[spec("a")], &["mcp.a.x".to_owned()]);
        let config = gw.cli_config(&[spec("a")], "127.0.0.1");
        let text = config.to_string();
        assert!(!text.contains(&token), "the token is not in the CLI config");
        assert!(text.contains("${ITERION_MCP_TOKEN}"), "{text}");
        let client = HttpSettings::from_env(&EnvSnapshot::new(), ResolverMode::System)
            .client()
            .expect("client");
        let url = |server: &str| format!("http://127.0.0.1:{}/mcp/{server}", gw.port());
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        });
        let post = |server: &str, bearer: Option<String>| {
            let mut r = client
                .post(url(server))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(init.to_string());
            if let Some(b) = bearer {
                r = r.header("authorization", format!("Bearer {b}"));
            }
            r.send()
        };
        assert_eq!(post("a", None).await.expect("send").status(), 401);
        assert_eq!(
            post("a", Some("0".repeat(64)))
                .await
                .expect("send")
                .status(),
            401
        );
        assert_eq!(
            post("b", Some(token.clone())).await.expect("send").status(),
            401
        );
        let ok = post("a", Some(token.clone())).await.expect("send");
        assert_eq!(ok.status(), 200);
        gw.revoke(&token);
        assert_eq!(
            post("a", Some(token.clone())).await.expect("send").status(),
            401
        );
        drop(guard);
    }
}
