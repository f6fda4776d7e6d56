//! The MCP face of the shop (rmcp is kept behind this one module): `tools/list` with the 13 UCP
//! tools and `tools/call`, which records the call, runs it under the state lock and answers
//! with the UCP document in `structuredContent` and the same JSON as text content.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, ErrorData,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::shop::{self, TOOLS};
use crate::store::{Outcome, Store};

#[derive(Clone)]
pub struct FixtureShop {
    store: Arc<Store>,
}

impl FixtureShop {
    pub fn new(store: Store) -> Self {
        Self {
            store: Arc::new(store),
        }
    }
}

/// Serves the shop on stdin/stdout until the client goes away.
pub async fn serve_stdio(store: Store) -> anyhow::Result<()> {
    let service = FixtureShop::new(store)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}

/// How the shop is served over HTTP.
pub struct HttpOptions {
    /// A loopback address (checked by the caller); port 0 picks a free port.
    pub listen: std::net::SocketAddr,
    /// When set, every request must carry `Authorization: Bearer <token>` (401 otherwise).
    pub token: Option<String>,
    /// Where to write the bound address (`127.0.0.1:PORT`), for tests that run in parallel.
    pub port_file: Option<std::path::PathBuf>,
}

/// Serves the shop over MCP Streamable HTTP at `/mcp` until the process is stopped. rmcp's own
/// server transport keeps one session per `initialize` (`Mcp-Session-Id`), answers requests with
/// event streams, and forgets every session when the process ends, so a restarted fixture answers
/// 404 to an old session id, as a real shop whose sessions expired would.
pub async fn serve_http(store: Store, options: HttpOptions) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let shop = FixtureShop::new(store);
    let service = StreamableHttpService::new(
        move || Ok(shop.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let token = options.token.map(|t| Arc::new(format!("Bearer {t}")));
    let router =
        axum::Router::new()
            .route_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let token = token.clone();
                    async move {
                        if let Some(expected) = token {
                            let given = request
                                .headers()
                                .get(axum::http::header::AUTHORIZATION)
                                .map(|v| v.as_bytes());
                            if given != Some(expected.as_bytes()) {
                                return axum::response::Response::builder()
                                    .status(axum::http::StatusCode::UNAUTHORIZED)
                                    .header(axum::http::header::WWW_AUTHENTICATE, "Bearer")
                                    .body(axum::body::Body::from("missing or wrong bearer token"))
                                    .unwrap_or_default();
                            }
                        }
                        next.run(request).await
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    let bound = listener.local_addr()?;
    if let Some(path) = &options.port_file {
        // Written whole, then renamed, so a test polling the file never reads half an address.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, bound.to_string())?;
        std::fs::rename(&partial, path)?;
    }
    eprintln!("cajaguard-fixture-shop: listening on http://{bound}/mcp");
    // Each event goes out as written. Without this, Nagle held an answer's event (a second small
    // write after the stream's first) until the client acknowledged the first, and a client on a
    // kept-alive connection acknowledges late (delayed ACK): 40 ms per call.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {e}");
        }
    });
    axum::serve(listener, router).await?;
    Ok(())
}

fn internal(message: String) -> ErrorData {
    ErrorData::new(ErrorCode::INTERNAL_ERROR, message, None)
}

impl ServerHandler for FixtureShop {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "cajaguard-fixture-shop",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "A fixture UCP shop for tests: four merchants, test payment tokens only.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        let version = serde_json::to_value(&result.protocol_version).unwrap_or(Value::Null);
        let client = serde_json::to_value(&request.client_info).unwrap_or(Value::Null);
        let store = Arc::clone(&self.store);
        let recorded = tokio::task::spawn_blocking(move || {
            store.record_session(version.as_str().unwrap_or("?"), &client)
        })
        .await;
        match recorded {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("could not record the session: {e}"),
            Err(e) => tracing::warn!("could not record the session: {e}"),
        }
        Ok(result)
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let store = Arc::clone(&self.store);
        let tool = request.name.to_string();
        let arguments = request.arguments;
        tracing::info!(tool = %tool, "tools/call");
        let outcome = tokio::task::spawn_blocking(move || {
            store.call(&tool, arguments.as_ref(), |state| {
                shop::handle(state, &tool, arguments.as_ref())
            })
        })
        .await
        .map_err(|e| internal(format!("the shop's worker failed: {e}")))?
        .map_err(|e| internal(e.to_string()))?;
        match outcome {
            Outcome::Result {
                structured,
                is_error,
            } => {
                let text = structured.to_string();
                let mut result = if is_error {
                    CallToolResult::error(vec![ContentBlock::text(text)])
                } else {
                    CallToolResult::success(vec![ContentBlock::text(text)])
                };
                result.structured_content = Some(structured);
                Ok(result.into())
            }
            Outcome::RpcError {
                code,
                message,
                data,
            } => Err(ErrorData::new(ErrorCode(code), message, data)),
        }
    }
}

/// The 13 UCP tools with input schemas built from the openrpc params.
pub fn tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|&(name, needs_key)| {
            let (description, params) = describe(name);
            let mut properties = Map::new();
            let mut required = vec![json!("meta")];
            properties.insert("meta".into(), meta_schema(needs_key));
            for (param, schema) in params {
                properties.insert(param.to_owned(), schema);
                required.push(json!(param));
            }
            let schema = json!({
                "type": "object",
                "properties": properties,
                "required": required,
            });
            let schema = match schema {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            Tool::new(name, description, schema)
        })
        .collect()
}

fn meta_schema(needs_key: bool) -> Value {
    let required = if needs_key {
        json!(["ucp-agent", "idempotency-key"])
    } else {
        json!(["ucp-agent"])
    };
    json!({
        "type": "object",
        "description": "Request metadata.",
        "required": required,
        "additionalProperties": true,
        "properties": {
            "ucp-agent": {
                "type": "object",
                "description": "Platform agent identification. Maps to HTTP UCP-Agent header.",
                "required": ["profile"],
                "properties": {"profile": {"type": "string", "format": "uri",
                    "description": "URL to the platform's UCP profile document."}},
            },
            "idempotency-key": {"type": "string", "format": "uuid",
                "description": "Unique key for retry safety. Maps to HTTP Idempotency-Key header."},
        },
    })
}

fn id_schema(what: &str) -> Value {
    json!({"type": "string", "description": format!("The {what} id.")})
}

fn line_items_schema() -> Value {
    json!({
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": ["item", "quantity"],
            "properties": {
                "id": {"type": "string"},
                "item": {"type": "object", "required": ["id"],
                    "properties": {"id": {"type": "string", "description": "Product or variant id."}}},
                "quantity": {"type": "integer", "minimum": 1},
            },
        },
    })
}

fn payment_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"instruments": {"type": "array", "items": {
            "type": "object",
            "required": ["id", "handler_id", "type"],
            "additionalProperties": true,
            "properties": {
                "id": {"type": "string"},
                "handler_id": {"type": "string"},
                "type": {"type": "string"},
                "selected": {"type": "boolean"},
                "credential": {"type": "object", "required": ["type"], "additionalProperties": true,
                    "properties": {"type": {"type": "string"}, "token": {"type": "string"}}},
            },
        }}},
    })
}

fn checkout_schema(op: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    if op != "complete" {
        properties.insert("line_items".into(), line_items_schema());
        properties.insert("buyer".into(), json!({"type": "object"}));
        properties.insert("context".into(), json!({"type": "object"}));
        required.push(json!("line_items"));
    } else {
        required.push(json!("payment"));
    }
    if op == "create" {
        properties.insert("cart_id".into(), json!({"type": "string"}));
    }
    properties.insert("payment".into(), payment_schema());
    properties.insert("signals".into(), json!({"type": "object"}));
    properties.insert("attribution".into(), json!({"type": "object"}));
    json!({
        "type": "object",
        "description": "Checkout fields the platform may send for this operation (UCP checkout.json).",
        "additionalProperties": true,
        "properties": properties,
        "required": required,
    })
}

fn cart_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": true,
        "required": ["line_items"],
        "properties": {"line_items": line_items_schema(), "buyer": {"type": "object"},
            "context": {"type": "object"}},
    })
}

fn describe(name: &str) -> (&'static str, Vec<(&'static str, Value)>) {
    match name {
        "create_checkout" => (
            "Create a new checkout session.",
            vec![("checkout", checkout_schema("create"))],
        ),
        "get_checkout" => ("Get checkout.", vec![("id", id_schema("checkout"))]),
        "update_checkout" => (
            "Update checkout (a full replacement of line items, buyer and payment).",
            vec![
                ("id", id_schema("checkout")),
                ("checkout", checkout_schema("update")),
            ],
        ),
        "complete_checkout" => (
            "Complete checkout and place order.",
            vec![
                ("id", id_schema("checkout")),
                ("checkout", checkout_schema("complete")),
            ],
        ),
        "cancel_checkout" => ("Cancel checkout.", vec![("id", id_schema("checkout"))]),
        "create_cart" => ("Create a new cart session.", vec![("cart", cart_schema())]),
        "get_cart" => ("Get cart.", vec![("id", id_schema("cart"))]),
        "update_cart" => (
            "Update cart.",
            vec![("id", id_schema("cart")), ("cart", cart_schema())],
        ),
        "cancel_cart" => ("Cancel cart.", vec![("id", id_schema("cart"))]),
        "search_catalog" => (
            "Search for products using query text, filters, and pagination.",
            vec![(
                "catalog",
                json!({"type": "object", "additionalProperties": true, "properties": {
                    "query": {"type": "string"}, "filters": {"type": "object"},
                    "pagination": {"type": "object", "properties": {
                        "cursor": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}}}}),
            )],
        ),
        "lookup_catalog" => (
            "Batch lookup products or variants by identifier.",
            vec![(
                "catalog",
                json!({"type": "object", "additionalProperties": true, "required": ["ids"],
                    "properties": {"ids": {"type": "array", "minItems": 1, "items": {"type": "string"}}}}),
            )],
        ),
        "get_product" => (
            "Retrieve complete product detail by identifier.",
            vec![(
                "catalog",
                json!({"type": "object", "additionalProperties": true, "required": ["id"],
                    "properties": {"id": {"type": "string"}}}),
            )],
        ),
        "get_order" => (
            "Get the current state of an order.",
            vec![("id", id_schema("order"))],
        ),
        _ => ("", Vec::new()),
    }
}
