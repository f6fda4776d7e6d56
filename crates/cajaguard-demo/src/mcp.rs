//! The demo's MCP client (rmcp is kept behind this one module): starts the proxy (or the
//! fixture shop) as a child process and calls tools on it.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one tool call came back with.
pub enum Reply {
    /// A tool result: `structuredContent`, `isError`, and `_meta.cajaguard` when the proxy added it.
    Result {
        structured: Value,
        is_error: bool,
        cajaguard: Option<Value>,
    },
    /// A JSON-RPC error (from the shop, passed back unchanged by the proxy).
    RpcError { code: i32, message: String },
}

pub struct Session {
    client: RunningService<RoleClient, ()>,
}

impl Session {
    /// Starts `program args...` and initializes an MCP session with it over stdio.
    pub async fn start(program: &Path, args: &[String]) -> Result<Self> {
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        let transport = TokioChildProcess::new(command)
            .with_context(|| format!("cannot start {}", program.display()))?;
        let client = tokio::time::timeout(CALL_TIMEOUT, ().serve(transport))
            .await
            .with_context(|| format!("{} did not answer initialize in time", program.display()))?
            .with_context(|| format!("MCP handshake with {} failed", program.display()))?;
        Ok(Self { client })
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Reply> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let answer = tokio::time::timeout(CALL_TIMEOUT, self.client.call_tool(params))
            .await
            .with_context(|| format!("{tool}: no answer within {}s", CALL_TIMEOUT.as_secs()))?;
        match answer {
            Ok(result) => {
                let value = serde_json::to_value(&result).context("unreadable tool result")?;
                Ok(Reply::Result {
                    structured: value
                        .get("structuredContent")
                        .cloned()
                        .unwrap_or(Value::Null),
                    is_error: value
                        .get("isError")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    cajaguard: value.get("_meta").and_then(|m| m.get("cajaguard")).cloned(),
                })
            }
            Err(ServiceError::McpError(e)) => Ok(Reply::RpcError {
                code: e.code.0,
                message: e.message.to_string(),
            }),
            Err(e) => Err(e).with_context(|| format!("{tool} failed")),
        }
    }

    pub async fn close(self) {
        if let Err(e) = self.client.cancel().await {
            tracing::debug!("closing the MCP session: {e}");
        }
    }
}
