//! `tamp mcp`: the model reads back what was archived, through the Model Context Protocol.
//!
//! Two tools, over the official SDK (`rmcp`):
//!
//! - `recall(page, offset?)`: a page's messages as readable text ([`crate::recall::recall`]),
//!   in parts of [`RECALL_CHARS`](crate::recall::RECALL_CHARS) characters;
//! - `search(query, limit?)`: full-text search over the archived messages
//!   ([`crate::recall::search`]), hits with their page id and a snippet.
//!
//! Served over stdio by `tamp mcp --config chain.toml` (a local agent starts it; it reads its
//! chain file's store whole) and over Streamable HTTP by `tamp proxy` at `/tamp/mcp`, where
//! each call reads only the pages of the credential it carries ([`Reader::ByCredential`]).

use std::sync::Arc;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ErrorData;
use serde_json::json;

use crate::recall::{self, RecallError};
use crate::store::search::{owner_of_credential, PageSearch, Scope};
use crate::store::PageStore;

/// The tool that reads a page.
pub const RECALL: &str = "recall";
/// The tool that searches the archive.
pub const SEARCH: &str = "search";

/// Whose pages a server's callers read.
#[derive(Clone)]
pub enum Reader {
    /// Every page of the store: a local server, started by the agent's own user.
    Local,
    /// The pages recorded for the credential each call carries (see [`credential`]); `token`
    /// is set when the server's own bearer token takes `Authorization`, so the credential
    /// must come as `x-api-key`.
    ByCredential { own_token: bool },
}

/// The MCP server over one store.
#[derive(Clone)]
pub struct RecallServer {
    pages: Arc<dyn PageStore>,
    search: Arc<dyn PageSearch>,
    reader: Reader,
}

impl RecallServer {
    pub fn new(pages: Arc<dyn PageStore>, search: Arc<dyn PageSearch>, reader: Reader) -> Self {
        RecallServer {
            pages,
            search,
            reader,
        }
    }

    /// The owner a call reads as: none for a local server (it reads every page), else the
    /// keyed hash of the credential its HTTP request carries; an error for the model when it
    /// carries none.
    async fn owner(&self, context: &RequestContext<RoleServer>) -> Result<Option<String>, String> {
        let Reader::ByCredential { own_token } = self.reader else {
            return Ok(None);
        };
        let headers = context
            .extensions
            .get::<axum::http::request::Parts>()
            .map(|parts| &parts.headers);
        let Some(credential) = headers.and_then(|h| credential(h, own_token)) else {
            return Err(format!(
                "tamp reads back only the pages of the API key your agent's requests carry: \
                 send the same key to this server as {}",
                if own_token {
                    "the x-api-key header (Authorization carries the proxy's token)"
                } else {
                    "the x-api-key header or Authorization: Bearer"
                }
            ));
        };
        let key = self
            .search
            .owner_key()
            .await
            .map_err(|e| format!("the page store cannot be read: {e}"))?;
        Ok(Some(owner_of_credential(&key, credential)))
    }

    async fn call(&self, name: &str, args: &JsonObject, owner: Option<&str>) -> CallToolResult {
        let scope = owner.map_or(Scope::All, Scope::Owner);
        let text = match name {
            RECALL => {
                let Some(page) = args.get("page").and_then(|p| p.as_str()) else {
                    return error_result("recall needs `page`: a page id such as pg_1a2b3c4d5e6f");
                };
                let offset = match args.get("offset") {
                    None | Some(serde_json::Value::Null) => 0,
                    Some(v) => match v.as_u64() {
                        Some(n) => n as usize,
                        None => {
                            return error_result("`offset` must be a whole number of characters")
                        }
                    },
                };
                recall::recall(&*self.pages, &*self.search, scope, page, offset)
                    .await
                    .map(|recalled| recalled.text)
            }
            SEARCH => {
                let Some(query) = args.get("query").and_then(|q| q.as_str()) else {
                    return error_result("search needs `query`: the words to find");
                };
                let limit = args.get("limit").and_then(|l| l.as_u64()).unwrap_or(10) as usize;
                recall::search(&*self.search, scope, query, limit)
                    .await
                    .map(|hits| recall::hits_text(query, &hits))
            }
            other => {
                return error_result(&format!("no tool {other}; the tools are recall and search"))
            }
        };
        match text {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(RecallError::Store(e)) => {
                tracing::warn!("mcp {name}: {e}");
                error_result(&format!("the page store cannot be read now: {e}"))
            }
            Err(e) => error_result(&e.to_string()),
        }
    }
}

fn error_result(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.to_string())])
}

/// The credential a request carries: its `x-api-key`, else its `Authorization: Bearer` value
/// (unless `own_token`, when `Authorization` holds the server's own token). The proxy names a
/// page's owner by the same rule, so an agent's key reads what its requests archived.
pub fn credential(headers: &axum::http::HeaderMap, own_token: bool) -> Option<&str> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    value("x-api-key").or_else(|| {
        (!own_token)
            .then(|| {
                value("authorization")?
                    .strip_prefix("Bearer ")
                    .map(str::trim)
            })
            .flatten()
            .filter(|v| !v.is_empty())
    })
}

/// The tools, as `tools/list` gives them.
fn tools() -> Vec<Tool> {
    let schema = |value: serde_json::Value| -> Arc<JsonObject> {
        match value {
            serde_json::Value::Object(map) => Arc::new(map),
            _ => unreachable!("tool schemas are objects"),
        }
    };
    vec![
        Tool::new(
            RECALL,
            "Read back messages that tamp archived when it compacted this conversation. A \
             cleared tool output (<tamp-cleared page=\"pg_...\">) or a summary \
             (<tamp-summary page=\"pg_...\">) names the page that holds the originals: pass \
             that id. A long page comes in parts: pass the offset the previous part names.",
            schema(json!({
                "type": "object",
                "properties": {
                    "page": {"type": "string", "description": "The page id, e.g. pg_1a2b3c4d5e6f7a8b"},
                    "offset": {"type": "integer", "minimum": 0, "description": "Where to start, in characters (0: the beginning)"}
                },
                "required": ["page"]
            })),
        ),
        Tool::new(
            SEARCH,
            "Find archived messages by their words (every word must match; codes, paths and \
             identifiers are words). Returns page ids with a snippet each; recall a page to \
             read it whole.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The words to find"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": recall::MAX_HITS, "description": "At most this many pages (default 10)"}
                },
                "required": ["query"]
            })),
        ),
    ]
}

impl ServerHandler for RecallServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tamp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "tamp compacts this conversation: old tool outputs are cleared and old turns \
                 summarized, each original kept in a page. `recall` reads a page back by the \
                 id its placeholder or summary names; `search` finds pages by their words.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let owner = match self.owner(&context).await {
            Ok(owner) => owner,
            Err(message) => return Ok(error_result(&message).into()),
        };
        let args = request.arguments.unwrap_or_default();
        Ok(self
            .call(&request.name, &args, owner.as_deref())
            .await
            .into())
    }
}

/// Serves `server` over stdin and stdout until the client closes them.
pub async fn serve_stdio(server: RecallServer) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// The Streamable HTTP service [`http_service`] makes.
pub type HttpService = rmcp::transport::streamable_http_server::StreamableHttpService<
    RecallServer,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
>;

/// `server` as a Streamable HTTP service, a tower service the proxy's router mounts.
///
/// Stateless, answering each POST with plain JSON: two tools that read a store need no
/// session, no call outlives its request (so a shutdown never waits on an open stream), and
/// any replica answers any call. A client's GET for a stream of its own is refused with 405,
/// as the transport allows.
pub fn http_service(server: RecallServer) -> HttpService {
    use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    // The proxy's access layer has checked the Host already (loopback, the listen address,
    // `[http] allowed_hosts`): the SDK's own check would refuse the names it allowed.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    HttpService::new(move || Ok(server.clone()), Default::default(), config)
}
