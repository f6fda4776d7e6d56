//! The JSON-RPC 2.0 envelope: `id`, `method`, `params`, `result` and `error` decoded, their values
//! kept raw; an agent's line read strictly, with the error to answer when it is no valid message.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::messages::error;
use crate::rawjson;

/// JSON-RPC error codes the proxy uses.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A request whose `Mcp-Method` or `Mcp-Name` header disagrees with its body, as the MCP SDKs'
/// servers number it.
pub const HEADER_MISMATCH: i64 = -32020;
/// A request its client cancelled (`notifications/cancelled`), as the MCP SDKs number it.
pub const REQUEST_CANCELLED: i64 = -32800;
/// The shop could not be reached or did not answer.
pub const SHOP_UNAVAILABLE: i64 = -32001;
/// Too many calls in flight from one agent.
pub const OVERLOADED: i64 = -32002;

/// The envelope of any JSON-RPC message; members other than these are not kept.
#[derive(Deserialize)]
pub struct Envelope {
    #[serde(default)]
    pub id: Option<Box<RawValue>>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Box<RawValue>>,
    #[serde(default)]
    pub result: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<Box<RawValue>>,
}

impl Envelope {
    pub fn parse(line: &str) -> Result<Envelope, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// A request has a method and an id; a notification a method and no id.
    pub fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }
}

/// An agent's line that is not a valid JSON-RPC 2.0 message: answered with this error, never
/// forwarded (SPEC §3, JSON-RPC conformance).
#[derive(Debug)]
pub struct Invalid {
    /// The line's id when it could be read and is a valid id; the answer's id is `null` otherwise.
    pub id: Option<Box<RawValue>>,
    pub code: i64,
    pub message: &'static str,
}

impl Invalid {
    /// The whole error line to send back.
    pub fn line(&self) -> String {
        error(self.id.as_deref(), self.code, self.message)
    }
}

/// Every member an envelope may have, each kept raw so that its type can be judged (a `null` id or
/// params is kept as present).
#[derive(Deserialize)]
struct Loose {
    #[serde(default)]
    jsonrpc: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// Why a line that is JSON to the grammar is refused when `serde_json::Value` cannot read it
/// (`rawjson::is_json`): the envelope, the tripwire and the forwarding all read that way.
const UNREADABLE: &str = "the message holds a value CajaGuard cannot read: a number past a 64-bit float's range, or an unpaired UTF-16 surrogate escape";

/// A string or an integer (MCP: never `null`, and JSON-RPC discourages fractions).
pub(super) fn valid_id(id: &RawValue) -> bool {
    let raw = id.get();
    if raw.starts_with('"') {
        return true;
    }
    // An integer the peer can read back as one: a 64-bit one. A longer run of digits is JSON, but
    // most clients (and serde_json) would read it back as a float, so it is no id to answer with.
    raw.parse::<i64>().is_ok() || raw.parse::<u64>().is_ok()
}

impl Envelope {
    /// Reads an agent's line strictly (JSON-RPC 2.0 §4-5): a request, a notification or a
    /// response, or the error to answer it with. `known` says which methods the proxy serves, whose
    /// bad `params` are -32602 rather than -32600.
    pub fn parse_agent(line: &str, known: &dyn Fn(&str) -> bool) -> Result<Envelope, Invalid> {
        let invalid = |id: Option<Box<RawValue>>, message| Invalid {
            id,
            code: INVALID_REQUEST,
            message,
        };
        if serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() {
            return Err(Invalid {
                id: None,
                code: PARSE_ERROR,
                message: "not JSON; CajaGuard reads one JSON-RPC message per line",
            });
        }
        // JSON to the grammar, yet holding a value no later reader can parse: refused, with the
        // line's id, once the rest of the envelope has been judged (see `UNREADABLE`).
        let readable = rawjson::is_json(line);
        let Ok(loose) = serde_json::from_str::<Loose>(line) else {
            return Err(invalid(
                None,
                "not a JSON-RPC request: a message is one object, each member once",
            ));
        };
        let id_ok = loose.id.as_deref().is_none_or(valid_id);
        let answer_id = loose.id.clone().filter(|id| valid_id(id));
        let version_ok = loose
            .jsonrpc
            .as_deref()
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .is_some_and(|v| v == "2.0");
        if !version_ok {
            return Err(invalid(answer_id, "\"jsonrpc\" must be \"2.0\""));
        }
        if !id_ok {
            return Err(invalid(
                None,
                "the id must be a string or an integer (not null)",
            ));
        }
        let Some(method) = loose.method else {
            if !readable {
                return Err(invalid(answer_id, UNREADABLE));
            }
            if loose.result.is_some() || loose.error.is_some() {
                return Ok(Envelope {
                    id: loose.id,
                    method: None,
                    params: None,
                    result: loose.result,
                    error: loose.error,
                });
            }
            return Err(invalid(answer_id, "a request needs a method"));
        };
        let Ok(method) = serde_json::from_str::<String>(method.get()) else {
            return Err(invalid(answer_id, "the method must be a string"));
        };
        // What is wrong with a known method's params is -32602; anything else's, -32600.
        let bad_params = |message| Invalid {
            id: answer_id.clone(),
            code: if known(&method) {
                INVALID_PARAMS
            } else {
                INVALID_REQUEST
            },
            message,
        };
        if let Some(params) = &loose.params
            && !(params.get().starts_with('{') || params.get().starts_with('['))
        {
            return Err(bad_params("params must be an object or an array"));
        }
        if !readable {
            return Err(bad_params(UNREADABLE));
        }
        Ok(Envelope {
            id: loose.id,
            method: Some(method),
            params: loose.params,
            result: loose.result,
            error: loose.error,
        })
    }
}

/// A request id as the peer wrote it (string or number), used as a map key.
pub fn id_key(id: &RawValue) -> String {
    id.get().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_requests_get_their_error_and_id() {
        let known = |m: &str| m == "tools/call";
        let err = |line: &str| {
            let e = Envelope::parse_agent(line, &known).err().unwrap();
            (e.code, e.id.map(|id| id.get().to_owned()))
        };
        assert_eq!(err("{"), (PARSE_ERROR, None));
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            (INVALID_REQUEST, Some("1".into()))
        );
        assert_eq!(
            err(r#"{"id":"a","method":"ping"}"#),
            (INVALID_REQUEST, Some("\"a\"".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":2,"method":7}"#),
            (INVALID_REQUEST, Some("2".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":"x"}"#),
            (INVALID_PARAMS, Some("3".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":3,"method":"other","params":1}"#),
            (INVALID_REQUEST, Some("3".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","method":"x","method":"y"}"#),
            (INVALID_REQUEST, None)
        );
        // Found by the fuzzer: an integer id past 64 bits is no id to answer with (a client would
        // read it back as a float), so the error goes out with id null, and a request with one is
        // invalid.
        let huge = "1".repeat(80);
        assert_eq!(
            err(&format!(
                r#"{{"jsonrpc":"1.0","id":{huge},"method":"ping"}}"#
            )),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(&format!(
                r#"{{"jsonrpc":"2.0","id":{huge},"method":"ping"}}"#
            )),
            (INVALID_REQUEST, None)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":18446744073709551615,"method":"ping"}"#),
            (INVALID_REQUEST, Some("18446744073709551615".into()))
        );
        // Found by the fuzzer: a member holding a number past a double's range is read by
        // nothing after the envelope, so the message is refused, with its id, as is one holding
        // an unpaired surrogate escape (a truncated emoji); a known method's as bad params.
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"x":1444444E4444444444444444444443,"method":"ping"}"#),
            (INVALID_REQUEST, Some("1".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"n":1e400}}"#),
            (INVALID_PARAMS, Some("2".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":"q","method":"other","params":{"t":"\ud83d"}}"#),
            (INVALID_REQUEST, Some("\"q\"".into()))
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":6,"result":{"n":-1e400}}"#),
            (INVALID_REQUEST, Some("6".into()))
        );
        assert_eq!(err("42"), (INVALID_REQUEST, None));
        assert_eq!(err(r#"{"jsonrpc":"2.0"}"#), (INVALID_REQUEST, None));
        let ok = Envelope::parse_agent(
            r#"{"jsonrpc":"2.0","id":-4,"method":"ping","params":[]}"#,
            &known,
        )
        .unwrap();
        assert_eq!(ok.id.unwrap().get(), "-4");
        let response =
            Envelope::parse_agent(r#"{"jsonrpc":"2.0","id":5,"result":null}"#, &known).unwrap();
        assert!(response.method.is_none() && response.result.is_some());
    }

    #[test]
    fn envelope_keeps_params_raw() {
        let e = Envelope::parse(r#"{"jsonrpc":"2.0","id":"x","method":"m","params":{"a" : 1.0}}"#)
            .unwrap();
        assert_eq!(e.params.unwrap().get(), r#"{"a" : 1.0}"#);
        assert_eq!(e.id.unwrap().get(), r#""x""#);
    }
}
