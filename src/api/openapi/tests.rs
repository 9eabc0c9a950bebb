//! The document against upstream's operation list and against itself.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::rpc::Handler;

fn doc() -> Value {
    super::document(&crate::rpc::table(), "")
}

/// Upstream's operations: (gRPC method, HTTP verb, OpenAPI path, path parameters).
fn upstream() -> Vec<(String, String, String, BTreeSet<String>)> {
    include_str!("../../rpc/table/upstream-operations.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split(' ');
            let (method, verb, template) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            let (path, params) = super::openapi_path(template);
            let params = params.into_iter().map(|(p, _)| p).collect();
            (method.to_owned(), verb.to_lowercase(), path, params)
        })
        .collect()
}

/// Each of upstream's operations is in the document with the same required path parameters,
/// or declared not served with a reason; nothing in the document is a method not served.
#[test]
fn every_upstream_operation_is_documented_or_declared_not_served() {
    let doc = doc();
    let table = crate::rpc::table();
    let mut unexplained = Vec::new();
    for (method, verb, path, params) in upstream() {
        if let Some(op) = doc["paths"][&path].get(&verb) {
            let documented: BTreeSet<String> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .map(|p| {
                    assert_eq!(p["required"], true, "{verb} {path}");
                    p["name"].as_str().unwrap_or_default().to_owned()
                })
                .collect();
            assert_eq!(documented, params, "path parameters of {verb} {path}");
            continue;
        }
        let declared = table.iter().any(|rpc| {
            rpc.path == method
                && matches!(rpc.handler, Handler::Unimplemented(why) if !why.is_empty())
                && rpc.rest.iter().any(|r| {
                    r.method.as_str().eq_ignore_ascii_case(&verb) && super::openapi_path(r.path).0 == path
                })
        });
        if !declared {
            unexplained.push(format!("{method} {verb} {path}"));
        }
    }
    assert!(
        unexplained.is_empty(),
        "neither served nor declared not served: {unexplained:#?}"
    );
    for rpc in &table {
        if let Handler::Unimplemented(_) = rpc.handler {
            for route in &rpc.rest {
                let (path, _) = super::openapi_path(route.path);
                let verb = route.method.as_str().to_lowercase();
                assert!(
                    doc["paths"][&path].get(&verb).is_none(),
                    "{verb} {path} is not served"
                );
            }
        }
    }
}

#[test]
fn every_served_rest_mapping_is_an_operation() {
    let doc = doc();
    let mut count = 0;
    for rpc in crate::rpc::table() {
        if let Handler::Call(..) = rpc.handler {
            for route in &rpc.rest {
                let (path, _) = super::openapi_path(route.path);
                let op = &doc["paths"][&path][route.method.as_str().to_lowercase()];
                assert!(op["operationId"].is_string(), "{} {path}", route.method);
                count += 1;
            }
        }
    }
    assert!(count > 40, "{count}");
}

/// Every `$ref` names a schema of the document.
#[test]
fn every_reference_resolves() {
    let doc = doc();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for r in refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(schemas.contains_key(name), "{r}");
    }
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// The schemas say what the codec writes: int64 as integers, times as strings, inline fields
/// lifted, upstream's names.
#[test]
fn schemas_follow_the_codec() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let meta = &schemas["v1ObjectMeta"]["properties"];
    assert_eq!(
        meta["generation"],
        serde_json::json!({"type": "integer", "format": "int64"})
    );
    assert_eq!(meta["creationTimestamp"]["format"], "date-time");
    let app = &schemas["v1alpha1Application"]["properties"];
    assert_eq!(app["metadata"]["$ref"], "#/components/schemas/v1ObjectMeta");
    let list = &doc["paths"]["/api/v1/applications"]["get"];
    assert_eq!(
        list["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/v1alpha1ApplicationList"
    );
    let root = super::document(&crate::rpc::table(), "/argocd/");
    assert_eq!(root["servers"][0]["url"], "/argocd");
}
