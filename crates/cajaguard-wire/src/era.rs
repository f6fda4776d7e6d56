//! MCP protocol eras (docs/mcp-eras.md): 2025-06-18 and 2025-11-25 open with `initialize`;
//! 2026-07-28 has no handshake and carries a per-request envelope in `params._meta`, and its
//! results carry `resultType`. The relay bridges the eras in the envelope only: it never touches
//! `arguments` or the payload of a result.

use serde_json::value::RawValue;

use crate::jsonrpc;
use crate::rawjson::RawObject;

pub const MODERN_VERSION: &str = "2026-07-28";
/// Versions answered to `initialize`, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

const ENVELOPE_PREFIX: &str = "io.modelcontextprotocol/";
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// `-32022`, reserved by the 2026-07-28 revision for an unsupported protocol version.
pub const UNSUPPORTED_VERSION: i64 = -32022;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy,
    Modern,
}

/// A request whose envelope is wrong: the error line to answer with.
pub struct EnvelopeError(pub String);

/// The era of one agent request. A request is modern iff `params._meta` names a protocol version
/// (a bare `_meta` with only a progress token is not evidence); each is served on its own terms, so
/// a client that probes with `server/discover` and falls back to `initialize` works too.
pub fn of_request(id: Option<&RawValue>, params: Option<&RawValue>) -> Result<Era, EnvelopeError> {
    let Some(params) = params else {
        return Ok(Era::Legacy);
    };
    // Cheap test first: most legacy requests never mention the key.
    if !params.get().contains(VERSION_KEY) {
        return Ok(Era::Legacy);
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    let meta = serde_json::from_str::<Params<'_>>(params.get())
        .ok()
        .and_then(|p| p.meta)
        .and_then(|m| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(m.get()).ok()
        });
    let Some(meta) = meta else {
        return Ok(Era::Legacy);
    };
    let Some(version) = meta.get(VERSION_KEY) else {
        return Ok(Era::Legacy);
    };
    if version.as_str() != Some(MODERN_VERSION) {
        let data = serde_json::json!({ "supported": [MODERN_VERSION], "requested": version });
        return Err(EnvelopeError(error_with_data(
            id,
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            &data,
        )));
    }
    if !meta
        .get(CAPABILITIES_KEY)
        .is_some_and(serde_json::Value::is_object)
    {
        return Err(EnvelopeError(jsonrpc::error(
            id,
            jsonrpc::INVALID_PARAMS,
            "_meta[\"io.modelcontextprotocol/clientCapabilities\"] is required with protocol version 2026-07-28",
        )));
    }
    Ok(Era::Modern)
}

pub fn error_with_data(
    id: Option<&RawValue>,
    code: i64,
    message: &str,
    data: &serde_json::Value,
) -> String {
    let id = id.map_or("null", RawValue::get);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{},"data":{data}}}}}"#,
        jsonrpc::quote(message)
    )
}

/// What a result is, for the fields the modern era requires on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultKind {
    /// Lists carry a cache lifetime too (`ttlMs`, `cacheScope`).
    List,
    Other,
}

/// A result as a modern agent must see it: `resultType` (and for lists `ttlMs`, `cacheScope`)
/// added when the shop, speaking an older era, left them out. Everything else is unchanged.
pub fn modern_result(result: &str, kind: ResultKind) -> String {
    let needs_type = !result.contains("\"resultType\"");
    let needs_cache = kind == ResultKind::List
        && !(result.contains("\"ttlMs\"") && result.contains("\"cacheScope\""));
    if !needs_type && !needs_cache {
        return result.to_owned();
    }
    let Some(mut object) = RawObject::parse(result) else {
        return result.to_owned();
    };
    let mut add = |key: &str, json: &str| {
        if object.get(key).is_none()
            && let Ok(value) = RawValue::from_string(json.to_owned())
        {
            object.set(key, value);
        }
    };
    add("resultType", r#""complete""#);
    if kind == ResultKind::List {
        add("ttlMs", "0");
        add("cacheScope", r#""private""#);
    }
    object.to_json()
}

/// The answer to `server/discover`: CajaGuard speaks 2026-07-28 to agents that ask for it.
pub fn discover_result(server_info: &str, instructions: &str) -> String {
    format!(
        r#"{{"supportedVersions":["{MODERN_VERSION}"],"capabilities":{{"tools":{{}}}},"instructions":{},"resultType":"complete","ttlMs":0,"cacheScope":"private","_meta":{{"io.modelcontextprotocol/serverInfo":{server_info}}}}}"#,
        jsonrpc::quote(instructions)
    )
}

/// Params for a shop of `era`: a legacy shop gets the modern envelope keys removed from `_meta`
/// (a dual-era shop pinned legacy refuses them); a modern shop gets an envelope stamped on when
/// the agent spoke an older era. `arguments` and every other member keep their bytes.
pub fn params_for_shop(era: Era, params: Option<&str>) -> Option<String> {
    match era {
        Era::Legacy => {
            let params = params?;
            if !params.contains(ENVELOPE_PREFIX) {
                return Some(params.to_owned());
            }
            let Some(mut object) = RawObject::parse(params) else {
                return Some(params.to_owned());
            };
            let Some(mut meta) = object.get("_meta").and_then(|m| RawObject::parse(m.get())) else {
                return Some(params.to_owned());
            };
            meta.retain(|key| !key.starts_with(ENVELOPE_PREFIX));
            if let Ok(meta) = RawValue::from_string(meta.to_json()) {
                object.set("_meta", meta);
            }
            Some(object.to_json())
        }
        Era::Modern => {
            let mut object = params.and_then(RawObject::parse).unwrap_or_default();
            let mut meta = object
                .get("_meta")
                .and_then(|m| RawObject::parse(m.get()))
                .unwrap_or_default();
            if meta.get(VERSION_KEY).is_none() {
                for (key, value) in [
                    (VERSION_KEY, format!("\"{MODERN_VERSION}\"")),
                    (CAPABILITIES_KEY, "{}".to_owned()),
                    ("io.modelcontextprotocol/clientInfo", client_info()),
                ] {
                    if let Ok(value) = RawValue::from_string(value) {
                        meta.set(key, value);
                    }
                }
            }
            if let Ok(meta) = RawValue::from_string(meta.to_json()) {
                object.set("_meta", meta);
            }
            Some(object.to_json())
        }
    }
}

/// How CajaGuard names itself to a shop. The version is this crate's, which is the workspace's,
/// so the same as the `cajaguard` binary's.
pub fn client_info() -> String {
    format!(
        r#"{{"name":"cajaguard","version":"{}"}}"#,
        env!("CARGO_PKG_VERSION")
    )
}

/// The target a request names, which a 2026-07-28 client mirrors in the `Mcp-Name` header
/// (SEP-2243): `params.name` of `tools/call` and `prompts/get`, `params.uri` of `resources/read`;
/// `None` for another method, or when the field is not a string. One reading for the bridge,
/// which sends the header, and the service, which refuses a header that disagrees with it: when
/// they read it differently, a request the bridge sent was refused as a mismatch (-32020).
pub fn target_name(method: &str, params: Option<&RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Name {
        name: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Uri {
        uri: Option<String>,
    }
    let params = params?.get();
    match method {
        "tools/call" | "prompts/get" => serde_json::from_str::<Name>(params).ok()?.name,
        "resources/read" => serde_json::from_str::<Uri>(params).ok()?.uri,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    #[test]
    fn a_request_is_modern_only_with_a_version_in_its_envelope() {
        let legacy = raw(r#"{"name":"x","_meta":{"progressToken":1}}"#);
        assert_eq!(of_request(None, Some(&legacy)).ok(), Some(Era::Legacy));
        let modern = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        );
        assert_eq!(of_request(None, Some(&modern)).ok(), Some(Era::Modern));
        let old = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        );
        let Err(EnvelopeError(line)) = of_request(None, Some(&old)) else {
            panic!("an unknown version is refused")
        };
        assert!(
            line.contains("-32022") && line.contains("1900-01-01"),
            "{line}"
        );
        let no_caps = raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        let Err(EnvelopeError(line)) = of_request(None, Some(&no_caps)) else {
            panic!("capabilities are required")
        };
        assert!(line.contains("-32602"), "{line}");
    }

    #[test]
    fn the_target_is_the_name_of_a_tool_or_prompt_and_the_uri_of_a_resource() {
        let params = raw(r#"{"name":"code_review","uri":"file:///a","arguments":{"name":1}}"#);
        for (method, target) in [
            ("tools/call", Some("code_review")),
            ("prompts/get", Some("code_review")),
            ("resources/read", Some("file:///a")),
            ("tools/list", None),
            ("resources/subscribe", None),
        ] {
            assert_eq!(
                target_name(method, Some(&params)).as_deref(),
                target,
                "{method}"
            );
        }
        // Only the field the method names is read: a `name` of another type beside a `uri`.
        let uri_only = raw(r#"{"uri":"file:///a","name":7}"#);
        assert_eq!(
            target_name("resources/read", Some(&uri_only)).as_deref(),
            Some("file:///a")
        );
        assert_eq!(target_name("tools/call", Some(&uri_only)), None);
        assert_eq!(target_name("tools/call", None), None);
    }

    #[test]
    fn modern_results_get_their_required_fields_and_nothing_else_changes() {
        assert_eq!(
            modern_result(
                r#"{"tools":[{"name":"a","execution":{"x":1}}]}"#,
                ResultKind::List
            ),
            r#"{"tools":[{"name":"a","execution":{"x":1}}],"resultType":"complete","ttlMs":0,"cacheScope":"private"}"#
        );
        assert_eq!(
            modern_result(
                r#"{"content":[],"resultType":"complete"}"#,
                ResultKind::Other
            ),
            r#"{"content":[],"resultType":"complete"}"#
        );
    }

    #[test]
    fn legacy_shops_lose_the_envelope_but_keep_the_progress_token_and_arguments() {
        let params = r#"{"name":"t","arguments":{"a" : 1.0},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p1"}}"#;
        assert_eq!(
            params_for_shop(Era::Legacy, Some(params)).unwrap(),
            r#"{"name":"t","arguments":{"a" : 1.0},"_meta":{"progressToken":"p1"}}"#
        );
        let stamped =
            params_for_shop(Era::Modern, Some(r#"{"name":"t","arguments":{"a" : 1.0}}"#)).unwrap();
        assert!(stamped.starts_with(r#"{"name":"t","arguments":{"a" : 1.0},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{stamped}");
    }
}
