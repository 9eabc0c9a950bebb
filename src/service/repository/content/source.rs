//! The parts of an `ApplicationSource` (its JSON, camelCase) this module reads, and the app's
//! type as upstream's `GetAppSourceType` decides it: the one tool block the source sets, else
//! what the files say. Upstream first merges `.argocd-source.yaml` overrides from the app
//! directory into the source; tiphys does not (a caller that wants them merges them first).

use serde::Deserialize;
use serde_json::Value;

use super::discover::detect;
use super::{AppType, Files, app_dir};
use crate::error::AppError;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct Source {
    pub helm: Option<HelmSource>,
    pub kustomize: Option<KustomizeSource>,
    pub directory: Option<DirectorySource>,
    pub plugin: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct HelmSource {
    pub value_files: Vec<String>,
    pub file_parameters: Vec<Value>,
    pub ignore_missing_value_files: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct KustomizeSource {
    pub images: Vec<String>,
}

/// A directory source's options (`ApplicationSourceDirectory`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct DirectorySource {
    pub recurse: bool,
    pub include: String,
    pub exclude: String,
}

impl Source {
    pub(super) fn parse(source: &Value) -> Result<Self, AppError> {
        if source.is_null() {
            return Ok(Self::default());
        }
        Self::deserialize(source)
            .map_err(|e| AppError::InvalidArgument(format!("invalid application source: {e}")))
    }

    /// The type the source names, as upstream's `ExplicitType`: none, one, or an error
    /// listing several.
    pub(super) fn explicit_type(&self) -> Result<Option<AppType>, AppError> {
        let named: Vec<AppType> = [
            (self.kustomize.is_some(), AppType::Kustomize),
            (self.helm.is_some(), AppType::Helm),
            (self.directory.is_some(), AppType::Directory),
            (self.plugin.is_some(), AppType::Plugin),
        ]
        .into_iter()
        .filter_map(|(set, t)| set.then_some(t))
        .collect();
        match named.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            several => Err(AppError::InvalidArgument(format!(
                "multiple application sources defined: {}",
                several.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
            ))),
        }
    }
}

/// The type of the app at `path` for `source` (its JSON): the tool block it sets, else the
/// type the files in `path` show (`Directory` when none).
pub fn source_type(files: &(impl Files + ?Sized), path: &str, source: &Value) -> Result<AppType, AppError> {
    let dir = app_dir(files, path)?;
    resolve_type(files, &dir, &Source::parse(source)?)
}

pub(super) fn resolve_type(
    files: &(impl Files + ?Sized),
    dir: &str,
    source: &Source,
) -> Result<AppType, AppError> {
    Ok(match source.explicit_type()? {
        Some(t) => t,
        None => detect(files, dir).unwrap_or(AppType::Directory),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::service::repository::content::MemFiles;

    #[test]
    fn explicit_type_wins_over_the_files() {
        let files = MemFiles::new([("app/Chart.yaml", "name: c\n")]);
        assert_eq!(source_type(&files, "app", &json!({})).ok(), Some(AppType::Helm));
        assert_eq!(
            source_type(&files, "app", &json!({"directory": {}})).ok(),
            Some(AppType::Directory)
        );
        assert_eq!(
            source_type(&files, "app", &json!({"plugin": {"name": "x"}})).ok(),
            Some(AppType::Plugin)
        );
        // A null block is no block, as a nil pointer upstream.
        assert_eq!(
            source_type(&files, "app", &json!({"helm": null})).ok(),
            Some(AppType::Helm)
        );
        assert_eq!(
            source_type(&files, ".", &Value::Null).ok(),
            Some(AppType::Directory)
        );
    }

    #[test]
    fn several_types_are_refused() {
        let files = MemFiles::new([("x.yaml", "")]);
        let err = source_type(&files, ".", &json!({"helm": {}, "kustomize": {}}));
        assert!(
            matches!(&err, Err(AppError::InvalidArgument(m)) if m == "multiple application sources defined: Kustomize,Helm"),
            "{err:?}"
        );
    }

    #[test]
    fn a_malformed_source_is_refused() {
        let files = MemFiles::new([("x.yaml", "")]);
        let err = source_type(&files, ".", &json!({"directory": {"recurse": "yes"}}));
        assert!(matches!(err, Err(AppError::InvalidArgument(_))));
    }
}
