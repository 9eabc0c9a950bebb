//! The layers of `src/` point one way. Each top-level module has a rank; a module may use
//! (`crate::…`) only modules of lower rank, never one of its own rank or above. So no module
//! cycle exists outside one folder, and the architecture drawn in the README stays true.
//!
//! ```text
//! main → cli → server → grpc | api | ui → rpc → audit → service → state → auth → oidc → config → rbac
//!      → principal → catalog → registry → kubernetes → store → gitrepo | clusters → leaves (error, schema, pb, clock, random, …)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first. Modules in one layer may not use each other.
const LAYERS: &[&[&str]] = &[
    &[
        "buildinfo",
        "checks",
        "clock",
        "error",
        "expr",
        "fsutil",
        "glob",
        "labels",
        "openpgp",
        "pb",
        "random",
        "schema",
        "seal",
        "telemetry",
        "tlsclient",
        "urlmask",
    ],
    // The clients of what tiphys contacts: repositories, destination clusters, the controller's
    // cache, the repo server.
    &["gitrepo", "clusters", "controller_cache", "reposerver"],
    &["store"],
    &["kubernetes"],
    &["registry"],
    // Indexes over the registry's applications (pages, filters, facets).
    &["catalog"],
    &["principal"],
    &["rbac"],
    &["config"],
    &["oidc"],
    &["auth"],
    &["state"],
    &["service"],
    &["audit"],
    &["rpc"],
    &["grpc", "api", "ui"],
    &["server"],
    &["cli"],
    // The fuzz targets' bodies call into every layer; nothing calls them.
    &["fuzzing"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (a module named in prose is not a use of it) and
/// without its inline test module (by convention the file's end: its `super::` are one level
/// deeper). A test module declared by `mod tests;` is a file of its own, checked as such; the
/// code after that declaration is the file's and is checked too.
fn code(text: &str) -> String {
    without_comments(&text[..inline_test_module(text).unwrap_or(text.len())])
}

/// A file's text without its line comments (doc comments included).
pub fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a file's inline test module (`#[cfg(test)]` then `mod NAME {`) starts, if it has one.
fn inline_test_module(text: &str) -> Option<usize> {
    const MARK: &str = "\n#[cfg(test)]\nmod ";
    let mut from = 0;
    while let Some(i) = text[from..].find(MARK) {
        let at = from + i;
        let rest = &text[at + MARK.len()..];
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if rest[name_len..].trim_start().starts_with('{') {
            return Some(at);
        }
        from = at + MARK.len();
    }
    None
}

/// The top-level modules a text names after `crate::` (grouped imports included), and after
/// as many `super::` as reach the crate root from a file `depth` modules deep.
fn used_modules(text: &str, depth: usize) -> Vec<String> {
    let mut used = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let (skip, path) = if let Some(path) = rest.strip_prefix("crate::") {
            ("crate::".len(), Some(path))
        } else if rest.starts_with("super::") && !text[..at].ends_with("::") {
            let mut chain = 0;
            let mut tail = rest;
            while let Some(next) = tail.strip_prefix("super::") {
                chain += 1;
                tail = next;
            }
            // Only a chain that climbs to the crate root names a top-level module.
            (
                rest.len() - tail.len(),
                (chain >= depth && depth > 0).then_some(tail),
            )
        } else {
            (rest.chars().next().map_or(1, char::len_utf8), None)
        };
        if let Some(path) = path {
            match path.strip_prefix('{') {
                Some(group) => used.extend(group_members(group)),
                None => used.push(first_segment(path)),
            }
        }
        at += skip;
    }
    used.retain(|m| !m.is_empty() && m != "self" && m != "super");
    used
}

/// The top-level names of a `{…}` group (its text after the `{`): the first segment of each
/// comma-separated path at the group's own depth.
fn group_members(group: &str) -> Vec<String> {
    let mut members = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(first_segment(&group[start..i]));
                return members;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(first_segment(&group[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    members.push(first_segment(&group[start..]));
    members
}

/// How many modules deep a file of `src/` is: `x.rs` and `x/mod.rs` are 1, `x/y.rs` is 2.
fn depth_of(src: &Path, file: &Path) -> usize {
    let rel = file.strip_prefix(src).unwrap();
    let parts = rel.components().count();
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn modules_only_use_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(own) = rank(&module) else {
            unknown.push(module);
            continue;
        };
        let text = code(&std::fs::read_to_string(file).unwrap());
        for used in used_modules(&text, depth_of(&src, file)) {
            if used == module || used == "AppError" {
                continue;
            }
            match rank(&used) {
                Some(r) if r < own => {}
                _ => wrong
                    .entry(format!(
                        "{} ({module})",
                        file.strip_prefix(&src).unwrap().display()
                    ))
                    .or_default()
                    .push(used),
            }
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "modules missing from LAYERS: {unknown:?}");
    assert!(wrong.is_empty(), "uses against the layers: {wrong:#?}");
}

#[test]
fn the_checker_sees_grouped_plain_and_super_uses() {
    let text =
        "use crate::{rbac::{Rbac, Denial}, server::X};\nlet x = crate::error::AppError::X; // crate::cli";
    assert_eq!(used_modules(&code(text), 1), ["rbac", "server", "error"]);
    // From src/state/mod.rs (depth 1), `super::` is the crate root; from src/state/x.rs it is `state`.
    assert_eq!(used_modules("use super::{cli::Cli, x};", 1), ["cli", "x"]);
    let text = "use super::{cli::Cli, x};\nuse super::super::server::S;";
    assert_eq!(used_modules(text, 2), ["server"]);
    assert_eq!(
        used_modules("use super::x; mod tests { use super::super::cli; }", 1),
        ["x", "cli"]
    );
    let text = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::super::cli;\n}";
    assert!(
        used_modules(&code(text), 2).is_empty(),
        "test modules are left out"
    );
    // A declared test module (a file of its own) does not hide the code after it.
    let text = "#[cfg(test)]\nmod tests;\nmod x;\n#[cfg(test)]\nmod more;\nuse crate::cli::Cli;";
    assert_eq!(used_modules(&code(&format!("\n{text}")), 1), ["cli"]);
}
