//! The two subcommands, their printed steps and their exit codes.
//! One idea (what the demo agent does, step by step) in one file, so the demo reads as a script.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::mcp::{Reply, Session};
use crate::{Cli, Command, PaymentArgs};

/// The profile URL the demo agent advertises in `meta.ucp-agent`.
pub const PROFILE: &str = "https://cajaguard-demo.example/.well-known/ucp";

/// Exit codes: the contract with scripts and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Completed = 0,
    Unexpected = 1,
    Usage = 2,
    Refused = 3,
    ShopFailed = 4,
}

/// How the run ended, with what to print last.
struct End {
    exit: Exit,
    verdict: String,
    reason: String,
    request_id: String,
    detail: Option<String>,
    checkout_id: String,
    next: String,
}

pub async fn run(cli: Cli) -> Exit {
    let (program, args) = match downstream(&cli) {
        Ok(found) => found,
        Err(message) => {
            eprintln!("cajaguard-demo: {message}");
            return Exit::Usage;
        }
    };
    let session = match Session::start(&program, &args).await {
        Ok(session) => session,
        Err(e) => {
            eprintln!("cajaguard-demo: {e:#}");
            eprintln!("  check that {} exists and starts", program.display());
            return Exit::Unexpected;
        }
    };
    let ctx = Ctx {
        config: cli.config.clone(),
        direct: cli.direct_shop.is_some(),
    };
    let outcome = match &cli.command {
        Command::Buy {
            product,
            qty,
            payment,
        } => buy(&session, &ctx, product, *qty, payment).await,
        Command::Pay {
            checkout_id,
            payment,
            idempotency_key,
        } => {
            pay(
                &session,
                &ctx,
                checkout_id,
                payment,
                idempotency_key.as_deref(),
            )
            .await
        }
    };
    session.close().await;
    match outcome {
        Ok(end) => {
            println!("verdict: {}", end.verdict);
            println!("reason: {}", end.reason);
            if let Some(detail) = &end.detail {
                println!("detail: {detail}");
            }
            println!("request id: {}", end.request_id);
            println!("checkout id: {}", end.checkout_id);
            println!("next: {}", end.next);
            end.exit
        }
        Err(e) => {
            eprintln!("cajaguard-demo: {e:#}");
            Exit::Unexpected
        }
    }
}

struct Ctx {
    config: Option<PathBuf>,
    direct: bool,
}

impl Ctx {
    /// This program, with the same connection flags, for a suggested next command.
    fn demo(&self) -> String {
        match &self.config {
            Some(config) => format!(
                "cajaguard-demo --config {}",
                quote(&config.display().to_string())
            ),
            None => "cajaguard-demo".into(),
        }
    }

    fn config_flag(&self) -> String {
        match &self.config {
            Some(config) => format!("--config {}", quote(&config.display().to_string())),
            None => "--config FILE".into(),
        }
    }
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:+=@,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Which program to start: the proxy (`cajaguard mcp --config FILE`) or, with `--direct-shop`,
/// the fixture shop itself.
fn downstream(cli: &Cli) -> Result<(PathBuf, Vec<String>), String> {
    if let Some(state) = &cli.direct_shop {
        let shop = locate("cajaguard-fixture-shop");
        return Ok((shop, vec!["--state".into(), state.display().to_string()]));
    }
    let Some(config) = &cli.config else {
        return Err("--config FILE is required (the CajaGuard config the proxy runs with)".into());
    };
    let proxy = cli
        .proxy_command
        .clone()
        .unwrap_or_else(|| locate("cajaguard"));
    Ok((
        proxy,
        vec![
            "mcp".into(),
            "--config".into(),
            config.display().to_string(),
        ],
    ))
}

/// Next to the running executable first, then on `PATH`, else the bare name.
fn locate(name: &str) -> PathBuf {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        let candidate = dir.join(&file);
        if candidate.is_file() {
            return candidate;
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(&file);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    PathBuf::from(file)
}

fn meta(idempotency_key: Option<&str>) -> Value {
    match idempotency_key {
        Some(key) => json!({"ucp-agent": {"profile": PROFILE}, "idempotency-key": key}),
        None => json!({"ucp-agent": {"profile": PROFILE}}),
    }
}

fn instrument(payment: &PaymentArgs) -> Value {
    json!({
        "id": "pi_demo_1",
        "handler_id": payment.handler,
        "type": "card",
        "credential": {"type": "token", "token": payment.token},
    })
}

/// A step's answer once refusals and errors are taken out.
enum Step {
    Ok {
        structured: Value,
        is_error: bool,
        cajaguard: Option<Value>,
    },
    End(End),
}

/// Calls one tool and prints one line for it. A CajaGuard refusal or a JSON-RPC error ends the run.
async fn step(
    session: &Session,
    ctx: &Ctx,
    tool: &str,
    arguments: Value,
    checkout_id: &str,
) -> anyhow::Result<Step> {
    match session.call(tool, arguments).await? {
        Reply::RpcError { code, message } => {
            println!("{tool}: JSON-RPC error {code}: {}", clean(&message));
            Ok(Step::End(End {
                exit: Exit::ShopFailed,
                verdict: "-".into(),
                reason: format!("jsonrpc_error_{code}"),
                request_id: "-".into(),
                detail: Some(clean(&message)),
                checkout_id: checkout_id.into(),
                next: format!("{} pay {checkout_id}", ctx.demo()),
            }))
        }
        Reply::Result {
            structured,
            is_error,
            cajaguard,
        } => {
            if let Some(refusal) = structured.get("cajaguard").filter(|_| is_error) {
                let verdict = text(refusal, "verdict");
                let reason = text(refusal, "reason");
                println!("{tool}: refused by CajaGuard: {verdict} / {reason}");
                let request_id = refusal
                    .get("request_id")
                    .and_then(Value::as_str)
                    .map(clean)
                    .unwrap_or_else(|| "-".into());
                let next = match refusal.get("next").and_then(Value::as_str) {
                    Some(next) => clean(next),
                    None if verdict == "blocked" && request_id != "-" => format!(
                        "cajaguard approve {request_id} {}   # then: {} pay {checkout_id}",
                        ctx.config_flag(),
                        ctx.demo()
                    ),
                    // Nothing about this basket or policy is wrong: the checkout itself is done
                    // (or not payable yet), so only a new checkout can be paid.
                    None if reason == "checkout_not_ready" => format!(
                        "{} buy \"<product>\"   # this checkout cannot be paid again; start a new one",
                        ctx.demo()
                    ),
                    None if reason == "test_mode_credential" && checkout_id != "-" => format!(
                        "{} pay {checkout_id} --token {}   # test mode takes test tokens only",
                        ctx.demo(),
                        crate::DEFAULT_TOKEN
                    ),
                    None => format!(
                        "cajaguard status {}   # nothing can approve this; change the basket or the policy",
                        ctx.config_flag()
                    ),
                };
                return Ok(Step::End(End {
                    exit: Exit::Refused,
                    verdict,
                    reason,
                    request_id,
                    detail: refusal.get("detail").and_then(Value::as_str).map(clean),
                    checkout_id: checkout_id.into(),
                    next,
                }));
            }
            Ok(Step::Ok {
                structured,
                is_error,
                cajaguard,
            })
        }
    }
}

fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .map(clean)
        .unwrap_or_else(|| "-".into())
}

/// Shop- or proxy-supplied text without control characters (no terminal escapes).
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// The shop's error messages, for one line.
fn messages(structured: &Value) -> String {
    let list: Vec<String> = structured
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| format!("{}: {}", text(m, "code"), text(m, "content")))
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        "no message".into()
    } else {
        list.join("; ")
    }
}

/// `USD 24.00` for minor units; the raw JSON for anything else (a broken shop's `49.99`).
fn money(currency: &str, amount: Option<&Value>) -> String {
    match amount {
        Some(Value::Number(n)) if n.is_u64() => {
            let minor = n.as_u64().unwrap_or(0);
            let exponent = match currency {
                "JPY" | "KRW" | "VND" | "CLP" | "ISK" | "UGX" | "XAF" | "XOF" | "PYG" => 0,
                "KWD" | "BHD" | "JOD" | "OMR" | "TND" | "LYD" | "IQD" => 3,
                _ => 2,
            };
            if exponent == 0 {
                format!("{currency} {minor}")
            } else {
                let scale = 10u64.pow(exponent);
                format!(
                    "{currency} {}.{:0width$}",
                    minor / scale,
                    minor % scale,
                    width = exponent as usize
                )
            }
        }
        Some(other) => format!("{currency} {other} (not minor units)"),
        None => format!("{currency} ?"),
    }
}

fn total(checkout: &Value) -> String {
    let currency = checkout
        .get("currency")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let amount = checkout
        .get("totals")
        .and_then(Value::as_array)
        .and_then(|ts| {
            ts.iter()
                .find(|t| t.get("type").and_then(Value::as_str) == Some("total"))
        })
        .and_then(|t| t.get("amount"));
    money(&clean(currency), amount)
}

/// The end of a run whose step failed at the shop (an error result without CajaGuard fields).
fn shop_failed(ctx: &Ctx, tool: &str, structured: &Value, checkout_id: &str) -> End {
    println!("{tool}: the shop refused: {}", messages(structured));
    End {
        exit: Exit::ShopFailed,
        verdict: "-".into(),
        reason: structured
            .get("status")
            .and_then(Value::as_str)
            .map(clean)
            .unwrap_or_else(|| "shop_error".into()),
        request_id: "-".into(),
        detail: Some(messages(structured)),
        checkout_id: checkout_id.into(),
        next: if checkout_id == "-" {
            format!("{} buy \"<product>\"", ctx.demo())
        } else {
            format!("{} pay {checkout_id}", ctx.demo())
        },
    }
}

async fn buy(
    session: &Session,
    ctx: &Ctx,
    product: &str,
    qty: u64,
    payment: &PaymentArgs,
) -> anyhow::Result<End> {
    // 1. search
    let args = json!({"meta": meta(None), "catalog": {"query": product}});
    let found = match step(session, ctx, "search_catalog", args, "-").await? {
        Step::End(end) => return Ok(end),
        Step::Ok {
            structured,
            is_error: true,
            ..
        } => {
            return Ok(shop_failed(ctx, "search_catalog", &structured, "-"));
        }
        Step::Ok { structured, .. } => structured,
    };
    let products = found
        .get("products")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let chosen = products
        .iter()
        .find(|p| {
            p.get("title")
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case(product.trim()))
        })
        .or_else(|| products.first());
    let Some(chosen) = chosen else {
        println!("search_catalog {:?}: no product found", clean(product));
        return Ok(End {
            exit: Exit::ShopFailed,
            verdict: "-".into(),
            reason: "product_not_found".into(),
            request_id: "-".into(),
            detail: None,
            checkout_id: "-".into(),
            next: format!("{} buy \"<another product>\"", ctx.demo()),
        });
    };
    let product_id = chosen
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let price = chosen
        .get("variants")
        .and_then(|v| v.get(0))
        .and_then(|v| v.get("price"))
        .cloned()
        .unwrap_or(Value::Null);
    println!(
        "search_catalog {:?}: {} {:?} {}",
        clean(product),
        clean(&product_id),
        text(chosen, "title"),
        money(&text(&price, "currency"), price.get("amount")),
    );

    // 2. create
    let lines = json!([{"item": {"id": product_id}, "quantity": qty}]);
    let args = json!({"meta": meta(None), "checkout": {"line_items": lines}});
    let created = match step(session, ctx, "create_checkout", args, "-").await? {
        Step::End(end) => return Ok(end),
        Step::Ok {
            structured,
            is_error: true,
            ..
        } => {
            return Ok(shop_failed(ctx, "create_checkout", &structured, "-"));
        }
        Step::Ok { structured, .. } => structured,
    };
    let checkout_id = created
        .get("id")
        .and_then(Value::as_str)
        .map(clean)
        .unwrap_or_default();
    println!(
        "create_checkout: {checkout_id} status {} total {}",
        text(&created, "status"),
        total(&created)
    );

    // 3. update with a payment instrument (update is a full replacement: line items again)
    let args = json!({
        "meta": meta(None),
        "id": checkout_id,
        "checkout": {"line_items": lines, "payment": {"instruments": [instrument(payment)]}},
    });
    let updated = match step(session, ctx, "update_checkout", args, &checkout_id).await? {
        Step::End(end) => return Ok(end),
        Step::Ok {
            structured,
            is_error: true,
            ..
        } => {
            return Ok(shop_failed(
                ctx,
                "update_checkout",
                &structured,
                &checkout_id,
            ));
        }
        Step::Ok { structured, .. } => structured,
    };
    println!(
        "update_checkout: payment instrument pi_demo_1 (handler {}) status {} total {}",
        clean(&payment.handler),
        text(&updated, "status"),
        total(&updated)
    );

    // 4. complete
    let key = uuid::Uuid::new_v4().to_string();
    complete(session, ctx, &checkout_id, payment, &key).await
}

async fn pay(
    session: &Session,
    ctx: &Ctx,
    checkout_id: &str,
    payment: &PaymentArgs,
    idempotency_key: Option<&str>,
) -> anyhow::Result<End> {
    let args = json!({"meta": meta(None), "id": checkout_id});
    let current = match step(session, ctx, "get_checkout", args, checkout_id).await? {
        Step::End(end) => return Ok(end),
        Step::Ok {
            structured,
            is_error: true,
            ..
        } => {
            return Ok(shop_failed(ctx, "get_checkout", &structured, checkout_id));
        }
        Step::Ok { structured, .. } => structured,
    };
    println!(
        "get_checkout: {} status {} total {}",
        clean(checkout_id),
        text(&current, "status"),
        total(&current)
    );
    let key = idempotency_key
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    complete(session, ctx, checkout_id, payment, &key).await
}

/// `complete_checkout` with `checkout: {payment}` only: never totals or anything business-owned.
async fn complete(
    session: &Session,
    ctx: &Ctx,
    checkout_id: &str,
    payment: &PaymentArgs,
    key: &str,
) -> anyhow::Result<End> {
    let args = json!({
        "meta": meta(Some(key)),
        "id": checkout_id,
        "checkout": {"payment": {"instruments": [instrument(payment)]}},
    });
    let (structured, is_error, cajaguard) =
        match step(session, ctx, "complete_checkout", args, checkout_id).await? {
            Step::End(end) => return Ok(end),
            Step::Ok {
                structured,
                is_error,
                cajaguard,
            } => (structured, is_error, cajaguard),
        };
    let (verdict, reason, request_id, detail) = match &cajaguard {
        Some(g) => (
            text(g, "verdict"),
            text(g, "reason"),
            text(g, "request_id"),
            g.get("detail").and_then(Value::as_str).map(clean),
        ),
        None => ("-".into(), "-".into(), "-".into(), None),
    };
    let status = structured
        .get("status")
        .and_then(Value::as_str)
        .map(clean)
        .unwrap_or_else(|| "-".into());
    if !is_error && status == "completed" {
        let order = structured
            .get("order")
            .map(|o| text(o, "id"))
            .unwrap_or_else(|| "-".into());
        println!(
            "complete_checkout: status completed, order {order}, total {}",
            total(&structured)
        );
        let next = if ctx.direct {
            "none: the order is placed".to_owned()
        } else {
            format!("cajaguard status {}", ctx.config_flag())
        };
        return Ok(End {
            exit: Exit::Completed,
            verdict,
            reason: if cajaguard.is_some() { reason } else { status },
            request_id,
            detail,
            checkout_id: checkout_id.into(),
            next,
        });
    }
    let already_done =
        status == "completed" || messages(&structured).starts_with("checkout_completed");
    println!(
        "complete_checkout: the shop did not complete it: {}",
        messages(&structured)
    );
    Ok(End {
        exit: Exit::ShopFailed,
        verdict,
        reason: if cajaguard.is_some() {
            reason
        } else {
            let code = structured
                .get("messages")
                .and_then(|m| m.get(0))
                .map(|m| text(m, "code"));
            code.unwrap_or(status)
        },
        request_id,
        detail: detail.or_else(|| Some(messages(&structured))),
        checkout_id: checkout_id.into(),
        next: if already_done {
            "none: this checkout is already completed".to_owned()
        } else {
            format!(
                "{} pay {checkout_id} --token <another test token>",
                ctx.demo()
            )
        },
    })
}
