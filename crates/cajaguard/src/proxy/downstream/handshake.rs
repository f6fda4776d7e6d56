//! The MCP handshake with the shop: `initialize` (the 2025 eras) or `server/discover` (2026-07-28),
//! then every page of `tools/list`.

use cajaguard_wire::era::{self, Era};
use cajaguard_wire::jsonrpc;
use serde_json::value::RawValue;

use super::{Handshake, Link, Reply, Shop, ShopError};

/// The protocol version the proxy asks the shop for; the shop may answer with another it speaks.
const PROTOCOL_VERSION: &str = "2025-11-25";

impl Shop {
    /// `initialize` first (every shop of the 2025 eras); a shop that refuses it but answers
    /// `server/discover` with 2026-07-28 is spoken to in that era, with an envelope on every request.
    pub(super) fn initialize(&self, link: &dyn Link) -> Result<Handshake, ShopError> {
        let params = format!(
            r#"{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{}}}"#,
            era::client_info()
        );
        let answer = link.request("initialize", Some(&params), self.timeout, &mut |_| {})?;
        let (protocol_version, shop_era) = match answer {
            Reply::Result(result) => {
                #[derive(serde::Deserialize)]
                struct Initialized {
                    #[serde(rename = "protocolVersion")]
                    protocol_version: String,
                }
                let initialized: Initialized = serde_json::from_str(result.get()).map_err(|e| {
                    ShopError::Handshake(format!("unreadable initialize result: {e}"))
                })?;
                link.set_protocol_version(&initialized.protocol_version);
                link.notify(&jsonrpc::notification("notifications/initialized", None))?;
                (initialized.protocol_version, Era::Legacy)
            }
            Reply::Error(_) => (self.discover(link)?, Era::Modern),
        };
        let list = |params: Option<String>| {
            let params = era::params_for_shop(shop_era, params.as_deref());
            link.request("tools/list", params.as_deref(), self.timeout, &mut |_| {})
        };

        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // A shop that pages forever is cut off: 100 pages of tools is far beyond any real shop.
        for _ in 0..100 {
            let params = cursor
                .as_ref()
                .map(|c| format!(r#"{{"cursor":{}}}"#, jsonrpc::quote(c)));
            let Reply::Result(result) = list(params)? else {
                return Err(ShopError::Handshake("the shop refused tools/list".into()));
            };
            #[derive(serde::Deserialize)]
            struct Page {
                tools: Vec<Box<RawValue>>,
                #[serde(rename = "nextCursor", default)]
                next_cursor: Option<String>,
            }
            let page: Page = serde_json::from_str(result.get())
                .map_err(|e| ShopError::Handshake(format!("unreadable tools/list result: {e}")))?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(Handshake {
            protocol_version,
            era: shop_era,
            tools,
        })
    }

    fn discover(&self, link: &dyn Link) -> Result<String, ShopError> {
        // Over HTTP the 2026-07-28 era repeats the version in a header on every message.
        link.set_protocol_version(era::MODERN_VERSION);
        let params = era::params_for_shop(Era::Modern, None);
        let answer = link.request(
            "server/discover",
            params.as_deref(),
            self.timeout,
            &mut |_| {},
        )?;
        let refused =
            || ShopError::Handshake("the shop refused both initialize and server/discover".into());
        let Reply::Result(result) = answer else {
            return Err(refused());
        };
        #[derive(serde::Deserialize)]
        struct Discovered {
            #[serde(rename = "supportedVersions", default)]
            supported_versions: Vec<String>,
        }
        let discovered: Discovered = serde_json::from_str(result.get())
            .map_err(|e| ShopError::Handshake(format!("unreadable server/discover result: {e}")))?;
        if discovered
            .supported_versions
            .iter()
            .any(|v| v == era::MODERN_VERSION)
        {
            Ok(era::MODERN_VERSION.to_owned())
        } else {
            Err(ShopError::Handshake(format!(
                "the shop speaks none of the protocol versions CajaGuard knows ({:?})",
                discovered.supported_versions
            )))
        }
    }
}
