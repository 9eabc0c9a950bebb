//! The keys of a message's JSON form that name none of its fields, at any depth: what
//! `tiphys apply --validate` reports, as kubectl's strict field validation does. The codec drops
//! such keys (as Go's encoding/json does), so without this a typo goes unnoticed.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value};

use super::Schema;
use super::plan::{FieldPlan, Shape};

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A key that names no field.
#[derive(Debug, Clone)]
pub struct UnknownField {
    /// From the root; the key is the last step.
    pub path: Vec<Step>,
    /// The message that has no field of that name.
    pub message: MessageDescriptor,
}

/// A path as kubectl writes it: `spec.sources[1].helm.valueFile`.
pub fn path_string(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl Schema {
    /// Every key of `json` that names no field of the message it sits in. Names match exactly,
    /// as in kubectl's strict validation (the codec also takes them in another case, as Go
    /// does); the keys of an `inline` field's message count at its parent's level. Map keys are
    /// data, not names, and a time is a string: neither is checked. Nor is a value of the wrong
    /// type, which the codec refuses with its own message.
    pub fn unknown_fields(&self, desc: &MessageDescriptor, json: &Value) -> Vec<UnknownField> {
        let mut out = Vec::new();
        if let Value::Object(map) = json {
            self.unknown_in(desc, map, &mut Vec::new(), &mut out);
        }
        out
    }

    fn unknown_in(
        &self,
        desc: &MessageDescriptor,
        map: &Map<String, Value>,
        path: &mut Vec<Step>,
        out: &mut Vec<UnknownField>,
    ) {
        for (key, value) in map {
            path.push(Step::Key(key.clone()));
            match self.field_named(desc, key) {
                Some(field) => self.unknown_below(field, value, path, out),
                None => out.push(UnknownField {
                    path: path.clone(),
                    message: desc.clone(),
                }),
            }
            path.pop();
        }
    }

    /// The field `key` names in a message of type `desc`, directly or through its `inline`
    /// fields (Go promotes the fields of nested embedded structs all the way up).
    fn field_named(&self, desc: &MessageDescriptor, key: &str) -> Option<&FieldPlan> {
        let plan = self.plan(desc);
        if let Some(field) = plan.exact(key) {
            return Some(field);
        }
        plan.inline.iter().find_map(|&i| match plan.fields[i].fd.kind() {
            Kind::Message(inner) => self.field_named(&inner, key),
            _ => None,
        })
    }

    fn unknown_below(
        &self,
        field: &FieldPlan,
        value: &Value,
        path: &mut Vec<Step>,
        out: &mut Vec<UnknownField>,
    ) {
        if field.shape != Shape::Message {
            return;
        }
        let Some(inner) = message_of(&field.fd) else {
            return;
        };
        let fd = &field.fd;
        match value {
            Value::Object(entries) if fd.is_map() => {
                for (key, value) in entries {
                    if let Value::Object(map) = value {
                        path.push(Step::Key(key.clone()));
                        self.unknown_in(&inner, map, path, out);
                        path.pop();
                    }
                }
            }
            Value::Array(items) if fd.is_list() => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Object(map) = item {
                        path.push(Step::Index(i));
                        self.unknown_in(&inner, map, path, out);
                        path.pop();
                    }
                }
            }
            Value::Object(map) if !fd.is_list() => self.unknown_in(&inner, map, path, out),
            // The wrong type: the codec refuses it.
            _ => {}
        }
    }
}

/// The message one value of `fd` is: the field's, a list element's, a map value's.
fn message_of(fd: &FieldDescriptor) -> Option<MessageDescriptor> {
    let kind = match fd.kind() {
        Kind::Message(entry) if fd.is_map() => entry.map_entry_value_field().kind(),
        kind => kind,
    };
    match kind {
        Kind::Message(m) => Some(m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const V1ALPHA1: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1";

    fn unknown(message: &str, json: Value) -> Vec<(String, String)> {
        let schema = Schema::get();
        let desc = schema.message(&format!("{V1ALPHA1}.{message}")).unwrap();
        schema
            .unknown_fields(&desc, &json)
            .into_iter()
            .map(|u| (path_string(&u.path), u.message.name().to_owned()))
            .collect()
    }

    #[test]
    fn unknown_keys_are_found_at_every_depth_with_their_message() {
        let app = json!({
            "metadata": {"name": "a", "nmae": "b", "labels": {"any key": "v"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "syncPolcy": {"automated": {}},
                "syncPolicy": {"automated": {"prune": true, "selfheal": true}},
                "sources": [{"repoURL": "r"}, {"repoURL": "r", "helm": {"valueFile": ["x"], "valueFiles": ["y"]}}],
                "project": {"not": "a string"},
            },
            "status": {"sync": {"status": "Synced", "bogus": 1}},
        });
        assert_eq!(
            unknown("Application", app),
            [
                ("metadata.nmae".to_owned(), "ObjectMeta".to_owned()),
                (
                    "spec.sources[1].helm.valueFile".to_owned(),
                    "ApplicationSourceHelm".to_owned()
                ),
                ("spec.syncPolcy".to_owned(), "ApplicationSpec".to_owned()),
                // Go would take `selfheal` for `selfHeal`; kubectl would not.
                (
                    "spec.syncPolicy.automated.selfheal".to_owned(),
                    "SyncPolicyAutomated".to_owned()
                ),
                ("status.sync.bogus".to_owned(), "SyncStatus".to_owned()),
            ]
        );
    }

    #[test]
    fn inline_keys_count_at_their_parents_level_and_map_values_are_walked() {
        let target = json!({"target": {"kind": "Deployment", "group": "apps", "name": "web",
                                       "labelSelector": "a=b", "knd": "x"}});
        assert_eq!(
            unknown("KustomizePatch", target),
            [("target.knd".to_owned(), "KustomizeSelector".to_owned())]
        );
        let status =
            json!({"jwtTokensByRole": {"ci": {"items": [{"iat": 1, "ia": 2}]}, "x": "not an object"}});
        assert_eq!(
            unknown("AppProjectStatus", status),
            [("jwtTokensByRole.ci.items[0].ia".to_owned(), "JWTToken".to_owned())]
        );
        assert!(unknown("AppProjectStatus", json!([1])).is_empty());
    }
}
