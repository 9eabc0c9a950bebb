//! What kind of request this is, decided per request from its content type.

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName};

/// Header names looked up on every gRPC call: a `HeaderName` skips parsing
/// the name each time, which a `&str` key costs.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

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

    /// The protocol the content type says: gRPC, gRPC-Web, or (for anything
    /// else) `Ui` until [`Protocol::at_path`] tells REST from the dashboard.
    /// Per request, so it compares without allocating.
    pub fn of_content_type(headers: &HeaderMap) -> Self {
        const GRPC: [&str; 2] = ["application/grpc", "application/grpc+proto"];
        const GRPC_WEB: [&str; 4] = [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
            "application/grpc-web-text+proto",
        ];
        let Some(essence) = essence(headers) else {
            return Self::Ui;
        };
        if GRPC.iter().any(|t| essence.eq_ignore_ascii_case(t)) {
            Self::Grpc
        } else if GRPC_WEB.iter().any(|t| essence.eq_ignore_ascii_case(t)) {
            Self::GrpcWeb
        } else {
            Self::Ui
        }
    }

    /// gRPC and gRPC-Web stay what they are; anything else is REST or the
    /// dashboard by its path.
    pub fn at_path(self, path: &str) -> Self {
        match self {
            Self::Grpc | Self::GrpcWeb => self,
            Self::Rest | Self::Ui if is_rest_path(path) => Self::Rest,
            Self::Rest | Self::Ui => Self::Ui,
        }
    }
}

fn is_rest_path(path: &str) -> bool {
    path.starts_with("/api/") || path == "/api" || path.starts_with("/auth/") || path == "/healthz"
}

/// `Content-Type` without its parameters, as sent.
fn essence(headers: &HeaderMap) -> Option<&str> {
    let raw = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    raw.split(';').next().map(str::trim)
}

/// The media type of `Content-Type`, lower-cased, without parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    essence(headers).map(str::to_ascii_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Protocol {
        /// Both steps, as the dispatcher takes them.
        fn classify(headers: &HeaderMap, path: &str) -> Self {
            Self::of_content_type(headers).at_path(path)
        }
    }

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
