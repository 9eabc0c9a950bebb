//! What a repo server answers from the files of one revision, without git, network or tools:
//! the apps in a repository (ListApps), the details of one (GetAppDetails), the manifests of a
//! plain directory (GetManifests), and a Helm repository's index (GetHelmCharts,
//! GetRevisionChartDetails). The fetching side hands the files over through [`Files`].
//!
//! Behaviour follows Argo CD's repo server (`reposerver/repository/repository.go`,
//! `util/app/discovery`, `util/helm`). Where upstream runs a tool (helm, kustomize, jsonnet, a
//! config management plugin) tiphys cannot, and says so with `FAILED_PRECONDITION` rather than
//! answer something different; the few approximations are documented where they are made.
//!
//! A symlink is listed by the caller like a file, and read as whatever the caller gives for
//! it (its target's content, once the caller has checked the target stays in the repository,
//! as upstream refuses out-of-repository links).
//!
//! Paths are relative to the repository root, `/`-separated, `.` for the root. An app path
//! that is absolute or climbs out of the root is `INVALID_ARGUMENT`, one that names nothing is
//! `NOT_FOUND`, as upstream's `util/app/path` refuses them.

mod details;
mod discover;
mod helm_index;
mod helm_values;
mod manifests;
mod source;
mod yaml;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::AppError;

pub use self::details::{Details, HelmAppSpec, KustomizeAppSpec, app_details};
pub use self::discover::discover;
pub use self::helm_index::{ChartDetails, HelmChart, MAX_INDEX_BYTES, chart_details, parse_index};
pub use self::helm_values::{MAX_PARAMETERS, MAX_VALUES_BYTES};
pub use self::manifests::{MAX_MANIFEST_BYTES, MAX_MANIFEST_DOCUMENTS, manifests};
pub use self::source::source_type;

/// The files of one revision of a repository, read-only.
pub trait Files {
    /// Every regular file (and symlink) as (path, size in bytes): relative, '/'-separated, sorted.
    fn list(&self) -> &[(String, u64)];
    /// One file's content, or `AppError::NotFound` naming the path.
    fn read(&self, path: &str) -> Result<Vec<u8>, AppError>;

    /// Whether `path` is a listed file.
    fn contains(&self, path: &str) -> bool {
        self.list().iter().any(|(p, _)| p == path)
    }
}

/// Files held in memory: for tests, and for callers that already have the content.
#[derive(Debug, Default, Clone)]
pub struct MemFiles {
    files: BTreeMap<String, Vec<u8>>,
    listed: Vec<(String, u64)>,
}

impl MemFiles {
    pub fn new<P: Into<String>, C: Into<Vec<u8>>>(files: impl IntoIterator<Item = (P, C)>) -> Self {
        let files: BTreeMap<String, Vec<u8>> = files.into_iter().map(|(p, c)| (p.into(), c.into())).collect();
        let listed = files.iter().map(|(p, c)| (p.clone(), c.len() as u64)).collect();
        Self { files, listed }
    }
}

impl Files for MemFiles {
    fn list(&self) -> &[(String, u64)] {
        &self.listed
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, AppError> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| AppError::NotFound(format!("{path}: file does not exist")))
    }
}

/// An application's tool, named as upstream's `ApplicationSourceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AppType {
    Helm,
    Kustomize,
    Directory,
    Plugin,
}

impl AppType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Helm => "Helm",
            Self::Kustomize => "Kustomize",
            Self::Directory => "Directory",
            Self::Plugin => "Plugin",
        }
    }
}

/// A repository-relative directory made canonical: `""` for the root, no `.`/`..` segments,
/// no trailing slash. `..` that would leave the root and absolute paths are refused, as
/// upstream's `util/app/path` refuses them before looking at the disk.
fn clean_path(path: &str) -> Result<String, AppError> {
    if path.starts_with('/') {
        return Err(AppError::InvalidArgument(format!("{path}: app path is absolute")));
    }
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(AppError::InvalidArgument(format!(
                        "{path}: app path outside root"
                    )));
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

/// The canonical form of an app directory that must exist: the root always does, any other
/// directory when a file lies under it. A file is not a directory.
fn app_dir(files: &(impl Files + ?Sized), path: &str) -> Result<String, AppError> {
    let dir = clean_path(path)?;
    if dir.is_empty() {
        return Ok(dir);
    }
    if files.contains(&dir) {
        return Err(AppError::InvalidArgument(format!(
            "{path}: app path is not a directory"
        )));
    }
    let prefix = format!("{dir}/");
    if files.list().iter().any(|(p, _)| p.starts_with(&prefix)) {
        Ok(dir)
    } else {
        Err(AppError::NotFound(format!("{path}: app path does not exist")))
    }
}

/// `dir` joined with `name`, where `dir` is canonical (`""` for the root).
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// The part of `path` under `dir` (canonical), if it lies there.
fn under<'a>(dir: &str, path: &'a str) -> Option<&'a str> {
    if dir.is_empty() {
        return Some(path);
    }
    path.strip_prefix(dir)?.strip_prefix('/')
}

/// The order Go's `filepath.Walk` visits files in: names sorted within each directory, a
/// directory's files where its name falls. Plain string order differs (`a-b.yaml` sorts before
/// `a/x.yaml`, Walk visits `a/` first), and upstream's answers keep Walk's order.
fn walk_order<'a>(files: impl Iterator<Item = &'a (String, u64)>) -> Vec<&'a (String, u64)> {
    let mut listed: Vec<&(String, u64)> = files.collect();
    listed.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
    listed
}

/// A file's content, refused when larger than `limit` bytes, as text (invalid UTF-8 replaced,
/// as Go's JSON encoding of a string replaces it).
fn read_text(files: &(impl Files + ?Sized), path: &str, limit: u64) -> Result<String, AppError> {
    let size = files
        .list()
        .iter()
        .find(|(p, _)| p == path)
        .map_or(0, |(_, size)| *size);
    if size > limit {
        return Err(AppError::PayloadTooLarge(format!(
            "{path}: file is {size} bytes, more than the limit of {limit}"
        )));
    }
    let bytes = files.read(path)?;
    if bytes.len() as u64 > limit {
        return Err(AppError::PayloadTooLarge(format!(
            "{path}: file is {} bytes, more than the limit of {limit}",
            bytes.len()
        )));
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_kept_inside_the_root() {
        assert_eq!(clean_path(".").ok().as_deref(), Some(""));
        assert_eq!(clean_path("").ok().as_deref(), Some(""));
        assert_eq!(clean_path("./a//b/").ok().as_deref(), Some("a/b"));
        assert_eq!(clean_path("a/../b").ok().as_deref(), Some("b"));
        assert!(
            matches!(clean_path("../x"), Err(AppError::InvalidArgument(m)) if m.contains("outside root"))
        );
        assert!(matches!(
            clean_path("a/../../x"),
            Err(AppError::InvalidArgument(_))
        ));
        assert!(matches!(clean_path("/etc"), Err(AppError::InvalidArgument(m)) if m.contains("absolute")));
    }

    #[test]
    fn app_dirs_must_exist_and_be_directories() {
        let files = MemFiles::new([("a/b/c.yaml", "x"), ("f.yaml", "y")]);
        assert_eq!(app_dir(&files, "a").ok().as_deref(), Some("a"));
        assert_eq!(app_dir(&files, "a/b/").ok().as_deref(), Some("a/b"));
        assert_eq!(app_dir(&files, ".").ok().as_deref(), Some(""));
        assert!(matches!(app_dir(&files, "nope"), Err(AppError::NotFound(m)) if m.contains("nope")));
        assert!(matches!(
            app_dir(&files, "f.yaml"),
            Err(AppError::InvalidArgument(_))
        ));
        // "a/b" exists, "a/bc" does not: the prefix is a whole segment.
        assert!(matches!(app_dir(&files, "a/b/c.y"), Err(AppError::NotFound(_))));
        let empty = MemFiles::default();
        assert_eq!(app_dir(&empty, ".").ok().as_deref(), Some(""));
    }

    #[test]
    fn walk_order_visits_a_directory_where_its_name_sorts() {
        let listed = [
            ("a-values.yaml".to_owned(), 1),
            ("a/x.yaml".to_owned(), 1),
            ("b.yaml".to_owned(), 1),
        ];
        let order: Vec<&str> = walk_order(listed.iter()).iter().map(|f| f.0.as_str()).collect();
        assert_eq!(order, ["a/x.yaml", "a-values.yaml", "b.yaml"]);
    }

    #[test]
    fn mem_files_read_and_refuse() {
        let files = MemFiles::new([("x", "1")]);
        assert_eq!(files.read("x").ok(), Some(b"1".to_vec()));
        assert!(matches!(files.read("y"), Err(AppError::NotFound(m)) if m.contains('y')));
        assert!(files.contains("x"));
    }
}
