//! Turning a template and one parameter set into an Application, as upstream's
//! `applicationset/utils` does: every string of the template (map keys included) is rendered on
//! its own, with fasttemplate's `{{param}}` substitution or, with `goTemplate`, as a Go template.

use serde_json::{Map, Value};

use crate::error::AppError;
use crate::service::gotemplate::{self, Budget, MissingKey};

/// How the strings of a template are rendered, and the budget they share.
#[derive(Clone, Copy)]
pub struct Style<'a> {
    pub go: bool,
    pub missing: MissingKey,
    pub budget: &'a Budget,
}

impl Style<'_> {
    /// One string with `params`.
    pub fn render(self, src: &str, params: &Map<String, Value>) -> Result<String, String> {
        if self.go {
            gotemplate::render(src, params, self.missing, self.budget)
        } else {
            let out = fasttemplate(src, params)?;
            self.budget.spend(out.len())?;
            Ok(out)
        }
    }
}

/// fasttemplate's substitution as upstream uses it: each `{{ name }}` (spaces trimmed) whose
/// name is a string parameter becomes its value; any other tag is kept as written.
fn fasttemplate(src: &str, params: &Map<String, Value>) -> Result<String, String> {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| "cannot find the end tag \"}}\" of a \"{{\"".to_owned())?;
        let tag = &after[..close];
        match params.get(tag.trim()) {
            Some(Value::String(value)) if !tag.trim().is_empty() => out.push_str(value),
            _ => {
                out.push_str("{{");
                out.push_str(tag);
                out.push_str("}}");
            }
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `value` with every string (and object key) rendered. An error names the field at `path`.
pub fn render_value(
    value: &Value,
    path: &str,
    style: Style<'_>,
    params: &Map<String, Value>,
) -> Result<Value, AppError> {
    let fail = |src: &str, err: String| {
        AppError::InvalidArgument(format!("{path}: cannot render template {src:?}: {err}"))
    };
    Ok(match value {
        Value::String(s) => Value::String(style.render(s, params).map_err(|e| fail(s, e))?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| render_value(item, &format!("{path}[{i}]"), style, params))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                let at = format!("{path}.{key}");
                let key = style.render(key, params).map_err(|e| fail(key, e))?;
                out.insert(key, render_value(item, &at, style, params)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// `over` laid over `base`: the fields `over` sets (not empty) win, objects merge field by
/// field (upstream merges a generator's template over the ApplicationSet's this way).
pub fn merge_template(over: &Value, base: &Value) -> Value {
    match (over, base) {
        (Value::Object(o), Value::Object(b)) => {
            let mut out = b.clone();
            for (key, value) in o {
                let merged = match b.get(key) {
                    Some(bv) => merge_template(value, bv),
                    None => value.clone(),
                };
                out.insert(key.clone(), merged);
            }
            Value::Object(out)
        }
        (over, base) if is_empty(over) => base.clone(),
        (over, _) => over.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::gotemplate::sanitize_name;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        let Value::Object(m) = v else { panic!() };
        m
    }

    #[test]
    fn fasttemplate_keeps_unknown_tags() {
        let p = params(json!({"cluster": "dev", "url": "https://x"}));
        assert_eq!(
            fasttemplate("{{cluster}}-{{ url }}", &p).unwrap(),
            "dev-https://x"
        );
        assert_eq!(fasttemplate("{{nope}}/{{ }}", &p).unwrap(), "{{nope}}/{{ }}");
        assert!(fasttemplate("a {{cluster", &p).is_err());
    }

    #[test]
    fn merge_and_sanitize() {
        let base = json!({"metadata": {"name": "{{n}}", "labels": {"a": "1"}}, "spec": {"project": "p"}});
        let over = json!({"metadata": {"name": "", "labels": {"b": "2"}}, "spec": {"project": "q"}});
        assert_eq!(
            merge_template(&over, &base),
            json!({"metadata": {"name": "{{n}}", "labels": {"a": "1", "b": "2"}}, "spec": {"project": "q"}})
        );
        assert_eq!(sanitize_name("-My_Cluster@Prod."), "my-cluster-prod");
    }
}
