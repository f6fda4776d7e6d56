//! The core's modules form layers, not circles (docs/ARCHITECTURE.md): a module never imports one
//! that imports it back, directly or through others. Read from the sources: every `crate::<module>`
//! a top-level module's files name outside comments and `#[cfg(test)]` blocks is an edge.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level module a file under `src/` belongs to (`approval/keys.rs` -> `approval`).
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Some(module) = module_of(path.strip_prefix(&src).unwrap()) else {
                continue;
            };
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            // Doc links are not imports.
            let text: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let text = text.as_str();
            let used = graph.entry(module.clone()).or_default();
            for (i, _) in text.match_indices("crate::") {
                let rest = &text[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let preceded_by_word = text[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
                if !preceded_by_word && !name.is_empty() && name != module && name != "Error" {
                    used.insert(name);
                }
            }
            if text.contains("crate::Error") {
                used.insert("error".to_owned());
            }
        }
    }
    graph
}

fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(m) = todo.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = edges();
    assert!(
        graph.contains_key("gate") && graph.contains_key("verdict"),
        "{graph:?}"
    );
    for (module, used) in &graph {
        for other in used {
            assert!(
                !reaches(&graph, other, module),
                "import circle: {module} uses {other}, which leads back to {module} ({graph:?})"
            );
        }
    }
}

#[test]
fn the_leaves_import_nothing_above_them() {
    let graph = edges();
    let allowed: &[(&str, &[&str])] = &[
        ("error", &[]),
        ("display", &[]),
        ("digest", &["error"]),
        ("agent", &["error"]),
        ("verdict", &["digest"]),
    ];
    for (leaf, may_use) in allowed {
        let used: Vec<&String> = graph[*leaf]
            .iter()
            .filter(|m| !may_use.contains(&m.as_str()))
            .collect();
        assert!(used.is_empty(), "{leaf} imports {used:?}");
    }
}
