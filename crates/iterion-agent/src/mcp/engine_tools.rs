//! The two per-run engine-tool listeners of seed step 18 — the ask-user
//! transport and the board transport — through which a `claude_code`
//! node (a CLI, in the container or on the host) reaches what the engine
//! serves on the host. Each is one HTTP listener per run, bound on the
//! run's gateway (loopback for a host run) only when the workflow needs
//! it (an interactive node; a node granted `board.*`), serving a
//! streamable-HTTP MCP server per node call:
//!
//! * ask-user: server `iterion` (upstream's name, so the model sees
//!   `mcp__iterion__ask_user`), one tool `ask_user {question}` answered
//!   with what the engine's [`AskHuman`] gives — the human's answer, or an
//!   error result telling the model to stop when the run pauses for one;
//! * board: server `iterion_board`, the board tools the node's
//!   capabilities unlock ([`crate::tools::board`]).
//!
//! A listener's token is minted when it starts, one per run and per
//! listener, and every request must carry it as `Authorization: Bearer`
//! (compared in constant time; anything else is 401). The CLI gets it only
//! through its exec env (`ITERION_ASK_USER_TOKEN`, `ITERION_BOARD_TOKEN`,
//! expanded by the CLI inside `--mcp-config`). Each node call is a
//! registration under an unguessable path segment, removed when the node
//! ends, so a question reaches the node that asked.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use iterion_core::agent::{AskHuman, AskReply};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::gateway::{Body, GATEWAY_HOST, GatewayGuard, accept_loop, bearer, bind, mint, status};

/// The env variable the CLI reads the ask-user listener's token from.
pub const TOKEN_ENV: &str = "ITERION_ASK_USER_TOKEN";
/// The env variable the CLI reads the board listener's token from.
pub const BOARD_TOKEN_ENV: &str = "ITERION_BOARD_TOKEN";
/// The MCP server name the CLI sees (upstream's).
pub const SERVER_NAME: &str = "iterion";
/// The tool's name on the CLI's wire.
pub const CLI_TOOL_NAME: &str = "mcp__iterion__ask_user";
/// What the model reads when the run pauses instead of answering.
pub const PAUSED_TEXT: &str = "ask_user has been escalated to the iterion runtime: the run pauses until a human answers. Stop now; this step runs again with the answer.";

type Service = StreamableHttpService<CallServer, LocalSessionManager>;

/// Which listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerKind {
    /// `ask_user`.
    AskUser,
    /// The board.
    Board,
}

impl ListenerKind {
    /// The env variable its token travels in.
    pub fn token_env(self) -> &'static str {
        match self {
            Self::AskUser => TOKEN_ENV,
            Self::Board => BOARD_TOKEN_ENV,
        }
    }

    /// The MCP server name the CLI sees.
    pub fn server_name(self) -> &'static str {
        match self {
            Self::AskUser => SERVER_NAME,
            Self::Board => crate::tools::board::SERVER,
        }
    }
}

/// What one node call is served.
#[derive(Clone)]
pub enum CallServer {
    /// Its questions.
    Ask(Arc<dyn AskHuman>),
    /// The board under its capabilities.
    Board(Arc<crate::tools::board::BoardStore>, Arc<Vec<String>>),
}

/// A run's ask-user or board listener.
pub struct EngineListener {
    kind: ListenerKind,
    port: u16,
    bind: IpAddr,
    token: String,
    calls: Mutex<HashMap<String, Service>>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for EngineListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineListener")
            .field("port", &self.port)
            .field("bind", &self.bind)
            .finish_non_exhaustive()
    }
}

impl EngineListener {
    /// Mint the run's token, bind on `address` (`freebind`: it may not
    /// exist yet) and serve.
    pub async fn start(
        kind: ListenerKind,
        address: IpAddr,
        freebind: bool,
    ) -> std::io::Result<(Arc<Self>, GatewayGuard)> {
        let listener = bind(SocketAddr::new(address, 0), freebind)?;
        let port = listener.local_addr()?.port();
        let cancel = CancellationToken::new();
        let me = Arc::new(Self {
            kind,
            port,
            bind: address,
            token: mint(),
            calls: Mutex::new(HashMap::new()),
            cancel: cancel.clone(),
        });
        let served = me.clone();
        tokio::spawn(accept_loop(listener, cancel.clone(), move |req| {
            let me = served.clone();
            async move { me.handle(req).await }
        }));
        Ok((me, GatewayGuard::new(cancel)))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Which listener it is.
    pub fn kind(&self) -> ListenerKind {
        self.kind
    }

    /// The run's token, for the CLI's exec env only.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Serve one node call `server`; its id, which the caller passes to
    /// [`Self::cli_server`] and [`Self::unregister`].
    pub fn register(&self, server: CallServer) -> String {
        let id = mint();
        let hosts = [
            GATEWAY_HOST.to_owned(),
            self.bind.to_string(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let mut config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
        config.cancellation_token = self.cancel.child_token();
        let handler = server;
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        if let Ok(mut c) = self.calls.lock() {
            c.insert(id.clone(), service);
        }
        id
    }

    /// The node call ended.
    pub fn unregister(&self, id: &str) {
        if let Ok(mut c) = self.calls.lock() {
            c.remove(id);
        }
    }

    /// The `--mcp-config` entry of call `id`: its endpoint as `host`
    /// reaches it, the bearer spelt as the CLI's `${ITERION_ASK_USER_TOKEN}`
    /// expansion (no token in argv).
    pub fn cli_server(&self, id: &str, host: &str) -> Value {
        serde_json::json!({
            "type": "http",
            "url": format!("http://{host}:{}/ask/{id}", self.port),
            "headers": {"Authorization": format!("Bearer ${{{}}}", self.kind.token_env())},
        })
    }

    async fn handle(&self, req: http::Request<hyper::body::Incoming>) -> http::Response<Body> {
        let Some(token) = bearer(&req) else {
            return status(401, "missing bearer token\n");
        };
        let same: bool = self.token.as_bytes().ct_eq(token.as_bytes()).into();
        if !same {
            return status(401, "not allowed\n");
        }
        let Some(id) = req.uri().path().strip_prefix("/ask/").map(str::to_owned) else {
            return status(404, "not found\n");
        };
        let service = self.calls.lock().ok().and_then(|c| c.get(&id).cloned());
        match service {
            Some(service) => service.handle(req).await,
            None => status(404, "no such call\n"),
        }
    }
}

/// The `ask_user` tool's input schema (upstream's).
pub fn input_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "description": "The clarifying question to ask the human user."
            }
        },
        "required": ["question"],
        "additionalProperties": false
    })
}

/// `ask_user` as the registry's launcher-side spec (claw's loop).
pub fn tool_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: "ask_user".to_owned(),
        description: DESCRIPTION.to_owned(),
        input_schema: input_schema(),
    }
}

/// The tool's description.
pub const DESCRIPTION: &str = "Ask the human running this workflow a clarifying question and wait for the answer. Use it when you need information, approval or guidance you cannot derive yourself.";

/// One call of `ask_user` as the model sees its result: the answer, or
/// an error text.
pub async fn answer(ask: &dyn AskHuman, input: &Value) -> Result<String, String> {
    let Some(question) = input
        .get("question")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
    else {
        return Err("ask_user needs a non-empty `question`".to_owned());
    };
    match ask.ask(question).await {
        AskReply::Answer(a) => Ok(a),
        AskReply::Paused => Err(PAUSED_TEXT.to_owned()),
        AskReply::Refused(why) => Err(why),
    }
}

impl rmcp::ServerHandler for CallServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        let specs = match self {
            Self::Ask(_) => vec![tool_spec()],
            Self::Board(_, caps) => crate::tools::board::specs(caps),
        };
        let tools = specs
            .into_iter()
            .map(|s| {
                let name = s.name.rsplit('.').next().unwrap_or(&s.name).to_owned();
                let schema = s.input_schema.as_object().cloned().unwrap_or_default();
                Tool::new(name, s.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let out = match self {
            Self::Ask(ask) if request.name == "ask_user" => answer(ask.as_ref(), &input).await,
            Self::Ask(_) => Err(format!("no tool {} here", request.name)),
            Self::Board(store, caps) => {
                let (store, caps, name) = (store.clone(), caps.clone(), request.name.to_string());
                tokio::task::spawn_blocking(move || store.call(&caps, &name, &input))
                    .await
                    .unwrap_or_else(|e| Err(format!("board call: {e}")))
            }
        };
        let result = match out {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
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

    struct Fixed;

    #[async_trait::async_trait]
    impl AskHuman for Fixed {
        async fn ask(&self, question: &str) -> AskReply {
            AskReply::Answer(format!("answer to {question}"))
        }
    }

    async fn post(
        client: &reqwest::Client,
        url: &str,
        bearer: Option<&str>,
        body: &Value,
        session: Option<&str>,
    ) -> reqwest::Response {
        let mut r = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(b) = bearer {
            r = r.header("authorization", format!("Bearer {b}"));
        }
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send().await.expect("send")
    }

    #[tokio::test]
    async fn only_the_run_token_reaches_a_registered_call() {
        let (l, guard) =
            EngineListener::start(ListenerKind::AskUser, IpAddr::from([127, 0, 0, 1]), false)
                .await
                .expect("listener");
        let id = l.register(CallServer::Ask(Arc::new(Fixed)));
        let entry = l.cli_server(&id, "127.0.0.1").to_string();
        assert!(!entry.contains(l.token()), "the token is not in the config");
        assert!(entry.contains("${ITERION_ASK_USER_TOKEN}"), "{entry}");
        let client = HttpSettings::from_env(&EnvSnapshot::new(), ResolverMode::System)
            .client()
            .expect("client");
        let url = format!("http://127.0.0.1:{}/ask/{id}", l.port());
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        });
        assert_eq!(post(&client, &url, None, &init, None).await.status(), 401);
        let wrong = "0".repeat(64);
        assert_eq!(
            post(&client, &url, Some(&wrong), &init, None)
                .await
                .status(),
            401
        );
        let other = format!("http://127.0.0.1:{}/ask/{}", l.port(), "f".repeat(64));
        assert_eq!(
            post(&client, &other, Some(l.token()), &init, None)
                .await
                .status(),
            404
        );
        // The real client answers through the tool.
        let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
            client.clone(),
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url.clone(),
            )
            .auth_header(l.token().to_owned()),
        );
        let service = rmcp::ServiceExt::serve((), transport)
            .await
            .expect("initialize");
        let tools = service.peer().list_all_tools().await.expect("tools/list");
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].name, "ask_user");
        let mut params = CallToolRequestParams::new("ask_user");
        params.arguments = serde_json::json!({"question": "which colour?"})
            .as_object()
            .cloned();
        let out = service.peer().call_tool(params).await.expect("call");
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains("answer to which colour?"), "{text}");
        let _ = service.cancel().await;
        l.unregister(&id);
        assert_eq!(
            post(&client, &url, Some(l.token()), &init, None)
                .await
                .status(),
            404
        );
        drop(guard);
    }
}
