//! YAML as upstream reads it: through JSON (`sigs.k8s.io/yaml`), so keys become strings,
//! merge keys (`<<`) are applied, tags are dropped, and numbers are JSON numbers. Depth and
//! alias expansion are bounded by serde_yaml_ng (128 levels; a repetition limit on aliases).
//!
//! One difference stays: serde_yaml_ng reads YAML 1.2, upstream's go-yaml v2 reads YAML 1.1,
//! where `yes`/`no`/`on`/`off` are booleans. Here they stay strings.

use serde::Deserialize;
use serde_json::{Map, Number, Value as Json};
use serde_yaml_ng::Value as Yaml;

/// The first document of `text` (`Null` when there is none), as `yaml.Unmarshal` reads only
/// the first.
pub(super) fn first_document(text: &str) -> Result<Json, String> {
    let Some(doc) = serde_yaml_ng::Deserializer::from_str(text).next() else {
        return Ok(Json::Null);
    };
    let value = Yaml::deserialize(doc).map_err(|e| e.to_string())?;
    to_json(value)
}

/// One document of a stream split with [`split_documents`]: `Null` when empty.
pub(super) fn document(text: &str) -> Result<Json, String> {
    let mut docs = serde_yaml_ng::Deserializer::from_str(text);
    let Some(doc) = docs.next() else {
        return Ok(Json::Null);
    };
    let value = Yaml::deserialize(doc).map_err(|e| e.to_string())?;
    if let Some(extra) = docs.next() {
        // A `...` end marker followed by more content: not one document.
        Yaml::deserialize(extra).map_err(|e| e.to_string())?;
        return Err("more than one document between separators".to_owned());
    }
    to_json(value)
}

/// The documents of a multi-document stream, split where Kubernetes' YAML reader splits: at
/// lines starting with `---` followed by nothing but blanks or a comment.
pub(super) fn split_documents(text: &str) -> Result<Vec<&str>, String> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with('#') {
                return Err(format!(
                    "invalid document separator: {}",
                    line.trim_end().chars().take(80).collect::<String>()
                ));
            }
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    Ok(docs)
}

/// A YAML value as JSON, the way `YAMLToJSON` converts it.
pub(super) fn to_json(mut value: Yaml) -> Result<Json, String> {
    value.apply_merge().map_err(|e| e.to_string())?;
    convert(value)
}

fn convert(value: Yaml) -> Result<Json, String> {
    Ok(match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => number(&n)?,
        Yaml::String(s) => Json::String(s),
        Yaml::Sequence(items) => Json::Array(items.into_iter().map(convert).collect::<Result<_, _>>()?),
        Yaml::Mapping(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                map.insert(key_text(key)?, convert(value)?);
            }
            Json::Object(map)
        }
        Yaml::Tagged(tagged) => convert(tagged.value)?,
    })
}

fn number(n: &serde_yaml_ng::Number) -> Result<Json, String> {
    if let Some(i) = n.as_i64() {
        return Ok(Json::Number(i.into()));
    }
    if let Some(u) = n.as_u64() {
        return Ok(Json::Number(u.into()));
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    Number::from_f64(f)
        .map(Json::Number)
        .ok_or_else(|| format!("unsupported value: {n}"))
}

/// A mapping key as the string JSON needs; upstream stringifies scalar keys the same way.
fn key_text(key: Yaml) -> Result<String, String> {
    match key {
        Yaml::String(s) => Ok(s),
        Yaml::Bool(b) => Ok(b.to_string()),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Null => Ok("null".to_owned()),
        Yaml::Tagged(tagged) => key_text(tagged.value),
        Yaml::Sequence(_) | Yaml::Mapping(_) => {
            Err("a mapping key is a sequence or a mapping, which JSON cannot hold".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_keys_merges_and_tags() {
        let v = first_document("1: a\ntrue: b\nbase: &b {x: 1}\nderived:\n  <<: *b\n  y: !!str 2\n");
        assert_eq!(
            v.ok(),
            Some(serde_json::json!({
                "1": "a", "true": "b", "base": {"x": 1}, "derived": {"x": 1, "y": "2"}
            }))
        );
    }

    #[test]
    fn only_the_first_document_is_read() {
        assert_eq!(
            first_document("a: 1\n---\nb: 2\n").ok(),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(first_document("").ok(), Some(Json::Null));
        assert_eq!(first_document("# only a comment\n").ok(), Some(Json::Null));
    }

    #[test]
    fn bad_yaml_and_complex_keys_are_errors() {
        assert!(first_document("a: [1, 2\n").is_err());
        assert!(first_document("? [a, b]\n: c\n").is_err());
        assert!(first_document("a: .nan\n").is_err());
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let deep = "[".repeat(10_000);
        assert!(first_document(&deep).is_err());
    }

    #[test]
    fn alias_bombs_are_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(first_document(&text).is_err());
    }

    #[test]
    fn splits_at_separator_lines_only() {
        let docs = split_documents("a: 1\n---\nb: '---'\n--- # c\nc: 3\n---\n").unwrap_or_default();
        assert_eq!(docs, ["a: 1\n", "b: '---'\n", "c: 3\n", ""]);
        assert!(split_documents("a: 1\n--- b: 2\n").is_err());
        assert_eq!(split_documents("").unwrap_or_default(), [""]);
    }
}
