//! `GET /api/badge`: an SVG badge with an application's (or a set of projects') health and sync
//! status, for README files and wikis, as upstream's `server/badge/badge.go` answers it.
//!
//! As upstream, the badge needs no login and is off unless `statusbadge.enabled: "true"` is in
//! `argocd-cm`: while off, every badge says "Unknown". Query parameters are upstream's: `name`,
//! `namespace`, `project` (repeatable: the worst status of the projects' applications),
//! `revision=true` (the last synced revision, seven characters unless `keepFullRevision=true`),
//! `width` and `showAppName=true`. A name or project that is not a valid Kubernetes name is a
//! 400 naming it; an application that does not exist (or lives in a namespace this server does
//! not serve) is a "Not Found" badge. The drawing is tiphys's own.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::registry::{Key, Kind};
use crate::service::limits;
use crate::state::ServerState;

const GREY: &str = "#9aa5ad";
const HEIGHT: u32 = 20;
const LEFT_WIDTH: u32 = 77;
const WIDTH: u32 = 131;
const WIDTH_WITH_REVISION: u32 = 192;
const WIDTH_WITH_FULL_REVISION: u32 = 400;
/// Roughly what one character of the title takes, in pixels.
const TITLE_CHAR_WIDTH: u32 = 6;
const SHORT_REVISION: usize = 7;

/// The badge's inputs, read from the query string.
#[derive(Debug, Default, PartialEq, Eq)]
struct Query {
    name: Option<String>,
    namespace: Option<String>,
    projects: Vec<String>,
    revision: bool,
    keep_full_revision: bool,
    width: Option<u32>,
    show_app_name: bool,
}

impl Query {
    /// Upstream reads the first value of each parameter (all of `project`); booleans are `true`
    /// in any letter case; a width that is not a number is ignored.
    fn parse(raw: &str) -> Self {
        let mut q = Self::default();
        let mut seen = std::collections::HashSet::new();
        for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
            if key == "project" {
                q.projects.push(value.into_owned());
                continue;
            }
            if !seen.insert(key.clone()) {
                continue;
            }
            let yes = value.eq_ignore_ascii_case("true");
            match &*key {
                "name" => q.name = Some(value.into_owned()),
                "namespace" => q.namespace = Some(value.into_owned()),
                "revision" => q.revision = yes,
                "keepFullRevision" => q.keep_full_revision = yes,
                "width" => q.width = value.parse().ok(),
                "showAppName" => q.show_app_name = yes,
                _ => {}
            }
        }
        q
    }
}

/// What the badge shows.
#[derive(Debug, PartialEq, Eq)]
struct Status {
    health: String,
    sync: String,
    revision: String,
    title: String,
    not_found: bool,
}

impl Default for Status {
    fn default() -> Self {
        Self {
            health: "Unknown".to_owned(),
            sync: "Unknown".to_owned(),
            revision: String::new(),
            title: String::new(),
            not_found: false,
        }
    }
}

pub async fn badge(State(state): State<Arc<ServerState>>, RawQuery(raw): RawQuery) -> Response {
    let query = Query::parse(raw.as_deref().unwrap_or(""));
    let enabled = state
        .config
        .peek()
        .cm
        .get("statusbadge.enabled")
        .is_some_and(|v| v == "true");
    match status(&state, &query, enabled) {
        Ok(status) => svg_response(&draw(&query, &status, enabled)),
        Err(why) => (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    }
}

fn status(state: &ServerState, query: &Query, enabled: bool) -> Result<Status, String> {
    let mut out = Status::default();
    if !enabled {
        return Ok(out);
    }
    if let Some(ns) = &query.namespace {
        limits::check_namespace(ns).map_err(|e| e.to_string())?;
        // Only namespaces `--application-namespaces` enables are served (server/badge).
        out.not_found = !state.app_namespaces.enabled(ns, &state.namespace);
    }
    if let Some(name) = &query.name
        && !out.not_found
    {
        limits::check_object_name("application", name).map_err(|e| e.to_string())?;
        match state.registry.get(&Key::new(
            Kind::Application,
            query.namespace.as_deref().unwrap_or(&state.namespace),
            name,
        )) {
            Some(doc) => {
                let app = doc.value();
                (out.health, out.sync, out.revision) = app_status(&app);
                out.title.clone_from(name);
            }
            None => out.not_found = true,
        }
    }
    if !query.projects.is_empty() && !out.not_found {
        for p in query.projects.iter().filter(|p| !p.is_empty()) {
            limits::check_object_name("project", &p.to_ascii_lowercase()).map_err(|e| e.to_string())?;
        }
        let (_, apps) = state.registry.list(Kind::Application);
        let mut any = false;
        let (mut all_synced, mut all_healthy) = (true, true);
        for doc in apps
            .iter()
            .filter(|d| query.projects.contains(&d.summary.project))
        {
            let app = doc.value();
            any = true;
            all_synced &= text_at(&app, "/status/sync/status") == Some("Synced");
            all_healthy &= text_at(&app, "/status/health/status") == Some("Healthy");
        }
        if any {
            out.sync = if all_synced { "Synced" } else { "OutOfSync" }.to_owned();
            out.health = if all_healthy { "Healthy" } else { "Degraded" }.to_owned();
        }
    }
    Ok(out)
}

/// An application's health, sync status and last synced revision, as its status says.
fn app_status(app: &Value) -> (String, String, String) {
    (
        text_at(app, "/status/health/status")
            .unwrap_or("Unknown")
            .to_owned(),
        text_at(app, "/status/sync/status")
            .unwrap_or("Unknown")
            .to_owned(),
        last_synced_revision(app).to_owned(),
    )
}

fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The revision of the last sync: the first of a multi-source sync's revisions, else its one.
fn last_synced_revision(app: &Value) -> &str {
    let result = app.pointer("/status/operationState/syncResult");
    let first = result
        .and_then(|r| r.get("revisions"))
        .and_then(Value::as_array)
        .and_then(|r| r.first())
        .and_then(Value::as_str);
    first
        .or_else(|| result.and_then(|r| r.get("revision")).and_then(Value::as_str))
        .unwrap_or("")
}

fn health_color(health: &str) -> &'static str {
    match health {
        "Healthy" => "#18be52",
        "Progressing" => "#0dadea",
        "Degraded" => "#e96d76",
        "Suspended" => "#766f94",
        "Missing" => "#f4c030",
        _ => GREY,
    }
}

fn sync_color(sync: &str) -> &'static str {
    match sync {
        "Synced" => "#18be52",
        "OutOfSync" => "#f4c030",
        _ => GREY,
    }
}

/// The SVG. Left: health; right: sync status, then the revision when asked for; above both, the
/// application's name when asked for.
fn draw(query: &Query, status: &Status, enabled: bool) -> String {
    let (left, right) = if status.not_found {
        ("Not Found", "")
    } else {
        (status.health.as_str(), status.sync.as_str())
    };
    let revision = if enabled && query.revision && !status.not_found && !status.revision.is_empty() {
        let full = query.keep_full_revision || status.revision.len() <= SHORT_REVISION;
        let shown = if full {
            &status.revision[..]
        } else {
            status.revision.get(..SHORT_REVISION).unwrap_or("")
        };
        Some((
            shown,
            if full {
                WIDTH_WITH_FULL_REVISION
            } else {
                WIDTH_WITH_REVISION
            },
        ))
    } else {
        None
    };
    let mut width = revision.map_or(WIDTH, |(_, w)| w);
    if let Some(asked) = query.width.filter(|_| enabled) {
        width = asked.max(LEFT_WIDTH + 1);
    }
    let title = (enabled && query.show_app_name && !status.title.is_empty()).then_some(status.title.as_str());
    if let Some(title) = title {
        width = width.max(
            u32::try_from(title.len())
                .unwrap_or(u32::MAX / 8)
                .saturating_mul(TITLE_CHAR_WIDTH),
        );
    }
    let top = if title.is_some() { HEIGHT } else { 0 };
    let height = top + HEIGHT;
    let (left_color, right_color) = (health_color(&status.health), sync_color(&status.sync));
    let right_width = width - LEFT_WIDTH;
    let text_y = top + 14;
    let mut svg = String::with_capacity(1024);
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{label}"><title>{label}</title>"##,
        label = escape(format!("{left} {right}").trim()),
    );
    if let Some(title) = title {
        let _ = write!(
            svg,
            r##"<rect x="0" y="0" width="{width}" height="{HEIGHT}" fill="#3f4d5a"/><text x="6" y="14" fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">{}</text>"##,
            escape(title)
        );
    }
    let _ = write!(
        svg,
        r##"<rect x="0" y="{top}" width="{LEFT_WIDTH}" height="{HEIGHT}" fill="{left_color}"/><rect x="{LEFT_WIDTH}" y="{top}" width="{right_width}" height="{HEIGHT}" fill="{right_color}"/><g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle"><text x="{}" y="{text_y}">{}</text><text x="{}" y="{text_y}">{}</text>"##,
        LEFT_WIDTH / 2,
        escape(left),
        LEFT_WIDTH + (WIDTH - LEFT_WIDTH) / 2,
        escape(right),
    );
    if let Some((shown, _)) = revision {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{text_y}" text-anchor="start">({})</text>"##,
            WIDTH + 4,
            escape(shown)
        );
    }
    svg.push_str("</g></svg>");
    svg
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn svg_response(svg: &str) -> Response {
    let mut response = (StatusCode::OK, svg.to_owned()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("image/svg+xml"));
    // A badge must never be stale in a cache, and pages on other sites fetch it.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_read_as_upstream_reads_it() {
        let q = Query::parse(
            "name=guestbook&name=other&project=a&project=b&revision=TRUE&width=x&showAppName=true",
        );
        assert_eq!(
            q,
            Query {
                name: Some("guestbook".into()),
                projects: vec!["a".into(), "b".into()],
                revision: true,
                show_app_name: true,
                ..Query::default()
            }
        );
    }

    #[test]
    fn a_revision_is_shortened_unless_asked_not_to() {
        let status = Status {
            health: "Healthy".into(),
            sync: "Synced".into(),
            revision: "0123456789abcdef".into(),
            title: "guestbook".into(),
            not_found: false,
        };
        let mut q = Query {
            revision: true,
            ..Query::default()
        };
        let svg = draw(&q, &status, true);
        assert!(
            svg.contains("(0123456)") && svg.contains(r#"width="192""#),
            "{svg}"
        );
        q.keep_full_revision = true;
        let svg = draw(&q, &status, true);
        assert!(
            svg.contains("(0123456789abcdef)") && svg.contains(r#"width="400""#),
            "{svg}"
        );
    }

    #[test]
    fn the_status_is_read_from_the_application() {
        let app = serde_json::json!({"status": {
            "health": {"status": "Degraded"},
            "sync": {"status": "Synced"},
            "operationState": {"syncResult": {"revision": "abc", "revisions": ["def", "ghi"]}},
        }});
        assert_eq!(
            app_status(&app),
            ("Degraded".into(), "Synced".into(), "def".into())
        );
        let single = serde_json::json!({"status": {"operationState": {"syncResult": {"revision": "abc"}}}});
        assert_eq!(
            app_status(&single),
            ("Unknown".into(), "Unknown".into(), "abc".into())
        );
        assert_eq!(health_color("Degraded"), "#e96d76");
        assert_eq!(sync_color("Synced"), "#18be52");
        assert_eq!(sync_color("Whatever"), GREY);
    }

    #[test]
    fn names_are_escaped() {
        let status = Status {
            title: "a<b".into(),
            ..Status::default()
        };
        let q = Query {
            show_app_name: true,
            ..Query::default()
        };
        let svg = draw(&q, &status, true);
        assert!(svg.contains("a&lt;b") && !svg.contains("a<b"), "{svg}");
    }
}
