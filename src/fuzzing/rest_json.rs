//! The REST JSON of every resource kind: a REST call's body and query → the request's JSON
//! form (`api::dynamic::request_json`, what the REST adapter does with every call) → the use
//! case's own request type.

use super::grpc_message::normal_form;
use crate::api::dynamic::request_json;
use crate::error::AppError;
use crate::rpc::{Body, Handler, ReadFn};
use crate::schema::Schema;

/// One REST mapping of the method table.
struct Endpoint {
    /// `POST /api/v1/applications`
    key: String,
    input: prost_reflect::MessageDescriptor,
    body: Body,
    read: ReadFn,
}

/// Lines of the input: the REST mapping (`METHOD /path/{template}`; any other line picks one
/// by its bytes), the query string, then the body.
///
/// A call that reads gives JSON in the message's normal form (reading it again changes
/// nothing), whose protobuf encoding decodes to the same JSON (gRPC and REST callers make the
/// same request), and which the use case's request type reads. One that does not read is
/// refused as the caller's mistake (`INVALID_ARGUMENT`).
pub fn rest_json(data: &[u8]) {
    let (key, rest) = super::first_line(data);
    let (query, body) = super::first_line(rest);
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    let endpoints = endpoints();
    let endpoint = super::pick(&endpoints, key, |e| &e.key);
    let json = match request_json(&endpoint.input, endpoint.body, body, query, &[]) {
        Ok((json, _fields)) => json,
        Err(AppError::InvalidArgument(_)) => return,
        Err(other) => panic!("{}: refused as {other:?}, not INVALID_ARGUMENT", endpoint.key),
    };
    let schema = Schema::get();
    let key = &endpoint.key;
    // An empty request skips the schema, so it may lack the `required` fields reading fills.
    let normal = normal_form(schema, &endpoint.input, &json);
    if json.as_object().is_some_and(|m| !m.is_empty()) {
        assert_eq!(normal, json, "{key}: reading the request again changed it");
    }
    let encoded = schema
        .encode(&endpoint.input, &json)
        .unwrap_or_else(|e| panic!("{key}: the request does not encode: {e}\n{json}"));
    let decoded = schema
        .decode(&endpoint.input, &encoded)
        .unwrap_or_else(|e| panic!("{key}: the request's encoding does not decode: {e}"));
    assert_eq!(decoded, normal, "{key}: gRPC and REST make different requests");
    for request in [json, normal] {
        if let Err(err) = (endpoint.read)(request.clone()) {
            panic!("{key}: the use case does not read a request the schema accepts: {err}\n{request}");
        }
    }
}

/// Every REST mapping that reads a body, in the method table's order.
fn endpoints() -> Vec<Endpoint> {
    let mut out = Vec::new();
    for rpc in crate::rpc::table() {
        let (Handler::Call(_, read), Some(method)) = (&rpc.handler, &rpc.method) else {
            continue;
        };
        for route in &rpc.rest {
            out.push(Endpoint {
                key: format!("{} {}", route.method, route.path),
                input: method.input(),
                body: route.body,
                read: *read,
            });
        }
    }
    out
}
