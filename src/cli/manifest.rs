//! Manifest files: multi-document YAML (JSON is one YAML document), split so that one
//! malformed document does not hide the others, and the Kubernetes-style objects in them.

use serde_json::{Map, Value};

pub const API_VERSION: &str = "argoproj.io/v1alpha1";

/// Metadata the server owns: left out of exports and of what `apply` sends.
const SERVER_METADATA: [&str; 6] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

/// One document of a file, before parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawDoc {
    /// 1-based, counting only documents with content.
    pub index: usize,
    /// The line of the file its text starts at (1-based).
    pub line: usize,
    pub text: String,
}

/// Splits a YAML stream at `---` (and `...`) lines; documents holding only blanks and
/// comments are dropped. The text after `---` on its line belongs to the next document.
pub fn split_documents(text: &str) -> Vec<RawDoc> {
    let mut docs = Vec::new();
    let mut current = String::new();
    // The line `current` starts at: each line of the file is one line of one document's text.
    let mut start = 1;
    let flush = |current: &mut String, start: usize, docs: &mut Vec<RawDoc>| {
        let has_content = current.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        });
        if has_content {
            docs.push(RawDoc {
                index: docs.len() + 1,
                line: start,
                text: std::mem::take(current),
            });
        }
        current.clear();
    };
    for (number, line) in (1..).zip(text.lines()) {
        let trimmed = line.trim_end();
        let rest = trimmed
            .strip_prefix("---")
            .or_else(|| trimmed.strip_prefix("..."));
        match rest {
            Some(rest) if rest.is_empty() || rest.starts_with([' ', '\t']) => {
                flush(&mut current, start, &mut docs);
                start = number + 1;
                if trimmed.starts_with("---") && !rest.trim().is_empty() {
                    current.push_str(rest.trim());
                    current.push('\n');
                    start = number;
                }
            }
            _ => {
                // `lines` drops one `\r` before a `\n`, and keeps a `\r` that ends the text: every
                // `\r` at a line's end goes, or the document would change when split again.
                current.push_str(line.trim_end_matches('\r'));
                current.push('\n');
            }
        }
    }
    flush(&mut current, start, &mut docs);
    docs
}

/// A document's object; an error says why it is not one.
pub fn parse_document(text: &str) -> Result<Value, String> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("malformed YAML or JSON: {e}"))?;
    match value {
        Value::Object(_) => Ok(value),
        other => Err(format!(
            "expected an object with apiVersion and kind, got {}",
            match other {
                Value::Array(_) => "a list",
                Value::String(_) => "a string",
                Value::Null => "nothing",
                _ => "a scalar",
            }
        )),
    }
}

/// `metadata.name` (empty when absent).
pub fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The object without `apiVersion`, `kind`, `status`, `operation` and server-owned metadata:
/// what may be sent to create or update it.
pub fn client_part(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        for key in ["apiVersion", "kind", "status", "operation"] {
            map.remove(key);
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in SERVER_METADATA {
                meta.remove(key);
            }
            remove_empty(meta, "labels");
            remove_empty(meta, "annotations");
        }
    }
    object
}

fn remove_empty(map: &mut Map<String, Value>, key: &str) {
    if map
        .get(key)
        .is_some_and(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty))
    {
        map.remove(key);
    }
}

/// An API object as a manifest: `apiVersion` and `kind` first, then its client part.
pub fn as_manifest(kind: &str, object: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".to_owned(), Value::from(API_VERSION));
    out.insert("kind".to_owned(), Value::from(kind));
    if let Value::Object(rest) = client_part(object) {
        out.extend(rest);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_split_at_markers_and_skip_empty_ones() {
        let text = "---\n# only a comment\n---\na: 1\n--- \nb: 2\n...\n---\n\n--- {c: 3}\n";
        let docs = split_documents(text);
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(texts, ["a: 1\n", "b: 2\n", "{c: 3}\n"]);
        assert_eq!(docs.iter().map(|d| d.index).collect::<Vec<_>>(), [1, 2, 3]);
        // Where each text starts in the file; `{c: 3}` is on its marker's line.
        assert_eq!(docs.iter().map(|d| d.line).collect::<Vec<_>>(), [4, 6, 10]);
        let docs = split_documents("# header\n\na: 1\n---\n\n# b next\nb: 2\n");
        assert_eq!(
            docs.iter().map(|d| (d.line, d.text.as_str())).collect::<Vec<_>>(),
            [(1, "# header\n\na: 1\n"), (5, "\n# b next\nb: 2\n")]
        );
        assert_eq!(split_documents("{\"a\": 1}").len(), 1);
        assert_eq!(split_documents("a: '---'\n").len(), 1);
        // Found by the apply_yaml fuzz target: a final lone `\r` stayed, before an added `\n`.
        assert_eq!(split_documents("a: 1\r\nb: 2\r")[0].text, "a: 1\nb: 2\n");
        assert_eq!(split_documents("a: 1\r\r\nb: 2\r\r")[0].text, "a: 1\nb: 2\n");
    }

    #[test]
    fn documents_must_be_objects() {
        assert_eq!(parse_document("a: 1").unwrap(), json!({"a": 1}));
        assert!(parse_document("- a").unwrap_err().contains("a list"));
        assert!(parse_document("a: [").unwrap_err().contains("malformed"));
    }

    #[test]
    fn manifests_drop_what_the_server_owns() {
        let app = json!({
            "metadata": {"name": "a", "namespace": "argocd", "resourceVersion": "7", "uid": "u",
                         "creationTimestamp": "t", "generation": 2, "labels": {}},
            "spec": {"project": "default"},
            "status": {"sync": {}},
            "operation": {"sync": {}}
        });
        assert_eq!(
            as_manifest("Application", &app),
            json!({"apiVersion": API_VERSION, "kind": "Application",
                   "metadata": {"name": "a", "namespace": "argocd"}, "spec": {"project": "default"}})
        );
    }
}
