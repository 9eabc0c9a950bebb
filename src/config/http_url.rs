//! Absolute http(s) URLs, read with the `url` crate (the WHATWG URL standard, as browsers
//! read them): the external `url`, the OIDC provider's URLs, cluster servers, and where a
//! login may return to.

use url::Url;

/// `raw` as an absolute `http` or `https` URL with a host, or why it is not one.
///
/// Besides what the WHATWG parser refuses, this refuses what it would silently repair
/// (blanks and control characters, which it strips or encodes; backslashes, which it reads
/// as slashes; `https:host` without `//`), so that the text tiphys keeps and passes on means
/// what was checked.
pub fn parse(raw: &str) -> Result<Url, &'static str> {
    if raw
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err("is not a URL (it has blanks, control characters or backslashes)");
    }
    let url = Url::parse(raw).map_err(|_| "is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("is not an http or https URL");
    }
    let scheme_len = url.scheme().len();
    if raw.get(scheme_len..scheme_len + 3) != Some("://") {
        return Err("is not a URL (expected scheme://host)");
    }
    // `https:///x` has an empty authority, which the parser repairs by taking `x` as the host.
    if url.host_str().is_none_or(str::is_empty) || raw[scheme_len + 3..].starts_with('/') {
        return Err("has no host");
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_http_urls_only() {
        for ok in [
            "https://cd.example.com",
            "http://localhost:8080/argocd",
            "https://[2001:db8::1]:8443/",
            "HTTPS://CD.example.com/",
            "https://cd.example.com/a%20b?x=1#top",
        ] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "is not a URL"),
            ("cd.example.com", "is not a URL"),
            ("/relative", "is not a URL"),
            ("https://", "is not a URL"),
            ("https://cd.example.com:99999/", "is not a URL"),
            ("https://[::1/", "is not a URL"),
            ("ftp://x", "is not an http or https URL"),
            ("javascript:alert(1)", "is not an http or https URL"),
            ("https:cd.example.com", "expected scheme://host"),
            ("https:/cd.example.com", "expected scheme://host"),
            ("https:\\\\evil.com", "backslashes"),
            ("https://evil.com\\@cd.example.com", "backslashes"),
            (" https://x", "blanks"),
            ("https://x\n", "control"),
            ("https://a b", "blanks"),
            ("https:///x", "has no host"),
            ("http:////x/y", "has no host"),
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(
            parse("https://CD.Example.com:443/x").map(|u| u.host_str().map(str::to_owned)),
            Ok(Some("cd.example.com".to_owned()))
        );
    }
}
