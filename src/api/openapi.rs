//! The server's own OpenAPI 3.0 document (`/swagger.json`), built once when the router is: one
//! operation per REST mapping of every method the table serves (`crate::rpc::table`), with its
//! parameters and bodies from the method's descriptors and its schemas from the JSON codec
//! (`crate::schema::jsonschema`). Methods declared not served are left out: they answer 501.
//! A new service needs nothing here: its table rows and protos are the whole input.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use crate::rpc::{Body, Handler, Rpc};
use crate::schema::Schema;
use crate::schema::jsonschema::Definitions;

/// How deep query parameters reach into nested request messages (`a.b.c`), as grpc-gateway
/// fills them; deeper fields are left to the body-taking mappings.
const QUERY_DEPTH: usize = 3;

/// The document for a server under `rootpath` (`""` or `/argocd`).
pub fn document(rpcs: &[Arc<Rpc>], rootpath: &str) -> Value {
    let schema = Schema::get();
    let mut defs = Definitions::default();
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    for rpc in rpcs {
        let (Handler::Call(..), Some(method)) = (&rpc.handler, &rpc.method) else {
            continue;
        };
        for route in &rpc.rest {
            let (path, path_fields) = openapi_path(route.path);
            let mut op = Map::new();
            let (service, name) = service_and_method(rpc.path);
            let id = format!("{service}_{name}");
            let seen = ids.entry(id.clone()).or_default();
            *seen += 1;
            op.insert(
                "operationId".into(),
                Value::String(if *seen == 1 { id } else { format!("{id}{seen}") }),
            );
            op.insert("tags".into(), json!([service]));
            let input = method.input();
            let mut params: Vec<Value> = path_fields
                .iter()
                .map(|(param, field)| {
                    json!({
                        "name": param,
                        "in": "path",
                        "required": true,
                        "schema": param_schema(schema, &mut defs, &input, field),
                    })
                })
                .collect();
            let body_field = match route.body {
                Body::All => None,
                Body::Field(f) => Some(f),
                Body::None => Some(""),
            };
            if let Some(body_field) = body_field {
                let taken: Vec<&str> = path_fields.iter().map(|(_, f)| f.as_str()).collect();
                query_params(schema, &mut defs, &input, "", &taken, body_field, 0, &mut params);
            }
            if !params.is_empty() {
                op.insert("parameters".into(), Value::Array(params));
            }
            let body = match route.body {
                Body::None => None,
                Body::All => Some(defs.reference(schema, &input)),
                Body::Field(f) => input.get_field_by_name(f).map(|fd| defs.field(schema, &fd)),
            };
            if let Some(body) = body {
                op.insert(
                    "requestBody".into(),
                    json!({"required": true, "content": {"application/json": {"schema": body}}}),
                );
            }
            let output = defs.reference(schema, &method.output());
            let ok = if method.is_server_streaming() {
                json!({
                    "description": "A stream: one object per line (or Server-Sent Events with \
                                    `Accept: text/event-stream`) until the server ends it.",
                    "content": {"application/json": {"schema": {
                        "type": "object",
                        "properties": {"result": output, "error": {"$ref": ERROR_REF}},
                    }}},
                })
            } else {
                json!({"description": "A successful response.",
                       "content": {"application/json": {"schema": output}}})
            };
            op.insert(
                "responses".into(),
                json!({
                    "200": ok,
                    "default": {"description": "An error.",
                                "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}},
                }),
            );
            if method.is_server_streaming() {
                op.insert("x-stream".into(), Value::Bool(true));
            }
            paths
                .entry(path)
                .or_default()
                .insert(route.method.as_str().to_lowercase(), Value::Object(op));
        }
    }
    let mut schemas = defs.into_map();
    schemas.insert("runtimeError".into(), error_schema());
    let root = rootpath.trim_end_matches('/');
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "tiphys API",
            "description": "Argo CD's REST API as tiphys serves it: only the operations listed here \
                            are served; the rest of upstream's answer 501 naming the operation.",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "servers": [{"url": if root.is_empty() { "/" } else { root }}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A session token or an account's API token."},
            },
        },
        "security": [{"bearer": []}],
    })
}

const ERROR_REF: &str = "#/components/schemas/runtimeError";

/// The body of every REST error.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "error": {"type": "string"},
            "code": {"type": "integer", "format": "int32"},
            "message": {"type": "string"},
            "details": {"type": "array", "items": {"type": "object"}},
        },
    })
}

/// `ApplicationService`, `List` from `/application.ApplicationService/List`.
fn service_and_method(path: &str) -> (&str, &str) {
    let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or((path, ""));
    (service.rsplit('.').next().unwrap_or(service), method)
}

/// The OpenAPI path of a table template and, per parameter, its name and the request field it
/// fills: `{subresource=**}` is the parameter `subresource`, `{repo.repo}` fills `repo.repo`.
fn openapi_path(template: &str) -> (String, Vec<(String, String)>) {
    let mut out = String::new();
    let mut params = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        let inner = &rest[start + 1..start + end];
        let field = inner.split_once('=').map_or(inner, |(f, _)| f);
        out.push('{');
        out.push_str(field);
        out.push('}');
        params.push((field.to_owned(), field.to_owned()));
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    (out, params)
}

/// The schema of a path parameter: the (dotted) field's scalar type, as a string by default.
fn param_schema(schema: &Schema, defs: &mut Definitions, input: &MessageDescriptor, field: &str) -> Value {
    let mut desc = input.clone();
    let mut parts = field.split('.').peekable();
    while let Some(part) = parts.next() {
        let Some(fd) = desc.get_field_by_name(part) else {
            break;
        };
        match fd.kind() {
            Kind::Message(inner) if parts.peek().is_some() => desc = inner,
            Kind::Message(_) => break,
            _ => return defs.field(schema, &fd),
        }
    }
    json!({"type": "string"})
}

/// Query parameters: every scalar (or list of scalars) field of the request, dotted into nested
/// messages, but not those filled by the path or the body.
#[allow(clippy::too_many_arguments)]
fn query_params(
    schema: &Schema,
    defs: &mut Definitions,
    desc: &MessageDescriptor,
    prefix: &str,
    taken: &[&str],
    body_field: &str,
    depth: usize,
    out: &mut Vec<Value>,
) {
    for fd in desc.fields() {
        let name = format!("{prefix}{}", fd.name());
        if taken.contains(&name.as_str()) || name == body_field || fd.is_map() {
            continue;
        }
        match fd.kind() {
            Kind::Message(inner) => {
                let scalar_like = matches!(
                    inner.full_name(),
                    "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
                        | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
                );
                if !fd.is_list() && !scalar_like && depth + 1 < QUERY_DEPTH {
                    query_params(
                        schema,
                        defs,
                        &inner,
                        &format!("{name}."),
                        taken,
                        body_field,
                        depth + 1,
                        out,
                    );
                }
            }
            _ => out.push(json!({
                "name": name,
                "in": "query",
                "required": false,
                "schema": defs.field(schema, &fd),
            })),
        }
    }
}

#[cfg(test)]
mod tests;
