//! A Helm repository's `index.yaml`: the charts and versions GetHelmCharts lists, and the
//! details GetRevisionChartDetails shows for one version.
//!
//! Upstream lists `entries` from a Go map, so charts come in no order; here they are sorted by
//! name, each chart's versions in the index's order, as upstream keeps them. For chart details
//! upstream downloads the chart and reads its `Chart.yaml`; an index entry carries the same
//! `Chart.yaml` fields, so they are read from the entry: `description`, `home`, and each
//! maintainer as `name <email>` (trimmed), or `name` alone without an email.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value as Yaml;

use crate::error::AppError;

/// An index larger than this is refused before parsing: parsing holds the whole document.
pub const MAX_INDEX_BYTES: usize = 32 * 1024 * 1024;

/// `HelmChart`: a chart and its versions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HelmChart {
    pub name: String,
    pub versions: Vec<String>,
}

/// `ChartDetails`, in its JSON names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChartDetails {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub home: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub maintainers: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Index {
    entries: BTreeMap<String, Option<Vec<Entry>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Entry {
    /// A scalar of any kind: an unquoted `1.0` is a version too.
    version: Option<Yaml>,
    description: Option<String>,
    home: Option<String>,
    maintainers: Option<Vec<Maintainer>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Maintainer {
    name: Option<String>,
    email: Option<String>,
}

fn parse(bytes: &[u8]) -> Result<Index, AppError> {
    if bytes.len() > MAX_INDEX_BYTES {
        return Err(AppError::PayloadTooLarge(format!(
            "Helm repository index is {} bytes, more than the limit of {MAX_INDEX_BYTES}",
            bytes.len()
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(AppError::FailedPrecondition(
            "Helm repository index is empty".to_owned(),
        ));
    }
    serde_yaml_ng::from_slice(bytes)
        .map_err(|e| AppError::FailedPrecondition(format!("failed to parse Helm repository index: {e}")))
}

fn version_text(version: Option<&Yaml>) -> String {
    match version {
        Some(Yaml::String(s)) => s.clone(),
        Some(Yaml::Number(n)) => n.to_string(),
        Some(Yaml::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// The charts of an index and their versions, sorted by chart name.
pub fn parse_index(bytes: &[u8]) -> Result<Vec<HelmChart>, AppError> {
    Ok(parse(bytes)?
        .entries
        .into_iter()
        .map(|(name, entries)| HelmChart {
            name,
            versions: entries
                .unwrap_or_default()
                .iter()
                .map(|e| version_text(e.version.as_ref()))
                .collect(),
        })
        .collect())
}

/// The details of `chart` at `version` from an index, or `NOT_FOUND` naming them.
pub fn chart_details(index: &[u8], chart: &str, version: &str) -> Result<ChartDetails, AppError> {
    let index = parse(index)?;
    let entries = index
        .entries
        .get(chart)
        .ok_or_else(|| AppError::NotFound(format!("chart '{chart}' not found in index")))?;
    let entry = entries
        .iter()
        .flatten()
        .find(|e| version_text(e.version.as_ref()) == version)
        .ok_or_else(|| {
            AppError::NotFound(format!("chart '{chart}' version '{version}' not found in index"))
        })?;
    Ok(ChartDetails {
        description: entry.description.clone().unwrap_or_default(),
        home: entry.home.clone().unwrap_or_default(),
        maintainers: entry
            .maintainers
            .iter()
            .flatten()
            .map(|m| {
                let name = m.name.as_deref().unwrap_or_default();
                match m.email.as_deref().filter(|e| !e.is_empty()) {
                    Some(email) => format!("{name} <{email}>").trim().to_owned(),
                    None => name.to_owned(),
                }
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = r#"apiVersion: v1
entries:
  zeta:
  - version: 2.0.0
    created: "2024-01-01T00:00:00Z"
    description: Last chart
    home: https://zeta.example
    maintainers:
    - name: Ann
      email: ann@example.com
    - name: Bob
    - email: noname@example.com
    urls: [zeta-2.0.0.tgz]
  - version: 1.0.0
  alpha:
  - version: 0.2.0
  - version: 1.0
  empty: null
generated: "2024-01-01T00:00:00Z"
"#;

    #[test]
    fn charts_sorted_by_name_versions_in_index_order() {
        let charts = parse_index(INDEX.as_bytes()).unwrap_or_default();
        let got: Vec<(&str, Vec<&str>)> = charts
            .iter()
            .map(|c| (c.name.as_str(), c.versions.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            [
                ("alpha", vec!["0.2.0", "1.0"]),
                ("empty", vec![]),
                ("zeta", vec!["2.0.0", "1.0.0"]),
            ]
        );
    }

    #[test]
    fn details_of_one_version() {
        let details = chart_details(INDEX.as_bytes(), "zeta", "2.0.0").ok();
        assert_eq!(
            details,
            Some(ChartDetails {
                description: "Last chart".to_owned(),
                home: "https://zeta.example".to_owned(),
                maintainers: vec![
                    "Ann <ann@example.com>".to_owned(),
                    "Bob".to_owned(),
                    "<noname@example.com>".to_owned(),
                ],
            })
        );
        assert_eq!(
            chart_details(INDEX.as_bytes(), "zeta", "1.0.0").ok(),
            Some(ChartDetails::default())
        );
        let err = chart_details(INDEX.as_bytes(), "zeta", "9.9.9");
        assert!(
            matches!(&err, Err(AppError::NotFound(m)) if m.contains("9.9.9")),
            "{err:?}"
        );
        let err = chart_details(INDEX.as_bytes(), "nope", "1");
        assert!(
            matches!(&err, Err(AppError::NotFound(m)) if m.contains("nope")),
            "{err:?}"
        );
    }

    #[test]
    fn bad_indexes_are_refused() {
        assert!(matches!(parse_index(b""), Err(AppError::FailedPrecondition(_))));
        assert!(matches!(
            parse_index(b"entries: [\n"),
            Err(AppError::FailedPrecondition(_))
        ));
        assert!(matches!(
            parse_index(b"- a\n- b\n"),
            Err(AppError::FailedPrecondition(_))
        ));
        assert!(matches!(
            parse_index(b"entries:\n  a: 3\n"),
            Err(AppError::FailedPrecondition(_))
        ));
        let huge = vec![b' '; MAX_INDEX_BYTES + 1];
        assert!(matches!(parse_index(&huge), Err(AppError::PayloadTooLarge(_))));
        assert_eq!(parse_index(b"apiVersion: v1\n").map(|c| c.len()).ok(), Some(0));
    }
}
