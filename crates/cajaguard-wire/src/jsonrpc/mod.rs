//! JSON-RPC 2.0 as the relay speaks it: newline-delimited framing ([`lines`]), the envelope decoded
//! with the rest kept raw ([`envelope`]), and the few messages the proxy writes itself
//! ([`messages`]).

mod envelope;
mod lines;
mod messages;

pub use envelope::{
    Envelope, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Invalid,
    METHOD_NOT_FOUND, OVERLOADED, PARSE_ERROR, REQUEST_CANCELLED, SHOP_UNAVAILABLE, id_key,
};
pub use lines::{Line, one_line, read_line};
pub use messages::{Sink, error, notification, quote, raw_error, request, result};
