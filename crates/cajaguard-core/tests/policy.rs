//! The config file (SPEC §2): defaults, paths, and every refusal names file, JSON path and a fix.
//! One idea (a config file's reading) in one file, so every refusal can be compared side by side.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cajaguard_core::Error;
use cajaguard_core::policy::{Command, ConfigOrigin, DownstreamTransport, Mode, Policy};
use common::*;
use serde_json::{Value, json};

fn parse(config: &Value) -> Result<Policy, Error> {
    let origin = ConfigOrigin {
        path: Path::new(CONFIG_PATH),
        user_home: Some(Path::new("/home/ana")),
    };
    Policy::parse(&config.to_string(), &origin)
}

/// Asserts a config error at `json_path`, naming the file.
fn refused(config: &Value, json_path: &str) -> String {
    match parse(config) {
        Err(Error::Config {
            file,
            json_path: got,
            message,
        }) => {
            assert_eq!(file, PathBuf::from(CONFIG_PATH));
            assert_eq!(got, json_path, "{message}");
            assert!(!message.is_empty());
            let shown = Error::Config {
                file,
                json_path: got,
                message: message.clone(),
            }
            .to_string();
            assert!(
                shown.starts_with(CONFIG_PATH) && shown.contains(json_path),
                "{shown}"
            );
            message
        }
        Err(other) => panic!("not a config error: {other}"),
        Ok(_) => panic!("accepted a bad config at {json_path}"),
    }
}

fn with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut c = config_json();
    edit(&mut c);
    c
}

#[test]
fn the_spec_example_parses() {
    let p = policy();
    assert_eq!(p.mode, Mode::Test);
    assert_eq!(p.source, PathBuf::from(CONFIG_PATH));
    assert_eq!(p.home, PathBuf::from("/etc/cajaguard/../.cajaguard"));
    let usd = p.caps_for("USD").unwrap();
    assert_eq!(
        (usd.approval_above, usd.per_transaction, usd.window),
        (5000, 10000, 15000)
    );
    let jpy = p.caps_for("JPY").unwrap();
    assert_eq!(
        (jpy.approval_above, jpy.per_transaction, jpy.window),
        (5000, 12000, 20000)
    );
    assert_eq!(
        p.approvals.trusted_keys,
        vec![PathBuf::from(
            "/home/ana/.config/cajaguard/approver.pub.pem"
        )]
    );
    assert_eq!(p.approvals.max_ttl, Duration::from_secs(15 * 60));
    assert_eq!(p.window, Duration::from_secs(24 * 3600));
    let DownstreamTransport::Stdio(s) = &p.downstream.transport else {
        panic!("a command means a stdio downstream")
    };
    assert_eq!(s.command, Command::Bare("cajaguard-fixture-shop".into()));
    assert_eq!(s.cwd, PathBuf::from("/etc/cajaguard/.."));
    assert!(p.merchants.contains("tokyo-tea.example"));
}

#[test]
fn defaults_apply() {
    let c = json!({
        "mode": "live", "home": "/var/lib/cg", "downstream": {"command": "./bin/shop"},
        "merchants": ["Shop.Example"], "caps": {"EUR": {"approval_above": "1", "per_transaction": "2", "window": "3"}}
    });
    let p = parse(&c).unwrap();
    assert_eq!(p.mode, Mode::Live);
    assert_eq!(p.window, Duration::from_secs(24 * 3600));
    assert_eq!(p.downstream.timeout, Duration::from_secs(30));
    assert_eq!(p.downstream.max_message_bytes, 4 * 1024 * 1024);
    assert_eq!(p.approvals.max_ttl, Duration::from_secs(15 * 60));
    assert!(p.approvals.trusted_keys.is_empty());
    assert!(p.test_mode.handler_ids.contains("fixture_test_handler"));
    assert!(p.test_mode.token_pattern.is_match("cg_test_abcdefgh"));
    assert!(p.merchants.contains("shop.example"));
    let DownstreamTransport::Stdio(s) = &p.downstream.transport else {
        panic!("a command means a stdio downstream")
    };
    assert_eq!(
        s.command,
        Command::Path(PathBuf::from("/etc/cajaguard/./bin/shop"))
    );
    assert_eq!(s.cwd, PathBuf::from("/etc/cajaguard"));
}

#[test]
fn unknown_fields_are_refused_at_every_level() {
    refused(&with(|c| c["windw_hours"] = json!(24)), "$.windw_hours");
    refused(
        &with(|c| c["downstream"]["timeout"] = json!(3)),
        "$.downstream.timeout",
    );
    refused(
        &with(|c| c["caps"]["USD"]["daily"] = json!("1")),
        "$.caps.USD.daily",
    );
    refused(
        &with(|c| c["approvals"]["ttl"] = json!(1)),
        "$.approvals.ttl",
    );
    refused(
        &with(|c| c["test_mode"]["tokens"] = json!([])),
        "$.test_mode.tokens",
    );
}

#[test]
fn required_fields() {
    for f in ["mode", "home", "downstream", "merchants", "caps"] {
        let msg = refused(
            &with(|c| {
                c.as_object_mut().unwrap().remove(f);
            }),
            &format!("$.{f}"),
        );
        assert!(msg.contains("required"));
    }
    refused(
        &with(|c| {
            c["caps"]["USD"].as_object_mut().unwrap().remove("window");
        }),
        "$.caps.USD.window",
    );
}

#[test]
fn money_refusals_of_section_2() {
    refused(
        &with(|c| c["caps"]["USD"]["approval_above"] = json!("50.005")),
        "$.caps.USD.approval_above",
    );
    refused(
        &with(|c| c["caps"]["JPY"]["approval_above"] = json!("5000.5")),
        "$.caps.JPY.approval_above",
    );
    refused(
        &with(|c| c["caps"]["USD"]["approval_above"] = json!("-1")),
        "$.caps.USD.approval_above",
    );
    refused(
        &with(|c| c["caps"]["USD"]["window"] = json!("1e3")),
        "$.caps.USD.window",
    );
    refused(
        &with(|c| c["caps"]["USD"]["window"] = json!(150)),
        "$.caps.USD.window",
    );
    refused(
        &with(|c| c["caps"]["USD"]["window"] = json!("90071992547409.92")),
        "$.caps.USD.window",
    );
    refused(
        &with(|c| {
            c["caps"]["XXX"] = json!({"approval_above": "1", "per_transaction": "1", "window": "1"})
        }),
        "$.caps.XXX",
    );
    refused(
        &with(|c| {
            c["caps"]["ABC"] = json!({"approval_above": "1", "per_transaction": "1", "window": "1"})
        }),
        "$.caps.ABC",
    );
    refused(
        &with(|c| {
            c["caps"]["usd"] = json!({"approval_above": "1", "per_transaction": "1", "window": "1"})
        }),
        "$.caps.usd",
    );
    let m = refused(
        &with(|c| c["caps"]["USD"]["approval_above"] = json!("100.01")),
        "$.caps.USD",
    );
    assert!(m.contains("approval_above <= per_transaction <= window"));
    refused(
        &with(|c| c["caps"]["USD"]["per_transaction"] = json!("150.01")),
        "$.caps.USD",
    );
}

#[test]
fn other_refusals() {
    refused(&with(|c| c["mode"] = json!("prod")), "$.mode");
    refused(
        &with(|c| c["merchants"] = json!(["https://shop.example"])),
        "$.merchants[0]",
    );
    refused(
        &with(|c| c["merchants"] = json!(["shop.example/path"])),
        "$.merchants[0]",
    );
    refused(
        &with(|c| c["merchants"] = json!(["ok.example", ""])),
        "$.merchants[1]",
    );
    refused(
        &with(|c| c["merchants"] = json!(["shop.example:443"])),
        "$.merchants[0]",
    );
    refused(
        &with(|c| c["test_mode"]["token_pattern"] = json!("(unclosed")),
        "$.test_mode.token_pattern",
    );
    refused(&with(|c| c["window_hours"] = json!(0)), "$.window_hours");
    refused(&with(|c| c["window_hours"] = json!(1.5)), "$.window_hours");
    refused(
        &with(|c| c["downstream"]["command"] = json!("")),
        "$.downstream.command",
    );
    refused(&with(|c| c["home"] = json!("~bob/x")), "$.home");
    let origin = ConfigOrigin {
        path: Path::new(CONFIG_PATH),
        user_home: None,
    };
    match Policy::parse(&config_json().to_string(), &origin) {
        Err(Error::Config { json_path, .. }) => {
            assert_eq!(json_path, "$.approvals.trusted_keys[0]")
        }
        other => panic!("{other:?}"),
    }
    match Policy::parse(
        "{\"mode\": ",
        &ConfigOrigin {
            path: Path::new(CONFIG_PATH),
            user_home: None,
        },
    ) {
        Err(Error::Config {
            json_path, message, ..
        }) => {
            assert_eq!(json_path, "$");
            assert!(message.contains("line 1"));
        }
        other => panic!("{other:?}"),
    }
    // Keys that are not plain names are quoted in the path.
    refused(&with(|c| c["caps"]["US D"] = json!({})), "$.caps[\"US D\"]");
}

/// A downstream reached over MCP Streamable HTTP (issue 7).
fn http(downstream: Value) -> Value {
    with(|c| {
        c["downstream"] = downstream;
        c["merchants"] = json!(["demo-outfitters.example", "shop.example", "127.0.0.1"]);
    })
}

#[test]
fn an_http_downstream_parses_with_its_token_variable_and_headers() {
    let p = parse(&http(json!({
        "url": "https://Shop.Example/api/ucp/mcp",
        "bearer_token_env": "SHOP_TOKEN",
        "headers": { "X-Shop-Client": "cajaguard" },
        "timeout_seconds": 5,
        "max_message_bytes": 65536,
    })))
    .unwrap();
    let DownstreamTransport::Http(h) = &p.downstream.transport else {
        panic!("a url means an HTTP downstream")
    };
    assert_eq!(h.url.as_str(), "https://shop.example/api/ucp/mcp");
    assert_eq!(h.bearer_token_env.as_deref(), Some("SHOP_TOKEN"));
    assert_eq!(
        h.headers.get("X-Shop-Client").map(String::as_str),
        Some("cajaguard")
    );
    assert_eq!(p.downstream.timeout, Duration::from_secs(5));
    assert_eq!(p.downstream.max_message_bytes, 65536);
    // Plain http:// to a loopback IP literal is for local tests.
    assert!(parse(&http(json!({ "url": "http://127.0.0.1:8080/mcp" }))).is_ok());
}

#[test]
fn command_and_url_are_mutually_exclusive() {
    let both = http(json!({ "command": "shop", "url": "https://shop.example/mcp" }));
    let message = refused(&both, "$.downstream");
    assert!(
        message.contains("command") && message.contains("url"),
        "{message}"
    );
    let neither = http(json!({ "timeout_seconds": 3 }));
    refused(&neither, "$.downstream");
    refused(
        &http(json!({ "url": "https://shop.example/mcp", "args": [] })),
        "$.downstream.args",
    );
    refused(
        &http(json!({ "command": "shop", "bearer_token_env": "T" })),
        "$.downstream.bearer_token_env",
    );
    refused(
        &http(json!({ "url": "https://shop.example/mcp", "bearer_token": "T" })),
        "$.downstream.bearer_token",
    );
}

#[test]
fn plain_http_is_only_for_loopback_addresses() {
    for url in [
        "http://shop.example/mcp",
        "http://localhost:8080/mcp",
        "http://10.0.0.1/mcp",
        "http://0.0.0.0:80/mcp",
    ] {
        let message = refused(&http(json!({ "url": url })), "$.downstream.url");
        assert!(message.contains("https"), "{url}: {message}");
    }
    for url in [
        "ftp://shop.example/mcp",
        "not a url",
        "https://user:secret@shop.example/mcp",
        "https://shop.example/mcp#x",
    ] {
        let message = refused(&http(json!({ "url": url })), "$.downstream.url");
        assert!(!message.contains("secret"), "{message}");
    }
}

#[test]
fn the_endpoint_host_must_be_a_listed_merchant() {
    let message = refused(
        &http(json!({ "url": "https://other-shop.example/api/ucp/mcp" })),
        "$.downstream.url",
    );
    assert!(
        message.contains("other-shop.example") && message.contains("merchants"),
        "{message}"
    );
}

#[test]
fn the_token_never_goes_in_the_config() {
    let message = refused(
        &http(
            json!({ "url": "https://shop.example/mcp", "headers": { "authorization": "Bearer x" } }),
        ),
        "$.downstream.headers.authorization",
    );
    assert!(message.contains("bearer_token_env"), "{message}");
    refused(
        &http(json!({ "url": "https://shop.example/mcp", "headers": { "Mcp-Session-Id": "s" } })),
        "$.downstream.headers.Mcp-Session-Id",
    );
    refused(
        &http(json!({ "url": "https://shop.example/mcp", "headers": { "X-A": "a\r\nB: c" } })),
        "$.downstream.headers.X-A",
    );
    refused(
        &http(json!({ "url": "https://shop.example/mcp", "bearer_token_env": "Bearer abc123" })),
        "$.downstream.bearer_token_env",
    );
}

#[test]
fn the_store_defaults_to_sqlite_and_takes_a_postgres_url_or_variable() {
    use cajaguard_core::policy::{StoreConfig, StoreUrl};
    assert_eq!(policy().store, StoreConfig::Sqlite);

    let secret = "postgres://cg:hunter2-secret@db.internal:5433/ledger?password=hunter2-secret";
    let p = parse(&with(|c| c["store"] = json!({ "url": secret }))).unwrap();
    let StoreConfig::Postgres {
        url: StoreUrl::Literal(url),
    } = &p.store
    else {
        panic!("not a literal postgres url: {:?}", p.store);
    };
    assert_eq!(url.as_str(), secret);
    // Debug (what a log line or a panic would show) keeps the password out.
    let shown = format!("{:?}", p);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("db.internal:5433/ledger"), "{shown}");

    let p = parse(&with(|c| {
        c["store"] = json!({ "url_env": "CAJAGUARD_STORE_URL" })
    }))
    .unwrap();
    assert_eq!(
        p.store,
        StoreConfig::Postgres {
            url: StoreUrl::Env("CAJAGUARD_STORE_URL".to_owned())
        }
    );
}

#[test]
fn store_refusals_never_repeat_the_url() {
    refused(&with(|c| c["store"]["uri"] = json!("x")), "$.store.uri");
    refused(&with(|c| c["store"] = json!({})), "$.store");
    refused(
        &with(|c| c["store"] = json!({ "url": "postgres://a@b/c", "url_env": "X" })),
        "$.store",
    );
    let msg = refused(
        &with(|c| c["store"] = json!({ "url": "mysql://root:hunter2@db/x" })),
        "$.store.url",
    );
    assert!(!msg.contains("hunter2"), "{msg}");
    refused(
        &with(|c| c["store"] = json!({ "url": "postgrés" })),
        "$.store.url",
    );
    refused(
        &with(|c| c["store"] = json!({ "url_env": "NOT A NAME" })),
        "$.store.url_env",
    );
    refused(&with(|c| c["store"] = json!("sqlite")), "$.store");
}

#[test]
fn redact_url_keeps_only_where_the_database_is() {
    use cajaguard_core::policy::redact_url;
    assert_eq!(
        redact_url("postgres://u:p4ss@h:5432/db?sslmode=require&password=p4ss"),
        "postgres://h:5432/db"
    );
    assert_eq!(redact_url("not a url"), "<unparsable URL>");
}

#[test]
fn approvals_web_and_require_default_to_no_page_and_key_files() {
    use cajaguard_core::policy::RequiredApproval;
    let p = policy();
    assert_eq!(p.approvals.web, None);
    assert_eq!(p.approvals.require, RequiredApproval::Key);
    assert!(p.approvals.require.accepts_key_file());
    assert!(!p.approvals.require.accepts_passkey());
}

#[test]
fn approvals_web_gives_the_localhost_origin_and_require_its_kinds() {
    use cajaguard_core::policy::RequiredApproval;
    let p = parse(&with(|c| {
        c["approvals"]["web"] = json!({ "listen": "127.0.0.1:8377" });
        c["approvals"]["require"] = json!("passkey");
    }))
    .unwrap();
    let web = p.approvals.web.unwrap();
    assert_eq!(web.origin(), "http://localhost:8377");
    assert_eq!(web.host(), "localhost:8377");
    assert_eq!(web.relying_party().rp_id(), "localhost");
    assert_eq!(
        web.request_url("cg-ab12"),
        "http://localhost:8377/requests/cg-ab12"
    );
    assert_eq!(p.approvals.require, RequiredApproval::Passkey);
    assert!(!p.approvals.require.accepts_key_file());
    assert!(p.approvals.require.accepts_passkey());

    let p = parse(&with(|c| {
        c["approvals"]["web"] = json!({ "listen": "[::1]:9000" });
        c["approvals"]["require"] = json!("any");
    }))
    .unwrap();
    assert_eq!(p.approvals.web.unwrap().origin(), "http://localhost:9000");
    assert_eq!(p.approvals.require, RequiredApproval::Any);
    assert!(p.approvals.require.accepts_key_file() && p.approvals.require.accepts_passkey());
}

#[test]
fn approvals_web_and_require_refuse_what_cannot_work() {
    let web = |listen: Value| with(|c| c["approvals"]["web"] = json!({ "listen": listen }));
    for listen in [
        "0.0.0.0:8377",
        "192.168.1.2:8377",
        "[::]:8377",
        "localhost:8377",
        "8377",
    ] {
        refused(&web(json!(listen)), "$.approvals.web.listen");
    }
    let msg = refused(&web(json!("127.0.0.1:0")), "$.approvals.web.listen");
    assert!(msg.contains("port"), "{msg}");
    refused(&web(json!(8377)), "$.approvals.web.listen");
    refused(
        &with(|c| c["approvals"]["web"] = json!({})),
        "$.approvals.web.listen",
    );
    refused(
        &with(|c| c["approvals"]["web"] = json!({ "listen": "127.0.0.1:8377", "tls": true })),
        "$.approvals.web.tls",
    );
    refused(
        &with(|c| c["approvals"]["require"] = json!("both")),
        "$.approvals.require",
    );
    let msg = refused(
        &with(|c| c["approvals"]["require"] = json!("passkey")),
        "$.approvals.require",
    );
    assert!(msg.contains("approvals.web"), "{msg}");
}

// ---- serve and agent_caps (SPEC §13) ----

fn serve(edit: impl FnOnce(&mut Value)) -> Value {
    with(|c| {
        c["serve"] = json!({
            "listen": "127.0.0.1:8376",
            "allowed_origins": ["http://localhost:6274"],
            "agents": [
                { "name": "ci-bot", "caps": { "USD": { "approval_above": "10.00", "per_transaction": "20.00", "window": "30.00" } } },
                { "name": "shopper" }
            ]
        });
        c["agent_caps"] = json!({ "USD": { "approval_above": "5.00", "per_transaction": "25.00", "window": "40.00" } });
        edit(c);
    })
}

#[test]
fn serve_and_agent_caps_parse_and_an_agents_own_caps_come_first() {
    use cajaguard_core::agent::AgentId;
    let p = parse(&serve(|_| {})).unwrap();
    let s = p.serve.as_ref().unwrap();
    assert_eq!(s.listen, "127.0.0.1:8376".parse().unwrap());
    assert_eq!(
        s.allowed_origins.iter().collect::<Vec<_>>(),
        ["http://localhost:6274"]
    );
    assert!(s.oauth.is_none());
    let own = p.agent_caps(&AgentId::parse("ci-bot").unwrap()).unwrap();
    assert_eq!(own["USD"].per_transaction, 2000);
    // Listed without caps, or not listed at all: agent_caps.
    for other in ["shopper", "someone-else"] {
        let caps = p.agent_caps(&AgentId::parse(other).unwrap()).unwrap();
        assert_eq!(caps["USD"].per_transaction, 2500, "{other}");
        assert!(!caps.contains_key("JPY"), "{other}");
    }
    // Neither: only the global caps hold.
    let bare = parse(&config_json()).unwrap();
    assert!(bare.serve.is_none() && bare.agent_caps.is_none());
    assert!(
        bare.agent_caps(&AgentId::parse("ci-bot").unwrap())
            .is_none()
    );
}

#[test]
fn serve_and_agent_caps_refusals_name_the_json_path() {
    refused(
        &serve(|c| c["serve"]["lisen"] = json!("x")),
        "$.serve.lisen",
    );
    refused(
        &serve(|c| c["serve"]["agents"][0]["token"] = json!("t")),
        "$.serve.agents[0].token",
    );
    refused(
        &serve(|c| c["agent_caps"]["USD"]["daily"] = json!("1")),
        "$.agent_caps.USD.daily",
    );
    for listen in ["localhost:8376", "127.0.0.1", "127.0.0.1:99999", ""] {
        refused(
            &serve(|c| c["serve"]["listen"] = json!(listen)),
            "$.serve.listen",
        );
    }
    refused(
        &serve(|c| {
            c["serve"].as_object_mut().unwrap().remove("listen");
        }),
        "$.serve.listen",
    );
    for origin in [
        "http://localhost:6274/app",
        "http://localhost:6274/",
        "http://localhost:6274?x=1",
        "ftp://localhost",
        "localhost:6274",
    ] {
        let msg = refused(
            &serve(|c| c["serve"]["allowed_origins"] = json!(["https://ok.example", origin])),
            "$.serve.allowed_origins[1]",
        );
        assert!(msg.contains("origin"), "{origin}: {msg}");
    }
    let msg = refused(
        &serve(|c| {
            c["agent_caps"]["EUR"] =
                json!({ "approval_above": "1.00", "per_transaction": "2.00", "window": "3.00" })
        }),
        "$.agent_caps.EUR",
    );
    assert!(msg.contains("global"), "{msg}");
    refused(
        &serve(|c| {
            c["serve"]["agents"][0]["caps"]["EUR"] =
                json!({ "approval_above": "1.00", "per_transaction": "2.00", "window": "3.00" })
        }),
        "$.serve.agents[0].caps.EUR",
    );
    refused(
        &serve(|c| c["agent_caps"]["USD"]["per_transaction"] = json!("50.00")),
        "$.agent_caps.USD",
    );
    let msg = refused(
        &serve(|c| c["serve"]["agents"][1]["name"] = json!("ci-bot")),
        "$.serve.agents[1].name",
    );
    assert!(msg.contains("once"), "{msg}");
    refused(
        &serve(|c| c["serve"]["agents"][1]["name"] = json!("ci bot")),
        "$.serve.agents[1].name",
    );
    let oauth = |jwks: Value| {
        serve(|c| {
            let mut o =
                json!({ "issuer": "https://id.example", "audience": "https://gate.example/mcp" });
            for (k, v) in jwks.as_object().unwrap() {
                o[k] = v.clone();
            }
            c["serve"]["oauth"] = o;
        })
    };
    assert!(parse(&oauth(json!({ "jwks_url": "https://id.example/jwks" }))).is_ok());
    assert!(parse(&oauth(json!({ "jwks_url": "http://127.0.0.1:9000/jwks" }))).is_ok());
    for url in [
        "http://id.example/jwks",
        "http://localhost/jwks",
        "http://10.0.0.1/jwks",
    ] {
        let msg = refused(&oauth(json!({ "jwks_url": url })), "$.serve.oauth.jwks_url");
        assert!(msg.contains("https"), "{url}: {msg}");
    }
    let msg = refused(
        &oauth(json!({ "jwks_url": "https://id.example/jwks", "jwks_file": "jwks.json" })),
        "$.serve.oauth",
    );
    assert!(msg.contains("both"), "{msg}");
    refused(&oauth(json!({})), "$.serve.oauth");
}
