//! Which tools the agent sees: the UCP shopping tools the shop offers, unchanged, and CajaGuard's
//! own two read-only tools. Nothing else reaches the shop.

pub const GATED_TOOL: &str = "complete_checkout";
pub const STATUS_TOOL: &str = "cajaguard_status";
pub const APPROVAL_STATUS_TOOL: &str = "cajaguard_approval_status";
pub const FREEZE_TOOL: &str = "cajaguard_freeze";

/// One of the UCP shopping tools of the pinned `mcp.openrpc.json`
/// (`cajaguard_core::request::PINNED_ARGUMENTS`, checked against the file).
pub fn is_ucp_tool(name: &str) -> bool {
    cajaguard_core::request::pinned_arguments(name).is_some()
}

/// The tools that change a checkout's basket or end it: refused while a payment holds it.
pub fn changes_checkout(name: &str) -> bool {
    matches!(name, "update_checkout" | "cancel_checkout")
}

/// The tools CajaGuard adds to the list, as JSON objects.
pub fn own_tools() -> [&'static str; 3] {
    [
        r#"{"name":"cajaguard_status","title":"CajaGuard status","description":"CajaGuard's spend gate: mode, merchant allowlist, caps per currency with spend, in-flight reservations and headroom over the rolling window, and payments waiting for a human approval. Read-only.","inputSchema":{"type":"object","properties":{},"additionalProperties":false},"annotations":{"readOnlyHint":true,"openWorldHint":false}}"#,
        r#"{"name":"cajaguard_approval_status","title":"CajaGuard approval status","description":"Whether a human has decided a blocked payment: pending, approved, used, denied or invalid. Agents cannot approve; a human runs `cajaguard approve <request_id>`.","inputSchema":{"type":"object","properties":{"request_id":{"type":"string","description":"The request_id of a blocked complete_checkout (cg-...)"}},"required":["request_id"],"additionalProperties":false},"annotations":{"readOnlyHint":true,"openWorldHint":false}}"#,
        r#"{"name":"cajaguard_freeze","title":"CajaGuard freeze","description":"Stops every payment through CajaGuard at once, on every process sharing its store (browsing, carts and checkouts still work). Use it when something looks wrong. Only a human can unfreeze (`cajaguard unfreeze`).","inputSchema":{"type":"object","properties":{"reason":{"type":"string","description":"Why payments should stop, for the human who unfreezes"}},"additionalProperties":false},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}}"#,
    ]
}

/// The name of a raw tool definition from the shop.
pub fn tool_name(tool: &serde_json::value::RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
    }
    serde_json::from_str::<Named>(tool.get())
        .ok()
        .map(|n| n.name)
}
