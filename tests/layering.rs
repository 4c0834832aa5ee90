//! The layer rule, checked on the source: types → spi → engine → primitives; backends use
//! only the SPI and the types; the engine names no backend; the fenced-write helpers
//! (`fence`) use only the types; the root (`connect`, `lib.rs`) composes them; the TCK uses
//! the public API. Every `crate::…` path in code (not in
//! comments, not in `#[cfg(test)]` modules) is checked against the layer of its file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layer of a module path's first segment (or of a name the crate root re-exports).
fn layer_of(segment: &str, root_names: &BTreeMap<String, String>) -> Option<&'static str> {
    let module = root_names
        .get(segment)
        .map(String::as_str)
        .unwrap_or(segment);
    Some(match module {
        "types" | "error" | "rand" => "types",
        "spi" => "spi",
        "backends" => "backends",
        "engine" => "engine",
        "primitives" => "primitives",
        "fence" => "fence",
        "connect" | "metrics" => "root",
        "tck" => "tck",
        "sim" => "sim",
        _ => return None,
    })
}

/// What each layer may use.
fn allowed(from: &str) -> &'static [&'static str] {
    match from {
        "types" => &["types"],
        "spi" => &["types", "spi"],
        "backends" => &["types", "spi", "backends"],
        "engine" => &["types", "spi", "engine"],
        "primitives" => &["types", "spi", "engine", "primitives"],
        // Checked where the data lives, by the caller's own clients: no engine, no backend.
        "fence" => &["types", "fence"],
        "root" => &[
            "types",
            "spi",
            "backends",
            "engine",
            "primitives",
            "fence",
            "root",
        ],
        "tck" => &[
            "types",
            "spi",
            "backends",
            "engine",
            "primitives",
            "fence",
            "root",
            "tck",
        ],
        "sim" => &["types", "spi", "engine", "sim"],
        other => panic!("no rule for layer {other}"),
    }
}

/// The layer of a file under `src/`.
fn file_layer(rel: &Path) -> Option<&'static str> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(match first {
        "types" | "error" | "rand.rs" => "types",
        "spi" => "spi",
        "backends" => "backends",
        "engine" => "engine",
        "primitives" => "primitives",
        "fence" => "fence",
        "lib.rs" | "connect.rs" | "metrics.rs" => "root",
        "tck" => "tck",
        "sim" => "sim",
        "bin" => return None, // a crate of its own, over the public API
        other => panic!("src/{other}: a file in no layer; give it one in tests/layering.rs"),
    })
}

/// The names `src/lib.rs` re-exports, with the module each comes from.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let code = strip(lib);
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let module = rest.split("::").next().unwrap_or("").trim().to_owned();
        let list = match (rest.find('{'), rest.rfind('}')) {
            (Some(a), Some(b)) => rest[a + 1..b].to_owned(),
            _ => rest.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for name in list.split(',') {
            let name = name.trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

/// The code of a file without comments and without `#[cfg(test)]` items.
fn strip(source: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut pending_test = false;
    let mut depth = 0i32;
    for line in source.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = code.matches('{').count() as i32;
        let closes = code.matches('}').count() as i32;
        if pending_test && skip_depth.is_none() && !trimmed.is_empty() {
            pending_test = false;
            if opens > closes {
                skip_depth = Some(depth);
            } else {
                continue; // a one-line test-only item
            }
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The first segment of a path that follows (`engine::X` gives `engine`), or of each item
/// of a grouped import (`{engine::X, spi::{A, B}}` gives `engine` and `spi`).
fn heads(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let rest = rest.trim_start();
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let (mut items, mut item, mut depth) = (Vec::new(), String::new(), 0);
    for c in group.chars() {
        match c {
            '}' if depth == 0 => break,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    (items.iter().map(|i| ident(i)))
        .filter(|i| !i.is_empty() && i != "self")
        .collect()
}

/// Whether the text before a path ends in a part of a longer path or name.
fn continues(before: &str) -> bool {
    before.ends_with("::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The crate-level modules `code` reaches: through `crate::` paths (grouped imports
/// expanded), and through `super::` chains that climb out of the file's top module
/// (`module`: the file's module path, e.g. `["engine", "driver", "release"]`).
fn reached(code: &str, module: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if !continues(&code[..i]) {
            out.extend(heads(&code[i + 7..]));
        }
    }
    for (i, _) in code.match_indices("super::") {
        if continues(&code[..i]) {
            continue; // counted from the chain's first `super`
        }
        let (mut rest, mut up) = (&code[i..], 0);
        while let Some(r) = rest.strip_prefix("super::") {
            (rest, up) = (r, up + 1);
        }
        if up == module.len() {
            out.extend(heads(rest)); // the crate root: a module of its own layer
        }
    }
    out
}

/// The module path of a file under `src/` (`engine/mod.rs` is `["engine"]`, `lib.rs` none).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_follows_the_layer_rule() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let roots = root_names(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut breaks = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap().to_owned();
        let Some(from) = file_layer(&rel) else {
            continue;
        };
        let code = strip(&std::fs::read_to_string(&file).unwrap());
        for segment in reached(&code, &module_of(&rel)) {
            let Some(to) = layer_of(&segment, &roots) else {
                continue;
            };
            if !allowed(from).contains(&to) {
                breaks.push(format!(
                    "src/{}: `crate::{segment}` ({to}) reached from the {from} layer, which may \
                     use only {:?}",
                    rel.display(),
                    allowed(from),
                ));
            }
        }
        // The primitives reach the session only through its handle (engine/handle.rs).
        for inside in ["engine::core", "engine::session", "lock_shared", "Shared"] {
            if from == "primitives" && code.contains(inside) {
                breaks.push(format!(
                    "src/{}: a primitive names the engine's inside ({inside}); use the \
                     session's handle (src/engine/handle.rs)",
                    rel.display()
                ));
            }
        }
        // Driver errors are classified by each backend (`backends/<name>/failure.rs`); the
        // types layer names no driver crate.
        for driver in ["postgres::", "mysql::", "redis::", "zookeeper_client::"] {
            if from == "types" && code.contains(driver) {
                breaks.push(format!(
                    "src/{}: the types layer names a driver ({driver}); classify its errors \
                     in the backend's failure module",
                    rel.display()
                ));
            }
        }
        if from == "tck" && code.contains("crate::rand") {
            breaks.push(format!(
                "src/{}: the TCK uses the public API only (not crate::rand)",
                rel.display()
            ));
        }
    }
    assert!(
        breaks.is_empty(),
        "imports against the layer rule (types → spi → engine → primitives; backends use only \
         spi and types; the engine names no backend; fence uses only types):\n{}",
        breaks.join("\n")
    );
}

#[test]
fn the_checker_sees_a_break() {
    let roots = root_names("pub use engine::{Config, Session};");
    assert_eq!(layer_of("Config", &roots), Some("engine"));
    let code = strip(
        "use crate::engine::Clock; // a comment crate::backends\n#[cfg(test)]\nmod tests {\n    use crate::engine::X;\n}\nfn f() {}\n",
    );
    assert!(code.contains("crate::engine::Clock"));
    assert!(!code.contains("crate::backends"));
    assert!(!code.contains("engine::X"));
    assert!(code.contains("fn f()"));
    assert!(!allowed("backends").contains(&"engine"));
    assert!(!allowed("fence").contains(&"engine") && !allowed("fence").contains(&"backends"));
    // Grouped imports and `super::` chains out of the file's top module are seen too.
    let release = module_of(Path::new("engine/driver/release.rs"));
    assert_eq!(release, ["engine", "driver", "release"]);
    let code = "use crate::{spi::{A, B}, backends::X};\nuse super::super::super::fence::F;\n\
                use super::super::core::Core;\nuse other_crate::engine;";
    assert_eq!(reached(code, &release), ["spi", "backends", "fence"]);
    assert_eq!(module_of(Path::new("engine/mod.rs")), ["engine"]);
    assert_eq!(
        reached("use super::backends::Y;", &["engine".into()]),
        ["backends"]
    );
}
