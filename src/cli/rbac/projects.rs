//! Project files: AppProject manifests, as RBAC sees them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use serde::Deserialize as _;
use serde_yaml_ng::Value as Yaml;

use super::files::yaml_type;
use crate::rbac::{ProjectRole, ProjectRoles};

#[derive(Debug, Default)]
pub(super) struct Projects {
    pub(super) projects: Vec<Arc<ProjectRoles>>,
    pub(super) warnings: Vec<String>,
}

pub(super) fn read_projects(paths: &[PathBuf]) -> anyhow::Result<Projects> {
    let mut all = Projects::default();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for path in paths {
        let name = path.display().to_string();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read the project file {name}"))?;
        for project in parse_projects(&name, &text).map_err(anyhow::Error::msg)? {
            if let Some(first) = seen.insert(project.name.clone(), name.clone()) {
                bail!(
                    "project {:?} is defined twice: in {first} and in {name}",
                    project.name
                );
            }
            if let Err(err) = project.rules() {
                all.warnings.push(format!(
                    "{name}: the roles of project {:?} do not load ({err}): the server decides without them, \
                     and so does this check",
                    project.name
                ));
            }
            all.projects.push(Arc::new(project));
        }
    }
    Ok(all)
}

/// The RBAC part of each AppProject document in `text`.
pub(super) fn parse_projects(file: &str, text: &str) -> Result<Vec<ProjectRoles>, String> {
    let mut projects = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let at = format!("{file}: document {}", index + 1);
        let doc = Yaml::deserialize(document).map_err(|e| format!("{file}: not valid YAML: {e}"))?;
        if doc.is_null() {
            continue;
        }
        match doc.get("kind").and_then(Yaml::as_str) {
            Some("AppProject") => {}
            Some(kind) => return Err(format!("{at}: kind is {kind}, not AppProject")),
            None => {
                return Err(format!(
                    "{at}: not an AppProject manifest (no `kind: AppProject`)"
                ));
            }
        }
        let name = doc
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Yaml::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{at}: the AppProject has no metadata.name"))?;
        let at = format!("{file}: AppProject {name:?}");
        let roles = match doc.get("spec").and_then(|s| s.get("roles")) {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Sequence(roles)) => roles
                .iter()
                .enumerate()
                .map(|(i, role)| parse_role(&format!("{at}: spec.roles[{i}]"), role))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "{at}: spec.roles must be a list, not {}",
                    yaml_type(other)
                ));
            }
        };
        projects.push(ProjectRoles {
            name: name.to_owned(),
            roles,
        });
    }
    Ok(projects)
}

pub(super) fn parse_role(at: &str, role: &Yaml) -> Result<ProjectRole, String> {
    let name = role
        .get("name")
        .and_then(Yaml::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{at}: a role needs a name"))?;
    let strings = |field: &str| -> Result<Vec<String>, String> {
        match role.get(field) {
            None | Some(Yaml::Null) => Ok(Vec::new()),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("{at}.{field}: expected strings, got {}", yaml_type(item)))
                })
                .collect(),
            Some(other) => Err(format!(
                "{at}.{field}: expected a list of strings, not {}",
                yaml_type(other)
            )),
        }
    };
    Ok(ProjectRole {
        name: name.to_owned(),
        policies: strings("policies")?,
        groups: strings("groups")?,
    })
}
