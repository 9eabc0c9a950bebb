//! The deep links of argocd-cm: `application.links`, `resource.links` and `project.links`, each
//! a YAML list of links (upstream util/settings `DeepLink`: `url`, `title`, `description`,
//! `icon.class`, `if`). A value that is not such a list is an error at its key, so a reload
//! keeps the last good settings; upstream instead fails every links request until it is fixed.
//! Like upstream's decoder, unknown fields of a link are ignored. The URL templates and the
//! conditions are only read when links are asked for: one that fails drops its link alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

pub const APPLICATION: &str = "application.links";
pub const RESOURCE: &str = "resource.links";
pub const PROJECT: &str = "project.links";

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DeepLink {
    /// A Go template over the link's objects.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default, rename = "icon.class")]
    pub icon_class: Option<String>,
    /// An expr-lang condition: the link is shown when it is true.
    #[serde(default, rename = "if")]
    pub condition: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct DeepLinks {
    pub application: Arc<Vec<DeepLink>>,
    pub resource: Arc<Vec<DeepLink>>,
    pub project: Arc<Vec<DeepLink>>,
}

impl DeepLinks {
    /// The links in `cm` (argocd-cm's data); an error names the key and what is wrong.
    pub fn parse(cm: &BTreeMap<String, String>) -> Result<Self, (String, String)> {
        let one = |key: &str| -> Result<Arc<Vec<DeepLink>>, (String, String)> {
            let Some(text) = cm.get(key) else {
                return Ok(Arc::default());
            };
            // An empty document (or `null`) is no links, as upstream reads it.
            let links: Option<Vec<DeepLink>> = serde_yaml_ng::from_str(text)
                .map_err(|e| (key.to_owned(), format!("not a list of deep links: {e}")))?;
            Ok(Arc::new(links.unwrap_or_default()))
        };
        Ok(Self {
            application: one(APPLICATION)?,
            resource: one(RESOURCE)?,
            project: one(PROJECT)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn links_read_as_upstream_declares_them() {
        let links = DeepLinks::parse(&cm(&[(
            PROJECT,
            "- url: https://x/{{.project.metadata.name}}\n  title: X\n  icon.class: fa-x\n  if: project.metadata.name == 'a'\n  extra: ignored\n- title: T\n",
        )]))
        .unwrap();
        assert_eq!(links.project.len(), 2);
        assert_eq!(links.project[0].icon_class.as_deref(), Some("fa-x"));
        assert_eq!(
            links.project[0].condition.as_deref(),
            Some("project.metadata.name == 'a'")
        );
        assert_eq!(links.project[1].url, "");
        assert!(links.application.is_empty());
        assert!(
            DeepLinks::parse(&cm(&[(APPLICATION, "")]))
                .unwrap()
                .application
                .is_empty()
        );
    }

    #[test]
    fn a_bad_value_is_an_error_at_its_key() {
        for bad in ["url: x", "- url: [1]", "- {", "7"] {
            let (key, why) = DeepLinks::parse(&cm(&[(RESOURCE, bad)])).unwrap_err();
            assert_eq!(key, RESOURCE, "{bad}");
            assert!(why.contains("not a list of deep links"), "{bad}: {why}");
        }
    }
}
