//! The custom actions argocd-cm defines for a kind, read as upstream's settings manager reads
//! them (util/settings/settings.go `GetResourceOverrides`, `appendResourceOverridesFromSplitKeys`;
//! the `ResourceActions` type in pkg/apis/application/v1alpha1/types.go): the `actions` of the
//! YAML under `resource.customizations`, then each `resource.customizations.actions.<group_kind>`
//! key (which wins). Read at each call, so a change of argocd-cm applies at once.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::AppError;

const CUSTOMIZATIONS: &str = "resource.customizations";

/// `ResourceActions`: a discovery script, the actions' scripts, and whether the built-in
/// actions of the kind are offered beside them.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub struct Custom {
    #[serde(rename = "discovery.lua")]
    pub discovery: String,
    pub definitions: Vec<Definition>,
    pub merge_builtin_actions: bool,
}

/// `ResourceActionDefinition`.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct Definition {
    pub name: String,
    #[serde(rename = "action.lua")]
    pub script: String,
}

/// The part of a `ResourceOverride` read here.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Override {
    actions: String,
}

/// The custom actions for `key` (`<group>/<kind>`, or `<kind>` in the core group), if any.
pub fn custom(cm: &BTreeMap<String, String>, key: &str) -> Result<Option<Custom>, AppError> {
    let mut text = None;
    if let Some(yaml) = cm.get(CUSTOMIZATIONS).filter(|v| !v.is_empty()) {
        let overrides: BTreeMap<String, Override> = serde_yaml_ng::from_str(yaml)
            .map_err(|e| bad(format!("argocd-cm {CUSTOMIZATIONS} is not valid: {e}")))?;
        text = overrides.get(key).map(|o| o.actions.clone());
    }
    for (name, value) in cm {
        let Some(group_kind) = name.strip_prefix("resource.customizations.actions.") else {
            continue;
        };
        if override_key(group_kind).map_err(|e| bad(format!("argocd-cm {name}: {e}")))? == key {
            text = Some(value.clone());
        }
    }
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let custom: Custom = serde_yaml_ng::from_str(&text)
        .map_err(|e| bad(format!("argocd-cm's actions for {key} are not valid: {e}")))?;
    Ok(Some(custom))
}

/// `<group>_<kind>` or `<kind>`, as the override key `<group>/<kind>` or `<kind>`.
fn override_key(group_kind: &str) -> Result<String, String> {
    let parts: Vec<&str> = group_kind.split('_').collect();
    match parts.as_slice() {
        [group, kind] => Ok(format!("{group}/{kind}")),
        [kind] if !kind.is_empty() => Ok((*kind).to_owned()),
        _ => Err(format!(
            "the group kind must be <group>_<kind> or <kind>, not {group_kind:?}"
        )),
    }
}

/// The key of a kind's customizations: `<group>/<kind>`, or the kind alone in the core group.
pub fn key(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{group}/{kind}")
    }
}

fn bad(message: String) -> AppError {
    AppError::FailedPrecondition(message)
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
    fn split_keys_win_over_the_yaml_form() {
        let yaml =
            "apps/Deployment:\n  actions: |\n    discovery.lua: return {}\n    mergeBuiltinActions: true\n";
        let both = cm(&[
            ("resource.customizations", yaml),
            (
                "resource.customizations.actions.apps_Deployment",
                "discovery.lua: return {a = {}}\ndefinitions:\n- name: a\n  action.lua: return obj\n",
            ),
        ]);
        let found = custom(&both, "apps/Deployment").unwrap().unwrap();
        assert_eq!(found.discovery, "return {a = {}}");
        assert_eq!(found.definitions[0].name, "a");
        assert!(!found.merge_builtin_actions);
        let yaml_only = cm(&[("resource.customizations", yaml)]);
        assert!(
            custom(&yaml_only, "apps/Deployment")
                .unwrap()
                .unwrap()
                .merge_builtin_actions
        );
        assert!(custom(&yaml_only, "ConfigMap").unwrap().is_none());
        let core = cm(&[("resource.customizations.actions.ConfigMap", "discovery.lua: x")]);
        assert!(custom(&core, "ConfigMap").unwrap().is_some());
    }

    #[test]
    fn bad_settings_are_named() {
        let err = custom(&cm(&[("resource.customizations.actions.a_b_c", "x")]), "a/b").unwrap_err();
        assert!(err.to_string().contains("a_b_c"), "{err}");
        let err = custom(
            &cm(&[("resource.customizations.actions.ConfigMap", "[")]),
            "ConfigMap",
        )
        .unwrap_err();
        assert!(err.to_string().contains("ConfigMap"), "{err}");
    }
}
