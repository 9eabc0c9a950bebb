//! Policy files: plain CSV, or an `argocd-rbac-cm` manifest.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize as _;

use serde_yaml_ng::{Mapping, Value as Yaml};

use super::RBAC_CM;
use crate::rbac::policy::{Rules, user_policy_texts};
use crate::rbac::{LoadError, LoadOptions, Policy};

/// A policy file, as the `argocd-rbac-cm` data it stands for.
#[derive(Debug)]
pub(super) struct PolicyFile {
    /// The file as given, for messages.
    pub(super) name: String,
    /// A ConfigMap manifest (else plain CSV, held as `policy.csv`).
    pub(super) manifest: bool,
    pub(super) data: BTreeMap<String, String>,
    /// For `data` keys written as `|` block scalars: the file line of the key,
    /// so line N of the value is file line key + N.
    pub(super) block_lines: BTreeMap<String, usize>,
    /// Oddities that do not stop the policy from loading.
    pub(super) warnings: Vec<String>,
}

impl PolicyFile {
    pub(super) fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the policy file {}", path.display()))?;
        Self::parse(&path.display().to_string(), &text).map_err(anyhow::Error::msg)
    }

    pub(super) fn csv(name: &str, text: &str) -> Self {
        Self {
            name: name.to_owned(),
            manifest: false,
            data: BTreeMap::from([("policy.csv".to_owned(), text.to_owned())]),
            block_lines: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    /// A ConfigMap manifest (YAML: `kind: ConfigMap`, or a `data` mapping),
    /// else CSV. A manifest of another kind is an error, not a CSV policy.
    pub(super) fn parse(name: &str, text: &str) -> Result<Self, String> {
        let Some(docs) = yaml_documents(text) else {
            return Ok(Self::csv(name, text));
        };
        let mappings: Vec<&Mapping> = docs.iter().filter_map(Yaml::as_mapping).collect();
        let config_maps: Vec<&Mapping> = mappings.iter().copied().filter(|m| is_config_map(m)).collect();
        let chosen = match config_maps.as_slice() {
            [] => {
                if let Some(kind) = mappings.iter().find_map(|m| m.get("kind").and_then(Yaml::as_str)) {
                    return Err(format!(
                        "{name}: kind is {kind}; expected an {RBAC_CM} ConfigMap manifest or a CSV policy"
                    ));
                }
                return Ok(Self::csv(name, text));
            }
            [only] => *only,
            several => {
                let named: Vec<&Mapping> = several
                    .iter()
                    .copied()
                    .filter(|m| object_name(m) == Some(RBAC_CM))
                    .collect();
                match named.as_slice() {
                    [only] => *only,
                    _ => {
                        return Err(format!(
                            "{name}: {} ConfigMaps, and not exactly one named {RBAC_CM}: which is the policy?",
                            several.len()
                        ));
                    }
                }
            }
        };
        let mut file = Self {
            name: name.to_owned(),
            manifest: true,
            data: BTreeMap::new(),
            block_lines: if docs.len() == 1 {
                block_scalar_lines(text)
            } else {
                BTreeMap::new()
            },
            warnings: Vec::new(),
        };
        if let Some(other) = object_name(chosen).filter(|n| *n != RBAC_CM) {
            file.warnings.push(format!(
                "{name}: metadata.name is {other:?}, not {RBAC_CM}; reading its data as the RBAC policy anyway"
            ));
        }
        let entries = match chosen.get("data") {
            None | Some(Yaml::Null) => return Ok(file),
            Some(Yaml::Mapping(entries)) => entries,
            Some(other) => {
                return Err(format!(
                    "{name}: data must be a mapping, not {}",
                    yaml_type(other)
                ));
            }
        };
        for (key, value) in entries {
            let Some(key) = key.as_str() else {
                return Err(format!("{name}: data: keys must be strings"));
            };
            let Some(value) = value.as_str() else {
                let fix = if value.is_null() {
                    "write \"\" for an empty value"
                } else {
                    "quote the value"
                };
                return Err(format!(
                    "{name}: data.{key}: expected a string, got {}; {fix}",
                    yaml_type(value)
                ));
            };
            file.data.insert(key.to_owned(), value.to_owned());
        }
        file.check_keys();
        Ok(file)
    }

    /// Keys and values upstream reads without complaint but that probably do
    /// not do what was meant.
    pub(super) fn check_keys(&mut self) {
        let name = &self.name;
        for key in self.data.keys() {
            let known = matches!(
                key.as_str(),
                "policy.csv" | "policy.default" | "policy.matchMode" | "scopes"
            ) || (key.starts_with("policy.") && key.ends_with(".csv"));
            if !known {
                self.warnings.push(format!(
                    "{name}: data.{key} is not an {RBAC_CM} setting and is ignored (the settings are policy.csv, \
                     policy.<name>.csv, policy.default, policy.matchMode and scopes)"
                ));
            }
        }
        if let Some(mode) = self.data.get("policy.matchMode")
            && !matches!(mode.as_str(), "glob" | "regex" | "")
        {
            self.warnings.push(format!(
                "{name}: policy.matchMode {mode:?} is neither \"glob\" nor \"regex\": glob is used"
            ));
        }
    }

    /// The user policy text, all of it blank.
    pub(super) fn is_empty(&self) -> bool {
        user_policy_texts(&self.data)
            .iter()
            .all(|(_, text)| text.trim().is_empty())
    }

    pub(super) fn load(&self, builtin: bool) -> Result<Policy, String> {
        Policy::from_config(&self.data, LoadOptions { builtin }).map_err(|err| self.describe(&err))
    }

    /// The user policy's rules (lines that do not load are left out; call
    /// after [`PolicyFile::load`] succeeded).
    pub(super) fn user_rules(&self) -> Rules {
        let mut rules = Rules::default();
        for (source, text) in user_policy_texts(&self.data) {
            let _ = rules.add_text(source, text);
        }
        rules
    }

    /// `FILE: line N: why` for CSV; `FILE[:LINE]: KEY line N: why` for a manifest.
    pub(super) fn describe(&self, err: &LoadError) -> String {
        match err {
            LoadError::Line(e) => self.at(&e.source, e.line, &e.reason),
            LoadError::Scopes(why) => format!("{}: scopes: {why}", self.name),
        }
    }

    pub(super) fn at(&self, source: &str, line: usize, rest: &str) -> String {
        if !self.manifest {
            return format!("{}: line {line}: {rest}", self.name);
        }
        match self.block_lines.get(source) {
            Some(key_line) => format!("{}:{}: {source} line {line}: {rest}", self.name, key_line + line),
            None => format!("{}: {source} line {line}: {rest}", self.name),
        }
    }

    /// An engine warning (`KEY line N: …` or about a pattern) placed in the file.
    pub(super) fn locate_warning(&self, warning: &str) -> String {
        let located = self.data.keys().find_map(|key| {
            let rest = warning.strip_prefix(key.as_str())?.strip_prefix(" line ")?;
            let (line, rest) = rest.split_once(": ")?;
            Some(self.at(key, line.parse().ok()?, rest))
        });
        located.unwrap_or_else(|| format!("{}: {warning}", self.name))
    }
}

/// Every document of `text` if it is YAML; None if it is not (then CSV).
pub(super) fn yaml_documents(text: &str) -> Option<Vec<Yaml>> {
    let mut docs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        docs.push(Yaml::deserialize(document).ok()?);
    }
    Some(docs)
}

/// `kind: ConfigMap`, or no kind and a `data` mapping.
pub(super) fn is_config_map(m: &Mapping) -> bool {
    match m.get("kind") {
        Some(kind) => kind.as_str() == Some("ConfigMap"),
        None => m.get("data").is_some_and(Yaml::is_mapping),
    }
}

pub(super) fn object_name(m: &Mapping) -> Option<&str> {
    m.get("metadata")?.get("name")?.as_str()
}

pub(super) fn yaml_type(value: &Yaml) -> &'static str {
    match value {
        Yaml::Null => "nothing",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

/// The file line of each key directly under a top-level `data:` whose value is
/// a literal block scalar (`|`, `|-`, `|+`…): there line N of the value is
/// file line key + N. A line scan for block-style manifests, as people write
/// them; other keys get no line.
pub(super) fn block_scalar_lines(text: &str) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    let mut in_data = false;
    let mut child_indent = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        if trimmed.trim().is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if indent == 0 {
            in_data = trimmed
                .strip_prefix("data:")
                .is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with('#'));
            child_indent = None;
            continue;
        }
        if !in_data || indent != *child_indent.get_or_insert(indent) {
            continue;
        }
        let Some((key, value)) = split_key(trimmed) else {
            continue;
        };
        if value.trim_start().starts_with('|') {
            lines.entry(key.to_owned()).or_insert(index + 1);
        }
    }
    lines
}

/// `key: value` → (key, value), for plain or quoted keys.
pub(super) fn split_key(line: &str) -> Option<(&str, &str)> {
    if let Some(quote) = line.chars().next().filter(|c| matches!(c, '"' | '\'')) {
        let inner = &line[1..];
        let end = inner.find(quote)?;
        let value = inner[end + 1..].trim_start().strip_prefix(':')?;
        return Some((&inner[..end], value));
    }
    let colon = line.find(": ").or_else(|| line.strip_suffix(':').map(str::len))?;
    Some((&line[..colon], &line[colon + 1..]))
}
