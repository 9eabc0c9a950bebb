//! REST for the resource APIs, from the method table (`crate::rpc`), as grpc-gateway maps it:
//! path parameters fill (dotted) fields, query parameters fill fields by name (repeated ones by
//! repetition; unknown ones ignored), and the body is the whole request or one field of it.
//! Replies are Go-style JSON; lists and streams are written as they are produced.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts as _, RawPathParams, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt as _};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};

use super::fields::Fields;
use crate::auth::cookie::CookieScope;
use crate::error::AppError;
use crate::principal::{BodyRefused, ClientScheme, RequestContext};
use crate::registry::DocRef;
use crate::rpc::{Body as BodyMap, Handler, Rpc};
use crate::schema::Schema;
use crate::schema::gojson::kind_of;
use crate::service::{Ctx, PageInfo, Reply, StreamItem};
use crate::state::ServerState;

/// How often a quiet stream sends a keepalive.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Items per chunk of a streamed list body.
const LIST_CHUNK: usize = 64;

/// Adds a route for every REST mapping in the table.
pub fn routes(mut router: Router<Arc<ServerState>>, rpcs: &[Arc<Rpc>]) -> Router<Arc<ServerState>> {
    let mut entries: Vec<(String, http::Method, Arc<Endpoint>)> = Vec::new();
    for rpc in rpcs {
        for (index, (axum_path, param_fields)) in rpc
            .rest
            .iter()
            .enumerate()
            .flat_map(|(index, route)| axum_templates(route.path).into_iter().map(move |t| (index, t)))
        {
            let endpoint = Endpoint {
                rpc: Arc::clone(rpc),
                index,
                param_fields,
                fixed: Vec::new(),
            };
            entries.push((axum_path, rpc.rest[index].method.clone(), Arc::new(endpoint)));
        }
    }
    entries.extend(sibling_fallbacks(&entries));
    let mut by_path: HashMap<String, axum::routing::MethodRouter<Arc<ServerState>>> = HashMap::new();
    let mut order = Vec::new();
    for (axum_path, method, endpoint) in entries {
        let filter = MethodFilter::try_from(method).unwrap_or(MethodFilter::GET);
        let handler = move |State(app): State<Arc<ServerState>>, req: Request| {
            let endpoint = Arc::clone(&endpoint);
            // Boxed here: the whole call's state is large, and the futures axum wraps
            // around this one are moved and boxed in turn (two large allocations and copies
            // per request, measured with benches/instructions.sh, instead of one).
            async move { Box::pin(serve(app, &endpoint, req)).await }
        };
        let entry = by_path.remove(&axum_path);
        let method_router = match entry {
            Some(existing) => existing.on(filter, handler),
            None => {
                order.push(axum_path.clone());
                on(filter, handler)
            }
        };
        by_path.insert(axum_path, method_router);
    }
    for path in order {
        if let Some(method_router) = by_path.remove(&path) {
            router = router.route(&path, method_router);
        }
    }
    router
}

/// grpc-gateway matches the method before the path, axum the path first: without these, a
/// literal path (`POST /api/v1/applicationsets/generate`) would hide a template that matches
/// it for other methods (`GET /api/v1/applicationsets/{name}` of an ApplicationSet named
/// `generate`), and answer 405. So each literal path also gets, for every method it lacks, the
/// template's endpoint with the literal segments as the parameters' values.
fn sibling_fallbacks(
    entries: &[(String, http::Method, Arc<Endpoint>)],
) -> Vec<(String, http::Method, Arc<Endpoint>)> {
    let literal: Vec<&str> = entries
        .iter()
        .map(|(path, _, _)| path.as_str())
        .filter(|path| !path.contains('{'))
        .collect();
    let has = |path: &str, method: &http::Method| entries.iter().any(|(p, m, _)| p == path && m == method);
    let mut out: Vec<(String, http::Method, Arc<Endpoint>)> = Vec::new();
    for (template, method, endpoint) in entries.iter().filter(|(p, _, _)| p.contains('{')) {
        for path in &literal {
            let Some(values) = literal_params(template, path) else {
                continue;
            };
            let taken = has(path, method) || out.iter().any(|(p, m, _)| p == path && m == method);
            if taken {
                continue;
            }
            let fixed = values
                .into_iter()
                .filter_map(|(index, value)| Some((endpoint.param_fields.get(index)?.clone(), value)))
                .collect();
            let fallback = Endpoint {
                rpc: Arc::clone(&endpoint.rpc),
                index: endpoint.index,
                param_fields: Vec::new(),
                fixed,
            };
            out.push(((*path).to_owned(), method.clone(), Arc::new(fallback)));
        }
    }
    out
}

/// The values `{pN}` takes when axum template `template` is matched against literal `path`
/// (segment by segment; a catch-all never counts), or `None` when it does not match.
fn literal_params(template: &str, path: &str) -> Option<Vec<(usize, String)>> {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    if t.len() != p.len() {
        return None;
    }
    let mut values = Vec::new();
    for (ts, ps) in t.iter().zip(&p) {
        match ts.strip_prefix("{p").and_then(|r| r.strip_suffix('}')) {
            Some(n) => values.push((n.parse().ok()?, (*ps).to_owned())),
            None if ts.starts_with("{*") => return None,
            None if ts != ps => return None,
            None => {}
        }
    }
    Some(values)
}

/// The axum forms of a path template and the request field of each parameter: parameters are
/// renamed `p0`, `p1`, … so that routes which name the same segment differently (`{name}` and
/// `{application.metadata.name}`) share one axum route. A last parameter `{field=**}` takes
/// the rest of the path, none of it included (as with and without a trailing `/`), as
/// grpc-gateway's `**` does.
fn axum_templates(path: &str) -> Vec<(String, Vec<String>)> {
    let mut out = String::with_capacity(path.len());
    let mut fields = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let param = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        if let Some(field) = param.strip_suffix("=**")
            && rest.is_empty()
        {
            let base = out.trim_end_matches('/').to_owned();
            let with_rest = format!("{out}{{*p{}}}", fields.len());
            let mut all = fields.clone();
            all.push(field.to_owned());
            return vec![
                (with_rest, all),
                (base.clone(), fields.clone()),
                (format!("{base}/"), fields),
            ];
        }
        fields.push(param.to_owned());
        out.push_str(&format!("{{p{}}}", fields.len() - 1));
    }
    out.push_str(rest);
    vec![(out, fields)]
}

/// Each axum template of the table's REST mappings, with the mapping's own template.
pub fn templates(rpcs: &[Arc<Rpc>]) -> impl Iterator<Item = (String, &'static str)> + '_ {
    rpcs.iter().flat_map(|rpc| &rpc.rest).flat_map(|route| {
        axum_templates(route.path)
            .into_iter()
            .map(|(template, _)| (template, route.path))
    })
}

/// One REST mapping of one method: what its handler needs.
struct Endpoint {
    rpc: Arc<Rpc>,
    /// Which of the method's REST mappings this is.
    index: usize,
    /// The request field of each path parameter `p0`, `p1`, ….
    param_fields: Vec<String>,
    /// Request fields set from the path itself (see [`sibling_fallbacks`]).
    fixed: Vec<(String, String)>,
}

async fn serve(app: Arc<ServerState>, endpoint: &Endpoint, req: Request) -> Response {
    match serve_inner(app, endpoint, req).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn serve_inner(
    state: Arc<ServerState>,
    endpoint: &Endpoint,
    req: Request,
) -> Result<Response, AppError> {
    let rpc = &endpoint.rpc;
    let call = match &rpc.handler {
        Handler::Unimplemented(why) => {
            return Err(rpc.unserved(&RequestContext::caller_of(req.extensions()), why));
        }
        Handler::Call(call, _) => Arc::clone(call),
    };
    let method = rpc
        .method
        .as_ref()
        .ok_or_else(|| AppError::Unimplemented(format!("{} is not in the schema", rpc.path)))?;
    let route = &rpc.rest[endpoint.index];
    let (mut parts, body) = req.into_parts();
    let path_params: Vec<(&str, String)> = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params
            .iter()
            .filter_map(|(k, v)| {
                let index: usize = k.strip_prefix('p')?.parse().ok()?;
                Some((endpoint.param_fields.get(index)?.as_str(), v.to_owned()))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let mut path_params = path_params;
    path_params.extend(
        endpoint
            .fixed
            .iter()
            .map(|(field, value)| (field.as_str(), value.clone())),
    );
    let query = parts.uri.query().unwrap_or("");
    let sse = parts
        .headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    // A mapping without a body does not read one (the dispatcher bounds what could be read).
    let body = if route.body == BodyMap::None {
        Bytes::new()
    } else {
        // The dispatcher's limit stops the body (see `BodyLimit`).
        axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|err| BodyRefused::app_error(&err))?
    };

    let (json, fields_param) = request_json(&method.input(), route.body, &body, query, &path_params)?;
    let fields = fields_param.as_deref().and_then(Fields::parse);
    let context = parts.extensions.get::<RequestContext>();
    let caller = context.map_or_else(
        || RequestContext::caller_of(&parts.extensions),
        |c| c.caller.clone(),
    );
    let (scheme, chunks) = context.map_or((ClientScheme::Http, 0), |c| (c.scheme, c.auth.cookie_chunks));
    let ctx = Ctx {
        app: Arc::clone(&state),
        caller,
        fenced: context.is_some_and(|c| c.fenced),
    };
    let output = method.output();
    match call(ctx, json).await? {
        Reply::Session { message, cookie } => {
            let mut response = json_response(canonical(&output, message)?);
            let scope = CookieScope::new(&state.basehref, scheme);
            super::cookies::write(&mut response, &scope, &cookie, chunks)?;
            Ok(response)
        }
        Reply::Answer(answer) => Ok(match &fields {
            Some(f) => json_response(f.apply(&answer.to_value()?)),
            None => raw_json(Bytes::from(answer.to_json_bytes()?)),
        }),
        Reply::Message(value) => {
            let value = canonical(&output, value)?;
            Ok(json_response(match &fields {
                Some(f) => f.apply(&value),
                None => value,
            }))
        }
        Reply::Doc(doc) => Ok(match &fields {
            Some(f) => json_response(f.apply(&doc.value())),
            None => raw_json(doc.json.clone()),
        }),
        Reply::List {
            resource_version,
            items,
            page,
        } => Ok(list_response(resource_version, items, page.map(|p| *p), fields)),
        Reply::Stream(stream) => Ok(stream_response(stream, fields, sse)),
    }
}

/// A reply built by hand in the JSON form its output message writes: the one rule for empty
/// values, times and numbers (`crate::schema::gojson`) applies to every message, whichever
/// use case built it. A reply the schema cannot read is a bug of the use case.
fn canonical(output: &MessageDescriptor, value: Value) -> Result<Value, AppError> {
    let schema = Schema::get();
    let msg = schema
        .from_json(output, &value)
        .map_err(|e| AppError::Internal(anyhow::anyhow!("reply of type {}: {e}", output.full_name())))?;
    Ok(schema.to_json(&msg))
}

/// The request message's JSON form from a REST call's body, query and path parameters, as the
/// message reads it: types checked, unknown fields dropped. Also the `fields` query parameter.
pub(crate) fn request_json(
    input: &MessageDescriptor,
    body_map: BodyMap,
    body: &[u8],
    query: &str,
    path_params: &[(&str, String)],
) -> Result<(Value, Option<String>), AppError> {
    let schema = Schema::get();
    let mut request = Map::new();
    if body_map != BodyMap::None && !body.iter().all(u8::is_ascii_whitespace) {
        let json: Value = serde_json::from_slice(body)
            .map_err(|e| AppError::InvalidArgument(format!("invalid JSON body: {e}")))?;
        match body_map {
            BodyMap::All => match json {
                Value::Object(map) => request = map,
                Value::Null => {}
                other => {
                    return Err(AppError::InvalidArgument(format!(
                        "invalid JSON body: expected an object, got {}",
                        kind_of(&other)
                    )));
                }
            },
            BodyMap::Field(field) => {
                request.insert(field.to_owned(), json);
            }
            BodyMap::None => {}
        }
    }
    let mut fields_param = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == "fields" {
            fields_param = Some(value.into_owned());
        } else if body_map != BodyMap::All {
            // A body that is the whole request leaves nothing to the query (as grpc-gateway):
            // a password must never be taken from a URL, which proxies and browsers log.
            set_param(input, &mut request, &key, &value, true)?;
        }
    }
    for (key, value) in path_params {
        set_param(input, &mut request, key, value, false)?;
    }
    // An empty request (most GETs) has nothing to check.
    let json = if request.is_empty() {
        Value::Object(request)
    } else {
        schema
            .from_json(input, &Value::Object(request))
            .map(|msg| schema.to_json(&msg))
            .map_err(|e| AppError::InvalidArgument(e.to_string()))?
    };
    Ok((json, fields_param))
}

/// Sets the request field named by the dotted `key` from a query or path string, typed by the
/// schema. Unknown query parameters are ignored (grpc-gateway does the same).
fn set_param(
    desc: &MessageDescriptor,
    request: &mut Map<String, Value>,
    key: &str,
    value: &str,
    from_query: bool,
) -> Result<(), AppError> {
    let segments: Vec<&str> = key.split('.').collect();
    let mut desc = desc.clone();
    let mut target = request;
    for (i, segment) in segments.iter().enumerate() {
        let field = desc
            .get_field_by_name(segment)
            .or_else(|| desc.get_field_by_json_name(segment));
        let Some(field) = field else {
            return if from_query {
                Ok(())
            } else {
                Err(AppError::Internal(anyhow::anyhow!(
                    "path parameter {key} names no field"
                )))
            };
        };
        let name = field.name().to_owned();
        if i + 1 == segments.len() {
            let typed = typed_param(&field.kind(), value).ok_or_else(|| {
                AppError::InvalidArgument(format!("parameter {key}: {value:?} is not a valid value"))
            })?;
            if field.is_list() {
                let slot = target.entry(name).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = slot {
                    items.push(typed);
                }
            } else {
                target.insert(name, typed);
            }
            return Ok(());
        }
        let Kind::Message(inner) = field.kind() else {
            return Ok(());
        };
        desc = inner;
        let slot = target.entry(name).or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        let Value::Object(next) = slot else {
            return Ok(());
        };
        target = next;
    }
    Ok(())
}

fn typed_param(kind: &Kind, value: &str) -> Option<Value> {
    Some(match kind {
        Kind::Bool => Value::Bool(match value {
            "true" | "1" | "True" | "TRUE" => true,
            "false" | "0" | "False" | "FALSE" | "" => false,
            _ => return None,
        }),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::from(value.parse::<i64>().ok()?)
        }
        Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => {
            Value::from(value.parse::<u64>().ok()?)
        }
        Kind::Double | Kind::Float => Value::from(value.parse::<f64>().ok()?),
        _ => Value::String(value.to_owned()),
    })
}

/// Built at compile time: `from_static` checks its bytes when called at run time.
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

fn json_response(value: Value) -> Response {
    raw_json(Bytes::from(serde_json::to_vec(&value).unwrap_or_default()))
}

fn raw_json(bytes: Bytes) -> Response {
    let mut response = Response::new(Body::from(bytes));
    response.headers_mut().insert(CONTENT_TYPE, APPLICATION_JSON);
    response
}

/// `{"metadata":{"resourceVersion":"N"},"items":[…]}`, written in chunks as the client reads.
fn list_response(
    resource_version: u64,
    items: Vec<DocRef>,
    page: Option<PageInfo>,
    fields: Option<Fields>,
) -> Response {
    let page = page.unwrap_or_default();
    let head = match &fields {
        Some(f) if !f.mentions("metadata") => "{\"items\":[".to_owned(),
        _ => {
            let more = page.continue_token.as_ref().map_or_else(String::new, |token| {
                format!(",\"continue\":{}", Value::String(token.clone()))
            });
            format!("{{\"metadata\":{{\"resourceVersion\":\"{resource_version}\"{more}}},\"items\":[")
        }
    };
    let tail = match (&page.facets, &fields) {
        (Some(facets), f) if f.as_ref().is_none_or(|f| f.mentions("facets")) => {
            format!("],\"facets\":{facets}}}")
        }
        _ => "]}".to_owned(),
    };
    let item_fields = fields.map(|f| f.below("items"));
    let chunk_count = items.len().div_ceil(LIST_CHUNK);
    let body = stream::iter(std::iter::once(Bytes::from(head)))
        .chain(stream::iter(0..chunk_count).map(move |n| {
            let chunk = &items[n * LIST_CHUNK..((n + 1) * LIST_CHUNK).min(items.len())];
            let mut out = Vec::with_capacity(chunk.iter().map(|d| d.json.len() + 1).sum());
            for (i, doc) in chunk.iter().enumerate() {
                if n > 0 || i > 0 {
                    out.push(b',');
                }
                match &item_fields {
                    Some(f) => {
                        let projected = f.apply(&doc.value());
                        let _ = serde_json::to_writer(&mut out, &projected);
                    }
                    None => out.extend_from_slice(&doc.json),
                }
            }
            Bytes::from(out)
        }))
        .chain(stream::iter(std::iter::once(Bytes::from(tail))))
        .map(Ok::<_, Infallible>);
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert(CONTENT_TYPE, APPLICATION_JSON);
    response
}

/// Server streams: SSE (`data: {"result":…} \n\n`, a `:` comment as keepalive) when the client
/// accepts `text/event-stream`, else NDJSON (`{"result":…}` per line).
fn stream_response(
    stream: BoxStream<'static, Result<StreamItem, AppError>>,
    fields: Option<Fields>,
    sse: bool,
) -> Response {
    let result_fields = fields.map(|f| f.below("result"));
    let mut last_sent: HashMap<String, u64> = HashMap::new();
    let messages = stream.filter_map(move |item| {
        let frame = match item {
            Ok(item) => {
                let (name, json) = render_item(item, result_fields.as_ref());
                // An event identical to the last one sent for the same object is dropped, as
                // upstream does (a projection often hides what changed).
                if let Some(name) = name {
                    let digest = digest(&json);
                    if last_sent.insert(name, digest) == Some(digest) {
                        return std::future::ready(None);
                    }
                }
                frame(sse, &json, true)
            }
            Err(err) => frame(sse, &error_json(&err), false),
        };
        std::future::ready(Some(frame))
    });
    let keepalive = Bytes::from_static(if sse { b":\n" } else { b"\n" });
    let body = with_keepalive(messages, keepalive.clone());
    // An SSE stream opens with a comment: a proxy that holds the headers until the first body
    // byte would otherwise keep a quiet watch (no initial objects) pending until its first
    // keepalive, 15 s later.
    let body = stream::iter(sse.then_some(keepalive)).chain(body);
    let mut response = Response::new(Body::from_stream(body.map(Ok::<_, Infallible>)));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(if sse {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    *response.status_mut() = StatusCode::OK;
    response
}

/// The JSON text of one stream message and, for watch events, the object's name.
fn render_item(item: StreamItem, fields: Option<&Fields>) -> (Option<String>, Vec<u8>) {
    match (item, fields) {
        (StreamItem::Message(value), Some(f)) => {
            (None, serde_json::to_vec(&f.apply(&value)).unwrap_or_default())
        }
        (StreamItem::Message(value), None) => (None, serde_json::to_vec(&value).unwrap_or_default()),
        (StreamItem::Event { kind, field, doc, .. }, None) => {
            let mut out = Vec::with_capacity(doc.json.len() + 32);
            out.extend_from_slice(b"{\"type\":\"");
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b"\",\"");
            out.extend_from_slice(field.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(&doc.json);
            out.push(b'}');
            (Some(event_name(&doc)), out)
        }
        (StreamItem::Event { kind, field, doc, .. }, Some(f)) => {
            let mut event = Map::new();
            event.insert("type".to_owned(), Value::String(kind.to_owned()));
            event.insert(field.to_owned(), doc.value());
            let json = serde_json::to_vec(&f.apply(&Value::Object(event))).unwrap_or_default();
            (Some(event_name(&doc)), json)
        }
    }
}

fn event_name(doc: &DocRef) -> String {
    format!("{}/{}", doc.key.namespace, doc.key.name)
}

fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = foldhash::quality::FixedState::default().build_hasher();
    hasher.write(bytes);
    hasher.finish()
}

fn frame(sse: bool, json: &[u8], ok: bool) -> Bytes {
    let key: &[u8] = if ok { b"{\"result\":" } else { b"{\"error\":" };
    let mut out = Vec::with_capacity(json.len() + 24);
    if sse {
        out.extend_from_slice(b"data: ");
    }
    out.extend_from_slice(key);
    out.extend_from_slice(json);
    out.push(b'}');
    out.extend_from_slice(if sse { b" \n\n\n" } else { b"\n" });
    Bytes::from(out)
}

/// The error object of a failed stream, in grpc-gateway's shape.
fn error_json(err: &AppError) -> Vec<u8> {
    let (code, status) = err.codes();
    let body = serde_json::json!({
        "grpc_code": code as i32,
        "http_code": status.as_u16(),
        "message": err.to_string(),
        "http_status": status.canonical_reason().unwrap_or(""),
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Interleaves `keepalive` whenever `frames` is quiet for [`KEEPALIVE`]; ends with `frames`.
fn with_keepalive(
    frames: impl Stream<Item = Bytes> + Send + 'static,
    keepalive: Bytes,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let frames = Box::pin(frames);
    stream::unfold(frames, move |mut frames| {
        let keepalive = keepalive.clone();
        async move {
            match tokio::time::timeout(KEEPALIVE, frames.next()).await {
                Ok(Some(frame)) => Some((frame, frames)),
                Ok(None) => None,
                Err(_) => Some((keepalive, frames)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::axum_templates;

    fn paths(template: &str) -> Vec<(String, Vec<String>)> {
        axum_templates(template)
    }

    #[test]
    fn parameters_are_numbered_and_keep_their_fields() {
        assert_eq!(
            paths("/api/v1/applications/{application.metadata.name}/spec"),
            vec![(
                "/api/v1/applications/{p0}/spec".to_owned(),
                vec!["application.metadata.name".to_owned()]
            )]
        );
    }

    #[test]
    fn a_trailing_double_star_takes_the_rest_or_nothing() {
        let got = paths("/api/v1/account/can-i/{resource}/{action}/{subresource=**}");
        let fields = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (
                    "/api/v1/account/can-i/{p0}/{p1}/{*p2}".to_owned(),
                    fields(&["resource", "action", "subresource"])
                ),
                (
                    "/api/v1/account/can-i/{p0}/{p1}".to_owned(),
                    fields(&["resource", "action"])
                ),
                (
                    "/api/v1/account/can-i/{p0}/{p1}/".to_owned(),
                    fields(&["resource", "action"])
                ),
            ]
        );
    }
}
