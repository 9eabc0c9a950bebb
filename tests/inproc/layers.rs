//! The layers of `src/` point one way. Each top-level module has a rank; a module may use
//! (`crate::…`) only modules of lower rank, never one of its own rank or above. So no module
//! cycle exists outside one folder, and the architecture drawn in the README stays true.
//!
//! ```text
//! main → cli → server → grpc | api | ui → rpc → service → app → auth → oidc → config → rbac
//!      → principal → registry → store → leaves (error, schema, pb, clock, random, …)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first. Modules in one layer may not use each other.
const LAYERS: &[&[&str]] = &[
    &[
        "buildinfo",
        "clock",
        "error",
        "fsutil",
        "jose",
        "json",
        "pb",
        "random",
        "schema",
        "telemetry",
        "tlsclient",
        "urlmask",
    ],
    &["store"],
    &["registry"],
    &["principal"],
    &["rbac"],
    &["config"],
    &["oidc"],
    &["auth"],
    &["app"],
    &["service"],
    &["rpc"],
    &["grpc", "api", "ui"],
    &["server"],
    &["cli"],
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

/// The code of a file without its comments (a module named in prose is not a use of it).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a text names after `crate::`, grouped imports included.
fn used_modules(text: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            // Top-level names of the group: the first segment of each comma-separated path.
            let mut depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        used.push(first_segment(&inner[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            used.push(first_segment(&inner[start..]));
        } else {
            used.push(first_segment(rest));
        }
    }
    used.retain(|m| !m.is_empty());
    used
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
        for used in used_modules(&text) {
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
fn the_checker_sees_grouped_and_plain_uses() {
    let text =
        "use crate::{auth::Auth, rbac::{Rbac, Denial}};\nlet x = crate::error::AppError::X; // crate::cli";
    assert_eq!(used_modules(&code(text)), ["auth", "rbac", "error"]);
}
