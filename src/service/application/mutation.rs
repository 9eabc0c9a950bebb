//! What a server-side apply dry run predicts, without what the API server's mutating webhooks
//! (and its own defaulting) would add: only the fields the applying manager owns keep the
//! predicted value; every other field keeps the live one, and a field the live object does not
//! have is left out. This is the outcome of gitops-engine's `removeWebhookMutation`
//! (pkg/diff/diff.go), reached here from the managed-fields trie alone (FieldsV1: `f:<field>`,
//! `k:<keys>` for a member of a keyed list, `v:<value>` of a set, `i:<index>` of a positional
//! list, `.` for the member itself), without the OpenAPI schema upstream parses.

use serde_json::{Map, Value};

/// The fields `manager` owns in `obj` (the union of its managedFields entries), if it owns any.
pub fn owned_by(obj: &Value, manager: &str) -> Option<Value> {
    let entries = obj.pointer("/metadata/managedFields")?.as_array()?;
    let mut owned: Option<Value> = None;
    for entry in entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
    {
        if let Some(fields) = entry.get("fieldsV1") {
            owned = Some(match owned {
                None => fields.clone(),
                Some(before) => union(before, fields),
            });
        }
    }
    owned.filter(|o| o.as_object().is_some_and(|m| !m.is_empty()))
}

fn union(mut a: Value, b: &Value) -> Value {
    if let (Some(am), Some(bm)) = (a.as_object_mut(), b.as_object()) {
        for (k, v) in bm {
            let merged = match am.remove(k) {
                Some(before) => union(before, v),
                None => v.clone(),
            };
            am.insert(k.clone(), merged);
        }
    }
    a
}

/// `predicted` with each field `owned` does not name taken from `live` (or left out when
/// `live` has none).
pub fn without_mutations(predicted: &Value, live: &Value, owned: &Value) -> Value {
    walk(predicted, Some(live), Some(owned)).unwrap_or(Value::Null)
}

/// A trie node that owns its whole value: nothing below it but the member marker.
fn whole(owned: &Value) -> bool {
    owned.as_object().is_none_or(|m| m.keys().all(|k| k == "."))
}

fn walk(pred: &Value, live: Option<&Value>, owned: Option<&Value>) -> Option<Value> {
    let Some(owned) = owned else {
        return unowned(pred, live?);
    };
    if whole(owned) {
        return Some(pred.clone());
    }
    match pred {
        Value::Object(fields) => {
            let mut out = Map::new();
            for (k, v) in fields {
                let counterpart = live.and_then(|l| l.get(k));
                if let Some(kept) = walk(v, counterpart, owned.get(format!("f:{k}"))) {
                    out.insert(k.clone(), kept);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => {
            let live_items = live
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let members = Members::of(owned);
            let kept = items.iter().enumerate().filter_map(|(i, item)| {
                let (child, counterpart) = members.find(item, i, live_items);
                walk(item, counterpart, child)
            });
            Some(Value::Array(kept.collect()))
        }
        other => Some(other.clone()),
    }
}

/// A field no one applying owns: the live value, where both have it.
fn unowned(pred: &Value, live: &Value) -> Option<Value> {
    match (pred, live) {
        (Value::Object(p), Value::Object(l)) => Some(Value::Object(
            p.iter()
                .filter_map(|(k, v)| Some((k.clone(), unowned(v, l.get(k)?)?)))
                .collect(),
        )),
        _ => Some(live.clone()),
    }
}

/// The members of a list the trie names, by how it names them.
struct Members<'a> {
    keyed: Vec<(Map<String, Value>, &'a Value)>,
    values: Vec<(Value, &'a Value)>,
    indexed: Vec<(usize, &'a Value)>,
}

impl<'a> Members<'a> {
    fn of(owned: &'a Value) -> Self {
        let mut members = Members {
            keyed: Vec::new(),
            values: Vec::new(),
            indexed: Vec::new(),
        };
        for (name, child) in owned.as_object().into_iter().flatten() {
            if let Some(keys) = name.strip_prefix("k:") {
                if let Ok(Value::Object(keys)) = serde_json::from_str(keys) {
                    members.keyed.push((keys, child));
                }
            } else if let Some(value) = name.strip_prefix("v:") {
                if let Ok(value) = serde_json::from_str(value) {
                    members.values.push((value, child));
                }
            } else if let Some(index) = name.strip_prefix("i:").and_then(|i| i.parse().ok()) {
                members.indexed.push((index, child));
            }
        }
        members
    }

    /// The trie node of `item` (at `index`) if owned, and its live counterpart: the live item
    /// with the same keys (the key fields of any keyed member), the same value, or at the same
    /// position.
    fn find<'l>(
        &self,
        item: &Value,
        index: usize,
        live: &'l [Value],
    ) -> (Option<&'a Value>, Option<&'l Value>) {
        if let Some((keys, _)) = self.keyed.first() {
            let names: Vec<&String> = keys.keys().collect();
            let same = |other: &Value| {
                names
                    .iter()
                    .all(|n| other.get(n.as_str()) == item.get(n.as_str()))
            };
            let child = self
                .keyed
                .iter()
                .find(|(keys, _)| keys.iter().all(|(k, v)| item.get(k) == Some(v)))
                .map(|(_, child)| *child);
            return (child, live.iter().find(|l| same(l)));
        }
        if !self.indexed.is_empty() {
            let child = self.indexed.iter().find(|(i, _)| *i == index).map(|(_, c)| *c);
            return (child, live.get(index));
        }
        let child = self.values.iter().find(|(v, _)| v == item).map(|(_, c)| *c);
        (child, live.iter().find(|l| *l == item))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_owned_fields_keep_the_predicted_value() {
        let live = json!({
            "metadata": {"name": "d", "generation": 1, "labels": {"a": "1", "other": "x"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "v1", "terminationMessagePath": "/dev/termination-log"},
                {"name": "sidecar", "image": "s1"},
            ]}}},
            "status": {"replicas": 1},
        });
        let predicted = json!({
            "metadata": {"name": "d", "generation": 2, "labels": {"a": "2", "other": "x", "webhook": "y"},
                         "managedFields": [
                {"manager": "argocd-controller", "operation": "Apply", "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:a": {}}},
                    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}},
                {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:paused": {}}}},
            ]},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "app", "image": "v2", "terminationMessagePath": "/dev/termination-log"},
                {"name": "sidecar", "image": "s1"},
                {"name": "injected", "image": "w"},
            ]}}},
            "status": {"replicas": 1},
        });
        let owned = owned_by(&predicted, "argocd-controller").unwrap();
        let out = without_mutations(&predicted, &live, &owned);
        assert_eq!(out["metadata"]["generation"], 1, "not the manager's: live");
        assert_eq!(
            out["metadata"]["labels"],
            json!({"a": "2", "other": "x"}),
            "the webhook's label left out"
        );
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "app", "image": "v2", "terminationMessagePath": "/dev/termination-log"},
                {"name": "sidecar", "image": "s1"},
            ]),
            "the injected container left out, the rest as live has it"
        );
        assert_eq!(out["status"], live["status"]);
        assert!(owned_by(&predicted, "nobody").is_none());
    }

    #[test]
    fn entries_of_one_manager_are_united() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "m", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "m", "fieldsV1": {"f:data": {"f:b": {}}}},
        ]}});
        assert_eq!(
            owned_by(&obj, "m").unwrap(),
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
    }

    #[test]
    fn sets_and_positional_lists_are_matched_by_value_and_index() {
        let live = json!({"f": ["a", "b"], "p": [1, 2]});
        let predicted = json!({"f": ["a", "b", "c"], "p": [1, 5, 7]});
        let owned = json!({"f:f": {"v:\"a\"": {}, "v:\"c\"": {}}, "f:p": {"i:1": {}}});
        let out = without_mutations(&predicted, &live, &owned);
        assert_eq!(out, json!({"f": ["a", "b", "c"], "p": [1, 5]}));
    }
}
