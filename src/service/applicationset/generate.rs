//! The generators tiphys renders (`list`, `clusters`, `matrix`) and the Applications an
//! ApplicationSet makes from them, following upstream's `applicationset/generators` and
//! `applicationset/utils`. Nothing here writes: the Applications are only answered.
//!
//! Not done (a controller's work upstream): interpolating a matrix's second generator with the
//! first one's parameters, and `templatePatch`, which is refused.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::render::{Style, merge_template, render_value};
use crate::error::AppError;
use crate::service::cluster::lookup;
use crate::service::gotemplate::{Budget, MissingKey, sanitize_name};
use crate::service::limits::check_object_name;
use crate::state::ServerState;

/// Generators upstream has and tiphys does not render.
const UNSUPPORTED: [&str; 6] = [
    "git",
    "scmProvider",
    "pullRequest",
    "clusterDecisionResource",
    "merge",
    "plugin",
];
const SUPPORTED: [&str; 3] = ["list", "clusters", "matrix"];
/// The label upstream's cluster Secrets carry, which cluster selectors see.
const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// At most this many Applications from one ApplicationSet (a matrix multiplies).
const MAX_APPLICATIONS: usize = 10_000;

fn bad(message: String) -> AppError {
    AppError::InvalidArgument(message)
}

/// Refuses a generator tiphys does not render (the schema keeps them as raw JSON for this), an
/// entry with no generator or several, and a `templatePatch`.
pub fn check_generators(appset: &Value) -> Result<(), AppError> {
    let spec = appset.get("spec").unwrap_or(&Value::Null);
    if spec.get("templatePatch").is_some_and(|p| !p.is_null() && p != "") {
        return Err(bad(
            "spec.templatePatch: templatePatch is not supported by this server".to_owned(),
        ));
    }
    match spec.get("generators") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(list)) => check_list(list, "spec.generators", 0),
        Some(_) => Err(bad("spec.generators: expected a list".to_owned())),
    }
}

fn check_list(list: &[Value], path: &str, depth: usize) -> Result<(), AppError> {
    for (i, generator) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(object) = generator.as_object() else {
            return Err(bad(format!("{at}: a generator must be an object")));
        };
        if let Some(name) = UNSUPPORTED
            .iter()
            .find(|n| object.get(**n).is_some_and(|v| !v.is_null()))
        {
            return Err(bad(format!(
                "{at}: generator {name:?} is not supported by this server (only list, clusters and matrix are)"
            )));
        }
        let set: Vec<&str> = SUPPORTED
            .into_iter()
            .filter(|n| object.get(*n).is_some_and(|v| !v.is_null()))
            .collect();
        match set.as_slice() {
            [] => {
                return Err(bad(format!(
                    "{at}: no generator is set (list, clusters or matrix)"
                )));
            }
            [_] => {}
            many => {
                return Err(bad(format!(
                    "{at}: several generators in one entry: {}",
                    many.join(", ")
                )));
            }
        }
        if set[0] == "matrix" {
            if depth >= 2 {
                return Err(bad(format!(
                    "{at}: a matrix may hold a matrix only one level deep, as upstream"
                )));
            }
            let children = object
                .get("matrix")
                .and_then(|m| m.get("generators"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            check_list(children, &format!("{at}.matrix.generators"), depth + 1)?;
        }
    }
    Ok(())
}

/// The Applications `appset` (canonical JSON, namespace set) generates, in generator order.
pub fn applications(state: &ServerState, appset: &Value) -> Result<Vec<Value>, AppError> {
    let spec = appset.get("spec").cloned().unwrap_or(Value::Null);
    let options: Vec<String> = spec
        .get("goTemplateOptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_str().map(str::to_owned))
        .collect();
    let missing =
        MissingKey::from_options(&options).map_err(|e| bad(format!("spec.goTemplateOptions: {e}")))?;
    let budget = Budget::default();
    let style = Style {
        go: spec.get("goTemplate").and_then(Value::as_bool).unwrap_or(false),
        missing,
        budget: &budget,
    };
    let namespace = appset
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let base = spec.get("template").cloned().unwrap_or(Value::Null);
    let generators = spec
        .get("generators")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut apps = Vec::new();
    let mut names = BTreeSet::new();
    for (i, generator) in generators.iter().enumerate() {
        let at = format!("spec.generators[{i}]");
        let sets = params(state, generator, &at, style)?;
        let own = SUPPORTED
            .iter()
            .find_map(|n| generator.get(*n))
            .and_then(|g| g.get("template"))
            .unwrap_or(&Value::Null);
        let template = merge_template(own, &base);
        for (j, set) in sets.iter().enumerate() {
            if apps.len() >= MAX_APPLICATIONS {
                return Err(bad(format!(
                    "the ApplicationSet generates more than {MAX_APPLICATIONS} applications"
                )));
            }
            let rendered = render_value(&template, "spec.template", style, set)?;
            let app = application(&rendered, namespace);
            let name = app
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            check_object_name("application", name).map_err(|e| {
                bad(format!(
                    "{at}, parameter set {j}: the generated application is invalid: {}",
                    message(&e)
                ))
            })?;
            if !names.insert(name.to_owned()) {
                return Err(bad(format!(
                    "{at}, parameter set {j}: the ApplicationSet generates more than one application named {name:?}"
                )));
            }
            apps.push(app);
        }
    }
    Ok(apps)
}

fn message(err: &AppError) -> String {
    match err {
        AppError::InvalidArgument(m) => m.clone(),
        other => other.to_string(),
    }
}

/// An Application from a rendered `ApplicationSetTemplate`, in the ApplicationSet's namespace.
fn application(template: &Value, namespace: &str) -> Value {
    let mut metadata = Map::new();
    let meta = template.get("metadata").and_then(Value::as_object);
    for field in ["name", "labels", "annotations", "finalizers"] {
        if let Some(v) = meta.and_then(|m| m.get(field)) {
            metadata.insert(field.to_owned(), v.clone());
        }
    }
    metadata.insert("namespace".to_owned(), Value::String(namespace.to_owned()));
    json!({
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The parameter sets of one generator entry (`at` names it in messages), its selector applied.
fn params(
    state: &ServerState,
    generator: &Value,
    at: &str,
    style: Style<'_>,
) -> Result<Vec<Map<String, Value>>, AppError> {
    let sets = if let Some(list) = generator.get("list") {
        list_params(list, &format!("{at}.list"), style)?
    } else if let Some(clusters) = generator.get("clusters") {
        cluster_params(state, clusters, &format!("{at}.clusters"), style)?
    } else if let Some(matrix) = generator.get("matrix") {
        matrix_params(state, matrix, &format!("{at}.matrix"), style)?
    } else {
        return Err(bad(format!(
            "{at}: no generator is set (list, clusters or matrix)"
        )));
    };
    let Some(selector) = generator.get("selector").filter(|s| !is_empty_selector(s)) else {
        return Ok(sets);
    };
    let mut kept = Vec::new();
    for set in sets {
        let mut flat = BTreeMap::new();
        flatten("", &Value::Object(set.clone()), &mut flat);
        if selects(selector, &flat, &format!("{at}.selector"))? {
            kept.push(set);
        }
    }
    Ok(kept)
}

fn list_params(list: &Value, at: &str, style: Style<'_>) -> Result<Vec<Map<String, Value>>, AppError> {
    let mut elements: Vec<Value> = list
        .get("elements")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(yaml) = list
        .get("elementsYaml")
        .and_then(Value::as_str)
        .filter(|y| !y.is_empty())
    {
        let more: Vec<Value> = serde_yaml_ng::from_str(yaml)
            .map_err(|e| bad(format!("{at}.elementsYaml: not a YAML list of objects: {e}")))?;
        elements.extend(more);
    }
    let mut sets = Vec::new();
    for (i, element) in elements.into_iter().enumerate() {
        let here = format!("{at}.elements[{i}]");
        let Value::Object(element) = element else {
            return Err(bad(format!("{here}: an element must be an object")));
        };
        if style.go {
            sets.push(element);
            continue;
        }
        // Without goTemplate, parameters are strings: upstream refuses other values, except
        // a `values` object whose strings become `values.<key>`.
        let mut set = Map::new();
        for (key, value) in element {
            match (key.as_str(), value) {
                (_, Value::String(s)) => {
                    set.insert(key, Value::String(s));
                }
                ("values", Value::Object(values)) => {
                    for (k, v) in values {
                        let Value::String(v) = v else {
                            return Err(bad(format!(
                                "{here}.values.{k}: a value must be a string without goTemplate"
                            )));
                        };
                        set.insert(format!("values.{k}"), Value::String(v));
                    }
                }
                (_, _) => {
                    return Err(bad(format!(
                        "{here}.{key}: a value must be a string without goTemplate"
                    )));
                }
            }
        }
        sets.push(set);
    }
    Ok(sets)
}

fn cluster_params(
    state: &ServerState,
    spec: &Value,
    at: &str,
    style: Style<'_>,
) -> Result<Vec<Map<String, Value>>, AppError> {
    let selector = spec.get("selector").filter(|s| !is_empty_selector(s));
    let (_, entries) = lookup::all(state);
    let mut sets = Vec::new();
    for entry in entries {
        // As upstream: a selector only sees registered clusters, never the implicit in-cluster.
        if selector.is_some() && entry.stored.is_none() {
            continue;
        }
        let map_of = |field: &str| -> BTreeMap<String, String> { lookup_strings(entry.value.get(field)) };
        let mut labels = map_of("labels");
        let annotations = map_of("annotations");
        if entry.stored.is_some() {
            labels.insert(SECRET_TYPE_LABEL.to_owned(), "cluster".to_owned());
        }
        if let Some(selector) = selector
            && !selects(selector, &labels, &format!("{at}.selector"))?
        {
            continue;
        }
        let mut set = Map::new();
        set.insert("name".to_owned(), Value::String(entry.name.clone()));
        set.insert(
            "nameNormalized".to_owned(),
            Value::String(sanitize_name(&entry.name)),
        );
        set.insert("server".to_owned(), Value::String(entry.server.clone()));
        set.insert("project".to_owned(), Value::String(entry.project.clone()));
        if entry.stored.is_some() {
            if style.go {
                set.insert(
                    "metadata".to_owned(),
                    json!({"labels": labels, "annotations": annotations}),
                );
            } else {
                for (k, v) in &labels {
                    set.insert(format!("metadata.labels.{k}"), Value::String(v.clone()));
                }
                for (k, v) in &annotations {
                    set.insert(format!("metadata.annotations.{k}"), Value::String(v.clone()));
                }
            }
        }
        // `values` may use the cluster's parameters.
        let mut values = Map::new();
        for (k, v) in lookup_strings(spec.get("values")) {
            let rendered = style
                .render(&v, &set)
                .map_err(|e| bad(format!("{at}.values.{k}: cannot render template {v:?}: {e}")))?;
            values.insert(k, Value::String(rendered));
        }
        if style.go {
            set.insert("values".to_owned(), Value::Object(values));
        } else {
            for (k, v) in values {
                set.insert(format!("values.{k}"), v);
            }
        }
        sets.push(set);
    }
    Ok(sets)
}

fn lookup_strings(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect()
}

fn matrix_params(
    state: &ServerState,
    matrix: &Value,
    at: &str,
    style: Style<'_>,
) -> Result<Vec<Map<String, Value>>, AppError> {
    let children = matrix
        .get("generators")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if children.len() != 2 {
        return Err(bad(format!(
            "{at}.generators: a matrix combines exactly two generators, found {}",
            children.len()
        )));
    }
    let mut sides = Vec::new();
    for (i, child) in children.iter().enumerate() {
        sides.push(params(state, child, &format!("{at}.generators[{i}]"), style)?);
    }
    let (left, right) = (&sides[0], &sides[1]);
    if left.len().saturating_mul(right.len()) > MAX_APPLICATIONS {
        return Err(bad(format!(
            "{at}: the matrix makes more than {MAX_APPLICATIONS} parameter sets"
        )));
    }
    let mut out = Vec::new();
    for a in left {
        for b in right {
            out.push(if style.go {
                // The first generator's parameters win, nested objects merged.
                match deep_merge(Value::Object(b.clone()), Value::Object(a.clone())) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                }
            } else {
                combine(a, b).map_err(|e| bad(format!("{at}: {e}")))?
            });
        }
    }
    Ok(out)
}

/// `over` merged into `base`, `over` winning.
fn deep_merge(base: Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(mut b), Value::Object(o)) => {
            for (k, v) in o {
                let merged = match b.remove(&k) {
                    Some(bv) => deep_merge(bv, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            Value::Object(b)
        }
        (_, over) => over,
    }
}

/// Two flat parameter sets in one; the same key with two values is an error, as upstream.
fn combine(a: &Map<String, Value>, b: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(existing) if existing != v => {
                return Err(format!(
                    "the two generators give parameter {k:?} different values ({existing} and {v})"
                ));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(out)
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_owned(), s.clone());
        }
        other => {
            out.insert(prefix.to_owned(), other.to_string());
        }
    }
}

fn is_empty_selector(selector: &Value) -> bool {
    let empty = |f: &str| {
        selector.get(f).is_none_or(|v| {
            v.as_object().is_some_and(Map::is_empty) || v.as_array().is_some_and(Vec::is_empty) || v.is_null()
        })
    };
    empty("matchLabels") && empty("matchExpressions")
}

/// A Kubernetes `LabelSelector` (at `at`, for messages) against `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>, at: &str) -> Result<bool, AppError> {
    for (k, v) in lookup_strings(selector.get("matchLabels")) {
        if labels.get(&k) != Some(&v) {
            return Ok(false);
        }
    }
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, e) in expressions.iter().enumerate() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let have = labels.get(key).map(String::as_str);
        let ok = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => have.is_none_or(|h| !values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => {
                return Err(bad(format!(
                    "{at}.matchExpressions[{i}].operator: {other:?} is not In, NotIn, Exists or DoesNotExist"
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_generators_are_named() {
        let appset = json!({"spec": {"generators": [{"list": {"elements": []}}, {"git": {"repoURL": "x"}}]}});
        let err = check_generators(&appset).unwrap_err().to_string();
        assert!(
            err.contains("spec.generators[1]: generator \"git\" is not supported by this server"),
            "{err}"
        );
        let nested =
            json!({"spec": {"generators": [{"matrix": {"generators": [{"list": {}}, {"plugin": {}}]}}]}});
        let err = check_generators(&nested).unwrap_err().to_string();
        assert!(
            err.contains("spec.generators[0].matrix.generators[1]: generator \"plugin\""),
            "{err}"
        );
        let none = json!({"spec": {"generators": [{}]}});
        assert!(
            check_generators(&none)
                .unwrap_err()
                .to_string()
                .contains("no generator is set")
        );
    }

    #[test]
    fn selectors() {
        let labels: BTreeMap<String, String> = [("env".to_owned(), "prod".to_owned())].into();
        let sel = |v: Value| selects(&v, &labels, "s").unwrap();
        assert!(sel(json!({"matchLabels": {"env": "prod"}})));
        assert!(!sel(json!({"matchLabels": {"env": "dev"}})));
        assert!(sel(
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "x"]}]})
        ));
        assert!(!sel(
            json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]})
        ));
        assert!(
            selects(
                &json!({"matchExpressions": [{"key": "env", "operator": "Is"}]}),
                &labels,
                "s"
            )
            .is_err()
        );
    }

    #[test]
    fn combining_parameter_sets() {
        let a = json!({"x": "1", "y": "2"});
        let b = json!({"y": "2", "z": "3"});
        let (Value::Object(a), Value::Object(b)) = (a, b) else {
            panic!()
        };
        assert_eq!(
            Value::Object(combine(&a, &b).unwrap()),
            json!({"x": "1", "y": "2", "z": "3"})
        );
        let c = json!({"y": "9"});
        let Value::Object(c) = c else { panic!() };
        assert!(combine(&a, &c).is_err());
        assert_eq!(
            deep_merge(json!({"m": {"a": 1, "b": 1}}), json!({"m": {"b": 2}})),
            json!({"m": {"a": 1, "b": 2}})
        );
    }
}
