//! What a request is and where it goes, decided from its head before any handler runs: the
//! first byte of a connection (TLS or plaintext), the protocol from the content type and the
//! path, the root path, and the plaintext redirect of TLS mode.

use std::net::{IpAddr, Ipv4Addr};

use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Uri};

use crate::server::config::normalize_rootpath;
use crate::server::dispatch::{normalize_grpc_web_content_type, strip_prefix};
use crate::server::edge::{self, Decision, Redirect};
use crate::server::protocol::{Protocol, media_type};
use crate::server::redirect::RedirectHosts;

/// `--redirect-hosts` of the redirect check.
const ALLOWED: [&str; 2] = ["cd.example.com", "*.apps.example.com"];

/// Lines of the input: the connection's first byte (the first byte of the first line),
/// `Content-Type`, the request target, `Accept`, `Host`, `X-Forwarded-Proto`, the root path
/// and the external URL.
///
/// - gRPC and gRPC-Web are told by the media type alone, the rest by the path, and deciding
///   again from the decision changes nothing; normalising a gRPC-Web content type keeps its
///   protocol and drops its parameters.
/// - Stripping the root path leaves a path that, with the root in front, is the request's.
/// - A plaintext redirect in TLS mode is a valid `Location` to https on the external URL's
///   host or on a host this server answers for (never an open redirect), and only a trusted
///   peer can say the client used https.
pub fn sniff(data: &[u8]) {
    let mut lines = data.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let field = |name: HeaderName, value: Option<&[u8]>, headers: &mut HeaderMap| {
        if let Some(value) = value.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(name, value);
        }
    };
    let mut headers = HeaderMap::new();
    field(CONTENT_TYPE, lines.next(), &mut headers);
    let target = lines.next().unwrap_or(b"/");
    field(ACCEPT, lines.next(), &mut headers);
    field(HOST, lines.next(), &mut headers);
    field(
        HeaderName::from_static("x-forwarded-proto"),
        lines.next(),
        &mut headers,
    );
    // The root path as `--rootpath` takes it (a value it refuses never reaches a request).
    let root = lines
        .next()
        .and_then(|r| std::str::from_utf8(r).ok())
        .and_then(|r| normalize_rootpath(r).ok())
        .unwrap_or_default();
    let root = root.as_str();
    let external = lines.next().and_then(|e| std::str::from_utf8(e).ok());

    // The listener's sniff: a TLS handshake record, or plaintext HTTP.
    let _tls = first.first() == Some(&0x16);

    let wire = Protocol::of_content_type(&headers);
    let media = media_type(&headers);
    match wire {
        Protocol::Grpc => assert!(
            matches!(
                media.as_deref(),
                Some("application/grpc" | "application/grpc+proto")
            ),
            "gRPC from {media:?}"
        ),
        Protocol::GrpcWeb => assert!(
            media
                .as_deref()
                .is_some_and(|m| m.starts_with("application/grpc-web")),
            "gRPC-Web from {media:?}"
        ),
        Protocol::Ui => {}
        Protocol::Rest => panic!("REST is decided by the path, not the content type"),
    }

    let Ok(uri) = Uri::try_from(target) else { return };
    let path = uri.path();
    let protocol = wire.at_path(path);
    assert_eq!(protocol.at_path(path), protocol, "deciding again changed {path}");
    if matches!(wire, Protocol::Grpc | Protocol::GrpcWeb) {
        assert_eq!(protocol, wire, "the path changed a gRPC request");
    }

    if wire == Protocol::GrpcWeb {
        let mut req = Request::new(());
        *req.headers_mut() = headers.clone();
        normalize_grpc_web_content_type(&mut req);
        assert_eq!(
            Protocol::of_content_type(req.headers()),
            wire,
            "normalising changed the protocol"
        );
        let normal = req.headers().get(CONTENT_TYPE).map(HeaderValue::as_bytes);
        assert!(
            normal.is_some_and(|ct| !ct.contains(&b';')),
            "parameters left in {normal:?}"
        );
    }

    if !root.is_empty()
        && let Some(stripped) = strip_prefix(&uri, root)
    {
        let rest = stripped.path();
        assert!(rest.starts_with('/'), "{root} stripped from {path} leaves {rest}");
        let joined = if rest == "/" && path == root {
            root.to_owned()
        } else {
            format!("{root}{rest}")
        };
        assert_eq!(joined, path, "stripping {root} is not undone by putting it back");
        assert_eq!(
            stripped.query(),
            uri.query(),
            "stripping {root} changed the query"
        );
    }

    redirect(&uri, &headers, first, root, external);
}

fn redirect(uri: &Uri, headers: &HeaderMap, first: &[u8], root: &str, external: Option<&str>) {
    let trusted: [ipnet::IpNet; 1] = ["10.0.0.0/8".parse().unwrap_or_else(|e| panic!("a CIDR: {e}"))];
    let peer = if first.get(1).is_some_and(|b| b & 1 == 1) {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
    } else {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))
    };
    let allowed: Vec<String> = ALLOWED.iter().map(|&h| h.to_owned()).collect();
    let hosts = RedirectHosts::new(&allowed, None);
    let external = external.filter(|e| !e.is_empty());
    let to = Redirect {
        hosts: &hosts,
        rootpath: root,
        external,
    };
    match edge::decide(uri, headers, peer, &trusted, &to) {
        Decision::Serve(crate::principal::ClientScheme::Https) => {
            assert!(trusted[0].contains(&peer), "an untrusted peer said https");
        }
        Decision::Serve(_) => assert_eq!(uri.path(), "/healthz", "plaintext served"),
        Decision::Redirect(location) => {
            assert!(
                HeaderValue::from_str(&location).is_ok(),
                "Location {location:?} is not a header value"
            );
            let url = url::Url::parse(&location)
                .unwrap_or_else(|e| panic!("Location {location:?} is not a URL: {e}"));
            assert_eq!(url.scheme(), "https", "{location}");
            let host = url.host_str().unwrap_or_default();
            let external = external.and_then(|e| crate::config::http_url::parse(e).ok());
            match external.as_ref().and_then(|e| e.host_str()) {
                Some(want) => assert_eq!(host, want, "Location {location:?} leaves the external URL"),
                None => assert!(
                    answers_for(host),
                    "Location {location:?} names a host this server does not answer for"
                ),
            }
        }
        Decision::BadHost | Decision::ForeignHost => {}
    }
}

/// Whether `host` (as a URL parser reads it) is one of [`ALLOWED`].
fn answers_for(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host == "cd.example.com"
        || host
            .strip_suffix(".apps.example.com")
            .is_some_and(|label| !label.is_empty() && !label.contains('.'))
}
