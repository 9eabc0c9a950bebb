//! ListApps: the Helm charts and Kustomize apps in a repository, as upstream's `Discover`
//! walks it. A directory holding a file whose name ends in `Chart.yaml` is Helm (upstream
//! tests the suffix, so `myChart.yaml` counts); one holding `kustomization.yaml`,
//! `kustomization.yml` or `Kustomization` is Kustomize; when a directory has both, the file
//! visited last (in name order) decides. Plain-manifest directories are not listed: upstream's
//! `Discover` never records `Directory`, which is only `AppType`'s answer for a path that is
//! neither. (A config management plugin claiming the root would make upstream answer
//! `{".": "Plugin"}`; tiphys runs no plugins.)

use std::collections::BTreeMap;

use super::{AppType, Files, clean_path, under, walk_order};
use crate::error::AppError;

/// The names of a Kustomize root file, in the order kustomize looks for them.
pub(super) const KUSTOMIZATION_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The type one file's name makes its directory, if any.
fn marks(name: &str) -> Option<AppType> {
    if KUSTOMIZATION_NAMES.contains(&name) {
        Some(AppType::Kustomize)
    } else if name.ends_with("Chart.yaml") {
        Some(AppType::Helm)
    } else {
        None
    }
}

/// Every app directory at or under `path_prefix` (`.` or `""` for the whole repository), keyed
/// by its path from the repository root (`.` for the root). Sorted by path; upstream's answer
/// is a Go map, in no order.
pub fn discover(
    files: &(impl Files + ?Sized),
    path_prefix: &str,
) -> Result<BTreeMap<String, AppType>, AppError> {
    let prefix = clean_path(path_prefix)?;
    let mut apps = BTreeMap::new();
    let listed = walk_order(files.list().iter().filter(|(p, _)| under(&prefix, p).is_some()));
    for (path, _) in listed {
        let (dir, name) = match path.rsplit_once('/') {
            Some((dir, name)) => (dir, name),
            None => (".", path.as_str()),
        };
        if let Some(app_type) = marks(name) {
            apps.insert(dir.to_owned(), app_type);
        }
    }
    Ok(apps)
}

/// The type the files directly in `dir` (canonical) give it, if any: upstream's `AppType`.
pub(super) fn detect(files: &(impl Files + ?Sized), dir: &str) -> Option<AppType> {
    let listed = walk_order(files.list().iter());
    let mut found = None;
    for (path, _) in listed {
        if let Some(name) = under(dir, path).filter(|rest| !rest.contains('/')) {
            found = marks(name).or(found);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::repository::content::MemFiles;

    fn listed(files: &[&str]) -> MemFiles {
        MemFiles::new(files.iter().map(|f| (*f, "")))
    }

    fn found(apps: &BTreeMap<String, AppType>) -> Vec<(&str, &str)> {
        apps.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect()
    }

    #[test]
    fn finds_charts_and_kustomizations_but_not_plain_directories() {
        let files = listed(&[
            "README.md",
            "apps/guestbook/deploy.yaml",
            "charts/web/Chart.yaml",
            "charts/web/templates/svc.yaml",
            "charts/web/charts/sub/Chart.yaml",
            "kustomize/base/kustomization.yaml",
            "kustomize/prod/kustomization.yml",
            "kustomize/odd/Kustomization",
            "other/myChart.yaml",
        ]);
        let apps = discover(&files, ".").unwrap_or_default();
        assert_eq!(
            found(&apps),
            [
                ("charts/web", "Helm"),
                ("charts/web/charts/sub", "Helm"),
                ("kustomize/base", "Kustomize"),
                ("kustomize/odd", "Kustomize"),
                ("kustomize/prod", "Kustomize"),
                ("other", "Helm"),
            ]
        );
    }

    #[test]
    fn the_root_is_dot_and_the_last_marker_wins() {
        let files = listed(&[
            "Chart.yaml",
            "kustomization.yaml",
            "x/zChart.yaml",
            "x/kustomization.yaml",
        ]);
        let apps = discover(&files, "").unwrap_or_default();
        // "Chart.yaml" < "kustomization.yaml"; "kustomization.yaml" < "zChart.yaml".
        assert_eq!(found(&apps), [(".", "Kustomize"), ("x", "Helm")]);
    }

    #[test]
    fn a_prefix_limits_the_walk_and_keys_stay_repo_relative() {
        let files = listed(&["a/Chart.yaml", "ab/Chart.yaml", "a/b/kustomization.yaml"]);
        let apps = discover(&files, "a").unwrap_or_default();
        assert_eq!(found(&apps), [("a", "Helm"), ("a/b", "Kustomize")]);
        assert!(matches!(
            discover(&files, "../a"),
            Err(AppError::InvalidArgument(_))
        ));
        assert!(matches!(
            discover(&files, "/a"),
            Err(AppError::InvalidArgument(_))
        ));
    }

    #[test]
    fn an_empty_repository_has_no_apps() {
        let apps = discover(&MemFiles::default(), ".").unwrap_or_default();
        assert!(apps.is_empty());
        assert_eq!(detect(&MemFiles::default(), ""), None);
    }

    #[test]
    fn detect_looks_only_at_the_directory_itself() {
        let files = listed(&["app/sub/Chart.yaml", "app/deploy.yaml", "k/Kustomization"]);
        assert_eq!(detect(&files, "app"), None);
        assert_eq!(detect(&files, "app/sub"), Some(AppType::Helm));
        assert_eq!(detect(&files, "k"), Some(AppType::Kustomize));
    }
}
