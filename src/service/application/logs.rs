//! The logs of an application's pods (PodLogs), as upstream's argocd-server streams them
//! (server/application/application.go: PodLogs, getSelectedPods; server/application/logs.go).
//!
//! The pods are the ones in the application's tree that the query names, by name, kind, group
//! and namespace, or whose owners it names (a Deployment's pods through its ReplicaSets), at most
//! argocd-cm `server.maxPodLogsToRender` of them. Each pod's log is asked of the destination with
//! timestamps; each line becomes one `LogEntry` (one per `\r`-separated part, as upstream splits
//! them), filtered by `filter` (`!` inverts it, `matchCase`) and cut at `untilTime`. The stream
//! ends with an entry whose `last` is true.
//!
//! As upstream does, a pod whose log cannot be opened (not started, no such container, its node
//! unknown) gives one entry carrying the API server's reason, and the other pods' logs still
//! come. A destination that cannot be reached at all is an UNAVAILABLE answer naming it.
//!
//! Bounds: opening each log is bounded by the cluster timeout; a line is cut at [`MAX_LINE`]
//! bytes; without `follow`, at most [`MAX_BUFFERED`] bytes are held to merge the pods' lines in
//! time order, and more is refused, naming `tailLines` and `sinceSeconds`. With `follow` nothing
//! is held: the lines go out as they come, and the stream ends when the session does.

use std::pin::Pin;

use futures_util::io::{AsyncBufRead, AsyncBufReadExt};
use futures_util::stream::{self, BoxStream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use serde::Deserialize;
use serde_json::{Value, json};

use super::live::{cluster_failure, destination, field, tree};
use super::{authorized, doc_object};
use crate::clusters::{ClusterError, Clusters, Target};
use crate::error::AppError;
use crate::service::access::Access;
use crate::service::{Ctx, Reply, StreamItem};

/// argocd-cm's limit of pods in one request, and upstream's default.
const MAX_PODS_KEY: &str = "server.maxPodLogsToRender";
const DEFAULT_MAX_PODS: usize = 10;
/// The bytes of one line kept; the rest of a longer line is dropped, so a log without line
/// ends cannot fill the memory.
const MAX_LINE: usize = 1 << 20;
/// The log text a request without `follow` may hold to merge its pods' lines by time.
const MAX_BUFFERED: usize = 16 << 20;
/// How Go writes the zero `time.Time`: the time of an entry that carries an error.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `ApplicationPodLogsQuery`.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub struct PodLogsQuery {
    pub name: String,
    pub namespace: String,
    pub pod_name: Option<String>,
    pub container: String,
    pub since_seconds: i64,
    pub since_time: Option<String>,
    pub tail_lines: i64,
    pub follow: bool,
    pub until_time: String,
    pub filter: Option<String>,
    pub kind: String,
    pub group: String,
    pub resource_name: String,
    pub previous: bool,
    pub app_namespace: String,
    pub project: String,
    pub match_case: bool,
}

/// One line of one pod (or, without a pod and a time, why a pod's log could not be opened).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    at: Option<Timestamp>,
    pod: String,
    content: String,
}

pub async fn pod_logs(ctx: Ctx, mut q: PodLogsQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    if let Some(pod) = q.pod_name.take().filter(|p| !p.is_empty()) {
        "Pod".clone_into(&mut q.kind);
        q.resource_name = pod;
    }
    let until =
        match q.until_time.as_str() {
            "" => None,
            text => Some(timestamp(text).map_err(|why| {
                AppError::InvalidArgument(format!("invalid untilTime parameter value: {why}"))
            })?),
        };
    let since_time =
        match q.since_time.as_deref() {
            None | Some("") => None,
            Some(text) => Some(timestamp(text).map_err(|why| {
                AppError::InvalidArgument(format!("invalid sinceTime parameter value: {why}"))
            })?),
        };
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &q.project, "get")?;
    Access::detailed("logs", "get").check(&ctx.app, principal, &doc_object(&ctx.app, &doc))?;
    let tree = tree(&ctx.app, &doc).await?;
    let (clusters, target, server) = destination(&ctx.app, &doc)?;
    let pods = selected_pods(&tree, &q);
    if pods.is_empty() {
        // Upstream ends such a stream without a message.
        return Ok(Reply::Stream(stream::empty().boxed()));
    }
    if pods.len() > max_pods(&ctx.app)? {
        return Err(AppError::InvalidArgument(
            "max pods to view logs are reached. Please provide more granular query".to_owned(),
        ));
    }
    let params = LogParams {
        container: (!q.container.is_empty()).then(|| q.container.clone()),
        follow: q.follow,
        previous: q.previous,
        since_seconds: (q.since_seconds > 0).then_some(q.since_seconds),
        since_time,
        tail_lines: (q.tail_lines > 0).then_some(q.tail_lines),
        timestamps: true,
        ..LogParams::default()
    };
    let mut per_pod = Vec::with_capacity(pods.len());
    for (namespace, pod) in pods {
        per_pod.push(open(clusters, &target, &server, &namespace, &pod, &params).await?);
    }
    let lines = if q.follow {
        let expires = super::watch::session_end(&ctx.caller);
        stream::select_all(per_pod)
            .take_until(super::watch::until(expires))
            .boxed()
    } else {
        stream::iter(merged(per_pod).await).boxed()
    };
    let filter = Filter::of(q.filter.as_deref(), q.match_case);
    Ok(Reply::Stream(entries(lines, filter, until)))
}

/// The pods of the tree the query selects: the ones it names, and those whose owners (through
/// any number of them) it names, as upstream's `isTheSelectedOne` walks the parents.
fn selected_pods(tree: &Value, q: &PodLogsQuery) -> Vec<(String, String)> {
    let nodes: Vec<&Value> = tree
        .get("nodes")
        .and_then(Value::as_array)
        .map(|n| n.iter().collect())
        .unwrap_or_default();
    let named = |n: &Value| {
        [
            (&q.resource_name, "name"),
            (&q.kind, "kind"),
            (&q.group, "group"),
            (&q.namespace, "namespace"),
        ]
        .iter()
        .all(|(want, key)| want.is_empty() || field(n, key) == want.as_str())
    };
    let key = |n: &Value| {
        (
            field(n, "group").to_owned(),
            field(n, "kind").to_owned(),
            field(n, "namespace").to_owned(),
            field(n, "name").to_owned(),
        )
    };
    let mut selected = std::collections::HashMap::new();
    // Bounded by the tree: each node is decided once, and a node being decided counts as not
    // selected, so an ownership cycle ends.
    fn decide<'t>(
        node: &'t Value,
        nodes: &[&'t Value],
        named: &dyn Fn(&Value) -> bool,
        key: &dyn Fn(&Value) -> (String, String, String, String),
        selected: &mut std::collections::HashMap<(String, String, String, String), bool>,
    ) -> bool {
        let me = key(node);
        if let Some(known) = selected.get(&me) {
            return *known;
        }
        selected.insert(me.clone(), false);
        let chosen = named(node)
            || node
                .get("parentRefs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|parent| {
                    let wanted = key(parent);
                    nodes
                        .iter()
                        .filter(|n| key(n) == wanted)
                        .any(|n| decide(n, nodes, named, key, selected))
                });
        selected.insert(me, chosen);
        chosen
    }
    nodes
        .iter()
        .filter(|n| field(n, "kind") == "Pod" && field(n, "group").is_empty() && !field(n, "uid").is_empty())
        .filter(|n| decide(n, &nodes, &named, &key, &mut selected))
        .map(|n| (field(n, "namespace").to_owned(), field(n, "name").to_owned()))
        .collect()
}

fn max_pods(state: &crate::state::ServerState) -> Result<usize, AppError> {
    match state.config.peek().cm.get(MAX_PODS_KEY).map(String::as_str) {
        None | Some("") => Ok(DEFAULT_MAX_PODS),
        Some(text) => text
            .trim()
            .parse::<i64>()
            .map(|n| usize::try_from(n).unwrap_or(0))
            .map_err(|_| {
                AppError::FailedPrecondition(format!(
                    "argocd-cm {MAX_PODS_KEY} is {text:?}, which is not a whole number"
                ))
            }),
    }
}

type LineStream = BoxStream<'static, Result<Line, AppError>>;

/// One pod's lines. A refusal of the API server becomes the single line upstream shows in its
/// place; a destination that cannot be reached fails the whole request.
async fn open(
    clusters: &Clusters,
    target: &Target,
    server: &str,
    namespace: &str,
    pod: &str,
    params: &LogParams,
) -> Result<LineStream, AppError> {
    let opened = clusters
        .call(target, |client| {
            let api: Api<Pod> = Api::namespaced(client, namespace);
            let params = params.clone();
            let pod = pod.to_owned();
            async move {
                let reader = api.log_stream(&pod, &params).await?;
                Ok(Box::pin(reader) as Pin<Box<dyn AsyncBufRead + Send>>)
            }
        })
        .await;
    let reader = match opened {
        Ok(reader) => reader,
        Err(ClusterError::Refusal { message, .. } | ClusterError::Forbidden(message)) => {
            let line = Line {
                at: None,
                pod: String::new(),
                content: message,
            };
            return Ok(stream::once(async move { Ok(line) }).boxed());
        }
        Err(err) => return Err(cluster_failure(server, target, "error getting pod logs", &err)),
    };
    let pod = pod.to_owned();
    let lines = stream::unfold(Some((reader, Vec::new())), move |state| {
        let pod = pod.clone();
        async move {
            let (mut reader, mut buf) = state?;
            match next_line(&mut reader, &mut buf).await {
                Ok(false) => None,
                Ok(true) => {
                    let parsed = parse(&String::from_utf8_lossy(&buf), &pod);
                    let go_on = parsed.is_ok();
                    let items = match parsed {
                        Ok(lines) => lines.into_iter().map(Ok).collect(),
                        Err(e) => vec![Err(e)],
                    };
                    Some((stream::iter(items), go_on.then_some((reader, buf))))
                }
                Err(e) => Some((
                    stream::iter(vec![Err(AppError::Unavailable(format!(
                        "reading the logs of pod {pod}: {e}"
                    )))]),
                    None,
                )),
            }
        }
    });
    Ok(lines.flatten().boxed())
}

/// Reads one line into `buf` (without more than [`MAX_LINE`] bytes of it); false at the end.
async fn next_line(
    reader: &mut Pin<Box<dyn AsyncBufRead + Send>>,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    buf.clear();
    let mut seen = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(seen);
        }
        seen = true;
        let (used, ends) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let room = MAX_LINE.saturating_sub(buf.len());
        buf.extend_from_slice(&available[..used.min(room)]);
        reader.consume_unpin(used);
        if ends {
            return Ok(true);
        }
    }
}

/// A line as the kubelet writes it with timestamps: the time, a space, the text. Text with
/// `\r` in it is one entry per part, at the same time.
fn parse(raw: &str, pod: &str) -> Result<Vec<Line>, AppError> {
    let line = raw.trim();
    let (stamp, text) = line.split_once(' ').unwrap_or((line, ""));
    let at = timestamp(stamp).map_err(|why| {
        AppError::Unavailable(format!("the log of pod {pod} has a line without a time: {why}"))
    })?;
    Ok(text
        .split('\r')
        .map(|part| Line {
            at: Some(at),
            pod: pod.to_owned(),
            content: part.to_owned(),
        })
        .collect())
}

fn timestamp(text: &str) -> Result<Timestamp, String> {
    let (seconds, nanos) = crate::schema::time::parse(text)?;
    Timestamp::new(seconds, nanos).map_err(|e| e.to_string())
}

/// Every pod's lines read to the end (at most [`MAX_BUFFERED`] bytes in all), in time order;
/// lines of one time keep their order.
/// A failure ends the lines read so far, as it ends the stream.
async fn merged(per_pod: Vec<LineStream>) -> Vec<Result<Line, AppError>> {
    let mut all = Vec::new();
    let mut held = 0usize;
    let mut streams = stream::select_all(per_pod);
    let failure = loop {
        match streams.next().await {
            None => break None,
            Some(Err(e)) => break Some(e),
            Some(Ok(line)) => {
                held += line.content.len() + line.pod.len();
                if held > MAX_BUFFERED {
                    break Some(AppError::Exhausted(format!(
                        "the logs asked for are over {} MiB: ask for fewer lines with tailLines or sinceSeconds, \
                         or follow them",
                        MAX_BUFFERED >> 20
                    )));
                }
                all.push(line);
            }
        }
    };
    // An entry without a time (a pod whose log could not be opened) comes first, as Go's zero
    // time sorts.
    all.sort_by_key(|line| line.at);
    all.into_iter().map(Ok).chain(failure.map(Err)).collect()
}

/// `filter`: a text the line must hold, or with a leading `!` must not hold.
struct Filter {
    text: String,
    inverse: bool,
    match_case: bool,
}

impl Filter {
    fn of(filter: Option<&str>, match_case: bool) -> Option<Self> {
        let filter = filter?;
        let (text, inverse) = match filter.strip_prefix('!') {
            Some(rest) => (rest, true),
            None => (filter, false),
        };
        Some(Self {
            text: if match_case {
                text.to_owned()
            } else {
                text.to_lowercase()
            },
            inverse,
            match_case,
        })
    }

    fn keeps(&self, content: &str) -> bool {
        let holds = if self.match_case {
            content.contains(&self.text)
        } else {
            content.to_lowercase().contains(&self.text)
        };
        holds != self.inverse
    }
}

/// The `LogEntry` messages: the kept lines, and the last one; a line after `until` is sent as
/// the last one.
fn entries(
    lines: LineStream,
    filter: Option<Filter>,
    until: Option<Timestamp>,
) -> BoxStream<'static, Result<StreamItem, AppError>> {
    let state = Some((lines, filter));
    stream::unfold(state, move |state| async move {
        let (mut lines, filter) = state?;
        loop {
            match lines.next().await {
                None => {
                    let now = Timestamp::now();
                    return Some((Ok(entry("", Some(now), "", true)), None));
                }
                Some(Err(e)) => return Some((Err(e), None)),
                Some(Ok(line)) => {
                    if filter.as_ref().is_some_and(|f| !f.keeps(&line.content)) {
                        continue;
                    }
                    if let (Some(until), Some(at)) = (until, line.at)
                        && at > until
                    {
                        return Some((Ok(entry(&line.content, line.at, &line.pod, true)), None));
                    }
                    let item = entry(&line.content, line.at, &line.pod, false);
                    return Some((Ok(item), Some((lines, filter))));
                }
            }
        }
    })
    .boxed()
}

fn entry(content: &str, at: Option<Timestamp>, pod: &str, last: bool) -> StreamItem {
    let (seconds, full) = match at {
        Some(at) => (
            crate::schema::time::format(at.as_second(), 0, false).unwrap_or_else(|| ZERO_TIME.to_owned()),
            at.to_string(),
        ),
        None => (ZERO_TIME.to_owned(), ZERO_TIME.to_owned()),
    };
    StreamItem::Message(json!({
        "content": content,
        "timeStamp": seconds,
        "last": last,
        "timeStampStr": full,
        "podName": pod,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: &str, name: &str, parents: &[(&str, &str)]) -> Value {
        let group = |k: &str| if k == "Pod" { "" } else { "apps" };
        json!({
            "group": group(kind), "kind": kind, "namespace": "n", "name": name, "uid": format!("u-{name}"),
            "parentRefs": parents.iter().map(|(k, n)| json!({"group": group(k), "kind": k, "namespace": "n", "name": n})).collect::<Vec<_>>(),
        })
    }

    fn query(kind: &str, name: &str) -> PodLogsQuery {
        PodLogsQuery {
            kind: kind.into(),
            resource_name: name.into(),
            ..PodLogsQuery::default()
        }
    }

    #[test]
    fn pods_are_selected_through_their_owners() {
        let tree = json!({"nodes": [
            node("Deployment", "web", &[]),
            node("ReplicaSet", "web-1", &[("Deployment", "web")]),
            node("Pod", "web-1-a", &[("ReplicaSet", "web-1")]),
            node("Pod", "web-1-b", &[("ReplicaSet", "web-1")]),
            node("Pod", "other", &[]),
            // A cycle of owners ends.
            node("ReplicaSet", "loop", &[("ReplicaSet", "loop")]),
            node("Pod", "looped", &[("ReplicaSet", "loop")]),
        ]});
        let names = |q: &PodLogsQuery| -> Vec<String> {
            selected_pods(&tree, q).into_iter().map(|(_, n)| n).collect()
        };
        assert_eq!(names(&query("Deployment", "web")), ["web-1-a", "web-1-b"]);
        assert_eq!(names(&query("Pod", "other")), ["other"]);
        assert_eq!(names(&query("", "")).len(), 4);
        assert!(names(&query("Deployment", "nope")).is_empty());
    }

    #[test]
    fn lines_are_split_as_upstream_splits_them() {
        let lines = parse("2026-12-03T10:00:00.5Z one two\rthree\n", "p").unwrap();
        let contents: Vec<&str> = lines.iter().map(|l| l.content.as_str()).collect();
        assert_eq!(contents, ["one two", "three"]);
        assert_eq!(lines[0].at.unwrap().to_string(), "2026-12-03T10:00:00.5Z");
        assert_eq!(parse("2026-12-03T10:00:00Z", "p").unwrap()[0].content, "");
        assert!(parse("no time here", "p").is_err());
    }

    #[test]
    fn filters_invert_and_fold_case() {
        let f = Filter::of(Some("Error"), false).unwrap();
        assert!(f.keeps("an error"));
        let f = Filter::of(Some("Error"), true).unwrap();
        assert!(!f.keeps("an error"));
        let f = Filter::of(Some("!debug"), false).unwrap();
        assert!(!f.keeps("DEBUG x") && f.keeps("info"));
    }

    #[tokio::test]
    async fn the_stream_ends_with_the_last_entry_and_stops_at_until() {
        let at = |s: &str| timestamp(s).unwrap();
        let line = |t: &str, c: &str| {
            Ok(Line {
                at: Some(at(t)),
                pod: "p".into(),
                content: c.into(),
            })
        };
        let lines = || {
            vec![
                line("2026-01-01T00:00:01Z", "a"),
                line("2026-01-01T00:00:02Z", "b"),
                line("2026-01-01T00:00:03Z", "c"),
            ]
        };
        let got: Vec<Value> = entries(
            stream::iter(lines()).boxed(),
            None,
            Some(at("2026-01-01T00:00:01.5Z")),
        )
        .map(|i| match i.unwrap() {
            StreamItem::Message(v) => v,
            _ => unreachable!(),
        })
        .collect()
        .await;
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[1]["content"].as_str(), got[1]["last"].as_bool()),
            (Some("b"), Some(true))
        );
        let all: Vec<_> = entries(stream::iter(lines()).boxed(), None, None).collect().await;
        assert_eq!(all.len(), 4);
    }
}
