//! The sink's rooms depend on each other one way (issue 34): `log/`, `projection/`, `writer/`,
//! `legacy/`, `handle/`, `open.rs` and the small files beside them import each other without a
//! cycle. Read from the source's `use` lines and paths, as text: `super::` and `crate::sink::`
//! resolved from the file's place in the tree; test modules left out; the sink's root
//! (`sink/mod.rs`: the `Sink` trait, `SinkError`) is the vocabulary every room shares.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The sink's source folder.
fn sink_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src/sink")
}

/// Every `.rs` file below `dir`.
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

/// The module path of `file` below the sink (`projection/staged.rs` → `[projection, staged]`).
fn module_of(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(sink_dir()).unwrap();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of `text` without its test modules (from `#[cfg(test)]` followed by a `mod` on).
fn without_tests(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            let next = lines.next().unwrap_or_default();
            if next.trim_end().ends_with('{') {
                break; // an inline test module: the rest of the file is tests
            }
            continue; // `mod tests;`: a file of its own, skipped by name
        }
        if !line.trim_start().starts_with("//") {
            kept.push(line);
        }
    }
    kept.join("\n")
}

/// The sink rooms `code` of module `module` names: the first component below `sink` of every
/// `crate::sink::…` and `super::…` path.
fn rooms_named(module: &[String], code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let bytes = code.as_bytes();
    for (start, _) in code.match_indices("crate::sink::") {
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let rest = &code[start + "crate::sink::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        named.insert(name);
    }
    for (start, _) in code.match_indices("super::") {
        if start >= 7 && &code[start - 7..start] == "super::" {
            continue; // counted from the first `super::` of the chain
        }
        let mut rest = &code[start..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // `super` of a file's module is its parent; the sink's root has no room.
        let Some(base) = module.len().checked_sub(ups) else {
            continue;
        };
        let target: Vec<&str> = module[..base]
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(name.as_str()))
            .collect();
        named.insert(target[0].to_owned());
    }
    named
}

/// Room → the rooms it imports from, over the sink's code.
fn room_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&sink_dir(), &mut files);
    let rooms: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_of(f).first().cloned())
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let module = module_of(&file);
        let Some(room) = module.first().cloned() else {
            continue; // sink/mod.rs: the shared vocabulary
        };
        let code = without_tests(&std::fs::read_to_string(&file).unwrap());
        let edges = graph.entry(room.clone()).or_default();
        for target in rooms_named(&module, &code) {
            if target != room && rooms.contains(&target) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_sink_rooms_import_each_other_without_a_cycle() {
    let graph = room_graph();
    // The rooms the design note names are all there, and the log depends on no other room.
    for room in [
        "log",
        "writer",
        "projection",
        "legacy",
        "handle",
        "open",
        "config",
    ] {
        assert!(graph.contains_key(room), "no room {room}: {graph:?}");
    }
    assert!(
        graph["log"].is_empty(),
        "the log imports {:?}",
        graph["log"]
    );
    assert_eq!(find_cycle(&graph), None, "rooms: {graph:#?}");
}

#[test]
fn a_cycle_is_found() {
    let graph = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn paths_resolve_from_the_file_s_place() {
    let module = vec!["projection".to_owned(), "staged".to_owned()];
    let code = "use super::keys;\nuse super::super::config::X;\nuse crate::sink::log::Y;";
    assert_eq!(
        rooms_named(&module, code),
        BTreeSet::from(["projection".into(), "config".into(), "log".into()])
    );
}
