//! A 403 is recorded where it is made. `AppError::PermissionDenied` holds a
//! `tiphys::error::Denied`, whose only constructor (`Denied::once_recorded`) is public because
//! the authorizer lives above the error table; the audit trail (`src/audit.rs`) writes no
//! line for a 403, trusting that whoever made it wrote one. These scans keep that true:
//!
//! - only `src/rbac/mod.rs` (`Rbac::deny`, `Rbac::refuse`, which write the audit line and
//!   count) and `src/error.rs` (which defines it) name `once_recorded`;
//! - in `src/service`, only `service::access` talks to the authorizer: no use case calls
//!   `rbac.allows`, `rbac.deny` or `rbac.refuse`, or names the `Rbac` type (so it cannot be
//!   handed around under another name either).
//!
//! A scan of text, in the style of `layers.rs`: comments are left out, code is not parsed.

use std::path::{Path, PathBuf};

use crate::layers::{rust_files, without_comments};

/// Files that may name the constructor of a recorded denial.
const RECORDERS: &[&str] = &["error.rs", "rbac/mod.rs"];

/// What a use case may not say, outside `service/access.rs` (whitespace removed, so calls
/// split over lines are seen).
const AUTHORIZER_CALLS: &[&str] = &["rbac.allows(", "rbac.deny(", "rbac.refuse(", "Rbac"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The files of `src/` as (path relative to `src/`, code without comments).
fn sources() -> Vec<(String, String)> {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .iter()
        .map(|file| {
            let rel = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, without_comments(&std::fs::read_to_string(file).unwrap()))
        })
        .collect()
}

fn makes_a_denial(code: &str) -> bool {
    code.contains("once_recorded")
}

/// The authorizer calls in `code` that only `service::access` may make.
fn asks_rbac(code: &str) -> Vec<&'static str> {
    let flat: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    AUTHORIZER_CALLS
        .iter()
        .copied()
        .filter(|call| flat.contains(call))
        .collect()
}

#[test]
fn only_the_authorizer_makes_a_permission_denial() {
    let sources = sources();
    assert!(
        sources
            .iter()
            .any(|(rel, code)| rel == "rbac/mod.rs" && makes_a_denial(code)),
        "the scan no longer sees the authorizer make a denial: has the constructor been renamed?"
    );
    let wrong: Vec<&str> = sources
        .iter()
        .filter(|(rel, code)| makes_a_denial(code) && !RECORDERS.contains(&rel.as_str()))
        .map(|(rel, _)| rel.as_str())
        .collect();
    assert!(
        wrong.is_empty(),
        "these files make an AppError::PermissionDenied without recording it; refuse through \
         service::access (Access::check, access::refuse) instead: {wrong:?}"
    );
}

#[test]
fn use_cases_ask_the_authorizer_only_through_access() {
    let mut wrong = Vec::new();
    for (rel, code) in sources() {
        if rel.starts_with("service/") && rel != "service/access.rs" {
            let calls = asks_rbac(&code);
            if !calls.is_empty() {
                wrong.push(format!("{rel}: {calls:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "use cases that decide or deny without service::access: {wrong:#?}"
    );
}

#[test]
fn the_scans_see_what_they_look_for() {
    assert!(makes_a_denial(
        "AppError::PermissionDenied(Denied::once_recorded(m))"
    ));
    assert!(!makes_a_denial(&without_comments(
        "// Denied::once_recorded is for the authorizer\nlet x = 1;"
    )));
    assert_eq!(
        asks_rbac("state\n    .rbac\n    .allows(principal, RESOURCE, \"get\", o)"),
        ["rbac.allows("]
    );
    assert_eq!(
        asks_rbac("fn f(r: &Rbac) {}\nctx.app.rbac.deny(d, p, r, a, o)"),
        ["rbac.deny(", "Rbac"]
    );
    assert!(asks_rbac("Access::detailed(RESOURCE, \"get\").check(&ctx.app, p, o)?;").is_empty());
    assert!(asks_rbac("ctx.app.rbac.policy().groups(claims)").is_empty());
}
