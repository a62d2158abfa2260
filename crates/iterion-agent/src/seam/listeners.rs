//! The per-run listeners of seed step 18 as [`AgentBackends`] runs them:
//! which a run needs ([`seam::GatewayListeners`], before its sandbox
//! starts), and what one `claude_code` node gets of them — a grant on the
//! MCP listener, a registration on the ask-user and board listeners, the
//! CLI's `--mcp-config` and exec env — released when the node ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use iterion_core::agent::{self as seam, AgentRequest, McpServerSpec};
use iterion_core::id::RunId;

use super::AgentBackends;
use crate::backend::{BackendInputs, BackendName, resolve_backend};
use crate::claude_code::CliMcp;
use crate::error::AgentError;
use crate::mcp::engine_tools::{CallServer, EngineListener, ListenerKind};
use crate::mcp::listener::RunGateway;
use crate::task::AgentTask;

/// What a `claude_code` node holds on the run's listeners while it runs.
#[derive(Default)]
pub(super) struct CliLease {
    grant: Option<(Arc<RunGateway>, String)>,
    calls: Vec<(Arc<EngineListener>, String)>,
}

impl CliLease {
    pub(super) fn release(&self) {
        if let Some((gw, token)) = &self.grant {
            gw.revoke(token);
        }
        for (l, id) in &self.calls {
            l.unregister(id);
        }
    }
}

impl AgentBackends {
    /// A `claude_code` node's MCP servers: started now (a failure is the
    /// node's, typed), wildcards expanded, a token minted on the run's
    /// listener granting the tools its policy allows; and, on an
    /// interactive node, its `ask_user` on the run's ask-user listener;
    /// granted `board.*`, the board on the run's board listener.
    /// The CLI's config and env, and what to release when the node ends;
    /// `None` when it needs neither.
    pub(super) async fn cli_mcp(
        &self,
        request: &AgentRequest,
        task: &mut AgentTask,
        run_log: &Arc<dyn seam::RunLog>,
        sandboxed: bool,
        ask: Option<Arc<dyn seam::AskHuman>>,
    ) -> Result<Option<(CliMcp, CliLease)>, AgentError> {
        let servers = crate::mcp::referenced_servers(&task.tools, &request.mcp_servers)?;
        let board = seam::board_capabilities(&request.properties);
        if servers.is_empty() && ask.is_none() && board.is_empty() {
            return Ok(None);
        }
        let host = if sandboxed {
            crate::mcp::listener::GATEWAY_HOST.to_owned()
        } else {
            "127.0.0.1".to_owned()
        };
        let mut lease = CliLease::default();
        let mut env = BTreeMap::new();
        let mut config = serde_json::json!({ "mcpServers": {} });
        if !servers.is_empty() {
            let (gateway, token) = self
                .grant_servers(request, task, run_log, sandboxed, &servers)
                .await?;
            let owned: Vec<McpServerSpec> = servers.iter().map(|s| (*s).clone()).collect();
            config = gateway.cli_config(&owned, &host);
            env.insert(crate::mcp::listener::TOKEN_ENV.to_owned(), token.clone());
            lease.grant = Some((gateway, token));
        }
        let mut calls = Vec::new();
        if let Some(ask) = ask {
            if !task.tools.is_empty() && !task.tools.iter().any(|t| t == "ask_user") {
                task.tools.push("ask_user".to_owned());
            }
            calls.push((ListenerKind::AskUser, CallServer::Ask(ask)));
        }
        if !board.is_empty() {
            if !task.tools.is_empty() {
                task.tools
                    .push(format!("mcp.{}.*", crate::tools::board::SERVER));
            }
            calls.push((
                ListenerKind::Board,
                CallServer::Board(self.board.clone(), Arc::new(board)),
            ));
        }
        for (kind, server) in calls {
            let listener = self
                .engine_listener(&request.run_id, kind, sandboxed)
                .await?;
            let id = listener.register(server);
            if let Some(map) = config["mcpServers"].as_object_mut() {
                map.insert(
                    kind.server_name().to_owned(),
                    listener.cli_server(&id, &host),
                );
            }
            env.insert(kind.token_env().to_owned(), listener.token().to_owned());
            lease.calls.push((listener, id));
        }
        // The listeners are reached directly, never through the egress
        // proxy (which resolves names on the host, where the alias means
        // nothing).
        let direct = format!("localhost,127.0.0.1,{}", crate::mcp::listener::GATEWAY_HOST);
        env.insert("NO_PROXY".to_owned(), direct.clone());
        env.insert("no_proxy".to_owned(), direct);
        let mcp = CliMcp {
            config: config.to_string(),
            env,
        };
        Ok(Some((mcp, lease)))
    }

    /// Start `servers`, expand the node's wildcards and grant its allowed
    /// tools on the run's MCP listener (a host run's made here).
    async fn grant_servers(
        &self,
        request: &AgentRequest,
        task: &mut AgentTask,
        run_log: &Arc<dyn seam::RunLog>,
        sandboxed: bool,
        servers: &[&McpServerSpec],
    ) -> Result<(Arc<RunGateway>, String), AgentError> {
        let owned: Vec<McpServerSpec> = servers.iter().map(|s| (*s).clone()).collect();
        let hub = self.hub_for(&request.run_id, Some(run_log));
        hub.ensure(&owned).await?;
        task.tools = crate::mcp::expand_wildcards(&task.tools, &hub);
        let policy = task.policy();
        let allowed: Vec<String> = task
            .tools
            .iter()
            .filter(|t| {
                matches!(
                    crate::tools::classify(t),
                    Some(crate::tools::ToolClass::Mcp { .. })
                )
            })
            .map(|t| crate::tools::qualify(t))
            .filter(|t| policy.check(t).is_ok())
            .collect();
        let existing = self
            .gateways
            .lock()
            .ok()
            .and_then(|g| g.get(&request.run_id).map(|(gw, _)| gw.clone()));
        let gateway = match (existing, sandboxed) {
            (Some(gw), _) => gw,
            (None, true) => {
                return Err(AgentError::McpServerFailed {
                    server: owned[0].name.clone(),
                    reason: "the run's sandbox started without an MCP listener".to_owned(),
                });
            }
            (None, false) => {
                // An unsandboxed CLI is a host process: loopback.
                let (gw, guard) = RunGateway::start(
                    hub.clone(),
                    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                    false,
                )
                .await
                .map_err(|e| AgentError::McpServerFailed {
                    server: owned[0].name.clone(),
                    reason: format!("cannot start the run's MCP listener: {e}"),
                })?;
                if let Ok(mut g) = self.gateways.lock() {
                    g.insert(request.run_id.clone(), (gw.clone(), Some(guard)));
                }
                gw
            }
        };
        let token = gateway.grant(&owned, &allowed);
        Ok((gateway, token))
    }

    /// The run's `kind` listener: the booter's in a sandbox (started
    /// before the container, seed step 18), made on loopback for a host
    /// run.
    async fn engine_listener(
        &self,
        run: &RunId,
        kind: ListenerKind,
        sandboxed: bool,
    ) -> Result<Arc<EngineListener>, AgentError> {
        let key = (run.clone(), kind);
        let existing = self
            .engine_listeners
            .lock()
            .ok()
            .and_then(|g| g.get(&key).map(|(l, _)| l.clone()));
        let failed = |reason: String| AgentError::McpServerFailed {
            server: kind.server_name().to_owned(),
            reason,
        };
        match (existing, sandboxed) {
            (Some(l), _) => Ok(l),
            (None, true) => Err(failed(format!(
                "the run's sandbox started without its {} listener",
                kind.server_name()
            ))),
            (None, false) => {
                let (l, guard) = EngineListener::start(
                    kind,
                    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                    false,
                )
                .await
                .map_err(|e| failed(format!("cannot start the run's listener: {e}")))?;
                if let Ok(mut g) = self.engine_listeners.lock() {
                    g.insert(key, (l.clone(), Some(guard)));
                }
                Ok(l)
            }
        }
    }
}

#[async_trait]
impl seam::GatewayListeners for AgentBackends {
    async fn start(
        &self,
        run: &RunId,
        needs: &seam::ListenerNeeds,
        address: std::net::IpAddr,
        freebind: bool,
    ) -> Result<Option<seam::GatewayHandle>, String> {
        // Only a CLI in the box needs them: claw calls come back over the
        // runner channel.
        let is_cli = |n: &seam::ListenerNode| {
            resolve_backend(
                BackendInputs {
                    node: n.backend.as_deref(),
                    workflow_default: needs.default_backend.as_deref(),
                },
                &self.env,
                &self.facts,
            )
            .is_ok_and(|r| r.name == BackendName::ClaudeCode)
        };
        let wants_mcp = needs
            .nodes
            .iter()
            .any(|n| !n.mcp_servers.is_empty() && is_cli(n));
        let wants_ask = needs.nodes.iter().any(|n| n.interactive && is_cli(n));
        let wants_board = needs.nodes.iter().any(|n| !n.board.is_empty() && is_cli(n));
        let mut ports = Vec::new();
        let mut guards = Vec::new();
        if wants_mcp {
            let hub = self.hub_for(run, None);
            let (gw, guard) = RunGateway::start(hub, address, freebind)
                .await
                .map_err(|e| format!("cannot start the run's MCP listener on {address}: {e}"))?;
            ports.push(gw.port());
            guards.push(guard);
            if let Ok(mut g) = self.gateways.lock() {
                g.insert(run.clone(), (gw, None));
            }
        }
        let kinds = [
            (wants_ask, ListenerKind::AskUser),
            (wants_board, ListenerKind::Board),
        ];
        for (_, kind) in kinds.into_iter().filter(|(w, _)| *w) {
            let (l, guard) = EngineListener::start(kind, address, freebind)
                .await
                .map_err(|e| {
                    format!(
                        "cannot start the run's {} listener on {address}: {e}",
                        kind.server_name()
                    )
                })?;
            ports.push(l.port());
            guards.push(guard);
            if let Ok(mut g) = self.engine_listeners.lock() {
                g.insert((run.clone(), kind), (l, None));
            }
        }
        if ports.is_empty() {
            return Ok(None);
        }
        let stops = guards
            .into_iter()
            .map(|g| Box::new(move || drop(g)) as Box<dyn FnOnce() + Send + Sync>)
            .collect();
        Ok(Some(seam::GatewayHandle::new(ports, stops)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvSnapshot;
    use seam::GatewayListeners;

    fn node(backend: &str, interactive: bool, board: &[&str]) -> seam::ListenerNode {
        seam::ListenerNode {
            backend: Some(backend.to_owned()),
            mcp_servers: Vec::new(),
            interactive,
            board: board.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    async fn ports(needs: seam::ListenerNeeds) -> Option<Vec<u16>> {
        let agents = AgentBackends::new(EnvSnapshot::new(), None);
        let run = RunId::generate();
        let handle = agents
            .start(&run, &needs, std::net::IpAddr::from([127, 0, 0, 1]), false)
            .await
            .expect("start");
        handle.map(|h| h.ports.clone())
    }

    #[tokio::test]
    async fn listeners_are_bound_only_for_what_a_cli_node_needs() {
        let needs = |nodes| seam::ListenerNeeds {
            default_backend: None,
            nodes,
        };
        // Nothing interactive, no board: nothing is bound.
        assert_eq!(
            ports(needs(vec![node("claude_code", false, &[])])).await,
            None
        );
        // claw asks over the runner channel: no listener either.
        assert_eq!(
            ports(needs(vec![node("claw", true, &["board.read"])])).await,
            None
        );
        let one = ports(needs(vec![node("claude_code", true, &[])])).await;
        assert_eq!(one.map(|p| p.len()), Some(1), "the ask-user listener");
        let two = ports(needs(vec![
            node("claude_code", true, &[]),
            node("claude_code", false, &["board.create"]),
        ]))
        .await
        .expect("two listeners");
        assert_eq!(two.len(), 2);
        assert_ne!(two[0], two[1]);
    }
}
