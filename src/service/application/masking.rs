//! A live Secret as argocd-server shows it (gitops-engine's `HideSecretData` in pkg/diff/diff.go,
//! called with no target by `replaceSecretValues` in server/application/application.go): every
//! value of `data` replaced by plus signs, equal values by the same run and different ones by
//! longer runs, so that a reader sees which keys differ without seeing any value; the same for
//! the annotations argocd-cm names in `resource.sensitive.mask.annotations`; and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation, which carries the values as
//! applied, masked alike (or replaced whole when it is itself named sensitive).

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

/// The shortest replacement; each further distinct value of a key gets four more.
const REPLACEMENT: &str = "++++++++";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `obj` is a core Secret, the one kind whose values are masked.
pub fn is_secret(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// The annotations argocd-cm's `resource.sensitive.mask.annotations` names (comma-separated,
/// spaces ignored, as upstream's `GetSensitiveAnnotations`).
pub fn sensitive_annotations(setting: Option<&str>) -> BTreeSet<String> {
    match setting {
        Some(value) if !value.is_empty() => value.replace(' ', "").split(',').map(str::to_owned).collect(),
        _ => BTreeSet::new(),
    }
}

/// `obj` with its values masked when it is a core Secret; anything else as it is.
pub fn masked(obj: Value, sensitive: &BTreeSet<String>) -> Value {
    if !is_secret(&obj) {
        return obj;
    }
    together(vec![obj], sensitive).pop().unwrap_or(Value::Null)
}

/// The two sides of a Secret's diff (`HideSecretData` with a target), masked together: a value
/// both sides have shows as the same run on both, so a reader sees what changes. The target's
/// own last-applied annotation is masked too (a server-side dry run copies the live one there,
/// and upstream would show that one as it is).
pub fn masked_pair(
    target: Option<Value>,
    live: Option<Value>,
    sensitive: &BTreeSet<String>,
) -> (Option<Value>, Option<Value>) {
    let present = [target.is_some(), live.is_some()];
    let mut out = together(target.into_iter().chain(live).collect(), sensitive).into_iter();
    let target = if present[0] { out.next() } else { None };
    let live = if present[1] { out.next() } else { None };
    (target, live)
}

/// `objects` masked with one numbering of runs: the objects in order, then the last-applied
/// configurations they carry, the last object's first (upstream's order: target, live, live's
/// last-applied).
fn together(mut objects: Vec<Value>, sensitive: &BTreeSet<String>) -> Vec<Value> {
    let count = objects.len();
    let mut applied: Vec<(usize, Value)> = (0..count)
        .rev()
        .filter_map(|i| {
            last_applied(&objects[i]).map(|mut a| {
                string_data_into_data(&mut a);
                (i, a)
            })
        })
        .collect();
    let mut keys = BTreeSet::new();
    for o in &mut objects {
        string_data_into_data(o);
    }
    for o in objects.iter().chain(applied.iter().map(|(_, a)| a)) {
        if let Some(data) = o.get("data").and_then(Value::as_object) {
            keys.extend(data.keys().cloned());
        }
    }
    {
        let mut all: Vec<&mut Value> = objects
            .iter_mut()
            .chain(applied.iter_mut().map(|(_, a)| a))
            .collect();
        hide(&mut all, &keys, &["data"]);
        hide(&mut all, sensitive, &["metadata", "annotations"]);
    }
    for (i, applied) in applied {
        let text = if sensitive.contains(LAST_APPLIED) {
            REPLACEMENT.to_owned()
        } else {
            applied.to_string()
        };
        // It was read from there, so the annotations are an object.
        if let Some(annotations) = objects[i]
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.insert(LAST_APPLIED.to_owned(), Value::String(text));
        }
    }
    objects
}

/// The object the last-applied annotation holds, if it holds one.
fn last_applied(obj: &Value) -> Option<Value> {
    let text = obj
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    serde_json::from_str::<Value>(text).ok().filter(Value::is_object)
}

/// `stringData` moved into `data`, base64-encoded, as upstream normalizes a Secret first.
pub fn string_data_into_data(obj: &mut Value) {
    use base64::Engine as _;
    let Some(map) = obj.as_object_mut() else { return };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    let Value::Object(data) = data else { return };
    for (key, value) in strings {
        let value = match value {
            Value::String(s) => Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
            other => other,
        };
        data.insert(key, value);
    }
}

/// Replaces the values of `keys` under `path` in each object: per key, the first distinct value
/// by [`REPLACEMENT`], each next distinct one by a longer run. A `null` map is left alone.
fn hide(objects: &mut [&mut Value], keys: &BTreeSet<String>, path: &[&str]) {
    for key in keys {
        let mut runs: HashMap<String, String> = HashMap::new();
        let mut next = REPLACEMENT.to_owned();
        for obj in objects.iter_mut() {
            let Some(map) = map_at(obj, path) else { continue };
            let Some(value) = map.get(key) else { continue };
            let seen = match value {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let run = runs
                .entry(seen)
                .or_insert_with(|| {
                    let run = next.clone();
                    next.push_str("++++");
                    run
                })
                .clone();
            map.insert(key.clone(), Value::String(run));
        }
    }
}

fn map_at<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut at = obj;
    for field in path {
        at = at.get_mut(*field)?;
    }
    at.as_object_mut()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_runs_of_plus_signs_equal_for_equal_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "c2VjcmV0", "b": "c2VjcmV0", "c": "b3RoZXI="}});
        let out = masked(secret, &BTreeSet::new());
        assert_eq!(
            out["data"],
            json!({"a": "++++++++", "b": "++++++++", "c": "++++++++"})
        );
        assert!(!out.to_string().contains("c2VjcmV0"));
    }

    #[test]
    fn the_last_applied_configuration_is_masked_alike() {
        let applied = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"p": "old"}});
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {
            LAST_APPLIED: applied.to_string(), "token": "t0k3n", "plain": "x"}},
            "data": {"p": "bmV3"}});
        let sensitive = sensitive_annotations(Some("token, other"));
        let out = masked(secret, &sensitive);
        assert_eq!(out["data"]["p"], "++++++++");
        let annotations = &out["metadata"]["annotations"];
        assert_eq!(annotations["token"], "++++++++");
        assert_eq!(annotations["plain"], "x");
        // The applied value ("old") differs from the live one: a longer run.
        let applied: Value = serde_json::from_str(annotations[LAST_APPLIED].as_str().unwrap()).unwrap();
        assert_eq!(applied["data"]["p"], "++++++++++++");
        assert!(applied.get("stringData").is_none());
        assert!(!out.to_string().contains("old") && !out.to_string().contains("t0k3n"));

        let whole = masked(out.clone(), &sensitive_annotations(Some(LAST_APPLIED)));
        assert_eq!(whole["metadata"]["annotations"][LAST_APPLIED], "++++++++");
    }

    #[test]
    fn only_core_secrets_are_masked_and_null_data_stays() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
        assert_eq!(masked(cm.clone(), &BTreeSet::new()), cm);
        let other = json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"a": "b"}});
        assert_eq!(masked(other.clone(), &BTreeSet::new()), other);
        let empty = json!({"apiVersion": "v1", "kind": "Secret", "data": null});
        assert_eq!(masked(empty.clone(), &BTreeSet::new()), empty);
        assert!(sensitive_annotations(Some("")).is_empty() && sensitive_annotations(None).is_empty());
    }

    #[test]
    fn the_sides_of_a_diff_share_their_runs() {
        let secret = |data: Value| json!({"apiVersion": "v1", "kind": "Secret", "data": data});
        let (target, live) = masked_pair(
            Some(secret(json!({"same": "YQ==", "changed": "Yg=="}))),
            Some(secret(json!({"same": "YQ==", "changed": "Yw==", "gone": "ZA=="}))),
            &BTreeSet::new(),
        );
        let (target, live) = (target.unwrap(), live.unwrap());
        assert_eq!(target["data"]["same"], live["data"]["same"]);
        assert_ne!(target["data"]["changed"], live["data"]["changed"]);
        assert!(live["data"]["gone"].as_str().unwrap().chars().all(|c| c == '+'));
        let (none, live) = masked_pair(None, Some(secret(json!({"k": "YQ=="}))), &BTreeSet::new());
        assert!(none.is_none());
        assert_eq!(live.unwrap()["data"]["k"], REPLACEMENT);
    }
}
