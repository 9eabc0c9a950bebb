//! Where a plaintext request on the TLS port may be redirected. The `Location` must never
//! name a host the caller chose freely (a forged `Host` would make tiphys an open redirect):
//! it is built from the external URL (`url` in argocd-cm, else `--url`) when one is set, and
//! otherwise from the request's Host only when that host is one this server answers for (a
//! name of its TLS certificate or of `--redirect-hosts`).

use std::sync::Arc;

use http::{HeaderMap, Uri};

use super::tls::CertResolver;

/// Why a plaintext request is not redirected.
#[derive(Debug, PartialEq, Eq)]
pub enum NoRedirect {
    /// The Host header is missing or unusable.
    BadHost,
    /// The Host header names a host this server does not answer for.
    ForeignHost,
}

/// The hosts a redirect may name, besides the external URL's.
#[derive(Debug, Default)]
pub struct RedirectHosts {
    /// `--redirect-hosts`, lower case (`*.example.com` matches one label).
    allowed: Vec<String>,
    /// The serving certificate, whose names change when it is reloaded.
    cert: Option<Arc<CertResolver>>,
}

impl RedirectHosts {
    pub fn new(allowed: &[String], cert: Option<Arc<CertResolver>>) -> Self {
        Self {
            allowed: allowed.iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
            cert,
        }
    }

    fn answers_for(&self, host: &str) -> bool {
        let cert_names = self.cert.as_ref().map(|c| c.names()).unwrap_or_default();
        self.allowed
            .iter()
            .chain(cert_names.iter())
            .any(|pattern| host_matches(pattern, host))
    }

    /// `https://<host><raw path>?<query>`, the path still percent-encoded so `%2F` survives.
    /// The host is the external URL's (`external`, an http(s) URL) when set, else the Host
    /// header's (port and IPv6 brackets kept) if this server answers for it.
    pub fn target(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        rootpath: &str,
        external: Option<&str>,
    ) -> Result<String, NoRedirect> {
        let authority = match external.and_then(external_authority) {
            Some(authority) => authority,
            None => {
                let host = request_host(uri, headers).ok_or(NoRedirect::BadHost)?;
                if !self.answers_for(&hostname(&host)) {
                    return Err(NoRedirect::ForeignHost);
                }
                host
            }
        };
        // `OPTIONS *` has the path `*`, which would run into the host (`https://host*`).
        let path = Some(uri.path()).filter(|p| p.starts_with('/')).unwrap_or("/");
        let prefix =
            if !(rootpath.is_empty() || path == rootpath || path.starts_with(&format!("{rootpath}/"))) {
                rootpath
            } else {
                ""
            };
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        Ok(format!("https://{authority}{prefix}{path}{query}"))
    }
}

/// The Host header exactly as sent (or the request target's authority), if usable: a host
/// and an optional port that make a URL (a port above 65535 or a bracketed name would make
/// a `Location` no client can follow).
fn request_host(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))?;
    let usable = !host.is_empty()
        && !host.contains(['/', '\\', '@', ' ', '?', '#'])
        && url::Url::parse(&format!("https://{host}/")).is_ok_and(|u| u.host_str().is_some());
    usable.then_some(host)
}

/// `host[:port]` of an external URL (its scheme is replaced by https).
fn external_authority(raw: &str) -> Option<String> {
    let url = crate::config::http_url::parse(raw).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

/// A Host header's name: lower case, without port, IPv6 brackets or a trailing dot.
fn hostname(host: &str) -> String {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A certificate-style match: exact (case-insensitive), or `*.suffix` for one more label.
fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, host.parse().unwrap());
        h
    }

    fn hosts(allowed: &[&str]) -> RedirectHosts {
        let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
        RedirectHosts::new(&allowed, None)
    }

    #[test]
    fn keeps_raw_path_query_and_ipv6_host() {
        let uri: Uri = "/api/v1/clusters/https%3A%2F%2Fk8s?x=1&y=%2F".parse().unwrap();
        let target = hosts(&["::1"]).target(&uri, &headers("[::1]:8080"), "", None);
        assert_eq!(
            target.unwrap(),
            "https://[::1]:8080/api/v1/clusters/https%3A%2F%2Fk8s?x=1&y=%2F"
        );
    }

    #[test]
    fn adds_rootpath_once() {
        let h = headers("cd");
        let allowed = hosts(&["cd"]);
        assert_eq!(
            allowed.target(&"/x".parse().unwrap(), &h, "/argo", None).unwrap(),
            "https://cd/argo/x"
        );
        assert_eq!(
            allowed
                .target(&"/argo/x".parse().unwrap(), &h, "/argo", None)
                .unwrap(),
            "https://cd/argo/x"
        );
    }

    #[test]
    fn the_external_url_decides_the_host() {
        let uri: Uri = "/x?y=1".parse().unwrap();
        for external in ["https://cd.example.com", "http://cd.example.com/"] {
            let target = hosts(&[]).target(&uri, &headers("evil.example"), "", Some(external));
            assert_eq!(target.unwrap(), "https://cd.example.com/x?y=1");
        }
        let target = hosts(&[]).target(&uri, &headers("evil.example"), "", Some("https://[::1]:8443/a"));
        assert_eq!(target.unwrap(), "https://[::1]:8443/x?y=1");
    }

    #[test]
    fn a_host_that_makes_no_url_is_bad() {
        // Found by the sniff fuzz target: the Location carried the port 88443.
        let hosts = hosts(&["cd.example.com", "*.apps.example.com"]);
        let uri: Uri = "/x".parse().unwrap();
        for host in [
            "team.apps.example.com:88443",
            "[cd.example.com]x",
            "cd.example.com:x",
        ] {
            assert_eq!(
                hosts.target(&uri, &headers(host), "", None),
                Err(NoRedirect::BadHost),
                "{host}"
            );
        }
        assert!(
            hosts
                .target(&uri, &headers("cd.example.com:8443"), "", None)
                .is_ok()
        );
        // Also found by it: the asterisk form's path `*` ran into the host.
        let star: Uri = "*".parse().unwrap();
        assert_eq!(
            hosts.target(&star, &headers("cd.example.com"), "", None),
            Ok("https://cd.example.com/".to_owned())
        );
    }

    #[test]
    fn only_hosts_this_server_answers_for() {
        let uri: Uri = "/".parse().unwrap();
        let allowed = hosts(&["cd.example.com", "*.apps.example.com"]);
        for ok in [
            "cd.example.com",
            "CD.Example.com:8443",
            "cd.example.com.",
            "a.apps.example.com",
        ] {
            assert!(allowed.target(&uri, &headers(ok), "", None).is_ok(), "{ok}");
        }
        for foreign in [
            "evil.example",
            "cd.example.com.evil.example",
            "apps.example.com",
            "a.b.apps.example.com",
            "[::1]:8080",
        ] {
            assert_eq!(
                allowed.target(&uri, &headers(foreign), "", None),
                Err(NoRedirect::ForeignHost),
                "{foreign}"
            );
        }
        assert_eq!(
            allowed.target(&uri, &headers("evil.com/x"), "", None),
            Err(NoRedirect::BadHost)
        );
        assert_eq!(
            allowed.target(&uri, &HeaderMap::new(), "", None),
            Err(NoRedirect::BadHost)
        );
    }
}
