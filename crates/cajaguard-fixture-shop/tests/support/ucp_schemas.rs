//! Validation against the pinned UCP schemas, loaded from disk (never copied into the repo).
//!
//! The schemas are found at `CARGO_MANIFEST_DIR/../../../shared/ucp` (i.e. `shared/ucp` beside
//! the repository). Every file is served under its `$id`, in several trees:
//! - `https://ucp.dev/...`: the files as pinned (results are checked here);
//! - `https://ucp.dev/req-{create,update,complete}/...`: the files resolved for that request
//!   operation from their `ucp_request` annotations: an `omit` field becomes `false` (forbidden)
//!   and leaves `required`, a `required` one joins `required`, an `optional` one leaves it;
//! - `https://ucp.dev/resp/...`: resolved from `ucp_response` (`omit` fields forbidden), also
//!   checked for results.
//!
//! The openrpc document is served in each tree at `.../services/shopping/mcp.openrpc.json`, so
//! a tool's params and result schemas are `$ref`s into it and its relative `$ref`s resolve
//! within the same tree.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

pub fn ucp_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/ucp"));
    let openrpc = dir.join("source/services/shopping/mcp.openrpc.json");
    assert!(
        openrpc.is_file(),
        "the pinned UCP schemas are expected at {} (shared/ucp beside the repository, with \
         source/services/shopping/mcp.openrpc.json and source/schemas/); they were not found",
        dir.display()
    );
    dir
}

const OPENRPC_PATH: &str = "services/shopping/mcp.openrpc.json";
const TREES: &[&str] = &["", "req-create/", "req-update/", "req-complete/", "resp/"];

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the UCP schema directory") {
        let path = entry.expect("read a directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

/// Resolves `ucp_request` (for `op`) or `ucp_response` (op `"response"`) annotations.
fn resolve(node: &mut Value, op: &str) {
    match node {
        Value::Object(obj) => {
            if let Some(Value::Object(props)) = obj.get_mut("properties") {
                let mut add = Vec::new();
                let mut remove = Vec::new();
                for (name, sub) in props.iter_mut() {
                    let key = if op == "response" {
                        "ucp_response"
                    } else {
                        "ucp_request"
                    };
                    let mode = match sub.get(key) {
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(Value::Object(per_op)) => {
                            per_op.get(op).and_then(Value::as_str).map(str::to_owned)
                        }
                        _ => None,
                    };
                    match mode.as_deref() {
                        Some("omit") => {
                            *sub = Value::Bool(false);
                            remove.push(name.clone());
                        }
                        Some("required") => add.push(name.clone()),
                        Some("optional") => remove.push(name.clone()),
                        _ => {}
                    }
                }
                if !add.is_empty() || !remove.is_empty() {
                    let mut required: Vec<Value> = obj
                        .get("required")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    required.retain(|r| !remove.iter().any(|n| r == n));
                    for n in add {
                        if !required.iter().any(|r| r == &n) {
                            required.push(json!(n));
                        }
                    }
                    obj.insert("required".into(), Value::Array(required));
                }
            }
            for (_, v) in obj.iter_mut() {
                resolve(v, op);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| resolve(v, op)),
        _ => {}
    }
}

pub struct UcpSchemas {
    openrpc: Value,
    registry: jsonschema::Registry<'static>,
}

impl UcpSchemas {
    pub fn load() -> Self {
        let dir = ucp_dir();
        let mut files = Vec::new();
        collect(&dir.join("source/schemas"), &mut files);
        let openrpc_file = dir.join("source").join(OPENRPC_PATH);
        let read = |p: &Path| -> Value {
            serde_json::from_slice(&std::fs::read(p).expect("read a UCP file"))
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
        };
        let openrpc = read(&openrpc_file);
        let mut docs = HashMap::new();
        for tree in TREES {
            let op = match *tree {
                "req-create/" => Some("create"),
                "req-update/" => Some("update"),
                "req-complete/" => Some("complete"),
                "resp/" => Some("response"),
                _ => None,
            };
            for file in &files {
                let rel = file
                    .strip_prefix(dir.join("source"))
                    .expect("file under source/")
                    .to_string_lossy()
                    .replace('\\', "/");
                let mut doc = read(file);
                let uri = format!("https://ucp.dev/{tree}{rel}");
                if let Some(obj) = doc.as_object_mut() {
                    obj.insert("$id".into(), json!(uri));
                }
                if let Some(op) = op {
                    resolve(&mut doc, op);
                }
                docs.insert(uri, doc);
            }
            docs.insert(
                format!("https://ucp.dev/{tree}{OPENRPC_PATH}"),
                openrpc.clone(),
            );
        }
        let draft = jsonschema::Draft::Draft202012;
        let registry = jsonschema::Registry::new()
            .draft(draft)
            .retrieve_known_draft_meta_schemas(false)
            .extend(
                docs.into_iter()
                    .map(|(uri, doc)| (uri, draft.create_resource(doc))),
            )
            .expect("valid UCP schema URIs")
            .prepare()
            .unwrap_or_else(|e| panic!("cannot index the pinned UCP schemas: {e}"));
        Self { openrpc, registry }
    }

    fn method_index(&self, tool: &str) -> usize {
        self.openrpc["methods"]
            .as_array()
            .expect("methods")
            .iter()
            .position(|m| m["name"] == tool)
            .unwrap_or_else(|| panic!("{tool} is not a method of mcp.openrpc.json"))
    }

    pub fn method_names(&self) -> Vec<String> {
        self.openrpc["methods"]
            .as_array()
            .expect("methods")
            .iter()
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect()
    }

    fn validate(&self, schema: &Value, instance: &Value) -> Result<(), Vec<String>> {
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .with_registry(&self.registry)
            .build(schema)
            .unwrap_or_else(|e| panic!("cannot build a validator for {schema}: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Checks a tool's arguments: the openrpc params (required ones present, each against its
    /// schema), resolved for the operation's `ucp_request` annotations.
    pub fn check_request(&self, tool: &str, arguments: &Value) -> Result<(), Vec<String>> {
        let i = self.method_index(tool);
        let tree = match tool {
            "create_checkout" | "create_cart" => "req-create/",
            "update_checkout" | "update_cart" => "req-update/",
            "complete_checkout" => "req-complete/",
            _ => "",
        };
        let base = format!("https://ucp.dev/{tree}{OPENRPC_PATH}");
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (j, param) in self.openrpc["methods"][i]["params"]
            .as_array()
            .expect("params")
            .iter()
            .enumerate()
        {
            let name = param["name"].as_str().expect("param name");
            properties.insert(
                name.to_owned(),
                json!({"$ref": format!("{base}#/methods/{i}/params/{j}/schema")}),
            );
            if param["required"] == json!(true) {
                required.push(json!(name));
            }
        }
        let schema = json!({"type": "object", "properties": properties, "required": required});
        self.validate(&schema, arguments)
    }

    /// Checks a tool's `structuredContent` against the openrpc result schema, as pinned and
    /// with `ucp_response` annotations resolved.
    pub fn check_result(&self, tool: &str, structured: &Value) -> Result<(), Vec<String>> {
        let i = self.method_index(tool);
        for tree in ["", "resp/"] {
            let schema = json!({
                "$ref": format!("https://ucp.dev/{tree}{OPENRPC_PATH}#/methods/{i}/result/schema")
            });
            self.validate(&schema, structured)?;
        }
        Ok(())
    }
}
