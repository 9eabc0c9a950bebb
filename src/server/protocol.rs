//! What kind of request this is, decided per request from its content type.

use http::HeaderMap;
use http::header::CONTENT_TYPE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Native gRPC (`application/grpc`, `+proto`, with parameters).
    Grpc,
    /// gRPC-Web, binary or base64 text.
    GrpcWeb,
    /// REST, health and auth endpoints.
    Rest,
    /// The dashboard.
    Ui,
}

impl Protocol {
    pub const ALL: [Self; 4] = [Self::Grpc, Self::GrpcWeb, Self::Rest, Self::Ui];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::GrpcWeb => "grpc-web",
            Self::Rest => "rest",
            Self::Ui => "ui",
        }
    }

    pub fn classify(headers: &HeaderMap, path: &str) -> Self {
        match media_type(headers).as_deref() {
            Some("application/grpc" | "application/grpc+proto") => Self::Grpc,
            Some(
                "application/grpc-web"
                | "application/grpc-web+proto"
                | "application/grpc-web-text"
                | "application/grpc-web-text+proto",
            ) => Self::GrpcWeb,
            _ if is_rest_path(path) => Self::Rest,
            _ => Self::Ui,
        }
    }
}

fn is_rest_path(path: &str) -> bool {
    path.starts_with("/api/") || path == "/api" || path.starts_with("/auth/") || path == "/healthz"
}

/// The media type of `Content-Type`, lower-cased, without parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let essence = raw.split(';').next()?.trim();
    Some(essence.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ct(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, ct.parse().unwrap());
        h
    }

    #[test]
    fn grpc_content_types() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc; charset=utf-8",
            "Application/GRPC",
        ] {
            assert_eq!(Protocol::classify(&with_ct(ct), "/x.Y/Z"), Protocol::Grpc, "{ct}");
        }
    }

    #[test]
    fn grpc_web_content_types() {
        for ct in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
            "application/grpc-web-text+proto",
            "application/grpc-web+proto; charset=x",
        ] {
            assert_eq!(
                Protocol::classify(&with_ct(ct), "/x.Y/Z"),
                Protocol::GrpcWeb,
                "{ct}"
            );
        }
    }

    #[test]
    fn everything_else_is_rest_or_ui() {
        assert_eq!(
            Protocol::classify(&with_ct("application/json"), "/api/version"),
            Protocol::Rest
        );
        assert_eq!(Protocol::classify(&HeaderMap::new(), "/healthz"), Protocol::Rest);
        assert_eq!(
            Protocol::classify(&HeaderMap::new(), "/applications/x"),
            Protocol::Ui
        );
        assert_eq!(
            Protocol::classify(&with_ct("application/grpcfoo"), "/"),
            Protocol::Ui
        );
    }
}
