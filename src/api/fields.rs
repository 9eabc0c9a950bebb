//! `fields=` projections of REST bodies: a comma-separated list of dotted paths to keep
//! (`items.metadata.name`); a path with a leading `-` is removed instead. Arrays are
//! traversed: a path below an array applies to every element. A path that selects nothing
//! is ignored, as upstream ignores unknown paths.

use serde_json::{Map, Value};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    include: Vec<Vec<String>>,
    exclude: Vec<Vec<String>>,
}

impl Fields {
    /// `None` when the parameter is absent or lists no path.
    pub fn parse(param: &str) -> Option<Self> {
        let mut fields = Fields::default();
        for path in param.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match path.strip_prefix('-') {
                Some(excluded) => fields.exclude.push(split(excluded)),
                None => fields.include.push(split(path)),
            }
        }
        (!fields.include.is_empty() || !fields.exclude.is_empty()).then_some(fields)
    }

    /// The projection of the part below `prefix` (`items` of a list, `result` of a stream
    /// message), and whether any path names something outside it.
    pub fn below(&self, prefix: &str) -> Fields {
        let strip = |paths: &[Vec<String>]| {
            paths
                .iter()
                .filter(|p| p.first().is_some_and(|s| s == prefix))
                .map(|p| p[1..].to_vec())
                .collect()
        };
        Fields {
            include: strip(&self.include),
            exclude: strip(&self.exclude),
        }
    }

    /// Whether any kept path starts with `segment`.
    pub fn mentions(&self, segment: &str) -> bool {
        self.include
            .iter()
            .any(|p| p.first().is_some_and(|s| s == segment))
    }

    pub fn apply(&self, value: &Value) -> Value {
        let mut out = if self.include.is_empty() || self.include.iter().any(Vec::is_empty) {
            value.clone()
        } else {
            let mut out = Value::Null;
            for path in &self.include {
                copy_path(value, &mut out, path);
            }
            if out.is_null() && value.is_object() {
                Value::Object(Map::new())
            } else {
                out
            }
        };
        for path in &self.exclude {
            remove_path(&mut out, path);
        }
        out
    }
}

fn split(path: &str) -> Vec<String> {
    path.split('.').map(str::to_owned).collect()
}

/// Copies `path` of `from` into `to`, creating the objects along the way. A selected value that
/// is null is kept as null (a nil field upstream still appears when asked for).
fn copy_path(from: &Value, to: &mut Value, path: &[String]) {
    let Some((head, rest)) = path.split_first() else {
        *to = from.clone();
        return;
    };
    match from {
        Value::Object(map) => {
            if !to.is_object() {
                *to = Value::Object(Map::new());
            }
            let Some(to_map) = to.as_object_mut() else {
                return;
            };
            match map.get(head) {
                Some(child) => {
                    let slot = to_map.entry(head.clone()).or_insert(Value::Null);
                    copy_path(child, slot, rest);
                }
                // A requested field the object does not have is null, as upstream's
                // projection of an unset field is.
                None if rest.is_empty() => {
                    to_map.entry(head.clone()).or_insert(Value::Null);
                }
                None => {}
            }
        }
        Value::Array(items) => {
            if !matches!(to, Value::Array(existing) if existing.len() == items.len()) {
                *to = Value::Array(vec![Value::Null; items.len()]);
            }
            if let Value::Array(targets) = to {
                for (item, target) in items.iter().zip(targets.iter_mut()) {
                    copy_path(item, target, path);
                }
            }
        }
        _ => {}
    }
}

fn remove_path(value: &mut Value, path: &[String]) {
    let Some((head, rest)) = path.split_first() else {
        return;
    };
    match value {
        Value::Object(map) => {
            if rest.is_empty() {
                map.remove(head);
            } else if let Some(child) = map.get_mut(head) {
                remove_path(child, rest);
            }
        }
        Value::Array(items) => {
            for item in items {
                remove_path(item, path);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_listed_paths_through_arrays() {
        let list = json!({"metadata": {"resourceVersion": "7"}, "items": [
            {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"project": "p"}},
            {"metadata": {"name": "b"}, "spec": {"project": "q"}}
        ]});
        let fields = Fields::parse("metadata.resourceVersion,items.metadata.name").unwrap();
        assert_eq!(
            fields.apply(&list),
            json!({"metadata": {"resourceVersion": "7"}, "items": [
                {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}
            ]})
        );
        let below = fields.below("items");
        assert_eq!(below.apply(&list["items"][0]), json!({"metadata": {"name": "a"}}));
        let missing = Fields::parse("items.metadata.annotations")
            .unwrap()
            .below("items");
        assert_eq!(
            missing.apply(&list["items"][1]),
            json!({"metadata": {"annotations": null}})
        );
    }

    #[test]
    fn excluded_paths_are_removed() {
        let fields = Fields::parse("-spec.project").unwrap();
        assert_eq!(
            fields.apply(&json!({"spec": {"project": "p", "x": 1}})),
            json!({"spec": {"x": 1}})
        );
        assert_eq!(Fields::parse(" , "), None);
    }
}
