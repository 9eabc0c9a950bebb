//! The dashboard's assets: embedded at build time (or read from
//! `--staticassets`), with an SPA fallback to `index.html` for page requests
//! and the `<base href>` rewritten for `--basehref`/`--rootpath`.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, EXPIRES, PRAGMA};
use http::{HeaderValue, Method, StatusCode};
use rust_embed::RustEmbed;

use crate::error::rest_error;

#[derive(RustEmbed)]
#[folder = "$OUT_DIR/web-dist"]
struct Embedded;

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("--staticassets {0}: not a directory with an index.html")]
    NoIndex(PathBuf),
    #[error("the embedded UI has no index.html (the build did not produce the web assets)")]
    NoEmbeddedIndex,
}

pub struct Ui {
    /// `None`: the embedded build.
    dir: Option<PathBuf>,
    basehref: String,
    /// The embedded index.html with its base href rewritten once.
    embedded_index: Option<Bytes>,
}

impl Ui {
    pub fn new(dir: Option<PathBuf>, basehref: &str) -> Result<Self, UiError> {
        let embedded_index = match &dir {
            Some(dir) => {
                if !dir.join("index.html").is_file() {
                    return Err(UiError::NoIndex(dir.clone()));
                }
                None
            }
            None => {
                let file = Embedded::get("index.html").ok_or(UiError::NoEmbeddedIndex)?;
                Some(Bytes::from(rewrite_base_href(
                    &String::from_utf8_lossy(&file.data),
                    basehref,
                )))
            }
        };
        Ok(Self {
            dir,
            basehref: basehref.to_owned(),
            embedded_index,
        })
    }

    fn index(&self) -> Option<Bytes> {
        if let Some(index) = &self.embedded_index {
            return Some(index.clone());
        }
        let dir = self.dir.as_ref()?;
        let raw = std::fs::read_to_string(dir.join("index.html")).ok()?;
        Some(Bytes::from(rewrite_base_href(&raw, &self.basehref)))
    }

    fn asset(&self, path: &str) -> Option<Bytes> {
        match &self.dir {
            None => Embedded::get(path).map(|f| Bytes::from(f.data.into_owned())),
            Some(dir) => {
                let full = dir.join(path);
                full.is_file()
                    .then(|| std::fs::read(full).ok().map(Bytes::from))
                    .flatten()
            }
        }
    }
}

pub fn router(ui: Arc<Ui>) -> Router {
    Router::new().fallback(serve).with_state(ui)
}

async fn serve(State(ui): State<Arc<Ui>>, req: Request) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return rest_error(
            tonic::Code::Unimplemented,
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
        );
    }
    let path = req.uri().path();
    if let Some(name) = path.strip_prefix("/download/") {
        return download(name).await;
    }
    if path == "/extensions.js" {
        // The upstream UI loads it on every page; tiphys has no UI extensions.
        return ([(CONTENT_TYPE, "application/javascript")], "").into_response();
    }
    let relative = match safe_relative(path) {
        Some(rel) if rel.is_empty() => "index.html".to_owned(),
        Some(rel) => rel,
        None => return not_found(),
    };
    if relative != "index.html"
        && let Some(data) = ui.asset(&relative)
    {
        return asset_response(&relative, data);
    }
    if relative == "index.html" || accepts_html(&req) {
        return match ui.index() {
            Some(index) => html_response(index),
            None => not_found(),
        };
    }
    not_found()
}

/// The name upstream's UI offers its CLI under for this server's platform
/// (`argocd-linux-amd64`): tiphys offers its own binary, which is also its CLI.
fn download_name() -> String {
    let platform = crate::buildinfo::platform().replace('/', "-");
    format!("argocd-{platform}")
}

/// `/download/<name>`: this very binary under upstream's name for this platform, streamed from
/// disk; for any other platform a page that says what is offered.
async fn download(name: &str) -> Response {
    let offered = download_name();
    if name != offered {
        return (
            StatusCode::NOT_FOUND,
            [(CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!(
                "{name} is not offered: this server offers only its own binary, which is also its CLI, \
                 as download/{offered}\n"
            ),
        )
            .into_response();
    }
    let file = match std::env::current_exe() {
        Ok(path) => tokio::fs::File::open(path).await,
        Err(err) => Err(err),
    };
    let file = match file {
        Ok(file) => file,
        Err(err) => {
            tracing::warn!(error = %err, "cannot open the server's own binary for /download");
            return rest_error(
                tonic::Code::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                "the binary cannot be read",
            );
        }
    };
    let length = file.metadata().await.map(|m| m.len()).ok();
    let chunks = futures_util::stream::try_unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt as _;
        let mut buf = bytes::BytesMut::with_capacity(64 * 1024);
        match file.read_buf(&mut buf).await? {
            0 => Ok::<_, std::io::Error>(None),
            _ => Ok(Some((buf.freeze(), file))),
        }
    });
    let mut response = Response::new(Body::from_stream(chunks));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if let Some(length) = length {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{offered}\"")) {
        headers.insert(http::header::CONTENT_DISPOSITION, v);
    }
    response
}

/// A request path as a relative asset path; `None` for anything that could
/// leave the asset root (`..`, backslashes, NUL, absolute components).
fn safe_relative(path: &str) -> Option<String> {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8().ok()?;
    if decoded.contains(['\\', '\0']) {
        return None;
    }
    let trimmed = decoded.trim_start_matches('/');
    let mut clean = Vec::new();
    for component in Path::new(trimmed).components() {
        match component {
            Component::Normal(part) => clean.push(part.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(clean.join("/"))
}

fn accepts_html(req: &Request) -> bool {
    req.headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let media = item.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("text/html")
        })
}

fn html_response(index: Bytes) -> Response {
    let mut response = Response::new(Body::from(index));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private, max-age=0"),
    );
    headers.insert(EXPIRES, HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
    headers.insert(PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

fn asset_response(path: &str, data: Bytes) -> Response {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let cache = if is_content_hashed(path) {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = Response::new(Body::from(data));
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(mime.as_ref()) {
        headers.insert(CONTENT_TYPE, v);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// `assets/main-ZWWZVGI7.js`: the build names assets by content hash.
fn is_content_hashed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    stem.rsplit_once('-').is_some_and(|(_, hash)| {
        hash.len() == 8 && hash.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    })
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        "Not Found\n",
    )
        .into_response()
}

/// Rewrites the first `<base href="…">` to `basehref`.
pub fn rewrite_base_href(html: &str, basehref: &str) -> String {
    const TAG: &str = "<base href=\"";
    let Some(start) = html.find(TAG) else {
        return html.to_owned();
    };
    let value_start = start + TAG.len();
    let Some(len) = html[value_start..].find('"') else {
        return html.to_owned();
    };
    let escaped = basehref
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    format!(
        "{}{}{}",
        &html[..value_start],
        escaped,
        &html[value_start + len..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_href_is_rewritten() {
        let html = r#"<head><base href="/" /></head>"#;
        assert_eq!(
            rewrite_base_href(html, "/argocd/"),
            r#"<head><base href="/argocd/" /></head>"#
        );
    }

    #[test]
    fn traversal_is_refused() {
        assert_eq!(safe_relative("/assets/a.js").as_deref(), Some("assets/a.js"));
        assert_eq!(safe_relative("/").as_deref(), Some(""));
        assert!(safe_relative("/../etc/passwd").is_none());
        assert!(safe_relative("/assets/%2e%2e/%2e%2e/x").is_none());
        assert!(safe_relative("/a%5Cb").is_none());
    }

    #[test]
    fn hashed_assets_are_recognised() {
        assert!(is_content_hashed("assets/main-ZWWZVGI7.js"));
        assert!(!is_content_hashed("assets/favicon.svg"));
    }
}
