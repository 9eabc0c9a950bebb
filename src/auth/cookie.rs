//! The session cookie in Argo CD's format: `argocd.token`, split into
//! `argocd.token-1`, `argocd.token-2`, … when the token is longer than a
//! browser keeps in one cookie, the first chunk prefixed with `<count>:`.
//! `Cookie` headers are read, and `Set-Cookie` values written, with the `cookie` crate.

use cookie::{Cookie, SameSite};
use http::HeaderMap;
use http::header::COOKIE;

pub const COOKIE_NAME: &str = "argocd.token";

/// Browsers keep about 4 KB per cookie, name and attributes included.
pub const MAX_COOKIE_LENGTH: usize = 4093;

/// Most chunks written or read (upstream's default limit).
pub const MAX_CHUNKS: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    #[error("session cookie is malformed: bad chunk header")]
    BadHeader,
    #[error("session cookie is truncated: chunk {0} is missing")]
    MissingChunk(usize),
    #[error(
        "the session token is {len} characters long and needs {needed} cookies, more than the {MAX_CHUNKS} allowed"
    )]
    TooLong { len: usize, needed: usize },
}

/// How a cookie is scoped; the same for every chunk and for clearing.
#[derive(Debug, Clone)]
pub struct CookieScope {
    /// The UI's base href, e.g. `/` or `/argo-cd/`.
    pub path: String,
    pub secure: bool,
}

impl CookieScope {
    /// The scope of the dashboard's cookies at `basehref`, for a client that used `scheme`:
    /// `Secure` whenever it reached us over https (directly or through a trusted proxy).
    pub fn new(basehref: &str, scheme: crate::principal::ClientScheme) -> Self {
        Self {
            path: basehref.to_owned(),
            secure: scheme == crate::principal::ClientScheme::Https,
        }
    }

    /// The session cookie's path: the base href without its trailing slash.
    fn token_path(&self) -> &str {
        let path = self.path.trim_end_matches('/');
        if path.is_empty() { "/" } else { path }
    }

    /// A `Set-Cookie` value for `name=value` under `path`: `HttpOnly`, `SameSite=Lax`,
    /// `Secure` when the client uses https, and `Max-Age` when given (0 deletes it).
    pub fn set_cookie(&self, name: &str, value: &str, path: &str, max_age_secs: Option<i64>) -> String {
        let mut builder = Cookie::build((name, value))
            .path(path)
            .same_site(SameSite::Lax)
            .http_only(true)
            .secure(self.secure);
        if let Some(secs) = max_age_secs {
            // The crate takes `time`'s Duration for Max-Age: the one place tiphys hands it one.
            builder = builder.max_age(cookie::time::Duration::seconds(secs));
        }
        builder.build().to_string()
    }

    /// `Set-Cookie` values that store `token`, and expire any chunk the
    /// browser still holds beyond the new count (`previous` = chunks it sent).
    pub fn set(&self, token: &str, previous: usize) -> Result<Vec<String>, CookieError> {
        // What follows `name=value`: the same for every chunk.
        let attrs_len = self.chunk(0, "").len() - (COOKIE_NAME.len() + 1);
        let per_chunk = MAX_COOKIE_LENGTH - (COOKIE_NAME.len() + 3) - attrs_len - 4;
        let chunks: Vec<&str> = if token.len() <= per_chunk {
            vec![token]
        } else {
            // JWTs are ASCII, so byte chunks never split a character.
            token
                .as_bytes()
                .chunks(per_chunk)
                .filter_map(|c| std::str::from_utf8(c).ok())
                .collect()
        };
        if chunks.len() > MAX_CHUNKS {
            return Err(CookieError::TooLong {
                len: token.len(),
                needed: chunks.len(),
            });
        }
        let mut out = Vec::with_capacity(chunks.len().max(previous));
        for (i, chunk) in chunks.iter().enumerate() {
            let value = match (i, chunks.len()) {
                (0, 1) => (*chunk).to_owned(),
                (0, n) => format!("{n}:{chunk}"),
                _ => (*chunk).to_owned(),
            };
            out.push(self.chunk(i, &value));
        }
        for i in chunks.len()..previous {
            out.push(self.expire(i));
        }
        Ok(out)
    }

    /// `Set-Cookie` values that delete every chunk the browser sent.
    pub fn clear(&self, sent: usize) -> Vec<String> {
        (0..sent.max(1)).map(|i| self.expire(i)).collect()
    }

    fn chunk(&self, index: usize, value: &str) -> String {
        self.set_cookie(&chunk_name(index), value, self.token_path(), None)
    }

    fn expire(&self, index: usize) -> String {
        self.set_cookie(&chunk_name(index), "", self.token_path(), Some(0))
    }
}

fn chunk_name(index: usize) -> String {
    if index == 0 {
        COOKIE_NAME.to_owned()
    } else {
        format!("{COOKIE_NAME}-{index}")
    }
}

/// The `name=value` pairs of a request's `Cookie` headers, in order; values as sent.
pub fn sent(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|header| header.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(|cookie| {
            let cookie = cookie.ok()?;
            Some((cookie.name_raw()?, cookie.value_raw()?))
        })
}

/// The session cookie as a request carried it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SentCookie {
    /// The joined token, or why it could not be joined.
    pub token: Option<Result<String, CookieError>>,
    /// How many `argocd.token*` cookies were sent (to clear them all).
    pub chunks: usize,
}

/// Reads `argocd.token` and its chunks from the `Cookie` headers.
pub fn read(headers: &HeaderMap) -> SentCookie {
    let mut first: Option<&str> = None;
    let mut rest: Vec<(usize, &str)> = Vec::new();
    // Which chunk indexes were sent (bit i = chunk i); duplicates count once.
    let mut seen: u32 = 0;
    for (name, value) in sent(headers) {
        if name == COOKIE_NAME {
            seen |= 1;
            // The first one wins: a cookie planted later (say, by a
            // sibling domain) cannot replace the session.
            first = first.or(Some(value));
        } else if let Some(index) = name.strip_prefix(COOKIE_NAME).and_then(|n| n.strip_prefix('-'))
            && let Ok(index) = index.parse::<usize>()
            && (1..MAX_CHUNKS).contains(&index)
        {
            seen |= 1 << index;
            rest.push((index, value));
        }
    }
    let chunks = (u32::BITS - seen.leading_zeros()) as usize;
    let Some(first) = first else {
        return SentCookie { token: None, chunks };
    };
    // An empty session cookie is no session, as upstream reads it: not a token to refuse
    // (which would answer 401 where an anonymous caller is allowed).
    let token = join(first, &rest);
    SentCookie {
        token: (token != Ok(String::new())).then_some(token),
        chunks,
    }
}

fn join(first: &str, rest: &[(usize, &str)]) -> Result<String, CookieError> {
    let mut parts = first.split(':');
    let (Some(a), b, None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(CookieError::BadHeader);
    };
    let Some(chunk0) = b else {
        return Ok(a.to_owned());
    };
    let count: usize = a.parse().map_err(|_| CookieError::BadHeader)?;
    if !(1..=MAX_CHUNKS).contains(&count) {
        return Err(CookieError::BadHeader);
    }
    let mut token = chunk0.to_owned();
    for index in 1..count {
        let chunk = rest
            .iter()
            .find(|(i, _)| *i == index)
            .ok_or(CookieError::MissingChunk(index))?;
        token.push_str(chunk.1);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(cookies: &[String]) -> HeaderMap {
        let mut h = HeaderMap::new();
        let joined = cookies
            .iter()
            .map(|c| c.split(';').next().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join("; ");
        h.insert(COOKIE, joined.parse().unwrap());
        h
    }

    fn scope() -> CookieScope {
        CookieScope {
            path: "/".into(),
            secure: true,
        }
    }

    #[test]
    fn short_token_is_one_plain_cookie() {
        let set = scope().set("abc.def.ghi", 0).unwrap();
        assert_eq!(
            set,
            ["argocd.token=abc.def.ghi; HttpOnly; SameSite=Lax; Secure; Path=/"]
        );
        assert_eq!(read(&headers(&set)).token, Some(Ok("abc.def.ghi".into())));
    }

    #[test]
    fn long_token_is_chunked_and_joined_back() {
        let token = "x".repeat(10_000);
        let set = scope().set(&token, 0).unwrap();
        assert_eq!(set.len(), 3);
        assert!(set[0].starts_with("argocd.token=3:"));
        assert!(set[1].starts_with("argocd.token-1="));
        // Argo CD's chunk size for these attributes: 4093 bytes less the name, the attributes
        // and a margin.
        let value = |c: &str| c.split(';').next().unwrap().split_once('=').unwrap().1.len();
        assert_eq!(
            set.iter().map(|c| value(c)).collect::<Vec<_>>(),
            [2 + 4034, 4034, 10_000 - 2 * 4034]
        );
        assert!(set.iter().all(|c| c.len() <= MAX_COOKIE_LENGTH));
        let sent = read(&headers(&set));
        assert_eq!(sent.token, Some(Ok(token)));
        assert_eq!(sent.chunks, 3);
    }

    #[test]
    fn stale_chunks_are_expired() {
        let set = scope().set("short", 3).unwrap();
        assert_eq!(set.len(), 3);
        assert_eq!(
            set[1],
            "argocd.token-1=; HttpOnly; SameSite=Lax; Secure; Path=/; Max-Age=0"
        );
        assert!(set[2].starts_with("argocd.token-2=;") && set[2].ends_with("; Max-Age=0"));
    }

    #[test]
    fn missing_chunk_and_bad_header_are_errors() {
        let token = "x".repeat(10_000);
        let mut set = scope().set(&token, 0).unwrap();
        set.remove(1);
        assert_eq!(
            read(&headers(&set)).token,
            Some(Err(CookieError::MissingChunk(1)))
        );
        for bad in ["a:b:c", "x:abc", "0:abc", "99:abc"] {
            let h = headers(&[format!("argocd.token={bad}")]);
            assert_eq!(read(&h).token, Some(Err(CookieError::BadHeader)), "{bad}");
        }
    }

    #[test]
    fn too_long_is_refused() {
        let err = scope().set(&"x".repeat(100_000), 0).unwrap_err();
        assert!(matches!(err, CookieError::TooLong { .. }));
    }

    #[test]
    fn clear_expires_every_sent_chunk_under_the_base_href() {
        let s = CookieScope {
            path: "/argo/".into(),
            secure: false,
        };
        let cleared = s.clear(2);
        assert_eq!(
            cleared[0],
            "argocd.token=; HttpOnly; SameSite=Lax; Path=/argo; Max-Age=0"
        );
        assert!(cleared[1].starts_with("argocd.token-1=;") && cleared[1].ends_with("; Max-Age=0"));
    }

    #[test]
    fn cookie_headers_are_read_leniently() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            "theme=dark;argocd.token-1 = b2 ; =x; junk".parse().unwrap(),
        );
        h.append(
            COOKIE,
            "argocd.token=2:a1; argocd.token=2:evil; q=\"quoted\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            sent(&h).collect::<Vec<_>>(),
            [
                ("theme", "dark"),
                ("argocd.token-1", "b2"),
                ("argocd.token", "2:a1"),
                ("argocd.token", "2:evil"),
                ("q", "\"quoted\"")
            ]
        );
        let read = read(&h);
        assert_eq!(read.token, Some(Ok("a1b2".into())));
        assert_eq!(read.chunks, 2);
    }

    #[test]
    fn other_cookies_get_the_same_attributes() {
        let s = CookieScope {
            path: "/".into(),
            secure: true,
        };
        assert_eq!(
            s.set_cookie("argocd.oauthstate", "v", "/auth", Some(300)),
            "argocd.oauthstate=v; HttpOnly; SameSite=Lax; Secure; Path=/auth; Max-Age=300"
        );
    }

    #[test]
    fn no_cookie_means_no_token() {
        assert_eq!(read(&HeaderMap::new()), SentCookie::default());
    }
}
